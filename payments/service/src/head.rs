//! The request-head check (SPEC "Request heads"): every request head is read and judged
//! here, before hyper parses it, so that hyper's own limits and error answers (empty
//! 400/414/431 bodies, a silently dropped `#fragment`) are never reached and both
//! services answer the same JSON for the same bytes. The Go service runs the same rules
//! (`payments/go/internal/headcheck`); both are tested against one table,
//! `payments/testdata/request-heads.txt`.
//!
//! [`HeadCheck`] is the byte-level state machine (no I/O); [`Checked`] wraps a socket
//! with it. A head that breaks a rule ends the connection: the requests before it are
//! passed on and answered, hyper then sees the end of the stream, and the JSON error is
//! written when hyper shuts the connection down.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Longest request head: the request line, the header lines and the empty line (and any
/// empty lines before the request line).
pub(crate) const MAX_HEAD: usize = 65_536;
/// Most header lines in one head.
pub(crate) const MAX_FIELDS: usize = 100;
/// Longest request target.
pub(crate) const MAX_TARGET: usize = 8_192;
/// Longest method.
const MAX_METHOD: usize = 32;

/// Why a head was refused: one row of the SPEC's table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reject {
    /// 400 `invalid_request`: the request line or a header line is not valid HTTP/1.1.
    InvalidRequest,
    /// 400 `invalid_target`: the request target is not a path (or http URL) of URI
    /// characters, or has a malformed `%` escape in its path.
    InvalidTarget,
    /// 411 `length_required`: `Transfer-Encoding` instead of `Content-Length`.
    LengthRequired,
    /// 414 `target_too_long`.
    TargetTooLong,
    /// 417 `expectation_failed`: an `Expect` other than `100-continue`.
    ExpectationFailed,
    /// 431 `headers_too_large`.
    HeadersTooLarge,
}

impl Reject {
    /// Status code.
    pub(crate) fn status(self) -> u16 {
        match self {
            Reject::InvalidRequest | Reject::InvalidTarget => 400,
            Reject::LengthRequired => 411,
            Reject::TargetTooLong => 414,
            Reject::ExpectationFailed => 417,
            Reject::HeadersTooLarge => 431,
        }
    }

    /// The `code` of the JSON body.
    #[cfg(test)]
    pub(crate) fn code(self) -> &'static str {
        match self {
            Reject::InvalidRequest => "invalid_request",
            Reject::InvalidTarget => "invalid_target",
            Reject::LengthRequired => "length_required",
            Reject::TargetTooLong => "target_too_long",
            Reject::ExpectationFailed => "expectation_failed",
            Reject::HeadersTooLarge => "headers_too_large",
        }
    }

    fn reason(self) -> &'static str {
        match self {
            Reject::InvalidRequest | Reject::InvalidTarget => "Bad Request",
            Reject::LengthRequired => "Length Required",
            Reject::TargetTooLong => "URI Too Long",
            Reject::ExpectationFailed => "Expectation Failed",
            Reject::HeadersTooLarge => "Request Header Fields Too Large",
        }
    }

    /// The canonical JSON body.
    pub(crate) fn body(self) -> &'static str {
        match self {
            Reject::InvalidRequest => {
                r#"{"error":{"code":"invalid_request","message":"malformed request line or header"}}"#
            }
            Reject::InvalidTarget => {
                r#"{"error":{"code":"invalid_target","message":"request target must be a path of URI characters, without a fragment"}}"#
            }
            Reject::LengthRequired => {
                r#"{"error":{"code":"length_required","message":"a request body needs Content-Length, not Transfer-Encoding"}}"#
            }
            Reject::TargetTooLong => {
                r#"{"error":{"code":"target_too_long","message":"request target must be at most 8192 bytes"}}"#
            }
            Reject::ExpectationFailed => {
                r#"{"error":{"code":"expectation_failed","message":"the only expectation supported is 100-continue"}}"#
            }
            Reject::HeadersTooLarge => {
                r#"{"error":{"code":"headers_too_large","message":"request head must be at most 65536 bytes and 100 header fields"}}"#
            }
        }
    }

    /// The whole answer; the body is left out after a `HEAD` request line.
    pub(crate) fn response(self, head_request: bool) -> Vec<u8> {
        let body = self.body();
        let mut out = format!(
            "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            self.status(),
            self.reason(),
            body.len()
        )
        .into_bytes();
        if !head_request {
            out.extend_from_slice(body.as_bytes());
        }
        out
    }
}

/// A refused head and whether its request line was a `HEAD` (no body in the answer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub(crate) reject: Reject,
    pub(crate) head_request: bool,
}

