//! Wiring: listeners, the admin endpoints, reload, drain and the resource sampler.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use serde::Serialize;
use tokio::net::TcpListener;
use tokio::sync::{Notify, oneshot, watch};
use tokio_rustls::TlsAcceptor;

use crate::config::{Config, ConfigError};
use crate::live::Live;
use crate::metrics::{NotResent, PromText, RestartReason};
use crate::mirror::start_mirror_thread;
use crate::pool::WorkerState;
use crate::proxy::{Client, ProxyBody, Route, Shared, Table, json_error};
use crate::supervisor::{App, AppEnv, Hurry, LogSink, Slot, SlotCmd, WorkerLogs, start_app};
use crate::tls::{Endpoint, TlsFiles};
use crate::upstream::Upstreams;

/// What went wrong starting or running the server. The text of each names its cause
/// (so the causes are not repeated as `source`s: a chain printer would show them twice).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// The listen or admin address could not be bound.
    #[error("cannot listen on {addr}: {error}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        error: std::io::Error,
    },
    /// A program or working directory of the config is missing
    /// ([`Config::check_programs`]).
    #[error("{0}")]
    Config(ConfigError),
    /// A mirrored route's store could not be opened.
    #[error("mirror store: {0}")]
    MirrorStore(scalpel_shadow::ShadowError),
    /// A data-plane or mirror thread could not be started.
    #[error("cannot start the balancer's threads: {0}")]
    Threads(std::io::Error),
    /// A TLS certificate or key could not be used (`[server.tls]`, `[server.admin_tls]`).
    #[error("tls: {}", .0.join("; "))]
    Tls(Vec<String>),
    /// A reload did not replace every worker (the old ones of those keep serving).
    #[error("reload incomplete: {}", .0.join("; "))]
    Reload(Vec<String>),
    /// A reload was refused before anything changed: the new config asks for what
    /// cannot be done live, or an app it adds did not start. The running config stays.
    #[error("reload refused: {0}")]
    Refused(String),
}

/// What a live reload needs besides the shared state: the config in use (the next one is
/// diffed against it) and what new apps' slots are started with.
#[derive(Debug)]
pub(crate) struct Running {
    pub(crate) config: std::sync::Mutex<Config>,
    logs: LogSink,
    hurry: Arc<Hurry>,
}

/// Settings of a server that are not part of the config file.
#[derive(Debug, Clone, Default)]
pub struct ServeOptions {
    /// Where worker output goes.
    pub worker_logs: WorkerLogs,
}

/// `/status`: every app and its workers.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    /// The apps, in config order.
    pub apps: Vec<AppStatus>,
}

/// One app in [`Status`].
#[derive(Debug, Clone, Serialize)]
pub struct AppStatus {
    /// The app's name.
    pub name: String,
    /// Selection algorithm.
    pub balance: &'static str,
    /// What keeps a client on one worker (`sticky_worker`), if anything.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sticky_worker: Option<String>,
    /// Workers in rotation.
    pub ready: usize,
    /// `max_in_flight_per_worker`, when set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_in_flight_per_worker: Option<usize>,
    /// Requests waiting in the app's queue for a free worker slot (0 without a limit).
    pub queued: usize,
    /// One entry per worker slot.
    pub workers: Vec<WorkerStatus>,
}

/// One worker in [`Status`].
#[derive(Debug, Clone, Serialize)]
pub struct WorkerStatus {
    /// Index within the app (`WORKER_INDEX`).
    pub index: usize,
    /// Process id of its current process (absent before the first spawn).
    pub pid: Option<u32>,
    /// The port it listens on.
    pub port: Option<u16>,
    /// `starting`, `ready`, `draining`, `stopped` (restart pending) or `failed`
    /// (restart budget spent).
    pub state: &'static str,
    /// Seconds since its current process started.
    pub uptime_s: f64,
    /// Restarts of this slot so far.
    pub restarts: u64,
    /// Requests in flight on it.
    pub in_flight: usize,
    /// Why its process was last replaced without a failure (e.g. `max_memory_mb`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replaced_because: Option<String>,
}

/// `/mirror`: the comparison results of one mirrored route.
#[derive(Debug, Clone, Serialize)]
pub struct MirrorReport {
    /// The route's index in the config.
    pub route: usize,
    /// The route's prefix.
    pub prefix: String,
    /// The app that receives the copies.
    pub mirror: String,
    /// Counts, consistency and samples, as `scalpel shadow` reports them.
    pub summary: scalpel_shadow::Summary,
}

/// A running balancer with its supervised workers. The workers run until
/// [`Server::shutdown`]; if the tokio runtime ends first, its tasks drop their child
/// handles and the workers are killed (SIGKILL), never left behind by a test.
#[derive(Debug)]
pub struct Server {
    shared: Arc<Shared>,
    listen: SocketAddr,
    admin: Option<SocketAddr>,
    stop_accepting: watch::Sender<bool>,
    /// Tells the data-plane threads to end their runtimes (drained or given up on).
    stop_threads: watch::Sender<bool>,
    connections: Arc<ConnCount>,
    reload_lock: Arc<tokio::sync::Mutex<()>>,
    hurry: Arc<Hurry>,
}

/// Client connections open, across the data-plane threads.
#[derive(Debug, Default)]
pub(crate) struct ConnCount {
    active: AtomicUsize,
    idle: Notify,
}

struct ConnGuard(Arc<ConnCount>);

