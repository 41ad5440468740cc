"""The venue's ITCH 5.0 feed over MoldUDP64: packets cut within the datagram size, a real UDP
receiver on 127.0.0.1 rebuilding the whole session, and gaps (drop fault) recovered by re-requests."""

from __future__ import annotations

import socket
import time
from contextlib import suppress

import pytest

from pipeline.trading.itch import messages as M
from pipeline.trading.itch.framing import MoldSequencer, decode_packet, encode_request
from pipeline.venue.errors import VenueError
from pipeline.venue.itch_udp import ItchUdpPublisher, MoldStream
from pipeline.venue.server import VenueServer
from pipeline.venue.service import VenueThread
from tests.support.venue import synthetic


def test_stream_packets_fit_the_datagram_and_number_every_message_once():
    s = MoldStream.synthetic(3, 500, max_datagram_bytes=300)
    seen = []
    while (item := s.next_packet()) is not None:
        packet, n = item
        assert len(packet) <= 300
        p = decode_packet(packet)
        assert p.seq == len(seen) + 1 and p.count == n == len(p.messages)
        seen += [bytes(m) for m in p.messages]
    assert seen == s.messages and s.exhausted
    assert decode_packet(s.end_of_session()).is_end_of_session
    assert decode_packet(s.heartbeat()).next_seq == len(seen) + 1


def test_retransmit_covers_only_what_was_published():
    s = MoldStream("S1", [bytes([65 + i % 26]) * (5 + i % 7) for i in range(100)], max_datagram_bytes=100)
    assert s.retransmit(1, 10) == []
    while s.next_seq <= 40:
        s.next_packet()
    published = s.next_seq - 1
    got = [bytes(m) for pk in s.retransmit(30, 50) for m in decode_packet(pk).messages]
    assert got == s.messages[29:published]
    assert decode_packet(s.retransmit(30, 50)[0]).seq == 30


def test_stream_rejects_bad_input():
    with pytest.raises(VenueError):
        MoldStream("S", [])
    with pytest.raises(VenueError):
        MoldStream("ELEVENCHARS", [b"x"])
    with pytest.raises(VenueError):
        MoldStream("S", [b"x" * 2000])
    with pytest.raises(VenueError):
        ItchUdpPublisher(MoldStream("S", [b"x"]), 0)


@pytest.fixture
def receiver():
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(3.0)
    yield sock
    sock.close()


def _run(publisher: ItchUdpPublisher) -> VenueThread:
    t = VenueThread(VenueServer(synthetic(), start_paused=True), extra=[publisher])
    t.start()
    return t


def _receive_session(sock, seqr: MoldSequencer, got: dict) -> tuple:
    """Receive until the end-of-session packet; returns the publisher's address."""
    while True:
        data, addr = sock.recvfrom(65536)
        p = decode_packet(data)
        v = seqr.on(p)
        for i, m in enumerate(p.messages):
            got.setdefault(p.seq + i, bytes(m))
        if v.end_of_session:
            return addr


def test_a_udp_client_receives_the_whole_session_in_order(receiver):
    stream = MoldStream.synthetic(5, 3000)
    pub = ItchUdpPublisher(stream, receiver.getsockname()[1], rate_msgs_per_s=100_000)
    t = _run(pub)
    try:
        seqr, got = MoldSequencer(), {}
        _receive_session(receiver, seqr, got)
        assert not seqr.gaps and seqr.duplicates == 0
        assert [got[i] for i in range(1, len(stream.messages) + 1)] == stream.messages
        assert M.decode(got[1]).__class__.__name__ == "SystemEvent"
        assert pub.stats["messages_sent"] == len(stream.messages)
    finally:
        t.stop()
    assert t.error is None


def test_dropped_packets_show_as_gaps_and_re_requests_fill_them(receiver):
    stream = MoldStream.synthetic(6, 3000)
    pub = ItchUdpPublisher(stream, receiver.getsockname()[1], rate_msgs_per_s=100_000, drop_prob=0.3, fault_seed=2)
    t = _run(pub)
    try:
        seqr, got = MoldSequencer(), {}
        server_addr = _receive_session(receiver, seqr, got)
        assert seqr.gaps and pub.stats["packets_dropped"] > 0
        missing = [i for i in range(1, len(stream.messages) + 1) if i not in got]
        assert missing
        # another session's request: ignored. Sent first: the publisher answers requests in the order
        # they arrive, so it has counted this one by the time the last retransmission is here
        receiver.sendto(encode_request("OTHER", 1, 5), server_addr)
        for gap in seqr.gaps:
            receiver.sendto(encode_request("PAPER", gap.start, len(gap)), server_addr)
        deadline = time.monotonic() + 5
        while any(i not in got for i in missing) and time.monotonic() < deadline:
            data, _ = receiver.recvfrom(65536)
            p = decode_packet(data)
            for i, m in enumerate(p.messages):
                got.setdefault(p.seq + i, bytes(m))
        assert [got.get(i) for i in range(1, len(stream.messages) + 1)] == stream.messages
        assert pub.stats["bad_requests"] == 1 and pub.stats["retransmitted_packets"] > 0
    finally:
        t.stop()
    assert t.error is None


