"""Tests of the demo's own logic (scripts/demo), standard library `unittest` only:

    python3 -m unittest discover -s scripts/demo/tests      (./run test, step "demo-py")

Real counterparts throughout: ports are bound, `scalpel load` (the release build under
$CARGO_TARGET_DIR) ramps against small HTTP servers on loopback through the demo's own
`scalpel_load`, and the CLI runs as a subprocess. Each test writes under its own DEMO_OUT."""

import contextlib
import http.server
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import importlib.util
import threading
import time
import unittest
import unittest.mock

HERE = os.path.dirname(os.path.abspath(__file__))
DEMO = os.path.dirname(HERE)
# Set before `common` is imported: it reads DEMO_OUT once.
_OUT = tempfile.TemporaryDirectory(prefix="demo-test-")
os.environ["DEMO_OUT"] = _OUT.name
sys.path.insert(0, DEMO)

import common as c  # noqa: E402
import report  # noqa: E402
import runtime  # noqa: E402

_spec = importlib.util.spec_from_file_location("demo_main", os.path.join(DEMO, "__main__.py"))
DEMO_MAIN = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(DEMO_MAIN)


def bind_all(ports):
    """Binds every port on 127.0.0.1 at once (raises OSError if one is taken); the sockets."""
    socks = []
    try:
        for p in ports:
            s = socket.socket()
            socks.append(s)
            s.bind(("127.0.0.1", p))
    except OSError:
        for s in socks:
            s.close()
        raise
    return socks


class PortBlock(unittest.TestCase):
    def test_blocks_are_never_handed_out_twice_and_every_port_binds(self):
        blocks = [(b, b + n) for n in (4, 12, 4, 12, 4, 4) for b in [c.port_block(n)]]
        for i, (b1, e1) in enumerate(blocks):
            for b2, e2 in blocks[i + 1:]:
                self.assertFalse(b1 < e2 and b2 < e1, f"blocks overlap: {blocks}")
        # All of them bound together: the ports are free, and distinct.
        socks = bind_all([p for b, e in blocks for p in range(b, e)])
        for s in socks:
            s.close()

    def test_a_port_bound_but_not_listening_is_not_free(self):
        # A socket bound without listening refuses connections, yet the port is taken: a
        # worker told to listen there would fail. The connect probe took it for free.
        holder = socket.socket()
        holder.bind(("127.0.0.1", 0))  # a port no block was given from: the kernel's pick
        probe = holder.getsockname()[1]
        try:
            base = c.port_block(4, lo=probe, hi=probe + 200)
            self.assertFalse(base <= probe < base + 4, f"block {base}..{base + 3} holds taken {probe}")
            for s in bind_all(range(base, base + 4)):
                s.close()
        finally:
            holder.close()

    def test_blocks_stay_below_the_ephemeral_range(self):
        low = c.ephemeral_low()
        base = c.port_block(4)
        self.assertLessEqual(base + 4, low)
        # A block that would cross into the range is not given at all.
        with self.assertRaises(c.DemoError):
            c.port_block(4, lo=low - 2)


