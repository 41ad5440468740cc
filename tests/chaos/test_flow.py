"""Orders flowing and settling (``bench.chaos.flow``): positions reconciled in whole lots, every ORDER
counted at both ends, the least flow a run must carry, and the config that makes orders flow."""

from __future__ import annotations

import pytest

from bench.chaos.flow import (MIN_FILLS, MIN_ORDERS, flow_check, ledger_problems, new_orders_ledger, order_counts_check,
                              orders_flow, whole_lots)


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
    assert not ok and bad == ["NEW orders approved by risk 70, journaled by the sender 69, refused by it 0: 1 lost"]
    # answered REJECTED HALTED without an intent (a stalled fsync) is accounted for; one more is not
    assert order_counts_check(_ends(journal_new=67, sender_refused=3)) == (True, [])
    ok, bad = order_counts_check(_ends(journal_new=67, sender_refused=2))
    assert not ok and bad == ["NEW orders approved by risk 70, journaled by the sender 67, refused by it 2: 1 lost"]
    # the two ends of one side disagree (risk's own count against the ring's)
    assert not order_counts_check(_ends(risk_out=121))[0]


def _approved(*oids) -> list[dict]:
    return [{"ev": "OrderApproved", "order_id": o, "side": 1, "size": 1.0} for o in oids]


def _rejected(oid, code) -> dict:
    return {"ev": "RejectReceived", "order_id": oid, "reason": 7, "code": code}


def test_every_new_order_risk_approved_is_journaled_or_refused_with_its_reason():
    # the audit log of two lives of the risk stage (appended to), the journal of the sender's lives
    audit = (_approved(1, 2, 3) + [{"ev": "Synced"}, _rejected(3, "HALTED"), _rejected(1, "VENUE_REJECTED")]
             + [{"ev": "SyncRequested"}] + _approved(4, 5) + [_rejected(5, "MALFORMED")])
    led = new_orders_ledger(audit, [1, 2, 4])
    assert {k: led[k] for k in ("risk_approved", "journal_new", "sender_refused", "lost", "unapproved")} == {
        "risk_approved": 5, "journal_new": 3, "sender_refused": 2, "lost": 0, "unapproved": 0}
    assert led["refused_by_reason"] == {"HALTED": 1, "MALFORMED": 1}  # 1 was journaled: the venue refused it
    assert ledger_problems(led) == [] and order_counts_check(_ends(**led))[0]
    # an order approved, then neither journaled nor refused: lost, by id
    led = new_orders_ledger(audit + _approved(6), [1, 2, 4])
    assert (led["lost"], led["lost_ids"]) == (1, [6])
    assert ledger_problems(led) == ["NEW orders approved by risk 6, journaled by the sender 3, refused by it 2 "
                                    "(HALTED 1, MALFORMED 1): 1 lost [6]"]
    # a lost order and a journaled one that risk never approved balance the counts: caught by id all the same
    led = new_orders_ledger(audit + _approved(6), [1, 2, 4, 9])
    assert led["risk_approved"] == led["journal_new"] + led["sender_refused"] and len(ledger_problems(led)) == 2
    # a refusal of an id risk never approved is not a refusal of an approved NEW
    assert new_orders_ledger(_approved(1) + [_rejected(8, "HALTED")], [])["lost"] == 1
    # nor is the answer to a cancel of an order the sender never journaled (NOT_FOUND): still lost
    assert new_orders_ledger(_approved(1) + [_rejected(1, "NOT_FOUND")], [])["lost"] == 1


def test_an_order_a_machine_crash_took_unsent_is_the_crashs_and_any_other_unsent_order_is_lost():
    s = 1_000_000_000
    audit = [{"ev": "OrderApproved", "order_id": o, "ts_ns": at} for o, at in ((1, 10 * s), (2, 20 * s), (3, 29 * s),
                                                                                (4, 30 * s), (5, 31 * s))]
    # the sender crashed (machine) at 30.2 s: 4 was approved 0.2 s before, held unsent; 3 (1.2 s before) and
    # 5 (after the crash, sent to the restarted sender) should have been sent
    led = new_orders_ledger(audit, [1, 2], crash_ns=[30 * s + 200_000_000])
    assert (led["crash_dropped"], led["crash_dropped_ids"], led["lost"], led["lost_ids"]) == (1, [4], 2, [3, 5])
    assert len(ledger_problems(led)) == 1  # 3 and 5 lost
    led = new_orders_ledger(audit, [1, 2, 3, 5], crash_ns=[30 * s + 200_000_000])
    assert (led["crash_dropped"], led["lost"]) == (1, 0) and ledger_problems(led) == []
    # the same order with no crash on record: lost
    led = new_orders_ledger(audit, [1, 2, 3, 5])
    assert (led["crash_dropped"], led["lost"], led["lost_ids"]) == (0, 1, [4]) and ledger_problems(led)


def test_venue_orders_the_journal_lacks_are_lost_beyond_those_a_crash_window_took():
    from bench.chaos.flow import venue_journal_lost

    led = {"venue_placed": 104, "journal_acked": 102, "unresolved": 0}
    assert venue_journal_lost(led) == 2  # no crash: both lost
    assert venue_journal_lost(led, crash_dropped=2) == 0
    assert venue_journal_lost(led, crash_dropped=1) == 1
    assert venue_journal_lost({**led, "venue_placed": 100}, crash_dropped=5) == 2  # journaled, not at the venue
    assert venue_journal_lost({**led, "unresolved": 1}, crash_dropped=2) == 1


def test_the_report_shows_each_runs_ledger_and_nothing_for_scenarios_without_orders():
    from bench.chaos.flow import ledger_entry, ledger_table
    from bench.chaos.harness import Row

    led = new_orders_ledger(_approved(1, 2, 3, 4) + [_rejected(3, "HALTED")], [1, 2])
    rows = [Row(scenario="a", injected="", did="", figure="", passed=True,
                details={"orders_ledger": [ledger_entry("run 1", led), ledger_entry("run 2", led)]}),
            Row(scenario="b", injected="", did="", figure="", passed=True)]
    md = ledger_table(rows)
    assert md[-2:] == ["| a | run 1 | 4 | 2 | 1 (HALTED 1) | 0 | 1 | 0 |", "| a | run 2 | 4 | 2 | 1 (HALTED 1) | 0 | 1 | 0 |"]
    assert "## Orders ledger" in md and ledger_table(rows[1:]) == []


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
