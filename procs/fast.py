"""The fast path: FEATURES from the ``feat`` ring in, one SIGNAL per FEATURES out (a small ONNX classifier).

``FastAgent`` (``module = "procs.fast:FastAgent"``) holds one ``onnxruntime.InferenceSession``:

- providers: ``[("CUDAExecutionProvider", {device_id, gpu_mem_limit, arena_extend_strategy}),
  "CPUExecutionProvider"]`` when ``providers`` is ``"auto"`` or ``"cuda"`` and this onnxruntime build
  has the CUDA EP (``onnxruntime.preload_dlls()`` first, where it exists); ``["CPUExecutionProvider"]``
  for ``"cpu"``. One intra-op and one inter-op thread (the process is pinned to one core), all graph
  optimizations.
- The effective provider (``session.get_providers()[0]``) is logged (``fast_ready``) and published in
  ``ctx.stats["provider"]``. With ``require_gpu = true`` anything but CUDA is a start-up error that names
  the cause: no CUDA EP in this build, or the EP failed to load (onnxruntime's own message: missing
  CUDA / cuDNN libraries, no device...).
- IO binding: one preallocated float32 [batch, 128] input and float32 [batch, 4] output, bound once per
  batch size seen (views of the same arrays; no allocation per message).
- ``warmup_runs`` inferences (batch 1 and a full batch) before ``on_start`` returns: the runner reports
  the stage RUNNING only then.

Per ``do_work``: up to ``ctx.batch`` FEATURES are copied into the input array, classified in one run,
labelled with the thresholds (``emergency``, then ``buy`` / ``sell``, else HOLD; each a probability),
flagged (an EMERGENCY's at-risk side from the model's ``at_risk`` output under ``side``: at most one of
``SIGNAL_FLAG_AT_RISK_BID`` / ``SIGNAL_FLAG_AT_RISK_ASK``; a model without that output names none),
guarded (a feature outside the model card's ``input_bounds``, or a NaN: HOLD with
``SIGNAL_FLAG_OUT_OF_RANGE`` and no side bit, counted), as ``pipeline.trading.model.decide`` states
the rule, and each becomes a SIGNAL (``pipeline.trading.messages.SIGNAL_DTYPE``, the FEATURES'
``ts_origin_ns`` unchanged) written to ``sig_risk`` (every one); non-HOLD ones also go to ``sig_llm`` as kind
SIGNAL_CTX (``SIGNAL_CTX_DTYPE``: the SIGNAL followed by its feature vector, 568 bytes), where those
outputs exist. A poll that brings a single FEATURES (the usual case below saturation) takes the same
steps in scalar code (cheaper than the batch path; the same bytes, tested). A model swap is a restart
of this process with a new ``model_path`` in the config; the other processes keep running.

Params: ``input`` (default: the only input), ``risk_output`` ("sig_risk"), ``llm_output`` ("sig_llm"),
``model_path`` ("models/generated/fast.onnx"), ``providers`` ("auto" | "cpu" | "cuda"),
``require_gpu`` (false), ``device_id`` (0), ``gpu_mem_limit_mib`` (256), ``arena_extend_strategy``
("kSameAsRequested" | "kNextPowerOfTwo"), ``thresholds`` ({buy = 0.4, sell = 0.4, emergency = 0.5,
side = 1.01}: ``side`` above 0.5; above 1 never names a side), ``warmup_runs`` (20), ``signal_depth``
(false; true: every SIGNAL to ``risk_output`` is ``SIGNAL_DEPTH_DTYPE``, 296 bytes, the SIGNAL followed
by the FEATURES vector's 15 levels a side, one 240-byte copy, for the risk gateway's depth-aware
planner; the start fails with a ConfigError naming the ring when it cannot hold 296 bytes). Typed
(``FastParams``): an unknown or ill-typed field fails the start with a ConfigError naming the process
and the field (``fast: bad params: Object contains unknown field ...``).
The model must have a card made for this pipeline's feature layout (``check_model_card``: a card
file ``<stem>.card.json`` beside it and / or a card in its ONNX metadata, each with
``feature_layout_version == pipeline.trading.features.FEATURE_LAYOUT_VERSION`` and the per-feature
``input_bounds`` of its training rows): else the start fails with a ConfigError naming both versions
(or saying that there is no card, or no bounds).
``FastParams.gpu_need`` is what the supervisor's GPU budget counts for the stage.

Counters (``ctx.stats``): provider, model (first 8 hex digits of the file's SHA-256), features,
signals, hold, lean_buy, lean_sell, emergency (its side named: at_risk_bid, at_risk_ask), out_of_range
(HOLDs of the guard; ``oor_slot``: the worst slot of the latest, by name, e.g. ``F_DEPTH_BID``), runs,
risk_drops, llm_drops, rejected, unknown_kind, errors, stale_book (SIGNALs of FEATURES that carried
``FEATURES_FLAG_STALE_BOOK``: they carry ``SIGNAL_FLAG_STALE_BOOK``, and a LEAN among them becomes HOLD;
an EMERGENCY stays, since it only pulls orders).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import tempfile
from pathlib import Path
from typing import Annotated, Literal

import msgspec
import numpy as np

from pipeline.runtime.agent import Agent
from pipeline.runtime.config import parse_stage_params
from pipeline.runtime.errors import ConfigError, StartupError
from pipeline.runtime.gpu import GpuNeed
from pipeline.trading.features import F_ASK_DIST_0, F_ASK_SIZE_0, F_BID_DIST_0, F_BID_SIZE_0
from pipeline.trading.messages import (FEATURES_DTYPE, FEATURES_FLAG_STALE_BOOK, FEATURES_FLAG_WARMUP,
                                       FEATURES_HEAD_STRUCT, FEATURES_LEN, SIGNAL_FLAG_STALE_BOOK,
                                       OFF_FEATURES_VECTOR, OFF_SIGNAL_DEPTH, SIGNAL_CTX_DTYPE, SIGNAL_DEPTH_BYTES,
                                       SIGNAL_DEPTH_DTYPE, SIGNAL_DEPTH_LEVELS, SIGNAL_DTYPE, SIGNAL_FLAG_AT_RISK_ASK,
                                       SIGNAL_FLAG_AT_RISK_BID, SIGNAL_FLAG_OUT_OF_RANGE, SIGNAL_FLAG_WARMUP,
                                       SIGNAL_STRUCT, Kind, Label)

_FEATURES_BYTES = FEATURES_DTYPE.itemsize
N_LABELS = len(Label)
_LABEL_KEYS = ("hold", "lean_buy", "lean_sell", "emergency")
_HOLD, _BUY, _SELL, _EMERG = (int(lab) for lab in (Label.HOLD, Label.LEAN_BUY, Label.LEAN_SELL, Label.EMERGENCY))
_SIG_WARMUP = int(SIGNAL_FLAG_WARMUP)
_SIG_STALE = int(SIGNAL_FLAG_STALE_BOOK)
_SIG_BID, _SIG_ASK, _SIG_OOR = int(SIGNAL_FLAG_AT_RISK_BID), int(SIGNAL_FLAG_AT_RISK_ASK), int(SIGNAL_FLAG_OUT_OF_RANGE)
AT_RISK_OUTPUT = "at_risk"  # pipeline.trading.model.decide.AT_RISK_OUTPUT (float32 [N, 2]: bid, ask at risk)
CUDA_EP = "CUDAExecutionProvider"
# the SIGNAL's depth block is the FEATURES vector's level slots, in their order: one contiguous copy
_NDEPTH = 4 * SIGNAL_DEPTH_LEVELS
assert (F_ASK_DIST_0, F_BID_SIZE_0, F_ASK_SIZE_0) == tuple(F_BID_DIST_0 + k * SIGNAL_DEPTH_LEVELS for k in (1, 2, 3))
_DEPTH_SRC = slice(OFF_FEATURES_VECTOR + 4 * F_BID_DIST_0, OFF_FEATURES_VECTOR + 4 * (F_BID_DIST_0 + _NDEPTH))
_DEPTH_DST = slice(OFF_SIGNAL_DEPTH, SIGNAL_DEPTH_BYTES)
_DEPTH_FIELDS = (("depth_bid_dist", F_BID_DIST_0), ("depth_ask_dist", F_ASK_DIST_0), ("depth_bid_sz", F_BID_SIZE_0),
                 ("depth_ask_sz", F_ASK_SIZE_0))
CPU_EP = "CPUExecutionProvider"


class FastThresholds(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """``params.thresholds``: each label's probability threshold, and ``side``: the probability of the
    model's ``at_risk`` output at which an EMERGENCY names the side at risk (above 0.5, so at most one
    side; above 1: never, and the risk gateway pulls both sides)."""

    buy: float = 0.4
    sell: float = 0.4
    emergency: float = 0.5
    side: Annotated[float, msgspec.Meta(gt=0.5)] = 1.01


class FastParams(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """The stage's params (see the module docstring); an unknown or ill-typed field fails the start."""

    input: str | None = None  # default: the only input
    risk_output: str = "sig_risk"
    llm_output: str = "sig_llm"
    model_path: str = "models/generated/fast.onnx"
    providers: Literal["auto", "cpu", "cuda"] = "auto"
    require_gpu: bool = False
    device_id: Annotated[int, msgspec.Meta(ge=0)] = 0
    gpu_mem_limit_mib: Annotated[int, msgspec.Meta(ge=0)] = 256
    arena_extend_strategy: Literal["kSameAsRequested", "kNextPowerOfTwo"] = "kSameAsRequested"
    thresholds: FastThresholds = FastThresholds()
    warmup_runs: Annotated[int, msgspec.Meta(ge=0)] = 20
    signal_depth: bool = False  # SIGNALs to risk carry the book's levels (SIGNAL_DEPTH_DTYPE, 296 bytes)

    def gpu_need(self) -> GpuNeed:
        """What the stage puts on the GPU (``pipeline.runtime.gpu``): the CUDA arena's limit
        (``gpu_mem_limit_mib``) unless ``providers = "cpu"``."""
        return GpuNeed(onnx_mem_limit_mib=0 if self.providers == "cpu" else self.gpu_mem_limit_mib)


