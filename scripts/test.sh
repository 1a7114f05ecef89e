#!/usr/bin/env bash
# Runs everything CI checks, in order: formatting, lints, the release build, the Rust
# tests, the Go tests, the Node tests, the Python host's tests, the demo's Python tests and the browser tests. Stops
# at the first failure.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
start=$SECONDS
# Each step's wall time, printed as a table at the end (also when a step fails), so a CI
# log shows where the time went (docs/CI.md keeps the figures).
steps=()
step_name=""
step_start=$SECONDS
end_step() {
    [ -n "$step_name" ] && steps+=("$(printf '%5ss  %s' "$((SECONDS - step_start))" "$step_name")")
    step_name=""
}
step() {
    end_step
    printf '\n==> [%4ss] %s\n' "$((SECONDS - start))" "$*"
    step_name="$*"
    step_start=$SECONDS
}
summary() {
    end_step
    printf '\n==> step times (load average at the end: %s)\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
    printf '    %s\n' "${steps[@]}"
    printf '%5ss  total\n' "$((SECONDS - start))" | sed 's/^/    /'
}
trap summary EXIT

step "setup"
bash scripts/setup.sh

step "cargo fmt --check"
cargo fmt --all --check

step "cargo clippy --all-targets -- -D warnings"
cargo clippy --workspace --all-targets --quiet -- -D warnings

step "build (release)"
bash scripts/build.sh

step "rust tests (release)"
cargo test --release --workspace --no-fail-fast

step "go: gofmt, vet, test (the Rust engine linked from the build step's libpayments_ffi.a), -race on internal/rustcore"
(
    cd payments/go
    # The build step made target/release/libpayments_ffi.a and target/payments-go: link
    # the tests against the same library (CGO_LDFLAGS, GO_RUST_LDFLAGS) and run the
    # process tests on that binary instead of building it again.
    # shellcheck source=build-go.sh
    source "$ROOT/scripts/build-go.sh" env
    unformatted="$(gofmt -l .)"
    if [ -n "$unformatted" ]; then echo "gofmt: needs formatting: $unformatted" >&2; exit 1; fi
    go vet ./...
    PAYMENTS_GO_BIN="$CARGO_TARGET_DIR/payments-go" go test -count=1 -ldflags "$GO_RUST_LDFLAGS" ./...
    # The cgo boundary under the race detector: answers on many goroutines while one
    # feeds (the soak skips itself under -race; the plain run above has it).
    go test -count=1 -race -ldflags "$GO_RUST_LDFLAGS" ./internal/rustcore/
)

step "bench helpers (scripts/lib/proc-ticks-test.sh: scalpel procstat's CPU time of processes named with spaces; scripts/lib/stats.py: the benches' arithmetic; scripts/lib/paired.py: the paired interval's coverage and verdicts)"
bash scripts/lib/proc-ticks-test.sh
python3 scripts/lib/stats.py selftest
python3 scripts/lib/paired.py

step "node tests (qr/node)"
(cd qr/node && node --test)

step "python tests (qr/python: pytest in the host's venv, made by the build step)"
"$CARGO_TARGET_DIR/qr/venv/bin/python" -m pytest -q -p no:cacheprovider qr/python/tests

step "demo-py: the demo's Python (scripts/demo/tests, unittest; release scalpel)"
python3 -m unittest discover -s scripts/demo/tests

step "browser tests (tests/browser: the live pages in chromium, release scalpel)"
(cd tests/browser && node --test)
step "deploy manifests: kubernetes-validate --strict"
kubernetes-validate --strict --quiet -k 1.31.0 deploy/kubernetes/*.yaml

step "end to end: scalpel against the payments services"
bash scripts/e2e.sh

end_step
printf '\n==> all tests passed in %ss\n' "$((SECONDS - start))"
