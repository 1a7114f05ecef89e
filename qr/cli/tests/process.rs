//! `qr-cli` run as a real process: stdin in, PNG out, exit codes, one-line errors.

use std::io::{Cursor, Write};
use std::process::{Command, Output, Stdio};

fn run(input: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_qr-cli"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn qr-cli");
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    // Write on a thread: a child that exits early must not deadlock the test.
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let out = child.wait_with_output().expect("wait qr-cli");
    writer.join().unwrap();
    out
}

fn decode(png_bytes: &[u8]) -> String {
    let mut reader = png::Decoder::new(Cursor::new(png_bytes))
        .read_info()
        .unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    let w = info.width as usize;
    let mut img =
        rqrr::PreparedImage::prepare_from_greyscale(w, info.height as usize, |x, y| buf[y * w + x]);
    img.detect_grids()[0].decode().unwrap().1
}

fn assert_usage_error(out: &Output, expected: &str) {
    assert_eq!(out.status.code(), Some(2), "exit code");
    assert!(out.stdout.is_empty(), "nothing on stdout");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "one stderr line: {err:?}");
    assert!(
        err.contains(expected),
        "stderr {err:?} should mention {expected}"
    );
}

#[test]
fn stdin_text_becomes_the_qr_core_png() {
    let text = "zażółć gęślą jaźń 🚀 https://example.com/";
    let out = run(text.as_bytes());
    assert!(
        out.status.success(),
        "{:?}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stderr.is_empty());
    assert_eq!(out.stdout, qr_core::png(text).unwrap());
    assert_eq!(decode(&out.stdout), text);
}

#[test]
fn trailing_newline_is_part_of_the_text() {
    // ALL of stdin is the text: nothing is trimmed, so callers control the bytes.
    let out = run(b"hi\n");
    assert_eq!(out.stdout, qr_core::png("hi\n").unwrap());
}

#[test]
fn exactly_512_bytes_is_fine() {
    let text = "🚀".repeat(128);
    let out = run(text.as_bytes());
    assert!(out.status.success());
    assert_eq!(decode(&out.stdout), text);
}

#[test]
fn empty_stdin_exits_2() {
    assert_usage_error(&run(b""), "empty");
}

#[test]
fn too_long_exits_2() {
    assert_usage_error(&run("a".repeat(513).as_bytes()), "too_long");
    // Much more than the limit, split mid-character at the cut: still too long.
    assert_usage_error(&run("ż".repeat(100_000).as_bytes()), "too_long");
}

#[test]
fn invalid_utf8_exits_2() {
    assert_usage_error(&run(&[b'h', 0xff, b'i']), "invalid_utf8");
}
