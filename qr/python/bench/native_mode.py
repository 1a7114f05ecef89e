"""Tier 3 of the Python host, sync or on a thread pool, served: both servers up at once on
one pinned CPU, `scalpel load` on the other, closed model at 1, 8 and 100 connections,
the two targets alternating in segments (--rounds), the five bench texts.

    python qr/python/bench/native_mode.py [--duration 3s] [--rounds 3]

Prints req/s, p99 and the CPU µs per request of each server's process tree (scalpel's
sampler) per concurrency. On a shared core, req/s follows the CPU share the scheduler
gives each server (a process with more runnable threads gets more of a contended core);
CPU per request does not."""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from pss_growth import SCALPEL, SERVE, TARGET, pinned  # noqa: E402
from texts import TEXTS  # noqa: E402


def start(mode):
    p = subprocess.Popen(pinned("1", [SERVE, "--tier", "3", "--native-mode", mode, "--port", "0"]),
                         stdout=subprocess.PIPE, text=True, env={**os.environ, "CARGO_TARGET_DIR": TARGET})
    m = re.search(r"(http://\S+)", p.stdout.readline())
    if not m:
        p.kill()
        raise SystemExit(f"native_mode: the {mode} server did not start")
    return p, m.group(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", default="3s")
    ap.add_argument("--rounds", default="3")
    a = ap.parse_args()
    servers = {mode: start(mode) for mode in ("sync", "threads")}
    print(f"load average {os.getloadavg()[0]:.2f}; servers on CPU 1, scalpel load on CPU 0")
    print(f"{'conns':>5} {'mode':8} {'req/s':>8} {'p99 ms':>8} {'CPU µs/req':>11}")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            data = os.path.join(tmp, "texts.txt")
            with open(data, "w") as f:
                f.writelines(urllib.parse.quote(t, safe="") + "\n" for _, t in TEXTS)
            for conns in (1, 8, 100):
                out = os.path.join(tmp, f"{conns}.json")
                argv = [SCALPEL, "load", "--no-progress", "--threads", "1", "-c", str(conns), "-d", a.duration,
                        "--rounds", a.rounds, "--data", data, "--json", out]
                for mode, (p, url) in servers.items():
                    argv += ["--target", f"{mode}={url}", "--watch-pid", f"{mode}={p.pid}"]
                subprocess.run(pinned("0", argv + ["/qrcode?text={text:raw}"]), capture_output=True, check=False)
                with open(out) as f:
                    for t in json.load(f)["targets"]:
                        s = t["steps"][0]
                        cpu = s.get("cpu_percent")
                        per = cpu / 100 / s["achieved_rps"] * 1e6 if cpu and s["achieved_rps"] else None
                        print(f"{conns:>5} {t['name']:8} {s['achieved_rps']:>8.0f} {s['latency_ms']['p99']:>8.2f} "
                              f"{per if per is None else round(per, 1):>11}", flush=True)
    finally:
        for p, _ in servers.values():
            p.terminate()
            p.wait(30)


if __name__ == "__main__":
    main()
