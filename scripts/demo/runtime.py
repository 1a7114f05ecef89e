"""Story 3: the same Node service, two workers, under pm2's cluster mode and under `scalpel
serve`, on three workloads (hello world, QR tier 0, an uneven mix of cheap and very expensive
requests): the rate each holds at the SLO, p99 at 80% of pm2's maximum, CPU and memory. Then
an A/B split through serve (tier 0 host vs tier 3 host, 50/50, sticky) with a mirror."""

import json
import os
import re
import subprocess
import time
import urllib.parse

import common as c
import ladder

PM2 = os.path.join(c.ROOT, "scripts", "demo", "pm2", "node_modules", ".bin", "pm2")
QR_SERVER_JS = os.path.join(c.ROOT, "qr", "node", "server.js")
HELLO_JS = os.path.join(c.ROOT, "examples", "serve", "app.js")


def workloads():
    """name, what, app argv (with {port} for serve), path template, data lines, SLO."""
    short = [f"hi-{i}" for i in range(90)]
    heavy = [("z" * 500) + f"{i:012d}" for i in range(10)]
    mix = []
    light = iter(short)
    for i in range(100):
        mix.append(heavy[i // 10] if i % 10 == 9 else next(light))
    enc = lambda ts: [urllib.parse.quote(t, safe="") for t in ts]
    qr_app = ["node", QR_SERVER_JS, "--tier", "0", "--port", "{port}"]
    return [
        ("hello", "Node hello world (examples/serve/app.js)", ["node", HELLO_JS], "/", None,
         "p99<20ms,errors<1%"),
        ("qr", "CPU-heavy, uniform: QR tier 0 on 40-90 byte URLs", qr_app, "/qrcode?text={text:raw}",
         enc(ladder.texts()), "p99<100ms,errors<1%"),
        ("uneven", "CPU-heavy, uneven: QR tier 0, 9 in 10 texts of 4-5 bytes, 1 in 10 of 512 bytes",
         qr_app, "/qrcode?text={text:raw}", enc(mix), "p99<100ms,errors<1%"),
    ]


class Pm2:
    """pm2 from the demo's own lock-filed package, with its own PM2_HOME: never the user's."""

    def __init__(self):
        self.home = os.path.join(c.OUT, "pm2home")
        os.makedirs(self.home, exist_ok=True)
        if not os.path.exists(PM2):
            raise c.DemoError(f"pm2 is not installed at {PM2}: run scripts/demo.sh (it runs npm ci there)")

    def cmd(self, args, env=None, check=True):
        full = dict(os.environ, PM2_HOME=self.home)
        full.update(env or {})
        r = subprocess.run([PM2] + args, capture_output=True, text=True, env=full, timeout=120)
        if check and r.returncode != 0:
            raise c.DemoError(f"pm2 {' '.join(args[:2])} failed: {r.stderr.strip()[:300]}")
        return r

    def start(self, name, script, args, port):
        argv = ["start", script, "-i", "2", "--name", name]
        if args:
            argv += ["--"] + args
        self.cmd(argv, env={"PORT": str(port)})

    def daemon_pid(self):
        with open(os.path.join(self.home, "pm2.pid")) as f:
            return int(f.read().strip())

    def delete_all(self):
        self.cmd(["delete", "all"], check=False)

    def kill(self):
        self.cmd(["kill"], check=False)


def serve_config(path, listen, admin, apps, routes=""):
    text = f'[server]\nlisten = "127.0.0.1:{listen}"\nadmin = "127.0.0.1:{admin}"\n'
    for app in apps:
        text += (f'\n[[app]]\nname = "{app["name"]}"\ncommand = {json.dumps(app["command"])}\n'
                 f'workers = {app["workers"]}\nport_base = {app["port_base"]}\n')
        if app.get("mode") == "direct":
            # Direct mode: the workers accept on serve's socket themselves (no balancer hop),
            # so balance and the worker-slot queue do not apply.
            text += f'mode = "direct"\nlisten = "{app["listen"]}"\n'
        else:
            text += f'balance = "{app.get("balance", "least_conn")}"\n'
        if app.get("max_in_flight_per_worker") and app.get("mode") != "direct":
            text += f'max_in_flight_per_worker = {app["max_in_flight_per_worker"]}\n'
        if app.get("health"):
            text += f'\n[app.health]\npath = "{app["health"]}"\n'
    text += routes
    with open(path, "w") as f:
        f.write(text)


def wait_http(url, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if c.http_status(url) == 200:
            return
        time.sleep(0.1)
    raise c.DemoError(f"{url} never answered 200")


def run(cfg, report):
    out = os.path.join(c.OUT, "runtime")
    os.makedirs(out, exist_ok=True)
    pm2 = Pm2()
    pm2.kill()  # a daemon left over from an interrupted run
    results = []
    procs = c.Procs()
    try:
        for name, what, app, template, lines, slo in workloads():
            if name not in cfg["rt_workloads"]:
                continue
            results.append(workload(cfg, out, pm2, procs, name, what, app, template, lines, slo))
            print_workload(results[-1])
        # The A/B split's rate comes from the qr workload's figures.
        ab = ab_split(cfg, out, procs, results) if cfg["rt_ab"] and "qr" in cfg["rt_workloads"] else None
    finally:
        procs.stop_all()
        pm2.delete_all()
        pm2.kill()
    uneven = next((r for r in results if r["name"] == "uneven"), None)
    report["runtime"] = {
        "rps": uneven["rps"] if uneven else None,
        "p99_ms": uneven["p99_ms"] if uneven else None,
        "workloads": results,
        "note": "two workers on two cores shared with the load generator (nothing pinned: each setup "
                "needs both cores)",
    }
    if ab is not None:
        report["ab"] = ab
        print_ab(ab)
    return report["runtime"]


def workload(cfg, out, pm2, procs, name, what, app, template, lines, slo):
    data = None
    if lines:
        data = os.path.join(out, f"{name}.txt")
        with open(data, "w") as f:
            f.write("\n".join(lines) + "\n")
    pm2_port, listen, admin = c.free_ports(3)
    base = c.port_block(4)
    health = "/healthz"
    # pm2 cluster mode: every worker listens on the same port through the master.
    script, args = app[1], [a if a != "{port}" else str(pm2_port) for a in app[2:]]
    pm2.start(f"demo-{name}", script, args, pm2_port)
    wait_http(f"http://127.0.0.1:{pm2_port}{health}")
    pm2_pid = pm2.daemon_pid()
    # The config a user would write for single-threaded workers: at most
    # `rt_serve_slots` requests on a worker at once, the rest in serve's FIFO queue for the
    # first worker that frees (docs/serve.md, max_in_flight_per_worker; 0: least_conn alone).
    slots = cfg["rt_serve_slots"]
    # Light requests: the mode serve's guide recommends for them (docs/serve.md, direct mode):
    # the workers accept on serve's socket, no per-request hop, as pm2's do after the handshake.
    direct = name == "hello" and cfg.get("rt_hello_direct", True)
    app_conf = {"name": name, "command": app, "workers": 2, "port_base": base, "health": health,
                "max_in_flight_per_worker": slots}
    server_listen = listen
    if direct:
        # Two more ports at once, so they differ: the app's socket, and serve's own
        # (unused) balancer listener.
        direct_port, server_listen = c.free_ports(2)
        app_conf.update(mode="direct", listen=f"127.0.0.1:{direct_port}")
        listen = direct_port
        slots = 0
    cfg_path = os.path.join(out, f"serve-{name}.toml")
    serve_config(cfg_path, server_listen, admin, [app_conf])
    sp, _ = procs.start(f"serve-{name}", [c.SCALPEL, "serve", "--config", cfg_path], cpu=None,
                        ready=f"http://127.0.0.1:{listen}{health}")
    names = ["pm2", "serve"]
    watch = ["--watch-pid", f"pm2={pm2_pid}", "--watch-pid", f"serve={sp.pid}"]
    extra_targets = []
    old_sp = None
    if cfg["rt_serve_old"]:
        # The same serve with least_conn alone (before max_in_flight_per_worker; for a direct
        # app, serve's proxy mode), alternating with the other two: old vs new in one run.
        old_listen, old_admin = c.free_ports(2)
        old_base = c.port_block(4)
        old_path = os.path.join(out, f"serve-{name}-least-conn.toml")
        serve_config(old_path, old_listen, old_admin, [{"name": name, "command": app, "workers": 2,
                                                        "port_base": old_base, "health": health}])
        old_sp, _ = procs.start(f"serve-{name}-lc", [c.SCALPEL, "serve", "--config", old_path], cpu=None,
                                ready=f"http://127.0.0.1:{old_listen}{health}")
        names.append("serve-lc")
        extra_targets = ["--target", f"serve-lc=http://127.0.0.1:{old_listen}"]
        watch += ["--watch-pid", f"serve-lc={old_sp.pid}"]
    how = "direct mode" if direct else f"least_conn, max_in_flight_per_worker = {slots or 'none'}"
    c.log(f"runtime: {name}: pm2 cluster (2 workers) on :{pm2_port}, scalpel serve (2 workers, {how}) on :{listen}"
          + (f", serve {'in proxy mode' if direct else 'with least_conn alone'} as serve-lc" if old_sp else ""))
    try:
        targets = (["--target", f"pm2=http://127.0.0.1:{pm2_port}", "--target", f"serve=http://127.0.0.1:{listen}"]
                   + extra_targets + watch)
        extra = ["--data", data, "--shuffle", "3"] if data else []
        # Both setups warmed alike (JIT, connections), then discarded.
        c.scalpel_load(["-c", "64", "-d", "1s", "--rounds", "1"] + targets + extra + [template],
                       os.path.join(out, f"{name}-warmup.json"), cpu=None)
        # pm2's closed-model maximum scales the ramp (same schedule for both).
        probe = c.scalpel_load(["-c", "64", "-d", cfg["rt_probe"], "--target", f"pm2=http://127.0.0.1:{pm2_port}"]
                               + extra + [template], os.path.join(out, f"{name}-probe.json"), cpu=None)
        top = probe["targets"][0]["steps"][0]["achieved_rps"]
        lo, step, hi = (max(1, round(top * f)) for f in cfg["rt_ramp"])
        maxima = {t: [] for t in names}
        lower = {t: False for t in names}
        ramp_files = []
        for r in range(cfg["rt_repeats"]):
            c.log(f"runtime: {name}: ramp {lo},{step},{hi} req/s, {cfg['rt_step']} steps, SLO {slo}, "
                  f"pm2 and serve alternating (repeat {r + 1})")
            f = os.path.join(out, f"{name}-ramp-{r + 1}.json")
            res = c.scalpel_load(["--ramp", f"{lo},{step},{hi}", "--step-duration", cfg["rt_step"], "--slo", slo,
                                  "-c", "64"] + targets + extra + [template], f, cpu=None)
            ramp_files.append(f)
            for t in names:
                held, lb = c.breaking_rps(c.target_of(res, t))
                maxima[t].append(held)
                lower[t] = lower[t] or lb
        pm2_max = c.median(maxima["pm2"])
        rate = max(1, int(0.8 * pm2_max)) if pm2_max else max(1, int(0.5 * top))
        fixed = {t: [] for t in names}
        fixed_files = []
        for r in range(cfg["rt_repeats"]):
            c.log(f"runtime: {name}: fixed {rate:,} req/s (80% of pm2's max) for {cfg['rt_fixed']} (repeat {r + 1})")
            f = os.path.join(out, f"{name}-fixed-{r + 1}.json")
            res = c.scalpel_load(["--rate", str(rate), "-d", cfg["rt_fixed"], "-c", "64"] + targets + extra
                                 + [template], f, cpu=None)
            fixed_files.append(f)
            for t in names:
                fixed[t].append(c.target_of(res, t)["steps"][0])
    finally:
        procs.stop(sp)
        if old_sp is not None:
            procs.stop(old_sp)
        pm2.delete_all()
    pick = lambda t, get: c.median([get(s) for s in fixed[t]])
    both = lambda get: {t: pick(t, get) for t in names}
    return {
        "name": name,
        "what": what,
        "slo": slo,
        "serve_max_in_flight_per_worker": slots or None,
        "serve_mode": "direct" if direct else "proxy",
        "probe_rps": top,
        "ramp_start": lo,
        "rps": {t: c.median(maxima[t]) for t in names},
        "rps_all": maxima,
        "rps_lower_bound": lower,
        "fixed_rps": rate,
        "p99_ms": both(lambda s: c.latency(s, "p99")),
        "p99_ms_all": {t: [c.latency(s, "p99") for s in fixed[t]] for t in names},
        "p50_ms": both(lambda s: c.latency(s, "p50")),
        "errors": both(lambda s: s["errors"]),
        "cpu_percent": both(lambda s: s.get("cpu_percent")),
        "pss_mb": both(lambda s: s.get("pss_mb")),
        "cpu_us_per_request": both(c.cpu_us_per_request),
        "ramp_files": ramp_files,
        "fixed_files": fixed_files,
    }


def print_workload(w):
    c.section(f"3. Runtime: {w['what']}: pm2 cluster mode vs scalpel serve, 2 workers each")
    lb = w["rps_lower_bound"]
    old = "serve-lc" in w["rps"]
    # A target that missed the SLO at the ramp's first step held no step: say so, not "0".
    mx = lambda t: c.fmt_max(w["rps"][t], lb[t], w.get("ramp_start"))
    ms = lambda key: lambda t: c.fmt_ms(w[key][t])
    num = lambda key, digits=1: lambda t: c.fmt_num(w[key][t], digits)

    def row(label, key, show):
        # A max of 0 is "below the ramp's first step": no ratio can be taken from it.
        div = c.max_ratio if key == "rps" else c.ratio
        cells = [label, show("pm2"), show("serve"), c.fmt_ratio(div(w[key]["serve"], w[key]["pm2"]))]
        if old:
            cells += [show("serve-lc"), c.fmt_ratio(div(w[key]["serve-lc"], w[key]["pm2"]))]
        return cells

    rows = [
        row(f"max req/s at {w['slo']}", "rps", mx),
        row(f"p99 ms at {w['fixed_rps']:,} req/s (80% of pm2's max)", "p99_ms", ms("p99_ms")),
        row("p50 ms there", "p50_ms", ms("p50_ms")),
        row("errors there", "errors", num("errors", 0)),
        row("CPU % (whole tree, 100 = one core)", "cpu_percent", num("cpu_percent")),
        row("CPU µs per request", "cpu_us_per_request", num("cpu_us_per_request")),
        row("memory, PSS MiB (whole tree)", "pss_mb", num("pss_mb")),
    ]
    rows[3][3] = ""
    head = ["figure", "pm2", "serve", "serve/pm2"]
    if old:
        rows[3][5] = ""
        head += ["serve, proxy mode" if w.get("serve_mode") == "direct" else "serve, least_conn alone", "/pm2"]
    slots = w.get("serve_max_in_flight_per_worker")
    if w.get("serve_mode") == "direct":
        print("serve: mode = \"direct\" (the workers accept on serve's socket, no balancer hop)")
    else:
        print(f"serve: max_in_flight_per_worker = {slots}" if slots else "serve: least_conn alone")
    print(c.table(head, rows))


def metrics(admin):
    status, _, body = c.http_get(f"http://127.0.0.1:{admin}/metrics")
    if status != 200:
        raise c.DemoError(f"serve /metrics answered {status}")
    values = {}
    for line in body.decode().splitlines():
        m = re.match(r'^(\w+)\{([^}]*)\} (\S+)$', line)
        if m:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
            values.setdefault(m.group(1), []).append((labels, float(m.group(3))))
    return values


def metric(values, name, **labels):
    for have, v in values.get(name, []):
        if all(have.get(k) == w for k, w in labels.items()):
            return v
    return None


def ab_split(cfg, out, procs, results):
    """Tier 0 host vs tier 3 host through serve, 50/50 sticky by user, tier 4 mirrored."""
    listen, admin = c.free_ports(2)
    base = c.port_block(12)
    qr = lambda tier: ["node", QR_SERVER_JS, "--tier", tier, "--port", "{port}"]
    apps = [
        {"name": "tier0", "command": qr("0"), "workers": 1, "port_base": base, "health": "/healthz"},
        {"name": "tier3", "command": qr("3"), "workers": 1, "port_base": base + 4, "health": "/healthz"},
        {"name": "tier4", "command": [os.path.join(c.TARGET, "release", "qr-server"), "--port", "{port}",
                                      "--threads", "1"], "workers": 1, "port_base": base + 8, "health": "/healthz"},
    ]
    routes = ('\n[[route]]\nprefix = "/qrcode"\nsticky = "header:x-user"\n'
              'split = [{ app = "tier0", weight = 50 }, { app = "tier3", weight = 50 }]\n'
              'mirror = "tier4"\nmirror_percent = 100\n')
    cfg_path = os.path.join(out, "serve-ab.toml")
    serve_config(cfg_path, listen, admin, apps, routes)
    qr_w = next(r for r in results if r["name"] == "qr")
    # Half of the traffic lands on one tier-0 worker: keep that at half of what one worker of
    # the 2-worker setups held (the tier-3 arm, the mirror and the generator share the cores).
    rate = max(20, int(0.5 * (qr_w["rps"]["pm2"] or qr_w["probe_rps"])))
    data = os.path.join(out, "ab.csv")
    with open(data, "w") as f:
        f.write("user,text\n")
        for i, t in enumerate(ladder.texts() * 10):
            f.write(f"user-{i % 997},{urllib.parse.quote(t, safe='')}\n")
    sp, _ = procs.start("serve-ab", [c.SCALPEL, "serve", "--config", cfg_path], cpu=None,
                        ready=f"http://127.0.0.1:{admin}/status")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        st = json.loads(c.http_get(f"http://127.0.0.1:{admin}/status")[2] or b"{}")
        if st.get("apps") and all(a.get("ready", 0) >= 1 for a in st["apps"]):
            break
        time.sleep(0.2)
    else:
        raise c.DemoError("the A/B apps did not all become ready")
    c.log(f"runtime: A/B: tier 0 vs tier 3 host, 50/50 sticky by X-User, tier 4 mirrored; {rate} req/s for "
          f"{cfg['ab_duration']}")
    try:
        # /metrics' CPU and memory are gauges over the last sampling interval: read them while
        # the load runs, not after.
        samples = []
        res = c.scalpel_load(["--rate", str(rate), "-d", cfg["ab_duration"], "-c", "32", "-H", "X-User: {user}",
                              "--data", data, f"http://127.0.0.1:{listen}/qrcode?text={{text:raw}}"],
                             os.path.join(out, "ab-load.json"), cpu=None,
                             while_running=lambda: samples.append(metrics(admin)))
        time.sleep(0.5)  # the last mirror comparisons finish off the client's path
        m = metrics(admin)
        mirror = json.loads(c.http_get(f"http://127.0.0.1:{admin}/mirror")[2] or b"{}")
    finally:
        procs.stop(sp)
    # Skip the first second (the load was starting) of the gauges sampled during the run.
    during = samples[1:] or samples
    gauge = lambda name, app: c.median([metric(x, name, app=app) for x in during])
    arms = []
    for app in ("tier0", "tier3"):
        arms.append({
            "app": app,
            "requests": metric(m, "scalpel_serve_route_requests_total", app=app),
            "errors": metric(m, "scalpel_serve_errors_total", app=app),
            "p50_ms": ms(metric(m, "scalpel_serve_latency_seconds", app=app, quantile="0.5")),
            "p99_ms": ms(metric(m, "scalpel_serve_latency_seconds", app=app, quantile="0.99")),
            "cpu_percent": gauge("scalpel_serve_cpu_percent", app),
            "pss_mb": mib(gauge("scalpel_serve_memory_pss_bytes", app)),
            "rss_mb": mib(gauge("scalpel_serve_memory_rss_bytes", app)),
        })
    summary = (mirror.get("routes") or [{}])[0].get("summary", {})
    step = res["targets"][0]["steps"][0]
    served = sum(a["requests"] or 0 for a in arms)
    share3 = (arms[1]["requests"] or 0) / served if served else None
    return {
        "rate": rate,
        "client": {"rps": step["achieved_rps"], "p99_ms": c.latency(step, "p99"), "errors": step["errors"]},
        "arms": arms,
        "mirror": "tier4",
        "metrics_samples": len(during),
        "consistency_percent": summary.get("consistency_percent"),
        "compared": summary.get("compared"),
        "matched": summary.get("matched"),
        "mismatched": summary.get("mismatched"),
        "skipped": summary.get("skipped"),
        "mirror_errors": summary.get("errors"),
        "tier3_share_percent": None if share3 is None else 100 * share3,
        "note": ("the mirror (tier 4) compares bytes: answers of the tier-3 arm are byte-identical to tier 4's; "
                 "tier 0's PNGs differ in bytes but decode to the same pixels (checked in the ladder stage), so "
                 "the expected consistency is the tier-3 arm's share of the requests"),
    }


def ms(seconds):
    return None if seconds is None else seconds * 1000


def mib(b):
    return None if b is None else b / 1024 / 1024


def print_ab(ab):
    c.section("3b. A/B through scalpel serve: tier 0 host vs tier 3 host, 50/50 sticky by user, tier 4 mirrored")
    rows = [[a["app"], c.fmt_num(a["requests"], 0), c.fmt_num(a["errors"], 0), c.fmt_ms(a["p50_ms"]),
             c.fmt_ms(a["p99_ms"]), c.fmt_num(a["cpu_percent"]), c.fmt_num(a["pss_mb"])] for a in ab["arms"]]
    print(c.table(["arm", "requests", "5xx", "p50 ms", "p99 ms", "CPU %", "PSS MiB"], rows))
    print(f"client side: {ab['client']['rps']:.1f} req/s asked {ab['rate']}, p99 {c.fmt_ms(ab['client']['p99_ms'])} ms, "
          f"{ab['client']['errors']} errors")
    cons = ab["consistency_percent"]
    print(f"mirror to tier 4: {ab['compared']} compared, {ab['matched']} matched, {ab['mismatched']} differ, "
          f"{ab['skipped']} skipped -> consistency {c.fmt_num(cons, 2) if cons is not None else '-'}% "
          f"(tier-3 arm's share of requests: {c.fmt_num(ab['tier3_share_percent'], 1)}%)")
    print(f"({ab['note']})")
