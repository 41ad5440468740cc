"""The hub engine on the real llama-cpp-python: with the generated tiny model (speed) the tight grammar
always validates, forced text is evaluated without sampling and changes nothing, the prompt prefix is
reused, the stop rules hold; with the packaged default model (SmolLM2-135M-Instruct) its own chat
template frames the prompt and its answers validate, none truncated. The 7B example's GPU budget."""

from __future__ import annotations

import threading

import llama_cpp
import pytest

from pipeline.runtime.config import load_config
from pipeline.runtime.errors import StartupError
from pipeline.runtime.gpu import GpuInfo, budget_from_config, check_budget, needed_mib
from pipeline.trading.llm.hub import LlmHub, LlmParams, grammar_parses, reused_prefix
from pipeline.trading.llm.modelfile import DEFAULT_MODEL
from pipeline.trading.llm.prompt import PositionView, example_signal, system_text
from pipeline.trading.llm.schema import ANSWER_PREFIX, Decision, Rejected, validate
from tests.support.configtext import instruments
from tests.support.llm import default_model, tiny_model
from tests.support.paths import REPO_ROOT

FAR = 10**18


def hub(**kw) -> LlmHub:
    kw.setdefault("n_ctx", 2048)
    return LlmHub(LlmParams(model_path=tiny_model(), **kw), instruments())


@pytest.fixture(scope="module")
def tight():
    h = hub(temperature=1.0)
    yield h
    h.close()


def test_under_the_tight_grammar_every_answer_validates_for_the_signals_instrument(tight):
    for i in range(30):
        sig = example_signal(i, instrument_id=1 + i % 2, feature_seq=i)
        out = tight.decide(sig, None if i % 3 else PositionView(lots=i % 7 - 3, moves=(1,)), deadline_ns=FAR)
        assert out.ok and out.finish == "stop", (out.reason, out.detail, out.text)
        assert out.decision.inst == 1 + i % 2 and out.decision.ttl == 2000
        assert isinstance(validate(out.text, instrument_id=1 + i % 2, bounds=tight.bounds), Decision)
        assert out.text.startswith(ANSWER_PREFIX) and out.text.endswith("}") and out.on_time
        # the model chose the word and the numbers; the keys and punctuation were forced
        assert 0 < out.gen_tokens < out.forced_tokens and out.gen_tokens + out.forced_tokens <= 38


def test_forced_text_is_evaluated_without_sampling_and_the_model_chooses_only_the_values():
    """The same signals with and without fast-forward (greedy sampling, the tiny model's one token a
    byte): both give valid answers with the same action (sampled from the same prompt, before any
    forced text), and with it the model samples less than half as many tokens. (The numbers after
    forced text may differ: a batch is evaluated with other float rounding than token by token, and a
    random-weight model's logits are near ties.)"""
    a, b = hub(temperature=0.0), hub(temperature=0.0, fast_forward=False)
    try:
        for i in range(8):
            sig = example_signal(200 + i, feature_seq=i)
            x, y = a.decide(sig, 2, deadline_ns=FAR), b.decide(sig, 2, deadline_ns=FAR)
            assert x.ok and y.ok and x.decision.act == y.decision.act, (x.text, y.text)
            assert y.forced_tokens == 0 and y.gen_tokens == len(y.text) - len(ANSWER_PREFIX)
            assert x.gen_tokens + x.forced_tokens == len(x.text) - len(ANSWER_PREFIX)
            assert x.gen_tokens < y.gen_tokens / 2
    finally:
        a.close()
        b.close()


