"""Story 3: the same Node service, two workers, in the setup the story ran before and under
`scalpel serve`, on the uneven mix the story is about (9 in 10 requests ~1 ms of CPU, 1 in
10 ~20 ms): the rate each holds at the light endpoint's p99 SLO, and the light endpoint's p99
at equal load. BEFORE is nginx (round robin, keep-alive to its upstream) in front of pm2's
cluster mode: each of nginx's kept-alive connections lands on one pm2 worker and stays
there, so a light request waits behind the heavy ones of its connection's worker. AFTER is
serve with a port per worker and its balancer choosing per request (`least_conn`,
`max_in_flight_per_worker = 1`), and the story's "4 + 1" (heavy and light requests on
workers of their own) as a variant. Hello world keeps pm2 alone against serve's direct
mode. Then an A/B split through serve (tier 0 host vs tier 3 host, 50/50, sticky) with a
mirror."""

import getpass
import grp
import json
import os
import re
import shutil
import subprocess
import time
import urllib.parse

import common as c
import ladder

PM2 = os.path.join(c.ROOT, "scripts", "demo", "pm2", "node_modules", ".bin", "pm2")
QR_SERVER_JS = os.path.join(c.ROOT, "qr", "node", "server.js")
HELLO_JS = os.path.join(c.ROOT, "examples", "serve", "app.js")
HEALTH = "/healthz"
# The uneven mix's light endpoint: the SLO and the p99 at equal load are its own.
LIGHT = "light"

# What each setup is, as the tables name it.
LABELS = {
    "pm2": "pm2 cluster mode alone",
    "nginx-pm2": "nginx -> pm2 cluster (BEFORE)",
    "serve": "scalpel serve",
    "serve-split": "serve, heavy and light on their own workers",
}


