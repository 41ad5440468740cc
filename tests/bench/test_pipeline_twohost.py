"""bench.pipeline_twohost: the two hosts' configs split the single-host graph at the bridge (each host
loads, every stage once, the bridge's ends meet, its params hold with real key files), and the report
gives the hop costs as p50 differences, or says why the two-host run did not happen."""

from __future__ import annotations

import subprocess
import sys

from bench.pipeline_config import Scenario
from bench.pipeline_twohost import hop_costs, report, twohost_configs
from pipeline.runtime.bridge.params import GatewayParams, MdInParams, MdOutParams, ShardParams
from pipeline.runtime.config import load_config
from pipeline.runtime.runner import load_stage_params
from tests.support.paths import REPO_ROOT

MACHINE = {"cores": 2, "python": "3.11", "platform": "linux", "load_avg": (0, 0, 0)}
BRIDGE = {"md_out": MdOutParams, "gateway": GatewayParams, "md_in": MdInParams, "shard": ShardParams}


def row(p50):
    return {"n": 10, "p50_us": p50, "p99_us": p50 * 2, "p999_us": p50 * 3, "max_us": p50 * 4}


def test_the_two_configs_split_the_graph_at_the_bridge_and_its_ends_meet(tmp_path):
    keys = tmp_path / "keys"
    subprocess.run([sys.executable, "-m", "pipeline.runtime.bridge.curve", str(keys), "md_out", "md_in", "gateway",
                    "shard"], cwd=REPO_ROOT, check=True, capture_output=True)
    for folder, name in (("readers", "md_in"), ("shards", "shard")):
        (keys / folder).mkdir()
        (keys / folder / f"{name}.key").write_bytes((keys / f"{name}.key").read_bytes())
    texts = twohost_configs(Scenario("t", llm=False, model="hand-set"), tmp_path, keys, "bt")
    cfgs, params = {}, {}
    for host, text in texts.items():
        path = tmp_path / f"{host}.toml"
        path.write_text(text)
        cfgs[host] = load_config(path)
        for p in cfgs[host].processes:
            if p.name in BRIDGE:
                params[p.name] = load_stage_params(p)
                assert isinstance(params[p.name], BRIDGE[p.name])
                params[p.name].preflight()  # the security rule and the key files
    assert [p.name for p in cfgs["F"].processes] == ["venue", "feed", "md_out", "gateway", "sender"]
    assert [p.name for p in cfgs["S"].processes] == ["md_in", "features", "fast", "risk", "shard"]
    assert cfgs["F"].supervisor.shm_prefix != cfgs["S"].supervisor.shm_prefix
    assert params["md_in"].pub_endpoint == params["md_out"].pub_endpoint
    assert params["md_in"].snapshot_endpoint == params["md_out"].snapshot_endpoint
    assert params["shard"].gateway_endpoint == params["gateway"].endpoint
    assert params["gateway"].shards == {"1": params["shard"].instruments}


def test_hop_costs_are_p50_differences_in_one_run():
    single = {"order_sent": row(400.0)}
    two = {"order_sent": row(900.5), "md_written_f": row(80.0), "md_written_s": row(300.0),
           "decided_s": row(350.0), "order_written_f": row(560.0)}
    assert hop_costs(single, two) == {"end_to_end": 500.5, "md_hop": 220.0, "order_hop": 210.0}
    assert hop_costs(single, {**two, "md_written_s": {"n": 0}})["md_hop"] is None  # no sample: no figure
    md = report({"machine": MACHINE, "quick": False, "seconds": 10.0, "single": single, "two": two,
                 "hops": hop_costs(single, two)})
    assert "| two hosts | order request sent, fast path | 10 | 900.5 | 1801.0 | 2701.5 | 3602.0 |" in md
    assert "Bridge hop, market data (md_in BOOK minus feed BOOK): p50 220.0 µs." in md


def test_a_two_host_run_that_could_not_happen_says_why_and_has_no_hop_cost():
    md = report({"machine": MACHINE, "quick": True, "seconds": 2.0, "single": {"order_sent": row(400.0)},
                 "two_not_run": "network namespaces need root (ip netns add)"})
    assert "| two hosts | not run: network namespaces need root (ip netns add) | | | | | |" in md
    assert not any("Bridge hop" in line for line in md)
