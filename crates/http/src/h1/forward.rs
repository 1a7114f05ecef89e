//! A client's request head as a proxy forwards it (RFC 9110 §7.6): the client's headers
//! copied without the hop-by-hop ones and without `Proxy-Authorization`, then
//! `X-Forwarded-For`, `X-Forwarded-Proto` and `Via` added — a client's own forwarding
//! headers believed only when the proxy trusts it — and an upgrade's two headers kept.
//! Written straight into the connection's reused buffer from the client's `HeaderMap`:
//! no header map copied, nothing allocated but for a trusted client's `X-Forwarded-For`.
//! No I/O.

use http::header::{self, HeaderMap, HeaderValue};

use super::wire::RequestWriter;
use crate::hop::{HopByHop, is_forwarding_claim, is_proxy_only};

/// What a proxy says about its client on the way to the next hop. The policy — whom to
/// trust, what the client's address is — is the proxy's; writing it is this module's.
#[derive(Debug, Clone, Copy)]
pub struct ProxyHeaders<'a> {
    /// Appended to `X-Forwarded-For`.
    pub client_ip: &'a str,
    /// The client's connection to the proxy is TLS: `X-Forwarded-Proto: https`.
    pub https: bool,
    /// The client is a trusted proxy: its `X-Forwarded-*`, `Forwarded` and `X-Real-IP`
    /// headers are kept (and its `X-Forwarded-For` extended). Any other client's are
    /// replaced, so no client can claim another address or `https`.
    pub trusted: bool,
    /// The client asked to switch to this protocol (`Upgrade` with `Connection:
    /// upgrade`): the two headers go to the next hop instead of being dropped.
    pub upgrade: Option<&'a HeaderValue>,
    /// This proxy's `Via` entry (`1.1 scalpel`).
    pub via: &'a str,
}

/// What [`RequestWriter::forward_proxied`] saw among the client's headers, for
/// [`RequestWriter::proxy_headers`].
#[derive(Debug, Default)]
pub struct Proxied {
    /// A `Host` header was copied (else the caller writes one: an HTTP/1.0 client may
    /// send none).
    pub host: bool,
    /// A trusted client's `X-Forwarded-Proto` was kept.
    proto: bool,
    /// A trusted client's `X-Forwarded-For` values, joined.
    xff: Option<Vec<u8>>,
}

impl RequestWriter<'_> {
    /// Copies a client's headers as a proxy forwards them: as [`RequestWriter::forward`]
    /// does (hop-by-hop ones, `Content-Length` and `Expect` dropped), and without
    /// `Proxy-Authorization` and, unless `proxy.trusted`, the client's forwarding headers.
    /// A trusted client's `X-Forwarded-For` is held back for
    /// [`RequestWriter::proxy_headers`], which extends it.
    pub fn forward_proxied(&mut self, headers: &HeaderMap, proxy: &ProxyHeaders<'_>) -> Proxied {
        let hop = HopByHop::of(headers);
        let mut seen = Proxied::default();
        for (name, value) in headers {
            let n = name.as_str().as_bytes();
            if *name == header::CONTENT_LENGTH || *name == header::EXPECT {
                // The length is the proxy's own (a whole body was read, so an `Expect`
                // was answered already).
                continue;
            }
            if hop.drops(n) || is_proxy_only(n) || (!proxy.trusted && is_forwarding_claim(n)) {
                continue;
            }
            if *name == "x-forwarded-for" {
                let list = seen.xff.get_or_insert_with(Vec::new);
                if !list.is_empty() {
                    list.extend_from_slice(b", ");
                }
                list.extend_from_slice(value.as_bytes());
                continue;
            }
            seen.proto |= *name == "x-forwarded-proto";
            seen.host |= *name == header::HOST;
            self.header(n, value.as_bytes());
        }
        seen
    }

    /// Adds what the proxy itself says, after [`RequestWriter::forward_proxied`]:
    /// `X-Forwarded-For` (a trusted client's list, then `proxy.client_ip`),
    /// `X-Forwarded-Proto` unless a trusted client's was kept, `Via`, and an upgrade's
    /// `Connection` and `Upgrade`.
    pub fn proxy_headers(&mut self, proxy: &ProxyHeaders<'_>, seen: Proxied) {
        match seen.xff.filter(|p| !p.is_empty()) {
            Some(mut prev) => {
                prev.extend_from_slice(b", ");
                prev.extend_from_slice(proxy.client_ip.as_bytes());
                self.header(b"x-forwarded-for", &prev);
            }
            None => {
                self.header(b"x-forwarded-for", proxy.client_ip.as_bytes());
            }
        }
        if !seen.proto {
            let scheme: &[u8] = if proxy.https { b"https" } else { b"http" };
            self.header(b"x-forwarded-proto", scheme);
        }
        self.header(b"via", proxy.via.as_bytes());
        if let Some(protocol) = proxy.upgrade {
            self.header(b"connection", b"upgrade");
            self.header(b"upgrade", protocol.as_bytes());
        }
    }
}

#[cfg(test)]
#[path = "forward_tests.rs"]
mod tests;
