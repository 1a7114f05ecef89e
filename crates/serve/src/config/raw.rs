//! The configuration as written: the TOML document deserialized into raw sections with
//! unknown keys denied and every value's span kept, before any check (as ripgrep parses
//! its flags into low-level arguments first). The sections' own modules turn these into
//! the checked configuration. An app's `balance` and `mode` are taken as written.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

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

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    pub(super) server: RawServer,
    #[serde(default)]
    pub(super) app: Vec<Spanned<RawApp>>,
    #[serde(default)]
    pub(super) route: Vec<Spanned<RawRoute>>,
}

pub(super) fn default_admin() -> Option<Spanned<String>> {
    None
}

/// A duration in the units grammar (`"30s"`, `"250ms"`): the keys without a unit suffix.
#[derive(Debug, Clone, Copy)]
pub(super) struct HumanDuration(pub(super) Duration);

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        scalpel_units::serde::duration(d).map(HumanDuration)
    }
}

/// A size: bytes as an integer, or a string in the units grammar (`"64KiB"`).
#[derive(Debug, Clone, Copy)]
pub(super) struct HumanSize(pub(super) u64);

impl<'de> Deserialize<'de> for HumanSize {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        scalpel_units::serde::size(d).map(HumanSize)
    }
}

/// A duration key: `name = "30s"`, or the older `name_ms = 30000` (both keep working; one
/// of them at most).
pub(super) type Human = Option<Spanned<HumanDuration>>;
pub(super) type Millis = Option<Spanned<u64>>;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawServer {
    pub(super) listen: Spanned<String>,
    #[serde(default = "default_admin")]
    pub(super) admin: Option<Spanned<String>>,
    pub(super) admin_token: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) admin_hosts: Vec<Spanned<String>>,
    pub(super) max_header_bytes: Option<Spanned<HumanSize>>,
    pub(super) header_read_timeout: Human,
    pub(super) header_read_timeout_ms: Millis,
    pub(super) body_read_timeout: Human,
    pub(super) body_read_timeout_ms: Millis,
    pub(super) max_body_bytes: Option<Spanned<HumanSize>>,
    pub(super) max_connections: Option<Spanned<i64>>,
    #[serde(default)]
    pub(super) trusted_proxies: Vec<Spanned<String>>,
    pub(super) upstream_connect_timeout: Human,
    pub(super) upstream_connect_timeout_ms: Millis,
    pub(super) upstream_timeout: Human,
    pub(super) upstream_timeout_ms: Millis,
    pub(super) wait_for_worker: Human,
    pub(super) wait_for_worker_ms: Millis,
    #[serde(default = "d_true")]
    pub(super) retry_idempotent: bool,
    pub(super) pool_idle_timeout: Human,
    pub(super) pool_idle_timeout_ms: Millis,
    #[serde(default = "d_pool_max_idle")]
    pub(super) pool_max_idle_per_worker: usize,
    pub(super) drain_timeout: Human,
    pub(super) drain_timeout_ms: Millis,
    pub(super) sample_interval: Human,
    pub(super) sample_interval_ms: Millis,
    pub(super) tunnel_idle_timeout: Human,
    pub(super) tunnel_idle_timeout_ms: Millis,
    pub(super) threads: Option<Spanned<u64>>,
    pub(super) log_line_max_bytes: Option<Spanned<HumanSize>>,
    pub(super) log_buffer_bytes: Option<Spanned<HumanSize>>,
    pub(super) mirror_buffer_bytes: Option<Spanned<HumanSize>>,
    pub(super) tls: Option<RawTls>,
    pub(super) admin_tls: Option<RawTls>,
}

/// `[server.tls]` / `[server.admin_tls]`: PEM files, relative to the config's directory.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTls {
    pub(super) cert: PathBuf,
    pub(super) key: PathBuf,
}

