//! The request head the balancer writes to a worker: its policy only — the client's
//! address, whether it is a trusted proxy, the scheme it came by, the `Host` of a client
//! that sent none, the balancer's `Via` name. Writing it (the proxy's duties of RFC 9110
//! §7.6: hop-by-hop headers and `Proxy-Authorization` dropped, `X-Forwarded-For`,
//! `X-Forwarded-Proto` and `Via` added, a client's own forwarding headers believed only
//! from a trusted proxy) is `scalpel_http::h1`'s, as the rest of the wire: the head goes
//! from the client's `HeaderMap` straight into the connection's reused buffer, no header
//! map copied, nothing handed between tasks (why the balancer does not use hyper's
//! client connection: docs/serve.md).
//!
//! This module does no I/O.

use std::net::SocketAddr;

use bytes::Bytes;
use http::Method;
use http::header::{HeaderMap, HeaderValue};
use scalpel_http::h1::{ProxyHeaders, RequestWriter};

/// The balancer's `Via` entry.
const VIA: &str = "1.1 scalpel";

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

/// Writes the request head (and nothing of the body) into `out` (cleared first).
/// `worker` is the `Host` for an HTTP/1.0 client that sent none.
pub(crate) fn encode_request(req: &Outgoing<'_>, worker: SocketAddr, out: &mut Vec<u8>) {
    let proxy = ProxyHeaders {
        client_ip: req.client_ip,
        https: req.https,
        trusted: req.trusted,
        upgrade: req.upgrade,
        via: VIA,
    };
    let method = req.method.as_str();
    let mut w = RequestWriter::new(out, method, "", req.target);
    let seen = w.forward_proxied(req.headers, &proxy);
    if !seen.host {
        w.header(b"host", worker.to_string().as_bytes());
    }
    w.proxy_headers(&proxy, seen);
    w.body_length(method.as_bytes(), Some(req.body.len() as u64));
    w.finish();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// serve's part of the head: the worker's address for a client without `Host`, the
    /// client's address, the balancer's `Via`, and the length of the buffered body (the
    /// proxy rules themselves are tested with the code, in scalpel-http).
    #[test]
    fn the_head_carries_the_balancers_policy() {
        let (body, headers) = (Bytes::from_static(b"hello"), HeaderMap::new());
        let req = Outgoing {
            method: &Method::POST,
            target: "/a",
            headers: &headers,
            client_ip: "10.0.0.7",
            body: &body,
            upgrade: None,
            trusted: false,
            https: true,
        };
        let mut out = Vec::new();
        encode_request(&req, "127.0.0.1:3001".parse().unwrap(), &mut out);
        let head = String::from_utf8(out).unwrap();
        assert_eq!(
            head,
            "POST /a HTTP/1.1\r\nhost: 127.0.0.1:3001\r\nx-forwarded-for: 10.0.0.7\r\n\
             x-forwarded-proto: https\r\nvia: 1.1 scalpel\r\nContent-Length: 5\r\n\r\n"
        );
    }
}
