#!/usr/bin/env bash
# A throw-away PostgreSQL cluster from Debian's package, for the payments tests, e2e and
# benchmarks: initdb into a fresh directory as the `postgres` user (initdb refuses root), a
# unix socket in that directory only (listen_addresses=''), fsync off (a test cluster:
# committed rows still survive any process kill, only a machine crash could lose them).
#
#   pg.sh start [--watch PID]   creates the cluster and starts it; prints two lines: the
#                               directory, then the URL of its `postgres` database
#                               (postgres://postgres@/postgres?host=DIR&port=5432).
#                               --watch PID: a detached watcher stops the cluster and removes
#                               the directory once PID has exited (a test binary that
#                               panicked or was killed still leaves no server behind).
#   pg.sh stop DIR              stops the cluster (fast, then immediate) and removes DIR.
#   pg.sh pid DIR               the postmaster's pid (its backends are its children).
#
# Knobs: PGBIN (default: the newest /usr/lib/postgresql/*/bin), PG_FSYNC=on,
# PG_MAX_CONNECTIONS (default 200). Used by the Rust (payments/service/tests) and Go
# (payments/go/internal/pgtest) test harnesses, scripts/e2e.sh and scripts/bench-payments.sh.
set -euo pipefail

pgbin() {
  if [[ -n "${PGBIN:-}" ]]; then echo "$PGBIN"; return; fi
  local d
  d="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)"
  [[ -n "$d" && -x "$d/initdb" ]] || {
    echo "pg.sh: no PostgreSQL server (initdb) under /usr/lib/postgresql; run ./run setup" >&2
    exit 2
  }
  echo "$d"
}

# as_pg CMD...: as the postgres user when we are root, else as ourselves.
as_pg() {
  if [[ "$(id -u)" == 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi
}

stop() {
  local dir="$1" bin
  bin="$(pgbin)"
  if [[ -f "$dir/data/postmaster.pid" ]]; then
    as_pg "$bin/pg_ctl" -D "$dir/data" -m fast -w -t 20 stop >/dev/null 2>&1 ||
      as_pg "$bin/pg_ctl" -D "$dir/data" -m immediate -w -t 20 stop >/dev/null 2>&1 || true
  fi
  rm -rf "$dir"
}

start() {
  local watch=""
  if [[ "${1:-}" == --watch ]]; then watch="${2:?--watch needs a pid}"; fi
  local bin dir
  bin="$(pgbin)"
  # Under /tmp, not a test's own temp dir: the postgres user must be able to reach it.
  dir="$(mktemp -d /tmp/payments-pg.XXXXXX)"
  chmod 700 "$dir"
  if [[ "$(id -u)" == 0 ]]; then chown postgres: "$dir"; fi
  if ! as_pg "$bin/initdb" -D "$dir/data" -U postgres -A trust -E UTF8 --locale=C --no-sync \
      </dev/null >"$dir/initdb.log" 2>&1; then
    cat "$dir/initdb.log" >&2
    rm -rf "$dir"
    exit 1
  fi
  local opts="-c listen_addresses='' -c unix_socket_directories=$dir -c port=5432"
  opts+=" -c fsync=${PG_FSYNC:-off} -c max_connections=${PG_MAX_CONNECTIONS:-200}"
  if ! as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 -o "$opts" start \
      </dev/null >"$dir/pg_ctl.log" 2>&1; then
    cat "$dir/pg_ctl.log" "$dir/server.log" >&2 || true
    stop "$dir"
    exit 1
  fi
  if [[ -n "$watch" ]]; then
    # Detached from every inherited descriptor, so a caller reading our stdout to its end
    # (Go's exec.Output, a $(...) in bash) is not kept waiting for the watcher.
    setsid bash "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/pg.sh" _watch "$watch" "$dir" </dev/null >/dev/null 2>&1 &
  fi
  echo "$dir"
  echo "postgres://postgres@/postgres?host=$dir&port=5432"
}

case "${1:-}" in
  start) shift; start "$@" ;;
  stop) stop "${2:?usage: pg.sh stop DIR}" ;;
  pid) head -1 "${2:?usage: pg.sh pid DIR}/data/postmaster.pid" ;;
  _watch)
    while kill -0 "$2" 2>/dev/null; do sleep 1; done
    stop "$3"
    ;;
  *) echo "usage: pg.sh start [--watch PID] | stop DIR | pid DIR" >&2; exit 2 ;;
esac
