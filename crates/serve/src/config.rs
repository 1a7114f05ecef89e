//! The TOML configuration: parsed with unknown keys denied, then checked as a whole
//! (names, ports, routes, weights) before anything starts. Every error names the file
//! and, where the input has one, the line.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use crate::ipnet::IpNet;
pub(crate) use crate::sticky::StickyKey;
use crate::tls::TlsFiles;

/// The environment variable that can hold the admin bearer token.
pub const ADMIN_TOKEN_ENV: &str = "SCALPEL_ADMIN_TOKEN";

/// A configuration that cannot be used: the file, the line (when known) and why.
#[derive(Debug, thiserror::Error)]
#[error("{}{}: {reason}", path.display(), line.map(|l| format!(":{l}")).unwrap_or_default())]
pub struct ConfigError {
    path: PathBuf,
    line: Option<usize>,
    reason: String,
}

impl ConfigError {
    /// The configuration file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The 1-based line the error is on, when it can be placed.
    pub fn line(&self) -> Option<usize> {
        self.line
    }

    /// Why the configuration was rejected.
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

/// How the next worker of an app is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Balance {
    /// Each worker in turn.
    RoundRobin,
    /// The worker with the fewest requests in flight (ties in turn).
    LeastConn,
    /// Two workers at random, the one with fewer requests in flight.
    #[serde(alias = "power_of_two", alias = "p2c")]
    PowerOfTwo,
}

impl Balance {
    /// The name used in the config and in `/status`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Balance::RoundRobin => "round_robin",
            Balance::LeastConn => "least_conn",
            Balance::PowerOfTwo => "power_of_two",
        }
    }
}

/// How clients reach an app's workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Mode {
    /// Through the balancer, request by request (routes, A/B, mirroring, stuck-worker
    /// avoidance per request).
    #[default]
    Proxy,
    /// serve owns the app's listening socket and hands it to every worker on fd 3
    /// (systemd's socket activation); clients talk to the workers with no hop.
    Direct,
}

impl Mode {
    /// The name used in the config and in `/status`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Mode::Proxy => "proxy",
            Mode::Direct => "direct",
        }
    }
}

// ---- raw (as written) ----

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    server: RawServer,
    #[serde(default)]
    app: Vec<Spanned<RawApp>>,
    #[serde(default)]
    route: Vec<Spanned<RawRoute>>,
}

fn default_admin() -> Option<Spanned<String>> {
    None
}

/// A duration in the units grammar (`"30s"`, `"250ms"`): the keys without a unit suffix.
#[derive(Debug, Clone, Copy)]
struct HumanDuration(Duration);

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        scalpel_units::serde::duration(d).map(HumanDuration)
    }
}

/// A size: bytes as an integer, or a string in the units grammar (`"64KiB"`).
#[derive(Debug, Clone, Copy)]
struct HumanSize(u64);

impl<'de> Deserialize<'de> for HumanSize {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        scalpel_units::serde::size(d).map(HumanSize)
    }
}

/// A duration key: `name = "30s"`, or the older `name_ms = 30000` (both keep working; one
/// of them at most).
type Human = Option<Spanned<HumanDuration>>;
type Millis = Option<Spanned<u64>>;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawServer {
    listen: Spanned<String>,
    #[serde(default = "default_admin")]
    admin: Option<Spanned<String>>,
    admin_token: Option<String>,
    max_header_bytes: Option<Spanned<HumanSize>>,
    header_read_timeout: Human,
    header_read_timeout_ms: Millis,
    body_read_timeout: Human,
    body_read_timeout_ms: Millis,
    max_body_bytes: Option<Spanned<HumanSize>>,
    max_connections: Option<Spanned<i64>>,
    #[serde(default)]
    trusted_proxies: Vec<Spanned<String>>,
    upstream_connect_timeout: Human,
    upstream_connect_timeout_ms: Millis,
    upstream_timeout: Human,
    upstream_timeout_ms: Millis,
    wait_for_worker: Human,
    wait_for_worker_ms: Millis,
    #[serde(default = "d_true")]
    retry_idempotent: bool,
    pool_idle_timeout: Human,
    pool_idle_timeout_ms: Millis,
    #[serde(default = "d_pool_max_idle")]
    pool_max_idle_per_worker: usize,
    drain_timeout: Human,
    drain_timeout_ms: Millis,
    sample_interval: Human,
    sample_interval_ms: Millis,
    tunnel_idle_timeout: Human,
    tunnel_idle_timeout_ms: Millis,
    threads: Option<Spanned<u64>>,
    log_line_max_bytes: Option<Spanned<HumanSize>>,
    log_buffer_bytes: Option<Spanned<HumanSize>>,
    mirror_buffer_bytes: Option<Spanned<HumanSize>>,
    tls: Option<RawTls>,
    admin_tls: Option<RawTls>,
}

/// `[server.tls]` / `[server.admin_tls]`: PEM files, relative to the config's directory.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTls {
    cert: PathBuf,
    key: PathBuf,
}

