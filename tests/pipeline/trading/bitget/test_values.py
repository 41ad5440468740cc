"""The grid a capture's own strings imply (pipeline/trading/bitget/values.py ``snapshot_grids``)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pipeline.trading.bitget.values import decimals_written, snapshot_grids


@pytest.mark.parametrize("text, n", [("0.5000", 4), ("12", 0), ("12.", 0), ("0.1", 1)])
def test_decimals_written_counts_what_the_string_writes(text, n):
    assert decimals_written(text) == n


def _push(sym, snapshot, bids=(), asks=()):
    return SimpleNamespace(inst_id=sym, snapshot=snapshot,
                           books=[SimpleNamespace(bid_lv=list(bids), ask_lv=list(asks))])


def test_the_grid_is_the_most_decimals_of_snapshot_levels_and_updates_do_not_count():
    grids = snapshot_grids([
        _push("ETHUSDT", True, bids=["2000.12:0.5", "2000.1:1.125"], asks=["2000.2:3"]),
        _push("ETHUSDT", False, bids=["2000.123456:0.0000001"]),  # an update: not read
        _push("BTCUSDT", False, asks=["50000.5:0.001"]),  # never a snapshot: (1, 1)
        SimpleNamespace(inst_id="AVAXUSDT", snapshot=True, books=None),  # a trade push
    ])
    assert list(grids) == ["AVAXUSDT", "BTCUSDT", "ETHUSDT"]
    assert grids["ETHUSDT"] == pytest.approx((0.01, 0.001))
    assert grids["BTCUSDT"] == (1.0, 1.0) and grids["AVAXUSDT"] == (1.0, 1.0)
