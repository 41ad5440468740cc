"""The report over the order sender's journal: a real journal written by ``pipeline.trading.journal``
(with a corrupt line, a repeated fill and a partial last line), read without disturbing it, turned into
fills with estimated fees, marks and the evaluation's metrics, checked against numbers computed by hand."""

from __future__ import annotations

import pytest

from pipeline.runtime.config import parse_config
from pipeline.runtime.errors import ConfigError
from pipeline.trading.evaluation.journal_report import (ParsedJournal, build_report, fills_from_records,
                                                        format_report, parse_journal, read_journal, risk_capital,
                                                        sender_journal_path)
from pipeline.trading.journal import Journal, encode_record
from tests.support.configtext import INSTRUMENTS, dirs, process, ring

SYMBOLS = {1: "BTCUSDT", 2: "ETHUSDT"}
MAKER, TAKER = 2.0, 6.0  # bps, distinct so the basis of each fee shows


def intent(oid, iid, side, tif, px, sz, ts_ms):
    sym = SYMBOLS[iid]
    return {"t": "intent", "oid": oid, "coid": f"c{oid}", "iid": iid, "sym": sym, "side": side, "tif": tif,
            "px": px, "sz": sz, "oseq": oid, "ts_ms": ts_ms}


def fill_rec(oid, tid, iid, side, px, sz, ts_ms):
    return {"t": "fill", "oid": oid, "tid": tid, "px": px, "sz": sz, "side": side, "iid": iid, "ts_ms": ts_ms}


RECORDS = [
    {"t": "account", "id": "paper-1"},
    intent(1, 1, 1, 2, 50_000.0, 0.0004, 1000),  # BTC buy, post-only: maker
    {"t": "ack", "oid": 1, "vid": "v1"},
    fill_rec(1, 11, 1, 1, 50_000.0, 0.0002, 2000),
    fill_rec(1, 12, 1, 1, 50_000.0, 0.0002, 3000),
    intent(2, 1, 2, 3, 50_100.0, 0.0003, 4000),  # BTC sell, IOC: taker
    fill_rec(2, 13, 1, 2, 50_100.0, 0.0003, 4000),
    fill_rec(2, 13, 1, 2, 50_100.0, 0.0003, 4000),  # the same venue trade again: skipped
    intent(3, 2, 2, 1, 3_000.0, 0.01, 5000),  # ETH sell, GTC: charged taker
    fill_rec(3, 14, 2, 2, 3_000.0, 0.01, 5000),
    intent(4, 2, 1, 2, 2_990.0, 0.01, 6000),  # ETH buy back, post-only: maker
    fill_rec(4, 15, 2, 1, 2_990.0, 0.01, 6000),
    {"t": "adjust", "iid": 1, "qty": 0.0001, "was": 0.0001},
]
# BTC: cash -10 - 10 + 15.03 = -4.97, long 0.0001 valued at its last fill 50,100 = 5.01 -> gross 0.04
#      fees 10 * 2bp + 10 * 2bp + 15.03 * 6bp = 0.002 + 0.002 + 0.009018 = 0.013018 -> net 0.026982
# ETH: cash 30 - 29.9 = 0.1, flat -> gross 0.1; fees 30 * 6bp + 29.9 * 2bp = 0.018 + 0.00598 = 0.02398
#      -> net 0.07602; one round trip, a win
BTC = dict(position=0.0001, gross=0.04, fees=0.013018, net=0.026982)
ETH = dict(position=0.0, gross=0.1, fees=0.02398, net=0.07602)


def write_journal(path, records=RECORDS, *, garbage=True, tail=True) -> Journal:
    """The records through ``Journal.append`` (as the sender writes them), a corrupt line among them and
    a partial last line; returns the journal, still open (a running sender)."""
    j = Journal(path)
    j.open()
    for i, rec in enumerate(records):
        j.append(rec, sync=False)
        if garbage and i == 3:
            with open(path, "ab") as f:  # a line whose CRC does not match
                f.write(b"00000000 " + encode_record({"t": "cancel", "oid": 1})[9:])
            j.bytes = path.stat().st_size
    if tail:
        with open(path, "ab") as f:
            f.write(encode_record(fill_rec(4, 99, 2, 1, 1.0, 1.0, 7000))[:20])  # a write in progress
    return j


def test_a_running_senders_journal_is_read_without_disturbing_it(tmp_path):
    path = tmp_path / "run" / "sender.journal"
    j = write_journal(path)
    before = path.read_bytes()
    parsed = parse_journal(read_journal(path))
    assert path.read_bytes() == before  # nothing cut, nothing written: the partial line is still there
    assert (len(parsed.records), parsed.corrupt, parsed.partial_tail) == (len(RECORDS), 1, 20)
    j.close()
    j = write_journal(tmp_path / "clean.journal", tail=False)
    assert len(parse_journal(read_journal(j.path)).records) == len(RECORDS)
    j.append({"t": "cancel", "oid": 2})  # the sender goes on appending after a read
    assert parse_journal(read_journal(j.path)).records[-1] == {"t": "cancel", "oid": 2}
    j.close()


