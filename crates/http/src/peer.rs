//! A peer: where an upstream lives (scheme, host, port, base path) and the settings that
//! travel with it — TLS verification, SNI, address override, protocol, time-outs, limits.
//! Nothing here is global: two upstreams of one process can differ in every setting.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use crate::h1::DEFAULT_MAX_HEAD_BYTES;

/// `http` or `https`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// Plain TCP.
    Http,
    /// TLS over TCP.
    Https,
}

impl Scheme {
    /// `http` or `https`.
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }
}

/// Which HTTP version to speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HttpVersion {
    /// HTTP/1.1 only (ALPN offers `http/1.1` over TLS).
    #[default]
    Http1,
    /// HTTP/2 only: over TLS ALPN must choose `h2` (else [`crate::TlsError::NoH2`]);
    /// over `http://` prior knowledge (h2c, RFC 9113 §3.3).
    Http2,
    /// Whatever the server prefers over TLS (ALPN offers `h2` and `http/1.1`); HTTP/1.1
    /// over `http://`.
    Auto,
}

/// A base URL that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad URL `{url}`: {why}")]
pub struct UrlError {
    url: String,
    why: &'static str,
}

/// A `--resolve HOST:PORT:ADDR` entry (as curl's): connect to `ADDR` when the peer is
/// `HOST:PORT`, while SNI, certificate name and `Host` stay `HOST`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolve {
    host: String,
    port: u16,
    addr: IpAddr,
}

/// A `--resolve` value that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad --resolve `{value}`: expected HOST:PORT:ADDR, e.g. example.com:443:127.0.0.1")]
pub struct ResolveError {
    value: String,
}

impl Resolve {
    /// Parses `HOST:PORT:ADDR`; an IPv6 address may be bracketed (`h:443:[::1]`).
    pub fn parse(value: &str) -> Result<Resolve, ResolveError> {
        let err = || ResolveError {
            value: value.to_string(),
        };
        let (host, rest) = value.split_once(':').ok_or_else(err)?;
        let (port, addr) = rest.split_once(':').ok_or_else(err)?;
        let addr = addr.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() {
            return Err(err());
        }
        Ok(Resolve {
            host: host.to_ascii_lowercase(),
            port: port.parse().map_err(|_| err())?,
            addr: addr.parse().map_err(|_| err())?,
        })
    }

    /// The address for `host:port`, when this entry is for it.
    pub fn lookup(&self, host: &str, port: u16) -> Option<SocketAddr> {
        (self.port == port && self.host.eq_ignore_ascii_case(host))
            .then_some(SocketAddr::new(self.addr, port))
    }
}

/// The settings that travel with a peer. Start from `PeerOptions::default()` and set
/// fields; every one has a safe default.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PeerOptions {
    /// HTTP/1.1, HTTP/2, or ALPN's choice. Default HTTP/1.1.
    pub version: HttpVersion,
    /// The TLS server name (SNI and the name the certificate must carry); default the
    /// URL's host.
    pub sni: Option<String>,
    /// Address overrides (`--resolve`), checked before DNS.
    pub resolve: Vec<Resolve>,
    /// A PEM file of CA certificates (one or several) to trust instead of the system's
    /// store.
    pub ca_file: Option<PathBuf>,
    /// Skip certificate verification (`--insecure`): the connection is encrypted but
    /// the server unauthenticated. Say so wherever results are shown.
    pub insecure: bool,
    /// TCP connect plus TLS handshake. Default 5 s.
    pub connect_timeout: Duration,
    /// Longest wait for the next bytes of a response (head or body) once the request is
    /// written; `None` leaves it to the caller's own deadline (the load generator's
    /// whole-request time-out), saving a timer per read. Default 30 s.
    pub read_timeout: Option<Duration>,
    /// How long an idle pooled connection may wait for reuse. Default 60 s.
    pub idle_timeout: Duration,
    /// The response head limit in bytes. Default 64 KiB.
    pub max_head_bytes: usize,
    /// HTTP/2 per-stream receive window, bytes. Default 1 MiB.
    pub h2_stream_window: u32,
    /// HTTP/2 connection receive window, bytes. Default 4 MiB.
    pub h2_connection_window: u32,
}

impl Default for PeerOptions {
    fn default() -> Self {
        Self {
            version: HttpVersion::Http1,
            sni: None,
            resolve: Vec::new(),
            ca_file: None,
            insecure: false,
            connect_timeout: Duration::from_secs(5),
            read_timeout: Some(Duration::from_secs(30)),
            idle_timeout: Duration::from_secs(60),
            max_head_bytes: DEFAULT_MAX_HEAD_BYTES,
            h2_stream_window: 1 << 20,
            h2_connection_window: 4 << 20,
        }
    }
}

/// An upstream: `http[s]://host[:port][/prefix]` and its [`PeerOptions`].
#[derive(Debug, Clone)]
pub struct Peer {
    scheme: Scheme,
    host: String,
    port: u16,
    /// Path prefix without a trailing slash (`""` for the root).
    prefix: String,
    /// The `Host` header / `:authority`: as written in the URL.
    authority: String,
    options: PeerOptions,
}

