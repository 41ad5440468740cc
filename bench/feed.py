"""Feed decoder benchmark: ``python -m bench.feed`` (``make bench-feed``).

Measured in one run, one process, on this machine:

- Bitget ``books15`` (v2 envelope, built from the real capture's depth pushes with their original
  strings, or from the synthetic venue model when the capture is absent): per frame, decode +
  book update + the 504-byte BOOK payload written into a real shared-memory ring slot
  (``try_claim`` / ``commit_claim``), p50 / p99, for both decoders (msgspec, orjson); beside it the
  naive baseline such systems are usually written as: ``orjson.loads`` then a Python loop over the
  levels building a float feature array; and the ratio.
- ITCH 5.0 on a synthetic session: whole-buffer vectorized decode msg/s vs a plain per-message
  ``struct.unpack_from`` loop; streaming decode + Level-3 book update ns per message, p50 / p99.

Writes ``bench/results/<UTC timestamp>-feed/results.json`` and ``report.md``; prints the table.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import orjson

from bench import report

from pipeline.bitget.book import Applied, BitgetBooks
from pipeline.bitget.capture import RECV, read_capture
from pipeline.bitget.protocol import make_decoder
from pipeline.itch import synth
from pipeline.itch.book import L3Book
from pipeline.itch.framing import scan_frames
from pipeline.itch.vectorized import decode_baseline, decode_buffer, measure_msgs_per_s
from pipeline.messages import BOOK_DTYPE, Kind
from pipeline.venue.synthetic import SyntheticMarket
from ringbuf import Ring, slot_size_for

REPO = Path(__file__).resolve().parents[1]
CAPTURE = REPO.parent / "shared" / "data" / "bitget" / "BITGET.ws.1.0"
TARGETS = {"bitget_p50_us": 6.0, "itch_vectorized_msg_s": 3e6, "itch_stream_p50_us": 2.0}


def books15_from_capture(path: Path) -> list[bytes]:
    """v2 ``books15`` frames from the v1 ``books`` pushes of a capture that have 15 levels a side."""
    frames, seq = [], 1000
    for line in read_capture(path):
        if line.direction != RECV or '"books"' not in line.text:
            continue
        d = orjson.loads(line.text)
        arg = d.get("arg") or {}
        if arg.get("channel") != "books" or not d.get("data"):
            continue
        e = d["data"][0]
        if len(e["bids"]) < 15 or len(e["asks"]) < 15:
            continue
        seq += 7
        frames.append(_books15(arg["instId"], e["bids"][:15], e["asks"][:15], seq, int(e["ts"])))
    return frames


def books15_synthetic(n: int = 400) -> list[bytes]:
    """The same frames from the paper venue's synthetic model (when the capture is not there)."""
    m = SyntheticMarket(11, tick_size=0.1, lot_size=0.0001)
    frames = []
    for i in range(n):
        m.step()
        bids, asks = m.levels(15)
        frames.append(_books15("BTCUSDT", bids, asks, 1000 + i, 1_700_000_000_000 + 20 * i))
    return frames


def _books15(inst: str, bids, asks, seq: int, ts_ms: int) -> bytes:
    return orjson.dumps({"action": "snapshot", "arg": {"instType": "SPOT", "channel": "books15", "instId": inst},
                         "data": [{"asks": asks, "bids": bids, "checksum": 0, "seq": seq, "ts": str(ts_ms)}],
                         "ts": ts_ms + 3})


def naive_baseline(frame: bytes) -> np.ndarray:
    """How such feeds are usually written: parse, then loop over the levels in Python."""
    d = orjson.loads(frame)
    e = d["data"][0]
    feats = []
    for px, sz in e["bids"]:
        feats.append(float(px))
        feats.append(float(sz))
    for px, sz in e["asks"]:
        feats.append(float(px))
        feats.append(float(sz))
    return np.array(feats, dtype=np.float64)


