//! `qr-cli`: tier 1 of the QR ladder. Reads ALL of stdin as UTF-8 text, writes
//! `qr_core::png(text)` to stdout, exits 0.
//!
//! Bad input (invalid UTF-8, empty, more than 512 bytes) prints one line on stderr and
//! exits 2; an I/O failure exits 1 (a closed stdout exits quietly).
//!
//! It is spawned once per request, so it must NOT pay for anything at start-up: no
//! async runtime, no logging setup, no argument parser, no config files.

use std::io::{self, Read, Write};
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut input = Vec::with_capacity(qr_core::MAX_TEXT_BYTES + 1);
    // Read one byte more than allowed at most: a huge stdin is rejected without buffering it.
    let limit = (qr_core::MAX_TEXT_BYTES + 1) as u64;
    if let Err(e) = io::stdin().lock().take(limit).read_to_end(&mut input) {
        return fail(1, &format!("reading stdin: {e}"));
    }
    let text = match std::str::from_utf8(&input) {
        Ok(text) => text,
        // A cut at the limit may split a character: that input is too long anyway.
        Err(_) if input.len() > qr_core::MAX_TEXT_BYTES => return fail(2, "too_long"),
        Err(_) => return fail(2, "invalid_utf8"),
    };
    let png = match qr_core::png(text) {
        Ok(png) => png,
        Err(e) => return fail(2, &e.to_string()),
    };
    let mut out = io::stdout().lock();
    match out.write_all(&png).and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => fail(1, &format!("writing stdout: {e}")),
    }
}

fn fail(code: u8, message: &str) -> ExitCode {
    // One line, prefixed so it is recognisable in a parent's logs.
    let _ = writeln!(io::stderr(), "qr-cli: {message}");
    ExitCode::from(code)
}
