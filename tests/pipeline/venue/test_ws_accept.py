"""The market-data WebSocket server's accept path (pipeline/venue/ws_accept.py) over real sockets on
127.0.0.1: connections beyond ``max_connections`` are reset as they are accepted and counted, while a
subscribed client keeps its connection and its pushes; once the crowd is gone a new client is served.
Every wait is bounded (``WAIT_S``); every socket is closed even when the test fails."""

from __future__ import annotations

import socket

from tests.support.venue import sub
from tests.support.wait import wait_until

WAIT_S = 5.0


def test_connections_beyond_the_cap_are_reset_at_accept_and_counted_while_a_client_keeps_its_pushes(venues,
                                                                                                    clients):
    server = venues.start(start_paused=True, max_connections=4)
    c = clients(server)
    c.subscribed(sub("books", "BTCUSDT"))
    crowd: list[socket.socket] = []
    try:
        for _ in range(20):  # TCP only, no handshake: each holds a slot until its open timeout
            crowd.append(socket.create_connection(("127.0.0.1", server.port), timeout=WAIT_S))
        # the client's slot and 3 of the crowd's are open: the other 17 are reset as they are accepted
        wait_until(lambda: server.stats()["connections_refused"] == 17, WAIT_S, what="17 connections refused")
        seq = server.seq("BTCUSDT")
        server.advance(3)
        c.until_seq("books", "BTCUSDT", seq + 3)  # the subscribed client still gets its pushes
        assert server.open_connections == 4
    finally:
        for s in crowd:
            s.close()
    wait_until(lambda: server.open_connections == 1, WAIT_S, what="the crowd's connections closed")
    late = clients(server)
    late.subscribed(sub("books", "BTCUSDT"))
    assert server.open_connections == 2 and server.stats()["connections_refused"] == 17
    assert c.ok() and late.ok()
