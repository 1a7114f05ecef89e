"""What every stage of the demo shares: processes started pinned and stopped by pid, the
`scalpel` binary, small HTTP helpers, statistics and plain-text tables.

Standard library only (the demo must run wherever ./run build ran)."""

import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "scripts", "lib"))
import paired  # noqa: E402  the one paired-interval helper (scripts/lib/paired.py)

TARGET = os.path.abspath(os.environ.get("CARGO_TARGET_DIR") or os.path.join(ROOT, "target"))
# DEMO_OUT: another folder (scripts/bench-quiet.sh keeps its runs apart from the demo's report).
OUT = os.path.abspath(os.environ.get("DEMO_OUT") or os.path.join(TARGET, "demo"))
SCALPEL = os.path.join(TARGET, "release", "scalpel")

# The CPU the servers run on and the one the load generator runs on (2-core layout).
SERVER_CPU = "1"
LOAD_CPU = "0"


class DemoError(Exception):
    """A stage cannot go on (a server did not start, a tool failed)."""


def log(message):
    """A progress line, with the time since the demo started."""
    elapsed = time.monotonic() - log.start
    print(f"[demo {int(elapsed) // 60:2d}:{int(elapsed) % 60:02d}] {message}", flush=True)


log.start = time.monotonic()


def section(title):
    print(f"\n{'=' * 100}\n{title}\n{'=' * 100}", flush=True)


def machine():
    """What the figures were measured on."""
    model = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem_kib = 0
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem_kib = int(line.split()[1])
    except OSError:
        pass
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "memory_gib": round(mem_kib / 1024 / 1024, 1),
        "kernel": os.uname().release,
        "host": os.uname().nodename,
        "node": tool_version(["node", "--version"]),
        "go": tool_version(["go", "version"]),
        "rustc": tool_version(["rustc", "--version"]),
    }


def tool_version(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "?"


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def pinning():
    """Whether taskset may pin to CPUs 0 and 1 here; the reason when not."""
    if (os.cpu_count() or 1) < 2:
        return False, "one CPU only: server and load generator share it"
    if not shutil.which("taskset"):
        return False, "taskset is not installed: the scheduler places server and generator"
    for cpu in (SERVER_CPU, LOAD_CPU):
        r = subprocess.run(["taskset", "-c", cpu, "true"], capture_output=True, text=True)
        if r.returncode != 0:
            return False, f"taskset -c {cpu} is not allowed here ({r.stderr.strip()})"
    return True, f"servers pinned to CPU {SERVER_CPU}, load generator to CPU {LOAD_CPU} (taskset)"


_PINNING = []


def __getattr__(name):
    # PINNED and PINNING_NOTE, found out on first use: a run that measures nothing (bad
    # arguments, --report-only, the tests) starts no taskset on a possibly busy CPU.
    if name in ("PINNED", "PINNING_NOTE"):
        if not _PINNING:
            _PINNING.extend(pinning())
        return _PINNING[0] if name == "PINNED" else _PINNING[1]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def on_cpu(cpu, argv):
    """argv run on one CPU when pinning is allowed."""
    if __getattr__("PINNED") and cpu is not None:
        return ["taskset", "-c", cpu] + list(argv)
    return list(argv)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_ports(n):
    """n distinct free ports (held open together so they differ)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


_BLOCKS_GIVEN = []


def ephemeral_low():
    """The first port of the kernel's ephemeral range (outgoing connections take their local
    ports from it); 32768 when it cannot be read."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def port_block(count, lo=20000, hi=None):
    """A base port with `count` consecutive free ports (scalpel serve's port_base), never
    overlapping a block given before in this run: a probe cannot see a block whose
    workers have not bound it yet. Free means bindable (a socket bound but not listening,
    or an outgoing connection's local port, refuses no connection yet takes the port), and
    the block lies below the ephemeral range (`hi` defaults to its start), where no
    outgoing connection takes a port between the probe and the workers' bind."""
    hi = ephemeral_low() if hi is None else hi
    for base in range(lo, hi - count + 1, count + 7):
        if any(base < end and b < base + count for b, end in _BLOCKS_GIVEN):
            continue
        if ports_bindable(range(base, base + count)):
            _BLOCKS_GIVEN.append((base, base + count))
            return base
    raise DemoError(f"no {count} consecutive free ports in {lo}..{hi}")


def ports_bindable(ports):
    """Whether every port can be bound on 127.0.0.1 now (all held together while probed)."""
    socks = []
    try:
        for p in ports:
            s = socket.socket()
            socks.append(s)
            s.bind(("127.0.0.1", p))
        return True
    except OSError:
        return False
    finally:
        for s in socks:
            s.close()


