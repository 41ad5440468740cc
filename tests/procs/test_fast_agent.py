"""The fast path (procs/fast.py): in-process with a fake context and the real onnxruntime, and end to end
under the supervisor (FEATURES -> fast -> sig_risk / sig_llm), including a model swap by `restart fast`;
an EMERGENCY's at-risk side and the input-range guard (HOLD with a reason, counted)."""

from __future__ import annotations


import msgspec
import numpy as np
import pytest

from pipeline.runtime.agent import Agent
from pipeline.runtime.config import ProcessConfig, load_config
from pipeline.runtime.errors import ConfigError, StartupError
from pipeline.trading.messages import (FEATURES_DTYPE, FEATURES_FLAG_STALE_BOOK, FEATURES_FLAG_WARMUP, SIGNAL_CTX_DTYPE,
                                       SIGNAL_DTYPE, SIGNAL_FLAG_STALE_BOOK,
                                       SIGNAL_FLAG_AT_RISK_ASK, SIGNAL_FLAG_AT_RISK_BID, SIGNAL_FLAG_OUT_OF_RANGE,
                                       SIGNAL_FLAG_WARMUP, Kind, Label)
from pipeline.trading.features import FEATURE_LAYOUT_VERSION
from pipeline.trading.model.card import BOUNDS_KEY, card_path, hand_made_card, write_card
from pipeline.trading.model.decide import InputBounds, deployed_decisions
from pipeline.trading.model.mlp import Model, to_onnx
from pipeline.runtime.runner import load_agent_class
from procs.fast import FastAgent, FastParams, parse_params
from tests.support.agents import read_payloads
from tests.support.configtext import BACK_OFF, INSTRUMENTS, process, ring
from tests.support.context import stage_context
from tests.support.paths import REPO_ROOT
from tests.support.ports import ListInput, RecordingPort
from tests.support.wait import wait_until

CARD = hand_made_card("test", "tests/procs/test_fast_agent.py write_model")

def write_model(path, *, hold=1.0, buy=0.0, sell=0.0, emergency=0.0, gain=4.0, card: dict | None = CARD,
                side: bool = False) -> str:
    """A hand-made model: f[0] > 0 pushes LEAN_BUY, f[0] < 0 LEAN_SELL, f[1] > 0 EMERGENCY; the
    bias logits (hold, buy, sell, emergency) decide the rest. ``card`` rides in its ONNX metadata
    (None: no card). ``side``: an ``at_risk`` output too, P(bid at risk) rising with f[2] > 0, P(ask)
    with f[2] < 0."""
    w1 = np.zeros((128, 5))
    w1[0, 0], w1[0, 1], w1[1, 2], w1[2, 3], w1[2, 4] = 1.0, -1.0, 1.0, 1.0, -1.0
    w2 = np.zeros((5, 4))
    w2[0, Label.LEAN_BUY], w2[1, Label.LEAN_SELL], w2[2, Label.EMERGENCY] = gain, gain, gain
    m = Model(w1, np.zeros(5), w2, np.array([hold, buy, sell, emergency]), {"hand_made": True})
    if side:
        m.w3, m.b3 = np.zeros((5, 2)), np.zeros(2)
        m.w3[3, 0], m.w3[4, 1] = gain, gain
    with open(path, "wb") as f:
        f.write(to_onnx(m, card=card).SerializeToString())
    return str(path)


def features_row(seq, vec, *, iid=1, flags=0):
    """A FEATURES payload with the whole vector ``vec`` (128 floats)."""
    r = np.frombuffer(features(seq, iid=iid, flags=flags), FEATURES_DTYPE, 1).copy()
    r["features"][0] = vec
    return r.tobytes()


def features(seq, f0=0.0, f1=0.0, *, iid=1, flags=0):
    r = np.zeros(1, FEATURES_DTYPE)
    r["instrument_id"], r["flags"], r["book_seq"], r["exch_ts_ns"] = iid, flags, seq, 1_000 + seq
    r["ref_mid"], r["ref_spread"] = 100.0 + seq, 0.5
    r["features"][0, 0], r["features"][0, 1] = f0, f1
    return r.tobytes()


def make_ctx(msgs, params, *, batch=256, outputs=("sig_risk", "sig_llm"), name="fast", risk_payload=64):
    text = (ring("feat", payload=560) + ring("sig_risk", payload=risk_payload) + ring("sig_llm", payload=576)
            + INSTRUMENTS)
    proc = ProcessConfig(name=name, module="procs.fast:FastAgent", inputs=["feat"], outputs=list(outputs),
                         batch=batch, params=params)
    return stage_context(text, proc, inputs={"feat": ListInput(msgs)}, outputs={o: RecordingPort() for o in outputs})


def run(msgs, params, **kw):
    ctx = make_ctx(msgs, params, **kw)
    agent = FastAgent()
    agent.on_start(ctx)
    while agent.do_work():
        pass
    return agent, ctx


