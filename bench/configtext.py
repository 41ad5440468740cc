"""The TOML text of the bench configs, built from tables: values, inline tables, ``[supervisor]``,
``[[rings]]``, ``[[processes]]`` and ``[[instruments]]`` blocks. Each block ends with a newline;
a config is its blocks joined by blank lines (``blocks``)."""

from __future__ import annotations

import json
from typing import Any


def toml_value(v: Any) -> str:
    """``v`` as a TOML value: booleans lower case, strings JSON-quoted, lists and dicts (inline
    tables) element by element, numbers by ``repr``.

    Raises:
        TypeError: a value TOML cannot hold here (None, an object).
    """
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, dict):
        return inline_table(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, (int, float)):
        return repr(v)
    raise TypeError(f"no TOML value for {v!r}")


def inline_table(fields: dict[str, Any]) -> str:
    """``{ key = value, ... }`` in the order of ``fields``."""
    return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in fields.items()) + " }"


def lines(fields: dict[str, Any]) -> str:
    """One ``key = value`` line per field, in order."""
    return "".join(f"{k} = {toml_value(v)}\n" for k, v in fields.items())


def supervisor(**fields: Any) -> str:
    """The ``[supervisor]`` table."""
    return "[supervisor]\n" + lines(fields)


def ring(name: str, max_payload_bytes: int, capacity: int, full_policy: str) -> str:
    """A ``[[rings]]`` block."""
    return "[[rings]]\n" + lines({"name": name, "max_payload_bytes": max_payload_bytes, "capacity": capacity,
                                  "full_policy": full_policy})


def process(name: str, module: str, place: str = "", **fields: Any) -> str:
    """A ``[[processes]]`` block: its name and module, then ``place`` (raw TOML lines: the placement,
    ``bench.report.placement``), then ``fields`` (``inputs``, ``outputs``, ``wait``, ``params``...)
    in order."""
    return f'[[processes]]\nname = "{name}"\nmodule = "{module}"\n' + place + lines(fields)


def instrument(**fields: Any) -> str:
    """An ``[[instruments]]`` block."""
    return "[[instruments]]\n" + lines(fields)


#: the instrument every bench config trades (the first of bench.pipeline's)
BTCUSDT = instrument(id=1, symbol="BTCUSDT", venue="paper", tick_size=0.1, lot_size=0.0001)


def blocks(*parts: str) -> str:
    """The config text of ``parts`` (blocks), a blank line between each two."""
    return "\n".join(parts)
