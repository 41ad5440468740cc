"""The pre-trade checks on products (pipeline/trading/risk/checks.py, limits.py): a perpetual's lot is one
contract; a reduce-only order that would open, grow or flip the position is denied (REDUCE_ONLY); a
perpetual without a contract size is denied (BAD_CONTRACT) and refused in config; the net delta of one
settlement currency (NET_DELTA) nets the spot and the perpetual of one base, beside the gross limit."""

from __future__ import annotations

import pytest

from pipeline.runtime.config import InstrumentConfig
from pipeline.runtime.errors import ConfigError
from pipeline.trading.messages import Side
from pipeline.trading.risk import DenyReason, RiskLimits, resolve_limits
from pipeline.trading.risk.checks import PreTradeChecks
from pipeline.trading.risk.ledger import Working

T = 10_000_000_000
SPOT_BTC = InstrumentConfig(id=1, symbol="BTCUSDT", tick_size=0.1, lot_size=0.001)
PERP_BTC = InstrumentConfig(id=2, symbol="BTCUSDT", tick_size=0.1, lot_size=0.001, product_type="USDT-FUTURES",
                            contract_size=0.001)
PERP_ETH = InstrumentConfig(id=3, symbol="ETHUSDT", tick_size=0.01, lot_size=0.01, product_type="USDT-FUTURES",
                            contract_size=0.01)
LIMITS = dict(max_position_lots=100.0, max_order_lots=50.0, collar_bps=100.0, min_notional=0.5, max_notional=1e6,
              max_gross_notional=1e7, max_net_notional=1e7, max_orders_per_s=100, max_notional_per_min=1e9)
MID = {1: 1000.0, 2: 1000.0, 3: 100.0}


def checks(instruments=(SPOT_BTC, PERP_BTC, PERP_ETH), **over) -> PreTradeChecks:
    lim = RiskLimits(**{**LIMITS, **over})
    chk = PreTradeChecks(resolve_limits(list(instruments), lim), lim)
    chk.synced = True
    for iid, bk in chk.books.items():
        bk.mid, bk.ref_ns = MID[iid], T
    return chk


def test_specs_carry_product_contract_base_and_settlement():
    specs = resolve_limits([SPOT_BTC, PERP_BTC, PERP_ETH], RiskLimits(**LIMITS))
    assert [(s.product, s.contract, s.base, s.settle) for s in specs.values()] == [
        ("SPOT", 0.0, "BTC", "USDT"), ("USDT-FUTURES", 0.001, "BTC", "USDT"), ("USDT-FUTURES", 0.01, "ETH", "USDT")]


def test_a_perpetuals_position_limit_counts_contracts():
    chk = checks(max_position_lots=10.0)
    bk = chk.books[3]
    assert chk.check(bk, 1, Side.BUY, 100.0, 0.10, T) == (0, "")  # 10 contracts of 0.01 ETH
    reason, detail = chk.check(bk, 2, Side.BUY, 100.0, 0.11, T)
    assert reason == DenyReason.MAX_POSITION and "11 lots" in detail


# (position in contracts, open buys / sells in contracts, side, size in contracts) -> approved?
REDUCE_ONLY = [
    (5, 0, 0, Side.SELL, 5, True),    # closes a long exactly
    (5, 0, 0, Side.SELL, 3, True),    # reduces it
    (5, 0, 0, Side.SELL, 6, False),   # would flip to short
    (5, 0, 0, Side.BUY, 1, False),    # would grow the long
    (0, 0, 0, Side.SELL, 1, False),   # no position to reduce
    (0, 0, 0, Side.BUY, 1, False),
    (-4, 0, 0, Side.BUY, 4, True),    # closes a short
    (-4, 0, 0, Side.SELL, 1, False),  # grows the short
    (5, 0, 3, Side.SELL, 3, False),   # with 3 already selling, 3 more would flip
    (-4, 2, 0, Side.BUY, 2, True),    # 2 buying + 2 closes it exactly
]


@pytest.mark.parametrize("pos, buys, sells, side, size, ok", REDUCE_ONLY)
def test_reduce_only_must_shrink_the_position_without_crossing_zero(pos, buys, sells, side, size, ok):
    chk = checks()
    bk = chk.books[2]
    bk.position = pos * 0.001
    oid = 100
    for s, n in ((Side.BUY, buys), (Side.SELL, sells)):
        if n:
            chk.add_working(bk, Working(oid, s, 1000.0 if s == Side.BUY else 1000.1, n * 0.001, 1000.0, None, "acked"))
            oid += 1
    reason, detail = chk.check(bk, 1, side, 999.9 if side == Side.BUY else 1000.1, size * 0.001, T, reduce_only=True)
    assert (reason == 0) is ok, detail
    if not ok:
        assert reason == DenyReason.REDUCE_ONLY
    # the same order without the flag is an ordinary order
    assert chk.check(bk, 1, side, 999.9 if side == Side.BUY else 1000.1, size * 0.001, T)[0] == 0


def test_reduce_only_on_spot_is_denied():
    chk = checks()
    chk.books[1].position = 0.005
    assert chk.check(chk.books[1], 1, Side.SELL, 1000.1, 0.001, T, reduce_only=True)[0] == DenyReason.REDUCE_ONLY


def test_a_perpetual_without_a_contract_size_is_refused_in_config_and_denied_if_it_gets_through():
    bad = InstrumentConfig(id=2, symbol="BTCUSDT", tick_size=0.1, lot_size=0.001, product_type="USDT-FUTURES")
    with pytest.raises(ConfigError, match="contract_size"):
        resolve_limits([bad], RiskLimits(**LIMITS))
    chk = checks()
    bk = chk.books[2]
    bk.spec = bk.spec.__class__(**{**{f: getattr(bk.spec, f) for f in bk.spec.__struct_fields__}, "contract": 0.0})
    reason, detail = chk.check(bk, 1, Side.BUY, 999.9, 0.001, T)
    assert reason == DenyReason.BAD_CONTRACT and "contract size 0" in detail


def test_spot_and_perpetual_of_one_base_net_out_beside_the_gross_limit():
    chk = checks(max_net_notional=15.0)  # 15 USDT of net delta; gross unbounded here
    spot, perp, eth = chk.books[1], chk.books[2], chk.books[3]
    spot.position = 0.010  # long 10 USDT of BTC
    # a short perpetual of the same base hedges it: the net shrinks, approved
    assert chk.check(perp, 1, Side.SELL, 1000.1, 0.010, T) == (0, "")
    # a long perpetual adds to it: net 20 > 15
    reason, detail = chk.check(perp, 2, Side.BUY, 999.9, 0.010, T)
    assert reason == DenyReason.NET_DELTA and "USDT" in detail
    # another base adds its own net: 10 (BTC) + 6 (ETH) > 15
    assert chk.check(eth, 3, Side.BUY, 99.99, 0.06, T)[0] == DenyReason.NET_DELTA
    assert chk.check(eth, 4, Side.BUY, 99.99, 0.05, T) == (0, "")
    # the hedged pair is still gross: the gross limit counts both legs
    perp.position = -0.010
    chk_gross = checks(max_gross_notional=25.0, max_net_notional=15.0)
    chk_gross.books[1].position, chk_gross.books[2].position = 0.010, -0.010
    assert chk_gross.check(chk_gross.books[2], 5, Side.SELL, 1000.1, 0.006, T)[0] == DenyReason.GROSS
    assert chk_gross.check(chk_gross.books[2], 6, Side.SELL, 1000.1, 0.004, T) == (0, "")
