//! The lean HTTP/1.1 client of the hot path: one keep-alive connection, pre-encoded request
//! bytes written as one buffer, the response head parsed with `httparse`, the body
//! (Content-Length, chunked, or until close) read and discarded into a reused buffer.
//!
//! Limits are in bytes, as curl's and hyper's are, never a count of header lines: a
//! response head may be up to [`MAX_HEAD_BYTES`] (64 KiB) with any number of headers, a
//! chunk-size line up to 8 KiB, a trailer section up to 64 KiB.

use std::io;
use std::net::SocketAddr;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Where a target lives: `http://host[:port][/prefix]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Endpoint {
    host: String,
    port: u16,
    /// Path prefix without a trailing slash (`""` for the root).
    prefix: String,
    /// Value of the Host header.
    authority: String,
}

/// A base URL that cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("bad URL `{url}`: {why}")]
pub struct UrlError {
    url: String,
    why: &'static str,
}

impl Endpoint {
    /// Parses a base URL. Only `http://` is supported (no TLS in the load hot path).
    pub fn parse(url: &str) -> Result<Endpoint, UrlError> {
        let err = |why| UrlError {
            url: url.to_string(),
            why,
        };
        let rest = match url.strip_prefix("http://") {
            Some(rest) => rest,
            None if url.starts_with("https://") => {
                return Err(err("https is not supported, use http://"));
            }
            None => return Err(err("expected http://HOST[:PORT][/PATH]")),
        };
        let (authority, path) = match rest.find(['/', '?']) {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        if authority.is_empty() {
            return Err(err("missing host"));
        }
        if authority.contains('@') {
            return Err(err("user info in URLs is not supported"));
        }
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let end = v6.find(']').ok_or_else(|| err("unclosed `[` in host"))?;
            let host = &v6[..end];
            match &v6[end + 1..] {
                "" => (host, 80),
                p => (
                    host,
                    p.strip_prefix(':')
                        .and_then(|p| p.parse().ok())
                        .ok_or_else(|| err("bad port"))?,
                ),
            }
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h, p.parse().map_err(|_| err("bad port"))?),
                None => (authority, 80),
            }
        };
        if host.is_empty() {
            return Err(err("missing host"));
        }
        if path.starts_with('?') {
            return Err(err(
                "a base URL takes no query; put it in the request template",
            ));
        }
        Ok(Endpoint {
            host: host.to_string(),
            port,
            prefix: path.trim_end_matches('/').to_string(),
            authority: authority.to_string(),
        })
    }

    /// Resolves the host once, before the run (never on the hot path).
    pub(crate) async fn resolve(&self) -> io::Result<SocketAddr> {
        tokio::net::lookup_host((self.host.as_str(), self.port))
            .await?
            .next()
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "host has no address"))
    }
}

/// One request as a [`RequestSource`](crate::RequestSource) renders it: method, path and
/// query (joined to the target's base URL), headers and body. Reused between requests.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RequestParts {
    /// `GET`, `POST`, …
    pub method: String,
    /// Path and query, starting with `/`.
    pub path_and_query: String,
    /// Extra headers, in order.
    pub headers: Vec<(String, String)>,
    /// Body bytes; a Content-Length header is added when non-empty or the method has a body.
    pub body: Vec<u8>,
}

impl RequestParts {
    /// Whether the response to this request has no body (HEAD).
    pub(crate) fn is_head(&self) -> bool {
        self.method.eq_ignore_ascii_case("HEAD")
    }

