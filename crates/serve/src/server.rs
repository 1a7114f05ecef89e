//! The public face: [`Server`] starts the listeners, the data plane, the mirror thread,
//! every app's workers and the control plane (admin, live page, sampler), and answers
//! status, metrics, reload and shutdown. The work itself lives in its own rooms: the
//! request path (`proxy`), the data plane's accept loops (`accept`), the admin server
//! (`admin`), reload (`reload`), the sampler (`sampler`), the metrics text (`metrics`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};

use crate::accept::start_data_plane;
use crate::admin::admin_loop;
use crate::config::Config;
use crate::error::ServeError;
use crate::live::Live;
use crate::metrics;
use crate::mirror_thread::start_mirror_thread;
use crate::reload::reload;
use crate::route::Route;
use crate::sampler::sample_resources;
use crate::state::{ConnCount, Running, Shared, Table};
use crate::status::{MirrorReport, Status, mirror_reports, status};
use crate::supervisor::{App, AppEnv, Hurry, LogSink, PreloadFile, SlotCmd, WorkerLogs, start_app};
use crate::tls::{Endpoint, TlsFiles};

/// Settings of a server that are not part of the config file.
#[derive(Debug, Clone, Default)]
pub struct ServeOptions {
    /// Where worker output goes.
    pub worker_logs: WorkerLogs,
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

/// What [`Server::start`] binds before anything starts: a taken address fails the start
/// with nothing running.
struct Bound {
    listener: TcpListener,
    admin: Option<TcpListener>,
    /// Each app's own listening socket (direct mode), in config order.
    direct: Vec<Option<Arc<std::net::TcpListener>>>,
    tls: Option<Endpoint>,
    admin_tls: Option<Endpoint>,
}

impl Bound {
    async fn bind(config: &Config) -> Result<Self, ServeError> {
        let cfg = &config.server;
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
        let admin = match cfg.admin {
            Some(a) => Some(bind(a).await?),
            None => None,
        };
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
        Ok(Self {
            listener,
            admin,
            direct,
            tls,
            admin_tls,
        })
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
        let bound = Bound::bind(&config).await?;
        let listen = bound
            .listener
            .local_addr()
            .map_err(|error| ServeError::Bind {
                addr: cfg.listen,
                error,
            })?;
        let admin = bound.admin.as_ref().and_then(|l| l.local_addr().ok());
        warn_about_ephemeral_ports(&config);
        for w in config.writable_by_others() {
            tracing::warn!("{w}");
        }
        // Everything that can fail comes before any worker starts: the data-plane threads
        // (they wait for the shared state), the mirror thread and the mirror stores.
        let (stop_tx, stop_rx) = watch::channel(false);
        let (stop_threads, threads_rx) = watch::channel(false);
        let connections = Arc::new(ConnCount::default());
        let hand_over = start_data_plane(
            bound.listener,
            cfg.threads,
            &stop_rx,
            &threads_rx,
            &connections,
        )?;
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
        let logs = log_sink(options.worker_logs, cfg.log_buffer_bytes)?;
        // The Node preload's file, written once (a live reload may add a Node app).
        let preload = Arc::new(PreloadFile::write().map_err(ServeError::Preload)?);
        let apps = start_apps(&config, bound.direct, &logs, &hurry, &preload);
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
            tls: bound.tls,
            admin_tls: bound.admin_tls,
            running: Running {
                config: std::sync::Mutex::new(config),
                logs,
                hurry: hurry.clone(),
                preload,
            },
        });
        for tx in hand_over.into_iter().chain(mirror_hand_over) {
            let _ = tx.send(shared.clone());
        }
        let reload_lock = Arc::new(tokio::sync::Mutex::new(()));
        start_control_plane(&shared, bound.admin, &reload_lock, &stop_rx);
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
            // Every slot's newest process ready: in rotation, or (a worker without a
            // server) running under supervision.
            let all = self.shared.table.load().apps.iter().all(|a| {
                a.slots.iter().all(|s| {
                    s.current
                        .load()
                        .as_ref()
                        .is_some_and(|b| b.state() == crate::backend::WorkerState::Ready)
                })
            });
            if all {
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
        metrics::text(&self.shared)
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
        self.drain().await;
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

    /// Waits until no client connection is open, up to `drain_timeout` or a hurry.
    async fn drain(&self) {
        let deadline = tokio::time::Instant::now() + self.shared.cfg.drain_timeout;
        loop {
            let idle = self.connections.idle();
            if self.connections.active() == 0 {
                return;
            }
            tokio::select! {
                r = tokio::time::timeout_at(deadline, idle) => if r.is_err() {
                    tracing::warn!(
                        connections = self.connections.active(),
                        "drain time-out; stopping workers with requests in flight"
                    );
                    return;
                },
                () = self.hurry.wait() => {
                    tracing::warn!(
                        connections = self.connections.active(),
                        "drain cut short; stopping workers now"
                    );
                    return;
                }
            }
        }
    }
}

/// Where worker output goes.
fn log_sink(logs: WorkerLogs, buffer_bytes: usize) -> Result<LogSink, ServeError> {
    Ok(match logs {
        WorkerLogs::Inherit => LogSink::stdio(buffer_bytes).map_err(ServeError::Threads)?,
        WorkerLogs::Discard => LogSink::Discard,
        WorkerLogs::Capture(b) => LogSink::Capture(b),
    })
}

/// Every app of `config` started (each with its direct socket, if any, in `direct`).
fn start_apps(
    config: &Config,
    direct: Vec<Option<Arc<std::net::TcpListener>>>,
    logs: &LogSink,
    hurry: &Arc<Hurry>,
    preload: &Arc<PreloadFile>,
) -> Vec<Arc<App>> {
    let cfg = &config.server;
    config
        .apps
        .iter()
        .zip(direct)
        .map(|(a, sock)| {
            let env = AppEnv::new(
                logs.clone(),
                cfg.log_line_max_bytes,
                cfg.drain_timeout,
                hurry.clone(),
                sock,
                Some(preload.clone()),
            );
            Arc::new(start_app(a.clone(), env))
        })
        .collect()
}

/// On the caller's runtime: the admin server and the live page's ticker (with an admin
/// address), and the resource sampler.
fn start_control_plane(
    shared: &Arc<Shared>,
    admin: Option<TcpListener>,
    reload_lock: &Arc<tokio::sync::Mutex<()>>,
    stop: &watch::Receiver<bool>,
) {
    let mut live_page = None;
    if let Some(listener) = admin {
        let live = Arc::new(Live::new(shared));
        live_page = Some(live.clone());
        tokio::spawn(crate::live::run(shared.clone(), live.clone(), stop.clone()));
        tokio::spawn(admin_loop(
            listener,
            shared.clone(),
            live,
            reload_lock.clone(),
            stop.clone(),
        ));
    }
    tokio::spawn(sample_resources(shared.clone(), live_page, stop.clone()));
}

/// The config's warnings (worker ports in the kernel's ephemeral range), logged at start
/// as `--check` prints them.
fn warn_about_ephemeral_ports(config: &Config) {
    for w in config.warnings() {
        tracing::warn!("{w}");
    }
}
