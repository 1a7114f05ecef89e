//! The supervisor owns every worker process: it spawns each on its own port, admits it
//! to the pool once its health check passes, probes it at an interval, and replaces it
//! when it exits or stops answering, with exponential back-off and a restart budget.
//! Each worker slot is one task; commands (reload, stop) reach it over a channel, so
//! the slot's state has a single owner.

use std::collections::{BTreeMap, VecDeque};
use std::ffi::OsString;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::sync::{mpsc, oneshot, watch};
use tracing::{error, info, warn};

use crate::backend::{Backend, Eject, WorkerState};
use crate::config::AppConfig;
use crate::counters::{AppMetrics, RestartReason};
use crate::health::{HealthCheck, HttpHealthCheck};
use crate::pool::Pool;

/// Where the workers' stdout and stderr lines go, each prefixed with `[app#index]`.
#[derive(Debug, Clone, Default)]
pub enum WorkerLogs {
    /// To this process's stdout and stderr respectively.
    #[default]
    Inherit,
    /// Nowhere.
    Discard,
    /// Into a buffer (the last lines only), e.g. for tests.
    Capture(LogBuffer),
}

/// The last worker log lines, shared.
#[derive(Debug, Clone, Default)]
pub struct LogBuffer(Arc<Mutex<VecDeque<String>>>);

/// Lines kept by a [`LogBuffer`].
const LOG_BUFFER_LINES: usize = 10_000;

/// Where worker output goes at run time.
#[derive(Debug, Clone)]
pub(crate) enum LogSink {
    /// Through the bounded queue of the process's stdio writer thread.
    Stdio(Arc<StdioWriter>),
    Capture(LogBuffer),
    Discard,
}

impl LogSink {
    /// The process's stdio writer (started on first use; stdout and stderr are the
    /// process's, so there is one), holding at most `limit` bytes of waiting lines.
    pub(crate) fn stdio(limit: usize) -> std::io::Result<Self> {
        static WRITER: std::sync::OnceLock<Arc<StdioWriter>> = std::sync::OnceLock::new();
        if let Some(w) = WRITER.get() {
            return Ok(LogSink::Stdio(w.clone()));
        }
        let w = Arc::new(StdioWriter {
            queue: Mutex::new(LineQueue::default()),
            ready: std::sync::Condvar::new(),
            limit,
        });
        let thread_w = w.clone();
        std::thread::Builder::new()
            .name("scalpel-worker-logs".into())
            .spawn(move || thread_w.run())?;
        Ok(LogSink::Stdio(WRITER.get_or_init(|| w).clone()))
    }

    /// Hands a line on without ever waiting; `false` when it was dropped (the writer is
    /// behind: scalpel's stdout or stderr is not being read).
    fn push(&self, is_err: bool, line: String) -> bool {
        match self {
            LogSink::Stdio(w) => w.push(is_err, line),
            LogSink::Capture(b) => {
                b.push(line);
                true
            }
            LogSink::Discard => true,
        }
    }
}

/// Worker output on its way to scalpel's stdout and stderr: a queue bounded in bytes,
/// written by a thread of its own. A reader that stops (`| less` left open, a full pipe)
/// blocks that thread only; supervision, health checks and the admin endpoints go on,
/// and lines past the bound are dropped and counted.
#[derive(Debug)]
pub(crate) struct StdioWriter {
    queue: Mutex<LineQueue>,
    ready: std::sync::Condvar,
    limit: usize,
}

#[derive(Debug, Default)]
struct LineQueue {
    lines: VecDeque<(bool, String)>,
    bytes: usize,
}

impl StdioWriter {
    fn push(&self, is_err: bool, line: String) -> bool {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        if q.bytes + line.len() > self.limit {
            return false;
        }
        q.bytes += line.len();
        q.lines.push_back((is_err, line));
        drop(q);
        self.ready.notify_one();
        true
    }

    fn run(&self) {
        use std::io::Write as _;
        loop {
            let (is_err, line) = {
                let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
                loop {
                    if let Some(l) = q.lines.pop_front() {
                        q.bytes -= l.1.len();
                        break l;
                    }
                    q = self.ready.wait(q).unwrap_or_else(|e| e.into_inner());
                }
            };
            // One write per line so lines of different workers do not interleave.
            let _ = if is_err {
                writeln!(std::io::stderr().lock(), "{line}")
            } else {
                writeln!(std::io::stdout().lock(), "{line}")
            };
        }
    }
}

/// Set once a shutdown is to be cut short (a second SIGTERM or Ctrl-C).
#[derive(Debug, Default)]
pub(crate) struct Hurry {
    set: AtomicBool,
    notify: tokio::sync::Notify,
}

impl Hurry {
    pub(crate) fn now(&self) {
        self.set.store(true, Ordering::Release);
        self.notify.notify_waiters();
    }

    pub(crate) fn is_set(&self) -> bool {
        self.set.load(Ordering::Acquire)
    }

    /// Resolves once [`Hurry::now`] has been called.
    pub(crate) async fn wait(&self) {
        let notified = self.notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if self.is_set() {
            return;
        }
        notified.await;
    }
}

impl LogBuffer {
    /// The lines so far (oldest first).
    pub fn lines(&self) -> Vec<String> {
        let b = self.0.lock().unwrap_or_else(|e| e.into_inner());
        b.iter().cloned().collect()
    }

    fn push(&self, line: String) {
        let mut b = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if b.len() == LOG_BUFFER_LINES {
            b.pop_front();
        }
        b.push_back(line);
    }
}

pub(crate) enum SlotCmd {
    Reload(oneshot::Sender<Result<(), String>>),
    Stop(oneshot::Sender<()>),
}

/// One worker position of an app (index 0..workers); its process changes over time.
#[derive(Debug)]
pub(crate) struct Slot {
    pub(crate) index: usize,
    /// The newest process of the slot, whatever its state.
    pub(crate) current: ArcSwapOption<Backend>,
    pub(crate) restarts: AtomicU64,
    /// The restart budget is spent; the slot waits for a reload.
    pub(crate) failed: AtomicBool,
    /// A replacement for passing `max_memory_mb` is under way.
    pub(crate) memory_replacing: AtomicBool,
    /// Why the slot's process was last replaced other than by a restart (`/status`).
    pub(crate) last_replaced: Mutex<Option<String>>,
    /// Why and when the slot last restarted (the live page); written by the slot's own
    /// task, read by the admin endpoint, never on a request path.
    pub(crate) last_restart: Mutex<Option<(RestartReason, Instant)>>,
    /// The detail of the slot's last restart (a reload that adds an app reports it).
    pub(crate) last_error: Mutex<Option<String>>,
    /// A config the next process of the slot starts with (a live reload); taken by the
    /// slot's task when it next starts a process.
    pub(crate) next_cfg: Mutex<Option<Arc<AppConfig>>>,
    cmds: mpsc::Sender<SlotCmd>,
}

impl Slot {
    pub(crate) async fn send(&self, cmd: SlotCmd) -> bool {
        self.cmds.send(cmd).await.is_ok()
    }
}

/// An app at run time: its config, its pool, its metrics and its slots. A live reload
/// builds a new `App` of the same name around the same pool and metrics (see
/// [`App::resized`]), so counters and the rotation carry over.
#[derive(Debug)]
pub(crate) struct App {
    pub(crate) cfg: Arc<AppConfig>,
    pub(crate) pool: Arc<Pool>,
    pub(crate) metrics: Arc<AppMetrics>,
    pub(crate) slots: Vec<Arc<Slot>>,
    env: AppEnv,
}