def signals(port):
    return [(np.frombuffer(p, SIGNAL_DTYPE, 1)[0], ts) for k, p, ts, _ in port.msgs if k == Kind.SIGNAL]


@pytest.mark.parametrize("batch", [1, 256])
def test_every_features_gives_a_signal_to_risk_and_non_hold_ones_go_to_the_llm(tmp_path, batch):
    model = write_model(tmp_path / "m.onnx")
    msgs = [(Kind.FEATURES, features(1, 5.0, flags=FEATURES_FLAG_WARMUP), 11), (Kind.FEATURES, features(2), 12),
            (Kind.FEATURES, features(3, -5.0), 13), (Kind.FEATURES, features(4, 0.0, 5.0, iid=2), 14),
            (Kind.FEATURES, b"\0" * 10, 15), (Kind.BOOK, b"\0" * 504, 16), (Kind.FEATURES, features(5), 17)]
    agent, ctx = run(msgs, {"model_path": model, "providers": "cpu", "warmup_runs": 3}, batch=batch)
    risk = signals(ctx.outputs["sig_risk"])
    assert [(int(s["feature_seq"]), int(s["label"]), ts) for s, ts in risk] == [
        (1, Label.LEAN_BUY, 11), (2, Label.HOLD, 12), (3, Label.LEAN_SELL, 13), (4, Label.EMERGENCY, 14),
        (5, Label.HOLD, 17)]
    s0 = risk[0][0]
    assert int(s0["instrument_id"]) == 1 and int(s0["flags"]) == SIGNAL_FLAG_WARMUP and int(s0["exch_ts_ns"]) == 1_001
    assert float(s0["ref_mid"]) == 101.0 and float(s0["ref_spread"]) == 0.5
    assert int(risk[3][0]["instrument_id"]) == 2 and int(risk[1][0]["flags"]) == 0
    for s, _ in risk:
        assert abs(float(s["probs"].sum()) - 1.0) < 1e-5 and int(np.argmax(s["probs"])) == int(s["label"])
    llm = [np.frombuffer(p, SIGNAL_CTX_DTYPE, 1)[0] for k, p, _, _ in ctx.outputs["sig_llm"].msgs if k == Kind.SIGNAL_CTX]
    assert [int(s["feature_seq"]) for s in llm] == [1, 3, 4]
    for c, (s, _) in zip(llm, [risk[0], risk[2], risk[3]]):  # the SIGNAL, then the feature vector it came from
        assert c.tobytes()[:56] == s.tobytes()
    assert float(llm[0]["features"][0]) == 5.0 and float(llm[2]["features"][1]) == 5.0
    st = ctx.stats
    assert st["provider"] == "CPU" and st["features"] == 5 and st["signals"] == 5
    assert (st["hold"], st["lean_buy"], st["lean_sell"], st["emergency"]) == (2, 1, 1, 1)
    assert st["rejected"] == 1 and st["unknown_kind"] == 1 and st["runs"] >= (5 if batch == 1 else 1)
    assert ctx.msgs_in == len(msgs) and ctx.msgs_out == 8
    ready = ctx.log.named("fast_ready")
    assert ready and ready[0]["provider"] == "CPUExecutionProvider" and ready[0]["warmup_runs"] == 3


@pytest.mark.parametrize("batch", [1, 256])
def test_a_stale_book_turns_a_lean_into_hold_keeps_an_emergency_and_flags_the_signal(tmp_path, batch):
    model = write_model(tmp_path / "m.onnx")
    stale = FEATURES_FLAG_STALE_BOOK
    msgs = [(Kind.FEATURES, features(1, 5.0, flags=stale), 11), (Kind.FEATURES, features(2, -5.0, flags=stale), 12),
            (Kind.FEATURES, features(3, 0.0, 5.0, flags=stale), 13), (Kind.FEATURES, features(4, 5.0), 14)]
    _, ctx = run(msgs, {"model_path": model, "providers": "cpu"}, batch=batch)
    got = [(int(s["label"]), bool(s["flags"] & SIGNAL_FLAG_STALE_BOOK)) for s, _ in signals(ctx.outputs["sig_risk"])]
    assert got == [(Label.HOLD, True), (Label.HOLD, True), (Label.EMERGENCY, True), (Label.LEAN_BUY, False)]
    st = ctx.stats
    assert st["stale_book"] == 3 and (st["hold"], st["lean_buy"], st["emergency"]) == (2, 1, 1)


def test_thresholds_decide_the_label(tmp_path):
    model = write_model(tmp_path / "m.onnx", gain=1.0)  # f0 = 1: p(buy) ~ 0.48, below 0.6
    msgs = [(Kind.FEATURES, features(1, 1.0), 1), (Kind.FEATURES, features(2, 3.0), 2)]
    _, ctx = run(msgs, {"model_path": model, "providers": "cpu", "thresholds": {"buy": 0.6}})
    assert [int(s["label"]) for s, _ in signals(ctx.outputs["sig_risk"])] == [Label.HOLD, Label.LEAN_BUY]


