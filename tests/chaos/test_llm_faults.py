"""The slow fault of ``FaultyLlmAgent`` (``bench.chaos.llm_faults``): busy, not asleep."""

from __future__ import annotations

from bench.chaos.llm_faults import busy_cpu


def test_the_slow_fault_keeps_the_cpu_busy_for_the_whole_generation():
    import threading
    import time

    used = {}

    def run():  # in a thread of its own, as in the generation worker
        c0, w0 = time.thread_time(), time.perf_counter()
        for _ in range(4):  # four sampled tokens, the hub's before_token hook as the slow fault sets it
            busy_cpu(0.05)
        used["cpu"], used["wall"] = time.thread_time() - c0, time.perf_counter() - w0

    t = threading.Thread(target=run)
    t.start()
    t.join()
    assert used["wall"] >= 0.2
    # busy, not asleep: the thread used the CPU for its wall time, as far as the machine let it (asleep
    # between tokens, as the fault was before, it used < 1 % of it; 0.2 leaves room for a 2-core
    # machine loaded with other tests: 0.41 seen so)
    assert used["cpu"] >= 0.2 * used["wall"], used
    c0 = time.thread_time()
    busy_cpu(0.0)
    assert time.thread_time() - c0 < 0.05
