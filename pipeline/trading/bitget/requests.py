"""The text frames a Bitget v2 public WebSocket client sends: subscribe, unsubscribe, the resync pair
and ping. Sans-I/O (control path: these raise ``BitgetError`` on bad input)."""

from __future__ import annotations

from collections.abc import Iterable

import orjson

from pipeline.trading.bitget.errors import BitgetError
from pipeline.trading.bitget.frames import CHANNELS, INST_TYPES, MAX_SUBSCRIBE_ARGS_BYTES, PING_TEXT, Subscription


def _request(op: str, subs: Iterable[Subscription]) -> str:
    args = []
    for sub in subs:
        if not isinstance(sub, Subscription):
            raise BitgetError(f"expected a Subscription, got {type(sub).__name__}")
        if sub.channel not in CHANNELS:
            raise BitgetError(f"unknown channel {sub.channel!r}; known: {sorted(CHANNELS)}")
        if sub.inst_type not in INST_TYPES:
            raise BitgetError(f"unknown instType {sub.inst_type!r}; known: {sorted(INST_TYPES)}")
        if not (sub.inst_id.isascii() and sub.inst_id.isalnum()):
            raise BitgetError(f"instId must be non-empty ASCII letters and digits, got {sub.inst_id!r}")
        args.append({"instType": sub.inst_type, "channel": sub.channel, "instId": sub.inst_id})
    if not args:
        raise BitgetError(f"{op} needs at least one subscription")
    args_bytes = len(orjson.dumps(args))
    if args_bytes > MAX_SUBSCRIBE_ARGS_BYTES:
        raise BitgetError(f"{op} args are {args_bytes} bytes; the venue accepts at most {MAX_SUBSCRIBE_ARGS_BYTES}")
    return orjson.dumps({"op": op, "args": args}).decode()


def subscribe_message(subs: Iterable[Subscription]) -> str:
    """The text frame subscribing to ``subs``, e.g.
    ``{"op":"subscribe","args":[{"instType":"SPOT","channel":"books15","instId":"BTCUSDT"}]}``.

    Raises:
        BitgetError: no subscription, an unknown channel or instType, an instId that is not ASCII
            alphanumeric, or ``args`` longer than MAX_SUBSCRIBE_ARGS_BYTES.
    """
    return _request("subscribe", subs)


def unsubscribe_message(subs: Iterable[Subscription]) -> str:
    """The text frame unsubscribing from ``subs`` (same shape as ``subscribe_message``).

    Raises:
        BitgetError: as ``subscribe_message``.
    """
    return _request("unsubscribe", subs)


def resync_messages(sub: Subscription) -> list[str]:
    """The two text frames that make the venue send a fresh snapshot for ``sub``: unsubscribe,
    then subscribe (each counts against the venue's 240 subscribe requests an hour).

    Raises:
        BitgetError: as ``subscribe_message``.
    """
    return [unsubscribe_message([sub]), subscribe_message([sub])]


def ping_message() -> str:
    """The keep-alive text frame (plain ``ping``, not JSON); the venue answers ``pong``."""
    return PING_TEXT



SUBSCRIBE_CHUNK = 20  # subscriptions per subscribe request (keeps args well under 4096 bytes)


def subscribe_messages(subs: list[Subscription], chunk: int = SUBSCRIBE_CHUNK) -> list[str]:
    """The subscribe frames for ``subs``, ``chunk`` subscriptions each, in order.

    Raises:
        BitgetError: as ``subscribe_message``.
    """
    return [subscribe_message(subs[i:i + chunk]) for i in range(0, len(subs), chunk)]
