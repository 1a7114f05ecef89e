//! The TOML configuration: parsed with unknown keys denied into raw sections (`raw`),
//! then each section checked by its own function — `[server]` and its TLS tables
//! (`server`), `[[app]]` with `[app.health]` and `[app.restart]` (`app`), `[[route]]`
//! with its split and mirror (`route`) — before anything starts. Every error names the
//! file and, where the input has one, the line (`error`).

mod app;
mod error;
mod raw;
mod route;
mod server;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub(crate) use app::{AppConfig, HealthKind};
pub use error::ConfigError;
use error::Fail;
pub(crate) use raw::Balance;
use raw::RawConfig;
pub(crate) use route::{MirrorConfig, RouteConfig};
pub use server::ADMIN_TOKEN_ENV;
pub(crate) use server::ServerConfig;

// What the tests (`use super::*`) name besides the config's own types.
#[cfg(test)]
use scalpel_http::IpNet;
#[cfg(test)]
use std::time::Duration;

/// A checked configuration, ready to start.
#[derive(Debug, Clone)]
pub struct Config {
    pub(crate) path: PathBuf,
    pub(crate) server: ServerConfig,
    pub(crate) apps: Vec<Arc<AppConfig>>,
    pub(crate) routes: Vec<RouteConfig>,
}

