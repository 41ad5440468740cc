"""Market data across hosts, sans I/O: the publisher's per-topic sequences and snapshot, the
subscriber's gap detection and resync (the ZeroMQ guide's Clone pattern).

Publisher (``MdPublisher``): one topic per instrument (the payload's first two bytes, u16 LE, as in
every market-data payload of ``pipeline.trading.messages``); each topic numbers its messages from 1;
the latest message of a full-state kind (BOOK: it supersedes everything before it) is kept per topic
as the snapshot's item. ``epoch`` is random and new at each start, so a restarted publisher (whose
sequences start again at 1) is told from a stale one.

Subscriber (``MdSubscriber``): starts SYNCING: it has subscribed and asks for a snapshot; the shell
holds the stream meanwhile and passes it through ``on_md`` once LIVE. Items set each topic's next
expected sequence (item seq + 1) and deliver their state; SNAP_END makes it LIVE under the
snapshot's epoch. LIVE, per message:

- seq == expected: DELIVER (expected moves on);
- seq < expected: DROP, counted ``backwards`` (a duplicate or a message from before the snapshot: never applied);
- seq > expected: counted ``gaps`` (episodes) and ``gap_msgs`` (messages missed), then RESYNC: the
  message is dropped, the subscriber is SYNCING again and the shell asks for a snapshot (its state
  covers the missed ones);
- another epoch: counted ``epoch_changes``, RESYNC as above (the publisher restarted);
- a topic not subscribed: DROP, counted ``unknown_topic``.

A subscriber restarted from a saved position (``restore``: the epoch and each topic's last delivered
sequence) counts, when the first snapshot is of the same epoch, every topic whose snapshot sequence
lies beyond the saved one as a gap (``gaps``, ``gap_msgs`` += snapshot seq - saved seq: the messages
the snapshot's state stands for). Nothing here raises on input.
"""

from __future__ import annotations

import enum
import random
import struct

from pipeline.runtime.bridge.frames import Header, MsgType, md_frames, pack_header
from pipeline.trading.messages import Kind

_U16 = struct.Struct("<H")


class Verdict(enum.IntEnum):
    DELIVER = 1
    DROP = 2
    RESYNC = 3


def new_epoch(rng: random.Random | None = None) -> int:
    """A random nonzero u32 epoch."""
    return (rng or random.SystemRandom()).randrange(1, 1 << 32)


class MdPublisher:
    """Per-topic sequences and the last full state per topic. ``state_kinds``: the ring kinds whose
    latest message is a topic's full state (default: BOOK)."""

    def __init__(self, epoch: int, state_kinds=(Kind.BOOK,)):
        self.epoch = epoch
        self.state_kinds = frozenset(int(k) for k in state_kinds)
        self.seq: dict[int, int] = {}
        self.state: dict[int, tuple[int, bytes, int, int]] = {}  # instrument -> (kind, payload, ts, seq)
        self.published = 0
        self.rejected = 0  # payloads too short to name an instrument

    def publish(self, kind: int, payload, ts_origin_ns: int) -> list[bytes] | None:
        """The MD message of one ring message; None (counted ``rejected``) when the payload is shorter
        than the 2 bytes of its instrument id."""
        if len(payload) < 2:
            self.rejected += 1
            return None
        instrument = _U16.unpack_from(payload, 0)[0]
        seq = self.seq.get(instrument, 0) + 1
        self.seq[instrument] = seq
        data = bytes(payload)
        if kind in self.state_kinds:
            self.state[instrument] = (kind, data, ts_origin_ns, seq)
        self.published += 1
        return md_frames(MsgType.MD, instrument, kind, seq, self.epoch, ts_origin_ns, data)

    def snapshot(self, wanted: list[int], now_ns: int) -> list[list[bytes]]:
        """The answer to a SNAP_REQ for ``wanted`` instruments (empty: all): one SNAP_ITEM per topic
        with a sequence (its last full state, or an empty payload when none), then SNAP_END."""
        ids = sorted(self.seq) if not wanted else [i for i in wanted if i in self.seq]
        out = []
        for i in ids:
            seq = self.seq[i]
            kind, data, ts, _ = self.state.get(i, (0, b"", now_ns, seq))
            out.append(md_frames(MsgType.SNAP_ITEM, i, kind, seq, self.epoch, ts, data))
        out.append([pack_header(MsgType.SNAP_END, epoch=self.epoch, count=len(ids), ts_ns=now_ns)])
        return out


class MdSubscriber:
    """Expected sequences per topic and the counters above. ``instruments``: the topics subscribed
    (empty: every topic)."""

    COUNTERS = ("delivered", "snapshot_items", "snapshots", "resyncs", "gaps", "gap_msgs", "backwards",
                "epoch_changes", "unknown_topic", "while_syncing")

    def __init__(self, instruments=()):
        self.instruments = frozenset(instruments)
        self.epoch = 0
        self.live = False
        self.expected: dict[int, int] = {}
        self._saved: tuple[int, dict[int, int]] | None = None
        self.stats = dict.fromkeys(self.COUNTERS, 0)

    def restore(self, epoch: int, last_seq: dict[int, int]) -> None:
        """A saved position (from before a restart), compared with the first snapshot."""
        self._saved = (epoch, dict(last_seq))

    def last_delivered(self) -> dict[int, int]:
        """Each topic's last delivered sequence (what ``restore`` takes back)."""
        return {i: s - 1 for i, s in self.expected.items()}

    def request(self) -> list[int]:
        """Start a resync: SYNCING, and the instruments to ask the snapshot for."""
        self.live = False
        self.expected = {}
        return sorted(self.instruments)

    def on_item(self, instrument: int, hdr: Header, payload: bytes) -> bool:
        """One SNAP_ITEM: the topic's next expected sequence; True when its payload is a state to deliver."""
        if self.instruments and instrument not in self.instruments:
            self.stats["unknown_topic"] += 1
            return False
        self.expected[instrument] = hdr.seq + 1
        self.stats["snapshot_items"] += 1
        if self._saved is not None and self._saved[0] == hdr.epoch:
            last = self._saved[1].get(instrument, 0)
            if hdr.seq > last:
                self.stats["gaps"] += 1
                self.stats["gap_msgs"] += hdr.seq - last
        return bool(payload)

    def on_end(self, hdr: Header) -> None:
        """SNAP_END: LIVE under the snapshot's epoch."""
        self.epoch = hdr.epoch
        self.live = True
        self._saved = None
        self.stats["snapshots"] += 1

    # hot path: every market-data message of the receiving host passes here once
    def on_md(self, instrument: int, hdr: Header) -> Verdict:
        """What to do with one MD message (see the module docstring)."""
        st = self.stats
        if not self.live:
            st["while_syncing"] += 1
            return Verdict.DROP
        if self.instruments and instrument not in self.instruments:
            st["unknown_topic"] += 1
            return Verdict.DROP
        if hdr.epoch != self.epoch:
            st["epoch_changes"] += 1
            st["resyncs"] += 1
            self.live = False
            return Verdict.RESYNC
        exp = self.expected.get(instrument, 1)
        seq = hdr.seq
        if seq == exp:
            self.expected[instrument] = seq + 1
            st["delivered"] += 1
            return Verdict.DELIVER
        if seq < exp:
            st["backwards"] += 1
            return Verdict.DROP
        st["gaps"] += 1
        st["gap_msgs"] += seq - exp
        st["resyncs"] += 1
        self.live = False
        return Verdict.RESYNC