def parse_params(name: str, params: dict) -> FastParams:
    """``params`` of process ``name`` as ``FastParams``.

    Raises:
        ConfigError: an unknown or ill-typed field, named with the process.
    """
    return parse_stage_params(name, params, FastParams)


class _StderrCapture:
    """Collects what native code writes to fd 2 (onnxruntime reports EP load failures there)."""

    def __enter__(self):
        self.text = ""
        self._tmp = tempfile.TemporaryFile()
        self._saved = os.dup(2)
        os.dup2(self._tmp.fileno(), 2)
        return self

    def __exit__(self, *exc):
        os.dup2(self._saved, 2)
        os.close(self._saved)
        self._tmp.seek(0)
        self.text = self._tmp.read().decode("utf-8", "replace")
        self._tmp.close()
        return False


def _cuda_cause(native: str) -> str:
    """The most telling line of onnxruntime's native output about the CUDA EP."""
    for key in ("Failed to load library", "cannot open shared object", "Failed to create CUDAExecutionProvider",
                "CUDA failure", "no CUDA-capable device", "No registered plugin EP device"):
        for line in native.splitlines():
            if key in line:
                if "with error: " in line:
                    return "CUDA libraries missing (" + line.split("with error: ", 1)[1].strip()[:200] + ")"
                return line.split("] ", 1)[-1].strip()[:300]
    return native.strip().splitlines()[-1][:300] if native.strip() else "no message from onnxruntime"


