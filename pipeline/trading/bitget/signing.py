"""Bitget v2 REST request signing, and the credentials it needs.

``ACCESS-SIGN = base64(HMAC-SHA256(secret, prehash))`` with
``prehash = timestamp_ms + METHOD + request_path ["?" + query] + body``, where ``body`` is the exact
JSON text sent (empty for GET) and ``query`` the exact query string sent (its parameters sorted by key
when this module builds it). The order sender signs; the paper venue verifies with the same functions.

Credentials come from the environment or from a JSON file that only its owner can read (mode 0600);
never from the config. ``Credentials``' repr and str show only a short fingerprint of the key, so an
accidental log line or exception text cannot carry the secret.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import stat
from pathlib import Path
from urllib.parse import urlencode

import orjson

from pipeline.runtime.errors import ConfigError

#: environment variables read by ``load_credentials`` when no file is given (prefix + name)
ENV_PREFIX = "SHMPIPE_"
ENV_NAMES = ("API_KEY", "API_SECRET", "API_PASSPHRASE")


def prehash(timestamp_ms: int | str, method: str, request_path: str, query: str = "", body: str | bytes = "") -> bytes:
    """The signed text: ``timestamp + METHOD + path ["?" + query] + body`` as UTF-8 bytes."""
    if isinstance(body, bytes):
        body = body.decode("utf-8")
    q = f"?{query}" if query else ""
    return f"{timestamp_ms}{method.upper()}{request_path}{q}{body}".encode("utf-8")


def sign(secret: str | bytes, timestamp_ms: int | str, method: str, request_path: str, query: str = "",
         body: str | bytes = "") -> str:
    """``ACCESS-SIGN`` for one request (base64 of the HMAC-SHA256 digest)."""
    key = secret.encode("utf-8") if isinstance(secret, str) else secret
    digest = hmac.new(key, prehash(timestamp_ms, method, request_path, query, body), hashlib.sha256).digest()
    return base64.b64encode(digest).decode("ascii")


def verify(secret: str | bytes, signature: str, timestamp_ms: int | str, method: str, request_path: str,
           query: str = "", body: str | bytes = "") -> bool:
    """True when ``signature`` is the request's signature (constant-time comparison)."""
    expected = sign(secret, timestamp_ms, method, request_path, query, body)
    return hmac.compare_digest(expected.encode("ascii"), signature.encode("ascii", "replace"))


def query_string(params: dict | None) -> str:
    """A GET query string with its parameters sorted by key (the form that is sent and signed)."""
    if not params:
        return ""
    return urlencode(sorted((k, str(v)) for k, v in params.items() if v is not None))


class Credentials:
    """An API key, its secret and passphrase. ``repr`` / ``str`` never show the secret or passphrase."""

    __slots__ = ("api_key", "secret", "passphrase", "_mac")

    def __init__(self, api_key: str, secret: str, passphrase: str):
        for name, value in (("api_key", api_key), ("secret", secret), ("passphrase", passphrase)):
            if not isinstance(value, str) or not value:
                raise ConfigError(f"credentials: {name} is missing or empty")
            if not (value.isascii() and value.isprintable()):  # key and passphrase travel in HTTP headers
                raise ConfigError(f"credentials: {name} must be printable ASCII")
        self.api_key = api_key
        self.secret = secret
        self.passphrase = passphrase
        # keyed once: each signature copies it (no key schedule, no digest lookup per request)
        self._mac = hmac.new(secret.encode("utf-8"), digestmod=hashlib.sha256)

    @property
    def fingerprint(self) -> str:
        """8 hex digits of SHA-256 of the key id: enough to tell keys apart in logs, useless to an attacker."""
        return hashlib.sha256(self.api_key.encode()).hexdigest()[:8]

    def sign(self, timestamp_ms: int | str, method: str, request_path: str, query: str = "", body: str | bytes = "") -> str:
        """``ACCESS-SIGN`` for one request: the same value as the module's ``sign`` with this secret."""
        mac = self._mac.copy()
        mac.update(prehash(timestamp_ms, method, request_path, query, body))
        return base64.b64encode(mac.digest()).decode("ascii")

    def headers(self, timestamp_ms: int, method: str, request_path: str, query: str = "", body: str = "") -> dict:
        """The signed request headers."""
        return {
            "ACCESS-KEY": self.api_key,
            "ACCESS-SIGN": self.sign(timestamp_ms, method, request_path, query, body),
            "ACCESS-TIMESTAMP": str(timestamp_ms),
            "ACCESS-PASSPHRASE": self.passphrase,
            "Content-Type": "application/json",
            "locale": "en-US",
        }

    def __repr__(self) -> str:
        return f"Credentials(key=#{self.fingerprint}, secret=***, passphrase=***)"

    __str__ = __repr__

    def __reduce__(self):  # never pickled, never copied into another process's arguments
        raise TypeError("Credentials cannot be pickled")


