"""The dashboard's last denials (pipeline/runtime/ops/audit.py): OrderDenied events from the tail of
the risk gateway's audit log."""

from __future__ import annotations

import orjson

from pipeline.runtime.config import parse_config
from pipeline.runtime.ops.audit import TAIL_BYTES, DenialTail, audit_paths, denials_in


def _denied(i: int) -> bytes:
    return orjson.dumps({"ev": "OrderDenied", "ts_ns": i, "cmd": 0, "instrument_id": 1, "order_id": 99_000 + i,
                         "side": 1, "price": 100.0, "size": 0.1, "origin_seq": 5, "reason": 12,
                         "code": "MAX_POSITION", "detail": "over"})


def test_the_newest_denials_oldest_first_without_order_ids():
    lines = [b'{"ev":"Synced","ts_ns":1}', _denied(2), b'{"ev":"OrderApproved","ts_ns":3}', _denied(4), _denied(5)]
    got = denials_in(b"\n".join(lines), 2)
    assert [d["ts_ns"] for d in got] == [4, 5]
    assert all("order_id" not in d for d in got)
    assert got[0]["code"] == "MAX_POSITION"


def test_a_cut_first_line_and_a_torn_last_line_are_skipped():
    whole = _denied(7)
    tail = whole[20:] + b"\n" + whole + b"\n" + whole[:30]
    assert [d["ts_ns"] for d in denials_in(tail, 10)] == [7]


def test_the_tail_is_reread_only_when_the_file_changed(tmp_path):
    path = tmp_path / "risk_audit.jsonl"
    tail = DenialTail(path, n=3)
    assert tail.read() == []
    path.write_bytes(b"\n".join(_denied(i) for i in range(5)) + b"\n")
    assert [d["ts_ns"] for d in tail.read()] == [2, 3, 4]
    seen = tail.last
    assert tail.read() is seen, "unchanged file: nothing read again"
    with open(path, "ab") as f:
        f.write(_denied(9) + b"\n")
    assert [d["ts_ns"] for d in tail.read()] == [3, 4, 9]


def test_only_the_tail_of_a_long_log_is_read(tmp_path):
    path = tmp_path / "risk_audit.jsonl"
    filler = b'{"ev":"OrderApproved","ts_ns":0,"pad":"' + b"x" * 200 + b'"}\n'
    with open(path, "wb") as f:
        f.write(_denied(1) + b"\n")
        f.write(filler * (2 * TAIL_BYTES // len(filler)))
        f.write(_denied(2) + b"\n")
    assert [d["ts_ns"] for d in DenialTail(path).read()] == [2]


def test_audit_paths_are_the_risk_stages():
    cfg = parse_config('[supervisor]\nlog_dir = "L"\n[[processes]]\nname = "risk"\nmodule = "procs.risk:RiskAgent"\n'
                       '[[processes]]\nname = "risk2"\nmodule = "procs.risk:RiskAgent"\nparams = { audit_path = "A.jsonl" }\n'
                       '[[processes]]\nname = "x"\nmodule = "procs.sender:SenderAgent"\n')
    assert [str(p) for p in audit_paths(cfg)] == ["L/risk_audit.jsonl", "A.jsonl"]