def test_the_system_prefix_is_evaluated_once_and_reused_and_without_reuse_everything_is_evaluated():
    def run(h, n):
        figures = []
        for i in range(n):
            p0 = llama_cpp.llama_perf_context(h.llm.ctx)
            out = h.decide(example_signal(100 + i), i, deadline_ns=FAR)
            p1 = llama_cpp.llama_perf_context(h.llm.ctx)
            figures.append((out.prompt_tokens, out.prompt_evaluated, (p1.n_p_eval + p1.n_eval) - (p0.n_p_eval + p0.n_eval)))
        return figures

    h = hub()
    try:
        sys_n = len(h.sys_tokens)
        assert h.frame.template == "plain" and sys_n > len(system_text(h.bounds))  # one token a byte, and BOS
        first, *rest = run(h, 4)
        assert first[1] == first[0]
        for total, evaluated, model_evals in rest:
            assert evaluated <= total - sys_n + 1 and model_evals < total  # the model never saw the prefix again
    finally:
        h.close()
    h = hub(reuse_prefix=False)
    try:
        for total, evaluated, model_evals in run(h, 3):
            assert evaluated == total and model_evals >= total
    finally:
        h.close()


def test_the_prefix_rule_matches_llama_cpp_python():
    assert reused_prefix([1, 2, 3, 9], 4, [1, 2, 3, 4, 5]) == 3
    assert reused_prefix([1, 2, 3], 3, [1, 2, 3]) == 2  # the last token is evaluated again for its logits
    assert reused_prefix([1, 2, 3], 3, [1, 2, 3], requires_eval=False) == 3
    assert reused_prefix([1, 2], 0, [1, 2]) == 0


def test_without_the_grammar_garbage_stops_at_its_first_impossible_token():
    """A model or grammar gone wrong (here: no grammar, temperature 5, every token allowed) does not
    spend max_tokens on an answer that can no longer validate: the first non-ASCII byte, or a first
    byte that cannot start an action word, ends the generation, rejected as invalid JSON."""
    h = hub(temperature=5.0, top_k=0, top_p=1.0)
    h._grammar = lambda iid: None
    try:
        outs = [h.decide(example_signal(40 + i), None, deadline_ns=FAR) for i in range(10)]
    finally:
        h.close()
    for out in outs:  # stopped at an impossible token, or by an end-of-generation token before one
        assert not out.ok and out.finish in ("invalid", "stop", "length"), (out.finish, out.text)
        assert out.gen_tokens <= 64 and out.forced_tokens == 0 and out.on_time
    stopped = [out for out in outs if out.finish == "invalid"]
    assert stopped, [(out.finish, out.text) for out in outs]
    for out in stopped:
        assert out.reason == "invalid_json"
        text = out.text[len(ANSWER_PREFIX):]
        assert not text.isascii() or not text[:1].islower()  # it could not have validated


def test_a_blank_line_ends_the_answer():
    """A model that starts an answer and then writes a blank line (no grammar holds it here) is stopped
    there, not at max_tokens."""
    h = hub(temperature=0.0)
    h._grammar = lambda iid: None
    pieces = iter([b"b", b"\n", b"\n"])
    h.llm.detokenize = lambda toks, *a, **k: next(pieces, b"y")  # what the model "writes", token by token
    try:
        out = h.decide(example_signal(3), None, deadline_ns=FAR)
    finally:
        del h.llm.detokenize
        h.close()
    assert out.finish == "stop" and out.gen_tokens == 3 and out.reason == "invalid_json"
    assert out.text == ANSWER_PREFIX + "b\n\n"


def test_max_tokens_truncates_and_the_answer_is_rejected():
    h = hub(max_tokens=12, grammar="loose")
    try:
        out = h.decide(example_signal(5), None, deadline_ns=FAR)
        assert not out.ok and out.reason == "truncated" and out.gen_tokens == 12 and out.finish == "length"
    finally:
        h.close()


def test_a_passed_deadline_stops_the_generation_as_a_timeout():
    t = [0]

    def clock():  # every look at the clock costs 1 ms
        t[0] += 1_000_000
        return t[0]

    h = LlmHub(LlmParams(model_path=tiny_model(), n_ctx=2048), instruments(), clock=clock)
    try:
        out = h.decide(example_signal(1), None, deadline_ns=clock() + 3_000_000)
        assert out.reason == "timeout" and out.finish == "deadline" and not out.on_time and 0 < out.gen_tokens < 5
    finally:
        h.close()


