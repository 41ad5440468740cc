"""BinaryFILE and MoldUDP64 framing, and the MoldUDP64 sequencer.

BinaryFILE: ``[u16 BE length][message]`` repeated, a 0 length ends the session (a file without it
is incomplete), ``.gz`` files are gzipped. MoldUDP64: a 20-byte header (session a10, seq u64,
count u16) then ``count`` length-prefixed messages; count 0 is a heartbeat, 0xFFFF the end.
"""

from __future__ import annotations

import gzip

import pytest

from pipeline.trading.itch import framing as F
from pipeline.trading.itch import messages as M
from pipeline.trading.itch.errors import FramingError, IncompleteSession, ItchError, TruncatedFrame

S_EVENT = bytes.fromhex("53" "0000" "0000" "000000000001" "4f")  # S 'O', 12 bytes
D_MSG = bytes.fromhex("44" "0001" "0000" "000000000002" "0000000000000007")  # D ref 7, 19 bytes


# ------------------------------------------------------------------------------------ BinaryFILE


def test_binaryfile_golden_bytes():
    data = F.encode_binaryfile([S_EVENT, D_MSG])
    assert data == b"\x00\x0c" + S_EVENT + b"\x00\x13" + D_MSG + b"\x00\x00"
    assert F.encode_binaryfile([S_EVENT], end_of_session=False) == b"\x00\x0c" + S_EVENT


def test_iter_frames_yields_offsets_and_messages_then_stops_at_the_end_marker():
    data = F.encode_binaryfile([S_EVENT, D_MSG]) + b"ignored after the end"
    frames = [(off, bytes(msg)) for off, msg in F.iter_frames(data)]
    assert frames == [(2, S_EVENT), (2 + 12 + 2, D_MSG)]
    assert [M.decode(m) for _, m in frames] == [M.decode(S_EVENT), M.decode(D_MSG)]


def test_frame_rejects_empty_and_oversized_messages():
    with pytest.raises(FramingError):
        F.frame(b"")
    with pytest.raises(FramingError):
        F.frame(b"x" * 65536)
    assert F.frame(b"x" * 65535)[:2] == b"\xff\xff"


def test_missing_end_marker_is_an_incomplete_session_after_every_message_was_yielded():
    data = F.encode_binaryfile([S_EVENT, D_MSG], end_of_session=False)
    got = []
    with pytest.raises(IncompleteSession):
        for _, msg in F.iter_frames(data):
            got.append(bytes(msg))
    assert got == [S_EVENT, D_MSG]
    assert [bytes(m) for _, m in F.iter_frames(data, require_end=False)] == [S_EVENT, D_MSG]


@pytest.mark.parametrize("cut", [1, 2, 5, 13, 14, 15, 20])
def test_a_truncated_file_is_detected(cut):
    data = F.encode_binaryfile([S_EVENT, D_MSG], end_of_session=False)[:-cut]  # 35 bytes, cut inside D
    complete = [m for m, end in ((S_EVENT, 14), (D_MSG, 35)) if end <= len(data)]
    got = []
    with pytest.raises(TruncatedFrame):
        for _, msg in F.iter_frames(data, require_end=False):
            got.append(bytes(msg))
    assert got == complete
    scan = F.scan_frames(data)
    assert scan.truncated and not scan.ended
    assert len(scan.offsets) == len(complete)


def test_scan_frames_reports_how_the_data_ended():
    full = F.encode_binaryfile([S_EVENT, D_MSG])
    scan = F.scan_frames(full)
    assert scan.offsets == [2, 16] and scan.ended and not scan.truncated and scan.end_offset == 35
    assert F.frame_length(full, 16) == 19
    open_ended = F.scan_frames(full[:-2])
    assert not open_ended.ended and not open_ended.truncated
    half_prefix = F.scan_frames(full[:-2] + b"\x00")
    assert half_prefix.truncated and half_prefix.end_offset == 35
    assert F.scan_frames(b"") == F.FrameScan([], False, False, 0)


def test_skip_empty_reads_files_with_zero_length_frames_in_the_middle():
    data = b"\x00\x00" + F.frame(S_EVENT) + b"\x00\x00\x00\x00" + F.frame(D_MSG)
    assert [bytes(m) for _, m in F.iter_frames(data, skip_empty=True)] == [S_EVENT, D_MSG]
    assert [bytes(m) for _, m in F.iter_frames(data, require_end=False)] == []  # strict: 0 ends it


