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
pub enum Balance {
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
    pub fn name(self) -> &'static str {
        match self {
            Balance::RoundRobin => "round_robin",
            Balance::LeastConn => "least_conn",
            Balance::PowerOfTwo => "power_of_two",
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

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawServer {
    listen: Spanned<String>,
    #[serde(default = "default_admin")]
    admin: Option<Spanned<String>>,
    admin_token: Option<String>,
    #[serde(default = "d_max_header_bytes")]
    max_header_bytes: Spanned<u64>,
    #[serde(default = "d_header_read_timeout_ms")]
    header_read_timeout_ms: u64,
    #[serde(default = "d_max_body_bytes")]
    max_body_bytes: u64,
    #[serde(default = "d_connect_timeout_ms")]
    upstream_connect_timeout_ms: u64,
    #[serde(default = "d_upstream_timeout_ms")]
    upstream_timeout_ms: u64,
    #[serde(default = "d_wait_for_worker_ms")]
    wait_for_worker_ms: u64,
    #[serde(default = "d_true")]
    retry_idempotent: bool,
    #[serde(default = "d_pool_idle_timeout_ms")]
    pool_idle_timeout_ms: u64,
    #[serde(default = "d_pool_max_idle")]
    pool_max_idle_per_worker: usize,
    #[serde(default = "d_drain_timeout_ms")]
    drain_timeout_ms: u64,
    #[serde(default = "d_sample_interval_ms")]
    sample_interval_ms: u64,
    #[serde(default = "d_tunnel_idle_timeout_ms")]
    tunnel_idle_timeout_ms: u64,
    threads: Option<Spanned<u64>>,
}

fn d_max_header_bytes() -> Spanned<u64> {
    Spanned::new(0..0, 16 * 1024)
}
fn d_header_read_timeout_ms() -> u64 {
    10_000
}
fn d_max_body_bytes() -> u64 {
    8 << 20
}
fn d_connect_timeout_ms() -> u64 {
    2_000
}
fn d_upstream_timeout_ms() -> u64 {
    60_000
}
fn d_wait_for_worker_ms() -> u64 {
    5_000
}
fn d_tunnel_idle_timeout_ms() -> u64 {
    300_000
}
fn d_true() -> bool {
    true
}
fn d_pool_idle_timeout_ms() -> u64 {
    60_000
}
fn d_avoid_stalled_ms() -> u64 {
    500
}
fn d_pool_max_idle() -> usize {
    256
}
fn d_drain_timeout_ms() -> u64 {
    30_000
}
fn d_sample_interval_ms() -> u64 {
    1_000
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
    port_env: String,
    #[serde(default = "d_index_env")]
    index_env: String,
    #[serde(default)]
    env: BTreeMap<String, String>,
    cwd: Option<PathBuf>,
    #[serde(default = "d_balance")]
    balance: Balance,
    #[serde(default = "d_avoid_stalled_ms")]
    avoid_stalled_ms: u64,
    #[serde(default = "d_start_timeout_ms")]
    start_timeout_ms: u64,
    #[serde(default = "d_stop_grace_ms")]
    stop_grace_ms: u64,
    #[serde(default)]
    health: RawHealth,
    #[serde(default)]
    restart: RawRestart,
}

fn d_workers() -> Spanned<i64> {
    Spanned::new(0..0, 1)
}
fn d_port_env() -> String {
    "PORT".into()
}
fn d_index_env() -> String {
    "WORKER_INDEX".into()
}
fn d_balance() -> Balance {
    Balance::LeastConn
}
fn d_start_timeout_ms() -> u64 {
    30_000
}
fn d_stop_grace_ms() -> u64 {
    5_000
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawHealth {
    path: String,
    interval_ms: u64,
    timeout_ms: u64,
    failures: u32,
    prestart: bool,
}

impl Default for RawHealth {
    fn default() -> Self {
        Self {
            path: "/healthz".into(),
            interval_ms: 500,
            timeout_ms: 500,
            failures: 3,
            prestart: false,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawRestart {
    backoff_ms: u64,
    backoff_max_ms: u64,
    max_restarts: u32,
    window_s: u64,
}

impl Default for RawRestart {
    fn default() -> Self {
        Self {
            backoff_ms: 100,
            backoff_max_ms: 10_000,
            max_restarts: 10,
            window_s: 60,
        }
    }
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
    #[serde(default = "d_mirror_percent")]
    mirror_percent: Spanned<f64>,
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
fn d_mirror_percent() -> Spanned<f64> {
    Spanned::new(0..0, 100.0)
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

#[derive(Debug, Clone)]
pub(crate) struct ServerConfig {
    pub(crate) listen: SocketAddr,
    pub(crate) admin: Option<SocketAddr>,
    pub(crate) admin_token: Option<String>,
    pub(crate) max_header_bytes: usize,
    pub(crate) header_read_timeout: Duration,
    pub(crate) max_body_bytes: u64,
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
    pub(crate) balance: Balance,
    /// A worker with requests in flight and no response head for this long gets no new
    /// requests until it answers again (zero: never).
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
    pub(crate) app: usize,
    pub(crate) percent: f64,
    pub(crate) comparer: scalpel_diff::Comparer,
    /// The SQLite store of counters and samples (`scalpel shadow report --store`), if any.
    pub(crate) store: Option<PathBuf>,
}

/// What a sticky split hashes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StickyKey {
    Header(http::HeaderName),
    Cookie(String),
    /// 1-based path segment.
    PathSegment(usize),
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
            let reason = e.message().trim().to_string();
            fail(e.span(), reason)
        })?;
        let token_env = std::env::var(ADMIN_TOKEN_ENV)
            .ok()
            .filter(|t| !t.is_empty());
        let s = raw.server;
        let listen: SocketAddr = s
            .listen
            .get_ref()
            .parse()
            .map_err(|e| fail(Some(s.listen.span()), format!("listen: {e}")))?;
        let admin = match &s.admin {
            Some(a) => Some(
                a.get_ref()
                    .parse::<SocketAddr>()
                    .map_err(|e| fail(Some(a.span()), format!("admin: {e}")))?,
            ),
            None => Some(SocketAddr::from(([127, 0, 0, 1], 9090))),
        };
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
        let max_header_bytes = *s.max_header_bytes.get_ref();
        if !(8192..=1 << 20).contains(&max_header_bytes) {
            return Err(fail(
                Some(s.max_header_bytes.span()),
                "max_header_bytes must be between 8192 and 1048576".into(),
            ));
        }
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
        let ms = Duration::from_millis;
        let server = ServerConfig {
            listen,
            admin,
            admin_token,
            max_header_bytes: max_header_bytes as usize,
            header_read_timeout: ms(s.header_read_timeout_ms.max(1)),
            max_body_bytes: s.max_body_bytes,
            connect_timeout: ms(s.upstream_connect_timeout_ms.max(1)),
            upstream_timeout: ms(s.upstream_timeout_ms.max(1)),
            wait_for_worker: ms(s.wait_for_worker_ms),
            retry_idempotent: s.retry_idempotent,
            pool_idle_timeout: ms(s.pool_idle_timeout_ms.max(1)),
            pool_max_idle_per_worker: s.pool_max_idle_per_worker,
            drain_timeout: ms(s.drain_timeout_ms),
            sample_interval: ms(s.sample_interval_ms.max(100)),
            tunnel_idle_timeout: ms(s.tunnel_idle_timeout_ms.max(1)),
            threads,
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
            let h = &a.health;
            if !h.path.starts_with('/') {
                return Err(fail(
                    Some(spanned.span()),
                    format!("app `{name}`: health.path must start with `/`"),
                ));
            }
            if h.failures == 0 || h.interval_ms == 0 || h.timeout_ms == 0 {
                return Err(fail(
                    Some(spanned.span()),
                    format!(
                        "app `{name}`: health.failures, interval_ms and timeout_ms must be positive"
                    ),
                ));
            }
            ranges.push((base as u32, last as u32, apps.len()));
            names.insert(name.to_string(), apps.len());
            let r = &a.restart;
            apps.push(Arc::new(AppConfig {
                name: name.into(),
                command: a.command.get_ref().clone(),
                workers: workers as usize,
                port_base: base as u16,
                port_env: a.port_env.clone(),
                index_env: a.index_env.clone(),
                env: a.env.clone(),
                cwd: a.cwd.as_ref().map(|c| base_dir.join(c)),
                balance: a.balance,
                avoid_stalled: ms(a.avoid_stalled_ms),
                start_timeout: ms(a.start_timeout_ms.max(1)),
                stop_grace: ms(a.stop_grace_ms),
                health_path: h.path.clone(),
                health_interval: ms(h.interval_ms),
                health_timeout: ms(h.timeout_ms),
                health_failures: h.failures,
                health_prestart: h.prestart,
                backoff: ms(r.backoff_ms),
                backoff_max: ms(r.backoff_max_ms.max(r.backoff_ms)),
                max_restarts: r.max_restarts,
                restart_window: Duration::from_secs(r.window_s.max(1)),
            }));
        }

        let app_ref = |s: &Spanned<String>| -> Result<usize, ConfigError> {
            names.get(s.get_ref().as_str()).copied().ok_or_else(|| {
                fail(
                    Some(s.span()),
                    format!("route names unknown app `{}`", s.get_ref()),
                )
            })
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
                    for arm in split {
                        let idx = app_ref(&arm.get_ref().app)?;
                        let w = *arm.get_ref().weight.get_ref();
                        if w <= 0 {
                            return Err(fail(
                                Some(arm.get_ref().weight.span()),
                                format!("split weight must be positive, not {w}"),
                            ));
                        }
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
                Some(s) => Some(parse_sticky(s.get_ref()).ok_or_else(|| {
                    fail(
                        Some(s.span()),
                        format!(
                            "bad sticky key `{}`: expected header:NAME, cookie:NAME or path:N (N ≥ 1)",
                            s.get_ref()
                        ),
                    )
                })?),
                None => None,
            };
            let mirror = match &r.mirror {
                Some(m) => {
                    let idx = app_ref(m)?;
                    let pct = *r.mirror_percent.get_ref();
                    if !(pct > 0.0 && pct <= 100.0) {
                        return Err(fail(
                            Some(r.mirror_percent.span()),
                            format!("mirror_percent must be in (0, 100], not {pct}"),
                        ));
                    }
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
                    Some(MirrorConfig {
                        app: idx,
                        percent: pct,
                        comparer,
                        store: r.mirror_store.as_ref().map(|p| base_dir.join(p.get_ref())),
                    })
                }
                None => {
                    if !r.mirror_ignore.get_ref().is_empty() {
                        return Err(fail(
                            Some(r.mirror_ignore.span()),
                            "mirror_ignore without mirror".into(),
                        ));
                    }
                    if let Some(p) = &r.mirror_store {
                        return Err(fail(Some(p.span()), "mirror_store without mirror".into()));
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
}

fn parse_sticky(s: &str) -> Option<StickyKey> {
    let (kind, arg) = s.split_once(':')?;
    match kind.trim() {
        "header" => http::HeaderName::from_bytes(arg.trim().as_bytes())
            .ok()
            .map(StickyKey::Header),
        "cookie" if !arg.trim().is_empty() => Some(StickyKey::Cookie(arg.trim().to_string())),
        "path" => arg
            .trim()
            .parse::<usize>()
            .ok()
            .filter(|&n| n >= 1)
            .map(StickyKey::PathSegment),
        _ => None,
    }
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