/// What every slot of an app shares besides its config: where output goes, the drain
/// settings, the direct socket, and the processes being stopped in the background.
#[derive(Debug, Clone)]
pub(crate) struct AppEnv {
    pub(crate) logs: LogSink,
    pub(crate) log_line_max: usize,
    pub(crate) drain_timeout: Duration,
    pub(crate) hurry: Arc<Hurry>,
    /// A direct app's listening socket, handed to each worker on fd 3.
    pub(crate) direct: Option<Arc<std::net::TcpListener>>,
    /// Ports still held by a process of this app that is being stopped in the background
    /// (an unhealthy worker in its grace period); `true` is sent once it is gone. A start
    /// on such a port waits for it instead of failing with "address in use".
    stopping: Arc<Mutex<BTreeMap<u16, watch::Receiver<bool>>>>,
}

impl AppEnv {
    pub(crate) fn new(
        logs: LogSink,
        log_line_max: usize,
        drain_timeout: Duration,
        hurry: Arc<Hurry>,
        direct: Option<Arc<std::net::TcpListener>>,
    ) -> Self {
        Self {
            logs,
            log_line_max,
            drain_timeout,
            hurry,
            direct,
            stopping: Arc::default(),
        }
    }
}

#[derive(Debug)]
struct SlotCtx {
    cfg: Arc<AppConfig>,
    pool: Arc<Pool>,
    metrics: Arc<AppMetrics>,
    slot: Arc<Slot>,
    health: Box<dyn HealthCheck>,
    logs: LogSink,
    log_line_max: usize,
    drain_timeout: Duration,
    hurry: Arc<Hurry>,
    /// A direct app's listening socket, handed to each worker on fd 3.
    direct: Option<Arc<std::net::TcpListener>>,
    stopping: Arc<Mutex<BTreeMap<u16, watch::Receiver<bool>>>>,
    /// The slot was added by a live reload: other slots' processes may hold a port of
    /// its pair (see [`SlotCtx::pick_port`]).
    added_live: bool,
}

/// Starts the slots of `cfg`; each begins spawning its worker at once.
pub(crate) fn start_app(cfg: Arc<AppConfig>, env: AppEnv) -> App {
    let pool = Arc::new(Pool::new(cfg.balance, cfg.sticky_worker.is_some()));
    pool.set_limit(cfg.max_in_flight_per_worker, cfg.max_queued);
    let metrics = Arc::new(AppMetrics::new());
    let slots = (0..cfg.workers)
        .map(|index| start_slot(&cfg, &pool, &metrics, &env, index, false))
        .collect();
    App {
        cfg,
        pool,
        metrics,
        slots,
        env,
    }
}

fn start_slot(
    cfg: &Arc<AppConfig>,
    pool: &Arc<Pool>,
    metrics: &Arc<AppMetrics>,
    env: &AppEnv,
    index: usize,
    added_live: bool,
) -> Arc<Slot> {
    let (tx, rx) = mpsc::channel(8);
    let slot = Arc::new(Slot {
        index,
        current: ArcSwapOption::empty(),
        restarts: AtomicU64::new(0),
        failed: AtomicBool::new(false),
        memory_replacing: AtomicBool::new(false),
        last_replaced: Mutex::new(None),
        last_restart: Mutex::new(None),
        last_error: Mutex::new(None),
        next_cfg: Mutex::new(None),
        cmds: tx,
    });
    let ctx = SlotCtx {
        cfg: cfg.clone(),
        pool: pool.clone(),
        metrics: metrics.clone(),
        slot: slot.clone(),
        health: Box::new(HttpHealthCheck::new(
            cfg.health_path.clone(),
            cfg.health_timeout,
        )),
        logs: env.logs.clone(),
        log_line_max: env.log_line_max,
        drain_timeout: env.drain_timeout,
        hurry: env.hurry.clone(),
        direct: env.direct.clone(),
        stopping: env.stopping.clone(),
        added_live,
    };
    tokio::spawn(run_slot(ctx, rx));
    slot
}

impl App {
    /// The same app (pool, metrics, shared state) under `cfg`: the slots below
    /// `cfg.workers` are kept (the caller rolls them onto `cfg`), new ones start at once
    /// with `cfg`; slots past `cfg.workers` are returned for the caller to stop.
    pub(crate) fn resized(&self, cfg: Arc<AppConfig>) -> (App, Vec<Arc<Slot>>) {
        let keep = self.slots.len().min(cfg.workers);
        let mut slots: Vec<Arc<Slot>> = self.slots[..keep].to_vec();
        let extra = self.slots[keep..].to_vec();
        for index in keep..cfg.workers {
            slots.push(start_slot(
                &cfg,
                &self.pool,
                &self.metrics,
                &self.env,
                index,
                true,
            ));
        }
        (
            App {
                cfg,
                pool: self.pool.clone(),
                metrics: self.metrics.clone(),
                slots,
                env: self.env.clone(),
            },
            extra,
        )
    }
}

/// A spawned worker process.
#[derive(Debug)]
struct Proc {
    backend: Arc<Backend>,
    /// `Some(description)` once the process has exited.
    exit: watch::Receiver<Option<String>>,
}

impl Proc {
    fn exited(&self) -> Option<String> {
        self.exit.borrow().clone()
    }

    async fn wait_exit(&self) -> String {
        let mut rx = self.exit.clone();
        match rx.wait_for(|e| e.is_some()).await {
            Ok(e) => e.clone().unwrap_or_default(),
            Err(_) => "exit watcher gone".into(),
        }
    }
}

enum Event {
    Exited(String),
    Unhealthy(String),
    /// With `prestart`: the first failed probe of a worker answering nothing.
    Suspect(String),
    /// A suspect passed a probe (or answered a request) again.
    Recovered,
    Cmd(SlotCmd),
    CmdsClosed,
}

/// How the `prestart` path ended for a slot.
enum Early {
    /// The successor serves; the suspect is gone or leaving.
    Replaced(Proc),
    /// The successor failed to start; the suspect is still the slot's worker.
    Kept(Proc),
    /// Neither: the successor failed and the suspect is gone (the slot restarts).
    Lost,
    /// The slot was told to stop.
    Stopped,
}

impl SlotCtx {
    fn name(&self) -> String {
        format!("{}#{}", self.cfg.name, self.slot.index)
    }

    /// Switches to `cfg` (and a health check made for it).
    fn set_cfg(&mut self, cfg: Arc<AppConfig>) {
        self.health = Box::new(HttpHealthCheck::new(
            cfg.health_path.clone(),
            cfg.health_timeout,
        ));
        self.cfg = cfg;
    }

    /// Takes the config a live reload left for this slot, if any; returns the one it
    /// replaces (to go back to if the new process does not become ready).
    fn adopt_next_cfg(&mut self) -> Option<Arc<AppConfig>> {
        let next = self
            .slot
            .next_cfg
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()?;
        let previous = self.cfg.clone();
        self.set_cfg(next);
        Some(previous)
    }