def test_the_report_by_hand_per_instrument_and_in_total(tmp_path):
    path = tmp_path / "sender.journal"
    write_journal(path).close()
    rep = build_report(parse_journal(read_journal(path)), SYMBOLS, capital=1000.0, maker_fee_bps=MAKER,
                       taker_fee_bps=TAKER)
    assert (rep["records"], rep["corrupt_lines"], rep["partial_tail_bytes"]) == (len(RECORDS), 1, 20)
    assert (rep["fills"], rep["duplicate_fills"], rep["position_adjustments"], rep["rejected_fills"]) == (5, 1, 1, {})
    assert rep["fees_estimated"] is True
    assert rep["fee_basis"] == {"maker (post-only)": 3, "taker (GTC or unknown)": 1, "taker (IOC)": 1}
    assert list(rep["instruments"]) == ["BTCUSDT", "ETHUSDT"]
    for sym, want in (("BTCUSDT", BTC), ("ETHUSDT", ETH)):
        r = rep["instruments"][sym]
        got = (r["position"], r["gross_pnl"], r["fees"], r["net_pnl"])
        assert got == pytest.approx((want["position"], want["gross"], want["fees"], want["net"]), abs=1e-12), sym
    btc, eth = rep["instruments"]["BTCUSDT"], rep["instruments"]["ETHUSDT"]
    assert (btc["trades"], btc["round_trips"], btc["win_rate"]) == (3, 0, None)
    assert (eth["trades"], eth["round_trips"], eth["win_rate"]) == (2, 1, 1.0)
    assert btc["mark"] == "its last fill price, 50,100" and eth["position"] == 0.0
    # BTC's net: -0.002 (t=2 s), -0.004 (t=3 s), then 0.026982: the drawdown is 0.004 of 1000
    assert btc["max_drawdown"] == pytest.approx(0.004 / 1000)
    tot = rep["total"]
    assert (tot["gross_pnl"], tot["fees"], tot["net_pnl"]) == pytest.approx((0.14, 0.036998, 0.103002), abs=1e-12)
    assert (tot["trades"], tot["round_trips"], tot["win_rate"]) == (5, 1, 1.0)
    assert tot["turnover"] == pytest.approx(10 + 10 + 15.03 + 30 + 29.9)
    # total net: 0.026982 at t=4 s, then ETH's sell pays 0.018 of fee at t=5 s: 0.008982
    assert tot["max_drawdown"] == pytest.approx(0.018 / 1000.026982)


def test_a_given_mid_values_the_open_position(tmp_path):
    path = tmp_path / "sender.journal"
    write_journal(path, garbage=False, tail=False).close()
    rep = build_report(parse_journal(read_journal(path)), SYMBOLS, capital=1000.0, maker_fee_bps=MAKER,
                       taker_fee_bps=TAKER, mids={1: 50_200.0})
    btc = rep["instruments"]["BTCUSDT"]
    # long 0.0001 at the mid 50,200: 5.02 - 4.97 = 0.05 gross; fees unchanged
    assert (btc["gross_pnl"], btc["net_pnl"]) == pytest.approx((0.05, 0.05 - 0.013018), abs=1e-12)
    assert btc["mark"] == "the mid given, 50,200"
    assert rep["instruments"]["ETHUSDT"]["mark"] == "its last fill price, 2,990"
    with pytest.raises(ValueError, match="the mid given for BTCUSDT must be finite and > 0"):
        build_report(parse_journal(read_journal(path)), SYMBOLS, capital=1.0, mids={1: float("nan")})


def test_fill_records_that_cannot_be_fills_are_counted_by_reason():
    recs = [intent(1, 1, 1, 2, 100.0, 1.0, 1),
            {"t": "fill", "oid": 1, "tid": 1, "sz": 1.0},  # no price
            fill_rec(1, 2, 1, 1, 100.0, -1.0, 2),  # negative size
            fill_rec(7, 3, 1, 0, 100.0, 1.0, 3),  # no side, and no intent to take it from
            {"t": "fill", "oid": 1, "px": 100.0, "sz": 1.0},  # no trade id
            {"t": "fill", "oid": 1, "tid": 4, "px": 100.0, "sz": 1.0}]  # side, iid, time: from its intent
    jf = fills_from_records(recs, maker_fee_bps=MAKER, taker_fee_bps=TAKER)
    assert jf.rejected == {"missing or ill-typed field": 2, "no side or instrument": 1,
                           "price or size not finite and > 0": 1}
    (f,) = jf.fills
    assert (f.instrument_id, f.side, f.ts_ns, f.liquidity) == (1, 1, 1_000_000, "maker")
    assert f.fee == pytest.approx(100.0 * MAKER / 10_000)