def test_only_a_risk_output_is_enough_and_full_outputs_are_counted(tmp_path):
    model = write_model(tmp_path / "m.onnx")
    ctx = make_ctx([(Kind.FEATURES, features(1, 5.0), 1)], {"model_path": model, "providers": "cpu"},
                   outputs=("sig_risk",))
    ctx.outputs["sig_risk"].accept = False
    agent = FastAgent()
    agent.on_start(ctx)
    agent.do_work()
    assert ctx.stats["risk_drops"] == 1 and ctx.stats["signals"] == 0 and ctx.stats["lean_buy"] == 1


def test_require_gpu_without_a_usable_cuda_provider_fails_the_start_naming_the_cause(tmp_path):
    import onnxruntime as ort

    model = write_model(tmp_path / "m.onnx")
    ctx = make_ctx([], {"model_path": model, "require_gpu": True})
    try:
        FastAgent().on_start(ctx)
    except StartupError as exc:
        msg = str(exc)
        assert "require_gpu" in msg and "CPUExecutionProvider" in msg
        if "CUDAExecutionProvider" not in ort.get_available_providers():
            assert "has no CUDAExecutionProvider" in msg
        else:
            assert "CUDAExecutionProvider failed to load:" in msg and len(msg.split("load:", 1)[1].strip()) > 10
    else:
        pytest.skip("this machine runs the model on CUDA")


@pytest.mark.parametrize("name", ["fast", "fast_b"])
@pytest.mark.parametrize("params, field", [
    ({"requre_gpu": True}, "unknown field `requre_gpu`"),  # on CPU without a word, before params were typed
    ({"provider": "cuda"}, "unknown field `provider`"),
    ({"thresholds": {"buy": 0.5, "emergancy": 0.9}}, "unknown field `emergancy` - at `$.thresholds`"),
])
def test_a_misspelt_param_fails_the_start_naming_the_process_and_the_field(tmp_path, name, params, field):
    model = write_model(tmp_path / "m.onnx")
    ctx = make_ctx([], {"model_path": model, "providers": "cpu", **params}, name=name)
    with pytest.raises(ConfigError) as err:
        FastAgent().on_start(ctx)
    assert str(err.value).startswith(f"{name}: bad params: ") and field in str(err.value)


@pytest.mark.parametrize("params, field", [
    ({"require_gpu": "true"}, "Expected `bool`, got `str` - at `$.require_gpu`"),
    ({"require_gpu": 1}, "Expected `bool`, got `int` - at `$.require_gpu`"),
    ({"device_id": "0"}, "Expected `int`, got `str` - at `$.device_id`"),
    ({"gpu_mem_limit_mib": 25.6}, "Expected `int`, got `float` - at `$.gpu_mem_limit_mib`"),
    ({"providers": "gpu"}, "Invalid enum value 'gpu' - at `$.providers`"),
    ({"arena_extend_strategy": "kDouble"}, "Invalid enum value 'kDouble' - at `$.arena_extend_strategy`"),
    ({"thresholds": {"buy": "0.4"}}, "Expected `float`, got `str` - at `$.thresholds.buy`"),
    ({"thresholds": 0.4}, "Expected `object`, got `float` - at `$.thresholds`"),
    ({"warmup_runs": -1}, "Expected `int` >= 0 - at `$.warmup_runs`"),
    ({"thresholds": {"side": 0.5}}, "Expected `float` > 0.5 - at `$.thresholds.side`"),
    ({"model_path": 7}, "Expected `str`, got `int` - at `$.model_path`"),
])
def test_an_ill_typed_param_fails_the_start_naming_the_process_and_the_field(tmp_path, params, field):
    model = write_model(tmp_path / "m.onnx")
    with pytest.raises(ConfigError) as err:
        FastAgent().on_start(make_ctx([], {"model_path": model, "providers": "cpu", **params}))
    assert str(err.value) == f"fast: bad params: {field}"


def test_the_typed_params_keep_the_documented_defaults():
    assert msgspec.to_builtins(parse_params("fast", {})) == {
        "input": None, "risk_output": "sig_risk", "llm_output": "sig_llm",
        "model_path": "models/generated/fast.onnx", "providers": "auto", "require_gpu": False, "device_id": 0,
        "gpu_mem_limit_mib": 256, "arena_extend_strategy": "kSameAsRequested",
        "thresholds": {"buy": 0.4, "sell": 0.4, "emergency": 0.5, "side": 1.01}, "warmup_runs": 20,
        "signal_depth": False}


def _given(got: dict, given: dict) -> dict:
    """``got`` cut down to the keys ``given`` names, nested tables too (the rest are defaults)."""
    return {k: _given(got[k], v) if isinstance(v, dict) else got[k] for k, v in given.items()}