impl Refusal {
    pub(crate) fn response(self) -> Vec<u8> {
        self.reject.response(self.head_request)
    }
}

/// What to do with the front of the bytes given to [`HeadCheck::next`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Hand these bytes on: a whole checked head, or body bytes.
    Pass(usize),
    /// Throw these bytes away: empty lines before a request line.
    Drop(usize),
    /// The bytes are the start of a head: call again with the same bytes and more.
    NeedMore,
    /// The head at the front is refused: answer and close; nothing after it is read.
    Refuse(Refusal),
}

/// The state machine. Feed it the unread bytes of a connection in order with
/// [`HeadCheck::next`]: each call starts where the bytes of the previous `Pass`/`Drop`
/// ended, or, after `NeedMore`, at the same place with more bytes.
///
/// Lines are judged in order as they complete (the request line, then each header line,
/// then the rules about the whole head), and an unfinished request line as soon as its
/// method or target length decides it: so the answer never depends on how the bytes
/// were split into reads.
#[derive(Debug, Default)]
pub(crate) struct HeadCheck {
    /// Body bytes still to pass before the next head.
    body: u64,
    /// Empty lines dropped before the current request line (they count toward MAX_HEAD).
    dropped: usize,
    /// Where the next line not yet judged starts, from the start of the head.
    at: usize,
    /// How far the unfinished line at `at` was searched for its end.
    searched: usize,
    /// The request line's version, once it is judged.
    version: Option<Version>,
    fields: Fields,
}

/// What the header lines of one head said.
#[derive(Debug, Default)]
struct Fields {
    count: usize,
    hosts: usize,
    bad_host: bool,
    transfer_encoding: bool,
    content_lengths: usize,
    content_length: Option<u64>,
    bad_expect: bool,
}

impl HeadCheck {
    pub(crate) fn new() -> HeadCheck {
        HeadCheck::default()
    }

    /// Judges the front of `data` (see [`Step`]). `data` must not be empty.
    pub(crate) fn next(&mut self, data: &[u8]) -> Step {
        if self.body > 0 {
            let n = data
                .len()
                .min(usize::try_from(self.body).unwrap_or(usize::MAX));
            self.body -= n as u64;
            return Step::Pass(n);
        }
        if self.at == 0 {
            // Empty lines before a request line (RFC 9112 section 2.2) are dropped, not
            // passed: the two HTTP libraries do not agree on them.
            let empty = leading_empty_lines(data);
            if empty > 0 {
                self.dropped += empty;
                if self.dropped > MAX_HEAD {
                    return Step::Refuse(Refusal {
                        reject: Reject::HeadersTooLarge,
                        head_request: false,
                    });
                }
                return Step::Drop(empty);
            }
            if data == b"\r" {
                return Step::NeedMore;
            }
        }
        let head_request = data.starts_with(b"HEAD ");
        match self.judge(data) {
            Ok(None) => Step::NeedMore,
            Ok(Some((len, body))) => {
                *self = HeadCheck {
                    body,
                    ..HeadCheck::default()
                };
                Step::Pass(len)
            }
            Err(reject) => Step::Refuse(Refusal {
                reject,
                head_request,
            }),
        }
    }

    /// Judges the lines of `data` not judged yet. `Ok(Some((head length, body length)))`
    /// for a whole good head, `Ok(None)` for a good start of one.
    fn judge(&mut self, data: &[u8]) -> Result<Option<(usize, u64)>, Reject> {
        let limit = MAX_HEAD - self.dropped;
        loop {
            let from = self.searched.max(self.at);
            let Some(lf) = data[from..].iter().position(|&b| b == b'\n') else {
                self.searched = data.len();
                break;
            };
            let end = from + lf + 1;
            if end > limit {
                return Err(self.past_limit(&data[..limit]));
            }
            let line = strip_cr(&data[self.at..end - 1]);
            self.at = end;
            let Some(version) = self.version else {
                self.version = Some(check_request_line(line)?);
                continue;
            };
            if line.is_empty() {
                return self.fields.judge(version).map(|body| Some((end, body)));
            }
            self.fields.count += 1;
            if self.fields.count > MAX_FIELDS {
                return Err(Reject::HeadersTooLarge);
            }
            if !self.fields.check(line) {
                return Err(Reject::InvalidRequest);
            }
        }
        if data.len() > limit {
            return Err(self.past_limit(&data[..limit]));
        }
        // An unfinished request line can already be judged on its method and target.
        if self.version.is_none()
            && let Some(reject) = request_line_prefix(data)
        {
            return Err(reject);
        }
        Ok(None)
    }

