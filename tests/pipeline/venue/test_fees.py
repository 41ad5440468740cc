"""``pipeline.venue.fees`` and the fees of ``OrderEngine(fees=...)``: every fill carries its fee and
liquidity, the account record keeps the fee (an older record without one restores with fee 0), the
USDT cash pays it, the fills endpoint reports it as Bitget v2's ``feeDetail``, and the venue stage
takes it as params. Every expected number is computed by hand in the comment beside it."""

from __future__ import annotations

from decimal import Decimal

import msgspec
import orjson
import pytest

from pipeline.trading.bitget.rest import parse_fills
from pipeline.trading.bitget.signing import Credentials
from pipeline.venue.errors import VenueConfigError, VenueError
from pipeline.venue.fees import (
    BITGET_SPOT_STANDARD,
    BITGET_USDT_FUTURES_STANDARD,
    DEFAULT_EVALUATION_FEES,
    FeeSchedule,
    fee_quote,
)
from pipeline.venue.http_wire import HttpRequest
from pipeline.venue.orders import OrderEngine
from pipeline.venue.rest_api import ASSETS, FILLS, RestApi
from procs.venue import fee_schedule, parse_params
from tests.support.venue import RULES, T0_MS, Book, venue_clock

D = Decimal
FUTURES = FeeSchedule(maker_bps=2.0, taker_bps=6.0)
_coid = iter(range(1, 1_000_000))


def order(side="buy", price="100.2", size="2.5", force="gtc") -> dict:
    return {"symbol": "BTCUSDT", "side": side, "orderType": "limit", "force": force, "price": price, "size": size,
            "clientOid": f"f{next(_coid)}"}


def _engine(fees, records=None) -> OrderEngine:
    return OrderEngine(RULES, Book().levels, venue_clock(), fees=fees,
                       on_event=records.append if records is not None else None)


def _taker_then_maker(eng: OrderEngine) -> None:
    eng.place(order())  # takes 100.1 x 1 and 100.2 x 1.5 (the test book's asks)
    eng.place(order(side="sell", price="100.6", size="1"))  # rests above the best bid
    eng.traded("BTCUSDT", [{"price": "100.6", "size": "1"}])


# -- the schedule -----------------------------------------------------------------------------


def test_bitgets_standard_rates_are_the_named_schedules():
    assert (BITGET_SPOT_STANDARD.maker_bps, BITGET_SPOT_STANDARD.taker_bps) == (10.0, 10.0)
    assert (BITGET_USDT_FUTURES_STANDARD.maker_bps, BITGET_USDT_FUTURES_STANDARD.taker_bps) == (2.0, 6.0)
    assert DEFAULT_EVALUATION_FEES is BITGET_SPOT_STANDARD


def test_fee_quote_is_notional_times_bps_exactly():
    assert fee_quote(FUTURES, D("100.1"), D("1"), "taker") == D("0.06006")  # 100.1 * 6 / 10_000
    assert fee_quote(FUTURES, D("100.6"), D("1"), "maker") == D("0.02012")  # 100.6 * 2 / 10_000
    assert fee_quote(BITGET_SPOT_STANDARD, D("64000"), D("0.0001"), "maker") == D("0.0064")  # 6.4 * 10 / 10_000
    assert fee_quote(None, D("100"), D("1"), "taker") == 0
    with pytest.raises(ValueError, match="liquidity"):
        fee_quote(FUTURES, D("1"), D("1"), "both")


@pytest.mark.parametrize("maker, taker, what", [(float("nan"), 1.0, "maker_bps"), (1.0, float("inf"), "taker_bps"),
                                                (1.0, -0.5, "taker_bps"), (20_000.0, 1.0, "maker_bps"),
                                                (True, 1.0, "maker_bps")])
def test_a_bad_schedule_is_refused_naming_the_rate(maker, taker, what):
    with pytest.raises(ValueError, match=what):
        FeeSchedule(maker_bps=maker, taker_bps=taker)


def test_a_bad_schedule_in_config_data_is_a_validation_error():
    assert msgspec.convert({"maker_bps": -1, "taker_bps": 6}, FeeSchedule) == FeeSchedule(maker_bps=-1.0,
                                                                                           taker_bps=6.0)
    with pytest.raises(msgspec.ValidationError, match="taker_bps"):
        msgspec.convert({"maker_bps": 1.0, "taker_bps": -1.0}, FeeSchedule)


def test_the_engine_refuses_fees_that_are_not_a_schedule():
    with pytest.raises(VenueError, match="FeeSchedule"):
        _engine({"maker_bps": 1.0, "taker_bps": 1.0})


# -- fills, cash, records ---------------------------------------------------------------------


def test_taker_and_maker_fills_carry_their_hand_computed_fees_and_the_cash_pays_them():
    eng = _engine(FUTURES)
    _taker_then_maker(eng)
    assert [(str(f.price), str(f.size), f.liquidity, f.fee) for f in eng.fills] == [
        ("100.1", "1", "taker", D("0.06006")),  # 100.1 * 1 * 6 bps
        ("100.2", "1.5", "taker", D("0.09018")),  # 150.3 * 6 bps
        ("100.6", "1", "maker", D("0.02012")),  # 100.6 * 2 bps
    ]
    assert eng.fees_paid() == D("0.17036") == eng.fees_paid("BTCUSDT") and eng.fees_paid("ETHUSDT") == 0
    assert eng.cash() == D("-149.97036")  # -(100.1 + 150.3) + 100.6 - 0.17036
    assert eng.position("BTCUSDT") == D("1.5")