def build_session(model_path: str, *, providers: str = "auto", device_id: int = 0, gpu_mem_limit_mib: int = 256,
                  arena_extend_strategy: str = "kSameAsRequested", require_gpu: bool = False, log=None):
    """(session, effective provider name, cause when CUDA was asked for and is not in effect)."""
    import onnxruntime as ort

    if providers not in ("auto", "cpu", "cuda"):
        raise ConfigError(f"fast: providers must be 'auto', 'cpu' or 'cuda', not {providers!r}")
    if not Path(model_path).is_file():
        raise StartupError(f"fast: model file {model_path!r} does not exist (run `make model`)")
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    want_cuda = providers in ("auto", "cuda") or require_gpu
    cause = ""
    plist: list = [CPU_EP]
    native = ""
    if want_cuda:
        if CUDA_EP not in ort.get_available_providers():
            cause = f"this onnxruntime build ({ort.__version__}) has no {CUDA_EP} (install onnxruntime-gpu)"
        else:
            plist = [(CUDA_EP, {"device_id": int(device_id), "gpu_mem_limit": int(gpu_mem_limit_mib) << 20,
                                "arena_extend_strategy": arena_extend_strategy}), CPU_EP]
    with _StderrCapture() as cap:
        if len(plist) == 2 and hasattr(ort, "preload_dlls"):
            try:
                with contextlib.redirect_stdout(io.StringIO()) as said:
                    ort.preload_dlls()
                native += said.getvalue()
            except Exception as exc:  # best effort: the session reports what is really missing
                native += f"preload_dlls: {exc!r}\n"
        sess = ort.InferenceSession(model_path, so, providers=plist)
    native += cap.text
    effective = sess.get_providers()[0]
    if want_cuda and effective != CUDA_EP and not cause:
        cause = f"{CUDA_EP} failed to load: {_cuda_cause(native)}"
    if require_gpu and effective != CUDA_EP:
        raise StartupError(f"fast: require_gpu is set but onnxruntime runs on {effective}: {cause}")
    if cause and log is not None:
        log.warning("fast_cuda_unavailable", cause=cause, providers=providers)
    return sess, effective, cause


