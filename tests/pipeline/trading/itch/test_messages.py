"""ITCH 5.0 messages, pinned as golden bytes: one hand-written message per type, from the spec table.

Each literal below is written field by field from the offsets of the spec table
(/work/shared/reference/protocols.md), independently of ``pipeline.trading.itch.messages``; decoding it must
give the listed record, and encoding that record must give the literal back, byte for byte.

Every golden message has the same header: stock_locate 0x0102 (258), tracking_number 0x0304 (772),
timestamp 0x112233445566 ns (a u48: six bytes, big-endian).
"""

from __future__ import annotations

import struct

import msgspec
import pytest

from pipeline.runtime.errors import PipelineError
from pipeline.trading.itch import messages as M
from pipeline.trading.itch.errors import (
    DecodeError,
    EncodeError,
    ItchError,
    TruncatedMessage,
    UnknownMessageType,
    WrongMessageLength,
)

HDR = "0102" "0304" "112233445566"
LOC, TRK, TS = 258, 772, 0x112233445566
AAPL = "4141504c20202020"  # b"AAPL    "


def h(*fields: str) -> bytes:
    return bytes.fromhex("".join(fields))


GOLDEN = [
    ("S", 12, h("53", HDR, "51"), M.SystemEvent(LOC, TRK, TS, event_code=b"Q")),
    ("R", 39, h("52", HDR, AAPL, "51", "4e", "00000064", "4e", "43", "5a20", "50", "4e", "4e", "31", "4e",
                "00000002", "4e"),
     M.StockDirectory(LOC, TRK, TS, stock=b"AAPL    ", market_category=b"Q", financial_status=b"N",
                      round_lot_size=100, round_lots_only=b"N", issue_classification=b"C", issue_sub_type=b"Z ",
                      authenticity=b"P", short_sale_threshold=b"N", ipo_flag=b"N", luld_ref_price_tier=b"1",
                      etp_flag=b"N", etp_leverage_factor=2, inverse_indicator=b"N")),
    ("H", 25, h("48", HDR, AAPL, "48", "20", "4c554431"),
     M.StockTradingAction(LOC, TRK, TS, stock=b"AAPL    ", trading_state=b"H", reserved=b" ", reason=b"LUD1")),
    ("Y", 20, h("59", HDR, AAPL, "31"), M.RegShoRestriction(LOC, TRK, TS, stock=b"AAPL    ", reg_sho_action=b"1")),
    ("L", 26, h("4c", HDR, "4753434f", AAPL, "59", "4e", "41"),
     M.MarketParticipantPosition(LOC, TRK, TS, mpid=b"GSCO", stock=b"AAPL    ", primary_mm=b"Y", mm_mode=b"N",
                                 participant_state=b"A")),
    ("V", 35, h("56", HDR, "000000174876e800", "0000002e90edd000", "00000045d964b800"),
     M.MwcbDeclineLevel(LOC, TRK, TS, level1_p8=100_000_000_000, level2_p8=200_000_000_000,
                        level3_p8=300_000_000_000)),
    ("W", 12, h("57", HDR, "32"), M.MwcbStatus(LOC, TRK, TS, breached_level=b"2")),
    ("K", 28, h("4b", HDR, AAPL, "000085a0", "41", "000f4240"),
     M.IpoQuotingPeriodUpdate(LOC, TRK, TS, stock=b"AAPL    ", release_time_s=34208, release_qualifier=b"A",
                              ipo_price_p4=1_000_000)),
    ("J", 35, h("4a", HDR, AAPL, "000f4240", "00100590", "000e7ef0", "00000001"),
     M.LuldAuctionCollar(LOC, TRK, TS, stock=b"AAPL    ", ref_price_p4=1_000_000, upper_p4=1_050_000,
                         lower_p4=950_000, extension=1)),
    ("h", 21, h("68", HDR, AAPL, "51", "48"),
     M.OperationalHalt(LOC, TRK, TS, stock=b"AAPL    ", market_code=b"Q", halt_action=b"H")),
    ("A", 36, h("41", HDR, "00000000000f4240", "42", "00000064", AAPL, "0012d644"),
     M.AddOrder(LOC, TRK, TS, order_ref=1_000_000, side=b"B", shares=100, stock=b"AAPL    ", price_p4=1_234_500)),
    ("F", 40, h("46", HDR, "00000000000f4240", "53", "00000064", AAPL, "0012d644", "4753434f"),
     M.AddOrderMpid(LOC, TRK, TS, order_ref=1_000_000, side=b"S", shares=100, stock=b"AAPL    ",
                    price_p4=1_234_500, attribution=b"GSCO")),
    ("E", 31, h("45", HDR, "00000000000f4240", "00000032", "0000000000003039"),
     M.OrderExecuted(LOC, TRK, TS, order_ref=1_000_000, executed_shares=50, match_no=12345)),
    ("C", 36, h("43", HDR, "00000000000f4240", "00000032", "0000000000003039", "4e", "0012d6a8"),
     M.OrderExecutedWithPrice(LOC, TRK, TS, order_ref=1_000_000, executed_shares=50, match_no=12345,
                              printable=b"N", exec_price_p4=1_234_600)),
    ("X", 23, h("58", HDR, "00000000000f4240", "0000000a"),
     M.OrderCancel(LOC, TRK, TS, order_ref=1_000_000, cancelled_shares=10)),
    ("D", 19, h("44", HDR, "00000000000f4240"), M.OrderDelete(LOC, TRK, TS, order_ref=1_000_000)),
    ("U", 35, h("55", HDR, "00000000000f4240", "00000000000f4241", "000000c8", "0012d5e0"),
     M.OrderReplace(LOC, TRK, TS, orig_ref=1_000_000, new_ref=1_000_001, shares=200, price_p4=1_234_400)),
    ("P", 44, h("50", HDR, "0000000000000000", "42", "0000012c", AAPL, "0012d644", "000000000000303a"),
     M.Trade(LOC, TRK, TS, order_ref=0, side=b"B", shares=300, stock=b"AAPL    ", price_p4=1_234_500,
             match_no=12346)),
    ("Q", 40, h("51", HDR, "0000000100000000", AAPL, "0012d644", "000000000000303b", "4f"),
     M.CrossTrade(LOC, TRK, TS, shares=2**32, stock=b"AAPL    ", cross_price_p4=1_234_500, match_no=12347,
                  cross_type=b"O")),
    ("B", 19, h("42", HDR, "0000000000003039"), M.BrokenTrade(LOC, TRK, TS, match_no=12345)),
    ("I", 50, h("49", HDR, "00000000000003e8", "00000000000001f4", "42", AAPL, "0012d644", "0012d6a8", "0012d5e0",
                "4f", "4c"),
     M.Noii(LOC, TRK, TS, paired_shares=1000, imbalance_shares=500, direction=b"B", stock=b"AAPL    ",
            far_p4=1_234_500, near_p4=1_234_600, current_ref_p4=1_234_400, cross_type=b"O", price_variation=b"L")),
    ("N", 20, h("4e", HDR, AAPL, "42"), M.Rpii(LOC, TRK, TS, stock=b"AAPL    ", interest_flag=b"B")),
    ("O", 48, h("4f", HDR, AAPL, "59", "000f4240", "0010c8e0", "000f6950", "00001f1aced9f000", "000ef420",
                "000fde80"),
     M.DlcrPriceDiscovery(LOC, TRK, TS, stock=b"AAPL    ", open_eligibility=b"Y", min_allowable_p4=1_000_000,
                          max_allowable_p4=1_100_000, near_exec_price_p4=1_010_000,
                          near_exec_time=34_200_000_000_000, lower_collar_p4=980_000, upper_collar_p4=1_040_000)),
]
GOLDEN_IDS = [g[0] for g in GOLDEN]


