"""The scanners ``secrets_and_permissions`` relies on (``bench.chaos.secrets_scan``) find what they look for."""

from __future__ import annotations

import os
import socket

from bench.chaos.secrets_scan import key_material_hits, listening_sockets


def test_key_scan_finds_a_planted_secret(tmp_path):
    clean, leaky = tmp_path / "clean.log", tmp_path / "leaky.log"
    clean.write_bytes(b'{"event": "sender_ready", "key_fp": "ab12cd34"}\n')
    leaky.write_bytes(b'{"headers": {"ACCESS-PASSPHRASE": "pass-XYZ"}}\n')
    hits, read = key_material_hits({"secret": b"s3cr3t", "passphrase": b"pass-XYZ"}, [clean, leaky, tmp_path / "gone"],
                                   [b"status s3cr3t"])
    assert read == 2
    assert hits == [f"passphrase in {leaky}", "secret in text 0"]


def test_listener_scan_sees_a_wildcard_bind_and_a_loopback_one():
    wild, local = socket.socket(), socket.socket()
    try:
        wild.bind(("0.0.0.0", 0))
        wild.listen()
        local.bind(("127.0.0.1", 0))
        local.listen()
        found = {(addr, port) for pid, addr, port in listening_sockets([os.getpid()])}
        assert ("0.0.0.0", wild.getsockname()[1]) in found
        assert ("127.0.0.1", local.getsockname()[1]) in found
    finally:
        wild.close()
        local.close()
