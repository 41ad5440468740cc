"""Market data sequencing: per-topic sequences, the snapshot, and the subscriber's verdicts (deliver,
drop backwards, resync on a gap or a new epoch), with every drop counted."""

from __future__ import annotations

import struct

from pipeline.runtime.bridge.frames import parse_control, parse_md, unpack_header
from pipeline.runtime.bridge.mdsync import MdPublisher, MdSubscriber, Verdict
from pipeline.trading.messages import Kind


def payload(instrument: int, tag: int) -> bytes:
    return struct.pack("<HH", instrument, tag)


def feed(sub: MdSubscriber, frames):
    instrument, hdr, _ = parse_md(frames)
    return sub.on_md(instrument, hdr)


def synced(pub: MdPublisher, sub: MdSubscriber, now=0) -> list[bytes]:
    """Run one snapshot exchange; the payloads it delivered."""
    delivered = []
    for msg in pub.snapshot(sub.request(), now):
        if len(msg) == 3:
            instrument, hdr, data = parse_md(msg)
            if sub.on_item(instrument, hdr, data):
                delivered.append(data)
        else:
            sub.on_end(parse_control(msg)[0])
    return delivered


def test_each_topic_numbers_its_messages_from_one():
    pub = MdPublisher(epoch=5)
    seqs = [unpack_header(pub.publish(Kind.BOOK, payload(i, 0), 0)[1]).seq for i in (1, 2, 1, 1, 2)]
    assert seqs == [1, 1, 2, 3, 2]
    assert pub.publish(Kind.BOOK, b"\x01", 0) is None and pub.rejected == 1


def test_snapshot_carries_each_topics_last_book_and_its_latest_sequence():
    pub = MdPublisher(epoch=5)
    pub.publish(Kind.BOOK, payload(1, 10), 0)
    pub.publish(Kind.TRADE, payload(1, 11), 0)  # not a state: the item keeps the BOOK, at seq 2
    pub.publish(Kind.TRADE, payload(2, 20), 0)  # a topic with no state yet: an empty item
    msgs = pub.snapshot([], 7)
    items = [parse_md(m) for m in msgs[:-1]]
    assert [(i, h.seq, h.code, d) for i, h, d in items] == [(1, 2, Kind.BOOK, payload(1, 10)), (2, 1, 0, b"")]
    end = parse_control(msgs[-1])[0]
    assert (end.count, end.epoch) == (2, 5)


def test_live_subscriber_delivers_in_order_and_drops_backwards():
    pub, sub = MdPublisher(epoch=5), MdSubscriber()
    synced(pub, sub)
    m1, m2 = pub.publish(Kind.BOOK, payload(1, 1), 0), pub.publish(Kind.BOOK, payload(1, 2), 0)
    assert [feed(sub, m1), feed(sub, m2)] == [Verdict.DELIVER, Verdict.DELIVER]
    assert feed(sub, m1) == Verdict.DROP  # a sequence going backwards is never applied
    assert sub.stats["backwards"] == 1 and sub.stats["delivered"] == 2


def test_gap_is_counted_and_resynced_from_a_snapshot():
    pub, sub = MdPublisher(epoch=5), MdSubscriber()
    synced(pub, sub)
    feed(sub, pub.publish(Kind.BOOK, payload(1, 1), 0))
    for tag in (2, 3, 4):  # lost on the way (a PUB at its high-water mark drops silently)
        pub.publish(Kind.BOOK, payload(1, tag), 0)
    assert feed(sub, pub.publish(Kind.BOOK, payload(1, 5), 0)) == Verdict.RESYNC
    assert (sub.stats["gaps"], sub.stats["gap_msgs"], sub.stats["resyncs"]) == (1, 3, 1)
    assert not sub.live
    assert synced(pub, sub) == [payload(1, 5)]  # the snapshot's state stands for the missed ones
    assert feed(sub, pub.publish(Kind.BOOK, payload(1, 6), 0)) == Verdict.DELIVER


def test_stream_messages_up_to_the_snapshot_sequence_are_dropped():
    pub, sub = MdPublisher(epoch=5), MdSubscriber()
    early = pub.publish(Kind.BOOK, payload(1, 1), 0)  # queued in SUB while the snapshot was asked for
    synced(pub, sub)
    assert feed(sub, early) == Verdict.DROP and sub.stats["backwards"] == 1


def test_a_restarted_publisher_new_epoch_forces_a_resync():
    pub, sub = MdPublisher(epoch=5), MdSubscriber()
    synced(pub, sub)
    assert feed(sub, MdPublisher(epoch=6).publish(Kind.BOOK, payload(1, 1), 0)) == Verdict.RESYNC
    assert sub.stats["epoch_changes"] == 1


def test_unsubscribed_topic_and_messages_while_syncing_are_dropped_and_counted():
    pub, sub = MdPublisher(epoch=5), MdSubscriber(instruments=[1])
    m = pub.publish(Kind.BOOK, payload(2, 1), 0)
    assert feed(sub, m) == Verdict.DROP and sub.stats["while_syncing"] == 1
    synced(pub, sub)
    assert feed(sub, m) == Verdict.DROP and sub.stats["unknown_topic"] == 1


def test_restarted_subscriber_counts_what_the_snapshot_covers_as_a_gap():
    pub, sub = MdPublisher(epoch=5), MdSubscriber()
    synced(pub, sub)
    for tag in (1, 2):
        feed(sub, pub.publish(Kind.BOOK, payload(1, tag), 0))
    saved = sub.last_delivered()
    assert saved == {1: 2}
    for tag in (3, 4, 5):  # published while the subscriber was dead
        pub.publish(Kind.BOOK, payload(1, tag), 0)
    again = MdSubscriber()
    again.restore(5, saved)
    assert synced(pub, again) == [payload(1, 5)]
    assert (again.stats["gaps"], again.stats["gap_msgs"]) == (1, 3)
