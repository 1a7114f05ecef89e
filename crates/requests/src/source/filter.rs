//! Filters and rewrites applied to every recorded request, and the headers a replay never
//! copies.

use http::{HeaderName, HeaderValue, Method};
use regex::Regex;

use super::{SkipReason, SourceFormat};
use crate::RequestsError;

/// How a recorded-traffic file is read: its format (or detection), which requests are
/// used, and how their headers are rewritten.
///
/// Built with chained calls; the ones that take text check it and fail with
/// [`RequestsError::InvalidOption`]:
///
/// ```
/// use scalpel_requests::SourceOptions;
/// let options = SourceOptions::new()
///     .include_path("^/v1/")?
///     .exclude_path("/health$")?
///     .method("GET")?
///     .set_header("Authorization: Bearer test")?
///     .drop_header("Cookie")?;
/// # Ok::<(), scalpel_requests::RequestsError>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct SourceOptions {
    pub(crate) format: Option<SourceFormat>,
    include: Vec<Regex>,
    exclude: Vec<Regex>,
    methods: Vec<Method>,
    allow_unsafe: bool,
    set_headers: Vec<(HeaderName, HeaderValue)>,
    drop_headers: Vec<HeaderName>,
}

impl SourceOptions {
    /// Detect the format, keep every safe request, rewrite nothing.
    pub fn new() -> SourceOptions {
        SourceOptions::default()
    }

    /// Reads the file as `format` instead of detecting it.
    pub fn format(mut self, format: SourceFormat) -> SourceOptions {
        self.format = Some(format);
        self
    }

    /// Keeps only requests whose path and query match `pattern` (a `regex` crate
    /// expression, unanchored). Repeatable: a request matching any of them is kept.
    ///
    /// # Errors
    ///
    /// An invalid regular expression.
    pub fn include_path(mut self, pattern: &str) -> Result<SourceOptions, RequestsError> {
        self.include.push(regex("include-path", pattern)?);
        Ok(self)
    }

    /// Skips requests whose path and query match `pattern`. Repeatable.
    ///
    /// # Errors
    ///
    /// An invalid regular expression.
    pub fn exclude_path(mut self, pattern: &str) -> Result<SourceOptions, RequestsError> {
        self.exclude.push(regex("exclude-path", pattern)?);
        Ok(self)
    }

    /// Keeps only requests with this method (repeatable: any of them). Case-sensitive, as
    /// HTTP methods are; `get` is refused rather than silently matching nothing.
    ///
    /// # Errors
    ///
    /// Not a valid method token, or not upper case.
    pub fn method(mut self, method: &str) -> Result<SourceOptions, RequestsError> {
        let invalid = |message: &str| RequestsError::InvalidOption {
            option: "method",
            value: method.to_owned(),
            message: message.to_owned(),
        };
        if method.bytes().any(|b| b.is_ascii_lowercase()) {
            return Err(invalid(
                "methods are case-sensitive; write it in upper case",
            ));
        }
        let m = Method::from_bytes(method.as_bytes())
            .map_err(|_| invalid("not a valid HTTP method"))?;
        self.methods.push(m);
        Ok(self)
    }

    /// Also sends unsafe requests (any method but GET, HEAD, OPTIONS and TRACE), which are
    /// skipped by default: replaying a POST can move money twice.
    pub fn allow_unsafe(mut self, allow: bool) -> SourceOptions {
        self.allow_unsafe = allow;
        self
    }

    /// Sets header `Name: value` on every request, replacing recorded ones of that name.
    ///
    /// # Errors
    ///
    /// Not of the form `Name: value`, or an invalid name or value.
    pub fn set_header(mut self, header: &str) -> Result<SourceOptions, RequestsError> {
        let invalid = |message: &str| RequestsError::InvalidOption {
            option: "set-header",
            value: header.to_owned(),
            message: message.to_owned(),
        };
        let (name, value) = header
            .split_once(':')
            .ok_or_else(|| invalid("expected 'Name: value'"))?;
        let name = HeaderName::from_bytes(name.trim().as_bytes())
            .map_err(|_| invalid("invalid header name"))?;
        let value =
            HeaderValue::from_str(value.trim()).map_err(|_| invalid("invalid header value"))?;
        if is_never_copied(&name) {
            return Err(invalid(
                "this header is set by the sender for each connection and cannot be set here",
            ));
        }
        self.set_headers.push((name, value));
        Ok(self)
    }

