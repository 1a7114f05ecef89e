"""The launcher's start-up failures: one line on stderr, exit 2 for bad flags, exit 1 for
a missing artifact or a port already taken."""

import os
import socket
import subprocess

import pytest

import harness as h


def run(args, env=None):
    full = {**os.environ, "CARGO_TARGET_DIR": h.TARGET, **(env or {})}
    return subprocess.run([h.SERVE, *args], capture_output=True, text=True, env=full, timeout=60)


@pytest.mark.parametrize("args,fragment", [
    ([], "--tier is required"),
    (["--tier", "5", "--port", "0"], "--tier must be one of"),
    (["--tier", "3"], "--port is required"),
    (["--tier", "3", "--port", "x"], "--port must be a whole number"),
    (["--tier", "3", "--port", "70000"], "--port must be at most 65535"),
    (["--tier", "1", "--port", "0", "--cli-timeout-ms", "0"], "--cli-timeout-ms must be positive"),
    (["--tier", "2", "--port", "0", "--native-mode", "sync"], "--native-mode applies to --tier 3 only"),
    (["--tier", "3", "--port", "0", "--native-mode", "fast"], "--native-mode must be sync or threads"),
    (["--tier", "3", "--port", "0", "--bogus"], "unrecognized arguments"),
])
def test_bad_flags_are_one_line_and_exit_2(artifacts, args, fragment):
    r = run(args)
    assert r.returncode == 2, r.stderr
    assert fragment in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert r.stdout == ""


@pytest.mark.parametrize("tier,artifact", [("1", "qr-cli"), ("2", "qr_raw.wasm")])
def test_a_missing_artifact_is_exit_1_saying_how_to_build_it(artifacts, tmp_path, tier, artifact):
    # The venv stays where it is; the artifacts are looked for in an empty target dir.
    venv = os.path.join(h.TARGET, "qr", "venv")
    os.makedirs(tmp_path / "qr")
    os.symlink(venv, tmp_path / "qr" / "venv")
    r = run(["--tier", tier, "--port", "0"], env={"CARGO_TARGET_DIR": str(tmp_path)})
    assert r.returncode == 1, r.stderr
    assert artifact in r.stderr and "./run build" in r.stderr, r.stderr


def test_no_virtual_environment_is_exit_1_saying_how_to_make_it(tmp_path):
    r = run(["--tier", "0", "--port", "0"], env={"CARGO_TARGET_DIR": str(tmp_path)})
    assert r.returncode == 1 and "./run build" in r.stderr, r.stderr


def test_a_port_already_taken_is_exit_1(artifacts):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        r = run(["--tier", "0", "--port", str(s.getsockname()[1])])
    assert r.returncode == 1, r.stderr
    assert "cannot listen" in r.stderr, r.stderr
