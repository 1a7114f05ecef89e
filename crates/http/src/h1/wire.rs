//! HTTP/1.1 on the wire (RFC 9112), with no I/O: the request head a client writes, the
//! response head it reads (1xx skipped, framing decided by RFC 9112 §6.3), and a chunked
//! decoder fed as bytes arrive. Moved from `scalpel-serve`'s `h1.rs`, where it was
//! measured against hyper's client connection (docs/serve.md).
//!
//! Two ways to read a head: [`parse_head`] only decides status and framing (the load
//! generator's path: no header map, no allocation), [`parse_response`] also builds the
//! `HeaderMap` a proxy forwards, hop-by-hop headers left out.

use std::mem::MaybeUninit;

use bytes::{Buf, Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{StatusCode, Version};

use crate::hop::{HopByHop, is_hop_by_hop};

/// The default limit on a response head, in bytes (hyper's and curl's order of size).
pub const DEFAULT_MAX_HEAD_BYTES: usize = 64 * 1024;
/// Response headers parsed on the stack. A head with more is parsed again into a vector
/// sized by its line count: the limit on a head is its size in bytes
/// ([`Expect::max_head_bytes`]), never a count of headers (as curl's and hyper's).
pub const MAX_HEADERS: usize = 64;
/// The longest chunk-size line (with extensions) accepted.
const MAX_CHUNK_LINE: usize = 4096;
/// The largest trailer section accepted.
const MAX_TRAILERS: usize = 16 * 1024;

/// A malformed or unsupported HTTP/1.x answer.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum WireError {
    /// The response head does not parse.
    #[error("malformed response head: {0}")]
    Head(String),
    /// The response head is over the byte limit.
    #[error("response head over {limit} bytes")]
    HeadTooLarge {
        /// The byte limit in force.
        limit: usize,
    },
    /// A `101 Switching Protocols` to a request that asked for no upgrade.
    #[error("the upstream switched protocols (101) unasked")]
    Upgrade,
    /// `Content-Length` is not a number, or several disagree.
    #[error("invalid Content-Length")]
    ContentLength,
    /// The chunked body does not parse.
    #[error("malformed chunked body: {0}")]
    Chunked(&'static str),
}

// ---------------------------------------------------------------------------------------
// Request heads

/// Methods whose request carries a `Content-Length` even when the body is empty (so a
/// server never waits for a body that is not coming).
pub fn sends_length(method: &[u8], body_len: usize) -> bool {
    body_len > 0
        || method.eq_ignore_ascii_case(b"POST")
        || method.eq_ignore_ascii_case(b"PUT")
        || method.eq_ignore_ascii_case(b"PATCH")
}

/// Writes a request head into a reused buffer: the request line, then headers one by
/// one, then the blank line. No allocation besides the buffer's own growth.
///
/// ```
/// use scalpel_http::h1::RequestWriter;
/// let mut out = Vec::new();
/// let mut w = RequestWriter::new(&mut out, "POST", "/api", "/v1/x?y=1");
/// w.header(b"Host", b"example.test");
/// w.content_length(5);
/// w.finish();
/// out.extend_from_slice(b"hello");
/// assert_eq!(out, b"POST /api/v1/x?y=1 HTTP/1.1\r\nHost: example.test\r\nContent-Length: 5\r\n\r\nhello");
/// ```
#[derive(Debug)]
pub struct RequestWriter<'a> {
    out: &'a mut Vec<u8>,
}

/// What [`RequestWriter::forward`] saw among the headers it copied.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Forwarded {
    /// A `Host` header was copied.
    pub host: bool,
}

