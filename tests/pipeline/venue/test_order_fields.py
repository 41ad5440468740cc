"""``pipeline.venue.order_fields``: a place-order body checked field by field (pure), in the order the
venue checks them, each refusal with the venue's code."""

from __future__ import annotations

from decimal import Decimal

import pytest

from pipeline.venue.order_fields import (
    InstrumentRules,
    OrderRejected,
    PlaceRequest,
    check_symbol,
    int_id,
    parse_delta,
    parse_place,
)

D = Decimal
RULES = {"BTCUSDT": InstrumentRules("BTCUSDT", D("0.1"), D("0.001")), "XYZUSDT": InstrumentRules("XYZUSDT")}
GOOD = {"symbol": "BTCUSDT", "side": "buy", "orderType": "limit", "force": "gtc", "price": "100.10", "size": "0.002"}


def test_a_good_body_becomes_a_place_request_keeping_the_texts_received():
    assert parse_place({**GOOD, "clientOid": "c-1"}, RULES, None) == PlaceRequest(
        "BTCUSDT", "buy", "gtc", D("100.1"), D("0.002"), "100.10", "0.002", "c-1")
    assert parse_place({**GOOD, "clientOid": ""}, RULES, None).client_oid is None
    assert parse_place({**GOOD, "symbol": "XYZUSDT", "price": "1.2345"}, RULES, None).price == D("1.2345")  # no tick


@pytest.mark.parametrize(("field", "sent", "kept"), [
    ("force", "GTC", "gtc"), ("force", "IOC", "ioc"), ("force", "FOK", "fok"), ("force", "Post_Only", "post_only"),
    ("side", "BUY", "buy"), ("side", "Sell", "sell"), ("orderType", "LIMIT", "limit"),
])
def test_enumerations_are_accepted_in_any_case_as_the_exchange_accepts_them(field, sent, kept):
    req = parse_place({**GOOD, field: sent}, RULES, None)
    assert {"force": req.force, "side": req.side, "orderType": req.order_type}[field] == kept


def test_a_market_order_needs_no_price_or_force_and_a_buy_is_sized_in_the_quote_coin():
    buy = parse_place({"symbol": "BTCUSDT", "side": "buy", "orderType": "market", "size": "10.37"}, RULES, None)
    assert (buy.order_type, buy.price, buy.price_text, buy.size, buy.force) == ("market", None, "0", D("10.37"), "ioc")
    sell = parse_place({**GOOD, "orderType": "MARKET", "side": "sell", "price": "junk"}, RULES, None)
    assert (sell.order_type, sell.price, sell.size) == ("market", None, D("0.002"))
    with pytest.raises(OrderRejected) as e:  # a sell is sized in the base coin: on the lot
        parse_place({**GOOD, "orderType": "market", "side": "sell", "size": "0.0015"}, RULES, None)
    assert e.value.code == "40808"


@pytest.mark.parametrize(("change", "code", "words"), [
    ({"symbol": None}, "40019", "Parameter symbol cannot be empty"),
    ({"symbol": ""}, "40019", "Parameter symbol cannot be empty"),
    ({"symbol": "DOGEUSDT"}, "40034", "Parameter DOGEUSDT does not exist"),
    ({"side": "hold"}, "40020", "Parameter side error"),
    ({"side": 1}, "40020", "Parameter side error"),
    ({"orderType": "stop"}, "40020", "Parameter orderType error"),
    ({"force": None}, "40019", "Parameter force cannot be empty"),
    ({"force": "day"}, "40020", "Parameter force error"),
    ({"price": None}, "40019", "Parameter price cannot be empty"),
    ({"price": 100.1}, "40020", "Parameter price error: a decimal string"),
    ({"price": "abc"}, "40020", "Parameter price error: not a decimal"),
    ({"size": "-1"}, "40020", "Parameter size error: a positive finite decimal"),
    ({"price": "100.15"}, "41103", "param price scale error"),
    ({"size": "0.0015"}, "40808", "size checkBDScale error value=0.0015"),
    ({"price": "1000000.0", "size": "1"}, "43012", "above the limit 500000"),
    ({"clientOid": "x" * 65}, "40020", "Parameter clientOid error"),
])
def test_each_bad_field_is_refused_with_the_exchanges_code(change, code, words):
    body = {k: v for k, v in {**GOOD, **change}.items() if v is not None}
    with pytest.raises(OrderRejected, match=words) as e:
        parse_place(body, RULES, D("500000"))
    assert e.value.code == code


def test_the_fields_are_checked_in_order():
    with pytest.raises(OrderRejected, match="DOGEUSDT"):  # before the side
        parse_place({**GOOD, "symbol": "DOGEUSDT", "side": "hold"}, RULES, None)
    with pytest.raises(OrderRejected, match="side"):  # before the price
        parse_place({**GOOD, "side": "hold", "price": "x"}, RULES, None)
    with pytest.raises(OrderRejected, match="the body must be a JSON object"):
        parse_place([GOOD], RULES, None)


def test_symbols_ids_and_deltas():
    assert check_symbol(RULES, "BTCUSDT") is RULES["BTCUSDT"]
    with pytest.raises(OrderRejected, match="40034"):
        check_symbol(RULES, 5)
    assert int_id("0012", "orderId") == 12 and int_id(7, "orderId") == 7
    for bad in (-1, True, "1e3", "", "9" * 31):
        with pytest.raises(OrderRejected, match="Parameter orderId error"):
            int_id(bad, "orderId")
    assert parse_delta("-0.002") == D("-0.002") and parse_delta(D("1")) == 1
    for bad in ("0", "nan", "", 0.5, "x" * 41):
        with pytest.raises(OrderRejected, match="delta"):
            parse_delta(bad)
