"""Flags, the listening socket, uvicorn and the signals: one process per server.

    qr/python/serve --tier 0|0-article|1|2|3 --port P [--host 127.0.0.1]
                    [--native-mode sync|threads] [--cli-timeout-ms 5000]

Prints exactly one line when listening (``qr-python tier T listening on http://H:P``),
the real port when ``--port 0``. SIGTERM or SIGINT: stop accepting, let requests in flight
finish (at most the CLI time-out + 2 s), close idle keep-alive connections, kill any CLI
child left, exit 0. Bad flags: one line on stderr, exit 2. A missing artifact or a port
already taken: one line on stderr, exit 1. Env: ``QR_CLI`` replaces the tier-1
executable, ``QR_CLI_TIMEOUT_MS`` is the default of ``--cli-timeout-ms`` (as qr/node).
"""

import argparse
import os
import signal
import socket
import sys

from . import tiers

PROG = "qr-python"


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(message)


def parse_flags(argv):
    p = _Parser(prog=PROG, add_help=False, allow_abbrev=False)
    p.add_argument("--tier")
    p.add_argument("--port")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--native-mode")
    p.add_argument("--cli-timeout-ms", default=os.environ.get("QR_CLI_TIMEOUT_MS") or "5000")
    p.add_argument("--max-connections", default="4096")
    a = p.parse_args(argv)
    if a.tier is None:
        raise UsageError(f"--tier is required (one of {', '.join(tiers.TIERS)})")
    if a.tier not in tiers.TIERS:
        raise UsageError(f"--tier must be one of {', '.join(tiers.TIERS)}, not {a.tier}")
    if a.port is None:
        raise UsageError("--port is required (0 picks a free port)")
    port = _whole(a.port, "--port")
    if port > 65535:
        raise UsageError(f"--port must be at most 65535, not {a.port}")
    timeout_ms = _whole(a.cli_timeout_ms, "--cli-timeout-ms (or QR_CLI_TIMEOUT_MS)")
    if timeout_ms == 0:
        raise UsageError("--cli-timeout-ms must be positive")
    max_conn = _whole(a.max_connections, "--max-connections")
    if max_conn == 0:
        raise UsageError("--max-connections must be positive")
    if a.native_mode is not None:
        from .tier3 import MODES

        if a.native_mode not in MODES:
            raise UsageError(f"--native-mode must be sync or threads, not {a.native_mode}")
        if a.tier != "3":
            raise UsageError("--native-mode applies to --tier 3 only")
    return {"tier": a.tier, "port": port, "host": a.host, "native_mode": a.native_mode,
            "cli_timeout_s": timeout_ms / 1000, "max_connections": max_conn}


def _whole(raw, what):
    if not (raw.isascii() and raw.isdigit() and 1 <= len(raw) <= 9):
        raise UsageError(f"{what} must be a whole number, not {raw!r}")
    return int(raw)


def _listen(host, port):
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(False)
    return sock


def main(argv=None):
    try:
        flags = parse_flags(sys.argv[1:] if argv is None else argv)
    except UsageError as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 2
    try:
        tier = tiers.create(flags["tier"], cli_path=os.environ.get("QR_CLI") or None,
                            cli_timeout_s=flags["cli_timeout_s"], native_mode=flags["native_mode"])
    except Exception as e:  # noqa: BLE001 - one line, exit 1
        print(f"{PROG}: cannot start tier {flags['tier']}: {e}", file=sys.stderr)
        return 1
    try:
        sock = _listen(flags["host"], flags["port"])
    except OSError as e:
        print(f"{PROG}: cannot listen on {flags['host']}:{flags['port']}: {e.strerror or e}", file=sys.stderr)
        tier.close()
        return 1

    # Everything the server needs is imported before the listening line is printed.
    import uvicorn
    import uvloop  # noqa: F401 - the event loop uvicorn is told to use below

    from .app import make_app
    from .protocol import LimitedHttpToolsProtocol

    config = uvicorn.Config(
        make_app(tier), http=LimitedHttpToolsProtocol, loop="uvloop", lifespan="off",
        interface="asgi3", server_header=False, access_log=False, log_level="warning",
        limit_concurrency=flags["max_connections"], timeout_keep_alive=5,
        # A request in flight may take the CLI time-out; then give up on it.
        timeout_graceful_shutdown=flags["cli_timeout_s"] + 2)
    server = uvicorn.Server(config)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    print(f"{PROG} tier {flags['tier']} listening on http://{shown}:{port}", flush=True)
    # uvicorn puts back the handlers it found and raises the signal again once it has shut
    # down: these make that second delivery a no-op, so the exit status is 0.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)
    try:
        server.run(sockets=[sock])
    finally:
        tier.close()
    return 0
