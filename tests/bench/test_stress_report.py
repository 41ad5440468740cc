"""The replay stress report (``bench.stress_report``): what became of each order, from the sender's
journal, and the table with throughput, p99 latency and the share the venue accepted, per scenario."""

from __future__ import annotations

from dataclasses import asdict

import pytest

from bench.pipeline_config import Scenario
from bench.stress_replay import SYNTHETIC_ITCH, replay_plan
from bench.stress_report import COLUMNS, annotate, order_outcomes, replay_markdown, replay_row, replay_table, valid_share
from pipeline.trading.journal import encode_record


def _intent(oid: int) -> dict:
    return {"t": "intent", "oid": oid, "coid": f"c{oid}", "iid": 1, "sym": "EOSUSDT", "side": 1, "tif": 3, "px": 2.4,
            "sz": 1.0, "oseq": oid, "ts_ms": 0}


def _journal(*records: dict) -> bytes:
    return b"".join(encode_record(r) for r in records)


@pytest.mark.parametrize("records, want", [
    ([], {"sent": 0, "accepted": 0, "rejected": {}, "unresolved": 0, "never_sent": 0}),
    # acked then cancelled (an IOC the venue took), acked only, learnt by a query, its answer lost but
    # cancelled by us (the venue had it): all accepted
    ([_intent(1), {"t": "ack", "oid": 1, "vid": "9"}, {"t": "cancel", "oid": 1},
      _intent(2), {"t": "ack", "oid": 2, "vid": "10"},
      _intent(3), {"t": "unknown", "oid": 3}, {"t": "state", "oid": 3, "status": "cancelled", "vid": "11"},
      _intent(4), {"t": "unknown", "oid": 4}, {"t": "cancel", "oid": 4}],
     {"sent": 4, "accepted": 4, "rejected": {}, "unresolved": 0, "never_sent": 0}),
    # rejections by the venue's code; an unknown outcome; a request the venue never saw
    ([_intent(1), {"t": "reject", "oid": 1, "code": "43012"}, _intent(2), {"t": "reject", "oid": 2, "code": "429"},
      _intent(3), {"t": "reject", "oid": 3, "code": "43012"}, _intent(4), {"t": "unknown", "oid": 4},
      _intent(5), {"t": "unknown", "oid": 5}, {"t": "never_sent", "oid": 5}, _intent(6), {"t": "ack", "oid": 6, "vid": "1"}],
     {"sent": 6, "accepted": 1, "rejected": {"429": 1, "43012": 2}, "unresolved": 2, "never_sent": 1}),
])
def test_each_order_is_accepted_rejected_by_code_or_unresolved(records, want):
    got = order_outcomes(_journal(*records))
    assert {k: got[k] for k in want} == want and got["torn"] == 0


def test_a_torn_journal_line_is_counted_not_fatal():
    got = order_outcomes(_journal(_intent(1), {"t": "ack", "oid": 1, "vid": "2"}) + b"0000 garbage\n" + b"half")
    assert got["sent"] == 1 and got["accepted"] == 1 and got["torn"] == 2


@pytest.mark.parametrize("outcomes, share", [({"sent": 0, "accepted": 0}, None), ({"sent": 8, "accepted": 6}, 0.75)])
def test_the_valid_share_is_accepted_over_sent(outcomes, share):
    assert valid_share(outcomes) == share


def _result(sc: Scenario, orders: dict | None) -> dict:
    stage = {"n": 10, "p50_us": 50.0, "p99_us": 1234.4}
    return annotate({"scenario": asdict(sc), "books_per_s": 141.2, "stages": {"signal": stage, "order_sent": stage},
                     "processes": {"feed": {"stage": {"gaps": 3, "rerequests": 4, "recovered": 3}},
                                   "venue": {"stage": {"orders_valid": 5, "orders_invalid": 1}}},
                     "orders": orders}, sc)


def test_the_table_has_a_row_per_scenario_in_the_documented_columns():
    sc = next(sc for sc in replay_plan("itch", SYNTHETIC_ITCH, 0.01, 1.0) if sc.name == "itch-md-drop-5pct")
    ok = _result(sc, {"sent": 8, "accepted": 6, "rejected": {"43012": 1}, "unresolved": 1, "never_sent": 1})
    row = dict(zip(COLUMNS, replay_row(ok)))
    assert row == {"scenario": "itch-md-drop-5pct", "source": "itch x0.01", "noise": "itch_drop_prob 0.05",
                   "throughput BOOKs/s": "141", "SIGNAL p99 µs": "1234", "order sent p99 µs": "1234",
                   "orders sent": "8", "accepted by the venue": "6", "valid share (accepted / sent)": "75.0 %",
                   "rejected by code": "43012 1", "unresolved": "1 (1 never sent)",
                   "venue book rule: valid / counted": "5 / 6",
                   "feed recovery": "gaps 3, rerequests 4, recovered 3, unrecoverable 0"}
    failed = {"scenario": asdict(sc), "error": "did not come up | at all"}
    table = replay_table([ok, failed])
    assert table[0] == "| " + " | ".join(COLUMNS) + " |" and len(table) == 4
    assert all(line.count("|") == len(COLUMNS) + 1 for line in table[2:]), table
    assert "FAILED" in table[3]


def test_the_report_says_how_each_noise_was_applied():
    sc = replay_plan("itch", SYNTHETIC_ITCH, 0.01, 1.0)[0]
    md = "\n".join(replay_markdown({"date": "d", "cores": 2, "python": "3", "platform": "p", "load_avg": (0, 0, 0),
                                    "replay_speed": 0.01}, [{"scenario": asdict(sc), "error": "no"}], "itch",
                                   SYNTHETIC_ITCH))
    assert "- Gaussian delay 0-50 ms: applied: venue itch_delay_ms 25, itch_delay_jitter_ms 12.5" in md
    assert "- price jumps within +-3 ticks: applied: venue itch_jump_prob" in md
    assert "- market-data drops 0.1-5 %: applied" in md and "- order-request drops 0.1-5 %: applied" in md
    assert "NOT APPLIED" not in md and "Not run for this source" not in md
