"""Story 1: the payments service's hot endpoints as a ladder of three over one 16,000-user
ledger — an SQLite file, or with `--db postgres` the same ledger in a throw-away PostgreSQL
cluster (scripts/lib/pg.sh): Go (the legacy, tier 0), Go with the Rust core linked in by cgo
(`payments-go --engine rust`, tier 3) and the separate Rust service (tier 4). Shadow replay
of every user on every hot endpoint and window (Go against each Rust rung), the three ramped
to failure under one SLO on one pinned core in alternation, the fixed-load table in the
story's format, and the cost projection of each (`scalpel report cost`)."""

import os
import subprocess

import common as c

USERS = 16000
SEED = 1
SLO = "p99<50ms,errors<1%"
# The hot endpoints and the stats windows (days) a client asks for.
ENDPOINTS = ["balance", "stats?days=1", "stats?days=7", "stats?days=30", "stats?days=365"]
# The story's fleet: 80k QPS at the fixed load; its projection (400 vCPU, ~$300k a year) implies
# $300,000 / 400 vCPU / 8,760 h = $0.0856 per vCPU-hour.
FLEET_QPS = 80000
VCPU_HOUR_PRICE = "0.0856"
HEADROOM = "0.3"
# The ladder's rungs, in the order of every table: the load's target names and their labels.
TIERS = ("go", "cgo", "rust")
LABELS = {"go": "Go (tier 0)", "cgo": "Go + Rust via cgo (tier 3)", "rust": "Rust service (tier 4)"}
STORY = {"max_rps": {"go": 85000, "rust": 150000}, "fixed": {"rps": 80000, "cpu_percent": {"go": 78.3, "rust": 52.0},
         "memory_percent": {"go": 7.4, "rust": 2.07}, "p99_ms": {"go": 19.87, "rust": 4.79}},
         "vcpu_saved": 400, "yearly_saving": 300000}


