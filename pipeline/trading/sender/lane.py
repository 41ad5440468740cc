"""The lane: the sender's connection for everything that is not a place or a cancel.

Fill polls, the periodic poll, order queries and the running account check are request generators
(they yield a ``rest.Request`` and are sent its ``Result``), queued as ``LaneJob``s and run one
request at a time on a connection of their own, without waiting: ``Lane.run`` reads what has
arrived of the answer (a zero-timeout select, non-blocking reads; unanswered past ``timeout_ms``: a
transport failure), once it is whole sends it into the generator and writes the request it yields;
when the generator returns, the job's callbacks (``thens``) run. So a venue slow to answer a query
holds no new order and no cancel. Only reconciliation waits for its answers (``run_sync``), on the
lane too: it runs before anything else, so the lane is idle.

Every request the lane writes first takes a token of its endpoint's budget (``budget``:
``ratelimit.EndpointBudget``, the venue's documented per-endpoint limits): without one it is held
(``pace_wait``) until the token is due (``held_until``), its job with it, so a poll due every
``poll_interval_ms`` runs no faster than its endpoints allow (``run_sync`` sleeps instead). The
periodic jobs (the poll, the account check) are queued only once their endpoints have tokens
(``ready_at``), so they do not hold the lane, and the order queries behind them, waiting for one.
An answer 429 the venue still gives is counted by the client (``rl_venue``), empties that endpoint's
budget, and is sent into the job like any failure: the job leaves the work to its next round (a
fills poll's cursor does not move; an owed query stays owed), so nothing is lost.
"""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass, field
from typing import Callable, Generator

from pipeline.trading.bitget import rest
from pipeline.trading.bitget.rest import Result
from pipeline.trading.sender.connection import HttpTransport, readable

#: kinds of lane jobs (the ``kind`` of ``sender_lane_job_failed``)
POLL, FILLS, QUERY, ACCOUNT = "poll", "fills", "query", "account"

RequestGen = Generator[rest.Request, Result, object]


@dataclass(slots=True)
class LaneJob:
    """A request generator on the lane, the callbacks run when it ends, and its request in flight."""

    gen: RequestGen
    kind: str  # POLL, FILLS, QUERY or ACCOUNT
    thens: list[Callable[[], None]] = field(default_factory=list)
    request: rest.Request | None = None  # written, not yet answered
    deadline_ns: int = 0  # unanswered past this: a transport failure
    held: rest.Request | None = None  # not written yet: waits for its endpoint's token
    due_ns: int = 0  # when that token is due