impl Drop for ConnGuard {
    fn drop(&mut self) {
        if self.0.active.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl Server {
    /// Binds the listen and admin addresses, then starts every app's workers. Requests
    /// that arrive before a worker of their app is ready wait for one (up to
    /// `wait_for_worker_ms`).
    ///
    /// # Errors
    ///
    /// [`ServeError::Bind`] when an address is taken; nothing is started then.
    pub async fn start(config: Config, options: ServeOptions) -> Result<Self, ServeError> {
        config.check_programs().map_err(ServeError::Config)?;
        let cfg = config.server.clone();
        let endpoint = |files: &Option<TlsFiles>, h2: bool| -> Result<_, ServeError> {
            files
                .clone()
                .map(|f| Endpoint::start(f, h2))
                .transpose()
                .map_err(ServeError::Tls)
        };
        // h2 first on the client listener: a client that speaks both gets multiplexing.
        // The admin address speaks HTTP/1.1 only.
        let (tls, admin_tls) = (endpoint(&cfg.tls, true)?, endpoint(&cfg.admin_tls, false)?);
        let bind = |addr: SocketAddr| async move {
            TcpListener::bind(addr)
                .await
                .map_err(|error| ServeError::Bind { addr, error })
        };
        let listener = bind(cfg.listen).await?;
        let admin_listener = match cfg.admin {
            Some(a) => Some(bind(a).await?),
            None => None,
        };
        let listen = listener.local_addr().map_err(|error| ServeError::Bind {
            addr: cfg.listen,
            error,
        })?;
        let admin = admin_listener.as_ref().and_then(|l| l.local_addr().ok());

        // A direct app's socket: bound here (a taken address fails the start, like the
        // balancer's), kept open for the app's lifetime, never accepted on by serve.
        let mut direct = Vec::new();
        for a in &config.apps {
            direct.push(match a.listen {
                Some(addr) => Some(Arc::new(
                    std::net::TcpListener::bind(addr)
                        .map_err(|error| ServeError::Bind { addr, error })?,
                )),
                None => None,
            });
        }
        warn_about_ephemeral_ports(&config);
        // Everything that can fail comes before any worker starts: the data-plane threads
        // (they wait for the shared state), the mirror thread and the mirror stores.
        let (stop_tx, stop_rx) = watch::channel(false);
        let (stop_threads, threads_rx) = watch::channel(false);
        let connections = Arc::new(ConnCount::default());
        let hand_over =
            start_data_plane(listener, cfg.threads, &stop_rx, &threads_rx, &connections)?;
        let routes = config
            .routes
            .iter()
            .cloned()
            .map(Route::new)
            .collect::<Result<Vec<_>, _>>()
            .map_err(ServeError::MirrorStore)?;
        let (mirror_queue, mirror_hand_over) = if routes.iter().any(|r| r.mirror.is_some()) {
            let (q, h) = start_mirror_thread(cfg.mirror_buffer_bytes, threads_rx.clone())
                .map_err(ServeError::Threads)?;
            (Some(q), Some(h))
        } else {
            (None, None)
        };
        let hurry = Arc::new(Hurry::default());
        let logs = match options.worker_logs {
            WorkerLogs::Inherit => {
                LogSink::stdio(cfg.log_buffer_bytes).map_err(ServeError::Threads)?
            }
            WorkerLogs::Discard => LogSink::Discard,
            WorkerLogs::Capture(b) => LogSink::Capture(b),
        };
        let apps = config
            .apps
            .iter()
            .zip(direct)
            .map(|(a, sock)| {
                Arc::new(start_app(
                    a.clone(),
                    AppEnv::new(
                        logs.clone(),
                        cfg.log_line_max_bytes,
                        cfg.drain_timeout,
                        hurry.clone(),
                        sock,
                    ),
                ))
            })
            .collect();
        let shared = Arc::new(Shared {
            table: ArcSwap::from_pointee(Table {
                generation: 0,
                apps,
                routes,
                server: Arc::new(cfg.clone()),
            }),
            cfg,
            mirror_queue,
            rejected: Default::default(),
            connections: connections.clone(),
            tls,
            admin_tls,
            running: Running {
                config: std::sync::Mutex::new(config),
                logs,
                hurry: hurry.clone(),
            },
        });
        for tx in hand_over {
            let _ = tx.send(shared.clone());
        }
        if let Some(tx) = mirror_hand_over {
            let _ = tx.send(shared.clone());
        }
        let reload_lock = Arc::new(tokio::sync::Mutex::new(()));
        let mut live_page = None;
        if let Some(l) = admin_listener {
            let live = Arc::new(Live::new(&shared));
            live_page = Some(live.clone());
            tokio::spawn(crate::live::run(
                shared.clone(),
                live.clone(),
                stop_rx.clone(),
            ));
            tokio::spawn(admin_loop(
                l,
                shared.clone(),
                live,
                reload_lock.clone(),
                stop_rx.clone(),
            ));
        }
        tokio::spawn(sample_resources(shared.clone(), live_page, stop_rx));
        Ok(Self {
            shared,
            listen,
            admin,
            stop_accepting: stop_tx,
            stop_threads,
            connections,
            reload_lock,
            hurry,
        })
    }

    /// The bound listen address.
    pub fn listen_addr(&self) -> SocketAddr {
        self.listen
    }

    /// The bound admin address, if any.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin
    }

    /// Waits until every worker of every app is in rotation, up to `timeout`; `true`
    /// when they are.
    pub async fn wait_ready(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self
                .shared
                .table
                .load()
                .apps
                .iter()
                .all(|a| a.pool.len() == a.cfg.workers)
            {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Every app and worker now.
    pub fn status(&self) -> Status {
        status(&self.shared)
    }

    /// Comparison results of every mirrored route.
    pub fn mirror_reports(&self) -> Vec<MirrorReport> {
        mirror_reports(&self.shared)
    }

    /// The metrics in Prometheus text format.
    pub fn metrics_text(&self) -> String {
        metrics_text(&self.shared)
    }

    /// Live reload (what SIGHUP and `POST /reload` do): reads the config file again and
    /// applies it by rolling replacement — each worker in turn is replaced by a new
    /// process under its app's new settings, which must be ready before the old one is
    /// taken out, drained and stopped; apps added start (and must become ready) first,
    /// apps removed drain last; routes and weights change in one swap. Unchanged, it is
    /// a rolling restart of every worker.
    ///
    /// # Errors
    ///
    /// Nothing changes on [`ServeError::Config`] (the file does not parse or check: its
    /// path and line) or [`ServeError::Refused`] (a change that cannot be made live, or an
    /// added app that did not start). [`ServeError::Reload`] lists the workers whose
    /// replacement failed (their old process keeps serving, under its old settings).
    pub async fn reload(&self) -> Result<(), ServeError> {
        reload(&self.shared, &self.reload_lock).await
    }

    /// Cuts a [`Server::shutdown`] short, or makes the next one short: no more waiting
    /// for requests in flight, and workers are killed (SIGKILL) instead of given their
    /// grace period. What a second SIGTERM or Ctrl-C does.
    pub fn hurry(&self) {
        self.hurry.now();
    }

    /// Reads the TLS certificate and key files again (what SIGHUP does, with a rolling
    /// reload): new handshakes get the new certificate, open connections keep theirs. On
    /// any problem the certificate in use stays and the problems are returned.
    ///
    /// # Errors
    ///
    /// [`ServeError::Tls`], one line per problem.
    pub fn reload_tls(&self) -> Result<(), ServeError> {
        let mut problems = Vec::new();
        for endpoint in [&self.shared.tls, &self.shared.admin_tls]
            .into_iter()
            .flatten()
        {
            if let Err(p) = endpoint.certs.reload() {
                problems.extend(p);
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ServeError::Tls(problems))
        }
    }

    /// Stops accepting connections, lets in-flight requests finish (up to
    /// `drain_timeout_ms`), then stops every worker (SIGTERM, SIGKILL after the grace
    /// period). [`Server::hurry`] cuts both waits short.
    pub async fn shutdown(&self) {
        let _ = self.stop_accepting.send(true);
        let deadline = tokio::time::Instant::now() + self.shared.cfg.drain_timeout;
        loop {
            let idle = self.connections.idle.notified();
            if self.connections.active.load(Ordering::Acquire) == 0 {
                break;
            }
            tokio::select! {
                r = tokio::time::timeout_at(deadline, idle) => if r.is_err() {
                    tracing::warn!(
                        connections = self.connections.active.load(Ordering::Acquire),
                        "drain time-out; stopping workers with requests in flight"
                    );
                    break;
                },
                () = self.hurry.wait() => {
                    tracing::warn!(
                        connections = self.connections.active.load(Ordering::Acquire),
                        "drain cut short; stopping workers now"
                    );
                    break;
                }
            }
        }
        // Not in the middle of a reload's swap of apps (bounded: a reload waits for new
        // workers); the lock is then held, so no reload starts after this point.
        let _no_more_reloads = tokio::select! {
            r = tokio::time::timeout(self.shared.cfg.drain_timeout, self.reload_lock.lock()) => r.ok(),
            () = self.hurry.wait() => None,
        };
        let table = self.shared.table.load_full();
        let mut waits = Vec::new();
        for app in &table.apps {
            for slot in &app.slots {
                let (tx, rx) = oneshot::channel();
                if slot.send(SlotCmd::Stop(tx)).await {
                    waits.push(rx);
                }
            }
        }
        // The data-plane runtimes end with their (drained or abandoned) connections.
        let _ = self.stop_threads.send(true);
        // Every comparison so far reaches the mirror stores before the process may exit.
        let recorders: Vec<_> = table
            .routes
            .iter()
            .filter_map(|r| r.mirror.as_ref().map(|m| m.recorder.clone()))
            .collect();
        if !recorders.is_empty() {
            let _ = tokio::task::spawn_blocking(move || {
                for r in recorders {
                    r.flush_and_sync();
                }
            })
            .await;
        }
        for w in waits {
            let _ = w.await;
        }
        tracing::info!("all workers stopped");
    }
}

/// A live reload: reads the config file again, checks it as `--check` does, refuses
/// what cannot change live, then applies it with no failed request — apps it adds start
/// and must all be ready before anything else changes; each kept app gets its new slots
/// first (they join as they become ready), loses the ones it no longer has (drained),
/// and has every other worker replaced one at a time under its new settings (new one
/// ready before the old one drains); then the new routes and weights take over in one
/// swap, and apps it removes drain and stop. Without config changes, this is the rolling
/// restart of every worker that picks up new code.
async fn reload(shared: &Shared, lock: &tokio::sync::Mutex<()>) -> Result<(), ServeError> {
    let _one_at_a_time = lock.lock().await;
    let running = &shared.running;
    let old = running
        .config
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let refuse = |e: ServeError| {
        tracing::error!(error = %e, "reload refused; the running config stays");
        Err(e)
    };
    let next = match Config::from_file(old.path()).and_then(|c| c.check_programs().map(|()| c)) {
        Ok(c) => c,
        Err(e) => return refuse(ServeError::Config(e)),
    };
    let tls = next.check_tls();
    if !tls.is_empty() {
        return refuse(ServeError::Refused(format!(
            "{}: {}",
            old.path().display(),
            tls.join("; ")
        )));
    }
    if let Some(why) = old.not_live(&next) {
        return refuse(ServeError::Refused(format!(
            "{}: {why}",
            old.path().display()
        )));
    }
    let table = shared.table.load_full();
    let find = |name: &str| table.apps.iter().find(|a| &*a.cfg.name == name).cloned();

    // 1. Apps the config adds: started, and all ready, before anything else changes.
    let mut added: Vec<Arc<App>> = Vec::new();
    for cfg in next.apps.iter().filter(|c| find(&c.name).is_none()) {
        let sock = match cfg.listen {
            Some(addr) => match std::net::TcpListener::bind(addr) {
                Ok(l) => Some(Arc::new(l)),
                Err(error) => {
                    stop_slots(added.iter().flat_map(|a| a.slots.iter())).await;
                    return refuse(ServeError::Refused(format!(
                        "app `{}`: cannot listen on {addr}: {error}",
                        cfg.name
                    )));
                }
            },
            None => None,
        };
        let env = AppEnv::new(
            running.logs.clone(),
            shared.cfg.log_line_max_bytes,
            shared.cfg.drain_timeout,
            running.hurry.clone(),
            sock,
        );
        added.push(Arc::new(start_app(cfg.clone(), env)));
    }
    for app in &added {
        if let Err(why) = wait_slots_ready(&app.slots, app.cfg.start_timeout).await {
            stop_slots(added.iter().flat_map(|a| a.slots.iter())).await;
            return refuse(ServeError::Refused(format!(
                "app `{}` did not become ready ({why}); nothing was changed",
                app.cfg.name
            )));
        }
    }

    // 2. Kept apps: resized, then rolled onto their new settings one worker at a time.
    let mut errors = Vec::new();
    let mut kept: Vec<Arc<App>> = Vec::new();
    for cfg in next.apps.iter() {
        let Some(before) = find(&cfg.name) else {
            continue;
        };
        let (app, extra) = before.resized(cfg.clone());
        // Fewer workers: the extra ones drain first, which frees their ports for the
        // new pairs of the others.
        stop_slots(extra.iter()).await;
        let fresh = &app.slots[before.slots.len().min(app.slots.len())..];
        if let Err(why) = wait_slots_ready(fresh, cfg.start_timeout).await {
            errors.push(format!("{}: new worker not ready: {why}", cfg.name));
        }
        for slot in &app.slots[..before.slots.len().min(app.slots.len())] {
            *slot.next_cfg.lock().unwrap_or_else(|e| e.into_inner()) = Some(cfg.clone());
            let (tx, rx) = oneshot::channel();
            if !slot.send(SlotCmd::Reload(tx)).await {
                errors.push(format!("{}#{}: supervisor gone", cfg.name, slot.index));
                continue;
            }
            match rx.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => errors.push(e),
                Err(_) => errors.push(format!("{}#{}: no answer", cfg.name, slot.index)),
            }
        }
        kept.push(Arc::new(app));
    }

    // 3. One swap: the new apps, routes and weights. A mirror is kept as it was (a
    // change to one is refused above), with its comparisons and store.
    let apps: Vec<Arc<App>> = next
        .apps
        .iter()
        .filter_map(|c| {
            kept.iter()
                .chain(&added)
                .find(|a| a.cfg.name == c.name)
                .cloned()
        })
        .collect();
    let mut routes = next
        .routes
        .iter()
        .cloned()
        .map(|r| {
            let mirror = r.mirror.as_ref().and_then(|m| {
                table
                    .routes
                    .iter()
                    .filter_map(|o| o.mirror.as_ref().zip(o.cfg.mirror.as_ref()))
                    .find(|(_, oc)| oc.key == m.key)
                    .map(|(om, _)| om.clone())
            });
            Route::with_mirror(r, mirror)
        })
        .collect::<Vec<_>>();
    // A route the reload keeps (same rule) keeps its counters, arm by arm (same app):
    // `/metrics` counters stay monotonic. Each old route is taken over once.
    let mut taken = vec![false; table.routes.len()];
    for route in &mut routes {
        let Some(oi) =
            (0..table.routes.len()).find(|&oi| !taken[oi] && table.routes[oi].same_rule(route))
        else {
            continue;
        };
        taken[oi] = true;
        route.carry_counters(
            |a| next.apps.get(a).map(|c| &*c.name),
            &table.routes[oi],
            |a| table.apps.get(a).map(|x| &*x.cfg.name),
        );
    }
    // An app's `balance` changes with the routes, in the same moment.
    for app in &kept {
        if find(&app.cfg.name).is_some_and(|old| old.cfg.balance != app.cfg.balance) {
            app.pool.set_balance(app.cfg.balance);
        }
        // So do its slot limit and queue (requests waiting now keep their place).
        app.pool
            .set_limit(app.cfg.max_in_flight_per_worker, app.cfg.max_queued);
    }
    shared.table.store(Arc::new(Table {
        generation: table.generation + 1,
        apps,
        routes,
        server: Arc::new(next.server.clone()),
    }));
    let summary = next
        .apps
        .iter()
        .map(|a| format!("{}×{}", a.name, a.workers))
        .collect::<Vec<_>>()
        .join(", ");
    *running.config.lock().unwrap_or_else(|e| e.into_inner()) = next;

    // 4. Apps the config no longer has: out of the routes now, drained and stopped.
    let removed: Vec<Arc<App>> = table
        .apps
        .iter()
        .filter(|a| {
            !shared
                .table
                .load()
                .apps
                .iter()
                .any(|n| n.cfg.name == a.cfg.name)
        })
        .cloned()
        .collect();
    stop_slots(removed.iter().flat_map(|a| a.slots.iter())).await;
    for app in &removed {
        tracing::info!(app = %app.cfg.name, "app removed by the reload: drained and stopped");
    }
    if errors.is_empty() {
        tracing::info!(apps = %summary, "reload complete");
        Ok(())
    } else {
        Err(ServeError::Reload(errors))
    }
}

/// Stops these slots (each drains its worker first), all at once; returns when they are.
async fn stop_slots(slots: impl Iterator<Item = &Arc<Slot>>) {
    let mut waits = Vec::new();
    for slot in slots {
        let (tx, rx) = oneshot::channel();
        if slot.send(SlotCmd::Stop(tx)).await {
            waits.push(rx);
        }
    }
    for w in waits {
        let _ = w.await;
    }
}

/// Waits until every one of `slots` has a ready worker, up to `start_timeout` and a
/// margin; the last start failure of one that does not, as the error.
async fn wait_slots_ready(slots: &[Arc<Slot>], start_timeout: Duration) -> Result<(), String> {
    let deadline = Instant::now() + start_timeout + Duration::from_secs(5);
    loop {
        let not_ready = slots.iter().find(|s| {
            s.current
                .load()
                .as_ref()
                .is_none_or(|b| b.state() != WorkerState::Ready)
        });
        let Some(slot) = not_ready else {
            return Ok(());
        };
        let failed = slot.failed.load(Ordering::Relaxed);
        if Instant::now() >= deadline || failed {
            let why = slot
                .last_error
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone()
                .unwrap_or_else(|| "not ready in time".into());
            return Err(format!("worker {}: {why}", slot.index));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Starts the data plane: `threads` OS threads, each with a current-thread runtime, an
/// accept loop on a clone of the listening socket and its own connections to the workers
/// (nginx's worker-process model, in threads). A client connection, the worker
/// connection its request borrows and every task they wake stay on one thread: no
/// work stealing, no cross-thread wake-up per request. Supervision, health checks and
/// the admin address run on the caller's runtime.
///
/// The threads start before the workers and wait for the shared state, sent through the
/// returned senders; dropped instead (the start failed later), they end.
fn start_data_plane(
    listener: TcpListener,
    threads: usize,
    stop: &watch::Receiver<bool>,
    end: &watch::Receiver<bool>,
    conns: &Arc<ConnCount>,
) -> Result<Vec<oneshot::Sender<Arc<Shared>>>, ServeError> {
    let std_listener = listener.into_std().map_err(ServeError::Threads)?;
    let mut hand_over = Vec::with_capacity(threads);
    for i in 0..threads {
        let listener = std_listener.try_clone().map_err(ServeError::Threads)?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(ServeError::Threads)?;
        let (tx, rx) = oneshot::channel::<Arc<Shared>>();
        hand_over.push(tx);
        let (stop, mut end, conns) = (stop.clone(), end.clone(), conns.clone());
        std::thread::Builder::new()
            .name(format!("serve-io-{i}"))
            .spawn(move || {
                runtime.block_on(async move {
                    let Ok(shared) = rx.await else { return };
                    let listener = match TcpListener::from_std(listener) {
                        Ok(l) => l,
                        Err(e) => {
                            tracing::error!(error = %e, "data-plane thread {i}: no listener");
                            return;
                        }
                    };
                    let up = Upstreams::new(
                        shared.cfg.connect_timeout,
                        shared.cfg.pool_idle_timeout,
                        shared.cfg.pool_max_idle_per_worker,
                    );
                    let sweeper = Arc::clone(&up);
                    tokio::spawn(async move {
                        let mut tick = tokio::time::interval(sweeper.prune_every());
                        loop {
                            tick.tick().await;
                            sweeper.prune();
                        }
                    });
                    accept_loop(listener, shared, stop, conns, up).await;
                    // Keep serving the open connections until the server is done with
                    // them (drained, or the drain timed out) or is gone.
                    let _ = end.wait_for(|e| *e).await;
                });
            })
            .map_err(ServeError::Threads)?;
    }
    Ok(hand_over)
}

/// Drives a client connection until it ends or the server stops accepting; then lets
/// the requests in flight finish and closes it.
macro_rules! serve_until_stopped {
    ($conn:expr, $stop:expr) => {{
        let mut conn = std::pin::pin!($conn);
        let stopping = tokio::select! {
            _ = conn.as_mut() => false,
            _ = $stop.wait_for(|s| *s) => true,
        };
        if stopping {
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        }
    }};
}

async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
    conns: Arc<ConnCount>,
    up: Arc<Upstreams>,
) {
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.timer(TokioTimer::new()).keep_alive(true);
    let mut h2 = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    h2.timer(TokioTimer::new());
    let tls = shared
        .tls
        .as_ref()
        .map(|t| TlsAcceptor::from(t.config.clone()));
    let lingering = Arc::new(AtomicUsize::new(0));
    loop {
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    // Out of file descriptors and the like: pause, do not spin.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stop.wait_for(|s| *s) => return,
        };
        // The limits of the config in force when the connection opens (a reload swaps
        // them; a connection keeps its own).
        let lim = shared.table.load().server.clone();
        if conns.active.load(Ordering::Acquire) >= lim.max_connections {
            shared
                .rejected
                .too_many_connections
                .fetch_add(1, Ordering::Relaxed);
            refuse(stream, &lingering);
            continue;
        }
        let _ = stream.set_nodelay(true);
        conns.active.fetch_add(1, Ordering::AcqRel);
        let guard = ConnGuard(conns.clone());
        let shared = shared.clone();
        let up = up.clone();
        let mut stop = stop.clone();
        let mut builder = builder.clone();
        builder
            .header_read_timeout(lim.header_read_timeout)
            .max_buf_size(lim.max_header_bytes)
            // The head limit is in bytes (`max_header_bytes`); the count of header lines is
            // only capped where no real head goes (a line takes 8 bytes or more in practice,
            // `a: b` and its CRLF 6), because hyper sizes its parse buffer by it.
            .max_headers(max_request_headers(lim.max_header_bytes));
        let mut h2 = h2.clone();
        h2.max_header_list_size(u32::try_from(lim.max_header_bytes).unwrap_or(u32::MAX));
        let tls = tls.clone();
        // Worked out once per connection: the address for X-Forwarded-For, and whether
        // this peer's own forwarding headers are believed.
        let client = Arc::new(Client {
            ip: peer.ip().to_canonical().to_string().into(),
            trusted: lim.trusted_proxies.iter().any(|n| n.contains(peer.ip())),
            https: tls.is_some(),
        });
        tokio::spawn(async move {
            let _guard = guard;
            let timed_out = Arc::new(ClientFlags::default());
            let svc = {
                let shared = shared.clone();
                service_fn(move |req: Request<Incoming>| {
                    let shared = shared.clone();
                    let up = up.clone();
                    let client = client.clone();
                    async move { Ok::<_, Infallible>(shared.handle(&up, &client, req).await) }
                })
            };
            if let Some(acceptor) = tls {
                // The handshake has the request head's time limit: a peer that never
                // finishes one does not hold a connection slot for long.
                let limit = lim.header_read_timeout;
                let handshake = tokio::select! {
                    r = tokio::time::timeout(limit, acceptor.accept(stream)) => r,
                    _ = stop.wait_for(|s| *s) => return,
                };
                let stream = match handshake {
                    Ok(Ok(s)) => s,
                    Ok(Err(e)) => {
                        tracing::debug!(error = %e, %peer, "TLS handshake failed");
                        return;
                    }
                    Err(_) => {
                        tracing::debug!(%peer, "TLS handshake timed out");
                        return;
                    }
                };
                if stream.get_ref().1.alpn_protocol() == Some(b"h2") {
                    let conn = h2.serve_connection(TokioIo::new(stream), svc);
                    serve_until_stopped!(conn, stop);
                } else {
                    let conn = builder
                        .serve_connection(TokioIo::new(stream), svc)
                        .with_upgrades();
                    serve_until_stopped!(conn, stop);
                }
                return;
            }
            let io = ClientIo {
                stream,
                mid_request: false,
                flags: timed_out.clone(),
            };
            // Boxed, so that it can be dropped (and its socket with it) before counting.
            let mut conn = Box::pin(
                builder
                    .serve_connection(TokioIo::new(io), svc)
                    .with_upgrades(),
            );
            let stopping = async move {
                let _ = stop.wait_for(|s| *s).await;
            };
            tokio::select! {
                r = conn.as_mut() => {
                    if let Err(e) = r
                        && e.is_timeout()
                    {
                        // The request head did not arrive in time: the connection's
                        // drop answers 408 when a request had begun.
                        timed_out.timed_out.store(true, Ordering::Relaxed);
                    }
                    drop(conn);
                    if timed_out.answered_408.load(Ordering::Relaxed) {
                        shared.rejected.header_timeout.fetch_add(1, Ordering::Relaxed);
                    }
                    return;
                }
                _ = stopping => {}
            }
            // Finish the request in flight, then close.
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        });
    }
}

/// hyper's cap on request header lines for a head limit of `bytes` (see accept_loop).
fn max_request_headers(bytes: usize) -> usize {
    (bytes / 8).clamp(100, 8192)
}

/// Written raw, before (or instead of) hyper: the toolkit's one error body
/// (`scalpel_http::error_body`; a test checks the two agree, length included).
const TOO_MANY_CONNECTIONS: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: 78\r\nconnection: close\r\nretry-after: 1\r\n\r\n{\"error\":\"too_many_connections\",\"detail\":\"too many client connections; retry\"}";
const HEAD_TIMEOUT: &[u8] = b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\ncontent-length: 71\r\nconnection: close\r\n\r\n{\"error\":\"client_timeout\",\"detail\":\"request head not received in time\"}";

/// Connections over `max_connections` get a 503 and are closed. The answer is written
/// without waiting (it fits any fresh socket buffer); the connection then lingers a
/// moment, reading what the client sent, so that closing it does not reset the answer
/// away — at most 64 at once, the rest are closed at once.
fn refuse(stream: tokio::net::TcpStream, lingering: &Arc<AtomicUsize>) {
    let _ = stream.try_write(TOO_MANY_CONNECTIONS);
    if lingering.fetch_add(1, Ordering::Relaxed) >= 64 {
        lingering.fetch_sub(1, Ordering::Relaxed);
        return;
    }
    let lingering = lingering.clone();
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let mut stream = stream;
        let _ = stream.shutdown().await;
        let mut sink = [0u8; 4096];
        let _ = tokio::time::timeout(Duration::from_secs(1), async {
            while let Ok(n) = stream.read(&mut sink).await {
                if n == 0 {
                    break;
                }
            }
        })
        .await;
        lingering.fetch_sub(1, Ordering::Relaxed);
    });
}

/// Set by the connection's task, read by [`ClientIo`]'s drop (and back).
#[derive(Debug, Default)]
struct ClientFlags {
    /// hyper gave up waiting for a request head.
    timed_out: AtomicBool,
    /// A 408 was written for it.
    answered_408: AtomicBool,
}

/// A client connection as hyper sees it: the socket, and whether a request has begun
/// since the last response — so that a connection closed for a slow request head gets
/// a 408 (hyper just closes it), while an idle keep-alive one closes quietly.
struct ClientIo {
    stream: tokio::net::TcpStream,
    mid_request: bool,
    flags: Arc<ClientFlags>,
}

impl Drop for ClientIo {
    fn drop(&mut self) {
        if self.mid_request && self.flags.timed_out.load(Ordering::Relaxed) {
            let _ = self.stream.try_write(HEAD_TIMEOUT);
            self.flags.answered_408.store(true, Ordering::Relaxed);
        }
    }
}

impl tokio::io::AsyncRead for ClientIo {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let me = self.get_mut();
        let before = buf.filled().len();
        let r = std::pin::Pin::new(&mut me.stream).poll_read(cx, buf);
        if buf.filled().len() > before {
            me.mid_request = true;
        }
        r
    }
}

impl tokio::io::AsyncWrite for ClientIo {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        data: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let me = self.get_mut();
        let r = std::pin::Pin::new(&mut me.stream).poll_write(cx, data);
        if matches!(r, std::task::Poll::Ready(Ok(n)) if n > 0) {
            me.mid_request = false;
        }
        r
    }

    fn poll_write_vectored(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let me = self.get_mut();
        let r = std::pin::Pin::new(&mut me.stream).poll_write_vectored(cx, bufs);
        if matches!(r, std::task::Poll::Ready(Ok(n)) if n > 0) {
            me.mid_request = false;
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

/// Admin connections open at once; more are closed at once.
const ADMIN_CONNECTIONS: usize = 64;

async fn admin_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    live: Arc<Live>,
    reload_lock: Arc<tokio::sync::Mutex<()>>,
    mut stop: watch::Receiver<bool>,
) {
    let admin_slots = Arc::new(tokio::sync::Semaphore::new(ADMIN_CONNECTIONS));
    let tls = shared
        .admin_tls
        .as_ref()
        .map(|t| TlsAcceptor::from(t.config.clone()));
    loop {
        let stream = tokio::select! {
            r = listener.accept() => match r {
                Ok((s, _)) => s,
                Err(_) => { tokio::time::sleep(Duration::from_millis(50)).await; continue; }
            },
            _ = stop.changed() => return,
        };
        // A bounded number of admin connections: slow or idle clients cannot take the
        // control plane's file descriptors (the head time-out frees them in 10 s).
        let Ok(permit) = admin_slots.clone().try_acquire_owned() else {
            continue;
        };
        let shared = shared.clone();
        let live = live.clone();
        let lock = reload_lock.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let svc = service_fn(move |req: Request<Incoming>| {
                let shared = shared.clone();
                let live = live.clone();
                let lock = lock.clone();
                async move { Ok::<_, Infallible>(admin(&shared, &live, &lock, req).await) }
            });
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(Duration::from_secs(10));
            match tls {
                None => {
                    let _ = builder.serve_connection(TokioIo::new(stream), svc).await;
                }
                Some(acceptor) => {
                    let handshake =
                        tokio::time::timeout(Duration::from_secs(10), acceptor.accept(stream));
                    if let Ok(Ok(stream)) = handshake.await {
                        let _ = builder.serve_connection(TokioIo::new(stream), svc).await;
                    }
                }
            }
        });
    }
}

fn json_response(status: StatusCode, value: &impl Serialize) -> Response<ProxyBody> {
    let body = serde_json::to_vec_pretty(value).unwrap_or_default();
    let mut res = Response::new(ProxyBody::Full(Some(Bytes::from(body))));
    *res.status_mut() = status;
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    res
}

fn token_ok(expected: &str, req: &Request<Incoming>) -> bool {
    // The scheme name is case-insensitive (RFC 9110 §11.1): `bearer` is `Bearer`.
    let got = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim())
        .unwrap_or_default()
        .as_bytes();
    // Compare without an early exit on the first differing byte.
    got.len() == expected.len()
        && got
            .iter()
            .zip(expected.as_bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

/// A reply of the live page as a response.
fn live_response(reply: scalpel_live::Reply) -> Response<ProxyBody> {
    let headers = reply.headers();
    let mut res = Response::new(ProxyBody::Full(Some(Bytes::from(reply.body.into_owned()))));
    *res.status_mut() = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::OK);
    for (name, value) in headers {
        res.headers_mut()
            .insert(name, header::HeaderValue::from_static(value));
    }
    res
}

async fn admin(
    shared: &Shared,
    live: &Live,
    lock: &tokio::sync::Mutex<()>,
    req: Request<Incoming>,
) -> Response<ProxyBody> {
    // The live page's own files hold no data: served without the token, which the page
    // then asks for and sends with its data requests and the reload.
    if let Some(reply) = live.page().asset(req.method().as_str(), req.uri().path()) {
        return live_response(reply);
    }
    if let Some(t) = &shared.cfg.admin_token
        && !token_ok(t, &req)
    {
        let mut res = json_error(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing or wrong bearer token",
        );
        res.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            header::HeaderValue::from_static("Bearer"),
        );
        return res;
    }
    // HEAD is GET without the body (hyper leaves the body out).
    let method = if req.method() == Method::HEAD {
        &Method::GET
    } else {
        req.method()
    };
    match (method, req.uri().path()) {
        (&Method::GET, "/metrics") => {
            let mut res = Response::new(ProxyBody::Full(Some(Bytes::from(metrics_text(shared)))));
            res.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("text/plain; version=0.0.4"),
            );
            res
        }
        (&Method::GET, "/status") => json_response(StatusCode::OK, &status(shared)),
        (&Method::GET, scalpel_live::SNAPSHOT_PATH) => {
            let snapshot = live.snapshot(shared, status(shared), mirror_reports(shared));
            live_response(live.page().snapshot(&snapshot))
        }
        (&Method::GET, "/mirror") => json_response(
            StatusCode::OK,
            &serde_json::json!({ "routes": mirror_reports(shared) }),
        ),
        (&Method::POST, "/reload") => match reload(shared, lock).await {
            Ok(()) => json_response(StatusCode::OK, &serde_json::json!({ "reloaded": true })),
            // The error body's grammar, with what each worker slot said beside it.
            Err(ServeError::Reload(errors)) => json_response(
                StatusCode::INTERNAL_SERVER_ERROR,
                &serde_json::json!({
                    "error": "reload_failed",
                    "detail": format!("{} worker(s) did not come up; the old ones keep serving", errors.len()),
                    "reloaded": false,
                    "errors": errors,
                }),
            ),
            // The running config stays in these: the new one did not parse or check
            // (422, with its file and line), or asks for what cannot change live (409).
            Err(ServeError::Config(e)) => json_response(
                StatusCode::UNPROCESSABLE_ENTITY,
                &serde_json::json!({
                    "error": "config_invalid",
                    "detail": format!("reload refused: {e}"),
                    "reloaded": false,
                    "file": e.path(),
                    "line": e.line(),
                }),
            ),
            Err(e @ ServeError::Refused(_)) => json_response(
                StatusCode::CONFLICT,
                &serde_json::json!({
                    "error": "reload_refused",
                    "detail": e.to_string(),
                    "reloaded": false,
                }),
            ),
            Err(e) => json_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "reload_failed",
                &e.to_string(),
            ),
        },
        (_, "/metrics" | "/status" | "/reload" | "/mirror" | scalpel_live::SNAPSHOT_PATH) => {
            json_error(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "method not allowed",
            )
        }
        (_, path) => json_error(
            StatusCode::NOT_FOUND,
            "not_found",
            &format!(
                "no admin endpoint {path} (try / for the live page, /status, /metrics, /mirror, POST /reload)"
            ),
        ),
    }
}

