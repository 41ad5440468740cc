"""The bridge's wire frames: golden bytes of every layout, and malformed input refused by FrameError."""

from __future__ import annotations

import pytest

from pipeline.runtime.bridge import frames as F
from tests.support.bridge import order_payload


def test_header_golden_bytes():
    raw = F.pack_header(F.MsgType.MD, shard_id=0x0102, code=0x0304, epoch=0x05060708, count=0x090A0B0C,
                        seq=0x1112131415161718, ts_ns=0x2122232425262728)
    assert raw.hex() == ("4252" "01" "01" "0201" "0403" "08070605" "0c0b0a09"
                         "1817161514131211" "2827262524232221")
    assert F.unpack_header(raw) == F.Header(F.MsgType.MD, 0x0102, 0x0304, 0x05060708, 0x090A0B0C,
                                            0x1112131415161718, 0x2122232425262728)


def test_topic_is_three_bytes_big_endian_so_a_prefix_subscription_is_exact():
    assert F.topic_for(0x0102) == b"M\x01\x02"
    assert F.instrument_of(b"M\x01\x02") == 0x0102


def test_md_message_golden_frames():
    frames = F.md_frames(F.MsgType.MD, 7, 1, 3, 9, 11, b"\x07\x00abc")
    assert frames[0] == b"M\x00\x07"
    assert frames[1] == bytes.fromhex("4252" "01" "01" "0000" "0100" "09000000" "00000000"
                                      "0300000000000000" "0b00000000000000")
    assert F.parse_md(frames) == (7, F.Header(1, 0, 1, 9, 0, 3, 11), b"\x07\x00abc")


def test_intent_body_is_the_order_payload_then_the_reference_mid():
    order = order_payload(5, 0xAB, 100.5, 2.0)
    body = F.pack_intent(order, 100.25)
    assert body[:48] == order and body[48:] == bytes.fromhex("0000000000105940")
    rec, ref = F.unpack_intent(body)
    assert (rec.instrument_id, rec.order_id, rec.price, rec.size, ref) == (5, 0xAB, 100.5, 2.0, 100.25)


def test_hello_ids_golden_bytes():
    assert F.pack_ids([1, 0x0203]) == b"\x01\x00\x03\x02"
    assert F.unpack_ids(b"\x01\x00\x03\x02") == [1, 0x0203]


@pytest.mark.parametrize("frames", [
    [],                                                      # nothing
    [b"M\x00\x01", F.pack_header(F.MsgType.MD)],             # two frames
    [b"X\x00\x01", F.pack_header(F.MsgType.MD), b""],        # bad topic prefix
    [b"M\x00", F.pack_header(F.MsgType.MD), b""],            # short topic
    [b"M\x00\x01", b"\x00" * 32, b""],                       # bad magic
    [b"M\x00\x01", F.pack_header(F.MsgType.MD)[:31], b""],   # short header
    [b"M\x00\x01", F.pack_header(F.MsgType.HELLO), b""],     # not market data
    [b"M\x00\x01", F.pack_header(F.MsgType.MD)[:2] + b"\x02" + F.pack_header(F.MsgType.MD)[3:], b""],  # version
    [b"M\x00\x01", F.pack_header(F.MsgType.MD)[:3] + b"\x63" + F.pack_header(F.MsgType.MD)[4:], b""],  # type 99
])
def test_malformed_market_data_raises_frame_error(frames):
    with pytest.raises(F.FrameError):
        F.parse_md(frames)


@pytest.mark.parametrize("frames", [
    [F.pack_header(F.MsgType.INTENT), b"\x00" * 55],             # short INTENT body
    [F.pack_header(F.MsgType.EXEC)],                              # EXEC without body
    [F.pack_header(F.MsgType.HELLO, count=2), b"\x01\x00"],      # HELLO count mismatch
    [F.pack_header(F.MsgType.HEARTBEAT), b"x"],                   # HEARTBEAT with a body
    [F.pack_header(F.MsgType.WELCOME, count=2), b"\x00" * 56],    # WELCOME count mismatch
    [F.pack_header(F.MsgType.WELCOME), b"\x00" * 56],             # WELCOME state without its count
    [F.pack_header(F.MsgType.SNAP_REQ), b"\x01"],                 # odd id list
    [F.pack_header(F.MsgType.MD), b""],                           # MD without topic
    [F.pack_header(F.MsgType.HEARTBEAT), b"", b""],               # three frames
])
def test_malformed_control_message_raises_frame_error(frames):
    with pytest.raises(F.FrameError):
        F.parse_control(frames)


def test_well_formed_control_messages_parse():
    hdr, body = F.parse_control([F.pack_header(F.MsgType.HELLO, shard_id=3, count=1), b"\x05\x00"])
    assert (hdr.msg_type, hdr.shard_id, body) == (F.MsgType.HELLO, 3, b"\x05\x00")
    assert F.parse_control([F.pack_header(F.MsgType.HEARTBEAT, seq=4)])[0].seq == 4
    hdr, body = F.parse_control([F.pack_header(F.MsgType.WELCOME, count=2), b"\x07" * 112])
    assert (hdr.count, len(body)) == (2, 112)


def test_refusal_and_welcome_codes_are_wire_constants():
    assert {r.name: int(r) for r in F.RefuseReason} == {
        "UNKNOWN_SHARD": 1, "CLAIM_MISMATCH": 2, "OWNED_ELSEWHERE": 3, "HALTED_SILENT": 4, "NOT_SYNCED": 5}
    assert {c.name: int(c) for c in F.WelcomeCode} == {"JOINED": 0, "STATE_CHANGED": 1}
    raw = F.pack_header(F.MsgType.WELCOME, code=F.WelcomeCode.STATE_CHANGED, epoch=7, count=1)
    assert raw[3] == F.MsgType.WELCOME and raw[6:8] == b"\x01\x00"