def test_golden_table_covers_all_23_types_once():
    assert sorted(GOLDEN_IDS) == sorted("SRHYLVWKJhAFECXDUPQBINO")
    assert len(M.SPECS) == 23


def test_message_lengths_are_the_spec_table():
    assert M.MESSAGE_LENGTHS == {
        "S": 12, "R": 39, "H": 25, "Y": 20, "L": 26, "V": 35, "W": 12, "K": 28, "J": 35, "h": 21, "A": 36,
        "F": 40, "E": 31, "C": 36, "X": 23, "D": 19, "U": 35, "P": 44, "Q": 40, "B": 19, "I": 50, "N": 20, "O": 48,
    }
    assert M.MAX_MESSAGE_BYTES == 50


@pytest.mark.parametrize("char,length,raw,expected", GOLDEN, ids=GOLDEN_IDS)
def test_golden_bytes_decode_to_the_expected_record(char, length, raw, expected):
    assert len(raw) == length
    got = M.decode(raw)
    assert got == expected
    assert type(got).MSG_TYPE == char.encode()
    assert got.SPEC.length == length


@pytest.mark.parametrize("char,length,raw,expected", GOLDEN, ids=GOLDEN_IDS)
def test_golden_record_encodes_to_the_golden_bytes(char, length, raw, expected):
    assert M.encode(expected) == raw


