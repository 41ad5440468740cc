"""The lane (pipeline/trading/sender/lane.py): one request at a time, answers sent into the jobs, callbacks;
each request paced by its endpoint's budget."""

from __future__ import annotations

import collections
from types import SimpleNamespace

import pytest

from pipeline.trading.bitget.rest import Outcome, Result
from pipeline.trading.sender.lane import FILLS, POLL, QUERY, Lane
from pipeline.trading.sender.ratelimit import EndpointBudget
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


# ------------------------------------------------------------------------------------ the endpoint budget
FILLS_PATH, INFO_PATH = "/api/v2/spot/trade/fills", "/api/v2/spot/account/info"


def paced_lane(clock=lambda: 0, sleep=None):
    client, stats, log = Client(), collections.defaultdict(int), ListLog()
    lane = Lane(SimpleNamespace(sock=None), client, 10**9, stats, log, budget=EndpointBudget(1.0, 0), clock=clock,
                sleep=sleep or (lambda s: None))
    return lane, client, stats


def req(path):
    return SimpleNamespace(path=path)


def test_a_request_without_its_endpoints_token_is_held_with_its_job_until_the_token_is_due():
    lane, client, stats = paced_lane()
    seen, done = [], []
    lane.queue(job(req(INFO_PATH), req(INFO_PATH), seen=seen), POLL, [lambda: done.append("info")])
    lane.queue(job(req(FILLS_PATH), seen=seen), FILLS, [lambda: done.append("fills")])
    assert lane.run(0) == 0 and len(client.sent) == 1 and lane.held_until() is None  # account/info: 1 banked
    client.arrived = True
    assert lane.run(1) == 1 and len(client.sent) == 1 and stats["pace_wait"] == 1  # the second: no token
    due = lane.held_until()
    assert due == 1_250_000_001 and lane.busy and not done  # 0.8/s: 1.25 s after the first
    client.arrived = False
    assert lane.run(due - 1) == 0 and len(client.sent) == 1 and lane.held_until() == due
    assert lane.run(due) == 0 and len(client.sent) == 2 and lane.held_until() is None  # written: in flight
    client.arrived = True
    lane.run(due + 1)
    assert done == ["info"] and [r.path for r in client.sent] == [INFO_PATH, INFO_PATH, FILLS_PATH]


class Answers(Client):
    """Answers each request with the next of ``codes`` ("" = ok)."""

    def __init__(self, *codes):
        super().__init__()
        self.codes = list(codes)

    def read_answer(self, conn, req, deadline_ns, now, ready):
        code = self.codes.pop(0)
        return Result(Outcome.RETRYABLE if code else Outcome.OK, 429 if code else 200, code)

    def call(self, conn, req):
        self.sent.append(req)
        return self.read_answer(conn, req, 0, 0, True)


def test_an_answer_429_empties_its_endpoints_bank_so_the_next_request_waits_a_full_interval():
    lane, _, stats = paced_lane()
    lane.client = client = Answers("429", "")
    lane.queue(job(req(FILLS_PATH), req(FILLS_PATH), seen=[]), FILLS)  # 5 banked: both could go at once
    lane.run(0)
    lane.run(10)  # the 429: the second is held
    assert len(client.sent) == 1 and lane.held_until() == 10 + 125_000_001


def test_run_sync_sleeps_until_the_token_is_due_then_sends():
    t, slept = [0], []

    def sleep(s):
        slept.append(s)
        t[0] += int(s * 1e9)

    lane, client, stats = paced_lane(clock=lambda: t[0], sleep=sleep)
    seen = []
    assert lane.run_sync(job(req(INFO_PATH), req(INFO_PATH), req(INFO_PATH), seen=seen)) == 3
    assert slept == [1.250000001, 1.250000001] and stats["pace_wait"] == 2 and len(client.sent) == 3


@pytest.mark.parametrize("taken, paths, ready", [
    ({}, (INFO_PATH, FILLS_PATH), 0),  # both banked
    ({INFO_PATH: 1}, (INFO_PATH, FILLS_PATH), 1_250_000_001),  # the later of the two
    ({FILLS_PATH: 5}, (INFO_PATH, FILLS_PATH), 125_000_001),
    ({INFO_PATH: 1}, ("/not/documented",), 0),  # not paced
    ({}, (), 0),
])
def test_ready_at_is_when_every_endpoint_named_has_a_token(taken, paths, ready):
    lane, _, _ = paced_lane()
    for path, n in taken.items():
        for _ in range(n):
            assert lane.budget.take(path, 0)
    assert lane.ready_at(paths, 0) == ready


def test_an_unpaced_lane_is_always_ready():
    lane, _, _, _ = lane_of()
    assert lane.ready_at((INFO_PATH,), 7) == 7
