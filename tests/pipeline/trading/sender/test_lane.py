"""The lane (pipeline/trading/sender/lane.py): one request at a time, answers sent into the jobs, callbacks."""

from __future__ import annotations

import collections
from types import SimpleNamespace

from pipeline.trading.bitget.rest import Outcome, Result
from pipeline.trading.sender.lane import FILLS, POLL, QUERY, Lane
from tests.support.ports import ListLog

OK = Result(Outcome.OK)


class Client:
    """``VenueClient`` stand-in: every request leaves; ``answers`` are read in turn once ``arrived``."""

    def __init__(self):
        self.sent: list[str] = []
        self.arrived = False

    def send(self, conn, req):
        self.sent.append(req)
        return None

    def read_answer(self, conn, req, deadline_ns, now, ready):
        return Result(Outcome.OK, 200, "", req) if self.arrived else None

    def call(self, conn, req):
        self.sent.append(req)
        return Result(Outcome.OK, 200, "", req)


def lane_of():
    client, stats, log = Client(), collections.defaultdict(int), ListLog()
    return Lane(SimpleNamespace(sock=None), client, 10**9, stats, log), client, stats, log


def job(*requests, seen):
    for req in requests:
        res = yield req
        seen.append(res.msg)
    return len(requests)


def test_jobs_run_one_request_at_a_time_and_their_callbacks_follow_their_end():
    lane, client, _, _ = lane_of()
    seen, done = [], []
    lane.queue(job("a1", "a2", seen=seen), POLL, [lambda: done.append("a")])
    lane.queue(job("b1", seen=seen), QUERY, [lambda: done.append("b")])
    assert lane.run(0) == 0 and client.sent == ["a1"] and lane.busy and lane.has(POLL) and lane.has(QUERY)
    client.arrived = True
    assert lane.run(1) == 1 and client.sent == ["a1", "a2"] and not done  # a2 in flight
    assert lane.run(2) == 1 and done == ["a"] and client.sent[-1] == "b1"
    assert lane.run(3) == 1 and done == ["a", "b"] and seen == ["a1", "a2", "b1"] and not lane.busy


def test_a_job_that_raises_is_counted_logged_and_its_callbacks_still_run():
    lane, client, stats, log = lane_of()

    def broken():
        yield "q1"
        raise RuntimeError("a bug")

    done = []
    lane.queue(broken(), QUERY, [lambda: done.append(1)])
    lane.queue(job("next", seen=[]), POLL)
    lane.run(0)
    client.arrived = True
    lane.run(1)
    assert done == [1] and stats["errors"] == 1 and client.sent == ["q1", "next"]
    assert log.named("sender_lane_job_failed") == [{"kind": "query", "error": "RuntimeError: a bug"}]


def test_a_callback_joins_a_fills_poll_only_while_it_is_queued():
    lane, _, _, _ = lane_of()
    assert not lane.join_last(FILLS, lambda: None)
    lane.queue(job("f", seen=[]), FILLS, [])
    assert lane.join_last(FILLS, lambda: None) and len(lane.jobs[-1].thens) == 1
    lane.run(0)  # started: a later callback needs a later poll
    assert not lane.join_last(FILLS, lambda: None)


def test_run_sync_waits_for_each_answer_and_returns_the_jobs_value():
    lane, client, _, _ = lane_of()
    seen = []
    assert lane.run_sync(job("r1", "r2", seen=seen)) == 2 and seen == ["r1", "r2"]
