"""Configuration: TOML files decoded into frozen msgspec Structs that reject unknown fields.

One file describes the rings, the processes, the instruments, the supervisor, the GPU budget and the
stages' latency budgets. ``load_config`` rejects a bad file before anything starts; every error
names the field path (``$.processes[1].inputs[0]``) and what is wrong with it.

Example (see configs/ for complete files)::

    [supervisor]
    shm_prefix = "tp"

    [[rings]]
    name = "md"
    max_payload_bytes = 512
    capacity = 4096
    full_policy = "drop"

    [[processes]]
    name = "feed"
    module = "procs.feed:BitgetFeedAgent"
    outputs = ["md"]
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

from pipeline.runtime.errors import ConfigError

Name = Annotated[str, msgspec.Meta(pattern=r"^[a-z][a-z0-9_]{0,30}$")]
PositiveMs = Annotated[int, msgspec.Meta(ge=1, le=3_600_000)]
WaitName = Literal["auto", "busy-spin", "back-off", "blocking"]


class _Strict(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    pass


class RestartPolicy(_Strict):
    """How the supervisor restarts a process that died or hung.

    The n-th consecutive restart waits ``min(backoff_initial_ms * backoff_multiplier**(n-1),
    backoff_max_ms)``; a process that stays up ``stable_after_ms`` resets n. More than
    ``max_restarts`` restarts inside ``window_ms`` is flapping: the process goes FATAL.
    """

    backoff_initial_ms: Annotated[int, msgspec.Meta(ge=0, le=60_000)] = 0
    backoff_multiplier: Annotated[float, msgspec.Meta(ge=1.0, le=10.0)] = 2.0
    backoff_max_ms: Annotated[int, msgspec.Meta(ge=0, le=600_000)] = 5_000
    stable_after_ms: PositiveMs = 10_000
    max_restarts: Annotated[int, msgspec.Meta(ge=0, le=10_000)] = 30
    window_ms: PositiveMs = 60_000


class RingConfig(_Strict):
    """One SPSC ring: one producer process (or the supervisor for ``control_ring``), one consumer."""

    name: Name
    max_payload_bytes: Annotated[int, msgspec.Meta(ge=1, le=65_535)]
    capacity: Annotated[int, msgspec.Meta(ge=2, le=1 << 24)]
    full_policy: Literal["drop", "backpressure"]


class ProcessConfig(_Strict):
    """One stage process. ``module`` is ``package.module:AgentClass``."""

    name: Name
    module: Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")]
    inputs: list[Name] = []
    outputs: list[Name] = []
    core: int | Literal["auto"] = "auto"
    wait: WaitName = "auto"
    # while idle (any wait; a parked stage is woken for it), the runner calls the agent's keep_warm()
    # at most this often (0 = never)
    keep_warm_us: Annotated[int, msgspec.Meta(ge=0, le=1_000_000)] = 0
    # CPU niceness of the whole process (0 = normal; 1..19 = lower priority, inherited by its threads):
    # a slow-path process yields a shared core to the fast path's processes
    nice: Annotated[int, msgspec.Meta(ge=0, le=19)] = 0
    # the scheduling policy of the whole process, applied by the runner before the agent starts (its
    # threads inherit it): "other" (the kernel's default, CFS) or "fifo" (SCHED_FIFO at sched_priority
    # 1..99: it runs before any "other" task on its core until it parks; needs CAP_SYS_NICE or an
    # RLIMIT_RTPRIO >= sched_priority, else the start fails naming the process, never a silent
    # fallback). A fifo process that busy-spins holds its core but for the kernel's RT throttle.
    sched: Literal["other", "fifo"] = "other"
    sched_priority: Annotated[int, msgspec.Meta(ge=1, le=99)] = 10
    # no heartbeat for heartbeat_timeout_ms: hung if stopped or idle (no CPU time, no thread running);
    # a busy process (its threads seen running in /proc) is hung only after busy_timeout_ms
    # (pipeline/runtime/supervisor/liveness.py); busy_timeout_ms <= heartbeat_timeout_ms: the beat alone
    heartbeat_timeout_ms: PositiveMs = 2_000
    busy_timeout_ms: PositiveMs = 10_000
    ready_timeout_ms: PositiveMs = 30_000
    batch: Annotated[int, msgspec.Meta(ge=1, le=65_536)] = 256
    restart: RestartPolicy = RestartPolicy()
    params: dict[str, Any] = {}


PRODUCT_TYPES = ("SPOT", "USDT-FUTURES")  # Bitget v2 product types the sender and the paper venue trade


class InstrumentConfig(_Strict):
    """An instrument; the hot path knows it only by ``id``.

    ``product_type``: ``"SPOT"`` (the default; sizes in base units, positions are base-coin balances) or
    ``"USDT-FUTURES"`` (a USDT-margined perpetual, Bitget v2 "mix", one-way position mode): then
    ``contract_size`` (base units per contract, > 0) is required and ``lot_size`` must equal it, so a lot
    is one contract and every ``*_lots`` figure (limits, POSITION) counts contracts; ``margin_coin`` (the
    settlement currency, "USDT") and ``margin_mode`` ("crossed" / "isolated") go with every order. A
    spot instrument takes no ``contract_size``. Any other product type is a config error.
    """

    id: Annotated[int, msgspec.Meta(ge=1, le=65_535)]
    symbol: Annotated[str, msgspec.Meta(min_length=1, max_length=32)]
    tick_size: Annotated[float, msgspec.Meta(gt=0)]
    lot_size: Annotated[float, msgspec.Meta(gt=0)]
    venue: str = "paper"
    product_type: str = "SPOT"
    contract_size: float = 0.0
    margin_coin: Annotated[str, msgspec.Meta(pattern=r"^[A-Z0-9]{2,10}$")] = "USDT"
    margin_mode: Literal["crossed", "isolated"] = "crossed"

    @property
    def perpetual(self) -> bool:
        """True for a USDT-margined perpetual (``product_type = "USDT-FUTURES"``)."""
        return self.product_type == "USDT-FUTURES"


class GpuConfig(_Strict):
    """GPU budget: what the configured models need must fit the card with ``reserve_mib`` left free."""

    require: bool = False
    device_id: Annotated[int, msgspec.Meta(ge=0, le=63)] = 0
    reserve_mib: Annotated[int, msgspec.Meta(ge=0)] = 1_024
    llm_weights_mib: Annotated[int, msgspec.Meta(ge=0)] = 0
    llm_kv_cache_mib: Annotated[int, msgspec.Meta(ge=0)] = 0
    onnx_mem_limit_mib: Annotated[int, msgspec.Meta(ge=0)] = 0


class SupervisorConfig(_Strict):
    """Where the supervisor keeps its files and how it talks and polls."""

    shm_prefix: Annotated[str, msgspec.Meta(pattern=r"^[a-z][a-z0-9_-]{0,15}$")] = "tp"
    run_dir: str = "run"
    log_dir: str = "logs"
    # ipc://PATH only (default: ipc://<run_dir>/control.sock, created 0600 in the 0700 run dir): whoever
    # can connect can halt, restart or stop the pipeline, so there is no tcp:// option
    control_endpoint: str = ""
    control_ring: str = ""  # ring the supervisor writes CONTROL messages into ("" = none)
    # "zmq" / "mp-queue": the same processes over pyzmq / multiprocessing.Queue, for comparison only
    transport: Literal["ring", "zmq", "mp-queue"] = "ring"
    # how stage processes start: forked from a fork server that has imported their code once
    # (pipeline/runtime/forkserver.py), or each a fresh `python -m pipeline.runtime.runner`; mp-queue: always spawned
    launcher: Literal["fork-server", "exec"] = "fork-server"
    poll_interval_ms: Annotated[int, msgspec.Meta(ge=1, le=1_000)] = 10
    heartbeat_interval_ms: Annotated[int, msgspec.Meta(ge=1, le=10_000)] = 100
    stop_grace_ms: PositiveMs = 3_000
    log_max_bytes: Annotated[int, msgspec.Meta(ge=4_096)] = 10_000_000
    log_backups: Annotated[int, msgspec.Meta(ge=0, le=100)] = 3
    # the ops server (pipeline/runtime/ops/): /metrics, /health and the live dashboard on 127.0.0.1 at this
    # port (0 = off; 1024-65535); its control endpoints require the token in ops_token_file (0600, made by setup)
    ops_port: Annotated[int, msgspec.Meta(ge=0, le=65_535)] = 0
    ops_token_file: str = "secrets/ops.token"


class StageBudget(_Strict):
    """One stage's latency budget: the stage's p99 since origin (its runner's, over its latest outputs,
    published with each heartbeat), in microseconds. Above ``reduce_p99_us`` through the guard's
    ``window_ms``: the risk gateway goes REDUCING; above ``halt_p99_us`` (0: never) through it: HALTED."""

    reduce_p99_us: Annotated[int, msgspec.Meta(ge=1, le=60_000_000)]
    halt_p99_us: Annotated[int, msgspec.Meta(ge=0, le=60_000_000)] = 0


class LatencyGuardConfig(_Strict):
    """The supervisor's latency-budget guard (``supervisor.budget``): ``budgets`` per process name (none:
    the guard is off). A stage breaches a budget when its published p99 (one sample per heartbeat with
    output) has been above it at every sample for ``window_ms``, over at least ``min_samples`` samples; a
    risk gateway found less strict than the guard (restarted, say) is told again at most every
    ``resend_ms``."""

    window_ms: Annotated[int, msgspec.Meta(ge=100, le=600_000)] = 5_000
    min_samples: Annotated[int, msgspec.Meta(ge=1, le=100_000)] = 10
    resend_ms: Annotated[int, msgspec.Meta(ge=100, le=600_000)] = 1_000
    budgets: dict[Name, StageBudget] = {}


class Config(_Strict):
    """The whole system's configuration."""

    supervisor: SupervisorConfig = SupervisorConfig()
    gpu: GpuConfig = GpuConfig()
    latency_guard: LatencyGuardConfig = LatencyGuardConfig()
    rings: list[RingConfig] = []
    processes: list[ProcessConfig] = []
    instruments: list[InstrumentConfig] = []

    def ring(self, name: str) -> RingConfig:
        for r in self.rings:
            if r.name == name:
                return r
        raise KeyError(name)

    def process(self, name: str) -> ProcessConfig:
        for p in self.processes:
            if p.name == name:
                return p
        raise KeyError(name)

    def segment_name(self, ring: str) -> str:
        """The /dev/shm name of a ring of this configuration."""
        return f"{self.supervisor.shm_prefix}.{ring}"

    def control_endpoint(self) -> str:
        return self.supervisor.control_endpoint or f"ipc://{Path(self.supervisor.run_dir).resolve()}/control.sock"


