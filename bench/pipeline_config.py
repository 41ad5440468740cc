"""The pipeline bench's scenario and its config: ``Scenario`` (rate, instruments, transport, placement,
model, venue faults), the classifier files it runs (``model_path``: the shipped model or the hand-set
one, ``write_bench_model``), and ``config_text``: the whole graph of ``configs/default.toml`` (venue,
feed, features, fast, llm, risk, sender) as TOML, built from tables (``bench.configtext``)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bench import configtext as ct
from bench import report
from pipeline.venue.orders import DEFAULT_MAX_AWAY_TICKS

REPO = Path(__file__).resolve().parents[1]
MODEL = REPO / "models" / "generated" / "fast.onnx"
TINY = REPO / "models" / "generated" / "tiny.gguf"
KEY = REPO / "secrets" / "paper.json"

#: Scenario.model: what each name runs and how the report names it
MODELS = {"shipped": "shipped model (make model)", "hand-set": "hand-set MLP (bench only, not shipped)"}
HAND_SET_FILE = "bench-model.onnx"  # written into the scenario's temp folder by write_bench_model


@dataclass
class Scenario:
    name: str
    rate: int = 1_000  # book updates per second offered by the venue (all instruments together)
    instruments: int = 1
    transport: str = "ring"
    seconds: float = 5.0
    llm: bool = True
    faults: dict = field(default_factory=dict)  # venue params (stress)
    channels: tuple = ("books15", "trade")  # the feed's subscriptions ("books": snapshot + checksummed updates)
    spin: tuple = ()  # processes pinned to cores 0, 1, ... in this order, busy-spinning with keep_warm_us = 200
    warm: bool = True  # the default config's keep_warm_us on the processes it gives one (not spinning ones)
    launcher: str = "fork-server"  # supervisor.launcher: stages forked from the fork server, or each exec'd
    model: str = "shipped"  # the fast stage's classifier: a key of MODELS
    source: str = "synthetic"  # the venue's market source: "synthetic" (the model, live) or "encoded" (its
    #                            frames built before the window and looped: the venue's CPU stays small)


# ------------------------------------------------------------------------------------- models
def write_bench_model(path: Path, bounds=None) -> Path:
    """The bench's classifier: the default model's architecture and size (MLP 128-32-4, the same ONNX
    graph), so inference costs the same, with weights set by hand so its labels follow the 5-level
    book imbalance whatever the market's time scale: LEAN_BUY above +0.3, LEAN_SELL below -0.3, else
    HOLD; never EMERGENCY. The trained default model, fed a venue stepping every millisecond (hundreds
    of times faster than the calibrated market it learnt from), meets inputs outside its card's bounds
    and says HOLD (out of range) on every update, which would leave no orders to time. Its model card (``pipeline.trading.model.card``, kind ``hand-set``) is in the ONNX
    metadata and beside it, so the fast stage accepts it. ``bounds`` (``InputBounds``): its card's input
    bounds (default: every finite float32)."""
    from pipeline.trading.features import F_IMBALANCE_5
    from pipeline.trading.model import Model, to_onnx
    from pipeline.trading.model.card import hand_made_card, write_card

    hidden = 32
    w1, b1 = np.zeros((128, hidden)), np.zeros(hidden)
    w2, b2 = np.zeros((hidden, 4)), np.array([1.0, 0.0, 0.0, -20.0])
    w1[F_IMBALANCE_5, 0], w1[F_IMBALANCE_5, 1] = 20.0, -20.0  # h0 = relu(20 imb), h1 = relu(-20 imb)
    b1[0] = b1[1] = -6.0  # |imb| must pass 0.3 before a lean logit rises above HOLD's
    w2[0, 1], w2[1, 2] = 4.0, 4.0
    card = hand_made_card("hand-set", "bench only, not shipped: LEAN_BUY when F_IMBALANCE_5 > +0.3, LEAN_SELL "
                          "below -0.3, else HOLD; never EMERGENCY (bench.pipeline_config.write_bench_model)",
                          bounds=bounds)
    path.parent.mkdir(parents=True, exist_ok=True)
    model = Model(w1, b1, w2, b2, {"bench_model": "imbalance-following"})
    path.write_bytes(to_onnx(model, card=card).SerializeToString())
    write_card(path, card)  # beside it: <stem>.card.json (the fast stage checks both)
    return path


def model_path(sc: Scenario, tmp: Path) -> Path:
    """The classifier file scenario ``sc`` runs: the shipped ``MODEL``, or the hand-set one written
    into ``tmp``.

    Raises:
        ValueError: an unknown ``sc.model``.
    """
    if sc.model == "shipped":
        return MODEL
    if sc.model == "hand-set":
        return write_bench_model(tmp / HAND_SET_FILE)
    raise ValueError(f"{sc.name}: model must be one of {sorted(MODELS)}, not {sc.model!r}")


def model_info(kind: str, path: Path) -> dict:
    """What names a model in the report: kind, path (repo-relative where it can be), sha256 (12 hex
    digits; the fast stage logs the first 8) and a one-line label."""
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:12] if path.is_file() else "missing"
    try:
        shown = str(path.resolve().relative_to(REPO))
    except ValueError:
        shown = f"<scenario temp dir>/{path.name}" if kind == "hand-set" else str(path)
    return {"kind": kind, "path": shown, "sha256": digest, "label": f"{MODELS.get(kind, kind)} {shown} sha256 {digest}"}


def _instruments(n: int) -> list[str]:
    """``n`` ``[[instruments]]`` blocks: BTCUSDT, ETHUSDT, then SYN02USDT, SYN03USDT..."""
    out = []
    for i in range(n):
        sym = ["BTCUSDT", "ETHUSDT"][i] if i < 2 else f"SYN{i:02d}USDT"
        tick, lot = ((0.1, 0.0001), (0.01, 0.001))[i] if i < 2 else (0.01, 0.01)
        out.append(ct.instrument(id=i + 1, symbol=sym, venue="paper", tick_size=tick, lot_size=lot))
    return out


def venue_pacing(rate: int, instruments: int) -> tuple[int, float]:
    """(step_ms, speed) of the synthetic venue for ``rate`` book updates a second over ``instruments``:
    one update per instrument per step; steps under 1 ms run the market clock faster instead."""
    step_ms = max(1, round(1000 * instruments / rate))
    speed = rate * step_ms / (1000 * instruments)
    return step_ms, speed


# ------------------------------------------------------------------------------------- config
#: the bench's rings: (name, max_payload_bytes, capacity, full_policy)
RINGS = (
    ("md", 512, 16384, "drop"),
    ("feat", 560, 8192, "drop"),
    ("sig_risk", 64, 8192, "drop"),
    ("sig_llm", 576, 1024, "drop"),
    ("pos", 24, 1024, "drop"),
    ("instr", 128, 1024, "backpressure"),
    ("orders", 128, 4096, "backpressure"),
    ("exec", 128, 4096, "backpressure"),
    ("control", 16, 64, "backpressure"),
)

#: the risk gateway's limits in the bench: fast-path quoting on (``lean_lots = 1``), IOC orders away from
#: the touch (half the spread or more from the mid, ``risk_aversion = 2``, the most it may be, and 20 ticks
#: further, ``lean_offset_ticks``: passive, never crossing, so never filled), throttled to 100 orders a
#: second (the module docstring of bench.pipeline)
RISK_LIMITS = {"lean_lots": 1, "lean_offset_ticks": 20, "tif": "IOC", "risk_aversion": 2.0, "max_position_lots": 20,
               "collar_bps": 200.0, "max_orders_per_s": 100, "max_open_orders": 50, "max_notional": 1000000.0,
               "max_gross_notional": 10000000.0, "max_notional_per_min": 100000000.0, "daily_loss_limit": 1000000.0,
               "min_notional": 0.0}

#: the LLM hub's params in the bench scenarios: the tiny stand-in (its load on the machine is not a real
#: model's; the isolation measurement, ``bench.pipeline_isolation``, runs the real one), its ttl 250 ms and
#: at most one instruction a second, so a live LLM plan (which takes precedence over lean quoting) leaves
#: the fast path most of each second: with 200 ms between instructions the tiny model's plans overlapped
#: and no fast-path order left in a whole window
LLM_PARAMS = {"model_path": str(TINY), "n_ctx": 2048, "max_tokens": 64, "deadline_ms": 500, "min_gap_ms": 1000,
              "ttl_ms": 250}


def llm_process(module: str = "procs.llm:LlmAgent", *, place: str = "", nice: int = 10,
                ready_timeout_ms: int | None = None, **params) -> str:
    """The llm stage's ``[[processes]]`` block: ``module`` on sig_llm and pos -> instr, placed by ``place``,
    backing off, at ``nice``, given ``ready_timeout_ms`` to start when not None (a real model loading at
    nice 10 beside a busy fast path takes a while), with ``LLM_PARAMS`` updated by ``params`` (new keys
    after them, in order)."""
    extra = {} if ready_timeout_ms is None else {"ready_timeout_ms": ready_timeout_ms}
    return ct.process("llm", module, place, inputs=["sig_llm", "pos"], outputs=["instr"], wait="back-off", nice=nice,
                      **extra, params={**LLM_PARAMS, **params})


#: market time an encoded venue's frames cover before they loop
ENCODED_LOOP_MS = 2_000


#: the bench venue's place-order rate limit (every endpoint's documented one scaled alike: 1000 x)
VENUE_RATE_LIMIT_PER_S = 10_000.0


def venue_params(sc: Scenario, run: Path) -> dict:
    """The paper venue's params for ``sc``: the pacing of its rate, its port files, the key, ``sc.faults``,
    and for an encoded source (``sc.source``) its units (``ENCODED_LOOP_MS`` of market time) and channels."""
    step_ms, speed = venue_pacing(sc.rate, sc.instruments)
    encoded = {}
    if sc.source == "encoded":
        encoded = {"source": "encoded", "encoded_units": max(ENCODED_LOOP_MS // step_ms, 10),
                   "encoded_channels": list(sc.channels)}
    return {**encoded, "port": 0, "seed": 1, "step_ms": step_ms, "speed": speed, "port_file": str(run / "venue.port"),
            "rest_port_file": str(run / "venue.rest.port"), "key_file": str(KEY),
            "rate_limit_per_s": VENUE_RATE_LIMIT_PER_S,
            "max_away_ticks": DEFAULT_MAX_AWAY_TICKS,  # the venue's own rule (VALIDITY_RULE), said explicitly
            **sc.faults}


def _place(sc: Scenario, name: str) -> str:
    """Process ``name``'s placement lines in ``sc``: spinning on its core when ``sc.spin`` names it,
    else the default config's keep-warm when ``sc.warm``, else none."""
    if name in sc.spin:
        return report.spin_place(sc.spin.index(name))
    return report.default_place(name) if sc.warm else ""