impl<'a> RequestWriter<'a> {
    /// Starts a head in `out` (cleared first): `METHOD prefix+target HTTP/1.1`. `prefix`
    /// is a base path without a trailing slash (`""` for none); a `target` not starting
    /// with `/` gets one, except the asterisk form of `OPTIONS *` without a prefix.
    pub fn new(out: &'a mut Vec<u8>, method: &str, prefix: &str, target: &str) -> Self {
        out.clear();
        out.extend_from_slice(method.as_bytes());
        out.push(b' ');
        out.extend_from_slice(prefix.as_bytes());
        let asterisk = target == "*" && prefix.is_empty();
        if !target.starts_with('/') && !asterisk {
            out.push(b'/');
        }
        out.extend_from_slice(target.as_bytes());
        out.extend_from_slice(b" HTTP/1.1\r\n");
        Self { out }
    }

    /// One header line, as given.
    pub fn header(&mut self, name: &[u8], value: &[u8]) -> &mut Self {
        self.out.extend_from_slice(name);
        self.out.extend_from_slice(b": ");
        self.out.extend_from_slice(value);
        self.out.extend_from_slice(b"\r\n");
        self
    }

    /// Copies a client's headers for the next hop: hop-by-hop ones (and those its
    /// `Connection` names) dropped, and `Content-Length` and `Expect` too — the body
    /// length is the sender's own ([`RequestWriter::content_length`]), and a buffered body
    /// has answered any `Expect` already.
    pub fn forward(&mut self, headers: &HeaderMap) -> Forwarded {
        let rule = HopByHop::of(headers);
        let mut seen = Forwarded::default();
        for (name, value) in headers {
            if *name == header::CONTENT_LENGTH || *name == header::EXPECT {
                continue;
            }
            if rule.drops(name.as_str().as_bytes()) {
                continue;
            }
            seen.host |= *name == header::HOST;
            self.header(name.as_str().as_bytes(), value.as_bytes());
        }
        seen
    }

    /// `Content-Length: n`.
    pub fn content_length(&mut self, n: u64) -> &mut Self {
        let mut digits = itoa::Buffer::new();
        self.header(b"Content-Length", digits.format(n).as_bytes())
    }

    /// The body's framing: `Content-Length: n` for a body of `Some(n)` bytes (none for an
    /// empty body of a method that sends no length, see [`sends_length`]),
    /// `Transfer-Encoding: chunked` for a body of unknown length (`None`), sent with
    /// [`crate::h1::H1Conn::write_body`] in chunks.
    pub fn body_length(&mut self, method: &[u8], length: Option<u64>) -> &mut Self {
        match length {
            Some(n) if n > 0 || sends_length(method, 0) => self.content_length(n),
            Some(_) => self,
            None => self.header(b"Transfer-Encoding", b"chunked"),
        }
    }

    /// Ends the head (the blank line); the body, if any, follows in the same buffer or
    /// its own write.
    pub fn finish(self) {
        self.out.extend_from_slice(b"\r\n");
    }
}

// ---------------------------------------------------------------------------------------
// Response heads

/// How a response body is delimited (RFC 9112 §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body: a `HEAD` request, a 204 or 304, or a 101 (the connection switched).
    Empty,
    /// `Content-Length` bytes.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// Until the upstream closes the connection.
    Close,
}

/// What the request was, so the response can be framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expect {
    /// The request was a `HEAD`: no body follows whatever the head says.
    pub head: bool,
    /// The request asked to switch protocols: a 101 is its answer, not an error.
    pub upgrade: bool,
    /// The response head limit in bytes ([`DEFAULT_MAX_HEAD_BYTES`] by default).
    pub max_head_bytes: usize,
}

impl Default for Expect {
    fn default() -> Self {
        Self {
            head: false,
            upgrade: false,
            max_head_bytes: DEFAULT_MAX_HEAD_BYTES,
        }
    }
}

