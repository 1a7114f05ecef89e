//! nginx and Apache access logs: common, combined, and either with more fields after them
//! (nginx's `$request_time`, `$upstream_response_time`, …).
//!
//! ```text
//! 127.0.0.1 - frank [10/Oct/2000:13:55:36 -0700] "GET /a.gif HTTP/1.0" 200 2326 "http://x/" "curl/8" 0.004
//! └─ ignored ────┘  └─ time ─────────────────┘  └─ request ─────────┘ └status┘ └ referer ┘ └ UA ──┘ └ ignored
//! ```
//!
//! A line is parsed in place with `memchr`; nothing is allocated unless the request target
//! holds an escape. Timestamps have whole seconds, so the requests of one second are spread
//! evenly over it: the `j`-th of `m` lines stamped with second `s` is at `s + j/m`. `m` is
//! found by a second cursor that reads ahead to the end of the run of equal stamps, so
//! memory stays constant however many requests a second holds.

use std::borrow::Cow;
use std::io;
use std::ops::Range;
use std::sync::Arc;

use http::{HeaderName, Method};

use super::read::{Line, PosReader, ReadAt};
use super::time::parse_clf;
use super::{Event, Format, SkipReason};
use crate::set::RenderedRequest;
use crate::template::is_request_target_char;

/// Lines longer than this are malformed (nginx's default request line limit is 8 KiB).
pub(crate) const MAX_LINE: usize = 64 << 10;

#[derive(Debug)]
pub(crate) struct AccessLog {
    reader: PosReader,
    /// Reads ahead to count a run of equal timestamps.
    look: PosReader,
    line: Vec<u8>,
    look_line: Vec<u8>,
    scratch: Vec<u8>,
    line_no: u64,
    run_text: Vec<u8>,
    run_secs: Option<i64>,
    run_len: u64,
    run_pos: u64,
    /// The current record's referer and user agent (escaped), ranges into `line`.
    referer: Option<Range<usize>>,
    agent: Option<Range<usize>>,
}

/// The fields of a line, as ranges into it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Fields {
    pub(crate) method: Range<usize>,
    pub(crate) target: Range<usize>,
    pub(crate) referer: Option<Range<usize>>,
    pub(crate) agent: Option<Range<usize>>,
}