@pytest.mark.parametrize("config", ["default.toml", "llm-7b.example.toml"])
def test_the_shipped_configs_fast_params_load(config):
    procs = [p for p in load_config(REPO_ROOT / "configs" / config).processes if p.module == "procs.fast:FastAgent"]
    assert procs, f"configs/{config} has no fast stage"
    for proc in procs:
        assert load_agent_class(proc.module).params_type is FastParams  # what a check before start converts to
        got = parse_params(proc.name, proc.params)
        given = msgspec.to_builtins(got)
        assert _given(given, proc.params) == proc.params  # every value given arrived


def test_a_missing_model_file_fails_the_start(tmp_path):
    with pytest.raises(StartupError, match="make model"):
        FastAgent().on_start(make_ctx([], {"model_path": str(tmp_path / "none.onnx"), "providers": "cpu"}))


def test_a_new_agent_with_another_model_path_gives_that_models_outputs(tmp_path):
    a = write_model(tmp_path / "a.onnx", hold=0.0, buy=5.0)
    b = write_model(tmp_path / "b.onnx", hold=0.0, sell=5.0)
    msgs = [(Kind.FEATURES, features(i), i) for i in range(1, 4)]
    _, ca = run(msgs, {"model_path": a, "providers": "cpu"})
    _, cb = run(msgs, {"model_path": b, "providers": "cpu"})
    assert {int(s["label"]) for s, _ in signals(ca.outputs["sig_risk"])} == {Label.LEAN_BUY}
    assert {int(s["label"]) for s, _ in signals(cb.outputs["sig_risk"])} == {Label.LEAN_SELL}
    assert ca.stats["model"] != cb.stats["model"]


# ------------------------------------------------------------------------------------- end to end
class FeaturesSource(Agent):
    """Writes FEATURES (instrument 1, book_seq 1..) at ``rate_per_s`` into its one output."""

    def on_start(self, ctx):
        self.ctx = ctx
        self.out = next(iter(ctx.outputs.values()))
        self.rate = float(ctx.params.get("rate_per_s", 200))
        self.t0 = ctx.clock()
        self.base = getattr(self.out, "position", 0)
        self.sent = 0

    def do_work(self) -> int:
        due = self.base + int((self.ctx.clock() - self.t0) * self.rate / 1e9)
        n = 0
        while self.base + self.sent < due and n < self.ctx.batch:
            if not self.ctx.emit(self.out, Kind.FEATURES, features(self.base + self.sent + 1), self.ctx.clock()):
                break
            self.sent += 1
            n += 1
        return n


@pytest.mark.multiprocess
@pytest.mark.timeout(90)
def test_restart_fast_with_a_new_model_path_swaps_the_model_and_keeps_the_others_running(pipe):
    a = write_model(pipe.tmp / "a.onnx", hold=0.0, buy=5.0)
    b = write_model(pipe.tmp / "b.onnx", hold=0.0, sell=5.0)
    risk_out, llm_out = pipe.tmp / "risk.txt", pipe.tmp / "llm.txt"
    me = "tests.procs.test_fast_agent"

    def body(model):
        return (ring("feat", payload=560, capacity=1024, policy="drop") + ring("sig_risk", payload=64, capacity=4096,
                                                                                 policy="drop")
                + ring("sig_llm", payload=576, capacity=4096, policy="drop")
                + process("src", f"{me}:FeaturesSource", outputs=["feat"], extra=BACK_OFF, params="rate_per_s = 200")
                + process("fast", "procs.fast:FastAgent", inputs=["feat"], outputs=["sig_risk", "sig_llm"],
                          extra=BACK_OFF, params=f'model_path = "{model}", providers = "cpu", warmup_runs = 5')
                + process("risk", "PayloadSink", inputs=["sig_risk"], extra='wait = "blocking"\n',
                          params=f'out = "{risk_out}"')
                + process("llm", "PayloadSink", inputs=["sig_llm"], extra='wait = "blocking"\n',
                          params=f'out = "{llm_out}"')
                + INSTRUMENTS)

    def labels(path):
        return [int(s["label"]) for _, _, s in read_payloads(path, SIGNAL_DTYPE)]

    path = pipe.write_config(body(a))
    pipe.up()
    wait_until(lambda: len(labels(risk_out)) >= 20, 15, 0.02, "20 SIGNALs at risk")
    first = pipe.procs()["fast"]["stage"]
    assert first["provider"] == "CPU" and set(labels(risk_out)) == {Label.LEAN_BUY}
    assert labels(llm_out)[:20] == labels(risk_out)[:20]
    before = pipe.pids()

    path.write_text(pipe.config_text(body(b)))  # same file, new model_path
    resp = pipe.request({"cmd": "restart", "name": "fast"})
    assert resp["ok"], resp
    st = wait_until(lambda: (p := pipe.procs()["fast"])["state"] == "RUNNING" and p["pid"] != before["fast"]
                    and p["stage"].get("model") not in (None, first["model"]) and p, 20, 0.05, "fast on model B")
    n = len(labels(risk_out))
    wait_until(lambda: len(labels(risk_out)) >= n + 20, 15, 0.02, "20 more SIGNALs")
    got = labels(risk_out)
    assert got[-1] == Label.LEAN_SELL and set(got) == {Label.LEAN_BUY, Label.LEAN_SELL}
    assert got.index(Label.LEAN_SELL) > 0 and all(x == Label.LEAN_SELL for x in got[got.index(Label.LEAN_SELL):])
    after = pipe.pids()
    assert {k: v for k, v in after.items() if k != "fast"} == {k: v for k, v in before.items() if k != "fast"}
    assert st["stage"]["provider"] == "CPU"
    ready = [e for e in pipe.log("fast") if e.get("event") == "fast_ready"]
    assert [e["model"] for e in ready][-2:] == [a, b]
    assert pipe.down() == 0