impl Config {
    /// Reads and checks the file at `path`.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming the file, the line where possible, and the reason.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError::new(path, None, format!("cannot read: {e}")))?;
        Self::parse(&text, path)
    }

    /// Checks `text`, reporting errors against `path`; relative `cwd`s are resolved
    /// against `path`'s directory.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming the file, the line where possible, and the reason.
    pub fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        let fail = Fail { path, text };
        let raw: RawConfig = toml::from_str(text).map_err(|e| {
            let mut reason = e.message().trim().to_string();
            // toml says "duplicate key" without the key; its span points at it.
            if reason.starts_with("duplicate key")
                && let Some(key) = e.span().and_then(|s| text.get(s))
            {
                reason = format!("duplicate key `{}`", key.trim().trim_matches('"'));
            }
            fail.at(e.span(), reason)
        })?;
        let server = server::server(&raw.server, &fail, path)?;
        let base_dir = path.parent().unwrap_or(Path::new("."));
        let apps = app::apps(&raw.app, &server, &fail, base_dir)?;
        let routes = route::routes(&raw.route, &apps, &fail, base_dir)?;
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
        server_not_live(&self.server, &next.server)
            .or_else(|| self.apps_not_live(next))
            .or_else(|| self.ports_not_live(next))
            .or_else(|| self.mirrors_not_live(next))
    }

    /// An app of both whose mode or direct address changed.
    fn apps_not_live(&self, next: &Config) -> Option<String> {
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
        None
    }

    /// An app of `next` whose ports overlap another running app's.
    fn ports_not_live(&self, next: &Config) -> Option<String> {
        for app in &next.apps {
            let (lo, hi) = app::port_range(app);
            for old in self.apps.iter().filter(|o| o.name != app.name) {
                let (olo, ohi) = app::port_range(old);
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
        None
    }

    /// Mirrored routes that changed.
    fn mirrors_not_live(&self, next: &Config) -> Option<String> {
        let mirrors = |c: &Config| {
            c.routes
                .iter()
                .filter_map(|r| r.mirror.as_ref().map(|m| m.key.clone()))
                .collect::<Vec<_>>()
        };
        (mirrors(self) != mirrors(next)).then(|| {
            "mirrored routes changed: a mirror's comparisons, store and thread live as \
             long as serve; restart serve to change them (other route changes are live)"
                .into()
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
            let fail = |line: Option<usize>, reason: String| {
                ConfigError::new(&self.path, line, format!("app `{}`: {reason}", app.name))
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

    /// When serve runs as root: the files it trusts that another user could change — the
    /// config file, each app's program, and their directories — when group- or
    /// world-writable (a directory with the sticky bit, as `/tmp`, keeps others from
    /// replacing a file they do not own, so it counts only without it). Whoever can write
    /// them runs code as root at the next start or reload. One line each; none when serve
    /// is not root. `scalpel serve --check` and [`crate::Server::start`] print them.
    pub fn writable_by_others(&self) -> Vec<String> {
        if !rustix::process::geteuid().is_root() {
            return Vec::new();
        }
        self.writable_files()
    }

    /// [`Config::writable_by_others`] whoever runs it.
    pub(crate) fn writable_files(&self) -> Vec<String> {
        let mut files = vec![("config file", self.path.clone())];
        for app in &self.apps {
            let path = app.env.get("PATH").map(String::as_str);
            if let Some(p) = resolve_program(&app.command[0], app.cwd.as_deref(), path) {
                files.push(("program", p));
            }
        }
        let mut seen: Vec<PathBuf> = Vec::new();
        let mut found = Vec::new();
        for (what, file) in files {
            let dir = file.parent().filter(|d| !d.as_os_str().is_empty());
            let dir = dir.unwrap_or(Path::new(".")).to_path_buf();
            for (kind, p) in [(what, file), ("directory", dir)] {
                if seen.contains(&p) {
                    continue;
                }
                if let Some(who) = writable_by(&p) {
                    found.push(format!(
                        "running as root with the {kind} {} writable by {who}: whoever can \
                         write it runs code as root (chmod go-w it)",
                        p.display()
                    ));
                }
                seen.push(p);
            }
        }
        found
    }
}

impl Config {
    /// What may go wrong with this config on this machine though it is valid, one line
    /// each: an app whose worker ports (`port_base` … `port_base + 2 × workers − 1`) overlap
    /// the kernel's ephemeral range, where any outgoing connection — the balancer's own to
    /// its workers among them — can hold a port a replacement needs. `--check` prints them
    /// and every start logs them.
    pub fn warnings(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .apps
            .iter()
            .filter_map(|a| gunicorn_fd_bind(a))
            .collect();
        let Some((lo, hi)) = scalpel_procstat::ephemeral_port_range() else {
            return out;
        };
        out.extend(self.apps.iter().filter_map(|app| {
            let (first, last) = app::port_range(app);
            (first <= u32::from(hi) && last >= u32::from(lo)).then(|| {
                format!(
                    "app `{}`: worker ports {first}..={last} (port_base … port_base + 2 × \
                         workers − 1) overlap the kernel's ephemeral ports {lo}..={hi} \
                         (/proc/sys/net/ipv4/ip_local_port_range): an outgoing connection can \
                         hold a port a replacement needs (\"port … is already in use (held by \
                         a connection, not a listener)\"); choose port_base below {lo}",
                    app.name
                )
            })
        }));
        out
    }

    /// What each app's workers must do to become ready under this config, one line per
    /// app (`--check` prints them): listen on their port, or — direct mode — take
    /// connections from the socket on fd 3, which serve waits to see before a worker gets
    /// traffic.
    pub fn requirements(&self) -> Vec<String> {
        self.apps
            .iter()
            .map(|a| {
                let port = format!("${}", a.port_env);
                let must = match (a.mode, a.preload) {
                    (raw::Mode::Direct, true) => format!(
                        "listen on {port} (Node: the preload serves that server on the shared \
                         socket, fd 3)"
                    ),
                    (raw::Mode::Direct, false) => "accept on the shared socket, fd 3 \
                         (systemd socket activation: uvicorn --fd 3, gunicorn --bind fd://3, Go \
                         net.FileListener(os.NewFile(3, \"listen\")); Node: preload = true)"
                        .to_string(),
                    (raw::Mode::Proxy, _) => format!("listen on 127.0.0.1:{port}"),
                };
                let proof = match &a.health {
                    HealthKind::Http(path) => format!("GET {path} answers 2xx"),
                    HealthKind::Heartbeat => "the Node preload's heartbeat (a loop blocked past \
                         the health time-outs is replaced)"
                        .into(),
                    HealthKind::Accept => "a connection it accepts (no health route needed)".into(),
                };
                format!(
                    "app `{}` ({}, health: {}): each worker must {must}; ready when {proof}",
                    a.name,
                    a.mode.name(),
                    a.health.name()
                )
            })
            .collect()
    }
}

/// A direct app that runs gunicorn with `--bind fd://3`: gunicorn takes fd 3 by itself from
/// `LISTEN_FDS` (systemd socket activation, which serve sets), so the bind makes it open the
/// socket twice and exit with EBADF.
fn gunicorn_fd_bind(app: &AppConfig) -> Option<String> {
    let gunicorn = app.command.iter().any(|c| {
        Path::new(c)
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("gunicorn"))
    });
    let fd_bind = app.command.iter().any(|c| c.ends_with("fd://3"));
    (app.mode == raw::Mode::Direct && gunicorn && fd_bind).then(|| {
        format!(
            "app `{}`: gunicorn takes the shared socket on fd 3 by itself (LISTEN_FDS, systemd \
             socket activation); `--bind fd://3` makes it open fd 3 twice and exit with EBADF: \
             drop that bind",
            app.name
        )
    })
}

/// `[server]` settings that changed although they are read at start only.
fn server_not_live(a: &ServerConfig, b: &ServerConfig) -> Option<String> {
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
        admin_hosts,
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
    (!changed.is_empty()).then(|| {
        format!(
            "[server] {} changed: read at start only (listeners and their TLS files, the \
             admin token, data-plane threads and their worker pools, the drain time-out \
             each app's supervisor holds, the sampler, log and mirror buffers); restart \
             serve to change it. The request and connection limits and time-outs do \
             change live",
            changed.join(", ")
        )
    })
}

/// Who besides the owner may write `path` (`group`, `others`), if anyone; a directory
/// with the sticky bit counts only for itself being replaced, so not at all.
fn writable_by(path: &Path) -> Option<&'static str> {
    use std::os::unix::fs::PermissionsExt as _;
    let meta = std::fs::metadata(path).ok()?;
    let mode = meta.permissions().mode();
    if meta.is_dir() && mode & 0o1000 != 0 {
        return None;
    }
    match (mode & 0o020 != 0, mode & 0o002 != 0) {
        (_, true) => Some("everyone"),
        (true, false) => Some("its group"),
        _ => None,
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

#[cfg(test)]
mod tests;
