#!/usr/bin/env bash
# How closely `scalpel load --from` keeps a recorded schedule (issue #15: within 1% of the
# recorded span at --speed 1 and --speed 10). One command:
#
#   scripts/bench-replay.sh
#
# Writes an access log of N requests over SPAN seconds (bursty: exponential gaps, whole-second
# stamps as nginx writes them), then replays it against nginx on a free loopback port that
# logs `$msec` (the time it finished each request; `return 200` answers at once), alternating
# --speed 1 and --speed 10, REPEATS times each. For each replay it prints the span nginx saw
# (first to last request) against the recorded span ÷ speed, the error in %, and how far each
# request landed from its own scheduled time (median, p99 and max, in ms), with the 1-minute
# load average beside it (shared machine).
#
# Installs nginx with apt-get if missing. Honors CARGO_TARGET_DIR.
# Environment: N (2000), SPAN (20, seconds), REPEATS (3), SEED (1); SCALPEL (a scalpel
# binary to use instead of building the release one).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
N="${N:-2000}"
SPAN="${SPAN:-20}"
REPEATS="${REPEATS:-3}"
SEED="${SEED:-1}"

if [ -z "${SCALPEL:-}" ]; then
    (cd "$ROOT" && cargo build --release -q -p scalpel)
    SCALPEL="$TARGET_DIR/release/scalpel"
fi
WORK="$(mktemp -d)"
NGINX_PID=""
cleanup() {
    [ -n "$NGINX_PID" ] && kill "$NGINX_PID" 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT

load1() { cut -d' ' -f1 /proc/loadavg; }
echo "# machine: $(nproc) cpus, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), kernel $(uname -r), $(date -u +%Y-%m-%dT%H:%MZ)"

# The recording: N GETs of /r/0 … /r/N-1 over SPAN seconds, and each one's recorded time as
# scalpel-requests computes it (the j-th of m lines stamped with one second at + j/m).
python3 - "$WORK" "$N" "$SPAN" "$SEED" <<'EOF'
import random, sys, time
work, n, span, seed = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
rng = random.Random(seed)
gaps = [rng.expovariate(1.0) for _ in range(n - 1)]
scale = span / sum(gaps)
t, times = 0.0, [0.0]
for g in gaps:
    t += g * scale
    times.append(t)
base = 1767322800  # 2026-01-02T03:00:00Z
secs = [base + int(x) for x in times]
with open(f"{work}/access.log", "w") as f:
    for i, s in enumerate(secs):
        stamp = time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(s))
        f.write(f'10.0.0.1 - - [{stamp}] "GET /r/{i} HTTP/1.1" 200 3 "-" "bench"\n')
runs = {}
for i, s in enumerate(secs):
    runs.setdefault(s, []).append(i)
recorded = [0.0] * n
for s, idx in runs.items():
    for j, i in enumerate(idx):
        recorded[i] = s + j / len(idx)
first = recorded[0]
with open(f"{work}/recorded.txt", "w") as f:
    for r in recorded:
        f.write(f"{r - first:.6f}\n")
EOF

nginx="$(command -v nginx || echo /usr/sbin/nginx)"
[ -x "$nginx" ] || {
    echo "installing nginx" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx) >&2
    nginx="$(command -v nginx || echo /usr/sbin/nginx)"
}
PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
mkdir -p "$WORK/ng"
cat >"$WORK/ng/nginx.conf" <<EOF
daemon off;
master_process off;
worker_processes 1;
error_log $WORK/ng/error.log warn;
pid $WORK/ng/nginx.pid;
events { worker_connections 4096; }
http {
    client_body_temp_path $WORK/ng/body;
    proxy_temp_path $WORK/ng/proxy;
    fastcgi_temp_path $WORK/ng/fastcgi;
    uwsgi_temp_path $WORK/ng/uwsgi;
    scgi_temp_path $WORK/ng/scgi;
    log_format t '\$msec \$request_uri';
    access_log $WORK/ng/access.log t;
    server { listen 127.0.0.1:$PORT; location / { return 200 "ok\n"; } }
}
EOF
"$nginx" -p "$WORK/ng" -e "$WORK/ng/error.log" -c "$WORK/ng/nginx.conf" &
NGINX_PID=$!
for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break
    sleep 0.05
done

echo "# recording: $N requests over ${SPAN} s (whole-second stamps), $REPEATS replays at each speed"
for i in $(seq "$REPEATS"); do
    for speed in 1 10; do
        : >"$WORK/ng/access.log" # nginx appends: the next line starts the emptied file
        l=$(load1)
        "$SCALPEL" load --no-progress --from "$WORK/access.log" --speed "$speed" \
            --json "$WORK/r.json" "http://127.0.0.1:$PORT" >/dev/null 2>"$WORK/err.txt" ||
            { cat "$WORK/err.txt" >&2; exit 1; }
        sleep 0.3 # nginx writes a line as it frees the request
        python3 - "$WORK" "$speed" "$l" "$i" <<'EOF'
import json, statistics, sys
work, speed, load, run = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4]
recorded = [float(x) for x in open(f"{work}/recorded.txt")]
seen = {}
for line in open(f"{work}/ng/access.log"):
    t, uri = line.split()
    if uri.startswith("/r/"):
        seen[int(uri[3:])] = float(t)
r = json.load(open(f"{work}/r.json"))
span_s = r["config"]["recorded"]["span_s"]
assert len(seen) == len(recorded), f"nginx saw {len(seen)} of {len(recorded)}"
first = seen[0]
got_span = seen[len(recorded) - 1] - first
want_span = span_s / speed
err = (got_span - want_span) / want_span * 100
dev = sorted(abs((seen[i] - first) - recorded[i] / speed) * 1000 for i in range(len(recorded)))
p99 = dev[int(0.99 * (len(dev) - 1))]
print(f"run {run} speed {speed:g}: span {got_span:.3f} s vs {want_span:.3f} s recorded/speed: "
      f"error {err:+.3f}%; per request |offset - scheduled| median {statistics.median(dev):.2f} ms, "
      f"p99 {p99:.2f} ms, max {dev[-1]:.2f} ms (load {load})")
EOF
    done
done