def test_iter_frames_over_a_file_path_plain_and_gzip(tmp_path):
    msgs = [S_EVENT, D_MSG] * 500
    data = F.encode_binaryfile(msgs)
    plain = tmp_path / "s.itch"
    plain.write_bytes(data)
    packed = tmp_path / "s.itch.gz"
    packed.write_bytes(gzip.compress(data))
    want = [(off, bytes(m)) for off, m in F.iter_frames(data)]
    assert [(o, bytes(m)) for o, m in F.iter_frames(plain)] == want
    assert [(o, bytes(m)) for o, m in F.iter_frames(str(packed))] == want
    assert F.read_binaryfile(packed) == data


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 13, 64])
def test_file_reading_in_chunks_joins_frames_split_across_reads(tmp_path, chunk):
    msgs = [S_EVENT, D_MSG, S_EVENT]
    data = F.encode_binaryfile(msgs)
    path = tmp_path / "c.itch"
    path.write_bytes(data)
    got = list(F.iter_file_frames(path, chunk_bytes=chunk))
    assert got == [(off, bytes(m)) for off, m in F.iter_frames(data)]


def test_truncated_and_unterminated_files_are_detected(tmp_path):
    data = F.encode_binaryfile([S_EVENT, D_MSG])
    cut = tmp_path / "cut.itch.gz"
    cut.write_bytes(gzip.compress(data[:-5]))
    with pytest.raises(TruncatedFrame):
        list(F.iter_frames(cut))
    open_ended = tmp_path / "open.itch"
    open_ended.write_bytes(data[:-2])
    with pytest.raises(IncompleteSession):
        list(F.iter_file_frames(open_ended, chunk_bytes=4))
    assert len(list(F.iter_file_frames(open_ended, require_end=False))) == 2


# ------------------------------------------------------------------------------------- MoldUDP64

SESSION = b"SESSION001"


def test_mold_packet_golden_bytes():
    pkt = F.encode_packet(SESSION, 42, [S_EVENT, D_MSG])
    assert pkt == (b"SESSION001" + bytes.fromhex("000000000000002a") + b"\x00\x02"
                   + b"\x00\x0c" + S_EVENT + b"\x00\x13" + D_MSG)
    assert F.MOLD_HEADER_BYTES == 20 and (F.OFF_MOLD_SESSION, F.OFF_MOLD_SEQ, F.OFF_MOLD_COUNT) == (0, 10, 18)


def test_mold_decode_gives_session_seq_count_and_messages():
    p = F.decode_packet(F.encode_packet("S1", 7, [D_MSG, S_EVENT, D_MSG]))
    assert p.session == b"S1        " and p.seq == 7 and p.count == 3
    assert [bytes(m) for m in p.messages] == [D_MSG, S_EVENT, D_MSG]
    assert p.next_seq == 10 and not p.is_heartbeat and not p.is_end_of_session


def test_mold_heartbeat_end_of_session_and_request_are_bare_headers():
    hb = F.encode_heartbeat(SESSION, 100)
    assert hb == SESSION + (100).to_bytes(8, "big") + b"\x00\x00"
    p = F.decode_packet(hb)
    assert p.is_heartbeat and p.messages == () and p.next_seq == 100
    end = F.encode_end_of_session(SESSION, 100)
    assert end[-2:] == b"\xff\xff" and F.decode_packet(end).is_end_of_session
    assert F.encode_request(SESSION, 5, 3) == SESSION + (5).to_bytes(8, "big") + b"\x00\x03"


@pytest.mark.parametrize("datagram,reason", [
    (b"short", F.MoldReason.SHORT_HEADER),
    (SESSION + (1).to_bytes(8, "big") + b"\x00\x02" + F.frame(D_MSG), F.MoldReason.TRUNCATED),
    (SESSION + (1).to_bytes(8, "big") + b"\x00\x01" + F.frame(D_MSG)[:-1], F.MoldReason.TRUNCATED),
    (SESSION + (1).to_bytes(8, "big") + b"\x00\x01" + F.frame(D_MSG) + b"x", F.MoldReason.TRAILING_BYTES),
    (SESSION + (1).to_bytes(8, "big") + b"\x00\x00" + b"x", F.MoldReason.TRAILING_BYTES),
    (SESSION + (1).to_bytes(8, "big") + b"\x00\x01" + b"\x00\x00", F.MoldReason.EMPTY_MESSAGE),
])
def test_malformed_datagrams_are_rejected_with_a_reason(datagram, reason):
    assert F.try_decode_packet(datagram) == (None, reason)
    with pytest.raises(FramingError):
        F.decode_packet(datagram)