    /// The answer for a head that goes past MAX_HEAD, `head` being its first MAX_HEAD
    /// bytes: its request line decides if it is unfinished, otherwise 431 (every whole
    /// line before the limit was judged good).
    fn past_limit(&self, head: &[u8]) -> Reject {
        match self.version {
            None => request_line_prefix(head).unwrap_or(Reject::InvalidRequest),
            Some(_) => Reject::HeadersTooLarge,
        }
    }
}

impl Fields {
    /// `name: value`: a token name, a value of visible ASCII, spaces and tabs. Records
    /// what the rules about the whole head need. `false`: malformed.
    fn check(&mut self, line: &[u8]) -> bool {
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            return false;
        };
        let (name, value) = (&line[..colon], &line[colon + 1..]);
        if name.is_empty() || !name.iter().all(|&b| is_tchar(b)) {
            return false;
        }
        if !value
            .iter()
            .all(|&b| b == b'\t' || b == b' ' || (0x21..=0x7e).contains(&b))
        {
            return false;
        }
        let value = value.trim_ascii();
        if name.eq_ignore_ascii_case(b"host") {
            self.hosts += 1;
            self.bad_host |= !value
                .iter()
                .all(|&b| b.is_ascii_alphanumeric() || b"-._~:[]".contains(&b));
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            self.transfer_encoding = true;
        } else if name.eq_ignore_ascii_case(b"content-length") {
            self.content_lengths += 1;
            self.content_length =
                (!value.is_empty() && value.len() <= 18 && value.iter().all(u8::is_ascii_digit))
                    .then(|| value.iter().fold(0u64, |n, d| n * 10 + u64::from(d - b'0')));
        } else if name.eq_ignore_ascii_case(b"expect") {
            self.bad_expect |= !value.eq_ignore_ascii_case(b"100-continue");
        }
        true
    }

    /// The rules about the whole head, in order; the body length if it passes.
    fn judge(&self, version: Version) -> Result<u64, Reject> {
        let hosts_ok = match version {
            Version::Http11 => self.hosts == 1,
            Version::Http10 => self.hosts <= 1,
        };
        if !hosts_ok || self.bad_host {
            return Err(Reject::InvalidRequest);
        }
        if self.transfer_encoding {
            return Err(Reject::LengthRequired);
        }
        let body = match (self.content_lengths, self.content_length) {
            (0, _) => 0,
            (1, Some(n)) => n,
            _ => return Err(Reject::InvalidRequest),
        };
        if self.bad_expect {
            return Err(Reject::ExpectationFailed);
        }
        Ok(body)
    }
}

#[derive(Debug, Clone, Copy)]
enum Version {
    Http10,
    Http11,
}

/// How many bytes of empty lines (`\r\n` or `\n`) open `data`.
fn leading_empty_lines(data: &[u8]) -> usize {
    let mut i = 0;
    loop {
        match data[i..] {
            [b'\n', ..] => i += 1,
            [b'\r', b'\n', ..] => i += 2,
            _ => return i,
        }
    }
}

fn strip_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// RFC 9110 `tchar`.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// What an unfinished (or cut) request line already decides: a bad method, or a target
/// past MAX_TARGET. `None`: nothing yet.
fn request_line_prefix(line: &[u8]) -> Option<Reject> {
    let method_end = line.iter().take(MAX_METHOD + 1).position(|&b| b == b' ');
    match method_end {
        None if line.len() > MAX_METHOD => return Some(Reject::InvalidRequest),
        None => {
            return (!line.iter().all(|&b| is_tchar(b))).then_some(Reject::InvalidRequest);
        }
        Some(0) => return Some(Reject::InvalidRequest),
        Some(n) if !line[..n].iter().all(|&b| is_tchar(b)) => {
            return Some(Reject::InvalidRequest);
        }
        Some(_) => {}
    }
    let target = &line[method_end? + 1..];
    if target.len() <= MAX_TARGET {
        return None; // cannot be too long yet (and an unfinished line is judged often)
    }
    let target_len = target
        .iter()
        .take(MAX_TARGET + 1)
        .position(|&b| b == b' ')
        .unwrap_or(target.len().min(MAX_TARGET + 1));
    (target_len > MAX_TARGET).then_some(Reject::TargetTooLong)
}

