#!/usr/bin/env bash
# Runs everything CI checks, in order: formatting, lints, the release build, the Rust
# tests, the Go tests, the Node tests and the browser tests. Stops at the first failure.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
start=$SECONDS
step() { printf '\n==> [%4ss] %s\n' "$((SECONDS - start))" "$*"; }

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

step "go: gofmt, vet, test"
(
    cd payments/go
    unformatted="$(gofmt -l .)"
    if [ -n "$unformatted" ]; then echo "gofmt: needs formatting: $unformatted" >&2; exit 1; fi
    go vet ./...
    go test -count=1 ./...
)

step "node tests (qr/node)"
(cd qr/node && node --test)

step "browser tests (tests/browser: the live pages in chromium, release scalpel)"
(cd tests/browser && node --test)
step "deploy manifests: kubernetes-validate --strict"
kubernetes-validate --strict --quiet -k 1.31.0 deploy/kubernetes/*.yaml

step "end to end: scalpel against the payments services"
bash scripts/e2e.sh

step "all tests passed in $((SECONDS - start))s"
