"""The hub engine on the real llama-cpp-python and the generated tiny model: the tight grammar always
validates, the prompt prefix is reused, max_tokens and the deadline stop a generation."""

from __future__ import annotations

import threading

import llama_cpp
import pytest

from pipeline.runtime.errors import StartupError
from pipeline.trading.llm.hub import LlmHub, LlmParams, grammar_parses, reused_prefix
from pipeline.trading.llm.prompt import example_signal
from pipeline.trading.llm.schema import Rejected, validate
from tests.support.configtext import instruments
from tests.support.llm import tiny_model

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
        out = tight.decide(sig, None if i % 3 else i % 7 - 3, deadline_ns=FAR)
        assert out.ok and out.finish == "stop", (out.reason, out.detail, out.text)
        assert out.decision.inst == 1 + i % 2 and not isinstance(validate(out.text, instrument_id=1 + i % 2,
                                                                          bounds=tight.bounds), Rejected)
        assert 0 < out.gen_tokens <= 80 and out.on_time


def test_the_system_prefix_is_evaluated_once_and_reused_and_without_reuse_everything_is_evaluated():
    def run(h, n):
        figures = []
        for i in range(n):
            p0 = llama_cpp.llama_perf_context(h.llm.ctx)
            out = h.decide(example_signal(100 + i), None, deadline_ns=FAR)
            p1 = llama_cpp.llama_perf_context(h.llm.ctx)
            figures.append((out.prompt_tokens, out.prompt_evaluated, (p1.n_p_eval + p1.n_eval) - (p0.n_p_eval + p0.n_eval)))
        return figures

    h = hub()
    try:
        sys_n = len(h.sys_tokens)
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
    non-blank byte other than "{", ends the generation, rejected as invalid JSON."""
    h = hub(temperature=5.0, top_k=0, top_p=1.0)
    h._grammar = lambda iid: None
    try:
        outs = [h.decide(example_signal(40 + i), None, deadline_ns=FAR) for i in range(10)]
    finally:
        h.close()
    for out in outs:  # stopped at an impossible token, or by an end-of-generation token before one
        assert not out.ok and out.reason == "invalid_json" and out.finish in ("invalid", "stop"), (out.finish, out.text)
        assert out.gen_tokens < 96 and out.on_time
    stopped = [out for out in outs if out.finish == "invalid"]
    assert stopped, [(out.finish, out.text) for out in outs]
    for out in stopped:
        text = out.text.lstrip()
        assert not text.isascii() or not text.startswith("{")  # it could not have validated


def test_max_tokens_truncates_and_the_answer_is_rejected(tight):
    h = hub(max_tokens=12)
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
        out = h.decide(example_signal(1), None, deadline_ns=clock() + 5_000_000)
        assert out.reason == "timeout" and out.finish == "deadline" and not out.on_time and 0 < out.gen_tokens < 10
    finally:
        h.close()


def test_an_abort_stops_the_generation(tight):
    ev = threading.Event()
    ev.set()
    out = tight.decide(example_signal(2), None, deadline_ns=FAR, abort=ev)
    assert out.reason == "aborted" and out.gen_tokens == 1


def test_a_prompt_that_does_not_fit_the_context_is_an_error_outcome():
    h = hub(n_ctx=512)
    try:
        out = h.decide(example_signal(1), None, deadline_ns=FAR)
        assert out.reason == "error" and "n_ctx" in out.detail
    finally:
        h.close()


def test_grammars_are_checked_by_llama_cpp_and_bad_files_fail_the_start(tmp_path, tight):
    assert grammar_parses(tight.llm, 'root ::= "a" [0-9]') and not grammar_parses(tight.llm, 'root ::= "a" undefined')
    with pytest.raises(StartupError, match="tinymodel"):
        LlmHub(LlmParams(model_path=str(tmp_path / "none.gguf")), instruments())
    (tmp_path / "bad.gguf").write_bytes(b"not a gguf")
    with pytest.raises(StartupError, match="could not load"):
        LlmHub(LlmParams(model_path=str(tmp_path / "bad.gguf")), instruments())


def test_status_names_the_stand_in(tight):
    assert tight.model_name == "tiny.gguf (stand-in)" and tight.stand_in and tight.gpu_mib == 0