    /// Writes the request in HTTP/1.1 wire format into `out` (cleared first).
    pub(crate) fn encode(&self, endpoint: &Endpoint, out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(self.method.as_bytes());
        out.push(b' ');
        out.extend_from_slice(endpoint.prefix.as_bytes());
        if !self.path_and_query.starts_with('/') {
            out.push(b'/');
        }
        out.extend_from_slice(self.path_and_query.as_bytes());
        out.extend_from_slice(b" HTTP/1.1\r\n");
        let has = |name: &str| {
            self.headers
                .iter()
                .any(|(n, _)| n.eq_ignore_ascii_case(name))
        };
        if !has("host") {
            out.extend_from_slice(b"Host: ");
            out.extend_from_slice(endpoint.authority.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        if !has("user-agent") {
            out.extend_from_slice(b"User-Agent: scalpel\r\n");
        }
        for (name, value) in &self.headers {
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        let method_has_body = matches!(
            self.method.to_ascii_uppercase().as_str(),
            "POST" | "PUT" | "PATCH"
        );
        if (!self.body.is_empty() || method_has_body) && !has("content-length") {
            out.extend_from_slice(format!("Content-Length: {}\r\n", self.body.len()).as_bytes());
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(&self.body);
    }
}

/// Why a request did not get a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    /// Could not connect to the target (refused, unreachable, connect time-out): the
    /// request was never sent.
    Connect,
    /// The generator's own limit, not the target's fault (no descriptor, no ephemeral
    /// port, no buffer memory): the request was never sent. The name is the errno.
    Local(&'static str),
    /// The request was sent and no whole response came within the request time-out.
    Timeout,
    /// The connection broke while writing or reading (a reset, a body cut short).
    Io,
    /// The response was not valid HTTP/1.x, or over a byte limit.
    Protocol,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Connect => f.write_str("could not connect"),
            Failure::Local(errno) => write!(f, "the load generator's own limit ({errno})"),
            Failure::Timeout => f.write_str("no response within the time-out"),
            Failure::Io => f.write_str("the connection broke before the response was complete"),
            Failure::Protocol => f.write_str("the response is not valid HTTP/1.1 or over a limit"),
        }
    }
}

/// The errno names of connect failures that are the generator's own: its descriptor
/// table, its ephemeral ports, its memory. Counted as `local:NAME`, never against the
/// target.
fn local_errno(error: &io::Error) -> Option<&'static str> {
    use nix::errno::Errno;
    Some(match Errno::from_raw(error.raw_os_error()?) {
        Errno::EMFILE => "EMFILE",
        Errno::ENFILE => "ENFILE",
        Errno::ENOBUFS => "ENOBUFS",
        Errno::ENOMEM => "ENOMEM",
        Errno::EADDRNOTAVAIL => "EADDRNOTAVAIL",
        Errno::EADDRINUSE => "EADDRINUSE",
        _ => return None,
    })
}

/// A keep-alive connection with its reused read buffer.
#[derive(Debug)]
pub(crate) struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
    /// Unconsumed bytes are `buf[start..end]`.
    start: usize,
    end: usize,
}

const BUF_SIZE: usize = 16 * 1024;
/// The largest response head (status line and headers) accepted, like curl's 100 KB and
/// hyper's ~400 KB read buffer: a limit in bytes, any number of header lines.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Header lines parsed on the stack; a head with more is parsed again into a vector
/// sized by its line count (still bounded by [`MAX_HEAD_BYTES`]).
const STACK_HEADERS: usize = 64;
/// The longest chunk-size line.
const MAX_LINE_BYTES: usize = 8 * 1024;

