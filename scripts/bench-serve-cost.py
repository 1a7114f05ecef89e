#!/usr/bin/env python3
"""Where a proxied request's CPU goes, scalpel serve against nginx (issue 27, item 4): two
hello workers behind each balancer, as scenario 1 of scripts/bench-serve.sh sets them up
(serve `least_conn`; nginx round robin, `keepalive 64`, the same forwarding headers).

Parts (PARTS, default all):
  split     wrk -t2 -c$CONNS -d$DUR against each setup, alternating, $REPEATS rounds; the CPU
            time of each process group (/proc/PID/stat: user and system apart) over each
            run ÷ the requests wrk counted: the balancer, the workers, wrk itself. The sum is
            what one request costs the machine; the rate two saturated cores can carry is
            2 s ÷ that sum, so the balancer's share bounds what any balancer can gain
            (the "bound" line: the ratio over nginx if serve's own cost were zero). Ratios
            serve/nginx and serve/serve-old, one per round, with scripts/lib/paired.py's
            interval (min–max below six rounds).
  instr     each balancer alone under callgrind (valgrind), loaded by wrk -t1 -c$CONNS:
            once $WARM requests are through, callgrind's counters are zeroed, $WINDOW s
            pass, and the instructions over that window ÷ the requests the balancer itself
            counted in it (serve's /metrics, nginx's stub_status) — repeated until two
            windows agree within 3%. User-space instructions only, but not blurred by a
            loaded machine: the before/after figure (when no two windows agree, the median
            window, marked). With that window's dump: self instructions by part (hyper's
            server side, scalpel_http's h1 client side, serve, tokio, the allocator...),
            the top functions, and the allocator calls per request (malloc, free,
            realloc: every heap allocation), written to $OUT/instr-*.txt. The window
            holds one /metrics (or stub_status) read, its count: ~1% of the window.
  syscalls  perf stat on the system-call tracepoints of each balancer for $WINDOW s under the
            same load (no ptrace stop per call: the balancer runs at its own pace); system
            calls per request by name.

Setups: serve ($SCALPEL), serve-old ($OLD, when set: the binary before a change, for
before/after in the same run), nginx. WORKER=node (examples/serve/app.js, the default) or
go (crates/serve/tests/apps/hello.go, built into the target dir: a faster worker, so the
balancer's own share shows).

    python3 scripts/bench-serve-cost.py
    PARTS=instr OLD=/tmp/scalpel-before python3 scripts/bench-serve-cost.py
    PARTS=split WORKER=go REPEATS=5 python3 scripts/bench-serve-cost.py

Needs wrk, nginx, node (go for WORKER=go), valgrind (instr), perf (syscalls). Writes
$OUT (default target/bench/serve-cost): raw outputs and summary.md. Standard library only.
"""

import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts", "lib"))
import callgrind  # noqa: E402
import paired  # noqa: E402

TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
SCALPEL = os.environ.get("SCALPEL", os.path.join(TARGET, "release", "scalpel"))
OLD = os.environ.get("OLD", "")
OUT = os.environ.get("OUT", os.path.join(TARGET, "bench", "serve-cost"))
PARTS = os.environ.get("PARTS", "split instr syscalls").split()
WORKER = os.environ.get("WORKER", "node")
DUR = int(os.environ.get("DUR", "8"))
REPEATS = int(os.environ.get("REPEATS", "3"))
CONNS = int(os.environ.get("CONNS", "64"))
WINDOW = float(os.environ.get("WINDOW", "5"))
WARM = int(os.environ.get("WARM", "2000"))
BASE = int(os.environ.get("BASE", "18600"))
HOST = "127.0.0.1"
TICK = os.sysconf("SC_CLK_TCK")

P_SERVE, P_ADMIN, P_NGINX, P_STATUS = BASE, BASE + 1, BASE + 2, BASE + 3
W_SERVE, W_NGINX = BASE + 10, BASE + 20

started = []


def say(line=""):
    print(line, flush=True)
    with open(os.path.join(OUT, "summary.md"), "a") as f:
        f.write(line + "\n")


def get(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def wait_http(url, tries=600):
    for _ in range(tries):
        try:
            get(url, timeout=2)
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"bench-serve-cost: {url} never answered")


def start(cmd, log, **kw):
    p = subprocess.Popen(cmd, stdout=open(log, "w"), stderr=subprocess.STDOUT, **kw)
    started.append(p)
    return p


