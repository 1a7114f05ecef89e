#!/usr/bin/env bash
# Replaying recorded traffic with `scalpel load --from` (issue #15), one command per figure:
#
#   scripts/bench-replay.sh                   # schedule: within 1% of the recorded span at --speed 1 and 10
#   scripts/bench-replay.sh memory            # constant memory: peak RSS replaying a 100 MiB and a 1 GiB log
#   SIZE=1GiB scripts/bench-replay.sh memory  # one size (100MiB, 1GiB, 2GiB, 500MB, ...)
#
# memory: writes an nginx combined access log of each SIZE (default "100MiB 1GiB"; lines of
# about 1 KiB — a long query string and a browser user agent — so 1 GiB is ~1M requests)
# under the target dir's tmp/ (deleted at exit; never commit it), replays every record of it
# once as a pool (`-c 32 -n RECORDS`: a closed loop over the records in file order, as fast
# as nginx answers) against nginx `return 200` on loopback, and prints the replay's peak RSS
# (VmHWM, from /usr/bin/time) and its RSS sampled once a second, with the requests sent and
# the 1-minute load average. Memory does not depend on timing: a loaded machine changes how
# long this takes, not its figures.
#
# schedule (the default):
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
# Environment: N (2000), SPAN (20, seconds), REPEATS (3), SEED (1) for the schedule; SIZE for
# memory (above); SCALPEL (a scalpel binary to use instead of building the release one).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
MODE="${1:-schedule}"
case "$MODE" in
    schedule | memory) ;;
    *) echo "bench-replay: schedule | memory (nothing: schedule)" >&2; exit 2 ;;
esac
N="${N:-2000}"
SPAN="${SPAN:-20}"
REPEATS="${REPEATS:-3}"
SEED="${SEED:-1}"

if [ -z "${SCALPEL:-}" ]; then
    (cd "$ROOT" && cargo build --release -q -p scalpel)
    SCALPEL="$TARGET_DIR/release/scalpel"