    /// The port for the slot's next process: of its pair (under the current config), not
    /// `avoid` (the port of the process it follows, which may still hold it). When both
    /// ports qualify — the pair moved under a live reload (`workers` or `port_base`
    /// changed), or the slot was added by one — another slot's process may still hold one
    /// of them, so a free one is taken; otherwise the first, and a stranger on it is
    /// named by the start (`port_free`). A port held by a process of this app being
    /// stopped counts as free: [`Self::start`] waits for it.
    fn pick_port(&self, avoid: Option<u16>) -> u16 {
        let pair = self.cfg.ports(self.slot.index);
        let candidates: Vec<u16> = pair.iter().copied().filter(|&p| Some(p) != avoid).collect();
        if candidates.len() == 2 && (avoid.is_some() || self.added_live) {
            let stopping = self.stopping.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(p) = candidates
                .iter()
                .copied()
                .find(|&p| stopping.contains_key(&p) || port_free(p).is_ok())
            {
                return p;
            }
        }
        candidates.first().copied().unwrap_or(pair[0])
    }

    /// Waits until a process of this app that is being stopped in the background (an
    /// unhealthy worker in its grace period) has let go of `port`. Bounded: the stop
    /// kills it after its grace period.
    async fn wait_port_released(&self, port: u16) {
        let held = self
            .stopping
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&port)
            .cloned();
        if let Some(mut done) = held {
            if *done.borrow() {
                return;
            }
            info!(
                app = %self.cfg.name,
                worker = self.slot.index,
                port,
                "waiting for the stopping worker that still holds the port"
            );
            let limit = self.cfg.stop_grace + Duration::from_secs(20);
            let _ = tokio::time::timeout(limit, done.wait_for(|d| *d)).await;
        }
    }

    fn spawn(&self, port: u16) -> Result<Proc, String> {
        let cfg = &self.cfg;
        // A port someone else listens on would answer this worker's health checks: a
        // leftover worker of an earlier run, another balancer with the same ports.
        port_free(port)?;
        let index = self.slot.index.to_string();
        let port_s = port.to_string();
        // `{port}` and `{index}` in arguments, for programs that take a flag, not $PORT.
        let args = cfg.command[1..]
            .iter()
            .map(|a| a.replace("{port}", &port_s).replace("{index}", &index));
        let mut cmd = tokio::process::Command::new(&cfg.command[0]);
        cmd.args(args);
        match &self.direct {
            None => {
                cmd.envs(&cfg.env)
                    .env(&cfg.port_env, port.to_string())
                    .env(&cfg.index_env, self.slot.index.to_string());
                die_with_parent(&mut cmd);
            }
            Some(sock) => {
                let mut vars: BTreeMap<OsString, OsString> = std::env::vars_os().collect();
                for (k, v) in &cfg.env {
                    vars.insert(k.into(), v.into());
                }
                vars.insert(cfg.port_env.clone().into(), port_s.clone().into());
                vars.insert(cfg.index_env.clone().into(), index.clone().into());
                vars.insert("LISTEN_FDS".into(), "1".into());
                vars.insert("LISTEN_FDNAMES".into(), cfg.name.to_string().into());
                let env = DirectEnv::new(vars).map_err(|e| format!("environment: {e}"))?;
                socket_activation(&mut cmd, sock.as_raw_fd(), env);
            }
        }
        cmd.stdin(Stdio::null())
            // Its own process group: a terminal's Ctrl-C reaches the balancer only, which
            // then drains before stopping workers; stopping signals the whole group.
            .process_group(0)
            .kill_on_drop(true);
        let capture = !matches!(self.logs, LogSink::Discard);
        let pipe = || {
            if capture {
                Stdio::piped()
            } else {
                Stdio::null()
            }
        };
        cmd.stdout(pipe()).stderr(pipe());
        if let Some(dir) = &cfg.cwd {
            cmd.current_dir(dir);
        }
        let mut child = cmd.spawn().map_err(|e| spawn_error(cfg, &e))?;
        let pid = child.id().unwrap_or(0);
        let name: Arc<str> = self.name().into();
        for (out, is_err) in [
            (
                child
                    .stdout
                    .take()
                    .map(|o| Box::new(o) as Box<dyn AsyncRead + Send + Unpin>),
                false,
            ),
            (
                child
                    .stderr
                    .take()
                    .map(|e| Box::new(e) as Box<dyn AsyncRead + Send + Unpin>),
                true,
            ),
        ] {
            if let Some(out) = out {
                tokio::spawn(forward_lines(
                    out,
                    name.clone(),
                    is_err,
                    self.logs.clone(),
                    self.log_line_max,
                    self.metrics.clone(),
                ));
            }
        }
        let (tx, rx) = watch::channel(None);
        tokio::spawn(async move {
            let desc = match child.wait().await {
                Ok(st) => describe_exit(st),
                Err(e) => format!("wait failed: {e}"),
            };
            let _ = tx.send(Some(desc));
        });
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let backend = Arc::new(
            Backend::new(cfg.name.clone(), self.slot.index, addr, pid)
                .with_stall_after(cfg.avoid_stalled),
        );
        self.slot.current.store(Some(backend.clone()));
        Ok(Proc { backend, exit: rx })
    }

    /// Spawns on `port` and waits for the first passing health check.
    async fn start(&self, port: u16) -> Result<Proc, (Option<Proc>, String)> {
        self.wait_port_released(port).await;
        let p = self.spawn(port).map_err(|e| (None, e))?;
        let deadline = Instant::now() + self.cfg.start_timeout;
        // Poll faster than the steady-state interval: readiness gates traffic.
        let poll = self.cfg.health_interval.min(Duration::from_millis(100));
        loop {
            if let Some(e) = p.exited() {
                return Err((Some(p), format!("exited while starting ({e})")));
            }
            if self.health.check(p.backend.addr()).await.is_ok() {
                // An answer proves that something listens on the port, not that it is
                // this worker: only a listening socket of its own process tree counts.
                let (pid, port) = (p.backend.pid(), p.backend.addr().port());
                let owned = tokio::task::spawn_blocking(move || {
                    scalpel_procstat::listening_in_tree(pid, port)
                })
                .await;
                match owned {
                    Ok(Ok(true)) => return Ok(p),
                    Ok(Ok(false)) => {
                        return Err((
                            Some(p),
                            format!(
                                "port {port} answers, but not from this worker's processes \
                                 ({}); the worker's own listen failed",
                                port_holder(port)
                            ),
                        ));
                    }
                    // Gone meanwhile: the next round reports the exit.
                    Ok(Err(scalpel_procstat::ProcStatError::NoSuchProcess { .. })) => {}
                    Ok(Err(e)) => {
                        return Err((
                            Some(p),
                            format!("cannot tell who listens on port {port}: {e}"),
                        ));
                    }
                    Err(e) => return Err((Some(p), format!("ownership check failed: {e}"))),
                }
            }
            if Instant::now() >= deadline {
                return Err((
                    Some(p),
                    format!(
                        "health check {} not passing after {} ms",
                        self.cfg.health_path,
                        self.cfg.start_timeout.as_millis()
                    ),
                ));
            }
            tokio::time::sleep(poll).await;
        }
    }

    fn admit(&self, p: &Proc) {
        self.pool.add(p.backend.clone());
        info!(
            app = %self.cfg.name,
            worker = self.slot.index,
            pid = p.backend.pid(),
            port = p.backend.addr().port(),
            "worker ready"
        );
    }

    /// Waits for the worker to exit, fail its probes, or for a command.
    ///
    /// A failed probe counts only when the worker has not answered any proxied request
    /// since the previous probe: an overloaded worker answers its probe late because the
    /// probe waits behind queued requests, but it keeps answering them, while a blocked
    /// event loop answers nothing. Without this rule a burst of load would get healthy
    /// workers killed, and the load would fall on the others.
    ///
    /// `suspect`: the worker has failed one probe already (the `prestart` path); a
    /// passing probe then ends the watch with [`Event::Recovered`]. Otherwise, with
    /// `prestart`, the first failure ends it with [`Event::Suspect`].
    async fn monitor(&self, p: &Proc, cmds: &mut mpsc::Receiver<SlotCmd>, suspect: bool) -> Event {
        let mut failures = u32::from(suspect);
        let mut answers = p.backend.answers();
        let mut last_error = String::new();
        let mut tick = tokio::time::interval(self.cfg.health_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // A fresh worker gets an interval before its first probe; a suspect (which just
        // failed one) is probed again at once, keeping the rhythm of the failed ones.
        if !suspect {
            tick.tick().await;
        }
        loop {
            tokio::select! {
                e = p.wait_exit() => return Event::Exited(e),
                c = cmds.recv() => return c.map_or(Event::CmdsClosed, Event::Cmd),
                _ = tick.tick() => {
                    let result = self.health.check(p.backend.addr()).await;
                    let now = p.backend.answers();
                    let progressed = now != answers;
                    answers = now;
                    match result {
                        Ok(()) => failures = 0,
                        Err(_) if progressed => failures = 0,
                        Err(e) => {
                            failures += 1;
                            last_error = e;
                        }
                    }
                    if failures >= self.cfg.health_failures {
                        return Event::Unhealthy(format!(
                            "{failures} health checks failed in a row (last: {last_error})"
                        ));
                    }
                    if suspect && failures == 0 {
                        return Event::Recovered;
                    }
                    if !suspect && failures == 1 && self.cfg.health_prestart {
                        return Event::Suspect(last_error.clone());
                    }
                }
            }
        }
    }

    /// SIGTERM to the worker's process group, SIGKILL after the grace period (at once
    /// when `hurry` is set); then SIGKILL to every process of its tree that left the
    /// group (`setsid`) and would otherwise keep its port.
    async fn stop(p: &Proc, grace: Duration, hurry: &Hurry) {
        p.backend.set_state(WorkerState::Draining);
        let raw = p.backend.pid();
        let pid = Pid::from_raw(raw as i32);
        // Its tree now, while the worker is still there to be the root of it.
        let tree = if raw > 0 && p.exited().is_none() {
            tokio::task::spawn_blocking(move || {
                scalpel_procstat::tree_pids(raw).unwrap_or_default()
            })
            .await
            .unwrap_or_default()
        } else {
            Vec::new()
        };
        if p.exited().is_none() && raw > 0 {
            let _ = killpg(
                pid,
                if hurry.is_set() {
                    Signal::SIGKILL
                } else {
                    Signal::SIGTERM
                },
            );
            let graceful = tokio::select! {
                r = tokio::time::timeout(grace, p.wait_exit()) => r.is_ok(),
                () = hurry.wait() => false,
            };
            if !graceful {
                let _ = killpg(pid, Signal::SIGKILL);
                let _ = tokio::time::timeout(Duration::from_secs(10), p.wait_exit()).await;
            }
        }
        // Children of the worker that outlived it: its group, and those that left it.
        let _ = killpg(pid, Signal::SIGKILL);
        let escaped: Vec<u32> = tree
            .into_iter()
            .filter(|&t| t != raw && !scalpel_procstat::process_ended(t))
            .collect();
        for &other in &escaped {
            let _ = nix::sys::signal::kill(Pid::from_raw(other as i32), Signal::SIGKILL);
        }
        // Gone before the port is needed again (the next incarnation but one takes it):
        // not our children, so polled rather than waited for; bounded.
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline
            && escaped
                .iter()
                .any(|&t| !scalpel_procstat::process_exited(t))
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        p.backend.set_state(WorkerState::Stopped);
    }

    /// Out of the pool, wait for its in-flight requests (bounded), then stop it.
    async fn drain_and_stop(&self, p: &Proc) {
        self.drain_and_stop_with(p, self.cfg.stop_grace).await;
    }

    /// [`Self::drain_and_stop`] with the grace period of the process's own config.
    async fn drain_and_stop_with(&self, p: &Proc, grace: Duration) {
        self.pool.remove(&p.backend);
        p.backend.set_state(WorkerState::Draining);
        let deadline = Instant::now() + self.drain_timeout;
        while p.backend.in_flight() > 0
            && Instant::now() < deadline
            && p.exited().is_none()
            && !self.hurry.is_set()
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Self::stop(p, grace, &self.hurry).await;
    }

    /// A worker that exited: out of rotation, marked stopped, its restart logged.
    fn note_exited(&self, p: &Proc, why: &str) {
        self.pool.remove(&p.backend);
        p.backend.set_state(WorkerState::Stopped);
        self.log_restart(
            RestartReason::Exited,
            why,
            p.backend.pid(),
            p.backend.uptime_s(),
        );
    }

    /// Takes a worker declared unhealthy out at once: out of rotation, its waiting
    /// requests sent elsewhere (ejected), its restart logged. See [`Self::stop_later`].
    fn eject(&self, p: &Proc, why: &str) {
        self.pool.remove(&p.backend);
        p.backend.eject(Eject::All);
        self.log_restart(
            RestartReason::Unhealthy,
            why,
            p.backend.pid(),
            p.backend.uptime_s(),
        );
    }

    /// A worker declared unhealthy leaves: in direct mode the connections it accepted
    /// are taken over first (`rescue`: served on by another worker when it read none of
    /// them), then it is ejected and its restart logged with what became of them.
    /// Returns the grace period for its stop: none once its connections were taken, as
    /// it must not run again and read from sockets serve now serves.
    async fn retire_unhealthy(&self, p: &Proc, why: &str) -> Duration {
        let grace = self.cfg.stop_grace;
        let listen = match &self.direct {
            Some(sock) if p.exited().is_none() => sock.local_addr().ok(),
            _ => None,
        };
        let Some(listen) = listen else {
            self.eject(p, why);
            return grace;
        };
        match crate::rescue::rescue(p.backend.pid(), listen, &self.metrics).await {
            crate::rescue::Outcome::Taken(counts) => {
                self.eject(p, &format!("{why}; {counts}"));
                Duration::ZERO
            }
            crate::rescue::Outcome::Gone => {
                self.eject(p, why);
                grace
            }
            crate::rescue::Outcome::NotStopped { held } => {
                warn!(
                    app = %self.cfg.name,
                    worker = self.slot.index,
                    pid = p.backend.pid(),
                    connections = held,
                    waited = ?crate::rescue::STOP_WAIT,
                    "the stuck worker's threads did not all stop after SIGSTOP \
                     (one in uninterruptible sleep?): its accepted connections are not taken \
                     over and close with it"
                );
                self.eject(
                    p,
                    &format!(
                        "{why}; its accepted connections: {held} not taken (its threads did \
                         not stop: closed with it)"
                    ),
                );
                grace
            }
            crate::rescue::Outcome::Refused { error, held } => {
                warn!(
                    app = %self.cfg.name,
                    worker = self.slot.index,
                    pid = p.backend.pid(),
                    connections = held,
                    %error,
                    "cannot take over the stuck worker's accepted connections (pidfd_getfd \
                     needs Linux 5.6+ and ptrace access to the worker: no seccomp filter \
                     against it, Yama ptrace_scope 0 or 1, or CAP_SYS_PTRACE at 2); they close \
                     with the worker"
                );
                self.eject(
                    p,
                    &format!(
                        "{why}; its accepted connections: {held} not taken (the kernel \
                         refused: closed with it)"
                    ),
                );
                grace
            }
        }
    }

    /// Stops `p` in the background (a stuck worker may take the whole grace period).
    /// Its port is marked as held until it is gone, so that a start on it (a reload
    /// soon after) waits instead of failing with "address in use".
    fn stop_later(&self, p: Proc, grace: Duration) {
        let hurry = self.hurry.clone();
        let port = p.backend.addr().port();
        let (done, rx) = watch::channel(false);
        self.stopping
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(port, rx);
        let stopping = self.stopping.clone();
        tokio::spawn(async move {
            SlotCtx::stop(&p, grace, &hurry).await;
            let _ = done.send(true);
            let mut held = stopping.lock().unwrap_or_else(|e| e.into_inner());
            if held.get(&port).is_some_and(|r| *r.borrow()) {
                held.remove(&port);
            }
        });
    }

    /// The `prestart` path: worker `p` answers nothing and failed a probe, so its
    /// successor starts now on `port`, while `p` is still watched. The successor joins
    /// the rotation as soon as it is ready, next to `p` (which gets no new requests while
    /// stalled); then `p` leaves — ejected and stopped once declared unhealthy, or
    /// drained and stopped if it recovered (a long blocking request that ended). If the
    /// successor fails to start, `p` stays the slot's worker unless it is gone too.
    async fn replace_suspect(
        &self,
        p: Proc,
        port: u16,
        why: &str,
        cmds: &mut mpsc::Receiver<SlotCmd>,
    ) -> Early {
        info!(
            app = %self.cfg.name,
            worker = self.slot.index,
            pid = p.backend.pid(),
            reason = why,
            "worker stalled: starting its successor now"
        );
        let start = self.start(port);
        tokio::pin!(start);
        // One watch of `p` for both phases (before and after the successor is ready), so
        // its failure count and probe rhythm carry on; boxed to be dropped before `p`
        // moves.
        let mut watch = Box::pin(self.monitor(&p, cmds, true));
        // `p`'s verdict, once there is one; an unhealthy or exited `p` leaves at once.
        let mut verdict: Option<Event> = None;
        let mut gone = false;
        // The stop's grace period (none once a direct worker's connections were taken).
        let mut grace = self.cfg.stop_grace;
        let started = loop {
            tokio::select! {
                r = &mut start => break r,
                e = &mut watch, if verdict.is_none() => {
                    match &e {
                        Event::Unhealthy(why) => {
                            // Out now, its waiting requests elsewhere; stopped below.
                            grace = self.retire_unhealthy(&p, why).await;
                            gone = true;
                        }
                        Event::Exited(why) => {
                            self.note_exited(&p, why);
                            gone = true;
                        }
                        _ => {}
                    }
                    verdict = Some(e);
                }
            }
        };
        let new = match started {
            Ok(new) => new,
            Err((new, why)) => {
                drop(watch);
                if let Some(new) = &new {
                    SlotCtx::stop(new, self.cfg.stop_grace, &self.hurry).await;
                }
                self.slot.current.store(Some(p.backend.clone()));
                warn!(app = %self.cfg.name, worker = self.slot.index, reason = %why,
                    "early successor did not become ready");
                return match verdict {
                    _ if gone => {
                        self.stop_later(p, grace);
                        Early::Lost
                    }
                    Some(Event::Cmd(SlotCmd::Stop(reply))) => {
                        self.drain_and_stop(&p).await;
                        let _ = reply.send(());
                        Early::Stopped
                    }
                    Some(Event::CmdsClosed) => {
                        self.drain_and_stop(&p).await;
                        Early::Stopped
                    }
                    Some(Event::Cmd(SlotCmd::Reload(reply))) => {
                        let _ = reply.send(Err(format!("{}: {why}", self.name())));
                        Early::Kept(p)
                    }
                    _ => Early::Kept(p),
                };
            }
        };
        self.admit(&new);
        let verdict = match verdict {
            Some(v) => v,
            None => {
                // The successor serves: the suspect leaves the rotation now, and its
                // waiting idempotent requests go to the others (a request that was only
                // slow is done twice); its other requests may still finish while the
                // watch decides between recovered (drained) and unhealthy (stopped).
                self.pool.remove(&p.backend);
                p.backend.eject(Eject::Queued);
                watch.as_mut().await
            }
        };
        drop(watch);
        match verdict {
            _ if gone => self.stop_later(p, grace),
            Event::Unhealthy(why) => {
                let grace = self.retire_unhealthy(&p, &why).await;
                self.stop_later(p, grace);
            }
            Event::Exited(why) => {
                self.note_exited(&p, &why);
            }
            Event::Cmd(SlotCmd::Stop(reply)) => {
                self.drain_and_stop(&p).await;
                self.drain_and_stop(&new).await;
                let _ = reply.send(());
                return Early::Stopped;
            }
            Event::CmdsClosed => {
                self.drain_and_stop(&p).await;
                self.drain_and_stop(&new).await;
                return Early::Stopped;
            }
            // Recovered, or a reload (which the fresh successor answers): `p` retires
            // gracefully, its requests finishing.
            Event::Cmd(SlotCmd::Reload(reply)) => {
                let pending = self
                    .slot
                    .next_cfg
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .is_some();
                let _ = reply.send(if pending {
                    Err(format!(
                        "{}: was replacing a stalled worker, whose successor runs the \
                         previous config; reload again",
                        self.name()
                    ))
                } else {
                    Ok(())
                });
                self.drain_and_stop(&p).await;
            }
            Event::Recovered | Event::Suspect(_) => {
                self.log_restart(
                    RestartReason::Unhealthy,
                    "stalled and failed a probe, then recovered: retired for its early successor",
                    p.backend.pid(),
                    p.backend.uptime_s(),
                );
                self.drain_and_stop(&p).await;
            }
        }
        Early::Replaced(new)
    }

    fn log_restart(&self, reason: RestartReason, detail: &str, pid: u32, uptime_s: f64) -> u64 {
        let restarts = self.slot.restarts.fetch_add(1, Ordering::Relaxed) + 1;
        self.metrics.restart(reason);
        *self
            .slot
            .last_error
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(format!("{}: {detail}", reason.name()));
        *self
            .slot
            .last_restart
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some((reason, Instant::now()));
        warn!(
            app = %self.cfg.name,
            worker = self.slot.index,
            pid,
            reason = reason.name(),
            uptime_s = format_args!("{uptime_s:.1}"),
            restarts,
            detail,
            "worker restart"
        );
        restarts
    }

    /// Applies the budget and the back-off after a restart-worthy event. `Err` carries
    /// a command that ended the wait (a stop) or reports that the slot must end.
    async fn pause_before_restart(
        &self,
        recent: &mut VecDeque<Instant>,
        cmds: &mut mpsc::Receiver<SlotCmd>,
    ) -> Result<(), ()> {
        let now = Instant::now();
        recent.push_back(now);
        while recent
            .front()
            .is_some_and(|t| now.duration_since(*t) > self.cfg.restart_window)
        {
            recent.pop_front();
        }
        if recent.len() as u64 > u64::from(self.cfg.max_restarts) {
            self.slot.failed.store(true, Ordering::Relaxed);
            error!(
                app = %self.cfg.name,
                worker = self.slot.index,
                restarts = recent.len(),
                window_s = self.cfg.restart_window.as_secs(),
                "restart budget exhausted; worker left down until a reload"
            );
            // A reload gives the slot a fresh budget; its reply means "restarting".
            return match cmds.recv().await {
                Some(SlotCmd::Reload(reply)) => {
                    recent.clear();
                    self.slot.failed.store(false, Ordering::Relaxed);
                    let _ = reply.send(Ok(()));
                    Ok(())
                }
                Some(SlotCmd::Stop(reply)) => {
                    let _ = reply.send(());
                    Err(())
                }
                None => Err(()),
            };
        }
        let exp = (recent.len() as u32).saturating_sub(1).min(20);
        let delay = self
            .cfg
            .backoff
            .saturating_mul(1 << exp)
            .min(self.cfg.backoff_max);
        let sleep = tokio::time::sleep(delay);
        tokio::pin!(sleep);
        loop {
            tokio::select! {
                _ = &mut sleep => return Ok(()),
                c = cmds.recv() => match c {
                    Some(SlotCmd::Reload(reply)) => { let _ = reply.send(Ok(())); }
                    Some(SlotCmd::Stop(reply)) => { let _ = reply.send(()); return Err(()); }
                    None => return Err(()),
                }
            }
        }
    }
}