/// A response head reduced to what a client needs to read the body: no header map.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadInfo {
    /// The status code (100–999 as httparse allows; 1xx other than 101 never appear).
    pub status: u16,
    /// HTTP/1.1 (else HTTP/1.0).
    pub http11: bool,
    /// How the body is delimited.
    pub framing: Framing,
    /// The connection may carry another request once the body has ended. False after
    /// `Connection: close`, an HTTP/1.0 answer without keep-alive, a close-delimited body,
    /// a 101, and a head with both `Transfer-Encoding` and `Content-Length` (RFC 9112
    /// §6.3: the message is re-framed by its transfer coding, and the connection closed
    /// afterwards, since the two framings disagree about where the next response starts).
    pub keep_alive: bool,
    /// The head had both `Transfer-Encoding` and `Content-Length`.
    pub reframed: bool,
    /// Bytes of the head, including any interim (1xx) responses skipped before it.
    pub len: usize,
}

/// A response head for a proxy: hop-by-hop headers (and a `Content-Length` that a
/// `Transfer-Encoding` overrides) left out.
#[derive(Debug)]
pub struct ResponseHead {
    /// The status.
    pub status: StatusCode,
    /// HTTP/1.0 or HTTP/1.1.
    pub version: Version,
    /// End-to-end headers; after a 101, the `Upgrade` header is kept.
    pub headers: HeaderMap,
    /// As in [`HeadInfo`].
    pub framing: Framing,
    /// As in [`HeadInfo`].
    pub keep_alive: bool,
    /// As in [`HeadInfo`].
    pub reframed: bool,
}

/// Where a header's name and value sit in the head's bytes.
type Span = (usize, usize, usize, usize);

/// The outcome of scanning one final (non-1xx) head.
struct Scan {
    /// Offset of the final head (after skipped 1xx) and its end.
    start: usize,
    /// Interim (1xx) responses skipped before it.
    interim: u32,
    end: usize,
    code: u16,
    http11: bool,
    count: usize,
    chunked: Option<bool>,
    reframed: bool,
    framing: Framing,
    keep_alive: bool,
}