fn mirror_reports(shared: &Shared) -> Vec<MirrorReport> {
    let table = shared.table.load();
    table
        .routes
        .iter()
        .enumerate()
        .filter_map(|(i, r)| {
            r.mirror.as_ref().map(|m| MirrorReport {
                route: i,
                prefix: r.cfg.prefix.clone(),
                mirror: m.app.to_string(),
                summary: m.recorder.summary(),
            })
        })
        .collect()
}

fn status(shared: &Shared) -> Status {
    let table = shared.table.load();
    let apps = table
        .apps
        .iter()
        .map(|app| AppStatus {
            name: app.cfg.name.to_string(),
            balance: app.cfg.balance.name(),
            sticky_worker: app.cfg.sticky_worker.as_ref().map(|k| k.to_string()),
            ready: app.pool.len(),
            max_in_flight_per_worker: Some(app.cfg.max_in_flight_per_worker).filter(|&n| n > 0),
            queued: app.pool.queued(),
            workers: app
                .slots
                .iter()
                .map(|slot| {
                    let b = slot.current.load_full();
                    let failed = slot.failed.load(Ordering::Relaxed);
                    WorkerStatus {
                        replaced_because: slot
                            .last_replaced
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .clone(),
                        index: slot.index,
                        pid: b.as_ref().map(|b| b.pid()),
                        port: b.as_ref().map(|b| b.addr().port()),
                        state: if failed {
                            "failed"
                        } else {
                            b.as_ref().map_or("starting", |b| b.state().name())
                        },
                        uptime_s: b.as_ref().map_or(0.0, |b| {
                            if b.state() == WorkerState::Stopped {
                                0.0
                            } else {
                                (b.uptime_s() * 10.0).round() / 10.0
                            }
                        }),
                        restarts: slot.restarts.load(Ordering::Relaxed),
                        in_flight: b.as_ref().map_or(0, |b| b.in_flight()),
                    }
                })
                .collect(),
        })
        .collect();
    Status { apps }
}

