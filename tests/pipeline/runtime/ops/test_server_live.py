"""The ops server in front of the real pipeline (every stage against the paper venue, under the real
supervisor), one run shared by the tests of this module:

- ``/metrics`` scraped during the run and parsed with prometheus-client's parser: every family of
  issue #26 is there, and each one moves while the run goes through what moves it (orders and fills
  flowing, some denied by a low order rate limit; the venue's timed sequence gaps, bad checksums and
  disconnects; a consumer stopped until its drop ring overflows, with a slot of it corrupted; the
  order sender stopped until its backpressure ring is full; the LLM stage restarted, then answering
  garbage through the chaos bench's fault switch (``bench.chaos.llm_faults``), which opens its breaker);
- the dashboard in a real browser (Debian's headless Chromium over the DevTools protocol): live
  numbers, a screenshot, a halt cancelled at the confirmation, then a confirmed halt that takes the
  risk gateway to HALTED;
- nothing the server serves holds the paper key or the operator token.

Without Chromium the browser test skips with the reason "chromium not installed" (.ci/run installs it).
Set ``SHMPIPE_DASHBOARD_SCREENSHOT=PATH`` to keep the screenshot there (docs/dashboard.png is made so).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import signal
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
from websockets.asyncio.client import connect

from bench.chaos.flow import FLOW_MODEL, orders_flow
from bench.chaos.harness import ChaosPipeline, wait_stopped
from bench.chaos.llm_faults import LlmFaultPlan, faulty_llm_hook
from bench.chaos.outage import books_channel
from bench.chaos.process import RingFile
from bench.chaos.rewrite import with_ring_capacity
from pipeline.runtime.ops.tokenfile import generate_token_file, read_token
from tests.support.cdp import SKIP_REASON, Chromium, chromium_path
from tests.support.ops import free_port, scrape

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

#: the venue's timed faults (s of market time; never at the same moment within the run)
VENUE_FAULTS = {"gap_every_s": 1.3, "bad_checksum_every_s": 1.7, "disconnect_every_s": 4.1}
#: the risk gateway's limits changed from the bench's: an order rate limit below the LEAN signals' rate
#: (some orders are denied: RATE), and positions of tens of lots (a lot is 0.0001 BTC: one lot's P&L
#: would stay under the cent the risk stage rounds it to)
LIMITS = {"max_orders_per_s": 2, "lean_lots": 50, "max_position_lots": 200}
#: issue #26's families: each must be present and move during the run
MUST_MOVE = (
    "shmpipe_stage_state", "shmpipe_stage_restarts", "shmpipe_stage_heartbeat_age_seconds", "shmpipe_stage_messages",
    "shmpipe_stage_cpu_seconds", "shmpipe_stage_latency_window_seconds", "shmpipe_stage_latency_seconds",
    "shmpipe_ring_depth_messages", "shmpipe_ring_written", "shmpipe_ring_dropped", "shmpipe_ring_crc_errors",
    "shmpipe_ring_full_events", "shmpipe_ring_stall_seconds",
    "shmpipe_risk_denials", "shmpipe_llm_generations", "shmpipe_llm_breaker_state", "shmpipe_llm_breaker_score",
    "shmpipe_orders", "shmpipe_fills", "shmpipe_position_lots", "shmpipe_net_pnl",
    "shmpipe_feed_checksum_failures", "shmpipe_feed_resyncs", "shmpipe_feed_reconnects",
    "shmpipe_feed_clock_skew_seconds",
)
#: the rest of what /metrics serves: present (they move only when something rare happens)
PRESENT = ("shmpipe_stage_errors", "shmpipe_ring_capacity_messages", "shmpipe_trading_halted", "shmpipe_risk_state",
           "shmpipe_risk_approvals", "shmpipe_risk_open_orders", "shmpipe_llm_generations_started",
           "shmpipe_llm_signals_dropped", "shmpipe_orders_open", "shmpipe_feed_seq_gaps", "shmpipe_ops_requests_refused",
           "shmpipe_latency_guard_state", "shmpipe_latency_guard_trips")


@dataclass
class Live:
    p: ChaosPipeline
    port: int
    token: str
    token_file: Path
    llm_fault_file: Path


def _config_hook(port: int, token_file: Path, llm_fault_file: Path):
    llm = faulty_llm_hook(llm_fault_file, 10, LlmFaultPlan.of(quick=True))  # the LLM's faults, switched by a file

    def hook(text: str) -> str:
        text = orders_flow(books_channel(text))  # orders and fills flowing; checksummed book updates
        for key, v in LIMITS.items():
            text, n = re.subn(rf"(limits = \{{[^}}]*{key} = )[0-9.]+", rf"\g<1>{v}", text, count=1)
            assert n == 1, f"the risk limits no longer have {key}"
        text = with_ring_capacity(text, "md", 256)  # a stopped consumer overflows it: drops
        text = with_ring_capacity(text, "orders", 2)  # a stopped sender fills it: full events, stall time
        text = llm(text)
        return text.replace("[supervisor]\n", f'[supervisor]\nops_port = {port}\nops_token_file = "{token_file}"\n', 1)
    return hook


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ops")
    token_file, fault_file = folder / "ops.token", folder / "llm.fault"
    generate_token_file(token_file)
    fault_file.write_text("normal")
    port = free_port()
    with ChaosPipeline(rate=1_000, model=FLOW_MODEL, venue=VENUE_FAULTS,
                       text_hook=_config_hook(port, token_file, fault_file), name="ops_live") as p:
        yield Live(p, port, read_token(token_file), token_file, fault_file)


class Scraper:
    """Scrapes /metrics every ``interval_s`` in a thread, keeping every parsed scrape."""

    def __init__(self, port: int, interval_s: float = 0.03):
        self.port, self.interval_s = port, interval_s
        self.scrapes: list[dict] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.scrapes.append(scrape(self.port))
            except (OSError, urllib.error.URLError, ValueError) as exc:
                self.errors.append(str(exc))
            self._stop.wait(self.interval_s)

    def __enter__(self) -> "Scraper":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(10)

    def moved(self) -> set[str]:
        """The families in which some series took two different values across the scrapes so far."""
        values: dict[tuple, set] = {}
        for s in list(self.scrapes):
            for fam, samples in s.items():
                for key, v in samples.items():
                    values.setdefault((fam, key), set()).add(v)
        return {fam for (fam, _), vs in values.items() if len(vs) > 1}


def _stop_until(p: ChaosPipeline, stage: str, done, at_most_s: float, during=None) -> None:
    """SIGSTOP ``stage`` until ``done()`` or ``at_most_s`` (below the stage's heartbeat timeout), with
    ``during()`` run once 0.1 s into the stop, then SIGCONT."""
    pid = p.signal(stage, signal.SIGSTOP)
    try:
        wait_stopped(pid)
        deadline = time.monotonic() + at_most_s
        time.sleep(0.1)
        if during is not None:
            during()
        while not done() and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        os.kill(pid, signal.SIGCONT)


def _corrupt_an_unread_md_slot(p: ChaosPipeline) -> None:
    ring = RingFile(p.ring_segment("md"))
    try:
        assert ring.write_cursor > ring.read_cursor, "the stopped consumer left unread messages"
        ring.corrupt(ring.read_cursor, random.Random(26))
    finally:
        ring.close()


@pytest.mark.timeout(240)
def test_a_scrape_during_a_run_has_every_family_and_each_one_moves(live):
    first = scrape(live.port)
    assert set(MUST_MOVE + PRESENT) - set(first) == set(), "families missing from /metrics"
    with Scraper(live.port) as sc:
        p = live.p
        assert p.control("restart", name="llm")["ok"]
        p.wait(lambda: p.proc("llm")["state"] == "RUNNING" and p.proc("llm")["restarts"] >= 1, 60, "llm restarted")
        live.llm_fault_file.write_text("garbage")  # free text from the model: rejected answers; the breaker opens
        p.wait(lambda: p.stage("sender").get("fills", 0) >= 3, 40, "fills at the venue")
        dropped0 = p.ring("md")["dropped"]
        _stop_until(p, "features", lambda: p.ring("md")["dropped"] > dropped0, 1.5,
                    during=lambda: _corrupt_an_unread_md_slot(p))
        full0 = p.ring("orders")["full_events"]
        _stop_until(p, "sender", lambda: p.ring("orders")["full_events"] > full0, 3.0)
        deadline = time.monotonic() + 60
        while set(MUST_MOVE) - sc.moved() and time.monotonic() < deadline:
            time.sleep(0.2)
    assert set(MUST_MOVE) - sc.moved() == set(), f"did not move in {len(sc.scrapes)} scrapes (errors: {sc.errors[:3]})"
    last = sc.scrapes[-1]
    assert {f for f in PRESENT if not last[f]} == set(), "families without a series"
    assert max(v for (name, _), v in last["shmpipe_ring_crc_errors"].items()) >= 1
    assert sum(v for (_, labels), v in last["shmpipe_stage_restarts"].items() if ("stage", "llm") in labels) >= 1


def _page_get(port: int, path: str) -> bytes:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as resp:
        return resp.read()


def _ws_doc(port: int) -> bytes:
    async def one():
        async with connect(f"ws://127.0.0.1:{port}/ws", origin=f"http://127.0.0.1:{port}") as ws:
            return await asyncio.wait_for(ws.recv(), 10)
    return asyncio.run(one()).encode()


@pytest.mark.timeout(120)
def test_nothing_served_holds_the_paper_key_or_the_operator_token(live):
    key = json.loads(Path(live.p.cfg.process("sender").params["key_file"]).read_text())
    secrets = {"token": live.token, **{k: key[k] for k in ("api_key", "secret", "passphrase")}}
    served = {path: _page_get(live.port, path) for path in ("/metrics", "/", "/static/app.js")}
    try:
        _page_get(live.port, "/health")
    except urllib.error.HTTPError as exc:  # 503 while a stage restarts: its body all the same
        served["/health"] = exc.read()
    else:
        served["/health"] = _page_get(live.port, "/health")
    served["ws"] = _ws_doc(live.port)
    served["supervisor.log"] = (Path(live.p.cfg.supervisor.log_dir) / "supervisor.log").read_bytes()
    leaks = {(what, name) for what, body in served.items() for name, s in secrets.items() if s.encode() in body}
    assert leaks == set()


@pytest.mark.timeout(180)
@pytest.mark.skipif(chromium_path() is None, reason=SKIP_REASON)
def test_the_dashboard_in_a_real_browser_shows_live_numbers_and_a_confirmed_halt_stops_trading(live, tmp_path):
    browser = Chromium(tmp_path / "chromium")
    try:
        page = browser.new_page(f"http://127.0.0.1:{live.port}/")
        page.wait_for("document.getElementById('conn').textContent === 'live'", 30, "the page's WebSocket")
        feed_rate = ("(() => { const c = document.querySelector('[data-stage=\"feed\"] .out-rate');"
                     " const v = c ? parseFloat(c.textContent.replace(/,/g, '')) : NaN; return v > 0 ? v : null; })()")
        page.wait_for(feed_rate, 30, "a live message rate for the feed")
        page.wait_for("document.querySelectorAll('#graph [data-node]').length >= 7", 10, "the process graph")
        page.wait_for("document.querySelector('[data-stage=\"fast\"] polyline') !== null", 10, "a latency sparkline")
        before = page.evaluate("document.getElementById('risk-state').textContent")
        assert before in ("ACTIVE", "REDUCING"), before
        shot = page.screenshot()
        assert shot[:8] == b"\x89PNG\r\n\x1a\n" and len(shot) > 20_000
        (tmp_path / "dashboard.png").write_bytes(shot)
        if os.environ.get("SHMPIPE_DASHBOARD_SCREENSHOT"):
            Path(os.environ["SHMPIPE_DASHBOARD_SCREENSHOT"]).write_bytes(shot)

        page.type_text("#token", live.token)
        page.accept_dialogs = False  # the operator changes their mind at the confirmation
        page.click("#btn-halt")
        page.wait_for("document.getElementById('result').textContent.endsWith('cancelled')", 10, "the halt cancelled")
        time.sleep(1.5)  # a push or more later: still trading
        assert page.evaluate("document.getElementById('risk-state').textContent") == before
        assert live.p.stage("risk")["state"] == before

        page.accept_dialogs = True
        page.click("#btn-halt")
        page.wait_for("document.getElementById('result').textContent.includes('200 ok')", 15, "the halt answered")
        assert [d.split("?")[0] for d in page.dialogs] == [page.dialogs[0].split("?")[0]] * 2
        assert page.dialogs[0].startswith("Halt trading")
        page.wait_for("document.getElementById('risk-state').textContent === 'HALTED'", 15, "risk HALTED on the page")
        assert live.p.stage("risk")["state"] == "HALTED"
        assert page.console == [], page.console
    finally:
        browser.close()
        _resume(live)  # the module's pipeline is shared: the tests after this one (in any order) see it trading


def _resume(live: Live) -> None:
    """RESUME through the ops API (the operator's token) and wait until risk has left HALTED."""
    req = urllib.request.Request(f"http://127.0.0.1:{live.port}/api/resume", method="POST",
                                 headers={"Authorization": f"Bearer {live.token}"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 200, resp.status
    live.p.wait(lambda: live.p.stage("risk")["state"] != "HALTED", 15, "risk resumed after the dashboard's halt")
