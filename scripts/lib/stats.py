#!/usr/bin/env python3
"""The bench scripts' arithmetic, in one place: medians, spreads and ratios of repeated
runs, CPU per request, and the fields they read from `scalpel load --json` results, a
`/status` document, Prometheus text and serve's log.

Numbers come as arguments (a bash list such as "${RPS[serve]}" may be passed as one
argument: it is split on spaces) or, with none, one per line on stdin. `-d N` prints N
decimals (no -d: Python's shortest form), `-s` a sign on positive figures too. Subcommands:

  median [-d N] [-s] [X...]         the median
  minmax [-d N] [-s] [X...]         "min–max"
  summary [-d N] [-s] [X...]        "median (min–max)"
  ratio [-d N] A B                  median(A) / median(B); A and B are lists
  diff [-d N] [--scale K] A B       (median(A) - median(B)) * K
  scale [-d N] K A                  K * median(A)
  cpu-us T0 T1 N                    CPU µs per request: (T1 - T0) clock ticks over N requests
  step FILE EXPR [--target NAME]    EXPR (Python, over `s`) of the first step of a result
                                    file's first target (or the target named NAME)
  json EXPR                         EXPR (Python, over `d`) of the JSON document on stdin
  metric NAME [--label K] [--where K=V]...
                                    the samples of NAME in Prometheus text on stdin, as
                                    "LABEL-VALUE value, …" (none: "none")
  after LOG STOP_FILE TEXT          seconds from the time in STOP_FILE to the first line of
                                    serve's LOG (RFC 3339 stamps) holding TEXT after it
  quote TEXT                        TEXT percent-encoded for a URL query

`python3 scripts/lib/stats.py selftest` checks the arithmetic (run by scripts/test.sh).
"""

import argparse
import datetime
import json
import os
import re
import statistics
import sys
import urllib.parse


def numbers(args):
    """Floats from the arguments (each may hold several, space-separated), else stdin."""
    words = [w for a in args for w in a.split()] if args else sys.stdin.read().split()
    if not words:
        sys.exit("stats: no numbers")
    return [float(w) for w in words]


def fmt(x, digits, signed=False):
    sign = "+" if signed else ""
    if digits is None:
        return f"{x:{sign}}" if x != int(x) else f"{int(x):{sign}}"
    return f"{x:{sign}.{digits}f}"


def median(xs):
    return statistics.median(xs)


def minmax(xs, digits, signed=False):
    return f"{fmt(min(xs), digits, signed)}–{fmt(max(xs), digits, signed)}"


def summary(xs, digits, signed=False):
    return f"{fmt(median(xs), digits, signed)} ({minmax(xs, digits, signed)})"


def cpu_us(t0, t1, requests):
    """CPU µs per request from two clock-tick readings (`scalpel procstat --ticks`)."""
    return (float(t1) - float(t0)) / os.sysconf("SC_CLK_TCK") * 1e6 / max(1.0, float(requests))


def step_of(path, target=None):
    targets = json.load(open(path))["targets"]
    if target is not None:
        targets = [t for t in targets if t["name"] == target]
        if not targets:
            sys.exit(f"stats: no target {target!r} in {path}")
    return targets[0]["steps"][0]


def metric(text, name, label=None, where=()):
    """`label-value value` of each sample of `name` whose labels hold every `where` pair."""
    found = []
    for line in text.splitlines():
        m = re.match(r"([A-Za-z_:][\w:]*)(\{[^}]*\})?\s+(\S+)", line)
        if not m or m.group(1) != name:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        if any(labels.get(k) != v for k, v in where):
            continue
        value = float(m.group(3))
        found.append(f"{labels.get(label, '')} {value:.0f}".strip() if label else f"{value:.0f}")
    return ", ".join(found) if found else "none"


def after(log, stop_file, text):
    """Seconds from the stop time to the first log line holding `text` after it."""
    stop = float(open(stop_file).read())
    for line in open(log, errors="replace"):
        line = re.sub(r"\x1b\[[0-9;]*m", "", line)
        if text not in line:
            continue
        stamp = line.split()[0].rstrip("Z")
        t = datetime.datetime.fromisoformat(stamp).replace(tzinfo=datetime.timezone.utc).timestamp()
        if t > stop:
            return str(round(t - stop, 2))
    return "none"


