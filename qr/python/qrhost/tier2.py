"""Tier 2: the Rust function compiled to Wasm (``qr_raw.wasm``, the raw ABI qr/wasm exposes
for Node's 2-raw), run by wasmtime's Python package, with hand-written bindings.

ABI (docs/qr.md, "Tier 2-raw"): exports ``memory``, ``qr_alloc(len) -> ptr`` (0 on
failure), ``qr_free(ptr, len)``, ``qr_png(in_ptr, in_len, out) -> i32`` writing two
little-endian u32 ``[png_ptr, png_len]`` at ``out`` on success. Codes: 0 ok, 1 empty,
2 too long, 3 invalid UTF-8, 4 encode failure.

The published bindings' two bugs are avoided on purpose, and tested
(tests/test_wasm_bindings.py):
- the PNG is COPIED out of Wasm memory (``Memory.read`` returns a fresh bytearray, made
  ``bytes``) before anything else runs; a view into the memory would be overwritten by the
  next call, and a ``memory.grow`` moves it;
- the limit is the Rust function's, in UTF-8 bytes: the host hands this tier the bytes.

One instance is made at start-up and reused by every request (instantiating per request
would cost a compile-cache lookup and a fresh 1+ MiB memory each time), with one scratch
buffer of its memory for the input text and the out slot, allocated once: a call from
Python into wasmtime costs several µs, so a render makes two (``qr_png``, ``qr_free``)
rather than the six of the allocate-per-call sequence. Every pointer the module hands back
is checked against the memory's current size before it is read, and the PNG the module
allocated is freed in a ``finally``: nothing outlives a request.
Calls run on the event loop's thread only (a wasmtime Store is not thread-safe).
"""

import ctypes
import struct

import wasmtime
from wasmtime import _ffi as ffi  # the package's own ctypes declarations of wasmtime's C API

_I32 = wasmtime.ValType.i32()


class _Export:
    """One export of i32 parameters and at most one i32 result, called through
    ``wasmtime_func_call_unchecked`` with an argument buffer made once.

    wasmtime's ``Func.__call__`` asks the function for its type, converts and unroots every
    argument and builds the results, on every call: ~10-20 µs here, as much as a short
    render. The signature is checked once, here; each call then sets the buffer's i32s and
    makes one C call (wasmtime 50's C API; the package is pinned in requirements.txt).
    """

    def __init__(self, store, func, name, params, results):
        ty = func.type(store)
        if [str(t) for t in ty.params] != ["i32"] * params or [str(t) for t in ty.results] != ["i32"] * results:
            raise ValueError(f"{name} has the type {ty.params} -> {ty.results}, not the raw ABI's")
        self._store = store
        self._func = func  # keeps the function (and its pointer below) alive
        self._func_ptr = ctypes.byref(func._func)
        self._buf = (ffi.wasmtime_val_raw_t * max(params, results, 1))()
        self._params = params
        self._trap = ctypes.POINTER(ffi.wasm_trap_t)()

    def __call__(self, *args):
        buf = self._buf
        for i, a in enumerate(args):
            buf[i].i32 = a  # ctypes stores the low 32 bits: an address >= 2**31 wraps as wasm does
        trap = self._trap
        error = ffi.wasmtime_func_call_unchecked(self._store._context(), self._func_ptr, buf, len(buf),
                                                 ctypes.byref(trap))
        if error:
            raise wasmtime.WasmtimeError._from_ptr(error)
        if trap:
            self._trap = ctypes.POINTER(ffi.wasm_trap_t)()
            raise wasmtime.Trap._from_ptr(trap)
        return buf[0].i32 & 0xFFFFFFFF

RAW_ERRORS = {
    1: "empty",
    2: "too_long",
    3: "encode: input is not valid UTF-8",
    4: "encode: the QR encoder failed",
}
REQUIRED_EXPORTS = ("memory", "qr_alloc", "qr_free", "qr_png")
#: The longest text, in UTF-8 bytes (qr_core::MAX_TEXT_BYTES); the scratch buffer's size.
SCRATCH_TEXT_BYTES = 512
#: An answer larger than this is a broken module, not a QR code.
MAX_PNG_BYTES = 4 * 1024 * 1024


