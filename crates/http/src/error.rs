//! One error type for every exchange with an upstream, one kind enum with stable short
//! names, and the one JSON error body the proxies answer with.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};

use crate::h1::wire::WireError;

/// RST_STREAM reasons by code (RFC 9113 §7), and one slot for codes beyond them.
pub(crate) const REASONS: [&str; 15] = [
    "no_error",
    "protocol_error",
    "internal_error",
    "flow_control_error",
    "settings_timeout",
    "stream_closed",
    "frame_size_error",
    "refused_stream",
    "cancel",
    "compression_error",
    "connect_error",
    "enhance_your_calm",
    "inadequate_security",
    "http_1_1_required",
    "other",
];

/// The stable name of an RST_STREAM or GOAWAY reason (`cancel`, `refused_stream`, …;
/// `other` for codes RFC 9113 does not define).
pub(crate) fn reason_name(reason: h2::Reason) -> &'static str {
    REASONS[(u32::from(reason) as usize).min(REASONS.len() - 1)]
}

/// What went wrong, in the words of a results table: each kind has a stable short name
/// ([`ErrorKind::name`]) used as a JSON key and table column, and a side
/// ([`ErrorKind::side`]) that says where the fault lies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum ErrorKind {
    /// No connection: refused, unreachable, no address, the connect time-out, or an
    /// HTTP/2 handshake (after TCP and TLS) that failed. Nothing of a request was sent.
    Connect,
    /// The TLS handshake failed or did not end within the connect time-out: certificate
    /// not trusted, wrong name, expired, ALPN. Nothing of a request was sent.
    Tls,
    /// A time-out after the connection was made (response head, body, or the caller's
    /// whole-request deadline).
    Timeout,
    /// The upstream reset or closed the connection before the response head, or reset the
    /// stream (HTTP/2 RST_STREAM, GOAWAY).
    Reset,
    /// The answer is not valid HTTP (a malformed head, a bad chunk, an h2 protocol error).
    Protocol,
    /// The connection ended before the whole body arrived.
    BodyCut,
    /// A response head over the configured limit, or a body over the caller's limit.
    TooLarge,
    /// This machine ran out of something: file descriptors (EMFILE), ephemeral ports
    /// (EADDRNOTAVAIL), buffers or memory; or a request the connection cannot carry.
    /// Not the upstream's fault. [`Error::detail`] names the errno.
    Local,
}

impl ErrorKind {
    /// Every kind, in table order.
    pub const ALL: [ErrorKind; 8] = [
        ErrorKind::Connect,
        ErrorKind::Tls,
        ErrorKind::Timeout,
        ErrorKind::Reset,
        ErrorKind::Protocol,
        ErrorKind::BodyCut,
        ErrorKind::TooLarge,
        ErrorKind::Local,
    ];

    /// The stable short name: `connect`, `tls`, `timeout`, `reset`, `protocol`,
    /// `body_cut`, `too_large`, `local`. Result files and tables key on it: never change one.
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::Connect => "connect",
            ErrorKind::Tls => "tls",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Reset => "reset",
            ErrorKind::Protocol => "protocol",
            ErrorKind::BodyCut => "body_cut",
            ErrorKind::TooLarge => "too_large",
            ErrorKind::Local => "local",
        }
    }

    /// The kind of a [`ErrorKind::name`], for files that recorded one.
    pub fn from_name(name: &str) -> Option<ErrorKind> {
        ErrorKind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// What the kind means, in a few words for a person (a message's first half).
    pub fn describe(self) -> &'static str {
        match self {
            ErrorKind::Connect => "could not connect",
            ErrorKind::Tls => "the TLS handshake failed",
            ErrorKind::Timeout => "no response within the time-out",
            ErrorKind::Reset => "the connection or stream was reset before the response",
            ErrorKind::Protocol => "the response is not valid HTTP",
            ErrorKind::BodyCut => "the response body was cut short",
            ErrorKind::TooLarge => "the response is over a size limit",
            ErrorKind::Local => "this machine's own limit",
        }
    }

    /// Where the fault lies. Everything this crate reports is the upstream's doing except
    /// [`ErrorKind::Local`].
    pub fn side(self) -> Side {
        match self {
            ErrorKind::Local => Side::Local,
            _ => Side::Upstream,
        }
    }

    /// The status a gateway answers its client with: 504 for a time-out, 503 for a local
    /// shortage, 502 for the rest.
    pub fn gateway_status(self) -> StatusCode {
        match self {
            ErrorKind::Timeout => StatusCode::GATEWAY_TIMEOUT,
            ErrorKind::Local => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::BAD_GATEWAY,
        }
    }
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The key a results table counts an error under: its [`ErrorKind`] and, where there is
/// one, a finer name ([`Error::detail`]) — written `kind` or `kind:detail`
/// (`local:EMFILE`, `reset:cancel`, `reset:goaway`). `Copy` and allocation-free, so a
/// load generator's per-thread tallies keep it on the hot path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ErrorKey {
    /// The kind.
    pub kind: ErrorKind,
    /// The finer name, if any.
    pub detail: Option<&'static str>,
}