async fn run_slot(mut ctx: SlotCtx, mut cmds: mpsc::Receiver<SlotCmd>) {
    // The port of the slot's latest process: the next one takes the other of its pair.
    let mut last_port: Option<u16> = None;
    let mut recent: VecDeque<Instant> = VecDeque::new();
    let mut current: Option<Proc> = None;
    // A reload with a new config that came while a process was starting under the old
    // one: done as soon as that process is ready.
    let mut deferred: Option<oneshot::Sender<Result<(), String>>> = None;
    loop {
        let p = match current.take() {
            Some(p) => p,
            None => {
                // A reload that came while the slot had no process applies now.
                ctx.adopt_next_cfg();
                let port = ctx.pick_port(last_port);
                last_port = Some(port);
                let started = {
                    let start = ctx.start(port);
                    tokio::pin!(start);
                    // A stop during start-up must not wait for the start time-out.
                    loop {
                        tokio::select! {
                            r = &mut start => break Some(r),
                            c = cmds.recv() => match c {
                                Some(SlotCmd::Reload(reply)) => {
                                    let newer = ctx.slot.next_cfg.lock().unwrap_or_else(|e| e.into_inner()).is_some();
                                    if newer {
                                        if let Some(older) = deferred.replace(reply) {
                                            let _ = older.send(Ok(()));
                                        }
                                    } else {
                                        let _ = reply.send(Ok(()));
                                    }
                                }
                                Some(SlotCmd::Stop(reply)) => { let _ = reply.send(()); break None; }
                                None => break None,
                            }
                        }
                    }
                };
                match started {
                    None => {
                        if let Some(b) = ctx.slot.current.load_full() {
                            let _ = killpg(Pid::from_raw(b.pid() as i32), Signal::SIGKILL);
                            b.set_state(WorkerState::Stopped);
                        }
                        return;
                    }
                    Some(Ok(p)) => {
                        ctx.admit(&p);
                        p
                    }
                    Some(Err((p, why))) => {
                        let (pid, up) = p
                            .as_ref()
                            .map_or((0, 0.0), |p| (p.backend.pid(), p.backend.uptime_s()));
                        if let Some(p) = &p {
                            SlotCtx::stop(p, ctx.cfg.stop_grace, &ctx.hurry).await;
                        }
                        ctx.log_restart(RestartReason::StartFailed, &why, pid, up);
                        // The next start takes the new config.
                        if let Some(reply) = deferred.take() {
                            let _ = reply.send(Ok(()));
                        }
                        if ctx
                            .pause_before_restart(&mut recent, &mut cmds)
                            .await
                            .is_err()
                        {
                            return;
                        }
                        continue;
                    }
                }
            }
        };
        let event = match deferred.take() {
            Some(reply) => Event::Cmd(SlotCmd::Reload(reply)),
            None => ctx.monitor(&p, &mut cmds, false).await,
        };
        match event {
            Event::Exited(why) => {
                ctx.note_exited(&p, &why);
                if ctx
                    .pause_before_restart(&mut recent, &mut cmds)
                    .await
                    .is_err()
                {
                    return;
                }
            }
            Event::Suspect(why) => {
                let port = ctx.pick_port(Some(p.backend.addr().port()));
                match ctx.replace_suspect(p, port, &why, &mut cmds).await {
                    Early::Replaced(new) => {
                        last_port = Some(port);
                        current = Some(new);
                    }
                    Early::Kept(p) => current = Some(p),
                    Early::Lost => {
                        last_port = Some(port);
                        if ctx
                            .pause_before_restart(&mut recent, &mut cmds)
                            .await
                            .is_err()
                        {
                            return;
                        }
                    }
                    Early::Stopped => return,
                }
            }
            Event::Recovered => current = Some(p),
            Event::Unhealthy(why) => {
                // Out of rotation at once, its waiting requests sent elsewhere; the
                // replacement starts on the other port while the stuck one is stopped.
                let grace = ctx.retire_unhealthy(&p, &why).await;
                ctx.stop_later(p, grace);
                if ctx
                    .pause_before_restart(&mut recent, &mut cmds)
                    .await
                    .is_err()
                {
                    return;
                }
            }
            Event::Cmd(SlotCmd::Reload(reply)) => {
                // A live reload's new config, if any, for the new process only: the old
                // one keeps its settings until it is gone.
                let previous = ctx.adopt_next_cfg();
                let port = ctx.pick_port(Some(p.backend.addr().port()));
                let mut old_exit_seen = false;
                let result = {
                    let start = ctx.start(port);
                    tokio::pin!(start);
                    loop {
                        tokio::select! {
                            r = &mut start => break r,
                            _ = p.wait_exit(), if !old_exit_seen => {
                                // The old worker died meanwhile: out of rotation now.
                                old_exit_seen = true;
                                ctx.pool.remove(&p.backend);
                            }
                        }
                    }
                };
                match result {
                    Ok(new) => {
                        last_port = Some(port);
                        ctx.admit(&new);
                        let grace = previous
                            .as_ref()
                            .map_or(ctx.cfg.stop_grace, |c| c.stop_grace);
                        ctx.drain_and_stop_with(&p, grace).await;
                        ctx.metrics.reloads.fetch_add(1, Ordering::Relaxed);
                        info!(
                            app = %ctx.cfg.name,
                            worker = ctx.slot.index,
                            old_pid = p.backend.pid(),
                            pid = new.backend.pid(),
                            port = new.backend.addr().port(),
                            "worker reloaded"
                        );
                        let _ = reply.send(Ok(()));
                        current = Some(new);
                    }
                    Err((new, why)) => {
                        if let Some(new) = &new {
                            SlotCtx::stop(new, ctx.cfg.stop_grace, &ctx.hurry).await;
                        }
                        // Keep serving with the old worker, under its own settings.
                        if let Some(previous) = previous {
                            ctx.set_cfg(previous);
                        }
                        ctx.slot.current.store(Some(p.backend.clone()));
                        warn!(app = %ctx.cfg.name, worker = ctx.slot.index, reason = %why,
                            "reload: new worker did not become ready; old one kept");
                        let _ = reply.send(Err(format!("{}: {why}", ctx.name())));
                        if old_exit_seen {
                            p.backend.set_state(WorkerState::Stopped);
                        } else {
                            current = Some(p);
                        }
                    }
                }
            }
            Event::Cmd(SlotCmd::Stop(reply)) => {
                ctx.drain_and_stop(&p).await;
                let _ = reply.send(());
                return;
            }
            Event::CmdsClosed => {
                ctx.drain_and_stop(&p).await;
                return;
            }
        }
    }
}

