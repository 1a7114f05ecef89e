//! The one hop-by-hop list (RFC 9110 §7.6.1): header fields that describe one
//! connection and are never forwarded, plus whatever a message's `Connection` header
//! names. `Host` is not among them: it is end to end (a proxy keeps the client's).

use http::HeaderMap;
use http::header::{self, HeaderName};

/// The fields that are hop-by-hop wherever they appear, lower case.
pub const HOP_BY_HOP: [&str; 7] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// Is `name` on the fixed list ([`HOP_BY_HOP`])? Case-insensitive.
pub fn is_hop_by_hop(name: &[u8]) -> bool {
    HOP_BY_HOP
        .iter()
        .any(|n| n.as_bytes().eq_ignore_ascii_case(name))
}

/// Is `name` meant for the proxy that received it, never for the next hop:
/// `Proxy-Authorization` (RFC 9110 §11.7.2, the client's credentials for this proxy)?
/// A proxy drops it beside the hop-by-hop fields; a client passing headers through
/// (load, replay) keeps it.
pub fn is_proxy_only(name: &[u8]) -> bool {
    name.eq_ignore_ascii_case(b"proxy-authorization")
}

/// Headers by which a client claims what a proxy in front of it saw — its address, the
/// scheme, the host, the port, the path prefix — lower case. A proxy believes them only
/// from a trusted peer ([`is_forwarding_claim`]); from anyone else it drops them, since
/// an application reads them as the truth (rate limits by address, `https`-only
/// cookies, redirects to the forwarded host).
pub const FORWARDING_CLAIMS: [&str; 14] = [
    "forwarded",
    "x-real-ip",
    "x-client-ip",
    "client-ip",
    "true-client-ip",
    "cf-connecting-ip",
    "fastly-client-ip",
    "x-cluster-client-ip",
    "x-original-forwarded-for",
    "x-originating-ip",
    "x-remote-ip",
    "x-remote-addr",
    "front-end-https",
    "x-url-scheme",
];

/// Is `name` a forwarding claim: any `X-Forwarded-*` (`-For`, `-Proto`, `-Host`,
/// `-Port`, `-Server`, `-Prefix`, `-Ssl`…) or a name of [`FORWARDING_CLAIMS`]?
/// Case-insensitive, and `_` counts as `-`: CGI, WSGI and Rack turn both `X-Forwarded-For`
/// and `X_Forwarded_For` into `HTTP_X_FORWARDED_FOR`, so the underscore form is the
/// same claim to the application behind.
pub fn is_forwarding_claim(name: &[u8]) -> bool {
    let same = |a: &[u8], b: &[u8]| {
        a.len() == b.len()
            && a.iter().zip(b).all(|(&x, &y)| {
                let x = if x == b'_' {
                    b'-'
                } else {
                    x.to_ascii_lowercase()
                };
                x == y
            })
    };
    let prefix = b"x-forwarded-";
    (name.len() > prefix.len() && same(&name[..prefix.len()], prefix))
        || FORWARDING_CLAIMS.iter().any(|n| same(name, n.as_bytes()))
}

/// Removes every forwarding claim ([`is_forwarding_claim`]) from `headers` in place: what
/// a proxy does with the headers of a peer it does not trust.
pub fn strip_forwarding_claims(headers: &mut HeaderMap) {
    let claims: Vec<HeaderName> = headers
        .keys()
        .filter(|n| is_forwarding_claim(n.as_str().as_bytes()))
        .cloned()
        .collect();
    for name in claims {
        headers.remove(name);
    }
}

/// The hop-by-hop rule of one message: the fixed list plus the names its `Connection`
/// header lists (`Connection: close, X-Secret` makes `X-Secret` hop-by-hop too).
#[derive(Debug, Default, Clone)]
pub struct HopByHop<'a> {
    named: Vec<&'a [u8]>,
}

impl<'a> HopByHop<'a> {
    /// The rule of a message with these headers.
    pub fn of(headers: &'a HeaderMap) -> Self {
        if !headers.contains_key(header::CONNECTION) {
            return Self::default();
        }
        Self::from_connection(
            headers
                .get_all(header::CONNECTION)
                .iter()
                .map(|v| v.as_bytes()),
        )
    }

    /// The rule given the raw values of the message's `Connection` headers.
    pub fn from_connection(values: impl IntoIterator<Item = &'a [u8]>) -> Self {
        let named = values
            .into_iter()
            .flat_map(|v| v.split(|&b| b == b','))
            .map(<[u8]>::trim_ascii)
            .filter(|n| !n.is_empty())
            .collect();
        Self { named }
    }

