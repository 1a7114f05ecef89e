#!/usr/bin/env bash
# Issue 14: CPU per request of `scalpel serve` direct mode vs pm2 cluster at a FIXED open-model
# rate, below saturation (bench-serve.sh's direct scenario measures at wrk's saturation, where
# the CPU split between generator and workers decides the figure). Two Node hello workers each;
# the generator (`scalpel load --rate`) pinned to cpu 0; three alternating runs of 8 s; CPU is
# utime+stime of each setup's whole process tree. Needs the release build and pm2
# (scripts/setup.sh). Quiet machine only.
#
#   RATE=10000 ./run bench direct-fixed
set -u
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
S=${CARGO_TARGET_DIR:-$ROOT/target}/release/scalpel; PM2=$ROOT/scripts/demo/pm2/node_modules/.bin/pm2
export PM2_HOME=${CARGO_TARGET_DIR:-$ROOT/target}/tmp/pm2-direct-fixed; mkdir -p "$PM2_HOME"
RATE=${RATE:-10000}
echo "rate $RATE req/s, $(nproc) cpus, load average $(cut -d' ' -f1-3 /proc/loadavg)"
ticks() { local s=0; for p in "$@"; do [ -r /proc/$p/stat ] && s=$((s + $(awk '{print $14+$15}' /proc/$p/stat))); done; echo $s; }
tree() { echo $1; for c in $(pgrep -P $1); do tree $c; done; }
cat > $PM2_HOME/direct-fixed.toml <<T
[server]
listen = "127.0.0.1:18997"
admin = "127.0.0.1:18996"
[[app]]
name = "hello"
command = ["node", "$ROOT/examples/serve/app.js"]
workers = 2
port_base = 18930
mode = "direct"
listen = "127.0.0.1:18999"
T
for r in 1 2 3; do
  $S serve --config $PM2_HOME/direct-fixed.toml >$PM2_HOME/direct-fixed.log 2>&1 & SP=$!
  for i in $(seq 50); do curl -sf http://127.0.0.1:18999/ >/dev/null && break; sleep 0.2; done; sleep 1
  P=$(tree $SP | xargs); T0=$(ticks $P)
  out=$(taskset -c 0 $S load --rate $RATE -d 8s --threads 1 -c 64 http://127.0.0.1:18999/ 2>&1 | grep -E 'achieved|errors|p99' | head -4 | xargs)
  T1=$(ticks $P); N=$((RATE*8))
  echo "direct run $r: $(python3 -c "print(round(($T1-$T0)*1e4/$N,1))") us/req ($((T1-T0)) ticks) | $out"
  kill -TERM $SP; wait $SP 2>/dev/null
  PORT=18999 $PM2 start $ROOT/examples/serve/app.js -i 2 --name hello >/dev/null
  for i in $(seq 50); do curl -sf http://127.0.0.1:18999/ >/dev/null && break; sleep 0.2; done; sleep 1
  P="$(cat $PM2_HOME/pm2.pid) $($PM2 pid hello | xargs)"; T0=$(ticks $P)
  out=$(taskset -c 0 $S load --rate $RATE -d 8s --threads 1 -c 64 http://127.0.0.1:18999/ 2>&1 | grep -E 'achieved|errors|p99' | head -4 | xargs)
  T1=$(ticks $P)
  echo "pm2    run $r: $(python3 -c "print(round(($T1-$T0)*1e4/$N,1))") us/req ($((T1-T0)) ticks) | $out"
  $PM2 kill >/dev/null
done