_ENDPOINT = re.compile(r"^ipc://.+$")


def _check(cfg: Config) -> None:
    """Cross-field rules msgspec cannot express. Raises ConfigError naming the field path."""
    ring_names = {}
    for i, r in enumerate(cfg.rings):
        if r.name in ring_names:
            raise ConfigError(f"$.rings[{i}].name: duplicate ring name {r.name!r}")
        ring_names[r.name] = i
        if r.capacity & (r.capacity - 1):
            raise ConfigError(f"$.rings[{i}].capacity: must be a power of two, got {r.capacity}")
    producers: dict[str, str] = {}
    consumers: dict[str, str] = {}
    ctl = cfg.supervisor.control_ring
    if ctl:
        if ctl not in ring_names:
            raise ConfigError(f"$.supervisor.control_ring: unknown ring {ctl!r}")
        producers[ctl] = "supervisor"
    seen = set()
    for i, p in enumerate(cfg.processes):
        if p.name in seen:
            raise ConfigError(f"$.processes[{i}].name: duplicate process name {p.name!r}")
        seen.add(p.name)
        for field, table in (("inputs", consumers), ("outputs", producers)):
            for j, rn in enumerate(getattr(p, field)):
                path = f"$.processes[{i}].{field}[{j}]"
                if rn not in ring_names:
                    raise ConfigError(f"{path}: unknown ring {rn!r}")
                if rn in table:
                    role = "consumer" if field == "inputs" else "producer"
                    raise ConfigError(f"{path}: ring {rn!r} already has {role} {table[rn]!r} (rings are single-producer, single-consumer)")
                table[rn] = p.name
        if isinstance(p.core, int) and p.core < 0:
            raise ConfigError(f"$.processes[{i}].core: must be >= 0 or 'auto', got {p.core}")
        if p.restart.backoff_max_ms < p.restart.backoff_initial_ms:
            raise ConfigError(f"$.processes[{i}].restart.backoff_max_ms: must be >= backoff_initial_ms")
    ids = set()
    for i, ins in enumerate(cfg.instruments):
        if ins.id in ids:
            raise ConfigError(f"$.instruments[{i}].id: duplicate instrument id {ins.id}")
        ids.add(ins.id)
        _check_instrument(f"$.instruments[{i}]", ins)
    _check_latency_guard(cfg, seen)
    if 0 < cfg.supervisor.ops_port < 1024:
        raise ConfigError(f"$.supervisor.ops_port: must be 0 (off) or 1024-65535, got {cfg.supervisor.ops_port}")
    ep = cfg.supervisor.control_endpoint
    if ep and not _ENDPOINT.match(ep):
        raise ConfigError(f"$.supervisor.control_endpoint: must be ipc://PATH, got {ep!r} (a TCP control endpoint "
                          "would let any local user halt, restart or stop the pipeline; the ipc socket is 0600)")


