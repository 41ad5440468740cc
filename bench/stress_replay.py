"""Stress from real sequences: a capture replayed through the whole pipeline with the documented noise.

``python -m bench.pipeline --stress --replay FILE [--speed K]`` (``bench.pipeline``) runs ``replay_plan``:
the paper venue replays ``FILE`` at its original timestamps times ``K`` while the real processes (feed,
features, fast, llm, risk, sender) trade against it, once clean and once per noise the venue can inject
into that source. Two sources (``detect_kind`` tells them apart by content; ``--replay-itch`` forces ITCH):

- ``BITGET``: a capture of Bitget WebSocket frames (cryptofeed line format, v1 or v2), served by the
  venue's ``source = "replay"`` (``capture``, ``speed``, ``loop = true``: a window longer than the
  capture starts it again) to ``procs.feed:BitgetFeedAgent``; the instruments are the capture's own,
  with the tick and lot sizes its prices and sizes show (``pipeline.venue.calibration.read_capture``).
- ``ITCH``: a NASDAQ TotalView-ITCH 5.0 BinaryFILE (``.gz`` too; ``SYNTHETIC_ITCH``: the venue's
  synthetic session), sent by the venue over MoldUDP64 (``itch_file``, ``itch_speed``) to
  ``procs.feed:ItchFeedAgent`` (gap recovery on), our orders matched against the replayed book
  (``itch_orders``), as ``configs/itch.toml`` wires it; the stocks are ``itch_stocks`` (instrument
  ``<STOCK>USDT``, $0.01 ticks, whole shares).

The noise (design document 000 section 4.3) and where each applies, ``NOISE`` (the report prints it):
a Gaussian delay of 0-50 ms per market-data frame (``DELAY_MEAN_MS``, ``DELAY_SD_MS``: the venue clips
the draw to [0, 50] ms and keeps the frames' order), drops of ``DROP_PROBS`` of the market-data packets,
price jumps of 1..``JUMP_TICKS`` ticks (the venue's ``jump_prob`` on a capture: per book event of an
instrument, ``JUMP_PROB``; ``itch_jump_prob`` on ITCH: per Add / Replace message, ``ITCH_JUMP_PROB``;
``pipeline.venue.jumps``) and drops of ``DROP_PROBS`` of the order requests (the bench's own fault,
``ORDER_DROP``: ``bench.stress_proxy`` between the sender and the venue, ``order_path``). The delay on
ITCH is the venue's ``itch_delay_ms`` / ``itch_delay_jitter_ms`` on every MoldUDP64 packet. What cannot
be injected into a source is not faked: the plan runs no scenario for it and the report says why
(``not_applied``; today every noise applies to both sources).

A scenario here is a ``bench.pipeline_config.Scenario`` whose ``faults`` are the venue's source and
noise params (``itch_file`` among them for ITCH); ``replay_config_text`` is its config.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

from bench import configtext as ct
from bench import report
from bench.pipeline_config import (KEY, RINGS, RISK_LIMITS, VENUE_RATE_LIMIT_PER_S, Scenario, fast_params,
                                   llm_process, model_path)
from bench.stress_proxy import lossy_order_path
from pipeline.venue.calibration import CalibrationError, read_capture
from pipeline.venue.orders import DEFAULT_MAX_AWAY_TICKS

BITGET, ITCH = "bitget", "itch"
#: ``--replay-itch synthetic``: the venue's synthetic ITCH session (no file needed)
SYNTHETIC_ITCH = "synthetic"
#: the synthetic session packs ~100,000 messages into a second of ITCH time: its default pace is 1/100
#: of that (configs/itch.toml's itch_speed); a recorded file's default is its own pace (1.0)
SYNTHETIC_ITCH_SPEED = 0.01
#: the ITCH stocks traded by default (two of the synthetic session's), stock -> instrument id
DEFAULT_ITCH_STOCKS = {"AAPL": 1, "MSFT": 2}

#: the Gaussian delay: N(mean, sd) per frame, clipped by the venue to [0, 50] ms
#: (pipeline.venue.faults.MAX_JITTER_DELAY_MS): about 95 % of the draws fall inside the range unclipped
DELAY_MEAN_MS = 25.0
DELAY_SD_MS = 12.5
#: the market-data drop probabilities: the ends of the documented 0.1-5 %
DROP_PROBS = (0.001, 0.05)
#: price jumps: 1..JUMP_TICKS ticks either way (the documented +-3), with JUMP_PROB per book event of a
#: capture's instrument (the shared capture: ~440 book events in its 30 s, so ~20 jumps a pass) and
#: ITCH_JUMP_PROB per Add / Replace message (the synthetic session: ~47,000 of them, ~90 jumps a pass)
JUMP_TICKS = 3
JUMP_PROB = 0.05
ITCH_JUMP_PROB = 0.002

#: the bench's own fault (not a venue param): each order request lost on its way to the venue with this
#: probability (``bench.stress_proxy``); the sender then reads the proxy's port from PROXY_PORT_FILE
ORDER_DROP = "order_drop_prob"
PROXY_PORT_FILE = "order-proxy.port"
#: the sender's journal, under the scenario's run folder (``bench.stress_report.order_outcomes`` reads it)
JOURNAL = "sender.journal"

#: noise -> {source: (applied?, how it is injected, or why it is not)}
NOISE = {
    "Gaussian delay 0-50 ms": {
        BITGET: (True, f"venue delay_ms {DELAY_MEAN_MS:g}, delay_jitter_ms {DELAY_SD_MS:g}: each WebSocket frame "
                       f"delayed by N({DELAY_MEAN_MS:g}, {DELAY_SD_MS:g}) ms clipped to [0, 50], order kept"),
        ITCH: (True, f"venue itch_delay_ms {DELAY_MEAN_MS:g}, itch_delay_jitter_ms {DELAY_SD_MS:g}: each MoldUDP64 "
                     f"packet delayed by N({DELAY_MEAN_MS:g}, {DELAY_SD_MS:g}) ms clipped to [0, 50], order kept"),
    },
    "market-data drops 0.1-5 %": {
        BITGET: (True, "venue drop_prob: each data push to the feed dropped (books15 snapshots: the next one "
                       "heals it; the 'books' channel's checksummed deltas: a checksum failure, then a resync)"),
        ITCH: (True, "venue itch_drop_prob: each MoldUDP64 data packet dropped on its first sending; the feed "
                     "re-requests the gap (BOOKs flagged rebuilding until it closes)"),
    },
    "price jumps within +-3 ticks": {
        BITGET: (True, f"venue jump_prob {JUMP_PROB:g}, jump_ticks {JUMP_TICKS}: before a book event of an "
                       "instrument, its later prices (book and trades) move by 1..3 ticks either way, the resting book "
                       "too; checksums of the shifted book (the 'books' channel checks them)"),
        ITCH: (True, f"venue itch_jump_prob {ITCH_JUMP_PROB:g}, itch_jump_ticks {JUMP_TICKS}: before an Add / Replace "
                     "message, its stock's later Add / Replace prices move by 1..3 $0.01 ticks either way, all its "
                     "new orders alike (orders resting from before keep their price)"),
    },
    "order-request drops 0.1-5 %": dict.fromkeys((BITGET, ITCH), (
        True, "bench.stress_proxy between the sender and the venue's REST API (order_drop_prob): each place / "
              "cancel request lost with that probability, never reaching the venue and never answered; the sender "
              "times out (timeout_ms 500), then its queries and reconciliation find what the venue holds")),
}


class ReplayError(ValueError):
    """A replay the bench cannot plan: an unknown kind, a speed not above 0, a missing file."""


def detect_kind(head: bytes) -> str:
    """The source kind of a file from its first bytes: gzip (an ITCH ``.gz``) or binary -> ``ITCH``;
    printable text (capture lines) -> ``BITGET``. An empty head is ``BITGET`` (the venue then says
    there is nothing to replay)."""
    if head.startswith(b"\x1f\x8b"):
        return ITCH
    return BITGET if all(32 <= b < 127 or b in (9, 10, 13) for b in head) else ITCH


def not_applied(kind: str) -> list[tuple[str, str]]:
    """(noise, why) for each documented noise the venue cannot inject into a ``kind`` source."""
    return [(noise, how[kind][1]) for noise, how in NOISE.items() if not how[kind][0]]


def replay_plan(kind: str, path: str, speed: float, seconds: float | None,
                stocks: dict[str, int] | None = None) -> list[Scenario]:
    """The scenarios of one replay of ``path`` (``kind``: ``BITGET`` or ``ITCH``; for ITCH ``path`` may
    be ``SYNTHETIC_ITCH``) at ``speed`` times its original pace, each measured ``seconds`` (default 5):
    clean with the shipped model, clean with the hand-set one, then each noise ``NOISE`` applies to
    ``kind`` with the hand-set model (the orders under the noise are what is judged; the shipped model
    sends few). Names: ``<kind>-<what>``.

    Raises:
        ReplayError: an unknown ``kind``, ``speed`` not above 0, or ``path`` not a file.
    """
    if kind not in (BITGET, ITCH):
        raise ReplayError(f"replay kind must be {BITGET!r} or {ITCH!r}, not {kind!r}")
    if not speed > 0:
        raise ReplayError(f"--speed must be above 0, not {speed!r}")
    synthetic = kind == ITCH and path == SYNTHETIC_ITCH
    if not synthetic and not Path(path).is_file():
        raise ReplayError(f"replay file {path!r} is not a file")
    s, h = seconds or 5.0, "hand-set"
    if kind == BITGET:
        base = {"source": "replay", "capture": str(Path(path).resolve()), "speed": speed, "loop": True}
        noisy = [("delay-gauss-0-50ms", {"delay_ms": DELAY_MEAN_MS, "delay_jitter_ms": DELAY_SD_MS}, ("books15", "trade"))]
        noisy += [(f"md-drop-{100 * p:g}pct", {"drop_prob": p}, ("books15", "trade")) for p in DROP_PROBS]
        noisy += [(f"md-drop-{100 * p:g}pct-books", {"drop_prob": p}, ("books", "trade")) for p in DROP_PROBS]
        noisy += [("price-jumps-3ticks-books", {"jump_prob": JUMP_PROB, "jump_ticks": JUMP_TICKS}, ("books", "trade"))]
    else:
        base = {"itch_file": "" if synthetic else str(Path(path).resolve()), "itch_speed": speed,
                "itch_stocks": dict(stocks or DEFAULT_ITCH_STOCKS)}
        noisy = [("delay-gauss-0-50ms", {"itch_delay_ms": DELAY_MEAN_MS, "itch_delay_jitter_ms": DELAY_SD_MS}, ())]
        noisy += [(f"md-drop-{100 * p:g}pct", {"itch_drop_prob": p}, ()) for p in DROP_PROBS]
        noisy += [("price-jumps-3ticks", {"itch_jump_prob": ITCH_JUMP_PROB, "itch_jump_ticks": JUMP_TICKS}, ())]
    noisy += [(f"order-drop-{100 * p:g}pct", {ORDER_DROP: p}, ()) for p in DROP_PROBS]
    plan = [Scenario(f"{kind}-clean", 0, seconds=s, faults=dict(base)),
            Scenario(f"{kind}-clean-hand-set", 0, seconds=s, model=h, faults=dict(base))]
    plan += [Scenario(f"{kind}-{name}", 0, seconds=s, model=h, faults={**base, **noise},
                      **({"channels": channels} if channels else {})) for name, noise, channels in noisy]
    return plan


def scenario_kind(sc: Scenario) -> str:
    """``ITCH`` when the scenario's venue replays ITCH (``itch_file`` among its faults), else ``BITGET``."""
    return ITCH if "itch_file" in sc.faults else BITGET


