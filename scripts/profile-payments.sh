#!/usr/bin/env bash
# CPU profiles of the payments services (Go and Rust) under the same open-model load, one
# command: "where the time goes", not only the totals (docs/payments.md).
#
#   scripts/profile-payments.sh
#   RATE=3000 DURATION=30s ENDPOINTS="stats balance" scripts/profile-payments.sh
#
# What it does, in order:
#   1. builds `payments` and `scalpel` (profile `profiling`: release plus line tables) and Go;
#   2. reuses (or generates) the 16,000-user ledger of scripts/bench-payments.sh under
#      ${CARGO_TARGET_DIR:-target}/bench/payments/;
#   3. starts both services pinned to CPU $SERVER_CPU (default 1), Go with
#      `--pprof 127.0.0.1:0`; the load (`scalpel load`, one thread) runs pinned to CPU
#      $LOAD_CPU (default 0); checks both answer the same bytes first;
#   4. per endpoint, per service (one service loaded at a time): an open-model load at
#      $RATE rps for $DURATION; after 2 s of warm-up the profiler records for DURATION-4 s:
#        Go:   GET /debug/pprof/profile?seconds=N   (runtime/pprof, 100 Hz, user+kernel time)
#        Rust: perf record -F $FREQ --call-graph dwarf -p PID   (the release profile has no frame
#              pointers, so stacks are unwound from DWARF; kernel frames are sampled when perf
#              may see them: root, or kernel.perf_event_paranoid <= 1)
#      and /proc/PID/stat is read around the same window (user vs system CPU time);
#   5. writes, under ${CARGO_TARGET_DIR:-target}/bench/payments/profiles/:
#        go-EP.pprof, go-EP.top.txt (pprof -top), go-EP.cum.txt (-top -cum), go-EP.list.txt
#        (-list of the hottest functions); rust-EP.perf.data, rust-EP.report.txt (perf report
#        --no-children --percent-limit 2), rust-EP.callers.txt (with callers); the same
#        go-EP.perf.data / .report.txt for Go under perf (one more load run, same rate);
#        SERVICE-EP.load.txt (the load run), SERVICE-EP.cpu.txt (user/sys split) and
#        summary.md: every profile grouped into the same cost centres (the Python at the end).
#
# Needs: perf (apt-get install linux-perf), taskset, python3, go, a C compiler.
# Environment knobs: USERS SEED RATE DURATION ENDPOINTS FREQ SERVER_CPU LOAD_CPU, and
# SKIP_BUILD=1 to use the binaries already in the target dir.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
TGT="${CARGO_TARGET_DIR:-$ROOT/target}"
mkdir -p "$TGT"
TGT="$(cd "$TGT" && pwd)"
BENCH="$TGT/bench/payments"
OUT="$BENCH/profiles"
mkdir -p "$OUT"

USERS="${USERS:-16000}"
SEED="${SEED:-1}"
RATE="${RATE:-3000}"
DURATION="${DURATION:-30s}"
ENDPOINTS="${ENDPOINTS:-stats balance}"
FREQ="${FREQ:-999}"
SERVER_CPU="${SERVER_CPU:-1}"
LOAD_CPU="${LOAD_CPU:-0}"
secs="${DURATION%s}"
[[ "$secs" =~ ^[0-9]+$ && "$secs" -ge 8 ]] || { echo "DURATION must be whole seconds >= 8s, like 30s" >&2; exit 2; }
window=$((secs - 4))

command -v perf >/dev/null || { echo "perf not found: apt-get install -y linux-perf" >&2; exit 2; }
perf stat -e task-clock true >/dev/null 2>&1 || {
  echo "perf cannot count here (kernel.perf_event_paranoid = $(cat /proc/sys/kernel/perf_event_paranoid))" >&2; exit 2; }

LEDGER_DIR="$BENCH"
# perf needs line tables: the release code built with them (Cargo.toml [profile.profiling])
RUST_PROFILE=profiling
# shellcheck source=scripts/lib/payments-services.sh
source "$ROOT/scripts/lib/payments-services.sh"
if [[ "${SKIP_BUILD:-0}" != 1 ]]; then
  payments_build
fi
payments_binaries
payments_ledger
trap payments_cleanup EXIT