/// Scans the response head at the start of `buf`: interim (1xx) heads skipped, the final
/// one's status, framing and reuse decided; with `spans`, where its headers sit.
fn scan(
    buf: &[u8],
    expect: &Expect,
    mut spans: Option<&mut Vec<Span>>,
) -> Result<Option<Scan>, WireError> {
    let mut start = 0;
    let mut interim = 0u32;
    loop {
        let rest = &buf[start..];
        // Uninitialised slots: filling 64 empty headers before every parse cost more
        // than parsing a small response's few headers (callgrind, docs/load.md).
        let mut slots = [MaybeUninit::<httparse::Header<'_>>::uninit(); MAX_HEADERS];
        let mut more = Vec::new(); // allocates only for a head with more headers
        let Some((res, len)) = parse_one(rest, expect, &mut slots, &mut more)? else {
            return Ok(None);
        };
        let code = res.code.unwrap_or(0);
        let switched = code == 101;
        if switched && !expect.upgrade {
            return Err(WireError::Upgrade);
        }
        if (100..200).contains(&code) && !switched {
            start += len;
            interim = interim.saturating_add(1);
            continue;
        }
        if StatusCode::from_u16(code).is_err() {
            return Err(WireError::Head(format!("status {code}")));
        }
        let delimiting = Delimiting::read(res.headers)?;
        if let Some(spans) = spans.as_deref_mut() {
            record_spans(spans, rest, start, res.headers);
        }
        let http11 = res.version == Some(1);
        let framing = delimiting.framing(expect.head, code);
        return Ok(Some(Scan {
            start,
            interim,
            end: start + len,
            code,
            http11,
            count: res.headers.len(),
            chunked: delimiting.chunked,
            reframed: delimiting.reframed(),
            framing,
            keep_alive: delimiting.keep_alive(framing, http11, switched),
        }));
    }
}

/// Parses one head at the start of `rest` into the stack's `slots`, or — when it has more
/// headers than they hold — into `more`, sized by the head's line count within the byte
/// limit (so the vector is bounded by the limit, not by the peer). `Ok(None)`: not all
/// there yet. Returns the parsed head and its length.
#[inline(always)]
fn parse_one<'h, 'b>(
    rest: &'b [u8],
    expect: &Expect,
    slots: &'h mut [MaybeUninit<httparse::Header<'b>>; MAX_HEADERS],
    more: &'h mut Vec<httparse::Header<'b>>,
) -> Result<Option<(httparse::Response<'h, 'b>, usize)>, WireError> {
    let too_large = || WireError::HeadTooLarge {
        limit: expect.max_head_bytes,
    };
    let mut res = httparse::Response::new(&mut []);
    let mut parsed =
        httparse::ParserConfig::default().parse_response_with_uninit_headers(&mut res, rest, slots);
    if let Err(httparse::Error::TooManyHeaders) = parsed {
        let window = &rest[..rest.len().min(expect.max_head_bytes)];
        let lines = window.iter().filter(|&&b| b == b'\n').count();
        *more = vec![httparse::EMPTY_HEADER; lines + 1];
        res = httparse::Response::new(more);
        parsed = res.parse(rest);
    }
    let len = match parsed {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if rest.len() >= expect.max_head_bytes => {
            return Err(too_large());
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        // Still too many: the head runs past the byte limit.
        Err(httparse::Error::TooManyHeaders) => return Err(too_large()),
        Err(e) => return Err(WireError::Head(e.to_string())),
    };
    if len > expect.max_head_bytes {
        return Err(too_large());
    }
    Ok(Some((res, len)))
}

/// The headers of a final head that decide how its body is delimited and whether the
/// connection is reused (RFC 9112 §6.3, §9.3).
#[derive(Debug, Default)]
struct Delimiting {
    /// `Transfer-Encoding` was present: is its last coding `chunked`?
    chunked: Option<bool>,
    length: Option<u64>,
    close: bool,
    keep: bool,
}

impl Delimiting {
    #[inline(always)]
    fn read(headers: &[httparse::Header<'_>]) -> Result<Delimiting, WireError> {
        let mut d = Delimiting::default();
        for h in headers {
            let name = h.name.as_bytes();
            // By length first: most headers are none of these three (the hot path).
            match name.len() {
                10 if name.eq_ignore_ascii_case(b"connection") => {
                    for token in h.value.split(|&b| b == b',') {
                        let token = token.trim_ascii();
                        d.close |= token.eq_ignore_ascii_case(b"close");
                        d.keep |= token.eq_ignore_ascii_case(b"keep-alive");
                    }
                }
                17 if name.eq_ignore_ascii_case(b"transfer-encoding") => {
                    // The last coding decides (RFC 9112 §6.3): chunked, or read until close.
                    let last = h.value.rsplit(|&b| b == b',').next().unwrap_or_default();
                    d.chunked = Some(last.trim_ascii().eq_ignore_ascii_case(b"chunked"));
                }
                14 if name.eq_ignore_ascii_case(b"content-length") => {
                    let n = content_length(h.value).ok_or(WireError::ContentLength)?;
                    if d.length.is_some_and(|l| l != n) {
                        return Err(WireError::ContentLength);
                    }
                    d.length = Some(n);
                }
                _ => {}
            }
        }
        Ok(d)
    }

    /// Both `Transfer-Encoding` and `Content-Length`: framed by the coding, not reused.
    fn reframed(&self) -> bool {
        self.chunked.is_some() && self.length.is_some()
    }

    /// How the body of a response with status `code` is delimited (`head`: the request
    /// was a `HEAD`).
    fn framing(&self, head: bool, code: u16) -> Framing {
        if head || code == 101 || code == 204 || code == 304 {
            return Framing::Empty;
        }
        match (self.chunked, self.length) {
            (Some(true), _) => Framing::Chunked,
            (Some(false), _) => Framing::Close,
            (None, Some(n)) => Framing::Length(n),
            (None, None) => Framing::Close,
        }
    }

    /// May the connection carry another request after this response?
    fn keep_alive(&self, framing: Framing, http11: bool, switched: bool) -> bool {
        framing != Framing::Close
            && !switched
            && !self.reframed()
            && if http11 {
                !self.close
            } else {
                self.keep && !self.close
            }
    }
}

/// Records where each header's name and value sit in the whole buffer (`rest` starts at
/// `start` in it).
fn record_spans(spans: &mut Vec<Span>, rest: &[u8], start: usize, headers: &[httparse::Header]) {
    let base = rest.as_ptr() as usize;
    spans.clear();
    spans.extend(headers.iter().map(|h| {
        let name = start + h.name.as_ptr() as usize - base;
        let value = start + h.value.as_ptr() as usize - base;
        (name, h.name.len(), value, h.value.len())
    }));
}

/// A `Content-Length` value: ASCII digits only (RFC 9110 §8.6), spaces around them
/// allowed; `None` for anything else or a number past `u64`.
fn content_length(value: &[u8]) -> Option<u64> {
    let digits = value.trim_ascii();
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |n, &b| {
        if !b.is_ascii_digit() {
            return None;
        }
        n.checked_mul(10)?.checked_add(u64::from(b - b'0'))
    })
}

/// Decides status and framing of the response head at the start of `buf`, without
/// consuming it or building a header map; `Ok(None)` when it is not all there yet.
/// Interim (1xx) responses are skipped ([`HeadInfo::len`] covers them).
pub fn parse_head(buf: &[u8], expect: &Expect) -> Result<Option<HeadInfo>, WireError> {
    Ok(scan(buf, expect, None)?.map(|s| HeadInfo {
        status: s.code,
        http11: s.http11,
        framing: s.framing,
        keep_alive: s.keep_alive,
        reframed: s.reframed,
        len: s.end,
    }))
}

/// Parses the response head at the start of `buf` and consumes it; `Ok(None)` when it
/// is not all there yet. Interim (1xx) responses are consumed and skipped. Header values
/// point into the head's bytes: no copy per header.
pub fn parse_response(
    buf: &mut BytesMut,
    expect: &Expect,
) -> Result<Option<ResponseHead>, WireError> {
    Ok(parse_response_counted(buf, expect)?.map(|(head, _, _)| head))
}

/// [`parse_response`], also saying how many interim (1xx) responses were skipped before
/// the final head (a proxy that cannot pass them on counts them), and the values of its
/// `Trailer` header (hop-by-hop on the list, but a proxy that passes trailers on must
/// declare them to its own client).
pub(crate) fn parse_response_counted(
    buf: &mut BytesMut,
    expect: &Expect,
) -> Result<Option<(ResponseHead, u32, Vec<HeaderValue>)>, WireError> {
    let mut spans = Vec::new();
    let Some(s) = scan(buf, expect, Some(&mut spans))? else {
        return Ok(None);
    };
    buf.advance(s.start);
    let bytes = buf.split_to(s.end - s.start).freeze();
    let at = |(n, nl, v, vl): Span| (n - s.start, nl, v - s.start, vl);
    let spans = spans[..s.count].iter().map(|&sp| at(sp));
    let rule = HopByHop::from_connection(
        spans
            .clone()
            .filter(|&(n, nl, _, _)| bytes[n..n + nl].eq_ignore_ascii_case(b"connection"))
            .map(|(_, _, v, vl)| &bytes[v..v + vl]),
    );
    let switched = s.code == 101;
    let mut headers = HeaderMap::with_capacity(s.count);
    let mut trailer = Vec::new();
    for (n, nl, v, vl) in spans.clone() {
        let name = &bytes[n..n + nl];
        if name.eq_ignore_ascii_case(b"trailer")
            && let Ok(value) = HeaderValue::from_maybe_shared(bytes.slice(v..v + vl))
        {
            trailer.push(value);
        }
        // With Transfer-Encoding, a Content-Length is wrong and must go (RFC 9112 §6.3).
        let stale_length = s.chunked.is_some() && name.eq_ignore_ascii_case(b"content-length");
        let protocol = switched && name.eq_ignore_ascii_case(b"upgrade");
        if (is_hop_by_hop(name) || rule.names(name) || stale_length) && !protocol {
            continue;
        }
        let name = HeaderName::from_bytes(name).map_err(|e| WireError::Head(e.to_string()))?;
        let value = HeaderValue::from_maybe_shared(bytes.slice(v..v + vl))
            .map_err(|e| WireError::Head(e.to_string()))?;
        headers.append(name, value);
    }
    let head = ResponseHead {
        status: StatusCode::from_u16(s.code)
            .map_err(|_| WireError::Head(format!("status {}", s.code)))?,
        version: if s.http11 {
            Version::HTTP_11
        } else {
            Version::HTTP_10
        },
        headers,
        framing: s.framing,
        keep_alive: s.keep_alive,
        reframed: s.reframed,
    };
    Ok(Some((head, s.interim, trailer)))
}

// ---------------------------------------------------------------------------------------
// Chunked bodies

/// Where a chunked body's decoder stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChunkState {
    Size,
    Data(u64),
    DataEnd,
    Trailers(usize),
    Done,
}