fn describe_exit(st: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (st.code(), st.signal()) {
        (Some(c), _) => format!("exit code {c}"),
        (None, Some(s)) => {
            let name = Signal::try_from(s).map_or_else(|_| s.to_string(), |s| s.to_string());
            format!("killed by {name}")
        }
        _ => st.to_string(),
    }
}

/// Forwards a worker's output line by line, prefixed with `[app#index]`. A line is
/// held only up to `max` bytes: the rest of a longer one (a worker writing megabytes
/// without a newline) is skipped and the line marked and counted as cut, so memory stays
/// bounded whatever the worker writes. Lines the sink cannot take at once are dropped and
/// counted: the worker and the supervisor never wait for scalpel's own output.
async fn forward_lines(
    stream: impl AsyncRead + Unpin,
    name: Arc<str>,
    is_err: bool,
    logs: LogSink,
    max: usize,
    metrics: Arc<AppMetrics>,
) {
    let mut reader = BufReader::with_capacity(64 * 1024, stream);
    let mut line: Vec<u8> = Vec::new();
    let mut cut: u64 = 0;
    loop {
        let (used, complete) = {
            let buf = match reader.fill_buf().await {
                Ok(b) if !b.is_empty() => b,
                _ => break,
            };
            let (piece, complete) = match buf.iter().position(|&b| b == b'\n') {
                Some(i) => (&buf[..i], true),
                None => (buf, false),
            };
            let take = piece.len().min(max.saturating_sub(line.len()));
            line.extend_from_slice(&piece[..take]);
            cut += (piece.len() - take) as u64;
            (piece.len() + usize::from(complete), complete)
        };
        reader.consume(used);
        if complete {
            emit_line(&name, is_err, &line, cut, &logs, &metrics);
            line.clear();
            cut = 0;
        }
    }
    if !line.is_empty() || cut > 0 {
        emit_line(&name, is_err, &line, cut, &logs, &metrics);
    }
}