def test_keep_warm_between_batches_changes_no_output_and_no_counter(tmp_path):
    model = write_model(tmp_path / "m.onnx")
    first = [(Kind.FEATURES, features(1, 5.0), 11), (Kind.FEATURES, features(2, -5.0), 12)]
    second = [(Kind.FEATURES, features(3), 13), (Kind.FEATURES, features(4, 0.0, 5.0, iid=2), 14)]
    results = []
    for warm in (False, True):
        ctx = make_ctx(first, {"model_path": model, "providers": "cpu", "warmup_runs": 1}, batch=1)
        agent = FastAgent()
        agent.on_start(ctx)
        while agent.do_work():
            pass
        if warm:
            for _ in range(5):
                agent.keep_warm()
        ctx.inputs["feat"].msgs += second
        while agent.do_work():
            pass
        results.append(({o: [(k, p, ts) for k, p, ts, _ in port.msgs] for o, port in ctx.outputs.items()}, dict(ctx.stats)))
    assert results[0] == results[1]
    assert [int(s["feature_seq"]) for s, _ in signals(make_port(results[1][0]["sig_risk"]))] == [1, 2, 3, 4]


def make_port(msgs):
    port = RecordingPort()
    port.msgs = [(k, p, ts, 0) for k, p, ts in msgs]
    return port


def test_one_features_alone_and_in_a_batch_give_the_same_signal_bytes(tmp_path):
    """A poll that brings one FEATURES takes the scalar single path, a poll of several the numpy batch
    path: for random vectors, with each threshold set to exactly a probability the model gives, and
    just above it in float64 but equal in float32 (numpy compares the float32 probabilities in
    float32), both write the same SIGNAL and SIGNAL_CTX bytes."""
    rng = np.random.default_rng(7)
    model = write_model(tmp_path / "m.onnx", gain=2.0)
    payloads = []
    for seq in range(1, 201):
        r = np.frombuffer(features(seq, *rng.normal(0, 1.5, 2), iid=1 + seq % 2,
                                   flags=FEATURES_FLAG_WARMUP if seq % 7 == 0 else 0), FEATURES_DTYPE, 1).copy()
        r["features"][0, 2:] = rng.normal(0, 1, 126)
        payloads.append(r.tobytes())
    probe, _ = run([], {"model_path": model})
    probe.x[0] = np.frombuffer(payloads[3], FEATURES_DTYPE, 1)["features"][0]
    p = probe._infer(1)[0].copy()
    up = lambda v: float(np.nextafter(float(v), 2.0))  # noqa: E731 - above it in float64, the same float32
    for th in ({}, {"buy": float(p[Label.LEAN_BUY]), "sell": float(p[Label.LEAN_SELL]),
                    "emergency": float(p[Label.EMERGENCY])},
               {"buy": up(p[Label.LEAN_BUY]), "sell": up(p[Label.LEAN_SELL]), "emergency": up(p[Label.EMERGENCY])}):
        msgs = [(Kind.FEATURES, b, 100 + i) for i, b in enumerate(payloads)]
        one, one_ctx = run(list(msgs), {"model_path": model, "thresholds": th}, batch=1)
        many, many_ctx = run(list(msgs), {"model_path": model, "thresholds": th}, batch=256)
        for out in ("sig_risk", "sig_llm"):
            a = [(k, bytes(p), ts) for k, p, ts, _ in one_ctx.outputs[out].msgs]
            b = [(k, bytes(p), ts) for k, p, ts, _ in many_ctx.outputs[out].msgs]
            assert a == b and len(a) > (150 if out == "sig_risk" else 20), (out, th, len(a), len(b))
        labels = {int(r["label"]) for r, _ in signals(one_ctx.outputs["sig_risk"])}
        assert len(labels) >= 3, labels
        assert one_ctx.stats == many_ctx.stats | {"runs": 200}