impl ErrorKey {
    /// A key without detail.
    pub const fn of(kind: ErrorKind) -> ErrorKey {
        ErrorKey { kind, detail: None }
    }

    /// A [`ErrorKind::Local`] key naming its cause (an errno name, or a tool's own such as
    /// `source`).
    pub const fn local(cause: &'static str) -> ErrorKey {
        ErrorKey {
            kind: ErrorKind::Local,
            detail: Some(cause),
        }
    }
}

impl From<ErrorKind> for ErrorKey {
    fn from(kind: ErrorKind) -> ErrorKey {
        ErrorKey::of(kind)
    }
}

impl std::fmt::Display for ErrorKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.detail {
            None => f.write_str(self.kind.name()),
            Some(d) => write!(f, "{}:{d}", self.kind.name()),
        }
    }
}

/// Where a fault lies (as pingora-error's `ErrorSource`): the upstream the request went
/// to, the downstream client that sent it (a proxy's own client), or this machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Side {
    /// The server this crate talked to.
    Upstream,
    /// The client of a proxy that uses this crate (a body that never came, bad input).
    Downstream,
    /// This process or machine (descriptors, ports, memory).
    Local,
}

impl Side {
    /// `upstream`, `downstream` or `local`.
    pub fn name(self) -> &'static str {
        match self {
            Side::Upstream => "upstream",
            Side::Downstream => "downstream",
            Side::Local => "local",
        }
    }
}

/// Which step of an exchange an error or time-out happened in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Opening the TCP connection.
    Connect,
    /// The TLS handshake (and the HTTP/2 preface).
    Handshake,
    /// Writing the request.
    Write,
    /// Waiting for or reading the response head.
    Head,
    /// Reading the response body.
    Body,
}

impl Phase {
    fn describe(self) -> &'static str {
        match self {
            Phase::Connect => "connecting",
            Phase::Handshake => "during the handshake",
            Phase::Write => "writing the request",
            Phase::Head => "waiting for the response head",
            Phase::Body => "reading the response body",
        }
    }
}

