"""The feature stage (procs/features.py): in-process with a fake context, and end to end under the
real supervisor (BookSource -> md -> features -> feat -> FeatureCounter)."""

from __future__ import annotations

import msgspec
import numpy as np
import pytest

from pipeline.runtime.config import ProcessConfig, load_config
from pipeline.runtime.errors import ConfigError
from pipeline.trading.messages import (BOOK_DTYPE, BOOK_FLAG_CROSSED, BOOK_FLAG_INVALID, BOOK_FLAG_REBUILDING,
                                       FEATURES_DTYPE, FEATURES_FLAG_STALE_BOOK, TRADE_DTYPE, TRADE_SIDE_BUY, Kind)
from pipeline.runtime.runner import load_agent_class
from procs.features import FeatureAgent, FeatureStageParams, parse_params
from tests.support.configtext import BACK_OFF, INSTRUMENTS, process, ring
from tests.support.context import stage_context
from tests.support.paths import REPO_ROOT
from tests.support.ports import ListInput, RecordingPort
from tests.support.wait import wait_until

CONFIG = ring("md", payload=512) + ring("feat", payload=560) + INSTRUMENTS


def start(msgs, port=None, *, params=None, name="features"):
    proc = ProcessConfig(name=name, module="procs.features:FeatureAgent", inputs=["md"], outputs=["feat"],
                         params=params or {})
    ctx = stage_context(CONFIG, proc, inputs={"md": ListInput(msgs)}, outputs={"feat": port or RecordingPort()})
    agent = FeatureAgent()
    agent.on_start(ctx)
    while agent.do_work():
        pass
    return agent, ctx


def book_bytes(bid, ask, *, iid=1, seq=1, ts=1_000, flags=0):
    r = np.zeros(1, BOOK_DTYPE)
    r["instrument_id"], r["seq"], r["exch_ts_ns"], r["n_bids"], r["n_asks"] = iid, seq, ts, 1, 1
    r["flags"] = flags
    r["bid_px"][0, 0], r["bid_sz"][0, 0], r["ask_px"][0, 0], r["ask_sz"][0, 0] = bid, 1.0, ask, 3.0
    return r.tobytes()


def trade_bytes(iid=1, px=100.0, sz=1.0):
    r = np.zeros(1, TRADE_DTYPE)
    r["instrument_id"], r["side"], r["price"], r["size"], r["exch_ts_ns"] = iid, TRADE_SIDE_BUY, px, sz, 1_000
    return r.tobytes()


def test_books_become_features_with_the_books_origin_stamp_and_rejects_are_counted():
    msgs = [(Kind.TRADE, trade_bytes(), 11), (Kind.BOOK, book_bytes(100.0, 100.2, seq=7), 12),
            (Kind.BOOK, book_bytes(100.3, 100.2, seq=8), 13),  # crossed
            (Kind.BOOK, book_bytes(float("nan"), 100.2, seq=9), 14),
            (Kind.BOOK, book_bytes(2000.0, 2000.5, iid=2, seq=10), 15),
            (Kind.BOOK, book_bytes(1.0, 2.0, iid=9), 16),  # unconfigured instrument
            (Kind.BOOK, b"\0" * 10, 17), (Kind.CONTROL, b"\0" * 16, 18)]
    agent, ctx = start(msgs)
    out = ctx.outputs["feat"]
    assert [(k, ts) for k, _, ts, _ in out.msgs] == [(Kind.FEATURES, 12), (Kind.FEATURES, 15)]
    f = [np.frombuffer(p, FEATURES_DTYPE, 1)[0] for _, p, _, _ in out.msgs]
    assert [(int(r["instrument_id"]), int(r["book_seq"])) for r in f] == [(1, 7), (2, 10)]
    assert f[0]["ref_mid"] == pytest.approx(100.1) and f[1]["ref_spread"] == pytest.approx(0.5)
    assert f[0]["features"][66] == pytest.approx(2.0, rel=1e-5)  # spread in BTC ticks (0.1)
    assert f[1]["features"][66] == pytest.approx(50.0, rel=1e-5)  # ETH ticks (0.01)
    st = ctx.stats
    assert st["books"] == 4 and st["emitted"] == 2 and st["rejected"] == 2 and st["trades"] == 1
    assert st["rej_crossed_book"] == 1 and st["rej_non_finite_input"] == 1
    assert st["unknown_instrument"] == 1 and st["bad_size"] == 1 and st["unknown_kind"] == 1
    assert ctx.msgs_in == len(msgs) and ctx.msgs_out == 2


