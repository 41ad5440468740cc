"""The LLM hub's engine: one ``llama_cpp.Llama``, the prompt with a reused prefix, grammar-constrained
generation with a token budget and a wall-clock deadline, and the validation gate. No rings, no
processes: ``procs.llm.LlmAgent`` wraps it (and runs ``decide`` in a ``GenerationWorker`` thread).

``LlmHub.decide(signal, position_lots, deadline_ns=...)`` is one decision, blocking:

1. prompt tokens = the system part's tokens (tokenized once, at start) + the state block's tokens;
2. ``Llama.generate(reset=True)`` keeps the longest cached prefix of the previous call's KV state and
   evaluates only the rest (``reuse_prefix = false`` resets first: the "without reuse" figure);
   ``prompt_evaluated`` counts the tokens that really went through the model (the same rule as
   llama-cpp-python's prefix match);
3. tokens are sampled under the GBNF grammar (``pipeline.trading.llm.schema.grammar_text``) until EOS,
   ``max_tokens``, the ``deadline_ns`` (checked after every token with the injected clock), an abort,
   or the first token after which the answer can no longer validate (a byte outside ASCII, or a first
   non-blank byte other than ``{``: a model or grammar gone wrong stops at once instead of spending
   ``max_tokens`` on garbage; under the grammar it never happens);
4. the text goes through ``schema.validate``; the ``Outcome`` says what came out and why it was
   rejected, if it was.

Grammars are checked with llama.cpp's own parser at start (a grammar that does not parse would crash
the sampler); a bad one is a ``StartupError``.
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
from pipeline.trading.llm import schema
from pipeline.trading.llm.breaker import BreakerConfig
from pipeline.trading.llm.prompt import state_block, system_part
from pipeline.trading.llm.tinymodel import is_tiny_model

#: rejection reasons that are the model's fault (anomalies for the breaker), not time or errors
CONTENT_REASONS = frozenset(schema.REASONS) - {"timeout", "aborted", "error", "truncated"}


class LlmParams(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """The ``params`` of the ``llm`` stage (see ``procs.llm``)."""

    input: str | None = None  # default: the only input besides ``position_input`` (sig_llm)
    output: str = "instr"
    # the ring of POSITION messages from the risk stage (optional: without it the position is unknown)
    position_input: str = "pos"
    model_path: str = "models/generated/tiny.gguf"
    n_ctx: Annotated[int, msgspec.Meta(ge=256, le=131_072)] = 4096
    n_batch: Annotated[int, msgspec.Meta(ge=1, le=8192)] = 512
    n_gpu_layers: Annotated[int, msgspec.Meta(ge=-1, le=1000)] = 0  # 99 (all) when a GPU is configured
    flash_attn: bool = False
    n_threads: Annotated[int, msgspec.Meta(ge=1, le=256)] = 1
    seed: Annotated[int, msgspec.Meta(ge=0, le=2**32 - 1)] = 0
    lora_path: str | None = None
    max_tokens: Annotated[int, msgspec.Meta(ge=1, le=4096)] = 96
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
    temperature: Annotated[float, msgspec.Meta(ge=0.0, le=5.0)] = 0.0
    top_k: Annotated[int, msgspec.Meta(ge=0, le=100_000)] = 40
    top_p: Annotated[float, msgspec.Meta(gt=0.0, le=1.0)] = 0.95
    grammar: Literal["tight", "loose"] = "tight"  # "loose" only to test the gate
    chat_format: Literal["plain", "chatml"] = "plain"
    reuse_prefix: bool = True
    levels: Annotated[int, msgspec.Meta(ge=0, le=15)] = 3
    max_position_lots: Annotated[int, msgspec.Meta(ge=0, le=1_000_000)] = 10
    max_offset_ticks: Annotated[int, msgspec.Meta(ge=0, le=100_000)] = 20
    min_ttl_ms: Annotated[int, msgspec.Meta(ge=1, le=3_600_000)] = 100
    max_ttl_ms: Annotated[int, msgspec.Meta(ge=1, le=3_600_000)] = 10_000
    breaker: BreakerConfig = BreakerConfig()

    def bounds(self) -> schema.Bounds:
        return schema.Bounds(max_position_lots=self.max_position_lots, max_offset_ticks=self.max_offset_ticks,
                             min_ttl_ms=self.min_ttl_ms, max_ttl_ms=self.max_ttl_ms)

    def gpu_need(self) -> GpuNeed:
        """What the stage puts on the GPU (``pipeline.runtime.gpu``): when ``n_gpu_layers`` is above 0,
        the size of ``model_path`` plus ``lora_path`` in MiB, each rounded up (all layers offloaded is
        the worst case the budget must cover); a file that does not exist counts 0 (the stage's start
        fails with its path)."""
        if self.n_gpu_layers <= 0:
            return GpuNeed()
        mib = sum(-(-os.path.getsize(path) // 2**20) for path in (self.model_path, self.lora_path)
                  if path and os.path.exists(path))
        return GpuNeed(llm_weights_mib=mib)


def parse_params(params: dict) -> LlmParams:
    """Decode the stage's params.

    Raises:
        ConfigError: an unknown or ill-typed field, or ``min_ttl_ms > max_ttl_ms``.
    """
    try:
        p = msgspec.convert(params, LlmParams)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"llm: params: {exc}") from None
    if p.min_ttl_ms > p.max_ttl_ms:
        raise ConfigError(f"llm: params: min_ttl_ms {p.min_ttl_ms} > max_ttl_ms {p.max_ttl_ms}")
    return p


class Outcome(msgspec.Struct, frozen=True, kw_only=True):
    """One decision's result. ``decision`` is set (and ``reason`` empty) only when the answer validated."""

    decision: object | None = None
    reason: str = ""
    detail: str = ""
    text: str = ""
    finish: str = ""  # stop | length | deadline | aborted | invalid | error
    prompt_tokens: int = 0
    prompt_evaluated: int = 0
    gen_tokens: int = 0
    gen_ns: int = 0  # wall time of prompt evaluation + generation

    @property
    def ok(self) -> bool:
        return self.decision is not None

    @property
    def on_time(self) -> bool:
        return self.finish != "deadline"


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
        """Load the model and prepare prompt and grammars.

        ``instruments`` maps instrument id -> an object with ``symbol``, ``tick_size``, ``lot_size``.

        Raises:
            StartupError: the model file is missing or llama.cpp cannot load it (or the LoRA adapter),
                or a grammar does not parse.
        """
        self.p = params
        self.instruments = dict(instruments)
        self.clock = clock
        self.bounds = params.bounds()
        path = Path(params.model_path)
        if not path.is_file():
            raise StartupError(f"llm: model file {params.model_path!r} does not exist "
                               f"(the stand-in: python -m pipeline.trading.llm.tinymodel {params.model_path})")
        if params.lora_path is not None and not Path(params.lora_path).is_file():
            raise StartupError(f"llm: LoRA adapter {params.lora_path!r} does not exist")
        self.stand_in = is_tiny_model(path)
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
            raise StartupError(f"llm: llama.cpp could not load {params.model_path!r}: {exc}") from None
        self._eog = self._eog_test()
        special = params.chat_format == "chatml"
        self.system = system_part(self.bounds, params.chat_format)
        self.sys_tokens = self.llm.tokenize(self.system.encode("utf-8"), add_bos=True, special=special)
        self._special = special
        self._grammars: dict[int, object] = {}
        for iid in sorted(self.instruments) or [1]:
            self._grammar(iid)

    def _eog_test(self) -> Callable[[int], bool]:
        import llama_cpp

        vocab = self.llm._model.vocab
        eos = self.llm.token_eos()
        if hasattr(llama_cpp, "llama_vocab_is_eog"):
            return lambda t: t == eos or bool(llama_cpp.llama_vocab_is_eog(vocab, t))
        return lambda t: t == eos

    def _grammar(self, instrument_id: int):
        g = self._grammars.get(instrument_id)
        if g is None:
            from llama_cpp import LlamaGrammar

            text = schema.grammar_text(self.bounds, instrument_id, loose=self.p.grammar == "loose")
            if not grammar_parses(self.llm, text):
                raise StartupError(f"llm: llama.cpp rejects the {self.p.grammar} grammar for instrument {instrument_id}")
            g = self._grammars[instrument_id] = LlamaGrammar.from_string(text, verbose=False)
        return g

    @property
    def gpu_mib(self) -> int:
        """What the weights take on the GPU when offloaded (the file size, rounded up), else 0."""
        return -(-self.model_bytes // 2**20) if self.p.n_gpu_layers != 0 else 0

    def prompt_tokens(self, sig, position_lots: int | None) -> list[int]:
        """The full prompt's tokens for one SIGNAL_CTX record.

        Raises:
            KeyError: the signal's instrument is not configured.
        """
        iid = int(sig["instrument_id"])
        ins = self.instruments[iid]
        text = state_block(sig, symbol=ins.symbol, tick_size=ins.tick_size, lot_size=ins.lot_size,
                           position_lots=position_lots, bounds=self.bounds, levels=self.p.levels,
                           chat_format=self.p.chat_format)
        return self.sys_tokens + self.llm.tokenize(text.encode("utf-8"), add_bos=False, special=self._special)

    def decide(self, sig, position_lots: int | None, *, deadline_ns: int, abort: threading.Event | None = None) -> Outcome:
        """One decision for one SIGNAL_CTX record (see the module docstring). Never raises for bad
        model output; an unconfigured instrument or a prompt that does not fit ``n_ctx`` is an
        ``error`` outcome."""
        t0 = self.clock()
        iid = int(sig["instrument_id"])
        if iid not in self.instruments:
            return Outcome(reason="error", detail=f"instrument {iid} is not configured", finish="error")
        toks = self.prompt_tokens(sig, position_lots)
        if len(toks) + self.p.max_tokens > self.p.n_ctx:
            return Outcome(reason="error", detail=f"prompt {len(toks)} + max_tokens {self.p.max_tokens} > n_ctx "
                           f"{self.p.n_ctx}", finish="error", prompt_tokens=len(toks))
        llm = self.llm
        if not self.p.reuse_prefix:
            llm.reset()
        reuse = reused_prefix(llm.input_ids, llm.n_tokens, toks, getattr(llm, "_requires_eval", True))
        out: list[int] = []
        finish = "length"
        opened = False  # the answer's "{" has come
        piece = llm.detokenize
        gen = llm.generate(toks, top_k=self.p.top_k, top_p=self.p.top_p, min_p=0.0, temp=self.p.temperature,
                           repeat_penalty=1.0, reset=True, grammar=self._grammar(iid))
        try:
            for tok in gen:
                if self._eog(tok):
                    finish = "stop"
                    break
                out.append(tok)
                b = piece([tok])
                if not b.isascii():
                    finish = "invalid"
                    break
                if not opened and (b := b.lstrip()):
                    if b[0] != 0x7B:  # "{"
                        finish = "invalid"
                        break
                    opened = True
                if len(out) >= self.p.max_tokens:
                    break
                if abort is not None and abort.is_set():
                    finish = "aborted"
                    break
                if self.clock() >= deadline_ns:
                    finish = "deadline"
                    break
        except Exception as exc:
            return Outcome(reason="error", detail=repr(exc)[:160], finish="error", prompt_tokens=len(toks),
                           prompt_evaluated=len(toks) - reuse, gen_tokens=len(out), gen_ns=self.clock() - t0)
        finally:
            gen.close()
        text = llm.detokenize(out).decode("utf-8", "replace")
        common = dict(text=text, finish=finish, prompt_tokens=len(toks), prompt_evaluated=len(toks) - reuse,
                      gen_tokens=len(out), gen_ns=self.clock() - t0)
        if finish == "deadline":
            return Outcome(reason="timeout", detail=f"deadline passed after {len(out)} tokens", **common)
        if finish == "aborted":
            return Outcome(reason="aborted", **common)
        if finish == "invalid":
            return Outcome(reason="invalid_json", detail=f"not a JSON object of ASCII: stopped after {len(out)} tokens",
                           **common)
        got = schema.validate(text, instrument_id=iid, bounds=self.bounds, finished=finish == "stop")
        if isinstance(got, schema.Rejected):
            return Outcome(reason=got.reason, detail=got.detail, **common)
        return Outcome(decision=got, **common)

    def close(self) -> None:
        llm, self.llm = getattr(self, "llm", None), None
        if llm is not None:
            llm.close()


class Job(msgspec.Struct, kw_only=True):
    """A decision to make: the SIGNAL_CTX record (a copy), its ring ts_origin_ns, the position, the deadline."""

    sig: object
    ts_origin_ns: int
    position_lots: int | None
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
    return os.path.join("models", "generated", "tiny.gguf")
