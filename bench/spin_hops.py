"""The hops of ``bench.spin_ab`` measured without the pipeline: the single-threaded busy-spin ring hop
(``measure_ring``) and a thread blocked in ``recv`` while the main thread parks or spins
(``measure_thread``), each fed by a producer process (``python -m bench.spin_hops --produce ...``);
and the windows they and the feed measurement share (``window_order``, ``window_p50s``)."""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from bench import report
from ringbuf import BusySpin, Ring
from ringbuf.idle import YieldSpin

REPO = Path(__file__).resolve().parents[1]
#: the idle arms: the feed's own park (``wait = "blocking"``) / a parked main thread, the bare spin,
#: the runner's busy-spin
ARMS = ("park", "spin", "yield")
#: the ring hop's arms (``measure_ring``)
RING_ARMS = ("spin", "yield", "always")
#: fewer samples than this in a window: the window is left out
MIN_SAMPLES = 20


def runner_spin():
    """The idle the runner's ``wait = "busy-spin"`` runs (``choose_wait``'s)."""
    from pipeline.runtime.runner import choose_wait

    return choose_wait("busy-spin", object(), [], 100_000_000)[1]


def window_order(arms: tuple[str, ...], rounds: int) -> list[str]:
    """A warm-up window (named after the first arm), then ``rounds`` rounds of every arm once, the
    rounds cycling through the arms' rotations and their reverses (each arm as often first as last)."""
    k = len(arms)
    orders = [arms[i:] + arms[:i] for i in range(k)]
    orders += [tuple(reversed(o)) for o in orders]
    out = ["warm-up"]
    for r in range(rounds):
        out += list(orders[r % len(orders)])
    return out


def window_p50s(lat_ns: np.ndarray, at_ns: np.ndarray, spans: list[tuple[int, int]]) -> list[float]:
    """The p50 (µs, HdrHistogram) of the latencies stamped inside each span [start, end) ns; a window
    with fewer than ``MIN_SAMPLES`` is left out."""
    out = []
    for a, b in spans:
        v = lat_ns[(at_ns >= a) & (at_ns < b)]
        if v.size >= MIN_SAMPLES:
            out.append(report.hdr_us(v, (50.0,))[0])
    return out


def _producer(argv: list[str]) -> int:
    """``python -m bench.spin_hops --produce ring NAME SECONDS CORE`` (or ``dgram PATH SECONDS CORE``): a
    message carrying ``time.monotonic_ns()`` every 0.5-1.5 ms (uniform, seeded), busy-waiting between, for
    SECONDS, on CORE."""
    kind, target, seconds, core = argv[0], argv[1], float(argv[2]), int(argv[3])
    os.sched_setaffinity(0, {core})
    rng, mono = random.Random(1), time.monotonic_ns
    end = mono() + int(seconds * 1e9)
    if kind == "ring":
        ring = Ring.attach(target)
        w = ring.writer()
        send = lambda: w.try_write(1, b"12345678", mono())  # noqa: E731
    else:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        send = lambda: sock.sendto(mono().to_bytes(8, "little"), target)  # noqa: E731
    due = mono()
    while due < end:
        while mono() < due:
            pass
        try:
            send()
        except OSError:  # the receiver is gone: the run ended
            break
        due += rng.randint(500_000, 1_500_000)
    return 0