/// A certificate or handshake problem, each named in one line a person can act on.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// The chain does not lead to a trusted root.
    #[error(
        "the certificate of {name} is not trusted (unknown issuer); pass its CA with --cacert FILE, or --insecure"
    )]
    NotTrusted {
        /// The name verified.
        name: String,
    },
    /// The certificate is for other names.
    #[error("the certificate is not valid for the name {name}{presented}")]
    NameMismatch {
        /// The name verified (SNI or URL host).
        name: String,
        /// `" (it is for a, b)"`, when known.
        presented: String,
    },
    /// The certificate's validity ended.
    #[error("the certificate of {name} has expired")]
    Expired {
        /// The name verified.
        name: String,
    },
    /// The certificate's validity has not begun.
    #[error("the certificate of {name} is not valid yet")]
    NotYetValid {
        /// The name verified.
        name: String,
    },
    /// Any other certificate defect.
    #[error("the certificate of {name} was rejected: {detail}")]
    BadCertificate {
        /// The name verified.
        name: String,
        /// What rustls said.
        detail: String,
    },
    /// HTTP/2 was asked for and the server's ALPN did not choose it.
    #[error("server does not speak h2 (ALPN chose {chosen}); drop --http2 to use HTTP/1.1")]
    NoH2 {
        /// The protocol the server chose, or `nothing`.
        chosen: String,
    },
    /// The CA file cannot be used.
    #[error("cannot use CA file {}: {why}", path.display())]
    CaFile {
        /// The file given.
        path: PathBuf,
        /// Unreadable, no certificate in it, or a certificate rustls refuses.
        why: String,
    },
    /// The system's trust store is empty or missing.
    #[error(
        "no trusted roots in the system store (install ca-certificates) — pass --cacert FILE or --insecure"
    )]
    NoSystemRoots,
    /// A listener's certificate or key file cannot be used (`--tls-cert`, `--tls-key`,
    /// `[server.tls]`).
    #[error("cannot use {}: {why}", path.display())]
    ServerFile {
        /// The file given.
        path: PathBuf,
        /// Unreadable, not PEM, no PEM block of the right kind, a certificate that does
        /// not parse, or a key the provider cannot sign with.
        why: String,
    },
    /// A listener's key is not the key of its certificate.
    #[error("the key {} does not belong to the certificate {}", key.display(), cert.display())]
    KeyMismatch {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
    },
    /// The SNI name is not a DNS name or an IP address.
    #[error("`{0}` is not a valid TLS server name")]
    BadName(String),
    /// The handshake failed some other way (an alert, a version or cipher mismatch).
    #[error("TLS handshake failed: {0}")]
    Handshake(String),
}

