"""The paper venue's USDT-FUTURES routes (pipeline/venue/mix_api.py, served by rest_api.RestApi with
``perps``), sans-I/O: requests made by the order sender's own builders (pipeline/trading/bitget/mix.py)
and answers read by its parsers, so the two agree on every endpoint: place (with reduce-only), cancel,
batch cancel, cancel all, detail, orders pending, fills, positions; the exchange's codes for what it
refuses; a perpetual's position kept out of the spot balances."""

from __future__ import annotations

from decimal import Decimal

import orjson
import pytest

from pipeline.trading.bitget import mix, rest
from pipeline.trading.bitget.signing import Credentials
from pipeline.trading.messages import Side, TimeInForce
from pipeline.venue.http_wire import HttpRequest
from pipeline.venue.orders import OrderEngine
from pipeline.venue.rest_api import RestApi
from tests.support.venue import RULES, T0_MS, Book

CREDS = Credentials("paper-key", "paper-secret", "paper-pass")
BTC = mix.MixInstrument("BTCUSDT", 0.1, 0.001)  # the perpetual; ETHUSDT stays spot
ETH_AS_PERP = mix.MixInstrument("ETHUSDT", 0.01, 0.01)


def _api() -> RestApi:
    engine = OrderEngine(RULES, Book().levels, lambda: T0_MS)
    return RestApi(engine, CREDS, now_ms=lambda: T0_MS, mono_ns=lambda: 0, perps={"BTCUSDT": "USDT"})


def _send(api: RestApi, req: rest.Request) -> rest.Result:
    """``req`` as the venue receives it; its answer classified as the sender does."""
    headers = {k.lower(): v for k, v in req.headers.items()}
    status, raw = api.handle(HttpRequest(req.method, req.path, req.query, headers, req.body.encode(), True))
    return rest.classify_response(status, raw)


def _place(api, side, price, size, coid, tif=TimeInForce.GTC, reduce_only=False):
    return _send(api, mix.build_place(CREDS, T0_MS, BTC, side, tif, price, size, coid, reduce_only=reduce_only))


def test_a_taker_fill_moves_the_perpetual_position_and_every_query_shows_it():
    api = _api()
    res = _place(api, Side.BUY, 100.1, 0.002, "tp01")
    assert res.ok and res.data["clientOid"] == "tp01"
    (o,) = mix.parse_orders(_send(api, mix.build_order_detail(CREDS, T0_MS, "BTCUSDT", client_oid="tp01")).data)
    assert (o.status, o.baseVolume, o.priceAvg) == ("filled", 0.002, 100.1)
    (f,) = mix.parse_fills(_send(api, mix.build_fills(CREDS, T0_MS)).data)
    assert (f.orderId, f.clientOid, f.size, f.priceAvg, f.side) == (o.orderId, "", 0.002, 100.1, "buy")
    assert mix.parse_fills(_send(api, mix.build_fills(CREDS, T0_MS, id_greater_than=f.tradeId)).data) == []
    assert mix.parse_positions(_send(api, mix.build_positions(CREDS, T0_MS)).data) == {"BTCUSDT": 0.002}
    spot = _send(api, rest.build_assets(CREDS, T0_MS))
    assert [a["coin"] for a in spot.data] == ["ETH", "USDT"]  # a perpetual is not a spot balance


def test_a_reduce_only_order_that_would_not_reduce_is_refused_and_never_reaches_the_book():
    api = _api()
    assert _place(api, Side.SELL, 100.5, 0.001, "ro0", reduce_only=True).code == "22002"  # no position
    assert _place(api, Side.BUY, 100.1, 0.002, "tp01").ok  # long 0.002
    for side, price, size in ((Side.BUY, 99.0, 0.001), (Side.SELL, 100.5, 0.003)):  # grows; flips
        assert _place(api, side, price, size, f"ro{size}", reduce_only=True).code == "22002"
    assert api.engine.open_orders() == [] and api.engine.position("BTCUSDT") == Decimal("0.002")
    res = _place(api, Side.SELL, 100.5, 0.002, "ro-ok", reduce_only=True)
    assert res.ok and [o.client_oid for o in api.engine.open_orders()] == ["ro-ok"]


