"""Per-call cost of every tier of the QR ladder as the Python process sees it, in ONE run.

    python qr/python/bench/percall.py [--quick] [--repeats N] [--ms-per-text MS] [--json FILE]

(`./run bench qr` runs it after the Node table, in the host's venv.) Method, as
qr/node/bench/percall.js: outputs checked first (the bare function, PyO3, wasmtime and the
CLI byte-identical; tier 0 matched the same pixels); then each repeat runs every variant
once, in an order rotated per repeat (alternating), each timing the five texts of
bench/texts.py for a fixed time per text after 3 warm-up calls. A variant's figure per
repeat is the mean of its per-text costs; the table shows the median over repeats and
the min-max. wall = what the caller waits; cpu = this process's CPU time (all threads)
plus its reaped children's (the CLIs).

The bare function is `qr_core::png` in a Rust loop inside this process (`qr_pyo3.bare_ns`,
no Python between calls). The PyO3 overhead target (<= 1 µs) is judged on a paired
measurement: per text, many rounds of 8 bare calls then 8 binding calls, back to back;
the per-call difference of each round, median and interquartile range over all rounds
and texts. The render itself (30-900 µs) varies more between two runs than the overhead
is large, so only calls taken side by side can show it.
"""

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import png  # noqa: E402
import qr_pyo3  # noqa: E402

from qrhost import artifacts, tier0  # noqa: E402
from qrhost.tier2 import RawQr  # noqa: E402
from texts import TEXTS  # noqa: E402

WARM_UP = 3


def cpu_s():
    """This process's CPU seconds (every thread, ns resolution) plus its reaped children's
    (clock ticks: only the CLI has children, and its windows are 5x longer)."""
    t = os.times()
    return time.process_time() + t.children_user + t.children_system


def variants():
    p = artifacts.paths()
    cli = artifacts.require(p["cli"], "qr-cli")
    raw = RawQr(artifacts.require(p["wasm_raw"], "qr_raw.wasm"))
    pool = ThreadPoolExecutor(1)

    def bare(data, calls):
        return qr_pyo3.bare_ns(data.decode(), calls)

    def spawn(data):
        r = subprocess.run([cli], input=data, capture_output=True)
        if r.returncode != 0:
            raise RuntimeError(f"qr-cli exited {r.returncode}: {r.stderr[:200]!r}")
        return r.stdout

    return [
        {"key": "bare", "name": "bare Rust fn (qr_core::png)", "timed_loop": bare},
        {"key": "0", "name": "0 qrcode + pypng, matched", "call": tier0.matched_png},
        {"key": "0-article", "name": "0-article (qrcode defaults)", "call": tier0.article_png},
        {"key": "1", "name": "1 qr-cli spawn per call", "call": spawn, "slow": True},
        {"key": "2", "name": "2 wasmtime, hand-written bindings", "call": raw.png},
        {"key": "3", "name": "3 PyO3 png() (sync)", "call": qr_pyo3.png},
        {"key": "3-threads", "name": "3 PyO3 on a thread pool, 1 in flight",
         "call": lambda d: pool.submit(qr_pyo3.png, d).result()},
    ], pool


def time_one(v, data, seconds):
    """(wall µs, cpu µs) per call of variant `v` on `data` for about `seconds`."""
    if "timed_loop" in v:
        v["timed_loop"](data, WARM_UP)
        calls, cpu0, wall_ns = 0, cpu_s(), 0
        while wall_ns < seconds * 1e9:
            wall_ns += v["timed_loop"](data, 8)
            calls += 8
        return wall_ns / 1e3 / calls, (cpu_s() - cpu0) * 1e6 / calls
    call = v["call"]
    for _ in range(WARM_UP):
        call(data)
    calls, cpu0, start = 0, cpu_s(), time.perf_counter()
    now = start
    while now - start < seconds:
        for _ in range(8 if not v.get("slow") else 1):
            call(data)
            calls += 1
        now = time.perf_counter()
    return (now - start) * 1e6 / calls, (cpu_s() - cpu0) * 1e6 / calls


