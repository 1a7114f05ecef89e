//! HTTP/1.1 on the wire to the workers (RFC 9112): the request head the proxy writes,
//! with the proxy's duties of RFC 9110 §7.6 (hop-by-hop headers dropped,
//! `X-Forwarded-For`, `X-Forwarded-Proto`, `Via`); the response head it reads, with the
//! hop-by-hop headers left out; and the response body's framing, including a chunked
//! decoder.
//!
//! Why not hyper's client connection (used before, measured in docs/serve.md): its
//! connection task, the channels to it and the body channel cost about as much CPU per
//! proxied request as everything else the balancer does in user space. Here one
//! request task writes the head from the client's `HeaderMap` straight into a reused
//! buffer and parses the answer with `httparse` (hyper's own parser), so the proxy
//! copies no header map and hands nothing between tasks. The client side stays hyper.
//!
//! This module does no I/O; `upstream` does.

use std::net::SocketAddr;

use bytes::{Buf, Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, StatusCode};

/// The largest response head read from a worker. The limit is in bytes only: any number
/// of headers fits in it (as with curl's and hyper's clients).
pub(crate) const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Header slots on the stack for the common case; a head with more is parsed again with
/// as many slots, on the heap, as it has lines.
const STACK_HEADERS: usize = 128;
/// The longest chunk-size line (with extensions) or trailer section accepted.
const MAX_CHUNK_LINE: usize = 4096;
const MAX_TRAILERS: usize = 16 * 1024;

/// A malformed or unsupported answer from a worker.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum WireError {
    /// The response head does not parse.
    #[error("malformed response head: {0}")]
    Head(String),
    /// The response head is over [`MAX_HEAD_BYTES`].
    #[error("response head over {MAX_HEAD_BYTES} bytes")]
    HeadTooLarge,
    /// A `101 Switching Protocols` to a request that asked for no upgrade.
    #[error("the worker switched protocols (101) unasked")]
    Upgrade,
    /// `Content-Length` is not a number, or several disagree.
    #[error("invalid Content-Length")]
    ContentLength,
    /// The chunked body does not parse.
    #[error("malformed chunked body: {0}")]
    Chunked(&'static str),
}

/// The client's request as the proxy forwards it.
#[derive(Debug)]
pub(crate) struct Outgoing<'a> {
    pub(crate) method: &'a Method,
    /// Origin form: `/path?query`.
    pub(crate) target: &'a str,
    /// The client's headers, as received: hop-by-hop ones are left out on the way.
    pub(crate) headers: &'a HeaderMap,
    /// Appended to `X-Forwarded-For`.
    pub(crate) client_ip: &'a str,
    /// The whole body (bodies are buffered, so a failed attempt can be sent again).
    pub(crate) body: &'a Bytes,
    /// The client is a trusted proxy: its `X-Forwarded-*` and `Forwarded` headers are
    /// kept (and its `X-Forwarded-For` extended). Any other client's are replaced, so no
    /// client can claim another address or `https`.
    pub(crate) trusted: bool,
    /// The client's connection to the balancer is TLS: `X-Forwarded-Proto: https`.
    pub(crate) https: bool,
    /// The client asked to switch to this protocol (`Upgrade`, with `Connection:
    /// upgrade`): the two headers go to the worker instead of being dropped.
    pub(crate) upgrade: Option<&'a HeaderValue>,
}

/// Is `name` one of the headers that describe one connection, never forwarded: the
/// toolkit's one list (`scalpel_http::HOP_BY_HOP`, RFC 9110 §7.6.1), plus
/// `Proxy-Authorization`, meant for this proxy alone (RFC 9110 §11.7.2).
fn hop_by_hop(name: &[u8]) -> bool {
    scalpel_http::is_hop_by_hop(name) || name.eq_ignore_ascii_case(b"proxy-authorization")
}

/// The header names listed in `Connection` values: hop-by-hop too.
fn connection_named<'v>(values: impl Iterator<Item = &'v [u8]>) -> Vec<&'v [u8]> {
    values
        .flat_map(|v| v.split(|&b| b == b','))
        .map(<[u8]>::trim_ascii)
        .filter(|n| !n.is_empty())
        .collect()
}

