"""Tier 3's extension module (qr_pyo3, built by maturin and installed by ./run build)."""

import os
import subprocess
import sys
import threading
import time

import pytest

import harness as h

import qr_pyo3  # noqa: E402 - installed in the venv by ./run build


def cli_png(data):
    return subprocess.run([os.path.join(h.TARGET, "release", "qr-cli")], input=data, capture_output=True,
                          check=True).stdout


def test_str_and_bytes_give_the_rust_functions_bytes(artifacts):
    for text in ["hi", "héllo 日本語 😀", "x" * 512]:
        expected = cli_png(text.encode())
        assert qr_pyo3.png(text) == expected
        assert qr_pyo3.png(text.encode()) == expected
    assert qr_pyo3.MAX_TEXT_BYTES == 512


def test_errors_are_value_errors_with_the_wire_codes():
    for arg, code in [("", "empty"), (b"", "empty"), ("€" * 200, "too_long"), (b"x" * 513, "too_long"),
                      (b"ab\xff", "invalid_utf8")]:
        with pytest.raises(ValueError, match=f"^{code}$"):
            qr_pyo3.png(arg)
    with pytest.raises(TypeError):
        qr_pyo3.png(12)


def test_the_gil_is_released_during_the_render():
    # With a switch interval of an hour, a thread gets the GIL only when its holder lets it
    # go: the main loop below does at every turn (sleep(0)), the renderer in every call if
    # the render is detached from the GIL (py.detach). Without that, the renderer would
    # hold the GIL through all its 200 renders and the main loop would see it alive at
    # most once or twice.
    old = sys.getswitchinterval()
    sys.setswitchinterval(3600)
    try:
        renderer = threading.Thread(target=lambda: [qr_pyo3.png("z" * 512) for _ in range(200)])
        seen_alive = 0
        renderer.start()
        while renderer.is_alive():
            seen_alive += 1
            time.sleep(0)
        renderer.join()
    finally:
        sys.setswitchinterval(old)
    assert seen_alive > 100, seen_alive