def noise_of(sc: Scenario) -> str:
    """The noise of a replay scenario in words: its venue params that are neither the source nor its pace."""
    base = {"source", "capture", "speed", "loop", "itch_file", "itch_speed", "itch_stocks"}
    noise = {k: v for k, v in sc.faults.items() if k not in base}
    return ", ".join(f"{k} {v:g}" for k, v in noise.items()) or "none"


def order_path(sc: Scenario, tmp: Path) -> AbstractContextManager:
    """The order path of scenario ``sc`` run in ``tmp`` (``bench.pipeline.run_scenario``'s ``side``):
    with ``ORDER_DROP`` among its faults, the lossy proxy (``bench.stress_proxy``) between the sender and
    the venue (the sender reads its port from ``PROXY_PORT_FILE``; its counters are the value); else
    nothing (the value is None)."""
    if ORDER_DROP not in sc.faults:
        return nullcontext(None)
    run = tmp / "run"
    return lossy_order_path(run / "venue.rest.port", run / PROXY_PORT_FILE, float(sc.faults[ORDER_DROP]))


def capture_instruments(path: str) -> list[str]:
    """The ``[[instruments]]`` blocks of a Bitget capture's symbols (sorted, ids from 1), each with the
    tick and lot sizes its prices and sizes show (``read_capture``).

    Raises:
        ReplayError: the capture cannot be read or holds no books.
    """
    try:
        recs = read_capture(path).instruments
    except CalibrationError as exc:
        raise ReplayError(str(exc)) from None
    if not recs:
        raise ReplayError(f"capture {path!r}: no books to replay")
    return [ct.instrument(id=i, symbol=r.symbol, venue="paper", tick_size=r.tick_size, lot_size=r.lot_size)
            for i, r in enumerate(sorted(recs.values(), key=lambda r: r.symbol), 1)]