def stop(p, sig=signal.SIGTERM):
    if p.poll() is None:
        p.send_signal(sig)
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(c) for c in f.read().split()]
    except OSError:
        return []


def ticks(pids):
    """(user, system) clock ticks of the processes, summed (a gone pid counts 0). The
    fields after the command's closing parenthesis: the name may hold spaces. Read here,
    not by `scalpel procstat`, which gives user and system time only together; the
    processes read are long-lived (no reaped children to count)."""
    u = s = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                rest = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        u, s = u + int(rest[11]), s + int(rest[12])
    return u, s


# ---- the setups ----

def worker_cmd():
    if WORKER == "go":
        exe = os.path.join(TARGET, "bench", "hello-go")
        if not os.path.exists(exe):
            src = os.path.join(ROOT, "crates", "serve", "tests", "apps", "hello.go")
            subprocess.run(["go", "build", "-o", exe, src], check=True)
        return [exe]
    return ["node", os.path.join(ROOT, "examples", "serve", "app.js")]


def serve_toml():
    path = os.path.join(OUT, "serve.toml")
    cmd = ", ".join(f'"{c}"' for c in worker_cmd())
    with open(path, "w") as f:
        f.write(f'[server]\nlisten = "{HOST}:{P_SERVE}"\nadmin = "{HOST}:{P_ADMIN}"\n'
                f'[[app]]\nname = "hello"\ncommand = [{cmd}]\nworkers = 2\n'
                f'port_base = {W_SERVE}\nbalance = "least_conn"\n')
    return path


def nginx_conf(single):
    """scripts/bench-serve.sh's nginx (scenario 1); `single`: one process (for valgrind and
    strace), with a stub_status listener that counts the requests it handled."""
    path = os.path.join(OUT, "nginx-single.conf" if single else "nginx.conf")
    head = "master_process off;\nworker_processes 1;" if single else "worker_processes auto;"
    status = (f"  server {{ listen {HOST}:{P_STATUS}; location = /status {{ stub_status; }} }}\n"
              if single else "")
    with open(path, "w") as f:
        f.write(f"""{head}
pid {OUT}/nginx.pid;
error_log {OUT}/nginx-error.log;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  keepalive_requests 10000000;
  client_body_temp_path {OUT}; proxy_temp_path {OUT}; fastcgi_temp_path {OUT};
  uwsgi_temp_path {OUT}; scgi_temp_path {OUT};
  upstream app {{ server {HOST}:{W_NGINX}; server {HOST}:{W_NGINX + 1}; keepalive 64; keepalive_requests 10000000; }}
  server {{
    listen {HOST}:{P_NGINX};
    location / {{
      proxy_pass http://app; proxy_http_version 1.1; proxy_set_header Connection "";
      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
      proxy_set_header X-Forwarded-Proto $scheme;
      proxy_set_header Via "1.1 nginx";
    }}
  }}
{status}}}
""")
    return path


class Setup:
    """One balancer with its two workers: started, measured, stopped."""

    def __init__(self, name, binary=None):
        self.name, self.binary = name, binary
        self.port = P_NGINX if binary is None else P_SERVE
        self.url = f"http://{HOST}:{self.port}/"
        self.workers = []

    def start(self, wrap=(), single=False):
        log = os.path.join(OUT, f"{self.name}.log")
        if self.binary is None:
            for i in range(2):
                env = dict(os.environ, PORT=str(W_NGINX + i), WORKER_INDEX=str(i))
                self.workers.append(start(worker_cmd(), os.path.join(OUT, f"worker-{i}.log"), env=env))
            for i in range(2):
                wait_http(f"http://{HOST}:{W_NGINX + i}/healthz")
            conf = nginx_conf(single)
            self.proc = start([*wrap, "nginx", "-c", conf, "-p", OUT, "-g", "daemon off;"], log)
        else:
            self.proc = start([*wrap, self.binary, "serve", "--config", serve_toml()], log)
        wait_http(self.url)
        time.sleep(0.5)

    def balancer_pids(self):
        if self.binary is None:
            return [self.proc.pid, *children(self.proc.pid)]
        return [self.proc.pid]

    def worker_pids(self):
        if self.binary is None:
            return [w.pid for w in self.workers]
        return children(self.proc.pid)

    @property
    def count_url(self):
        """Where the balancer says how many requests it handled: serve's /metrics, the
        single nginx's stub_status."""
        if self.binary is None:
            return f"http://{HOST}:{P_STATUS}/status"
        return f"http://{HOST}:{P_ADMIN}/metrics"

    def count(self, text):
        if self.binary is None:
            return int(text.splitlines()[2].split()[2])
        return sum(int(float(l.split()[-1])) for l in text.splitlines()
                   if l.startswith("scalpel_serve_requests_total{"))

    def handled(self):
        """Requests the balancer has counted so far."""
        return self.count(get(self.count_url))

    def stop(self):
        stop(self.proc)
        for w in self.workers:
            stop(w)
        self.workers = []


