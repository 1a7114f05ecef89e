//! The supervisor owns every worker process: it spawns each on its own port, admits it
//! to the pool once its health check passes, probes it at an interval, and replaces it
//! when it exits or stops answering, with exponential back-off and a restart budget.
//! Each worker slot is one task; commands (reload, stop) reach it over a channel, so
//! the slot's state has a single owner.

use std::collections::VecDeque;
use std::net::SocketAddr;
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

use crate::config::AppConfig;
use crate::health::{HealthCheck, HttpHealthCheck};
use crate::metrics::{AppMetrics, RestartReason};
use crate::pool::{Backend, Pool, WorkerState};

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
    /// Why and when the slot last restarted (the live page); written by the slot's own
    /// task, read by the admin endpoint, never on a request path.
    pub(crate) last_restart: Mutex<Option<(RestartReason, Instant)>>,
    cmds: mpsc::Sender<SlotCmd>,
}

impl Slot {
    pub(crate) async fn send(&self, cmd: SlotCmd) -> bool {
        self.cmds.send(cmd).await.is_ok()
    }
}

/// An app at run time: its config, its pool, its metrics and its slots.
#[derive(Debug)]
pub(crate) struct App {
    pub(crate) cfg: Arc<AppConfig>,
    pub(crate) pool: Arc<Pool>,
    pub(crate) metrics: Arc<AppMetrics>,
    pub(crate) slots: Vec<Arc<Slot>>,
}

#[derive(Debug)]
struct SlotCtx {
    cfg: Arc<AppConfig>,
    pool: Arc<Pool>,
    metrics: Arc<AppMetrics>,
    slot: Arc<Slot>,
    health: Box<dyn HealthCheck>,
    logs: WorkerLogs,
    drain_timeout: Duration,
}

