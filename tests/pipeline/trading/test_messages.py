"""Golden bytes of the BOOK and TRADE payloads (pipeline/trading/messages.py): every offset the docstring
declares, written through numpy and read back at literal offsets."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from pipeline.trading.messages import (BOOK_DTYPE, BOOK_FLAG_SNAPSHOT, BOOK_LEVELS, TRADE_DTYPE, TRADE_SIDE_BUY, TRADE_SIDE_SELL,
                               Kind)


def test_kinds_are_stable_wire_codes():
    assert [(k.name, k.value) for k in Kind] == [("BOOK", 1), ("TRADE", 2), ("FEATURES", 3), ("SIGNAL", 4),
                                                ("INSTRUCTION", 5), ("ORDER", 6), ("EXEC_REPORT", 7), ("CONTROL", 8),
                                                ("SIGNAL_CTX", 9), ("POSITION", 10)]


def test_position_golden_bytes():
    from pipeline.trading.messages import pack_position, unpack_position

    raw = pack_position(7, -3, 0x0102030405060708)
    assert raw == bytes.fromhex("0700" "000000000000" "fdffffffffffffff" "0807060504030201")
    assert unpack_position(raw) == (7, -3, 0x0102030405060708)
    assert unpack_position(raw[:-1]) is None


def test_book_layout_offsets():
    assert BOOK_DTYPE.itemsize == 504 and BOOK_LEVELS == 15
    offsets = {name: BOOK_DTYPE.fields[name][1] for name in BOOK_DTYPE.names}
    assert offsets == {"instrument_id": 0, "flags": 2, "n_bids": 4, "n_asks": 6, "seq": 8, "exch_ts_ns": 16,
                       "bid_px": 24, "bid_sz": 144, "ask_px": 264, "ask_sz": 384}


def test_book_golden_bytes():
    rec = np.zeros(1, BOOK_DTYPE)
    rec["instrument_id"], rec["flags"], rec["n_bids"], rec["n_asks"] = 7, BOOK_FLAG_SNAPSHOT, 2, 1
    rec["seq"], rec["exch_ts_ns"] = 0x0102030405060708, 1_700_000_000_123_000_000
    rec["bid_px"][0, :2] = (100.5, 100.25)
    rec["bid_sz"][0, :2] = (1.5, 2.0)
    rec["ask_px"][0, 0] = 100.75
    rec["ask_sz"][0, 0] = 3.0
    raw = rec.tobytes()
    assert raw[:24] == bytes.fromhex("0700" "0100" "0200" "0100" "0807060504030201") + struct.pack("<Q", 1_700_000_000_123_000_000)
    assert struct.unpack_from("<2d", raw, 24) == (100.5, 100.25)
    assert struct.unpack_from("<2d", raw, 144) == (1.5, 2.0)
    assert struct.unpack_from("<d", raw, 264) == (100.75,)
    assert struct.unpack_from("<d", raw, 384) == (3.0,)
    assert raw[24 + 16 : 144] == bytes(104), "levels past n_bids are zero"


def test_trade_golden_bytes():
    assert TRADE_DTYPE.itemsize == 40 and (TRADE_SIDE_BUY, TRADE_SIDE_SELL) == (1, 2)
    rec = np.zeros(1, TRADE_DTYPE)
    rec["instrument_id"], rec["side"], rec["trade_id"] = 3, TRADE_SIDE_SELL, 99
    rec["exch_ts_ns"], rec["price"], rec["size"] = 5, 26293.4, 0.0013
    raw = rec.tobytes()
    assert raw[:8] == bytes.fromhex("0300" "02" "0000000000")
    assert struct.unpack_from("<QQdd", raw, 8) == (99, 5, 26293.4, 0.0013)


def test_trade_flags_byte_and_the_hidden_flags():
    from pipeline.trading.messages import (BOOK_FLAG_HIDDEN_REPORTED, FEATURES_FLAG_NO_BASIS, FEATURES_FLAG_NO_HIDDEN,
                                           OFF_TRADE_FLAGS, TRADE_FLAG_HIDDEN, TRADE_STRUCT)

    assert (TRADE_FLAG_HIDDEN, OFF_TRADE_FLAGS, BOOK_FLAG_HIDDEN_REPORTED) == (1, 3, 2)
    assert (FEATURES_FLAG_NO_HIDDEN, FEATURES_FLAG_NO_BASIS) == (8, 16)
    assert TRADE_DTYPE.fields["flags"][1] == OFF_TRADE_FLAGS
    rec = np.zeros(1, TRADE_DTYPE)
    rec["instrument_id"], rec["side"], rec["flags"], rec["trade_id"] = 3, TRADE_SIDE_BUY, TRADE_FLAG_HIDDEN, 7
    raw = rec.tobytes()
    assert raw[:8] == bytes.fromhex("0300" "01" "01" "00000000")
    packed = bytearray(TRADE_STRUCT.pack(3, TRADE_SIDE_BUY, 7, 0, 0.0, 0.0))  # the struct leaves the flags 0
    assert packed[OFF_TRADE_FLAGS] == 0
    packed[OFF_TRADE_FLAGS] = TRADE_FLAG_HIDDEN
    assert bytes(packed) == raw


def test_features_layout_offsets():
    from pipeline.trading.messages import FEATURES_DTYPE, FEATURES_LEN, OFF_FEATURES_VECTOR

    assert FEATURES_DTYPE.itemsize == 552 <= 560 and FEATURES_LEN == 128 and OFF_FEATURES_VECTOR == 40
    offsets = {name: FEATURES_DTYPE.fields[name][1] for name in FEATURES_DTYPE.names}
    assert offsets == {"instrument_id": 0, "flags": 2, "_pad": 4, "book_seq": 8, "exch_ts_ns": 16, "ref_mid": 24,
                       "ref_spread": 32, "features": 40}


def test_features_golden_bytes():
    from pipeline.trading.messages import (FEATURES_DTYPE, FEATURES_FLAG_NO_EXCH_TS, FEATURES_FLAG_SNAPSHOT,
                                   FEATURES_FLAG_WARMUP)

    assert (FEATURES_FLAG_WARMUP, FEATURES_FLAG_SNAPSHOT, FEATURES_FLAG_NO_EXCH_TS) == (1, 2, 4)
    rec = np.zeros(1, FEATURES_DTYPE)
    rec["instrument_id"], rec["flags"] = 2, FEATURES_FLAG_WARMUP | FEATURES_FLAG_SNAPSHOT
    rec["book_seq"], rec["exch_ts_ns"] = 0x0102030405060708, 1_700_000_000_123_000_000
    rec["ref_mid"], rec["ref_spread"] = 100.625, 0.25
    rec["features"][0, 0], rec["features"][0, 65], rec["features"][0, 127] = 1.5, -0.25, 3.0
    raw = rec.tobytes()
    assert raw[:16] == bytes.fromhex("0200" "0300" "00000000" "0807060504030201")
    assert struct.unpack_from("<Qdd", raw, 16) == (1_700_000_000_123_000_000, 100.625, 0.25)
    assert struct.unpack_from("<f", raw, 40) == (1.5,)
    assert struct.unpack_from("<f", raw, 40 + 4 * 65) == (-0.25,)
    assert struct.unpack_from("<f", raw, 40 + 4 * 127) == (3.0,)
    assert len(raw) == 552 and raw[44 : 40 + 4 * 65] == bytes(4 * 64)


def test_signal_layout_and_golden_bytes():
    from pipeline.trading.messages import SIGNAL_DTYPE, SIGNAL_FLAG_WARMUP, Label

    assert [(lb.name, lb.value) for lb in Label] == [("HOLD", 0), ("LEAN_BUY", 1), ("LEAN_SELL", 2), ("EMERGENCY", 3)]
    assert SIGNAL_DTYPE.itemsize == 56 <= 64 and SIGNAL_FLAG_WARMUP == 1
    offsets = {name: SIGNAL_DTYPE.fields[name][1] for name in SIGNAL_DTYPE.names}
    assert offsets == {"instrument_id": 0, "label": 2, "flags": 3, "_pad": 4, "feature_seq": 8, "exch_ts_ns": 16,
                       "ref_mid": 24, "ref_spread": 32, "probs": 40}
    rec = np.zeros(1, SIGNAL_DTYPE)
    rec["instrument_id"], rec["label"], rec["flags"] = 2, Label.EMERGENCY, SIGNAL_FLAG_WARMUP
    rec["feature_seq"], rec["exch_ts_ns"] = 0x0102030405060708, 1_700_000_000_123_000_000
    rec["ref_mid"], rec["ref_spread"] = 100.625, 0.25
    rec["probs"][0] = (0.125, 0.25, 0.5, 0.125)
    raw = rec.tobytes()
    assert raw[:16] == bytes.fromhex("0200" "03" "01" "00000000" "0807060504030201")
    assert struct.unpack_from("<Qdd", raw, 16) == (1_700_000_000_123_000_000, 100.625, 0.25)
    assert struct.unpack_from("<4f", raw, 40) == (0.125, 0.25, 0.5, 0.125)


def _offsets(dtype):
    return {name: dtype.fields[name][1] for name in dtype.names}


def test_signal_ctx_is_the_signal_then_its_feature_vector():
    from pipeline.trading.messages import SIGNAL_CTX_DTYPE, SIGNAL_DTYPE

    assert SIGNAL_CTX_DTYPE.itemsize == 568 <= 576
    ctx_off = _offsets(SIGNAL_CTX_DTYPE)
    assert {k: v for k, v in ctx_off.items() if k != "features"} == _offsets(SIGNAL_DTYPE) and ctx_off["features"] == 56
    rec = np.zeros(1, SIGNAL_CTX_DTYPE)
    rec["label"], rec["feature_seq"], rec["features"][0, 127] = 1, 9, -2.5
    raw = rec.tobytes()
    assert raw[2] == 1 and struct.unpack_from("<Q", raw, 8) == (9,) and struct.unpack_from("<f", raw, 56 + 4 * 127) == (-2.5,)


def test_instruction_layout_and_golden_bytes():
    from pipeline.trading.messages import INSTRUCTION_DTYPE, Action

    assert [(a.name, a.value) for a in Action] == [("HOLD", 0), ("BUY", 1), ("SELL", 2), ("FLATTEN", 3), ("CANCEL", 4)]
    assert INSTRUCTION_DTYPE.itemsize == 48
    assert _offsets(INSTRUCTION_DTYPE) == {"instrument_id": 0, "action": 2, "flags": 3, "limit_offset_ticks": 4,
                                           "target_lots": 8, "signal_seq": 16, "issued_ns": 24, "ttl_ms": 32,
                                           "confidence": 36, "instruction_id": 40}
    rec = np.zeros(1, INSTRUCTION_DTYPE)
    rec["instrument_id"], rec["action"], rec["limit_offset_ticks"], rec["target_lots"] = 1, Action.SELL, 3, -25
    rec["signal_seq"], rec["issued_ns"], rec["ttl_ms"], rec["confidence"], rec["instruction_id"] = 77, 5, 1500, 0.75, 2
    raw = rec.tobytes()
    assert raw[:8] == bytes.fromhex("0100" "02" "00" "03000000")
    assert struct.unpack_from("<qQQIfQ", raw, 8) == (-25, 77, 5, 1500, 0.75, 2)


def test_order_layout_and_golden_bytes():
    from pipeline.trading.messages import (ORDER_DTYPE, ORDER_FLAG_REDUCE_ONLY, ORDER_STRUCT, OrderCmd, OrderOrigin,
                                           Side, TimeInForce)

    assert [(c.name, c.value) for c in OrderCmd] == [("NEW", 1), ("CANCEL", 2), ("CANCEL_ALL", 3), ("SYNC", 4)]
    assert [(s.name, s.value) for s in Side] == [("BUY", 1), ("SELL", 2)]
    assert [(t.name, t.value) for t in TimeInForce] == [("GTC", 1), ("POST_ONLY", 2), ("IOC", 3)]
    assert ORDER_FLAG_REDUCE_ONLY == 1
    assert ORDER_DTYPE.itemsize == 48
    assert _offsets(ORDER_DTYPE) == {"instrument_id": 0, "cmd": 2, "side": 3, "tif": 4, "origin": 5, "flags": 6,
                                     "_pad": 7, "order_id": 8, "price": 16, "size": 24, "origin_seq": 32,
                                     "decided_ns": 40}
    rec = np.zeros(1, ORDER_DTYPE)
    rec["instrument_id"], rec["cmd"], rec["side"], rec["tif"] = 2, OrderCmd.NEW, Side.SELL, TimeInForce.POST_ONLY
    rec["origin"], rec["flags"] = OrderOrigin.LLM, ORDER_FLAG_REDUCE_ONLY
    rec["order_id"], rec["price"], rec["size"], rec["origin_seq"], rec["decided_ns"] = 0xAB, 2001.5, 0.25, 9, 10
    raw = rec.tobytes()
    assert [(o.name, o.value) for o in OrderOrigin] == [("UNSPECIFIED", 0), ("FAST", 1), ("LLM", 2), ("RISK", 3)]
    assert raw[:8] == bytes.fromhex("0200" "01" "02" "02" "02" "01" "00")
    assert struct.unpack_from("<QddQQ", raw, 8) == (0xAB, 2001.5, 0.25, 9, 10)
    assert ORDER_STRUCT.pack(2, OrderCmd.NEW, Side.SELL, TimeInForce.POST_ONLY, OrderOrigin.LLM, ORDER_FLAG_REDUCE_ONLY,
                             0xAB, 2001.5, 0.25, 9, 10) == raw, "the struct writes the flags at byte 6, byte 7 zero"


def test_decode_order_reads_the_numpy_layout_field_by_field():
    from pipeline.trading.messages import ORDER_DTYPE, ORDER_STRUCT, OrderRecord, decode_order

    rec = np.zeros(1, ORDER_DTYPE)
    rec["instrument_id"], rec["cmd"], rec["side"], rec["tif"], rec["origin"], rec["flags"] = 513, 3, 2, 1, 1, 0x81
    rec["order_id"], rec["price"], rec["size"], rec["origin_seq"], rec["decided_ns"] = 2**63 + 5, -1.5, 3e-4, 2**40, 7
    got = decode_order(memoryview(rec.tobytes()))
    assert got == OrderRecord(instrument_id=513, cmd=3, side=2, tif=1, origin=1, flags=0x81, order_id=2**63 + 5,
                              price=-1.5, size=3e-4, origin_seq=2**40, decided_ns=7)
    assert ORDER_STRUCT.pack(*got) == rec.tobytes()
    with pytest.raises(struct.error):
        decode_order(rec.tobytes()[:47])


def test_exec_report_layout_and_golden_bytes():
    from pipeline.trading.messages import EXEC_DTYPE, ExecReason, ExecType

    assert [(e.name, e.value) for e in ExecType] == [("ACKED", 1), ("FILLED", 2), ("REJECTED", 3), ("CANCELLED", 4),
                                                     ("POSITION", 5), ("OPEN_ORDER", 6), ("SYNC_DONE", 7),
                                                     ("UNKNOWN", 8), ("POSITION_MISMATCH", 9)]
    assert ExecReason.NONE == 0 and ExecReason.MALFORMED == 8 and ExecReason.ACCOUNT_CHANGED == 9
    assert len(ExecReason) == 10
    assert EXEC_DTYPE.itemsize == 56
    assert _offsets(EXEC_DTYPE) == {"instrument_id": 0, "exec_type": 2, "side": 3, "reason": 4, "_pad": 6,
                                    "order_id": 8, "price": 16, "size": 24, "leaves": 32, "venue_ts_ns": 40,
                                    "fill_id": 48}
    rec = np.zeros(1, EXEC_DTYPE)
    rec["instrument_id"], rec["exec_type"], rec["side"], rec["reason"] = 1, ExecType.REJECTED, 1, ExecReason.RATE_LIMITED
    rec["order_id"], rec["price"], rec["size"], rec["leaves"], rec["venue_ts_ns"], rec["fill_id"] = 5, 1.5, 2.0, 0.5, 6, 7
    raw = rec.tobytes()
    assert raw[:8] == bytes.fromhex("0100" "03" "01" "0300" "0000")
    assert struct.unpack_from("<QdddQQ", raw, 8) == (5, 1.5, 2.0, 0.5, 6, 7)


def test_order_ids_are_deterministic_from_the_origin_and_round_trip_through_the_client_oid():
    from pipeline.trading.messages import client_oid, order_id_for, order_id_from_client_oid

    a = order_id_for(1, 123456, 0)
    assert a == order_id_for(1, 123456, 0) == 1073184998814412614  # golden: blake2b-64 of the packed origin
    assert client_oid(order_id_for(1, 5, 0)) == "tp0faff092351e723d"
    assert order_id_for(1, 123456, 0, epoch=7) == 8083511141968032023 != a  # another run: another id
    ids = {order_id_for(i, s, leg) for i in (1, 2) for s in range(200) for leg in range(3)}
    assert len(ids) == 1200 and all(0 < x < 2**63 for x in ids)
    oid = client_oid(a)
    assert len(oid) == 18 and oid.startswith("tp") and order_id_from_client_oid(oid) == a
    assert order_id_from_client_oid("121211212122") is None and order_id_from_client_oid("tpzzzzzzzzzzzzzzzz") is None


def test_the_signal_and_features_head_structs_read_and_write_the_numpy_layouts():
    from pipeline.trading.messages import (FEATURES_DTYPE, FEATURES_HEAD_STRUCT, OFF_FEATURES_VECTOR, SIGNAL_DTYPE,
                                   SIGNAL_STRUCT)

    sig = np.zeros(1, SIGNAL_DTYPE)
    sig["instrument_id"], sig["label"], sig["flags"], sig["feature_seq"], sig["exch_ts_ns"] = 513, 3, 1, 2**40 + 1, 2**62
    sig["ref_mid"], sig["ref_spread"], sig["probs"] = 50_000.5, 0.1, [0.125, 0.25, 0.5, 0.125]
    fields = (513, 3, 1, 2**40 + 1, 2**62, 50_000.5, 0.1, 0.125, 0.25, 0.5, 0.125)
    assert SIGNAL_STRUCT.pack(*fields) == sig.tobytes() and SIGNAL_STRUCT.unpack(sig.tobytes()) == fields
    feat = np.zeros(1, FEATURES_DTYPE)
    feat["instrument_id"], feat["flags"], feat["book_seq"], feat["exch_ts_ns"] = 7, 2, 99, 2**50
    feat["ref_mid"], feat["ref_spread"], feat["features"][0, 0] = 101.25, 0.5, 3.0
    raw = feat.tobytes()
    assert FEATURES_HEAD_STRUCT.unpack_from(raw, 0) == (7, 2, 99, 2**50, 101.25, 0.5)
    assert FEATURES_DTYPE.fields["features"][1] == OFF_FEATURES_VECTOR == FEATURES_HEAD_STRUCT.size


def test_signal_with_depth_is_the_signal_then_the_feature_vectors_level_block():
    from pipeline.trading import features as F
    from pipeline.trading.messages import (OFF_DEPTH_ASK_DIST, OFF_DEPTH_ASK_SZ, OFF_DEPTH_BID_DIST, OFF_DEPTH_BID_SZ,
                                   OFF_SIGNAL_DEPTH, SIGNAL_DEPTH_BYTES, SIGNAL_DEPTH_DTYPE, SIGNAL_DEPTH_LEVELS,
                                   SIGNAL_DTYPE, SIGNAL_STRUCT)

    assert SIGNAL_DEPTH_DTYPE.itemsize == SIGNAL_DEPTH_BYTES == 296 and SIGNAL_DEPTH_LEVELS == 15
    off = _offsets(SIGNAL_DEPTH_DTYPE)
    assert {k: v for k, v in off.items() if not k.startswith("depth_")} == _offsets(SIGNAL_DTYPE)
    assert (off["depth_bid_dist"], off["depth_ask_dist"], off["depth_bid_sz"], off["depth_ask_sz"]) == \
        (OFF_SIGNAL_DEPTH, OFF_DEPTH_ASK_DIST, OFF_DEPTH_BID_SZ, OFF_DEPTH_ASK_SZ) == (56, 116, 176, 236)
    assert OFF_DEPTH_BID_DIST == 56
    # the block is the FEATURES vector's level slots in their order: one copy of 60 floats
    assert (F.F_BID_DIST_0, F.F_ASK_DIST_0, F.F_BID_SIZE_0, F.F_ASK_SIZE_0) == (0, 15, 30, 45)
    rec = np.zeros(1, SIGNAL_DEPTH_DTYPE)
    rec["instrument_id"], rec["label"], rec["feature_seq"], rec["ref_mid"] = 2, 1, 9, 100.625
    rec["depth_bid_dist"][0, 0], rec["depth_ask_dist"][0, 14] = 0.5, 7.5
    rec["depth_bid_sz"][0, 1], rec["depth_ask_sz"][0, 0] = 1.25, 3.0
    raw = rec.tobytes()
    assert raw[:56] == SIGNAL_STRUCT.pack(2, 1, 0, 9, 0, 100.625, 0.0, 0.0, 0.0, 0.0, 0.0)
    assert struct.unpack_from("<f", raw, 56) == (0.5,) and struct.unpack_from("<f", raw, 116 + 4 * 14) == (7.5,)
    assert struct.unpack_from("<f", raw, 176 + 4) == (1.25,) and struct.unpack_from("<f", raw, 236) == (3.0,)
    assert raw[60:116] == bytes(56) and len(raw) == 296