def check_model_card(model_path: str, session, thresholds: FastThresholds, log=None) -> dict:
    """The model's card, checked (``pipeline.trading.model.card.check_card``: the card file beside the
    model and the card in its ONNX metadata, read from ``session``); a ``fast_thresholds_differ_from_card``
    warning on ``log`` when ``thresholds`` are not the ones the card chose (a config may set its own; a
    card without ``side`` chose 1.01, never).

    Raises:
        ConfigError: the model has no card, a card cannot be parsed, a card's feature layout
            version is not ``pipeline.trading.features.FEATURE_LAYOUT_VERSION`` (both named), a card
            has no valid ``input_bounds``, or a card file describes another model file.
        StartupError: the model or its card file cannot be read.
    """
    from pipeline.trading.model.card import CardError, check_card

    try:
        card = check_card(model_path, session.get_modelmeta().custom_metadata_map)
    except CardError as exc:
        raise ConfigError(f"fast: {exc}") from None
    except OSError as exc:
        raise StartupError(f"fast: cannot read model {model_path!r} or its card: {exc}") from None
    chosen = card.get("thresholds")
    if log is not None and isinstance(chosen, dict):
        mine = {"buy": thresholds.buy, "sell": thresholds.sell, "emergency": thresholds.emergency,
                "side": thresholds.side}
        theirs = {k: chosen.get(k, 1.01 if k == "side" else None) for k in mine}
        if any(not isinstance(theirs[k], (int, float)) or abs(theirs[k] - v) > 1e-9 for k, v in mine.items()):
            log.warning("fast_thresholds_differ_from_card", thresholds=mine, card=theirs, model=model_path)
    return card