/// One step of the decoder over the front of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// The first `n` bytes are framing: drop them.
    Framing(usize),
    /// The first `n` bytes are body data: take or drop them.
    Data(usize),
    /// Nothing more can be decoded until more bytes arrive (or the body is done).
    Wait,
}

/// Decodes a chunked body as its bytes arrive. [`ChunkedDecoder::decode`] keeps the
/// trailer section's lines (at most 16 KiB) for [`ChunkedDecoder::take_trailers`];
/// [`ChunkedDecoder::skip`] drops them.
#[derive(Debug, Clone)]
pub struct ChunkedDecoder {
    state: ChunkState,
    /// The raw trailer lines `decode` read, CRLF included.
    trailers: Vec<u8>,
}

impl Default for ChunkedDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl ChunkedDecoder {
    /// A decoder at the start of a body.
    pub fn new() -> Self {
        Self {
            state: ChunkState::Size,
            trailers: Vec::new(),
        }
    }

    /// The last chunk and the trailers have been read.
    pub fn is_done(&self) -> bool {
        self.state == ChunkState::Done
    }

    /// The trailer fields [`ChunkedDecoder::decode`] read, once the body is done; `None`
    /// when there were none (or a line does not parse as a field, which is then dropped
    /// as before). Hop-by-hop names are left out, as in a head.
    pub fn take_trailers(&mut self) -> Option<HeaderMap> {
        if !self.is_done() || self.trailers.is_empty() {
            return None;
        }
        let mut raw = std::mem::take(&mut self.trailers);
        raw.extend_from_slice(b"\r\n");
        // A slot per line: trailers are bounded by MAX_TRAILERS bytes, never by a count.
        let lines = raw.iter().filter(|&&b| b == b'\n').count();
        let mut slots = vec![httparse::EMPTY_HEADER; lines];
        let httparse::Status::Complete((_, fields)) =
            httparse::parse_headers(&raw, &mut slots).ok()?
        else {
            return None;
        };
        let mut map = HeaderMap::with_capacity(fields.len());
        for f in fields {
            if is_hop_by_hop(f.name.as_bytes()) {
                continue;
            }
            if let (Ok(name), Ok(value)) = (
                HeaderName::from_bytes(f.name.as_bytes()),
                HeaderValue::from_bytes(f.value),
            ) {
                map.append(name, value);
            }
        }
        (!map.is_empty()).then_some(map)
    }