def test_a_negative_maker_rate_is_a_rebate_that_adds_to_the_cash():
    eng = _engine(FeeSchedule(maker_bps=-1.0, taker_bps=5.0))
    eng.place(order(price="99.9", size="2"))
    eng.traded("BTCUSDT", [{"price": "99.9", "size": "2"}])
    assert eng.fills[0].fee == D("-0.01998")  # 199.8 * -1 bps
    assert eng.cash() == D("-199.78002")  # -199.8 + 0.01998
    assert eng.fills[0].to_json()["feeDetail"]["totalFee"] == "0.01998"  # Bitget's sign: received > 0


def test_the_fill_record_keeps_the_fee_and_a_restore_gives_back_the_same_account():
    records: list[dict] = []
    eng = _engine(FUTURES, records)
    _taker_then_maker(eng)
    assert [r.get("fee") for r in records if r["t"] == "fill"] == ["0.06006", "0.09018", "0.02012"]
    again = _engine(FUTURES)
    again.restore([{"t": "account", "account_id": "5", "created_ms": T0_MS}, *records])
    assert [f.fee for f in again.fills] == [f.fee for f in eng.fills]
    assert again.cash() == eng.cash() == D("-149.97036")


def test_an_older_fill_record_without_a_fee_restores_with_fee_zero():
    old = [{"t": "account", "account_id": "5", "created_ms": T0_MS},
           {"t": "order", "id": 1, "coid": "c1", "sym": "BTCUSDT", "side": "buy", "force": "gtc", "px": "100",
            "sz": "2", "ts": T0_MS, "seq": 1},
           {"t": "fill", "tid": 1, "id": 1, "px": "100", "sz": "2", "scope": "maker", "ts": T0_MS}]
    eng = _engine(FUTURES)  # a schedule now does not charge the old fill
    eng.restore(old)
    assert eng.fills[0].fee == 0 and eng.cash() == D("-200") and eng.fees_paid() == 0
    assert "feeDetail" not in eng.fills[0].to_json()


@pytest.mark.parametrize("fee", ["abc", "NaN", 5, ""])
def test_a_fill_record_with_a_bad_fee_fails_the_restore_naming_the_record(fee):
    recs = [{"t": "account", "account_id": "5", "created_ms": T0_MS},
            {"t": "order", "id": 1, "coid": "c1", "sym": "BTCUSDT", "side": "buy", "force": "gtc", "px": "100",
             "sz": "2", "ts": T0_MS, "seq": 1},
            {"t": "fill", "tid": 1, "id": 1, "px": "100", "sz": "2", "scope": "maker", "ts": T0_MS, "fee": fee}]
    with pytest.raises(VenueError, match="account record 2"):
        _engine(None).restore(recs)


def test_without_a_schedule_nothing_changes_no_fee_no_fee_field_no_fee_detail():
    records: list[dict] = []
    eng = _engine(None, records)
    _taker_then_maker(eng)
    assert [f.fee for f in eng.fills] == [0, 0, 0] and eng.fees_paid() == 0
    assert all("fee" not in r for r in records)
    assert all("feeDetail" not in f.to_json() for f in eng.fills)
    assert eng.cash() == D("-149.8")  # -(100.1 + 150.3) + 100.6


# -- the fills endpoint -----------------------------------------------------------------------


CREDS = Credentials("paper-key", "paper-secret", "paper-pass")


def _get(api: RestApi, path: str, query: str = "") -> dict:
    headers = {k.lower(): v for k, v in CREDS.headers(T0_MS, "GET", path, query, "").items()}
    status, raw = api.handle(HttpRequest("GET", path, query, headers, b"", True))
    assert status == 200
    return orjson.loads(raw)["data"]


def test_the_fills_endpoint_reports_bitgets_fee_detail_and_the_sender_still_parses_it():
    eng = _engine(FUTURES)
    _taker_then_maker(eng)
    api = RestApi(eng, CREDS, now_ms=lambda: T0_MS, mono_ns=lambda: 0)
    data = _get(api, FILLS, "symbol=BTCUSDT")
    assert data[0]["feeDetail"] == {"deduction": "no", "feeCoin": "USDT", "totalDeductionFee": "0",
                                    "totalFee": "-0.06006"}
    assert [f["tradeScope"] for f in data] == ["taker", "taker", "maker"]
    parsed = parse_fills(data)
    assert [(f.priceAvg, f.size) for f in parsed] == [(100.1, 1.0), (100.2, 1.5), (100.6, 1.0)]
    usdt = _get(api, ASSETS, "coin=USDT")
    assert usdt[0]["available"] == "-149.97036"


# -- the venue stage's params -----------------------------------------------------------------


def test_the_venue_takes_fees_and_the_queue_as_params_off_by_default():
    p = parse_params("venue", {})
    assert (p.maker_fee_bps, p.taker_fee_bps, p.queue_model, fee_schedule(p)) == (None, None, False, None)
    p = parse_params("venue", {"maker_fee_bps": 2, "taker_fee_bps": 6.0, "queue_model": True})
    assert fee_schedule(p) == FUTURES and p.queue_model is True
    with pytest.raises(VenueConfigError, match="go together"):
        parse_params("venue", {"taker_fee_bps": 6.0})
    with pytest.raises(VenueConfigError, match="taker_fee_bps"):
        parse_params("venue", {"maker_fee_bps": 2.0, "taker_fee_bps": -6.0})