    /// Must `name` be dropped on the way to the next hop?
    pub fn drops(&self, name: &[u8]) -> bool {
        is_hop_by_hop(name) || self.names(name)
    }

    /// Does `Connection` list this token (e.g. `close`, `keep-alive`, a header name)?
    pub fn names(&self, token: &[u8]) -> bool {
        self.named.iter().any(|n| n.eq_ignore_ascii_case(token))
    }
}

/// Removes the hop-by-hop headers from `headers` in place.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // Most messages carry none (a load generator's every HTTP/2 request): one pass over
    // the few names they have costs less than the eight look-ups of a removal each.
    if !headers.keys().any(|n| is_hop_by_hop(n.as_str().as_bytes())) {
        return;
    }
    let named: Vec<HeaderName> = if headers.contains_key(header::CONNECTION) {
        let rule = HopByHop::of(headers);
        rule.named
            .iter()
            .filter_map(|n| HeaderName::from_bytes(n).ok())
            .collect()
    } else {
        Vec::new()
    };
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
    for name in named {
        headers.remove(name);
    }
}

/// A copy of `headers` without the hop-by-hop ones.
pub fn forwardable(headers: &HeaderMap) -> HeaderMap {
    let rule = HopByHop::of(headers);
    let mut out = HeaderMap::with_capacity(headers.len());
    for (name, value) in headers {
        if !rule.drops(name.as_str().as_bytes()) {
            out.append(name.clone(), value.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn map(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (k, v) in pairs {
            m.append(*k, HeaderValue::from_static(v));
        }
        m
    }

    #[test]
    fn the_fixed_list_the_connection_named_ones_go_and_host_stays() {
        let m = map(&[
            ("host", "example.test"),
            ("connection", "keep-alive, X-Secret"),
            ("connection", "x-other"),
            ("keep-alive", "timeout=5"),
            ("proxy-connection", "keep-alive"),
            ("te", "trailers"),
            ("trailer", "x-t"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "websocket"),
            ("x-secret", "s"),
            ("x-other", "o"),
            ("accept", "*/*"),
        ]);
        let kept = forwardable(&m);
        let names: Vec<_> = kept.keys().map(|k| k.as_str()).collect();
        assert_eq!(names, ["host", "accept"]);
        let mut stripped = m.clone();
        strip_hop_by_hop(&mut stripped);
        assert_eq!(stripped, kept);
        let rule = HopByHop::of(&m);
        assert!(rule.drops(b"X-SECRET") && rule.drops(b"Upgrade"));
        assert!(rule.names(b"keep-alive") && !rule.drops(b"host"));
        assert!(!is_hop_by_hop(b"host") && !is_hop_by_hop(b"proxy-authorization"));
    }

    /// Every spelling an application behind reads as a forwarding header is one: the
    /// underscore forms (CGI/WSGI map them onto the same variable), any case, any
    /// `X-Forwarded-*`; ordinary headers are not.
    #[test]
    fn forwarding_claims_in_every_spelling() {
        for claim in [
            "X-Forwarded-For",
            "x_forwarded_for",
            "X_FORWARDED_PROTO",
            "x-forwarded-server",
            "X-Forwarded-Prefix",
            "x-forwarded-ssl",
            "Forwarded",
            "X-Real-IP",
            "x_real_ip",
            "X-Client-IP",
            "True-Client-IP",
            "CF-Connecting-IP",
            "cf_connecting_ip",
            "Fastly-Client-IP",
            "X-Cluster-Client-IP",
        ] {
            assert!(is_forwarding_claim(claim.as_bytes()), "{claim}");
        }
        for other in [
            "host",
            "x-forwarded",
            "x-forwarded-",
            "forwarded-x",
            "x-request-id",
            "via",
            "accept",
        ] {
            assert!(!is_forwarding_claim(other.as_bytes()), "{other}");
        }
    }

    /// The early return for messages without hop-by-hop fields keeps everything, and a
    /// single hop-by-hop field still goes.
    #[test]
    fn strip_leaves_a_clean_message_alone_and_still_finds_one_field() {
        let clean = map(&[("host", "h"), ("user-agent", "scalpel"), ("x-a", "1")]);
        let mut stripped = clean.clone();
        strip_hop_by_hop(&mut stripped);
        assert_eq!(stripped, clean);
        let mut one = clean.clone();
        one.append(
            HeaderName::from_static("te"),
            HeaderValue::from_static("trailers"),
        );
        strip_hop_by_hop(&mut one);
        assert_eq!(one, clean);
    }
}