echo "== start"
start go "$GO" --db "$DB" --port 0 --pprof 127.0.0.1:0
start rust "$PAY" serve --db "$DB" --port 0
for _ in $(seq 100); do grep -q '^pprof on' "$OUT/go.stdout" && break; sleep 0.1; done
PPROF="$(grep -o 'pprof on http://[0-9.:]*' "$OUT/go.stdout" | cut -d' ' -f3)"
[[ -n "$PPROF" ]] || { echo "go did not print its pprof address" >&2; exit 1; }

payments_parity 100 11 /balance '/stats?days=30'

MACHINE="$(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), kernel $(uname -r)"
echo "machine: $MACHINE"
echo "$MACHINE" >"$OUT/machine.txt"

# cpu_ticks PID: "utime stime" of the whole process, in clock ticks (fields 14, 15).
cpu_ticks() { sed 's/.*) //' "/proc/$1/stat" | awk '{print $12, $13}'; }

declare -A PATHS=(
  [stats]='/v1/users/{id}/stats?days=30'
  [balance]='/v1/users/{id}/balance'
)

for ep in $ENDPOINTS; do
  # go: runtime/pprof; goperf: the same Go process under perf, so both languages are also
  # seen through one tool (pprof's 100 Hz profile samples less of the CPU time than perf and
  # cannot split kernel from user time); rust: perf.
  for run in go goperf rust; do
    svc="${run%perf}"; svc="${svc:-go}"
    url_var="${svc^^}_URL"; pid_var="${svc^^}_PID"
    url="${!url_var}"; pid="${!pid_var}"
    echo "== $ep on $run: $RATE rps for $DURATION, profiling ${window} s (load avg $(cut -d' ' -f1-3 /proc/loadavg))"
    taskset -c "$LOAD_CPU" "$SCALPEL" load --threads 1 --no-progress --rate "$RATE" -d "$DURATION" \
      --data "$IDS" --shuffle 1 "$url${PATHS[$ep]}" >"$OUT/$run-$ep.load.txt" 2>&1 &
    load_pid=$!
    sleep 2
    before="$(cpu_ticks "$pid")"; t0="$(date +%s.%N)"
    case "$run" in
      go) curl -sS --max-time $((window + 60)) -o "$OUT/go-$ep.pprof" "$PPROF/debug/pprof/profile?seconds=$window" ;;
      # Go keeps frame pointers; Rust's release build does not, so its stacks come from DWARF.
      goperf) taskset -c "$LOAD_CPU" perf record -q -F "$FREQ" --call-graph fp -p "$pid" \
          -o "$OUT/go-$ep.perf.data" -- sleep "$window" 2>"$OUT/go-$ep.perf.stderr" ;;
      rust) taskset -c "$LOAD_CPU" perf record -q -F "$FREQ" --call-graph dwarf,16384 -p "$pid" \
          -o "$OUT/rust-$ep.perf.data" -- sleep "$window" 2>"$OUT/rust-$ep.perf.stderr" ;;
    esac
    after="$(cpu_ticks "$pid")"; t1="$(date +%s.%N)"
    wait "$load_pid" || true
    python3 - "$before" "$after" "$t0" "$t1" "$(getconf CLK_TCK)" "$(cut -d' ' -f1-3 /proc/loadavg)" \
      >"$OUT/$run-$ep.cpu.txt" <<'PY'
import sys
(u0, s0), (u1, s1) = (map(int, a.split()) for a in sys.argv[1:3])
t, hz = float(sys.argv[4]) - float(sys.argv[3]), int(sys.argv[5])
u, s = (u1 - u0) / hz, (s1 - s0) / hz
print(f"window {t:.1f} s: user {u:.2f} s, system {s:.2f} s, {100 * (u + s) / t:.1f}% of one core, "
      f"system share {100 * s / max(u + s, 1e-9):.1f}%; load avg after: {sys.argv[6]}")
