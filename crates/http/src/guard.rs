//! The checks every admin address of the toolkit makes before anything else (serve's
//! admin, the shadow proxy's): what a local admin server owes the browsers on the same
//! machine, which run pages from any site.
//!
//! - **DNS rebinding.** A page on `evil.example` can make its own name resolve to
//!   `127.0.0.1`; the browser then sends that page's requests to the admin as
//!   same-origin, and lets it read the answers — with `Host: evil.example:PORT`. So every
//!   request (every path, the live page's files included) must name the admin by one of
//!   its own addresses: an IP address it listens on (any IP address when it listens on
//!   all of them: a page cannot rebind an IP literal), `localhost` when it listens on
//!   loopback, or a name configured for it. Anything else is 421 Misdirected Request.
//!   The port is not compared: the name is what a rebinding page controls, and a port
//!   forwarded on the way (a container's `-p 8080:9090`) must not lock the admin out.
//! - **Cross-site requests.** A plain HTML form on any site can `POST` to
//!   `http://127.0.0.1:PORT/reload` (`Content-Type: text/plain` or a form type, no CORS
//!   preflight), and the browser sends it. So a request that may change state (any
//!   method but `GET`, `HEAD` and `OPTIONS`) is refused (403) when the browser says it
//!   comes from another site (`Sec-Fetch-Site` other than `same-origin` or `none`) or
//!   from another origin (`Origin` not this admin's own), and refused (415) unless it says
//!   `Content-Type: application/json` — a type no form can send and no script can send
//!   cross-origin without a preflight, which the admin never grants.
//!
//! A request without `Host` (HTTP/1.0) is not a browser's, and passes the host check.
//! Non-browser clients (`curl`, Prometheus, scripts) send none of `Origin` or
//! `Sec-Fetch-Site`; they need only the JSON type on a `POST`.

use std::net::{IpAddr, SocketAddr};

use bytes::Bytes;
use http::header::{CONTENT_TYPE, ORIGIN};
use http::{HeaderMap, Method, Response, StatusCode, Uri, Version};

use crate::error::error_response;
use crate::host::{HostError, request_host, split_host_port, valid_authority};

/// The admin address's own checks ([module docs](self)): built once per listener, then
/// [`AdminGuard::check`] on every request before the token and the endpoint.
///
/// ```
/// use http::{HeaderMap, Method, Uri, Version};
/// use scalpel_http::AdminGuard;
/// let guard = AdminGuard::new("127.0.0.1:9090".parse().unwrap());
/// let uri: Uri = "/reload".parse().unwrap();
/// let mut h = HeaderMap::new();
/// h.insert("host", "evil.example:9090".parse().unwrap());
/// assert_eq!(guard.check(&Method::GET, Version::HTTP_11, &uri, &h).unwrap_err().status(), 421);
/// h.insert("host", "127.0.0.1:9090".parse().unwrap());
/// h.insert("content-type", "text/plain".parse().unwrap());
/// assert_eq!(guard.check(&Method::POST, Version::HTTP_11, &uri, &h).unwrap_err().status(), 415);
/// h.insert("content-type", "application/json".parse().unwrap());
/// assert!(guard.check(&Method::POST, Version::HTTP_11, &uri, &h).is_ok());
/// ```
#[derive(Debug, Clone)]
pub struct AdminGuard {
    local: IpAddr,
    /// Configured names, lower case, each `host` or `host:port`.
    names: Vec<String>,
}

/// Why [`AdminGuard::check`] refused a request: a status and the toolkit's error body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    status: StatusCode,
    kind: &'static str,
    detail: String,
}

impl Refusal {
    fn new(status: StatusCode, kind: &'static str, detail: String) -> Self {
        Self {
            status,
            kind,
            detail,
        }
    }

    /// 400, 403, 415 or 421.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The error body's kind: `bad_request`, `misdirected_request`, `cross_site`,
    /// `unsupported_media_type`.
    pub fn kind(&self) -> &'static str {
        self.kind
    }

    /// What a person reads.
    pub fn detail(&self) -> &str {
        &self.detail
    }

    /// The answer: the status and `{"error":KIND,"detail":…}` ([`crate::error_body`]).
    pub fn response(&self) -> Response<Bytes> {
        error_response(self.status, self.kind, &self.detail)
    }
}

impl AdminGuard {
    /// The guard of an admin listening on `local` (its bound address: `0.0.0.0` or `::`
    /// means every address of the machine).
    pub fn new(local: SocketAddr) -> Self {
        Self {
            local: local.ip().to_canonical(),
            names: Vec::new(),
        }
    }

