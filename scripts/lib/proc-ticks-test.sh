#!/usr/bin/env bash
# Test of proc_ticks (scripts/lib/proc-ticks.sh) against a real process whose name holds
# spaces, as pm2's do: it must count that process's user AND system time, as the process
# itself reports them (os.times()). Regression test for the benches' pm2 figures, which
# counted 0 for "PM2 v5.4.3: God" and only utime for "node /path/app".
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=scripts/lib/proc-ticks.sh
source "$ROOT/scripts/lib/proc-ticks.sh"
fail() { echo "proc-ticks-test: FAIL: $*" >&2; exit 1; }
for name in "PM2 v5.4.3: God" "node /work/app" "a) b (c"; do
  fifo=$(mktemp -u); mkfifo "$fifo"
  # Burns user time (arithmetic) and system time (stat calls), then says its own figures
  # and waits, so /proc is read while it lives.
  python3 - "$name" >"$fifo" <<'PY' &
import os, sys, time
with open("/proc/self/comm", "w") as f:
    f.write(sys.argv[1])
end = time.monotonic() + 0.6
x = 0
while time.monotonic() < end:
    for _ in range(2000):
        x += 1
    for _ in range(200):
        os.stat("/")
t = os.times()
hz = os.sysconf("SC_CLK_TCK")
print(round(t.user * hz), round(t.system * hz), flush=True)
time.sleep(30)
PY
  pid=$!
  read -r user sys <"$fifo"; rm -f "$fifo"
  [ "$(cat /proc/$pid/comm)" = "$(printf '%.15s' "$name")" ] || { kill "$pid"; fail "the process did not take the name '$name'"; }
  got=$(proc_ticks "$pid")
  kill "$pid"; wait "$pid" 2>/dev/null || true
  want=$((user + sys))
  [ "$sys" -gt 0 ] || fail "the process burnt no system time ($user + $sys): the test proves nothing"
  # os.times() and /proc round the same kernel counts: a tick apart at most, per field.
  [ $((got - want)) -le 2 ] && [ $((want - got)) -le 2 ] ||
    fail "name '$name': proc_ticks $got, the process's own utime+stime $user+$sys=$want"
  echo "ok: '$name': proc_ticks $got = utime $user + stime $sys"
done
[ "$(proc_ticks 999999999)" = 0 ] || fail "a process that is gone must count 0"
echo "proc-ticks-test: ok"
