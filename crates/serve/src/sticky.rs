//! Sticky keys, one implementation for both places that keep a client somewhere: a
//! split route's arm (`[[route]] sticky`, A/B) and an app's worker (`[[app]]
//! sticky_worker`). The grammar (`header:NAME`, `cookie:NAME`, `path:N`, `ip`), how the
//! key is read from a request, and its hash live here; the arm is picked by the hash onto
//! the weights (`proxy`), the worker by rendezvous hashing over the ready workers'
//! slots ([`rendezvous`]).

use std::sync::Arc;

use http::header::{self, HeaderMap};

use crate::config::IpNet;
use crate::pool::Backend;

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
    value(key, src).map(|v| mix(fnv1a(v.as_bytes())))
}

fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// splitmix64's finalizer.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The worker for key hash `key` among `backends` (the ready set), by rendezvous
/// (highest random weight) hashing over their slot indexes: each (key, slot) pair gets a
/// score and the highest wins. A worker that leaves takes only its own keys with it
/// (each moves to its key's next-highest slot), the others' keys stay where they were,
/// and a successor in the same slot gets the slot's keys back. `eligible` passes over a
/// worker (stalled, or the one that just failed this request): its keys go to their
/// next slot, only while it is passed over. `None` when no worker is eligible.
pub(crate) fn rendezvous<'a>(
    backends: &'a [Arc<Backend>],
    key: u64,
    eligible: impl Fn(&Arc<Backend>) -> bool,
) -> Option<&'a Arc<Backend>> {
    let mut best: Option<(u64, &'a Arc<Backend>)> = None;
    for b in backends {
        if !eligible(b) {
            continue;
        }
        let score = mix(key ^ mix(b.index() as u64 ^ 0x9e37_79b9_7f4a_7c15));
        // `>=`: of two incarnations of one slot (a `prestart` successor next to its
        // suspect, in the order they joined), the newer.
        if best.is_none_or(|(s, _)| score >= s) {
            best = Some((score, b));
        }
    }
    best.map(|(_, b)| b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::net::SocketAddr;

    fn set(slots: &[usize]) -> Vec<Arc<Backend>> {
        slots
            .iter()
            .map(|&i| {
                Arc::new(Backend::new(
                    "t".into(),
                    i,
                    SocketAddr::from(([127, 0, 0, 1], 1000 + i as u16)),
                    0,
                ))
            })
            .collect()
    }

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

    fn owners(backends: &[Arc<Backend>], keys: u64) -> HashMap<u64, usize> {
        (0..keys)
            .map(|k| {
                let key = mix(fnv1a(format!("client-{k}").as_bytes()));
                (k, rendezvous(backends, key, |_| true).unwrap().index())
            })
            .collect()
    }

    /// Removing a slot moves exactly its keys; the others keep theirs; adding it back
    /// returns its keys; and the keys spread over all slots.
    #[test]
    fn rendezvous_moves_only_the_keys_of_a_slot_that_leaves() {
        let all = set(&[0, 1, 2, 3]);
        let before = owners(&all, 4000);
        for slot in 0..4 {
            let n = before.values().filter(|&&s| s == slot).count();
            assert!((700..1300).contains(&n), "slot {slot} got {n} of 4000 keys");
        }
        let without_2 = set(&[0, 1, 3]);
        let after = owners(&without_2, 4000);
        for (k, &was) in &before {
            if was == 2 {
                assert_ne!(after[k], 2);
            } else {
                assert_eq!(after[k], was, "key {k} moved from slot {was}");
            }
        }
        assert_eq!(owners(&set(&[0, 1, 2, 3]), 4000), before);
    }

    /// A passed-over worker's keys go elsewhere while it is passed over, and only those.
    #[test]
    fn an_ineligible_worker_loses_only_its_own_keys() {
        let all = set(&[0, 1, 2]);
        let before = owners(&all, 600);
        for k in 0..600u64 {
            let key = mix(fnv1a(format!("client-{k}").as_bytes()));
            let got = rendezvous(&all, key, |b| b.index() != 1).unwrap().index();
            if before[&k] == 1 {
                assert_ne!(got, 1);
            } else {
                assert_eq!(got, before[&k]);
            }
        }
        assert!(rendezvous(&all, 7, |_| false).is_none());
    }

    /// Two incarnations of one slot (a `prestart` successor beside its suspect): the
    /// newer, which joined the set later, takes the slot's keys.
    #[test]
    fn the_newer_incarnation_of_a_slot_wins() {
        let mut b = set(&[0, 1]);
        b.push(set(&[1]).remove(0));
        for k in 0..200u64 {
            let got = rendezvous(&b, mix(k), |_| true).unwrap();
            if got.index() == 1 {
                assert!(Arc::ptr_eq(got, &b[2]));
            }
        }
    }
}