pub(super) fn d_true() -> bool {
    true
}
pub(super) fn d_pool_max_idle() -> usize {
    256
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawApp {
    pub(super) name: Spanned<String>,
    pub(super) command: Spanned<Vec<String>>,
    #[serde(default = "d_workers")]
    pub(super) workers: Spanned<i64>,
    pub(super) port_base: Spanned<i64>,
    #[serde(default = "d_port_env")]
    pub(super) port_env: Spanned<String>,
    #[serde(default = "d_index_env")]
    pub(super) index_env: Spanned<String>,
    #[serde(default)]
    pub(super) env: BTreeMap<String, Spanned<String>>,
    pub(super) cwd: Option<Spanned<PathBuf>>,
    #[serde(default = "d_balance")]
    pub(super) balance: Spanned<Balance>,
    #[serde(default)]
    pub(super) mode: Mode,
    pub(super) listen: Option<Spanned<String>>,
    pub(super) avoid_stalled: Human,
    pub(super) avoid_stalled_ms: Millis,
    pub(super) start_timeout: Human,
    pub(super) start_timeout_ms: Millis,
    pub(super) stop_grace: Human,
    pub(super) stop_grace_ms: Millis,
    pub(super) health: Option<Spanned<RawHealth>>,
    pub(super) restart: Option<Spanned<RawRestart>>,
    pub(super) max_memory_mb: Option<Spanned<u64>>,
    pub(super) sticky_worker: Option<Spanned<String>>,
    pub(super) max_in_flight_per_worker: Option<Spanned<i64>>,
    pub(super) max_queued: Option<Spanned<i64>>,
    pub(super) queue_timeout: Human,
    /// Start Node workers with serve's preload (`None`: when the command is Node).
    pub(super) preload: Option<Spanned<bool>>,
}

pub(super) fn d_workers() -> Spanned<i64> {
    Spanned::new(0..0, 1)
}
pub(super) fn d_port_env() -> Spanned<String> {
    Spanned::new(0..0, "PORT".into())
}
pub(super) fn d_index_env() -> Spanned<String> {
    Spanned::new(0..0, "WORKER_INDEX".into())
}
pub(super) fn d_balance() -> Spanned<Balance> {
    Spanned::new(0..0, Balance::LeastConn)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHealth {
    /// `None`: not written — the default probe depends on the app (see `app::health`).
    pub(super) path: Option<String>,
    pub(super) interval: Human,
    pub(super) interval_ms: Millis,
    pub(super) timeout: Human,
    pub(super) timeout_ms: Millis,
    #[serde(default = "d_failures")]
    pub(super) failures: u32,
    #[serde(default)]
    pub(super) prestart: bool,
}

pub(super) fn d_failures() -> u32 {
    3
}

impl Default for RawHealth {
    fn default() -> Self {
        Self {
            path: None,
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
pub(super) struct RawRestart {
    pub(super) backoff: Human,
    pub(super) backoff_ms: Millis,
    pub(super) backoff_max: Human,
    pub(super) backoff_max_ms: Millis,
    #[serde(default = "d_max_restarts")]
    pub(super) max_restarts: u32,
    pub(super) window: Human,
    pub(super) window_s: Option<Spanned<u64>>,
}

pub(super) fn d_max_restarts() -> u32 {
    10
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRoute {
    #[serde(default = "d_prefix")]
    pub(super) prefix: Spanned<String>,
    pub(super) method: Option<Spanned<String>>,
    pub(super) header: Option<Spanned<RawHeaderMatch>>,
    pub(super) app: Option<Spanned<String>>,
    pub(super) split: Option<Vec<Spanned<RawArm>>>,
    pub(super) sticky: Option<Spanned<String>>,
    pub(super) mirror: Option<Spanned<String>>,
    pub(super) mirror_percent: Option<Spanned<f64>>,
    #[serde(default)]
    pub(super) mirror_unsafe: bool,
    #[serde(default = "d_no_patterns")]
    pub(super) mirror_ignore: Spanned<Vec<String>>,
    pub(super) mirror_store: Option<Spanned<String>>,
}

pub(super) fn d_prefix() -> Spanned<String> {
    Spanned::new(0..0, "/".into())
}
pub(super) fn d_no_patterns() -> Spanned<Vec<String>> {
    Spanned::new(0..0, Vec::new())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHeaderMatch {
    pub(super) name: String,
    pub(super) value: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawArm {
    pub(super) app: Spanned<String>,
    pub(super) weight: Spanned<i64>,
}
