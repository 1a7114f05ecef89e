"""`./run demo`: the three stories end to end, on this machine, with one report.

    python3 scripts/demo [--full] [--only ladder,payments,runtime] [--report-only] [--skip-build]
                         [--db sqlite|postgres]

Run by scripts/demo.sh after the build; writes target/demo/index.html and report.json.
Quick by default (about a quarter of an hour on 2 cores); --full for the recorded figures. A
verdict says MET / NOT MET only when the repeats' interval lies wholly on one side of its
target and holds their median with at least 90% probability (five repeats), else "undecided"
with the interval (common.verdict)."""

import argparse
import datetime
import json
import os
import signal
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common as c  # noqa: E402
import ladder  # noqa: E402
import payments  # noqa: E402
import report  # noqa: E402
import runtime  # noqa: E402

# Durations as `scalpel load` takes them; ramp factors are fractions of a tier's closed rate.
# Every verdict comes from repeats (common.verdict: MET / NOT MET only when the repeats'
# interval is wholly on one side of the target, and that interval holds the median with at
# least 90% probability: five repeats or more): both profiles run each verdict-bearing
# measurement five times on the servers already started (quick with short steps); --full then
# again while a verdict is undecided, up to `decide_cap_s` seconds per measurement or
# `max_repeats` repeats. The fixed-load runs carry no verdict (their p99 and CPU ratios are
# shown with their spread): quick runs them twice, --full three times.
QUICK = {
    "mode": "quick",
    "ladder_closed": "2s", "ladder_rounds": 2, "ladder_repeats": 5, "ladder_ramp": (0.2, 0.15, 1.4),
    "ladder_step": "2s", "ladder_ramp_rounds": 1,
    "pay_ramp": (1000, 2000, 120000), "pay_step": "1s", "pay_fixed": "3s", "pay_endpoints": ["stats"],
    "pay_repeats": 5, "pay_fixed_repeats": 2,
    "rt_probe": "2s", "rt_ramp": (0.2, 0.15, 1.55), "rt_step": "2s", "rt_fixed": "3s", "rt_repeats": 5,
    "rt_fixed_repeats": 2,
    "ab_duration": "8s",
    "rt_workloads": ["hello", "uneven"], "rt_ab": True,
    # serve's max_in_flight_per_worker for the CPU-heavy workloads (0: least_conn alone; 1 since
    # the quiet --full run of 2026-12-02 00:05: on the uneven workload p99 0.48x pm2's against
    # 0.54x for least_conn alone, docs/BENCHMARKS.md); rt_split adds the story's "4 + 1" on the
    # uneven mix (heavy and light requests on a worker each) as a third setup; rt_hello_direct
    # runs hello world under serve's direct mode.
    "rt_serve_slots": 1, "rt_split": True, "rt_hello_direct": True,
    "until_decided": False, "decide_cap_s": 600, "max_repeats": 9,
}
FULL = dict(QUICK, **{
    "mode": "full",
    "ladder_closed": "5s", "ladder_rounds": 2, "ladder_repeats": 5, "ladder_ramp": (0.3, 0.1, 1.5),
    "ladder_step": "5s", "ladder_ramp_rounds": 2,
    "pay_ramp": (1000, 1000, 160000), "pay_step": "5s", "pay_fixed": "30s",
    "pay_endpoints": ["stats", "balance"], "pay_repeats": 5, "pay_fixed_repeats": 3,
    # Steps of 3% of BEFORE's closed rate: at 10% a ramp could end only at a few rates, so a
    # paired ratio moved in jumps of ~0.1x (docs/BENCHMARKS.md, the re-measure of #27).
    "rt_probe": "5s", "rt_ramp": (0.4, 0.03, 1.6), "rt_step": "3s", "rt_fixed": "15s", "rt_repeats": 5,
    "rt_fixed_repeats": 3,
    "ab_duration": "30s",
    "rt_workloads": ["hello", "qr", "uneven"],
    "until_decided": True,
})
STAGES = ["ladder", "payments", "runtime"]


def same_shape(value, like):
    """Whether a --set value fits where the profile has `like`: bools for bools, integers
    for integers, any number for a float, strings for strings, a list as long as a ramp
    tuple (element by element), a list of strings for a list of strings."""
    if isinstance(like, bool):
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if isinstance(like, int):
        return isinstance(value, int)
    if isinstance(like, float):
        return isinstance(value, (int, float))
    if isinstance(like, str):
        return isinstance(value, str)
    if isinstance(like, tuple):
        return (isinstance(value, list) and len(value) == len(like)
                and all(same_shape(v, w) for v, w in zip(value, like)))
    if isinstance(like, list):
        return isinstance(value, list) and all(same_shape(v, like[0]) for v in value) if like else True
    return False