def workloads():
    """Each workload: name, what, the app's argv (with {port} for serve), how requests are
    made (a template and data lines, or a mix file's text and its CSV rows), the SLO, the
    setup it is judged against (BEFORE), the serve variants beside it, and the target
    (serve's rate at the SLO / BEFORE's, None: the interval alone)."""
    short = [f"hi-{i}" for i in range(90)]
    heavy = [("z" * 500) + f"{i:012d}" for i in range(10)]
    enc = lambda t: urllib.parse.quote(t, safe="")
    qr_app = ["node", QR_SERVER_JS, "--tier", "0", "--port", "{port}"]
    # The heavy requests carry `X-Cost: heavy`: the split variant routes on it (a real
    # service routes by path prefix; the QR host has one path).
    mix = ('[[request]]\nname = "light"\npath = "/qrcode?text={light:raw}"\nweight = 9\n\n'
           '[[request]]\nname = "heavy"\npath = "/qrcode?text={heavy:raw}"\n'
           'headers = { "X-Cost" = "heavy" }\nweight = 1\n')
    rows = ["light,heavy"] + [f"{enc(short[i % 90])},{enc(heavy[i % 10])}" for i in range(900)]
    return [
        {"name": "hello", "what": "Node hello world (examples/serve/app.js)", "app": ["node", HELLO_JS],
         "template": "/", "lines": None, "slo": "p99<20ms,errors<1%", "before": "pm2", "variants": [],
         "want": 1.0, "target": "serve direct mode >= pm2 alone (#14)",
         # Its ramp starts at 20% of pm2's closed rate at most: p99 < 20 ms on two cores shared
         # with the generator holds at 40-55% of it, and a ramp starting at --full's 40% left
         # 3 of pm2's 9 ramps and 2 of serve's without a figure (2026-12-06).
         "ramp_from": 0.2},
        {"name": "qr", "what": "CPU-heavy, uniform: QR tier 0 on 40-90 byte URLs", "app": qr_app,
         "template": "/qrcode?text={text:raw}", "lines": [enc(t) for t in ladder.texts()],
         "slo": "p99<100ms,errors<1%", "before": "nginx-pm2", "variants": [], "want": None, "target": None},
        {"name": "uneven", "what": "the uneven mix: QR tier 0, 9 in 10 texts of 4-5 bytes (light, ~1 ms), "
         "1 in 10 of 512 bytes (heavy, ~20 ms)", "app": qr_app, "mix": mix, "rows": rows,
         "slo": f"{LIGHT}:p99<25ms,heavy:p99<500ms,errors<1%", "before": "nginx-pm2", "variants": ["serve-split"],
         "want": 1.4, "target": "serve >= 1.4x BEFORE's rate at the SLO (#27)"},
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

    def start_binary(self, name, program, args, path):
        """A program run by pm2 as is (fork mode, no interpreter, never restarted): it is then
        one of the daemon's children, so the daemon's process tree is the whole setup."""
        with open(path, "w") as f:
            json.dump({"apps": [{"name": name, "script": program, "args": args, "interpreter": "none",
                                 "exec_mode": "fork", "autorestart": False}]}, f)
        self.cmd(["start", path])

    def daemon_pid(self):
        with open(os.path.join(self.home, "pm2.pid")) as f:
            return int(f.read().strip())

    def delete_all(self):
        self.cmd(["delete", "all"], check=False)

    def kill(self):
        self.cmd(["kill"], check=False)


def nginx_config(path, scratch, listen, upstream_port):
    """nginx as the story's BEFORE balancer: round robin (one upstream here: pm2's port),
    keep-alive connections to it, as many worker processes as serve has threads (one per
    core); every path (pid, logs, temp) in the run's scratch dir, listening on 127.0.0.1
    only. Kept in the foreground (pm2 runs it); as root, its workers stay the current user."""
    temp = " ".join(f"{k}_temp_path {scratch}/{k};" for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    user = f"user {getpass.getuser()} {grp.getgrgid(os.getegid()).gr_name};\n" if os.geteuid() == 0 else ""
    text = f"""{user}worker_processes auto;
daemon off;
pid {scratch}/nginx.pid;
error_log {scratch}/error.log;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  keepalive_requests 10000000;
  {temp}
  upstream app {{ server 127.0.0.1:{upstream_port}; keepalive 64; keepalive_requests 10000000; }}
  server {{
    listen 127.0.0.1:{listen};
    location / {{
      proxy_pass http://app; proxy_http_version 1.1; proxy_set_header Connection "";
      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
      proxy_set_header X-Forwarded-Proto $scheme;
    }}
  }}
}}
"""
    with open(path, "w") as f:
        f.write(text)


def nginx_binary():
    found = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
    if not found:
        raise c.DemoError("nginx is not installed (apt-get install nginx): the runtime story's BEFORE setup needs it")
    return found


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
    ab = None
    try:
        for w in workloads():
            if w["name"] not in cfg["rt_workloads"]:
                continue
            results.append(workload(cfg, out, pm2, procs, w))
            print_workload(results[-1])
        if cfg["rt_ab"]:
            ab = ab_split(cfg, out, procs)
    finally:
        procs.stop_all()
        pm2.delete_all()
        pm2.kill()
    uneven = next((r for r in results if r["name"] == "uneven"), None)
    report["runtime"] = {
        "rps": uneven["rps"] if uneven else None,
        "p99_ms": uneven["p99_ms"] if uneven else None,
        "headline": uneven and {"before": uneven["before"], "after": "serve", "verdict": uneven["verdict"],
                                "p99_ratio": uneven["p99_ratio"], "fixed_rps": uneven["fixed_rps"]},
        "workloads": results,
        "note": "two workers on two cores shared with the balancer and the load generator (nothing pinned: each "
                "setup needs both cores); every setup of a workload in one run, alternating step by step",
    }
    if ab is not None:
        report["ab"] = ab
        print_ab(ab)
    return report["runtime"]


def start_setups(cfg, out, pm2, procs, w):
    """The workload's setups, started: [(key, url, pid to watch)] (BEFORE first) and the
    serve processes to stop."""
    name, app = w["name"], w["app"]
    pm2_port, listen, admin = c.free_ports(3)
    script, args = app[1], [a if a != "{port}" else str(pm2_port) for a in app[2:]]
    # pm2 cluster mode: every worker listens on the same port through the master.
    pm2.start(f"demo-{name}", script, args, pm2_port)
    wait_http(f"http://127.0.0.1:{pm2_port}{HEALTH}")
    setups = []
    if w["before"] == "nginx-pm2":
        nginx_port = c.free_port()
        scratch = os.path.join(out, f"nginx-{name}")
        os.makedirs(scratch, exist_ok=True)
        conf = os.path.join(scratch, "nginx.conf")
        nginx_config(conf, scratch, nginx_port, pm2_port)
        # Run by pm2, so the daemon's tree (what is watched) holds nginx and the workers.
        pm2.start_binary(f"nginx-{name}", nginx_binary(),
                         ["-c", conf, "-p", scratch, "-e", os.path.join(scratch, "error.log")],
                         os.path.join(scratch, "pm2-nginx.json"))
        try:
            wait_http(f"http://127.0.0.1:{nginx_port}{HEALTH}", timeout=20)
        except c.DemoError as e:
            raise c.DemoError(f"{e}; nginx: {c.tail(os.path.join(scratch, 'error.log'))}") from None
        setups.append(("nginx-pm2", f"http://127.0.0.1:{nginx_port}", pm2.daemon_pid()))
    else:
        setups.append(("pm2", f"http://127.0.0.1:{pm2_port}", pm2.daemon_pid()))
    # The config a user would write for single-threaded workers: at most `rt_serve_slots`
    # requests on a worker at once, the rest in serve's FIFO queue for the first worker that
    # frees (docs/serve.md, max_in_flight_per_worker; 0: least_conn alone).
    slots = cfg["rt_serve_slots"]
    # Light requests: the mode serve's guide recommends for them (docs/serve.md, direct mode):
    # the workers accept on serve's socket, no per-request hop, as pm2's do after the handshake.
    direct = name == "hello" and cfg.get("rt_hello_direct", True)
    app_conf = {"name": name, "command": app, "workers": 2, "port_base": c.port_block(4), "health": HEALTH,
                "max_in_flight_per_worker": slots}
    url = f"http://127.0.0.1:{listen}"
    if direct:
        # Two more ports at once, so they differ: the app's socket, and serve's own
        # (unused) balancer listener.
        direct_port, listen = c.free_ports(2)
        app_conf.update(mode="direct", listen=f"127.0.0.1:{direct_port}")
        url = f"http://127.0.0.1:{direct_port}"
    serves = []
    cfg_path = os.path.join(out, f"serve-{name}.toml")
    serve_config(cfg_path, listen, admin, [app_conf])
    sp, _ = procs.start(f"serve-{name}", [c.SCALPEL, "serve", "--config", cfg_path], cpu=None,
                        ready=url + HEALTH)
    serves.append(sp)
    setups.append(("serve", url, sp.pid))
    if "serve-split" in w["variants"] and cfg["rt_split"]:
        # The story's "4 + 1" with the same two workers: one for the heavy requests, one for
        # the light, each app least_conn with the same slots; the route reads X-Cost.
        split_listen, split_admin = c.free_ports(2)
        apps = [dict(app_conf, name="heavy", workers=1, port_base=c.port_block(2)),
                dict(app_conf, name="light", workers=1, port_base=c.port_block(2))]
        routes = ('\n[[route]]\nprefix = "/"\nheader = { name = "x-cost", value = "heavy" }\napp = "heavy"\n'
                  '\n[[route]]\nprefix = "/"\napp = "light"\n')
        split_path = os.path.join(out, f"serve-{name}-split.toml")
        serve_config(split_path, split_listen, split_admin, apps, routes)
        split_url = f"http://127.0.0.1:{split_listen}"
        xp, _ = procs.start(f"serve-{name}-split", [c.SCALPEL, "serve", "--config", split_path], cpu=None,
                            ready=split_url + HEALTH)
        serves.append(xp)
        setups.append(("serve-split", split_url, xp.pid))
    how = "direct mode" if direct else f"least_conn, max_in_flight_per_worker = {slots or 'none'}"
    c.log(f"runtime: {name}: " + "; ".join(f"{k} on {u}" for k, u, _ in setups) + f" (2 workers each; serve {how})")
    return setups, serves, ("direct" if direct else "proxy"), (slots if not direct else None)


def request_args(out, w):
    """`scalpel load`'s request arguments for the workload (its data file written)."""
    if w.get("mix"):
        mix, rows = os.path.join(out, f"{w['name']}-mix.toml"), os.path.join(out, f"{w['name']}.csv")
        with open(mix, "w") as f:
            f.write(w["mix"])
        with open(rows, "w") as f:
            f.write("\n".join(w["rows"]) + "\n")
        return ["--mix", mix, "--data", rows, "--shuffle", "3"]
    if w.get("lines"):
        data = os.path.join(out, f"{w['name']}.txt")
        with open(data, "w") as f:
            f.write("\n".join(w["lines"]) + "\n")
        return ["--data", data, "--shuffle", "3", w["template"]]
    return [w["template"]]


def p99_of(step, endpoint):
    """The step's p99 (ms), or one endpoint's of a mix; None when nothing was answered."""
    if endpoint is None:
        return c.latency(step, "p99")
    e = next((e for e in step.get("endpoints") or [] if e["name"] == endpoint), None)
    return None if e is None else c.latency(e, "p99")


def workload(cfg, out, pm2, procs, w):
    name = w["name"]
    setups, serves, mode, slots = start_setups(cfg, out, pm2, procs, w)
    keys = [k for k, _, _ in setups]
    before = keys[0]
    endpoint = LIGHT if w.get("mix") else None
    try:
        targets = []
        for k, url, pid in setups:
            targets += ["--target", f"{k}={url}", "--watch-pid", f"{k}={pid}"]
        req = request_args(out, w)
        # Every setup warmed alike (JIT, connections), then discarded.
        c.scalpel_load(["-c", "64", "-d", "1s", "--rounds", "1"] + targets + req,
                       os.path.join(out, f"{name}-warmup.json"), cpu=None)
        # BEFORE's closed-model maximum scales the ramp (the same schedule for every setup).
        before_url = setups[0][1]
        probe_req = req if w.get("mix") else req[:-1] + [before_url + req[-1]]
        probe = c.scalpel_load(["-c", "64", "-d", cfg["rt_probe"]] + (["--target", f"{before}={before_url}"]
                               if w.get("mix") else []) + probe_req, os.path.join(out, f"{name}-probe.json"), cpu=None)
        top = probe["targets"][0]["steps"][0]["achieved_rps"]
        lo, step, hi = ramp_rates(cfg, w, top)
        maxima = {k: [] for k in keys}
        lower = {k: [] for k in keys}
        ramp_files = []
        undecided = lambda: rate_verdict(maxima, lower, "serve", before, w["want"])["verdict"] == "undecided"
        for r in c.repeats(cfg, f"runtime: {name}: ramp", undecided, cfg["rt_repeats"]):
            c.log(f"runtime: {name}: ramp {lo},{step},{hi} req/s, {cfg['rt_step']} steps, SLO {w['slo']}, "
                  f"{', '.join(keys)} alternating (repeat {r + 1})")
            f = os.path.join(out, f"{name}-ramp-{r + 1}.json")
            res = c.scalpel_load(["--ramp", f"{lo},{step},{hi}", "--step-duration", cfg["rt_step"], "--slo", w["slo"],
                                  "-c", "64"] + targets + req, f, cpu=None)
            ramp_files.append(f)
            for k in keys:
                held, lb = c.breaking_rps(c.target_of(res, k))
                maxima[k].append(held)
                lower[k].append(lb)
        before_max = c.median(maxima[before])
        rate = max(1, int(0.8 * before_max)) if before_max else max(1, int(0.5 * top))
        fixed = {k: [] for k in keys}
        fixed_files = []
        for r in range(cfg["rt_fixed_repeats"]):
            c.log(f"runtime: {name}: fixed {rate:,} req/s (80% of {before}'s max) for {cfg['rt_fixed']} "
                  f"(repeat {r + 1})")
            f = os.path.join(out, f"{name}-fixed-{r + 1}.json")
            res = c.scalpel_load(["--rate", str(rate), "-d", cfg["rt_fixed"], "-c", "64"] + targets + req, f, cpu=None)
            fixed_files.append(f)
            for k in keys:
                fixed[k].append(c.target_of(res, k)["steps"][0])
    finally:
        for sp in serves:
            procs.stop(sp)
        pm2.delete_all()
    return summarize(w, keys, mode, slots, top, lo, maxima, lower, rate, fixed, endpoint, ramp_files, fixed_files)


def ramp_rates(cfg, w, top):
    """The ramp's first rate, step and last rate in req/s: the profile's factors of BEFORE's
    closed rate `top`, starting no higher than the workload's `ramp_from`."""
    shape = (min(cfg["rt_ramp"][0], w.get("ramp_from", 1.0)),) + tuple(cfg["rt_ramp"][1:])
    return tuple(max(1, round(top * f)) for f in shape)


def rate_verdict(maxima, lower, after, before, want):
    """`after`'s rate at the SLO over `before`'s, per ramp (both in one alternating run),
    judged by common.verdict: a ramp where one side held the top gives a bound, one where a
    side held not even the first step no figure."""
    pairs = [c.max_ratio_repeat(a, al, b, bl) for a, al, b, bl in
             zip(maxima[after], lower[after], maxima[before], lower[before])]
    return c.verdict([v for v, _ in pairs], want, [b for _, b in pairs])


def summarize(w, keys, mode, slots, top, lo, maxima, lower, rate, fixed, endpoint, ramp_files, fixed_files):
    before = keys[0]
    pick = lambda k, get: c.median([get(s) for s in fixed[k]])
    each = lambda get: {k: pick(k, get) for k in keys}
    p99_all = {k: [p99_of(s, endpoint) for s in fixed[k]] for k in keys}
    return {
        "name": w["name"],
        "what": w["what"],
        "slo": w["slo"],
        "target": w["target"],
        "setups": {k: LABELS[k] for k in keys},
        "before": before,
        "serve_max_in_flight_per_worker": slots or None,
        "serve_mode": mode,
        "probe_rps": top,
        "ramp_start": lo,
        "rps": {k: c.median(maxima[k]) for k in keys},
        "rps_all": maxima,
        "rps_lower_bound": {k: any(lower[k]) for k in keys},
        "rps_lower_bound_all": lower,
        # The target, on serve; every other serve variant against the same BEFORE, the same way.
        "verdict": rate_verdict(maxima, lower, "serve", before, w["want"]),
        "variants": {k: rate_verdict(maxima, lower, k, before, w["want"]) for k in keys[2:]},
        "fixed_rps": rate,
        "p99_endpoint": endpoint,
        "p99_ms": {k: c.median(p99_all[k]) for k in keys},
        "p99_ms_all": p99_all,
        # serve's p99 at equal load over BEFORE's, per fixed run: the interval alone.
        "p99_ratio": {k: c.verdict([c.ratio(a, b) for a, b in zip(p99_all[k], p99_all[before])], None)
                      for k in keys[1:]},
        "p99_step_ms": each(lambda s: c.latency(s, "p99")),
        "p50_ms": each(lambda s: c.latency(s, "p50")),
        "errors": each(lambda s: s["errors"]),
        "cpu_percent": each(lambda s: s.get("cpu_percent")),
        "pss_mb": each(lambda s: s.get("pss_mb")),
        "cpu_us_per_request": each(c.cpu_us_per_request),
        "ramp_files": ramp_files,
        "fixed_files": fixed_files,
    }


def print_workload(w):
    keys = list(w["setups"])
    before = w["before"]
    c.section(f"3. Runtime: {w['what']}: {', '.join(w['setups'][k] for k in keys)}; 2 workers each")
    lb = w["rps_lower_bound"]
    # A setup that missed the SLO at the ramp's first step shows "< first", not "0".
    mx = lambda k: c.fmt_max(w["rps"][k], lb[k], w.get("ramp_start"))
    which = f"{w['p99_endpoint']} endpoint's p99" if w.get("p99_endpoint") else "p99"
    rows = [
        [f"max req/s at {w['slo']}"] + [mx(k) for k in keys],
        ["  each ramp"] + [" ".join(c.fmt_max(v, b, w.get("ramp_start")) for v, b in
                                    zip(w["rps_all"][k], w["rps_lower_bound_all"][k])) for k in keys],
        [f"{which} ms at {w['fixed_rps']:,} req/s (80% of {before}'s max)"] + [c.fmt_ms(w["p99_ms"][k]) for k in keys],
        ["  each run"] + [" ".join(c.fmt_ms(v) for v in w["p99_ms_all"][k]) for k in keys],
        ["p50 ms there (all requests)"] + [c.fmt_ms(w["p50_ms"][k]) for k in keys],
        ["errors there"] + [c.fmt_num(w["errors"][k], 0) for k in keys],
        ["CPU % (whole tree, 100 = one core)"] + [c.fmt_num(w["cpu_percent"][k]) for k in keys],
        ["CPU µs per request"] + [c.fmt_num(w["cpu_us_per_request"][k]) for k in keys],
        ["memory, PSS MiB (whole tree)"] + [c.fmt_num(w["pss_mb"][k]) for k in keys],
    ]
    if w.get("serve_mode") == "direct":
        print("serve: mode = \"direct\" (the workers accept on serve's socket, no balancer hop)")
    else:
        slots = w.get("serve_max_in_flight_per_worker")
        print(f"serve: least_conn, max_in_flight_per_worker = {slots}" if slots else "serve: least_conn alone")
    print(c.table(["figure"] + keys, rows))
    print(f"target: {w['target']}: {w['verdict']['text']}" if w["target"] else
          f"serve / {before}, rate at the SLO: {w['verdict']['text']}")
    for k, v in w["variants"].items():
        print(f"{k} / {before}, rate at the SLO: {v['text']}")
    for k, v in w["p99_ratio"].items():
        print(f"{which} at equal load, {k} / {before}: {v['text']}")


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


def ab_split(cfg, out, procs):
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
    data = os.path.join(out, "ab.csv")
    with open(data, "w") as f:
        f.write("user,text\n")
        for i, t in enumerate(ladder.texts() * 10):
            f.write(f"user-{i % 997},{urllib.parse.quote(t, safe='')}\n")
    with open(data.replace(".csv", "-texts.txt"), "w") as f:
        f.write("".join(urllib.parse.quote(t, safe="") + "\n" for t in ladder.texts()))
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
    # Half of the traffic lands on the one tier-0 worker: the rate is 80% of what that
    # worker answers alone (closed model, probed on its own port, so serve's counters see
    # none of it), which puts it near 40% busy (the tier-3 arm, the mirror and the
    # generator share the cores).
    probe = c.scalpel_load(["-c", "4", "-d", cfg["rt_probe"], "--data", data.replace(".csv", "-texts.txt"),
                            f"http://127.0.0.1:{base}/qrcode?text={{text:raw}}"], os.path.join(out, "ab-probe.json"),
                           cpu=None)
    rate = max(20, int(0.8 * probe["targets"][0]["steps"][0]["achieved_rps"]))
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
