"""The slow path: SIGNAL_CTX from ``sig_llm`` in, validated INSTRUCTIONs to ``instr`` out (an LLM).

``LlmAgent`` (``module = "procs.llm:LlmAgent"``) loads one ``llama_cpp.Llama`` in ``on_start``
(``pipeline.trading.llm.hub.LlmHub``; params in ``pipeline.trading.llm.hub.LlmParams``) and runs each decision in a
``GenerationWorker`` thread, so ``do_work`` never waits for the model:

- every ``do_work`` drains ``sig_llm`` (up to ``ctx.batch``); a message that is not a well-formed
  SIGNAL_CTX (wrong kind or size) or names an unconfigured instrument is counted (``unknown_kind`` /
  ``rejected`` / ``unknown_instrument``) and dropped;
- then it drains the ``pos`` ring (``position_input``; up to ``ctx.batch``): each POSITION
  (``pipeline.trading.messages.unpack_position``, written by the risk stage whenever an instrument's
  position changes, and once after its first sync) replaces the instrument's position in lots; a
  message of another kind, the wrong size or an unconfigured instrument is counted (``unknown_kind`` /
  ``pos_rejected`` / ``unknown_instrument``) and ignored. The prompt shows the position and its latest
  changes (the stage sees POSITIONs, not fills: a change is the fills' net effect;
  ``pipeline.trading.llm.prompt.PositionTrack``). Without that ring (it is optional) every
  position is ``unknown``, as it is before the first POSITION of an instrument;
- at most one generation is in flight, on a thread scheduled SCHED_IDLE (``sched_idle``) with
  niceness ``nice`` (10), so the fast path's processes win a shared core, and starts are at least
  ``min_gap_ms`` apart; the newest waiting
  signal replaces an older one (``conflated``);
- when the worker is free, the waiting signal is submitted with a deadline ``deadline_ms`` from now
  and the instrument's latest position, whatever the circuit breaker's state
  (``pipeline.trading.llm.breaker``): while it is OPEN generations still run, as probes;
- a finished generation's answer is validated and its outcome recorded by the breaker. One that
  validated becomes one INSTRUCTION (``INSTRUCTION_DTYPE``: the signal's
  instrument, the answer's action / lots / offset / confidence / ttl, ``signal_seq`` = the signal's
  ``feature_seq``, ``issued_ns`` = the clock at emission, ``instruction_id`` = 1, 2, ...) written with
  the signal's ts_origin_ns, unless the breaker is OPEN when the answer comes back: then it is a
  probe, dropped and counted (``probes``, those that validated also ``probes_valid``), and nothing
  reaches risk: the system runs fast-path only. The output is never waited on (full:
  ``instr_drops``). An answer that did not validate is counted as ``rej_<reason>``
  (``pipeline.trading.llm.schema.REASONS``) and nothing is written;
- a generation still running ``hang_grace_ms`` past its deadline (a call that yields no token never
  reaches the per-token deadline check) is hung: counted (``hung``) as a late failure for the breaker
  at once, and aborted; its answer, if it ever comes, is dropped (``rej_hung``);
- breaker state changes are log events (``llm_breaker``: old, new, score, why; warning when it
  opens, info otherwise), and status shows the state, its reason and the latest score sample;
- idle (any ``wait`` but busy-spin), the stage sleeps ``idle_poll_ms`` (2) between looks at its rings,
  or until the generation in flight finishes (``wait_for_work``), instead of the runner's back-off.

Params: ``pipeline.trading.llm.hub.LlmParams``; an unknown or ill-typed field fails the start with a ConfigError
naming the process and the field (``llm: bad params: Object contains unknown field ...``). ``input``
defaults to the only input besides ``position_input``; ``LlmParams.gpu_need`` is what the
supervisor's GPU budget counts for the stage.

Status (``ctx.stats``): model (file name, ``(stand-in)`` for the generated tiny model), breaker
(closed / open / half_open), breaker_why (the reason for that state), score (the breaker's latest
sample; null with no evidence), signals, conflated, generations, instructions, instr_drops, probes,
probes_valid, rej_<reason>, rejected, unknown_kind, unknown_instrument, pos_rejected, hung,
prompt_tok / prompt_eval (prompt tokens in total / actually evaluated, summed), gen_tok, gen_ms_last,
gpu_mib (the weights' size when offloaded).
"""

