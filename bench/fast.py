"""Fast-path benchmark: ``python -m bench.fast`` (``make bench-fast``).

Measured on this machine, on ``books15`` frames of the synthetic venue model (one instrument):

(a) feature vector per BOOK: ``pipeline.trading.features.compute`` of a 504-byte BOOK payload into a
    FEATURES record, as the feature stage does, p50 / p99 (target p50 <= 15 µs);
(b) the classifier on the CPU provider with IO binding, batch 1 (the fast stage's ``_infer``: copy of
    the 128 features into the bound input, ``run_with_iobinding``, synchronize), p50 / p99 (target
    p50 <= 15 µs);
(c) the usual single-process loop on the same frames: ``orjson.loads`` of the frame, a Python loop
    over the 15 levels a side filling a 128-wide float32 array, ``InferenceSession.run`` on it, back
    to back (hot caches); (c') the same loop with one frame every 20 ms, the pace of (d);
(d) end to end across real processes: the supervisor runs the paper venue (synthetic, ``books15``,
    one book a 20 ms step), feed, features, fast (CPU provider) and ``bench.sink:LatencySink`` on
    ``sig_risk``, for ``--seconds`` (10; 4 with ``--quick``); the fast stage's latency tap gives
    frame received (the feed's ``ts_origin_ns``) -> SIGNAL written, the feed's and the feature
    stage's taps the BOOK and FEATURES points, the sink the SIGNAL read; p50 / p99 after the first
    second; placement as ``make up`` has it (``auto``: cores shared, blocking waits; feed, features
    and fast with the default config's ``keep_warm_us``); (d-) the same without keep-warm, with the
    ratio to (d); (d') the same with features on core 0 and fast on core 1, busy-spinning with
    ``keep_warm_us = 200``; the ratios to (c) and (c'), and MET / MISSED for "the better end-to-end
    p50 <= the loop's p50" against each (labelled "best of 2", the median of the two beside it).

The classifier of (b)-(d') is ``--model`` (default: the shipped ``models/generated/fast.onnx``, the
file ``make up`` runs; trained here when missing); every row of the report names its file (path and
sha256). Every percentile is HdrHistogram's (``bench.report.hdr_summary``).

Writes ``bench/results/<UTC timestamp>-fast/results.json`` and ``report.md``; prints the table.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import orjson

from bench import report
from bench.feed import books15_synthetic
from bench import configtext as ct
from bench.report import hdr_summary
from pipeline.trading.bitget.book import Applied, BitgetBooks
from pipeline.trading.bitget.protocol import make_decoder
from pipeline.trading.features import FeatureParams, FeatureState, compute
from pipeline.trading.messages import BOOK_DTYPE, FEATURES_DTYPE, FEATURES_LEN

REPO = Path(__file__).resolve().parents[1]
MODEL = REPO / "models" / "generated" / "fast.onnx"
TARGETS = {"features_p50_us": 15.0, "classifier_p50_us": 15.0}


def percentiles_us(ns) -> dict:
    """p50 / p99 / p99.9 / max in µs and the count of nanosecond timings, from HdrHistogram."""
    return hdr_summary(ns, curve=())


def p50_us(ns) -> float:
    """HdrHistogram p50 in µs of nanosecond timings (nan for none)."""
    return hdr_summary(ns, curve=()).get("p50_us", float("nan"))


def model_info(model: Path, built: str | None = None) -> dict:
    """What names the classifier in the report: the path (repo-relative where it can be), sha256 (12
    hex digits), whether it is the shipped file, and ``built`` (how this run trained it, if it did)."""
    model = model.resolve()
    digest = hashlib.sha256(model.read_bytes()).hexdigest()[:12]
    try:
        shown = str(model.relative_to(REPO))
    except ValueError:
        shown = str(model)
    shipped = model == MODEL.resolve()
    label = (f"{'shipped model' if shipped else 'model given with --model'} {shown} sha256 {digest}"
             + (f", {built}" if built else ""))
    return {"path": shown, "sha256": digest, "shipped": shipped, "built": built, "label": label}


def book_payloads(frames: list[bytes]) -> list[bytes]:
    dec, books, out = make_decoder(), BitgetBooks({"BTCUSDT": 1}), np.zeros(1, BOOK_DTYPE)
    res = []
    for f in frames:
        if books.apply(dec.decode(f), out) is Applied.EMITTED:
            res.append(out.tobytes())
    return res


def bench_features(payloads: list[bytes], passes: int) -> dict:
    out = np.zeros(1, FEATURES_DTYPE)
    clock = time.perf_counter_ns
    ns = []
    for _ in range(passes):
        st = FeatureState(1, 0.1, FeatureParams(vpin_bucket_volume=0.1))
        for i, b in enumerate(payloads):
            t0 = clock()
            compute(st, b, out, i + 1)
            ns.append(clock() - t0)
    return percentiles_us(ns)


def bench_classifier(model: Path, rows: np.ndarray, passes: int) -> dict:
    import onnxruntime as ort

    from procs.fast import build_session

    sess, provider, _ = build_session(str(model), providers="cpu")
    x, probs = np.zeros((1, FEATURES_LEN), np.float32), np.zeros((1, 4), np.float32)
    io = sess.io_binding()
    io.bind_ortvalue_input(sess.get_inputs()[0].name, ort.OrtValue.ortvalue_from_numpy(x))
    io.bind_ortvalue_output(sess.get_outputs()[0].name, ort.OrtValue.ortvalue_from_numpy(probs))
    clock = time.perf_counter_ns
    for r in rows[:50]:  # warm-up
        x[0] = r
        sess.run_with_iobinding(io)
    ns = []
    for _ in range(passes):
        for r in rows:
            t0 = clock()
            x[0] = r
            io.synchronize_inputs()
            sess.run_with_iobinding(io)
            io.synchronize_outputs()
            ns.append(clock() - t0)
    return {**percentiles_us(ns), "provider": provider}


def naive_loop(frame: bytes, sess, in_name: str, out_names: list[str]) -> np.ndarray:
    """The usual single-process loop: parse, a Python loop over the levels, ``run``."""
    d = orjson.loads(frame)
    e = d["data"][0]
    x = np.zeros((1, FEATURES_LEN), np.float32)
    for i, (px, sz) in enumerate(e["bids"][:15]):
        x[0, 2 * i] = float(px)
        x[0, 2 * i + 1] = float(sz)
    for i, (px, sz) in enumerate(e["asks"][:15]):
        x[0, 30 + 2 * i] = float(px)
        x[0, 30 + 2 * i + 1] = float(sz)
    return sess.run(out_names, {in_name: x})[0]


def bench_naive(model: Path, frames: list[bytes], passes: int, period_s: float = 0.0) -> dict:
    """(c): ``naive_loop`` over ``frames``, ``passes`` times, back to back; (c') with ``period_s`` > 0:
    one frame every ``period_s`` (the venue's 20 ms step), the process sleeping in between: the same
    arrival pace as (d)."""
    import onnxruntime as ort

    sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    in_name, out_names = sess.get_inputs()[0].name, [sess.get_outputs()[0].name]
    for f in frames[:50]:
        naive_loop(f, sess, in_name, out_names)
    clock = time.perf_counter_ns
    ns = []
    for _ in range(passes):
        for f in frames:
            if period_s:
                time.sleep(period_s)
            t0 = clock()
            naive_loop(f, sess, in_name, out_names)
            ns.append(clock() - t0)
    return percentiles_us(ns)


def end_to_end_config(*, prefix: str, tmp: Path, model: Path, sink: Path, spin: bool, warm: bool) -> str:
    """The config of (d): venue (synthetic books15, a 20 ms step), feed, features, fast and
    ``bench.sink:LatencySink`` on sig_risk; run and log folders under ``tmp``; placement as
    ``bench_end_to_end`` says."""
    run = tmp / "run"
    return ct.blocks(
        ct.supervisor(shm_prefix=prefix, run_dir=str(run), log_dir=str(tmp / "logs"), poll_interval_ms=10,
                      heartbeat_interval_ms=100, stop_grace_ms=3000),
        ct.ring("md", 512, 8192, "drop"), ct.ring("feat", 560, 4096, "drop"), ct.ring("sig_risk", 64, 4096, "drop"),
        ct.process("venue", "procs.venue:VenueAgent", wait="back-off",
                   params={"port": 0, "seed": 1, "step_ms": 20, "port_file": str(run / "venue.port")}),
        ct.process("feed", "procs.feed:BitgetFeedAgent", report.placement("feed", warm=warm), outputs=["md"],
                   wait="back-off", params={"port_file": str(run / "venue.port"), "channels": ["books15"]}),
        ct.process("features", "procs.features:FeatureAgent", report.placement("features", 0 if spin else None, warm=warm),
                   inputs=["md"], outputs=["feat"]),
        ct.process("fast", "procs.fast:FastAgent", report.placement("fast", 1 if spin else None, warm=warm),
                   inputs=["feat"], outputs=["sig_risk"], params={"model_path": str(model), "providers": "cpu"}),
        ct.process("sink", "bench.sink:LatencySink", inputs=["sig_risk"], params={"out": str(sink)}),
        ct.BTCUSDT)


def bench_end_to_end(model: Path, seconds: float, *, spin: bool = False, warm: bool = True) -> dict:
    """(d): frame received -> SIGNAL written, from the fast stage's latency tap (and, as before, the
    sink's read of it). ``spin``: features on core 0 and fast on core 1, each busy-spinning with
    ``keep_warm_us = 200`` (the venue, the feed and the sink share those cores); otherwise every stage
    ``auto`` (cores shared, blocking waits), kept warm as the default config has it unless ``warm``
    is False (no keep-warm anywhere)."""
    from pipeline.runtime.agent import LATENCY_DIR_ENV
    from pipeline.trading.messages import Kind

    with tempfile.TemporaryDirectory(prefix="bench-fast-") as tmp:
        t = Path(tmp)
        sink = t / "latency.bin"
        cfg = t / "bench.toml"
        (t / "lat").mkdir()
        cfg.write_text(end_to_end_config(prefix=f"bf{os.getpid() % 100000}", tmp=t, model=model, sink=sink, spin=spin,
                                         warm=warm))
        settle_s = 1.0
        proc = report.run_pipeline_for(cfg, seconds + settle_s + 2.0, {**os.environ, LATENCY_DIR_ENV: str(t / "lat")})
        read = np.fromfile(sink, "<i8") if sink.exists() else np.zeros(0, np.int64)
        tap = t / "lat" / "fast.lat.npy"
        rec = np.load(tap) if tap.exists() else np.zeros(0, [("code", "<u2"), ("lat_ns", "<i8")])
        lat = rec["lat_ns"][rec["code"] == Kind.SIGNAL]
        if proc.returncode != 0 or lat.size == 0:
            raise RuntimeError(f"end-to-end run failed (rc {proc.returncode}, {lat.size} signals): "
                               f"{proc.stdout[-2000:]} {proc.stderr[-2000:]}")
        skip = min(lat.size // 5, 50)  # the first second of books (20 ms steps): connection and warm-up
        res = percentiles_us(lat[skip:].tolist())
        for name, kind in (("feed", Kind.BOOK), ("features", Kind.FEATURES)):
            f = t / "lat" / f"{name}.lat.npy"
            stage = np.load(f) if f.exists() else None
            v = stage["lat_ns"][stage["code"] == kind] if stage is not None else np.zeros(0)
            res[f"{name}_p50_us"] = p50_us(v[min(v.size // 5, 50):])
        rskip = min(read.size // 5, 50)
        res.update(signals=int(lat.size), skipped=int(skip), seconds=seconds, spin=spin, warm=warm,
                   sink_read_p50_us=p50_us(read[rskip:]))
        return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small counts (smoke run)")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--model", type=Path, default=MODEL)
    ap.add_argument("--seconds", type=float, default=None, help="end-to-end run time (default 10; 4 with --quick)")
    ap.add_argument("--no-e2e", action="store_true", help="skip (d), the multi-process run")
    args = ap.parse_args(argv)
    out_dir, machine = report.start("fast", args.out)
    model, built = model_file(args.model.resolve(), args.quick)
    mod = model_info(model, built)
    frames = books15_synthetic(400)
    payloads = book_payloads(frames)
    passes = 3 if args.quick else 25
    res = measure(model, frames, payloads, passes, args.quick)
    if not args.no_e2e:
        secs = args.seconds or (4.0 if args.quick else 10.0)
        res["end_to_end"] = bench_end_to_end(model, secs)
        res["end_to_end_spin"] = bench_end_to_end(model, secs, spin=True)
        res["end_to_end_cold"] = bench_end_to_end(model, secs, warm=False)
        add_ratios(res)
    results = {"machine": machine, "targets": TARGETS, "frames": len(frames), "books": len(payloads),
               "source": "synthetic venue model (books15, one instrument)", "model": mod, "percentiles": "HdrHistogram",
               **res}
    md = [f"# Fast-path benchmark {machine['date']}", "",
          report.machine_line(machine),
          f"{len(frames)} books15 frames of the synthetic venue model; {passes} passes for (a)-(c). "
          "Percentiles from HdrHistogram (1 ns to 60 s, 3 significant digits).",
          f"Model of (b)-(d'): {mod['label']}.", "",
          "| measured | model file (sha256) | p50 | p99 | verdict |", "|---|---|---|---|---|"]
    no_model = "none (no classifier)"
    short = f"{mod['path']} ({mod['sha256']})"
    md += [f"| {a} | {no_model if a.startswith('(a)') else short} | {r['p50_us']:.2f} µs | {r['p99_us']:.2f} µs | {v} |"
           for a, r, v in report_rows(res)]
    if not res.get("end_to_end"):
        md += ["", "(d) end to end: not run (--no-e2e)."]
    report.write(out_dir, results, md)
    return 0


def model_file(model: Path, quick: bool) -> tuple[Path, str | None]:
    """``model``, trained here when it does not exist; and how this run built it (None: it did not)."""
    if model.exists():
        return model, None
    from pipeline.trading.model import TrainParams, build

    build(model, TrainParams(steps=20_000) if quick else TrainParams())
    return model, ("trained by this run (--quick: 20,000 steps)" if quick
                   else "trained by this run (pipeline.trading.model's defaults)")


def measure(model: Path, frames: list[bytes], payloads: list[bytes], passes: int, quick: bool) -> dict:
    """(a), (b), (c) and (c') on ``frames`` (their BOOK ``payloads``), ``passes`` times each."""
    rows = np.zeros((len(payloads), FEATURES_LEN), np.float32)
    st = FeatureState(1, 0.1)
    for i, b in enumerate(payloads):
        compute(st, b, rows[i], i + 1)
    res = {"features": bench_features(payloads, passes), "classifier": bench_classifier(model, rows, passes),
           "naive_loop": bench_naive(model, frames, passes)}
    res["naive_paced"] = bench_naive(model, frames[: 50 if quick else 200], 1, period_s=0.02)
    return res


def add_ratios(res: dict) -> None:
    """Add to ``res`` (with its (d) runs) the ratios of (d) and (d') to (c) and (c'), the best of the two
    placements and their median, whether it is within (c) / (c'), and (d-) over (d)."""
    e2e, spin, nv, pc = res["end_to_end"], res["end_to_end_spin"], res["naive_loop"], res["naive_paced"]
    for key, r in (("", e2e), ("_spin", spin)):
        res[f"e2e{key}_over_naive_p50"] = r["p50_us"] / nv["p50_us"]
        res[f"e2e{key}_over_naive_paced_p50"] = r["p50_us"] / pc["p50_us"]
    best = min(e2e["p50_us"], spin["p50_us"])  # the better placement: best of 2, reported with the median
    res["e2e_best_of_2_p50_us"] = best
    res["e2e_median_of_2_p50_us"] = statistics.median([e2e["p50_us"], spin["p50_us"]])
    res["e2e_p50_le_naive_p50"] = best <= nv["p50_us"]
    res["e2e_p50_le_naive_paced_p50"] = best <= pc["p50_us"]
    res["e2e_cold_over_warm_p50"] = res["end_to_end_cold"]["p50_us"] / e2e["p50_us"]


def _verdict(v: float, t: float) -> str:
    return f"target p50 <= {t:g} µs: {'MET' if v <= t else 'MISSED'}"


def report_rows(res: dict) -> list[tuple[str, dict, str]]:
    """The report's rows (what was measured, its figures, the verdict or comparison): (a), (b), (c),
    (c'), then (d), (d-) and (d') when they ran."""
    fe, cl, nv, pc = res["features"], res["classifier"], res["naive_loop"], res["naive_paced"]
    rows_md = [
        ("(a) feature vector per BOOK (compute into a FEATURES record)", fe, _verdict(fe["p50_us"], TARGETS["features_p50_us"])),
        (f"(b) classifier, {cl['provider']}, IO binding, batch 1", cl, _verdict(cl["p50_us"], TARGETS["classifier_p50_us"])),
        ("(c) single-process loop: orjson.loads + Python level loop + InferenceSession.run", nv,
         f"p50 is {nv['p50_us'] / (fe['p50_us'] + cl['p50_us']):.2f}x that of (a)+(b)"),
        ("(c') the same loop on the same frames, one every 20 ms (the pace of (d)), sleeping between", pc,
         f"{pc['p50_us'] / nv['p50_us']:.1f}x (c): the cost of cold caches"),
    ]
    return rows_md + (e2e_rows(res) if res.get("end_to_end") else [])


def e2e_rows(res: dict) -> list[tuple[str, dict, str]]:
    """The rows of (d), (d-) and (d') (``add_ratios`` done)."""
    e2e, spin, cold = res["end_to_end"], res["end_to_end_spin"], res["end_to_end_cold"]
    nv, pc = res["naive_loop"], res["naive_paced"]

    def against(r: dict) -> str:
        return f"{r['p50_us'] / nv['p50_us']:.1f}x (c), {r['p50_us'] / pc['p50_us']:.2f}x (c')"

    return [
        (f"(d) end to end, venue + feed + features + fast (+ a sink): frame received -> SIGNAL written, "
         f"default placement (cores shared, blocking waits, {report.default_place('fast').strip() or 'no keep-warm'}; "
         f"{e2e['n']} SIGNALs; BOOK written at p50 "
         f"{e2e['feed_p50_us']:.0f} µs, FEATURES {e2e['features_p50_us']:.0f} µs; the sink read the SIGNALs "
         f"at p50 {e2e['sink_read_p50_us']:.0f} µs)", e2e, against(e2e)),
        (f"(d-) the same as (d) without keep-warm ({cold['n']} SIGNALs; BOOK at p50 {cold['feed_p50_us']:.0f} µs, "
         f"FEATURES {cold['features_p50_us']:.0f} µs)", cold,
         f"{cold['p50_us'] / e2e['p50_us']:.2f}x (d): what keep-warm saves"),
        (f"(d') the same with features on core 0 and fast on core 1, each busy-spinning with "
         f"keep_warm_us = 200 ({spin['n']} SIGNALs; BOOK at p50 {spin['feed_p50_us']:.0f} µs, FEATURES "
         f"{spin['features_p50_us']:.0f} µs; sink read at p50 {spin['sink_read_p50_us']:.0f} µs)",
         spin, against(spin) + f"; best of 2 ((d), (d')) p50 {res['e2e_best_of_2_p50_us']:.0f} µs "
         f"(median of the 2: {res['e2e_median_of_2_p50_us']:.0f} µs) <= (c) p50: "
         f"{'MET' if res['e2e_p50_le_naive_p50'] else 'MISSED'}; <= (c') p50: "
         f"{'MET' if res['e2e_p50_le_naive_paced_p50'] else 'MISSED'}"),
    ]


if __name__ == "__main__":
    sys.exit(main())