def main():
    parser = argparse.ArgumentParser(prog="./run demo", description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true",
                        help=f"the recorded figures: longer steps, at least {FULL['rt_repeats']} repeats of each "
                             "measurement a verdict rests on, then more while its verdict is undecided: the cap is "
                             f"{FULL['decide_cap_s'] // 60} minutes (decide_cap_s) or {FULL['max_repeats']} repeats "
                             "(max_repeats) per measurement")
    parser.add_argument("--only", default=",".join(STAGES),
                        help="comma-separated stages to run (ladder, payments, runtime); the report "
                             "keeps the last results of the others")
    parser.add_argument("--skip-build", action="store_true", help="(read by scripts/demo.sh) measure what is built")
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite",
                        help="the payments ledger's store: an SQLite file (default) or a throw-away "
                             "PostgreSQL cluster (scripts/lib/pg.sh)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override one setting of the profile (VALUE as JSON, else a string), e.g. "
                             "--set pay_step=3s --set 'pay_ramp=[2000,2000,90000]' (scripts/bench-quiet.sh)")
    parser.add_argument("--report-only", action="store_true",
                        help="rebuild index.html from the last report.json without measuring")
    args = parser.parse_args()
    cfg = dict(FULL if args.full else QUICK)
    cfg["pay_db"] = args.db
    for item in args.set:
        key, eq, value = item.partition("=")
        if not eq or key not in cfg:
            print(f"demo: --set {item!r}: expected KEY=VALUE with KEY one of {', '.join(sorted(cfg))}",
                  file=sys.stderr)
            return 2
        try:
            parsed = json.loads(value)
        except ValueError:
            parsed = value
        # Checked now, not by a stage minutes into the run: the value must have the shape
        # of the profile's own (a number for a number, a 3-number ramp for a ramp, ...).
        if not same_shape(parsed, FULL[key]):
            print(f"demo: --set {item!r}: {key} takes a value like {json.dumps(FULL[key])}",
                  file=sys.stderr)
            return 2
        cfg[key] = tuple(parsed) if isinstance(FULL[key], tuple) else parsed
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    bad = [s for s in only if s not in STAGES]
    if bad:
        print(f"demo: unknown stage {bad[0]!r}; stages are {', '.join(STAGES)}", file=sys.stderr)
        return 2
    os.makedirs(c.OUT, exist_ok=True)
    path = os.path.join(c.OUT, "report.json")
    previous = {}
    if os.path.exists(path):
        with open(path) as f:
            previous = json.load(f)
    if args.report_only:
        if not previous:
            print(f"demo: no {path} yet; run ./run demo first", file=sys.stderr)
            return 2
        report.write(previous)
        print(f"demo: wrote {os.path.join(c.OUT, 'index.html')}")
        return 0

    started = time.monotonic()
    data = {k: v for k, v in previous.items() if k in ("ladder", "payments", "runtime", "ab")}
    data.pop("failures", None)
    data.update({
        "format": 1,
        "mode": cfg["mode"],
        "started_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": c.machine(),
        "pinning": c.PINNING_NOTE,
        "loadavg_start": c.loadavg(),
        "stages_run": only,
    })
    c.log(f"{cfg['mode']} run on {data['machine']['cpus']} CPUs ({data['machine']['cpu_model']}), "
          f"load average {data['loadavg_start']}; {c.PINNING_NOTE}")
    failures = []
    for stage, module in (("ladder", ladder), ("payments", payments), ("runtime", runtime)):
        if stage not in only:
            continue
        t0 = time.monotonic()
        # A stage's old figures never stand in for a run that failed.
        for key in (["runtime", "ab"] if stage == "runtime" else [stage]):
            data.pop(key, None)
        c.log(f"stage {stage}: start")
        try:
            module.run(cfg, data)
        except Exception as e:  # noqa: BLE001 - one stage's fault must not lose the others' figures
            if not isinstance(e, c.DemoError):
                traceback.print_exc()
            failures.append(f"{stage}: {e}")
            data.setdefault("failures", []).append(f"{stage}: {e}")
            c.log(f"stage {stage}: FAILED: {e}")
        else:
            c.log(f"stage {stage}: done in {time.monotonic() - t0:.0f} s")
    data["duration_s"] = round(time.monotonic() - started, 1)
    data["loadavg_end"] = c.loadavg()
    c.write_json(path, data)
    report.write(data)
    c.log(f"report: {os.path.join(c.OUT, 'index.html')} and {path} "
          f"({data['duration_s']:.0f} s, load average {data['loadavg_end']})")
    if failures:
        for f in failures:
            print(f"demo: {f}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    # A SIGTERM (kill, a CI time-out) unwinds like Ctrl-C, so every stage's `finally` stops
    # the servers, pm2 and load generators it started instead of leaving them running.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
