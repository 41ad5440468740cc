"""The venue's ITCH 5.0 feed over MoldUDP64: packets cut within the datagram size, a real UDP
receiver on 127.0.0.1 rebuilding the whole session, and gaps (drop fault) recovered by re-requests."""

from __future__ import annotations

import socket
import time

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