/// Why an exchange with an upstream failed. [`Error::kind`] sorts it for tables;
/// `Display` is one line for a person.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The host name has no address.
    #[error("cannot resolve {host}: {source}")]
    Resolve {
        /// The name looked up.
        host: String,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The TCP connection failed.
    #[error("connect: {0}")]
    Connect(#[source] io::Error),
    /// A time-out.
    #[error("time-out {}: nothing within {}", phase.describe(), fmt_duration(*after))]
    Timeout {
        /// Where it happened.
        phase: Phase,
        /// The limit that ran out.
        after: Duration,
    },
    /// A certificate or handshake problem.
    #[error("{0}")]
    Tls(#[from] TlsError),
    /// Not one byte of the request left: the upstream never saw it (a pooled connection
    /// the peer had closed). Resending is safe for any method.
    #[error("connection failed before the request was sent: {0}")]
    NotSent(#[source] io::Error),
    /// The connection failed while writing or reading.
    #[error("connection failed {}: {source}", phase.describe())]
    Io {
        /// Where it happened.
        phase: Phase,
        /// The error of the read or write.
        #[source]
        source: io::Error,
    },
    /// The upstream closed the connection before the response was complete.
    #[error("the upstream closed the connection {}", phase.describe())]
    Closed {
        /// [`Phase::Head`] or [`Phase::Body`].
        phase: Phase,
    },
    /// The HTTP/1.1 answer does not parse.
    #[error("{0}")]
    Wire(#[from] WireError),
    /// The body is over the caller's limit.
    #[error("response body over {0} bytes")]
    BodyTooLarge(u64),
    /// An HTTP/2 error: a reset stream, a GOAWAY, a protocol error.
    #[error("h2 {}: {source}", phase.describe())]
    H2 {
        /// Where it happened.
        phase: Phase,
        /// The h2 crate's error.
        #[source]
        source: h2::Error,
    },
    /// A request the connection cannot carry (e.g. headers h2 refuses): the caller's bug.
    #[error("request not sendable: {0}")]
    Request(String),
    /// The failure of a connection attempt that several requests waited for (a shared
    /// HTTP/2 connection is opened once for all of them): each gets this, sorted as the
    /// attempt's own error.
    #[error("{0}")]
    Shared(Arc<Error>),
}

fn fmt_duration(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{}s", d.as_secs())
    } else if d < Duration::from_secs(1) && d.subsec_nanos().is_multiple_of(1_000_000) {
        format!("{}ms", d.as_millis())
    } else {
        format!("{d:?}")
    }
}

/// Is this I/O error a shortage on this machine rather than the peer's doing?
fn local_shortage(e: &io::Error) -> bool {
    shortage_name(e).is_some()
}

/// The errno name of a shortage on this machine: its descriptor tables, its ephemeral
/// ports, its buffers or memory.
fn shortage_name(e: &io::Error) -> Option<&'static str> {
    Some(match e.raw_os_error() {
        Some(libc::EMFILE) => "EMFILE",
        Some(libc::ENFILE) => "ENFILE",
        Some(libc::ENOBUFS) => "ENOBUFS",
        Some(libc::ENOMEM) => "ENOMEM",
        Some(libc::EADDRNOTAVAIL) => "EADDRNOTAVAIL",
        Some(libc::EADDRINUSE) => "EADDRINUSE",
        _ if e.kind() == io::ErrorKind::OutOfMemory => "ENOMEM",
        _ => return None,
    })
}

impl Error {
    /// The kind, for tables and JSON.
    pub fn kind(&self) -> ErrorKind {
        match self.own() {
            Error::Resolve { .. } => ErrorKind::Connect,
            Error::Connect(e) => {
                if local_shortage(e) {
                    ErrorKind::Local
                } else {
                    ErrorKind::Connect
                }
            }
            Error::Timeout {
                phase: Phase::Connect,
                ..
            } => ErrorKind::Connect,
            Error::Timeout {
                phase: Phase::Handshake,
                ..
            } => ErrorKind::Tls,
            Error::Timeout { .. } => ErrorKind::Timeout,
            Error::Tls(_) => ErrorKind::Tls,
            Error::NotSent(e) | Error::Io { source: e, .. } if local_shortage(e) => {
                ErrorKind::Local
            }
            Error::NotSent(_) => ErrorKind::Reset,
            Error::Io {
                phase: Phase::Body, ..
            }
            | Error::Closed { phase: Phase::Body } => ErrorKind::BodyCut,
            Error::Io {
                phase: Phase::Handshake,
                ..
            } => ErrorKind::Tls,
            Error::Io { .. } | Error::Closed { .. } => ErrorKind::Reset,
            Error::Wire(WireError::HeadTooLarge { .. }) | Error::BodyTooLarge(_) => {
                ErrorKind::TooLarge
            }
            Error::Wire(_) => ErrorKind::Protocol,
            Error::H2 { phase, source } => h2_kind(*phase, source),
            Error::Request(_) => ErrorKind::Local,
            Error::Shared(_) => unreachable!("own() looks through it"),
        }
    }

    /// This error, or the one a [`Error::Shared`] carries.
    fn own(&self) -> &Error {
        match self {
            Error::Shared(e) => e.own(),
            e => e,
        }
    }

    /// A finer name within the kind, where there is one: the errno of a shortage on this
    /// machine (`EMFILE`, `EADDRNOTAVAIL`, …; `EINVAL` for a request the connection
    /// cannot carry), the reason of an HTTP/2 stream the peer reset (`cancel`,
    /// `refused_stream`, …), or `goaway` for a request the peer's GOAWAY refused.
    pub fn detail(&self) -> Option<&'static str> {
        if let Some(reason) = self.reset_by_peer() {
            return Some(reason);
        }
        if self.refused_by_goaway() {
            return Some("goaway");
        }
        if self.kind() != ErrorKind::Local {
            return None;
        }
        let io = match self.own() {
            Error::Connect(e) | Error::NotSent(e) | Error::Io { source: e, .. } => Some(e),
            Error::H2 { source, .. } => source.get_io(),
            _ => None,
        };
        Some(io.and_then(shortage_name).unwrap_or("EINVAL"))
    }

    /// The key a results table counts this error under: [`Error::kind`] and
    /// [`Error::detail`].
    pub fn key(&self) -> ErrorKey {
        ErrorKey {
            kind: self.kind(),
            detail: self.detail(),
        }
    }

    /// Where the fault lies.
    pub fn side(&self) -> Side {
        self.kind().side()
    }

    /// The upstream certainly never processed the request, so resending it is safe for
    /// any method: no connection, no handshake, not one byte written, or an HTTP/2
    /// stream the server refused (REFUSED_STREAM, RFC 9113 §8.7).
    pub fn never_sent(&self) -> bool {
        match self.own() {
            Error::Resolve { .. } | Error::Connect(_) | Error::Tls(_) | Error::NotSent(_) => true,
            Error::Timeout { phase, .. } | Error::Io { phase, .. } => {
                matches!(phase, Phase::Connect | Phase::Handshake)
            }
            Error::H2 { source, .. } => source.reason() == Some(h2::Reason::REFUSED_STREAM),
            _ => false,
        }
    }

    /// The upstream's kernel reset the connection while the request was written or its
    /// answer awaited (ECONNRESET, EPIPE). A process that exits or closes a socket with
    /// bytes it has not read resets it; one that read everything and closed sends FIN
    /// ([`Error::Closed`]) instead. A proxy that never resends a request its upstream took
    /// tells the two apart with this.
    pub fn is_connection_reset(&self) -> bool {
        matches!(self.own(), Error::Io { source, .. } if matches!(
            source.kind(),
            io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe
        ))
    }

    /// An HTTP/2 stream the peer reset (RST_STREAM): the reason's stable name
    /// (`cancel`, `refused_stream`, …, as in [`crate::H2Counts::rst_by_reason`]).
    pub fn reset_by_peer(&self) -> Option<&'static str> {
        match self.own() {
            Error::H2 { source, .. } if source.is_reset() && source.is_remote() => {
                source.reason().map(reason_name)
            }
            _ => None,
        }
    }

    /// The peer's GOAWAY ended the connection before this request was processed: it was
    /// never written, or its stream is past the GOAWAY's last stream id, which the server
    /// promises not to process (RFC 9113 §6.8). Sending it again on a new connection is
    /// safe for any method.
    pub fn refused_by_goaway(&self) -> bool {
        matches!(self.own(), Error::H2 { source, .. } if source.is_go_away() && source.is_remote())
    }

    /// The JSON error answer a gateway gives its client for this error: the status of
    /// [`ErrorKind::gateway_status`] and [`error_body`] with the kind and this message.
    pub fn to_response(&self) -> Response<Bytes> {
        let kind = self.kind();
        error_response(kind.gateway_status(), kind.name(), &self.to_string())
    }

    pub(crate) fn io(phase: Phase, e: io::Error) -> Error {
        match e.kind() {
            io::ErrorKind::UnexpectedEof if matches!(phase, Phase::Head | Phase::Body) => {
                Error::Closed { phase }
            }
            _ => Error::Io { phase, source: e },
        }
    }
}