    /// Also accepts these names in `Host` (`admin.example` or `admin.example:9443`, a
    /// port making the name count on that port only): the names a proxy or a person uses
    /// to reach the admin. `Err` names the first that is not a valid `host[:port]`.
    pub fn with_names<I, S>(mut self, names: I) -> Result<Self, String>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        for n in names {
            let n = n.as_ref().trim();
            if !valid_authority(n) {
                return Err(n.to_string());
            }
            self.names.push(n.to_ascii_lowercase());
        }
        Ok(self)
    }

    /// Checks one request's head: its host (400 when unreadable, 421 when not this
    /// admin's), then, for a method that may change state, where it comes from (403) and
    /// its type (415).
    pub fn check(
        &self,
        method: &Method,
        version: Version,
        uri: &Uri,
        headers: &HeaderMap,
    ) -> Result<(), Refusal> {
        let host = request_host(version, uri, headers).map_err(bad_host)?;
        if let Some(h) = host
            && !self.own(h)
        {
            return Err(Refusal::new(
                StatusCode::MISDIRECTED_REQUEST,
                "misdirected_request",
                format!(
                    "Host {h} is not this admin's address: use one of its IP addresses, \
                     localhost, or a name configured for it (serve: [server] admin_hosts; \
                     shadow: --admin-host)"
                ),
            ));
        }
        if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
            return Ok(());
        }
        cross_site(method, host, headers)?;
        json_typed(method, headers)
    }

    /// Does `authority` name this admin?
    fn own(&self, authority: &str) -> bool {
        let Some((host, port)) = split_host_port(authority) else {
            return false;
        };
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = bare.parse::<IpAddr>() {
            let ip = ip.to_canonical();
            return self.local.is_unspecified() || ip == self.local;
        }
        let lower = host.trim_end_matches('.').to_ascii_lowercase();
        let localhost = lower == "localhost" || lower.ends_with(".localhost");
        if localhost && (self.local.is_loopback() || self.local.is_unspecified()) {
            return true;
        }
        self.names.iter().any(|n| match split_host_port(n) {
            Some((name, None)) => name.trim_end_matches('.') == lower,
            Some((name, Some(p))) => name.trim_end_matches('.') == lower && Some(p) == port,
            None => false,
        })
    }
}

fn bad_host(e: HostError) -> Refusal {
    Refusal::new(StatusCode::BAD_REQUEST, e.kind(), e.to_string())
}

/// 403 when the browser says the request comes from another site or origin.
fn cross_site(method: &Method, host: Option<&str>, headers: &HeaderMap) -> Result<(), Refusal> {
    let refuse = |why: String| {
        Refusal::new(
            StatusCode::FORBIDDEN,
            "cross_site",
            format!(
                "{method} refused: {why}; the admin takes changes from its own page or from a client that is not a browser"
            ),
        )
    };
    for site in headers.get_all("sec-fetch-site") {
        let site = site.to_str().unwrap_or("?").trim();
        if !(site.eq_ignore_ascii_case("same-origin") || site.eq_ignore_ascii_case("none")) {
            return Err(refuse(format!(
                "the browser says it comes from a {site} page"
            )));
        }
    }
    for origin in headers.get_all(ORIGIN) {
        let origin = origin.to_str().unwrap_or("?").trim();
        if !same_origin(origin, host) {
            return Err(refuse(format!("it comes from the page of {origin}")));
        }
    }
    Ok(())
}

/// Is `origin` (`scheme://host[:port]`) the admin's own, as named by the request's host?
fn same_origin(origin: &str, host: Option<&str>) -> bool {
    let Some(host) = host else { return false };
    let Some((scheme, authority)) = origin.split_once("://") else {
        return false;
    };
    let default_port = match scheme.to_ascii_lowercase().as_str() {
        "http" => "80",
        "https" => "443",
        _ => return false,
    };
    let normal = |a: &str| -> Option<(String, String)> {
        let (h, p) = split_host_port(a)?;
        Some((
            h.to_ascii_lowercase(),
            p.filter(|p| !p.is_empty())
                .unwrap_or(default_port)
                .to_string(),
        ))
    };
    normal(authority).is_some() && normal(authority) == normal(host)
}

