//! A target's address and a request on the wire: the base URL (a scalpel-http
//! [`Peer`]: `http://` or `https://`, with its TLS and protocol settings) and a rendered
//! request's two encodings — HTTP/1.1 bytes written into a reused buffer (no allocation
//! once the buffer has grown), and an HTTP/2 request for the `h2` crate.
//!
//! Response limits are in bytes, as curl's and hyper's are, never a count of header
//! lines: a response head may be up to [`MAX_HEAD_BYTES`] (64 KiB) with any number of
//! headers (scalpel-http's codec enforces it).

use bytes::Bytes;
use scalpel_http::h1::{RequestWriter, sends_length};
use scalpel_http::{Peer, PeerOptions};

pub use scalpel_http::UrlError;

/// The largest response head (status line and headers) accepted, like curl's 100 KB and
/// hyper's ~400 KB read buffer: a limit in bytes, any number of header lines.
pub const MAX_HEAD_BYTES: usize = scalpel_http::h1::DEFAULT_MAX_HEAD_BYTES;

/// Where a target lives: `http[s]://host[:port][/prefix]`, with the settings that travel
/// with it (TLS verification, `--resolve`, HTTP version).
#[derive(Debug, Clone)]
pub struct Endpoint {
    peer: Peer,
    /// Every request asks the server to close its connection (`--no-reuse`).
    close_each: bool,
}

impl Endpoint {
    /// Parses a base URL, `http://` or `https://`, with default settings.
    pub fn parse(url: &str) -> Result<Endpoint, UrlError> {
        Ok(Endpoint {
            peer: Peer::parse(url)?,
            close_each: false,
        })
    }

    /// The peer: address, scheme and settings.
    pub fn peer(&self) -> &Peer {
        &self.peer
    }

    pub(crate) fn set_options(&mut self, options: PeerOptions) {
        *self.peer.options_mut() = options;
    }

    pub(crate) fn set_close_each(&mut self, close: bool) {
        self.close_each = close;
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
    /// Extra headers, in order. Values are bytes: a recorded value need not be UTF-8
    /// (`obs-text`), and is sent as it was recorded.
    pub headers: Vec<(String, Vec<u8>)>,
    /// Body bytes; a Content-Length header is added when non-empty or the method has a body.
    pub body: Vec<u8>,
}

impl RequestParts {
    /// Whether the response to this request has no body (HEAD).
    pub(crate) fn is_head(&self) -> bool {
        self.method.eq_ignore_ascii_case("HEAD")
    }

    fn has(&self, name: &str) -> bool {
        self.headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case(name))
    }

    /// Writes the request in HTTP/1.1 wire format into `out` (cleared first): `Host` and
    /// `User-Agent: scalpel` unless given, `Content-Length` when there is a body or the
    /// method has one, `Connection: close` with `--no-reuse`.
    pub(crate) fn encode(&self, endpoint: &Endpoint, out: &mut Vec<u8>) {
        let peer = &endpoint.peer;
        let mut w = RequestWriter::new(out, &self.method, peer.prefix(), &self.path_and_query);
        if !self.has("host") {
            w.header(b"Host", peer.authority().as_bytes());
        }
        if !self.has("user-agent") {
            w.header(b"User-Agent", b"scalpel");
        }
        for (name, value) in &self.headers {
            w.header(name.as_bytes(), value);
        }
        if sends_length(self.method.as_bytes(), self.body.len()) && !self.has("content-length") {
            w.content_length(self.body.len() as u64);
        }
        if endpoint.close_each && !self.has("connection") {
            w.header(b"Connection", b"close");
        }
        w.finish();
        out.extend_from_slice(&self.body);
    }