@pytest.mark.parametrize("char,length,raw,expected", GOLDEN, ids=GOLDEN_IDS)
def test_golden_decodes_at_an_offset_and_with_its_framed_length(char, length, raw, expected):
    buf = b"\xee" * 7 + raw + b"\xee" * 3
    assert M.decode(buf, 7) == expected
    assert M.decode(buf, 7, length) == expected
    assert M.decode(memoryview(bytearray(buf)), 7, length) == expected


@pytest.mark.parametrize("char,length,raw,expected", GOLDEN, ids=GOLDEN_IDS)
def test_numpy_dtype_of_each_type_reads_the_golden_bytes(char, length, raw, expected):
    import numpy as np

    spec = M.SPECS_BY_CHAR[char]
    assert spec.dtype.itemsize == length
    row = np.frombuffer(raw, dtype=spec.dtype)[0]
    assert row["msg_type"] == char.encode()
    assert int(row["stock_locate"]) == LOC and int(row["tracking_number"]) == TRK
    assert (int(row["timestamp_hi"]) << 32) | int(row["timestamp_lo"]) == TS
    for f in spec.fields:
        value = getattr(expected, f.name)
        assert (row[f.name] == value) if f.is_alpha else (int(row[f.name]) == value), f.name


def test_field_offsets_are_the_spec_table():
    # A few offsets straight from the table; the import-time assertions check the rest add up.
    offs = {c: {f.name: f.offset for f in M.SPECS_BY_CHAR[c].fields} for c in M.SPECS_BY_CHAR}
    assert offs["A"] == {"order_ref": 11, "side": 19, "shares": 20, "stock": 24, "price_p4": 32}
    assert offs["F"]["attribution"] == 36
    assert offs["C"] == {"order_ref": 11, "executed_shares": 19, "match_no": 23, "printable": 31, "exec_price_p4": 32}
    assert offs["U"] == {"orig_ref": 11, "new_ref": 19, "shares": 27, "price_p4": 31}
    assert offs["P"]["match_no"] == 36 and offs["Q"]["cross_type"] == 39
    assert offs["R"]["etp_leverage_factor"] == 34 and offs["R"]["inverse_indicator"] == 38
    assert offs["I"]["price_variation"] == 49 and offs["O"]["upper_collar_p4"] == 44
    assert (M.OFF_STOCK_LOCATE, M.OFF_TRACKING_NUMBER, M.OFF_TIMESTAMP, M.OFF_BODY) == (1, 3, 5, 11)


# ----------------------------------------------------------------------------- pitfalls of the spec