PY
    cat "$OUT/$run-$ep.cpu.txt"
    grep -E 'achieved rps|latency p99 ms|errors' "$OUT/$run-$ep.load.txt" | sed 's/^/  /' || true
  done

  echo "== reports for $ep"
  (cd "$ROOT/payments/go" &&
    go tool pprof -top -nodecount=40 "$GO" "$OUT/go-$ep.pprof" >"$OUT/go-$ep.top.txt" 2>&1 &&
    go tool pprof -top -cum -nodecount=40 "$GO" "$OUT/go-$ep.pprof" >"$OUT/go-$ep.cum.txt" 2>&1 &&
    go tool pprof -traces "$GO" "$OUT/go-$ep.pprof" >"$OUT/go-$ep.traces.txt" 2>&1)
  # -list needs the sources: the binary is built with -trimpath, so point pprof at them.
  hot='readmodel.ComputeStats|readmodel.\(\*Model\)\.(Stats|Balance|snapshot)|api.writeJSON'
  (cd "$ROOT/payments/go" &&
    go tool pprof -list "$hot" -source_path "$ROOT/payments/go" -trim_path scalpel.example/payments-go \
      "$GO" "$OUT/go-$ep.pprof" >"$OUT/go-$ep.list.txt" 2>&1) || true
  for svc in go rust; do
    perf report -i "$OUT/$svc-$ep.perf.data" --no-children --percent-limit 2 --stdio \
      >"$OUT/$svc-$ep.report.txt" 2>/dev/null
    perf report -i "$OUT/$svc-$ep.perf.data" --no-children --percent-limit 2 --stdio -g caller,0.5,callee \
      >"$OUT/$svc-$ep.callers.txt" 2>/dev/null
    perf script -i "$OUT/$svc-$ep.perf.data" -F period,ip,sym >"$OUT/$svc-$ep.script.txt" 2>/dev/null
  done
done

python3 - "$OUT" "$ENDPOINTS" "$MACHINE" "$RATE" "$DURATION" <<'PY' | tee "$OUT/summary.md"
import re, sys, os, collections

# Groups every sampled stack of a profile into one cost centre, so the Go and the Rust
# profiles read side by side. A stack goes to the FIRST rule that matches: a rule names a
# regex that must match the leaf frame ("leaf") or any frame ("any").
KERNEL_WRITE = "socket write: syscall + kernel (TCP send, loopback delivery)"
KERNEL_READ = "socket read: syscall + kernel"
EPOLL = "epoll (netpoll / mio): syscall + kernel"
GO_RULES = [
    (KERNEL_WRITE, "any", r"^syscall\.(write|Write)|^internal/poll\.\(\*FD\)\.Write"),
    (KERNEL_READ, "any", r"^syscall\.(read|Read)|^internal/poll\.\(\*FD\)\.Read"),
    (EPOLL, "any", r"EpollWait|EpollCtl|^runtime\.netpoll"),
    ("GC: background mark/sweep workers", "any", r"^runtime\.(gcBgMarkWorker|bgsweep|bgscavenge|gcStart|gcMarkDone|gcMarkTermination)"),
    ("allocation + GC assist (mallocgc)", "any", r"^runtime\.(mallocgc|gcAssistAlloc|newobject|makeslice|makemap|newarray|growslice|mapassign|wbBuf|gcWriteBarrier)|^internal/runtime/maps\.(newarray|NewMap|\(\*Map\)\.grow|newTable)"),
    ("runtime scheduler, futex, timers", "any", r"^runtime\.(schedule|findRunnable|park_m|goexit0|mcall|wakep|startm|stopm|notewakeup|notesleep|futex|usleep|runqgrab|stealWork|sysmon|checkTimers|gopark|goready|ready|resetspinning)|^internal/runtime/syscall"),
    ("stats: window scan + aggregation (maps)", "any", r"readmodel\.ComputeStats$"),
    ("user lookup + snapshot copy under RWMutex", "any", r"readmodel\.\(\*Model\)\.(snapshot|Balance|Stats)"),
    ("JSON encoding (encoding/json, reflection)", "any", r"^encoding/json\.|api\.writeJSON"),
    ("routing + validation (router, regexp, query)", "any", r"^regexp|^net/url\.|api\.\(\*router\)|api\.(boundedInt|firstQuery|rawPath)|\(\*Server\)\.(stats|balance)"),
    ("HTTP/1 parse + write (net/http, bufio)", "any", r"^net/http\.|^bufio\.|^net/textproto\.|^net\.|^context\."),
    ("other (runtime memmove, hashing, ...)", "any", r"."),
]
# Subdivision of the stats computation by leaf (what the inner loop spends its time on).
GO_STATS_SPLIT = [
    ("stats: sorting (percentiles, counterparties, categories)", r"^slices\.|^sort\.|pdqsort|insertionSort|heapSort|choosePivot|^cmp\.|ComputeStats\.func"),
    ("stats: map lookups (category, counterparty, currency)", r"^internal/runtime/maps|^runtime\.(mapaccess|memhash|strhash|aeshash|memequal)|^aeshashbody|^memeqbody"),
    ("stats: date formatting (time.Format)", r"^time\.|readmodel\.dateOf"),
]

