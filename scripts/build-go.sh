#!/usr/bin/env bash
# Builds the legacy Go payments service (payments/go) into
# ${CARGO_TARGET_DIR:-<repo>/target}/payments-go. Idempotent: Go's build cache
# makes a re-run quick. Needs Go 1.26 and a C compiler (the SQLite driver is cgo).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
mkdir -p "$OUT_DIR"
OUT="$(cd "$OUT_DIR" && pwd)/payments-go"

cd "$ROOT/payments/go"
go mod download
CGO_ENABLED=1 go build -trimpath -o "$OUT" .
echo "built $OUT ($(go version | awk '{print $3}'))"