def _place(sc: Scenario, name: str) -> str:
    return report.default_place(name) if sc.warm else ""


def _market_side(sc: Scenario, run: Path) -> tuple[str, str, list[str]]:
    """The venue and feed blocks and the instruments of a replay scenario (``scenario_kind``)."""
    venue = {"port": 0, "seed": 1, "port_file": str(run / "venue.port"), "rest_port_file": str(run / "venue.rest.port"),
             "key_file": str(KEY), "rate_limit_per_s": VENUE_RATE_LIMIT_PER_S, "max_away_ticks": DEFAULT_MAX_AWAY_TICKS,
             **{k: v for k, v in sc.faults.items() if k != ORDER_DROP}}
    if scenario_kind(sc) == BITGET:
        feed = ct.process("feed", "procs.feed:BitgetFeedAgent", _place(sc, "feed"), outputs=["md"], wait="back-off",
                          params={"port_file": str(run / "venue.port"), "channels": list(sc.channels)})
        venue_block = ct.process("venue", "procs.venue:VenueAgent", wait="back-off", params=venue)
        return venue_block, feed, capture_instruments(sc.faults["capture"])
    stocks = sc.faults["itch_stocks"]
    port_file = str(run / "feed.itch.port")
    # the venue's WebSocket market still runs (nothing subscribes): the calibrated one, a book every ~550 ms
    venue_block = ct.process("venue", "procs.venue:VenueAgent", wait="back-off",
                             params={**venue, "market": "calibrated", "itch_port_file": port_file, "itch_orders": True})
    feed = ct.process("feed", "procs.feed:ItchFeedAgent", _place(sc, "feed"), outputs=["md"], wait="back-off",
                      params={"port": 0, "port_file": port_file, "symbols": stocks})
    instruments = [ct.instrument(id=i, symbol=f"{s}USDT", venue="paper", tick_size=0.01, lot_size=1)
                   for s, i in sorted(stocks.items(), key=lambda kv: kv[1])]
    return venue_block, feed, instruments


