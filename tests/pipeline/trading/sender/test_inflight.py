"""Requests in flight (pipeline/trading/sender/inflight.py): what must wait, and a request that never left."""

from __future__ import annotations

import pytest

from pipeline.trading.bitget.rest import Outcome, Result
from pipeline.trading.bitget.signing import Credentials
from pipeline.trading.messages import OrderCmd
from pipeline.trading.sender.inflight import InFlight, InFlightRequests
from tests.support.sender import INSTRUMENTS, intent, order


class Client:
    """``VenueClient`` stand-in: ``send`` answers ``result`` (None: the request left)."""

    def __init__(self, result=None):
        self.result = result
        self.sent: list = []

    def send(self, conn, req, crash_point="", *, sent_mark=0, ts=0):
        self.sent.append((conn, req.target))
        return self.result


def requests(ledger, client=None, connections=2) -> InFlightRequests:
    r = InFlightRequests([f"conn{k}" for k in range(connections)], client or Client(), ledger,
                         Credentials("k", "s", "p"), INSTRUMENTS, lambda: 1_700_000_000_000, 10**9, {"sent": 0},
                         lambda point: None)
    r.answers = []
    r.on_answer = lambda it, res, now: r.answers.append((it.order.order_id, res.outcome))
    return r


@pytest.mark.parametrize("flying, cmd, oid, iid, wait", [
    ((OrderCmd.NEW, 1, 1), OrderCmd.CANCEL, 1, 1, True),  # a cancel never overtakes its order
    ((OrderCmd.NEW, 1, 1), OrderCmd.CANCEL, 2, 1, False),
    ((OrderCmd.NEW, 1, 1), OrderCmd.NEW, 2, 1, False),
    ((OrderCmd.CANCEL_ALL, 0, 1), OrderCmd.NEW, 3, 1, True),  # nor an order its instrument's cancel-all
    ((OrderCmd.CANCEL_ALL, 0, 1), OrderCmd.NEW, 3, 2, False),
    ((OrderCmd.NEW, 1, 1), OrderCmd.CANCEL_ALL, 0, 1, True),  # a cancel-all waits for the instrument's orders
    ((OrderCmd.NEW, 1, 2), OrderCmd.CANCEL_ALL, 0, 1, False),
])
def test_must_wait(ledger, flying, cmd, oid, iid, wait):
    r = requests(ledger)
    r.inflight[0] = InFlight(order(*flying), None, 0)
    assert r.must_wait(cmd, order(cmd, oid, iid).order) is wait


def test_a_place_goes_out_on_a_free_connection_and_stays_in_flight(ledger):
    ledger.record(intent(7))
    client = Client()
    r = requests(ledger, client)
    r.start(order(OrderCmd.NEW, 7), 50)
    assert client.sent == [("conn0", "/api/v2/spot/trade/place-order")] and r.free == [1]
    assert r.inflight[0].deadline_ns == 50 + 10**9 and r.has_new(7) and r.stats["sent"] == 1 and not r.answers


def test_a_request_that_never_left_frees_its_connection_and_is_answered_at_once(ledger):
    ledger.record(intent(8))
    r = requests(ledger, Client(Result(Outcome.RETRYABLE, 0, "", "refused")))
    r.start(order(OrderCmd.NEW, 8), 50)
    assert not r.inflight and sorted(r.free) == [0, 1] and r.answers == [(8, Outcome.RETRYABLE)]