def _check_instrument(path: str, ins: InstrumentConfig) -> None:
    """An instrument's product rules (see ``InstrumentConfig``). Raises ConfigError naming the field."""
    if ins.product_type not in PRODUCT_TYPES:
        raise ConfigError(f"{path}.product_type: unknown product type {ins.product_type!r}; "
                          f"known: {list(PRODUCT_TYPES)}")
    if not ins.perpetual:
        if ins.contract_size:
            raise ConfigError(f"{path}.contract_size: only a USDT-FUTURES instrument has a contract size")
        return
    if not (ins.contract_size > 0 and ins.contract_size < float("inf")):
        raise ConfigError(f"{path}.contract_size: a USDT-FUTURES instrument needs a contract size > 0 "
                          f"(base units per contract), got {ins.contract_size!r}")
    if abs(ins.lot_size - ins.contract_size) > ins.contract_size * 1e-9:
        raise ConfigError(f"{path}.lot_size: a perpetual's lot is one contract: must equal contract_size "
                          f"({ins.contract_size!r}), got {ins.lot_size!r}")


def _check_latency_guard(cfg: Config, processes: set[str]) -> None:
    """The latency guard's cross-field rules. Raises ConfigError naming the field path."""
    g = cfg.latency_guard
    for name, b in g.budgets.items():
        path = f"$.latency_guard.budgets.{name}"
        if name not in processes:
            raise ConfigError(f"{path}: unknown process {name!r}")
        if b.halt_p99_us and b.halt_p99_us < b.reduce_p99_us:
            raise ConfigError(f"{path}.halt_p99_us: must be 0 (never) or >= reduce_p99_us ({b.reduce_p99_us}), "
                              f"got {b.halt_p99_us}")
    if not g.budgets:
        return
    if not cfg.supervisor.control_ring:
        raise ConfigError("$.latency_guard.budgets: the guard acts through CONTROL: set supervisor.control_ring")
    most = g.window_ms // cfg.supervisor.heartbeat_interval_ms + 1
    if g.min_samples > most:
        raise ConfigError(f"$.latency_guard.min_samples: {g.min_samples} samples need more than window_ms "
                          f"({g.window_ms}) at one per heartbeat ({cfg.supervisor.heartbeat_interval_ms} ms): at most {most}")


def parse_config(text: str | bytes, source: str = "<config>") -> Config:
    """Decode and check a TOML document.

    Raises:
        ConfigError: malformed TOML, unknown field, wrong type, out-of-bounds value or a broken
            cross-reference; the message starts with ``source`` and names the field path.
    """
    try:
        cfg = msgspec.toml.decode(text, type=Config)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    except msgspec.DecodeError as exc:
        raise ConfigError(f"{source}: not valid TOML: {exc}") from None
    try:
        _check(cfg)
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    return cfg


def load_config(path: str | Path) -> Config:
    """Read and check a config file (see ``parse_config``).

    Raises:
        ConfigError: the file cannot be read, or its content is rejected.
    """
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read config: {exc.strerror}") from None
    return parse_config(data, str(p))


def parse_stage_params(name: str, params, kind: type):
    """A stage's ``params`` table as its frozen params struct ``kind`` (unknown fields rejected).

    Raises:
        ConfigError: an unknown or ill-typed field, named with the process
            (``fast: bad params: Object contains unknown field `requre_gpu```).
    """
    try:
        return msgspec.convert(dict(params), kind)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"{name}: bad params: {exc}") from None