type Bad = (SkipReason, &'static str);

const MALFORMED: SkipReason = SkipReason::Malformed;

impl AccessLog {
    pub(crate) fn new(src: Arc<dyn ReadAt>, end: u64) -> AccessLog {
        AccessLog {
            reader: PosReader::new(src.clone(), end),
            look: PosReader::new(src, end),
            line: Vec::new(),
            look_line: Vec::new(),
            scratch: Vec::new(),
            line_no: 0,
            run_text: Vec::new(),
            run_secs: None,
            run_len: 0,
            run_pos: 0,
            referer: None,
            agent: None,
        }
    }

    /// Counts the lines from the current one on that carry the same timestamp text, lines
    /// without one (blank, broken) not ending the run.
    fn run_length(&mut self) -> io::Result<u64> {
        self.look.seek(self.reader.offset());
        let mut count = 1;
        loop {
            match self.look.read_line(&mut self.look_line, MAX_LINE)? {
                Line::Eof => return Ok(count),
                Line::Full | Line::TooLong => {}
            }
            match time_text(&self.look_line) {
                None => {}
                Some(r) if self.look_line[r.clone()] == self.run_text[..] => count += 1,
                Some(_) => return Ok(count),
            }
        }
    }

    /// The spread time of the current line, or `None` when it has no usable timestamp.
    fn time_of_line(&mut self) -> io::Result<Option<i64>> {
        let Some(range) = time_text(&self.line) else {
            return Ok(None);
        };
        if self.line[range.clone()] != self.run_text[..] || self.run_len == 0 {
            self.run_text.clear();
            self.run_text.extend_from_slice(&self.line[range.clone()]);
            self.run_secs = parse_clf(&self.run_text);
            self.run_pos = 0;
            self.run_len = self.run_length()?;
        }
        let pos = self.run_pos;
        self.run_pos += 1;
        Ok(self.run_secs.map(|secs| {
            let frac = (u128::from(pos) * 1_000_000_000 / u128::from(self.run_len.max(1))) as i64;
            secs.saturating_mul(1_000_000_000).saturating_add(frac)
        }))
    }
}

impl Format for AccessLog {
    fn next(&mut self, out: &mut RenderedRequest) -> io::Result<Event> {
        let kind = self
            .reader
            .read_record_line(&mut self.line, MAX_LINE, &mut self.line_no)?;
        if kind == Line::Eof {
            return Ok(Event::Eof);
        }
        let line = self.line_no;
        let time = self.time_of_line()?;
        let bad = |(reason, message): Bad| Event::Skip {
            line,
            reason,
            message: Cow::Borrowed(message),
        };
        if kind == Line::TooLong {
            return Ok(bad((MALFORMED, "line longer than 64 KiB")));
        }
        let fields = match parse_line(&self.line) {
            Ok(f) => f,
            Err(e) => return Ok(bad(e)),
        };
        let Some(time_ns) = time else {
            return Ok(bad((
                MALFORMED,
                "the [time] field is not dd/Mon/yyyy:hh:mm:ss +zzzz",
            )));
        };
        let Ok(method) = Method::from_bytes(&self.line[fields.method.clone()]) else {
            return Ok(bad((MALFORMED, "invalid method")));
        };
        if method == Method::CONNECT {
            return Ok(bad((SkipReason::NotReplayable, "CONNECT is not replayed")));
        }
        out.reset();
        if let Err(e) = normalize_target(
            &self.line[fields.target.clone()],
            &mut self.scratch,
            &mut out.path_and_query,
        ) {
            return Ok(bad(e));
        }
        out.method = method;
        self.referer = fields.referer;
        self.agent = fields.agent;
        Ok(Event::Record { line, time_ns })
    }

    fn complete(&mut self, out: &mut RenderedRequest) {
        let fields = [
            (http::header::REFERER, self.referer.clone()),
            (http::header::USER_AGENT, self.agent.clone()),
        ];
        // Unescaping only shortens a value: the raw lengths bound the arena needed.
        out.reserve_values(
            fields
                .iter()
                .filter_map(|(_, r)| r.as_ref())
                .map(|r| r.len())
                .sum(),
        );
        for (name, range) in fields {
            let Some(range) = range else { continue };
            let raw = &self.line[range];
            if raw == b"-" || raw.is_empty() {
                continue;
            }
            // A value that is not a valid header value once unescaped is left out.
            let value = if memchr::memchr(b'\\', raw).is_some() {
                self.scratch.clear();
                unescape(raw, &mut self.scratch);
                out.arena_value(&self.scratch)
            } else {
                out.arena_value(raw)
            };
            if let Some(value) = value {
                out.headers.push((HeaderName::clone(&name), value));
            }
        }
    }

    fn rewind(&mut self) {
        self.reader.seek(0);
        self.line_no = 0;
        self.run_text.clear();
        self.run_len = 0;
        self.run_pos = 0;
    }
}

/// The range of the text between the first `[` and the next `]`.
pub(crate) fn time_text(line: &[u8]) -> Option<Range<usize>> {
    let open = memchr::memchr(b'[', line)?;
    let close = open + 1 + memchr::memchr(b']', &line[open + 1..])?;
    Some(open + 1..close)
}

/// The end of a quoted field starting after the `"` at `start - 1`: the index of the first
/// `"` not escaped by an odd number of backslashes.
fn quote_end(line: &[u8], start: usize) -> Option<usize> {
    let mut from = start;
    loop {
        let q = from + memchr::memchr(b'"', line.get(from..)?)?;
        let slashes = line[start..q]
            .iter()
            .rev()
            .take_while(|&&b| b == b'\\')
            .count();
        if slashes % 2 == 0 {
            return Some(q);
        }
        from = q + 1;
    }
}

fn skip_spaces(line: &[u8], mut at: usize) -> usize {
    while line.get(at) == Some(&b' ') {
        at += 1;
    }
    at
}

/// Splits a line into its fields, or says why it is not a request.
pub(crate) fn parse_line(line: &[u8]) -> Result<Fields, Bad> {
    let time = time_text(line).ok_or((MALFORMED, "no [time] field"))?;
    if time.start < 2 {
        return Err((MALFORMED, "no client address before the [time] field"));
    }
    let mut at = skip_spaces(line, time.end + 1);
    if line.get(at) != Some(&b'"') {
        return Err((MALFORMED, "no quoted request after the [time] field"));
    }
    let start = at + 1;
    let end = quote_end(line, start).ok_or((MALFORMED, "the quoted request is not closed"))?;
    let request = &line[start..end];
    if request == b"-" || request.is_empty() {
        return Err((SkipReason::NotReplayable, "no request line (\"-\")"));
    }
    let first = memchr::memchr(b' ', request);
    let last = memchr::memrchr(b' ', request);
    let (Some(first), Some(last)) = (first, last) else {
        return Err((MALFORMED, "the request is not 'METHOD target HTTP/x.y'"));
    };
    if first == last || !request[last + 1..].starts_with(b"HTTP/") {
        return Err((MALFORMED, "the request is not 'METHOD target HTTP/x.y'"));
    }
    let target = start + first + 1..start + last;
    if line[target.clone()].contains(&b' ') || target.is_empty() {
        return Err((MALFORMED, "the request target holds a space"));
    }
    let method = start..start + first;

    at = skip_spaces(line, end + 1);
    let status_end = at + line[at..].iter().take_while(|b| b.is_ascii_digit()).count();
    if status_end - at != 3 {
        return Err((MALFORMED, "no 3-digit status after the request"));
    }
    at = skip_spaces(line, status_end);
    let size_end = at + line[at..].iter().take_while(|b| b.is_ascii_digit()).count();
    let size_end = if size_end == at && line.get(at) == Some(&b'-') {
        at + 1
    } else {
        size_end
    };
    if size_end == at || !matches!(line.get(size_end), None | Some(b' ' | b'\t')) {
        return Err((MALFORMED, "no byte count after the status"));
    }

    // Combined adds "referer" "user agent"; anything after them is ignored.
    let mut quoted = [None, None];
    at = size_end;
    for slot in &mut quoted {
        at = skip_spaces(line, at);
        if line.get(at) != Some(&b'"') {
            break;
        }
        let end = quote_end(line, at + 1).ok_or((MALFORMED, "a quoted field is not closed"))?;
        *slot = Some(at + 1..end);
        at = end + 1;
    }
    let [referer, agent] = quoted;
    Ok(Fields {
        method,
        target,
        referer,
        agent,
    })
}

/// Undoes the escapes nginx (`\xHH`, `\"`, `\\`) and Apache (the same, plus `\n`, `\t`,
/// `\r`) write into logs.
pub(crate) fn unescape(raw: &[u8], out: &mut Vec<u8>) {
    let mut i = 0;
    while i < raw.len() {
        let b = raw[i];
        if b != b'\\' || i + 1 == raw.len() {
            out.push(b);
            i += 1;
            continue;
        }
        let next = raw[i + 1];
        let hex = |c: u8| (c as char).to_digit(16);
        match next {
            b'x' => match (
                raw.get(i + 2).and_then(|&c| hex(c)),
                raw.get(i + 3).and_then(|&c| hex(c)),
            ) {
                (Some(h), Some(l)) => {
                    out.push((h * 16 + l) as u8);
                    i += 4;
                }
                _ => {
                    out.push(b'\\');
                    i += 1;
                }
            },
            b'n' => {
                out.push(b'\n');
                i += 2;
            }
            b't' => {
                out.push(b'\t');
                i += 2;
            }
            b'r' => {
                out.push(b'\r');
                i += 2;
            }
            b'"' | b'\\' => {
                out.push(next);
                i += 2;
            }
            _ => {
                out.push(b'\\');
                i += 1;
            }
        }
    }
}

/// Turns a logged request target into an origin-form path and query: escapes undone, an
/// absolute-form target (`http://host/p`) cut to its path (the host is the target's),
/// and every byte not allowed in a request target (`#`, bytes ≥ 0x80 after `\xHH`, …)
/// percent-encoded, so the server decodes the very bytes the client sent.
pub(crate) fn normalize_target(
    raw: &[u8],
    scratch: &mut Vec<u8>,
    out: &mut String,
) -> Result<(), Bad> {
    let bytes: &[u8] = if memchr::memchr(b'\\', raw).is_some() {
        scratch.clear();
        unescape(raw, scratch);
        scratch
    } else {
        raw
    };
    let path = path_of_target(bytes)?;
    out.clear();
    if path.first() != Some(&b'/') {
        out.push('/');
    }
    encode_target(path, out);
    Ok(())
}

/// The path and query of an origin-form or absolute-form target.
pub(crate) fn path_of_target(bytes: &[u8]) -> Result<&[u8], Bad> {
    if bytes.first() == Some(&b'/') {
        return Ok(bytes);
    }
    if bytes == b"*" {
        return Err((
            SkipReason::NotReplayable,
            "asterisk-form target (OPTIONS *)",
        ));
    }
    let lower_starts =
        |p: &[u8]| bytes.len() >= p.len() && bytes[..p.len()].eq_ignore_ascii_case(p);
    let rest = if lower_starts(b"http://") {
        &bytes[7..]
    } else if lower_starts(b"https://") {
        &bytes[8..]
    } else {
        return Err((
            MALFORMED,
            "the request target does not start with '/' or http(s)://",
        ));
    };
    let cut = rest
        .iter()
        .position(|&b| matches!(b, b'/' | b'?' | b'#'))
        .unwrap_or(rest.len());
    Ok(&rest[cut..])
}

/// Bytes a replayed request target holds as they are: those of a request target but `#`.
const TARGET_BYTES: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 128 {
        table[b] = b != b'#' as usize && is_request_target_char(b as u8 as char);
        b += 1;
    }
    table
};