def setups():
    s = [Setup("serve", SCALPEL)]
    if OLD:
        s.append(Setup("serve-old", OLD))
    s.append(Setup("nginx"))
    return s


def wrk(url, threads, dur, log):
    out = subprocess.run(["wrk", f"-t{threads}", f"-c{CONNS}", f"-d{dur}s", url],
                         capture_output=True, text=True).stdout
    with open(log, "a") as f:
        f.write(out)
    n = int(re.search(r"(\d+) requests in", out).group(1))
    return n, float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))


# ---- split: CPU per request by process group ----

def split():
    say(f"## CPU per request by process, wrk -t2 -c{CONNS} -d{DUR}s, {REPEATS} runs alternating, worker = {WORKER}")
    say()
    rows = {}
    for _ in range(REPEATS):
        for s in setups():
            s.start()
            bal, wk = s.balancer_pids(), s.worker_pids()
            b0, w0 = ticks(bal), ticks(wk)
            t0 = time.time()
            p = subprocess.Popen(["wrk", "-t2", f"-c{CONNS}", f"-d{DUR}s", s.url],
                                 stdout=subprocess.PIPE, text=True)
            # wrk's own CPU: read just before it exits (its last tick is lost; ~0.1%).
            g = (0, 0)
            while p.poll() is None:
                now = ticks([p.pid])
                g = now if sum(now) else g
                time.sleep(0.05)
            out = p.stdout.read()
            wall = time.time() - t0
            b1, w1 = ticks(bal), ticks(wk)
            with open(os.path.join(OUT, "wrk.log"), "a") as f:
                f.write(out)
            n = int(re.search(r"(\d+) requests in", out).group(1))
            us = lambda a, b: (b - a) / TICK * 1e6 / n
            r = rows.setdefault(s.name, [])
            r.append(dict(rps=n / wall, bu=us(b0[0], b1[0]), bs=us(b0[1], b1[1]),
                          w=us(w0[0] + w0[1], w1[0] + w1[1]), g=us(0, g[0] + g[1]),
                          load=os.getloadavg()[0]))
            s.stop()
    med = lambda name, k: statistics.median(x[k] for x in rows[name])
    say("| setup | req/s | balancer user µs | balancer system µs | workers µs | wrk µs | sum µs | load |")
    say("|---|---|---|---|---|---|---|---|")
    for name, r in rows.items():
        tot = med(name, "bu") + med(name, "bs") + med(name, "w") + med(name, "g")
        say(f"| {name} | {med(name, 'rps'):,.0f} | {med(name, 'bu'):.1f} | {med(name, 'bs'):.1f} | "
            f"{med(name, 'w'):.1f} | {med(name, 'g'):.1f} | {tot:.1f} | {med(name, 'load'):.1f} |")
    say()
    say("(medians of the runs; µs of CPU per request; load: the 1-minute load average)")
    say()
    # Each round ran every setup once, in turn: one ratio per round and pair of setups.
    for a, b in (("serve", "nginx"), ("serve", "serve-old"), ("serve-old", "nginx")):
        if a in rows and b in rows:
            for what, sign in (("req/s", 1), ("balancer CPU per request", -1)):
                ratios = [(x["rps"] / y["rps"]) if sign > 0 else
                          ((x["bu"] + x["bs"]) / (y["bu"] + y["bs"]))
                          for x, y in zip(rows[a], rows[b])]
                med_r, lo, hi, cover = paired.interval(ratios)
                say(f"- {a} / {b}, {what}: **{med_r:.2f}x** ({lo:.2f}–{hi:.2f}, "
                    f"{paired.describe(cover)}; {len(ratios)} rounds)")
    ngx = med("nginx", "bu") + med("nginx", "bs")
    rest = statistics.median([x["w"] + x["g"] for v in rows.values() for x in v])
    say(f"bound: with nginx's balancer at {ngx:.1f} µs and the workers and wrk at {rest:.1f} µs per "
        f"request, a balancer costing nothing would reach {(ngx + rest) / rest:.2f}x nginx's rate; "
        f"1.3x needs a balancer at or below {(ngx + rest) / 1.3 - rest:.1f} µs per request")
    say()