    /// The next piece of body data in `buf`, consumed; `Ok(None)` when `buf` holds no
    /// more (read more, unless [`ChunkedDecoder::is_done`]).
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Bytes>, WireError> {
        loop {
            let trailer = matches!(self.state, ChunkState::Trailers(_));
            match self.step(buf)? {
                Step::Framing(n) => {
                    // A trailer line (the empty line that ends them is 2 bytes); their
                    // total is bounded by MAX_TRAILERS in `step`.
                    if trailer && n > 2 {
                        self.trailers.extend_from_slice(&buf[..n]);
                    }
                    buf.advance(n)
                }
                Step::Data(n) => return Ok(Some(buf.split_to(n).freeze())),
                Step::Wait => return Ok(None),
            }
        }
    }

    /// Consumes as much of the body in `buf` as is there, keeping nothing; returns the
    /// number of data bytes dropped. The load generator's path: no `Bytes` made.
    pub fn skip(&mut self, buf: &mut BytesMut) -> Result<u64, WireError> {
        let mut data = 0u64;
        loop {
            match self.step(buf)? {
                Step::Framing(n) => buf.advance(n),
                Step::Data(n) => {
                    data += n as u64;
                    buf.advance(n);
                }
                Step::Wait => return Ok(data),
            }
        }
    }

