"""``pipeline.venue.clients``: what ``Clients.send`` does with a frame (sans socket: fake
connections). The WebSocket dialect end to end is in ``test_server.py``."""

from __future__ import annotations

from pipeline.venue.clients import Clients, Conn
from pipeline.venue.faults import FaultInjector, FaultParams
from pipeline.venue.market import VenueMarket


class _Transport:
    def __init__(self) -> None:
        self.aborted = False

    def abort(self) -> None:
        self.aborted = True


class _Ws:
    def __init__(self) -> None:
        self.transport = _Transport()


class _Loop:
    def time(self) -> float:
        return 100.0


def _clients(max_queue: int = 3, **faults) -> tuple[Clients, dict]:
    stats = dict.fromkeys(("faults_injected", "frames_dropped", "jitter_frames", "slow_disconnects"), 0)
    clients = Clients(VenueMarket(["BTCUSDT"]), FaultInjector(FaultParams(**faults), stats), stats, max_queue)
    clients.loop = _Loop()
    return clients, stats


def test_a_frame_is_queued_due_at_once_or_after_the_delay():
    clients, _ = _clients()
    conn = Conn(_Ws())
    clients.send(conn, b"a")
    assert conn.queue.get_nowait() == (0.0, b"a")
    delayed, _ = _clients(delay_ms=20.0)
    delayed.send(conn, b"b")
    assert conn.queue.get_nowait() == (100.02, b"b") and conn.last_due == 100.02


def test_the_drop_fault_takes_data_pushes_only():
    clients, stats = _clients(drop_prob=1.0)
    conn = Conn(_Ws())
    clients.send(conn, b"push")
    clients.send(conn, b"ack", push=False)
    assert conn.queue.get_nowait() == (0.0, b"ack") and conn.queue.empty() and stats["frames_dropped"] == 1


def test_a_full_queue_aborts_the_connection_and_nothing_more_is_queued():
    clients, stats = _clients(max_queue=2)
    conn = Conn(_Ws())
    for data in (b"1", b"2", b"3", b"4"):
        clients.send(conn, data)
    assert conn.dead and conn.ws.transport.aborted and stats["slow_disconnects"] == 1
    assert conn.queue.qsize() == 2
    clients.conns.add(conn)
    assert clients.backlogged(1) and not clients.backlogged(2)
    assert clients.cut_all() == 1
