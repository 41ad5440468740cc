"""The fast stage's input-range guard against the real pipeline (issue #36): run by ``bench.chaos`` and
``tests/chaos``.

``input_range_guard``: the market at 1,000 updates/s, orders flowing as in ``sigkill_each``
(``orders_flow``: GTC lean quotes near the mid), no llm stage, the fast stage running the hand-set model
(``bench.pipeline_config.write_bench_model``: LEAN_BUY when ``F_IMBALANCE_5`` is above about +0.31,
LEAN_SELL below about -0.31, else HOLD) with its card's input bounds narrowed on that one slot to
[-``BOUND``, +``BOUND``] (every other slot: any finite value). Every row the model would lean on is
then outside the range its card vouches for, as a market that left a model's training range: the
guard (``procs.fast``: such a row is HOLD with ``SIGNAL_FLAG_OUT_OF_RANGE``) must hold every one.
For ``hold_s`` (quick 5 s, full 20 s) after the pipeline is up: the fast stage counts out-of-range rows
(at least ``MIN_OOR``, else INCONCLUSIVE: the market did not leave the range, the guard was not tried),
says no LEAN (its ``lean_buy`` and ``lean_sell`` counters stay 0), and the risk gateway approves no
order (its audit log: no ``OrderApproved``). The same run without the guard leans and trades
(``make chaos-sabotage``).
"""

from __future__ import annotations

import re
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.chaos.flow import FLOW_MODEL, orders_flow
from bench.chaos.harness import INCONCLUSIVE, Row, judged_row, read_audit
from bench.pipeline_config import write_bench_model
from pipeline.trading.features import F_IMBALANCE_5
from pipeline.trading.model.decide import InputBounds

#: the hand-set model's card bounds on F_IMBALANCE_5 (it leans only beyond about +-0.31)
BOUND = 0.3
#: out-of-range rows a run must see for its verdict to mean anything (the guard tried that often)
MIN_OOR = 50
#: the checks that guard money, by name (``make chaos-sabotage`` requires each to fail without the guard)
NO_LEAN_CHECK = "every out-of-range row held: no LEAN signal"
NO_ORDER_CHECK = "no order approved from an out-of-range row (risk's audit log: no OrderApproved)"
_FAST_PARAMS = re.compile(r'(module = "procs\.fast:FastAgent"\n(?:[^\n]*\n)*?params = \{[^\n]*?model_path = )"[^"]*"')


def narrow_model(path: Path, bound: float = BOUND) -> Path:
    """The hand-set model written to ``path`` with its card's bounds on ``F_IMBALANCE_5`` narrowed to
    [-``bound``, +``bound``]."""
    b = InputBounds.unbounded()
    lo, hi = b.lo.copy(), b.hi.copy()
    lo[F_IMBALANCE_5], hi[F_IMBALANCE_5] = -bound, bound
    return write_bench_model(path, bounds=InputBounds(lo.astype(np.float32), hi.astype(np.float32)))


def guard_config(model: Path):
    """Config hook: orders flowing (``orders_flow``), the fast stage running ``model``.

    Raises:
        ValueError: no fast stage ``model_path`` in the text."""
    def hook(text: str) -> str:
        new, k = _FAST_PARAMS.subn(lambda m: f'{m.group(1)}"{model}"', orders_flow(text), count=1)
        if k != 1:
            raise ValueError("the fast stage's model_path not found in the config text")
        return new
    return hook


def input_range_guard(P, quick: bool) -> Row:
    hold_s = 5.0 if quick else 20.0
    with tempfile.TemporaryDirectory(prefix="chaos-guard-") as d:
        model = narrow_model(Path(d) / "narrow.onnx")
        with P(rate=1_000, llm=False, name="input_range_guard", text_hook=guard_config(model), model=FLOW_MODEL) as p:
            time.sleep(hold_s)
            fast, risk = dict(p.stage("fast")), dict(p.stage("risk"))
            approved = [e for e in read_audit(p) if e.get("ev") == "OrderApproved"]
    oor, leans = fast.get("out_of_range", 0), fast.get("lean_buy", 0) + fast.get("lean_sell", 0)
    checks = {NO_LEAN_CHECK: leans == 0, NO_ORDER_CHECK: not approved}
    figure = (f"{oor} out-of-range rows of {fast.get('signals', 0)} (worst slot {fast.get('oor_slot') or '-'}), "
              f"{leans} LEAN, {len(approved)} orders approved")
    details = {"fast": {k: fast.get(k) for k in ("signals", "hold", "lean_buy", "lean_sell", "out_of_range", "oor_slot")},
               "approved": len(approved), "risk_approved": risk.get("approved"), "prefix": p.prefix}
    injected = (f"the fast stage's model card bounds on F_IMBALANCE_5 narrowed to [-{BOUND:g}, +{BOUND:g}] (the hand-set "
                f"model leans only beyond about +-0.31), 1,000 updates/s for {hold_s:g} s, GTC lean quotes (orders_flow)")
    did = (f"fast: {fast.get('signals', 0)} SIGNALs, {oor} held out of range, LEAN_BUY {fast.get('lean_buy', 0)} / "
           f"LEAN_SELL {fast.get('lean_sell', 0)}; risk approved {len(approved)} orders (audit log)")
    if oor < MIN_OOR and all(checks.values()):
        return Row(scenario="input_range_guard", injected=injected, did=did, verdict=INCONCLUSIVE,
                   figure=f"{figure}: fewer than {MIN_OOR} rows out of range, the guard hardly tried",
                   details={"checks": checks, **details})
    checks[f"rows out of range met (>= {MIN_OOR})"] = oor >= MIN_OOR
    return judged_row("input_range_guard", checks, injected=injected, did=did, figure=figure, details=details)
