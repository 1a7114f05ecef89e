//! Tier 2 of the QR ladder: `qr_core::png` compiled to `wasm32-unknown-unknown`, with two
//! ABIs from one crate.
//!
//! * feature `bindgen` (default): `qr_png(text: string): Uint8Array` through
//!   wasm-bindgen; failures throw an `Error` whose message is `empty`, `too_long` or
//!   `encode: …`. `scripts/build-qr.sh` runs `wasm-bindgen --target nodejs` on it.
//! * feature `raw` (`--no-default-features --features raw`): the hand-written ABI
//!   (`memory`, `qr_alloc`, `qr_free`, `qr_png`), no imports, no JS glue. The exact
//!   contract is in [`raw`] and `docs/qr.md`.
//!
//! This crate must NOT keep state between calls (no static output buffer: every PNG is a
//! fresh allocation the caller frees), and must NOT measure lengths in anything but
//! UTF-8 bytes.
//!
//! # Example (host, raw ABI; on wasm32 `usize` is the ABI's `u32`)
//!
//! ```
//! use qr_wasm::raw;
//! let text = b"hi";
//! let input = raw::qr_alloc(text.len());
//! let out = raw::qr_alloc(2 * size_of::<usize>());
//! // SAFETY: `input` holds text.len() writable bytes from qr_alloc.
//! unsafe { std::ptr::copy_nonoverlapping(text.as_ptr(), input as *mut u8, text.len()) };
//! // SAFETY: input/out come from qr_alloc with the lengths given.
//! let rc = unsafe { raw::qr_png(input, text.len(), out) };
//! assert_eq!(rc, raw::OK);
//! // SAFETY: on OK, `out` holds [png_ptr, png_len].
//! let [png_ptr, png_len] = unsafe { std::ptr::read_unaligned(out as *const [usize; 2]) };
//! // SAFETY: png_ptr/png_len were just returned by qr_png.
//! let png = unsafe { std::slice::from_raw_parts(png_ptr as *const u8, png_len) }.to_vec();
//! assert_eq!(png, qr_core::png("hi").unwrap());
//! // SAFETY: each pointer is freed once with its allocation length.
//! unsafe {
//!     raw::qr_free(png_ptr, png_len);
//!     raw::qr_free(out, 2 * size_of::<usize>());
//!     raw::qr_free(input, text.len());
//! }
//! ```

#[cfg(feature = "bindgen")]
mod bindgen;
pub mod raw;

#[cfg(feature = "bindgen")]
pub use bindgen::qr_png;
