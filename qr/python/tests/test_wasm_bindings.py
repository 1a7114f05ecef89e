"""Tier 2's hand-written wasmtime bindings, in process, against the real qr_raw.wasm (and,
for the bounds checks, small modules written here in WAT that break the ABI on purpose)."""

import os
import subprocess

import pytest
import wasmtime

import harness as h
from qrhost.tier2 import RawQr, WasmError


@pytest.fixture(scope="module")
def raw(artifacts):
    return RawQr(os.path.join(h.TARGET, "qr", "qr_raw.wasm"))


def cli_png(data):
    return subprocess.run([os.path.join(h.TARGET, "release", "qr-cli")], input=data, capture_output=True,
                          check=True).stdout


def pages(raw):
    return raw.memory.size(raw.store)


def test_the_png_is_the_rust_functions_bytes(raw):
    for text in ["hi", "héllo 日本語 😀", "x" * 512, "€" * 170 + "ab"]:
        assert raw.png(text.encode()) == cli_png(text.encode())


def test_a_short_text_after_a_long_one_gets_nothing_of_it(raw):
    # The input goes into one scratch buffer for the instance's life: the long text's bytes
    # stay in it past the short one's length and must never be read.
    raw.png(("L" * 512).encode())
    assert raw.png(b"hi") == cli_png(b"hi")
    assert h.decode_qr(raw.png(b"hi")) == "hi"


def test_the_result_is_a_copy_that_survives_the_next_call_and_a_memory_grow(raw):
    # The published bindings returned a view into Wasm memory, overwritten by the next call.
    first = raw.png(b"first text")
    kept = bytes(first)
    second = raw.png(b"a different, longer text that lands where the first PNG was")
    assert first == kept and second != first
    raw.memory.grow(raw.store, 4)
    assert first == kept
    assert h.decode_qr(first) == "first text"


def test_the_limit_is_512_utf8_bytes_not_utf16_units(raw):
    euro200 = ("€" * 200).encode()  # 200 UTF-16 units, 600 bytes
    with pytest.raises(WasmError, match="^too_long$"):
        raw.png(euro200)
    with pytest.raises(WasmError, match="^too_long$"):
        raw.png(b"x" * 513)
    assert raw.png(("€" * 170 + "ab").encode()).startswith(b"\x89PNG")


def test_error_codes(raw):
    with pytest.raises(WasmError, match="^empty$"):
        raw.png(b"")
    with pytest.raises(WasmError, match="^encode: input is not valid UTF-8$"):
        raw.png(b"ab\xff")


def test_no_memory_growth_over_2000_calls(raw):
    texts = [b"short", ("m" * 300).encode(), ("€" * 170).encode()]
    for t in texts:  # the allocator's high-water mark for every size
        raw.png(t)
    before = pages(raw)
    for i in range(2000):
        raw.png(texts[i % 3])
    assert pages(raw) == before


# A stand-in module with the raw ABI whose qr_png answers [png_ptr, png_len] as given,
# pointing wherever the test says: the bindings must refuse to read outside the memory.
BROKEN = """
(module
  (memory (export "memory") 1)
  (global $next (mut i32) (i32.const 1024))
  (func (export "qr_alloc") (param $n i32) (result i32)
    (local $p i32)
    (local.set $p (global.get $next))
    (global.set $next (i32.add (global.get $next) (local.get $n)))
    (local.get $p))
  (func (export "qr_free") (param i32 i32))
  (func (export "qr_png") (param $in i32) (param $len i32) (param $out i32) (result i32)
    (i32.store (local.get $out) (i32.const PTR))
    (i32.store offset=4 (local.get $out) (i32.const LEN))
    (i32.const 0)))
"""


def broken(tmp_path, ptr, length):
    path = tmp_path / f"broken-{ptr}-{length}.wasm"
    path.write_bytes(wasmtime.wat2wasm(BROKEN.replace("PTR", str(ptr)).replace("LEN", str(length))))
    return RawQr(str(path))


@pytest.mark.parametrize("ptr,length", [(65_000, 1_000), (0, 16), (100, 0), (16, 5 * 1024 * 1024)])
def test_a_png_pointer_outside_the_memory_is_refused(tmp_path, ptr, length):
    with pytest.raises(WasmError, match="^encode: "):
        broken(tmp_path, ptr, length).png(b"x")


def test_a_module_that_needs_imports_is_refused(tmp_path):
    path = tmp_path / "imports.wasm"
    path.write_bytes(wasmtime.wat2wasm('(module (import "env" "f" (func)) (memory (export "memory") 1))'))
    with pytest.raises(ValueError, match="needs imports"):
        RawQr(str(path))