    /// Decides what the front of `buf` is; the state moves on as if the caller consumes
    /// what the step names.
    fn step(&mut self, buf: &[u8]) -> Result<Step, WireError> {
        match self.state {
            ChunkState::Size => {
                let Some(end) = line_end(buf) else {
                    return if buf.len() > MAX_CHUNK_LINE {
                        Err(WireError::Chunked("chunk-size line too long"))
                    } else {
                        Ok(Step::Wait)
                    };
                };
                let digits = buf[..end]
                    .split(|&b| b == b';')
                    .next()
                    .unwrap_or_default()
                    .trim_ascii();
                if digits.is_empty() || digits.len() > 15 {
                    return Err(WireError::Chunked("bad chunk size"));
                }
                let size = std::str::from_utf8(digits)
                    .ok()
                    .filter(|d| d.bytes().all(|b| b.is_ascii_hexdigit()))
                    .and_then(|d| u64::from_str_radix(d, 16).ok())
                    .ok_or(WireError::Chunked("bad chunk size"))?;
                self.state = if size == 0 {
                    ChunkState::Trailers(0)
                } else {
                    ChunkState::Data(size)
                };
                Ok(Step::Framing(end + 2))
            }
            ChunkState::Data(left) => {
                if buf.is_empty() {
                    return Ok(Step::Wait);
                }
                let n = (buf.len() as u64).min(left) as usize;
                self.state = match left - n as u64 {
                    0 => ChunkState::DataEnd,
                    rest => ChunkState::Data(rest),
                };
                Ok(Step::Data(n))
            }
            ChunkState::DataEnd => {
                if buf.len() < 2 {
                    return Ok(Step::Wait);
                }
                if &buf[..2] != b"\r\n" {
                    return Err(WireError::Chunked("no CRLF after chunk data"));
                }
                self.state = ChunkState::Size;
                Ok(Step::Framing(2))
            }
            ChunkState::Trailers(seen) => {
                let Some(end) = line_end(buf) else {
                    return if seen + buf.len() > MAX_TRAILERS {
                        Err(WireError::Chunked("trailers too large"))
                    } else {
                        Ok(Step::Wait)
                    };
                };
                if seen + end > MAX_TRAILERS {
                    return Err(WireError::Chunked("trailers too large"));
                }
                self.state = if end == 0 {
                    ChunkState::Done
                } else {
                    ChunkState::Trailers(seen + end + 2)
                };
                Ok(Step::Framing(end + 2))
            }
            ChunkState::Done => Ok(Step::Wait),
        }
    }
}

/// The index of the first CRLF in `buf`.
fn line_end(buf: &[u8]) -> Option<usize> {
    buf.windows(2).position(|w| w == b"\r\n")
}

#[cfg(test)]
#[path = "wire_tests.rs"]
mod tests;