fn emit_line(
    name: &str,
    is_err: bool,
    line: &[u8],
    cut: u64,
    logs: &LogSink,
    metrics: &AppMetrics,
) {
    let mut line = line;
    while let [rest @ .., b'\r'] = line {
        line = rest;
    }
    let mut text = format!("[{name}] {}", String::from_utf8_lossy(line));
    if cut > 0 {
        metrics.log_lines_cut.fetch_add(1, Ordering::Relaxed);
        text.push_str(&format!(" [... line cut: {cut} more bytes]"));
    }
    if !logs.push(is_err, text) {
        metrics.log_lines_dropped.fetch_add(1, Ordering::Relaxed);
    }
}

/// Fails when something already listens on `port` (or holds it), naming the holder.
fn port_free(port: u16) -> Result<(), String> {
    match std::net::TcpListener::bind(("127.0.0.1", port)) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => Err(format!(
            "port {port} is already in use ({}): a leftover worker of an earlier run, or \
             another scalpel serve with the same port_base?",
            port_holder(port)
        )),
        // Not ours to judge (no permission for a low port, …): the worker will say.
        Err(_) => Ok(()),
    }
}

/// Who listens on `port`, for an error message.
fn port_holder(port: u16) -> String {
    match scalpel_procstat::pid_listening_on(port) {
        Ok(pid) => {
            let name = scalpel_procstat::process_name(pid).unwrap_or_default();
            format!("held by pid {pid} `{name}`")
        }
        Err(scalpel_procstat::ProcStatError::NotListening { .. }) => {
            "held by a connection, not a listener".into()
        }
        Err(_) => "held by a process this user cannot see".into(),
    }
}

