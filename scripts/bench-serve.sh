#!/usr/bin/env bash
# Benchmarks of `scalpel serve` against nginx and pm2; figures go in docs/serve.md.
#
#   scripts/bench-serve.sh                    # full run (DUR=10 s per run, REPEATS=3)
#   DUR=5 REPEATS=2 scripts/bench-serve.sh    # short run (shared machine)
#   SCENARIOS="3" RATE=300 scripts/bench-serve.sh   # only some scenarios
#
# Scenarios (the load generator runs on the same machine; say so next to figures):
#   1. hello: two Node hello-world workers behind scalpel serve, behind nginx (keep-alive
#      upstreams) and under pm2 cluster mode: max req/s (wrk, closed loop); the
#      balancer's own added p50 (open model, 1 worker, serve vs direct); its own memory.
#   2. qr: two CPU-heavy workers (node qr/node/server.js --tier 0-article): max req/s
#      (wrk) for pm2, serve least_conn, serve round_robin; then p99 under an open-model
#      load at 80% of pm2's max (scalpel load).
#   3. blocked: scenario 2's serve least_conn run again, with worker 0 frozen (SIGSTOP)
#      for 10 s three seconds in: detection time and p99 against the unblocked run.
#   tls: scenario 1's two Node hello workers behind scalpel serve with TLS (h2) and behind
#      nginx (TLS, http2, keep-alive upstreams): req/s by h2load (SCENARIOS="tls"; also
#      needs h2load and openssl).
#   direct: two Node hello workers, wrk -t2 -c64: serve mode = "direct" (the shared
#      socket on fd 3) vs pm2 cluster mode vs serve proxy mode; req/s, CPU per request of
#      the whole process tree, and each direct worker's share of the CPU (the spread).
#      SCENARIOS="direct" runs it alone.
#      The socket design behind it (one shared socket vs one SO_REUSEPORT socket per
#      worker: req/s, spread, connections lost with a dying worker) is measured by
#      scripts/bench-direct-socket.py (./run bench direct-socket).
#   express: issue 25's target — an unmodified Express app (tests/apps/node/express.js: no
#      health route, no fd 3 code), two workers: serve mode = "direct" (the Node preload
#      serves its server on fd 3) vs pm2 cluster mode, alternating in one run; wrk req/s.
#      SCENARIOS="express" runs it alone (needs ./run setup for tests/apps/node).
#   express-blocked: issue 25's other target — the same app in proxy mode, no [app.health],
#      under an open-model load (RATE_BLOCKED, default 300 req/s); 3 s in, GET /block on
#      worker 0's own port blocks its event loop for 20 s: seconds until it is out of
#      rotation and until its successor is ready (from serve's log), and the load's errors.
#   frozen-direct: two Node hello workers in direct mode, clients opening a new connection per
#      request; worker 0 frozen (SIGSTOP) 3 s in: failed requests, the frozen worker's share
#      of new connections after the freeze, detection time (FROZEN_DUR, FROZEN_THREADS).
#
# Needs node, wrk, nginx (apt-get install -y nginx wrk), pm2 (scripts/demo/pm2, npm ci by
# scripts/setup.sh), python3. Writes bench-out/serve/: raw outputs + results.md.
# SKIP_BUILD=1 uses the scalpel binary already in the target dir (SCALPEL=path: that one).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
SCALPEL=${SCALPEL:-$TARGET/release/scalpel}
OUT=${OUT:-$ROOT/bench-out/serve}
DUR=${DUR:-10}
REPEATS=${REPEATS:-3}
CONNS=${CONNS:-64}
QR_CONNS=${QR_CONNS:-16}
BASE=${BASE:-18100}
QR_TEXT=${QR_TEXT:-https://example.com/some/fairly/long/path?with=query}
SCENARIOS=${SCENARIOS:-1 2 3}
want() { [[ " $SCENARIOS " == *" $1 "* ]]; }
# shellcheck source=scripts/lib/procstat.sh
source "$ROOT/scripts/lib/procstat.sh" # cpu_ticks, cpu_ticks_own: scalpel procstat --ticks
# shellcheck source=scripts/lib/stats.sh
source "$ROOT/scripts/lib/stats.sh"    # stats: medians, ratios, CPU per request, result fields
mkdir -p "$OUT"
RESULTS=$OUT/results.md
: >"$RESULTS"

say() { echo "$*" | tee -a "$RESULTS"; }

need() { command -v "$1" >/dev/null 2>&1; }
need wrk && need nginx || { apt-get update -qq && apt-get install -y -qq nginx wrk >/dev/null; }
need node && need python3 || { echo "bench-serve: node and python3 are required" >&2; exit 2; }
# pm2 from the project's lock-filed package (scripts/setup.sh installs it there), never global.
PM2=$ROOT/scripts/demo/pm2/node_modules/.bin/pm2
{ want 1 || want 2 || want direct || want express; } && { [ -x "$PM2" ] || (cd "$ROOT/scripts/demo/pm2" && npm ci --no-audit --no-fund --loglevel=error >/dev/null); }
export PM2_HOME=$OUT/pm2home
[[ "${SKIP_BUILD:-0}" == 1 ]] || (cd "$ROOT" && cargo build --release -q -p scalpel)
if want 2 || want 3; then
  [ -f "$ROOT/qr/node/node_modules/qrcode/package.json" ] || (cd "$ROOT/qr/node" && npm ci --silent)
fi

PIDS=()
cleanup() {
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  "$PM2" kill >/dev/null 2>&1 || true
  [ -f "$OUT/nginx.pid" ] && kill "$(cat "$OUT/nginx.pid")" 2>/dev/null || true
  wait 2>/dev/null || true
}
trap cleanup EXIT

port_busy() { (: </dev/tcp/127.0.0.1/"$1") 2>/dev/null; }
for p in $(seq "$BASE" $((BASE + 40))); do
  if port_busy "$p"; then echo "bench-serve: port $p busy; set BASE=" >&2; exit 2; fi
done
wait_http() { # url
  for _ in $(seq 1 300); do curl -sf -o /dev/null "$1" && return 0; sleep 0.1; done
  echo "bench-serve: $1 never answered" >&2; exit 1
}
stop_pid() { kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }

wrk_rps() { # url conns -> req/s
  wrk -t2 -c"$2" -d"${DUR}s" "$1" | tee -a "$OUT/wrk.log" | awk '/Requests\/sec/ {print $2}'
}
wrk_requests() { # -> the requests of the last wrk run
  tail -20 "$OUT/wrk.log" | awk '/requests in/ {n=$1} END {print n}'
}
load_json() { # url rate file [extra...]
  local url=$1 rate=$2 file=$3; shift 3
  "$SCALPEL" load --rate "$rate" -d "${DUR}s" -c 64 --no-progress --json "$file" "$@" "$url" >>"$OUT/load.log" 2>&1
}
mem_line() { # pid -> "VmHWM 11880 kB, VmRSS 11880 kB, Pss 9123 kB" on one line
  local line
  line=$({ grep -E '^(VmHWM|VmRSS):' /proc/"$1"/status; grep '^Pss:' /proc/"$1"/smaps_rollup; } 2>/dev/null |
    tr -s ' \t' ' ' | sed 's/://' | paste -sd, - | sed 's/,/, /g')
  echo "${line:-unavailable (pid $1 had exited)}"
}

serve_config() { # file app-name command-json workers port_base balance listen admin
  cat >"$1" <<EOF
[server]
listen = "127.0.0.1:$7"
admin = "127.0.0.1:$8"
[[app]]
name = "$2"
command = $3
workers = $4
port_base = $5
balance = "$6"
EOF
}
nginx_config() { # name worker_processes listen-port "server …; …" -> $OUT/name.conf
  cat >"$OUT/$1.conf" <<EOF
worker_processes $2;
pid $OUT/$1.pid;
error_log $OUT/$1-error.log;
events { worker_connections 4096; }
http {
  access_log off;
  # nginx ends a client connection after 1000 requests by default (an h2 connection with a
  # GOAWAY, which h2load does not follow by reconnecting: 8 connections x 1000 requests in
  # the whole run) and an upstream one likewise; no connection ends during a run.
  keepalive_requests 10000000;
  upstream app { $4 keepalive 64; keepalive_requests 10000000; }
  server {
    listen 127.0.0.1:$3;
    # Like for like: the same forwarding headers scalpel serve adds (X-Forwarded-For,
    # X-Forwarded-Proto, Via), so both upstreams parse the same request.
    location / {
      proxy_pass http://app; proxy_http_version 1.1; proxy_set_header Connection "";
      proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
      proxy_set_header X-Forwarded-Proto \$scheme;
      proxy_set_header Via "1.1 nginx";
    }
  }
}
EOF
}
start_serve() { # config logfile [own] -> sets SERVE_PID
  # `own`: serve in a session of its own (setsid), as a service manager starts it and as
  # pm2's daemon puts itself: with the kernel's autogroup scheduling a session is one
  # scheduling group, so against pm2 both setups must be alike (docs/serve.md, "CPU per
  # request against pm2"). Not a group leader here, setsid execs serve in place: $! is serve.
  local launch=(); [ "${3:-}" = own ] && launch=(setsid)
  "${launch[@]}" "$SCALPEL" serve --config "$1" >/dev/null 2>"$2" &
  SERVE_PID=$!
  PIDS+=("$SERVE_PID")
}

say "# scalpel serve benchmark"
say ""
say "- date: $(date -u +%Y-%m-%dT%H:%MZ); nproc: $(nproc); CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); kernel: $(uname -r)"
say "- node $(node --version), nginx $(nginx -v 2>&1 | cut -d/ -f2), pm2 $("$PM2" --version 2>/dev/null | tail -1), wrk (2 threads), scalpel load; DUR=${DUR}s, REPEATS=$REPEATS"
say "- load generator and servers share the same cores"
say ""

HELLO=$ROOT/examples/serve/app.js
HELLO_JS=$HELLO
P_SERVE=$BASE P_ADMIN=$((BASE + 1)) P_NGINX=$((BASE + 2)) P_PM2=$((BASE + 3)) P_DIRECT=$((BASE + 4))
W1=$((BASE + 10)) W2=$((BASE + 20))


# ---- direct ----
if want direct; then
say "## direct: serve mode = \"direct\" vs pm2 cluster vs serve proxy (two Node hello workers)"
P_DLISTEN=$((BASE + 5)) P_DADMIN=$((BASE + 6)) P_DBAL=$((BASE + 7)) W3=$((BASE + 30))
cat >"$OUT/direct.toml" <<EOF
[server]
listen = "127.0.0.1:$P_DBAL"
admin = "127.0.0.1:$P_DADMIN"
[[app]]
name = "hello"
command = ["node", "$HELLO_JS"]
workers = 2
port_base = $W3
mode = "direct"
listen = "127.0.0.1:$P_DLISTEN"
EOF
serve_config "$OUT/proxy.toml" hello "[\"node\", \"$HELLO_JS\"]" 2 "$W3" least_conn "$P_DBAL" "$P_DADMIN"
declare -A DRPS DCPU
SPREAD=()
for r in $(seq 1 "$REPEATS"); do
  start_serve "$OUT/direct.toml" "$OUT/serve-direct.log" own
  wait_http "http://127.0.0.1:$P_DLISTEN/"
  sleep 0.5
  WORKERS=$(pgrep -P "$SERVE_PID" | xargs)
  T0=$(cpu_ticks "$SERVE_PID")
  declare -A W0=()
  for w in $WORKERS; do W0[$w]=$(cpu_ticks "$w"); done
  DRPS[direct]+=" $(wrk_rps "http://127.0.0.1:$P_DLISTEN/" "$CONNS")"
  T1=$(cpu_ticks "$SERVE_PID")
  DCPU[direct]+=" $(stats cpu-us "$T0" "$T1" "$(wrk_requests)")"
  line=""
  for w in $WORKERS; do line+=" $w:$(( $(cpu_ticks "$w") - ${W0[$w]} ))"; done
  SPREAD+=("run $r, CPU ticks per worker:$line")
  stop_pid "$SERVE_PID"
  # pm2 cluster mode
  PORT=$P_DLISTEN "$PM2" start "$HELLO_JS" -i 2 --name hello >/dev/null
  wait_http "http://127.0.0.1:$P_DLISTEN/"
  # The daemon of this PM2_HOME (never another user's pm2) and its workers.
  PM2_PIDS="$(cat "$PM2_HOME/pm2.pid") $("$PM2" pid hello | xargs)"
  T0=$(cpu_ticks $PM2_PIDS)
  DRPS[pm2]+=" $(wrk_rps "http://127.0.0.1:$P_DLISTEN/" "$CONNS")"
  T1=$(cpu_ticks $PM2_PIDS)
  DCPU[pm2]+=" $(stats cpu-us "$T0" "$T1" "$(wrk_requests)")"
  "$PM2" delete all >/dev/null
  # serve proxy mode
  start_serve "$OUT/proxy.toml" "$OUT/serve-proxy.log" own
  wait_http "http://127.0.0.1:$P_DBAL/"
  sleep 0.5
  T0=$(cpu_ticks "$SERVE_PID")
  DRPS[proxy]+=" $(wrk_rps "http://127.0.0.1:$P_DBAL/" "$CONNS")"
  T1=$(cpu_ticks "$SERVE_PID")
  DCPU[proxy]+=" $(stats cpu-us "$T0" "$T1" "$(wrk_requests)")"
  stop_pid "$SERVE_PID"
done
say ""
say "wrk -t2 -c$CONNS -d${DUR}s, median (min–max) of $REPEATS; CPU = all processes of the setup (balancer/daemon and workers) ÷ requests:"
say ""
say "| setup | req/s | CPU µs/request |"
say "|---|---|---|"
for k in direct pm2 proxy; do say "| $k | $(stats summary -d 1 "${DRPS[$k]}") | $(stats summary -d 1 "${DCPU[$k]}") |"; done
say ""
say "direct/pm2 = $(stats ratio -d 2 "${DRPS[direct]}" "${DRPS[pm2]}"), direct/proxy = $(stats ratio -d 2 "${DRPS[direct]}" "${DRPS[proxy]}")"
say ""
for l in "${SPREAD[@]}"; do say "- direct spread, $l"; done
say ""
fi

# ---- express (issue 25) ----
EXPRESS_JS=$ROOT/tests/apps/node/express.js
if want express || want express-blocked; then
  [ -d "$ROOT/tests/apps/node/node_modules/express" ] || (cd "$ROOT/tests/apps/node" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi
if want express; then
say "## express: an unmodified Express app, two workers: serve direct vs pm2 cluster"
P_ELISTEN=$((BASE + 8)) P_EADMIN=$((BASE + 9)) P_EBAL=$((BASE + 11)) W4=$((BASE + 34))
cat >"$OUT/express-direct.toml" <<EOF
[server]
listen = "127.0.0.1:$P_EBAL"
admin = "127.0.0.1:$P_EADMIN"
[[app]]
name = "web"
command = ["node", "$EXPRESS_JS"]
workers = 2
port_base = $W4
mode = "direct"
listen = "127.0.0.1:$P_ELISTEN"
EOF
declare -A ERPS
for r in $(seq 1 "$REPEATS"); do
  start_serve "$OUT/express-direct.toml" "$OUT/serve-express-$r.log" own
  wait_http "http://127.0.0.1:$P_ELISTEN/"
  sleep 0.5
  ERPS[direct]+=" $(wrk_rps "http://127.0.0.1:$P_ELISTEN/" "$CONNS")"
  stop_pid "$SERVE_PID"
  PORT=$P_ELISTEN "$PM2" start "$EXPRESS_JS" -i 2 --name web >/dev/null
  wait_http "http://127.0.0.1:$P_ELISTEN/"
  ERPS[pm2]+=" $(wrk_rps "http://127.0.0.1:$P_ELISTEN/" "$CONNS")"
  "$PM2" delete all >/dev/null
done
say ""
say "wrk -t2 -c$CONNS -d${DUR}s, median (min–max) of $REPEATS, alternating:"
say ""
say "| setup | req/s |"
say "|---|---|"
for k in direct pm2; do say "| $k | $(stats summary -d 1 "${ERPS[$k]}") |"; done
say ""
say "direct/pm2 = $(stats ratio -d 2 "${ERPS[direct]}" "${ERPS[pm2]}") (target >= 1.0)"
say ""
fi
if want express-blocked; then
say "## express-blocked: a blocked event loop, no health route (Express, proxy mode, two workers)"
P_XBAL=$((BASE + 12)) P_XADMIN=$((BASE + 13)) W5=$((BASE + 38))
RATE_BLOCKED=${RATE_BLOCKED:-300}
serve_config "$OUT/express-proxy.toml" web "[\"node\", \"$EXPRESS_JS\"]" 2 "$W5" least_conn "$P_XBAL" "$P_XADMIN"
DUR_X=$((DUR < 15 ? 15 : DUR))
for r in $(seq 1 "$REPEATS"); do
  log="$OUT/serve-express-blocked-$r.log"
  start_serve "$OUT/express-proxy.toml" "$log"
  wait_http "http://127.0.0.1:$P_XBAL/"
  VPORT=$(curl -s "http://127.0.0.1:$P_XADMIN/status" | stats json "d['apps'][0]['workers'][0]['port']")
  ( sleep 3; date +%s.%N >"$OUT/stop-at-express-$r"; curl -s -m 30 -o /dev/null "http://127.0.0.1:$VPORT/block?ms=20000" || true ) &
  BLOCKER=$!
  json="$OUT/express-blocked-$r.json"
  "$SCALPEL" load --rate "$RATE_BLOCKED" -d "${DUR_X}s" -c 64 --no-progress --json "$json" "http://127.0.0.1:$P_XBAL/" >>"$OUT/load.log" 2>&1
  kill "$BLOCKER" 2>/dev/null || true
  stop_pid "$SERVE_PID"
  say ""
  say "run $r: out of rotation $(stats after "$log" "$OUT/stop-at-express-$r" 'reason="unhealthy"') s, successor ready $(stats after "$log" "$OUT/stop-at-express-$r" 'worker ready') s after the block (target <= 3 s); errors $(stats step "$json" "s['errors']"), p99 $(stats step "$json" "s['latency_ms']['p99']") ms"
done
say ""
fi

# ---- 1. hello ----
if want 1; then
say "## 1. Two Node hello-world workers"
serve_config "$OUT/hello.toml" hello "[\"node\", \"$HELLO\"]" 2 "$W1" least_conn "$P_SERVE" "$P_ADMIN"
nginx_config nginx auto "$P_NGINX" "server 127.0.0.1:$W2; server 127.0.0.1:$((W2 + 1));"
declare -A RPS CPUREQ
MEM=()
for r in $(seq 1 "$REPEATS"); do
  # scalpel serve
  start_serve "$OUT/hello.toml" "$OUT/serve-hello.log"
  wait_http "http://127.0.0.1:$P_SERVE/"
  T0=$(cpu_ticks_own "$SERVE_PID")
  RPS[serve]+=" $(wrk_rps "http://127.0.0.1:$P_SERVE/" "$CONNS")"
  T1=$(cpu_ticks_own "$SERVE_PID")
  CPUREQ[serve]+=" $(stats cpu-us "$T0" "$T1" "$(wrk_requests)")"
  MEM+=("run $r: $(mem_line "$SERVE_PID")")
  stop_pid "$SERVE_PID"
  # nginx in front of two single node processes
  PORT=$W2 node "$HELLO" >/dev/null & N1=$!
  PORT=$((W2 + 1)) node "$HELLO" >/dev/null & N2=$!
  PIDS+=("$N1" "$N2")
  wait_http "http://127.0.0.1:$W2/healthz"; wait_http "http://127.0.0.1:$((W2 + 1))/healthz"
  nginx -c "$OUT/nginx.conf" -p "$OUT" -g 'daemon off;' & NGX=$!
  PIDS+=("$NGX")
  wait_http "http://127.0.0.1:$P_NGINX/"
  T0=$(cpu_ticks "$NGX")
  RPS[nginx]+=" $(wrk_rps "http://127.0.0.1:$P_NGINX/" "$CONNS")"
  T1=$(cpu_ticks "$NGX")
  CPUREQ[nginx]+=" $(stats cpu-us "$T0" "$T1" "$(wrk_requests)")"
  stop_pid "$NGX"; stop_pid "$N1"; stop_pid "$N2"
  # pm2 cluster mode
  PORT=$P_PM2 "$PM2" start "$HELLO" -i 2 --name hello >/dev/null
  wait_http "http://127.0.0.1:$P_PM2/"
  RPS[pm2]+=" $(wrk_rps "http://127.0.0.1:$P_PM2/" "$CONNS")"
  "$PM2" delete all >/dev/null
done
say ""
say "Max throughput, wrk -t2 -c$CONNS -d${DUR}s, req/s, median (min–max) of $REPEATS:"
say ""
say "| setup | req/s |"
say "|---|---|"
for k in serve nginx pm2; do say "| $k | $(stats summary -d 1 "${RPS[$k]}") |"; done
say ""
say "serve/nginx = $(stats ratio -d 2 "${RPS[serve]}" "${RPS[nginx]}"), serve/pm2 = $(stats ratio -d 2 "${RPS[serve]}" "${RPS[pm2]}")"
say ""
say "Balancer CPU per proxied request during the wrk run (CPU time of the balancer's"
say "processes ÷ requests; less sensitive to a shared machine than req/s), µs:"
say ""
say "| balancer | µs CPU / request |"
say "|---|---|"
for k in serve nginx; do say "| $k | $(stats summary -d 1 "${CPUREQ[$k]}") |"; done
say ""
say "Balancer process memory after each wrk run (the scalpel process only, workers excluded):"
say ""
for m in "${MEM[@]}"; do say "- $m"; done

# Added latency: one Node worker direct, behind nginx and behind scalpel serve, the three
# targets alternating within each `scalpel load` run (open model), so drift hits all alike.
serve_config "$OUT/hello1.toml" hello "[\"node\", \"$HELLO\"]" 1 "$W1" least_conn "$P_SERVE" "$P_ADMIN"
P_NGINX1=$((BASE + 5))
nginx_config nginx1 1 "$P_NGINX1" "server 127.0.0.1:$P_DIRECT;"
RATE1=${RATE1:-1000}
PORT=$P_DIRECT node "$HELLO" >/dev/null & ND=$!; PIDS+=("$ND")
wait_http "http://127.0.0.1:$P_DIRECT/healthz"
nginx -c "$OUT/nginx1.conf" -p "$OUT" -g 'daemon off;' & NGX1=$!; PIDS+=("$NGX1")
wait_http "http://127.0.0.1:$P_NGINX1/"
start_serve "$OUT/hello1.toml" "$OUT/serve-hello1.log"
wait_http "http://127.0.0.1:$P_SERVE/"
declare -A L50 L99
# Warm-up, discarded: the first seconds at a new rate open every connection (generator →
# targets, proxies → worker) at once; at 10,000 req/s on two cores that burst overflowed
# Node's accept queue (SYN retransmits, 1 s stalls) for direct and proxied targets alike.
"$SCALPEL" load --rate "$RATE1" -d 2s -c 16 --no-progress \
  --target "direct=http://127.0.0.1:$P_DIRECT" --target "nginx=http://127.0.0.1:$P_NGINX1" \
  --target "serve=http://127.0.0.1:$P_SERVE" / >>"$OUT/load.log" 2>&1 || true
for r in $(seq 1 "$REPEATS"); do
  "$SCALPEL" load --rate "$RATE1" -d "${DUR}s" -c 16 --no-progress --json "$OUT/added-$r.json" \
    --target "direct=http://127.0.0.1:$P_DIRECT" --target "nginx=http://127.0.0.1:$P_NGINX1" \
    --target "serve=http://127.0.0.1:$P_SERVE" / >>"$OUT/load.log" 2>&1
  for k in direct nginx serve; do
    L50[$k]+=" $(stats step "$OUT/added-$r.json" "s['latency_ms']['p50']" --target "$k")"
    L99[$k]+=" $(stats step "$OUT/added-$r.json" "s['latency_ms']['p99']" --target "$k")"
  done
done
stop_pid "$SERVE_PID"
kill "$NGX1" 2>/dev/null || true
stop_pid "$ND"
say ""
say "Added latency, open model at $RATE1 req/s for ${DUR}s per target, one worker, the three"
say "targets alternating in each run, ms, median (min–max) of $REPEATS:"
say ""
say "| path | p50 | p99 | added p50 |"
say "|---|---|---|---|"
say "| direct to the worker | $(stats summary -d 3 "${L50[direct]}") | $(stats summary -d 3 "${L99[direct]}") | — |"
for k in nginx serve; do
  say "| through $k | $(stats summary -d 3 "${L50[$k]}") | $(stats summary -d 3 "${L99[$k]}") | $(stats diff -d 0 --scale 1000 "${L50[$k]}" "${L50[direct]}") µs |"
done
fi

# ---- 2. qr ----
QR_CMD="[\"node\", \"$ROOT/qr/node/server.js\", \"--tier\", \"0-article\", \"--port\", \"{port}\"]"
serve_config "$OUT/qr-lc.toml" qr "$QR_CMD" 2 "$W1" least_conn "$P_SERVE" "$P_ADMIN"
serve_config "$OUT/qr-rr.toml" qr "$QR_CMD" 2 "$W1" round_robin "$P_SERVE" "$P_ADMIN"
QR_PATH="/qrcode?text=$(stats quote "$QR_TEXT")"
declare -A QRPS P50 P99 ERR
if want 2; then
say ""
say "## 2. Two CPU-heavy workers (QR tier 0-article)"
for r in $(seq 1 "$REPEATS"); do
  "$PM2" start "$ROOT/qr/node/server.js" -i 2 --name qr -- --tier 0-article --port "$P_PM2" >/dev/null
  wait_http "http://127.0.0.1:$P_PM2/healthz"
  QRPS[pm2]+=" $(wrk_rps "http://127.0.0.1:$P_PM2$QR_PATH" "$QR_CONNS")"
  "$PM2" delete all >/dev/null
  for b in lc rr; do
    start_serve "$OUT/qr-$b.toml" "$OUT/serve-qr-$b.log"
    wait_http "http://127.0.0.1:$P_SERVE/healthz"
    QRPS[serve-$b]+=" $(wrk_rps "http://127.0.0.1:$P_SERVE$QR_PATH" "$QR_CONNS")"
    stop_pid "$SERVE_PID"
  done
done
say ""
say "Max throughput, wrk -t2 -c$QR_CONNS -d${DUR}s, req/s, median (min–max) of $REPEATS:"
say ""
say "| setup | req/s |"
say "|---|---|"
for k in pm2 serve-lc serve-rr; do say "| $k | $(stats summary -d 1 "${QRPS[$k]}") |"; done
RATE=${RATE:-$(stats scale -d 0 0.8 "${QRPS[pm2]}")}
say ""
say "Open model at $RATE req/s (80% of pm2's median max), ${DUR}s, latency ms:"
say ""
say "| setup | p50 | p99 | errors |"
say "|---|---|---|---|"
for r in $(seq 1 "$REPEATS"); do
  "$PM2" start "$ROOT/qr/node/server.js" -i 2 --name qr -- --tier 0-article --port "$P_PM2" >/dev/null
  wait_http "http://127.0.0.1:$P_PM2/healthz"
  load_json "http://127.0.0.1:$P_PM2$QR_PATH" "$RATE" "$OUT/qr-pm2-$r.json"
  "$PM2" delete all >/dev/null
  for b in lc rr; do
    start_serve "$OUT/qr-$b.toml" "$OUT/serve-qr-$b.log"
    wait_http "http://127.0.0.1:$P_SERVE/healthz"
    load_json "http://127.0.0.1:$P_SERVE$QR_PATH" "$RATE" "$OUT/qr-serve-$b-$r.json"
    stop_pid "$SERVE_PID"
  done
  for k in pm2 serve-lc serve-rr; do
    f=$OUT/qr-$k-$r.json
    P50[$k]+=" $(stats step "$f" "s['latency_ms']['p50']")"
    P99[$k]+=" $(stats step "$f" "s['latency_ms']['p99']")"
    ERR[$k]+=" $(stats step "$f" "s['errors']")"
  done
done
for k in pm2 serve-lc serve-rr; do
  say "| $k | $(stats summary -d 1 "${P50[$k]}") | $(stats summary -d 1 "${P99[$k]}") | $(stats summary -d 1 "${ERR[$k]}") |"
done
fi

# ---- 3. blocked ----
if want 3; then
: "${RATE:?set RATE (req/s) when scenario 2 is not run}"
say ""
say "## 3. One worker frozen for 10 s under the same open-model load (serve, least_conn)"
say ""
say "Default health settings, then with \`[app.health] prestart = true\` (the successor starts"
say "at the frozen worker's first failed probe). Times are seconds after the SIGSTOP."
DUR_B=$((DUR < 20 ? 20 : DUR))
{ cat "$OUT/qr-lc.toml"; printf '\n[app.health]\nprestart = true\n'; } >"$OUT/qr-lc-prestart.toml"
declare -A B99
for variant in default prestart; do
  cfg="$OUT/qr-lc.toml"; [ "$variant" = prestart ] && cfg="$OUT/qr-lc-prestart.toml"
  for r in $(seq 1 "$REPEATS"); do
    log="$OUT/serve-blocked-$variant-$r.log"
    start_serve "$cfg" "$log"
    wait_http "http://127.0.0.1:$P_SERVE/healthz"
    VICTIM=$(curl -s "http://127.0.0.1:$P_ADMIN/status" | stats json "d['apps'][0]['workers'][0]['pid']")
    ( sleep 3; date +%s.%N >"$OUT/stop-at-$variant-$r"; kill -STOP "$VICTIM"; sleep 10; kill -CONT "$VICTIM" 2>/dev/null || true ) &
    FREEZER=$!
    json="$OUT/qr-blocked-$variant-$r.json"
    "$SCALPEL" load --rate "$RATE" -d "${DUR_B}s" -c 64 --no-progress --json "$json" "http://127.0.0.1:$P_SERVE$QR_PATH" >>"$OUT/load.log" 2>&1
    wait "$FREEZER"
    B99[$variant]+=" $(stats step "$json" "s['latency_ms']['p99']")"
    stop_pid "$SERVE_PID"
    say ""
    say "$variant run $r: out of rotation $(stats after "$log" "$OUT/stop-at-$variant-$r" 'reason="unhealthy"') s, successor ready $(stats after "$log" "$OUT/stop-at-$variant-$r" 'worker ready') s; p99 $(stats step "$json" "s['latency_ms']['p99']") ms, errors $(stats step "$json" "s['errors']"), max $(stats step "$json" "s['latency_ms']['max']") ms"
  done
done
say ""
say "p99 of the frozen runs, ms, median (min–max): default $(stats summary -d 1 "${B99[default]}"), prestart $(stats summary -d 1 "${B99[prestart]}")"
if [ -n "${P99[serve-lc]:-}" ]; then
  say "p99 blocked / unblocked (serve least_conn, medians): default $(stats ratio -d 2 "${B99[default]}" "${P99[serve-lc]}"), prestart $(stats ratio -d 2 "${B99[prestart]}" "${P99[serve-lc]}")"
fi
fi
# ---- tls ----
if want tls; then
say ""
say "## TLS + HTTP/2: two Node hello-world workers (h2load -c ${H2_CONNS:=8} -m ${H2_STREAMS:=10} -t 2)"
need h2load || { apt-get update -qq && apt-get install -y -qq nghttp2-client >/dev/null; }
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 30 \
  -subj /CN=localhost -keyout "$OUT/tls-key.pem" -out "$OUT/tls-cert.pem" 2>/dev/null
serve_config "$OUT/tls.toml" hello "[\"node\", \"$HELLO\"]" 2 "$W1" least_conn "$P_SERVE" "$P_ADMIN"
printf '[server.tls]\ncert = "%s"\nkey = "%s"\n' "$OUT/tls-cert.pem" "$OUT/tls-key.pem" >>"$OUT/tls.toml"
nginx_config nginx-tls auto "$P_NGINX" "server 127.0.0.1:$W2; server 127.0.0.1:$((W2 + 1));"
sed -i "s|listen 127.0.0.1:$P_NGINX;|listen 127.0.0.1:$P_NGINX ssl http2; ssl_certificate $OUT/tls-cert.pem; ssl_certificate_key $OUT/tls-key.pem;|" "$OUT/nginx-tls.conf"
h2_rps() { # url -> req/s (the succeeded count of the run in $OUT/h2load.done)
  h2load -D "$DUR" -c "$H2_CONNS" -m "$H2_STREAMS" -t 2 "$1" >"$OUT/h2load.log" 2>&1
  grep -q ', 0 failed, 0 errored' "$OUT/h2load.log" || { echo "h2load errors:" >&2; cat "$OUT/h2load.log" >&2; }
  awk '/^requests:/ {print $8}' "$OUT/h2load.log" >"$OUT/h2load.done"
  awk '/^finished in/ {print $4}' "$OUT/h2load.log"
}
us_per_req() { # ticks-before ticks-after -> µs of CPU per request of the last h2load run
  stats cpu-us "$1" "$2" "$(cat "$OUT/h2load.done")"
}
declare -A TRPS TBAL TALL
for r in $(seq 1 "$REPEATS"); do
  start_serve "$OUT/tls.toml" "$OUT/serve-tls.log"
  for _ in $(seq 1 300); do curl -skf "https://127.0.0.1:$P_SERVE/" >/dev/null && break; sleep 0.1; done
  sleep 0.5
  B0=$(cpu_ticks_own "$SERVE_PID"); A0=$(cpu_ticks "$SERVE_PID")
  TRPS[serve]+=" $(h2_rps "https://127.0.0.1:$P_SERVE/")"
  B1=$(cpu_ticks_own "$SERVE_PID"); A1=$(cpu_ticks "$SERVE_PID")
  TBAL[serve]+=" $(us_per_req "$B0" "$B1")"; TALL[serve]+=" $(us_per_req "$A0" "$A1")"
  stop_pid "$SERVE_PID"
  PORT=$W2 node "$HELLO" >/dev/null & N1=$!
  PORT=$((W2 + 1)) node "$HELLO" >/dev/null & N2=$!
  PIDS+=("$N1" "$N2")
  wait_http "http://127.0.0.1:$W2/healthz"; wait_http "http://127.0.0.1:$((W2 + 1))/healthz"
  nginx -c "$OUT/nginx-tls.conf" -p "$OUT" -g 'daemon off;' & NGX=$!
  PIDS+=("$NGX")
  for _ in $(seq 1 300); do curl -skf "https://127.0.0.1:$P_NGINX/" >/dev/null && break; sleep 0.1; done
  B0=$(cpu_ticks "$NGX"); A0=$(cpu_ticks "$NGX" "$N1" "$N2")
  TRPS[nginx]+=" $(h2_rps "https://127.0.0.1:$P_NGINX/")"
  B1=$(cpu_ticks "$NGX"); A1=$(cpu_ticks "$NGX" "$N1" "$N2")
  TBAL[nginx]+=" $(us_per_req "$B0" "$B1")"; TALL[nginx]+=" $(us_per_req "$A0" "$A1")"
  stop_pid "$NGX"; stop_pid "$N1"; stop_pid "$N2"
done
say ""
say "| over TLS + h2 | req/s, median (min–max) | balancer CPU µs/request | whole setup (balancer + workers) CPU µs/request |"
say "|---|---|---|---|"
for k in serve nginx; do say "| $k | $(stats summary -d 1 "${TRPS[$k]}") | $(stats summary -d 1 "${TBAL[$k]}") | $(stats summary -d 1 "${TALL[$k]}") |"; done
say ""
say "serve/nginx = $(stats ratio -d 2 "${TRPS[serve]}" "${TRPS[nginx]}") req/s; CPU per request serve/nginx: balancer $(stats ratio -d 2 "${TBAL[serve]}" "${TBAL[nginx]}"), whole setup $(stats ratio -d 2 "${TALL[serve]}" "${TALL[nginx]}")"
fi
# ---- frozen-direct ----
if want frozen-direct; then
say ""
say "## frozen-direct: a direct-mode worker frozen (SIGSTOP) under load, two Node hello workers"
P_FLISTEN=$((BASE + 8)) P_FADMIN=$((BASE + 9)) P_FBAL=$((BASE + 35)) W4=$((BASE + 36))
cat >"$OUT/frozen.toml" <<EOF
[server]
listen = "127.0.0.1:$P_FBAL"
admin = "127.0.0.1:$P_FADMIN"
[[app]]
name = "hello"
command = ["node", "$HELLO_JS"]
workers = 2
port_base = $W4
mode = "direct"
listen = "127.0.0.1:$P_FLISTEN"
EOF
FROZEN_DUR=${FROZEN_DUR:-12}
FROZEN_THREADS=${FROZEN_THREADS:-8}
say ""
say "Load: $FROZEN_THREADS client threads, a new connection per request (GET /, Connection: close,"
say "10 s time-out), ${FROZEN_DUR} s; worker 0 stopped 3 s in and left stopped (serve replaces it)."
say "'failed' = refused, reset or timed out; 'after' = begun 0.1 s or more after the SIGSTOP."
say "The frozen worker's share of new connections: of the connections begun in each"
say "interval after the SIGSTOP, the part the frozen pid answered."
for r in $(seq 1 "$REPEATS"); do
  log="$OUT/serve-frozen-$r.log"
  start_serve "$OUT/frozen.toml" "$log"
  wait_http "http://127.0.0.1:$P_FLISTEN/"
  for _ in $(seq 1 100); do
    n=$(curl -s "http://127.0.0.1:$P_FADMIN/status" | stats json "sum(w['state'] == 'ready' for w in d['apps'][0]['workers'])" 2>/dev/null || echo 0)
    [ "$n" = 2 ] && break; sleep 0.1
  done
  VICTIM=$(curl -s "http://127.0.0.1:$P_FADMIN/status" | stats json "d['apps'][0]['workers'][0]['pid']")
  line=$(python3 - "$P_FLISTEN" "$VICTIM" "$FROZEN_DUR" "$FROZEN_THREADS" "$OUT/stop-at-frozen-$r" <<'PY'
import os, re, signal, socket, sys, threading, time
port, victim, dur, nthreads, stop_file = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
rows, lock = [], threading.Lock()
t0 = time.time()
end = t0 + dur
def one():
    began = time.time()
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.settimeout(10)
        s.sendall(b"GET / HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")
        data = b""
        while True:
            b = s.recv(65536)
            if not b:
                break
            data += b
        s.close()
        head, _, body = data.partition(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200"):
            return began, None, "status " + head[:20].decode(errors="replace")
        # The body may come chunked: the pid is read from it, not parsed as a whole.
        m = re.search(rb'"pid":(\d+)', body)
        if not m:
            return began, None, "no pid in the answer"
        return began, int(m.group(1)), None
    except Exception as e:  # refused, reset, time-out: a failed request
        return began, None, type(e).__name__
def worker():
    while time.time() < end:
        r = one()
        with lock:
            rows.append(r)
ts = [threading.Thread(target=worker) for _ in range(nthreads)]
for t in ts:
    t.start()
time.sleep(3)
os.kill(victim, signal.SIGSTOP)
stop = time.time()  # after the signal is sent: a connection begun later is "after the freeze"
open(stop_file, "w").write(f"{stop}")
for t in ts:
    t.join()
try:
    os.kill(victim, signal.SIGCONT)  # if serve has not replaced it yet
except ProcessLookupError:
    pass
failed = [r for r in rows if r[2]]
after = [r for r in failed if r[0] >= stop + 0.1]
post = [r for r in rows if r[0] >= stop]
last_victim = max((r[0] - stop for r in post if r[1] == victim), default=None)
bins = []
for i in range(4):
    lo, hi = stop + i * 0.25, stop + (i + 1) * 0.25
    b = [r for r in post if lo <= r[0] < hi]
    share = sum(r[1] == victim for r in b) / len(b) if b else float("nan")
    bins.append(f"{share:.0%} of {len(b)}")
pre = [r for r in rows if r[0] < stop and r[1] is not None]
pre_share = sum(r[1] == victim for r in pre) / len(pre) if pre else float("nan")
kinds = sorted({r[2] for r in failed})
print(f"{len(rows)} requests ({len(rows) / dur:.0f}/s), {len(failed)} failed, {len(after)} failed after; "
      f"frozen pid's share of new connections before the SIGSTOP {pre_share:.0%}, in 0.25 s bins after it: "
      f"{', '.join(bins)}; the last connection it answered began "
      f"{'before the SIGSTOP' if last_victim is None else f'{last_victim * 1000:+.0f} ms after it'}"
      f"{'; failures: ' + ', '.join(kinds) if kinds else ''}")
PY
)
  # What became of the frozen worker's accepted connections (serve's rescue; absent
  # before it existed).
  taken=$(curl -s "http://127.0.0.1:$P_FADMIN/metrics" |
    stats metric scalpel_serve_direct_connections_at_replacement_total --label outcome --where app=hello 2>/dev/null ||
    echo "metrics unreadable")
  [ "$taken" = none ] && taken="not counted (no rescue in this build)"
  stop_pid "$SERVE_PID"
  say ""
  say "run $r: $line; the frozen worker's accepted connections at its replacement: $taken; out of rotation $(stats after "$log" "$OUT/stop-at-frozen-$r" 'reason="unhealthy"') s, successor ready $(stats after "$log" "$OUT/stop-at-frozen-$r" 'worker ready') s after the SIGSTOP"
done
fi
echo "bench-serve: results in $RESULTS"