def load_credentials(path: str | os.PathLike | None = None, *, env: dict | None = None,
                     prefix: str = ENV_PREFIX) -> Credentials:
    """Credentials from ``path`` (a JSON object ``{"api_key", "secret", "passphrase"}``, mode 0600 or
    stricter, owned by this user) or, when ``path`` is None, from the environment variables
    ``<prefix>API_KEY``, ``<prefix>API_SECRET``, ``<prefix>API_PASSPHRASE``.

    Raises:
        ConfigError: the file is missing, readable by group or others, not owned by this user, not a
            JSON object with the three non-empty strings; or an environment variable is missing. The
            message names the file or variable, never a value.
    """
    if path is None:
        env = os.environ if env is None else env
        names = [prefix + n for n in ENV_NAMES]
        missing = [n for n in names if not env.get(n)]
        if missing:
            raise ConfigError(f"credentials: environment variable(s) {', '.join(missing)} not set")
        return Credentials(*(env[n] for n in names))
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise ConfigError(f"credentials file {p} does not exist") from None
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(f"credentials file {p} has mode {stat.S_IMODE(st.st_mode):04o}; it must be 0600 or stricter")
    if st.st_uid != os.getuid():
        raise ConfigError(f"credentials file {p} is not owned by this user")
    try:
        doc = orjson.loads(p.read_bytes())
    except orjson.JSONDecodeError:
        raise ConfigError(f"credentials file {p} is not valid JSON") from None
    if not isinstance(doc, dict) or set(doc) != {"api_key", "secret", "passphrase"}:
        raise ConfigError(f"credentials file {p} must hold exactly the keys api_key, secret, passphrase")
    return Credentials(doc["api_key"], doc["secret"], doc["passphrase"])


def write_credentials_file(path: str | os.PathLike, creds: Credentials) -> None:
    """Write ``creds`` to ``path`` with mode 0600, created exclusively (an existing file is an error).

    Raises:
        FileExistsError: ``path`` exists.
    """
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, orjson.dumps({"api_key": creds.api_key, "secret": creds.secret, "passphrase": creds.passphrase}))
        os.fsync(fd)
    finally:
        os.close(fd)


def generate_paper_credentials(path: str | os.PathLike) -> bool:
    """Create a random paper-venue key file at ``path`` (0600) unless one exists; True when created."""
    import secrets

    if Path(path).exists():
        return False
    write_credentials_file(path, Credentials("paper-" + secrets.token_hex(8), secrets.token_urlsafe(32),
                                             secrets.token_urlsafe(12)))
    return True


def main(argv: list[str] | None = None) -> int:
    """``python -m pipeline.trading.bitget.signing PATH``: create a paper key file at PATH when missing."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m pipeline.trading.bitget.signing KEY_FILE", file=sys.stderr)
        return 2
    created = generate_paper_credentials(args[0])
    print(f"{args[0]}: {'created (paper venue key, 0600)' if created else 'exists, kept'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
