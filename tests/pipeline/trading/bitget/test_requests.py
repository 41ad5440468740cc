"""Bitget v2 request messages (golden JSON): subscribe, unsubscribe, the resync pair, ping, and the
chunked subscribe frames of a feed's subscriptions."""

from __future__ import annotations

import orjson
import pytest

from pipeline.runtime.errors import PipelineError
from pipeline.trading.bitget.errors import BitgetError
from pipeline.trading.bitget.frames import Subscription
from pipeline.trading.bitget.requests import (ping_message, resync_messages, subscribe_message, subscribe_messages,
                                              unsubscribe_message)


def test_subscribe_message_is_the_venue_golden_json():
    msg = subscribe_message([Subscription("SPOT", "books15", "BTCUSDT")])
    assert msg == '{"op":"subscribe","args":[{"instType":"SPOT","channel":"books15","instId":"BTCUSDT"}]}'


def test_subscribe_message_carries_several_channels_in_order():
    msg = subscribe_message([
        Subscription("USDT-FUTURES", "books", "ETHUSDT"),
        Subscription("SPOT", "trade", "BTCUSDT"),
    ])
    assert msg == (
        '{"op":"subscribe","args":['
        '{"instType":"USDT-FUTURES","channel":"books","instId":"ETHUSDT"},'
        '{"instType":"SPOT","channel":"trade","instId":"BTCUSDT"}]}'
    )


def test_unsubscribe_message_has_the_same_shape():
    msg = unsubscribe_message([Subscription("SPOT", "books", "BTCUSDT")])
    assert msg == '{"op":"unsubscribe","args":[{"instType":"SPOT","channel":"books","instId":"BTCUSDT"}]}'


def test_a_resync_is_unsubscribe_then_subscribe():
    sub = Subscription("SPOT", "books", "BTCUSDT")
    assert resync_messages(sub) == [unsubscribe_message([sub]), subscribe_message([sub])]


def test_ping_is_plain_text():
    assert ping_message() == "ping"


@pytest.mark.parametrize(
    "subs",
    [
        [],
        [Subscription("SPOT", "books50x", "BTCUSDT")],
        [Subscription("sp", "books", "BTCUSDT")],
        [Subscription("SPOT", "books", "")],
        [Subscription("SPOT", "books", "BTC USDT")],
        [("SPOT", "books", "BTCUSDT")],
        [Subscription("SPOT", "books", f"SYM{i:05d}USDT") for i in range(80)],  # args > 4096 bytes
    ],
    ids=["empty", "channel", "instType", "no-instId", "space", "not-a-Subscription", "too-long"],
)
def test_bad_requests_raise_the_package_root_exception(subs):
    with pytest.raises(BitgetError):
        subscribe_message(subs)
    assert issubclass(BitgetError, PipelineError)


def test_subscribe_messages_chunk_the_subscriptions_in_order():
    subs = [Subscription("SPOT", "books15", f"SYM{i}USDT") for i in range(45)]
    texts = subscribe_messages(subs, chunk=20)
    assert [len(orjson.loads(t)["args"]) for t in texts] == [20, 20, 5]
    assert texts[1] == subscribe_message(subs[20:40])
    assert subscribe_messages(subs[:3]) == [subscribe_message(subs[:3])]  # the default chunk is 20
