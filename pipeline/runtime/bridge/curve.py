"""CurveZMQ between hosts: key files made by setup, loaded by the bridge, applied to its sockets.

Keys never appear in a config: a config names files. ``python -m pipeline.runtime.bridge.curve DIR NAME
[NAME ...]`` writes, per NAME, ``DIR/NAME.key_secret`` (0600: the public and the secret key) and
``DIR/NAME.key`` (the public key only), in the ZPL certificate format pyzmq's ``zmq.auth`` reads; an
existing file is never overwritten. A server (PUB, snapshot ROUTER, the gateway's ROUTER) admits only
clients whose public certificate lies in its ``authorized_keys_dir`` (a ZAP handler,
``zmq.auth.thread.ThreadAuthenticator``); a client must know the server's public key. A handshake
that fails (an unknown client key, no Curve at all, garbage) never reaches the bridge's code: the
socket monitor reports it and the shell counts it (``HandshakeMonitor``).

``plain-loopback`` skips Curve and is accepted only for endpoints on 127.0.0.1 (tests that say so).
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import zmq
import zmq.auth

from pipeline.runtime.errors import ConfigError

_CERT = '#   ZeroMQ CURVE certificate (shmpipe bridge)\nmetadata\ncurve\n    public-key = "{pub}"\n{secret}'


def generate(folder: str | Path, name: str) -> tuple[Path, Path]:
    """Write NAME.key (public) and NAME.key_secret (0600) in ``folder`` (made 0700 if missing).

    Raises:
        FileExistsError: either file exists already.
    """
    d = Path(folder)
    d.mkdir(mode=0o700, parents=True, exist_ok=True)
    pub, sec = zmq.curve_keypair()
    public, secret = d / f"{name}.key", d / f"{name}.key_secret"
    for path, text, mode in ((secret, _CERT.format(pub=pub.decode(), secret=f'    secret-key = "{sec.decode()}"\n'), 0o600),
                             (public, _CERT.format(pub=pub.decode(), secret=""), 0o644)):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(path, mode)
    return public, secret


def load_secret(path: str | Path) -> tuple[bytes, bytes]:
    """(public, secret) from a ``.key_secret`` file.

    Raises:
        ConfigError: unreadable, not a secret certificate, or readable by others than its owner.
    """
    p = Path(path)
    try:
        mode = p.stat().st_mode
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read key file: {exc.strerror}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(f"{p}: a secret key file must be 0600, it is {stat.S_IMODE(mode):04o}")
    pub, sec = _load(p)
    if not sec:
        raise ConfigError(f"{p}: holds no secret key")
    return pub, sec


def load_public(path: str | Path) -> bytes:
    """A public key from a ``.key`` (or ``.key_secret``) file. Raises ConfigError: unreadable or malformed."""
    return _load(Path(path))[0]


def _load(p: Path) -> tuple[bytes, bytes | None]:
    try:
        pub, sec = zmq.auth.load_certificate(p)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{p}: not a CURVE certificate: {exc}") from None
    if not pub or len(pub) != 40:
        raise ConfigError(f"{p}: malformed public key")
    return pub, sec


def start_authenticator(ctx: zmq.Context, authorized_keys_dir: str | Path):
    """A running ZAP handler admitting the public certificates in ``authorized_keys_dir``.

    Raises:
        ConfigError: the folder does not exist.
    """
    from zmq.auth.thread import ThreadAuthenticator

    d = Path(authorized_keys_dir)
    if not d.is_dir():
        raise ConfigError(f"{d}: authorized keys folder does not exist")
    auth = ThreadAuthenticator(ctx)
    auth.start()
    auth.configure_curve(domain="*", location=str(d))
    return auth


def make_server(sock: zmq.Socket, secret_key_file: str) -> None:
    """Make ``sock`` a Curve server with the key pair in ``secret_key_file`` (before bind)."""
    pub, sec = load_secret(secret_key_file)
    sock.curve_secretkey, sock.curve_publickey, sock.curve_server = sec, pub, True


def make_client(sock: zmq.Socket, secret_key_file: str, server_key_file: str) -> None:
    """Make ``sock`` a Curve client of the server whose public key is in ``server_key_file`` (before connect)."""
    pub, sec = load_secret(secret_key_file)
    sock.curve_secretkey, sock.curve_publickey = sec, pub
    sock.curve_serverkey = load_public(server_key_file)


_FAILED = zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_AUTH


class HandshakeMonitor:
    """Counts the failed handshakes of one socket (``failed``), from its monitor socket."""

    def __init__(self, sock: zmq.Socket):
        self.mon = sock.get_monitor_socket(_FAILED)
        self.failed = 0

    def poll(self) -> int:
        """Count the failures reported since the last call; returns how many."""
        n = 0
        while True:
            try:
                frames = self.mon.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            if len(frames) == 2 and len(frames[0]) >= 2:
                n += 1
        self.failed += n
        return n

    def close(self) -> None:
        self.mon.close(linger=0)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2:
        print("usage: python -m pipeline.runtime.bridge.curve DIR NAME [NAME ...]", file=sys.stderr)
        return 2
    for name in args[1:]:
        try:
            public, secret = generate(args[0], name)
        except FileExistsError as exc:
            print(f"{exc.filename}: exists, not overwritten", file=sys.stderr)
            return 1
        print(f"{public}\n{secret} (0600)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