def replay_config_text(sc: Scenario, tmp: Path, prefix: str) -> str:
    """The TOML config of replay scenario ``sc`` (run and log folders under ``tmp``, shm prefix
    ``prefix``): the venue replaying its source with its noise, the feed of that source, then
    features, fast, risk, sender (and llm) as ``bench.pipeline_config.config_text`` runs them.

    Raises:
        ReplayError: a Bitget capture that cannot be read (``capture_instruments``).
        ValueError: an unknown ``sc.model``.
    """
    run, logs = tmp / "run", tmp / "logs"
    supervisor = ct.supervisor(shm_prefix=prefix, run_dir=str(run), log_dir=str(logs), control_ring="control",
                               poll_interval_ms=10, heartbeat_interval_ms=100, stop_grace_ms=3000,
                               transport=sc.transport, launcher=sc.launcher)
    venue, feed, instruments = _market_side(sc, run)
    procs = [
        venue, feed,
        ct.process("features", "procs.features:FeatureAgent", _place(sc, "features"), inputs=["md"], outputs=["feat"]),
        ct.process("fast", "procs.fast:FastAgent", _place(sc, "fast"), inputs=["feat"],
                   outputs=["sig_risk", "sig_llm"] if sc.llm else ["sig_risk"], params=fast_params(model_path(sc, tmp))),
        ct.process("risk", "procs.risk:RiskAgent", _place(sc, "risk"), inputs=["control", "exec", "sig_risk", "instr"],
                   outputs=["orders", "pos"] if sc.llm else ["orders"],
                   params={"audit_path": str(logs / "risk_audit.jsonl"), "limits": RISK_LIMITS}),
        ct.process("sender", "procs.sender:SenderAgent", _place(sc, "sender"), inputs=["orders"], outputs=["exec"],
                   heartbeat_timeout_ms=5000,
                   params={"venue_port_file": str(run / (PROXY_PORT_FILE if ORDER_DROP in sc.faults else "venue.rest.port")),
                           "key_file": str(KEY),
                           "journal_path": str(run / JOURNAL), "rate_limit_per_s": 10000, "timeout_ms": 500,
                           "endpoint_rate_scale": VENUE_RATE_LIMIT_PER_S / 10.0}),
    ]
    if sc.llm:
        procs.append(llm_process(place=_place(sc, "llm")))
    return "\n" + ct.blocks(supervisor, *(ct.ring(*r) for r in RINGS), *procs, *instruments)

