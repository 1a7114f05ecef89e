//! Upstream addresses and the buffered HTTP exchange used for mirrors and replay.

use std::time::{Duration, Instant};

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use http::header::{HOST, PROXY_AUTHORIZATION, TE, TRAILER};
use http::{HeaderMap, Request, Uri};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use crate::ShadowError;
use crate::budget::Budget;
use crate::model::{Failure, ShadowRequest, ShadowResponse};

/// A service to send requests to: `http://host:port[/prefix]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    origin: String,
    prefix: String,
}

impl Upstream {
    /// Parses `http://host:port` with an optional path prefix. Only plain HTTP:
    /// shadowing runs next to the services, behind any TLS termination.
    pub fn parse(url: &str) -> Result<Self, ShadowError> {
        let bad = |reason: &str| ShadowError::Url {
            url: url.to_string(),
            reason: reason.to_string(),
        };
        let uri: Uri = url.parse().map_err(|_| bad("not a URL"))?;
        match uri.scheme_str() {
            Some("http") => {}
            Some("https") => return Err(bad("https upstreams are not supported; use http")),
            _ => return Err(bad("expected http://host:port")),
        }
        let authority = uri.authority().ok_or_else(|| bad("no host"))?;
        if authority.as_str().contains('@') {
            return Err(bad("credentials in the URL are not supported"));
        }
        if uri.query().is_some() {
            return Err(bad("a query string is not allowed here"));
        }
        Ok(Self {
            origin: format!("http://{authority}"),
            prefix: uri.path().trim_end_matches('/').to_string(),
        })
    }

    /// The URI of `path_and_query` on this upstream.
    pub(crate) fn uri(&self, path_and_query: &str) -> Result<Uri, Failure> {
        format!("{}{}{}", self.origin, self.prefix, path_and_query)
            .parse()
            .map_err(|_| Failure::Connect)
    }
}

impl std::fmt::Display for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{}", self.origin, self.prefix)
    }
}

/// A copy of `headers` for an upstream: without hop-by-hop headers (the toolkit's one
/// list, `scalpel_http`, with what `Connection` names), without `Host`, which the client
/// sets per upstream, and without `Proxy-Authorization`: credentials meant for a proxy
/// are never handed to the services behind it, least of all to a candidate.
pub(crate) fn forwardable(headers: &HeaderMap) -> HeaderMap {
    let mut out = scalpel_http::forwardable(headers);
    out.remove(HOST);
    out.remove(PROXY_AUTHORIZATION);
    out
}

/// Removes hop-by-hop headers from a response head in place (the toolkit's one list,
/// with what `Connection` names), except `Trailer`: it is end to end (RFC 9110 §6.6.2,
/// not among §7.6.1's hop-by-hop fields), and hyper's server sends a client the
/// trailers it asked for only when the head declares them.
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let trailer: Vec<_> = headers.get_all(TRAILER).iter().cloned().collect();
    scalpel_http::strip_hop_by_hop(headers);
    for v in trailer {
        headers.append(TRAILER, v);
    }
}

/// Whether a client's `TE` accepts trailers.
pub(crate) fn accepts_trailers(headers: &HeaderMap) -> bool {
    headers
        .get_all(TE)
        .iter()
        .flat_map(|v| v.as_bytes().split(|b| *b == b','))
        .any(|t| {
            let t = t.trim_ascii();
            t.eq_ignore_ascii_case(b"trailers")
        })
}

/// The kind of failure behind a client error that came before any response head.
pub(crate) fn head_failure(e: &hyper_util::client::legacy::Error) -> Failure {
    if e.is_connect() {
        return Failure::Connect;
    }
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(h) = s.downcast_ref::<hyper::Error>() {
            return if h.is_parse() || h.is_parse_status() {
                Failure::Protocol
            } else {
                Failure::Connect
            };
        }
        source = s.source();
    }
    Failure::Connect
}

/// A pooled client for whole-body exchanges.
pub(crate) type BufferedClient = Client<HttpConnector, Full<Bytes>>;

pub(crate) fn connector(connect_timeout: Duration) -> HttpConnector {
    let mut c = HttpConnector::new();
    c.set_nodelay(true);
    c.set_connect_timeout(Some(connect_timeout));
    c
}

