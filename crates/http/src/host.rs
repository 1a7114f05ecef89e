//! The host a request names, read as a server must (RFC 9112 §3.2, RFC 9113 §8.3.1):
//! exactly one `Host` in HTTP/1.1, a valid `uri-host [":" port]`, the `:authority` of an
//! HTTP/2 request (and a `Host` beside it that names the same), the authority of an
//! absolute-form target before the `Host` header. Every proxy of the toolkit (serve's
//! balancer, the shadow proxy) and every admin address ([`crate::AdminGuard`]) reads it
//! here, so a request the RFCs call bad (two `Host` headers, none, `a b`, `[::1`, a
//! control character, a user name in the authority) gets the same 400 everywhere and is
//! never forwarded with a `Host` the proxy made up.

use http::header::HOST;
use http::{HeaderMap, Uri, Version};

/// Why a request's host cannot be read; each is a 400 (RFC 9112 §3.2: "A server MUST
/// respond with a 400 (Bad Request) status code to any HTTP/1.1 request message that
/// lacks a Host header field and to any request message that contains more than one
/// Host header field line or a Host header field with an invalid field value").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HostError {
    /// An HTTP/1.1 request without `Host`, or an HTTP/2 request without `:authority`
    /// and without `Host`.
    #[error("the request names no host (HTTP/1.1 needs one Host header)")]
    Missing,
    /// More than one `Host` header.
    #[error("the request has {0} Host headers (one is allowed)")]
    Duplicate(usize),
    /// A `Host` (or authority) that is not `host[:port]`: shown escaped.
    #[error("the Host {0} is not a valid host[:port]")]
    Malformed(String),
    /// An HTTP/2 request whose `Host` names another host than its `:authority`.
    #[error("the Host {host} differs from the request's authority {authority}")]
    Conflict {
        /// The `Host` header, escaped.
        host: String,
        /// The `:authority`.
        authority: String,
    },
}

impl HostError {
    /// The error kind of the toolkit's error body for this refusal (always `bad_request`).
    pub fn kind(&self) -> &'static str {
        "bad_request"
    }
}

/// The request's host (`host[:port]`, as the client wrote it), or `None` for an HTTP/1.0
/// request that names none (allowed: HTTP/1.0 has no `Host` requirement).
///
/// - HTTP/1.1: exactly one valid `Host`; an absolute-form target's authority wins over it
///   (RFC 9112 §3.2.2), and is checked the same way.
/// - HTTP/2 and later: the `:authority` (which the `http` crate keeps in the URI); a
///   `Host` beside it must name the same (RFC 9113 §8.3.1), compared without case; with
///   no `:authority`, one valid `Host`.
///
/// ```
/// use http::{HeaderMap, Uri, Version};
/// let mut h = HeaderMap::new();
/// h.insert("host", "api.example:8080".parse().unwrap());
/// let uri: Uri = "/v1/a".parse().unwrap();
/// assert_eq!(scalpel_http::request_host(Version::HTTP_11, &uri, &h).unwrap(), Some("api.example:8080"));
/// h.append("host", "evil.example".parse().unwrap());
/// assert!(scalpel_http::request_host(Version::HTTP_11, &uri, &h).is_err());
/// ```
pub fn request_host<'a>(
    version: Version,
    uri: &'a Uri,
    headers: &'a HeaderMap,
) -> Result<Option<&'a str>, HostError> {
    let mut values = headers.get_all(HOST).iter();
    let header = match (values.next(), values.next()) {
        (None, _) => None,
        (Some(v), None) => Some(checked(v.as_bytes())?),
        (Some(_), Some(_)) => {
            return Err(HostError::Duplicate(headers.get_all(HOST).iter().count()));
        }
    };
    let authority = match uri.authority() {
        Some(a) => Some(checked(a.as_str().as_bytes())?),
        None => None,
    };
    let h2 = version >= Version::HTTP_2;
    match (authority, header) {
        (Some(a), Some(h)) if h2 && !a.eq_ignore_ascii_case(h) => Err(HostError::Conflict {
            host: shown(h.as_bytes()),
            authority: shown(a.as_bytes()),
        }),
        // HTTP/1.1 sends Host even with an absolute-form target.
        (Some(_), None) if !h2 && version == Version::HTTP_11 => Err(HostError::Missing),
        (Some(a), _) => Ok(Some(a)),
        (None, Some(h)) => Ok(Some(h)),
        (None, None) if version >= Version::HTTP_11 => Err(HostError::Missing),
        (None, None) => Ok(None),
    }
}

/// `value` as text when it is a valid `uri-host [":" port]`.
fn checked(value: &[u8]) -> Result<&str, HostError> {
    let malformed = || HostError::Malformed(shown(value));
    let text = std::str::from_utf8(value).map_err(|_| malformed())?;
    if valid_authority(text) {
        Ok(text)
    } else {
        Err(malformed())
    }
}

