"""The sender's connections (pipeline/trading/sender/connection.py): ``base_url`` and the readable check."""

from __future__ import annotations

import socket
import ssl

import pytest

from pipeline.runtime.errors import ConfigError
from pipeline.trading.sender.connection import parse_base_url, readable


@pytest.mark.parametrize("url,ok", [
    ("http://127.0.0.1:8080", (("127.0.0.1", 8080), False)),
    ("http://localhost:9/", (("127.0.0.1", 9), False)),
    ("https://api.bitget.com", (("api.bitget.com", 443), True)),
    ("https://api.bitget.com:8443/", (("api.bitget.com", 8443), True)),
    ("http://api.bitget.com", None),  # a key in clear over a network
    ("http://10.0.0.5:8080", None),
    ("http://127.0.0.1", None),
    ("ftp://127.0.0.1:21", None),
    ("https://api.bitget.com/api/v2", None),
    ("https://api.bitget.com:port", None),
    ("api.bitget.com", None),
])
def test_base_url_is_https_anywhere_or_plain_http_to_the_loopback_only(url, ok):
    if ok is None:
        with pytest.raises(ConfigError, match="base_url"):
            parse_base_url(url)
    else:
        addr, tls = parse_base_url(url)
        assert (addr, tls is not None) == ok
        if tls is not None:
            assert tls.verify_mode == ssl.CERT_REQUIRED and tls.check_hostname


def test_readable_names_sockets_with_data_and_counts_a_closed_connection_as_readable():
    a, b = socket.socketpair()
    c, d = socket.socketpair()
    try:
        b.send(b"x")
        assert readable((a, c)) == {a}
        assert readable((a, None, c)) == {a, None}  # None: closed, reading it says why
    finally:
        for s in (a, b, c, d):
            s.close()
