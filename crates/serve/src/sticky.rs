//! Sticky keys, one implementation for both places that keep a client somewhere: a
//! split route's arm (`[[route]] sticky`, A/B) and an app's worker (`[[app]]
//! sticky_worker`). The grammar (`header:NAME`, `cookie:NAME`, `path:N`, `ip`), how the
//! key is read from a request, and its hash live here; the arm is picked by the hash onto
//! the weights (`route`), the worker by rendezvous hashing over the ready workers'
//! slots (`selection::Rendezvous`).

use http::header::{self, HeaderMap};

use scalpel_http::IpNet;

/// What a sticky key is read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StickyKey {
    Header(http::HeaderName),
    Cookie(String),
    /// 1-based path segment.
    PathSegment(usize),
    /// The client's address: the peer's, or, from a trusted proxy, the nearest address in
    /// `X-Forwarded-For` that is not a trusted proxy.
    Ip,
}

impl std::fmt::Display for StickyKey {
    /// As written in the config.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StickyKey::Header(name) => write!(f, "header:{name}"),
            StickyKey::Cookie(name) => write!(f, "cookie:{name}"),
            StickyKey::PathSegment(n) => write!(f, "path:{n}"),
            StickyKey::Ip => f.write_str("ip"),
        }
    }
}

/// What the config accepts, for error messages.
pub(crate) const GRAMMAR: &str = "header:NAME, cookie:NAME, path:N (N ≥ 1) or ip";

/// Parses `header:NAME`, `cookie:NAME`, `path:N` or `ip`; `None` when malformed.
pub(crate) fn parse(s: &str) -> Option<StickyKey> {
    if s.trim() == "ip" {
        return Some(StickyKey::Ip);
    }
    let (kind, arg) = s.split_once(':')?;
    match kind.trim() {
        "header" => http::HeaderName::from_bytes(arg.trim().as_bytes())
            .ok()
            .map(StickyKey::Header),
        "cookie" if !arg.trim().is_empty() && !arg.trim().contains([';', '=', ' ']) => {
            Some(StickyKey::Cookie(arg.trim().to_string()))
        }
        "path" => arg
            .trim()
            .parse::<usize>()
            .ok()
            .filter(|&n| n >= 1)
            .map(StickyKey::PathSegment),
        _ => None,
    }
}

/// The parts of a request a key can be read from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Source<'a> {
    pub(crate) path: &'a str,
    pub(crate) headers: &'a HeaderMap,
    /// The peer's address, as text.
    pub(crate) peer: &'a str,
    /// The peer is a trusted proxy (its `X-Forwarded-For` is believed).
    pub(crate) trusted: bool,
    pub(crate) trusted_proxies: &'a [IpNet],
}

/// The key's value in a request (`None` when absent or empty).
pub(crate) fn value<'a>(key: &StickyKey, src: &Source<'a>) -> Option<&'a str> {
    match key {
        StickyKey::Header(name) => src.headers.get(name).and_then(|v| v.to_str().ok()),
        StickyKey::Cookie(name) => src
            .headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|kv| kv.trim().split_once('='))
            .find(|(k, _)| k == name)
            .map(|(_, v)| v),
        StickyKey::PathSegment(n) => src.path.split('/').filter(|s| !s.is_empty()).nth(n - 1),
        StickyKey::Ip => Some(client_ip(src)),
    }
    .filter(|v| !v.is_empty())
}

/// The client's address: behind trusted proxies, the rightmost `X-Forwarded-For` entry
/// that is not one of them (each proxy appends the peer it saw; entries further left
/// are whatever the client claimed).
fn client_ip<'a>(src: &Source<'a>) -> &'a str {
    if !src.trusted {
        return src.peer;
    }
    let entries: Vec<&'a str> = src
        .headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .collect();
    entries
        .into_iter()
        .rev()
        .find(|e| {
            !e.parse::<std::net::IpAddr>()
                .is_ok_and(|ip| src.trusted_proxies.iter().any(|n| n.contains(ip)))
        })
        .unwrap_or(src.peer)
}

