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
would cost a compile-cache lookup and a fresh 1+ MiB memory each time). Every pointer the
module hands back is checked against the memory's current size before it is read, and
everything allocated for a call is freed in a ``finally``: nothing outlives a request.
Calls run on the event loop's thread only (a wasmtime Store is not thread-safe).
"""

import struct

import wasmtime

RAW_ERRORS = {
    1: "empty",
    2: "too_long",
    3: "encode: input is not valid UTF-8",
    4: "encode: the QR encoder failed",
}
REQUIRED_EXPORTS = ("memory", "qr_alloc", "qr_free", "qr_png")
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
        self._alloc = exports["qr_alloc"]
        self._free = exports["qr_free"]
        self._png = exports["qr_png"]

    def _span(self, ptr, length, what):
        """Checks that [ptr, ptr+length) lies inside the memory as it is now."""
        if ptr == 0 or ptr + length > self.memory.data_len(self.store):
            raise WasmError(f"encode: {what} [{ptr}, +{length}) lies outside the module's memory")

    def _alloc_checked(self, length):
        ptr = self._alloc(self.store, length)
        if ptr == 0:
            raise WasmError(f"encode: qr_alloc({length}) failed")
        self._span(ptr, length, f"qr_alloc({length})")
        return ptr

    def png(self, data):
        """UTF-8 `data` → PNG bytes the caller owns. Raises WasmError."""
        store = self.store
        n = len(data)
        # qr_alloc(0) would mean failure: allocate one byte, pass the true length.
        cap = max(n, 1)
        in_ptr = self._alloc_checked(cap)
        slot = 0
        try:
            self.memory.write(store, data, in_ptr)
            slot = self._alloc_checked(8)
            rc = self._png(store, in_ptr, n, slot)
            if rc != 0:
                raise WasmError(RAW_ERRORS.get(rc, f"encode: qr_png returned {rc}"))
            # Read through the memory as it is after the call (it may have grown).
            out_ptr, out_len = struct.unpack("<II", self.memory.read(store, slot, slot + 8))
            if out_len == 0 or out_len > MAX_PNG_BYTES:
                raise WasmError(f"encode: qr_png answered a PNG of {out_len} bytes")
            self._span(out_ptr, out_len, "the PNG")
            try:
                # Memory.read copies into a new bytearray; bytes() owns it for the response.
                return bytes(self.memory.read(store, out_ptr, out_ptr + out_len))
            finally:
                self._free(store, out_ptr, out_len)
        finally:
            if slot:
                self._free(store, slot, 8)
            self._free(store, in_ptr, cap)

    def render(self, data):
        return self.png(data)

    def close(self):
        pass
