//! `[[app]]` and its `[app.health]` and `[app.restart]`: names, commands, ports, the
//! environment's names, health checks, restarts, direct mode, and the per-request
//! settings (sticky worker, the slot queue).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use toml::Spanned;

use super::error::{ConfigError, Fail};
use super::raw::{Balance, Mode, RawApp, RawHealth, RawRestart, d_max_restarts};
use super::server::ServerConfig;
use crate::sticky::{self, StickyKey};

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
    /// How a worker is proven ready and alive (`[app.health] path`, or the default for
    /// the app: the Node preload's heartbeat, else a TCP accept check).
    pub(crate) health: HealthKind,
    /// Node workers start with serve's preload (`NODE_OPTIONS=--require …`).
    pub(crate) preload: bool,
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

/// What proves a worker ready and alive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HealthKind {
    /// `GET path` answers 2xx (`[app.health] path`, for apps that have such a route).
    Http(String),
    /// The Node preload's heartbeat over its pipe: the event loop turns (the default for
    /// Node workers).
    Heartbeat,
    /// A connection to the worker's port is accepted by the worker's own processes — not
    /// merely a handshake, which the kernel completes from the backlog of a hung app (the
    /// default for every other app).
    Accept,
}

impl HealthKind {
    /// Its name in `/status`.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            HealthKind::Http(_) => "http",
            HealthKind::Heartbeat => "heartbeat",
            HealthKind::Accept => "accept",
        }
    }
}

/// Is `command` a Node program: `node`/`nodejs` (any path), or a `.js`/`.mjs`/`.cjs` file
/// run through its shebang? What `preload` defaults to.
pub(crate) fn is_node(command: &[String]) -> bool {
    let Some(program) = command.first() else {
        return false;
    };
    let base = Path::new(program)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("");
    matches!(base, "node" | "nodejs") || [".js", ".mjs", ".cjs"].iter().any(|e| base.ends_with(e))
}

impl AppConfig {
    /// The two ports of worker `index`: incarnations alternate between them, so a new
    /// worker can start while the one it replaces still holds its port.
    pub(crate) fn ports(&self, index: usize) -> [u16; 2] {
        let a = self.port_base + index as u16;
        [a, a + self.workers as u16]
    }
}

/// Every `[[app]]`, checked in order (names and ports against the apps before it).
pub(super) fn apps(
    raw: &[Spanned<RawApp>],
    server: &ServerConfig,
    fail: &Fail,
    base_dir: &Path,
) -> Result<Vec<Arc<AppConfig>>, ConfigError> {
    if raw.is_empty() {
        return Err(fail.at(None, "no [[app]]: at least one app is needed".into()));
    }
    let mut apps: Vec<Arc<AppConfig>> = Vec::new();
    for spanned in raw {
        let app = app(spanned, &apps, server, fail, base_dir)?;
        apps.push(Arc::new(app));
    }
    Ok(apps)
}