/// The key's hash in a request (`None` when the request has no key). Stable across
/// restarts, versions and platforms: FNV-1a, then splitmix64's finalizer to spread
/// FNV's low bits.
pub(crate) fn hash(key: &StickyKey, src: &Source<'_>) -> Option<u64> {
    value(key, src).map(|v| hash_bytes(v.as_bytes()))
}

/// The hash of a key's value.
pub(crate) fn hash_bytes(bytes: &[u8]) -> u64 {
    mix(fnv1a(bytes))
}

fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// splitmix64's finalizer (also what rendezvous hashing scores with).
pub(crate) fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn src<'a>(headers: &'a HeaderMap, path: &'a str, trusted: &'a [IpNet]) -> Source<'a> {
        Source {
            path,
            headers,
            peer: "10.0.0.9",
            trusted: !trusted.is_empty(),
            trusted_proxies: trusted,
        }
    }

    #[test]
    fn the_grammar_and_its_mistakes() {
        assert_eq!(parse("ip"), Some(StickyKey::Ip));
        for text in ["ip", "cookie:sid", "path:3", "header:x-user"] {
            assert_eq!(
                parse(text).unwrap().to_string(),
                text,
                "as /status shows it"
            );
        }
        assert_eq!(parse("cookie:sid"), Some(StickyKey::Cookie("sid".into())));
        assert_eq!(parse("path:2"), Some(StickyKey::PathSegment(2)));
        assert!(matches!(parse("header:X-User"), Some(StickyKey::Header(_))));
        for bad in [
            "",
            "ip:1",
            "cookie:",
            "cookie:a=b",
            "header:",
            "header:bad name",
            "path:0",
            "path:x",
            "query:q",
            "sid",
        ] {
            assert_eq!(parse(bad), None, "{bad:?} was accepted");
        }
    }

    #[test]
    fn values_from_header_cookie_path_and_ip() {
        let mut h = HeaderMap::new();
        h.insert("x-user", "u1".parse().unwrap());
        h.append(header::COOKIE, "a=1; uid=42".parse().unwrap());
        h.append("x-forwarded-for", "6.6.6.6, 1.2.3.4".parse().unwrap());
        h.append("x-forwarded-for", "10.1.0.1".parse().unwrap());
        let s = src(&h, "/users/99/stats", &[]);
        let v = |k: &str| value(&parse(k).unwrap(), &s);
        assert_eq!(v("header:x-user"), Some("u1"));
        assert_eq!(v("cookie:uid"), Some("42"));
        assert_eq!(v("cookie:none"), None);
        assert_eq!(v("path:2"), Some("99"));
        assert_eq!(v("path:5"), None);
        // Not from a trusted proxy: the peer, whatever the headers claim.
        assert_eq!(v("ip"), Some("10.0.0.9"));
        // From a trusted proxy: the nearest untrusted address of the chain.
        let trusted = [IpNet::parse("10.0.0.0/8").unwrap()];
        let s = src(&h, "/", &trusted);
        assert_eq!(value(&StickyKey::Ip, &s), Some("1.2.3.4"));
        // A trusted proxy that sent no chain: its own address.
        let empty = HeaderMap::new();
        assert_eq!(
            value(&StickyKey::Ip, &src(&empty, "/", &trusted)),
            Some("10.0.0.9")
        );
    }

    /// The split's hash must not change between versions: a client would change arms.
    #[test]
    fn the_hash_is_stable() {
        let mut h = HeaderMap::new();
        h.insert("x-user", "alice".parse().unwrap());
        let got = hash(&parse("header:x-user").unwrap(), &src(&h, "/", &[]));
        assert_eq!(got, Some(mix(fnv1a(b"alice"))));
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
