"""bench.bridge's report: one row per scenario, a scenario that could not run says why, and the
bridge's hop cost is its p50 minus the ring's in the same run."""

from __future__ import annotations

from bench.bridge import report

MACHINE = {"cores": 2, "python": "3.11", "platform": "linux", "load_avg": (0, 0, 0)}


def row(p50):
    return {"n": 100, "p50_us": p50, "p99_us": p50 * 2, "p999_us": p50 * 3, "max_us": p50 * 4}


def test_rows_and_the_hop_cost_over_the_ring():
    md = report({"ring": row(40.0), "bridge-loopback": row(150.0), "bridge-veth-curve": row(190.5)}, MACHINE, True)
    assert "| ring | 100 | 40.0 | 80.0 | 120.0 | 160.0 |" in md
    assert "\nbridge-loopback: hop cost over the ring, p50 110.0 µs." in md
    assert "\nbridge-veth-curve: hop cost over the ring, p50 150.5 µs." in md


def test_a_scenario_that_did_not_run_says_why_and_has_no_hop_cost():
    md = report({"ring": row(40.0), "bridge-veth-curve": {"n": 0, "not_run": "network namespaces need root"}},
                MACHINE, False)
    assert "| bridge-veth-curve | 0 | not run: network namespaces need root | | | |" in md
    assert not any("hop cost over the ring" in line for line in md)