def test_timestamp_is_six_bytes_big_endian_nanoseconds_since_midnight():
    # 09:30:00 = 34_200 s = 34_200_000_000_000 ns = 0x1F1ACED9F000, in six bytes at offset 5.
    raw = h("53", "0000", "0000", "1f1aced9f000", "51")
    assert M.decode(raw).timestamp_ns == 34_200_000_000_000
    top = h("53", "0000", "0000", "ffffffffffff", "43")
    assert M.decode(top).timestamp_ns == 2**48 - 1 == M.MAX_TIMESTAMP_NS
    assert M.encode(M.SystemEvent(0, 0, 2**48 - 1, b"C")) == top


def test_cross_trade_shares_are_u64():
    raw = h("51", HDR, "0000000100000000", AAPL, "0012d644", "000000000000303b", "4f")
    assert M.decode(raw).shares == 2**32  # would not fit the u32 shares of the other types
    big = M.CrossTrade(LOC, TRK, TS, 2**64 - 1, b"AAPL    ", 1, 2, b"O")
    assert M.encode(big)[11:19] == b"\xff" * 8


def test_trade_p_has_order_ref_zero_and_side_b():
    p = M.decode(GOLDEN[GOLDEN_IDS.index("P")][2])
    assert p.order_ref == 0 and p.side == b"B"


def test_lower_h_and_upper_h_are_different_types():
    assert M.SPECS_BY_CHAR["h"].record is M.OperationalHalt
    assert M.SPECS_BY_CHAR["H"].record is M.StockTradingAction
    assert M.MESSAGE_LENGTHS["h"] == 21 and M.MESSAGE_LENGTHS["H"] == 25


def test_prices_are_p4_except_mwcb_levels_which_are_p8():
    kinds = {f.kind for s in M.SPECS for f in s.fields if f.name.endswith(("_p4", "_p8"))}
    assert kinds == {"p4", "p8"}
    assert {f.kind for f in M.SPECS_BY_CHAR["V"].fields} == {"p8"}
    assert all(f.kind == "p4" for s in M.SPECS if s.type_char != "V" for f in s.fields if f.name.endswith("_p4"))


def test_records_are_frozen_typed_and_compare_by_type():
    d = M.OrderDelete(1, 2, 3, 4)
    with pytest.raises(AttributeError):
        d.order_ref = 5
    assert d != M.BrokenTrade(1, 2, 3, 4)  # same field values, another message
    assert hash(d) == hash(M.OrderDelete(1, 2, 3, 4))
    assert M.OrderDelete.__struct_fields__ == ("stock_locate", "tracking_number", "timestamp_ns", "order_ref")
    assert isinstance(d, msgspec.Struct)


def test_spec_of_accepts_records_classes_and_type_characters():
    assert M.spec_of("A") is M.spec_of(b"A") is M.spec_of(M.AddOrder) is M.spec_of(GOLDEN[10][3])
    with pytest.raises(UnknownMessageType):
        M.spec_of("Z")


# ------------------------------------------------------------------------------------------ errors


def test_errors_share_one_root_under_the_pipeline_root():
    for exc in (UnknownMessageType, WrongMessageLength, TruncatedMessage, EncodeError):
        assert issubclass(exc, ItchError) and issubclass(exc, PipelineError)
    assert issubclass(TruncatedMessage, DecodeError)


def test_decode_rejects_an_unknown_type():
    with pytest.raises(UnknownMessageType) as err:
        M.decode(b"Z" + bytes(30), 0)
    assert err.value.offset == 0


def test_decode_rejects_a_framed_length_other_than_the_types():
    raw = GOLDEN[GOLDEN_IDS.index("D")][2]
    with pytest.raises(WrongMessageLength):
        M.decode(raw + b"\x00", 0, 20)


def test_decode_rejects_a_truncated_message_and_an_empty_buffer():
    raw = GOLDEN[GOLDEN_IDS.index("A")][2]
    with pytest.raises(TruncatedMessage):
        M.decode(raw[:-1])
    with pytest.raises(TruncatedMessage):
        M.decode(raw, len(raw))
    with pytest.raises(TruncatedMessage):
        M.decode(b"")


