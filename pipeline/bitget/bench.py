"""Decode and book-update timings on real Bitget frames: ``python -m pipeline.bitget.bench [CAPTURE]``.

The real capture (``BITGET.ws.1.0``, API v1 ``books``) holds no ``books15`` frames, so ``books15``
frames are made from it: the top 15 levels a side of every real depth push with at least 15 a side,
with their original strings, in the v2 ``books15`` envelope (a ``seq``, ``checksum`` 0, ``ts``).
Reported, per decoder (orjson, msgspec): the JSON parse alone, ``Decoder.decode`` (parse plus
validation), and decode + ``BitgetBooks.apply`` + BOOK payload fill; then the same for the
capture's ``books`` stream (snapshot + updates, checksum verified on every push). Each figure is
the per-frame time over several passes (p50 and p99 of single-frame timings, in µs).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import msgspec
import numpy as np
import orjson

from pipeline.bitget.book import Applied, BitgetBooks
from pipeline.bitget.capture import RECV, read_capture
from pipeline.bitget.protocol import _Envelope, make_decoder
from pipeline.messages import BOOK_DTYPE

DEFAULT_CAPTURE = Path(__file__).resolve().parents[3] / "shared" / "data" / "bitget" / "BITGET.ws.1.0"


def books15_frames(texts: list[str]) -> list[bytes]:
    """v2 ``books15`` frames built from the v1 ``books`` pushes of a capture (see module doc)."""
    frames = []
    seq = 1000
    for text in texts:
        d = orjson.loads(text)
        arg = d.get("arg") or {}
        if arg.get("channel") != "books" or "data" not in d:
            continue
        e = d["data"][0]
        if len(e["bids"]) < 15 or len(e["asks"]) < 15:
            continue
        seq += 7
        frames.append(orjson.dumps({
            "action": "snapshot",
            "arg": {"instType": "SPOT", "channel": "books15", "instId": arg["instId"]},
            "data": [{"asks": e["asks"][:15], "bids": e["bids"][:15], "checksum": 0, "seq": seq, "ts": e["ts"]}],
            "ts": int(e["ts"]) + 3,
        }))
    return frames


def _timings_us(fn, frames, passes: int) -> list[float]:
    clock = time.perf_counter_ns
    out = []
    for _ in range(passes):
        for f in frames:
            t0 = clock()
            fn(f)
            out.append((clock() - t0) / 1000.0)
    return out


def _summary(ts: list[float]) -> str:
    ts = sorted(ts)
    p50 = ts[len(ts) // 2]
    p99 = ts[min(len(ts) - 1, int(len(ts) * 0.99))]
    return f"p50 {p50:6.2f}  p99 {p99:6.2f}  mean {statistics.fmean(ts):6.2f}"


def run(capture: Path, passes: int = 30) -> dict:
    texts = [ln.text for ln in read_capture(capture) if ln.direction == RECV]
    frames = books15_frames(texts)
    sizes = sorted(map(len, frames))
    inst_ids = sorted({orjson.loads(f)["arg"]["instId"] for f in frames})
    instruments = {s: i for i, s in enumerate(inst_ids)}
    out = np.zeros(1, BOOK_DTYPE)
    results = {"frames": len(frames), "bytes_min": sizes[0], "bytes_p50": sizes[len(sizes) // 2], "bytes_max": sizes[-1]}
    print(f"books15 frames: {len(frames)}, bytes min {sizes[0]} p50 {sizes[len(sizes) // 2]} max {sizes[-1]}")

    typed = msgspec.json.Decoder(_Envelope)
    results["parse_orjson"] = _timings_us(orjson.loads, frames, passes)
    results["parse_msgspec"] = _timings_us(typed.decode, frames, passes)
    for name in ("orjson", "msgspec"):
        dec = make_decoder(name)
        results[f"decode_{name}"] = _timings_us(dec.decode, frames, passes)
        # seq must not go backwards between passes for books15: a fresh BitgetBooks per pass
        ts = []
        for _ in range(passes):
            books = BitgetBooks(instruments)
            ts += _timings_us(lambda f, dec=dec, books=books: books.apply(dec.decode(f), out), frames, 1)
            assert books.applied[Applied.EMITTED] == len(frames), books.applied
        results[f"full_{name}"] = ts

    book_texts = [t for t in texts if '"channel":"books"' in t and '"action"' in t]
    all_ids = sorted({orjson.loads(t)["arg"]["instId"] for t in book_texts})
    for name in ("orjson", "msgspec"):
        ts = []
        for _ in range(max(1, passes // 3)):
            dec = make_decoder(name)
            books = BitgetBooks({s: i for i, s in enumerate(all_ids)})
            ts += _timings_us(lambda f, dec=dec, books=books: books.apply(dec.decode(f), out), book_texts, 1)
            assert books.checksums_verified == len(book_texts), books.checksums_verified
        results[f"books_{name}"] = ts

    for key in ("parse_orjson", "parse_msgspec", "decode_orjson", "decode_msgspec", "full_orjson", "full_msgspec"):
        print(f"books15 {key:16s} µs/frame: {_summary(results[key])}")
    print(f"books (capture, {len(book_texts)} pushes, avg {sum(map(len, book_texts)) // len(book_texts)} B):")
    for key in ("books_orjson", "books_msgspec"):
        print(f"        {key:16s} µs/frame: {_summary(results[key])}")
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("capture", nargs="?", type=Path, default=DEFAULT_CAPTURE)
    ap.add_argument("--passes", type=int, default=30)
    args = ap.parse_args(argv)
    if not args.capture.exists():
        print(f"capture not found: {args.capture}", file=sys.stderr)
        return 2
    run(args.capture, args.passes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
