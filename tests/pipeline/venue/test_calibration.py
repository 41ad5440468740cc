"""Measuring a market: the statistics on a hand-made book and trade sequence with known answers; bad
capture input counted, never raised; the calibrated synthetic market within its stated tolerances of
the shared capture's figures (on a seed it was not tuned on); the report and its CLI."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from pipeline.venue import calibration as cal
from pipeline.venue.synthetic import CALIBRATED, SyntheticParams

T0_MS = 1_700_000_000_000


def _push(channel: str, action: str, data: list, ts_ms: int) -> str:
    frame = {"action": action, "arg": {"instType": "SPOT", "channel": channel, "instId": "TESTUSDT"},
             "data": data, "ts": ts_ms}
    return f"{ts_ms / 1000.0}: {json.dumps(frame, separators=(',', ':'))}\n"


def _book(ts_ms: int, bids: list, asks: list) -> str:
    """A books snapshot (checksum 0: none to verify) with the given [price, size] string pairs."""
    return _push("books", "snapshot", [{"asks": asks, "bids": bids, "checksum": 0, "ts": str(ts_ms)}], ts_ms)


def _trade(ts_ms: int, price: str, size: str, side: str = "buy") -> str:
    return _push("trade", "update", [{"ts": str(ts_ms), "price": price, "size": size, "side": side,
                                      "tradeId": str(ts_ms)}], ts_ms)


# A hand-made market, tick 0.1 and lot 0.01 (the strings' decimals): five books 500 ms apart, the
# spread always 2 ticks, the mid 100.1, 100.1, 100.1, 100.2, 100.4; the top-5 imbalance of the first
# three books -0.5, 0, +0.5; three trades of 1, 2 and 4 (200 lots at the median).
MIDS = (100.1, 100.1, 100.1, 100.2, 100.4)
BID_SIZES = ((1.0, 1.0), (2.0, 2.0), (3.0, 3.0), (2.0, 2.0), (2.0, 2.0))  # two levels a side
ASK_SIZES = ((3.0, 3.0), (2.0, 2.0), (1.0, 1.0), (2.0, 2.0), (2.0, 2.0))


def _hand_made_lines() -> list[str]:
    lines = ["wss://example.invalid/v2/ws/public <-> 1700000000.0\n"]
    for k, (mid, bs, az) in enumerate(zip(MIDS, BID_SIZES, ASK_SIZES)):
        bid, ask = round(mid - 0.1, 1), round(mid + 0.1, 1)
        lines.append(_book(T0_MS + 500 * k, [[f"{bid:.1f}", f"{bs[0]:.2f}"], [f"{bid - 0.1:.1f}", f"{bs[1]:.2f}"]],
                           [[f"{ask:.1f}", f"{az[0]:.2f}"], [f"{ask + 0.1:.1f}", f"{az[1]:.2f}"]]))
    lines += [_trade(T0_MS + 100, "100.2", "1.00"), _trade(T0_MS + 700, "100.2", "4.00", "sell"),
              _trade(T0_MS + 1900, "100.3", "2.00")]
    return lines


def test_the_statistics_of_a_hand_made_market_are_the_known_answers():
    reading = cal.read_lines(_hand_made_lines())
    rec = reading.instruments["TESTUSDT"]
    assert (rec.tick_size, rec.lot_size) == (pytest.approx(0.1), pytest.approx(0.01))
    m = cal.measure(rec)
    assert m["books"] == 5 and m["trades"] == 3
    assert m["update_ms"] == pytest.approx(500.0)
    assert m["spread_ticks"] == pytest.approx(2.0)
    assert m["spread_bps"] == pytest.approx(0.2 / 100.1 * 1e4)  # the median book's mid is 100.1
    # 1 s windows from the first book: [0, 1000] moves 0, [1000, 2000] moves 0.3 (3 ticks)
    assert m["windows_1000"] == 2 and m["vol_ticks_1000"] == pytest.approx(math.sqrt((0 + 9) / 2))
    assert m["vol_bps_1000"] == pytest.approx(math.sqrt((0.3 / 100.1 * 1e4) ** 2 / 2))
    # 100 ms windows: 20 of them; the mid moves in two (0.1 at 1500 ms, 0.2 at 2000 ms)
    assert m["windows_100"] == 20 and m["vol_ticks_100"] == pytest.approx(math.sqrt((1 + 4) / 20))
    assert m["windows_5000"] == 0 and m["vol_bps_5000"] is None  # the books span 2 s
    # touch a side: books' means 2, 2, 2, 2, 2 -> 2.00 = 200 lots; top 5 a side: 4 each book -> 400 lots
    assert m["touch_lots"] == pytest.approx(200.0) and m["depth5_lots"] == pytest.approx(400.0)
    # in quote, the books' touches are 200.3, 200.2, 200.1, 200.4, 200.8 (e.g. (1 x 100.0 + 3 x 100.2) / 2)
    assert m["touch_quote"] == pytest.approx(200.3)
    assert m["trades_per_s"] == pytest.approx(3 / 2.0)
    assert m["trade_lots_p50"] == pytest.approx(200.0) and m["trade_lots_p90"] == pytest.approx(360.0)
    assert m["trade_quote_p50"] == pytest.approx(200.6)  # 100.2 x 1, 100.2 x 4, 100.3 x 2: 100.2, 400.8, 200.6
    # imbalance -0.5, 0, +0.5 against the next second's moves 0, 0.1, 0.3: a perfect rank order
    assert m["ic_rows"] == 3 and m["ic_1s"] == pytest.approx(1.0)


def test_bad_capture_input_is_counted_never_raised(tmp_path):
    lines = _hand_made_lines() + [
        "not a capture line at all\n",
        "1700000003.0: {not json\n",
        '1700000003.1: {"action":"update","arg":{"instType":"SPOT","channel":"books","instId":"TESTUSDT"},'
        '"data":[{"asks":[["x","1"]],"bids":[],"checksum":0,"ts":"1"}]}\n',  # a price that is no number
        _push("books", "update", [{"asks": [["5.0", "1.00"]], "bids": [], "checksum": 0, "ts": str(T0_MS)}],
              T0_MS).replace("TESTUSDT", "NEWUSDT"),  # an update before any snapshot
        _book(T0_MS + 3000, [], [["100.5", "1.00"]]),  # one-sided
        _book(T0_MS + 3500, [["100.5", "1.00"]], [["100.4", "1.00"]]),  # crossed
    ]
    path = tmp_path / "bad.capture"
    path.write_bytes("".join(lines).encode() + b"\xff\xfe garbage bytes\n")
    reading = cal.read_capture(path)
    c = reading.counts
    assert c["bad_lines"] == 2  # the line with no time prefix and the undecodable bytes
    assert sum(v for k, v in c.items() if k.startswith("frames_rejected_")) >= 2
    assert c["books_refused_awaiting_snapshot"] == 1
    assert c["books_one_sided"] == 1 and c["books_crossed_or_zero"] == 1
    assert cal.measure(reading.instruments["TESTUSDT"])["books"] == 5  # the good books are all still there
    assert cal.measure(reading.instruments["NEWUSDT"])["spread_bps"] is None  # nothing to measure: None


def test_an_unreadable_capture_is_an_error_naming_it(tmp_path):
    with pytest.raises(cal.CalibrationError, match="missing.capture"):
        cal.read_capture(tmp_path / "missing.capture")


def test_the_shared_capture_is_read_with_every_checksum_verified(capture_path):
    reading = cal.read_capture(capture_path)
    assert len(reading.instruments) == 8 and reading.counts["checksums_verified"] == 443
    assert reading.counts["bad_lines"] == 0
    target = cal.targets(reading)
    assert target["instruments"] == 8
    assert 500 < target["update_ms"] < 600  # v1 pushes every ~550 ms


def test_the_synthetic_market_is_measured_through_the_venues_frames():
    per, reading = cal.measure_synthetic(CALIBRATED, seed=5, steps=300, warmup_steps=20)
    assert sorted(per) == ["BTCUSDT", "ETHUSDT"]
    assert reading.counts["bad_lines"] == 0 and reading.counts["checksums_verified"] >= 300
    assert per["BTCUSDT"]["books"] == 300 and per["BTCUSDT"]["update_ms"] == pytest.approx(CALIBRATED.step_ms)


# Fixed before the calibrated market was measured on this seed (it was tuned on seed 1): every compared
# statistic within calibration.TOLERANCE (x2; the update pace x1.25) of the capture's median over its
# instruments, and the planted IC within calibration.IC_BAND.
@pytest.mark.slow
def test_the_calibrated_market_is_within_its_tolerances_of_the_capture(capture_path):
    target = cal.targets(cal.read_capture(capture_path))
    per, _ = cal.measure_synthetic(CALIBRATED, seed=20261201, steps=4_000)
    rows = cal.compare(target, cal.pooled(per, 1))
    assert {k for k, *_ in rows} == {k for k, _l, compared in cal.STATS if compared}
    bad = [(k, t, s) for k, t, s, ok in rows if not ok]
    assert not bad, f"out of tolerance (statistic, capture, synthetic): {bad}"


def test_the_default_market_is_not_the_calibrated_one(capture_path):
    """The check above has teeth: the older default market fails it (its spread is a tick wide)."""
    target = cal.targets(cal.read_capture(capture_path))
    per, _ = cal.measure_synthetic(dataclasses.replace(SyntheticParams(), step_ms=550), seed=3, steps=300)
    failed = {k for k, _t, _s, ok in cal.compare(target, cal.pooled(per, 1)) if not ok}
    assert {"spread_bps", "trades_per_s"} <= failed


def test_compare_applies_the_stated_limits():
    target = {k: 10.0 for k, _l, _c in cal.STATS}
    inside = {**target, "spread_bps": 19.9, "update_ms": 12.4, "ic_1s": cal.IC_BAND[0]}
    assert all(ok for *_r, ok in cal.compare(target, inside))
    outside = {**target, "spread_bps": 20.1, "update_ms": 12.6, "ic_1s": cal.IC_BAND[1] + 0.01}
    assert {k for k, _t, _s, ok in cal.compare(target, outside) if not ok} == {"spread_bps", "update_ms", "ic_1s"}
    assert all(ok is None for k, _t, _s, ok in cal.compare({}, {}) if k != "ic_1s")


def test_every_calibrated_value_has_its_source():
    changed = {f.name for f in dataclasses.fields(SyntheticParams)
               if getattr(CALIBRATED, f.name) != getattr(SyntheticParams(), f.name)}
    assert changed <= set(cal.PARAM_SOURCES), f"no source for {sorted(changed - set(cal.PARAM_SOURCES))}"
    assert set(cal.PARAM_SOURCES) <= {f.name for f in dataclasses.fields(SyntheticParams)}


def test_the_cli_writes_the_report_and_says_whether_it_passed(tmp_path, capture_path):
    out = tmp_path / "report.md"
    rc = cal.main(["--capture", str(capture_path), "--steps", "400", "--seed", "2", "--out", str(out)])
    text = out.read_text()
    assert rc in (0, 1) and ("every compared statistic within its limit" in text) == (rc == 0)
    assert "| spread, median (bps) |" in text and "## Where each parameter comes from" in text
    assert "| touch_cancel_prob | 0.6 |" in text and "BITGET_SPOT_STANDARD" in text and "mafi.12413" in text
    assert cal.main(["--capture", str(tmp_path / "nope"), "--steps", "10"]) == 2