class Lane:
    """The lane's connection, its queued jobs and the one running (see the module docstring).

    ``client`` is the ``VenueClient``; a job that raises (a bug) is counted in ``errors`` and logged
    (``sender_lane_job_failed``). ``budget``: the ``EndpointBudget`` (None: not paced); ``clock`` and
    ``sleep`` (seconds) time ``run_sync``'s waits for a token.
    """

    def __init__(self, conn: HttpTransport, client, timeout_ns: int, stats: dict, log, *, budget=None,
                 clock: Callable[[], int] = time.monotonic_ns, sleep: Callable[[float], None] = time.sleep):
        self.conn = conn
        self.client = client
        self.timeout_ns = timeout_ns
        self.stats = stats
        self.log = log
        self.budget = budget
        self.clock = clock
        self.sleep = sleep
        self.jobs: collections.deque[LaneJob] = collections.deque()  # waiting to start, in order
        self.job: LaneJob | None = None  # the one with a request in flight or held for a token

    @property
    def busy(self) -> bool:
        """A job runs or waits to."""
        return self.job is not None or bool(self.jobs)

    def has(self, kind: str) -> bool:
        """Whether a job of ``kind`` runs or waits to."""
        return any(job.kind == kind for job in self.jobs) or (self.job is not None and self.job.kind == kind)

    def queue(self, gen: RequestGen, kind: str, thens: list[Callable[[], None]] | None = None) -> None:
        """Queue ``gen`` as a job of ``kind``; ``thens`` run (in order) when it ends."""
        self.jobs.append(LaneJob(gen, kind, thens if thens is not None else []))

    def join_last(self, kind: str, then: Callable[[], None]) -> bool:
        """Add ``then`` to the last queued job when it is of ``kind`` (not started: it will run after
        now); False when there is no such job."""
        if self.jobs and self.jobs[-1].kind == kind:
            self.jobs[-1].thens.append(then)
            return True
        return False

    def ready_at(self, paths, now: int) -> int:
        """When every endpoint of ``paths`` has a token (``now`` when they have, or nothing is paced):
        a periodic job is queued only then, so that it does not hold the lane waiting for one."""
        budget = self.budget
        return now if budget is None else max((budget.ready_at(p, now) for p in paths), default=now)

    def held_until(self) -> int | None:
        """When the running job's held request gets its token; None when none is held."""
        job = self.job
        return job.due_ns if job is not None and job.held is not None else None

    def run(self, now: int) -> int:
        """Write the running job's held request once its token is due, or read its answer if it has
        arrived and drive it on; then start queued jobs while none has a request in flight or held.
        Returns the number of answers handled (0 or 1)."""
        n = 0
        job = self.job
        if job is not None and job.held is not None:
            if now < job.due_ns:
                return 0
            req, job.held = job.held, None
            self.job = None
            res = self._write(job, req, now)
            if res is None:
                return 0
            self._drive(job, res, now)
        elif job is not None:
            sock = self.conn.sock
            res = self.client.read_answer(self.conn, job.request, job.deadline_ns, now, sock in readable((sock,)))
            if res is None:
                return 0
            self.job = None
            n = 1
            if self.budget is not None and res.code == rest.CODE_RATE_LIMIT:
                self.budget.drain(job.request.path, now)
            self._drive(job, res, now)
        while self.job is None and self.jobs:
            self._drive(self.jobs.popleft(), None, now)
        return n

    def _write(self, job: LaneJob, req: rest.Request, now: int) -> Result | None:
        """Write ``req`` for ``job`` once its endpoint's budget has a token (else hold it until one is
        due): None while in flight or held (``job`` runs), else the failure's Result."""
        budget = self.budget
        if budget is not None and not budget.take(req.path, now):
            job.held, job.request, job.due_ns = req, None, budget.ready_at(req.path, now)
            self.stats["pace_wait"] = self.stats.get("pace_wait", 0) + 1
            self.job = job
            return None
        res = self.client.send(self.conn, req)
        if res is None:
            job.request, job.deadline_ns = req, now + self.timeout_ns
            self.job = job
        return res

    def _drive(self, job: LaneJob, res: Result | None, now: int) -> None:
        """Send ``res`` into the job's generator (None: start it) and write the request it yields; a
        request that cannot be written is answered with its failure at once. A job that raises (a
        bug) is ended as if it had returned: counted, logged, its callbacks run (an order query's
        frees the order for the next one), and the lane goes on."""
        gen = job.gen
        while True:
            try:
                req = next(gen) if res is None else gen.send(res)
            except StopIteration:
                break
            except Exception as exc:
                self.stats["errors"] = self.stats.get("errors", 0) + 1
                self.log.error("sender_lane_job_failed", kind=job.kind, error=f"{type(exc).__name__}: {exc}"[:300])
                break
            res = self._write(job, req, now)
            if res is None:
                return
        for then in job.thens:
            then()

    def run_sync(self, gen: RequestGen):
        """Drive ``gen`` to its end, waiting for each answer (reconciliation, while no job runs), and
        before each request for its endpoint's token (once: then it is sent); its return value."""
        try:
            req = next(gen)
            while True:
                self._pace_sync(req)
                res = self.client.call(self.conn, req)
                if self.budget is not None and res.code == rest.CODE_RATE_LIMIT:
                    self.budget.drain(req.path, self.clock())
                req = gen.send(res)
        except StopIteration as stop:
            return stop.value

    def _pace_sync(self, req: rest.Request) -> None:
        """Wait (``sleep``) until the token of ``req``'s endpoint is due and take it."""
        budget = self.budget
        if budget is None:
            return
        path, now = req.path, self.clock()
        if not budget.take(path, now):
            self.stats["pace_wait"] = self.stats.get("pace_wait", 0) + 1
            self.sleep((budget.ready_at(path, now) - now) / 1e9)
            budget.take(path, self.clock())