/// `METHOD SP TARGET SP VERSION`, judged in that order (the method, the target's
/// length, the version, the target's form).
fn check_request_line(line: &[u8]) -> Result<Version, Reject> {
    if let Some(reject) = request_line_prefix(line) {
        return Err(reject);
    }
    let Some(sp1) = line.iter().position(|&b| b == b' ') else {
        return Err(Reject::InvalidRequest);
    };
    let rest = &line[sp1 + 1..];
    let Some(sp2) = rest.iter().position(|&b| b == b' ') else {
        return Err(Reject::InvalidRequest);
    };
    let (target, version) = (&rest[..sp2], &rest[sp2 + 1..]);
    let version = match version {
        b"HTTP/1.1" => Version::Http11,
        b"HTTP/1.0" => Version::Http10,
        _ => return Err(Reject::InvalidRequest),
    };
    if !valid_target(target) {
        return Err(Reject::InvalidTarget);
    }
    Ok(version)
}

/// URI characters (RFC 3986 unreserved, sub-delims, `:`, `@`, `/`, `?`, `%`): all that
/// Go's and hyper's parsers take as they are.
fn is_uri_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/?%".contains(&b)
}

/// Origin-form (`/path?query`) or absolute-form (`http://host[:port]/path?query`).
fn valid_target(target: &[u8]) -> bool {
    let origin = if let Some(rest) = target
        .strip_prefix(b"http://")
        .or_else(|| target.strip_prefix(b"https://"))
    {
        let Some(slash) = rest.iter().position(|&b| b == b'/') else {
            return false;
        };
        if !valid_authority(&rest[..slash]) {
            return false;
        }
        &rest[slash..]
    } else {
        target
    };
    if !origin.starts_with(b"/") || !origin.iter().all(|&b| is_uri_char(b)) {
        return false;
    }
    // Go refuses a malformed escape in the path; in the query, SPEC's parameter rules
    // handle it (the pair is ignored).
    let path = origin.split(|&b| b == b'?').next().unwrap_or(origin);
    path.iter().enumerate().all(|(i, &b)| {
        b != b'%'
            || (path.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
                && path.get(i + 2).is_some_and(u8::is_ascii_hexdigit))
    })
}

/// `host[:port]`: letters, digits, `-` and `.`; a port of 1 to 5 digits up to 65535.
fn valid_authority(authority: &[u8]) -> bool {
    let (host, port) = match authority.iter().position(|&b| b == b':') {
        Some(colon) => (&authority[..colon], Some(&authority[colon + 1..])),
        None => (authority, None),
    };
    let host_ok = !host.is_empty()
        && host
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
    let port_ok = port.is_none_or(|p| {
        (1..=5).contains(&p.len())
            && p.iter().all(u8::is_ascii_digit)
            && std::str::from_utf8(p)
                .ok()
                .and_then(|s| s.parse::<u32>().ok())
                .is_some_and(|n| n <= 65_535)
    });
    host_ok && port_ok
}

/// Runs `check` over `data` in place: the bytes to pass are moved to the front. Returns
/// how many there are, where the unfinished head left over starts (`data.len()` if
/// none), and the refusal that ended the stream, if any.
pub(crate) fn sift(check: &mut HeadCheck, data: &mut [u8]) -> (usize, usize, Option<Refusal>) {
    let mut out = 0;
    let mut at = 0;
    while at < data.len() {
        match check.next(&data[at..]) {
            Step::Pass(n) => {
                if out != at {
                    data.copy_within(at..at + n, out);
                }
                out += n;
                at += n;
            }
            Step::Drop(n) => at += n,
            Step::NeedMore => return (out, at, None),
            Step::Refuse(refusal) => return (out, data.len(), Some(refusal)),
        }
    }
    (out, at, None)
}

/// A connection whose incoming bytes pass through a [`HeadCheck`] before hyper reads
/// them. Serve it with hyper's `half_close(true)`: after a refused head the stream ends
/// early, and hyper must not take that end for a client gone while it still answers the
/// requests before it.
#[derive(Debug)]
pub(crate) struct Checked<T> {
    io: T,
    check: HeadCheck,
    /// Checked bytes not yet handed to hyper: `ready[ready_from..]`.
    ready: Vec<u8>,
    ready_from: usize,
    /// The start of a head still arriving.
    partial: Vec<u8>,
    /// The answer to a refused head.
    refused: Option<Answer>,
    /// hyper was told the stream ended (so it asked for the bytes after the last request).
    ended: bool,
}

impl<T> Checked<T> {
    pub(crate) fn new(io: T) -> Checked<T> {
        Checked {
            io,
            check: HeadCheck::new(),
            ready: Vec::new(),
            ready_from: 0,
            partial: Vec::new(),
            refused: None,
            ended: false,
        }
    }

