//! The request head the balancer writes to a worker, with the proxy's duties of RFC
//! 9110 §7.6: hop-by-hop headers dropped (the toolkit's one list, `scalpel_http`'s
//! [`HopByHop`], plus `Proxy-Authorization`), `X-Forwarded-For`, `X-Forwarded-Proto` and
//! `Via` added, a client's own forwarding headers believed only from a trusted proxy.
//!
//! Everything else on the wire — the request line, reading and framing the worker's
//! answer, chunked bodies, limits — is `scalpel_http::h1`'s one HTTP/1.1 codec, the one
//! `scalpel load` and `scalpel shadow` use (`upstream` drives it). The head is written
//! from the client's `HeaderMap` straight into the connection's reused buffer: no header
//! map is copied and nothing is handed between tasks (why the balancer does not use
//! hyper's client connection: docs/serve.md).
//!
//! This module does no I/O.

use std::net::SocketAddr;

use bytes::Bytes;
use http::Method;
use http::header::{self, HeaderMap, HeaderValue};
use scalpel_http::h1::{RequestWriter, sends_length};
use scalpel_http::{HopByHop, is_proxy_only};

/// The client's request as the proxy forwards it.
#[derive(Debug)]
pub(crate) struct Outgoing<'a> {
    pub(crate) method: &'a Method,
    /// Origin form: `/path?query` (or `*` for `OPTIONS *`).
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
    NAMES.iter().any(|n| n.eq_ignore_ascii_case(name))
}

/// Writes the request head (and nothing of the body) into `out` (cleared first).
/// `worker` is the `Host` for an HTTP/1.0 client that sent none.
pub(crate) fn encode_request(req: &Outgoing<'_>, worker: SocketAddr, out: &mut Vec<u8>) {
    let h = req.headers;
    let hop = HopByHop::of(h);
    let mut w = RequestWriter::new(out, req.method.as_str(), "", req.target);
    let (mut host, mut proto) = (false, false);
    let mut xff: Option<Vec<u8>> = None;
    for (name, value) in h {
        let n = name.as_str().as_bytes();
        if *name == header::HOST {
            host = true;
        } else if *name == header::CONTENT_LENGTH || *name == header::EXPECT {
            // The length is this proxy's own (the body was read whole, so an `Expect`
            // was answered already).
            continue;
        } else if !req.trusted && forwarding(n) {
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
        } else if hop.drops(n) || is_proxy_only(n) {
            continue;
        }
        w.header(n, value.as_bytes());
    }
    if !host {
        w.header(b"host", worker.to_string().as_bytes());
    }
    match xff.filter(|p| !p.is_empty()) {
        Some(mut prev) => {
            prev.extend_from_slice(b", ");
            prev.extend_from_slice(req.client_ip.as_bytes());
            w.header(b"x-forwarded-for", &prev);
        }
        None => {
            w.header(b"x-forwarded-for", req.client_ip.as_bytes());
        }
    }
    if !proto {
        w.header(
            b"x-forwarded-proto",
            if req.https { b"https" } else { b"http" },
        );
    }
    w.header(b"via", b"1.1 scalpel");
    if let Some(protocol) = req.upgrade {
        w.header(b"connection", b"upgrade");
        w.header(b"upgrade", protocol.as_bytes());
    }
    if sends_length(req.method.as_str().as_bytes(), req.body.len()) {
        w.content_length(req.body.len() as u64);
    }
    w.finish();
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::header::HeaderName;

    fn encode(method: Method, headers: &[(&str, &str)], body: &'static [u8]) -> String {
        encode_target(method, "/a?b=1", headers, body)
    }

    fn encode_target(
        method: Method,
        target: &str,
        headers: &[(&str, &str)],
        body: &'static [u8],
    ) -> String {
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
            target,
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
    }

    /// `OPTIONS *` goes out in asterisk form, not as a path.
    #[test]
    fn an_asterisk_target_stays_an_asterisk() {
        let head = encode_target(Method::OPTIONS, "*", &[], b"");
        assert!(head.starts_with("OPTIONS * HTTP/1.1\r\n"), "{head}");
    }
}
