"""The operator token: a random secret in a file only its owner can read (mode 0600), required by the
dashboard's control endpoints (halt, resume, kill switch, restart).

``make setup`` creates it (``python -m pipeline.runtime.ops.tokenfile PATH``) as it creates the paper key;
the supervisor reads it when its ops server starts. The token never goes into a log, a status line, a
metric or an exception message.
"""

from __future__ import annotations

import hmac
import os
import secrets
import stat
import sys
from pathlib import Path

from pipeline.runtime.errors import ConfigError

#: characters of a generated token (``secrets.token_urlsafe(32)``: 43 of [A-Za-z0-9_-])
TOKEN_BYTES = 32
MIN_TOKEN_CHARS = 16
MAX_TOKEN_CHARS = 256


def generate_token_file(path: str | os.PathLike) -> bool:
    """Create a token file at ``path`` (0600, created exclusively, parent directories made) unless one
    exists. Returns True when it was created.

    Raises:
        OSError: the file or its directory cannot be created.
    """
    p = Path(path)
    if p.exists():
        return False
    p.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, (secrets.token_urlsafe(TOKEN_BYTES) + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    return True


def read_token(path: str | os.PathLike) -> str:
    """The token in ``path`` (surrounding whitespace removed).

    Raises:
        ConfigError: the file is missing, unreadable, readable or writable by group or others, owned
            by another user, not ASCII without inner whitespace, or shorter than ``MIN_TOKEN_CHARS`` /
            longer than ``MAX_TOKEN_CHARS`` characters. The message names the file, never its content.
    """
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise ConfigError(f"token file {p} does not exist (make setup creates it)") from None
    except OSError as exc:
        raise ConfigError(f"token file {p}: {exc.strerror or exc}") from None
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(f"token file {p} has mode {stat.S_IMODE(st.st_mode):04o}; it must be 0600 or stricter")
    if st.st_uid != os.getuid():
        raise ConfigError(f"token file {p} is not owned by this user")
    try:
        text = p.read_bytes().decode("ascii").strip()
    except UnicodeDecodeError:
        raise ConfigError(f"token file {p} is not ASCII") from None
    except OSError as exc:
        raise ConfigError(f"token file {p}: {exc.strerror or exc}") from None
    if not MIN_TOKEN_CHARS <= len(text) <= MAX_TOKEN_CHARS or any(c.isspace() or not c.isprintable() for c in text):
        raise ConfigError(f"token file {p} must hold one token of {MIN_TOKEN_CHARS}-{MAX_TOKEN_CHARS} printable "
                          "characters without spaces")
    return text


def token_matches(expected: str, given: str | None) -> bool:
    """True when ``given`` is the token (compared in constant time); False for None or "" too."""
    if not given or not expected:
        return False
    return hmac.compare_digest(expected.encode(), given.encode("utf-8", "replace"))


def main(argv: list[str] | None = None) -> int:
    """``python -m pipeline.runtime.ops.tokenfile PATH``: create the operator token file at PATH when missing."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m pipeline.runtime.ops.tokenfile TOKEN_FILE", file=sys.stderr)
        return 2
    created = generate_token_file(args[0])
    print(f"{args[0]}: {'created (operator token, 0600)' if created else 'exists, kept'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
