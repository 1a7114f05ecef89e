"""Tier 1 with misbehaving CLIs (real processes, through QR_CLI): each failure is a JSON
500 bounded by the time-out, and no process is left behind, even when the CLI is a script
whose own children hold its stdout."""

import os
import signal
import socket
import time

import pytest

import harness as h


@pytest.fixture(scope="module")
def scripts(tmp_path_factory):
    d = tmp_path_factory.mktemp("fake-cli")

    def script(name, body):
        p = d / name
        p.write_text(f"#!/bin/sh\n{body}\n")
        p.chmod(0o755)

    # Records "shell_pid sleep_pid": `sleep` is a grandchild holding stdout; killing only
    # the shell would leak it.
    script("hang.sh", 'sleep 1000 &\necho "$$ $!" >> "$QR_FAKE_PIDS"\nwait')
    script("exit1.sh", 'cat > /dev/null\necho "boom: fake failure" >&2\nexit 1')
    script("killed.sh", "kill -9 $$")
    script("garbage.sh", 'cat > /dev/null\necho "not a png"')
    script("huge.sh", "cat > /dev/null\nhead -c 5000000 /dev/zero")
    return d


started = []


@pytest.fixture(autouse=True, scope="module")
def _cleanup():
    yield
    for s in started:
        if s.proc.poll() is None:
            s.proc.kill()
            s.proc.wait()


def start_fake(scripts, name, timeout_ms, artifacts=None):
    pids = scripts / f"{name}.{time.monotonic_ns()}.pids"
    s = h.start("1", env={"QR_CLI": str(scripts / name), "QR_CLI_TIMEOUT_MS": str(timeout_ms),
                          "QR_FAKE_PIDS": str(pids)})
    started.append(s)
    return s, pids


def recorded(pids):
    return [int(x) for x in pids.read_text().split()] if pids.exists() else []


def assert_all_gone(pids):
    assert pids, "the fake CLI recorded its pids"
    gone = h.poll_until(lambda: not any(map(h.pid_alive, pids)))
    assert gone, f"still alive: {[p for p in pids if h.pid_alive(p)]}"


def assert_500(res, fragment):
    assert res.status == 500, res.body
    assert res.content_type == "application/json"
    assert fragment in res.json()["error"]


def test_a_hanging_cli_with_a_grandchild_is_killed_at_the_time_out(artifacts, scripts):
    from concurrent.futures import ThreadPoolExecutor

    s, pids = start_fake(scripts, "hang.sh", 500)
    with ThreadPoolExecutor(3) as pool:  # three at once: each its own child and its own kill
        answers = list(pool.map(lambda _: h.request(s.base, h.qrcode_target("x")), range(3)))
    for res in answers:
        assert_500(res, "timed out after 500 ms")
    p = recorded(pids)
    assert len(p) == 6, "three shells and three sleeps"
    assert_all_gone(p)
    assert h.request(s.base, "/healthz").status == 200, "the server still serves"


@pytest.mark.parametrize("script,fragment", [
    ("exit1.sh", "exited with 1: boom: fake failure"),
    ("killed.sh", "killed by SIGKILL"),
    ("garbage.sh", "did not write a PNG"),
    ("huge.sh", "wrote more than 4194304 bytes"),
    ("no-such-cli", "cannot run qr-cli"),
], ids=["exits non-zero: its stderr line", "killed by a signal", "exits 0 without a PNG",
        "writes more than 4 MiB", "missing executable"])
def test_a_misbehaving_cli_is_a_json_500_and_the_server_goes_on(artifacts, scripts, script, fragment):
    s, _ = start_fake(scripts, script, 10_000)
    assert_500(h.request(s.base, h.qrcode_target("x")), fragment)
    assert h.request(s.base, "/healthz").status == 200


def test_a_client_that_goes_away_kills_its_child_long_before_the_time_out(artifacts, scripts):
    s, pids = start_fake(scripts, "hang.sh", 120_000)
    conn = socket.create_connection(("127.0.0.1", s.port))
    conn.sendall(b"GET /qrcode?text=x HTTP/1.1\r\nHost: t\r\n\r\n")
    p = h.poll_until(lambda: recorded(pids) if len(recorded(pids)) == 2 else None)
    assert p, "the fake CLI started"
    conn.close()
    assert_all_gone(p)


def test_sigterm_with_a_cli_request_in_flight_ends_it_and_exits_0_leaving_nothing(artifacts, scripts):
    s, pids = start_fake(scripts, "hang.sh", 1500)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(h.request, s.base, h.qrcode_target("x"))
        p = h.poll_until(lambda: recorded(pids) if len(recorded(pids)) == 2 else None)
        assert p, "the fake CLI started"
        s.proc.send_signal(signal.SIGTERM)
        assert_500(pending.result(), "timed out")
    assert s.stop() == 0, s.stderr()
    assert_all_gone(p)
    assert not os.path.exists(f"/proc/{s.proc.pid}")
