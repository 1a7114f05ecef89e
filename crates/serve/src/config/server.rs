//! `[server]`, `[server.tls]` and `[server.admin_tls]`: the addresses, the admin token,
//! the request and connection limits, the time-outs and the data plane's sizes.

use std::net::SocketAddr;
use std::ops::RangeInclusive;
use std::path::Path;
use std::time::Duration;

use toml::Spanned;

use super::error::{ConfigError, Fail};
use super::raw::{HumanSize, RawServer, RawTls};
use crate::tls::TlsFiles;
use scalpel_http::IpNet;

/// The environment variable that can hold the admin bearer token.
pub const ADMIN_TOKEN_ENV: &str = "SCALPEL_ADMIN_TOKEN";

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ServerConfig {
    pub(crate) listen: SocketAddr,
    pub(crate) admin: Option<SocketAddr>,
    pub(crate) admin_token: Option<String>,
    /// Names the admin answers to besides its own addresses (`admin_hosts`): any other
    /// `Host` gets 421 (DNS rebinding).
    pub(crate) admin_hosts: Vec<String>,
    pub(crate) max_header_bytes: usize,
    pub(crate) header_read_timeout: Duration,
    /// A request body must arrive whole within this (slow clients); else 408.
    pub(crate) body_read_timeout: Duration,
    pub(crate) max_body_bytes: u64,
    /// Client connections open at once (all data-plane threads); more are answered 503.
    pub(crate) max_connections: usize,
    /// Peers whose `X-Forwarded-*` / `Forwarded` headers are kept (other clients' are
    /// replaced).
    pub(crate) trusted_proxies: Vec<IpNet>,
    pub(crate) connect_timeout: Duration,
    pub(crate) upstream_timeout: Duration,
    pub(crate) wait_for_worker: Duration,
    pub(crate) retry_idempotent: bool,
    pub(crate) pool_idle_timeout: Duration,
    pub(crate) pool_max_idle_per_worker: usize,
    pub(crate) drain_timeout: Duration,
    pub(crate) sample_interval: Duration,
    /// An upgraded connection (WebSocket) with no bytes either way for this long closes.
    pub(crate) tunnel_idle_timeout: Duration,
    /// Data-plane threads (each its own runtime and worker connections).
    pub(crate) threads: usize,
    /// Worker output lines longer than this are cut (and counted).
    pub(crate) log_line_max_bytes: usize,
    /// Worker output waiting to be written to scalpel's stdout/stderr, at most; lines past
    /// it are dropped (and counted), so a stalled reader never blocks supervision.
    pub(crate) log_buffer_bytes: usize,
    /// Bytes held for mirror comparisons at once (request copies, served and mirror
    /// bodies); past it copies are skipped.
    pub(crate) mirror_buffer_bytes: usize,
    /// The client listener speaks TLS with these files (`[server.tls]`).
    pub(crate) tls: Option<TlsFiles>,
    /// The admin address speaks TLS with these files (`[server.admin_tls]`).
    pub(crate) admin_tls: Option<TlsFiles>,
}

/// `[server]` checked; relative TLS paths resolved against `path`'s directory.
pub(super) fn server(s: &RawServer, fail: &Fail, path: &Path) -> Result<ServerConfig, ConfigError> {
    let (listen, admin, admin_token) = addresses(s, fail)?;
    let sizes = sizes(s, fail)?;
    let (threads, max_connections, trusted_proxies) = limits(s, fail)?;
    let t = timeouts(s, fail)?;
    Ok(ServerConfig {
        listen,
        admin,
        admin_token,
        admin_hosts: admin_hosts(s, fail)?,
        max_header_bytes: sizes.max_header_bytes as usize,
        header_read_timeout: t.header_read,
        body_read_timeout: t.body_read,
        max_body_bytes: sizes.max_body_bytes,
        max_connections,
        trusted_proxies,
        connect_timeout: t.connect,
        upstream_timeout: t.upstream,
        wait_for_worker: t.wait_for_worker,
        retry_idempotent: s.retry_idempotent,
        pool_idle_timeout: t.pool_idle,
        pool_max_idle_per_worker: s.pool_max_idle_per_worker,
        drain_timeout: t.drain,
        sample_interval: t.sample_interval,
        tunnel_idle_timeout: t.tunnel_idle,
        threads,
        log_line_max_bytes: sizes.log_line_max_bytes as usize,
        log_buffer_bytes: sizes.log_buffer_bytes as usize,
        mirror_buffer_bytes: sizes.mirror_buffer_bytes as usize,
        tls: s.tls.as_ref().map(|t| tls_files(path, t)),
        admin_tls: s.admin_tls.as_ref().map(|t| tls_files(path, t)),
    })
}