/// Appends `path`, percent-encoding bytes a request target may not hold.
pub(crate) fn encode_target(path: &[u8], out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut rest = path;
    while !rest.is_empty() {
        // Copy the run of allowed (ASCII) bytes at once.
        let run = rest
            .iter()
            .position(|&b| !TARGET_BYTES[usize::from(b)])
            .unwrap_or(rest.len());
        out.push_str(std::str::from_utf8(&rest[..run]).unwrap_or(""));
        let Some(&b) = rest.get(run) else { break };
        out.push('%');
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 0x0F)]));
        rest = &rest[run + 1..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(line: &str) -> Result<(String, String, Option<String>, Option<String>), Bad> {
        let b = line.as_bytes();
        parse_line(b).map(|f| {
            let s = |r: Range<usize>| String::from_utf8_lossy(&b[r]).into_owned();
            (s(f.method), s(f.target), f.referer.map(s), f.agent.map(s))
        })
    }

    #[test]
    fn common_combined_and_trailing_fields() {
        let common = r#"127.0.0.1 - frank [10/Oct/2000:13:55:36 -0700] "GET /apache_pb.gif HTTP/1.0" 200 2326"#;
        assert_eq!(
            fields(common).unwrap(),
            ("GET".into(), "/apache_pb.gif".into(), None, None)
        );
        let combined = r#"::1 - - [10/Oct/2000:13:55:36 -0700] "POST /x?a=1 HTTP/1.1" 201 - "http://r/" "curl/8.0 (\"q\")" 0.004 0.003"#;
        assert_eq!(
            fields(combined).unwrap(),
            (
                "POST".into(),
                "/x?a=1".into(),
                Some("http://r/".into()),
                Some(r#"curl/8.0 (\"q\")"#.into())
            )
        );
    }

    #[test]
    fn malformed_lines_say_why() {
        for (line, reason) in [
            ("garbage", MALFORMED),
            (
                r#"1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] "-" 400 0"#,
                SkipReason::NotReplayable,
            ),
            (
                r#"1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] "\x16\x03\x01" 400 157"#,
                MALFORMED,
            ),
            (
                r#"1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] "GET /a HTTP/1.1 200 1"#,
                MALFORMED,
            ),
            (
                r#"1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] "GET /a b HTTP/1.1" 200 1"#,
                MALFORMED,
            ),
            (
                r#"1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] "GET /a HTTP/1.1" 2000 1"#,
                MALFORMED,
            ),
            (
                r#"1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] "GET /a HTTP/1.1" 200"#,
                MALFORMED,
            ),
            (
                r#"1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] "GET /a HTTP/1.1" 200 1 "ref"#,
                MALFORMED,
            ),
            ("[] \"GET / HTTP/1.1\" 200 1", MALFORMED),
        ] {
            match fields(line) {
                Err((r, _)) => assert_eq!(r, reason, "{line}"),
                Ok(f) => panic!("{line}: parsed as {f:?}"),
            }
        }
    }

    #[test]
    fn targets_are_normalized() {
        let norm = |t: &[u8]| {
            let (mut scratch, mut out) = (Vec::new(), String::new());
            normalize_target(t, &mut scratch, &mut out).map(|()| out)
        };
        assert_eq!(norm(b"/a?b=c").unwrap(), "/a?b=c");
        assert_eq!(norm(b"http://EXAMPLE.com:8080/p?q").unwrap(), "/p?q");
        assert_eq!(norm(b"HTTPS://h?q=1").unwrap(), "/?q=1");
        assert_eq!(norm(b"http://h").unwrap(), "/");
        assert_eq!(norm(br"/caf\xC3\xA9#x").unwrap(), "/caf%C3%A9%23x");
        assert_eq!(norm(br#"/a\"b"#).unwrap(), "/a%22b");
        assert_eq!(norm(b"/%20ok").unwrap(), "/%20ok", "existing escapes stay");
        assert!(matches!(norm(b"*"), Err((SkipReason::NotReplayable, _))));
        assert!(matches!(norm(b"ftp://x/"), Err((MALFORMED, _))));
    }

    #[test]
    fn unescape_handles_both_dialects_and_stray_backslashes() {
        let un = |s: &[u8]| {
            let mut out = Vec::new();
            unescape(s, &mut out);
            out
        };
        assert_eq!(un(br"a\x41\x4a"), b"aAJ");
        assert_eq!(un(br#"\"\\\n\t"#), b"\"\\\n\t");
        assert_eq!(un(br"\x4"), br"\x4");
        assert_eq!(un(br"\xZZ"), br"\xZZ");
        assert_eq!(un(br"\q\"), br"\q\");
    }
}