def test_stale_books_give_stale_features_and_a_crossed_one_gives_a_stale_marker():
    msgs = [(Kind.BOOK, book_bytes(100.3, 100.2, seq=1, flags=BOOK_FLAG_CROSSED), 10),  # nothing to stand for yet
            (Kind.BOOK, book_bytes(100.0, 100.2, seq=2), 11),
            (Kind.BOOK, book_bytes(100.0, 100.4, seq=3, flags=BOOK_FLAG_REBUILDING), 12),
            (Kind.BOOK, book_bytes(100.0, 100.2, seq=4, flags=BOOK_FLAG_INVALID), 13),
            (Kind.BOOK, book_bytes(100.3, 100.2, seq=5, flags=BOOK_FLAG_CROSSED), 14),
            (Kind.BOOK, book_bytes(100.3, 100.2, seq=6), 15),  # crossed without saying so: refused as ever
            (Kind.BOOK, book_bytes(100.0, 100.2, seq=7), 16)]
    agent, ctx = start(msgs)
    f = [np.frombuffer(p, FEATURES_DTYPE, 1)[0] for _, p, _, _ in ctx.outputs["feat"].msgs]
    assert [(int(r["book_seq"]), bool(r["flags"] & FEATURES_FLAG_STALE_BOOK)) for r in f] == [
        (2, False), (3, True), (4, True), (5, True), (7, False)]
    marker = f[3]
    assert marker["ref_mid"] == pytest.approx(100.1) and marker["ref_spread"] == 0 and not marker["features"].any()
    assert f[1]["features"].any(), "a rebuilding book is computed as any"
    st = ctx.stats
    assert st["stale_markers"] == 1 and st["rej_crossed_book"] == 3 and st["emitted"] == 5


def test_a_full_output_is_counted_not_raised():
    agent, ctx = start([(Kind.BOOK, book_bytes(100.0, 100.2), 1)], port=RecordingPort(accept=False))
    assert ctx.stats["out_drops"] == 1 and ctx.stats["emitted"] == 0


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_params_reach_every_instruments_state_and_a_table_leaves_the_others_at_1000_lots():
    agent, _ = start([], params={"tau_ofi_ms": 250, "tau_trade_ms": 0.5, "tau_vol_fast_ms": 2000,
                                 "tau_vol_slow_ms": 30_000, "vpin_buckets": 20, "vpin_bucket_volume": {"BTCUSDT": 3}})
    got = {iid: (st.params.tau_ofi_ns, st.params.tau_trade_ns, st.params.tau_vol_fast_ns, st.params.tau_vol_slow_ns,
                 st.params.vpin_buckets, st.params.vpin_bucket_volume) for iid, st in agent.states.items()}
    assert got == {1: (250_000_000, 500_000, 2_000_000_000, 30_000_000_000, 20, 3.0),
                   2: (250_000_000, 500_000, 2_000_000_000, 30_000_000_000, 20, 1000 * 0.001)}
    agent, _ = start([])  # no params: the documented defaults
    st = agent.states[1].params
    assert (st.tau_ofi_ns, st.tau_trade_ns, st.tau_vol_fast_ns, st.tau_vol_slow_ns, st.vpin_buckets) == (
        1_000_000_000, 1_000_000_000, 1_000_000_000, 10_000_000_000, 50)
    assert st.vpin_bucket_volume == pytest.approx(1000 * 0.0001)


@pytest.mark.parametrize("name", ["features", "features_b"])
@pytest.mark.parametrize("params, field", [
    ({"tau_ofi_msec": 500}, "Object contains unknown field `tau_ofi_msec`"),
    ({"vpin_bucket_volumes": 2.0}, "Object contains unknown field `vpin_bucket_volumes`"),
    ({"vpin_bucket_volume": {"BTCUSD": 2.0}}, "vpin_bucket_volume names unconfigured instruments ['BTCUSD']"),
])
def test_a_misspelt_param_fails_the_start_naming_the_process_and_the_field(name, params, field):
    with pytest.raises(ConfigError) as err:
        start([], params=params, name=name)
    assert str(err.value).startswith(f"{name}: bad params: ") and field in str(err.value)


@pytest.mark.parametrize("params, field", [
    ({"tau_ofi_ms": "1000"}, "Expected `float`, got `str` - at `$.tau_ofi_ms`"),
    ({"tau_trade_ms": True}, "Expected `float`, got `bool` - at `$.tau_trade_ms`"),
    ({"tau_vol_slow_ms": 0}, "Expected `float` > 0.0 - at `$.tau_vol_slow_ms`"),
    ({"vpin_buckets": 50.0}, "Expected `int`, got `float` - at `$.vpin_buckets`"),
    ({"vpin_buckets": 0}, "Expected `int` >= 1 - at `$.vpin_buckets`"),
    ({"vpin_bucket_volume": "1000 lots"}, "Expected `float | object | null`, got `str` - at `$.vpin_bucket_volume`"),
    ({"vpin_bucket_volume": {"BTCUSDT": "2"}}, "Expected `float`, got `str` - at `$.vpin_bucket_volume[...]`"),
    ({"input": 1}, "Expected `str | null`, got `int` - at `$.input`"),
])
def test_an_ill_typed_param_fails_the_start_naming_the_process_and_the_field(params, field):
    with pytest.raises(ConfigError) as err:
        start([], params=params)
    assert str(err.value) == f"features: bad params: {field}"


