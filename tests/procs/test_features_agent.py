"""The feature stage (procs/features.py): in-process with a fake context, and end to end under the
real supervisor (BookSource -> md -> features -> feat -> FeatureCounter)."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.agent import AgentContext
from pipeline.config import ProcessConfig, parse_config
from pipeline.messages import BOOK_DTYPE, FEATURES_DTYPE, TRADE_DTYPE, TRADE_SIDE_BUY, Kind
from procs.features import FeatureAgent
from tests.pipeline._support import BACK_OFF, process, ring, wait_until
from tests.procs.fakes import INSTRUMENTS, ListLog, RecordingPort


class ListInput:
    """An input port over a list of (kind, payload, ts_origin_ns)."""

    def __init__(self, msgs):
        self.msgs = list(msgs)
        self.pos = 0

    def poll(self, handler, limit):
        n = 0
        while self.pos < len(self.msgs) and n < limit:
            kind, payload, ts = self.msgs[self.pos]
            handler(self.pos, ts, kind, memoryview(payload))
            self.pos += 1
            n += 1
        return n


def start(msgs, port=None):
    cfg = parse_config(ring("md", payload=512) + ring("feat", payload=560) + INSTRUMENTS)
    proc = ProcessConfig(name="features", module="procs.features:FeatureAgent", inputs=["md"], outputs=["feat"])
    ctx = AgentContext(config=cfg, process=proc, inputs={"md": ListInput(msgs)},
                       outputs={"feat": port or RecordingPort()}, log=ListLog())
    agent = FeatureAgent()
    agent.on_start(ctx)
    while agent.do_work():
        pass
    return agent, ctx


def book_bytes(bid, ask, *, iid=1, seq=1, ts=1_000):
    r = np.zeros(1, BOOK_DTYPE)
    r["instrument_id"], r["seq"], r["exch_ts_ns"], r["n_bids"], r["n_asks"] = iid, seq, ts, 1, 1
    r["bid_px"][0, 0], r["bid_sz"][0, 0], r["ask_px"][0, 0], r["ask_sz"][0, 0] = bid, 1.0, ask, 3.0
    return r.tobytes()


def trade_bytes(iid=1, px=100.0, sz=1.0):
    r = np.zeros(1, TRADE_DTYPE)
    r["instrument_id"], r["side"], r["price"], r["size"], r["exch_ts_ns"] = iid, TRADE_SIDE_BUY, px, sz, 1_000
    return r.tobytes()


def test_books_become_features_with_the_books_origin_stamp_and_rejects_are_counted():
    msgs = [(Kind.TRADE, trade_bytes(), 11), (Kind.BOOK, book_bytes(100.0, 100.2, seq=7), 12),
            (Kind.BOOK, book_bytes(100.3, 100.2, seq=8), 13),  # crossed
            (Kind.BOOK, book_bytes(float("nan"), 100.2, seq=9), 14),
            (Kind.BOOK, book_bytes(2000.0, 2000.5, iid=2, seq=10), 15),
            (Kind.BOOK, book_bytes(1.0, 2.0, iid=9), 16),  # unconfigured instrument
            (Kind.BOOK, b"\0" * 10, 17), (Kind.CONTROL, b"\0" * 16, 18)]
    agent, ctx = start(msgs)
    out = ctx.outputs["feat"]
    assert [(k, ts) for k, _, ts, _ in out.msgs] == [(Kind.FEATURES, 12), (Kind.FEATURES, 15)]
    f = [np.frombuffer(p, FEATURES_DTYPE, 1)[0] for _, p, _, _ in out.msgs]
    assert [(int(r["instrument_id"]), int(r["book_seq"])) for r in f] == [(1, 7), (2, 10)]
    assert f[0]["ref_mid"] == pytest.approx(100.1) and f[1]["ref_spread"] == pytest.approx(0.5)
    assert f[0]["features"][66] == pytest.approx(2.0, rel=1e-5)  # spread in BTC ticks (0.1)
    assert f[1]["features"][66] == pytest.approx(50.0, rel=1e-5)  # ETH ticks (0.01)
    st = ctx.stats
    assert st["books"] == 4 and st["emitted"] == 2 and st["rejected"] == 2 and st["trades"] == 1
    assert st["rej_crossed_book"] == 1 and st["rej_non_finite_input"] == 1
    assert st["unknown_instrument"] == 1 and st["bad_size"] == 1 and st["unknown_kind"] == 1
    assert ctx.msgs_in == len(msgs) and ctx.msgs_out == 2


def test_a_full_output_is_counted_not_raised():
    agent, ctx = start([(Kind.BOOK, book_bytes(100.0, 100.2), 1)], port=RecordingPort(accept=False))
    assert ctx.stats["out_drops"] == 1 and ctx.stats["emitted"] == 0


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_features_process_turns_books_into_features_end_to_end(pipe):
    src_out, feat_out = pipe.tmp / "src.txt", pipe.tmp / "feat.txt"
    pipe.write_config(
        ring("md", payload=512, capacity=1024, policy="drop") + ring("feat", payload=560, capacity=1024, policy="drop")
        + process("src", "tests.procs.agents:BookSource", outputs=["md"], extra=BACK_OFF,
                  params=f'out = "{src_out}", total = 40, crossed = [10, 20]')
        + process("features", "procs.features:FeatureAgent", inputs=["md"], outputs=["feat"], extra=BACK_OFF)
        + process("sink", "tests.procs.agents:FeatureCounter", inputs=["feat"], extra='wait = "blocking"\n',
                  params=f'out = "{feat_out}"')
        + INSTRUMENTS)
    pipe.up()

    def lines(path):
        text = path.read_text() if path.exists() else ""
        return [ln.split() for ln in text.splitlines()]

    got = wait_until(lambda: (ls := lines(feat_out)) and len(ls) == 38 and ls, 15, 0.02, "38 FEATURES at the sink")
    sent = {int(s): int(ts) for s, ts in lines(src_out)}
    assert [int(ln[2]) for ln in got] == [s for s in range(1, 41) if s not in (10, 20)]
    for ln in got:
        assert ln[0] == "FEATURES" and ln[1] == "1"
        seq = int(ln[2])
        assert int(ln[-1]) == sent[seq], "FEATURES carry the BOOK's ts_origin_ns unchanged"
        assert float(ln[4]) == pytest.approx(100.0 + seq * 0.1 + 0.25) and float(ln[5]) == pytest.approx(0.5)

    def stats():
        st = pipe.procs()["features"]["stage"]
        return st if st.get("books") == 40 else None

    st = wait_until(stats, 5, 0.05, "features counters in status")
    assert st["emitted"] == 38 and st["rejected"] == 2 and st["rej_crossed_book"] == 2
    assert pipe.down() == 0


def test_keep_warm_recomputes_the_latest_book_on_a_private_state_and_emits_nothing():
    cfg = parse_config(ring("md", payload=512) + ring("feat", payload=560) + INSTRUMENTS)
    books = [(Kind.BOOK, book_bytes(100.0 + i * 0.1, 100.2 + i * 0.1, seq=i + 1), 10 + i) for i in range(3)]
    outs = []
    for warm_us in (0, 200):
        proc = ProcessConfig(name="features", module="procs.features:FeatureAgent", inputs=["md"], outputs=["feat"],
                             keep_warm_us=warm_us)
        ctx = AgentContext(config=cfg, process=proc, inputs={"md": ListInput(books[:2])}, outputs={"feat": RecordingPort()},
                           log=ListLog())
        agent = FeatureAgent()
        agent.on_start(ctx)
        agent.keep_warm()  # before any BOOK: nothing to do
        while agent.do_work():
            pass
        if warm_us:
            assert agent._warm_book == books[1][1]
            for _ in range(5):
                agent.keep_warm()
            assert agent._warm_state is not agent.states[1] and agent._warm_buf["book_seq"][0] == 2
        else:
            assert agent._warm_book is None  # not asked for: no copy per BOOK
        ctx.inputs["md"].msgs.append(books[2])
        while agent.do_work():
            pass
        outs.append(([(k, p, ts) for k, p, ts, _ in ctx.outputs["feat"].msgs], dict(ctx.stats)))
    assert outs[0] == outs[1] and len(outs[0][0]) == 3  # the real state and outputs are the same with or without