    /// Hands on checked bytes kept from an earlier read, if any.
    fn hand_on(&mut self, buf: &mut ReadBuf<'_>) -> bool {
        if self.ready_from == self.ready.len() {
            return false;
        }
        let n = buf.remaining().min(self.ready.len() - self.ready_from);
        buf.put_slice(&self.ready[self.ready_from..self.ready_from + n]);
        self.ready_from += n;
        if self.ready_from == self.ready.len() {
            self.ready.clear();
            self.ready_from = 0;
        }
        true
    }
}

/// A buffer for unfinished heads larger than this is freed once they are judged.
const LONG_HEAD: usize = 8192;

impl<T: AsyncRead + Unpin> AsyncRead for Checked<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.hand_on(buf) {
                return Poll::Ready(Ok(()));
            }
            if this.refused.is_some() || this.ended {
                this.ended = true;
                return Poll::Ready(Ok(()));
            }
            if this.partial.is_empty() {
                // The usual case: whole heads, checked where hyper wants them.
                let before = buf.filled().len();
                ready!(Pin::new(&mut this.io).poll_read(cx, buf))?;
                let filled = buf.filled_mut();
                if filled.len() == before {
                    this.ended = true;
                    return Poll::Ready(Ok(()));
                }
                let fresh = &mut filled[before..];
                let (pass, rest, refused) = sift(&mut this.check, fresh);
                this.partial.extend_from_slice(&fresh[rest..]);
                this.refused = refused.map(Answer::new);
                buf.set_filled(before + pass);
                if pass > 0 {
                    return Poll::Ready(Ok(()));
                }
                continue;
            }
            // A head arriving in pieces: gather it here until it can be judged (reading
            // through hyper's buffer, which gets the bytes once they are checked).
            let before = buf.filled().len();
            ready!(Pin::new(&mut this.io).poll_read(cx, buf))?;
            let got = buf.filled().len() - before;
            this.partial.extend_from_slice(&buf.filled()[before..]);
            buf.set_filled(before);
            if got == 0 {
                // The client left mid-head: no answer (SPEC).
                this.partial = Vec::new();
                this.ended = true;
                return Poll::Ready(Ok(()));
            }
            let (pass, rest, refused) = sift(&mut this.check, &mut this.partial);
            this.ready.extend_from_slice(&this.partial[..pass]);
            this.partial.drain(..rest);
            if this.partial.is_empty() && this.partial.capacity() > LONG_HEAD {
                this.partial = Vec::new(); // a long head came and went
            }
            this.refused = refused.map(Answer::new);
        }
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Checked<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, data)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    /// Writes the answer to a refused head first, once hyper has read up to it, then
    /// lingers: the client may still be sending (the rest of a 100 KB target), and
    /// closing on unread bytes would reset the connection and could destroy the answer
    /// before the client reads it.
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.ended
            && let Some(answer) = &mut this.refused
        {
            while answer.written < answer.bytes.len() {
                let rest = &answer.bytes[answer.written..];
                let n = ready!(Pin::new(&mut this.io).poll_write(cx, rest))?;
                if n == 0 {
                    return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
                }
                answer.written += n;
            }
            if !answer.shut {
                ready!(Pin::new(&mut this.io).poll_flush(cx))?;
                ready!(Pin::new(&mut this.io).poll_shutdown(cx))?;
                answer.shut = true;
            }
            let mut scratch = [0u8; 4096];
            while answer.drained < LINGER_BYTES {
                let mut buf = ReadBuf::new(&mut scratch);
                match Pin::new(&mut this.io).poll_read(cx, &mut buf) {
                    Poll::Ready(Ok(())) if !buf.filled().is_empty() => {
                        answer.drained += buf.filled().len();
                    }
                    Poll::Ready(_) => break, // the client closed, or the socket failed
                    Poll::Pending => {
                        let timer = answer
                            .linger
                            .get_or_insert_with(|| Box::pin(tokio::time::sleep(LINGER)));
                        ready!(timer.as_mut().poll(cx));
                        break;
                    }
                }
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.io).poll_shutdown(cx)
    }
}

/// How long, and for how many bytes, a refused connection keeps reading before it
/// closes.
const LINGER: std::time::Duration = std::time::Duration::from_secs(2);
const LINGER_BYTES: usize = 1 << 20;

/// The answer to a refused head, as it is sent.
#[derive(Debug)]
struct Answer {
    bytes: Vec<u8>,
    written: usize,
    /// The write side is shut (after the answer).
    shut: bool,
    /// Bytes read and thrown away since.
    drained: usize,
    linger: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Answer {
    fn new(refusal: Refusal) -> Answer {
        Answer {
            bytes: refusal.response(),
            written: 0,
            shut: false,
            drained: 0,
            linger: None,
        }
    }
}

#[cfg(test)]
mod tests;