/// Starts the slots of `cfg`; each begins spawning its worker at once.
pub(crate) fn start_app(cfg: Arc<AppConfig>, logs: WorkerLogs, drain_timeout: Duration) -> App {
    let pool = Arc::new(Pool::new(cfg.balance));
    let metrics = Arc::new(AppMetrics::new());
    let mut slots = Vec::new();
    for index in 0..cfg.workers {
        let (tx, rx) = mpsc::channel(8);
        let slot = Arc::new(Slot {
            index,
            current: ArcSwapOption::empty(),
            restarts: AtomicU64::new(0),
            failed: AtomicBool::new(false),
            last_restart: Mutex::new(None),
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
            logs: logs.clone(),
            drain_timeout,
        };
        tokio::spawn(run_slot(ctx, rx));
        slots.push(slot);
    }
    App {
        cfg,
        pool,
        metrics,
        slots,
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

    fn spawn(&self, port: u16) -> Result<Proc, String> {
        let cfg = &self.cfg;
        let index = self.slot.index.to_string();
        let port_s = port.to_string();
        // `{port}` and `{index}` in arguments, for programs that take a flag, not $PORT.
        let args = cfg.command[1..]
            .iter()
            .map(|a| a.replace("{port}", &port_s).replace("{index}", &index));
        let mut cmd = tokio::process::Command::new(&cfg.command[0]);
        cmd.args(args)
            .envs(&cfg.env)
            .env(&cfg.port_env, port.to_string())
            .env(&cfg.index_env, self.slot.index.to_string())
            .stdin(Stdio::null())
            // Its own process group: a terminal's Ctrl-C reaches the balancer only, which
            // then drains before stopping workers; stopping signals the whole group.
            .process_group(0)
            .kill_on_drop(true);
        die_with_parent(&mut cmd);
        let capture = !matches!(self.logs, WorkerLogs::Discard);
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
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {:?}: {e}", cfg.command[0]))?;
        let pid = child.id().unwrap_or(0);
        let name = self.name();
        if let Some(out) = child.stdout.take() {
            tokio::spawn(forward_lines(out, name.clone(), false, self.logs.clone()));
        }
        if let Some(err) = child.stderr.take() {
            tokio::spawn(forward_lines(err, name, true, self.logs.clone()));
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
        let p = self.spawn(port).map_err(|e| (None, e))?;
        let deadline = Instant::now() + self.cfg.start_timeout;
        // Poll faster than the steady-state interval: readiness gates traffic.
        let poll = self.cfg.health_interval.min(Duration::from_millis(100));
        loop {
            if let Some(e) = p.exited() {
                return Err((Some(p), format!("exited while starting ({e})")));
            }
            if self.health.check(p.backend.addr()).await.is_ok() {
                return Ok(p);
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

    /// SIGTERM to the worker's process group, SIGKILL after the grace period.
    async fn stop(p: &Proc, grace: Duration) {
        p.backend.set_state(WorkerState::Draining);
        let pid = Pid::from_raw(p.backend.pid() as i32);
        if p.exited().is_none() && p.backend.pid() > 0 {
            let _ = killpg(pid, Signal::SIGTERM);
            if tokio::time::timeout(grace, p.wait_exit()).await.is_err() {
                let _ = killpg(pid, Signal::SIGKILL);
                let _ = tokio::time::timeout(Duration::from_secs(10), p.wait_exit()).await;
            }
        }
        // Children of the worker that outlived it.
        let _ = killpg(pid, Signal::SIGKILL);
        p.backend.set_state(WorkerState::Stopped);
    }

    /// Out of the pool, wait for its in-flight requests (bounded), then stop it.
    async fn drain_and_stop(&self, p: &Proc) {
        self.pool.remove(&p.backend);
        p.backend.set_state(WorkerState::Draining);
        let deadline = Instant::now() + self.drain_timeout;
        while p.backend.in_flight() > 0 && Instant::now() < deadline && p.exited().is_none() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Self::stop(p, self.cfg.stop_grace).await;
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
        p.backend.eject();
        self.log_restart(
            RestartReason::Unhealthy,
            why,
            p.backend.pid(),
            p.backend.uptime_s(),
        );
    }

    /// Stops `p` in the background (a stuck worker may take the whole grace period).
    fn stop_later(&self, p: Proc) {
        let grace = self.cfg.stop_grace;
        tokio::spawn(async move { SlotCtx::stop(&p, grace).await });
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
        let started = loop {
            tokio::select! {
                r = &mut start => break r,
                e = &mut watch, if verdict.is_none() => {
                    match &e {
                        Event::Unhealthy(why) => {
                            // Out now, its waiting requests elsewhere; stopped below.
                            self.eject(&p, why);
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
                    SlotCtx::stop(new, self.cfg.stop_grace).await;
                }
                self.slot.current.store(Some(p.backend.clone()));
                warn!(app = %self.cfg.name, worker = self.slot.index, reason = %why,
                    "early successor did not become ready");
                return match verdict {
                    _ if gone => {
                        self.stop_later(p);
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
                p.backend.eject();
                watch.as_mut().await
            }
        };
        drop(watch);
        match verdict {
            _ if gone => self.stop_later(p),
            Event::Unhealthy(why) => {
                self.eject(&p, &why);
                self.stop_later(p);
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
                let _ = reply.send(Ok(()));
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

async fn run_slot(ctx: SlotCtx, mut cmds: mpsc::Receiver<SlotCmd>) {
    let ports = ctx.cfg.ports(ctx.slot.index);
    let mut next_port = 0usize;
    let mut recent: VecDeque<Instant> = VecDeque::new();
    let mut current: Option<Proc> = None;
    loop {
        let p = match current.take() {
            Some(p) => p,
            None => {
                let port = ports[next_port];
                next_port ^= 1;
                let started = {
                    let start = ctx.start(port);
                    tokio::pin!(start);
                    // A stop during start-up must not wait for the start time-out.
                    loop {
                        tokio::select! {
                            r = &mut start => break Some(r),
                            c = cmds.recv() => match c {
                                Some(SlotCmd::Reload(reply)) => { let _ = reply.send(Ok(())); }
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
                            SlotCtx::stop(p, ctx.cfg.stop_grace).await;
                        }
                        ctx.log_restart(RestartReason::StartFailed, &why, pid, up);
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
        match ctx.monitor(&p, &mut cmds, false).await {
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
                let port = ports[next_port];
                match ctx.replace_suspect(p, port, &why, &mut cmds).await {
                    Early::Replaced(new) => {
                        next_port ^= 1;
                        current = Some(new);
                    }
                    Early::Kept(p) => current = Some(p),
                    Early::Lost => {
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
                ctx.eject(&p, &why);
                ctx.stop_later(p);
                if ctx
                    .pause_before_restart(&mut recent, &mut cmds)
                    .await
                    .is_err()
                {
                    return;
                }
            }
            Event::Cmd(SlotCmd::Reload(reply)) => {
                let port = ports[next_port];
                let start = ctx.start(port);
                tokio::pin!(start);
                let mut old_exit_seen = false;
                let result = loop {
                    tokio::select! {
                        r = &mut start => break r,
                        _ = p.wait_exit(), if !old_exit_seen => {
                            // The old worker died meanwhile: out of rotation now.
                            old_exit_seen = true;
                            ctx.pool.remove(&p.backend);
                        }
                    }
                };
                match result {
                    Ok(new) => {
                        next_port ^= 1;
                        ctx.admit(&new);
                        ctx.drain_and_stop(&p).await;
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
                            SlotCtx::stop(new, ctx.cfg.stop_grace).await;
                        }
                        // Keep serving with the old worker.
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

async fn forward_lines(
    stream: impl AsyncRead + Unpin,
    name: String,
    is_err: bool,
    logs: WorkerLogs,
) {
    use std::io::Write as _;
    let mut reader = BufReader::new(stream);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match reader.read_until(b'\n', &mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        while buf.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
            buf.pop();
        }
        let line = format!("[{name}] {}", String::from_utf8_lossy(&buf));
        match &logs {
            WorkerLogs::Inherit => {
                // One write per line so lines of different workers do not interleave.
                let _ = if is_err {
                    writeln!(std::io::stderr().lock(), "{line}")
                } else {
                    writeln!(std::io::stdout().lock(), "{line}")
                };
            }
            WorkerLogs::Capture(b) => b.push(line),
            WorkerLogs::Discard => {}
        }
    }
}

/// Makes the worker die (SIGKILL) when the balancer dies, even by SIGKILL, when nobody
/// is left to stop it. (Linux: the signal follows the *thread* that spawned the child;
/// workers are spawned from the control-plane runtime, whose threads live as long as it.)
fn die_with_parent(cmd: &mut tokio::process::Command) {
    let parent = rustix::process::getpid();
    // SAFETY: the closure runs in the forked child before exec and only makes two
    // async-signal-safe system calls (prctl, getppid); it allocates nothing and takes no
    // lock.
    #[allow(unsafe_code)]
    unsafe {
        cmd.pre_exec(move || {
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))?;
            // The balancer died between fork and prctl: no signal will come.
            if rustix::process::getppid() != Some(parent) {
                return Err(std::io::Error::other(
                    "the balancer exited during the spawn",
                ));
            }
            Ok(())
        });
    }
}