def bench_bitget(frames: list[bytes], passes: int) -> dict:
    inst = sorted({orjson.loads(f)["arg"]["instId"] for f in frames})
    ids = {s: i + 1 for i, s in enumerate(inst)}
    name = f"bench-feed-{os.getpid()}"
    ring = Ring.create(name, slot_size=slot_size_for(BOOK_DTYPE.itemsize), capacity=1024, full_policy="drop", replace=True)
    out = np.zeros(1, BOOK_DTYPE)
    out_bytes = out.view(np.uint8)
    results = {"frames": len(frames), "frame_bytes_p50": int(np.median([len(f) for f in frames]))}
    try:
        w, r = ring.writer(), ring.reader()
        clock = time.perf_counter_ns
        for dec_name in ("msgspec", "orjson"):
            ns = []
            for _ in range(passes):
                dec = make_decoder(dec_name)
                books = BitgetBooks(ids)
                for f in frames:
                    t0 = clock()
                    if books.apply(dec.decode(f), out) is Applied.EMITTED:
                        w.try_write(Kind.BOOK, out_bytes, t0)
                    ns.append(clock() - t0)
                    if w.position % 512 == 0:
                        r.poll(lambda *a: None, 1024)
                r.poll(lambda *a: None, 1024)
            results[f"ours_{dec_name}"] = report.percentiles_us(ns)
        ns = []
        for _ in range(passes):
            for f in frames:
                t0 = clock()
                naive_baseline(f)
                ns.append(clock() - t0)
        results["naive"] = report.percentiles_us(ns)
        results["books_written"] = ring.stats().written
    finally:
        ring.close()
        Ring.unlink(name)
    return results


def bench_itch(n_events: int) -> dict:
    buf = synth.generate_binaryfile(5, n_events)
    scan = scan_frames(buf)
    n = len(scan.offsets)
    res = {"messages": n, "bytes": len(buf)}
    res["vectorized_msg_s"] = measure_msgs_per_s(decode_buffer, buf, n)
    res["baseline_msg_s"] = measure_msgs_per_s(decode_baseline, buf, n)
    book = L3Book({s: i + 1 for i, s in enumerate(synth.DEFAULT_SYMBOLS)})
    payload = bytearray(BOOK_DTYPE.itemsize)
    clock = time.perf_counter_ns
    ns = []
    for off in scan.offsets:
        ln = (buf[off - 2] << 8) | buf[off - 1]
        t0 = clock()
        iid = book.apply_raw(buf, off, ln)
        ns.append(clock() - t0)
        if iid > 0 and len(ns) % 64 == 0:
            book.write_payload(iid, payload)
    res["stream_book"] = report.percentiles_us(ns)
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small counts (smoke run)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    out_dir, machine = report.start("feed", args.out)
    source = "real capture" if CAPTURE.exists() else "synthetic model"
    frames = books15_from_capture(CAPTURE) if CAPTURE.exists() else books15_synthetic()
    bg = bench_bitget(frames, 2 if args.quick else 20)
    it = bench_itch(20_000 if args.quick else 300_000)
    results = {"machine": machine, "bitget": bg, "bitget_source": source, "itch": it, "targets": TARGETS}
    ours = bg["ours_msgspec"]["p50_us"]
    rows = [
        ("Bitget books15: decode + book + BOOK into ring (msgspec)", f"{ours:.2f} µs", f"{bg['ours_msgspec']['p99_us']:.2f} µs",
         f"target p50 <= {TARGETS['bitget_p50_us']} µs: {'MET' if ours <= TARGETS['bitget_p50_us'] else 'MISSED'}"),
        ("Bitget books15: the same with orjson", f"{bg['ours_orjson']['p50_us']:.2f} µs", f"{bg['ours_orjson']['p99_us']:.2f} µs", ""),
        ("Bitget books15: naive orjson + Python loop over levels", f"{bg['naive']['p50_us']:.2f} µs", f"{bg['naive']['p99_us']:.2f} µs",
         f"ours is {bg['naive']['p50_us'] / ours:.2f}x the naive speed (p50)"),
        ("ITCH whole-buffer decode, vectorized", f"{it['vectorized_msg_s'] / 1e6:.2f} M msg/s", "",
         f"target >= 3 M msg/s: {'MET' if it['vectorized_msg_s'] >= TARGETS['itch_vectorized_msg_s'] else 'MISSED'}"),
        ("ITCH per-message struct.unpack loop (baseline)", f"{it['baseline_msg_s'] / 1e6:.2f} M msg/s", "",
         f"vectorized is {it['vectorized_msg_s'] / it['baseline_msg_s']:.2f}x"),
        ("ITCH streaming decode + L3 book update", f"{it['stream_book']['p50_us']:.2f} µs", f"{it['stream_book']['p99_us']:.2f} µs",
         f"target p50 <= 2 µs: {'MET' if it['stream_book']['p50_us'] <= TARGETS['itch_stream_p50_us'] else 'MISSED'}"),
    ]
    md = [f"# Feed benchmark {machine['date']}", "",
          report.machine_line(machine),
          f"Bitget frames: {bg['frames']} books15 frames from the {source}, p50 {bg['frame_bytes_p50']} bytes; "
          f"ITCH: synthetic session of {it['messages']} messages.", "",
          "| measured | p50 / rate | p99 | verdict |", "|---|---|---|---|"]
    md += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows]
    report.write(out_dir, results, md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
