#!/usr/bin/env bash
# Installs the toolchain pieces and packages the build and the tests need. Idempotent.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

step() { printf '==> %s\n' "$*"; }

need() { command -v "$1" >/dev/null 2>&1; }

for tool in cargo go node npm; do
    need "$tool" || { echo "setup: '$tool' is not installed; install Rust (rustup), Go and Node 20 first" >&2; exit 2; }
done

step "system packages the tests use (nginx writes the access logs scalpel-requests reads)"
if ! need nginx && [ ! -x /usr/sbin/nginx ]; then
    if need apt-get; then
        SUDO=""
        [ "$(id -u)" -eq 0 ] || SUDO="sudo"
        $SUDO apt-get update >/dev/null && $SUDO apt-get install -y nginx >/dev/null
    else
        echo "setup: install nginx (the access-log tests start it on loopback)" >&2
    fi
fi

step "rust components and targets"
rustup component add rustfmt clippy >/dev/null 2>&1 || true
rustup target add wasm32-unknown-unknown >/dev/null

step "node packages (qr/node)"
if [ -f qr/node/package-lock.json ]; then
    (cd qr/node && npm ci --no-audit --no-fund --loglevel=error)
fi

step "go modules (payments/go)"
if [ -f payments/go/go.mod ]; then
    (cd payments/go && go mod download)
fi