def selftest():
    assert median([3, 1, 2]) == 2 and median([4, 1, 3, 2]) == 2.5
    assert summary([3.0, 1.0, 2.0], 1) == "2.0 (1.0–3.0)"
    assert fmt(2.0, None) == "2" and fmt(2.5, None) == "2.5"
    assert minmax([-1.234, 2.5], 2) == "-1.23–2.50"
    assert summary([-1.0, 0.5, 2.0], 2, True) == "+0.50 (-1.00–+2.00)"
    hz = os.sysconf("SC_CLK_TCK")
    assert abs(cpu_us(100, 100 + hz, 1000) - 1000.0) < 1e-9  # 1 s over 1000 requests
    assert cpu_us(5, 5, 0) == 0.0
    text = ('# TYPE x counter\nx{app="hello",outcome="taken"} 3\n'
            'x{app="other",outcome="taken"} 9\nx{app="hello",outcome="closed"} 1\nxy 5\n')
    assert metric(text, "x", "outcome", [("app", "hello")]) == "taken 3, closed 1"
    assert metric(text, "xy") == "5" and metric(text, "z") == "none"
    assert urllib.parse.quote("a b/?", safe="") == "a%20b%2F%3F"
    print("stats selftest: ok")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("median", "minmax", "summary"):
        s = sub.add_parser(name)
        s.add_argument("-d", type=int)
        s.add_argument("-s", action="store_true")
        s.add_argument("x", nargs="*")
    for name in ("ratio", "diff"):
        s = sub.add_parser(name)
        s.add_argument("-d", type=int)
        s.add_argument("--scale", type=float, default=1.0)
        s.add_argument("a")
        s.add_argument("b")
    s = sub.add_parser("scale")
    s.add_argument("-d", type=int)
    s.add_argument("k", type=float)
    s.add_argument("a")
    s = sub.add_parser("cpu-us")
    s.add_argument("t0")
    s.add_argument("t1")
    s.add_argument("n")
    s = sub.add_parser("step")
    s.add_argument("file")
    s.add_argument("expr")
    s.add_argument("--target")
    s = sub.add_parser("json")
    s.add_argument("expr")
    s = sub.add_parser("metric")
    s.add_argument("name")
    s.add_argument("--label")
    s.add_argument("--where", action="append", default=[])
    s = sub.add_parser("after")
    s.add_argument("log")
    s.add_argument("stop_file")
    s.add_argument("text")
    s = sub.add_parser("quote")
    s.add_argument("text")
    sub.add_parser("selftest")
    a = p.parse_args()

    if a.cmd == "median":
        print(fmt(median(numbers(a.x)), a.d, a.s))
    elif a.cmd == "minmax":
        print(minmax(numbers(a.x), a.d, a.s))
    elif a.cmd == "summary":
        print(summary(numbers(a.x), a.d, a.s))
    elif a.cmd == "ratio":
        print(fmt(median(numbers([a.a])) / median(numbers([a.b])), a.d))
    elif a.cmd == "diff":
        print(fmt((median(numbers([a.a])) - median(numbers([a.b]))) * a.scale, a.d))
    elif a.cmd == "scale":
        print(fmt(a.k * median(numbers([a.a])), a.d))
    elif a.cmd == "cpu-us":
        print(cpu_us(a.t0, a.t1, a.n))
    elif a.cmd == "step":
        print(eval(a.expr, {"s": step_of(a.file, a.target)}))
    elif a.cmd == "json":
        print(eval(a.expr, {"d": json.load(sys.stdin)}))
    elif a.cmd == "metric":
        print(metric(sys.stdin.read(), a.name, a.label, [w.split("=", 1) for w in a.where]))
    elif a.cmd == "after":
        print(after(a.log, a.stop_file, a.text))
    elif a.cmd == "quote":
        print(urllib.parse.quote(a.text, safe=""))
    elif a.cmd == "selftest":
        selftest()


if __name__ == "__main__":
    main()