# ------------------------------------------------------------------ the model card (issue #22)
def _start(model: str) -> FastAgent:
    agent = FastAgent()
    agent.on_start(make_ctx([], {"model_path": model, "providers": "cpu", "warmup_runs": 0}))
    return agent


def test_a_model_without_a_card_is_refused_at_start_saying_so(tmp_path):
    model = write_model(tmp_path / "m.onnx", card=None)
    with pytest.raises(ConfigError) as err:
        _start(model)
    msg = str(err.value)
    assert msg.startswith(f"fast: model {model!r} has no model card") and str(card_path(model)) in msg, msg
    assert "make model" in msg


def test_a_model_whose_embedded_card_is_for_another_feature_layout_is_refused_naming_both(tmp_path):
    model = write_model(tmp_path / "m.onnx", card={**CARD, "feature_layout_version": FEATURE_LAYOUT_VERSION + 1})
    with pytest.raises(ConfigError) as err:
        _start(model)
    msg = str(err.value)
    assert f"says feature layout version {FEATURE_LAYOUT_VERSION + 1}" in msg, msg
    assert f"this pipeline computes feature layout version {FEATURE_LAYOUT_VERSION} " in msg, msg
    assert "ONNX metadata" in msg


def test_a_card_file_beside_the_model_is_checked_too(tmp_path):
    """The embedded card is right, the file beside it says another layout: refused, naming the file;
    the same file with the right version: accepted, and its card is the one the stage keeps."""
    model = write_model(tmp_path / "m.onnx")
    write_card(model, {**CARD, "feature_layout_version": 0})
    with pytest.raises(ConfigError, match=r"card file .*m\.card\.json.* says feature layout version 0"):
        _start(model)
    write_card(model, {**CARD, "description": "beside"})
    assert _start(model).card["description"] == "beside"
    card_path(model).write_text("{not json")
    with pytest.raises(ConfigError, match="is not valid JSON"):
        _start(model)


def test_a_card_file_that_describes_another_model_file_is_refused(tmp_path):
    a, b = write_model(tmp_path / "a.onnx"), write_model(tmp_path / "b.onnx", buy=1.0)
    card_path(a).write_text(write_card(b, CARD).read_text())  # b's card, copied beside a
    with pytest.raises(ConfigError, match="describes another file"):
        _start(a)


def test_thresholds_other_than_the_card_s_start_with_a_warning_naming_both(tmp_path):
    card = {**CARD, "thresholds": {"buy": 0.7, "sell": 0.7, "emergency": 1.01}}
    model = write_model(tmp_path / "m.onnx", card=card)
    ctx = make_ctx([], {"model_path": model, "providers": "cpu", "warmup_runs": 0})
    FastAgent().on_start(ctx)  # the FastParams defaults: 0.4 / 0.4 / 0.5
    (warn,) = ctx.log.named("fast_thresholds_differ_from_card")
    assert warn["thresholds"] == {"buy": 0.4, "sell": 0.4, "emergency": 0.5, "side": 1.01}
    assert warn["card"] == {"buy": 0.7, "sell": 0.7, "emergency": 1.01, "side": 1.01}  # no side in a card: never
    same = make_ctx([], {"model_path": model, "providers": "cpu", "warmup_runs": 0,
                         "thresholds": {"buy": 0.7, "sell": 0.7, "emergency": 1.01}})
    FastAgent().on_start(same)
    assert same.log.named("fast_thresholds_differ_from_card") == []


# ------------------------------------------------------------ the at-risk side and the input-range guard (#30)
BID, ASK, OOR = SIGNAL_FLAG_AT_RISK_BID, SIGNAL_FLAG_AT_RISK_ASK, SIGNAL_FLAG_OUT_OF_RANGE
#: bounds of [-10, 10] on every slot, slot 5 (F_BID_DIST_5) up to 100
BOUNDS = InputBounds(np.full(128, -10.0, np.float32), np.where(np.arange(128) == 5, 100.0, 10.0).astype(np.float32))
BOUNDED = hand_made_card("test", "bounded", bounds=BOUNDS)


