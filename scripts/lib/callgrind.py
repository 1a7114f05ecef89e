"""Reads a callgrind output file (valgrind --tool=callgrind --compress-strings=no) into
per-function figures: self instructions, inclusive instructions, and how often each
function was called — all divided by a count of requests, for "where a request's
instructions go". Standard library only.

    python3 scripts/lib/callgrind.py FILE [--per N] [--top 30] [--calls malloc,free]
    python3 scripts/lib/callgrind.py --selftest

`--calls` names functions (exact symbol names, or a prefix ending in `*`) whose call counts
are printed per request: the allocator entry points count allocations without a counting
allocator in the product. The file must be written with `--compress-strings=no` when it is
one of several dumps of a run (`callgrind_control -d`): a compressed dump names a function
by a number defined only in an earlier dump.
"""

import argparse
import collections
import re
import sys

_NAMED = re.compile(r"^(c?fn|c?ob|c?fl|fi|fe)=(?:\((\d+)\))?\s*(.*)$")


def parse(text):
    """(total, self_cost, inclusive, calls) of a callgrind file's text: dicts by function
    name; `inclusive` sums what callers paid for each call into it (a recursive function's
    figure counts its recursion again)."""
    total = 0
    self_cost = collections.Counter()
    inclusive = collections.Counter()
    calls = collections.Counter()
    names = {}
    fn = None
    callee = None
    pending_calls = 0
    after_calls = False
    for line in text.splitlines():
        if not line:
            continue
        if line.startswith(("summary:", "totals:")):
            total = max(total, int(line.split()[1]))
            continue
        m = _NAMED.match(line)
        if m:
            kind, ident, name = m.groups()
            if kind in ("fn", "cfn"):
                if ident is not None and name:
                    names[ident] = name
                resolved = names.get(ident, name) if ident is not None else name
                if kind == "fn":
                    fn = resolved
                else:
                    callee = resolved
            continue
        if line.startswith("calls="):
            pending_calls = int(line[6:].split()[0])
            after_calls = True
            continue
        if line[0].isdigit() or line[0] in "+-*":
            parts = line.split()
            cost = int(parts[1]) if len(parts) > 1 else 0
            if after_calls:
                inclusive[callee] += cost
                calls[callee] += pending_calls
                after_calls = False
            elif fn is not None:
                self_cost[fn] += cost
    for f, c in self_cost.items():
        inclusive.setdefault(f, 0)
    # A function nobody called within the dump (a thread's entry) is its own inclusive
    # root: its self cost plus its calls' costs, counted above only for callees.
    return total, self_cost, inclusive, calls


def matches(name, patterns):
    return any(name.startswith(p[:-1]) if p.endswith("*") else name == p for p in patterns)


def report(path, per, top, call_names, out=sys.stdout):
    total, self_cost, inclusive, calls = parse(open(path, errors="replace").read())
    per = per or 1
    print(f"total: {total:,} instructions; per request: {total / per:,.0f}", file=out)
    print(f"\nself instructions per request (top {top}):", file=out)
    for name, c in self_cost.most_common(top):
        print(f"{c / per:10,.0f}  {100 * c / max(total, 1):5.1f}%  {name}", file=out)
    if call_names:
        print("\ncalls per request:", file=out)
        for name, n in sorted(calls.items(), key=lambda kv: -kv[1]):
            if matches(name, call_names):
                print(f"{n / per:8.2f}  {name}  (inclusive {inclusive[name] / per:,.0f} instructions per request)", file=out)


def _selftest():
    sample = """events: Ir
summary: 1000
fn=(1) main
0 100
cfn=(2) malloc
calls=4 0
0 400
cfn=(3) work
calls=1 0
0 500
fn=(2)
0 400
fn=(3)
0 450
cfn=(2)
calls=1 0
0 50
"""
    total, s, inc, calls = parse(sample)
    assert total == 1000, total
    assert s == {"main": 100, "malloc": 400, "work": 450}, s
    assert calls["malloc"] == 5 and calls["work"] == 1, calls
    assert inc["malloc"] == 450 and inc["work"] == 500, inc
    assert matches("__rust_alloc", ["__rust_*"]) and not matches("malloc_x", ["malloc"])
    print("callgrind.py: ok")


if __name__ == "__main__":
    if sys.argv[1:] == ["--selftest"]:
        _selftest()
        sys.exit(0)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file")
    ap.add_argument("--per", type=int, default=1, help="divide by this many requests")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--calls", default="", help="comma-separated names (a trailing * is a prefix)")
    a = ap.parse_args()
    report(a.file, a.per, a.top, [c for c in a.calls.split(",") if c])