def run(cfg, report):
    out = os.path.join(c.OUT, "payments")
    os.makedirs(out, exist_ok=True)
    # The ledger is kept where ./run bench payments keeps it: same seed, same rows.
    ledger_dir = os.path.join(c.TARGET, "bench", "payments")
    os.makedirs(ledger_dir, exist_ok=True)
    db = os.path.join(ledger_dir, f"ledger-{USERS}-{SEED}.db")
    ids = os.path.join(ledger_dir, f"ids-{USERS}-{SEED}.txt")
    pay = os.path.join(c.TARGET, "release", "payments")
    go = os.path.join(c.TARGET, "payments-go")
    if not (os.path.exists(db) and os.path.exists(ids)):
        c.log(f"payments: generating the {USERS:,}-user ledger (kept for the next runs)")
        r = subprocess.run([pay, "generate", "--users", str(USERS), "--seed", str(SEED), "--db", db,
                            "--ids-out", ids, "--force"], capture_output=True, text=True)
        if r.returncode != 0:
            raise c.DemoError(f"payments generate failed: {r.stderr.strip()}")
    with open(ids) as f:
        users = [line.strip() for line in f if line.strip()]

    store = cfg.get("pay_db", "sqlite")
    procs = c.Procs()
    cluster = None
    try:
        if store == "postgres":
            cluster, db = postgres_ledger(pay)
        ready = r"listening on (http://[0-9.:]+)"
        gp, go_url = procs.start("payments-go", [go, "--db", db, "--port", "0"], ready=ready)
        cp, cgo_url = procs.start("payments-go-cgo", [go, "--db", db, "--port", "0", "--engine", "rust"],
                                  ready=ready)
        rp, rust_url = procs.start("payments-rust", [pay, "serve", "--db", db, "--port", "0"], ready=ready)
        urls = {"go": go_url, "cgo": cgo_url, "rust": rust_url}
        pids = {"go": gp.pid, "cgo": cp.pid, "rust": rp.pid}
        c.log(f"payments: Go {go_url}, Go + Rust via cgo {cgo_url} and Rust {rust_url} over {len(users):,} "
              f"users on {store} ({c.PINNING_NOTE})")

        shadow = replay(out, go_url, rust_url, users)
        c.log(f"payments: shadow replay Go vs Rust service: {shadow['compared']:,} pairs, "
              f"{shadow['consistency_percent']}% consistent")
        shadow_cgo = replay(out, go_url, cgo_url, users, name="replay-cgo")
        c.log(f"payments: shadow replay Go vs Go + Rust via cgo: {shadow_cgo['compared']:,} pairs, "
              f"{shadow_cgo['consistency_percent']}% consistent")

        targets = [a for n in TIERS for a in ("--target", f"{n}={urls[n]}")]
        targets += [a for n in TIERS for a in ("--watch-pid", f"{n}={pids[n]}")]
        targets += ["--data", ids, "--shuffle", "1"]
        endpoints = {}
        for ep in cfg["pay_endpoints"]:
            path = f"/v1/users/{{id}}/{ep}"
            maxima = {n: [] for n in TIERS}
            lower = {n: [] for n in TIERS}
            ramp_files = []
            top_cpu = {n: [] for n in TIERS}
            # Ramps repeat until both rungs' targets are decided (--full; at least pay_repeats).
            undecided = lambda: any(max_verdict(maxima, lower, n)["verdict"] == "undecided" for n in TARGETS)
            for r in c.repeats(cfg, f"payments: {ep}: ramp", undecided, cfg["pay_repeats"]):
                lo, step, hi = cfg["pay_ramp"]
                c.log(f"payments: {ep}: ramp {lo},{step},{hi} req/s, {cfg['pay_step']} steps, SLO {SLO}, "
                      f"the three alternating (repeat {r + 1})")
                f = os.path.join(out, f"ramp-{ep}-{r + 1}.json")
                res = c.scalpel_load(["--ramp", f"{lo},{step},{hi}", "--step-duration", cfg["pay_step"],
                                      "--slo", SLO, "-c", "64"] + targets + [path], f)
                ramp_files.append(f)
                for name in TIERS:
                    t = c.target_of(res, name)
                    held, lb = c.breaking_rps(t)
                    maxima[name].append(held)
                    lower[name].append(lb)
                    top_cpu[name].append(cpu_at_held(t, held))
            go_max = c.median(maxima["go"])
            rate = max(100, int(go_max / 2))
            fixed_files = []
            fixed = {n: [] for n in TIERS}
            for r in range(cfg["pay_fixed_repeats"]):
                c.log(f"payments: {ep}: fixed {rate:,} req/s (half Go's max) for {cfg['pay_fixed']} "
                      f"(repeat {r + 1})")
                f = os.path.join(out, f"fixed-{ep}-{r + 1}.json")
                res = c.scalpel_load(["--rate", str(rate), "-d", cfg["pay_fixed"], "-c", "64"] + targets + [path], f)
                fixed_files.append(f)
                for name in TIERS:
                    fixed[name].append(c.target_of(res, name)["steps"][0])
            endpoints[ep] = summarize_endpoint(ep, maxima, lower, top_cpu, rate, fixed, ramp_files,
                                               fixed_files, ramp_start=cfg["pay_ramp"][0])
    finally:
        procs.stop_all()
        if cluster:
            subprocess.run(["bash", PG_SH, "stop", cluster], check=False)

    main_ep = cfg["pay_endpoints"][0]
    cost = projection(endpoints[main_ep]["fixed_files"][0])
    # The card's spread: the same projection from every fixed-load run.
    cost["yearly_saving_all"] = [projection(f).get("yearly_saving") for f in endpoints[main_ep]["fixed_files"]]
    result = {
        "store": store,
        "users": len(users),
        # The report's headline: the lower of the two replays (Go against each Rust rung).
        "consistency_percent": min(shadow["consistency_percent"] or 0, shadow_cgo["consistency_percent"] or 0),
        "shadow": shadow,
        "shadow_cgo": shadow_cgo,
        "tiers": {n: LABELS[n] for n in TIERS},
        "endpoint": main_ep,
        "max_rps": endpoints[main_ep]["max_rps"],
        "max_rps_lower_bound": endpoints[main_ep]["max_rps_lower_bound"],
        "fixed": endpoints[main_ep]["fixed"],
        "cost": cost,
        "endpoints": endpoints,
        "slo": SLO,
        "story": STORY,
        "pinning": c.PINNING_NOTE,
    }
    report["payments"] = result
    print_tables(result)
    return result