RUST_RULES = [
    (KERNEL_WRITE, "any", r"^\[k\] (do_writev|__sys_sendto|__sys_sendmsg|ksys_write|tcp_sendmsg)$"),
    (KERNEL_READ, "any", r"^\[k\] (ksys_read|__sys_recvfrom|__sys_recvmsg|tcp_recvmsg|do_readv)$"),
    (EPOLL, "any", r"^\[k\] .*epoll"),
    ("other kernel (futex, scheduling, interrupts)", "leaf", r"^\[k\] "),
    ("allocation (malloc/free/realloc)", "any", r"^(malloc|free|cfree|realloc|calloc|_int_malloc|_int_free|_int_realloc|malloc_consolidate|tcache_|__libc_malloc|__libc_free|__libc_realloc|__rust_alloc|__rust_dealloc|__rust_realloc|alloc::raw_vec::finish_grow|unlink_chunk)"),
    ("stats: percentile selection (select_nth_unstable)", "any", r"select_nth_unstable|partition_at_index|slice::select|median_of|introselect"),
    ("stats: top counterparties sort", "any", r"sort_unstable_by|slice::sort"),
    ("stats: window search + aggregation + JSON writing (one inlined pass)", "any", r"payments_core::api::write_stats"),
    ("balance: JSON writing", "any", r"payments_core::api::write_balance"),
    ("routing + validation (route, days, id)", "any", r"payments_core::api::|payments_core::ids|payments_service::serve::handle"),
    ("HTTP/1 parse + write (hyper, httparse)", "any", r"^hyper::|^httparse::|^http::|^hyper_util::|^bytes::|^http_body"),
    ("runtime scheduler, futex, timers", "any", r"^tokio::|^mio::"),
    ("other (memcpy, std, ...)", "any", r"."),
]
RUST_LEAF_SPLIT = [
    ("  of which memcpy/memmove/memset", r"^__memcpy|^__memmove|^__memset|^memcpy|^memmove|^memset"),
    ("  of which kernel (any)", r"^\[k\] "),
]
# Go seen by perf: kernel frames are visible, so kernel time outside the socket calls
# (futex, scheduling, page faults) gets its own line, as for Rust.
GO_PERF_RULES = GO_RULES[:3] + [RUST_RULES[3]] + GO_RULES[3:]

UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0, "hrs": 3600.0}


def go_stacks(path):
    """(seconds, frames leaf first) per trace of `go tool pprof -traces`."""
    out, cur, val = [], None, None
    for line in open(path, encoding="utf-8", errors="replace"):
        if line.startswith("-----------+"):
            if cur:
                out.append((val, cur))
            cur, val = None, None
            continue
        m = re.match(r"^\s*([0-9.]+)(ns|us|µs|ms|s|min|hrs)\s+(\S.*)$", line)
        if m and cur is None:
            val, cur = float(m.group(1)) * UNITS[m.group(2)], [re.sub(r"\s+\(inline\)$", "", m.group(3).strip())]
        elif cur is not None and line.strip() and not re.match(r"^\s*\S+:\s", line):
            cur.append(re.sub(r"\s+\(inline\)$", "", line.strip()))
    if cur:
        out.append((val, cur))
    return out