def test_try_decode_never_raises_and_gives_the_reason():
    raw = GOLDEN[GOLDEN_IDS.index("E")][2]
    assert M.try_decode(raw) == (M.decode(raw), M.DecodeReason.OK)
    assert M.try_decode(raw[:-1]) == (None, M.DecodeReason.TRUNCATED)
    assert M.try_decode(raw, 0, 30) == (None, M.DecodeReason.WRONG_LENGTH)
    assert M.try_decode(b"z" + raw[1:]) == (None, M.DecodeReason.UNKNOWN_TYPE)
    assert M.try_decode(b"") == (None, M.DecodeReason.EMPTY)
    assert M.try_decode(raw, 99) == (None, M.DecodeReason.EMPTY)
    assert M.try_decode(raw, -1) == (None, M.DecodeReason.EMPTY)
    assert M.try_decode(raw, 0, 0) == (None, M.DecodeReason.EMPTY)


def test_decoder_counts_rejections_by_reason():
    raw = GOLDEN[GOLDEN_IDS.index("X")][2]
    dec = M.Decoder()
    assert dec.decode(raw) == M.decode(raw)
    assert dec.decode(raw[:5]) is None and dec.last_reason == M.DecodeReason.TRUNCATED
    assert dec.decode(b"?" * 23) is None
    assert dec.decoded == 1
    assert dec.counts() == {"OK": 1, "EMPTY": 0, "UNKNOWN_TYPE": 1, "WRONG_LENGTH": 0, "TRUNCATED": 1}


def test_encode_space_pads_short_alpha_and_rejects_long_or_non_bytes():
    short = M.AddOrder(LOC, TRK, TS, 1_000_000, b"B", 100, b"AAPL", 1_234_500)
    assert M.encode(short) == GOLDEN[GOLDEN_IDS.index("A")][2]
    assert M.decode(M.encode(short)).stock == b"AAPL    "
    with pytest.raises(EncodeError):
        M.encode(M.AddOrder(LOC, TRK, TS, 1, b"B", 100, b"TOOLONGSYM", 1))
    with pytest.raises(EncodeError):
        M.encode(M.AddOrder(LOC, TRK, TS, 1, "B", 100, b"AAPL", 1))


@pytest.mark.parametrize("record", [
    M.AddOrder(LOC, TRK, 2**48, 1, b"B", 100, b"AAPL", 1),  # timestamp over 48 bits
    M.AddOrder(LOC, TRK, -1, 1, b"B", 100, b"AAPL", 1),
    M.AddOrder(2**16, TRK, TS, 1, b"B", 100, b"AAPL", 1),  # stock_locate over u16
    M.AddOrder(LOC, TRK, TS, 2**64, b"B", 100, b"AAPL", 1),  # order_ref over u64
    M.AddOrder(LOC, TRK, TS, 1, b"B", -5, b"AAPL", 1),
    M.OrderExecuted(LOC, TRK, TS, 1, 2**32, 1),  # shares over u32
])
def test_encode_rejects_values_out_of_range(record):
    with pytest.raises(EncodeError):
        M.encode(record)


def test_encode_rejects_what_is_not_a_record():
    with pytest.raises(EncodeError):
        M.encode((b"A", 1, 2))


def test_pad_alpha_and_alpha_text():
    assert M.pad_alpha("MSFT", 8) == b"MSFT    "
    assert M.alpha_text(b"MSFT    ") == "MSFT"
    with pytest.raises(EncodeError):
        M.pad_alpha("TOOLONGSYM", 8)
    with pytest.raises(EncodeError):
        M.pad_alpha("ÄPL", 8)


def test_header_struct_and_whole_message_struct_agree_with_the_lengths():
    for spec in M.SPECS:
        assert spec.struct.size == spec.length
        assert struct.calcsize(spec.struct.format) == spec.length