pub(crate) fn buffered_client(connect_timeout: Duration, max_idle: usize) -> BufferedClient {
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(30))
        .pool_max_idle_per_host(max_idle)
        .build(connector(connect_timeout))
}

/// Why an exchange gave no response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ExchangeError {
    /// The side failed.
    Failed(Failure),
    /// The mirror byte budget could not hold the body: not the side's fault.
    OverBudget,
}

/// Sends `req` to `upstream` and reads the whole response, all within `timeout`. With a
/// `budget`, every body byte read is charged to it first (the charge travels with the
/// response).
pub(crate) async fn exchange(
    client: &BufferedClient,
    upstream: &Upstream,
    req: &ShadowRequest,
    timeout: Duration,
    max_body: usize,
    budget: Option<&Arc<Budget>>,
) -> Result<ShadowResponse, ExchangeError> {
    let failed = ExchangeError::Failed;
    let start = Instant::now();
    let mut builder = Request::builder()
        .method(req.method.clone())
        .uri(upstream.uri(&req.path_and_query).map_err(failed)?);
    if let Some(h) = builder.headers_mut() {
        *h = forwardable(&req.headers);
    }
    let request = builder
        .body(Full::new(req.body.clone()))
        .map_err(|_| failed(Failure::Connect))?;
    let work = async {
        let resp = client
            .request(request)
            .await
            .map_err(|e| failed(head_failure(&e)))?;
        let (parts, mut body) = resp.into_parts();
        let mut buf = BytesMut::new();
        let mut charge = budget.map(|b| b.charge());
        while let Some(frame) = body.frame().await {
            // A body cut short, or a broken chunk: the head came, the body did not.
            let frame = frame.map_err(|_| failed(Failure::Body))?;
            let Ok(data) = frame.into_data() else {
                continue; // trailers end the body
            };
            if buf.len() + data.len() > max_body {
                return Err(failed(Failure::TooLarge));
            }
            if let Some(c) = charge.as_mut()
                && !c.grow(data.len())
            {
                return Err(ExchangeError::OverBudget);
            }
            buf.extend_from_slice(&data);
        }
        Ok(ShadowResponse {
            status: parts.status,
            headers: parts.headers,
            body: buf.freeze(),
            latency: start.elapsed(),
            charge,
        })
    };
    tokio::time::timeout(timeout, work)
        .await
        .unwrap_or(Err(failed(Failure::Timeout)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_rules_keep_trailer_and_drop_what_connection_names() {
        let mut h = HeaderMap::new();
        for (k, v) in [
            ("connection", "x-hop, close"),
            ("x-hop", "1"),
            ("host", "proxy:9000"),
            ("proxy-authorization", "Basic c2VjcmV0"),
            ("te", "trailers"),
            ("trailer", "x-sum"),
            ("x-keep", "1"),
        ] {
            h.append(k, http::HeaderValue::from_static(v));
        }
        let fwd = forwardable(&h);
        let names: Vec<&str> = fwd.keys().map(|k| k.as_str()).collect();
        assert_eq!(names, ["x-keep"]);
        assert!(accepts_trailers(&h));
        strip_hop_by_hop(&mut h);
        assert!(h.contains_key("trailer") && h.contains_key("x-keep"));
        assert!(!h.contains_key("x-hop") && !h.contains_key("connection") && !h.contains_key("te"));
    }

    #[test]
    fn upstreams_parse_with_prefix_and_reject_what_cannot_work() {
        let u = Upstream::parse("http://127.0.0.1:8080/base/").unwrap();
        assert_eq!(
            u.uri("/x?y=1").unwrap().to_string(),
            "http://127.0.0.1:8080/base/x?y=1"
        );
        assert_eq!(u.to_string(), "http://127.0.0.1:8080/base");
        for bad in [
            "https://a:1",
            "ftp://a",
            "a:1",
            "http://u:p@a:1",
            "http://a:1/?q=1",
            "::",
        ] {
            assert!(Upstream::parse(bad).is_err(), "{bad}");
        }
    }
}