fn metrics_text(shared: &Shared) -> String {
    let table = shared.table.load_full();
    let mut p = PromText::default();
    let load = |f: &std::sync::atomic::AtomicU64| f.load(Ordering::Relaxed) as f64;
    type Counter = fn(&crate::metrics::AppMetrics) -> &std::sync::atomic::AtomicU64;
    let counters: [(&str, &str, Counter); 8] = [
        (
            "scalpel_serve_requests_total",
            "Requests routed to the app (an A/B arm).",
            |m| &m.requests,
        ),
        (
            "scalpel_serve_errors_total",
            "Requests of the app answered 5xx (by a worker, or 502/503/504 by the balancer).",
            |m| &m.errors,
        ),
        (
            "scalpel_serve_retries_total",
            "Requests resent to another worker after the first one failed before answering.",
            |m| &m.retries,
        ),
        (
            "scalpel_serve_no_worker_total",
            "Requests answered 503 because no worker of the app became ready in time.",
            |m| &m.no_worker,
        ),
        (
            "scalpel_serve_reloads_total",
            "Workers replaced by a rolling reload.",
            |m| &m.reloads,
        ),
        (
            "scalpel_serve_memory_replacements_total",
            "Workers replaced (successor first, then drained) for passing max_memory_mb.",
            |m| &m.memory_replacements,
        ),
        (
            "scalpel_serve_mirrored_total",
            "Requests copied to the app as a mirror.",
            |m| &m.mirrored,
        ),
        (
            "scalpel_serve_upgrades_total",
            "Requests the app answered by switching protocols (WebSocket handshakes).",
            |m| &m.upgrades,
        ),
    ];
    for (name, help, get) in counters {
        p.family(name, "counter", help);
        for app in &table.apps {
            p.sample(name, &[("app", &app.cfg.name)], load(get(&app.metrics)));
        }
    }
    p.family(
        "scalpel_serve_queued",
        "gauge",
        "Requests waiting in the app's queue for a free worker slot (max_in_flight_per_worker).",
    );
    for app in &table.apps {
        p.sample(
            "scalpel_serve_queued",
            &[("app", &app.cfg.name)],
            app.pool.queued() as f64,
        );
    }
    p.family(
        "scalpel_serve_queue_rejected_total",
        "counter",
        "Requests answered 503 by the app's queue: queue_full (max_queued waiting already) or \
         queue_timeout (no free worker slot within queue_timeout).",
    );
    for app in &table.apps {
        for (reason, n) in [
            ("queue_full", &app.metrics.queue_full),
            ("queue_timeout", &app.metrics.queue_timeout),
        ] {
            p.sample(
                "scalpel_serve_queue_rejected_total",
                &[("app", &app.cfg.name), ("reason", reason)],
                load(n),
            );
        }
    }
    p.family(
        "scalpel_serve_tunnels_open",
        "gauge",
        "Switched connections (WebSockets) between clients and the app's workers still open.",
    );
    for app in &table.apps {
        p.sample(
            "scalpel_serve_tunnels_open",
            &[("app", &app.cfg.name)],
            load(&app.metrics.tunnels_open),
        );
    }
    p.family(
        "scalpel_serve_restarts_total",
        "counter",
        "Worker restarts by reason (exited, unhealthy, start_failed).",
    );
    for app in &table.apps {
        for (i, r) in RestartReason::ALL.iter().enumerate() {
            p.sample(
                "scalpel_serve_restarts_total",
                &[("app", &app.cfg.name), ("reason", r.name())],
                load(&app.metrics.restarts[i]),
            );
        }
    }
    p.family(
        "scalpel_serve_not_resent_total",
        "counter",
        "Requests answered 502/504 instead of resent, because their worker had taken them \
         (worker_stalled, worker_exited, partial_answer): a request that stops or kills a \
         worker must not reach another one.",
    );
    for app in &table.apps {
        for (i, r) in NotResent::ALL.iter().enumerate() {
            p.sample(
                "scalpel_serve_not_resent_total",
                &[("app", &app.cfg.name), ("reason", r.name())],
                load(&app.metrics.not_resent[i]),
            );
        }
    }
    p.family(
        "scalpel_serve_direct_connections_at_replacement_total",
        "counter",
        "Connections a stuck direct-mode worker had accepted when it was replaced: rescued \
         (it had read none of it; served on by another worker), half_read (it had read its \
         request, or part of it: answered 504, not resent), read_after_answer (it had \
         answered on it, then read a next request: answered 504, not resent), in_use (it \
         had answered on it: closed with it), over_limit, not_taken (the kernel refused \
         pidfd_getfd, or its threads did not stop: closed with it).",
    );
    for app in &table.apps {
        for (i, r) in crate::metrics::AtReplacement::ALL.iter().enumerate() {
            p.sample(
                "scalpel_serve_direct_connections_at_replacement_total",
                &[("app", &app.cfg.name), ("outcome", r.name())],
                load(&app.metrics.rescued[i]),
            );
        }
    }
    p.family(
        "scalpel_serve_direct_rescued_open",
        "gauge",
        "Rescued connections of a replaced direct-mode worker still open (served by serve).",
    );
    for app in &table.apps {
        p.sample(
            "scalpel_serve_direct_rescued_open",
            &[("app", &app.cfg.name)],
            load(&app.metrics.rescued_open),
        );
    }
    p.family(
        "scalpel_serve_worker_log_lines_dropped_total",
        "counter",
        "Worker output lines dropped because scalpel's stdout/stderr was not read fast enough.",
    );
    for app in &table.apps {
        p.sample(
            "scalpel_serve_worker_log_lines_dropped_total",
            &[("app", &app.cfg.name)],
            load(&app.metrics.log_lines_dropped),
        );
    }
    p.family(
        "scalpel_serve_worker_log_lines_cut_total",
        "counter",
        "Worker output lines cut at log_line_max_bytes.",
    );
    for app in &table.apps {
        p.sample(
            "scalpel_serve_worker_log_lines_cut_total",
            &[("app", &app.cfg.name)],
            load(&app.metrics.log_lines_cut),
        );
    }
    p.family(
        "scalpel_serve_latency_seconds",
        "summary",
        "Time from receiving a request to the end of the response body, per app.",
    );
    for app in &table.apps {
        let (count, sum, qs) = app.metrics.latency_summary();
        for (q, v) in qs {
            let q = q.to_string();
            p.sample(
                "scalpel_serve_latency_seconds",
                &[("app", &app.cfg.name), ("quantile", &q)],
                v,
            );
        }
        p.sample(
            "scalpel_serve_latency_seconds_sum",
            &[("app", &app.cfg.name)],
            sum,
        );
        p.sample(
            "scalpel_serve_latency_seconds_count",
            &[("app", &app.cfg.name)],
            count as f64,
        );
    }
    p.family(
        "scalpel_serve_cpu_percent",
        "gauge",
        "CPU of the app's workers (process trees) over the last sample interval; 100 = one core.",
    );
    for app in &table.apps {
        p.sample(
            "scalpel_serve_cpu_percent",
            &[("app", &app.cfg.name)],
            app.metrics.cpu_percent(),
        );
    }
    p.family(
        "scalpel_serve_memory_rss_bytes",
        "gauge",
        "Summed RSS of the app's worker trees.",
    );
    for app in &table.apps {
        p.sample(
            "scalpel_serve_memory_rss_bytes",
            &[("app", &app.cfg.name)],
            app.metrics.rss_bytes() as f64,
        );
    }
    p.family(
        "scalpel_serve_memory_pss_bytes",
        "gauge",
        "Summed PSS of the app's worker trees (absent when unreadable).",
    );
    for app in &table.apps {
        if let Some(pss) = app.metrics.pss_bytes() {
            p.sample(
                "scalpel_serve_memory_pss_bytes",
                &[("app", &app.cfg.name)],
                pss as f64,
            );
        }
    }
    p.family(
        "scalpel_serve_workers_ready",
        "gauge",
        "Workers of the app in rotation.",
    );
    for app in &table.apps {
        p.sample(
            "scalpel_serve_workers_ready",
            &[("app", &app.cfg.name)],
            app.pool.len() as f64,
        );
    }
    p.family(
        "scalpel_serve_worker_in_flight",
        "gauge",
        "Requests in flight per worker.",
    );
    for app in &table.apps {
        for slot in &app.slots {
            if let Some(b) = slot.current.load_full() {
                let w = slot.index.to_string();
                p.sample(
                    "scalpel_serve_worker_in_flight",
                    &[("app", &app.cfg.name), ("worker", &w)],
                    b.in_flight() as f64,
                );
            }
        }
    }
    p.family(
        "scalpel_serve_route_requests_total",
        "counter",
        "Requests per route and arm (the A/B split as it happened).",
    );
    for (ri, route) in table.routes.iter().enumerate() {
        let r = ri.to_string();
        for (ai, &(app, _)) in route.cfg.arms.iter().enumerate() {
            p.sample(
                "scalpel_serve_route_requests_total",
                &[
                    ("route", &r),
                    ("prefix", &route.cfg.prefix),
                    ("app", &table.apps[app].cfg.name),
                ],
                load(&route.arm_requests[ai]),
            );
        }
    }
    let reports = mirror_reports(shared);
    type Field = fn(&scalpel_shadow::Summary) -> f64;
    let mirror_families: [(&str, &str, &str, Field); 5] = [
        (
            "scalpel_serve_mirror_compared_total",
            "counter",
            "Served responses compared with the mirror app's.",
            |s| s.compared as f64,
        ),
        (
            "scalpel_serve_mirror_mismatched_total",
            "counter",
            "Compared pairs with at least one real difference.",
            |s| s.mismatched as f64,
        ),
        (
            "scalpel_serve_mirror_skipped_total",
            "counter",
            "Sampled requests not compared (mirror busy, body too large, client gone).",
            |s| s.skipped as f64,
        ),
        (
            "scalpel_serve_mirror_errors_total",
            "counter",
            "Copies the mirror app failed (time-out, connection).",
            |s| s.errors as f64,
        ),
        (
            "scalpel_serve_mirror_consistency_percent",
            "gauge",
            "matched / compared × 100.",
            |s| s.consistency_percent,
        ),
    ];
    for (name, kind, help, get) in mirror_families {
        p.family(name, kind, help);
        for r in &reports {
            let route = r.route.to_string();
            p.sample(
                name,
                &[("route", &route), ("mirror", &r.mirror)],
                get(&r.summary),
            );
        }
    }
    p.family(
        "scalpel_serve_client_connections",
        "gauge",
        "Client connections open (max_connections caps it).",
    );
    p.sample(
        "scalpel_serve_client_connections",
        &[],
        shared.connections.active.load(Ordering::Relaxed) as f64,
    );
    p.family(
        "scalpel_serve_rejected_total",
        "counter",
        "Requests and connections refused before reaching an app, by reason.",
    );
    let r = &shared.rejected;
    for (reason, n) in [
        ("no_route", &r.no_route),
        ("body_too_large", &r.too_large),
        ("body_timeout", &r.body_timeout),
        ("header_timeout", &r.header_timeout),
        ("too_many_connections", &r.too_many_connections),
    ] {
        p.sample(
            "scalpel_serve_rejected_total",
            &[("reason", reason)],
            load(n),
        );
    }
    p.family(
        "scalpel_serve_mirror_not_mirrored_total",
        "counter",
        "Requests of a mirrored route not copied because of their method (only GET, HEAD \
         and OPTIONS are, unless the route sets mirror_unsafe).",
    );
    for (i, route) in table.routes.iter().enumerate() {
        if let Some(m) = &route.mirror {
            let ri = i.to_string();
            p.sample(
                "scalpel_serve_mirror_not_mirrored_total",
                &[("route", &ri), ("mirror", &m.app), ("reason", "method")],
                load(&m.skipped_method),
            );
        }
    }
    p.finish()
}