/// 415 unless the request says its body is JSON (an empty body may say so too).
fn json_typed(method: &Method, headers: &HeaderMap) -> Result<(), Refusal> {
    let json = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(';').next().unwrap_or("").trim())
        .is_some_and(|t| t.eq_ignore_ascii_case("application/json"));
    if json {
        return Ok(());
    }
    Err(Refusal::new(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
        format!(
            "{method} needs Content-Type: application/json (the body may be empty): \
             the admin refuses what a plain HTML form on another site could send"
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(
        guard: &AdminGuard,
        method: Method,
        headers: &[(&str, &str)],
    ) -> Result<(), (u16, &'static str)> {
        let mut h = HeaderMap::new();
        for (k, v) in headers {
            h.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        let uri: Uri = "/reload".parse().unwrap();
        guard
            .check(&method, Version::HTTP_11, &uri, &h)
            .map_err(|r| (r.status().as_u16(), r.kind()))
    }

    fn loopback() -> AdminGuard {
        AdminGuard::new("127.0.0.1:9090".parse().unwrap())
    }

    #[test]
    fn the_admins_own_addresses_and_names_pass_others_are_misdirected() {
        let g = loopback()
            .with_names(["admin.example", "Ops.Example:9443"])
            .unwrap();
        for ok in [
            "127.0.0.1:9090",
            "127.0.0.1",
            "127.0.0.1:8080",
            "localhost:9090",
            "LOCALHOST",
            "app.localhost:9090",
            "localhost.:9090",
            "admin.example:9090",
            "ADMIN.example",
            "ops.example:9443",
        ] {
            assert_eq!(check(&g, Method::GET, &[("host", ok)]), Ok(()), "{ok}");
        }
        for bad in [
            "evil.example:9090",
            "127.0.0.2:9090",
            "[::1]:9090",
            "ops.example:9090",
            "localhost.evil.example",
            "admin.example.evil.example",
        ] {
            assert_eq!(
                check(&g, Method::GET, &[("host", bad)]),
                Err((421, "misdirected_request")),
                "{bad}"
            );
        }
        assert_eq!(
            check(&g, Method::GET, &[("host", "a b")]),
            Err((400, "bad_request"))
        );
        assert_eq!(
            check(
                &g,
                Method::GET,
                &[("host", "127.0.0.1"), ("host", "evil.example")]
            ),
            Err((400, "bad_request"))
        );
    }

    #[test]
    fn an_admin_on_every_address_takes_any_ip_but_no_foreign_name() {
        for local in ["0.0.0.0:9090", "[::]:9090"] {
            let g = AdminGuard::new(local.parse().unwrap());
            for ok in ["10.1.2.3:9090", "[2001:db8::1]:9090", "localhost:9090"] {
                assert_eq!(check(&g, Method::GET, &[("host", ok)]), Ok(()), "{ok}");
            }
            assert_eq!(
                check(&g, Method::GET, &[("host", "evil.example")]),
                Err((421, "misdirected_request"))
            );
        }
        let lan = AdminGuard::new("192.168.1.5:9090".parse().unwrap());
        assert_eq!(
            check(&lan, Method::GET, &[("host", "192.168.1.5:9090")]),
            Ok(())
        );
        assert_eq!(
            check(&lan, Method::GET, &[("host", "localhost:9090")]),
            Err((421, "misdirected_request"))
        );
    }

    /// What a form on another site sends — and what the browser adds to a script's
    /// request — is refused; the admin's own page and non-browser clients pass.
    #[test]
    fn state_changes_need_the_json_type_and_no_other_site() {
        let g = loopback();
        let host = ("host", "127.0.0.1:9090");
        let json = ("content-type", "application/json");
        // a form from another site, as browsers send it
        assert_eq!(
            check(
                &g,
                Method::POST,
                &[
                    host,
                    ("content-type", "text/plain"),
                    ("origin", "https://evil.example"),
                    ("sec-fetch-site", "cross-site"),
                ]
            ),
            Err((403, "cross_site"))
        );
        // a form from the same site, no Origin: still not JSON
        assert_eq!(
            check(
                &g,
                Method::POST,
                &[host, ("content-type", "application/x-www-form-urlencoded")]
            ),
            Err((415, "unsupported_media_type"))
        );
        assert_eq!(
            check(&g, Method::POST, &[host]),
            Err((415, "unsupported_media_type"))
        );
        for (k, v) in [
            ("origin", "https://evil.example"),
            ("origin", "null"),
            ("origin", "http://localhost:3000"),
            ("origin", "http://127.0.0.1:9091"),
            ("origin", "file://"),
            ("sec-fetch-site", "same-site"),
            ("sec-fetch-site", "cross-site"),
        ] {
            assert_eq!(
                check(&g, Method::POST, &[host, json, (k, v)]),
                Err((403, "cross_site")),
                "{k}: {v}"
            );
        }
        // the admin's own page (fetch from http://127.0.0.1:9090/), curl, a script
        for extra in [
            vec![
                ("origin", "http://127.0.0.1:9090"),
                ("sec-fetch-site", "same-origin"),
            ],
            vec![("origin", "HTTP://127.0.0.1:9090")],
            vec![("sec-fetch-site", "none")],
            vec![],
        ] {
            let mut hs = vec![host, ("content-type", "application/json; charset=utf-8")];
            hs.extend(extra.iter().copied());
            assert_eq!(check(&g, Method::POST, &hs), Ok(()), "{extra:?}");
        }
        // default ports are the same origin as none
        assert_eq!(
            check(
                &g,
                Method::DELETE,
                &[
                    ("host", "localhost:80"),
                    json,
                    ("origin", "http://localhost")
                ]
            ),
            Ok(())
        );
        // reading is not guarded by type or site (the host check still holds)
        assert_eq!(
            check(&g, Method::GET, &[host, ("sec-fetch-site", "cross-site")]),
            Ok(())
        );
    }

    #[test]
    fn configured_names_are_checked() {
        assert_eq!(
            loopback()
                .with_names(["ok.example", "bad name"])
                .unwrap_err(),
            "bad name"
        );
    }
}