    /// Removes every recorded header called `name`.
    ///
    /// # Errors
    ///
    /// An invalid header name.
    pub fn drop_header(mut self, name: &str) -> Result<SourceOptions, RequestsError> {
        let parsed = HeaderName::from_bytes(name.trim().as_bytes()).map_err(|_| {
            RequestsError::InvalidOption {
                option: "drop-header",
                value: name.to_owned(),
                message: "invalid header name".to_owned(),
            }
        })?;
        self.drop_headers.push(parsed);
        Ok(self)
    }

    /// Whether a request with `method` and `path` is used, or why not.
    pub(crate) fn classify(&self, method: &Method, path: &str) -> Result<(), SkipReason> {
        if !self.methods.is_empty() && !self.methods.contains(method) {
            return Err(SkipReason::MethodNotSelected);
        }
        if !self.include.is_empty() && !self.include.iter().any(|r| r.is_match(path)) {
            return Err(SkipReason::PathNotIncluded);
        }
        if self.exclude.iter().any(|r| r.is_match(path)) {
            return Err(SkipReason::PathExcluded);
        }
        if !self.allow_unsafe && !is_safe(method) {
            return Err(SkipReason::Unsafe);
        }
        Ok(())
    }

    /// Applies `drop_header` and `set_header` to a recorded request's headers.
    pub(crate) fn rewrite(&self, headers: &mut Vec<(HeaderName, HeaderValue)>) {
        if !self.drop_headers.is_empty() || !self.set_headers.is_empty() {
            headers.retain(|(name, _)| {
                !self.drop_headers.contains(name)
                    && !self.set_headers.iter().any(|(n, _)| n == name)
            });
        }
        headers.extend(self.set_headers.iter().cloned());
    }
}

fn regex(option: &'static str, pattern: &str) -> Result<Regex, RequestsError> {
    Regex::new(pattern).map_err(|e| RequestsError::InvalidOption {
        option,
        value: pattern.to_owned(),
        message: e.to_string(),
    })
}

/// GET, HEAD, OPTIONS and TRACE (RFC 9110 §9.2.1). Everything else, including methods this
/// crate has never heard of, is unsafe: failing closed.
pub(crate) fn is_safe(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE
    )
}

/// Headers a replay never copies from a recording: the host (replaced by the target's),
/// framing that the sender computes for the body it sends, and hop-by-hop headers
/// (RFC 9110 §7.6.1), which described the recorded connection, not the request. The
/// hop-by-hop names are those of `scalpel_http::HOP_BY_HOP` (a test keeps them in step;
/// this crate does not depend on the network crate for a list of names).
pub(crate) fn is_never_copied(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "host"
            | "content-length"
            | "transfer-encoding"
            | "connection"
            | "keep-alive"
            | "proxy-connection"
            | "te"
            | "trailer"
            | "upgrade"
            | "expect"
    )
}

/// Adds a recorded header unless it is never copied or is an HTTP/2 pseudo-header
/// (`:authority`, … in browser HARs). Returns false when the name or value is invalid.
pub(crate) fn push_recorded(
    headers: &mut Vec<(HeaderName, HeaderValue)>,
    name: &[u8],
    value: &[u8],
) -> bool {
    if name.first() == Some(&b':') {
        return true;
    }
    let Ok(name) = HeaderName::from_bytes(name) else {
        return false;
    };
    let Ok(value) = HeaderValue::from_bytes(value) else {
        return false;
    };
    if !is_never_copied(&name) {
        headers.push((name, value));
    }
    true
}

