#!/usr/bin/env bash
# Builds the legacy Go payments service (payments/go) into
# ${CARGO_TARGET_DIR:-<repo>/target}/payments-go, with the Rust read model
# (payments/ffi, a static library) linked in by cgo for `--engine rust`.
# Idempotent: cargo's and Go's build caches make a re-run quick. Needs Go 1.26,
# a C compiler (cgo: go-sqlite3 and the Rust library) and cargo.
#
#   bash scripts/build-go.sh          the library (unless SCALPEL_HOST_BUILT=1: build.sh
#                                     made it in its workspace build), then the binary
#   source scripts/build-go.sh env    only sets CGO_LDFLAGS and GO_RUST_LDFLAGS for a
#                                     `go test`/`go vet` in payments/go (scripts/test.sh)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
mkdir -p "$OUT_DIR"
OUT_DIR="$(cd "$OUT_DIR" && pwd)"
LIB="$OUT_DIR/release/libpayments_ffi.a"

# The linker finds -lpayments_ffi (payments/go/internal/rustcore) here. Go does not
# hash a C library's contents into its build cache, so a rebuilt library alone would
# not relink the binary: its SHA-256, stamped into the binary with -X, makes every
# change of the library a change of the link (and tells which library a binary holds).
go_rust_env() {
  [[ -f "$LIB" ]] || { echo "build-go: missing $LIB (cargo build --release -p payments-ffi)" >&2; return 1; }
  export CGO_LDFLAGS="-L$OUT_DIR/release"
  GO_RUST_LDFLAGS="-X scalpel.example/payments-go/internal/rustcore.LibrarySHA256=$(sha256sum "$LIB" | cut -c1-64)"
  export GO_RUST_LDFLAGS
}

if [[ "${1:-}" == env ]]; then
  go_rust_env
  return 0 2>/dev/null || exit 0
fi

if [[ "${SCALPEL_HOST_BUILT:-0}" != 1 ]]; then
  # Run alone (the bench scripts): the library by itself. Cargo unifies features over
  # this one package, so the first time it compiles syn and thiserror's macro once more
  # with fewer features than the workspace build (seconds); scripts/build.sh skips this.
  (cd "$ROOT" && cargo build --release -p payments-ffi --lib)
fi
go_rust_env

cd "$ROOT/payments/go"
go mod download
CGO_ENABLED=1 go build -trimpath -ldflags "$GO_RUST_LDFLAGS" -o "$OUT_DIR/payments-go" .
echo "built $OUT_DIR/payments-go ($(go version | awk '{print $3}'), Rust engine ${GO_RUST_LDFLAGS: -64:12})"