fn h2_kind(phase: Phase, e: &h2::Error) -> ErrorKind {
    if let Some(io) = e.get_io() {
        return if local_shortage(io) {
            ErrorKind::Local
        } else if phase == Phase::Body {
            ErrorKind::BodyCut
        } else if phase == Phase::Handshake {
            ErrorKind::Connect
        } else {
            ErrorKind::Reset
        };
    }
    if phase == Phase::Handshake {
        // The h2 preface after TCP and TLS: no connection to send on.
        return ErrorKind::Connect;
    }
    if e.is_reset() || e.is_go_away() {
        return match e.reason() {
            Some(h2::Reason::PROTOCOL_ERROR | h2::Reason::FRAME_SIZE_ERROR)
            | Some(h2::Reason::COMPRESSION_ERROR) => ErrorKind::Protocol,
            _ if phase == Phase::Body => ErrorKind::BodyCut,
            _ => ErrorKind::Reset,
        };
    }
    if e.is_library() {
        ErrorKind::Protocol
    } else {
        ErrorKind::Local // a user error of the h2 API: a request the caller built wrong
    }
}

/// The one JSON error body of the toolkit: `{"error":"<kind>","detail":"<text>"}`. The
/// kind is a short stable name a script can match on (an [`ErrorKind::name`], or a
/// proxy's own such as `bad_request`, `no_route`, `client_timeout`); the detail is for a
/// person.
pub fn error_body(kind: &str, detail: &str) -> Bytes {
    // Written by hand so `error` comes first whatever serde_json's map order.
    let quote = |s: &str| serde_json::Value::from(s).to_string();
    Bytes::from(format!(
        r#"{{"error":{},"detail":{}}}"#,
        quote(kind),
        quote(detail)
    ))
}

