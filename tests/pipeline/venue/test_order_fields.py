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


@pytest.mark.parametrize(("change", "code", "words"), [
    ({"symbol": None}, "40001", "symbol is missing"),
    ({"symbol": "DOGEUSDT"}, "40034", "not traded here"),
    ({"side": "hold"}, "40001", "side must be one of"),
    ({"orderType": "market"}, "40001", "orderType"),
    ({"force": None}, "40001", "force is missing"),
    ({"price": 100.1}, "40001", "price must be a decimal string"),
    ({"price": "abc"}, "40001", "price is not a decimal"),
    ({"size": "-1"}, "40001", "size must be a positive finite decimal"),
    ({"price": "100.15"}, "40001", "not a multiple of the tick 0.1"),
    ({"size": "0.0015"}, "40001", "not a multiple of the lot 0.001"),
    ({"price": "1000000.0", "size": "1"}, "43012", "above the limit 500000"),
    ({"clientOid": "x" * 65}, "40001", "clientOid must be"),
])
def test_each_bad_field_is_refused_with_the_venues_code(change, code, words):
    body = {k: v for k, v in {**GOOD, **change}.items() if v is not None}
    with pytest.raises(OrderRejected, match=words) as e:
        parse_place(body, RULES, D("500000"))
    assert e.value.code == code


def test_the_fields_are_checked_in_order():
    with pytest.raises(OrderRejected, match="symbol"):  # before the side
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
        with pytest.raises(OrderRejected, match="orderId must be"):
            int_id(bad, "orderId")
    assert parse_delta("-0.002") == D("-0.002") and parse_delta(D("1")) == 1
    for bad in ("0", "nan", "", 0.5, "x" * 41):
        with pytest.raises(OrderRejected, match="delta"):
            parse_delta(bad)
