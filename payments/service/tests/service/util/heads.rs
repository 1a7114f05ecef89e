//! The table of request heads that both payments services are tested against
//! (`payments/testdata/request-heads.txt`, SPEC "Request heads"). Used by the unit tests of
//! `src/head.rs` and by the cross-service test; the Go service reads the same file.

// Each user takes a different subset.
#![allow(dead_code, unreachable_pub)]

/// The error codes of the head check: a passed head never gets one of these.
pub const CODES: [&str; 6] = [
    "invalid_request",
    "invalid_target",
    "length_required",
    "target_too_long",
    "expectation_failed",
    "headers_too_large",
];

const TABLE: &str = include_str!("../../../../testdata/request-heads.txt");

/// One line of the table.
#[derive(Debug, Clone)]
pub struct HeadCase {
    /// Line number in the file.
    pub line: usize,
    /// `(status, code)` of the JSON error; `None`: the head is passed on.
    pub expect: Option<(u16, String)>,
    /// The request bytes.
    pub raw: Vec<u8>,
}

/// The table, with `{id}` standing for `id`.
pub fn request_heads(id: &str) -> Vec<HeadCase> {
    let cases: Vec<HeadCase> = TABLE
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|(n, l)| {
            let (expect, raw) = l.split_once(" | ").expect("EXPECT | REQUEST");
            let expect = (expect != "pass").then(|| {
                let (status, code) = expect.split_once(' ').expect("STATUS code");
                (status.parse().expect("status"), code.to_string())
            });
            HeadCase {
                line: n + 1,
                expect,
                raw: decode(raw, id),
            }
        })
        .collect();
    assert!(cases.len() > 100, "the table has {} cases", cases.len());
    cases
}

/// `\r \n \t \\ \xHH`, `{id}`, `{N*TEXT}` (see the table's header).
fn decode(text: &str, id: &str) -> Vec<u8> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\\' => {
                let (byte, len) = match b[i + 1] {
                    b'r' => (b'\r', 2),
                    b'n' => (b'\n', 2),
                    b't' => (b'\t', 2),
                    b'\\' => (b'\\', 2),
                    b'x' => (
                        u8::from_str_radix(&text[i + 2..i + 4], 16).expect("\\xHH"),
                        4,
                    ),
                    other => panic!("unknown escape \\{}", other as char),
                };
                out.push(byte);
                i += len;
            }
            b'{' => {
                let close = i + text[i..].find('}').expect("closing brace");
                let inner = &text[i + 1..close];
                if inner == "id" {
                    out.extend_from_slice(id.as_bytes());
                } else {
                    let (n, what) = inner.split_once('*').expect("{N*TEXT}");
                    let what = decode(what, id);
                    for _ in 0..n.parse::<usize>().expect("N") {
                        out.extend_from_slice(&what);
                    }
                }
                i = close + 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}