class FastAgent(Agent):
    """FEATURES in, SIGNAL out (see the module docstring)."""

    #: the struct ``ctx.params`` must convert to (a check before start can use it: ``parse_params``)
    params_type = FastParams

    def on_start(self, ctx) -> None:
        self.ctx = ctx
        self.p = p = parse_params(ctx.name, ctx.params)
        self.inp = ctx.input(p.input)
        self.risk = ctx.output(p.risk_output, required=False)
        self.llm = ctx.output(p.llm_output, required=False)
        if self.risk is None and self.llm is None:
            raise ConfigError(f"fast: neither a risk nor an llm output among {sorted(ctx.outputs)}")
        self.depth = p.signal_depth
        if self.depth and self.risk is not None:
            room = {r.name: r.max_payload_bytes for r in ctx.config.rings}.get(p.risk_output, SIGNAL_DEPTH_BYTES)
            if room < SIGNAL_DEPTH_BYTES:
                raise ConfigError(f"{ctx.name}: params.signal_depth needs ring {p.risk_output!r} to hold "
                                  f"{SIGNAL_DEPTH_BYTES}-byte SIGNALs (max_payload_bytes >= {SIGNAL_DEPTH_BYTES}), "
                                  f"it has {room}")
        self.th_buy = p.thresholds.buy
        self.th_sell = p.thresholds.sell
        self.th_emergency = p.thresholds.emergency
        self.th_side = p.thresholds.side
        # the same thresholds rounded to float32, as numpy compares them with the float32 probabilities
        self._th32 = tuple(float(np.float32(t)) for t in (self.th_buy, self.th_sell, self.th_emergency, self.th_side))
        self.model_path = p.model_path
        self.sess, self.provider, cause = build_session(
            self.model_path, providers=p.providers, device_id=p.device_id, gpu_mem_limit_mib=p.gpu_mem_limit_mib,
            arena_extend_strategy=p.arena_extend_strategy, require_gpu=p.require_gpu, log=ctx.log)
        inp, out = self.sess.get_inputs()[0], self.sess.get_outputs()[0]
        if inp.shape[-1] != FEATURES_LEN or out.shape[-1] != N_LABELS:
            raise StartupError(f"fast: model {self.model_path!r} maps {inp.shape} -> {out.shape}, "
                               f"expected [N, {FEATURES_LEN}] -> [N, {N_LABELS}]")
        self.in_name, self.out_name = inp.name, out.name
        side = [o for o in self.sess.get_outputs()[1:] if o.name == AT_RISK_OUTPUT]
        if side and side[0].shape[-1] != 2:
            raise StartupError(f"fast: model {self.model_path!r}: output {AT_RISK_OUTPUT!r} is {side[0].shape}, "
                               "expected [N, 2]")
        self.has_side = bool(side)
        self.card = check_model_card(self.model_path, self.sess, p.thresholds, ctx.log)
        from pipeline.trading.model.card import input_bounds

        self.bounds = input_bounds(self.card)
        self._lo, self._hi = self.bounds.lo, self.bounds.hi
        self._ga, self._gb = np.zeros(FEATURES_LEN, np.float32), np.zeros(FEATURES_LEN, np.float32)
        self.model_id = hashlib.sha256(Path(self.model_path).read_bytes()).hexdigest()[:8]
        n = max(1, int(ctx.batch))
        self.cap = n
        self.x = np.zeros((n, FEATURES_LEN), np.float32)
        self.probs = np.zeros((n, N_LABELS), np.float32)
        self.at_risk = np.full((n, 2), 0.5, np.float32)  # stays 0.5 / 0.5 without the model's at_risk output
        self.feat = np.zeros(n, FEATURES_DTYPE)
        self.ts = np.zeros(n, np.int64)
        self.sig = np.zeros(n, SIGNAL_DEPTH_DTYPE if self.depth else SIGNAL_DTYPE)
        self.sig_bytes = memoryview(self.sig).cast("B")
        self.ctx_rec = np.zeros(1, SIGNAL_CTX_DTYPE)  # one SIGNAL_CTX, filled per non-HOLD signal
        self.ctx_bytes = memoryview(self.ctx_rec).cast("B")
        self.ctx_sig = memoryview(self.ctx_rec).cast("B")[:SIGNAL_DTYPE.itemsize]
        self.ctx_vec = self.ctx_rec["features"][0]
        self.n = 0
        self.one: tuple | None = None  # (payload, ts) of a poll that brought a single FEATURES
        self._last = bytes(_FEATURES_BYTES)  # keep_warm's input: the latest FEATURES payload
        self.sig1 = bytearray(SIGNAL_DEPTH_BYTES if self.depth else SIGNAL_DTYPE.itemsize)  # the single path's SIGNAL
        self.sig1_head = memoryview(self.sig1)[:SIGNAL_DTYPE.itemsize]  # without the depth block (SIGNAL_CTX's)
        self._bindings: dict[int, object] = {}
        self.stats = ctx.stats
        self.stats.update(provider="CUDA" if self.provider == CUDA_EP else self.provider.replace("ExecutionProvider", ""),
                          model=self.model_id, features=0, signals=0, hold=0, lean_buy=0, lean_sell=0, emergency=0,
                          at_risk_bid=0, at_risk_ask=0, out_of_range=0, oor_slot="", runs=0, risk_drops=0,
                          llm_drops=0, rejected=0)
        self._logged_error = False
        for i in range(p.warmup_runs):
            self._infer(1 if i % 2 == 0 else n)
        ctx.log.info("fast_ready", provider=self.provider, model=self.model_path, model_sha256_8=self.model_id,
                     cuda_cause=cause, warmup_runs=p.warmup_runs)

    def _binding(self, n: int):
        io = self._bindings.get(n)
        if io is None:
            import onnxruntime as ort

            io = self.sess.io_binding()
            io.bind_ortvalue_input(self.in_name, ort.OrtValue.ortvalue_from_numpy(self.x[:n]))
            io.bind_ortvalue_output(self.out_name, ort.OrtValue.ortvalue_from_numpy(self.probs[:n]))
            if self.has_side:
                io.bind_ortvalue_output(AT_RISK_OUTPUT, ort.OrtValue.ortvalue_from_numpy(self.at_risk[:n]))
            self._bindings[n] = io
        return io

    def _infer(self, n: int) -> np.ndarray:
        """Run the model on the first ``n`` rows of ``self.x``; the probabilities land in ``self.probs[:n]``
        (and the side's in ``self.at_risk[:n]``)."""
        io = self._binding(n)
        io.synchronize_inputs()
        self.sess.run_with_iobinding(io)
        io.synchronize_outputs()
        return self.probs[:n]

    def classify(self, probs: np.ndarray) -> np.ndarray:
        """Labels (uint8) of probability rows under the thresholds."""
        lab = np.zeros(len(probs), np.uint8)
        buy, sell = probs[:, Label.LEAN_BUY], probs[:, Label.LEAN_SELL]
        lab[(buy >= self.th_buy) & (buy >= sell)] = Label.LEAN_BUY
        lab[(sell >= self.th_sell) & (sell > buy)] = Label.LEAN_SELL
        lab[probs[:, Label.EMERGENCY] >= self.th_emergency] = Label.EMERGENCY
        return lab

    def decide(self, probs: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(labels, flags) uint8 of rows: ``classify``, then ``pipeline.trading.model.decide``'s side bits
        and input-range guard; no warm-up bit."""
        from pipeline.trading.model.decide import out_of_range, side_flags

        lab = self.classify(probs)
        flags = side_flags(lab, self.at_risk[: len(lab)] if self.has_side else None, self.th_side)
        bad, _ = out_of_range(x, self.bounds)
        lab[bad] = Label.HOLD
        flags[bad] = _SIG_OOR
        return lab, flags

    def _on(self, seq, ts_origin_ns, kind, payload) -> None:
        if kind != Kind.FEATURES:
            self.stats["unknown_kind"] = self.stats.get("unknown_kind", 0) + 1
            return
        if len(payload) != _FEATURES_BYTES:
            self.stats["rejected"] += 1
            return
        i = self.n
        if i == 0:  # a copy (the slot is the writer's again once the poll commits): one message alone
            self.one = (bytes(payload), ts_origin_ns)  # takes the single path
        else:
            if i == 1:
                self._stage(0, *self.one)
            self._stage(i, payload, ts_origin_ns)
        self.n = i + 1

    def _stage(self, i: int, payload, ts_origin_ns: int) -> None:
        self.feat[i : i + 1] = np.frombuffer(payload, FEATURES_DTYPE, 1)
        self.ts[i] = ts_origin_ns

    def do_work(self) -> int:
        self.n = 0
        got = self.inp.poll(self._on, self.cap)
        if not got:
            return 0
        self.ctx.received(got)
        n = self.n
        if n:
            try:
                if n == 1:
                    self._emit_one(*self.one)
                else:
                    self._emit(n)
            except Exception as exc:  # never out of the hot loop: count, log once, skip the batch
                self.stats["errors"] = self.stats.get("errors", 0) + n
                if not self._logged_error:
                    self._logged_error = True
                    self.ctx.log.error("fast_error", error=repr(exc))
            finally:
                self.one = None
        return got

    def keep_warm(self) -> None:
        """Runner hook (``keep_warm_us``, while idle): the latest FEATURES again through the single
        path (model, thresholds, SIGNAL packing) into its scratch buffers, which the next message
        overwrites before it reads them; nothing emitted or counted."""
        self._classify_one(self._last)

    def _classify_one(self, payload) -> tuple[int, int]:
        """One FEATURES payload -> model -> label and flags -> its SIGNAL in ``self.sig1`` (the model's
        input row stays in ``self.x[0]``); (label, flags). Scalar code: the numpy batch path costs
        ~8 µs more for one row here; both give the same bytes (tested)."""
        iid, flags, seq, exch_ts, mid, spread = FEATURES_HEAD_STRUCT.unpack_from(payload, 0)
        x = self.x[0]
        x[:] = np.frombuffer(payload, np.float32, FEATURES_LEN, OFF_FEATURES_VECTOR)
        p = self._infer(1)[0].tolist()
        th_buy, th_sell, th_em, th_side = self._th32
        buy, sell = p[_BUY], p[_SELL]
        lab = _HOLD
        if buy >= th_buy and buy >= sell:
            lab = _BUY
        if sell >= th_sell and sell > buy:
            lab = _SELL
        sflags = _SIG_WARMUP if flags & FEATURES_FLAG_WARMUP else 0
        if p[_EMERG] >= th_em:
            lab = _EMERG
            if self.has_side:
                bid, ask = self.at_risk[0].tolist()
                if bid >= th_side:
                    sflags |= _SIG_BID
                elif ask >= th_side:
                    sflags |= _SIG_ASK
        a, b = self._ga, self._gb  # the guard: min(x - lo, hi - x) >= 0 on every slot (False for a NaN)
        np.subtract(x, self._lo, out=a)
        np.subtract(self._hi, x, out=b)
        np.minimum(a, b, out=a)
        if not np.minimum.reduce(a) >= 0:
            lab = _HOLD
            sflags = (sflags & _SIG_WARMUP) | _SIG_OOR
        if flags & FEATURES_FLAG_STALE_BOOK:  # the book is rebuilding, crossed or invalid: no LEAN
            sflags |= _SIG_STALE
            if lab == _BUY or lab == _SELL:
                lab = _HOLD
        SIGNAL_STRUCT.pack_into(self.sig1, 0, iid, lab, sflags, seq, exch_ts, mid, spread, *p)
        if self.depth:
            self.sig1[_DEPTH_DST] = payload[_DEPTH_SRC]
        return lab, sflags

    def _count_flags(self, flags: int, x: np.ndarray) -> None:
        """The side and guard counters of one SIGNAL's flags (``x``: its input row, for ``oor_slot``)."""
        st = self.stats
        if flags & _SIG_STALE:
            st["stale_book"] = st.get("stale_book", 0) + 1
        if flags & _SIG_OOR:
            from pipeline.trading.model.decide import out_of_range, slot_name

            st["out_of_range"] += 1
            st["oor_slot"] = slot_name(int(out_of_range(x[None, :], self.bounds)[1][0]))
        elif flags & _SIG_BID:
            st["at_risk_bid"] += 1
        elif flags & _SIG_ASK:
            st["at_risk_ask"] += 1

    def _emit_one(self, payload, ts_origin_ns: int) -> None:
        """``_emit`` for a poll that brought one FEATURES (the usual case below saturation)."""
        st = self.stats
        st["features"] += 1
        st["runs"] += 1
        lab, flags = self._classify_one(payload)
        self._last = payload
        st[_LABEL_KEYS[lab]] += 1
        if flags > _SIG_WARMUP:
            self._count_flags(flags, self.x[0])
        if self.risk is not None:
            if self.ctx.emit(self.risk, Kind.SIGNAL, self.sig1, ts_origin_ns):
                st["signals"] += 1
            else:
                st["risk_drops"] += 1
        if self.llm is not None and lab != _HOLD:
            self.ctx_sig[:] = self.sig1_head
            self.ctx_vec[:] = self.x[0]
            if not self.ctx.emit(self.llm, Kind.SIGNAL_CTX, self.ctx_bytes, ts_origin_ns):
                st["llm_drops"] += 1

    def _classify_rows(self, n: int) -> np.ndarray:
        """Features of ``self.feat[:n]`` -> model -> labels -> SIGNAL records in ``self.sig[:n]``; the labels."""
        f = self.feat[:n]
        self.x[:n] = f["features"]
        probs = self._infer(n)
        lab, flags = self.decide(probs, self.x[:n])
        s = self.sig[:n]
        s["instrument_id"] = f["instrument_id"]
        s["label"] = lab
        s["flags"] = flags | np.where(f["flags"] & FEATURES_FLAG_WARMUP, SIGNAL_FLAG_WARMUP, 0).astype(np.uint8)
        stale = (f["flags"] & FEATURES_FLAG_STALE_BOOK) != 0
        if stale.any():  # as _classify_one: the flag, and no LEAN on a stale book
            lab = np.where(stale & ((lab == _BUY) | (lab == _SELL)), _HOLD, lab)
            s["label"] = lab
            s["flags"] |= np.where(stale, _SIG_STALE, 0).astype(np.uint8)
        s["feature_seq"], s["exch_ts_ns"] = f["book_seq"], f["exch_ts_ns"]
        s["ref_mid"], s["ref_spread"] = f["ref_mid"], f["ref_spread"]
        s["probs"] = probs
        if self.depth:
            v = f["features"]
            for name, first in _DEPTH_FIELDS:
                s[name] = v[:, first : first + SIGNAL_DEPTH_LEVELS]
        return lab

    def _emit(self, n: int) -> None:
        f = self.feat[:n]
        self.stats["features"] += n
        self.stats["runs"] += 1
        lab = self._classify_rows(n)
        counts = np.bincount(lab, minlength=N_LABELS)
        for k, c in zip(_LABEL_KEYS, counts):
            if c:
                self.stats[k] += int(c)
        flags = self.sig["flags"][:n]
        for i in np.flatnonzero(flags > _SIG_WARMUP).tolist():
            self._count_flags(int(flags[i]), self.x[i])
        size = self.sig.dtype.itemsize
        head = SIGNAL_DTYPE.itemsize
        emit, risk, llm, ts, mv = self.ctx.emit, self.risk, self.llm, self.ts, self.sig_bytes
        for i in range(n):
            payload = mv[i * size : (i + 1) * size]
            t = int(ts[i])
            if risk is not None:
                if emit(risk, Kind.SIGNAL, payload, t):
                    self.stats["signals"] += 1
                else:
                    self.stats["risk_drops"] += 1
            if llm is not None and lab[i] != Label.HOLD:
                self.ctx_sig[:] = payload[:head]
                self.ctx_vec[:] = f["features"][i]
                if not emit(llm, Kind.SIGNAL_CTX, self.ctx_bytes, t):
                    self.stats["llm_drops"] += 1

    def on_close(self) -> None:
        self._bindings.clear()
        self.sess = None
