#!/usr/bin/env python3
"""Direct mode's socket design, measured (issue 14): one listening socket shared by every
worker (what `scalpel serve` does: the socket on fd 3 of each worker), or one SO_REUSEPORT
socket per worker (the kernel hashes each new connection to one of them).

This script plays serve's part exactly as far as the sockets go: it binds the socket(s),
starts the Node workers of examples/serve/app.js with the systemd socket-activation
convention (fd 3, LISTEN_FDS=1, LISTEN_PID = the worker's pid) and stays out of the data
path, as serve does in direct mode. So the figures are those of the socket design, not of
a re-implementation of serve.

Designs:
  shared          one socket, every worker accepts from it (serve today)
  reuseport       one SO_REUSEPORT socket per worker; the parent keeps no copy, so a
                  socket dies with its worker (as when each worker binds its own: Watt,
                  Node's `reusePort`)
  reuseport-held  the same, but the parent keeps each worker's socket and hands it to the
                  worker's successor (what serve would do with per-worker sockets)

For each, in one run:
  1. throughput: wrk -t2 -c$CONNS -d$DUR against the address, $REPEATS times, designs
     alternating; req/s median (min-max);
  2. spread: each worker's share of the CPU the workers used during the wrk runs
     (max/min ratio; 1.0 is even);
  3. queued connections at a worker that dies: worker 0 is frozen (SIGSTOP), $QUEUED
     clients connect and send a request, then worker 0 is killed (SIGKILL) — for
     reuseport-held its successor is started on its socket — and each client's fate is
     counted: answered, reset/closed without an answer, or no answer within $WAIT s.
     Also counted: how many of them were still unanswered while worker 0 was frozen
     (connections that landed on a frozen worker).

  python3 scripts/bench-direct-socket.py                 # DUR=10 REPEATS=3 WORKERS=2
  DUR=3 REPEATS=1 python3 scripts/bench-direct-socket.py # a smoke run

Needs node and wrk. net.ipv4.tcp_migrate_req (Linux >= 5.14) is printed: with 1, the
kernel moves a closing SO_REUSEPORT listener's queue to another listener of its group;
MIGRATE=1 runs the reuseport design once more with it set (needs root and a writable
/proc/sys). The loss counts are not timing figures; req/s and spread need a quiet machine.
"""

import os
import select
import signal
import socket
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
APP = os.path.join(ROOT, "examples", "serve", "app.js")
DUR = int(os.environ.get("DUR", "10"))
REPEATS = int(os.environ.get("REPEATS", "3"))
WORKERS = int(os.environ.get("WORKERS", "2"))
CONNS = int(os.environ.get("CONNS", "64"))
QUEUED = int(os.environ.get("QUEUED", "200"))
WAIT = float(os.environ.get("WAIT", "15"))
BASE = int(os.environ.get("BASE", "18300"))
HOST = "127.0.0.1"
MIGRATE_SYSCTL = "/proc/sys/net/ipv4/tcp_migrate_req"
CLK_TCK = os.sysconf("SC_CLK_TCK")


def listener(port, reuseport):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuseport:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.bind((HOST, port))
    s.listen(511)
    return s


def wait_http(port, limit=30.0):
    deadline = time.time() + limit
    while time.time() < deadline:
        try:
            with socket.create_connection((HOST, port), timeout=1) as c:
                c.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                if c.recv(64).startswith(b"HTTP/1.1 200"):
                    return
        except OSError:
            pass
        time.sleep(0.1)
    sys.exit(f"bench-direct-socket: a worker never answered on port {port}")