/// `listen`, `admin` (default 127.0.0.1:9090) and the admin token (`admin_token`, else
/// [`ADMIN_TOKEN_ENV`]): two different ports, and a token for an admin address off
/// loopback.
fn addresses(
    s: &RawServer,
    fail: &Fail,
) -> Result<(SocketAddr, Option<SocketAddr>, Option<String>), ConfigError> {
    let token_env = std::env::var(ADMIN_TOKEN_ENV)
        .ok()
        .filter(|t| !t.is_empty());
    let address = |what: &str, a: &Spanned<String>| -> Result<SocketAddr, ConfigError> {
        a.get_ref().trim().parse::<SocketAddr>().map_err(|_| {
            fail.at(
                Some(a.span()),
                format!(
                    "{what}: `{}` is not an IP address and port, e.g. 127.0.0.1:8080 \
                     (host names are not resolved)",
                    a.get_ref()
                ),
            )
        })
    };
    let listen = address("listen", &s.listen)?;
    let admin = match &s.admin {
        Some(a) => Some(address("admin", a)?),
        None => Some(SocketAddr::from(([127, 0, 0, 1], 9090))),
    };
    if let Some(a) = admin
        && a.port() != 0
        && a.port() == listen.port()
        && (a.ip() == listen.ip() || a.ip().is_unspecified() || listen.ip().is_unspecified())
    {
        return Err(fail.at(
            s.admin.as_ref().map(|a| a.span()).or(Some(s.listen.span())),
            format!("admin address {a} is the listen address {listen}: give them different ports"),
        ));
    }
    let admin_token = match &s.admin_token {
        Some(t) if !t.get_ref().is_empty() => {
            Some(token(t.get_ref(), "admin_token").map_err(|r| fail.at(Some(t.span()), r))?)
        }
        _ => match token_env {
            Some(t) => Some(token(&t, ADMIN_TOKEN_ENV).map_err(|r| fail.at(None, r))?),
            None => None,
        },
    };
    if let Some(addr) = admin
        && !addr.ip().is_loopback()
        && admin_token.is_none()
    {
        return Err(fail.at(
            s.admin.as_ref().map(|a| a.span()),
            format!(
                "admin address {addr} is not loopback: set server.admin_token or {ADMIN_TOKEN_ENV}"
            ),
        ));
    }
    Ok((listen, admin, admin_token))
}

/// The shortest admin token accepted, in bytes. The admin has no rate limit, and a token
/// is all that stands between a network and `POST /reload` off loopback: 16 bytes of
/// random text (`openssl rand -hex 16` gives 32) cannot be guessed at any request rate,
/// while a word or a short PIN can, and a pasted value of spaces is no token at all.
pub(crate) const ADMIN_TOKEN_MIN: usize = 16;

/// An admin token checked: not only white space (hyper and the token check trim it, so
/// `"   "` would be a token no client can send), at least [`ADMIN_TOKEN_MIN`] bytes.
fn token(t: &str, what: &str) -> Result<String, String> {
    let reason = if t.trim().is_empty() {
        format!("{what} is only white space")
    } else if t.trim() != t {
        format!("{what} starts or ends with white space, which a client's header loses")
    } else if t.len() < ADMIN_TOKEN_MIN {
        format!(
            "{what} is {} bytes: use at least {ADMIN_TOKEN_MIN} random bytes (e.g. `openssl rand -hex 16`)",
            t.len()
        )
    } else {
        return Ok(t.to_string());
    };
    Err(reason)
}

/// `admin_hosts`: each a `host[:port]`.
fn admin_hosts(s: &RawServer, fail: &Fail) -> Result<Vec<String>, ConfigError> {
    s.admin_hosts
        .iter()
        .map(|h| {
            let text = h.get_ref().trim();
            if scalpel_http::valid_authority(text) {
                Ok(text.to_ascii_lowercase())
            } else {
                Err(fail.at(
                    Some(h.span()),
                    format!("admin_hosts: `{text}` is not a host name or host:port"),
                ))
            }
        })
        .collect()
}

/// The sizes of `[server]`, in bytes.
struct Sizes {
    max_header_bytes: u64,
    max_body_bytes: u64,
    log_line_max_bytes: u64,
    log_buffer_bytes: u64,
    mirror_buffer_bytes: u64,
}

