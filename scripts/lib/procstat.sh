# Sourced by the bench scripts: CPU time of processes, measured by the product —
# `scalpel procstat` (scalpel-procstat, as `scalpel load` and `scalpel serve` measure):
# utime + stime + cutime + cstime from /proc/PID/stat, read after the command name's
# closing parenthesis (pm2 names its daemon "PM2 v5.4.3: God" and its workers
# "node /path/to/app"; the benches' own parser counted those wrong until 2026-12-02).
#
# cpu_ticks PID...      clock ticks of the PIDs' process trees together, each process once
# cpu_ticks_own PID...  the same for the PIDs alone, without their descendants
# rss_kib PID...        resident memory of the PIDs alone, KiB (procstat's statm reading)
# A process that is gone counts 0. The binary: $PROCSTAT_SCALPEL, else the release build
# of ${CARGO_TARGET_DIR:-target} (not $SCALPEL: a bench may run an older build that has no
# `procstat`). Test: scripts/lib/proc-ticks-test.sh.
PROCSTAT_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
procstat_bin() { echo "${PROCSTAT_SCALPEL:-${CARGO_TARGET_DIR:-$PROCSTAT_ROOT/target}/release/scalpel}"; }
cpu_ticks() { "$(procstat_bin)" procstat --ticks "$@"; }
cpu_ticks_own() { "$(procstat_bin)" procstat --ticks --no-tree "$@"; }
rss_kib() {
  "$(procstat_bin)" procstat --json --no-tree --no-pss "$@" |
    python3 "$PROCSTAT_ROOT/scripts/lib/stats.py" json "d['all']['rss_bytes'] // 1024"
}
