"""Replay of the real shared capture (Bitget API v1 spot ``books`` + ``trade``, 686 lines) through
the decoder and the books, checked against a deliberately simple reference rebuild written here.

The reference shares no code with the package: it reads the lines with ``str.split``, the JSON with
the stdlib, keys levels by ``Decimal``, and computes each checksum with ``zlib.crc32`` from a plain
string join. Every non-zero checksum in the file must be verified by the books (and match the
reference), every BOOK payload must equal the reference's top 15, and the final books must equal
the reference books string for string.
"""

from __future__ import annotations

import hashlib
import json
import re
import zlib
from decimal import Decimal

import numpy as np

from pipeline.trading.bitget.book import Applied, BitgetBooks
from pipeline.trading.bitget.protocol import FrameKind, Reject, make_decoder
from pipeline.trading.messages import BOOK_DTYPE, BOOK_FLAG_SNAPSHOT

CAPTURE_SHA256 = "bcdd126a0b380b86f9c75379e98e683d020c0b79460e35d610ecabc6e22faac0"  # shared README
README_NONZERO_CHECKSUMS = 443


def received_texts(path) -> list[str]:
    """Received frames: lines of the form ``T: TEXT`` (the others start with the URL)."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("wss://"):
            out.append(line.split(": ", 1)[1])
    return out


class ReferenceBook:
    """Price (Decimal) -> (price text, size text) a side; snapshot resets, size 0 deletes."""

    def __init__(self) -> None:
        self.bids: dict[Decimal, tuple[str, str]] = {}
        self.asks: dict[Decimal, tuple[str, str]] = {}

    def apply(self, entry: dict, snapshot: bool) -> None:
        if snapshot:
            self.bids, self.asks = {}, {}
        for side, levels in ((self.bids, entry["bids"]), (self.asks, entry["asks"])):
            for price, size in levels:
                if Decimal(size) == 0:
                    side.pop(Decimal(price), None)
                else:
                    side[Decimal(price)] = (price, size)

    def sorted_bids(self) -> list[tuple[str, str]]:
        return [self.bids[p] for p in sorted(self.bids, reverse=True)]

    def sorted_asks(self) -> list[tuple[str, str]]:
        return [self.asks[p] for p in sorted(self.asks)]

    def checksum(self) -> int:
        bids, asks = self.sorted_bids()[:25], self.sorted_asks()[:25]
        parts = []
        for i in range(max(len(bids), len(asks))):
            if i < len(bids):
                parts.append(bids[i][0] + ":" + bids[i][1])
            if i < len(asks):
                parts.append(asks[i][0] + ":" + asks[i][1])
        crc = zlib.crc32(":".join(parts).encode())
        return crc - 2**32 if crc >= 2**31 else crc


def test_every_nonzero_checksum_is_verified_and_the_books_match_a_reference(capture_path, decoder):
    text = capture_path.read_text(encoding="utf-8")
    independent_count = sum(1 for v in re.findall(r'"checksum":(-?\d+)', text) if int(v) != 0)
    if hashlib.sha256(text.encode()).hexdigest() == CAPTURE_SHA256:
        assert independent_count == README_NONZERO_CHECKSUMS  # the figure of the shared README

    frames = received_texts(capture_path)
    inst_ids = sorted({json.loads(f)["arg"]["instId"] for f in frames if '"channel":"books"' in f})
    instruments = {inst_id: 100 + i for i, inst_id in enumerate(inst_ids)}
    books = BitgetBooks(instruments)
    out = np.zeros(1, BOOK_DTYPE)
    reference: dict[str, ReferenceBook] = {}
    reference_matches = pushes = trades_ref = trades_out = 0

    for frame in frames:
        d = decoder.decode(frame)
        obj = json.loads(frame)
        channel = obj.get("arg", {}).get("channel")
        if "action" in obj and channel == "books":
            pushes += 1
            assert d.kind in (FrameKind.SNAPSHOT, FrameKind.UPDATE) and d.reason == Reject.OK, d.detail
            ref = reference.setdefault(obj["arg"]["instId"], ReferenceBook())
            entry = obj["data"][0]
            ref.apply(entry, obj["action"] == "snapshot")
            if entry["checksum"] != 0:
                assert ref.checksum() == entry["checksum"]
                reference_matches += 1
            assert books.apply(d, out) == Applied.EMITTED
            r = out[0]
            bids, asks = ref.sorted_bids()[:15], ref.sorted_asks()[:15]
            assert r["instrument_id"] == instruments[obj["arg"]["instId"]]
            assert r["flags"] == (BOOK_FLAG_SNAPSHOT if obj["action"] == "snapshot" else 0)
            assert (r["n_bids"], r["n_asks"]) == (len(bids), len(asks))
            assert r["exch_ts_ns"] == int(entry["ts"]) * 1_000_000
            assert r["bid_px"][: len(bids)].tolist() == [float(p) for p, _ in bids]
            assert r["bid_sz"][: len(bids)].tolist() == [float(s) for _, s in bids]
            assert r["ask_px"][: len(asks)].tolist() == [float(p) for p, _ in asks]
            assert r["ask_sz"][: len(asks)].tolist() == [float(s) for _, s in asks]
        elif "action" in obj and channel == "trade":
            assert d.kind == FrameKind.TRADE and d.reason == Reject.OK
            if obj["action"] == "update":
                trades_ref += len(obj["data"])
            trades_out += books.fill_trades(d)
        else:  # acks, ticker, candle1m: not ours, counted and skipped
            assert d.kind in (FrameKind.SUBSCRIBED, FrameKind.UNKNOWN)

    assert pushes == 443
    assert books.checksums_verified == independent_count == reference_matches
    assert books.checksum_mismatches == 0 and books.seq_gaps == 0 and books.take_resyncs() == []
    assert trades_out == trades_ref > 0
    for inst_id, ref in reference.items():
        book = books.book("books", inst_id)
        assert book.bids() == ref.sorted_bids() and book.asks() == ref.sorted_asks()
    assert decoder.rejects[Reject.INTERNAL] == 0 and decoder.kinds[FrameKind.REJECTED] == 0


def test_a_corrupted_level_in_the_capture_is_caught_by_the_next_checksum(capture_path, decoder):
    """Flip one size in the first update of one instrument: its book must turn invalid, ask for a
    resync, and emit nothing for that instrument until the capture ends (no new snapshot comes)."""
    frames = received_texts(capture_path)
    target = next(
        i for i, f in enumerate(frames)
        if '"action":"update"' in f and '"channel":"books"' in f and '"EOSUSDT"' in f
    )
    obj = json.loads(frames[target])
    price, size = obj["data"][0]["asks"][0]
    obj["data"][0]["asks"][0] = [price, str(Decimal(size) + 1)]
    frames[target] = json.dumps(obj, separators=(",", ":"))

    books = BitgetBooks({"EOSUSDT": 1, "HOTUSDT": 2})
    out = np.zeros(1, BOOK_DTYPE)
    codes = []
    for frame in frames:
        d = decoder.decode(frame)
        if d.kind in (FrameKind.SNAPSHOT, FrameKind.UPDATE) and d.inst_id == "EOSUSDT":
            codes.append(books.apply(d, out))
        elif d.kind in (FrameKind.SNAPSHOT, FrameKind.UPDATE):
            books.apply(d, out)
    first_bad = codes.index(Applied.CHECKSUM_MISMATCH)
    assert all(c == Applied.EMITTED for c in codes[:first_bad])
    assert all(c == Applied.INVALID for c in codes[first_bad + 1 :]) and len(codes) > first_bad + 1
    assert [s.inst_id for s in books.take_resyncs()] == ["EOSUSDT"]
    assert books.book("books", "HOTUSDT").checksum_mismatches == 0


def test_books15_frames_for_the_feed_bench_come_from_the_capture(capture_path):
    """bench/feed.py builds v2 books15 frames from the capture's depth pushes; each decodes and
    emits a BOOK (the bench itself is smoke-tested in tests/bench/test_feed_bench.py)."""
    from bench.feed import books15_from_capture

    frames = books15_from_capture(capture_path)
    sizes = sorted(map(len, frames))
    assert len(frames) > 300 and 600 < sizes[len(sizes) // 2] < 1200
    dec = make_decoder("msgspec")
    ids = {s: i + 1 for i, s in enumerate(sorted({dec.decode(f).inst_id for f in frames}))}
    books = BitgetBooks(ids)
    out = np.zeros(1, BOOK_DTYPE)
    assert all(books.apply(dec.decode(f), out) is Applied.EMITTED for f in frames)
