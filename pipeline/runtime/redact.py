"""What a log line must not carry: request query strings and secrets, removed before the line is written.

- ``target(t)``: a request target (path and query) as it may be logged: the path, truncated, with any
  query replaced by ``?<redacted>`` (a query may carry a token, a key or a signature; its parameter
  names too, when one is sent without a value);
- ``without(text, secrets)``: ``text`` with every occurrence of each known secret replaced by
  ``<redacted>`` (a secret sent where it does not belong, e.g. in a path segment);
- ``fields(doc)``: a log line's fields with the value of every field whose name says it holds a
  secret (a word token, secret, passphrase, password, signature, sign, authorization, cookie, or a
  name ending in key, e.g. ``api_key``, ``access-key``) replaced by ``<redacted>``.
  ``pipeline.runtime.log.EventLog`` applies it to every line of every process.
"""

from __future__ import annotations

import re

REDACTED = "<redacted>"
_WORDS = frozenset(("token", "secret", "passphrase", "password", "signature", "sign", "authorization", "cookie",
                    "apikey"))
_SPLIT = re.compile(r"[_\-.\s]+")


def target(text: str, max_chars: int = 80) -> str:
    """The loggable form of a request target: its path (at most ``max_chars``), the query (and a
    fragment) replaced by ``?<redacted>``."""
    path, sep, _ = text.partition("?")
    path, hash_sep, _ = path.partition("#")
    return path[:max_chars] + (f"?{REDACTED}" if sep or hash_sep else "")


def without(text: str, secrets) -> str:
    """``text`` with every occurrence of each non-empty secret of ``secrets`` replaced by ``<redacted>``."""
    for s in secrets:
        if s and s in text:
            text = text.replace(s, REDACTED)
    return text


def is_secret_name(name: str) -> bool:
    """True for a field name that says its value is a secret (module docstring)."""
    words = _SPLIT.split(name.lower())
    return words[-1] == "key" or not _WORDS.isdisjoint(words)


def fields(doc: dict) -> dict:
    """``doc`` itself when no field name says it holds a secret, else a copy with those values replaced."""
    if not any(is_secret_name(k) for k in doc):
        return doc
    return {k: (REDACTED if is_secret_name(k) else v) for k, v in doc.items()}
