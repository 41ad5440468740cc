"""The account routes of the paper venue's REST API over real HTTP on 127.0.0.1 (``http.client``),
signed: ``GET /api/v2/spot/account/info`` (the account id, which a reset venue changes),
``GET /api/v2/spot/account/assets`` (signed balances from the fills: base coins and USDT), and the
admin ``POST /api/v2/paper/adjust-position`` (refused unless ``allow_admin``; applied and persisted
when allowed). The engine logs to a real account file in a tmp dir; a "restart" stops the server,
closes the log and starts a new engine + server from the same file. The market starts paused."""

from __future__ import annotations

import http.client
from decimal import Decimal

import orjson
import pytest

from pipeline.trading.bitget.signing import Credentials, query_string
from pipeline.venue.account import AccountLog, parse_account_log
from pipeline.venue.rest_api import ACCOUNT_INFO, ADJUST_POSITION, ASSETS, FILLS, PLACE
from tests.support.venue import T0_MS, VenueStack, paper_credentials, venue_clock

D = Decimal


class AccountVenue(VenueStack):
    """A ``VenueStack`` whose engine is restored from the account log at ``path`` and logs to it; a
    signed keep-alive client. The venue's clock ``clock`` (ms, from ``ms``) is the test's."""

    def __init__(self, path, creds: Credentials, *, reset: bool = False, allow_admin: bool = False,
                 ms: int = T0_MS) -> None:
        self.clock = venue_clock(ms)
        self.account = AccountLog(path, clock_ms=self.clock)
        records = self.account.open(reset=reset)
        super().__init__(creds, self.clock, records=records, on_event=self.account.append, name="test-account-venue",
                         api_kwargs={"now_ms": self.clock, "rate_limit_per_s": 1000.0, "allow_admin": allow_admin})
        self.conn = http.client.HTTPConnection("127.0.0.1", self.rest.port, timeout=5)

    def close(self) -> None:
        self.conn.close()
        self.stop()
        self.account.close()

    def request(self, method: str, path: str, *, params: dict | None = None, body: dict | None = None,
                signed: bool = True) -> tuple[int, dict]:
        query = query_string(params)
        text = orjson.dumps(body).decode() if body is not None else ""
        headers = self.creds.headers(self.clock.now, method, path, query, text) if signed else {}
        self.conn.request(method, path + (f"?{query}" if query else ""), body=text.encode() if text else None,
                          headers=headers)
        resp = self.conn.getresponse()
        doc = orjson.loads(resp.read())
        assert set(doc) == {"code", "msg", "requestTime", "data"}
        assert (resp.status == 200) == (doc["code"] == "00000")
        return resp.status, doc

    def place(self, **fields) -> dict:
        body = {"symbol": "BTCUSDT", "orderType": "limit", **fields}
        status, doc = self.request("POST", PLACE, body=body)
        assert status == 200, doc
        return doc["data"]

    def levels(self, symbol: str, n: int = 3):
        return self.market.levels(symbol, n)


@pytest.fixture
def creds(tmp_path) -> Credentials:
    return paper_credentials(tmp_path / "paper.json")


@pytest.fixture
def venues():
    made: list[AccountVenue] = []

    def start(*args, **kwargs) -> AccountVenue:
        v = AccountVenue(*args, **kwargs)
        made.append(v)
        return v

    yield start
    for v in made:
        if v.thread.alive:
            v.close()


def trade(v: AccountVenue) -> None:
    """Buy through the BTC asks, then sell more than that through the bids (a paper short); sell
    through the ETH bids."""
    bids, asks = v.levels("BTCUSDT")
    bought = D(asks[0][1]) + D("0.0003")
    assert sum(D(s) for _, s in bids) > bought + D("0.0001")
    v.place(side="buy", force="ioc", price=asks[1][0], size=str(bought), clientOid="b1")
    v.place(side="sell", force="ioc", price=bids[-1][0], size=str(bought + D("0.0001")), clientOid="s1")
    eth_bids, _ = v.levels("ETHUSDT")
    v.place(symbol="ETHUSDT", side="sell", force="ioc", price=eth_bids[0][0], size="0.002", clientOid="e1")


def expected_balances(v: AccountVenue) -> dict[str, D]:
    """Balances recomputed by the test from the fills route: base = sum(signed size), USDT = -sum(signed
    price * size)."""
    _, doc = v.request("GET", FILLS, params={})
    out = {"BTC": D(0), "ETH": D(0), "USDT": D(0)}
    for f in doc["data"]:
        signed = D(f["size"]) if f["side"] == "buy" else -D(f["size"])
        out[f["symbol"].removesuffix("USDT")] += signed
        out["USDT"] -= signed * D(f["priceAvg"])
    return out


