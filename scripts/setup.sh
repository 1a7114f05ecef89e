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

step "debian packages (nginx, wrk, h2load, chromium, postgresql: real peers for the tests and benchmarks)"
missing=()
need nginx || [ -x /usr/sbin/nginx ] || missing+=(nginx)
need wrk || missing+=(wrk)
need h2load || missing+=(nghttp2-client)
need chromium || missing+=(chromium)
need openssl || missing+=(openssl)
# the shadow CLI tests drive the TLS proxy with `curl --http2` (Debian's curl has nghttp2)
need curl || missing+=(curl)
# PostgreSQL for the payments ledger's second store: the tests, e2e and benchmarks start a
# throw-away cluster of their own (scripts/lib/pg.sh: initdb as the postgres user)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing+=(postgresql)
need psql || missing+=(postgresql-client)
# the system trust store scalpel-http reads by default (its tests expect a non-empty one)
[ -s /etc/ssl/certs/ca-certificates.crt ] || missing+=(ca-certificates)
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && need apt-get; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    else
        echo "setup: missing ${missing[*]}; install them with apt-get (needs root)" >&2
        exit 2
    fi
fi

step "python 3.11+ with venv (qr/python's virtual environment is made by scripts/build-qr.sh)"
if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "setup: qr/python needs python3 >= 3.11 (the PyO3 wheel is abi3 from 3.11 on)" >&2
    exit 2
fi
if ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
    if [ "$(id -u)" = 0 ] && need apt-get; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
    else
        echo "setup: python3's venv module is missing; install python3-venv" >&2
        exit 2
    fi
fi

step "rust components and targets"
rustup component add rustfmt clippy >/dev/null 2>&1 || true
rustup target add wasm32-unknown-unknown >/dev/null

step "node packages (qr/node)"
if [ -f qr/node/package-lock.json ]; then
    (cd qr/node && npm ci --no-audit --no-fund --loglevel=error)
fi

step "node packages (scripts/demo/pm2: pm2 for the runtime story and ./run bench serve, never global)"
if [ -f scripts/demo/pm2/package-lock.json ] && [ ! -x scripts/demo/pm2/node_modules/.bin/pm2 ]; then
    (cd scripts/demo/pm2 && npm ci --no-audit --no-fund --loglevel=error)
fi

step "node packages (tests/browser: playwright-core drives Debian's chromium; no browser download)"
if [ -f tests/browser/package-lock.json ]; then
    (cd tests/browser && npm ci --no-audit --no-fund --loglevel=error)
fi

step "test apps (tests/apps: Express, Fastify, Koa from npm; uvicorn, gunicorn, FastAPI from PyPI; pinned)"
if [ ! -f tests/apps/node/node_modules/.package-lock.json ] || [ tests/apps/node/package-lock.json -nt tests/apps/node/node_modules/.package-lock.json ]; then
    (cd tests/apps/node && npm ci --no-audit --no-fund --loglevel=error)
fi
# shellcheck source=lib/venv.sh
source scripts/lib/venv.sh
ensure_venv "${CARGO_TARGET_DIR:-$ROOT/target}/apps/venv" tests/apps/python/requirements.txt "serve's test apps"

step "go modules (payments/go)"
if [ -f payments/go/go.mod ]; then
    (cd payments/go && go mod download)
fi

step "python packages (kubernetes-validate: the deploy manifests checked offline)"
if ! command -v kubernetes-validate >/dev/null 2>&1; then
    python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore kubernetes-validate
fi