impl Conn {
    pub(crate) async fn connect(addr: SocketAddr, timeout: Duration) -> Result<Conn, Failure> {
        let stream = match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Err(local_errno(&e).map_or(Failure::Connect, Failure::Local)),
            Err(_) => return Err(Failure::Connect),
        };
        let _ = stream.set_nodelay(true);
        Ok(Conn {
            stream,
            buf: vec![0; BUF_SIZE],
            start: 0,
            end: 0,
        })
    }

    /// Did the server close this idle keep-alive connection (its idle time-out), reset it,
    /// or send bytes nobody asked for? Asks the event loop's readiness first, so a live
    /// connection costs no system call. A closed one is replaced before the request is
    /// written: the request never reached anyone, so it is no error of the target.
    pub(crate) fn is_closed(&self) -> bool {
        if self.end > self.start {
            return true; // bytes after the last response: the framing is lost
        }
        let mut cx = Context::from_waker(Waker::noop());
        match self.stream.poll_read_ready(&mut cx) {
            Poll::Pending => false,
            Poll::Ready(Err(_)) => true,
            // Readable while idle: EOF, a reset, or stray bytes. Only `WouldBlock` (stale
            // readiness) leaves it usable.
            Poll::Ready(Ok(())) => {
                let mut probe = [0u8; 1];
                !matches!(self.stream.try_read(&mut probe), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
            }
        }
    }

    /// Sends one request and reads its whole response. Returns the status and whether the
    /// connection can be reused.
    pub(crate) async fn round_trip(
        &mut self,
        request: &[u8],
        head: bool,
    ) -> Result<(u16, bool), Failure> {
        self.stream
            .write_all(request)
            .await
            .map_err(|_| Failure::Io)?;
        loop {
            let (status, keep_alive, body) = self.read_head(head).await?;
            if (100..200).contains(&status) && status != 101 {
                continue; // informational (100 Continue): the real response follows
            }
            let reusable = match body {
                Body::Empty => keep_alive,
                Body::Length(n) => {
                    self.skip(n).await?;
                    keep_alive
                }
                Body::Chunked => {
                    self.skip_chunked().await?;
                    keep_alive
                }
                Body::UntilClose => {
                    self.start = 0;
                    self.end = 0;
                    while self.fill().await? > 0 {
                        self.start = 0;
                        self.end = 0;
                    }
                    false
                }
            };
            return Ok((status, reusable));
        }
    }

    /// Reads more bytes after `end`, compacting first; 0 means end of stream.
    async fn fill(&mut self) -> Result<usize, Failure> {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        } else if self.end == self.buf.len() {
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            } else if self.buf.len() < MAX_HEAD_BYTES {
                // A response head larger than the buffer: grow, up to the head limit.
                self.buf.resize((self.buf.len() * 2).min(MAX_HEAD_BYTES), 0);
            } else {
                return Err(Failure::Protocol); // a head (or a line) over the limit
            }
        }
        let n = self
            .stream
            .read(&mut self.buf[self.end..])
            .await
            .map_err(|_| Failure::Io)?;
        self.end += n;
        Ok(n)
    }

    async fn read_head(&mut self, head: bool) -> Result<(u16, bool, Body), Failure> {
        loop {
            if self.end > self.start {
                let bytes = &self.buf[self.start..self.end];
                let mut headers = [httparse::EMPTY_HEADER; STACK_HEADERS];
                let parsed = match parse_head(bytes, &mut headers, head) {
                    Err(httparse::Error::TooManyHeaders) => {
                        // More header lines than the stack holds: parse again with room
                        // for every line there is (the bytes are bounded, so is this).
                        let lines = bytes.iter().filter(|&&b| b == b'\n').count();
                        let mut many = vec![httparse::EMPTY_HEADER; lines + 1];
                        parse_head(bytes, &mut many, head)
                    }
                    other => other,
                };
                match parsed {
                    Ok(Some((len, status, keep_alive, body))) => {
                        self.start += len;
                        return Ok((status, keep_alive, body));
                    }
                    Ok(None) => {}
                    Err(_) => return Err(Failure::Protocol),
                }
            }
            if self.fill().await? == 0 {
                return Err(Failure::Io);
            }
        }
    }

    /// Consumes `n` body bytes.
    async fn skip(&mut self, mut n: u64) -> Result<(), Failure> {
        loop {
            let have = (self.end - self.start) as u64;
            if have >= n {
                self.start += n as usize;
                return Ok(());
            }
            n -= have;
            self.start = 0;
            self.end = 0;
            if self.fill().await? == 0 {
                return Err(Failure::Io);
            }
        }
    }

    /// Reads one CRLF-terminated line and returns its length without the CRLF, consuming it.
    /// The line itself is at `buf[start - len - 2..start - 2]` afterwards.
    async fn line(&mut self) -> Result<(usize, usize), Failure> {
        loop {
            if let Some(pos) = self.buf[self.start..self.end]
                .windows(2)
                .position(|w| w == b"\r\n")
            {
                let at = self.start;
                self.start += pos + 2;
                return Ok((at, pos));
            }
            if self.end - self.start > MAX_LINE_BYTES {
                return Err(Failure::Protocol); // a chunk-size line or trailer that long is bogus
            }
            if self.fill().await? == 0 {
                return Err(Failure::Io);
            }
        }
    }

    async fn skip_chunked(&mut self) -> Result<(), Failure> {
        loop {
            let (at, len) = self.line().await?;
            let line = &self.buf[at..at + len];
            let hex = match line.iter().position(|&b| b == b';') {
                Some(i) => &line[..i],
                None => line,
            };
            let hex = std::str::from_utf8(hex.trim_ascii()).map_err(|_| Failure::Protocol)?;
            let size = u64::from_str_radix(hex, 16).map_err(|_| Failure::Protocol)?;
            if size == 0 {
                // Trailers, then the empty line; the section is bounded like a head.
                let mut trailers = 0usize;
                loop {
                    let (_, len) = self.line().await?;
                    if len == 0 {
                        return Ok(());
                    }
                    trailers += len + 2;
                    if trailers > MAX_HEAD_BYTES {
                        return Err(Failure::Protocol);
                    }
                }
            }
            self.skip(size).await?;
            let (_, len) = self.line().await?;
            if len != 0 {
                return Err(Failure::Protocol);
            }
        }
    }
}