impl Peer {
    /// Parses a base URL, `http://` or `https://`, with default options.
    pub fn parse(url: &str) -> Result<Peer, UrlError> {
        let err = |why| UrlError {
            url: url.to_string(),
            why,
        };
        let (scheme, rest, default_port) = if let Some(rest) = url.strip_prefix("http://") {
            (Scheme::Http, rest, 80)
        } else if let Some(rest) = url.strip_prefix("https://") {
            (Scheme::Https, rest, 443)
        } else {
            return Err(err("expected http://HOST[:PORT][/PATH] or https://…"));
        };
        let (authority, path) = match rest.find(['/', '?', '#']) {
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
            if host.parse::<std::net::Ipv6Addr>().is_err() {
                return Err(err("bad IPv6 address"));
            }
            match &v6[end + 1..] {
                "" => (host, default_port),
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
                None => (authority, default_port),
            }
        };
        if host.is_empty() {
            return Err(err("missing host"));
        }
        if host
            .bytes()
            .any(|b| b.is_ascii_whitespace() || b.is_ascii_control())
        {
            return Err(err("bad host"));
        }
        if path.starts_with('?') || path.contains('?') {
            return Err(err("a base URL takes no query; put it in the request"));
        }
        if path.contains('#') {
            return Err(err("a base URL takes no fragment"));
        }
        Ok(Peer {
            scheme,
            host: host.to_string(),
            port,
            prefix: path.trim_end_matches('/').to_string(),
            authority: authority.to_string(),
            options: PeerOptions::default(),
        })
    }

    /// The same peer with these options.
    pub fn with_options(mut self, options: PeerOptions) -> Peer {
        self.options = options;
        self
    }

    /// The options, to read or change.
    pub fn options_mut(&mut self) -> &mut PeerOptions {
        &mut self.options
    }

    /// The options.
    pub fn options(&self) -> &PeerOptions {
        &self.options
    }

    /// `http` or `https`.
    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    /// The host as written in the URL (brackets of an IPv6 address removed).
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The port (80 or 443 when the URL names none).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The base path, without a trailing slash (`""` for none).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// `host[:port]` as written: the `Host` header and h2 `:authority`.
    pub fn authority(&self) -> &str {
        &self.authority
    }

    /// The name TLS verifies: the SNI override, else the host.
    pub fn tls_name(&self) -> &str {
        self.options.sni.as_deref().unwrap_or(&self.host)
    }

    /// `scheme://authority/prefix` — for messages and report headers.
    pub fn base_url(&self) -> String {
        format!(
            "{}://{}{}",
            self.scheme.as_str(),
            self.authority,
            self.prefix
        )
    }

    /// The absolute URI of `path_and_query` on this peer (what an h2 request carries).
    pub fn uri(&self, path_and_query: &str) -> Result<http::Uri, http::uri::InvalidUri> {
        let slash = if path_and_query.starts_with('/') {
            ""
        } else {
            "/"
        };
        format!("{}{slash}{path_and_query}", self.base_url()).parse()
    }

    /// Whether the connection is TLS.
    pub fn is_tls(&self) -> bool {
        self.scheme == Scheme::Https
    }

    /// The `--resolve` override for this peer, if any.
    pub(crate) fn resolved(&self) -> Option<SocketAddr> {
        self.options
            .resolve
            .iter()
            .find_map(|r| r.lookup(&self.host, self.port))
    }
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.base_url())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls_parse_with_scheme_port_and_prefix() {
        let p = Peer::parse("https://example.test/api/").unwrap();
        assert_eq!(
            (p.scheme(), p.host(), p.port(), p.prefix(), p.authority()),
            (Scheme::Https, "example.test", 443, "/api", "example.test")
        );
        let p = Peer::parse("http://[::1]:9000").unwrap();
        assert_eq!(
            (p.host(), p.port(), p.authority()),
            ("::1", 9000, "[::1]:9000")
        );
        assert_eq!(Peer::parse("http://h").unwrap().port(), 80);
        assert_eq!(
            Peer::parse("https://h:8443/b")
                .unwrap()
                .uri("x?y=1")
                .unwrap()
                .to_string(),
            "https://h:8443/b/x?y=1"
        );
        for bad in [
            "ftp://x",
            "x:80",
            "http://",
            "http://h:port",
            "http://h:99999",
            "http://:80",
            "http://h?x=1",
            "http://h/p?x=1",
            "http://u:p@h",
            "http://[::1",
            "http://[zz]:1",
            "https://h#f",
        ] {
            assert!(Peer::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn resolve_entries_parse_like_curl() {
        let r = Resolve::parse("Example.test:443:127.0.0.1").unwrap();
        assert_eq!(
            r.lookup("example.TEST", 443),
            Some("127.0.0.1:443".parse().unwrap())
        );
        assert_eq!(r.lookup("example.test", 80), None);
        let r = Resolve::parse("h:8443:[::1]").unwrap();
        assert_eq!(r.lookup("h", 8443), Some("[::1]:8443".parse().unwrap()));
        for bad in ["h:443", "h:x:127.0.0.1", ":443:127.0.0.1", "h:443:nope", ""] {
            assert!(Resolve::parse(bad).is_err(), "{bad}");
        }
        let mut p = Peer::parse("https://h:8443").unwrap();
        p.options_mut().resolve.push(r);
        assert_eq!(p.resolved(), Some("[::1]:8443".parse().unwrap()));
    }
}