/// One `[[app]]`, its sections checked in the order they are written about.
fn app(
    spanned: &Spanned<RawApp>,
    before: &[Arc<AppConfig>],
    server: &ServerConfig,
    fail: &Fail,
    base_dir: &Path,
) -> Result<AppConfig, ConfigError> {
    let a = spanned.get_ref();
    let name = identity(a, before, fail)?;
    let (workers, port_base) = ports(a, name, before, server, fail)?;
    env_names(spanned, name, fail)?;
    let preload = a
        .preload
        .as_ref()
        .map_or_else(|| is_node(a.command.get_ref()), |p| *p.get_ref());
    let health = health(spanned, name, preload, fail)?;
    let restart = restart(a, fail)?;
    let listen = direct(spanned, name, fail)?;
    let max_memory_bytes = match &a.max_memory_mb {
        Some(m) if *m.get_ref() == 0 => {
            return Err(fail.at(
                Some(m.span()),
                format!("app `{name}`: max_memory_mb must be positive"),
            ));
        }
        Some(m) => Some(m.get_ref().saturating_mul(1024 * 1024)),
        None => None,
    };
    let sticky_worker = match &a.sticky_worker {
        Some(s) => Some(sticky::parse(s.get_ref()).ok_or_else(|| {
            fail.at(
                Some(s.span()),
                format!(
                    "app `{name}`: bad sticky_worker `{}`: expected {}",
                    s.get_ref(),
                    sticky::GRAMMAR
                ),
            )
        })?),
        None => None,
    };
    let (max_in_flight_per_worker, max_queued, queue_timeout) = queue(a, name, fail)?;
    Ok(AppConfig {
        name: name.into(),
        command: a.command.get_ref().clone(),
        workers,
        port_base,
        port_env: a.port_env.get_ref().clone(),
        index_env: a.index_env.get_ref().clone(),
        env: a
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.get_ref().clone()))
            .collect(),
        cwd: a.cwd.as_ref().map(|c| base_dir.join(c.get_ref())),
        command_line: Some(fail.line(a.command.span().start)),
        cwd_line: a.cwd.as_ref().map(|c| fail.line(c.span().start)),
        balance: *a.balance.get_ref(),
        mode: a.mode,
        sticky_worker,
        max_in_flight_per_worker,
        max_queued,
        queue_timeout,
        max_memory_bytes,
        listen,
        avoid_stalled: fail.ms(&a.avoid_stalled, &a.avoid_stalled_ms, "avoid_stalled", 500)?,
        start_timeout: fail
            .ms(
                &a.start_timeout,
                &a.start_timeout_ms,
                "start_timeout",
                30_000,
            )?
            .max(Duration::from_millis(1)),
        stop_grace: fail.ms(&a.stop_grace, &a.stop_grace_ms, "stop_grace", 5_000)?,
        health: health.kind,
        preload,
        health_interval: health.interval,
        health_timeout: health.timeout,
        health_failures: health.failures,
        health_prestart: health.prestart,
        backoff: restart.backoff,
        backoff_max: restart.backoff_max.max(restart.backoff),
        max_restarts: restart.max_restarts,
        restart_window: restart.window.max(Duration::from_secs(1)),
    })
}

/// The app's name (letters, digits, `-`, `_`, `.`; unique) and its command's program.
fn identity<'a>(
    a: &'a RawApp,
    before: &[Arc<AppConfig>],
    fail: &Fail,
) -> Result<&'a str, ConfigError> {
    let name = a.name.get_ref().trim();
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
    {
        return Err(fail.at(
            Some(a.name.span()),
            format!("app name `{name}`: use letters, digits, `-`, `_` or `.`"),
        ));
    }
    if before.iter().any(|b| &*b.name == name) {
        return Err(fail.at(Some(a.name.span()), format!("duplicate app name `{name}`")));
    }
    if a.command.get_ref().is_empty() || a.command.get_ref()[0].is_empty() {
        return Err(fail.at(
            Some(a.command.span()),
            format!("app `{name}`: command must name a program"),
        ));
    }
    Ok(name)
}

/// `workers` and `port_base`: the app's ports (`port_base` .. `port_base + 2 × workers −
/// 1`) within 1..=65535, apart from every app before it and from the listen and admin
/// ports.
fn ports(
    a: &RawApp,
    name: &str,
    before: &[Arc<AppConfig>],
    server: &ServerConfig,
    fail: &Fail,
) -> Result<(usize, u16), ConfigError> {
    let workers = *a.workers.get_ref();
    if !(1..=1024).contains(&workers) {
        return Err(fail.at(
            Some(a.workers.span()),
            format!("app `{name}`: workers must be between 1 and 1024, not {workers}"),
        ));
    }
    let base = *a.port_base.get_ref();
    let last = base + 2 * workers - 1;
    let at_base = |reason: String| fail.at(Some(a.port_base.span()), reason);
    if base < 1 || last > 65535 {
        return Err(at_base(format!(
            "app `{name}`: ports {base}..={last} (port_base to port_base + 2 × workers − 1) must lie in 1..=65535"
        )));
    }
    for other in before {
        let (lo, hi) = port_range(other);
        if (base as u32) <= hi && (last as u32) >= lo {
            return Err(at_base(format!(
                "app `{name}`: ports {base}..={last} overlap app `{}`'s ports {lo}..={hi} (each app uses port_base .. port_base + 2 × workers − 1)",
                other.name
            )));
        }
    }
    for (what, addr) in [("listen", Some(server.listen)), ("admin", server.admin)] {
        if let Some(addr) = addr
            && (base..=last).contains(&(addr.port() as i64))
        {
            return Err(at_base(format!(
                "app `{name}`: ports {base}..={last} include the {what} port {}",
                addr.port()
            )));
        }
    }
    Ok((workers as usize, base as u16))
}

