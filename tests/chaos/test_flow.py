"""Orders flowing and settling (``bench.chaos.flow``): positions reconciled in whole lots, every ORDER
counted at both ends, the least flow a run must carry, and the config that makes orders flow."""

from __future__ import annotations

import pytest

from bench.chaos.flow import MIN_FILLS, MIN_ORDERS, flow_check, order_counts_check, orders_flow, whole_lots


def test_a_position_reconciles_in_whole_lots_or_not_at_all():
    # the base-unit floats of one position differ with the order its fills were summed in
    # (fills of 1 and 2 lots of 0.1 against a position of 3 lots, both 0.3 in base units)
    assert 0.1 + 0.2 != 0.3 and (0.1 + 0.2) / 0.1 != 0.3 / 0.1
    assert whole_lots((0.1 + 0.2) / 0.1) == whole_lots(0.3 / 0.1) == 3
    assert whole_lots(-7.0) == -7 and whole_lots(0.0) == 0
    for x in (2.5, 3.00001, float("nan"), float("inf"), -float("inf")):
        assert whole_lots(x) is None, x


def _ends(**kw) -> dict:
    """Counts of a clean run: 120 ORDERs written and read (70 NEW, the rest cancels), 70 journaled."""
    c = {"risk_out": 120, "ring_written": 120, "ring_read": 120, "sender_in": 120, "risk_approved": 70,
         "journal_new": 70, "sender_dups": 0, "sender_malformed": 0}
    c.update(kw)
    return c


def test_order_counts_agree_when_every_order_arrived_once():
    assert order_counts_check(_ends()) == (True, [])


def test_a_dropped_order_fails_the_count_check():
    # dropped in the ring: written by risk, never read
    ok, bad = order_counts_check(_ends(ring_read=119, sender_in=119))
    assert not ok and "written != read" in bad[0]
    # dropped by the sender: read, never journaled (nor sent)
    ok, bad = order_counts_check(_ends(journal_new=69))
    assert not ok and bad == ["NEW orders approved by risk 70 != journaled by the sender 69"]
    # answered REJECTED HALTED without an intent (a stalled fsync) is accounted for; one more is not
    assert order_counts_check(_ends(journal_new=67, sender_refused=3)) == (True, [])
    ok, bad = order_counts_check(_ends(journal_new=67, sender_refused=2))
    assert not ok and bad == ["NEW orders approved by risk 70 != journaled by the sender 67 + refused unjournaled 2"]
    # the two ends of one side disagree (risk's own count against the ring's)
    assert not order_counts_check(_ends(risk_out=121))[0]


def test_a_duplicated_order_fails_the_count_check():
    # read twice: the sender's count is over the ring's, and it answered the second copy as a duplicate
    ok, bad = order_counts_check(_ends(sender_in=121, sender_dups=1))
    assert not ok and len(bad) == 2 and "read twice" in bad[1]
    assert not order_counts_check(_ends(sender_dups=1))[0]
    assert not order_counts_check(_ends(sender_malformed=1))[0]


def test_a_run_without_orders_or_fills_fails_the_flow_check():
    assert flow_check(0, 0, MIN_ORDERS, MIN_FILLS)[0] is False
    assert flow_check(MIN_ORDERS, 0, MIN_ORDERS, MIN_FILLS)[0] is False
    assert flow_check(MIN_ORDERS - 1, MIN_FILLS, MIN_ORDERS, MIN_FILLS)[0] is False
    ok, fig = flow_check(MIN_ORDERS, MIN_FILLS, MIN_ORDERS, MIN_FILLS)
    assert ok and fig == f"{MIN_ORDERS} orders (min {MIN_ORDERS}), {MIN_FILLS} fills (min {MIN_FILLS})"
    assert MIN_ORDERS >= 1 and MIN_FILLS >= 1


def test_orders_flow_rewrites_the_bench_config_or_says_it_cannot(tmp_path):
    from bench.pipeline_config import Scenario, config_text
    from pipeline.runtime.config import load_config

    text = orders_flow(config_text(Scenario("t", 1000, llm=True), tmp_path, "t"))
    assert 'tif = "GTC"' in text and "risk_aversion = 1.0" in text and "emergency = 2.0" in text
    path = tmp_path / "c.toml"
    path.write_text(text)
    cfg = load_config(path)
    assert cfg.process("fast").params["thresholds"] == {"buy": 0.4, "sell": 0.4, "emergency": 2.0}
    limits = cfg.process("risk").params["limits"]  # quotes at the touch, so the venue's market fills them
    assert limits["lean_offset_ticks"] == 0 and limits["risk_aversion"] == 1.0 and limits["tif"] == "GTC"
    with pytest.raises(ValueError):
        orders_flow("[supervisor]\n")