PG_SH = os.path.join(c.ROOT, "scripts", "lib", "pg.sh")


def postgres_ledger(pay):
    """A throw-away cluster (stopped by the caller, or by pg.sh's watcher if the demo dies)
    holding the same ledger as the SQLite file: returns (its directory, its URL)."""
    r = subprocess.run(["bash", PG_SH, "start", "--watch", str(os.getpid())], capture_output=True, text=True)
    lines = r.stdout.split()
    if r.returncode != 0 or len(lines) != 2:
        raise c.DemoError(f"starting PostgreSQL (scripts/lib/pg.sh; ./run setup installs it): {r.stderr.strip()}")
    cluster, url = lines
    c.log(f"payments: generating the {USERS:,}-user ledger into PostgreSQL ({cluster})")
    r = subprocess.run([pay, "generate", "--users", str(USERS), "--seed", str(SEED), "--db", url],
                       capture_output=True, text=True)
    if r.returncode != 0:
        subprocess.run(["bash", PG_SH, "stop", cluster], check=False)
        raise c.DemoError(f"payments generate into PostgreSQL failed: {r.stderr.strip()}")
    return cluster, url


def replay(out, go_url, rust_url, users, name="replay"):
    """Every user on every hot endpoint and window, compared field by field."""
    data = os.path.join(out, "replay.csv")
    with open(data, "w") as f:
        f.write("id,endpoint\n")
        for u in users:
            for ep in ENDPOINTS:
                f.write(f"{u},{ep}\n")
    json_path = os.path.join(out, f"{name}.json")
    html_path = os.path.join(out, f"{name}.html")
    c.log(f"payments: shadow replay of {len(users) * len(ENDPOINTS):,} requests "
          f"({len(users):,} users x {len(ENDPOINTS)} endpoints and windows), {go_url} vs {rust_url}")
    r = c.scalpel(["shadow", "replay", "--primary", go_url, "--candidate", rust_url,
                   "--template", "/v1/users/{id}/{endpoint:raw}", "--data", data, "-c", "32",
                   "--route", "/v1/users/{id}/balance", "--route", "/v1/users/{id}/stats",
                   "--json", json_path, "--html", html_path], check=False)
    if r.returncode not in (0, 1) or not os.path.exists(json_path):
        raise c.DemoError(f"shadow replay failed ({r.returncode}): {r.stderr.strip()[:300]}")
    import json
    with open(json_path) as f:
        summary = json.load(f)
    s = summary.get("summary", summary)
    return {
        "compared": s.get("compared"),
        "matched": s.get("matched"),
        "mismatched": s.get("mismatched"),
        "errors": s.get("errors"),
        "consistency_percent": s.get("consistency_percent"),
        "passed": r.returncode == 0,
        "table": r.stdout,
        "json": json_path,
        "html": html_path,
    }


TARGET = 3.0
# Each Rust rung's target against Go: the Rust service's (#13) and the cgo engine's (#30).
TARGETS = {"rust": TARGET, "cgo": 2.0}


def max_verdict(maxima, lower, rung="rust"):
    """A rung's max / Go's per ramp (all in one alternating run) against its target, failing
    closed (common.verdict): a ramp where one side held its top gives a bound, one where a
    side held not even the first step gives no figure."""
    pairs = [c.max_ratio_repeat(r, rl, g, gl) for r, rl, g, gl in
             zip(maxima[rung], lower[rung], maxima["go"], lower["go"])]
    return c.verdict([v for v, _ in pairs], TARGETS[rung], [b for _, b in pairs])