def _start_producer(kind: str, target: str, seconds: float, core: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "bench.spin_hops", "--produce", kind, target, str(seconds), str(core)],
                            cwd=REPO)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def measure_ring(rounds: int, window_s: float, cores: tuple[int, int]) -> dict:
    """The single-threaded busy-spin hop: a producer on ``cores[0]``, this process (one thread) polling on
    ``cores[1]`` as the runner's duty cycle does (poll, clock, idle when nothing came), in the windows of
    ``window_order(RING_ARMS, rounds)``: ``spin`` the bare spin, ``yield`` the runner's busy-spin (alone in
    its process: no yield), ``always`` a ``YieldSpin`` that yields whatever the thread count (what a yield
    on every pass would cost). Per arm its windows' p50s (µs)."""
    arms = RING_ARMS
    order = window_order(arms, rounds)
    name = f"spinab{os.getpid() % 100000}.hop"
    ring = Ring.create(name, slot_size=64, capacity=4096, replace=True)
    old_aff = os.sched_getaffinity(0)
    prod = _start_producer("ring", name, len(order) * window_s + 30, cores[0])
    lat: list[int] = []
    clock = time.monotonic_ns
    spans: dict[str, list[tuple[int, int]]] = {k: [] for k in arms}
    idles = {"spin": BusySpin(), "yield": runner_spin(), "always": YieldSpin(threads=lambda: 2)}
    at: list[int] = []

    def handler(seq, ts_origin_ns, kind, payload) -> None:
        now = clock()
        lat.append(now - ts_origin_ns)
        at.append(now)

    try:
        os.sched_setaffinity(0, {cores[1]})
        r = ring.reader()
        deadline = clock() + 20_000_000_000
        while not r.available() and clock() < deadline:  # the producer started
            time.sleep(0.001)
        for arm in order:
            idle = idles["spin" if arm == "warm-up" else arm].idle
            t0 = now = clock()
            end = t0 + int(window_s * 1e9)
            while now < end:
                n = r.poll(handler, 64)
                now = clock()
                if n == 0:
                    idle(0)
            if arm != "warm-up":
                spans[arm].append((t0, end))
    finally:
        os.sched_setaffinity(0, old_aff)
        _stop(prod)
        ring.close()
        Ring.unlink(name)
    lat_a, at_a = np.array(lat, np.int64), np.array(at, np.int64)
    return {k: window_p50s(lat_a, at_a, spans[k]) for k in arms}


def measure_thread(rounds: int, window_s: float, cores: tuple[int, int], switch_s: float) -> dict:
    """The mechanism alone at switch interval ``switch_s``: this process on ``cores[1]``, a thread of it
    blocked in ``recv`` on a datagram socket fed by a producer on ``cores[0]``, while the main thread
    parks, spins bare or spins yielding (``window_order(ARMS, rounds)``). Per arm its windows' p50s (µs)
    of send -> the thread's receipt."""
    order = window_order(ARMS, rounds)
    lat: list[int] = []
    at: list[int] = []
    spans: dict[str, list[tuple[int, int]]] = {k: [] for k in ARMS}
    idles = {"spin": BusySpin(), "yield": runner_spin()}
    old_aff, old_switch = os.sched_getaffinity(0), sys.getswitchinterval()
    with tempfile.TemporaryDirectory(prefix="bench-spin-") as d:
        path = str(Path(d) / "dgram")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(path)
        sock.settimeout(0.5)
        stop = threading.Event()

        def receiver() -> None:
            mono = time.monotonic_ns
            while not stop.is_set():
                try:
                    data = sock.recv(16)
                except (TimeoutError, OSError):
                    continue
                now = mono()
                lat.append(now - int.from_bytes(data, "little"))
                at.append(now)

        os.sched_setaffinity(0, {cores[1]})  # the receiving thread inherits it
        sys.setswitchinterval(switch_s)
        t = threading.Thread(target=receiver, daemon=True)
        t.start()
        prod = _start_producer("dgram", path, len(order) * window_s + 30, cores[0])
        try:
            deadline = time.monotonic() + 20
            while not lat and time.monotonic() < deadline:  # the producer started
                time.sleep(0.01)
            for arm in order:
                t0 = time.monotonic_ns()
                end = t0 + int(window_s * 1e9)
                if arm in ("warm-up", "park"):
                    stop.wait(window_s)  # parked: the GIL released the whole window
                else:
                    idle, clock = idles[arm].idle, time.monotonic_ns
                    while clock() < end:
                        idle(0)
                if arm != "warm-up":
                    spans[arm].append((t0, time.monotonic_ns()))
        finally:
            stop.set()
            sys.setswitchinterval(old_switch)
            _stop(prod)
            t.join(5)
            sock.close()
            os.sched_setaffinity(0, old_aff)
    lat_a, at_a = np.array(lat, np.int64), np.array(at, np.int64)
    return {k: window_p50s(lat_a, at_a, spans[k]) for k in ARMS}




if __name__ == "__main__":
    raise SystemExit(_producer(sys.argv[2:]) if sys.argv[1:2] == ["--produce"] else 2)