fn sizes(s: &RawServer, fail: &Fail) -> Result<Sizes, ConfigError> {
    let size = |v: &Option<Spanned<HumanSize>>,
                key: &str,
                default: u64,
                range: RangeInclusive<u64>|
     -> Result<u64, ConfigError> {
        let Some(v) = v else { return Ok(default) };
        let n = v.get_ref().0;
        if range.contains(&n) {
            Ok(n)
        } else {
            Err(fail.at(
                Some(v.span()),
                format!(
                    "{key} must be between {} and {}, not {n}",
                    range.start(),
                    range.end()
                ),
            ))
        }
    };
    Ok(Sizes {
        max_header_bytes: size(
            &s.max_header_bytes,
            "max_header_bytes",
            16 * 1024,
            8192..=1 << 20,
        )?,
        max_body_bytes: size(&s.max_body_bytes, "max_body_bytes", 8 << 20, 0..=1 << 40)?,
        log_line_max_bytes: size(
            &s.log_line_max_bytes,
            "log_line_max_bytes",
            16 * 1024,
            256..=1 << 24,
        )?,
        log_buffer_bytes: size(
            &s.log_buffer_bytes,
            "log_buffer_bytes",
            1 << 20,
            4096..=1 << 30,
        )?,
        mirror_buffer_bytes: size(
            &s.mirror_buffer_bytes,
            "mirror_buffer_bytes",
            64 << 20,
            0..=1 << 40,
        )?,
    })
}

/// `threads` (default: the cores), `max_connections` and `trusted_proxies`.
fn limits(s: &RawServer, fail: &Fail) -> Result<(usize, usize, Vec<IpNet>), ConfigError> {
    let threads = match &s.threads {
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
        Some(t) if (1..=256).contains(t.get_ref()) => *t.get_ref() as usize,
        Some(t) => {
            return Err(fail.at(Some(t.span()), "threads must be between 1 and 256".into()));
        }
    };
    let max_connections = match &s.max_connections {
        None => 10_000,
        Some(n) if (1..=1_000_000).contains(n.get_ref()) => *n.get_ref() as usize,
        Some(n) => {
            return Err(fail.at(
                Some(n.span()),
                format!(
                    "max_connections must be between 1 and 1000000, not {}",
                    n.get_ref()
                ),
            ));
        }
    };
    let mut trusted_proxies = Vec::new();
    for t in &s.trusted_proxies {
        trusted_proxies.push(IpNet::parse(t.get_ref()).ok_or_else(|| {
            fail.at(
                Some(t.span()),
                format!(
                    "trusted_proxies: `{}` is not an address or range (e.g. 10.0.0.0/8, 127.0.0.1, ::1/128)",
                    t.get_ref()
                ),
            )
        })?);
    }
    Ok((threads, max_connections, trusted_proxies))
}

/// The time-outs of `[server]`.
struct Timeouts {
    header_read: Duration,
    body_read: Duration,
    connect: Duration,
    upstream: Duration,
    wait_for_worker: Duration,
    pool_idle: Duration,
    drain: Duration,
    sample_interval: Duration,
    tunnel_idle: Duration,
}

/// Each time-out as written (`key = "30s"` or `key_ms`), else its default; those that
/// bound a wait are at least 1 ms (the sampler's interval at least 100 ms).
fn timeouts(s: &RawServer, fail: &Fail) -> Result<Timeouts, ConfigError> {
    let ms1 = Duration::from_millis(1);
    Ok(Timeouts {
        header_read: fail
            .ms(
                &s.header_read_timeout,
                &s.header_read_timeout_ms,
                "header_read_timeout",
                10_000,
            )?
            .max(ms1),
        body_read: fail
            .ms(
                &s.body_read_timeout,
                &s.body_read_timeout_ms,
                "body_read_timeout",
                30_000,
            )?
            .max(ms1),
        connect: fail
            .ms(
                &s.upstream_connect_timeout,
                &s.upstream_connect_timeout_ms,
                "upstream_connect_timeout",
                2_000,
            )?
            .max(ms1),
        upstream: fail
            .ms(
                &s.upstream_timeout,
                &s.upstream_timeout_ms,
                "upstream_timeout",
                60_000,
            )?
            .max(ms1),
        wait_for_worker: fail.ms(
            &s.wait_for_worker,
            &s.wait_for_worker_ms,
            "wait_for_worker",
            5_000,
        )?,
        pool_idle: fail
            .ms(
                &s.pool_idle_timeout,
                &s.pool_idle_timeout_ms,
                "pool_idle_timeout",
                60_000,
            )?
            .max(ms1),
        drain: fail.ms(
            &s.drain_timeout,
            &s.drain_timeout_ms,
            "drain_timeout",
            30_000,
        )?,
        sample_interval: fail
            .ms(
                &s.sample_interval,
                &s.sample_interval_ms,
                "sample_interval",
                1_000,
            )?
            .max(Duration::from_millis(100)),
        tunnel_idle: fail
            .ms(
                &s.tunnel_idle_timeout,
                &s.tunnel_idle_timeout_ms,
                "tunnel_idle_timeout",
                300_000,
            )?
            .max(ms1),
    })
}

/// The PEM files of `raw`, relative to the config file's directory.
fn tls_files(config: &Path, raw: &RawTls) -> TlsFiles {
    let base = config.parent().unwrap_or(Path::new("."));
    TlsFiles {
        cert: base.join(&raw.cert),
        key: base.join(&raw.key),
    }
}