def cpu_at_held(target, held):
    """CPU% of the service at its last step that held the SLO: below 100 it had room left,
    so a ramp that ended there measured the load generator's limit, not the service's."""
    steps = [s for s in target["steps"] if s.get("offered_rps") == held]
    return steps[0].get("cpu_percent") if steps else None


def summarize_endpoint(ep, maxima, lower, top_cpu, rate, fixed, ramp_files, fixed_files, ramp_start=None):
    """One endpoint's figures per rung (the rungs present in `maxima`: the tests give two)."""
    names = [n for n in TIERS if n in maxima]
    pick = lambda name, get: c.median([get(s) for s in fixed[name]])
    fig = {
        "rps": {n: pick(n, lambda s: s["achieved_rps"]) for n in names},
        "cpu_percent": {n: pick(n, lambda s: s.get("cpu_percent")) for n in names},
        "pss_mb": {n: pick(n, lambda s: s.get("pss_mb")) for n in names},
        "rss_mb": {n: pick(n, lambda s: s.get("rss_mb")) for n in names},
        "p99_ms": {n: pick(n, lambda s: c.latency(s, "p99")) for n in names},
        "p50_ms": {n: pick(n, lambda s: c.latency(s, "p50")) for n in names},
        "cpu_us_per_request": {n: pick(n, c.cpu_us_per_request) for n in names},
    }
    fig["offered_rps"] = rate
    us = fig["cpu_us_per_request"]
    # The cgo rung and the Rust service compute with the same Rust code: the difference of
    # their CPU per request is what Go's HTTP layer (and the crossing) costs.
    fig["go_http_layer_us"] = (us["cgo"] - us["rust"] if "cgo" in us and us["cgo"] is not None
                               and us["rust"] is not None else None)
    mx = {n: c.median(maxima[n]) for n in names}
    return {
        "endpoint": ep,
        "max_rps": mx,
        "max_rps_all": maxima,
        "max_rps_lower_bound": {n: any(lower[n]) for n in names},
        "max_rps_lower_bound_all": lower,
        # Target (#13): Rust's max >= 3x Go's, judged on the ramps' paired ratios.
        "target": max_verdict(maxima, lower, "rust"),
        # Target (#30): the cgo engine's max >= 2x Go's, judged the same way.
        "target_cgo": max_verdict(maxima, lower, "cgo") if "cgo" in maxima else None,
        "cpu_percent_at_max": {n: c.median(top_cpu[n]) for n in names},
        # A max of 0 (below the ramp's first step) gives no ratio.
        "max_ratio": c.max_ratio(mx["rust"], mx["go"]),
        "max_ratio_cgo": c.max_ratio(mx["cgo"], mx["go"]) if "cgo" in mx else None,
        "ramp_start": ramp_start,
        "fixed": fig,
        "ramp_files": ramp_files,
        "fixed_files": fixed_files,
    }


def projection(fixed_file):
    args = ["report", "cost", fixed_file, "--fleet-qps", str(FLEET_QPS), "--vcpu-hour-price", VCPU_HOUR_PRICE,
            "--headroom", HEADROOM]
    import json
    table = c.scalpel(args).stdout
    j = json.loads(c.scalpel(args + ["--json"]).stdout)
    # Each rung against Go; the top-level saving is the separate Rust service's (tier 4).
    by = {t["name"]: t for t in j["targets"]}
    rust = by.get("rust", {})
    return {
        "fleet_qps": j["fleet_qps"],
        "vcpu": j["vcpu"],
        "by_target": {n: {k: by[n].get(k) for k in ("vcpu", "vcpu_saved", "yearly_saving", "cpu_us_per_request",
                                                    "saving_formula")} for n in TIERS if n in by},
        "vcpu_saved": rust.get("vcpu_saved"),
        "yearly_saving": rust.get("yearly_saving"),
        "yearly_saving_cents": rust.get("yearly_saving_cents"),
        "formula": rust.get("saving_formula"),
        "vcpu_hour_price": j["vcpu_hour_price"],
        "headroom": j["headroom"],
        "command": "scalpel " + " ".join(args),
        "table": table,
        "json": j,
    }


