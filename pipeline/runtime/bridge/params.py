"""The bridge stages' params (``[[processes]] params``): frozen msgspec structs that reject unknown
fields, and the security rule every endpoint is held to (``check_security``).

Security (``security`` table of every bridge stage):

- ``mode = "curve"`` (default): ``secret_key_file`` (this side's ``.key_secret``, 0600), and for a
  client ``server_key_file`` (the server's public ``.key``), for a server ``authorized_keys_dir``
  (the clients' public ``.key`` files). Files only: a key is never in a config.
- ``mode = "plain-loopback"``: no Curve; every endpoint must be ``tcp://127.0.0.1:PORT`` (tests that
  say so), else a ConfigError.

Each params type has a ``preflight()`` that ``up`` runs before anything starts: the rule above and
the key files (present, certificates, the secret one 0600); the agents check the same at their start.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import msgspec

from pipeline.runtime.bridge import curve
from pipeline.runtime.bridge.aggregate import check_ownership
from pipeline.runtime.errors import ConfigError

Ms = Annotated[int, msgspec.Meta(ge=1, le=600_000)]
InstrumentId = Annotated[int, msgspec.Meta(ge=1, le=65_535)]
Endpoint = Annotated[str, msgspec.Meta(pattern=r"^tcp://[^\s]+:\d{1,5}$")]


class _Strict(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    pass


class SecurityParams(_Strict, kw_only=True):
    mode: Literal["curve", "plain-loopback"] = "curve"
    secret_key_file: str = ""
    server_key_file: str = ""
    authorized_keys_dir: str = ""


class MdOutParams(_Strict, kw_only=True):
    """Market data out: the local ``input`` ring published on ``pub_endpoint`` (bound), snapshots
    served on ``snapshot_endpoint`` (bound). ``state_kinds``: ring kinds that are a topic's full state."""

    input: str = ""
    pub_endpoint: Endpoint
    snapshot_endpoint: Endpoint
    state_kinds: list[Annotated[int, msgspec.Meta(ge=1, le=65_535)]] = msgspec.field(default_factory=lambda: [1])
    sndhwm: Annotated[int, msgspec.Meta(ge=1, le=10_000_000)] = 100_000
    security: SecurityParams = SecurityParams()

    def preflight(self) -> None:
        """``up``'s check before anything starts (``check_security``, ``check_key_files``)."""
        check_security("md out", self.security, [self.pub_endpoint, self.snapshot_endpoint], server=True)
        check_key_files(self.security, server=True)


class MdInParams(_Strict, kw_only=True):
    """Market data in: SUB to ``pub_endpoint``, snapshots asked of ``snapshot_endpoint``, delivered
    into the local ``output`` ring. ``instruments``: topics to subscribe (empty: all). A snapshot not
    complete within ``snapshot_timeout_ms`` is asked for again on a fresh socket. ``seq_file``: where
    the last delivered sequences are kept across restarts (default ``<run_dir>/<name>.mdseq``)."""

    output: str = ""
    pub_endpoint: Endpoint
    snapshot_endpoint: Endpoint
    instruments: list[InstrumentId] = []
    snapshot_timeout_ms: Ms = 1_000
    seq_file: str = ""
    security: SecurityParams = SecurityParams()

    def preflight(self) -> None:
        """``up``'s check before anything starts (``check_security``, ``check_key_files``)."""
        check_security("md in", self.security, [self.pub_endpoint, self.snapshot_endpoint], server=False)
        check_key_files(self.security, server=False)


class ShardParams(_Strict, kw_only=True):
    """A strategy shard's orders: NEW ORDERs of the local ``input`` ring sent to ``gateway_endpoint``
    as INTENTs; EXEC_REPORTs written to the local ``output`` ring."""

    input: str = ""
    output: str = ""
    shard_id: Annotated[int, msgspec.Meta(ge=1, le=65_535)]
    instruments: list[InstrumentId]
    gateway_endpoint: Endpoint
    heartbeat_ms: Ms = 100
    peer_timeout_ms: Ms = 500
    security: SecurityParams = SecurityParams()

    def preflight(self) -> None:
        """``up``'s check before anything starts (``check_security``, ``check_key_files``)."""
        check_security("shard", self.security, [self.gateway_endpoint], server=False)
        check_key_files(self.security, server=False)


class GatewayParams(_Strict, kw_only=True):
    """The shared risk gateway: ROUTER bound at ``endpoint``; ``shards``: shard id (a TOML key) -> the
    instrument ids it owns; ``limits``: the risk stage's limits table (``RiskLimits``); approved
    ORDERs written to the local ``output`` ring (the sender's ``orders``), its EXEC_REPORTs read from
    the local ``input`` ring (``exec``); the operator's CONTROLs (halt, resume, ...) from the
    ``control_input`` ring when named (the supervisor's ``control_ring``)."""

    input: str = ""
    output: str = ""
    control_input: str = ""
    endpoint: Endpoint
    shards: dict[str, list[InstrumentId]]
    heartbeat_ms: Ms = 100
    peer_timeout_ms: Ms = 500
    limits: dict = {}
    security: SecurityParams = SecurityParams()

    def preflight(self) -> None:
        """``up``'s check before anything starts: the security rule, the key files, the shard table
        (ids, no instrument owned twice; the instruments' configuration is checked at the start)."""
        check_security("gateway", self.security, [self.endpoint], server=True)
        check_key_files(self.security, server=True)
        table = shard_table("gateway", self.shards)
        check_ownership(table, {i for ids in table.values() for i in ids})


def check_security(name: str, sec: SecurityParams, endpoints: list[str], *, server: bool) -> None:
    """The rule above.

    Raises:
        ConfigError: naming the process and the field.
    """
    if sec.mode == "plain-loopback":
        for ep in endpoints:
            if not ep.startswith("tcp://127.0.0.1:"):
                raise ConfigError(f"{name}: params.security.mode: plain-loopback only on tcp://127.0.0.1, got {ep!r}")
        return
    if not sec.secret_key_file:
        raise ConfigError(f"{name}: params.security.secret_key_file: required with mode curve")
    if server and not sec.authorized_keys_dir:
        raise ConfigError(f"{name}: params.security.authorized_keys_dir: required for a server with mode curve")
    if not server and not sec.server_key_file:
        raise ConfigError(f"{name}: params.security.server_key_file: required for a client with mode curve")


def check_key_files(sec: SecurityParams, *, server: bool) -> None:
    """With mode curve: the secret key file readable, a certificate and 0600; a client's server key
    file a certificate; a server's authorized keys folder present.

    Raises:
        ConfigError: naming the file and what is wrong with it.
    """
    if sec.mode != "curve":
        return
    curve.load_secret(sec.secret_key_file)
    if server:
        if not Path(sec.authorized_keys_dir).is_dir():
            raise ConfigError(f"params.security.authorized_keys_dir: {sec.authorized_keys_dir}: no such folder")
    else:
        curve.load_public(sec.server_key_file)


def shard_table(name: str, shards: dict[str, list[int]]) -> dict[int, list[int]]:
    """``GatewayParams.shards`` with integer keys. Raises ConfigError: a key that is not 1..65535."""
    out = {}
    for key, ids in shards.items():
        if not key.isdigit() or not 1 <= int(key) <= 65_535:
            raise ConfigError(f"{name}: params.shards.{key}: a shard id is 1..65535")
        out[int(key)] = list(ids)
    return out