def gray(png_bytes):
    w, h, rows, info = png.Reader(bytes=png_bytes).asDirect()
    top = (1 << info["bitdepth"]) - 1
    return w, h, b"".join(bytes(v * 255 // top for v in r) for r in rows)


def check_outputs(vs):
    """Same output on every side before any figure (the project's ground rule)."""
    sizes = {v["key"]: [] for v in vs}
    for _, text in TEXTS:
        data = text.encode()
        ref = qr_pyo3.png(data)
        for v in vs:
            out = ref if "timed_loop" in v else v["call"](data)
            sizes[v["key"]].append(len(out))
            if v["key"] in ("1", "2", "3", "3-threads") and out != ref:
                raise SystemExit(f"percall: output check: {v['name']} differs from PyO3 for {text[:20]!r}")
            if v["key"] == "0" and gray(out) != gray(ref):
                raise SystemExit(f"percall: output check: tier 0 matched pixels differ for {text[:20]!r}")
    return sizes


def paired_overhead(seconds_per_text):
    """PyO3 png() minus the bare loop, per call, from rounds of 8 + 8 calls side by side:
    (median, q1, q3) of every round's difference, and the median at the shortest text."""
    diffs, shortest = [], []
    for i, (_, text) in enumerate(TEXTS):
        data = text.encode()
        s = text  # the bare loop takes the str; png() takes the bytes the host passes
        end = time.perf_counter() + seconds_per_text
        while time.perf_counter() < end:
            b = qr_pyo3.bare_ns(s, 8)
            t0 = time.perf_counter_ns()
            for _ in range(8):
                qr_pyo3.png(data)
            d = (time.perf_counter_ns() - t0 - b) / 8 / 1e3
            diffs.append(d)
            if i == 0:
                shortest.append(d)
    q = statistics.quantiles(diffs, n=4)
    return {"median": statistics.median(diffs), "q1": q[0], "q3": q[2], "rounds": len(diffs),
            "shortest_median": statistics.median(shortest)}


def fmt(us):
    if us is None:
        return "-"
    return f"{us / 1000:.2f} ms" if abs(us) >= 1000 else f"{us:.{2 if abs(us) < 10 else 1}f} µs"


def spread(xs):
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}


def main():
    ap = argparse.ArgumentParser(prog="percall.py")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeats", type=int)
    ap.add_argument("--ms-per-text", type=float)
    ap.add_argument("--json")
    a = ap.parse_args()
    repeats = a.repeats or (3 if a.quick else 7)
    ms = a.ms_per_text or (12 if a.quick else 150)
    vs, pool = variants()
    print(f"qr per-call bench, Python host: {'quick' if a.quick else 'full'}, {repeats} repeats x "
          f"{len(TEXTS)} texts x {ms:g} ms per variant (CLI spawn: 5x that)")
    print(f"machine: {os.cpu_count()} cpus, python {sys.version.split()[0]}, loadavg "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}, {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}")
    sizes = check_outputs(vs)
    print("outputs checked: bare fn, tiers 1, 2, 3 byte-identical; tier 0 matched has the same pixels")
    wall = {v["key"]: [] for v in vs}
    cpu = {v["key"]: [] for v in vs}
    for r in range(repeats):
        for v in vs[r % len(vs):] + vs[:r % len(vs)]:
            secs = ms / 1e3 * (5 if v.get("slow") else 1)
            per_text = [time_one(v, t.encode(), secs) for _, t in TEXTS]
            wall[v["key"]].append(statistics.fmean(w for w, _ in per_text))
            cpu[v["key"]].append(statistics.fmean(c for _, c in per_text))
    pool.shutdown()
    overhead = paired_overhead(0.2 if a.quick else 1.0)
    base = statistics.median(cpu["0"])
    print("\nper call, mean over the texts: median of repeats (min-max); x = tier 0 matched / variant (cpu)")
    print(f"{'variant':38} {'wall/call':>10} {'cpu/call':>10} {'cpu min-max':>21} {'x':>7} {'PNG B':>6}")
    rows = []
    for v in vs:
        k = v["key"]
        c = spread(cpu[k])
        row = {"key": k, "name": v["name"], "wall": spread(wall[k]), "cpu": c, "x": base / c["median"],
               "mean_bytes": statistics.fmean(sizes[k])}
        rows.append(row)
        print(f"{v['name']:38} {fmt(row['wall']['median']):>10} {fmt(c['median']):>10} "
              f"{fmt(c['min']) + ' - ' + fmt(c['max']):>21} {row['x']:>6.2f}x {round(row['mean_bytes']):>6}")
    ratio = lambda a_, b_: spread([x / y for x, y in zip(cpu[a_], cpu[b_])])  # noqa: E731
    t0 = ratio("0", "bare")
    wt = ratio("2", "bare")
    print("\nissue #28 targets (ratios from pairs of the same repeat: median (min-max); judged on cpu)")
    print(f"  PyO3 call overhead <= 1 µs over the bare function (paired rounds of 8+8 calls, "
          f"{overhead['rounds']} rounds over {len(TEXTS)} texts): {fmt(overhead['median'])} "
          f"(IQR {fmt(overhead['q1'])}..{fmt(overhead['q3'])}; at {TEXTS[0][0]}: {fmt(overhead['shortest_median'])}) "
          f"-> {'MET' if overhead['median'] <= 1.0 else 'NOT MET'}")
    print(f"  wasmtime call <= 3x the bare function (2 / bare): {wt['median']:.2f}x ({wt['min']:.2f}-{wt['max']:.2f}) "
          f"-> {'MET' if wt['median'] <= 3 else 'NOT MET'}")
    print(f"  (for reference: tier 0 matched / bare fn {t0['median']:.1f}x ({t0['min']:.1f}-{t0['max']:.1f}))")
    print(f"loadavg at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": rows, "wall": wall, "cpu": cpu, "overhead": overhead, "texts": [t[0] for t in TEXTS]},
                      f, indent=2)
        print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