#[derive(Debug)]
enum Body {
    Empty,
    Length(u64),
    Chunked,
    UntilClose,
}

/// Parses a response head: `None` while incomplete, else its length, status, whether
/// the connection stays open, and how the body is framed.
fn parse_head<'b>(
    bytes: &'b [u8],
    headers: &mut [httparse::Header<'b>],
    head: bool,
) -> Result<Option<(usize, u16, bool, Body)>, httparse::Error> {
    let mut response = httparse::Response::new(headers);
    let len = match response.parse(bytes)? {
        httparse::Status::Complete(len) => len,
        httparse::Status::Partial => return Ok(None),
    };
    let status = response.code.ok_or(httparse::Error::Status)?;
    let mut keep_alive = response.version == Some(1);
    let mut length = None;
    let mut chunked = false;
    for h in response.headers.iter() {
        if h.name.eq_ignore_ascii_case("content-length") {
            let v = std::str::from_utf8(h.value).map_err(|_| httparse::Error::HeaderValue)?;
            let n = v
                .trim()
                .parse::<u64>()
                .map_err(|_| httparse::Error::HeaderValue)?;
            // Two different lengths: no way to know where the body ends (RFC 9112 §6.3).
            if length.is_some_and(|l| l != n) {
                return Err(httparse::Error::HeaderValue);
            }
            length = Some(n);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = h
                .value
                .rsplit(|&b| b == b',')
                .next()
                .is_some_and(|last| last.trim_ascii().eq_ignore_ascii_case(b"chunked"));
        } else if h.name.eq_ignore_ascii_case("connection") {
            for token in h.value.split(|&b| b == b',') {
                let token = token.trim_ascii();
                if token.eq_ignore_ascii_case(b"close") {
                    keep_alive = false;
                } else if token.eq_ignore_ascii_case(b"keep-alive") {
                    keep_alive = true;
                }
            }
        }
    }
    if chunked && length.is_some() {
        // Framed by chunks, but a message with both is a smuggling risk: read this one by
        // its chunks and close the connection after it (RFC 9112 §6.3).
        keep_alive = false;
    }
    let body = if head || status == 204 || status == 304 || (100..200).contains(&status) {
        Body::Empty
    } else if chunked {
        Body::Chunked
    } else if let Some(n) = length {
        Body::Length(n)
    } else {
        Body::UntilClose
    };
    Ok(Some((len, status, keep_alive, body)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_base_urls() {
        let e = Endpoint::parse("http://127.0.0.1:8080/api/").unwrap();
        assert_eq!(
            (e.host.as_str(), e.port, e.prefix.as_str()),
            ("127.0.0.1", 8080, "/api")
        );
        assert_eq!(e.authority, "127.0.0.1:8080");
        let e = Endpoint::parse("http://[::1]:9000").unwrap();
        assert_eq!((e.host.as_str(), e.port), ("::1", 9000));
        let e = Endpoint::parse("http://localhost").unwrap();
        assert_eq!(e.port, 80);
        for bad in [
            "https://x",
            "ftp://x",
            "x:80",
            "http://",
            "http://h:port",
            "http://h:99999",
            "http://:80",
            "http://h?x=1",
        ] {
            assert!(Endpoint::parse(bad).is_err(), "{bad}");
        }
    }

    /// Serves each of `responses` on its own connection (written, then closed) and returns
    /// what the client made of each.
    fn exchange(responses: Vec<Vec<u8>>) -> Vec<Result<(u16, bool), Failure>> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let n = responses.len();
            tokio::spawn(async move {
                for bytes in responses {
                    let (mut s, _) = listener.accept().await.unwrap();
                    let mut request = [0u8; 1024];
                    let _ = s.read(&mut request).await;
                    let _ = s.write_all(&bytes).await;
                    let _ = s.shutdown().await;
                }
            });
            let mut out = Vec::new();
            for _ in 0..n {
                let mut conn = Conn::connect(addr, Duration::from_secs(2)).await.unwrap();
                let result = tokio::time::timeout(
                    Duration::from_secs(5),
                    conn.round_trip(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", false),
                )
                .await
                .unwrap_or(Err(Failure::Timeout));
                out.push(result);
            }
            out
        })
    }

    fn head_with(headers: usize, value_len: usize) -> Vec<u8> {
        let mut head = String::from("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n");
        for i in 0..headers {
            head += &format!("X-H{i}: {}\r\n", "v".repeat(value_len));
        }
        head += "\r\nok";
        head.into_bytes()
    }

    /// #18.7: 64 header lines were a protocol error; the limit is 64 KiB of head.
    #[test]
    fn heads_are_limited_by_bytes_not_by_header_count() {
        let results = exchange(vec![
            head_with(65, 8),
            head_with(2000, 8),
            head_with(60, 1000),
            head_with(70, 1000),
        ]);
        assert_eq!(results[0], Ok((200, true)));
        assert_eq!(
            results[1],
            Ok((200, true)),
            "2000 short headers fit in 64 KiB"
        );
        assert_eq!(results[2], Ok((200, true)), "60 KiB of head");
        assert_eq!(results[3], Err(Failure::Protocol), "70 KiB of head");
    }

    /// RFC 9112 §6.3: a response with both Transfer-Encoding and Content-Length is read by
    /// its chunks and its connection not reused; two different lengths are an error.
    #[test]
    fn ambiguous_framing_is_not_reused_or_refused() {
        let results = exchange(vec![
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n".to_vec(),
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok".to_vec(),
        ]);
        assert_eq!(results[0], Ok((200, false)));
        assert_eq!(results[1], Err(Failure::Protocol));
    }

    /// A seeded mutation test of the response parser over real sockets: any bytes end in
    /// an answer or a failure, never a panic or a hang.
    #[test]
    fn mutated_responses_never_panic() {
        let seeds: [&[u8]; 4] = [
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;x=1\r\nhello\r\n0\r\nT: 1\r\n\r\n",
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.0 404 No\r\nConnection: keep-alive\r\n\r\nbody",
            b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n",
        ];
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut cases = Vec::new();
        for i in 0..200 {
            let mut bytes = seeds[i % seeds.len()].to_vec();
            for _ in 0..(1 + next() % 4) {
                let at = (next() as usize) % (bytes.len() + 1);
                match next() % 4 {
                    0 if at < bytes.len() => bytes[at] = next() as u8,
                    1 if at < bytes.len() => {
                        bytes.remove(at);
                    }
                    2 => bytes.insert(at, b"\r\n:0;-9fF"[(next() % 9) as usize]),
                    _ => bytes.truncate(at),
                }
            }
            cases.push(bytes);
        }
        let results = exchange(cases);
        assert_eq!(results.len(), 200);
    }

    mod prop {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            /// Any base URL text: an endpoint or an error, never a panic.
            #[test]
            fn any_url_parses_or_errs(text in "(http://)?.{0,40}") {
                let _ = Endpoint::parse(&text);
            }
        }
    }

    #[test]
    fn encodes_requests_with_host_and_length() {
        let e = Endpoint::parse("http://127.0.0.1:81/base").unwrap();
        let parts = RequestParts {
            method: "POST".into(),
            path_and_query: "/v1/x?y=1".into(),
            headers: vec![("X-A".into(), "b".into())],
            body: b"hello".to_vec(),
        };
        let mut out = Vec::new();
        parts.encode(&e, &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "POST /base/v1/x?y=1 HTTP/1.1\r\nHost: 127.0.0.1:81\r\nUser-Agent: scalpel\r\nX-A: b\r\nContent-Length: 5\r\n\r\nhello"
        );
    }
}