/// Headers that carry what a proxy in front saw (the client's address, scheme, host):
/// believed only from a trusted proxy.
fn forwarding(name: &[u8]) -> bool {
    const NAMES: [&[u8]; 6] = [
        b"x-forwarded-for",
        b"x-forwarded-proto",
        b"x-forwarded-host",
        b"x-forwarded-port",
        b"forwarded",
        b"x-real-ip",
    ];
    listed(&NAMES, name)
}

fn listed(names: &[&[u8]], name: &[u8]) -> bool {
    names.iter().any(|n| n.eq_ignore_ascii_case(name))
}

/// Writes the request head (and nothing of the body) into `out`. `worker` is the
/// `Host` for an HTTP/1.0 client that sent none.
pub(crate) fn encode_request(req: &Outgoing<'_>, worker: SocketAddr, out: &mut Vec<u8>) {
    let h = req.headers;
    let named = if h.contains_key(header::CONNECTION) {
        connection_named(h.get_all(header::CONNECTION).iter().map(|v| v.as_bytes()))
    } else {
        Vec::new()
    };
    out.extend_from_slice(req.method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(req.target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    let (mut host, mut proto) = (false, false);
    let mut xff: Option<Vec<u8>> = None;
    for (name, value) in h {
        if *name == header::HOST {
            host = true;
        } else if *name == header::CONTENT_LENGTH || *name == header::EXPECT {
            // The length is this proxy's own (the body was read whole, so an `Expect`
            // was answered already).
            continue;
        } else if !req.trusted && forwarding(name.as_str().as_bytes()) {
            // A client's claim about itself: replaced below.
            continue;
        } else if *name == "x-forwarded-for" {
            let list = xff.get_or_insert_with(Vec::new);
            if !list.is_empty() {
                list.extend_from_slice(b", ");
            }
            list.extend_from_slice(value.as_bytes());
            continue;
        } else if *name == "x-forwarded-proto" {
            proto = true;
        } else if hop_by_hop(name.as_str().as_bytes())
            || (!named.is_empty() && listed(&named, name.as_str().as_bytes()))
        {
            continue;
        }
        header_line(out, name.as_str().as_bytes(), value.as_bytes());
    }
    if !host {
        out.extend_from_slice(b"host: ");
        out.extend_from_slice(worker.to_string().as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"x-forwarded-for: ");
    if let Some(prev) = xff.filter(|p| !p.is_empty()) {
        out.extend_from_slice(&prev);
        out.extend_from_slice(b", ");
    }
    out.extend_from_slice(req.client_ip.as_bytes());
    out.extend_from_slice(b"\r\n");
    if !proto {
        out.extend_from_slice(if req.https {
            b"x-forwarded-proto: https\r\n"
        } else {
            b"x-forwarded-proto: http\r\n"
        });
    }
    out.extend_from_slice(b"via: 1.1 scalpel\r\n");
    if let Some(protocol) = req.upgrade {
        out.extend_from_slice(b"connection: upgrade\r\n");
        header_line(out, b"upgrade", protocol.as_bytes());
    }
    let needs_length = matches!(*req.method, Method::POST | Method::PUT | Method::PATCH);
    if !req.body.is_empty() || needs_length {
        out.extend_from_slice(b"content-length: ");
        out.extend_from_slice(req.body.len().to_string().as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

fn header_line(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// How a response body is delimited (RFC 9112 §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// No body: a `HEAD` request, or a 204 or 304.
    Empty,
    /// `Content-Length` bytes.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// Until the worker closes the connection.
    Close,
}

/// A worker's response head, hop-by-hop headers left out.
#[derive(Debug)]
pub(crate) struct Head {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) framing: Framing,
    /// The connection may carry another request once the body has ended.
    pub(crate) keep_alive: bool,
}

/// Parses the response head at the start of `buf` and consumes it; `Ok(None)` when it
/// is not all there yet. Interim (1xx) responses are consumed and skipped. `head` says
/// the request was a `HEAD`; `upgrade` that it asked for an upgrade, so a 101 is the
/// answer (its `Upgrade` header kept, no body: the connection is the worker's protocol
/// from then on).
pub(crate) fn parse_response(
    buf: &mut BytesMut,
    head: bool,
    upgrade: bool,
) -> Result<Option<Head>, WireError> {
    loop {
        // Where each header's name and value sit in the head, so the values can point
        // into the head's bytes once httparse lets go of `buf`: no copy per header.
        let mut stack_spans = [(0usize, 0usize, 0usize, 0usize); STACK_HEADERS];
        let mut heap_spans = Vec::new();
        let parsed = {
            let mut slots = [httparse::EMPTY_HEADER; STACK_HEADERS];
            match parse_head(buf, &mut slots, &mut stack_spans)? {
                Parsed::TooManyHeaders => {
                    // As many slots as the head can have lines: the limit is in bytes.
                    let lines = buf[..buf.len().min(MAX_HEAD_BYTES)]
                        .iter()
                        .filter(|&&b| b == b'\n')
                        .count()
                        + 1;
                    let mut slots = vec![httparse::EMPTY_HEADER; lines];
                    heap_spans = vec![(0, 0, 0, 0); lines];
                    parse_head(buf, &mut slots, &mut heap_spans)?
                }
                p => p,
            }
        };
        let (len, code, http11, count) = match parsed {
            Parsed::Complete {
                len,
                code,
                http11,
                count,
            } => (len, code, http11, count),
            Parsed::Partial => return Ok(None),
            Parsed::TooManyHeaders => return Err(WireError::HeadTooLarge),
        };
        let spans = if heap_spans.is_empty() {
            &stack_spans[..]
        } else {
            &heap_spans[..]
        };
        let switched = code == 101;
        if switched && !upgrade {
            return Err(WireError::Upgrade);
        }
        if (100..200).contains(&code) && !switched {
            buf.advance(len);
            continue;
        }
        let status =
            StatusCode::from_u16(code).map_err(|_| WireError::Head(format!("status {code}")))?;
        let bytes = buf.split_to(len).freeze();
        let headers = spans[..count]
            .iter()
            .map(|&(n, nl, v, vl)| (&bytes[n..n + nl], v..v + vl));
        let mut conn_values = Vec::new();
        let mut chunked = None;
        let mut length: Option<u64> = None;
        let mut has_length = false;
        for (name, value) in headers.clone() {
            let value = &bytes[value];
            if name.eq_ignore_ascii_case(b"connection") {
                conn_values.push(value);
            } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
                // The last coding decides (RFC 9112 §6.3): chunked or read until close.
                let last = value.rsplit(|&b| b == b',').next().unwrap_or_default();
                chunked = Some(last.trim_ascii().eq_ignore_ascii_case(b"chunked"));
            } else if name.eq_ignore_ascii_case(b"content-length") {
                let n = std::str::from_utf8(value)
                    .ok()
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .ok_or(WireError::ContentLength)?;
                if length.is_some_and(|l| l != n) {
                    return Err(WireError::ContentLength);
                }
                length = Some(n);
                has_length = true;
            }
        }
        let named = connection_named(conn_values.iter().copied());
        let close = listed(&named, b"close");
        let framing = if head || switched || code == 204 || code == 304 {
            Framing::Empty
        } else {
            match (chunked, length) {
                (Some(true), _) => Framing::Chunked,
                (Some(false), _) => Framing::Close,
                (None, Some(n)) => Framing::Length(n),
                (None, None) => Framing::Close,
            }
        };
        // Both Transfer-Encoding and Content-Length: the body is re-framed, but the
        // connection is not reused (RFC 9112 §6.3: a sender that does this may be trying
        // to smuggle a second response past a proxy).
        let ambiguous = chunked.is_some() && has_length;
        let keep_alive = framing != Framing::Close
            && !switched
            && !ambiguous
            && if http11 {
                !close
            } else {
                listed(&named, b"keep-alive")
            };
        let mut map = HeaderMap::with_capacity(count);
        for (name, value) in headers {
            // With Transfer-Encoding, a Content-Length is wrong and must go (RFC 9112
            // §6.3): the body is re-framed on the way out.
            let stale_length = chunked.is_some() && name.eq_ignore_ascii_case(b"content-length");
            let protocol = switched && name.eq_ignore_ascii_case(b"upgrade");
            if (hop_by_hop(name) || listed(&named, name) || stale_length) && !protocol {
                continue;
            }
            let name = HeaderName::from_bytes(name).map_err(|e| WireError::Head(e.to_string()))?;
            let value = HeaderValue::from_maybe_shared(bytes.slice(value))
                .map_err(|e| WireError::Head(e.to_string()))?;
            map.append(name, value);
        }
        return Ok(Some(Head {
            status,
            headers: map,
            framing,
            keep_alive,
        }));
    }
}

type Span = (usize, usize, usize, usize);

enum Parsed {
    Complete {
        len: usize,
        code: u16,
        http11: bool,
        count: usize,
    },
    Partial,
    TooManyHeaders,
}

/// One httparse pass over `buf` with `slots`, the headers' positions written to `spans`.
fn parse_head<'b>(
    buf: &'b [u8],
    slots: &mut [httparse::Header<'b>],
    spans: &mut [Span],
) -> Result<Parsed, WireError> {
    let mut res = httparse::Response::new(slots);
    let len = match res.parse(buf) {
        Ok(httparse::Status::Complete(n)) if n > MAX_HEAD_BYTES => {
            return Err(WireError::HeadTooLarge);
        }
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() >= MAX_HEAD_BYTES => {
            return Err(WireError::HeadTooLarge);
        }
        Ok(httparse::Status::Partial) => return Ok(Parsed::Partial),
        Err(httparse::Error::TooManyHeaders) => return Ok(Parsed::TooManyHeaders),
        Err(e) => return Err(WireError::Head(e.to_string())),
    };
    let base = buf.as_ptr() as usize;
    for (span, h) in spans.iter_mut().zip(res.headers.iter()) {
        let name = h.name.as_ptr() as usize - base;
        let value = h.value.as_ptr() as usize - base;
        *span = (name, h.name.len(), value, h.value.len());
    }
    Ok(Parsed::Complete {
        len,
        code: res.code.unwrap_or(0),
        http11: res.version == Some(1),
        count: res.headers.len(),
    })
}

/// Where a chunked body's decoder stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChunkState {
    Size,
    Data(u64),
    DataEnd,
    Trailers(usize),
    Done,
}

/// Decodes a chunked body from a buffer, as its bytes arrive.
#[derive(Debug)]
pub(crate) struct Chunked(ChunkState);

impl Chunked {
    pub(crate) fn new() -> Self {
        Self(ChunkState::Size)
    }

    /// The last chunk and the trailers have been read.
    pub(crate) fn is_done(&self) -> bool {
        self.0 == ChunkState::Done
    }

    /// The next piece of body data in `buf`, consumed; `Ok(None)` when `buf` holds no
    /// more (read more, unless [`Chunked::is_done`]). Trailers are read and dropped.
    pub(crate) fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Bytes>, WireError> {
        loop {
            match self.0 {
                ChunkState::Size => {
                    let Some(end) = line_end(buf) else {
                        return if buf.len() > MAX_CHUNK_LINE {
                            Err(WireError::Chunked("chunk-size line too long"))
                        } else {
                            Ok(None)
                        };
                    };
                    let line = &buf[..end];
                    let digits = line
                        .split(|&b| b == b';')
                        .next()
                        .unwrap_or_default()
                        .trim_ascii();
                    if digits.is_empty() || digits.len() > 15 {
                        return Err(WireError::Chunked("bad chunk size"));
                    }
                    let size = std::str::from_utf8(digits)
                        .ok()
                        .and_then(|d| u64::from_str_radix(d, 16).ok())
                        .ok_or(WireError::Chunked("bad chunk size"))?;
                    buf.advance(end + 2);
                    self.0 = if size == 0 {
                        ChunkState::Trailers(0)
                    } else {
                        ChunkState::Data(size)
                    };
                }
                ChunkState::Data(left) => {
                    if buf.is_empty() {
                        return Ok(None);
                    }
                    let n = (buf.len() as u64).min(left) as usize;
                    let data = buf.split_to(n).freeze();
                    self.0 = match left - n as u64 {
                        0 => ChunkState::DataEnd,
                        rest => ChunkState::Data(rest),
                    };
                    return Ok(Some(data));
                }
                ChunkState::DataEnd => {
                    if buf.len() < 2 {
                        return Ok(None);
                    }
                    if &buf[..2] != b"\r\n" {
                        return Err(WireError::Chunked("no CRLF after chunk data"));
                    }
                    buf.advance(2);
                    self.0 = ChunkState::Size;
                }
                ChunkState::Trailers(seen) => {
                    let Some(end) = line_end(buf) else {
                        return if seen + buf.len() > MAX_TRAILERS {
                            Err(WireError::Chunked("trailers too large"))
                        } else {
                            Ok(None)
                        };
                    };
                    buf.advance(end + 2);
                    self.0 = if end == 0 {
                        ChunkState::Done
                    } else {
                        ChunkState::Trailers(seen + end + 2)
                    };
                }
                ChunkState::Done => return Ok(None),
            }
        }
    }
}

/// The index of the first CRLF in `buf`.
fn line_end(buf: &[u8]) -> Option<usize> {
    buf.windows(2).position(|w| w == b"\r\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(method: Method, headers: &[(&str, &str)], body: &'static [u8]) -> String {
        let mut map = HeaderMap::new();
        for (k, v) in headers {
            map.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        let body = Bytes::from_static(body);
        let req = Outgoing {
            method: &method,
            target: "/a?b=1",
            headers: &map,
            client_ip: "10.0.0.7",
            body: &body,
            upgrade: None,
            trusted: true,
            https: false,
        };
        let mut out = Vec::new();
        encode_request(&req, "127.0.0.1:3001".parse().unwrap(), &mut out);
        String::from_utf8(out).unwrap()
    }

    /// What the worker sees, parsed back by httparse (an independent parser).
    fn parsed(head: &str) -> (String, String, Vec<(String, String)>) {
        let mut slots = [httparse::EMPTY_HEADER; 32];
        let mut req = httparse::Request::new(&mut slots);
        let n = req.parse(head.as_bytes()).unwrap();
        assert_eq!(
            n,
            httparse::Status::Complete(head.len()),
            "one complete head"
        );
        let hs = req
            .headers
            .iter()
            .map(|h| {
                (
                    h.name.to_string(),
                    String::from_utf8_lossy(h.value).to_string(),
                )
            })
            .collect();
        (req.method.unwrap().into(), req.path.unwrap().into(), hs)
    }

    fn get<'a>(hs: &'a [(String, String)], name: &str) -> Vec<&'a str> {
        hs.iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }

    #[test]
    fn request_heads_carry_the_proxy_headers_and_drop_hop_by_hop_ones() {
        let head = encode(
            Method::GET,
            &[
                ("host", "example.test"),
                ("connection", "keep-alive, X-Secret"),
                ("keep-alive", "timeout=5"),
                ("x-secret", "s"),
                ("te", "trailers"),
                ("upgrade", "websocket"),
                ("proxy-authorization", "Basic x"),
                ("x-forwarded-for", "1.1.1.1"),
                ("x-forwarded-for", "2.2.2.2"),
                ("accept", "*/*"),
                ("via", "1.0 edge"),
            ],
            b"",
        );
        let (method, path, hs) = parsed(&head);
        assert_eq!((method.as_str(), path.as_str()), ("GET", "/a?b=1"));
        for gone in [
            "connection",
            "keep-alive",
            "x-secret",
            "te",
            "upgrade",
            "proxy-authorization",
            "content-length",
        ] {
            assert!(
                get(&hs, gone).is_empty(),
                "{gone} must not be forwarded: {head}"
            );
        }
        assert_eq!(get(&hs, "host"), ["example.test"]);
        assert_eq!(get(&hs, "x-forwarded-for"), ["1.1.1.1, 2.2.2.2, 10.0.0.7"]);
        assert_eq!(get(&hs, "x-forwarded-proto"), ["http"]);
        assert_eq!(get(&hs, "via"), ["1.0 edge", "1.1 scalpel"]);
        assert_eq!(get(&hs, "accept"), ["*/*"]);
    }

    /// A client that is not a trusted proxy cannot claim another address, scheme or
    /// host: its forwarding headers are replaced by what the balancer saw.
    #[test]
    fn an_untrusted_clients_forwarding_headers_are_replaced() {
        let mut map = HeaderMap::new();
        for (k, v) in [
            ("x-forwarded-for", "6.6.6.6"),
            ("x-forwarded-proto", "https"),
            ("x-forwarded-host", "bank.example"),
            ("x-forwarded-port", "443"),
            ("forwarded", "for=6.6.6.6;proto=https"),
            ("x-real-ip", "6.6.6.6"),
            ("accept", "*/*"),
        ] {
            map.append(HeaderName::from_static(k), HeaderValue::from_static(v));
        }
        let body = Bytes::new();
        let mut req = Outgoing {
            method: &Method::GET,
            target: "/",
            headers: &map,
            client_ip: "10.0.0.7",
            body: &body,
            upgrade: None,
            trusted: false,
            https: false,
        };
        let mut out = Vec::new();
        encode_request(&req, "127.0.0.1:3001".parse().unwrap(), &mut out);
        let head = String::from_utf8(out).unwrap();
        let (_, _, hs) = parsed(&head);
        assert_eq!(get(&hs, "x-forwarded-for"), ["10.0.0.7"], "{head}");
        assert_eq!(get(&hs, "x-forwarded-proto"), ["http"], "{head}");
        for gone in [
            "x-forwarded-host",
            "x-forwarded-port",
            "forwarded",
            "x-real-ip",
        ] {
            assert!(get(&hs, gone).is_empty(), "{gone} kept: {head}");
        }
        assert_eq!(get(&hs, "accept"), ["*/*"]);
        // From a trusted proxy they stand, and its client's address is extended.
        req.trusted = true;
        let mut out = Vec::new();
        encode_request(&req, "127.0.0.1:3001".parse().unwrap(), &mut out);
        let head = String::from_utf8(out).unwrap();
        let (_, _, hs) = parsed(&head);
        assert_eq!(get(&hs, "x-forwarded-for"), ["6.6.6.6, 10.0.0.7"]);
        assert_eq!(get(&hs, "x-forwarded-proto"), ["https"]);
        assert_eq!(get(&hs, "forwarded"), ["for=6.6.6.6;proto=https"]);
    }

    /// The response head limit is in bytes: 300 headers in 6 KiB are fine (a fixed
    /// count of 128 made this a 502, and the request was then sent again).
    #[test]
    fn many_response_headers_within_the_byte_limit_parse() {
        let mut raw = String::from("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n");
        for i in 0..300 {
            raw.push_str(&format!("x-h{i}: {i}\r\n"));
        }
        raw.push_str("\r\nok");
        let (r, rest) = response(&raw, false);
        let h = r.unwrap().unwrap();
        assert_eq!(h.headers.len(), 301);
        assert_eq!(h.headers["x-h299"], "299");
        assert_eq!(&rest[..], b"ok");
        // Over the byte limit, however few headers.
        let big = format!(
            "HTTP/1.1 200 OK\r\nX-Big: {}\r\n\r\n",
            "a".repeat(MAX_HEAD_BYTES)
        );
        let (r, _) = response(&big, false);
        assert_eq!(r.unwrap_err(), WireError::HeadTooLarge);
    }

    /// Both Transfer-Encoding and Content-Length: the body is framed by the chunks and
    /// the length dropped, and the connection is not reused (RFC 9112 §6.3).
    #[test]
    fn a_response_with_both_framings_closes_its_connection() {
        let (r, _) = response(
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
            false,
        );
        let h = r.unwrap().unwrap();
        assert_eq!(h.framing, Framing::Chunked);
        assert!(h.headers.get("content-length").is_none());
        assert!(
            !h.keep_alive,
            "a connection with an ambiguous framing went back to the pool"
        );
        let (r, _) = response(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            false,
        );
        assert!(r.unwrap().unwrap().keep_alive);
    }

    #[test]
    fn request_heads_get_a_host_and_their_own_length() {
        let head = encode(
            Method::POST,
            &[
                ("content-length", "999"),
                ("expect", "100-continue"),
                ("x-forwarded-proto", "https"),
            ],
            b"hello",
        );
        let (_, _, hs) = parsed(&head);
        assert_eq!(get(&hs, "host"), ["127.0.0.1:3001"]);
        assert_eq!(get(&hs, "content-length"), ["5"]);
        assert!(get(&hs, "expect").is_empty());
        assert_eq!(get(&hs, "x-forwarded-proto"), ["https"]);
        assert_eq!(get(&hs, "x-forwarded-for"), ["10.0.0.7"]);
        let empty_post = encode(Method::POST, &[], b"");
        assert_eq!(get(&parsed(&empty_post).2, "content-length"), ["0"]);
        let get_req = encode(Method::GET, &[], b"");
        assert!(get(&parsed(&get_req).2, "content-length").is_empty());
    }

    #[test]
    fn upgrades_carry_their_two_headers_and_a_101_is_their_answer() {
        let mut map = HeaderMap::new();
        map.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
        map.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        map.insert(
            "sec-websocket-key",
            HeaderValue::from_static("dGhlIHNhbXBsZSBub25jZQ=="),
        );
        let body = Bytes::new();
        let protocol = HeaderValue::from_static("websocket");
        let req = Outgoing {
            method: &Method::GET,
            target: "/ws",
            headers: &map,
            client_ip: "10.0.0.7",
            body: &body,
            upgrade: Some(&protocol),
            trusted: true,
            https: false,
        };
        let mut out = Vec::new();
        encode_request(&req, "127.0.0.1:3001".parse().unwrap(), &mut out);
        let head = String::from_utf8(out).unwrap();
        let (_, _, hs) = parsed(&head);
        assert_eq!(get(&hs, "connection"), ["upgrade"], "{head}");
        assert_eq!(get(&hs, "upgrade"), ["websocket"]);
        assert_eq!(get(&hs, "sec-websocket-key"), ["dGhlIHNhbXBsZSBub25jZQ=="]);

        let raw = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n\x01\x02hi";
        let mut buf = BytesMut::from(raw);
        let h = parse_response(&mut buf, false, true).unwrap().unwrap();
        assert_eq!(h.status, StatusCode::SWITCHING_PROTOCOLS);
        assert_eq!((h.framing, h.keep_alive), (Framing::Empty, false));
        assert_eq!(h.headers["upgrade"], "websocket");
        assert!(h.headers.get("connection").is_none());
        assert_eq!(
            h.headers["sec-websocket-accept"],
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
        assert_eq!(&buf[..], b"\x01\x02hi", "the new protocol's bytes stay");
        // Declined: an ordinary answer.
        let mut buf = BytesMut::from("HTTP/1.1 426 Upgrade Required\r\nContent-Length: 0\r\n\r\n");
        let h = parse_response(&mut buf, false, true).unwrap().unwrap();
        assert_eq!((h.status.as_u16(), h.keep_alive), (426, true));
    }

    fn response(raw: &str, head: bool) -> (Result<Option<Head>, WireError>, BytesMut) {
        let mut buf = BytesMut::from(raw);
        let r = parse_response(&mut buf, head, false);
        (r, buf)
    }

    #[test]
    fn response_heads_frame_the_body() {
        let (r, rest) = response(
            "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nX-A: 1\r\n\r\nabc",
            false,
        );
        let h = r.unwrap().unwrap();
        assert_eq!(
            (h.status, h.framing, h.keep_alive),
            (StatusCode::OK, Framing::Length(3), true)
        );
        assert_eq!(h.headers["x-a"], "1");
        assert_eq!(h.headers["content-length"], "3");
        assert_eq!(&rest[..], b"abc", "the head is consumed, the body left");

        let (r, _) = response(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\nContent-Length: 9\r\n\r\n",
            false,
        );
        let h = r.unwrap().unwrap();
        assert_eq!(h.framing, Framing::Chunked);
        assert!(h.headers.get("transfer-encoding").is_none());
        assert!(
            h.headers.get("content-length").is_none(),
            "chunked wins, the length goes"
        );

        let (r, _) = response("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n", true);
        assert_eq!(r.unwrap().unwrap().framing, Framing::Empty, "HEAD");
        let (r, _) = response(
            "HTTP/1.1 304 Not Modified\r\nContent-Length: 3\r\n\r\n",
            false,
        );
        assert_eq!(r.unwrap().unwrap().framing, Framing::Empty);

        let (r, _) = response("HTTP/1.1 200 OK\r\n\r\nuntil close", false);
        let h = r.unwrap().unwrap();
        assert_eq!((h.framing, h.keep_alive), (Framing::Close, false));

        let (r, _) = response(
            "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close, X-Drop\r\nX-Drop: 1\r\nKeep-Alive: timeout=5\r\n\r\n",
            false,
        );
        let h = r.unwrap().unwrap();
        assert!(!h.keep_alive);
        assert!(h.headers.get("x-drop").is_none() && h.headers.get("connection").is_none());
        assert!(h.headers.get("keep-alive").is_none());

        let (r, _) = response("HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", false);
        assert!(
            !r.unwrap().unwrap().keep_alive,
            "HTTP/1.0 without keep-alive"
        );
        let (r, _) = response(
            "HTTP/1.0 200 OK\r\nContent-Length: 0\r\nConnection: keep-alive\r\n\r\n",
            false,
        );
        assert!(r.unwrap().unwrap().keep_alive);
    }

    #[test]
    fn response_heads_skip_interim_answers_and_reject_bad_ones() {
        let (r, _) = response(
            "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n",
            false,
        );
        assert_eq!(r.unwrap().unwrap().status, StatusCode::CREATED);
        let (r, _) = response("HTTP/1.1 200 OK\r\nContent-Len", false);
        assert!(r.unwrap().is_none(), "incomplete");
        let (r, _) = response("HTTP/1.1 101 Switching Protocols\r\n\r\n", false);
        assert_eq!(r.unwrap_err(), WireError::Upgrade);
        let (r, _) = response(
            "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
            false,
        );
        assert_eq!(r.unwrap_err(), WireError::ContentLength);
        let (r, _) = response("HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", false);
        assert_eq!(r.unwrap_err(), WireError::ContentLength);
        let (r, _) = response("HTTP/1.1 2000 OK\r\n\r\n", false);
        assert!(matches!(r.unwrap_err(), WireError::Head(_)));
        let big = format!("HTTP/1.1 200 OK\r\nX-Big: {}", "a".repeat(MAX_HEAD_BYTES));
        let (r, _) = response(&big, false);
        assert_eq!(r.unwrap_err(), WireError::HeadTooLarge);
    }

    #[test]
    fn chunked_bodies_decode_across_any_split() {
        let wire = b"5;ext=1\r\nhello\r\n7\r\n, world\r\n0\r\nX-Trailer: t\r\n\r\nNEXT";
        // Every split point of the input, fed in two parts.
        for cut in 0..wire.len() {
            let mut dec = Chunked::new();
            let mut buf = BytesMut::from(&wire[..cut]);
            let mut out = Vec::new();
            while let Some(d) = dec.decode(&mut buf).unwrap() {
                out.extend_from_slice(&d);
            }
            buf.extend_from_slice(&wire[cut..]);
            while let Some(d) = dec.decode(&mut buf).unwrap() {
                out.extend_from_slice(&d);
            }
            assert!(dec.is_done(), "cut at {cut}");
            assert_eq!(out, b"hello, world", "cut at {cut}");
            assert_eq!(&buf[..], b"NEXT", "bytes after the body stay");
        }
    }

    /// Whatever a worker sends, parsing answers Ok or Err — never a panic — and never
    /// consumes more than it was given. Inputs: mutations of valid heads and chunked
    /// bodies (bytes replaced, cut, duplicated), from a fixed seed.
    #[test]
    fn arbitrary_worker_bytes_never_panic() {
        let seeds: [&[u8]; 3] = [
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close, x\r\nTransfer-Encoding: chunked\r\n\r\nhello",
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: ws\r\n\r\n",
            b"5;a=b\r\nhello\r\n0\r\nT: 1\r\n\r\n",
        ];
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..20_000 {
            let mut input = seeds[(next() % 3) as usize].to_vec();
            for _ in 0..(next() % 6) {
                let at = (next() as usize) % (input.len() + 1);
                match next() % 4 {
                    0 if at < input.len() => input[at] = next() as u8,
                    1 => input.truncate(at),
                    2 => input.insert(
                        at.min(input.len()),
                        b"\r\n:;0 \x00\xff"[(next() % 8) as usize],
                    ),
                    _ => {
                        let tail = input[at.min(input.len())..].to_vec();
                        input.extend_from_slice(&tail);
                    }
                }
            }
            let mut buf = BytesMut::from(&input[..]);
            let _ = parse_response(&mut buf, next() % 2 == 0, next() % 2 == 0);
            assert!(buf.len() <= input.len());
            let mut buf = BytesMut::from(&input[..]);
            let mut dec = Chunked::new();
            for _ in 0..64 {
                match dec.decode(&mut buf) {
                    Ok(Some(_)) => {}
                    _ => break,
                }
            }
        }
    }

    #[test]
    fn bad_chunked_bodies_are_errors() {
        for wire in [
            &b"zz\r\n"[..],
            b"3\r\nabcX\r\n",
            b"\r\n",
            b"1234567890abcdef0\r\n",
        ] {
            let mut dec = Chunked::new();
            let mut buf = BytesMut::from(wire);
            let mut r = Ok(None);
            for _ in 0..4 {
                r = dec.decode(&mut buf);
                if !matches!(r, Ok(Some(_))) {
                    break;
                }
            }
            assert!(r.is_err(), "{:?}", String::from_utf8_lossy(wire));
        }
        let mut dec = Chunked::new();
        let mut buf = BytesMut::from(&[b'1'; MAX_CHUNK_LINE + 1][..]);
        assert!(dec.decode(&mut buf).is_err(), "endless size line");
    }
}