/// Removes headers that a recorded `Connection` header named (hop-by-hop by declaration).
pub(crate) fn drop_connection_listed(headers: &mut Vec<(HeaderName, HeaderValue)>, listed: &[u8]) {
    for token in listed.split(|&b| b == b',') {
        let token = token.trim_ascii();
        if token.is_empty() {
            continue;
        }
        headers.retain(|(n, _)| !n.as_str().as_bytes().eq_ignore_ascii_case(token));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_in_order_and_unsafe_by_default() {
        let o = SourceOptions::new()
            .include_path("^/v1/")
            .unwrap()
            .exclude_path("health")
            .unwrap();
        assert_eq!(o.classify(&Method::GET, "/v1/x"), Ok(()));
        assert_eq!(
            o.classify(&Method::GET, "/v2/x"),
            Err(SkipReason::PathNotIncluded)
        );
        assert_eq!(
            o.classify(&Method::GET, "/v1/health"),
            Err(SkipReason::PathExcluded)
        );
        assert_eq!(o.classify(&Method::POST, "/v1/x"), Err(SkipReason::Unsafe));
        let custom = Method::from_bytes(b"PURGE").unwrap();
        assert_eq!(
            o.classify(&custom, "/v1/x"),
            Err(SkipReason::Unsafe),
            "fail closed"
        );
        let o = o.allow_unsafe(true).method("POST").unwrap();
        assert_eq!(o.classify(&Method::POST, "/v1/x"), Ok(()));
        assert_eq!(
            o.classify(&Method::GET, "/v1/x"),
            Err(SkipReason::MethodNotSelected)
        );
    }

    #[test]
    fn bad_options_are_named() {
        for (result, option) in [
            (
                SourceOptions::new().include_path("(").map(|_| ()),
                "include-path",
            ),
            (SourceOptions::new().method("get").map(|_| ()), "method"),
            (SourceOptions::new().method("G T").map(|_| ()), "method"),
            (
                SourceOptions::new().set_header("nocolon").map(|_| ()),
                "set-header",
            ),
            (
                SourceOptions::new().set_header("Host: x").map(|_| ()),
                "set-header",
            ),
            (
                SourceOptions::new().drop_header("a b").map(|_| ()),
                "drop-header",
            ),
        ] {
            match result {
                Err(RequestsError::InvalidOption { option: o, .. }) => assert_eq!(o, option),
                other => panic!("{option}: {other:?}"),
            }
        }
    }

    #[test]
    fn never_copies_every_hop_by_hop_header_of_the_one_list() {
        for name in scalpel_http::HOP_BY_HOP {
            assert!(is_never_copied(&HeaderName::from_static(name)), "{name}");
        }
    }

    #[test]
    fn rewrite_drops_then_sets() {
        let o = SourceOptions::new()
            .drop_header("cookie")
            .unwrap()
            .set_header("X-Env: test")
            .unwrap();
        let mut h = vec![
            (
                HeaderName::from_static("cookie"),
                HeaderValue::from_static("a"),
            ),
            (
                HeaderName::from_static("x-env"),
                HeaderValue::from_static("prod"),
            ),
            (
                HeaderName::from_static("accept"),
                HeaderValue::from_static("*/*"),
            ),
        ];
        o.rewrite(&mut h);
        assert_eq!(
            h,
            [
                (
                    HeaderName::from_static("accept"),
                    HeaderValue::from_static("*/*")
                ),
                (
                    HeaderName::from_static("x-env"),
                    HeaderValue::from_static("test")
                ),
            ]
        );
        let mut h = Vec::new();
        assert!(push_recorded(&mut h, b":authority", b"example.com"));
        assert!(push_recorded(&mut h, b"Host", b"example.com"));
        assert!(push_recorded(&mut h, b"X-A", b"1"));
        assert!(push_recorded(&mut h, b"X-B", b"2"));
        assert!(!push_recorded(&mut h, b"X C", b"1"));
        assert!(!push_recorded(&mut h, b"X-D", b"a\nb"));
        drop_connection_listed(&mut h, b" x-b , close");
        assert_eq!(h.len(), 1);
        assert_eq!(h[0].0, "x-a");
    }
}
