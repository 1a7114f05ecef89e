//! The hand-written raw ABI (tier 2-raw). On wasm32 every `usize` here is the ABI's `u32`.
//!
//! * `qr_alloc(len) -> ptr`: `len` fresh bytes, 0 on failure or when `len` is 0.
//! * `qr_free(ptr, len)`: frees what `qr_alloc` or `qr_png` handed out, with the same
//!   length; `ptr == 0` or `len == 0` does nothing.
//! * `qr_png(in_ptr, in_len, out) -> i32`: reads `in_len` UTF-8 bytes at `in_ptr`; on
//!   success writes `[png_ptr, png_len]` (little-endian u32s on wasm32) at `out` (8 bytes
//!   from `qr_alloc(8)`) and returns [`OK`]; the caller copies the PNG out and calls
//!   `qr_free(png_ptr, png_len)`. Errors: [`EMPTY`], [`TOO_LONG`] (more than 512 UTF-8
//!   bytes), [`INVALID_UTF8`], [`ENCODE`]; nothing is allocated for the caller then.
//!
//! Nothing is shared between calls. Any call may grow the memory, which detaches old
//! `ArrayBuffer`s: JS callers must re-read `memory.buffer` after every call.
#![allow(unsafe_code)] // the raw ABI is pointers by definition; each use has a SAFETY note

use std::alloc::{Layout, alloc, dealloc};

/// Success.
pub const OK: i32 = 0;
/// The text is empty.
pub const EMPTY: i32 = 1;
/// The text is longer than 512 UTF-8 bytes.
pub const TOO_LONG: i32 = 2;
/// The bytes are not valid UTF-8.
pub const INVALID_UTF8: i32 = 3;
/// The encoder failed, or `out` was 0.
pub const ENCODE: i32 = 4;

/// Allocates `len` bytes for the caller; 0 on failure or for `len == 0`.
#[cfg_attr(all(target_arch = "wasm32", feature = "raw"), unsafe(no_mangle))]
pub extern "C" fn qr_alloc(len: usize) -> usize {
    let Ok(layout) = Layout::from_size_align(len, 1) else {
        return 0;
    };
    if len == 0 {
        return 0;
    }
    // SAFETY: the layout has a non-zero size.
    unsafe { alloc(layout) as usize }
}

/// Frees `len` bytes at `ptr` handed out by [`qr_alloc`] or [`qr_png`].
///
/// # Safety
/// `ptr` must come from `qr_alloc(len)` or be a `png_ptr` with its `png_len`, and must
/// not be freed twice.
#[cfg_attr(all(target_arch = "wasm32", feature = "raw"), unsafe(no_mangle))]
pub unsafe extern "C" fn qr_free(ptr: usize, len: usize) {
    if ptr == 0 || len == 0 {
        return;
    }
    let Ok(layout) = Layout::from_size_align(len, 1) else {
        return;
    };
    // SAFETY: the caller guarantees ptr was allocated with exactly this layout.
    unsafe { dealloc(ptr as *mut u8, layout) }
}

/// Renders the UTF-8 text at `in_ptr..in_ptr+in_len` and hands the PNG to the caller.
///
/// # Safety
/// `in_ptr` must point at `in_len` readable bytes (any pointer if `in_len == 0`), and
/// `out` at `2 * size_of::<usize>()` writable bytes (8 on wasm32), or be 0.
#[cfg_attr(all(target_arch = "wasm32", feature = "raw"), unsafe(no_mangle))]
pub unsafe extern "C" fn qr_png(in_ptr: usize, in_len: usize, out: usize) -> i32 {
    if in_len == 0 {
        return EMPTY;
    }
    // Bytes, checked before anything else: the published bindings counted UTF-16 units.
    if in_len > qr_core::MAX_TEXT_BYTES {
        return TOO_LONG;
    }
    if in_ptr == 0 || out == 0 {
        return ENCODE;
    }
    // SAFETY: the caller guarantees in_len readable bytes at in_ptr (non-null, checked).
    let input = unsafe { std::slice::from_raw_parts(in_ptr as *const u8, in_len) };
    let Ok(text) = std::str::from_utf8(input) else {
        return INVALID_UTF8;
    };
    let png = match qr_core::png(text) {
        Ok(png) => png.into_boxed_slice(),
        Err(qr_core::QrError::Empty) => return EMPTY,
        Err(qr_core::QrError::TooLong { .. }) => return TOO_LONG,
        Err(qr_core::QrError::Encode(_)) => return ENCODE,
    };
    let len = png.len();
    // A boxed [u8] of len > 0 was allocated with Layout(len, 1): qr_free(ptr, len) matches.
    let ptr = Box::into_raw(png) as *mut u8 as usize;
    // SAFETY: the caller guarantees two writable usizes at out (non-null, checked);
    // unaligned writes because qr_alloc gives byte alignment.
    unsafe {
        std::ptr::write_unaligned(out as *mut usize, ptr.to_le());
        std::ptr::write_unaligned((out as *mut usize).add(1), len.to_le());
    }
    OK
}