/// Is `text` a `uri-host [":" port]` (RFC 3986 §3.2.2–3.2.3; no user information, no
/// zone identifier, no IPvFuture): a bracketed IPv6 address, or a registered name or IPv4
/// address of unreserved, sub-delimiter and percent-encoded characters, then an optional
/// port of at most five digits below 65536?
pub fn valid_authority(text: &str) -> bool {
    let Some((host, port)) = split_host_port(text) else {
        return false;
    };
    let port_ok = match port {
        None | Some("") => true,
        Some(p) => {
            p.len() <= 5
                && p.bytes().all(|b| b.is_ascii_digit())
                && p.parse::<u32>().is_ok_and(|n| n <= 65_535)
        }
    };
    if !port_ok || host.is_empty() {
        return false;
    }
    if let Some(inner) = host.strip_prefix('[') {
        return inner
            .strip_suffix(']')
            .is_some_and(|v6| v6.parse::<std::net::Ipv6Addr>().is_ok());
    }
    let b = host.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hex = |j: usize| b.get(j).is_some_and(u8::is_ascii_hexdigit);
                if !(hex(i + 1) && hex(i + 2)) {
                    return false;
                }
                i += 3;
                continue;
            }
            c if c.is_ascii_alphanumeric() => {}
            b'-' | b'.' | b'_' | b'~' | b'!' | b'$' | b'&' | b'\'' | b'(' | b')' | b'*' | b'+'
            | b',' | b';' | b'=' => {}
            _ => return false,
        }
        i += 1;
    }
    true
}

/// `host[:port]` cut in two; `[v6]:port` keeps its brackets. `None` when the text cannot
/// be cut (an unbracketed IPv6 address, a `]` not followed by a port).
pub(crate) fn split_host_port(text: &str) -> Option<(&str, Option<&str>)> {
    if text.starts_with('[') {
        let end = text.find(']')?;
        let (host, rest) = text.split_at(end + 1);
        return match rest.strip_prefix(':') {
            Some(port) => Some((host, Some(port))),
            None if rest.is_empty() => Some((host, None)),
            None => None,
        };
    }
    match text.split_once(':') {
        Some((host, port)) if !port.contains(':') => Some((host, Some(port))),
        Some(_) => None,
        None => Some((text, None)),
    }
}

/// A header value for a message: printable ASCII kept, every other byte as `\xNN`, at
/// most 100 characters of it.
fn shown(value: &[u8]) -> String {
    let mut out = String::new();
    for &b in value.iter().take(100) {
        if (0x20..0x7f).contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    if value.len() > 100 {
        out.push('…');
    }
    format!("\"{out}\"")
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn host(version: Version, target: &str, hosts: &[&[u8]]) -> Result<Option<String>, HostError> {
        let uri: Uri = target.parse().unwrap();
        let mut h = HeaderMap::new();
        for v in hosts {
            h.append(HOST, HeaderValue::from_bytes(v).unwrap());
        }
        request_host(version, &uri, &h).map(|o| o.map(str::to_string))
    }

    #[test]
    fn one_valid_host_is_the_requests_host() {
        for ok in [
            "example.test",
            "example.test:8080",
            "127.0.0.1:9",
            "[::1]:3000",
            "[2001:db8::1]",
            "xn--bcher-kva.example",
            "a_b.example:",
            "%41.example",
        ] {
            assert_eq!(
                host(Version::HTTP_11, "/", &[ok.as_bytes()])
                    .unwrap()
                    .as_deref(),
                Some(ok),
                "{ok}"
            );
        }
    }

    /// RFC 9112 §3.2: none, two, or an invalid value is a 400, never forwarded.
    #[test]
    fn missing_duplicate_and_malformed_hosts_are_refused() {
        assert_eq!(host(Version::HTTP_11, "/", &[]), Err(HostError::Missing));
        assert_eq!(
            host(Version::HTTP_11, "/", &[b"a.example", b"b.example"]),
            Err(HostError::Duplicate(2))
        );
        for bad in [
            &b"a b"[..],
            b"[::1",
            b"::1",
            b"[::1]x",
            b"a\tb",
            b"a\x80b",
            b"user@a.example",
            b"a.example:99999",
            b"a.example:8o",
            b"a.example:1:2",
            b"",
            b"a/b",
            b"a%zz",
            b"[fe80::1%25eth0]",
            b"caf\xc3\xa9.example",
        ] {
            assert!(
                matches!(
                    host(Version::HTTP_11, "/", &[bad]),
                    Err(HostError::Malformed(_))
                ),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        // HTTP/1.0 has no Host requirement.
        assert_eq!(host(Version::HTTP_10, "/", &[]), Ok(None));
    }

    #[test]
    fn the_authority_of_an_absolute_target_or_of_h2_wins() {
        assert_eq!(
            host(Version::HTTP_11, "http://a.example:81/x", &[b"b.example"]).unwrap(),
            Some("a.example:81".into())
        );
        assert_eq!(
            host(Version::HTTP_11, "http://a.example/x", &[]),
            Err(HostError::Missing)
        );
        assert_eq!(
            host(Version::HTTP_2, "https://a.example/x", &[]).unwrap(),
            Some("a.example".into())
        );
        assert_eq!(
            host(Version::HTTP_2, "https://a.example/x", &[b"A.EXAMPLE"]).unwrap(),
            Some("a.example".into())
        );
        assert!(matches!(
            host(Version::HTTP_2, "https://a.example/x", &[b"b.example"]),
            Err(HostError::Conflict { .. })
        ));
        assert_eq!(host(Version::HTTP_2, "/x", &[]), Err(HostError::Missing));
        assert_eq!(
            host(Version::HTTP_2, "/x", &[b"a.example"]).unwrap(),
            Some("a.example".into())
        );
    }

    #[test]
    fn a_malformed_value_is_shown_escaped() {
        let e = host(Version::HTTP_11, "/", &[b"a\x80b"]).unwrap_err();
        assert_eq!(
            e.to_string(),
            r#"the Host "a\x80b" is not a valid host[:port]"#
        );
    }
}