def perf_stacks(path):
    """(period, frames leaf first) per sample of `perf script -F period,ip,sym`."""
    out, cur, val = [], None, None
    for line in open(path, encoding="utf-8", errors="replace"):
        s = line.strip()
        if not s:
            continue
        if re.fullmatch(r"\d+", s):
            if cur is not None:
                out.append((val, cur))
            val, cur = int(s), []
            continue
        m = re.match(r"^([0-9a-f]+)\s+(.*)$", s)
        if m and cur is not None:
            sym = re.sub(r"\+0x[0-9a-f]+$", "", m.group(2)).strip()
            sym = re.sub(r"\s+\(inlined\)$", "", sym)
            cur.append(("[k] " if m.group(1).startswith("ffffffff") else "") + sym)
    if cur is not None:
        out.append((val, cur))
    # cpu-clock periods are nanoseconds: the same unit (seconds) as the pprof traces.
    return [(v / 1e9, f) for v, f in out]


def strip_hash(sym):
    return re.sub(r"::h[0-9a-f]{16}$", "", sym)


def classify(stacks, rules, split=None, leaf_split=None):
    total = sum(v for v, _ in stacks) or 1
    acc = collections.Counter()
    for v, frames in stacks:
        frames = [strip_hash(f) for f in frames] or ["?"]
        cat = "unclassified"
        for name, where, rx in rules:
            r = re.compile(rx)
            if (where == "leaf" and r.search(frames[0])) or (where == "any" and any(r.search(f) for f in frames)):
                cat = name
                break
        if split and cat.startswith("stats: window"):
            for name, rx in split:
                if re.search(rx, frames[0]):
                    cat = name
                    break
        acc[cat] += v
        if leaf_split:
            for name, rx in leaf_split:
                if re.search(rx, frames[0]):
                    acc[name] += v
    return total, acc


def table(title, total, acc, requests):
    rows = [f"**{title}**\n", "| cost centre | share of samples | µs of CPU per request |", "|---|---|---|"]
    for n in sorted(acc, key=lambda n: (n.startswith("  "), -acc[n])):
        label = f"{n.strip()} (any category)" if n.startswith("  ") else n
        rows.append(f"| {label} | {100 * acc[n] / total:.1f}% | {1e6 * acc[n] / requests:.1f} |")
    rows.append(f"| **total sampled** | 100% | {1e6 * total / requests:.1f} |")
    return "\n".join(rows)


def main():
    out, endpoints, machine, rate, duration = sys.argv[1], sys.argv[2].split(), *sys.argv[3:6]
    print(f"# payments CPU profiles\n\nmachine: {machine}; servers pinned to one CPU, load to another; "
          f"open model, {rate} rps, {duration} per run, one service loaded at a time\n")
    for ep in endpoints:
        print(f"## {ep}\n")
        for run in ("go", "goperf", "rust"):
            cpu = open(os.path.join(out, f"{run}-{ep}.cpu.txt")).read().strip()
            load = open(os.path.join(out, f"{run}-{ep}.load.txt")).read()
            rps = re.search(r"achieved rps\s+([\d,]+)", load)
            p99 = re.search(r"latency p99 ms\s+([\d.,]+)", load)
            if run == "go":
                st = go_stacks(os.path.join(out, f"go-{ep}.traces.txt"))
                total, acc = classify(st, GO_RULES, GO_STATS_SPLIT)
                what = f"Go, runtime/pprof, {total:.2f} s of CPU sampled"
            elif run == "goperf":
                st = perf_stacks(os.path.join(out, f"go-{ep}.script.txt"))
                total, acc = classify(st, GO_PERF_RULES, GO_STATS_SPLIT, RUST_LEAF_SPLIT)
                what = f"Go, perf record --call-graph fp, {len(st)} samples ({total:.2f} s)"
            else:
                st = perf_stacks(os.path.join(out, f"rust-{ep}.script.txt"))
                total, acc = classify(st, RUST_RULES, None, RUST_LEAF_SPLIT)
                what = f"Rust, perf record --call-graph dwarf, {len(st)} samples ({total:.2f} s)"
            window = float(re.search(r"window ([\d.]+) s", cpu).group(1))
            achieved = float(rps.group(1).replace(",", "")) if rps else float(rate)
            print(f"{what}; achieved {rps.group(1) if rps else '?'} rps, p99 {p99.group(1) if p99 else '?'} ms; {cpu}\n")
            print(table(f"{run} {ep}", total, acc, achieved * window))
            print()


if __name__ == "__main__":
    main()
PY
echo "profiles in $OUT"
