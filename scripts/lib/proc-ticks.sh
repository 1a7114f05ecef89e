# Sourced by the bench scripts: CPU time of processes from /proc, in clock ticks.
#
# proc_ticks PID...: utime + stime summed over the PIDs (a process that is gone counts 0).
# The fields are counted after the command name's closing parenthesis: the name may hold
# spaces — pm2 names its daemon "PM2 v5.4.3: God" and its workers "node /path/to/app" — and
# fields counted from the start of the line were the wrong ones for those (0 for the daemon,
# utime without stime for each worker: the benches under-counted pm2 until 2026-12-02).
# Test: scripts/lib/proc-ticks-test.sh.
proc_ticks() {
  local p s=0 t
  for p in "$@"; do
    t=$(sed 's/.*) //' "/proc/$p/stat" 2>/dev/null | awk '{print $12 + $13}')
    s=$((s + ${t:-0}))
  done
  echo "$s"
}