# ---- instr: callgrind windows ----

def instr():
    say(f"## User-space instructions per request (callgrind on the balancer, wrk -t1 -c{CONNS}, {WINDOW:.0f} s windows)")
    say()
    for s in setups():
        outf = os.path.join(OUT, f"cg-{s.name}.%p")
        for old in os.listdir(OUT):
            if old.startswith(f"cg-{s.name}."):
                os.remove(os.path.join(OUT, old))
        s.start(wrap=["valgrind", "--tool=callgrind", "--compress-strings=no",
                      f"--callgrind-out-file={outf}"], single=True)
        load = subprocess.Popen(["wrk", "-t1", f"-c{CONNS}", "-d600s", s.url],
                                stdout=subprocess.DEVNULL)
        r0 = s.handled()
        while s.handled() - r0 < WARM:
            time.sleep(0.2)
        figs, windows, prev, steady = [], [], None, False
        for _ in range(6):
            dump(s)
            r0 = s.handled()
            time.sleep(WINDOW)
            r1 = s.handled()
            path = dump(s)
            n = r1 - r0 - 1  # the count request at r1 is in the window
            per = callgrind.parse(open(path, errors="replace").read())[0] / n
            figs.append(round(per))
            windows.append((per, path, n))
            if prev and abs(per - prev) <= 0.03 * prev:
                steady = True
                break
            prev = per
        load.send_signal(signal.SIGTERM)
        load.wait()
        s.stop()
        # Not steady: the median window (the figure marked so), never none at all.
        per, path, n = windows[-1] if steady else sorted(windows)[len(windows) // 2]
        _, self_cost, _, calls = callgrind.parse(open(path, errors="replace").read())
        with open(os.path.join(OUT, f"instr-{s.name}.txt"), "w") as f:
            f.write("by part (self instructions per request):\n")
            for part, c in by_part(self_cost):
                f.write(f"{c / n:10,.0f} {100 * c * 1.0 / (per * n):5.1f}%  {part}\n")
            f.write("\n")
            callgrind.report(path, n, 60, ["malloc", "free", "realloc", "calloc"], out=f)
        allocs = sum(v for k, v in calls.items() if k in ("malloc", "realloc", "calloc")) / n
        mark = "" if steady else " (windows not within 3%: the median window)"
        say(f"- {s.name}: **{round(per):,}** instructions per request{mark} (windows: {figs}), "
            f"{allocs:.1f} allocations per request; by part and top functions in instr-{s.name}.txt")
    say()


# The parts of a request's self instructions, by symbol (the first rule that matches):
# the hyper server side, the toolkit's h1 client side (scalpel_http), serve's own code.
PART_RULES = [
    ("memcpy/memmove (moves of large values)", lambda n: "memcpy" in n or "memmove" in n),
    ("allocator (malloc, free)", lambda n: n in ("malloc", "free", "realloc", "calloc", "cfree")
     or n.startswith(("_int_", "__rdl_", "__rust_alloc", "__rust_dealloc", "malloc_", "unlink_chunk"))),
    ("httparse (request and response heads)", lambda n: n.startswith("httparse")),
    ("hyper (client side: server connection)", lambda n: "hyper::" in n),
    ("scalpel_http (worker side: h1 client)", lambda n: "scalpel_http" in n),
    ("scalpel_serve (routing, balancing, metrics)", lambda n: "scalpel_serve" in n),
    ("tokio (readiness, timers, tasks)", lambda n: "tokio" in n),
    ("http, bytes (header maps, buffers)", lambda n: n.startswith(("http::", "<http::", "bytes::", "<bytes::"))),
    ("hdrhistogram", lambda n: "hdrhistogram" in n),
    ("time (clock reads)", lambda n: "time" in n.lower() or "clock_gettime" in n),
    ("hashing (SipHash map lookups)", lambda n: "hash" in n.lower()),
    ("nginx", lambda n: n.startswith("ngx_")),
]


def by_part(self_cost):
    parts = {}
    for name, c in self_cost.items():
        part = next((p for p, rule in PART_RULES if rule(name)), "other")
        parts[part] = parts.get(part, 0) + c
    return sorted(parts.items(), key=lambda kv: -kv[1])


def dump(s):
    """Dumps (and zeroes) the counters; returns the new file."""
    before = set(os.listdir(OUT))
    subprocess.run(["callgrind_control", "-d", str(s.proc.pid)], capture_output=True)
    for _ in range(300):
        new = [f for f in set(os.listdir(OUT)) - before if f.startswith(f"cg-{s.name}.")]
        if new:
            time.sleep(0.3)  # written whole
            return os.path.join(OUT, new[0])
        time.sleep(0.1)
    raise SystemExit(f"bench-serve-cost: callgrind wrote no dump for {s.name}")


# ---- syscalls: perf stat on the syscall tracepoints ----

SYSCALLS = ["recvfrom", "sendto", "writev", "readv", "read", "write", "epoll_wait", "epoll_ctl",
            "getsockopt", "setsockopt", "accept4", "socket", "connect", "close", "futex", "brk", "mmap",
            "munmap", "madvise", "clock_nanosleep"]


def syscalls():
    say(f"## System calls per request (perf stat on the syscall tracepoints of the balancer, "
        f"{WINDOW:.0f} s under wrk -t1 -c{CONNS})")
    say()
    events = ",".join(["raw_syscalls:sys_enter"] + [f"syscalls:sys_enter_{c}" for c in SYSCALLS])
    for s in setups():
        s.start(single=True)
        load = subprocess.Popen(["wrk", "-t1", f"-c{CONNS}", "-d600s", s.url],
                                stdout=subprocess.DEVNULL)
        time.sleep(2)
        f0, f1 = os.path.join(OUT, "count-0"), os.path.join(OUT, "count-1")
        # The counting window is the workload's life, which holds the two reads of the
        # balancer's own request count (tracepoints: the balancer runs at its own pace).
        window = (f"curl -s {s.count_url} >{f0}; sleep {WINDOW}; curl -s {s.count_url} >{f1}")
        pids = ",".join(str(p) for p in s.balancer_pids())
        res = subprocess.run(["perf", "stat", "-x,", "-e", events, "-p", pids, "--",
                              "sh", "-c", window], capture_output=True, text=True)
        load.send_signal(signal.SIGTERM)
        load.wait()
        s.stop()
        with open(os.path.join(OUT, f"syscalls-{s.name}.txt"), "w") as f:
            f.write(res.stderr)
        n = max(s.count(open(f1).read()) - s.count(open(f0).read()) - 1, 1)
        counts = {}
        for line in res.stderr.splitlines():
            v = line.split(",")
            if len(v) > 2 and v[0].isdigit():
                counts[v[2].split(":")[-1].replace("sys_enter_", "")] = int(v[0])
        total = counts.pop("sys_enter", 0)
        per = sorted(((k, c / n) for k, c in counts.items()), key=lambda kv: -kv[1])
        say(f"- {s.name}: {total / n:.2f} per request: "
            + ", ".join(f"{k} {c:.2f}" for k, c in per if c >= 0.01))
    say()


def main():
    os.makedirs(OUT, exist_ok=True)
    open(os.path.join(OUT, "summary.md"), "w").close()
    need = {"split": ["wrk"], "instr": ["valgrind", "callgrind_control", "wrk"],
            "syscalls": ["perf", "wrk"]}
    for part in PARTS:
        for tool in need.get(part, []):
            if not shutil.which(tool):
                raise SystemExit(f"bench-serve-cost: {tool} not found (part {part})")
    say("# serve vs nginx: where a request's CPU goes")
    say()
    say(f"- {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; nproc {os.cpu_count()}; load average "
        f"{os.getloadavg()[0]:.1f}; serve {SCALPEL}" + (f", old {OLD}" if OLD else "") + f"; worker {WORKER}")
    say()
    try:
        for part in PARTS:
            {"split": split, "instr": instr, "syscalls": syscalls}[part]()
    finally:
        for p in started:
            if p.poll() is None:
                p.kill()


if __name__ == "__main__":
    main()
