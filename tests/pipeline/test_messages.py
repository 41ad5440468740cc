"""Golden bytes of the BOOK and TRADE payloads (pipeline/messages.py): every offset the docstring
declares, written through numpy and read back at literal offsets."""

from __future__ import annotations

import struct

import numpy as np

from pipeline.messages import (BOOK_DTYPE, BOOK_FLAG_SNAPSHOT, BOOK_LEVELS, TRADE_DTYPE, TRADE_SIDE_BUY, TRADE_SIDE_SELL,
                               Kind)


def test_kinds_are_stable_wire_codes():
    assert [(k.name, k.value) for k in Kind] == [("BOOK", 1), ("TRADE", 2), ("FEATURES", 3), ("SIGNAL", 4),
                                                ("INSTRUCTION", 5), ("ORDER", 6), ("EXEC_REPORT", 7), ("CONTROL", 8)]


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


def test_features_layout_offsets():
    from pipeline.messages import FEATURES_DTYPE, FEATURES_LEN, OFF_FEATURES_VECTOR

    assert FEATURES_DTYPE.itemsize == 552 <= 560 and FEATURES_LEN == 128 and OFF_FEATURES_VECTOR == 40
    offsets = {name: FEATURES_DTYPE.fields[name][1] for name in FEATURES_DTYPE.names}
    assert offsets == {"instrument_id": 0, "flags": 2, "_pad": 4, "book_seq": 8, "exch_ts_ns": 16, "ref_mid": 24,
                       "ref_spread": 32, "features": 40}


def test_features_golden_bytes():
    from pipeline.messages import (FEATURES_DTYPE, FEATURES_FLAG_NO_EXCH_TS, FEATURES_FLAG_SNAPSHOT,
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
    from pipeline.messages import SIGNAL_DTYPE, SIGNAL_FLAG_WARMUP, Label

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
