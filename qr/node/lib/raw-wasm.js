'use strict';
// Tier 2-raw: hand-written bindings for qr_raw.wasm (no wasm-bindgen).
//
// ABI (see docs/qr.md): exports `memory`, `qr_alloc(len) -> ptr` (0 on failure),
// `qr_free(ptr, len)`, `qr_png(in_ptr, in_len, out) -> i32` where `out` points at 8
// bytes that receive two little-endian u32s [png_ptr, png_len] on success.
// Return codes: 0 ok, 1 empty, 2 too long, 3 invalid UTF-8, 4 encode failure.
//
// Two bugs of the published bindings are avoided on purpose:
// - the PNG is COPIED out of wasm memory before anything else runs; a view into
//   `memory.buffer` would be overwritten by the next call (and detached when memory grows);
// - the length limit is the Rust function's, in UTF-8 bytes; JS never counts UTF-16 units.

const fs = require('node:fs');

const RAW_ERRORS = {
  1: 'empty',
  2: 'too_long',
  3: 'encode: input is not valid UTF-8',
  4: 'encode: the QR encoder failed',
};

/** Loads and instantiates the module synchronously (at server start, not per request). */
function loadRawQr(wasmPath) {
  const module = new WebAssembly.Module(fs.readFileSync(wasmPath));
  const imports = WebAssembly.Module.imports(module);
  if (imports.length > 0) {
    const names = imports.map((i) => `${i.module}.${i.name}`).join(', ');
    throw new Error(`${wasmPath} needs imports the raw ABI does not provide: ${names}`);
  }
  const { exports } = new WebAssembly.Instance(module, {});
  for (const name of ['memory', 'qr_alloc', 'qr_free', 'qr_png']) {
    if (!(name in exports)) throw new Error(`${wasmPath} does not export ${name}`);
  }
  return bindRawQr(exports);
}

function bindRawQr({ memory, qr_alloc: alloc, qr_free: free, qr_png: png }) {
  const encoder = new TextEncoder();

  function allocOrThrow(len) {
    const ptr = alloc(len) >>> 0;
    if (ptr === 0) throw new Error(`encode: qr_alloc(${len}) failed`);
    return ptr;
  }

  /** text -> PNG bytes in a fresh Buffer that the caller owns. Throws Error(`empty`|`too_long`|`encode: ...`). */
  function qrPng(text) {
    const inLen = Buffer.byteLength(text, 'utf8');
    // qr_alloc(0) would be ambiguous with failure; allocate one byte, pass the true length.
    const inCap = Math.max(inLen, 1);
    const inPtr = allocOrThrow(inCap);
    let outSlot = 0;
    try {
      // Encode straight into wasm memory: one copy instead of two. The view is taken
      // after qr_alloc because an allocation may have grown (and detached) the buffer.
      const written = encoder.encodeInto(text, new Uint8Array(memory.buffer, inPtr, inLen)).written;
      if (written !== inLen) throw new Error('encode: UTF-8 length mismatch');
      outSlot = allocOrThrow(8);
      const rc = png(inPtr, inLen, outSlot);
      if (rc !== 0) throw new Error(RAW_ERRORS[rc] || `encode: qr_png returned ${rc}`);
      // Re-read memory.buffer: qr_png may have grown memory.
      const view = new DataView(memory.buffer);
      const outPtr = view.getUint32(outSlot, true);
      const outLen = view.getUint32(outSlot + 4, true);
      // Buffer.from(Uint8Array) copies; the wasm bytes are freed right after.
      const copy = Buffer.from(new Uint8Array(memory.buffer, outPtr, outLen));
      free(outPtr, outLen);
      return copy;
    } finally {
      if (outSlot !== 0) free(outSlot, 8);
      free(inPtr, inCap);
    }
  }

  return { qrPng, memory };
}

module.exports = { loadRawQr, bindRawQr, RAW_ERRORS };