@pytest.mark.parametrize("batch", [1, 256])
def test_an_out_of_range_book_is_hold_with_the_flag_counted_and_in_range_the_model_s_label(tmp_path, batch):
    model = write_model(tmp_path / "m.onnx", card=BOUNDED)
    v = np.zeros(128, np.float32)
    v[0] = 5.0  # LEAN_BUY
    far = v.copy()
    far[5] = 1.2e9  # depth far beyond anything trained on: the model would still say LEAN_BUY
    warm_far = far.copy()
    warm_far[0], warm_far[1], warm_far[40] = -5.0, 5.0, -11.0  # EMERGENCY, and slot 40 just under its bound
    nan = v.copy()
    nan[90] = np.nan  # a NaN input is never in range
    msgs = [(Kind.FEATURES, features_row(1, v), 1), (Kind.FEATURES, features_row(2, nan), 2),
            (Kind.FEATURES, features_row(3, far), 3),
            (Kind.FEATURES, features_row(4, warm_far, flags=FEATURES_FLAG_WARMUP), 4),
            (Kind.FEATURES, features_row(5, v), 5)]
    _, ctx = run(msgs, {"model_path": model, "providers": "cpu", "warmup_runs": 1}, batch=batch)
    risk = signals(ctx.outputs["sig_risk"])
    assert [(int(s["label"]), int(s["flags"])) for s, _ in risk] == [
        (Label.LEAN_BUY, 0), (Label.HOLD, OOR), (Label.HOLD, OOR), (Label.HOLD, OOR | SIGNAL_FLAG_WARMUP),
        (Label.LEAN_BUY, 0)]
    assert int(np.argmax(risk[2][0]["probs"])) == Label.LEAN_BUY  # what the model said is kept for the record
    st = ctx.stats
    assert st["out_of_range"] == 3 and st["hold"] == 3 and st["lean_buy"] == 2 and st["emergency"] == 0
    assert st["oor_slot"] == "F_BID_DIST_5"  # the latest: slot 5 at 1.2e9 (12 million widths) beats slot 40
    assert [int(s["feature_seq"]) for s in (np.frombuffer(p, SIGNAL_CTX_DTYPE, 1)[0]
                                            for k, p, _, _ in ctx.outputs["sig_llm"].msgs)] == [1, 5]  # HOLDs stay


@pytest.mark.parametrize("batch", [1, 256])
def test_an_emergency_names_the_side_the_model_is_sure_of_and_is_counted(tmp_path, batch):
    model = write_model(tmp_path / "m.onnx", side=True)
    rows = []
    for seq, (f1, f2) in enumerate([(5.0, 3.0), (5.0, -3.0), (5.0, 0.1), (0.0, 3.0)], 1):
        v = np.zeros(128, np.float32)
        v[1], v[2] = f1, f2
        rows.append((Kind.FEATURES, features_row(seq, v), seq))
    # f2 = 3: P(bid) ~ 1; -3: P(ask) ~ 1; 0.1: ~0.6, under the side threshold 0.9; the last is not an EMERGENCY
    _, ctx = run(rows, {"model_path": model, "providers": "cpu", "thresholds": {"side": 0.9}}, batch=batch)
    assert [(int(s["label"]), int(s["flags"])) for s, _ in signals(ctx.outputs["sig_risk"])] == [
        (Label.EMERGENCY, BID), (Label.EMERGENCY, ASK), (Label.EMERGENCY, 0), (Label.HOLD, 0)]
    assert (ctx.stats["emergency"], ctx.stats["at_risk_bid"], ctx.stats["at_risk_ask"]) == (3, 1, 1)
    _, never = run(rows, {"model_path": model, "providers": "cpu"}, batch=batch)  # side 1.01 (default): never
    assert {int(s["flags"]) for s, _ in signals(never.outputs["sig_risk"])} == {0}
    # a side threshold exactly at the model's float32 P(ask at risk) names the ask (compared in float32, >=)
    probe, _ = run([], {"model_path": model, "providers": "cpu"})
    probe.x[0] = 0.0
    probe.x[0, 1], probe.x[0, 2] = 5.0, -0.3
    probe._infer(1)
    p_ask = float(probe.at_risk[0, 1])
    assert 0.6 < p_ask < 0.9
    v = np.zeros(128, np.float32)
    v[1], v[2] = 5.0, -0.3
    for th in (p_ask, float(np.nextafter(p_ask, 2.0))):  # at it; above it in float64 but the same float32
        _, exact = run([(Kind.FEATURES, features_row(1, v), 1), (Kind.FEATURES, features_row(2, v), 2)],
                       {"model_path": model, "providers": "cpu", "thresholds": {"side": th}}, batch=batch)
        assert [int(s["flags"]) for s, _ in signals(exact.outputs["sig_risk"])] == [ASK, ASK], th  # 2: a batch


def test_the_stage_s_decision_is_the_pure_rule_of_pipeline_trading_model_decide(tmp_path):
    """``FastAgent.decide`` (the batch path) against ``decide.deployed_decisions`` on random rows: the
    same labels and flags, with ties and exact thresholds."""
    agent, _ = run([], {"model_path": write_model(tmp_path / "m.onnx", side=True, card=BOUNDED), "providers": "cpu",
                        "thresholds": {"buy": 0.4, "sell": 0.45, "emergency": 0.3, "side": 0.6}})
    rng = np.random.default_rng(3)
    n = 256
    probs = rng.dirichlet(np.full(4, 0.7), size=n).astype(np.float32)
    probs[:40] = rng.choice(np.float32([0.3, 0.4, 0.45, 0.6]), size=(40, 4))
    agent.at_risk[:n] = rng.choice(np.float32([0.1, 0.4, 0.6, 0.9]), size=(n, 2))
    X = rng.normal(0, 3, (n, 128)).astype(np.float32)  # ~1 row in 9 has a slot beyond +-10
    got = agent.decide(probs, X)
    want = deployed_decisions(probs, agent.at_risk[:n], X, BOUNDS, 0.4, 0.45, 0.3, 0.6)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
    assert {int(x) for x in want[1]} >= {0, BID, ASK, OOR}