/// Reads a body written by [`error_body`] (or one that follows its grammar, with more
/// fields beside): `Some((kind, detail))` when it is a JSON object whose `error` is a
/// kind — a short snake_case name, `[a-z][a-z0-9_]*` — and whose `detail` is a string.
/// A client or a test that meets a Scalpel error answer parses it with this, so any
/// tool's error body that drifts from the grammar fails to parse.
pub fn parse_error_body(body: &[u8]) -> Option<(String, String)> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    let kind = v.get("error")?.as_str()?;
    let detail = v.get("detail")?.as_str()?;
    let mut chars = kind.bytes();
    let well_formed = chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_');
    well_formed.then(|| (kind.to_string(), detail.to_string()))
}

/// A response carrying [`error_body`] with `Content-Type: application/json`. Map the
/// body into the server's own body type (`response.map(...)`).
pub fn error_response(status: StatusCode, kind: &str, detail: &str) -> Response<Bytes> {
    let mut res = Response::new(error_body(kind, detail));
    *res.status_mut() = status;
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_names_are_stable_and_distinct() {
        let names: Vec<_> = ErrorKind::ALL.iter().map(|k| k.name()).collect();
        assert_eq!(
            names,
            [
                "connect",
                "tls",
                "timeout",
                "reset",
                "protocol",
                "body_cut",
                "too_large",
                "local"
            ]
        );
        for k in ErrorKind::ALL {
            let expected = if k == ErrorKind::Local {
                Side::Local
            } else {
                Side::Upstream
            };
            assert_eq!(k.side(), expected, "{k}");
        }
    }

    #[test]
    fn io_errors_sort_into_kinds_by_errno_and_phase() {
        let os = io::Error::from_raw_os_error;
        assert_eq!(
            Error::Connect(os(libc::ECONNREFUSED)).kind(),
            ErrorKind::Connect
        );
        assert_eq!(Error::Connect(os(libc::EMFILE)).kind(), ErrorKind::Local);
        assert_eq!(
            Error::Connect(os(libc::EADDRNOTAVAIL)).kind(),
            ErrorKind::Local
        );
        assert_eq!(
            Error::io(Phase::Head, os(libc::ECONNRESET)).kind(),
            ErrorKind::Reset
        );
        assert_eq!(
            Error::io(Phase::Body, os(libc::ECONNRESET)).kind(),
            ErrorKind::BodyCut
        );
        assert_eq!(
            Error::io(Phase::Body, io::ErrorKind::UnexpectedEof.into()).kind(),
            ErrorKind::BodyCut
        );
        assert_eq!(
            Error::NotSent(os(libc::ENFILE)).kind(),
            ErrorKind::Local,
            "a shortage wins over the phase"
        );
        let t = Error::Timeout {
            phase: Phase::Head,
            after: Duration::from_millis(300),
        };
        assert_eq!(t.kind(), ErrorKind::Timeout);
        assert_eq!(
            t.to_string(),
            "time-out waiting for the response head: nothing within 300ms"
        );
        assert!(!t.never_sent());
        assert!(Error::Connect(os(libc::ECONNREFUSED)).never_sent());
    }

    /// The key a results table counts an error under: the kind, and the errno of a
    /// shortage on this machine (EADDRINUSE among them, as the load generator always
    /// counted it); a handshake that never finished is never a sent request's failure.
    #[test]
    fn keys_name_the_errno_of_a_local_shortage_and_handshakes_sort_as_never_sent() {
        let os = io::Error::from_raw_os_error;
        let key = |e: Error| e.key().to_string();
        assert_eq!(key(Error::Connect(os(libc::EMFILE))), "local:EMFILE");
        assert_eq!(
            key(Error::Connect(os(libc::EADDRINUSE))),
            "local:EADDRINUSE"
        );
        assert_eq!(
            key(Error::io(Phase::Write, os(libc::ENOBUFS))),
            "local:ENOBUFS"
        );
        assert_eq!(key(Error::Request("bad header".into())), "local:EINVAL");
        assert_eq!(key(Error::Connect(os(libc::ECONNREFUSED))), "connect");
        assert_eq!(key(Error::io(Phase::Head, os(libc::ECONNRESET))), "reset");
        let handshake = Error::Timeout {
            phase: Phase::Handshake,
            after: Duration::from_secs(1),
        };
        assert_eq!(handshake.kind(), ErrorKind::Tls);
        assert!(handshake.never_sent());
        let shared = Error::Shared(Arc::new(Error::Connect(os(libc::EMFILE))));
        assert_eq!(shared.key(), ErrorKey::local("EMFILE"));
        assert!(shared.never_sent());
        assert_eq!(
            shared.to_string(),
            Error::Connect(os(libc::EMFILE)).to_string()
        );
        for k in ErrorKind::ALL {
            assert_eq!(ErrorKind::from_name(k.name()), Some(k));
            assert_eq!(ErrorKey::of(k).to_string(), k.name());
        }
        assert_eq!(ErrorKind::from_name("io"), None);
    }

    /// The grammar read back: every kind name round-trips, and a body of another shape
    /// (serve's old `{"error": text, "status": N}`) does not parse.
    #[test]
    fn error_bodies_parse_back_and_other_shapes_do_not() {
        for k in ErrorKind::ALL {
            let body = error_body(k.name(), "why \"quoted\"");
            assert_eq!(
                parse_error_body(&body),
                Some((k.name().to_string(), "why \"quoted\"".to_string()))
            );
        }
        let extra = br#"{"error":"reload_failed","detail":"1 failed","errors":["w0"]}"#;
        assert_eq!(parse_error_body(extra).unwrap().0, "reload_failed");
        for bad in [
            &br#"{"error":"worker web#0 failed: reset","status":502}"#[..],
            br#"{"error":"Timeout","detail":"x"}"#,
            br#"{"error":"","detail":"x"}"#,
            br#"{"error":"timeout"}"#,
            br#"{"error":"timeout","detail":5}"#,
            b"not json",
        ] {
            assert_eq!(
                parse_error_body(bad),
                None,
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn the_error_body_is_json_with_kind_and_detail() {
        let body = error_body("timeout", "the \"primary\" did not answer");
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["error"], "timeout");
        assert_eq!(v["detail"], "the \"primary\" did not answer");
        let res = Error::Timeout {
            phase: Phase::Head,
            after: Duration::from_secs(30),
        }
        .to_response();
        assert_eq!(res.status(), StatusCode::GATEWAY_TIMEOUT);
        assert_eq!(res.headers()["content-type"], "application/json");
        let v: serde_json::Value = serde_json::from_slice(res.body()).unwrap();
        assert_eq!(v["error"], "timeout");
        assert_eq!(
            v["detail"],
            "time-out waiting for the response head: nothing within 30s"
        );
    }
}