/// The first and last port an app's workers use.
pub(super) fn port_range(a: &AppConfig) -> (u32, u32) {
    let lo = u32::from(a.port_base);
    (lo, lo + 2 * a.workers as u32 - 1)
}

/// `port_env`, `index_env` and the keys of `env`: names a child process can be given;
/// the values of `env` and the arguments of `command`: strings it can be given.
fn env_names(spanned: &Spanned<RawApp>, name: &str, fail: &Fail) -> Result<(), ConfigError> {
    let a = spanned.get_ref();
    for (key, var) in [("port_env", &a.port_env), ("index_env", &a.index_env)] {
        if !env_name_ok(var.get_ref()) {
            return Err(fail.at(
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
        return Err(fail.at(
            Some(spanned.span()),
            format!("app `{name}`: env key `{bad}` is not an environment variable name"),
        ));
    }
    // A NUL ends a C string: the kernel would see a shorter value or argument than the
    // file says (and std refuses to spawn it, but only at start, per worker).
    if let Some((key, v)) = a.env.iter().find(|(_, v)| v.get_ref().contains('\0')) {
        return Err(fail.at(
            Some(v.span()),
            format!("app `{name}`: env `{key}` holds a NUL byte, which no environment can carry"),
        ));
    }
    if let Some(i) = a.command.get_ref().iter().position(|c| c.contains('\0')) {
        return Err(fail.at(
            Some(a.command.span()),
            format!(
                "app `{name}`: command argument {i} holds a NUL byte, which no argument can carry"
            ),
        ));
    }
    Ok(())
}

/// A name a child process can be given in its environment: not empty, no `=` or NUL, and
/// (so that shells and runtimes can read it) letters, digits and `_`, not starting with a
/// digit.
fn env_name_ok(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// `[app.health]`, checked.
struct Health {
    kind: HealthKind,
    interval: Duration,
    timeout: Duration,
    failures: u32,
    prestart: bool,
}

fn health(
    spanned: &Spanned<RawApp>,
    name: &str,
    preload: bool,
    fail: &Fail,
) -> Result<Health, ConfigError> {
    let a = spanned.get_ref();
    let span: Option<Range<usize>> = a.health.as_ref().map(|h| h.span()).or(Some(spanned.span()));
    let default_health = RawHealth::default();
    let h = a.health.as_ref().map_or(&default_health, |h| h.get_ref());
    // Never a default path: most apps have no health route, and a 404 is not a verdict
    // on the worker. With none written, the preload's heartbeat (Node) or the accept check.
    let kind = match &h.path {
        Some(p) if !p.starts_with('/') => {
            return Err(fail.at(
                span,
                format!("app `{name}`: health.path must start with `/`"),
            ));
        }
        Some(p) => HealthKind::Http(p.clone()),
        None if preload => HealthKind::Heartbeat,
        None => HealthKind::Accept,
    };
    let interval = fail.ms(&h.interval, &h.interval_ms, "health.interval", 500)?;
    let timeout = fail.ms(&h.timeout, &h.timeout_ms, "health.timeout", 500)?;
    if h.failures == 0 || interval.is_zero() || timeout.is_zero() {
        return Err(fail.at(
            span,
            format!("app `{name}`: health.failures, interval and timeout must be positive"),
        ));
    }
    Ok(Health {
        kind,
        interval,
        timeout,
        failures: h.failures,
        prestart: h.prestart,
    })
}

/// `[app.restart]`, checked.
struct Restart {
    window: Duration,
    backoff: Duration,
    backoff_max: Duration,
    max_restarts: u32,
}

fn restart(a: &RawApp, fail: &Fail) -> Result<Restart, ConfigError> {
    let default_restart = RawRestart {
        max_restarts: d_max_restarts(),
        ..RawRestart::default()
    };
    let r = a.restart.as_ref().map_or(&default_restart, |r| r.get_ref());
    let window = match (&r.window, &r.window_s) {
        (Some(_), Some(w)) => {
            return Err(fail.at(
                Some(w.span()),
                "restart: set either `window` or `window_s`, not both".into(),
            ));
        }
        (Some(w), None) => w.get_ref().0,
        (None, Some(w)) => Duration::from_secs(*w.get_ref()),
        (None, None) => Duration::from_secs(60),
    };
    Ok(Restart {
        window,
        backoff: fail.ms(&r.backoff, &r.backoff_ms, "restart.backoff", 100)?,
        backoff_max: fail.ms(
            &r.backoff_max,
            &r.backoff_max_ms,
            "restart.backoff_max",
            10_000,
        )?,
        max_restarts: r.max_restarts,
    })
}

/// `mode` and `listen`: a direct app has its own address (and none of the per-request
/// settings, which act where a request passes the balancer); a proxy app has none.
fn direct(
    spanned: &Spanned<RawApp>,
    name: &str,
    fail: &Fail,
) -> Result<Option<SocketAddr>, ConfigError> {
    let a = spanned.get_ref();
    let listen = match (a.mode, &a.listen) {
        (Mode::Direct, None) => {
            return Err(fail.at(
                Some(spanned.span()),
                format!(
                    "app `{name}`: mode = \"direct\" needs `listen` (the address serve binds and hands to the workers on fd 3)"
                ),
            ));
        }
        (Mode::Proxy, Some(l)) => {
            return Err(fail.at(
                Some(l.span()),
                format!(
                    "app `{name}`: `listen` is only for mode = \"direct\"; a proxy app is reached through [server] listen"
                ),
            ));
        }
        (Mode::Direct, Some(l)) => {
            Some(l.get_ref().trim().parse::<SocketAddr>().map_err(|_| {
                fail.at(
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
        // Each of these acts on single requests, which a direct app's workers take from
        // the kernel with no balancer in between.
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
        if let Some((key, span)) = per_request.into_iter().find_map(|(k, s)| s.map(|s| (k, s))) {
            return Err(fail.at(
                Some(span),
                format!(
                    "app `{name}`: {key} is a per-request setting, and a direct app's requests never pass through the balancer (use mode = \"proxy\")"
                ),
            ));
        }
    }
    Ok(listen)
}

/// `max_in_flight_per_worker` (0: none) and its queue: `max_queued` and `queue_timeout`.
fn queue(a: &RawApp, name: &str, fail: &Fail) -> Result<(usize, usize, Duration), ConfigError> {
    let max_in_flight_per_worker = match &a.max_in_flight_per_worker {
        Some(m) if !(1..=1_000_000).contains(m.get_ref()) => {
            return Err(fail.at(
                Some(m.span()),
                format!(
                    "app `{name}`: max_in_flight_per_worker must be 1 to 1000000 (leave it out for no limit), not {}",
                    m.get_ref()
                ),
            ));
        }
        Some(m) if a.sticky_worker.is_some() => {
            return Err(fail.at(
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
        if let Some((key, span)) = only_with.into_iter().find_map(|(k, s)| s.map(|s| (k, s))) {
            return Err(fail.at(
                Some(span),
                format!(
                    "app `{name}`: {key} is the queue of max_in_flight_per_worker, which is not set"
                ),
            ));
        }
    }
    let max_queued = match &a.max_queued {
        Some(m) if !(0..=1_000_000).contains(m.get_ref()) => {
            return Err(fail.at(
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
            return Err(fail.at(
                Some(t.span()),
                format!(
                    "app `{name}`: queue_timeout must be positive (max_queued = 0 refuses at once instead)"
                ),
            ));
        }
        Some(t) => t.get_ref().0,
        None => Duration::from_secs(5),
    };
    Ok((max_in_flight_per_worker, max_queued, queue_timeout))
}
