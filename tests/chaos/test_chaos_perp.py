"""The pipeline on USDT-FUTURES perpetuals (``bench.chaos.registry.PERP``; issue #25), each scenario run once
in quick mode under the real supervisor: orders placed, filled, cancelled and reconciled on the
perpetuals of configs/perp.toml; a machine crash of the sender (SIGKILL, journal cut to its last fsync)
loses and duplicates nothing; neither run leaves a process or a /dev/shm entry behind. The instrument
rewrite is a table test."""

from __future__ import annotations

import tomllib

import pytest

from bench.chaos.harness import PASS
from bench.chaos.perp import PERP_CONFIG, machine_crash_sender_perp, perp_flow, perp_instruments
from bench.chaos.registry import PERP
from pipeline.runtime.config import load_config, parse_config
from tests.chaos._support import TrackingPipeline, left_nothing

SPOT_TEXT = ('[supervisor]\nshm_prefix = "x"\n\n[[instruments]]\nid = 1\nsymbol = "BTCUSDT"\nvenue = "paper"\n'
             'tick_size = 0.1\nlot_size = 0.0001\n\n[[instruments]]\nid = 9\nsymbol = "SYN09USDT"\nvenue = "paper"\n'
             'tick_size = 0.01\nlot_size = 0.01\n')


def test_the_scenarios_are_registered():
    assert PERP == [("perp_flow", perp_flow), ("machine_crash_sender_perp", machine_crash_sender_perp)]


def test_perp_instruments_puts_the_perp_configs_instruments_in_place_of_the_texts():
    cfg = parse_config(perp_instruments(SPOT_TEXT))
    assert cfg.instruments == load_config(PERP_CONFIG).instruments
    assert all(i.perpetual and i.contract_size == i.lot_size > 0 for i in cfg.instruments)
    assert cfg.supervisor.shm_prefix == "x"
    with pytest.raises(ValueError):
        perp_instruments('[supervisor]\nshm_prefix = "x"\n')


def test_perp_instruments_makes_the_bitget_feed_subscribe_the_perpetuals_inst_type():
    feed = ('[[processes]]\nname = "feed"\nmodule = "procs.feed:BitgetFeedAgent"\noutputs = ["md"]\n'
            'params = { port_file = "run/venue.port", channels = ["books", "trade"] }\n\n')
    doc = tomllib.loads(perp_instruments(SPOT_TEXT.replace("\n\n[[instruments]]", "\n\n" + feed + "[[instruments]]", 1)))
    (proc,) = doc["processes"]
    assert proc["params"] == {"inst_type": "USDT-FUTURES", "port_file": "run/venue.port", "channels": ["books", "trade"]}
    assert [i["product_type"] for i in doc["instruments"]] == ["USDT-FUTURES"] * len(doc["instruments"])


def _describe(row) -> str:
    return f"{row.scenario} {row.verdict}: {row.figure}; {row.did}; checks {row.details.get('checks')}"


@pytest.mark.chaos
@pytest.mark.multiprocess
@pytest.mark.slow
@pytest.mark.parametrize("name,fn", PERP, ids=[n for n, _ in PERP])
def test_perp_scenario_passes_and_leaves_nothing_behind(name, fn):
    TrackingPipeline.runs = []
    row = fn(TrackingPipeline, True)
    assert row.scenario == name and row.verdict == PASS, _describe(row)
    left_nothing()