class WasmError(Exception):
    """A binding failure; its message follows the bindings' codes (`empty`, `too_long`,
    `encode: …`)."""


class RawQr:
    """qr_raw.wasm, instantiated once; ``png(data)`` per call."""

    name = "tier 2 (Rust -> Wasm under wasmtime, hand-written bindings)"
    is_async = False

    def __init__(self, wasm_path):
        self.engine = wasmtime.Engine()
        self.module = wasmtime.Module.from_file(self.engine, wasm_path)
        imports = [f"{i.module}.{i.name}" for i in self.module.imports]
        if imports:
            raise ValueError(f"{wasm_path} needs imports the raw ABI does not provide: {', '.join(imports)}")
        self.store = wasmtime.Store(self.engine)
        exports = wasmtime.Instance(self.store, self.module, []).exports(self.store)
        for name in REQUIRED_EXPORTS:
            if name not in exports:
                raise ValueError(f"{wasm_path} does not export {name}")
        self.memory = exports["memory"]
        self._alloc = _Export(self.store, exports["qr_alloc"], "qr_alloc", 1, 1)
        self._free = _Export(self.store, exports["qr_free"], "qr_free", 2, 0)
        self._png = _Export(self.store, exports["qr_png"], "qr_png", 3, 1)
        # Input (up to 512 bytes) then the 8-byte out slot, allocated once for the
        # instance's life (qr_alloc gives byte alignment; qr_png writes the slot unaligned).
        self._scratch = self._alloc_checked(SCRATCH_TEXT_BYTES + 8)
        self._slot = self._scratch + SCRATCH_TEXT_BYTES

    def _span(self, ptr, length, what):
        """Checks that [ptr, ptr+length) lies inside the memory as it is now."""
        if ptr == 0 or ptr + length > self.memory.data_len(self.store):
            raise WasmError(f"encode: {what} [{ptr}, +{length}) lies outside the module's memory")

    def _alloc_checked(self, length):
        ptr = self._alloc(length)
        if ptr == 0:
            raise WasmError(f"encode: qr_alloc({length}) failed")
        self._span(ptr, length, f"qr_alloc({length})")
        return ptr

    def png(self, data):
        """UTF-8 `data` → PNG bytes the caller owns. Raises WasmError."""
        store = self.store
        n = len(data)
        if n > SCRATCH_TEXT_BYTES:
            # The Rust function's own limit, in bytes, checked here too: the scratch buffer
            # holds no more (the host has refused such a text already: a second line).
            raise WasmError("too_long")
        # The input and the out slot live in the scratch buffer allocated at start-up:
        # two calls into the module per render instead of six (each wasmtime call from
        # Python costs several µs). The buffer is the host's, rewritten every call; the
        # PNG is still a fresh allocation of the module's, copied out and freed.
        self.memory.write(store, data, self._scratch)
        rc = self._png(self._scratch, n, self._slot)
        if rc != 0:
            raise WasmError(RAW_ERRORS.get(rc, f"encode: qr_png returned {rc}"))
        # Read through the memory as it is after the call (it may have grown).
        out_ptr, out_len = struct.unpack("<II", self.memory.read(store, self._slot, self._slot + 8))
        if out_len == 0 or out_len > MAX_PNG_BYTES:
            raise WasmError(f"encode: qr_png answered a PNG of {out_len} bytes")
        self._span(out_ptr, out_len, "the PNG")
        try:
            # Memory.read copies into a new bytearray; bytes() owns it for the response.
            return bytes(self.memory.read(store, out_ptr, out_ptr + out_len))
        finally:
            self._free(out_ptr, out_len)

    def render(self, data):
        return self.png(data)

    def close(self):
        pass
