"""``pipeline.venue.private_ws``: the private WebSocket's login (the exchange's signature scheme and
codes), subscriptions and the pushes an account change makes, sans-I/O (a ``Session`` per
connection; the fan-out into per-connection queues on an event loop)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac

import orjson
import pytest

from pipeline.trading.bitget.signing import Credentials
from pipeline.venue.orders import OrderEngine
from pipeline.venue.private_ws import PrivateChannels
from pipeline.venue.rest_api import RestApi
from tests.support.venue import RULES, T0_MS, Book

CREDS = Credentials("paper-key", "paper-secret", "paper-pass")
NOW_S = T0_MS // 1000


def login(ts_s: int = NOW_S, key: str = "paper-key", passphrase: str = "paper-pass", secret: str = "paper-secret",
          **over) -> str:
    ts = str(ts_s)
    sig = base64.b64encode(hmac.new(secret.encode(), f"{ts}GET/user/verify".encode(), hashlib.sha256).digest())
    arg = {"apiKey": key, "passphrase": passphrase, "timestamp": ts, "sign": sig.decode(), **over}
    return orjson.dumps({"op": "login", "args": [arg]}).decode()


def sub(channel: str = "orders", inst_id: str = "default", op: str = "subscribe", **arg) -> str:
    a = {"instType": "SPOT", "channel": channel, **({"coin": inst_id} if channel == "account" else {"instId": inst_id})}
    return orjson.dumps({"op": op, "args": [{**a, **arg}]}).decode()


@pytest.fixture
def channels() -> PrivateChannels:
    engine = OrderEngine(RULES, Book().levels, lambda: T0_MS)
    return PrivateChannels(RestApi(engine, CREDS, now_ms=lambda: T0_MS, mono_ns=lambda: 0))


def answers(session, text: str) -> list:
    return [f if f == "pong" else orjson.loads(f) for f in session.on_text(text)]


def test_a_login_signed_the_exchanges_way_is_accepted(channels):
    s = channels.session()
    assert answers(s, "ping") == ["pong"]
    assert answers(s, login()) == [{"event": "login", "code": 0, "msg": ""}] and s.logged_in


@pytest.mark.parametrize(("text", "code"), [
    (login(key="other"), "30011"), (login(passphrase="other"), "30012"), (login(timestamp="12x"), "30013"),
    (login(ts_s=NOW_S - 31), "30014"), (login(secret="other"), "30015"),
    ('{"op":"login","args":[]}', "30016"), ('{"op":"login","args":[{"apiKey":"k"}]}', "30016"),
    ('{"op":"nope","args":[]}', "30003"), ("not json", "30003"),
    (sub(), "30004"),  # before a login
])
def test_a_bad_login_or_request_gets_the_exchanges_code(channels, text, code):
    s = channels.session()
    (err,) = answers(s, text)
    assert (err["event"], str(err["code"])) == ("error", code) and not s.logged_in


def test_subscriptions_are_acked_refused_or_snapshotted(channels):
    s = channels.session()
    answers(s, login())
    assert answers(s, sub()) == [{"event": "subscribe", "arg": {"instType": "SPOT", "channel": "orders",
                                                                "instId": "default"}}]
    (bad,) = answers(s, sub("orders", "DOGEUSDT"))
    assert (bad["event"], bad["code"]) == ("error", "30001")
    (bad,) = answers(s, sub("positions", "default"))
    assert bad["code"] == "30001"
    ack, snap = answers(s, sub("account", "default"))
    assert ack["event"] == "subscribe" and [b["coin"] for b in snap["data"]] == ["BTC", "ETH", "USDT"]
    assert s.wants("orders", "BTCUSDT") and s.wants("account", "USDT")
    answers(s, sub(op="unsubscribe"))
    assert s.wants("orders", "BTCUSDT") is None


def test_an_account_change_is_pushed_to_the_subscriptions_it_concerns(channels):
    async def run():
        mine, other = channels.session(), channels.session()
        for sess, inst in ((mine, "default"), (other, "ETHUSDT")):
            channels._conns[sess] = asyncio.Queue(100)
            answers(sess, login())
            for ch in ("orders", "fill"):
                answers(sess, sub(ch, inst))
        answers(mine, sub("account", "USDT"))
        eng = channels.api.engine
        eng.place({"symbol": "BTCUSDT", "side": "buy", "orderType": "limit", "force": "ioc", "price": "100.1",
                   "size": "0.5", "clientOid": "w1"})
        return ([orjson.loads(q.get_nowait()) for q in [channels._conns[mine]] for _ in range(q.qsize())],
                channels._conns[other].qsize())

    pushed, others = asyncio.run(run())
    assert others == 0  # an ETHUSDT subscriber hears nothing of BTCUSDT
    assert [(p["arg"]["channel"], p["action"]) for p in pushed] == [
        ("orders", "snapshot"), ("orders", "snapshot"), ("fill", "snapshot"), ("account", "snapshot")]
    live, filled = pushed[0]["data"][0], pushed[1]["data"][0]
    assert (live["status"], live["clientOid"], live["price"], live["newSize"]) == ("live", "w1", "100.1", "0.5")
    assert (filled["status"], filled["accBaseVolume"], filled["fillPrice"], filled["baseVolume"],
            filled["tradeScope"]) == ("filled", "0.5", "100.1", "0.5", "T")
    fill = pushed[2]["data"][0]
    assert (fill["orderId"], fill["size"], fill["feeDetail"][0]["feeCoin"]) == (live["orderId"], "0.5", "USDT")
    assert pushed[3]["data"] == [{"coin": "USDT", "available": "-50.05", "frozen": "0", "locked": "0",
                                  "limitAvailable": "0", "uTime": str(T0_MS)}]
    assert channels.stats["pushes"] == 4


def test_a_push_that_fails_is_counted_and_the_engines_command_completes(channels, monkeypatch):
    from pipeline.venue import private_ws

    def boom(o, fill):
        raise RuntimeError("a bug in a push")

    monkeypatch.setattr(private_ws, "order_push", boom)
    s = channels.session()
    channels._conns[s] = asyncio.Queue(10)
    answers(s, login())
    answers(s, sub())
    o = channels.api.engine.place({"symbol": "BTCUSDT", "side": "buy", "orderType": "limit", "force": "ioc",
                                   "price": "100.1", "size": "0.5", "clientOid": "b1"})
    assert o.status == "filled" and channels.stats["push_errors"] == 2 and channels._conns[s].qsize() == 0
