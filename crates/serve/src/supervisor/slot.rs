//! One worker slot: its shared face ([`Slot`], the commands it takes), and its context
//! (`SlotCtx`) — how it picks a port, starts a process and admits it once healthy,
//! watches it, and takes it out (drained, ejected, stopped) — for the slot's task
//! (`task`) and the `prestart` path (`prestart`).

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::sync::{mpsc, oneshot, watch};
use tracing::{error, info, warn};

use super::logs::{self, LogSink};
use super::preload::{self, Beat, Pipe, PreloadFile};
use super::spawn::{self, describe_exit, port_free, spawn_error};
use crate::backend::{Backend, Eject, WorkerState};
use crate::config::AppConfig;
use crate::counters::{AppMetrics, RestartReason};
use crate::health::{self, HealthCheck, Target};
use crate::pool::Pool;

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

impl Slot {
    /// Slot `index`, and the receiving end of its commands (for its task).
    pub(super) fn new(index: usize) -> (Arc<Slot>, mpsc::Receiver<SlotCmd>) {
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
        (slot, rx)
    }
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
    /// The Node preload's file, when an app of the config uses it.
    pub(crate) preload: Option<Arc<PreloadFile>>,
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
        preload: Option<Arc<PreloadFile>>,
    ) -> Self {
        Self {
            logs,
            log_line_max,
            drain_timeout,
            hurry,
            direct,
            preload,
            stopping: Arc::default(),
        }
    }
}

#[derive(Debug)]
pub(super) struct SlotCtx {
    pub(super) cfg: Arc<AppConfig>,
    pub(super) pool: Arc<Pool>,
    pub(super) metrics: Arc<AppMetrics>,
    pub(super) slot: Arc<Slot>,
    pub(super) health: Box<dyn HealthCheck>,
    pub(super) logs: LogSink,
    pub(super) log_line_max: usize,
    pub(super) drain_timeout: Duration,
    pub(super) hurry: Arc<Hurry>,
    /// A direct app's listening socket, handed to each worker on fd 3.
    pub(super) direct: Option<Arc<std::net::TcpListener>>,
    pub(super) preload: Option<Arc<PreloadFile>>,
    pub(super) stopping: Arc<Mutex<BTreeMap<u16, watch::Receiver<bool>>>>,
    /// The slot was added by a live reload: other slots' processes may hold a port of
    /// its pair (see [`SlotCtx::pick_port`]).
    pub(super) added_live: bool,
}

impl SlotCtx {
    /// The context of `slot` of the app of `cfg`; `added_live`: a live reload added it.
    pub(super) fn new(
        cfg: &Arc<AppConfig>,
        pool: &Arc<Pool>,
        metrics: &Arc<AppMetrics>,
        slot: Arc<Slot>,
        env: &AppEnv,
        added_live: bool,
    ) -> Self {
        SlotCtx {
            cfg: cfg.clone(),
            pool: pool.clone(),
            metrics: metrics.clone(),
            slot,
            health: health::for_kind(&cfg.health, cfg.health_timeout),
            logs: env.logs.clone(),
            log_line_max: env.log_line_max,
            drain_timeout: env.drain_timeout,
            hurry: env.hurry.clone(),
            direct: env.direct.clone(),
            preload: env.preload.clone(),
            stopping: env.stopping.clone(),
            added_live,
        }
    }
}

/// A spawned worker process.
#[derive(Debug)]
pub(super) struct Proc {
    pub(super) backend: Arc<Backend>,
    /// `Some(description)` once the process has exited.
    pub(super) exit: watch::Receiver<Option<String>>,
    /// What its Node preload says (Node workers).
    pub(super) beat: Option<Arc<Beat>>,
    /// A direct worker with no listener on its own port: its probes look at the shared
    /// socket (the inode) instead (see `ready`).
    pub(super) shared_only: Option<u64>,
    /// A Node worker that never listened (a queue worker): supervised, no traffic.
    pub(super) no_server: bool,
}

impl Proc {
    /// What a health probe looks at.
    pub(super) fn target(&self) -> Target {
        Target {
            addr: self.backend.addr(),
            pid: self.backend.pid(),
            beat: self.beat.clone(),
        }
    }

    pub(super) fn exited(&self) -> Option<String> {
        self.exit.borrow().clone()
    }

    pub(super) async fn wait_exit(&self) -> String {
        let mut rx = self.exit.clone();
        match rx.wait_for(|e| e.is_some()).await {
            Ok(e) => e.clone().unwrap_or_default(),
            Err(_) => "exit watcher gone".into(),
        }
    }
}