def test_retransmit_leaves_out_the_withheld_sequence_numbers_and_answers_the_rest():
    s = MoldStream("S1", [bytes([65 + i % 26]) * 6 for i in range(30)])
    while s.next_packet():
        pass
    got = [(decode_packet(pk).seq, len(decode_packet(pk).messages)) for pk in s.retransmit(5, 10, {7, 8})]
    assert got == [(5, 2), (9, 6)]


def test_at_a_speed_a_packet_carries_only_the_messages_due_by_their_itch_timestamps():
    msgs = [M.encode(M.SystemEvent(0, 0, t, b"O")) for t in (100, 100, 150, 400, 401)]
    s = MoldStream("S1", msgs)
    assert s.last_due(120) == 2 and s.timestamp_ns(3) == 150
    packet, n = s.next_packet(s.last_due(120))
    assert n == 2 and decode_packet(packet).seq == 1
    assert s.last_due(0) == 3, "the next message always goes in a packet, even when not due yet"


def test_the_publisher_finds_its_target_in_a_port_file_paces_by_timestamps_drops_and_withholds_packets(
        receiver, tmp_path):
    step_ns = 10_000_000  # 10 ms of ITCH time a message; at speed 2: 5 ms apart
    msgs = [M.encode(M.SystemEvent(0, 0, 1_000 + i * step_ns, b"O")) for i in range(40)]
    published = []
    port_file = tmp_path / "feed.port"
    pub = ItchUdpPublisher(MoldStream("S1", msgs), target_port_file=str(port_file), speed=2.0, drop_seqs=[10],
                           unanswered_seqs=[10], on_published=lambda first, n: published.append((first, n)))
    t = _run(pub)
    try:
        time.sleep(0.1)
        assert published == [], "nothing is sent before the port file exists"
        port_file.write_text(f"{receiver.getsockname()[1]}\n")
        t0 = time.monotonic()
        seqr, got = MoldSequencer(), {}
        server_addr = _receive_session(receiver, seqr, got)
        took = time.monotonic() - t0
        receiver.sendto(encode_request("S1", 9, 3), server_addr)  # 10 is never answered: 9 and 11 are
        answers, deadline = [], time.monotonic() + 3  # end-of-session packets keep coming meanwhile
        while len(answers) < 2 and time.monotonic() < deadline:
            p = decode_packet(receiver.recvfrom(65536)[0])
            if p.messages:
                answers.append((p.seq, len(p.messages)))
        assert answers == [(9, 1), (11, 1)]
    finally:
        t.stop()
    assert t.error is None
    assert took >= 39 * step_ns / 2 / 1e9 * 0.9, f"paced by the timestamps: {took:.3f} s"
    assert [g for g in seqr.gaps] == [range(10, 11)] and pub.stats["packets_dropped"] == 1
    assert sorted(got) == [i for i in range(1, 41) if i != 10]
    assert sum(n for _, n in published) == 40, "the hook hears every published message, the dropped one too"


def test_the_publisher_needs_exactly_one_target():
    with pytest.raises(VenueError, match="exactly one"):
        ItchUdpPublisher(MoldStream("S", [b"x"]), 5000, target_port_file="p")
    with pytest.raises(VenueError, match="speed"):
        ItchUdpPublisher(MoldStream("S", [b"x"]), 5000, speed=-1.0)


def test_the_delay_fault_holds_every_packet_back_and_keeps_their_order(receiver):
    """With itch_delay_ms 150 nothing arrives in the first 150 ms; with a jitter of 50 ms around a
    25 ms mean (draws clipped to [0, 50]) the packets still arrive in sequence order, no gap, none lost."""
    fixed = ItchUdpPublisher(MoldStream.synthetic(5, 200), receiver.getsockname()[1], rate_msgs_per_s=0,
                             delay_ms=150.0)
    t = _run(fixed)
    try:
        t0 = time.monotonic()
        receiver.recvfrom(65536)
        waited = time.monotonic() - t0
    finally:
        t.stop()
    assert waited >= 0.14, f"the first packet came after {waited:.3f} s"
    receiver.settimeout(0.3)
    with suppress(TimeoutError):  # what the first publisher left in the socket
        while True:
            receiver.recvfrom(65536)
    receiver.settimeout(3.0)
    stream = MoldStream.synthetic(5, 3000)
    pub = ItchUdpPublisher(stream, receiver.getsockname()[1], rate_msgs_per_s=200_000, delay_ms=25.0,
                           delay_jitter_ms=50.0, fault_seed=3)
    t = _run(pub)
    try:
        seqs, got = [], {}
        while True:
            p = decode_packet(receiver.recvfrom(65536)[0])
            if p.messages:
                seqs.append(p.seq)
                got.update({p.seq + i: bytes(m) for i, m in enumerate(p.messages)})
            elif p.seq > len(stream.messages):  # the end of the session
                break
    finally:
        t.stop()
    assert t.error is None
    assert seqs == sorted(seqs) and len(seqs) == pub.stats["packets_sent"] > 20
    assert [got[i] for i in range(1, len(stream.messages) + 1)] == stream.messages
    assert pub.stats["delayed_packets"] >= pub.stats["packets_sent"]  # every packet went through the delay
    with pytest.raises(VenueError, match="delay_jitter_ms"):
        ItchUdpPublisher(stream, 5000, delay_jitter_ms=51.0)