/// Why a worker could not be started, blaming the right thing: the working directory,
/// the program, or the system.
fn spawn_error(cfg: &AppConfig, e: &std::io::Error) -> String {
    let program = &cfg.command[0];
    if let Some(dir) = &cfg.cwd
        && !dir.is_dir()
    {
        return format!("cannot start in cwd {}: no such directory", dir.display());
    }
    match e.kind() {
        std::io::ErrorKind::NotFound => format!(
            "cannot start `{program}`: program not found{}",
            if program.contains('/') {
                String::new()
            } else {
                " on PATH".into()
            }
        ),
        std::io::ErrorKind::PermissionDenied => {
            format!("cannot start `{program}`: not executable (permission denied)")
        }
        _ => format!("cannot start `{program}`: {e}"),
    }
}

/// Makes the worker die (SIGKILL) when the balancer dies, even by SIGKILL, when nobody
/// is left to stop it. (Linux: the signal follows the *thread* that spawned the child;
/// workers are spawned from the control-plane runtime, whose threads live as long as it.)
fn die_with_parent(cmd: &mut tokio::process::Command) {
    let parent = rustix::process::getpid();
    // SAFETY: the closure runs in the forked child of a multi-threaded process, before
    // exec, where only async-signal-safe work is allowed: `after_fork` makes two system
    // calls (prctl, getppid) and builds its error from an errno, allocating nothing and
    // taking no lock (a test counts its allocations).
    #[allow(unsafe_code)]
    unsafe {
        cmd.pre_exec(move || after_fork(parent));
    }
}

/// A worker's whole environment, built before fork so that the child only fills in
/// `LISTEN_PID` (its own pid, unknown before fork) and points `environ` at it.
struct DirectEnv {
    _vars: Vec<std::ffi::CString>,
    ptrs: Vec<*const std::ffi::c_char>,
    /// The ten digit places of `LISTEN_PID=`, inside one of `_vars`' buffers.
    pid_digits: *mut u8,
}

// SAFETY: the raw pointers point into `_vars`, owned by the same value and never
// reallocated after construction.
#[allow(unsafe_code)]
unsafe impl Send for DirectEnv {}
#[allow(unsafe_code)]
unsafe impl Sync for DirectEnv {}