class Setup:
    """The workers of one design, on listen port `port`; worker i's own (health) port is
    `hport + i`."""

    def __init__(self, design, port, hport):
        self.design, self.port, self.hport = design, port, hport
        self.reuse = design.startswith("reuseport")
        if self.reuse:
            self.socks = [listener(port, True) for _ in range(WORKERS)]
        else:
            self.socks = [listener(port, False)]
        self.procs = [self.spawn(i) for i in range(WORKERS)]
        if design == "reuseport":
            # No copy kept: each socket lives as long as its worker.
            for s in self.socks:
                s.close()
        for i in range(WORKERS):
            wait_http(hport + i)

    def sock_for(self, i):
        return self.socks[i] if self.reuse else self.socks[0]

    def spawn(self, i):
        fd = self.sock_for(i).fileno()
        env = dict(os.environ, PORT=str(self.hport + i), WORKER_INDEX=str(i), LISTEN_FDS="1",
                   LISTEN_FDNAMES="bench")
        # The shell learns its own pid (kept by exec) and moves the socket onto fd 3.
        return subprocess.Popen(
            ["sh", "-c", f'export LISTEN_PID=$$; exec node "$0" 3<&{fd}', APP],
            env=env, pass_fds=(fd,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def respawn(self, i):
        self.procs[i] = self.spawn(i)
        wait_http(self.hport + i)

    def stop(self):
        for p in self.procs:
            try:
                os.kill(p.pid, signal.SIGCONT)
                p.kill()
            except ProcessLookupError:
                pass
            p.wait()
        for s in self.socks:
            if s.fileno() >= 0:
                s.close()


def set_migrate(value):
    if value.isdigit():
        with open(MIGRATE_SYSCTL, "w") as f:
            f.write(value)


def ticks(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            rest = f.read().rsplit(")", 1)[1].split()
        return int(rest[11]) + int(rest[12])
    except (OSError, IndexError, ValueError):
        return 0


def throughput(setup):
    before = [ticks(p.pid) for p in setup.procs]
    out = subprocess.run(["wrk", "-t2", f"-c{CONNS}", f"-d{DUR}s", f"http://{HOST}:{setup.port}/"],
                         capture_output=True, text=True, check=True).stdout
    used = [ticks(p.pid) - b for p, b in zip(setup.procs, before)]
    rps = next(float(line.split()[1]) for line in out.splitlines() if line.startswith("Requests/sec"))
    errors = [line.strip() for line in out.splitlines() if "Socket errors" in line or "Non-2xx" in line]
    return rps, used, errors


def queued_loss(setup):
    """Freeze worker 0, connect QUEUED clients, kill worker 0; each client's fate."""
    victim = setup.procs[0]
    os.kill(victim.pid, signal.SIGSTOP)
    time.sleep(0.2)
    clients = []
    for _ in range(QUEUED):
        c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        c.settimeout(5)
        c.connect((HOST, setup.port))
        c.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        c.setblocking(False)
        clients.append(c)
    fate = {}  # fileno -> answered | reset

    def collect(deadline):
        while len(fate) < len(clients) and time.time() < deadline:
            pending = [c for c in clients if c.fileno() not in fate]
            ready, _, _ = select.select(pending, [], [], 0.1)
            for c in ready:
                try:
                    data = c.recv(64)
                    fate[c.fileno()] = "answered" if data.startswith(b"HTTP/1.1 200") else "reset"
                except (ConnectionResetError, BrokenPipeError):
                    fate[c.fileno()] = "reset"
                except BlockingIOError:
                    pass

    # The live workers take what reaches them; what is left waits at the frozen one.
    collect(time.time() + 2.0)
    at_frozen = len(clients) - len(fate)
    victim.kill()
    victim.wait()
    if setup.design == "reuseport-held":
        setup.respawn(0)
    collect(time.time() + WAIT)
    counts = {"answered": 0, "reset": 0, "no answer": 0}
    for c in clients:
        counts[fate.get(c.fileno(), "no answer")] += 1
        c.close()
    return at_frozen, counts


def main():
    for tool in ("node", "wrk"):
        if subprocess.run(["sh", "-c", f"command -v {tool}"], capture_output=True).returncode:
            sys.exit(f"bench-direct-socket: {tool} is required")
    try:
        migrate = open(MIGRATE_SYSCTL).read().strip()
    except OSError:
        migrate = "absent (Linux < 5.14)"
    designs = ["shared", "reuseport", "reuseport-held"]
    port, hport = BASE, BASE + 10
    rps = {d: [] for d in designs}
    cpu = {d: [0] * WORKERS for d in designs}
    errs = {d: [] for d in designs}
    for r in range(REPEATS):
        # Each design goes first in turn: drift and warm-up hit all alike.
        for d in designs[r % 3:] + designs[:r % 3]:
            s = Setup(d, port, hport)
            try:
                r, used, e = throughput(s)
            finally:
                s.stop()
            rps[d].append(r)
            cpu[d] = [a + b for a, b in zip(cpu[d], used)]
            errs[d] += e
    loss = {}
    runs = list(designs)
    if os.environ.get("MIGRATE") == "1":
        if os.access(MIGRATE_SYSCTL, os.W_OK):
            runs.append("reuseport+migrate")
        else:
            print(f"MIGRATE=1: {MIGRATE_SYSCTL} is not writable here; skipped")
    try:
        for d in runs:
            s = Setup(d.replace("+migrate", ""), port, hport)
            try:
                if d == "reuseport+migrate":
                    try:
                        set_migrate("1")
                    except OSError as e:
                        print(f"MIGRATE=1: cannot set {MIGRATE_SYSCTL}: {e}")
                        continue
                loss[d] = queued_loss(s)
            finally:
                s.stop()
    finally:
        if "reuseport+migrate" in runs:
            try:
                set_migrate(migrate)
            except OSError:
                pass

    print(f"# direct mode: shared socket vs SO_REUSEPORT per worker ({WORKERS} Node workers, "
          f"{os.uname().release}, {os.cpu_count()} CPUs)")
    print(f"net.ipv4.tcp_migrate_req = {migrate}")
    print()
    print(f"wrk -t2 -c{CONNS} -d{DUR}s, {REPEATS} runs alternating, order rotated; spread = each worker's "
          f"share of the workers' CPU over all runs")
    print()
    print("| design | req/s median (min-max) | CPU share per worker | max/min |")
    print("|---|---|---|---|")
    for d in designs:
        v = sorted(rps[d])
        total = sum(cpu[d]) or 1
        shares = " / ".join(f"{100 * c / total:.0f}%" for c in cpu[d])
        ratio = f"{max(cpu[d]) / min(cpu[d]):.2f}" if min(cpu[d]) > 0 else "inf"
        print(f"| {d} | {statistics.median(v):.0f} ({v[0]:.0f}-{v[-1]:.0f}) | {shares} | {ratio} |")
        for e in sorted(set(errs[d])):
            print(f"  {d}: wrk: {e}")
    print()
    print(f"Worker 0 frozen, {QUEUED} clients connect and send GET /, worker 0 killed "
          f"(reuseport-held: its successor started on its socket); fate within {WAIT:.0f} s:")
    print()
    print("| design | waiting at the frozen worker | answered | reset / closed | no answer |")
    print("|---|---|---|---|---|")
    for d, (at_frozen, c) in loss.items():
        print(f"| {d} | {at_frozen} | {c['answered']} | {c['reset']} | {c['no answer']} |")


if __name__ == "__main__":
    main()