def test_an_abort_stops_the_generation(tight):
    ev = threading.Event()
    ev.set()
    out = tight.decide(example_signal(2), None, deadline_ns=FAR, abort=ev)
    assert out.reason == "aborted" and out.gen_tokens == 1


def test_a_prompt_that_does_not_fit_the_context_is_an_error_outcome():
    h = hub(n_ctx=640)  # the plain prompt is ~one token a byte: it does not fit with max_tokens
    try:
        out = h.decide(example_signal(1), None, deadline_ns=FAR)
        assert out.reason == "error" and "n_ctx" in out.detail
        assert h.decide(example_signal(1, instrument_id=99), None, deadline_ns=FAR).detail == "instrument 99 is not configured"
    finally:
        h.close()


def test_grammars_are_checked_by_llama_cpp_and_bad_files_fail_the_start(tmp_path, tight):
    assert grammar_parses(tight.llm, 'root ::= "a" [0-9]') and not grammar_parses(tight.llm, 'root ::= "a" undefined')
    with pytest.raises(StartupError, match="tinymodel"):
        LlmHub(LlmParams(model_path=str(tmp_path / "none.gguf")), instruments())
    (tmp_path / "bad.gguf").write_bytes(b"not a gguf")
    with pytest.raises(StartupError, match="not a usable GGUF"):
        LlmHub(LlmParams(model_path=str(tmp_path / "bad.gguf")), instruments())
    import gguf

    w = gguf.GGUFWriter(str(tmp_path / "odd.gguf"), "no-such-architecture")  # a whole GGUF llama.cpp cannot run
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(StartupError, match="could not load"):
        LlmHub(LlmParams(model_path=str(tmp_path / "odd.gguf")), instruments())


def test_the_fault_hook_runs_before_every_sampled_token(tight):
    calls = []
    tight.before_token = lambda: calls.append(1)
    try:
        out = tight.decide(example_signal(8), None, deadline_ns=FAR)
    finally:
        tight.before_token = None
    assert out.ok and len(calls) == out.gen_tokens > 0  # not before forced tokens: those are not sampled


def test_a_model_s_own_chat_template_frames_the_prompt_and_one_that_cannot_be_split_fails_the_start(tmp_path):
    from pipeline.trading.llm.tinymodel import write_tiny_gguf

    good = write_tiny_gguf(tmp_path / "chat.gguf",
                           chat_template="{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}<bot>")
    h = LlmHub(LlmParams(model_path=str(good), n_ctx=2048), instruments())
    try:
        assert h.frame.template == "gguf" and h.frame.prefix == f"<system>{system_text(h.bounds)}<user>"
        assert h.frame.suffix == "<bot>" and h.prompt_text(example_signal(1), 0).endswith("<bot>" + ANSWER_PREFIX)
        out = h.decide(example_signal(1), 0, deadline_ns=FAR)
        assert out.ok and out.prompt_tokens == len(h.sys_tokens) + len(h.prompt_text(example_signal(1), 0))
    finally:
        h.close()
    bad = write_tiny_gguf(tmp_path / "bad-chat.gguf",
                          chat_template="{% for m in messages %}{{ m['content'] | lower }}{% endfor %}")
    with pytest.raises(StartupError, match="bad-chat.gguf.*the chat template.*chat_format = \"plain\""):
        LlmHub(LlmParams(model_path=str(bad), n_ctx=2048), instruments())
    h = LlmHub(LlmParams(model_path=str(bad), n_ctx=2048, chat_format="plain"), instruments())
    try:
        assert h.frame.template == "plain" and h.decide(example_signal(1), 0, deadline_ns=FAR).ok
    finally:
        h.close()