pub(super) enum Event {
    Exited(String),
    Unhealthy(String),
    /// With `prestart`: the first failed probe of a worker answering nothing.
    Suspect(String),
    /// A suspect passed a probe (or answered a request) again.
    Recovered,
    Cmd(SlotCmd),
    CmdsClosed,
}

impl SlotCtx {
    pub(super) fn name(&self) -> String {
        format!("{}#{}", self.cfg.name, self.slot.index)
    }

    /// Switches to `cfg` (and a health check made for it).
    pub(super) fn set_cfg(&mut self, cfg: Arc<AppConfig>) {
        self.health = health::for_kind(&cfg.health, cfg.health_timeout);
        self.cfg = cfg;
    }

    /// Takes the config a live reload left for this slot, if any; returns the one it
    /// replaces (to go back to if the new process does not become ready).
    pub(super) fn adopt_next_cfg(&mut self) -> Option<Arc<AppConfig>> {
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
    pub(super) fn pick_port(&self, avoid: Option<u16>) -> u16 {
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

    /// Starts the slot's next process on `port` (see `spawn`), its output forwarded and
    /// its exit watched; it becomes the slot's current process.
    fn spawn(&self, port: u16) -> Result<Proc, String> {
        let cfg = &self.cfg;
        // A port someone else listens on would answer this worker's health checks: a
        // leftover worker of an earlier run, another balancer with the same ports.
        port_free(port)?;
        let capture = !matches!(self.logs, LogSink::Discard);
        let pipe = match (&self.preload, cfg.preload) {
            (Some(_), true) => Some(Pipe::new().map_err(|e| format!("preload pipe: {e}"))?),
            _ => None,
        };
        let preload = self
            .preload
            .as_deref()
            .zip(pipe.as_ref())
            .map(|(file, pipe)| spawn::Preload { file, pipe });
        let mut cmd = spawn::command(
            cfg,
            self.slot.index,
            port,
            self.direct.as_deref(),
            preload,
            capture,
        )?;
        let mut child = cmd.spawn().map_err(|e| spawn_error(cfg, &e))?;
        // The write end is the worker's alone now: its exit ends the reader.
        let beat = match pipe {
            Some(Pipe { read, write }) => {
                drop(write);
                Some(preload::watch(read).map_err(|e| format!("preload pipe: {e}"))?)
            }
            None => None,
        };
        let pid = child.id().unwrap_or(0);
        let name: Arc<str> = self.name().into();
        logs::forward(
            &mut child,
            &name,
            &self.logs,
            self.log_line_max,
            &self.metrics,
        );
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
        Ok(Proc {
            backend,
            exit: rx,
            beat,
            shared_only: None,
            no_server: false,
        })
    }

    /// Spawns on `port` and waits for the proof that it is ready (`ready`).
    pub(super) async fn start(&self, port: u16) -> Result<Proc, (Option<Proc>, String)> {
        self.wait_port_released(port).await;
        let p = self.spawn(port).map_err(|e| (None, e))?;
        self.until_ready(p).await
    }

    pub(super) fn admit(&self, p: &Proc) {
        if p.no_server {
            return;
        }
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
    pub(super) async fn monitor(
        &self,
        p: &Proc,
        cmds: &mut mpsc::Receiver<SlotCmd>,
        suspect: bool,
    ) -> Event {
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
                    let result = match p.shared_only {
                        Some(inode) => super::ready::still_polls(&p.target(), inode).await,
                        None => self.health.check(&p.target()).await,
                    };
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
    pub(super) async fn stop(p: &Proc, grace: Duration, hurry: &Hurry) {
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
    pub(super) async fn drain_and_stop(&self, p: &Proc) {
        self.drain_and_stop_with(p, self.cfg.stop_grace).await;
    }

    /// [`Self::drain_and_stop`] with the grace period of the process's own config.
    pub(super) async fn drain_and_stop_with(&self, p: &Proc, grace: Duration) {
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
    pub(super) fn note_exited(&self, p: &Proc, why: &str) {
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
    pub(super) async fn retire_unhealthy(&self, p: &Proc, why: &str) -> Duration {
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
    pub(super) fn stop_later(&self, p: Proc, grace: Duration) {
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

    pub(super) fn log_restart(
        &self,
        reason: RestartReason,
        detail: &str,
        pid: u32,
        uptime_s: f64,
    ) -> u64 {
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
    pub(super) async fn pause_before_restart(
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
