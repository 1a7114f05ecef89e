#!/usr/bin/env bash
# Test of the benches' CPU readings (cpu_ticks, cpu_ticks_own in scripts/lib/procstat.sh:
# `scalpel procstat --ticks`) against real processes whose names hold spaces, as pm2's do:
# each must count that process's user AND system time, as the process itself reports them
# (os.times(), with the children it reaped: procstat counts cutime and cstime too). Regression test for the benches' pm2 figures, which counted 0 for
# "PM2 v5.4.3: God" and only utime for "node /path/app" while the benches parsed
# /proc/PID/stat themselves. Needs the release build of scalpel ($PROCSTAT_SCALPEL, else
# ${CARGO_TARGET_DIR:-target}/release/scalpel).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=scripts/lib/procstat.sh
source "$ROOT/scripts/lib/procstat.sh"
fail() { echo "proc-ticks-test: FAIL: $*" >&2; exit 1; }
[ -x "$(procstat_bin)" ] || fail "no scalpel binary at $(procstat_bin): cargo build --release -p scalpel"
for name in "PM2 v5.4.3: God" "node /work/app" "a) b (c"; do
  fifo=$(mktemp -u); mkfifo "$fifo"
  # Burns user and system time, says its own figures and stands still (scripts/lib/busy.py).
  python3 "$ROOT/scripts/lib/busy.py" "$name" >"$fifo" &
  pid=$!
  read -r user sys _ <"$fifo"; rm -f "$fifo"
  [ "$(cat /proc/$pid/comm)" = "$(printf '%.15s' "$name")" ] || { kill "$pid"; fail "the process did not take the name '$name'"; }
  tree=$(cpu_ticks "$pid"); own=$(cpu_ticks_own "$pid")
  kill "$pid"; wait "$pid" 2>/dev/null || true
  want=$((user + sys))
  [ "$sys" -gt 0 ] || fail "the process burnt no system time ($user + $sys): the test proves nothing"
  # os.times() and /proc round the same kernel counts: a tick apart at most, per field.
  for got in "$tree" "$own"; do
    [ $((got - want)) -le 2 ] && [ $((want - got)) -le 2 ] ||
      fail "name '$name': cpu_ticks $tree, cpu_ticks_own $own, the process's own user+system time $user+$sys=$want"
  done
  echo "ok: '$name': cpu_ticks $tree, cpu_ticks_own $own = user $user + system $sys (its own count)"
done
[ "$(cpu_ticks 999999999)" = 0 ] && [ "$(cpu_ticks_own 999999999)" = 0 ] || fail "a process that is gone must count 0"
echo "proc-ticks-test: ok"
