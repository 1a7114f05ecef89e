//! Upstream addresses and the buffered HTTP exchange used for mirrors and replay.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{
    CONNECTION, HOST, HeaderName, PROXY_AUTHORIZATION, TE, TRAILER, TRANSFER_ENCODING, UPGRADE,
};
use http::{HeaderMap, Request, Uri};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use crate::ShadowError;
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

/// Headers that belong to one hop and are never forwarded; `Host` is set per upstream.
pub(crate) fn is_hop_by_hop(name: &HeaderName) -> bool {
    name == CONNECTION
        || name == TE
        || name == TRAILER
        || name == TRANSFER_ENCODING
        || name == UPGRADE
        || name == HOST
        || name == PROXY_AUTHORIZATION
        || name.as_str() == "keep-alive"
        || name.as_str() == "proxy-connection"
}

pub(crate) fn forwardable(headers: &HeaderMap) -> HeaderMap {
    let mut out = HeaderMap::with_capacity(headers.len());
    for (k, v) in headers {
        if !is_hop_by_hop(k) {
            out.append(k.clone(), v.clone());
        }
    }
    out
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

/// Sends `req` to `upstream` and reads the whole response, all within `timeout`.
pub(crate) async fn exchange(
    client: &BufferedClient,
    upstream: &Upstream,
    req: &ShadowRequest,
    timeout: Duration,
    max_body: usize,
) -> Result<ShadowResponse, Failure> {
    let start = Instant::now();
    let mut builder = Request::builder()
        .method(req.method.clone())
        .uri(upstream.uri(&req.path_and_query)?);
    if let Some(h) = builder.headers_mut() {
        *h = forwardable(&req.headers);
    }
    let request = builder
        .body(Full::new(req.body.clone()))
        .map_err(|_| Failure::Connect)?;
    let work = async {
        let resp = client
            .request(request)
            .await
            .map_err(|_| Failure::Connect)?;
        let (parts, body) = resp.into_parts();
        let body = Limited::new(body, max_body)
            .collect()
            .await
            .map_err(|e| {
                if e.is::<http_body_util::LengthLimitError>() {
                    Failure::TooLarge
                } else {
                    Failure::Connect
                }
            })?
            .to_bytes();
        Ok(ShadowResponse {
            status: parts.status,
            headers: parts.headers,
            body,
            latency: start.elapsed(),
        })
    };
    tokio::time::timeout(timeout, work)
        .await
        .unwrap_or(Err(Failure::Timeout))
}

#[cfg(test)]
mod tests {
    use super::*;

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