def endpoint_table(e):
    """(headers, rows) of one endpoint's figures per rung and each rung against Go, with the
    story's figures beside: the terminal's table and the report page's."""
    f = e["fixed"]
    lb = e["max_rps_lower_bound"]
    names = [n for n in TIERS if n in e["max_rps"]]
    mark = lambda n: c.fmt_max(e["max_rps"][n], lb[n], e.get("ramp_start"))
    per = lambda key, fmt: [fmt(f[key][n]) for n in names]
    vs_go = lambda key: [c.fmt_ratio(c.ratio(f[key][n], f[key]["go"])) for n in names if n != "go"]
    max_ratios = {"cgo": e.get("max_ratio_cgo"), "rust": e["max_ratio"]}
    rows = [
        ["max req/s at the SLO"] + [mark(n) for n in names]
        + [c.fmt_ratio(max_ratios[n]) for n in names if n != "go"] + ["85k vs >150k (1.8x)"],
        ["fixed load: achieved req/s"] + per("rps", c.fmt_num) + vs_go("rps") + ["80k"],
        ["CPU % of one core"] + per("cpu_percent", c.fmt_num) + vs_go("cpu_percent") + ["78.3% vs 52.0% (0.66x)"],
        ["memory, PSS MiB"] + per("pss_mb", c.fmt_num) + vs_go("pss_mb") + ["7.4% vs 2.07% (0.28x)"],
        ["p99 ms"] + per("p99_ms", c.fmt_ms) + vs_go("p99_ms") + ["19.87 vs 4.79 ms (0.24x)"],
        ["CPU µs per request"] + per("cpu_us_per_request", c.fmt_num) + vs_go("cpu_us_per_request") + ["-"],
    ]
    heads = ["figure"] + [LABELS[n] for n in names] + [f"{n}/go" for n in names if n != "go"] + ["the story"]
    return heads, rows


def print_tables(result):
    c.section("2. Payments: Go -> Rust on the hot endpoints, a ladder of three over the same 16,000-user "
              f"ledger ({result.get('store', 'sqlite')}), one core each")
    print(result["pinning"])
    print("Go vs the Rust service:")
    print(result["shadow"]["table"].rstrip())
    if result.get("shadow_cgo"):
        print("Go vs Go + Rust via cgo:")
        print(result["shadow_cgo"]["table"].rstrip())
    for ep, e in result["endpoints"].items():
        f = e["fixed"]
        names = [n for n in TIERS if n in e["max_rps"]]
        print(f"\n/v1/users/{{id}}/{ep}: the three ramped under {result['slo']}, then a fixed "
              f"{f['offered_rps']:,} req/s (half of Go's max)")
        print(c.table(*endpoint_table(e)))
        print(f"target: Rust's max >= {c.fmt_ratio(TARGET)} Go's: {e['target']['text']}")
        if e.get("target_cgo"):
            print(f"target: the cgo engine's max >= {c.fmt_ratio(TARGETS['cgo'])} Go's: {e['target_cgo']['text']}")
        if not e["max_rps"]["go"]:
            print("warning: Go broke the SLO at the ramp's first step: this machine is too busy for a "
                  "meaningful maximum; the fixed load ran at the floor of 100 req/s")
        cpu = e["cpu_percent_at_max"]
        print("CPU at the last step that held: " + ", ".join(f"{LABELS[n]} {c.fmt_num(cpu[n])}%" for n in names)
              + " of a core ('>=': the ramp's top held, a lower bound; a service below 100% there had room left)")
        if f.get("go_http_layer_us") is not None:
            print(f"Go's HTTP layer (net/http, head check, routing) and the cgo crossing: "
                  f"{c.fmt_num(f['go_http_layer_us'])} µs of CPU per request (tier 3 minus tier 4: both compute "
                  "with the same Rust code)")
    print(f"\ncost projection for each rung (the story's fleet: {FLEET_QPS:,} req/s; its ~$300k/400 vCPU implies "
          f"${VCPU_HOUR_PRICE}/vCPU-hour):")
    print(f"$ {result['cost']['command']}")
    print(result["cost"]["table"].rstrip())