/// A worker's PSS (a walk of its page tables, under its memory lock, that stalls the
/// worker's own page faults meanwhile) is read at every sample until one is taken while the
/// worker is ready (a reading from its start-up — a shell before its `exec`, a runtime
/// still loading, slow on a busy machine — is far below what it will hold), then every this
/// many samples; CPU and RSS (two small files per process) every sample. An app with
/// `max_memory_mb` has its PSS read every sample: its limit is checked on it.
const PSS_EVERY: u64 = 10;
/// The workers' process trees are found (a pass over all of `/proc`, a file read per
/// process of the machine) when a worker is new and then every this many samples; the
/// processes known are read in between. Measured under direct mode at 10,000 req/s: the
/// passes were most of serve's own CPU (docs/serve.md, "Direct mode").
const DISCOVER_EVERY: u64 = 10;

/// Samples every worker's process tree with scalpel-procstat: each app's CPU% between two
/// readings of the same set of workers (a changed set starts a new baseline), RSS and PSS;
/// the per-worker readings go to the live page (which reads nothing itself) and to the
/// `max_memory_mb` check. A child a worker starts is counted from the next discovery (its
/// CPU so far lands then); one it reaps counts in the worker's own times.
async fn sample_resources(
    shared: Arc<Shared>,
    live: Option<Arc<Live>>,
    mut stop: watch::Receiver<bool>,
) {
    let mut last: Vec<Option<(Vec<u32>, scalpel_procstat::TreeReading)>> = Vec::new();
    let mut generation = None;
    // The latest PSS read of each worker (`None`: unreadable), and whether it was read
    // while the worker was ready (else it is read again at the next sample).
    let mut pss_of: HashMap<u32, (Option<u64>, bool)> = HashMap::new();
    // Each worker's process tree, as last discovered (the worker first).
    let mut trees: HashMap<u32, Vec<u32>> = HashMap::new();
    let mut tick = tokio::time::interval(shared.cfg.sample_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for n in 0u64.. {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        let table = shared.table.load_full();
        if generation != Some(table.generation) {
            // A live reload changed the apps: new baselines.
            generation = Some(table.generation);
            last = vec![None; table.apps.len()];
        }
        // Mirror counters to their stores (queued for the store's own thread; never blocks).
        for route in &table.routes {
            if let Some(m) = &route.mirror {
                m.recorder.flush();
            }
        }
        let apps: Vec<Vec<u32>> = table
            .apps
            .iter()
            .map(|app| {
                let mut pids: Vec<u32> = app
                    .slots
                    .iter()
                    .filter_map(|s| s.current.load_full())
                    .filter(|b| b.state() != WorkerState::Stopped && b.pid() > 0)
                    .map(|b| b.pid())
                    .collect();
                pids.sort_unstable();
                pids.dedup();
                pids
            })
            .collect();
        let ready: std::collections::HashSet<u32> = table
            .apps
            .iter()
            .flat_map(|app| app.slots.iter())
            .filter_map(|s| s.current.load_full())
            .filter(|b| b.state() == WorkerState::Ready)
            .map(|b| b.pid())
            .collect();
        let roots: Vec<(u32, bool)> = table
            .apps
            .iter()
            .zip(&apps)
            .flat_map(|(app, pids)| {
                let every = app.cfg.max_memory_bytes.is_some() || n.is_multiple_of(PSS_EVERY);
                pids.iter()
                    .map(|&pid| {
                        let settled = pss_of.get(&pid).is_some_and(|&(_, ready)| ready);
                        (pid, every || !settled)
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        let discover = n.is_multiple_of(DISCOVER_EVERY)
            || roots.iter().any(|(pid, _)| !trees.contains_key(pid));
        let r2 = roots.clone();
        let known = std::mem::take(&mut trees);
        let Ok((known, readings)) = tokio::task::spawn_blocking(move || {
            let known: HashMap<u32, Vec<u32>> = if discover {
                let pids: Vec<u32> = r2.iter().map(|r| r.0).collect();
                pids.iter()
                    .copied()
                    .zip(scalpel_procstat::trees_of(&pids))
                    .collect()
            } else {
                known
            };
            let readings: Vec<Option<scalpel_procstat::TreeReading>> = r2
                .iter()
                .map(|&(pid, pss)| {
                    known
                        .get(&pid)
                        .and_then(|tree| scalpel_procstat::read_pids(tree, pss))
                })
                .collect();
            (known, readings)
        })
        .await
        else {
            continue;
        };
        trees = known;
        trees.retain(|_, tree| !tree.is_empty());
        let mut now: HashMap<u32, scalpel_procstat::TreeReading> = HashMap::new();
        for (&(pid, read_pss), reading) in roots.iter().zip(readings) {
            let Some(mut reading) = reading else {
                continue;
            };
            if read_pss {
                pss_of.insert(pid, (reading.pss_bytes, ready.contains(&pid)));
            }
            reading.pss_bytes = pss_of.get(&pid).and_then(|&(pss, _)| pss);
            now.insert(pid, reading);
        }
        pss_of.retain(|pid, _| now.contains_key(pid));
        for (i, (app, pids)) in table.apps.iter().zip(apps).enumerate() {
            let mut sum = scalpel_procstat::TreeReading {
                at: Instant::now(),
                cpu_ticks: 0,
                rss_bytes: 0,
                pss_bytes: Some(0),
                processes: 0,
            };
            for r in pids.iter().filter_map(|p| now.get(p)) {
                sum.at = r.at;
                sum.cpu_ticks += r.cpu_ticks;
                sum.rss_bytes += r.rss_bytes;
                sum.processes += r.processes;
                sum.pss_bytes = sum.pss_bytes.zip(r.pss_bytes).map(|(a, b)| a + b);
            }
            if sum.processes == 0 {
                sum.pss_bytes = None;
            }
            let cpu = match &last[i] {
                Some((prev_pids, prev)) if *prev_pids == pids => {
                    scalpel_procstat::cpu_percent(prev, &sum)
                }
                _ => app.metrics.cpu_percent(),
            };
            app.metrics.set_resources(cpu, sum.rss_bytes, sum.pss_bytes);
            last[i] = Some((pids, sum));
            if let Some(limit) = app.cfg.max_memory_bytes {
                check_memory(app, limit, &now);
            }
        }
        if let Some(live) = &live {
            live.set_workers(now.into_iter().collect());
        }
    }
}

/// Replaces each ready worker of `app` whose process tree's PSS (in `readings`, by pid)
/// passes `limit`: the successor starts and joins before the old one drains (a rolling
/// reload of that slot), so no request is lost, unlike a kill-first restart.
fn check_memory(
    app: &Arc<App>,
    limit: u64,
    readings: &HashMap<u32, scalpel_procstat::TreeReading>,
) {
    for slot in &app.slots {
        let Some(b) = slot.current.load_full() else {
            continue;
        };
        if b.state() != WorkerState::Ready
            || b.pid() == 0
            || slot.memory_replacing.load(Ordering::Relaxed)
        {
            continue;
        }
        let pid = b.pid();
        let Some(pss) = readings.get(&pid).and_then(|r| r.pss_bytes) else {
            continue;
        };
        if pss <= limit {
            continue;
        }
        slot.memory_replacing.store(true, Ordering::Relaxed);
        let why = format!(
            "max_memory_mb: PSS {} MiB over {} MiB",
            pss / (1024 * 1024),
            limit / (1024 * 1024)
        );
        tracing::warn!(app = %app.cfg.name, worker = slot.index, pid, pss_bytes = pss,
            limit_bytes = limit, "worker over max_memory_mb; its successor starts, then it drains");
        app.metrics
            .memory_replacements
            .fetch_add(1, Ordering::Relaxed);
        let slot = slot.clone();
        tokio::spawn(async move {
            let (tx, rx) = tokio::sync::oneshot::channel();
            if slot.send(SlotCmd::Reload(tx)).await {
                let _ = rx.await;
            }
            *slot.last_replaced.lock().unwrap_or_else(|e| e.into_inner()) = Some(why);
            slot.memory_replacing.store(false, Ordering::Relaxed);
        });
    }
}

/// Worker ports inside the kernel's ephemeral range can be taken by any outgoing
/// connection (the balancer's own included) between a probe and a replacement's bind.
fn warn_about_ephemeral_ports(config: &Config) {
    let Ok(text) = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range") else {
        return;
    };
    let mut it = text
        .split_whitespace()
        .filter_map(|v| v.parse::<u32>().ok());
    let (Some(lo), Some(hi)) = (it.next(), it.next()) else {
        return;
    };
    for app in &config.apps {
        let first = u32::from(app.port_base);
        let last = first + 2 * app.workers as u32 - 1;
        if first <= hi && last >= lo {
            tracing::warn!(
                app = %app.name,
                ports = %format!("{first}-{last}"),
                ephemeral = %format!("{lo}-{hi}"),
                "worker ports overlap the kernel's ephemeral range: an outgoing connection \
                 can hold a port a replacement needs; choose port_base below {lo}"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The answers written raw, past hyper, are the toolkit's one error body, framed by
    /// their own exact length (a stale `content-length` after an edit of the text would
    /// cut the body or hang the client).
    #[test]
    fn raw_error_answers_carry_the_one_error_body() {
        for (raw, status, kind) in [
            (TOO_MANY_CONNECTIONS, 503, "too_many_connections"),
            (HEAD_TIMEOUT, 408, "client_timeout"),
        ] {
            let mut slots = [httparse::EMPTY_HEADER; 8];
            let mut res = httparse::Response::new(&mut slots);
            let httparse::Status::Complete(n) = res.parse(raw).unwrap() else {
                panic!("incomplete head");
            };
            assert_eq!(res.code, Some(status));
            let length: usize = res
                .headers
                .iter()
                .find(|h| h.name == "content-length")
                .map(|h| std::str::from_utf8(h.value).unwrap().parse().unwrap())
                .unwrap();
            let body = &raw[n..];
            assert_eq!(length, body.len(), "content-length of the {status}");
            let v: serde_json::Value = serde_json::from_slice(body).unwrap();
            let detail = v["detail"].as_str().unwrap();
            assert_eq!(body, &scalpel_http::error_body(kind, detail)[..]);
        }
    }
}