def test_cancel_batch_cancel_and_cancel_all_answer_in_the_mix_shapes():
    api = _api()
    for i, px in enumerate((99.0, 98.0, 97.0, 96.0)):
        assert _place(api, Side.BUY, px, 0.001, f"c{i}", TimeInForce.POST_ONLY).ok
    assert _send(api, mix.build_cancel(CREDS, T0_MS, BTC, client_oid="c0")).ok
    assert _send(api, mix.build_cancel(CREDS, T0_MS, BTC, client_oid="c0")).code == "40768"
    batch = _send(api, mix.build_batch_cancel(CREDS, T0_MS, BTC, ["c1", "nope"]))
    assert batch.ok and mix.parse_cancelled(batch.data) == ["c1"]
    assert [(x["clientOid"], x["errorCode"]) for x in batch.data["failureList"]] == [("nope", "40768")]
    pending = mix.parse_orders(_send(api, mix.build_pending(CREDS, T0_MS)).data)
    assert sorted(v.clientOid for v in pending) == ["c2", "c3"] and {v.status for v in pending} == {"live"}
    assert mix.parse_cancelled(_send(api, mix.build_batch_cancel(CREDS, T0_MS, BTC)).data) == ["c2", "c3"]
    assert _place(api, Side.BUY, 95.0, 0.001, "c4", TimeInForce.POST_ONLY).ok
    assert mix.parse_cancelled(_send(api, mix.build_cancel_all(CREDS, T0_MS)).data) == ["c4"]
    assert mix.parse_orders(_send(api, mix.build_pending(CREDS, T0_MS)).data) == []
    (c1,) = mix.parse_orders(_send(api, mix.build_order_detail(CREDS, T0_MS, "BTCUSDT", client_oid="c1")).data)
    assert c1.status == "cancelled"


def test_orders_pending_and_fills_leave_spot_symbols_out():
    api = _api()
    eth = rest.build_place(CREDS, T0_MS, "ETHUSDT", Side.BUY, TimeInForce.POST_ONLY, 9.5, 0.01, "spot1", 0.01, 0.01)
    assert _send(api, eth).ok and _place(api, Side.BUY, 99.0, 0.001, "perp1").ok
    assert [v.clientOid for v in mix.parse_orders(_send(api, mix.build_pending(CREDS, T0_MS)).data)] == ["perp1"]
    assert [v.clientOid for v in rest.parse_orders(_send(api, rest.build_unfilled(CREDS, T0_MS)).data)] == \
        ["spot1", "perp1"]  # the spot route is the account's: both


@pytest.mark.parametrize("make, code", [
    (lambda: mix.build_place(CREDS, T0_MS, ETH_AS_PERP, Side.BUY, TimeInForce.GTC, 9.5, 0.01, "x"), "40034"),
    (lambda: mix.build_order_detail(CREDS, T0_MS, "BTCUSDT", client_oid="unknown"), "40109"),
    (lambda: mix.build_cancel(CREDS, T0_MS, mix.MixInstrument("BTCUSDT", 0.1, 0.001, "BTC"), client_oid="x"), "40020"),
])
def test_what_the_exchange_refuses_is_refused_with_its_code(make, code):
    assert _send(_api(), make()).code == code


def test_another_product_type_and_a_reused_client_oid_are_refused():
    api = _api()
    body = orjson.loads(mix.place_body(BTC, Side.BUY, TimeInForce.GTC, 99.0, 0.001, "dup"))
    spot_typed = rest._signed(CREDS, T0_MS, "POST", mix.PLACE_PATH, "", rest._dumps({**body, "productType": "SPOT"}))
    assert _send(api, spot_typed).code == "40020"
    assert _place(api, Side.BUY, 99.0, 0.001, "dup").ok
    assert _place(api, Side.BUY, 98.0, 0.001, "dup").code == "40786"
    assert _send(api, rest._signed(CREDS, T0_MS, "GET", mix.POSITIONS_PATH, "productType=COIN-FUTURES")).code == "40020"
