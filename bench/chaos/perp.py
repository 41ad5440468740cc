"""The pipeline on USDT-FUTURES perpetuals (issue #25): run by ``bench.chaos`` and ``tests/chaos``.

Both scenarios run the chaos pipeline with ``configs/perp.toml``'s ``[[instruments]]`` in place of the
bench's (``perp_instruments``: the same symbols as perpetuals, a lot of one contract), so the order
sender speaks the mix endpoints, the paper venue matches and keeps the perpetual's position, and the
risk gateway counts contracts. Orders flow with ``bench.chaos.flow.orders_flow`` (GTC lean quotes near
the mid, repriced and cancelled by the gateway as the mid moves).

- ``perp_flow``: orders flowing (at least ``MIN_ORDERS`` sent and ``MIN_FILLS`` filled, within
  ``FLOW_WAIT_S``), then a ``halt`` and settling: orders placed at the venue on a perpetual, filled,
  cancelled (the sender's ``cancels``), every venue fill journaled, none unresolved, no clientOid used
  twice, every NEW order the risk gateway approved journaled or refused (``flow.order_ledger``), and the venue's (all-position), the journal's and the gateway's positions equal in whole
  contracts.
- ``machine_crash_sender_perp``: ``bench.chaos.position.machine_crash_sender`` (the sender SIGKILLed at
  a place with its journal cut to the last fsync'd length, restarted, the venue's orders adopted; 0
  duplicated, 0 lost, positions equal) on the perpetuals.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

from bench.chaos.flow import (FLOW_MODEL, FLOW_WAIT_S, LOST_CHECK, MIN_FILLS, MIN_ORDERS, flowing, ledger_entry,
                              ledger_problems, ledger_text, order_ledger, orders_flow, quiesce, reconcile)
from bench.chaos.harness import Row, judged_row
from bench.chaos.position import machine_crash_sender
from pipeline.runtime.config import load_config

PERP_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "perp.toml"
_INSTRUMENT_BLOCK = re.compile(r"^\[\[instruments\]\]\n(?:(?!\[)[^\n]*\n?)*", re.M)
#: the Bitget feed's params table, to which the perpetuals' instType is added
_FEED_PARAMS = re.compile(r'(module = "procs\.feed:BitgetFeedAgent"\n(?:[^\[\n][^\n]*\n)*?params = \{ )')


def perp_instruments(text: str, source: Path = PERP_CONFIG) -> str:
    """The config text with its ``[[instruments]]`` blocks replaced by those of ``source``
    (``configs/perp.toml``), written out from its parsed instruments, so both name the same fields, and
    the Bitget feed subscribing as ``inst_type = "USDT-FUTURES"`` (the venue publishes a perpetual under
    that instType only).

    Raises:
        ValueError: the text has no instruments block. ConfigError: ``source`` does not load.
    """
    blocks = list(_INSTRUMENT_BLOCK.finditer(text))
    if not blocks:
        raise ValueError("no [[instruments]] block in the config text")
    out = []
    for i in load_config(source).instruments:
        out.append("[[instruments]]\n" + "".join(
            f"{k} = {v!r}\n" if not isinstance(v, str) else f'{k} = "{v}"\n'
            for k, v in (("id", i.id), ("symbol", i.symbol), ("venue", i.venue), ("product_type", i.product_type),
                         ("contract_size", i.contract_size), ("tick_size", i.tick_size), ("lot_size", i.lot_size),
                         ("margin_coin", i.margin_coin), ("margin_mode", i.margin_mode))))
    start, end = blocks[0].start(), blocks[-1].end()
    text = text[:start] + "\n".join(out) + text[end:]
    return _FEED_PARAMS.sub(r'\1inst_type = "USDT-FUTURES", ', text, count=1)


def _with_perps(P):
    """The pipeline factory ``P`` with ``perp_instruments`` applied after the scenario's own hook."""
    def factory(**kw):
        hook = kw.pop("text_hook", None)
        return P(**kw, text_hook=lambda t: perp_instruments(hook(t) if hook else t))
    return factory


def perp_flow(P, quick: bool) -> Row:
    """See the module docstring."""
    with _with_perps(P)(rate=1_000, name="perp_flow", text_hook=orders_flow, model=FLOW_MODEL) as p:
        flowing(p, FLOW_WAIT_S)
        if not quick:
            time.sleep(10.0)
        sender = p.stage("sender")
        perps = [i.symbol for i in p.cfg.instruments if i.perpetual]
        settled = quiesce(p)
        led = reconcile(p)
        news = order_ledger(p)
    checks = {"the instruments are perpetuals": bool(perps) and len(perps) == len(p.cfg.instruments),
              f"orders placed at the venue (>= {MIN_ORDERS})": led["venue_placed"] >= MIN_ORDERS,
              f"fills (>= {MIN_FILLS}), every venue fill journaled":
                  led["journal_fills"] >= MIN_FILLS and led["journal_fills"] == led["venue_fills"],
              "orders cancelled": sender.get("cancels", 0) >= 1,
              "settled after halt": settled,
              LOST_CHECK: not ledger_problems(news),
              "0 duplicated (no clientOid refused), 0 unresolved": led["dup_coid"] == 0 and led["unresolved"] == 0
              and led["coids_unique"],
              "positions equal in whole contracts (venue, journal, risk)": led["position_diff_lots"] == 0}
    pos = "; ".join(f"{s}: venue {v['venue']:g} journal {v['journal']:g} risk {v['risk']:g}"
                    for s, v in led["positions"].items())
    return judged_row(
        "perp_flow", checks, injected=f"orders flowing on the perpetuals {perps} (configs/perp.toml)",
        did=(f"venue placed {led['venue_placed']}, fills {led['venue_fills']} (journaled {led['journal_fills']}), "
             f"cancels {sender.get('cancels', 0)}, unresolved {led['unresolved']}; {ledger_text(news)}; {pos}"),
        figure=f"{led['venue_placed']} placed, {led['venue_fills']} fills; position diff {led['position_diff_lots']} lots",
        details={"ledger": led, "news": news, "orders_ledger": [ledger_entry("", news)],
                 "sender": {k: sender.get(k) for k in ("sent", "acked", "fills", "cancels")},
                 "prefix": p.prefix})


def machine_crash_sender_perp(P, quick: bool, *, sender_module: str = "") -> Row:
    """``machine_crash_sender`` on the perpetuals (see the module docstring)."""
    row = machine_crash_sender(_with_perps(P), quick, sender_module=sender_module)
    row.scenario = "machine_crash_sender_perp"
    return row