from __future__ import annotations

import time

import numpy as np

from pipeline.runtime.agent import Agent
from pipeline.runtime.config import parse_stage_params
from pipeline.runtime.errors import ConfigError
from pipeline.trading.llm.breaker import BreakerState, CircuitBreaker
from pipeline.trading.llm.hub import CONTENT_REASONS, GenerationWorker, Job, LlmHub, LlmParams
from pipeline.trading.llm.hub import parse_params as _hub_params
from pipeline.trading.llm.prompt import PositionTrack
from pipeline.trading.llm.schema import instruction_bytes
from pipeline.trading.messages import SIGNAL_CTX_DTYPE, Kind, unpack_position

#: imported by the fork server before it forks this stage (pipeline/runtime/forkserver.py): llama-cpp-python
#: takes ~30 ms to import, and the hub imports it only when it loads the model
FORK_PRELOAD = ("llama_cpp",)

_CTX_BYTES = SIGNAL_CTX_DTYPE.itemsize


class _NoWait:
    """An output port adapter whose ``write`` never blocks (``try_write``), for ``ctx.emit``."""

    __slots__ = ("port",)

    def __init__(self, port):
        self.port = port

    def write(self, kind, payload, ts_origin_ns, timeout_ns=None) -> bool:
        return self.port.try_write(kind, payload, ts_origin_ns)


def parse_params(name: str, params: dict) -> LlmParams:
    """``params`` of process ``name`` as ``LlmParams`` (``pipeline.trading.llm.hub``).

    Raises:
        ConfigError: an unknown or ill-typed field, named with the process (``llm: bad params: Object
            contains unknown field ...``).
    """
    parse_stage_params(name, params, LlmParams)
    return _hub_params(dict(params))


def _signal_input(p: LlmParams, inputs: dict) -> str:
    """The name of the SIGNAL_CTX input: ``params.input``, else the only input besides the position's.

    Raises:
        ConfigError: no ``params.input`` and other than one such input.
    """
    if p.input is not None:
        return p.input
    others = sorted(name for name in inputs if name != p.position_input)
    if len(others) != 1:
        raise ConfigError(f"llm: name the signal input ring (params.input); it has {sorted(inputs)}")
    return others[0]


