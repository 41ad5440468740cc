"""Whole-buffer numpy decode: the same messages as the per-message decoder, grouped by type.

The reference is ``messages.decode`` of each framed message; ``vectorized.decode_buffer`` must give
the same records, in the same order, on a ~50k-message synthetic session that uses all 23 types.
"""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.trading.itch import framing as F
from pipeline.trading.itch import messages as M
from pipeline.trading.itch import synth
from pipeline.trading.itch import vectorized as V


@pytest.fixture(scope="module")
def session():
    records = synth.generate_session(11, 50_000, include_all_types=True)
    return records, synth.session_binaryfile(records)


def test_vectorized_decode_equals_per_message_decode_on_a_50k_session(session):
    records, buf = session
    assert len(records) > 50_000
    per_message = [M.decode(m, 0, len(m)) for _, m in F.iter_frames(buf)]
    assert per_message == records
    decoded = V.decode_buffer(buf)
    assert decoded.n_messages == decoded.n_valid == len(records)
    assert decoded.ended and not decoded.truncated
    assert V.to_records(decoded) == per_message
    assert set(decoded.by_type) == {s.type_char for s in M.SPECS}  # every type exercised


def test_per_type_arrays_hold_the_fields_in_message_order(session):
    records, buf = session
    decoded = V.decode_buffer(buf)
    adds = [r for r in records if type(r) is M.AddOrder]
    a = decoded.by_type["A"]
    assert a.dtype == M.AddOrder.SPEC.dtype and len(a) == len(adds)
    assert a["order_ref"].tolist() == [r.order_ref for r in adds]
    assert a["price_p4"].tolist() == [r.price_p4 for r in adds]
    assert a["side"].tolist() == [r.side for r in adds]
    assert a["stock"].tolist() == [r.stock for r in adds]
    assert V.timestamps_ns(a).tolist() == [r.timestamp_ns for r in adds]
    pos = decoded.positions["A"]
    assert np.all(np.diff(pos) > 0)
    assert all(type(records[i]) is M.AddOrder for i in pos[:100].tolist())
    assert (decoded.codes[pos] == ord("A")).all()


def test_cross_trade_u64_shares_survive_the_vectorized_path(session):
    records, buf = session
    q = V.decode_buffer(buf).by_type["Q"]
    assert q["shares"].dtype == np.dtype(">u8")
    assert q["shares"].tolist() == [r.shares for r in records if type(r) is M.CrossTrade]


def test_dtypes_are_big_endian_wire_layouts():
    for spec in M.SPECS:
        assert spec.dtype.itemsize == spec.length
        for name, (dt, off) in spec.dtype.fields.items():
            if dt.kind == "u" and dt.itemsize > 1:
                assert dt.byteorder == ">", (spec.type_char, name)
        assert spec.dtype.fields["timestamp_hi"][1] == 5 and spec.dtype.fields["timestamp_lo"][1] == 7


def test_bad_frames_are_counted_and_left_out():
    good = M.encode(M.OrderDelete(1, 0, 5, 77))
    bad_type = b"Z" + good[1:]
    bad_len = good + b"\x00"  # framed as 20 bytes, a D is 19
    buf = F.encode_binaryfile([good, bad_type, bad_len, good])
    d = V.decode_buffer(buf)
    assert d.n_messages == 4 and d.unknown_type == 1 and d.wrong_length == 1 and d.n_valid == 2
    assert d.valid.tolist() == [True, False, False, True]
    assert d.positions["D"].tolist() == [0, 3]
    assert V.to_records(d) == [M.decode(good)] * 2


def test_truncated_and_unterminated_buffers_are_flagged_not_raised():
    msgs = [M.encode(M.OrderDelete(1, 0, 5, r)) for r in range(3)]
    whole = F.encode_binaryfile(msgs)
    cut = V.decode_buffer(whole[:-10])
    assert cut.truncated and not cut.ended and cut.n_valid == 2
    open_ended = V.decode_buffer(whole[:-2])
    assert not open_ended.truncated and not open_ended.ended and open_ended.n_valid == 3
    empty = V.decode_buffer(b"")
    assert empty.n_messages == 0 and empty.by_type == {}


def test_baseline_and_stream_decoders_agree_with_the_vectorized_one(session):
    records, buf = session
    tuples = V.decode_baseline(buf)
    assert len(tuples) == len(records)
    assert tuples[0] == M.SPECS_BY_CHAR["S"].struct.unpack(M.encode(records[0]))
    assert V.decode_stream(buf) == records


def test_measure_reports_messages_per_second():
    buf = synth.generate_binaryfile(1, 500)
    n = V.decode_buffer(buf).n_messages
    rate = V.measure_msgs_per_s(V.decode_buffer, buf, n, repeat=2)
    assert rate > 0