class Procs:
    """The processes a stage started: every one is stopped by its pid, never by name."""

    def __init__(self):
        self.started = []

    def start(self, name, argv, cpu=SERVER_CPU, env=None, cwd=None, ready=None, timeout=60):
        """Starts argv (pinned to `cpu`), waits for `ready` (a regex on stdout, or a URL
        answering 2xx), returns (Popen, url-or-match)."""
        os.makedirs(os.path.join(OUT, "logs"), exist_ok=True)
        out_path = os.path.join(OUT, "logs", f"{name}.out")
        err_path = os.path.join(OUT, "logs", f"{name}.err")
        full_env = dict(os.environ)
        full_env.update(env or {})
        with open(out_path, "w") as out, open(err_path, "w") as err:
            p = subprocess.Popen(on_cpu(cpu, argv), stdout=out, stderr=err, env=full_env,
                                 cwd=cwd, start_new_session=True)
        self.started.append((name, p))
        deadline = time.monotonic() + timeout
        found = None
        while time.monotonic() < deadline:
            if p.poll() is not None:
                raise DemoError(f"{name} exited with {p.returncode} while starting: "
                                f"{tail(err_path) or tail(out_path)}")
            if isinstance(ready, str) and ready.startswith("http://"):
                if http_status(ready) == 200:
                    found = ready
                    break
            elif ready is not None:
                m = re.search(ready, read(out_path))
                if m:
                    found = m.group(1) if m.groups() else m.group(0)
                    break
            else:
                found = ""
                break
            time.sleep(0.1)
        else:
            raise DemoError(f"{name} did not start within {timeout} s: {tail(err_path)}")
        return p, found

    def stop(self, p, grace=10):
        """SIGTERM to the process (its session, so a wrapper's children go too), then SIGKILL."""
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                p.wait(grace)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()
        self.started = [(n, q) for n, q in self.started if q is not p]

    def stop_all(self):
        for _, p in reversed(list(self.started)):
            self.stop(p)


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def tail(path, lines=3):
    return " | ".join(read(path).strip().splitlines()[-lines:])


def http_get(url, headers=None, timeout=30):
    """(status, headers, body) of a GET; (0, {}, b"") when nothing answered."""
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()
    except (urllib.error.URLError, OSError):
        return 0, {}, b""


def http_status(url):
    return http_get(url, timeout=2)[0]


def scalpel_load(args, json_path, cpu=LOAD_CPU, while_running=None):
    """Runs `scalpel load` (pinned to the generator's CPU, one thread) and returns the result
    file's content; `while_running` is called about once a second meanwhile. Exit 1 (an SLO
    broke) is a result, not a failure."""
    argv = [SCALPEL, "load", "--no-progress", "--threads", "1", "--json", json_path] + args
    if os.path.exists(json_path):
        os.remove(json_path)  # never read a previous run's file as this one's
    with open(json_path + ".txt", "w") as log_file:
        p = subprocess.Popen(on_cpu(cpu, argv), stdout=log_file, stderr=subprocess.STDOUT)
        while True:
            try:
                p.wait(1.0)
                break
            except subprocess.TimeoutExpired:
                if while_running:
                    while_running()
    if p.returncode not in (0, 1) or not os.path.exists(json_path):
        raise DemoError(f"scalpel load failed ({p.returncode}): {tail(json_path + '.txt')[:400]}")
    with open(json_path) as f:
        return json.load(f)