class LlmAgent(Agent):
    """SIGNAL_CTX in, INSTRUCTION out (see the module docstring)."""

    #: the struct ``ctx.params`` must convert to (a check before start can use it: ``parse_params``;
    #: a subclass that takes params of its own must name its own struct)
    params_type = LlmParams

    #: test hook: a callable returning a ready ``LlmHub`` instead of loading one from params
    hub_factory = None

    def on_start(self, ctx) -> None:
        self.ctx = ctx
        self.p = p = parse_params(ctx.name, ctx.params)
        self.inp = ctx.input(_signal_input(p, ctx.inputs))
        self.out = _NoWait(ctx.output(p.output))
        self.pos_in = ctx.inputs.get(p.position_input)  # optional: without it every position is unknown
        self.track = PositionTrack()  # each instrument's latest POSITION (lots) and its recent changes
        self.instruments = {i.id: i for i in ctx.config.instruments}
        factory = type(self).hub_factory
        self.hub = factory(p, self.instruments, ctx.clock) if factory else LlmHub(p, self.instruments, clock=ctx.clock)
        self.worker = GenerationWorker(self.hub, nice=p.nice, sched_idle=p.sched_idle)
        if self.worker.nice_error:
            ctx.log.warning("llm_nice_not_set", nice=p.nice, error=self.worker.nice_error)
        self.breaker = CircuitBreaker(p.breaker, ctx.clock)
        self.deadline_ns = p.deadline_ms * 1_000_000
        self.hang_grace_ns = p.hang_grace_ms * 1_000_000
        self.idle_poll_ns = int(p.idle_poll_ms * 1_000_000)
        self.inflight: Job | None = None  # the job the worker runs
        self.hung = False
        self.min_gap_ns = p.min_gap_ms * 1_000_000
        self.next_start_ns = 0
        self.pending: tuple[bytes, int] | None = None  # the newest SIGNAL_CTX not yet asked about
        self.next_id = 1
        self.stats = ctx.stats
        self.stats.update(model=self.hub.model_name, breaker=self.breaker.state.value, breaker_why=self.breaker.why,
                          score=None, signals=0, conflated=0, generations=0, instructions=0, instr_drops=0,
                          probes=0, probes_valid=0, prompt_tok=0, prompt_eval=0, gen_tok=0, gen_ms_last=0,
                          gpu_mib=self.hub.gpu_mib)
        ctx.log.info("llm_ready", model=p.model_path, stand_in=self.hub.stand_in, n_ctx=p.n_ctx,
                     n_gpu_layers=p.n_gpu_layers, grammar=p.grammar, system_tokens=len(self.hub.sys_tokens),
                     position_source=p.position_input if self.pos_in is not None else "none")

    # -------------------------------------------------------------------------------- position
    def _on_position(self, seq, ts_origin_ns, kind, payload) -> None:
        if kind != Kind.POSITION:
            self._bump("unknown_kind")
            return
        pos = unpack_position(payload)
        if pos is None:
            self._bump("pos_rejected")
            return
        instrument_id, lots, _as_of_ns = pos
        if instrument_id not in self.instruments:
            self._bump("unknown_instrument")
            return
        self.track.update(instrument_id, lots, self.ctx.clock())

    def position_lots(self, instrument_id: int) -> int | None:
        """The instrument's position in lots, from the risk stage's latest POSITION; None when unknown."""
        return self.track.lots(instrument_id)

    # -------------------------------------------------------------------------------- work
    def _bump(self, key: str, n: int = 1) -> None:
        self.stats[key] = self.stats.get(key, 0) + n

    def _on(self, seq, ts_origin_ns, kind, payload) -> None:
        if kind != Kind.SIGNAL_CTX:
            self._bump("unknown_kind")
            return
        if len(payload) != _CTX_BYTES:
            self._bump("rejected")
            return
        if int.from_bytes(payload[:2], "little") not in self.instruments:  # instrument_id, u16 at offset 0
            self._bump("unknown_instrument")
            return
        self.stats["signals"] += 1
        if self.pending is not None:
            self.stats["conflated"] += 1
        # a copy of the bytes only: most signals are replaced by a newer one before a generation can
        # start, so the record is decoded when one does (this thread yields the core to the fast path)
        self.pending = (bytes(payload), ts_origin_ns)

    def do_work(self) -> int:
        got = self.inp.poll(self._on, self.ctx.batch)
        if self.pos_in is not None:  # before deciding: the position a generation starts with is the latest
            got += self.pos_in.poll(self._on_position, self.ctx.batch)
        if got:
            self.ctx.received(got)
        work = got
        res = self.worker.take()
        if res is not None:
            self._finish(*res)
            work += 1
        elif self.inflight is not None and not self.hung and self.worker.busy \
                and self.ctx.clock() > self.inflight.deadline_ns + self.hang_grace_ns:
            self._hung()
        self._note(self.breaker.poll())
        if self.pending is not None and not self.worker.busy and self.ctx.clock() >= self.next_start_ns:
            raw, ts = self.pending
            self.pending = None
            sig = np.frombuffer(raw, SIGNAL_CTX_DTYPE, 1)[0]
            now = self.ctx.clock()  # whatever the breaker's state: while OPEN, the answer is a probe
            self.next_start_ns = now + self.min_gap_ns
            job = Job(sig=sig, ts_origin_ns=ts, position_lots=self.track.view(int(sig["instrument_id"]), now),
                      deadline_ns=now + self.deadline_ns, submitted_ns=now)
            self.worker.submit(job)
            self.inflight, self.hung = job, False
            self.stats["generations"] += 1
            work += 1
        return work

    def wait_for_work(self, timeout_ns: int) -> bool:
        """The runner's idle (every wait but busy-spin): sleep ``idle_poll_ms`` (at most ``timeout_ns``),
        or until the generation in flight has finished, whichever comes first. Signals meanwhile wait
        in the ring; the newest wins at the next look. Always True (the runner's park contract)."""
        t = min(timeout_ns, self.idle_poll_ns) / 1e9
        if t > 0:
            if self.inflight is not None:
                self.worker.wait(t)
            else:
                time.sleep(t)
        return True

    def _hung(self) -> None:
        """The generation in flight is far past its deadline without returning: a late failure for
        the breaker now (so a stuck model opens it), and an abort request to the worker."""
        self.hung = True
        self.stats["hung"] = self.stats.get("hung", 0) + 1
        self.worker.abort.set()
        self.ctx.log.warning("llm_generation_hung", feature_seq=int(self.inflight.sig["feature_seq"]),
                             past_deadline_ms=round((self.ctx.clock() - self.inflight.deadline_ns) / 1e6, 1))
        self._note(self.breaker.record(success=False, on_time=False, anomaly=False))

    def _finish(self, job: Job, out) -> None:
        self.inflight = None
        if self.hung:  # already counted against the breaker when it hung; its late answer is dropped
            self.hung = False
            self._bump("rej_hung")
            self.ctx.log.warning("llm_answer_rejected", reason="hung", finish=out.finish,
                                 feature_seq=int(job.sig["feature_seq"]))
            return
        st = self.stats
        st["prompt_tok"] += out.prompt_tokens
        st["prompt_eval"] += out.prompt_evaluated
        st["gen_tok"] += out.gen_tokens
        st["gen_ms_last"] = round(out.gen_ns / 1e6, 3)
        live = self.breaker.live()  # OPEN when the answer comes back: a probe, dropped whatever it says
        if not live:
            st["probes"] += 1
        if out.ok and not live:
            st["probes_valid"] += 1
        elif out.ok:
            payload = instruction_bytes(out.decision, signal_seq=int(job.sig["feature_seq"]),
                                        issued_ns=self.ctx.clock(), instruction_id=self.next_id)
            if self.ctx.emit(self.out, Kind.INSTRUCTION, payload, job.ts_origin_ns):
                self.next_id += 1
                st["instructions"] += 1
            else:
                st["instr_drops"] += 1
        else:
            self._bump("rej_" + out.reason)
            n = st["rejected_answers"] = st.get("rejected_answers", 0) + 1
            if n <= 10 or n % 100 == 0:  # the first ten, then every hundredth: a broken model cannot flood the log
                self.ctx.log.warning("llm_answer_rejected", reason=out.reason, detail=out.detail[:200],
                                     finish=out.finish, feature_seq=int(job.sig["feature_seq"]),
                                     text=out.text[:120], count=n)
        # success: the answer validated (a full output ring is not the model's failure)
        self._note(self.breaker.record(success=out.ok, on_time=out.on_time, anomaly=out.reason in CONTENT_REASONS))

    def _note(self, transitions) -> None:
        """Status from the breaker; each transition logged (``llm_breaker``; a warning when it opens)."""
        sc = self.breaker.score()
        self.stats["score"] = None if sc is None else round(sc, 3)
        for t in transitions:
            self.stats["breaker"], self.stats["breaker_why"] = t.new.value, t.why
            log = self.ctx.log.warning if t.new is BreakerState.OPEN else self.ctx.log.info
            log("llm_breaker", old=t.old.value, new=t.new.value, score=t.score, why=t.why)

    def on_close(self) -> None:
        worker = getattr(self, "worker", None)
        ended = worker.close() if worker is not None else True
        hub = getattr(self, "hub", None)
        if hub is not None and ended:
            hub.close()
