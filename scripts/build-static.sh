#!/usr/bin/env bash
# Builds a static `scalpel` binary (musl), for container images and for copying onto load
# generator machines that lack this project's toolchain. The same cargo profile and
# Cargo.lock as `./run build`; the only difference is the target.
#
#   scripts/build-static.sh        -> $CARGO_TARGET_DIR/x86_64-unknown-linux-musl/release/scalpel
#
# Used by deploy/Containerfile. Installs the musl target and musl-gcc (for the C parts:
# SQLite, the TLS library's assembly) when missing. Idempotent.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
TARGET=x86_64-unknown-linux-musl

rustup target list --installed | grep -qx "$TARGET" || rustup target add "$TARGET"
if ! command -v musl-gcc >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends musl-tools >/dev/null
fi
export CC_x86_64_unknown_linux_musl=musl-gcc
cargo build --release --locked -p scalpel --target "$TARGET"
bin="$CARGO_TARGET_DIR/$TARGET/release/scalpel"
file "$bin" 2>/dev/null | grep -q "statically linked" || ldd "$bin" 2>&1 | grep -q "not a dynamic" ||
    { echo "build-static: $bin is not static" >&2; exit 1; }
echo "$bin"