def test_one_features_alone_and_in_a_batch_give_the_same_bytes_with_sides_and_the_guard(tmp_path):
    """The scalar single path and the numpy batch path with a side output and bounds some rows break."""
    rng = np.random.default_rng(11)
    model = write_model(tmp_path / "m.onnx", gain=2.0, side=True, card=BOUNDED)
    msgs = []
    for seq in range(1, 301):
        v = rng.normal(0, 4, 128).astype(np.float32)
        v[5] = rng.choice([0.0, 150.0], p=[0.9, 0.1])
        msgs.append((Kind.FEATURES, features_row(seq, v, flags=FEATURES_FLAG_WARMUP if seq % 9 == 0 else 0), seq))
    th = {"buy": 0.5, "sell": 0.5, "emergency": 0.4, "side": 0.7}
    one, one_ctx = run(list(msgs), {"model_path": model, "thresholds": th}, batch=1)
    many, many_ctx = run(list(msgs), {"model_path": model, "thresholds": th}, batch=256)
    for out in ("sig_risk", "sig_llm"):
        a = [(k, bytes(p), ts) for k, p, ts, _ in one_ctx.outputs[out].msgs]
        b = [(k, bytes(p), ts) for k, p, ts, _ in many_ctx.outputs[out].msgs]
        assert a == b
    flags = {int(s["flags"]) & ~SIGNAL_FLAG_WARMUP for s, _ in signals(one_ctx.outputs["sig_risk"])}
    assert flags >= {0, BID, ASK, OOR}, flags
    assert one_ctx.stats == many_ctx.stats | {"runs": 300}


def test_a_card_without_input_bounds_is_refused_at_start(tmp_path):
    card = dict(CARD)
    del card[BOUNDS_KEY]
    with pytest.raises(ConfigError, match=f"has no {BOUNDS_KEY}"):
        _start(write_model(tmp_path / "m.onnx", card=card))


@pytest.mark.parametrize("batch", [1, 256])
def test_with_signal_depth_each_signal_carries_the_feature_vectors_levels(tmp_path, batch):
    from pipeline.trading.messages import SIGNAL_DEPTH_DTYPE

    model = write_model(tmp_path / "m.onnx")
    vecs = []
    for k in range(2):
        v = np.zeros(128, np.float32)
        v[3:60] = np.arange(57, dtype=np.float32) * 0.25 + k  # the level slots (0..59); 0..2 drive the labels
        v[60:] = -1.0  # past the level block: never copied
        vecs.append(v)
    vecs[0][0] = 5.0  # LEAN_BUY: this one also goes to the llm
    msgs = [(Kind.FEATURES, features_row(k + 1, v), 10 + k) for k, v in enumerate(vecs)]
    _, ctx = run(msgs, {"model_path": model, "providers": "cpu", "warmup_runs": 1, "signal_depth": True},
                 batch=batch, risk_payload=296)
    out = [p for k, p, _, _ in ctx.outputs["sig_risk"].msgs if k == Kind.SIGNAL]
    assert [len(p) for p in out] == [296, 296]
    for p, v in zip(out, vecs):
        r = np.frombuffer(p, SIGNAL_DEPTH_DTYPE, 1)[0]
        assert np.array_equal(np.concatenate([r["depth_bid_dist"], r["depth_ask_dist"], r["depth_bid_sz"],
                                              r["depth_ask_sz"]]), v[:60])
    assert int(np.frombuffer(out[0], SIGNAL_DEPTH_DTYPE, 1)[0]["label"]) == Label.LEAN_BUY
    llm = [p for k, p, _, _ in ctx.outputs["sig_llm"].msgs if k == Kind.SIGNAL_CTX]
    assert len(llm) == 1 and len(llm[0]) == SIGNAL_CTX_DTYPE.itemsize and bytes(llm[0])[:56] == bytes(out[0])[:56]


def test_signal_depth_on_a_ring_too_small_for_it_fails_the_start_naming_the_ring(tmp_path):
    model = write_model(tmp_path / "m.onnx")
    ctx = make_ctx([], {"model_path": model, "providers": "cpu", "signal_depth": True}, risk_payload=64)
    with pytest.raises(ConfigError, match="signal_depth.*'sig_risk'.*296.*64"):
        FastAgent().on_start(ctx)