def scalpel(args, check=True):
    r = subprocess.run([SCALPEL] + args, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise DemoError(f"scalpel {' '.join(args[:2])} failed ({r.returncode}): {r.stderr.strip()[:400]}")
    return r


def target_of(result, name):
    for t in result["targets"]:
        if t["name"] == name:
            return t
    raise DemoError(f"no target {name} in the result")


def latency(step, key):
    """A latency figure of a step in ms; None when nothing was sent (the file says null)."""
    summary = step.get("latency_ms")
    return None if summary is None else summary.get(key)


def cpu_us_per_request(step):
    """CPU time of the watched tree per completed request, µs."""
    if step.get("cpu_percent") is None or not step.get("achieved_rps"):
        return None
    return step["cpu_percent"] / 100.0 / step["achieved_rps"] * 1e6


def breaking_rps(target):
    """The rate that held the SLO (the ramp's top when it never broke), and whether the
    ramp's top was reached without breaking (a lower bound). Only a step judged held counts
    (`slo_held` true: answers that met the SLO); a target with no such step held nothing
    (0, not a lower bound), whatever else the file says."""
    bp = target.get("breaking_point")
    held = [s["offered_rps"] for s in target.get("steps", []) if s.get("slo_held") is True]
    if bp is None:
        return (max(held), True) if held else (0.0, False)
    return bp["rps"], False


def max_ratio(a, b):
    """a / b for two rates held at an SLO; None when either is missing or 0: a maximum of 0
    is "below the ramp's first step", a bound and not a figure, so no ratio is taken."""
    return ratio(a or None, b or None)


def fmt_max(v, lower_bound=False, first_step=None):
    """A rate held at an SLO: "< FIRST" when it held not even the ramp's first step, ">= V"
    when the ramp's top held (a lower bound), else the figure."""
    if v is None:
        return "-"
    if not v:
        return f"< {fmt_num(first_step, 0)}" if first_step else "< first step"
    return (">= " if lower_bound else "") + fmt_num(v)


def max_ratio_repeat(a, a_lower, b, b_lower):
    """a / b for one repeat's two rates held at an SLO, and what the figure is: (ratio,
    None) when both are figures, (ratio, "at_least") when only a held the ramp's top (its
    true maximum is higher, so is the ratio), (ratio, "at_most") when only b did; (None,
    None) when either held not even the first step or both held the top: no figure."""
    if not a or not b or (a_lower and b_lower):
        return None, None
    return a / b, ("at_least" if a_lower else "at_most" if b_lower else None)


# A verdict needs an interval that holds the median of the repeats' ratios with at least this
# probability: min–max of five repeats (93.75%), or paired.py's order-statistics interval.
DECIDE_COVERAGE = 0.9
DECIDING_REPEATS = next(n for n in range(2, 20) if paired.coverage(n) >= DECIDE_COVERAGE)


def verdict(values, want, bounds=None):
    """The verdict of one target "ratio >= want" from its repeats, failing closed.

    `values` holds one figure per repeat (each from one run in which both sides alternated;
    None: that repeat gave no figure, e.g. a side answered nothing or held not even the
    ramp's first step); `bounds` says per repeat whether the figure is exact (None), a lower
    bound ("at_least") or an upper bound ("at_most"). The interval is scripts/lib/paired.py's:
    the order-statistics ~95% interval of the median, or min–max when there are too few
    repeats for one. MET only when the whole interval is >= want, NOT MET only when it is
    wholly below; anything else is "undecided", and so are: an interval that holds the
    median with less than DECIDE_COVERAGE probability (min–max of fewer than five repeats:
    two repeats both above a target are what a coin gives half the time, and a quick run's
    MET 0.83x (0.82–0.85x, two repeats) was a longer run's 0.61x (0.52–0.70x) on the same
    machine), a repeat without a figure (no evidence never counts for either side), a MET
    that rests on upper bounds or a NOT MET on lower bounds. `want` None: the interval
    alone (verdict None)."""
    bounds = list(bounds) if bounds is not None else [None] * len(values)
    got = [v for v in values if v is not None]
    out = {"want": want, "repeats": len(values), "values": list(values), "bounds": bounds,
           "median": None, "lo": None, "hi": None, "coverage": None, "interval": None}
    if got:
        out["median"], out["lo"], out["hi"], out["coverage"] = paired.interval(got)
        out["interval"] = paired.describe(out["coverage"]) if len(got) > 1 else "one repeat"
    if want is None:
        out["verdict"], out["why"] = None, "no target: the interval alone"
    elif len(got) < len(values):
        out["verdict"] = "undecided"
        out["why"] = f"{len(values) - len(got)} of {len(values)} repeats gave no figure"
    elif len(got) < 2:
        out["verdict"], out["why"] = "undecided", "one repeat: no interval (a second run could reverse it)"
    else:
        side = paired.verdict_at_least(out["lo"], out["hi"], want)
        cover = out["coverage"] or paired.coverage(len(got))
        if side != "not-shown" and cover < DECIDE_COVERAGE:
            out["verdict"] = "undecided"
            out["why"] = (f"all {len(got)} repeats {'above' if side == 'met' else 'below'} the target, but "
                          f"min–max of {len(got)} holds the median with {cover * 100:.0f}% probability; "
                          f"a verdict needs {DECIDE_COVERAGE * 100:.0f}%, {DECIDING_REPEATS} repeats")
        elif side == "met" and "at_most" in bounds:
            out["verdict"], out["why"] = "undecided", "above the target, but some repeats are upper bounds"
        elif side == "not-met" and "at_least" in bounds:
            out["verdict"], out["why"] = "undecided", "below the target, but some repeats are lower bounds"
        elif side == "met":
            out["verdict"], out["why"] = "MET", "the whole interval is at or above the target"
        elif side == "not-met":
            out["verdict"], out["why"] = "NOT MET", "the whole interval is below the target"
        else:
            out["verdict"], out["why"] = "undecided", "the interval straddles the target"
    out["text"] = verdict_text(out)
    return out


def verdict_text(v):
    """One line: "MET: 1.52x (1.45x–1.61x, min–max of 2 repeats), target >= 1.40x", "undecided (the
    interval straddles the target): ..." and the like."""
    if v["verdict"] is None:
        return verdict_figure(v)
    head = v["verdict"] if v["verdict"] != "undecided" else f"undecided ({v['why']})"
    return f"{head}: {verdict_figure(v)}, target >= {fmt_ratio(v['want'])}"


def verdict_figure(v):
    """The figure a verdict rests on: "1.52x (1.45x–1.61x, min–max of 2 repeats)"."""
    n = v["repeats"]
    if v["median"] is None:
        return f"no figure ({n} repeat{'s' if n != 1 else ''})"
    kind = "min–max" if not v["coverage"] else f"~{v['coverage'] * 100:.0f}% interval"
    lb = ", some repeats lower bounds (the first side held the ramp's top)" if "at_least" in v["bounds"] else ""
    ub = ", some repeats upper bounds (the second side held the ramp's top)" if "at_most" in v["bounds"] else ""
    got = len([x for x in v["values"] if x is not None])
    return (f"{fmt_ratio(v['median'])} ({fmt_ratio(v['lo'])}–{fmt_ratio(v['hi'])}, {kind} of "
            f"{got} repeat{'s' if got != 1 else ''}){lb}{ub}")


def served_target(label, num, den, want):
    """A "num >= want x den in served req/s" target of the ladder from two tiers' rows (each
    with `repeats`: per closed repeat, req/s and CPU µs per request, both tiers measured in
    the same alternating run). The verdict is on req/s; the CPU-second ratio's interval is
    shown beside it (on a shared core, req/s follows the CPU share each server got)."""
    pairs = list(zip(num["repeats"], den["repeats"]))
    by_rps = verdict([ratio(a["rps"], b["rps"]) for a, b in pairs], want)
    by_core = verdict([ratio(b["cpu_us_per_request"], a["cpu_us_per_request"]) for a, b in pairs], None)
    if by_rps["verdict"] != "MET" and by_core["lo"] is not None and by_core["lo"] >= want:
        note = (f"per CPU-second {verdict_figure(by_core)}, wholly above: on a shared core req/s follows the "
                "CPU share each server got")
    else:
        note = f"per CPU-second {fmt_ratio(by_core['median'])}"
    return {"target": label, "req_s_ratio": by_rps["median"], "per_core_ratio": by_core["median"], "want": want,
            "met": by_rps["verdict"] == "MET", "decision": by_rps["verdict"], "interval": by_rps,
            "per_core": by_core, "note": note, "verdict": f"{by_rps['text']}; {note}"}


def repeats(cfg, what, undecided, minimum):
    """The repeat numbers of one measurement (0, 1, ...): `minimum` of them, then in --full
    (cfg["until_decided"]) more while `undecided()` says a verdict is still open, as long as
    one more repeat (as long as the longest so far) fits in cfg["decide_cap_s"] seconds of
    this measurement, and at most cfg["max_repeats"] in all."""
    start = time.monotonic()
    longest = 0.0
    r = 0
    while True:
        if r >= minimum:
            if not cfg.get("until_decided") or not undecided():
                return
            spent = time.monotonic() - start
            if r >= cfg["max_repeats"] or spent + longest > cfg["decide_cap_s"]:
                log(f"{what}: still undecided after {r} repeats ({spent:.0f} s; the cap is "
                    f"{cfg['decide_cap_s']:.0f} s or {cfg['max_repeats']} repeats)")
                return
            log(f"{what}: undecided after {r} repeats: one more")
        t0 = time.monotonic()
        yield r
        longest = max(longest, time.monotonic() - t0)
        r += 1


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def spread(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return None
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


# ---------------------------------------------------------------------------------------
# Plain-text tables, printed as each stage finishes.

def fmt_num(v, digits=1):
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.{digits}f}"


def fmt_ms(v):
    if v is None:
        return "-"
    if v >= 100:
        return f"{v:,.1f}"
    if v >= 1:
        return f"{v:.2f}"
    return f"{v:.3f}"


def fmt_ratio(v):
    if v is None:
        return "-"
    if v >= 100:
        return f"{v:.0f}x"
    if v >= 10:
        return f"{v:.1f}x"
    return f"{v:.2f}x"


def ratio(a, b):
    if a is None or b is None or b == 0:
        return None
    return a / b


def table(headers, rows, left=1):
    """Rows of strings, right-aligned except the first `left` columns."""
    cells = [list(map(str, headers))] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for n, r in enumerate(cells):
        parts = [c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))]
        lines.append("  ".join(parts).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def write_json(path, value):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(value, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)


def die(message):
    print(f"demo: {message}", file=sys.stderr)
    sys.exit(1)