def fast_params(model: Path) -> dict:
    """The fast stage's params for ``model``: on the CPU, with the thresholds its model card chose (the
    shipped model's, as ``make up`` applies them); a card without thresholds (the hand-set model's)
    leaves the stage's defaults."""
    from pipeline.trading.model.card import check_card

    params: dict = {"model_path": str(model), "providers": "cpu"}
    th = check_card(model).get("thresholds")
    if isinstance(th, dict):
        params["thresholds"] = {k: float(th[k]) for k in ("buy", "sell", "emergency", "side") if k in th}
    return params


def config_text(sc: Scenario, tmp: Path, prefix: str) -> str:
    """The TOML config of scenario ``sc``: run and log folders under ``tmp``, shm prefix ``prefix``.

    Raises:
        ValueError: an unknown ``sc.model`` (``model_path``).
    """
    run, logs = tmp / "run", tmp / "logs"
    supervisor = ct.supervisor(shm_prefix=prefix, run_dir=str(run), log_dir=str(logs), control_ring="control",
                               poll_interval_ms=10, heartbeat_interval_ms=100, stop_grace_ms=3000,
                               transport=sc.transport, launcher=sc.launcher)
    procs = [
        ct.process("venue", "procs.venue:VenueAgent", wait="back-off", params=venue_params(sc, run)),
        ct.process("feed", "procs.feed:BitgetFeedAgent", _place(sc, "feed"), outputs=["md"], wait="back-off",
                   params={"port_file": str(run / "venue.port"), "channels": list(sc.channels)}),
        ct.process("features", "procs.features:FeatureAgent", _place(sc, "features"), inputs=["md"], outputs=["feat"]),
        # no slow path: fast writes sig_risk only; nothing writes instr (risk still reads it)
        ct.process("fast", "procs.fast:FastAgent", _place(sc, "fast"), inputs=["feat"],
                   outputs=["sig_risk", "sig_llm"] if sc.llm else ["sig_risk"],
                   params=fast_params(model_path(sc, tmp))),
        ct.process("risk", "procs.risk:RiskAgent", _place(sc, "risk"), inputs=["control", "exec", "sig_risk", "instr"],
                   outputs=["orders", "pos"] if sc.llm else ["orders"],
                   params={"audit_path": str(logs / "risk_audit.jsonl"), "limits": RISK_LIMITS}),
        ct.process("sender", "procs.sender:SenderAgent", _place(sc, "sender"), inputs=["orders"], outputs=["exec"],
                   heartbeat_timeout_ms=5000,
                   params={"venue_port_file": str(run / "venue.rest.port"), "key_file": str(KEY),
                           "journal_path": str(run / "sender.journal"), "rate_limit_per_s": 10000, "timeout_ms": 500,
                           # the lane's per-endpoint budget raised as the venue's limits are
                           "endpoint_rate_scale": VENUE_RATE_LIMIT_PER_S / 10.0}),
    ]
    if sc.llm:
        procs.append(llm_process(place=_place(sc, "llm")))
    return "\n" + ct.blocks(supervisor, *(ct.ring(*r) for r in RINGS), *procs, *_instruments(sc.instruments))