def test_account_info_is_the_account_id_across_a_restart_and_another_one_after_a_reset(tmp_path, creds, venues):
    path = tmp_path / "run" / "venue.account"
    v = venues(path, creds)
    status, doc = v.request("GET", ACCOUNT_INFO)
    assert status == 200 and doc["msg"] == "success"
    info = doc["data"]
    assert info == {"userId": v.engine.account_id, "inviterId": "", "channelCode": "", "channel": "",
                    "regisTime": str(T0_MS)}
    assert info["userId"].isdigit() and 0 < int(info["userId"]) < 2 ** 63
    assert v.request("GET", ACCOUNT_INFO, signed=False)[0] == 400  # signed like every route
    v.close()

    v2 = venues(path, creds, ms=T0_MS + 5_000)
    assert v2.request("GET", ACCOUNT_INFO)[1]["data"] == info  # a restart: the same account
    v2.close()
    v3 = venues(path, creds, reset=True, ms=T0_MS + 9_000)
    info3 = v3.request("GET", ACCOUNT_INFO)[1]["data"]
    assert info3["userId"] != info["userId"] and info3["regisTime"] == str(T0_MS + 9_000)


def test_assets_answer_the_signed_balances_of_the_fills(tmp_path, creds, venues):
    path = tmp_path / "venue.account"
    v = venues(path, creds)
    status, doc = v.request("GET", ASSETS)
    assert status == 200
    assert doc["data"] == [{"coin": c, "available": "0", "frozen": "0", "locked": "0", "limitAvailable": "0",
                            "uTime": str(T0_MS)} for c in ("BTC", "ETH", "USDT")]
    v.clock.advance_ms(250)
    trade(v)
    want = expected_balances(v)
    assert want["BTC"] == D("-0.0001") and want["ETH"] == D("-0.002") and want["USDT"] > 0  # net short: cash in
    rows = v.request("GET", ASSETS)[1]["data"]
    assert [r["coin"] for r in rows] == ["BTC", "ETH", "USDT"]
    for r in rows:
        assert set(r) == {"coin", "available", "frozen", "locked", "limitAvailable", "uTime"}
        assert all(isinstance(x, str) for x in r.values())
        assert D(r["available"]) == want[r["coin"]] and r["uTime"] == str(T0_MS + 250)
        assert (r["frozen"], r["locked"], r["limitAvailable"]) == ("0", "0", "0")
    assert rows[0]["available"] == "-0.0001" and rows[1]["available"] == "-0.002"  # as the venue formats amounts
    assert v.request("GET", ASSETS, params={"coin": "usdt"})[1]["data"] == [rows[2]]
    assert v.request("GET", ASSETS, params={"coin": "DOGE"})[1]["data"] == []
    v.close()
    v2 = venues(path, creds)  # the balances survive a restart
    assert v2.request("GET", ASSETS)[1]["data"] == rows


def test_admin_adjust_is_refused_unless_allowed(tmp_path, creds, venues):
    path = tmp_path / "venue.account"
    v = venues(path, creds)
    before = path.read_bytes()
    status, doc = v.request("POST", ADJUST_POSITION, body={"symbol": "BTCUSDT", "delta": "0.002"})
    assert (status, doc["code"], doc["data"]) == (403, "40014", None)
    assert v.engine.position("BTCUSDT") == 0 and path.read_bytes() == before
    assert v.request("POST", ADJUST_POSITION, body={"symbol": "BTCUSDT", "delta": "0.002"}, signed=False)[0] == 400


def test_admin_adjust_when_allowed_changes_the_position_only_and_persists(tmp_path, creds, venues):
    path = tmp_path / "venue.account"
    v = venues(path, creds, allow_admin=True)
    v.clock.advance_ms(40)
    status, doc = v.request("POST", ADJUST_POSITION, body={"symbol": "BTCUSDT", "delta": "0.002"})
    assert status == 200 and doc["data"] == {"symbol": "BTCUSDT", "position": "0.002"}
    status, doc = v.request("POST", ADJUST_POSITION, body={"symbol": "BTCUSDT", "delta": "-0.0035"})
    assert doc["data"] == {"symbol": "BTCUSDT", "position": "-0.0015"}
    for body, code in (({"symbol": "BTCUSDT", "delta": 0.1}, "40020"), ({"symbol": "BTCUSDT", "delta": "0"}, "40020"),
                       ({"symbol": "NOPEUSDT", "delta": "1"}, "40034"), ({"delta": "1"}, "40019")):
        assert v.request("POST", ADJUST_POSITION, body=body)[1]["code"] == code
    rows = {r["coin"]: r for r in v.request("GET", ASSETS)[1]["data"]}
    assert rows["BTC"]["available"] == "-0.0015" and rows["BTC"]["uTime"] == str(T0_MS + 40)
    assert rows["USDT"]["available"] == "0" and rows["USDT"]["uTime"] == str(T0_MS)  # no cash moved
    assert v.request("GET", FILLS, params={})[1]["data"] == []  # no fill, no order
    assert [e["delta"] for e in v.log.named("paper_position_adjusted")] == ["0.002", "-0.0035"]
    records, _ = parse_account_log(path.read_bytes())
    assert [(r["t"], r.get("delta")) for r in records] == [("account", None), ("adjust", "0.002"),
                                                            ("adjust", "-0.0035")]
    v.close()
    v2 = venues(path, creds)  # persisted (and the restarted venue need not allow admin to keep it)
    assert {r["coin"]: r["available"] for r in v2.request("GET", ASSETS)[1]["data"]}["BTC"] == "-0.0015"