def test_the_typed_params_keep_the_documented_defaults():
    assert msgspec.to_builtins(parse_params("features", {})) == {
        "input": None, "output": None, "tau_ofi_ms": 1000.0, "tau_trade_ms": 1000.0, "tau_vol_fast_ms": 1000.0,
        "tau_vol_slow_ms": 10_000.0, "vpin_buckets": 50, "vpin_bucket_volume": None, "basis_pairs": [],
        "tau_basis_ms": 60_000.0}


@pytest.mark.parametrize("config", ["default.toml", "llm-7b.example.toml"])
def test_the_shipped_configs_features_params_load(config):
    procs = [p for p in load_config(REPO_ROOT / "configs" / config).processes
             if p.module == "procs.features:FeatureAgent"]
    assert procs, f"configs/{config} has no features stage"
    for proc in procs:
        assert load_agent_class(proc.module).params_type is FeatureStageParams  # what a check before start uses
        got = parse_params(proc.name, proc.params)
        given = msgspec.to_builtins(got)
        assert {k: given[k] for k in proc.params} == proc.params  # every value given arrived


def test_features_process_turns_books_into_features_end_to_end(pipe):
    src_out, feat_out = pipe.tmp / "src.txt", pipe.tmp / "feat.txt"
    pipe.write_config(
        ring("md", payload=512, capacity=1024, policy="drop") + ring("feat", payload=560, capacity=1024, policy="drop")
        + process("src", "BookSource", outputs=["md"], extra=BACK_OFF,
                  params=f'out = "{src_out}", total = 40, crossed = [10, 20]')
        + process("features", "procs.features:FeatureAgent", inputs=["md"], outputs=["feat"], extra=BACK_OFF)
        + process("sink", "FeatureCounter", inputs=["feat"], extra='wait = "blocking"\n',
                  params=f'out = "{feat_out}"')
        + INSTRUMENTS)
    pipe.up()

    def lines(path):
        text = path.read_text() if path.exists() else ""
        return [ln.split() for ln in text.splitlines()]

    got = wait_until(lambda: (ls := lines(feat_out)) and len(ls) == 38 and ls, 15, 0.02, "38 FEATURES at the sink")
    sent = {int(s): int(ts) for s, ts in lines(src_out)}
    assert [int(ln[2]) for ln in got] == [s for s in range(1, 41) if s not in (10, 20)]
    for ln in got:
        assert ln[0] == "FEATURES" and ln[1] == "1"
        seq = int(ln[2])
        assert int(ln[-1]) == sent[seq], "FEATURES carry the BOOK's ts_origin_ns unchanged"
        assert float(ln[4]) == pytest.approx(100.0 + seq * 0.1 + 0.25) and float(ln[5]) == pytest.approx(0.5)

    def stats():
        st = pipe.procs()["features"]["stage"]
        return st if st.get("books") == 40 else None

    st = wait_until(stats, 5, 0.05, "features counters in status")
    assert st["emitted"] == 38 and st["rejected"] == 2 and st["rej_crossed_book"] == 2
    assert pipe.down() == 0


def test_keep_warm_recomputes_the_latest_book_on_a_private_state_and_emits_nothing():
    books = [(Kind.BOOK, book_bytes(100.0 + i * 0.1, 100.2 + i * 0.1, seq=i + 1), 10 + i) for i in range(3)]
    outs = []
    for warm_us in (0, 200):
        proc = ProcessConfig(name="features", module="procs.features:FeatureAgent", inputs=["md"], outputs=["feat"],
                             keep_warm_us=warm_us)
        ctx = stage_context(CONFIG, proc, inputs={"md": ListInput(books[:2])}, outputs={"feat": RecordingPort()})
        agent = FeatureAgent()
        agent.on_start(ctx)
        agent.keep_warm()  # before any BOOK: nothing to do
        while agent.do_work():
            pass
        if warm_us:
            assert agent._warm_book == books[1][1]
            for _ in range(5):
                agent.keep_warm()
            assert agent._warm_state is not agent.states[1] and agent._warm_buf["book_seq"][0] == 2
        else:
            assert agent._warm_book is None  # not asked for: no copy per BOOK
        ctx.inputs["md"].msgs.append(books[2])
        while agent.do_work():
            pass
        outs.append(([(k, p, ts) for k, p, ts, _ in ctx.outputs["feat"].msgs], dict(ctx.stats)))
    assert outs[0] == outs[1] and len(outs[0][0]) == 3  # the real state and outputs are the same with or without