fn d_true() -> bool {
    true
}
fn d_pool_max_idle() -> usize {
    256
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawApp {
    name: Spanned<String>,
    command: Spanned<Vec<String>>,
    #[serde(default = "d_workers")]
    workers: Spanned<i64>,
    port_base: Spanned<i64>,
    #[serde(default = "d_port_env")]
    port_env: Spanned<String>,
    #[serde(default = "d_index_env")]
    index_env: Spanned<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    cwd: Option<Spanned<PathBuf>>,
    #[serde(default = "d_balance")]
    balance: Spanned<Balance>,
    #[serde(default)]
    mode: Mode,
    listen: Option<Spanned<String>>,
    avoid_stalled: Human,
    avoid_stalled_ms: Millis,
    start_timeout: Human,
    start_timeout_ms: Millis,
    stop_grace: Human,
    stop_grace_ms: Millis,
    health: Option<Spanned<RawHealth>>,
    restart: Option<Spanned<RawRestart>>,
    max_memory_mb: Option<Spanned<u64>>,
    sticky_worker: Option<Spanned<String>>,
    max_in_flight_per_worker: Option<Spanned<i64>>,
    max_queued: Option<Spanned<i64>>,
    queue_timeout: Human,
}

fn d_workers() -> Spanned<i64> {
    Spanned::new(0..0, 1)
}
fn d_port_env() -> Spanned<String> {
    Spanned::new(0..0, "PORT".into())
}
fn d_index_env() -> Spanned<String> {
    Spanned::new(0..0, "WORKER_INDEX".into())
}
fn d_balance() -> Spanned<Balance> {
    Spanned::new(0..0, Balance::LeastConn)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHealth {
    #[serde(default = "d_health_path")]
    path: String,
    interval: Human,
    interval_ms: Millis,
    timeout: Human,
    timeout_ms: Millis,
    #[serde(default = "d_failures")]
    failures: u32,
    #[serde(default)]
    prestart: bool,
}

fn d_health_path() -> String {
    "/healthz".into()
}
fn d_failures() -> u32 {
    3
}

impl Default for RawHealth {
    fn default() -> Self {
        Self {
            path: d_health_path(),
            interval: None,
            interval_ms: None,
            timeout: None,
            timeout_ms: None,
            failures: d_failures(),
            prestart: false,
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRestart {
    backoff: Human,
    backoff_ms: Millis,
    backoff_max: Human,
    backoff_max_ms: Millis,
    #[serde(default = "d_max_restarts")]
    max_restarts: u32,
    window: Human,
    window_s: Option<Spanned<u64>>,
}

fn d_max_restarts() -> u32 {
    10
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRoute {
    #[serde(default = "d_prefix")]
    prefix: Spanned<String>,
    method: Option<Spanned<String>>,
    header: Option<Spanned<RawHeaderMatch>>,
    app: Option<Spanned<String>>,
    split: Option<Vec<Spanned<RawArm>>>,
    sticky: Option<Spanned<String>>,
    mirror: Option<Spanned<String>>,
    mirror_percent: Option<Spanned<f64>>,
    #[serde(default)]
    mirror_unsafe: bool,
    #[serde(default = "d_no_patterns")]
    mirror_ignore: Spanned<Vec<String>>,
    mirror_store: Option<Spanned<String>>,
}

fn d_prefix() -> Spanned<String> {
    Spanned::new(0..0, "/".into())
}
fn d_no_patterns() -> Spanned<Vec<String>> {
    Spanned::new(0..0, Vec::new())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHeaderMatch {
    name: String,
    value: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawArm {
    app: Spanned<String>,
    weight: Spanned<i64>,
}

// ---- validated ----

/// A checked configuration, ready to start.
#[derive(Debug, Clone)]
pub struct Config {
    pub(crate) path: PathBuf,
    pub(crate) server: ServerConfig,
    pub(crate) apps: Vec<Arc<AppConfig>>,
    pub(crate) routes: Vec<RouteConfig>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ServerConfig {
    pub(crate) listen: SocketAddr,
    pub(crate) admin: Option<SocketAddr>,
    pub(crate) admin_token: Option<String>,
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

#[derive(Debug, Clone)]
pub(crate) struct AppConfig {
    pub(crate) name: Arc<str>,
    pub(crate) command: Vec<String>,
    pub(crate) workers: usize,
    pub(crate) port_base: u16,
    pub(crate) port_env: String,
    pub(crate) index_env: String,
    pub(crate) env: BTreeMap<String, String>,
    pub(crate) cwd: Option<PathBuf>,
    /// Lines of `command` and `cwd` in the file, for errors found at start.
    pub(crate) command_line: Option<usize>,
    pub(crate) cwd_line: Option<usize>,
    pub(crate) balance: Balance,
    pub(crate) mode: Mode,
    /// A worker whose process tree's PSS passes this is replaced (successor first).
    pub(crate) max_memory_bytes: Option<u64>,
    /// Requests with this key go to the same worker while it is ready (`sticky_worker`).
    pub(crate) sticky_worker: Option<StickyKey>,
    /// Requests one worker is given at once (0: no limit); the rest wait in the app's
    /// FIFO queue for the first worker with a free slot.
    pub(crate) max_in_flight_per_worker: usize,
    /// Requests that may wait in that queue; one more is refused (503 `queue_full`).
    pub(crate) max_queued: usize,
    /// How long a request may wait there (503 `queue_timeout`).
    pub(crate) queue_timeout: Duration,
    /// The address of a direct app's own listening socket.
    pub(crate) listen: Option<SocketAddr>,
    /// A worker with requests waiting for their response head and no response head for
    /// this long gets no new requests until it answers again (zero: never).
    pub(crate) avoid_stalled: Duration,
    pub(crate) start_timeout: Duration,
    pub(crate) stop_grace: Duration,
    pub(crate) health_path: String,
    pub(crate) health_interval: Duration,
    pub(crate) health_timeout: Duration,
    pub(crate) health_failures: u32,
    /// Start a stalled worker's successor at its first failed probe (see Supervision).
    pub(crate) health_prestart: bool,
    pub(crate) backoff: Duration,
    pub(crate) backoff_max: Duration,
    pub(crate) max_restarts: u32,
    pub(crate) restart_window: Duration,
}

impl AppConfig {
    /// The two ports of worker `index`: incarnations alternate between them, so a new
    /// worker can start while the one it replaces still holds its port.
    pub(crate) fn ports(&self, index: usize) -> [u16; 2] {
        let a = self.port_base + index as u16;
        [a, a + self.workers as u16]
    }
}

#[derive(Debug, Clone)]
pub(crate) struct RouteConfig {
    pub(crate) prefix: String,
    pub(crate) method: Option<http::Method>,
    pub(crate) header: Option<(http::HeaderName, Option<String>)>,
    /// (app index, weight); one arm for a plain route.
    pub(crate) arms: Vec<(usize, u64)>,
    pub(crate) sticky: Option<StickyKey>,
    pub(crate) mirror: Option<MirrorConfig>,
}

/// Copy a sample of a route's requests to another app and compare its answers with
/// the served ones (the `scalpel shadow` engine).
#[derive(Debug, Clone)]
pub(crate) struct MirrorConfig {
    pub(crate) app_name: Arc<str>,
    /// Everything that makes this mirror what it is, as text: a live reload keeps a
    /// mirror (its comparisons and store) only when this is unchanged.
    pub(crate) key: String,
    pub(crate) percent: f64,
    /// Mirror methods other than GET, HEAD and OPTIONS (they may change state twice).
    pub(crate) unsafe_methods: bool,
    pub(crate) comparer: scalpel_diff::Comparer,
    /// The SQLite store of counters and samples (`scalpel shadow report --store`), if any.
    pub(crate) store: Option<PathBuf>,
}

impl Config {
    /// Reads and checks the file at `path`.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming the file, the line where possible, and the reason.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            path: path.to_path_buf(),
            line: None,
            reason: format!("cannot read: {e}"),
        })?;
        Self::parse(&text, path)
    }

    /// Checks `text`, reporting errors against `path`; relative `cwd`s are resolved
    /// against `path`'s directory.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming the file, the line where possible, and the reason.
    pub fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        let fail = |span: Option<Range<usize>>, reason: String| ConfigError {
            path: path.to_path_buf(),
            line: span.filter(|s| s.end > 0).map(|s| line_of(text, s.start)),
            reason,
        };
        let raw: RawConfig = toml::from_str(text).map_err(|e| {
            let mut reason = e.message().trim().to_string();
            // toml says "duplicate key" without the key; its span points at it.
            if reason.starts_with("duplicate key")
                && let Some(key) = e.span().and_then(|s| text.get(s))
            {
                reason = format!("duplicate key `{}`", key.trim().trim_matches('"'));
            }
            fail(e.span(), reason)
        })?;
        let token_env = std::env::var(ADMIN_TOKEN_ENV)
            .ok()
            .filter(|t| !t.is_empty());
        let s = raw.server;
        let address = |what: &str, a: &Spanned<String>| -> Result<SocketAddr, ConfigError> {
            a.get_ref().trim().parse::<SocketAddr>().map_err(|_| {
                fail(
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
            return Err(fail(
                s.admin.as_ref().map(|a| a.span()).or(Some(s.listen.span())),
                format!(
                    "admin address {a} is the listen address {listen}: give them different ports"
                ),
            ));
        }
        let admin_token = s.admin_token.filter(|t| !t.is_empty()).or(token_env);
        if let Some(addr) = admin
            && !addr.ip().is_loopback()
            && admin_token.is_none()
        {
            return Err(fail(
                s.admin.as_ref().map(|a| a.span()),
                format!(
                    "admin address {addr} is not loopback: set server.admin_token or {ADMIN_TOKEN_ENV}"
                ),
            ));
        }
        let size = |v: &Option<Spanned<HumanSize>>,
                    key: &str,
                    default: u64,
                    range: std::ops::RangeInclusive<u64>|
         -> Result<u64, ConfigError> {
            let Some(v) = v else { return Ok(default) };
            let n = v.get_ref().0;
            if range.contains(&n) {
                Ok(n)
            } else {
                Err(fail(
                    Some(v.span()),
                    format!(
                        "{key} must be between {} and {}, not {n}",
                        range.start(),
                        range.end()
                    ),
                ))
            }
        };
        let max_header_bytes = size(
            &s.max_header_bytes,
            "max_header_bytes",
            16 * 1024,
            8192..=1 << 20,
        )?;
        let max_body_bytes = size(&s.max_body_bytes, "max_body_bytes", 8 << 20, 0..=1 << 40)?;
        let log_line_max_bytes = size(
            &s.log_line_max_bytes,
            "log_line_max_bytes",
            16 * 1024,
            256..=1 << 24,
        )?;
        let log_buffer_bytes = size(
            &s.log_buffer_bytes,
            "log_buffer_bytes",
            1 << 20,
            4096..=1 << 30,
        )?;
        let mirror_buffer_bytes = size(
            &s.mirror_buffer_bytes,
            "mirror_buffer_bytes",
            64 << 20,
            0..=1 << 40,
        )?;
        let threads = match &s.threads {
            None => std::thread::available_parallelism().map_or(1, |n| n.get()),
            Some(t) if (1..=256).contains(t.get_ref()) => *t.get_ref() as usize,
            Some(t) => {
                return Err(fail(
                    Some(t.span()),
                    "threads must be between 1 and 256".into(),
                ));
            }
        };
        let max_connections = match &s.max_connections {
            None => 10_000,
            Some(n) if (1..=1_000_000).contains(n.get_ref()) => *n.get_ref() as usize,
            Some(n) => {
                return Err(fail(
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
                fail(
                    Some(t.span()),
                    format!(
                        "trusted_proxies: `{}` is not an address or range (e.g. 10.0.0.0/8, 127.0.0.1, ::1/128)",
                        t.get_ref()
                    ),
                )
            })?);
        }
        let dur = |human: &Human, ms: &Millis, key: &str, default_ms: u64| {
            duration(&fail, human, ms, key, Duration::from_millis(default_ms))
        };
        let at_least = |d: Duration, min: Duration| d.max(min);
        let ms1 = Duration::from_millis(1);
        let server = ServerConfig {
            listen,
            admin,
            admin_token,
            max_header_bytes: max_header_bytes as usize,
            header_read_timeout: at_least(
                dur(
                    &s.header_read_timeout,
                    &s.header_read_timeout_ms,
                    "header_read_timeout",
                    10_000,
                )?,
                ms1,
            ),
            body_read_timeout: at_least(
                dur(
                    &s.body_read_timeout,
                    &s.body_read_timeout_ms,
                    "body_read_timeout",
                    30_000,
                )?,
                ms1,
            ),
            max_body_bytes,
            max_connections,
            trusted_proxies,
            connect_timeout: at_least(
                dur(
                    &s.upstream_connect_timeout,
                    &s.upstream_connect_timeout_ms,
                    "upstream_connect_timeout",
                    2_000,
                )?,
                ms1,
            ),
            upstream_timeout: at_least(
                dur(
                    &s.upstream_timeout,
                    &s.upstream_timeout_ms,
                    "upstream_timeout",
                    60_000,
                )?,
                ms1,
            ),
            wait_for_worker: dur(
                &s.wait_for_worker,
                &s.wait_for_worker_ms,
                "wait_for_worker",
                5_000,
            )?,
            retry_idempotent: s.retry_idempotent,
            pool_idle_timeout: at_least(
                dur(
                    &s.pool_idle_timeout,
                    &s.pool_idle_timeout_ms,
                    "pool_idle_timeout",
                    60_000,
                )?,
                ms1,
            ),
            pool_max_idle_per_worker: s.pool_max_idle_per_worker,
            drain_timeout: dur(
                &s.drain_timeout,
                &s.drain_timeout_ms,
                "drain_timeout",
                30_000,
            )?,
            sample_interval: at_least(
                dur(
                    &s.sample_interval,
                    &s.sample_interval_ms,
                    "sample_interval",
                    1_000,
                )?,
                Duration::from_millis(100),
            ),
            tunnel_idle_timeout: at_least(
                dur(
                    &s.tunnel_idle_timeout,
                    &s.tunnel_idle_timeout_ms,
                    "tunnel_idle_timeout",
                    300_000,
                )?,
                ms1,
            ),
            threads,
            log_line_max_bytes: log_line_max_bytes as usize,
            log_buffer_bytes: log_buffer_bytes as usize,
            mirror_buffer_bytes: mirror_buffer_bytes as usize,
            tls: s.tls.as_ref().map(|t| tls_files(path, t)),
            admin_tls: s.admin_tls.as_ref().map(|t| tls_files(path, t)),
        };

        if raw.app.is_empty() {
            return Err(fail(None, "no [[app]]: at least one app is needed".into()));
        }
        let base_dir = path.parent().unwrap_or(Path::new("."));
        let mut apps: Vec<Arc<AppConfig>> = Vec::new();
        let mut names: HashMap<String, usize> = HashMap::new();
        // (first port, last port, app index, span of port_base)
        let mut ranges: Vec<(u32, u32, usize)> = Vec::new();
        for spanned in &raw.app {
            let a = spanned.get_ref();
            let name = a.name.get_ref().trim();
            if name.is_empty()
                || !name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
            {
                return Err(fail(
                    Some(a.name.span()),
                    format!("app name `{name}`: use letters, digits, `-`, `_` or `.`"),
                ));
            }
            if names.contains_key(name) {
                return Err(fail(
                    Some(a.name.span()),
                    format!("duplicate app name `{name}`"),
                ));
            }
            if a.command.get_ref().is_empty() || a.command.get_ref()[0].is_empty() {
                return Err(fail(
                    Some(a.command.span()),
                    format!("app `{name}`: command must name a program"),
                ));
            }
            let workers = *a.workers.get_ref();
            if !(1..=1024).contains(&workers) {
                return Err(fail(
                    Some(a.workers.span()),
                    format!("app `{name}`: workers must be between 1 and 1024, not {workers}"),
                ));
            }
            let base = *a.port_base.get_ref();
            let last = base + 2 * workers - 1;
            if base < 1 || last > 65535 {
                return Err(fail(
                    Some(a.port_base.span()),
                    format!(
                        "app `{name}`: ports {base}..={last} (port_base to port_base + 2 × workers − 1) must lie in 1..=65535"
                    ),
                ));
            }
            for &(lo, hi, other) in &ranges {
                if (base as u32) <= hi && (last as u32) >= lo {
                    return Err(fail(
                        Some(a.port_base.span()),
                        format!(
                            "app `{name}`: ports {base}..={last} overlap app `{}`'s ports {lo}..={hi} (each app uses port_base .. port_base + 2 × workers − 1)",
                            apps[other].name
                        ),
                    ));
                }
            }
            for (what, addr) in [("listen", Some(listen)), ("admin", admin)] {
                if let Some(addr) = addr
                    && (base..=last).contains(&(addr.port() as i64))
                {
                    return Err(fail(
                        Some(a.port_base.span()),
                        format!(
                            "app `{name}`: ports {base}..={last} include the {what} port {}",
                            addr.port()
                        ),
                    ));
                }
            }
            for (key, var) in [("port_env", &a.port_env), ("index_env", &a.index_env)] {
                if !env_name_ok(var.get_ref()) {
                    return Err(fail(
                        Some(var.span())
                            .filter(|s| s.end > 0)
                            .or(Some(spanned.span())),
                        format!(
                            "app `{name}`: {key} must be an environment variable name (letters, digits, `_`), not `{}`",
                            var.get_ref()
                        ),
                    ));
                }
            }
            if let Some(bad) = a.env.keys().find(|k| !env_name_ok(k)) {
                return Err(fail(
                    Some(spanned.span()),
                    format!("app `{name}`: env key `{bad}` is not an environment variable name"),
                ));
            }
            let h_span = a.health.as_ref().map(|h| h.span()).or(Some(spanned.span()));
            let default_health = RawHealth::default();
            let h = a.health.as_ref().map_or(&default_health, |h| h.get_ref());
            if !h.path.starts_with('/') {
                return Err(fail(
                    h_span,
                    format!("app `{name}`: health.path must start with `/`"),
                ));
            }
            let health_interval = dur(&h.interval, &h.interval_ms, "health.interval", 500)?;
            let health_timeout = dur(&h.timeout, &h.timeout_ms, "health.timeout", 500)?;
            if h.failures == 0 || health_interval.is_zero() || health_timeout.is_zero() {
                return Err(fail(
                    h_span,
                    format!("app `{name}`: health.failures, interval and timeout must be positive"),
                ));
            }
            let default_restart = RawRestart {
                max_restarts: d_max_restarts(),
                ..RawRestart::default()
            };
            let r = a.restart.as_ref().map_or(&default_restart, |r| r.get_ref());
            let window = match (&r.window, &r.window_s) {
                (Some(_), Some(w)) => {
                    return Err(fail(
                        Some(w.span()),
                        "restart: set either `window` or `window_s`, not both".into(),
                    ));
                }
                (Some(w), None) => w.get_ref().0,
                (None, Some(w)) => Duration::from_secs(*w.get_ref()),
                (None, None) => Duration::from_secs(60),
            };
            let backoff = dur(&r.backoff, &r.backoff_ms, "restart.backoff", 100)?;
            let backoff_max = dur(
                &r.backoff_max,
                &r.backoff_max_ms,
                "restart.backoff_max",
                10_000,
            )?;
            let listen = match (a.mode, &a.listen) {
                (Mode::Direct, None) => {
                    return Err(fail(
                        Some(spanned.span()),
                        format!(
                            "app `{name}`: mode = \"direct\" needs `listen` (the address serve binds and hands to the workers on fd 3)"
                        ),
                    ));
                }
                (Mode::Proxy, Some(l)) => {
                    return Err(fail(
                        Some(l.span()),
                        format!(
                            "app `{name}`: `listen` is only for mode = \"direct\"; a proxy app is reached through [server] listen"
                        ),
                    ));
                }
                (Mode::Direct, Some(l)) => {
                    Some(l.get_ref().trim().parse::<SocketAddr>().map_err(|_| {
                        fail(
                            Some(l.span()),
                            format!(
                                "app `{name}`: listen `{}` is not an address like 127.0.0.1:8081",
                                l.get_ref()
                            ),
                        )
                    })?)
                }
                (Mode::Proxy, None) => None,
            };
            if a.mode == Mode::Direct {
                // Each of these acts on single requests, which a direct app's workers take
                // from the kernel with no balancer in between.
                let per_request = [
                    (
                        "balance",
                        (a.balance.span() != (0..0)).then(|| a.balance.span()),
                    ),
                    ("avoid_stalled", a.avoid_stalled.as_ref().map(|s| s.span())),
                    ("sticky_worker", a.sticky_worker.as_ref().map(|s| s.span())),
                    (
                        "max_in_flight_per_worker",
                        a.max_in_flight_per_worker.as_ref().map(|s| s.span()),
                    ),
                    (
                        "avoid_stalled_ms",
                        a.avoid_stalled_ms.as_ref().map(|s| s.span()),
                    ),
                ];
                if let Some((key, span)) =
                    per_request.into_iter().find_map(|(k, s)| s.map(|s| (k, s)))
                {
                    return Err(fail(
                        Some(span),
                        format!(
                            "app `{name}`: {key} is a per-request setting, and a direct app's requests never pass through the balancer (use mode = \"proxy\")"
                        ),
                    ));
                }
            }
            let max_memory_bytes = match &a.max_memory_mb {
                Some(m) if *m.get_ref() == 0 => {
                    return Err(fail(
                        Some(m.span()),
                        format!("app `{name}`: max_memory_mb must be positive"),
                    ));
                }
                Some(m) => Some(m.get_ref().saturating_mul(1024 * 1024)),
                None => None,
            };
            let sticky_worker = match &a.sticky_worker {
                Some(s) => Some(crate::sticky::parse(s.get_ref()).ok_or_else(|| {
                    fail(
                        Some(s.span()),
                        format!(
                            "app `{name}`: bad sticky_worker `{}`: expected {}",
                            s.get_ref(),
                            crate::sticky::GRAMMAR
                        ),
                    )
                })?),
                None => None,
            };
            let max_in_flight_per_worker = match &a.max_in_flight_per_worker {
                Some(m) if !(1..=1_000_000).contains(m.get_ref()) => {
                    return Err(fail(
                        Some(m.span()),
                        format!(
                            "app `{name}`: max_in_flight_per_worker must be 1 to 1000000 (leave it out for no limit), not {}",
                            m.get_ref()
                        ),
                    ));
                }
                Some(m) if a.sticky_worker.is_some() => {
                    return Err(fail(
                        Some(m.span()),
                        format!(
                            "app `{name}`: max_in_flight_per_worker sends each request to the first worker with a free slot, which sticky_worker forbids: set one of the two"
                        ),
                    ));
                }
                Some(m) => *m.get_ref() as usize,
                None => 0,
            };
            if max_in_flight_per_worker == 0 {
                let only_with = [
                    ("max_queued", a.max_queued.as_ref().map(|s| s.span())),
                    ("queue_timeout", a.queue_timeout.as_ref().map(|s| s.span())),
                ];
                if let Some((key, span)) =
                    only_with.into_iter().find_map(|(k, s)| s.map(|s| (k, s)))
                {
                    return Err(fail(
                        Some(span),
                        format!(
                            "app `{name}`: {key} is the queue of max_in_flight_per_worker, which is not set"
                        ),
                    ));
                }
            }
            let max_queued = match &a.max_queued {
                Some(m) if !(0..=1_000_000).contains(m.get_ref()) => {
                    return Err(fail(
                        Some(m.span()),
                        format!(
                            "app `{name}`: max_queued must be 0 to 1000000, not {}",
                            m.get_ref()
                        ),
                    ));
                }
                Some(m) => *m.get_ref() as usize,
                None => 1000,
            };
            let queue_timeout = match &a.queue_timeout {
                Some(t) if t.get_ref().0.is_zero() => {
                    return Err(fail(
                        Some(t.span()),
                        format!(
                            "app `{name}`: queue_timeout must be positive (max_queued = 0 refuses at once instead)"
                        ),
                    ));
                }
                Some(t) => t.get_ref().0,
                None => Duration::from_secs(5),
            };
            ranges.push((base as u32, last as u32, apps.len()));
            names.insert(name.to_string(), apps.len());
            apps.push(Arc::new(AppConfig {
                name: name.into(),
                command: a.command.get_ref().clone(),
                workers: workers as usize,
                port_base: base as u16,
                port_env: a.port_env.get_ref().clone(),
                index_env: a.index_env.get_ref().clone(),
                env: a.env.clone(),
                cwd: a.cwd.as_ref().map(|c| base_dir.join(c.get_ref())),
                command_line: Some(line_of(text, a.command.span().start)),
                cwd_line: a.cwd.as_ref().map(|c| line_of(text, c.span().start)),
                balance: *a.balance.get_ref(),
                mode: a.mode,
                sticky_worker,
                max_in_flight_per_worker,
                max_queued,
                queue_timeout,
                max_memory_bytes,
                listen,
                avoid_stalled: dur(&a.avoid_stalled, &a.avoid_stalled_ms, "avoid_stalled", 500)?,
                start_timeout: at_least(
                    dur(
                        &a.start_timeout,
                        &a.start_timeout_ms,
                        "start_timeout",
                        30_000,
                    )?,
                    ms1,
                ),
                stop_grace: dur(&a.stop_grace, &a.stop_grace_ms, "stop_grace", 5_000)?,
                health_path: h.path.clone(),
                health_interval,
                health_timeout,
                health_failures: h.failures,
                health_prestart: h.prestart,
                backoff,
                backoff_max: backoff_max.max(backoff),
                max_restarts: r.max_restarts,
                restart_window: window.max(Duration::from_secs(1)),
            }));
        }

        let app_ref = |s: &Spanned<String>| -> Result<usize, ConfigError> {
            let idx = names.get(s.get_ref().as_str()).copied().ok_or_else(|| {
                fail(
                    Some(s.span()),
                    format!("route names unknown app `{}`", s.get_ref()),
                )
            })?;
            if apps[idx].mode == Mode::Direct {
                return Err(fail(
                    Some(s.span()),
                    format!(
                        "route names app `{}`, which is mode = \"direct\": its clients connect to its own listen address and never pass the balancer, so no route, split (A/B) or mirror can reach it",
                        s.get_ref()
                    ),
                ));
            }
            Ok(idx)
        };
        let mut routes = Vec::new();
        for spanned in &raw.route {
            let r = spanned.get_ref();
            let here = Some(spanned.span());
            if !r.prefix.get_ref().starts_with('/') {
                return Err(fail(
                    Some(r.prefix.span()),
                    format!("route prefix `{}` must start with `/`", r.prefix.get_ref()),
                ));
            }
            let method = match &r.method {
                Some(m) => Some(
                    http::Method::from_bytes(m.get_ref().to_ascii_uppercase().as_bytes()).map_err(
                        |_| fail(Some(m.span()), format!("bad method `{}`", m.get_ref())),
                    )?,
                ),
                None => None,
            };
            let header = match &r.header {
                Some(h) => {
                    let name = http::HeaderName::from_bytes(h.get_ref().name.as_bytes()).map_err(
                        |_| {
                            fail(
                                Some(h.span()),
                                format!("bad header name `{}`", h.get_ref().name),
                            )
                        },
                    )?;
                    Some((name, h.get_ref().value.clone()))
                }
                None => None,
            };
            let arms = match (&r.app, &r.split) {
                (Some(app), None) => vec![(app_ref(app)?, 1)],
                (None, Some(split)) if !split.is_empty() => {
                    let mut arms = Vec::new();
                    let mut total: u64 = 0;
                    for arm in split {
                        let idx = app_ref(&arm.get_ref().app)?;
                        let w = *arm.get_ref().weight.get_ref();
                        if w <= 0 {
                            return Err(fail(
                                Some(arm.get_ref().weight.span()),
                                format!("split weight must be positive, not {w}"),
                            ));
                        }
                        total = total.checked_add(w as u64).ok_or_else(|| {
                            fail(
                                Some(arm.get_ref().weight.span()),
                                "split weights add up to more than 2^64: use smaller numbers (only their ratio matters)".into(),
                            )
                        })?;
                        arms.push((idx, w as u64));
                    }
                    arms
                }
                _ => {
                    return Err(fail(
                        here,
                        "a route needs exactly one of `app` or a non-empty `split`".into(),
                    ));
                }
            };
            let sticky = match &r.sticky {
                Some(s) => Some(crate::sticky::parse(s.get_ref()).ok_or_else(|| {
                    fail(
                        Some(s.span()),
                        format!(
                            "bad sticky key `{}`: expected {}",
                            s.get_ref(),
                            crate::sticky::GRAMMAR
                        ),
                    )
                })?),
                None => None,
            };
            if let Some(p) = &r.mirror_percent {
                let pct = *p.get_ref();
                if !(pct > 0.0 && pct <= 100.0) {
                    return Err(fail(
                        Some(p.span()),
                        format!("mirror_percent must be in (0, 100], not {pct}"),
                    ));
                }
            }
            let mirror = match &r.mirror {
                Some(m) => {
                    let idx = app_ref(m)?;
                    let pct = r.mirror_percent.as_ref().map_or(100.0, |p| *p.get_ref());
                    if arms.iter().any(|&(a, _)| a == idx) {
                        return Err(fail(
                            Some(m.span()),
                            format!("mirror app `{}` is also an arm of the route", m.get_ref()),
                        ));
                    }
                    let mut comparer = scalpel_diff::Comparer::new();
                    for pattern in r.mirror_ignore.get_ref() {
                        comparer = comparer.ignore(pattern).map_err(|e| {
                            fail(Some(r.mirror_ignore.span()), format!("mirror_ignore: {e}"))
                        })?;
                    }
                    let store = r.mirror_store.as_ref().map(|p| base_dir.join(p.get_ref()));
                    Some(MirrorConfig {
                        app_name: m.get_ref().as_str().into(),
                        key: format!(
                            "{} -> {} {pct}% unsafe={} store={store:?} ignore={:?}",
                            r.prefix.get_ref(),
                            m.get_ref(),
                            r.mirror_unsafe,
                            r.mirror_ignore.get_ref()
                        ),
                        percent: pct,
                        unsafe_methods: r.mirror_unsafe,
                        comparer,
                        store,
                    })
                }
                None => {
                    let stray = [
                        (
                            "mirror_ignore",
                            (!r.mirror_ignore.get_ref().is_empty()).then(|| r.mirror_ignore.span()),
                        ),
                        ("mirror_store", r.mirror_store.as_ref().map(|p| p.span())),
                        (
                            "mirror_percent",
                            r.mirror_percent.as_ref().map(|p| p.span()),
                        ),
                        ("mirror_unsafe", r.mirror_unsafe.then(|| spanned.span())),
                    ];
                    if let Some((key, span)) =
                        stray.into_iter().find_map(|(k, s)| s.map(|s| (k, s)))
                    {
                        return Err(fail(Some(span), format!("{key} without mirror")));
                    }
                    None
                }
            };
            routes.push(RouteConfig {
                prefix: r.prefix.get_ref().clone(),
                method,
                header,
                arms,
                sticky,
                mirror,
            });
        }
        Ok(Config {
            path: path.to_path_buf(),
            server,
            apps,
            routes,
        })
    }

    /// Why `next` cannot take this configuration's place in a running server, if it
    /// cannot: a change a live reload does not make (listeners, threads and what else of
    /// `[server]` is fixed at start, an app's mode or direct address, mirrors, ports
    /// moving between apps). `None` when everything that differs can be applied live.
    pub(crate) fn not_live(&self, next: &Config) -> Option<String> {
        let (a, b) = (&self.server, &next.server);
        let mut changed = Vec::new();
        macro_rules! compare {
            ($($f:ident),*) => { $( if a.$f != b.$f { changed.push(stringify!($f)); } )* };
        }
        // Read per request or per connection from the swapped table, so not compared:
        // max_header_bytes, header_read_timeout, body_read_timeout, max_body_bytes,
        // max_connections, trusted_proxies, upstream_timeout, wait_for_worker,
        // retry_idempotent, tunnel_idle_timeout. The rest is fixed at start.
        compare!(
            listen,
            admin,
            admin_token,
            threads,
            tls,
            admin_tls,
            connect_timeout,
            pool_idle_timeout,
            pool_max_idle_per_worker,
            drain_timeout,
            sample_interval,
            log_line_max_bytes,
            log_buffer_bytes,
            mirror_buffer_bytes
        );
        if !changed.is_empty() {
            return Some(format!(
                "[server] {} changed: read at start only (listeners and their TLS files, the \
                 admin token, data-plane threads and their worker pools, the drain time-out \
                 each app's supervisor holds, the sampler, log and mirror buffers); restart \
                 serve to change it. The request and connection limits and time-outs do \
                 change live",
                changed.join(", ")
            ));
        }
        for app in &next.apps {
            let Some(old) = self.apps.iter().find(|o| o.name == app.name) else {
                continue;
            };
            let name = &app.name;
            if old.mode != app.mode {
                return Some(format!(
                    "app `{name}`: mode changed ({} → {}), which cannot be done live; give the \
                     app a new name (the new one starts, then the old one drains) or restart serve",
                    old.mode.name(),
                    app.mode.name()
                ));
            }
            if old.listen != app.listen {
                return Some(format!(
                    "app `{name}`: listen changed ({} → {}): its running workers hold the old \
                     socket, which cannot move live; give the app a new name with the new \
                     address (the new one starts, then the old one drains) or restart serve",
                    old.listen.map_or_else(|| "none".into(), |l| l.to_string()),
                    app.listen.map_or_else(|| "none".into(), |l| l.to_string())
                ));
            }
        }
        let range = |a: &AppConfig| {
            let lo = u32::from(a.port_base);
            (lo, lo + 2 * a.workers as u32 - 1)
        };
        for app in &next.apps {
            let (lo, hi) = range(app);
            for old in self.apps.iter().filter(|o| o.name != app.name) {
                let (olo, ohi) = range(old);
                if lo <= ohi && hi >= olo {
                    return Some(format!(
                        "app `{}`: ports {lo}..={hi} overlap the ports {olo}..={ohi} of the \
                         running app `{}`, which still holds them while the reload runs; use \
                         other ports, or move them in two reloads",
                        app.name, old.name
                    ));
                }
            }
        }
        let mirrors = |c: &Config| {
            c.routes
                .iter()
                .filter_map(|r| r.mirror.as_ref().map(|m| m.key.clone()))
                .collect::<Vec<_>>()
        };
        if mirrors(self) != mirrors(next) {
            return Some(
                "mirrored routes changed: a mirror's comparisons, store and thread live as \
                 long as serve; restart serve to change them (other route changes are live)"
                    .into(),
            );
        }
        None
    }

    /// The file the configuration came from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The balancer's listen address as configured (port 0 picks a free one).
    pub fn listen(&self) -> SocketAddr {
        self.server.listen
    }

    /// The admin address, if any.
    pub fn admin(&self) -> Option<SocketAddr> {
        self.server.admin
    }

    /// Names of the apps, in order.
    pub fn app_names(&self) -> Vec<&str> {
        self.apps.iter().map(|a| &*a.name).collect()
    }

    /// Checks the TLS files of `[server.tls]` and `[server.admin_tls]`: readable, parse,
    /// and the key matches the certificate. One line per problem; none when all is well
    /// (or no TLS is configured).
    pub fn check_tls(&self) -> Vec<String> {
        let mut problems = Vec::new();
        for (what, files) in [
            ("server.tls", &self.server.tls),
            ("server.admin_tls", &self.server.admin_tls),
        ] {
            if let Some(files) = files
                && let Err(found) = crate::tls::load(files)
            {
                problems.extend(found.into_iter().map(|p| format!("{what}: {p}")));
            }
        }
        problems
    }

    /// Whether the client listener speaks TLS (`[server.tls]`).
    pub fn tls(&self) -> bool {
        self.server.tls.is_some()
    }

    /// Checks what the text alone cannot show: each app's `cwd` is a directory, and its
    /// program exists and is executable — found on `PATH` (the app's own `env.PATH` when
    /// it sets one), or, when it names a path, relative to the `cwd`. `scalpel serve
    /// --check` and [`crate::Server::start`] run it, so a config that passes the check
    /// does not fail at start for these reasons.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming the file, the line of `cwd` or `command`, and the reason.
    pub fn check_programs(&self) -> Result<(), ConfigError> {
        for app in &self.apps {
            let fail = |line: Option<usize>, reason: String| ConfigError {
                path: self.path.clone(),
                line,
                reason: format!("app `{}`: {reason}", app.name),
            };
            if let Some(dir) = &app.cwd
                && !dir.is_dir()
            {
                return Err(fail(
                    app.cwd_line,
                    format!(
                        "cwd {} is not a directory (or does not exist)",
                        dir.display()
                    ),
                ));
            }
            let program = &app.command[0];
            if resolve_program(
                program,
                app.cwd.as_deref(),
                app.env.get("PATH").map(String::as_str),
            )
            .is_none()
            {
                return Err(fail(
                    app.command_line,
                    if program.contains('/') {
                        let dir = app.cwd.as_deref().unwrap_or(Path::new("."));
                        format!(
                            "program `{program}` is not an executable file (relative to {})",
                            dir.display()
                        )
                    } else {
                        format!("program `{program}` not found on PATH")
                    },
                ));
            }
        }
        Ok(())
    }
}

/// The PEM files of `raw`, relative to the config file's directory.
fn tls_files(config: &Path, raw: &RawTls) -> TlsFiles {
    let base = config.parent().unwrap_or(Path::new("."));
    TlsFiles {
        cert: base.join(&raw.cert),
        key: base.join(&raw.key),
    }
}

/// Where `program` would be found by a spawn with `cwd` and `path` (the child's `PATH`;
/// the balancer's own when `None`): a name with a `/` relative to `cwd`, else the first
/// executable file on `PATH`.
pub(crate) fn resolve_program(
    program: &str,
    cwd: Option<&Path>,
    path: Option<&str>,
) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    let executable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        let p = match cwd {
            Some(dir) => dir.join(program),
            None => PathBuf::from(program),
        };
        return executable(&p).then_some(p);
    }
    let own = std::env::var("PATH").ok();
    let search = path
        .or(own.as_deref())
        .unwrap_or("/usr/local/bin:/usr/bin:/bin");
    search
        .split(':')
        .map(|d| {
            if d.is_empty() {
                Path::new(".")
            } else {
                Path::new(d)
            }
        })
        .map(|d| d.join(program))
        .find(|p| executable(p))
}

/// A duration key given as `key = "30s"` or `key_ms = 30000` (one of them), else `default`.
fn duration(
    fail: &impl Fn(Option<Range<usize>>, String) -> ConfigError,
    human: &Human,
    ms: &Millis,
    key: &str,
    default: Duration,
) -> Result<Duration, ConfigError> {
    match (human, ms) {
        (Some(h), Some(_)) => Err(fail(
            Some(h.span()),
            format!("set either `{key}` or `{key}_ms`, not both"),
        )),
        (Some(h), None) => Ok(h.get_ref().0),
        (None, Some(m)) => Ok(Duration::from_millis(*m.get_ref())),
        (None, None) => Ok(default),
    }
}

/// A name a child process can be given in its environment: not empty, no `=` or NUL, and
/// (so that shells and runtimes can read it) letters, digits and `_`, not starting with a
/// digit.
fn env_name_ok(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

fn line_of(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    text.as_bytes()[..end]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

#[cfg(test)]
mod tests;
