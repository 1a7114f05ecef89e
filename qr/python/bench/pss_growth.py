"""No memory growth over 100,000 requests, at every tier of the Python host (and tier 4):
each server alone, pinned to one CPU, `scalpel load` on the other sending the requests in
segments, the PSS of the server's whole process tree (tier 1's CLI children included) read
by scalpel's own sampler at every segment (`--watch-pid`).

    qr/python/bench/pss_growth.py [--requests 100000] [--segments 10] [--tiers 0,0-article,1,2,3,3-threads,4]
                                  [--tolerance-mib 2] [--json FILE]

Verdict per tier: after the first segment (warm-up: imports, caches, the allocator's
high-water mark), the largest PSS of any later segment may exceed the second segment's by
at most the tolerance (default 2 MiB, or 3% if larger). A tier that grew, or a run that
failed, is NOT MET and the exit status is 1. The slow tiers take long: tier 0 renders a
request in ~5-15 ms of CPU, so 100,000 requests are 10-25 minutes; `--requests 20000`
for a shorter check (say so with the figure).
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
TARGET = os.path.abspath(os.environ.get("CARGO_TARGET_DIR") or os.path.join(REPO, "target"))
SCALPEL = os.path.join(TARGET, "release", "scalpel")
SERVE = os.path.join(REPO, "qr", "python", "serve")
SERVER_CPU, LOAD_CPU = "1", "0"

sys.path.insert(0, HERE)
from texts import TEXTS  # noqa: E402


def command(tier):
    if tier == "4":
        return [os.path.join(TARGET, "release", "qr-server"), "--port", "0"]
    if tier == "3-threads":
        return [SERVE, "--tier", "3", "--native-mode", "threads", "--port", "0"]
    return [SERVE, "--tier", tier, "--port", "0"]


def pinned(cpu, argv):
    if shutil.which("taskset") and (os.cpu_count() or 1) >= 2:
        return ["taskset", "-c", cpu, *argv]
    return list(argv)


def start(tier):
    p = subprocess.Popen(pinned(SERVER_CPU, command(tier)), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         text=True, env={**os.environ, "CARGO_TARGET_DIR": TARGET})
    line = p.stdout.readline()
    m = re.search(r"(http://\S+)", line)
    if not m:
        p.kill()
        raise RuntimeError(f"tier {tier} did not start: {line!r}")
    return p, m.group(1)


def segment(url, pid, data, n, out):
    argv = pinned(LOAD_CPU, [SCALPEL, "load", "--no-progress", "--threads", "1", "-c", "8", "-n", str(n),
                             "--watch-pid", str(pid), "--data", data, "--json", out,
                             url + "/qrcode?text={text:raw}"])
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode not in (0, 1) or not os.path.exists(out):
        raise RuntimeError(f"scalpel load failed ({r.returncode}): {r.stderr.strip()[:300]}")
    with open(out) as f:
        step = json.load(f)["targets"][0]["steps"][0]
    if step.get("errors"):
        raise RuntimeError(f"{step['errors']} failed requests")
    return step.get("pss_mb"), step.get("achieved_rps")


def run_tier(tier, args, data, tmp):
    p, url = start(tier)
    try:
        per = args.requests // args.segments
        pss = []
        for i in range(args.segments):
            mb, rps = segment(url, p.pid, data, per, os.path.join(tmp, f"{tier}-{i}.json"))
            pss.append(mb)
            print(f"  tier {tier}: segment {i + 1}/{args.segments}, {per * (i + 1):,} requests, "
                  f"PSS {mb:.1f} MiB, {rps:,.0f} req/s", flush=True)
    finally:
        p.terminate()
        p.wait(30)
    if any(x is None for x in pss):
        return {"tier": tier, "pss_mb": pss, "met": False, "verdict": "NOT MET: no PSS reading (fail closed)"}
    allowed = max(args.tolerance_mib, pss[1] * 0.03)
    grew = max(pss[2:] or pss[1:]) - pss[1]
    met = grew <= allowed
    return {"tier": tier, "pss_mb": pss, "growth_mib": grew, "allowed_mib": allowed, "met": met,
            "verdict": f"{'MET' if met else 'NOT MET'}: {grew:+.2f} MiB after the first segment "
                       f"(allowed {allowed:.2f})"}


def main():
    ap = argparse.ArgumentParser(prog="pss_growth.py", description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--segments", type=int, default=10)
    ap.add_argument("--tiers", default="0,0-article,1,2,3,3-threads,4")
    ap.add_argument("--tolerance-mib", type=float, default=2.0)
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.segments < 3 or args.requests < args.segments:
        ap.error("--segments must be at least 3 and --requests at least --segments")
    tiers = [t for t in args.tiers.split(",") if t]
    print(f"PSS over {args.requests:,} requests per tier in {args.segments} segments, 8 connections, "
          f"server on CPU {SERVER_CPU}, scalpel load on CPU {LOAD_CPU}; load average {os.getloadavg()[0]:.2f}; "
          f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "texts.txt")
        with open(data, "w") as f:
            f.writelines(urllib.parse.quote(t, safe="") + "\n" for _, t in TEXTS)
        for tier in tiers:
            try:
                results.append(run_tier(tier, args, data, tmp))
            except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
                results.append({"tier": tier, "met": False, "verdict": f"NOT MET: {e}"})
            print(f"tier {tier}: {results[-1]['verdict']}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0 if all(r["met"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