class _Handler(http.server.BaseHTTPRequestHandler):
    # Per server: answer 500 to every `fail_every`-th request (0: never); a silent one
    # answers the first request (`scalpel load`'s reachability probe), then closes every
    # connection without an answer; one with `fail_after` answers 500 once it has answered
    # that many requests (a quota used up: where a ramp breaks it depends on the requests
    # sent, never on the machine's timing).
    def do_GET(self):
        srv = self.server
        with srv.lock:
            srv.count += 1
            fail = (srv.fail_every and srv.count % srv.fail_every == 0) or 0 < srv.fail_after < srv.count
        if srv.silent and srv.count > 1:
            self.close_connection = True
            return
        body = b"no" if fail else b"ok"
        self.send_response(500 if fail else 200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def server(fail_every=0, silent=False, fail_after=0):
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.daemon_threads = True
    srv.lock, srv.count, srv.fail_every, srv.silent = threading.Lock(), 0, fail_every, silent
    srv.fail_after = fail_after
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


RAMP_START = 20


class Once:
    """A real run that several tests read: made by the first test that asks (`make`), kept;
    a failure is kept too, not retried by every test."""

    value = None
    error = None

    @classmethod
    def get(cls):
        if cls.error is not None:
            raise AssertionError(cls.error)
        if cls.value is None:
            cls.error = f"{cls.__name__} failed (see the first test that ran it)"
            if not os.path.exists(c.SCALPEL):
                raise AssertionError(f"{c.SCALPEL} is not built: run scripts/build.sh (./run test does)")
            cls.value = cls.make()
            cls.error = None
        return cls.value


class RealRamp(Once):
    """One real `scalpel load` ramp (20 then 40 req/s, 500 ms steps) over four targets: one
    that always answers, one that fails every third request, one that always fails, and
    one that answers nothing (closes every connection)."""

    path = None

    @classmethod
    def make(cls):
        d = os.path.join(c.OUT, "ramp")
        os.makedirs(d, exist_ok=True)
        cls.path = os.path.join(d, "ramp.json")
        with server() as ok, server(3) as flaky, server(1) as failing, server(silent=True) as silent:
            return c.scalpel_load(
                ["--ramp", f"{RAMP_START},{RAMP_START},{2 * RAMP_START}", "--step-duration", "500ms",
                 "--slo", "p99<2s,errors<1%", "-c", "4", "--rounds", "1", "--timeout", "2s",
                 "--target", f"ok={ok}", "--target", f"flaky={flaky}", "--target", f"failing={failing}",
                 "--target", f"silent={silent}", "/"], cls.path, cpu=None)


RATE_RAMP = (20, 20, 120)
# RATE_RAMP's 500 ms steps send 10, 20, 30, ... requests: a server that answers the
# reachability probe and the first two steps (+ 5 to spare) holds 40 req/s, one that
# answers the first four holds 80.
LOW_QUOTA, LOW_HOLDS = 1 + 10 + 20 + 5, 40.0
HIGH_QUOTA, HIGH_HOLDS = 1 + 10 + 20 + 30 + 40 + 5, 80.0


class RateRamps(Once):
    """Two real `scalpel load` ramps (20 to 120 req/s by 20, 500 ms steps, the targets one
    after the other in each step), the repeats of one measurement, over four targets: one
    that always answers (holds the top: a lower bound), two that answer 500 once their quota
    is used up (hold 40 and 80: ratios of exactly 2 and 0.5), one that answers nothing."""

    @classmethod
    def make(cls):
        d = os.path.join(c.OUT, "rate-ramps")
        os.makedirs(d, exist_ok=True)
        results = []
        for r in range(2):
            with server() as fast, server(fail_after=LOW_QUOTA) as low, server(fail_after=HIGH_QUOTA) as high, \
                    server(silent=True) as silent:
                results.append(c.scalpel_load(
                    ["--ramp", ",".join(map(str, RATE_RAMP)), "--step-duration", "500ms", "--rounds", "1",
                     "--slo", "p99<2s,errors<1%", "-c", "4", "--timeout", "2s", "--target", f"fast={fast}",
                     "--target", f"low={low}", "--target", f"high={high}", "--target", f"silent={silent}", "/"],
                    os.path.join(d, f"ramp-{r + 1}.json"), cpu=None))
        return results

    @classmethod
    def maxima(cls, repeats=2):
        """The runtime stage's per-ramp maxima and lower-bound flags, from the real ramps;
        more repeats than the two ramps take their figures in turn (the rule under test is
        arithmetic over per-repeat figures; two real ramps show the reading of each)."""
        maxima, lower = {}, {}
        ramps = cls.get()
        for res in (ramps[i % len(ramps)] for i in range(repeats)):
            for t in res["targets"]:
                held, lb = c.breaking_rps(t)
                maxima.setdefault(t["name"], []).append(held)
                lower.setdefault(t["name"], []).append(lb)
        return maxima, lower


class VerdictRule(unittest.TestCase):
    """common.verdict, through the runtime stage's rate_verdict, on real ramps: MET or NOT
    MET only when the repeats' interval is wholly on one side of the target and holds their
    median with at least 90% probability (five repeats, c.DECIDING_REPEATS)."""

    def setUp(self):
        self.maxima, self.lower = RateRamps.maxima()
        self.five = RateRamps.maxima(repeats=5)
        # The ramps did what the servers were built for (else the rule is not what is tested).
        self.assertEqual(self.maxima["low"], [LOW_HOLDS] * 2, self.maxima)
        self.assertEqual(self.maxima["high"], [HIGH_HOLDS] * 2, self.maxima)
        self.assertEqual(self.maxima["fast"], [float(RATE_RAMP[2])] * 2)
        self.assertEqual(self.lower["fast"], [True, True])

    def test_an_interval_wholly_above_the_target_is_met(self):
        v = runtime.rate_verdict(*self.five, "high", "low", 1.4)
        self.assertEqual((v["verdict"], v["lo"], v["hi"], v["repeats"]), ("MET", 2.0, 2.0, 5), v)
        self.assertIsNone(v["coverage"], "five repeats: min–max, not paired.py's 95% interval")
        self.assertIn("MET: 2.00x (2.00x–2.00x, min–max of 5 repeats)", v["text"])

    def test_an_interval_wholly_below_the_target_is_not_met(self):
        v = runtime.rate_verdict(*self.five, "low", "high", 1.4)
        self.assertEqual((v["verdict"], v["lo"], v["hi"]), ("NOT MET", 0.5, 0.5), v)

    def test_too_few_repeats_to_hold_the_median_are_undecided_either_side(self):
        # The reversal this rule stops: a quick run's two repeats both above a target (MET
        # 0.83x, 0.82–0.85x) and the next, longer run's three below it (0.61x, 0.52–0.70x).
        # Min–max of n repeats holds the median with probability 1 - 2^(1-n): 50% for two,
        # 75% for three, 87.5% for four; a verdict needs 90%.
        self.assertEqual(c.DECIDING_REPEATS, 5)
        for n in (2, 3, 4):
            maxima, lower = RateRamps.maxima(repeats=n)
            for after, before, side in (("high", "low", "above"), ("low", "high", "below")):
                with self.subTest(repeats=n, side=side):
                    v = runtime.rate_verdict(maxima, lower, after, before, 1.4)
                    self.assertEqual((v["verdict"], v["repeats"]), ("undecided", n), v)
                    self.assertIn(f"all {n} repeats {side} the target", v["why"])
                    self.assertIn(f"with {round(100 * (1 - 2 ** (1 - n)))}% probability", v["why"])
        quick = c.verdict([0.82, 0.85], 0.8)
        longer = c.verdict([0.70, 0.52, 0.61], 0.8)
        self.assertEqual((quick["verdict"], longer["verdict"]), ("undecided", "undecided"))
        self.assertEqual(c.verdict([0.70, 0.52, 0.61, 0.66, 0.58], 0.8)["verdict"], "NOT MET")

    def test_a_second_run_that_reverses_the_first_leaves_it_undecided(self):
        # Repeat 1 as measured (high / low = 2), repeat 2 reversed (low / high = 0.5): the
        # interval straddles the target, so neither MET nor NOT MET.
        m = {"after": [self.maxima["high"][0], self.maxima["low"][1]],
             "before": [self.maxima["low"][0], self.maxima["high"][1]]}
        lb = {"after": [False, False], "before": [False, False]}
        v = runtime.rate_verdict(m, lb, "after", "before", 1.4)
        self.assertEqual((v["verdict"], v["lo"], v["hi"]), ("undecided", 0.5, 2.0), v)
        self.assertIn("straddles", v["text"])

    def test_one_repeat_is_never_decided(self):
        maxima, lower = RateRamps.maxima(repeats=1)
        for after, before in (("high", "low"), ("low", "high")):
            v = runtime.rate_verdict(maxima, lower, after, before, 1.4)
            self.assertEqual(v["verdict"], "undecided", v)
            self.assertIn("one repeat", v["text"])

    def test_no_answers_is_never_met(self):
        # The silent target held nothing: no figure either way, whatever the other held.
        for after, before in (("fast", "silent"), ("silent", "fast"), ("high", "silent")):
            v = runtime.rate_verdict(self.maxima, self.lower, after, before, 1.0)
            self.assertEqual(v["verdict"], "undecided", (after, before, v))
            self.assertIsNone(v["median"])
            self.assertIn("2 of 2 repeats gave no figure", v["text"])
        # One repeat above the target and one where BEFORE answered nothing: still undecided.
        m = {"after": self.maxima["high"], "before": [self.maxima["low"][0], self.maxima["silent"][1]]}
        lb = {"after": self.lower["high"], "before": [self.lower["low"][0], self.lower["silent"][1]]}
        v = runtime.rate_verdict(m, lb, "after", "before", 1.4)
        self.assertEqual((v["verdict"], v["values"]), ("undecided", [2.0, None]), v)
        self.assertIn("1 of 2 repeats gave no figure", v["text"])

    def test_bounds_decide_only_the_side_they_bound(self):
        # fast held the ramp's top: fast / high >= 1.5 is a lower bound. It cannot show
        # "below 2", and high / fast <= 0.67 cannot show "above 0.5".
        v = runtime.rate_verdict(*self.five, "fast", "high", 2.0)
        self.assertEqual(v["verdict"], "undecided", v)
        self.assertEqual(v["bounds"], ["at_least"] * 5)
        v = runtime.rate_verdict(*self.five, "fast", "high", 1.4)
        self.assertEqual(v["verdict"], "MET", v)
        v = runtime.rate_verdict(*self.five, "high", "fast", 0.5)
        self.assertEqual(v["verdict"], "undecided", v)
        v = runtime.rate_verdict(*self.five, "high", "fast", 1.0)
        self.assertEqual(v["verdict"], "NOT MET", v)

    def test_full_mode_repeats_while_undecided_up_to_its_cap(self):
        cfg = {"until_decided": True, "decide_cap_s": 3600, "max_repeats": 4}
        with contextlib.redirect_stdout(io.StringIO()):  # its progress lines
            self.assertEqual(list(c.repeats(cfg, "test", lambda: True, 2)), [0, 1, 2, 3])
            self.assertEqual(list(c.repeats(cfg, "test", lambda: False, 2)), [0, 1])
            self.assertEqual(list(c.repeats(dict(cfg, until_decided=False), "test", lambda: True, 2)), [0, 1])
            # A cap the next repeat would pass stops it (the repeats here take ~0.2 s each).
            ran = []
            for r in c.repeats(dict(cfg, decide_cap_s=0.3), "test", lambda: True, 1):
                ran.append(r)
                time.sleep(0.2)
        self.assertEqual(ran, [0])


class RuntimeRamp(unittest.TestCase):
    def test_hello_starts_low_enough_to_hold_its_first_step(self):
        # --full's 40% start left 5 of 18 hello ramps without a figure (held < 40% under
        # p99<20ms); hello starts at 20% in both profiles, the CPU-heavy mixes as profiled.
        full, quick = DEMO_MAIN.FULL, DEMO_MAIN.QUICK
        by_name = {w["name"]: w for w in runtime.workloads()}
        self.assertEqual(runtime.ramp_rates(full, by_name["hello"], 57600), (11520, 1728, 92160))
        self.assertEqual(runtime.ramp_rates(quick, by_name["hello"], 57600)[0], 11520)
        self.assertEqual(runtime.ramp_rates(full, by_name["uneven"], 1000)[0], 400)


class QuietSummary(unittest.TestCase):
    """scripts/bench-quiet-summary.py, run as bench-quiet.sh runs it, on the direct part's
    table: direct vs pm2 is judged from each side's min–max, never from the median alone."""

    def summary(self, direct, pm2):
        script = os.path.join(os.path.dirname(DEMO), "bench-quiet-summary.py")
        with tempfile.TemporaryDirectory(prefix="quiet-summary-") as d:
            log = os.path.join(d, "direct.log")
            with open(log, "w") as f:
                f.write(f"| direct | {direct} |\n| pm2 | {pm2} |\n| proxy | 20000 (19000–21000) | 60.0 (59.0–61.0) |\n")
            r = subprocess.run([sys.executable, script, "direct", "14", log, "0", "60", "0.1", "0.2", "2", "cpu",
                                "cmd", d], capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        return [x for x in r.stdout.splitlines() if x.startswith("- req/s") or x.startswith("- CPU per request")]

    def test_a_median_above_with_overlapping_sides_is_undecided(self):
        rps, cpu = self.summary("30000 (26000–31000) | 40.0 (39.0–46.0)", "27000 (26500–28500) | 45.0 (44.0–46.0)")
        self.assertIn("**1.11x** (target ≥ 1.0x): **undecided** (median 1.11x, 0.91–1.17x", rps)
        self.assertIn("**undecided** (median 0.89x, 0.85–1.05x", cpu)

    def test_sides_wholly_apart_decide(self):
        rps, cpu = self.summary("30000 (29000–31000) | 40.0 (39.0–41.0)", "27000 (26500–28500) | 45.0 (44.0–46.0)")
        self.assertIn("**met** (median 1.11x, 1.02–1.17x", rps)
        self.assertIn("**met** (median 0.89x, 0.85–0.93x", cpu)
        rps, _ = self.summary("20000 (19000–21000) | 40.0 (39.0–41.0)", "27000 (26500–28500) | 45.0 (44.0–46.0)")
        self.assertIn("**NOT met**", rps)


class SloVerdict(unittest.TestCase):
    """The demo's reading of `scalpel load`'s verdicts (c.breaking_rps) fails closed."""

    def test_a_target_that_answers_holds_the_ramp_top_as_a_lower_bound(self):
        self.assertEqual(c.breaking_rps(c.target_of(RealRamp.get(), "ok")), (2.0 * RAMP_START, True))

    def test_failed_requests_or_no_answers_hold_nothing(self):
        res = RealRamp.get()
        for name in ("flaky", "failing", "silent"):
            t = c.target_of(res, name)
            self.assertIs(t["steps"][0]["slo_held"], False, name)
            held, lower_bound = c.breaking_rps(t)
            self.assertEqual((held, lower_bound), (0, False), name)
            self.assertEqual(c.fmt_max(held, lower_bound, RAMP_START), f"< {RAMP_START}")

    def test_steps_without_a_verdict_are_not_a_pass(self):
        # An interrupted run: its only step is partial (no verdict), no breaking point.
        # Nothing held, so nothing is a lower bound (it was ">= 0").
        t = {"breaking_point": None, "steps": [{"offered_rps": 100.0, "slo_held": None, "partial": True}]}
        self.assertEqual(c.breaking_rps(t), (0.0, False))
        t = {"breaking_point": None, "steps": []}
        self.assertEqual(c.breaking_rps(t), (0.0, False))


class Ratios(unittest.TestCase):
    def test_no_ratio_from_a_max_below_the_first_step(self):
        self.assertIsNone(c.max_ratio(0.0, 1000.0))
        self.assertIsNone(c.max_ratio(1000.0, 0.0))
        self.assertIsNone(c.max_ratio(None, 1000.0))
        self.assertAlmostEqual(c.max_ratio(1500.0, 1000.0), 1.5)
        self.assertEqual(c.fmt_ratio(c.max_ratio(0.0, 1000.0)), "-")

    def test_max_shown_as_bound_or_figure(self):
        self.assertEqual(c.fmt_max(0.0, False, 1000), "< 1,000")
        self.assertEqual(c.fmt_max(0.0, False, None), "< first step")
        self.assertEqual(c.fmt_max(None), "-")
        self.assertEqual(c.fmt_max(4000.0, True, 1000), ">= 4,000")
        self.assertEqual(c.fmt_max(300.0, False, 100), "300.0")

    def test_payments_ratio_refuses_a_zero_max(self):
        import payments
        e = payments.summarize_endpoint(
            "stats", {"go": [0.0], "rust": [3000.0]}, {"go": [False], "rust": [False]}, {"go": [None], "rust": [50.0]},
            100, {"go": [], "rust": []}, [], [], ramp_start=1000)
        self.assertIsNone(e["max_ratio"], "Rust / a Go max below the first step is no ratio")
        self.assertEqual(e["target"]["verdict"], "undecided", "no figure is never a verdict")
        self.assertEqual(e["ramp_start"], 1000)

    def test_payments_ladder_of_three_judges_and_shows_each_rung(self):
        import payments
        # Steps as `scalpel load` writes them: CPU% of a core at 1,000 req/s achieved.
        step = lambda cpu: {"achieved_rps": 1000.0, "cpu_percent": cpu, "pss_mb": 50.0, "latency_ms": {"p99": 5.0}}
        maxima = {"go": [4000.0, 5000.0, 4000.0, 5000.0, 4500.0], "cgo": [9000.0, 11000.0, 9000.0, 10500.0, 9500.0],
                  "rust": [16000.0, 15000.0, 13000.0, 16000.0, 14000.0]}
        summarize = lambda n: payments.summarize_endpoint(
            "stats", {k: v[:n] for k, v in maxima.items()}, {k: [False] * n for k in payments.TIERS},
            {k: [90.0] * n for k in payments.TIERS}, 2000,
            {"go": [step(9.0)], "cgo": [step(5.0)], "rust": [step(3.0)]}, [], [], ramp_start=1000)
        e = summarize(5)
        self.assertEqual(e["target_cgo"]["verdict"], "MET", "cgo / Go per ramp: 2.25x, 2.2x, 2.25x, 2.1x, 2.11x")
        self.assertEqual(e["target"]["verdict"], "MET", "Rust / Go per ramp: 4x, 3x, 3.25x, 3.2x, 3.11x")
        self.assertEqual((summarize(2)["target"]["verdict"], summarize(2)["target_cgo"]["verdict"]),
                         ("undecided", "undecided"), "two ramps both above cannot decide")
        # Go's HTTP layer: the cgo rung's CPU per request minus the Rust service's (50 - 30 µs).
        self.assertAlmostEqual(e["fixed"]["go_http_layer_us"], 20.0)
        heads, rows = payments.endpoint_table(e)
        self.assertEqual(heads[1:6], [payments.LABELS[n] for n in payments.TIERS] + ["cgo/go", "rust/go"])
        self.assertTrue(all(len(r) == len(heads) for r in rows), "one cell per column in every row")
        cpu_row = next(r for r in rows if r[0] == "CPU µs per request")
        self.assertEqual(cpu_row[1:6], ["90.0", "50.0", "30.0", "0.56x", "0.33x"])
        page = report.payments_section(
            {"pinning": "p", "users": 3, "shadow": {"compared": 1, "matched": 1, "mismatched": 0, "errors": 0,
                                                    "table": "t"},
             "endpoints": {"stats": dict(e, ramp_files=[None], fixed_files=[None])}, "slo": "p99<50ms",
             "cost": {"command": "scalpel report cost", "table": "c"}}, [])
        self.assertIn(payments.LABELS["cgo"], page)
        self.assertIn("Target: the cgo engine's max &gt;= 2.00x Go's", page)


def workload_from(res):
    """The runtime stage's result for the uneven workload (runtime.summarize's), from one real
    ramp: BEFORE (nginx-pm2) is the target that answered (it held the ramp's top), serve the
    one that failed every third request (it held not even the first step); the ramp's first
    step stands in for the fixed-load run."""
    names = {"nginx-pm2": "ok", "serve": "flaky"}
    w = dict(next(x for x in runtime.workloads() if x["name"] == "uneven"), slo="p99<2s,errors<1%")
    maxima, lower, fixed = {}, {}, {}
    for k, n in names.items():
        held, lb = c.breaking_rps(c.target_of(res, n))
        maxima[k], lower[k], fixed[k] = [held], [lb], [c.target_of(res, n)["steps"][0]]
    return runtime.summarize(w, list(names), "proxy", 1, 100.0, RAMP_START, maxima, lower, RAMP_START, fixed,
                             None, [RealRamp.path], [RealRamp.path])


def run_cli(*args, out):
    env = dict(os.environ, DEMO_OUT=out)
    return subprocess.run([sys.executable, DEMO] + list(args), capture_output=True, text=True, env=env,
                          timeout=120)


class Report(unittest.TestCase):
    def test_the_runtime_table_prints_a_bound_and_no_ratio(self):
        w = workload_from(RealRamp.get())
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            runtime.print_workload(w)
        lines = buf.getvalue().splitlines()
        line = next(x for x in lines if x.startswith("max req/s"))
        self.assertIn(f">= {c.fmt_num(2.0 * RAMP_START)}", line)
        self.assertTrue(line.rstrip().endswith(f"< {RAMP_START}"), line)
        # No ratio from a max below the first step, so no verdict either.
        verdict = next(x for x in lines if x.startswith("target: "))
        self.assertIn("undecided (1 of 1 repeats gave no figure): no figure", verdict)

    def test_report_only_renders_a_recorded_results_file(self):
        w = workload_from(RealRamp.get())
        with tempfile.TemporaryDirectory(prefix="demo-report-") as out:
            data = {"format": 1, "mode": "quick", "started_at": "2026-12-02T00:00:00+00:00",
                    "machine": {"cpus": 2, "cpu_model": "test"}, "pinning": "not pinned (test)", "loadavg_start": c.loadavg(),
                    "loadavg_end": c.loadavg(), "duration_s": 3.0, "stages_run": ["runtime"],
                    "runtime": {"rps": w["rps"], "p99_ms": w["p99_ms"], "workloads": [w], "note": "a test"},
                    "failures": ["payments: a stage that failed"]}
            c.write_json(os.path.join(out, "report.json"), data)
            r = run_cli("--report-only", out=out)
            self.assertEqual(r.returncode, 0, r.stderr)
            page = c.read(os.path.join(out, "index.html"))
        self.assertIn("<h2>1. The tier ladder, served</h2><p class=\"note\">not run</p>", page)
        cells = lambda key: [x.split("<")[0] for x in
                             page[page.index(f'<th class="left">{key}: '):].split("</tr>")[0].split("<td>")[1:]]
        self.assertEqual(cells("nginx-pm2")[0], f"&gt;= {c.fmt_num(2.0 * RAMP_START)}")
        self.assertEqual(cells("serve")[0], f"&lt; {RAMP_START}")
        self.assertEqual(cells("serve")[2:4], ["-", "- (0 of 1)"], "no ratio, no interval")
        self.assertIn('<span class="target-open">undecided</span>: no figure (1 repeat), target &gt;= 1.40x — '
                      "1 of 1 repeats gave no figure", page)
        # The headline card: the verdict with what its interval rests on, never MET.
        card = page[page.index('<div class="card-name" style="color:#7c3aed">runtime'):]
        card = card[:card.index('<div class="card-note">')]
        self.assertIn('<span class="target-open">undecided</span> no figure in 1 repeat', card)
        # The ramp's own page (`scalpel report html` on the recorded file) is folded in.
        folded = page[page.index("<details><summary>uneven: the first ramp"):]
        self.assertIn('<div class="embedded">', folded[:200])
        self.assertIn("flaky", folded, "the ramp page names its targets")
        self.assertIn("Stages that failed", page)
        self.assertIn("payments: a stage that failed", page)

    def test_report_only_without_results_says_so_in_one_line(self):
        with tempfile.TemporaryDirectory(prefix="demo-report-") as out:
            r = run_cli("--report-only", out=out)
        self.assertEqual(r.returncode, 2)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        self.assertIn("report.json", r.stderr)


def run_main(*args, out):
    """The CLI's main() in this process (a process start costs a second or two on a busy
    machine): (exit code, stderr)."""
    err = io.StringIO()
    with unittest.mock.patch.object(sys, "argv", ["demo"] + list(args)), \
            unittest.mock.patch.object(c, "OUT", out), contextlib.redirect_stderr(err), \
            contextlib.redirect_stdout(io.StringIO()):
        code = DEMO_MAIN.main()
    return code, err.getvalue()


class Cli(unittest.TestCase):
    """The refusals: one line on stderr, exit 2, before anything starts (DEMO_OUT is not
    even created). The first through a real process (its exit code), the rest through the
    same main() in this one."""

    def assert_refused(self, *args, want, process=False):
        with tempfile.TemporaryDirectory(prefix="demo-cli-") as parent:
            out = os.path.join(parent, "out")
            if process:
                r = run_cli(*args, out=out)
                code, err = r.returncode, r.stderr
            else:
                code, err = run_main(*args, out=out)
            self.assertEqual(code, 2, err)
            self.assertEqual(len(err.strip().splitlines()), 1, err)
            self.assertIn(want, err)
            self.assertFalse(os.path.exists(out), "refused after it started")

    def test_set_rejects_an_unknown_key(self):
        self.assert_refused("--set", "no_such_key=1", want="--set 'no_such_key=1': expected KEY=VALUE",
                            process=True)

    def test_set_rejects_a_missing_value(self):
        self.assert_refused("--set", "pay_step", want="expected KEY=VALUE")

    def test_set_rejects_a_value_of_the_wrong_shape(self):
        # These were taken and failed minutes later, inside a stage (or, for the string,
        # matched workload names by substring).
        for item, want in [("ladder_rounds=two", "ladder_rounds takes a value like 2"),
                           ("pay_ramp=[1000,2000]", "pay_ramp takes a value like [1000, 1000, 160000]"),
                           ("rt_workloads=uneven", "rt_workloads takes a value like"),
                           ("rt_ab=1", "rt_ab takes a value like true"),
                           ("rt_serve_slots=true", "rt_serve_slots takes a value like 1"),
                           ("pay_step=3", "pay_step takes a value like \"5s\"")]:
            with self.subTest(item):
                self.assert_refused("--set", item, want=want)

    def test_only_rejects_an_unknown_stage(self):
        self.assert_refused("--only", "ladder,nope", want="unknown stage 'nope'")

    def test_set_takes_the_forms_bench_quiet_uses(self):
        with tempfile.TemporaryDirectory(prefix="demo-cli-") as out:
            c.write_json(os.path.join(out, "report.json"), {"format": 1, "machine": {}})
            code, err = run_main("--report-only", "--set", "pay_step=1s", "--set", "pay_ramp=[2000,4000,30000]",
                                 "--set", "ladder_ramp=[0.5,0.5,1.5]", "--set", 'rt_workloads=["uneven"]',
                                 "--set", "rt_ab=false", "--set", "rt_serve_slots=1", out=out)
            self.assertEqual(code, 0, err)
            self.assertTrue(os.path.exists(os.path.join(out, "index.html")))


class RunHelp(unittest.TestCase):
    """`./run STEP --help` prints what the step does and exits 0 without building, testing or
    measuring: before, `./run demo --help` ran the whole setup and build first, and
    `./run fuzz --help` started a 15-minute fuzz run. The real `run` script, with a PATH that
    holds no cargo, npm or go: a step that started anything would fail, not answer."""

    def test_every_step_answers_help_at_once(self):
        root = os.path.dirname(os.path.dirname(DEMO))
        with tempfile.TemporaryDirectory(prefix="run-help-") as bare:
            # Only the tools the help path needs: a started build would find no cargo.
            os.symlink(sys.executable, os.path.join(bare, "python3"))
            for tool in ("bash", "awk", "dirname", "env"):
                path = shutil.which(tool)
                self.assertIsNotNone(path, f"{tool} is not on PATH")
                os.symlink(path, os.path.join(bare, tool))
            env = {"PATH": bare, "HOME": bare, "DEMO_OUT": os.path.join(bare, "demo")}
            for step, want in [(["setup"], "Installs the toolchain"), (["build"], "Builds every binary"),
                               (["test"], "Runs everything CI checks"), (["fuzz"], "The long fuzz run"),
                               (["screenshots"], "Regenerates the screenshots"),
                               (["bench", "qr"], "QR ladder"), (["bench", "quiet"], "QUIET machine"),
                               (["demo"], "usage: ./run demo")]:
                for flag in ("--help", "-h"):
                    with self.subTest(step=step, flag=flag):
                        r = subprocess.run([os.path.join(root, "run")] + step + [flag], capture_output=True,
                                           text=True, env=env, timeout=30)
                        self.assertEqual(r.returncode, 0, r.stderr)
                        self.assertIn(want, r.stdout)
                        self.assertEqual(r.stderr, "")
            self.assertFalse(os.path.exists(env["DEMO_OUT"]), "the demo started")


if __name__ == "__main__":
    unittest.main()