fi
# Under the target dir, not /tmp (often tmpfs, where a 1 GiB log would be memory).
mkdir -p "$TARGET_DIR/tmp"
WORK="$(mktemp -d "$TARGET_DIR/tmp/bench-replay.XXXXXX")"
NGINX_PID=""
cleanup() {
    [ -n "$NGINX_PID" ] && kill "$NGINX_PID" 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT

# shellcheck source=scripts/lib/bench-basics.sh
source "$ROOT/scripts/lib/bench-basics.sh"   # load1, machine_line, free_port
# shellcheck source=scripts/lib/procstat.sh
source "$ROOT/scripts/lib/procstat.sh"       # rss_kib: scalpel procstat
machine_line

start_nginx() {
    nginx="$(command -v nginx || echo /usr/sbin/nginx)"
    [ -x "$nginx" ] || {
        echo "installing nginx" >&2
        (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx) >&2
        nginx="$(command -v nginx || echo /usr/sbin/nginx)"
    }
    PORT="$(free_port)"
    mkdir -p "$WORK/ng"
    # The memory mode's nginx logs nothing: a million lines would only fill the disk.
    local log="access_log $WORK/ng/access.log t;"
    [ "$MODE" = memory ] && log="access_log off;"
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
    $log
    keepalive_requests 100000000;
    large_client_header_buffers 4 16k;
    server { listen 127.0.0.1:$PORT; location / { return 200 "ok\n"; } }
}
EOF
    "$nginx" -p "$WORK/ng" -e "$WORK/ng/error.log" -c "$WORK/ng/nginx.conf" &
    NGINX_PID=$!
    for _ in $(seq 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break
        sleep 0.05
    done
}

# Bytes of a size written as 100MiB, 1GiB, 500MB or a plain number.
bytes_of() {
    python3 - "$1" <<'EOF'
import re, sys
m = re.fullmatch(r"(\d+)\s*(|B|KB|KiB|MB|MiB|GB|GiB)", sys.argv[1].strip())
if not m:
    sys.exit(f"bench-replay: SIZE {sys.argv[1]!r}: write e.g. 100MiB or 1GiB")
units = {"": 1, "B": 1, "KB": 10**3, "KiB": 2**10, "MB": 10**6, "MiB": 2**20,
         "GB": 10**9, "GiB": 2**30}
print(int(m[1]) * units[m[2]])
EOF
}

bench_memory() {
    local sizes="${SIZE:-100MiB 1GiB}"
    start_nginx
    echo "# memory: every record replayed once (-c 32 -n RECORDS) against nginx return 200 on 127.0.0.1:$PORT"
    echo "# rss samples: the scalpel process's RSS once a second while it ran (KiB, scalpel procstat)"
    printf '%-8s %-9s %-8s %-9s %-13s %-34s %-8s %s\n' size records file_MiB sent \
        peak_rss_KiB "rss samples min/median/max" seconds load
    for size in $sizes; do
        local want
        want=$(bytes_of "$size")
        # ~1 KiB lines, each a different path and query; 2,000 lines per stamped second
        # (the schedule is not used: -c replays the records as a pool).
        python3 - "$WORK/access.log" "$want" <<'EOF'
import sys, time
path, want = sys.argv[1], int(sys.argv[2])
base = 1767322800
ua = ("Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) "
      "Chrome/131.0.0.0 Safari/537.36")
pad = "&f=" + "x" * 640
written, n, buf = 0, 0, []
with open(path, "w", buffering=1 << 20) as f:
    while written < want:
        stamp = time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(base + n // 2000))
        line = (f'10.0.{n % 200}.{n % 251} - - [{stamp}] "GET /v1/users/u{n}/stats?days=30'
                f'&session={n * 2654435761 % 4294967296:08x}{pad} HTTP/1.1" 200 {n % 5000} '
                f'"https://shop.example.com/cart?item={n % 977}" "{ua}" 0.004\n')
        buf.append(line)
        written += len(line)
        n += 1
        if len(buf) == 4096:
            f.write("".join(buf))
            buf.clear()
    f.write("".join(buf))
EOF
        local records bytes l t0 t1
        records=$(wc -l <"$WORK/access.log")
        bytes=$(stat -c %s "$WORK/access.log")
        l=$(load1)
        t0=$(date +%s.%N)
        /usr/bin/time -f %M -o "$WORK/peak.txt" "$SCALPEL" load --no-progress \
            --from "$WORK/access.log" -c 32 -n "$records" --json "$WORK/r.json" \
            "http://127.0.0.1:$PORT" >/dev/null 2>"$WORK/err.txt" &
        local tpid=$! child="" rss
        # scalpel is time's child: its RSS once a second while it runs.
        : >"$WORK/rss.txt"
        while kill -0 "$tpid" 2>/dev/null; do
            [ -n "$child" ] || child=$(pgrep -P "$tpid" || true)
            if [ -n "$child" ]; then
                rss=$(rss_kib "$child")
                [ "$rss" -gt 0 ] && echo "$rss" >>"$WORK/rss.txt"
            fi
            sleep 1
        done
        wait "$tpid" || { cat "$WORK/err.txt" >&2; exit 1; }
        t1=$(date +%s.%N)
        python3 - "$WORK" "$size" "$records" "$bytes" "$t0" "$t1" "$l" <<'EOF'
import json, statistics, sys
work, size, records, size_b, t0, t1, load = sys.argv[1:8]
r = json.load(open(f"{work}/r.json"))
step = r["targets"][0]["steps"][0]
assert not r["config"]["recorded"].get("looped"), "the pool was looped"
sent = step["requests"]
peak = int(open(f"{work}/peak.txt").read().split()[-1])
rss = sorted(int(x) for x in open(f"{work}/rss.txt") if x.strip())
samples = f"{rss[0]}/{int(statistics.median(rss))}/{rss[-1]} ({len(rss)})" if rss else "-"
print(f"{size:<8} {records:<9} {int(size_b) / 2**20:<8.0f} {sent:<9} {peak:<13} {samples:<34} "
      f"{float(t1) - float(t0):<8.1f} {load}")
if sent != int(records) or step["errors"]:
    print(f"  note: {sent} requests, {step['errors']} errors for {records} records")
EOF
        rm -f "$WORK/access.log"
    done
}

if [ "$MODE" = memory ]; then
    bench_memory
    exit 0
fi

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

start_nginx

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
