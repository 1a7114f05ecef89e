//! The proxy's request head, parsed back by httparse (an independent parser). Moved from
//! `scalpel-serve`'s `h1.rs` with the code.

use super::*;
use crate::h1::sends_length;
use http::header::HeaderName;

/// A proxy's head for `method target` with `headers` and a body of `body_len` bytes, as
/// the balancer writes it: the worker's address as `Host` when the client sent none.
fn proxy_head(
    method: &str,
    target: &str,
    headers: &HeaderMap,
    trusted: bool,
    upgrade: Option<&HeaderValue>,
    body_len: u64,
) -> String {
    let proxy = ProxyHeaders {
        client_ip: "10.0.0.7",
        https: false,
        trusted,
        upgrade,
        via: "1.1 scalpel",
    };
    let mut out = Vec::new();
    let mut w = RequestWriter::new(&mut out, method, "", target);
    let seen = w.forward_proxied(headers, &proxy);
    if !seen.host {
        w.header(b"host", b"127.0.0.1:3001");
    }
    w.proxy_headers(&proxy, seen);
    w.body_length(method.as_bytes(), Some(body_len));
    w.finish();
    String::from_utf8(out).unwrap()
}

fn map(headers: &[(&str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (k, v) in headers {
        map.append(
            HeaderName::from_bytes(k.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    map
}

fn encode(method: &str, headers: &[(&str, &str)], body_len: u64) -> String {
    proxy_head(method, "/a?b=1", &map(headers), true, None, body_len)
}

/// What the worker sees, parsed back by httparse.
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
        "GET",
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
        0,
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

/// A client that is not a trusted proxy cannot claim another address, scheme or host:
/// its forwarding headers are replaced by what the proxy saw.
#[test]
fn an_untrusted_clients_forwarding_headers_are_replaced() {
    let headers = map(&[
        ("x-forwarded-for", "6.6.6.6"),
        ("x-forwarded-proto", "https"),
        ("x-forwarded-host", "bank.example"),
        ("x-forwarded-port", "443"),
        ("forwarded", "for=6.6.6.6;proto=https"),
        ("x-real-ip", "6.6.6.6"),
        ("accept", "*/*"),
    ]);
    let head = proxy_head("GET", "/", &headers, false, None, 0);
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
    let head = proxy_head("GET", "/", &headers, true, None, 0);
    let (_, _, hs) = parsed(&head);
    assert_eq!(get(&hs, "x-forwarded-for"), ["6.6.6.6, 10.0.0.7"]);
    assert_eq!(get(&hs, "x-forwarded-proto"), ["https"]);
    assert_eq!(get(&hs, "forwarded"), ["for=6.6.6.6;proto=https"]);
}

/// Issue 31: the forwarding list held six names, so `X_Forwarded_For` (which CGI, WSGI
/// and Rack read as `X-Forwarded-For`), `X-Forwarded-Server`, `X-Forwarded-Prefix`,
/// `X-Client-IP`, `True-Client-IP` and `CF-Connecting-IP` from any client reached the
/// worker. Now every claim of the toolkit's one list goes, in every spelling.
#[test]
fn an_untrusted_clients_underscore_and_vendor_forwarding_claims_are_dropped() {
    let claims = [
        ("x_forwarded_for", "6.6.6.6"),
        ("x_forwarded_proto", "https"),
        ("X_Forwarded_Host", "bank.example"),
        ("x-forwarded-server", "bank.example"),
        ("x-forwarded-prefix", "/admin"),
        ("x-client-ip", "6.6.6.6"),
        ("true-client-ip", "6.6.6.6"),
        ("cf-connecting-ip", "6.6.6.6"),
        ("x_real_ip", "6.6.6.6"),
    ];
    let mut all = claims.to_vec();
    all.push(("accept", "*/*"));
    let headers = map(&all);
    let head = proxy_head("GET", "/", &headers, false, None, 0);
    let (_, _, hs) = parsed(&head);
    for (gone, _) in claims {
        assert!(
            get(&hs, &gone.to_ascii_lowercase()).is_empty(),
            "{gone} kept: {head}"
        );
    }
    assert_eq!(get(&hs, "x-forwarded-for"), ["10.0.0.7"], "{head}");
    assert_eq!(get(&hs, "accept"), ["*/*"]);
    // A trusted proxy's pass.
    let head = proxy_head("GET", "/", &headers, true, None, 0);
    let (_, _, hs) = parsed(&head);
    assert_eq!(get(&hs, "cf-connecting-ip"), ["6.6.6.6"], "{head}");
}

#[test]
fn request_heads_get_a_host_and_their_own_length() {
    let head = encode(
        "POST",
        &[
            ("content-length", "999"),
            ("expect", "100-continue"),
            ("x-forwarded-proto", "https"),
        ],
        5,
    );
    let (_, _, hs) = parsed(&head);
    assert_eq!(get(&hs, "host"), ["127.0.0.1:3001"]);
    assert_eq!(get(&hs, "content-length"), ["5"]);
    assert!(get(&hs, "expect").is_empty());
    assert_eq!(get(&hs, "x-forwarded-proto"), ["https"]);
    assert_eq!(get(&hs, "x-forwarded-for"), ["10.0.0.7"]);
    let empty_post = encode("POST", &[], 0);
    assert_eq!(get(&parsed(&empty_post).2, "content-length"), ["0"]);
    let get_req = encode("GET", &[], 0);
    assert!(get(&parsed(&get_req).2, "content-length").is_empty());
    assert!(!sends_length(b"GET", 0) && sends_length(b"GET", 1));
}

#[test]
fn upgrades_carry_their_two_headers() {
    let headers = map(&[
        ("connection", "Upgrade"),
        ("upgrade", "websocket"),
        ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
    ]);
    let protocol = HeaderValue::from_static("websocket");
    let head = proxy_head("GET", "/ws", &headers, true, Some(&protocol), 0);
    let (_, _, hs) = parsed(&head);
    assert_eq!(get(&hs, "connection"), ["upgrade"], "{head}");
    assert_eq!(get(&hs, "upgrade"), ["websocket"]);
    assert_eq!(get(&hs, "sec-websocket-key"), ["dGhlIHNhbXBsZSBub25jZQ=="]);
}

/// `OPTIONS *` goes out in asterisk form, not as a path.
#[test]
fn an_asterisk_target_stays_an_asterisk() {
    let head = proxy_head("OPTIONS", "*", &HeaderMap::new(), true, None, 0);
    assert!(head.starts_with("OPTIONS * HTTP/1.1\r\n"), "{head}");
}

/// A body of unknown length is announced chunked; an empty GET has no framing header.
#[test]
fn body_length_names_the_framing() {
    let mut out = Vec::new();
    let mut w = RequestWriter::new(&mut out, "PUT", "", "/u");
    w.body_length(b"PUT", None);
    w.finish();
    let (_, _, hs) = parsed(std::str::from_utf8(&out).unwrap());
    assert_eq!(get(&hs, "transfer-encoding"), ["chunked"]);
    assert!(get(&hs, "content-length").is_empty());
}
