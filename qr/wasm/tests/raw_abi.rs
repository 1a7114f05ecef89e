//! The raw ABI exercised on the host exactly as a JS caller drives it on wasm32:
//! alloc input, write bytes, alloc the out slot, call, read [ptr, len], copy, free.
#![allow(unsafe_code)] // calling the raw ABI means raw pointers

use qr_wasm::raw::{EMPTY, ENCODE, INVALID_UTF8, OK, TOO_LONG, qr_alloc, qr_free, qr_png};

const SLOT: usize = 2 * size_of::<usize>();

/// Returns (return code, PNG bytes copied out on OK).
fn call(input: &[u8]) -> (i32, Option<Vec<u8>>) {
    let cap = input.len().max(1);
    let in_ptr = qr_alloc(cap);
    assert_ne!(in_ptr, 0);
    // SAFETY: in_ptr holds cap >= input.len() writable bytes.
    unsafe { std::ptr::copy_nonoverlapping(input.as_ptr(), in_ptr as *mut u8, input.len()) };
    let out = qr_alloc(SLOT);
    assert_ne!(out, 0);
    // SAFETY: both regions come from qr_alloc with these sizes.
    let rc = unsafe { qr_png(in_ptr, input.len(), out) };
    let png = (rc == OK).then(|| {
        // SAFETY: on OK qr_png wrote [ptr, len] at out.
        let [ptr, len] = unsafe { std::ptr::read_unaligned(out as *const [usize; 2]) };
        let [ptr, len] = [usize::from_le(ptr), usize::from_le(len)];
        // SAFETY: ptr/len describe the PNG qr_png handed out.
        let bytes = unsafe { std::slice::from_raw_parts(ptr as *const u8, len) }.to_vec();
        // SAFETY: freed once, with its length.
        unsafe { qr_free(ptr, len) };
        bytes
    });
    // SAFETY: freed once each, with their allocation lengths.
    unsafe {
        qr_free(out, SLOT);
        qr_free(in_ptr, cap);
    }
    (rc, png)
}

#[test]
fn ok_returns_the_same_bytes_as_qr_core() {
    for text in ["hi", "zażółć gęślą jaźń 🚀", &"x".repeat(512)] {
        let (rc, png) = call(text.as_bytes());
        assert_eq!(rc, OK);
        assert_eq!(png.unwrap(), qr_core::png(text).unwrap(), "{text:?}");
    }
}

#[test]
fn error_codes() {
    assert_eq!(call(b"").0, EMPTY);
    assert_eq!(call("a".repeat(513).as_bytes()).0, TOO_LONG);
    // 128 rockets = 512 bytes (256 UTF-16 units): fine; one more byte is too long.
    assert_eq!(call("🚀".repeat(128).as_bytes()).0, OK);
    assert_eq!(
        call(format!("{}a", "🚀".repeat(128)).as_bytes()).0,
        TOO_LONG
    );
    assert_eq!(call(&[0x68, 0xff, 0x69]).0, INVALID_UTF8);
    assert_eq!(
        call(&[0xf0, 0x9f, 0x9a]).0,
        INVALID_UTF8,
        "truncated 4-byte char"
    );
}

#[test]
fn null_out_slot_is_an_encode_error_not_a_crash() {
    let in_ptr = qr_alloc(2);
    // SAFETY: two writable bytes at in_ptr.
    unsafe { std::ptr::copy_nonoverlapping(b"hi".as_ptr(), in_ptr as *mut u8, 2) };
    // SAFETY: in_ptr is valid; out = 0 is checked by qr_png.
    assert_eq!(unsafe { qr_png(in_ptr, 2, 0) }, ENCODE);
    // SAFETY: freed once.
    unsafe { qr_free(in_ptr, 2) };
}

#[test]
fn alloc_edge_cases() {
    assert_eq!(qr_alloc(0), 0);
    assert_eq!(
        qr_alloc(usize::MAX),
        0,
        "impossible layout is 0, not a panic"
    );
    // SAFETY: null/zero frees are documented no-ops.
    unsafe {
        qr_free(0, 10);
        qr_free(0, 0);
    }
}

#[test]
fn consecutive_outputs_are_independent_buffers() {
    // The published bindings reused one static buffer: the first result changed under
    // the caller's feet. Keep the first PNG's pointer alive while making a second.
    let a = "first text";
    let b = "second, longer text that needs other modules";
    let slot_a = qr_alloc(SLOT);
    let slot_b = qr_alloc(SLOT);
    let in_a = qr_alloc(a.len());
    let in_b = qr_alloc(b.len());
    // SAFETY: each region was allocated with the length written.
    unsafe {
        std::ptr::copy_nonoverlapping(a.as_ptr(), in_a as *mut u8, a.len());
        std::ptr::copy_nonoverlapping(b.as_ptr(), in_b as *mut u8, b.len());
        assert_eq!(qr_png(in_a, a.len(), slot_a), OK);
        assert_eq!(qr_png(in_b, b.len(), slot_b), OK);
        let [pa, la] = std::ptr::read_unaligned(slot_a as *const [usize; 2]);
        let [pb, lb] = std::ptr::read_unaligned(slot_b as *const [usize; 2]);
        assert_ne!(pa, pb);
        assert_eq!(
            std::slice::from_raw_parts(pa as *const u8, la),
            qr_core::png(a).unwrap()
        );
        assert_eq!(
            std::slice::from_raw_parts(pb as *const u8, lb),
            qr_core::png(b).unwrap()
        );
        for (p, l) in [
            (pa, la),
            (pb, lb),
            (slot_a, SLOT),
            (slot_b, SLOT),
            (in_a, a.len()),
            (in_b, b.len()),
        ] {
            qr_free(p, l);
        }
    }
}