    /// The request for an HTTP/2 connection: an absolute URI (`Host`, if given, becomes
    /// its authority), `user-agent` and `content-length` as over HTTP/1.1. Connection
    /// headers, which HTTP/2 forbids, are dropped when it is sent. Fails on a method,
    /// path or header the `http` crate refuses.
    pub(crate) fn to_h2(&self, endpoint: &Endpoint) -> Result<(http::Request<()>, Bytes), String> {
        let peer = &endpoint.peer;
        let slash = if self.path_and_query.starts_with('/') {
            ""
        } else {
            "/"
        };
        let host = self
            .headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case("host"))
            .map(|(_, v)| String::from_utf8_lossy(v));
        let authority = host.as_deref().unwrap_or(peer.authority());
        let uri = format!(
            "{}://{authority}{}{slash}{}",
            peer.scheme().as_str(),
            peer.prefix(),
            self.path_and_query
        );
        let mut b = http::Request::builder()
            .method(self.method.as_str())
            .uri(uri);
        for (name, value) in &self.headers {
            if !name.eq_ignore_ascii_case("host") {
                b = b.header(name.as_str(), value.as_slice());
            }
        }
        if !self.has("user-agent") {
            b = b.header(http::header::USER_AGENT, "scalpel");
        }
        if sends_length(self.method.as_bytes(), self.body.len()) && !self.has("content-length") {
            b = b.header(http::header::CONTENT_LENGTH, self.body.len());
        }
        let request = b.body(()).map_err(|e| e.to_string())?;
        Ok((request, Bytes::copy_from_slice(&self.body)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_base_urls_of_both_schemes() {
        let e = Endpoint::parse("http://127.0.0.1:8080/api/").unwrap();
        assert_eq!(
            (e.peer.host(), e.peer.port(), e.peer.prefix()),
            ("127.0.0.1", 8080, "/api")
        );
        assert_eq!(e.peer.authority(), "127.0.0.1:8080");
        let e = Endpoint::parse("https://localhost").unwrap();
        assert_eq!((e.peer.port(), e.peer.is_tls()), (443, true));
        for bad in [
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

    mod prop {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            /// Any base URL text: an endpoint or an error, never a panic.
            #[test]
            fn any_url_parses_or_errs(text in "(https?://)?.{0,40}") {
                let _ = Endpoint::parse(&text);
            }
        }
    }

    #[test]
    fn encodes_requests_with_host_and_length() {
        let mut e = Endpoint::parse("http://127.0.0.1:81/base").unwrap();
        let parts = RequestParts {
            method: "POST".into(),
            path_and_query: "/v1/x?y=1".into(),
            headers: vec![("X-A".into(), b"b\xE9".to_vec())],
            body: b"hello".to_vec(),
        };
        let mut out = Vec::new();
        parts.encode(&e, &mut out);
        assert_eq!(
            String::from_utf8_lossy(&out),
            "POST /base/v1/x?y=1 HTTP/1.1\r\nHost: 127.0.0.1:81\r\nUser-Agent: scalpel\r\nX-A: b\u{FFFD}\r\nContent-Length: 5\r\n\r\nhello"
        );
        assert!(
            out.windows(7).any(|w| w == b"X-A: b\xE9"),
            "a header value's bytes are sent as they are"
        );
        e.set_close_each(true);
        parts.encode(&e, &mut out);
        assert!(out.ends_with(b"Content-Length: 5\r\nConnection: close\r\n\r\nhello"));
    }

    #[test]
    fn h2_requests_carry_an_absolute_uri_and_the_same_headers() {
        let e = Endpoint::parse("https://api.test:8443/base").unwrap();
        let parts = RequestParts {
            method: "PUT".into(),
            path_and_query: "v1/x?y=1".into(),
            headers: vec![
                ("Host".into(), b"other.test".to_vec()),
                ("X-A".into(), b"b".to_vec()),
            ],
            body: Vec::new(),
        };
        let (r, body) = parts.to_h2(&e).unwrap();
        assert_eq!(r.uri().to_string(), "https://other.test/base/v1/x?y=1");
        assert_eq!(r.method(), http::Method::PUT);
        assert_eq!(r.headers()["x-a"], "b");
        assert_eq!(r.headers()["user-agent"], "scalpel");
        assert_eq!(r.headers()["content-length"], "0");
        assert!(r.headers().get("host").is_none());
        assert!(body.is_empty());
        let bad = RequestParts {
            method: "GET".into(),
            path_and_query: "/".into(),
            headers: vec![("X-Bad".into(), b"a\nb".to_vec())],
            body: Vec::new(),
        };
        assert!(bad.to_h2(&e).is_err());
    }
}