impl DirectEnv {
    fn new(vars: BTreeMap<OsString, OsString>) -> Result<Self, std::ffi::NulError> {
        use std::os::unix::ffi::OsStrExt;
        let mut owned = Vec::with_capacity(vars.len() + 1);
        for (k, v) in vars.iter().filter(|(k, _)| k.as_bytes() != b"LISTEN_PID") {
            let mut kv = k.as_bytes().to_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            owned.push(std::ffi::CString::new(kv)?);
        }
        // Ten places hold any pid (at most 2^22 on Linux); unused ones stay NUL.
        let pid = std::ffi::CString::new("LISTEN_PID=0000000000")?;
        let pid_digits = {
            let bytes = pid.as_bytes().as_ptr().cast_mut();
            // SAFETY: 11 is the length of `LISTEN_PID=`, within the 21-byte buffer.
            #[allow(unsafe_code)]
            unsafe {
                bytes.add(11)
            }
        };
        // Moving a CString moves its heap pointer, not its buffer.
        owned.push(pid);
        let mut ptrs: Vec<_> = owned.iter().map(|c| c.as_ptr()).collect();
        ptrs.push(std::ptr::null());
        Ok(DirectEnv {
            _vars: owned,
            ptrs,
            pid_digits,
        })
    }

    /// Writes `pid` in decimal into the `LISTEN_PID` buffer; async-signal-safe.
    fn set_pid(&self, pid: u32) {
        let mut digits = [0u8; 10];
        let mut n = pid;
        let mut len = 0;
        loop {
            digits[len] = b'0' + (n % 10) as u8;
            len += 1;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        for i in 0..10 {
            let b = if i < len { digits[len - 1 - i] } else { 0 };
            // SAFETY: `pid_digits` points at ten writable bytes of a buffer this value owns.
            #[allow(unsafe_code)]
            unsafe {
                *self.pid_digits.add(i) = b;
            }
        }
    }
}

#[allow(unsafe_code)]
unsafe extern "C" {
    static mut environ: *const *const std::ffi::c_char;
}

/// Socket activation (systemd's convention): the child gets `sock` on fd 3 and the
/// environment of `env` with `LISTEN_PID` set to its own pid; plus [`die_with_parent`].
/// The Command's own environment stays untouched, so std execs with `environ`, which the
/// child points at `env` (its copy of the parent's memory) right before exec.
fn socket_activation(cmd: &mut tokio::process::Command, sock: std::os::fd::RawFd, env: DirectEnv) {
    let parent = rustix::process::getpid();
    // SAFETY: as in `die_with_parent`: only system calls (prctl, getppid, getpid, dup2,
    // fcntl) and writes into memory allocated before fork; no allocation, no lock.
    #[allow(unsafe_code)]
    unsafe {
        cmd.pre_exec(move || {
            after_fork(parent)?;
            direct_after_fork(sock, &env)
        });
    }
}

/// The child's side of [`socket_activation`]; async-signal-safe.
fn direct_after_fork(sock: std::os::fd::RawFd, env: &DirectEnv) -> std::io::Result<()> {
    use std::os::fd::BorrowedFd;
    // SAFETY: `sock` is the listener the parent keeps open for the app's lifetime.
    #[allow(unsafe_code)]
    let fd = unsafe { BorrowedFd::borrow_raw(sock) };
    if sock == 3 {
        // dup2 onto itself keeps close-on-exec: clear it instead.
        rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::empty())?;
    } else {
        // SAFETY: fd 3 in the child is at most a close-on-exec descriptor of the parent's
        // runtime (epoll, eventfd), opened long before any worker; dup2 replaces it.
        #[allow(unsafe_code)]
        let mut three = unsafe { std::os::fd::OwnedFd::from_raw_fd(3) };
        let r = rustix::io::dup2(fd, &mut three);
        std::mem::forget(three);
        r?;
    }
    env.set_pid(rustix::process::getpid().as_raw_nonzero().get() as u32);
    // SAFETY: the child is single-threaded here; `env.ptrs` is a NULL-terminated array of
    // NUL-terminated strings that lives until exec (the closure owns it).
    #[allow(unsafe_code)]
    unsafe {
        environ = env.ptrs.as_ptr();
    }
    Ok(())
}

/// The child's side of [`die_with_parent`]; async-signal-safe.
fn after_fork(parent: rustix::process::Pid) -> std::io::Result<()> {
    rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))?;
    // The balancer died between fork and prctl: no signal will come. An errno, not a
    // message: `io::Error::other` would allocate here.
    if rustix::process::getppid() != Some(parent) {
        return Err(rustix::io::Errno::SRCH.into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;
    use std::sync::atomic::AtomicUsize;

    /// Counts the allocations the current thread makes while watched.
    struct Counting;

    static WATCHED_ALLOCS: AtomicUsize = AtomicUsize::new(0);

    thread_local! {
        static WATCHING: Cell<bool> = const { Cell::new(false) };
    }

    // SAFETY: forwards to the system allocator unchanged; the counting touches only an
    // atomic and a const-initialized thread-local (no allocation, no lock).
    #[allow(unsafe_code)]
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            if WATCHING.with(Cell::get) {
                WATCHED_ALLOCS.fetch_add(1, Ordering::Relaxed);
            }
            // SAFETY: the caller's contract is passed on to the system allocator.
            unsafe { System.alloc(layout) }
        }

        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            // SAFETY: as above.
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    #[global_allocator]
    static ALLOCATOR: Counting = Counting;

    fn allocations_of<T>(f: impl FnOnce() -> T) -> (T, usize) {
        let before = WATCHED_ALLOCS.load(Ordering::Relaxed);
        WATCHING.with(|w| w.set(true));
        let out = f();
        WATCHING.with(|w| w.set(false));
        (out, WATCHED_ALLOCS.load(Ordering::Relaxed) - before)
    }

    /// Issue 14 — the child writes its pid into the prepared environment without
    /// allocating, and the entry reads as `LISTEN_PID=<pid>` (no leftover digits).
    #[test]
    fn listen_pid_is_written_in_place_without_allocating() {
        let vars = BTreeMap::from([(OsString::from("LISTEN_PID"), OsString::from("stale"))]);
        let env = DirectEnv::new(vars).unwrap();
        for pid in [4_194_303u32, 7, 123_456] {
            let ((), n) = allocations_of(|| env.set_pid(pid));
            assert_eq!(n, 0);
            let entries: Vec<String> = env.ptrs[..env.ptrs.len() - 1]
                .iter()
                // SAFETY: each pointer is a NUL-terminated string owned by `env`.
                .map(|&p| {
                    #[allow(unsafe_code)]
                    unsafe { std::ffi::CStr::from_ptr(p) }
                        .to_string_lossy()
                        .into_owned()
                })
                .collect();
            assert_eq!(entries, vec![format!("LISTEN_PID={pid}")]);
        }
    }

    /// Between fork and exec only async-signal-safe work is allowed: no allocation (the
    /// allocator's lock may be held by a thread that no longer exists in the child), on
    /// the success path and on the error path alike.
    #[test]
    fn the_pre_exec_hook_allocates_nothing() {
        let parent = rustix::process::getppid().expect("the test has a parent");
        let (ok, n) = allocations_of(|| after_fork(parent));
        // Undo the death signal this test set on itself.
        let _ = rustix::process::set_parent_process_death_signal(None);
        assert!(ok.is_ok(), "{ok:?}");
        assert_eq!(n, 0, "allocations on the success path");
        // A "parent" that is not ours: the error path, as when the balancer died.
        let (err, n) = allocations_of(|| after_fork(rustix::process::getpid()));
        let _ = rustix::process::set_parent_process_death_signal(None);
        let err = err.expect_err("a foreign parent is an error");
        assert_eq!(n, 0, "allocations on the error path: {err}");
        assert_eq!(
            err.raw_os_error(),
            Some(rustix::io::Errno::SRCH.raw_os_error())
        );
    }
}