def test_format_report_says_fees_are_estimated_and_what_marks_were_used(tmp_path):
    path = tmp_path / "sender.journal"
    write_journal(path).close()
    rep = build_report(parse_journal(read_journal(path)), SYMBOLS, capital=1000.0, maker_fee_bps=MAKER,
                       taker_fee_bps=TAKER)
    text = format_report(rep, source=str(path)).splitlines()
    assert text[0] == (f"journal {path}: {len(RECORDS)} records, 5 fills, 1 corrupt lines skipped, a partial last "
                       f"line (20 bytes: a write in progress) ignored, 1 repeated fills skipped")
    assert text[1] == ("fees: ESTIMATED (the journal records none): maker 2 bps, taker 6 bps by order type "
                       "(3 maker (post-only), 1 taker (GTC or unknown), 1 taker (IOC))")
    assert text[2:4] == ["marks: BTCUSDT at its last fill price, 50,100", "marks: ETHUSDT at its last fill price, 2,990"]
    assert text[4].startswith("positions from fills only: 1 adjust records")
    assert text[6].split() == ["instrument", "position", "net", "P&L", "gross", "fees", "trades", "trips", "win",
                               "rate", "max", "DD"]
    assert text[7].split() == ["BTCUSDT", "0.0001", "0.03", "0.04", "0.01", "3", "0", "-", "0.00%"]
    assert text[8].split() == ["ETHUSDT", "0", "0.08", "0.10", "0.02", "2", "1", "100.0%", "0.00%"]
    assert text[9].split() == ["total", "-", "0.10", "0.14", "0.04", "5", "1", "100.0%", "0.00%"]


def test_the_journal_and_the_capital_come_from_the_config(tmp_path):
    base = dirs(tmp_path) + ring("orders", payload=128) + ring("exec", payload=128) + INSTRUMENTS
    sender = process("sender", "procs.sender:SenderAgent", inputs=["orders"], outputs=["exec"])
    risk = process("risk", "procs.risk:RiskAgent", inputs=["exec"], outputs=["orders"])
    cfg = parse_config(base + sender + risk + "[processes.params.limits]\nmax_gross_notional = 1234.0\n")
    assert sender_journal_path(cfg) == tmp_path / "run" / "sender.journal"
    assert risk_capital(cfg) == 1234.0
    named = process("sender", "procs.sender:SenderAgent", inputs=["orders"], outputs=["exec"],
                    params=f'journal_path = "{tmp_path / "j.journal"}"')
    cfg = parse_config(base + named)
    assert sender_journal_path(cfg) == tmp_path / "j.journal" and risk_capital(cfg) == 50_000.0  # the default
    with pytest.raises(ConfigError, match="no process runs procs.sender:SenderAgent"):
        sender_journal_path(parse_config(base))


def test_a_position_closed_in_float_dust_is_flat():
    recs = [intent(1, 2, 1, 2, 3_000.0, 0.3, 1), fill_rec(1, 1, 2, 1, 3_000.0, 0.1, 1),
            fill_rec(1, 2, 2, 1, 3_000.0, 0.2, 2), intent(2, 2, 2, 2, 3_001.0, 0.3, 3),
            fill_rec(2, 3, 2, 2, 3_001.0, 0.3, 3)]  # 0.1 + 0.2 - 0.3 = 5.6e-17 in floats
    rep = build_report(ParsedJournal(records=recs, corrupt=0, partial_tail=0), SYMBOLS, capital=1.0,
                       maker_fee_bps=0.0, taker_fee_bps=0.0)
    eth = rep["instruments"]["ETHUSDT"]
    assert eth["position"] == 0.0 and eth["round_trips"] == 1 and eth["net_pnl"] == pytest.approx(0.3)


def test_the_fee_estimates_default_to_the_evaluations():
    from pipeline.venue.fees import DEFAULT_EVALUATION_FEES as EVAL
    recs = [intent(1, 1, 1, 2, 100.0, 1.0, 1), fill_rec(1, 1, 1, 1, 100.0, 1.0, 1),
            intent(2, 1, 2, 3, 100.0, 1.0, 2), fill_rec(2, 2, 1, 2, 100.0, 1.0, 2)]
    maker, taker = fills_from_records(recs).fills
    assert (maker.fee, taker.fee) == pytest.approx((100.0 * EVAL.maker_bps / 10_000, 100.0 * EVAL.taker_bps / 10_000))
    rep = build_report(ParsedJournal(records=recs, corrupt=0, partial_tail=0), SYMBOLS, capital=1.0)
    assert (rep["maker_fee_bps"], rep["taker_fee_bps"]) == (EVAL.maker_bps, EVAL.taker_bps) == (10.0, 10.0)