def test_status_names_the_stand_in(tight):
    assert tight.model_name == "tiny.gguf (stand-in)" and tight.stand_in and tight.gpu_mib == 0


@pytest.fixture(scope="module")
def smollm():
    h = LlmHub(LlmParams(n_ctx=1024, seed=7), instruments())  # the default model_path: the packaged one as Q4_0
    yield h
    h.close()


def test_the_default_model_answers_through_its_own_chat_template_and_every_answer_validates(smollm):
    assert smollm.model_name == default_model().name == "SmolLM2-135M-Instruct.Q4_0.gguf" and not smollm.stand_in
    assert smollm.frame.template == "gguf" and smollm.frame.prefix.startswith("<|im_start|>system\n")
    assert smollm.prompt_text(example_signal(1), 2).endswith("<|im_end|>\n<|im_start|>assistant\n" + ANSWER_PREFIX)
    n_sys = len(smollm.sys_tokens)
    for i in range(5):
        out = smollm.decide(example_signal(i, instrument_id=1 + i % 2, feature_seq=i),
                            PositionView(lots=i - 2, moves=(1, -1)[: i % 3]), deadline_ns=FAR)
        assert out.ok and out.finish == "stop" and out.reason == "", (out.reason, out.detail, out.text)
        assert out.decision.inst == 1 + i % 2 and out.text.endswith("}")
        assert out.prompt_tokens - n_sys < 60 and out.gen_tokens + out.forced_tokens <= 64  # never truncated
        if i:
            assert out.prompt_evaluated <= out.prompt_tokens - n_sys + 1  # the system turn was reused


def test_the_7b_example_fits_a_12_gb_card_and_not_an_8_gb_one():
    """Design document 002's budget: LLM ~4.4 GiB + its KV cache + ONNX 2 GiB + the reserve, checked by
    the supervisor against the device's free memory (fake device figures here)."""
    cfg = load_config(REPO_ROOT / "configs" / "llm-7b.example.toml")
    budget = budget_from_config(cfg)  # the model file is not here: the planned figures stand
    assert (budget.llm_weights_mib, budget.llm_kv_cache_mib, budget.onnx_mem_limit_mib, budget.reserve_mib) == (
        4506, 224, 2048, 1024)
    assert needed_mib(budget) == 7802
    assert cfg.process("llm").params["n_gpu_layers"] == 99 and cfg.process("llm").params["n_ctx"] == 4096
    rtx3060 = GpuInfo(0, "NVIDIA GeForce RTX 3060", total_mib=12288, free_mib=11_700, source="nvml")
    assert "need 7802 MiB of 11700 MiB free" in check_budget(budget, rtx3060)
    with pytest.raises(StartupError, match="llm weights 4506 \\+ kv cache 224 \\+ onnx 2048 \\+ reserve 1024"):
        check_budget(budget, GpuInfo(0, "an 8 GB card", total_mib=8192, free_mib=7_500, source="nvml"))
    with pytest.raises(StartupError, match="gpu.require"):
        check_budget(budget, None, "no NVIDIA driver found")


def test_a_bigger_model_file_than_planned_is_counted_as_it_is(tmp_path, monkeypatch):
    from pipeline.runtime import gpu

    cfg = load_config(REPO_ROOT / "configs" / "llm-7b.example.toml")
    monkeypatch.setattr(gpu, "stage_gpu_need", lambda proc: gpu.GpuNeed(llm_weights_mib=6000, llm_kv_cache_mib=448)
                        if proc.name == "llm" else gpu.NO_GPU)
    budget = budget_from_config(cfg)
    assert (budget.llm_weights_mib, budget.llm_kv_cache_mib, budget.onnx_mem_limit_mib) == (6000, 448, 2048)
    assert LlmParams(model_path=DEFAULT_MODEL).gpu_need().llm_weights_mib == 0  # n_gpu_layers 0: nothing on the GPU