# ------------------------------------------------------------------ spot-perpetual pairs (basis_pairs)
PERP = """
[[instruments]]
id = 3
symbol = "BTCUSDT"
tick_size = 0.1
lot_size = 0.001
product_type = "USDT-FUTURES"
contract_size = 0.001

[[instruments]]
id = 4
symbol = "ETHUSDT"
tick_size = 0.01
lot_size = 0.01
product_type = "USDT-FUTURES"
contract_size = 0.01
"""


def start_paired(msgs, params):
    proc = ProcessConfig(name="features", module="procs.features:FeatureAgent", inputs=["md"], outputs=["feat"],
                         params=params)
    ctx = stage_context(CONFIG + PERP, proc, inputs={"md": ListInput(msgs)}, outputs={"feat": RecordingPort()})
    agent = FeatureAgent()
    agent.on_start(ctx)
    while agent.do_work():
        pass
    return agent, ctx


def test_a_configured_pair_gives_each_leg_the_basis_against_the_other():
    from pipeline.trading import features as F

    msgs = [(Kind.BOOK, book_bytes(100.0, 100.2, iid=1, ts=1_000), 1),
            (Kind.BOOK, book_bytes(100.4, 100.6, iid=3, ts=2_000), 2),
            (Kind.BOOK, book_bytes(2000.0, 2000.5, iid=2, ts=3_000), 3)]
    agent, ctx = start_paired(msgs, {"basis_pairs": [{"spot": 1, "perp": 3}], "tau_basis_ms": 5000})
    assert agent.states[1].pair is agent.states[3].pair is not None and agent.states[2].pair is None
    assert agent.states[1].pair.tau_ns == 5_000_000_000
    f = [np.frombuffer(p, FEATURES_DTYPE, 1)[0] for _, p, _, _ in ctx.outputs["feat"].msgs]
    assert [float(r["features"][F.F_BASIS_AVAILABLE]) for r in f] == [0.0, 1.0, 0.0]  # spot first: no perp yet
    assert f[1]["features"][F.F_BASIS_BPS] == pytest.approx(1e4 * np.log(100.5 / 100.1), rel=1e-6)  # 39.88 bps
    assert f[1]["features"][F.F_BASIS_AGE_MS] == pytest.approx(0.001)  # 1 us between the legs' books


@pytest.mark.parametrize("pairs, field, why", [
    ([{"spot": 1, "perp": 9}], "$.basis_pairs[0].perp", "instrument 9 is not configured"),
    ([{"spot": 1, "perp": 1}], "$.basis_pairs[0].perp", "instrument 1 is already a leg of a basis pair"),
    ([{"spot": 1, "perp": 3}, {"spot": 2, "perp": 3}], "$.basis_pairs[1].perp", "instrument 3 is already a leg"),
    ([{"spot": 3, "perp": 1}], "$.basis_pairs[0].spot", "instrument 3 is USDT-FUTURES, the spot leg must be SPOT"),
    ([{"spot": 1, "perp": 2}], "$.basis_pairs[0].perp", "instrument 2 is SPOT, the perp leg must be USDT-FUTURES"),
    ([{"spot": 1, "perp": 4}], "$.basis_pairs[0].perp", "one symbol on one venue, not BTCUSDT on paper and ETHUSDT"),
])
def test_a_bad_pairing_fails_the_start_naming_the_field(pairs, field, why):
    with pytest.raises(ConfigError) as err:
        start_paired([], {"basis_pairs": pairs})
    text = str(err.value)
    assert text.startswith("features: bad params: ") and why in text and text.endswith(f"- at `{field}`")


@pytest.mark.parametrize("params, field", [
    ({"basis_pairs": [{"spot": 1}]}, "Object missing required field `perp` - at `$.basis_pairs[0]`"),
    ({"basis_pairs": [{"spot": 1, "perp": 3, "base": "BTC"}]},
     "Object contains unknown field `base` - at `$.basis_pairs[0]`"),
    ({"basis_pairs": [{"spot": 0, "perp": 3}]}, "Expected `int` >= 1 - at `$.basis_pairs[0].spot`"),
    ({"tau_basis_ms": 0}, "Expected `float` > 0.0 - at `$.tau_basis_ms`"),
])
def test_an_ill_formed_pairing_fails_before_any_start_naming_the_field(params, field):
    with pytest.raises(ConfigError) as err:
        parse_params("features", params)
    assert str(err.value) == f"features: bad params: {field}"