def test_mold_encode_rejects_bad_arguments():
    for call in (lambda: F.encode_packet(SESSION, 1, []),
                 lambda: F.encode_packet("SESSION0001", 1, [D_MSG]),
                 lambda: F.encode_packet(SESSION, -1, [D_MSG]),
                 lambda: F.encode_request(SESSION, 1, 0)):
        with pytest.raises(ItchError):
            call()


# ----------------------------------------------------------------------------------- sequencer


def test_sequencer_delivers_in_order_packets_whole():
    s = F.MoldSequencer()
    assert s.on_packet(SESSION, 1, 3) == F.SeqVerdict(0, None, 0, False)
    assert s.on_packet(SESSION, 4, 2) == F.SeqVerdict(0, None, 0, False)
    assert s.expected == 6 and s.delivered == 5 and s.session == SESSION


def test_sequencer_reports_a_gap_as_the_missing_range():
    s = F.MoldSequencer(SESSION)
    s.on_packet(SESSION, 1, 3)
    v = s.on_packet(SESSION, 10, 2)  # 4..9 never came
    assert v.gap == range(4, 10) and v.deliver_from == 0
    assert s.expected == 12 and s.missing == 6 and s.gaps == [range(4, 10)]
    assert F.decode_request(F.encode_request(SESSION, v.gap.start, len(v.gap))) == (SESSION, 4, 6)


def test_sequencer_drops_duplicates_and_delivers_only_the_new_tail():
    s = F.MoldSequencer(SESSION)
    s.on_packet(SESSION, 1, 5)
    assert s.on_packet(SESSION, 1, 5) == F.SeqVerdict(5, None, 5, False)  # all seen
    assert s.on_packet(SESSION, 4, 4) == F.SeqVerdict(2, None, 2, False)  # 4, 5 seen; 6, 7 new
    assert s.expected == 8 and s.duplicates == 7 and s.delivered == 7


def test_sequencer_heartbeats_carry_the_next_sequence_number():
    s = F.MoldSequencer(SESSION)
    s.on_packet(SESSION, 1, 2)
    assert s.on(F.decode_packet(F.encode_heartbeat(SESSION, 3))) == F.SeqVerdict(0, None, 0, False)
    v = s.on(F.decode_packet(F.encode_heartbeat(SESSION, 6)))  # 3..5 were sent and lost
    assert v.gap == range(3, 6) and s.expected == 6
    assert s.on_packet(SESSION, 4, 0).gap is None  # a late heartbeat changes nothing


def test_sequencer_end_of_session_ends_and_still_reports_a_gap():
    s = F.MoldSequencer(SESSION)
    s.on_packet(SESSION, 1, 1)
    v = s.on(F.decode_packet(F.encode_end_of_session(SESSION, 4)))
    assert v.end_of_session and v.gap == range(2, 4) and s.ended


def test_sequencer_ignores_packets_of_another_session():
    s = F.MoldSequencer("A")
    v = s.on_packet(b"B         ", 1, 3)
    assert v.foreign and v.deliver_from == 3 and s.expected == 1 and s.foreign == 1


def test_sequencer_over_a_shuffled_stream_delivers_each_message_at_most_once():
    import random

    rng = random.Random(5)
    packets = [(seq, 3) for seq in range(1, 300, 3)]
    stream = packets + rng.sample(packets, 30)  # resends
    rng.shuffle(stream)
    s = F.MoldSequencer(SESSION)
    delivered = []
    for seq, count in stream:
        v = s.on_packet(SESSION, seq, count)
        delivered += list(range(seq + v.deliver_from, seq + count))
    assert len(delivered) == len(set(delivered))
    assert delivered == sorted(delivered)
    assert set(delivered) | {n for g in s.gaps for n in g} >= set(range(1, 301))
