//! A slot's task: the one owner of the slot's process. It starts a process (again after
//! each failure, within the restart budget and its back-off), watches it, and acts on
//! what happens to it — an exit, a failed health check, a stall (`prestart`), a reload or
//! a stop.

use std::collections::VecDeque;
use std::ops::ControlFlow;
use std::sync::atomic::Ordering;
use std::time::Instant;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::sync::{mpsc, oneshot};
use tracing::{info, warn};

use super::prestart::Early;
use super::slot::{Event, Proc, SlotCmd, SlotCtx};
use crate::backend::WorkerState;
use crate::counters::RestartReason;

/// Runs the slot of `ctx` until it is stopped (or its commands end).
pub(super) async fn run_slot(ctx: SlotCtx, cmds: mpsc::Receiver<SlotCmd>) {
    let mut task = SlotTask {
        ctx,
        cmds,
        last_port: None,
        recent: VecDeque::new(),
        current: None,
        deferred: None,
    };
    while let Some(p) = task.process().await {
        let event = match task.deferred.take() {
            Some(reply) => Event::Cmd(SlotCmd::Reload(reply)),
            None => task.ctx.monitor(&p, &mut task.cmds, false).await,
        };
        if task.on_event(p, event).await.is_break() {
            return;
        }
    }
}

/// A slot's task and what it keeps between events.
struct SlotTask {
    ctx: SlotCtx,
    cmds: mpsc::Receiver<SlotCmd>,
    /// The port of the slot's latest process: the next one takes the other of its pair.
    last_port: Option<u16>,
    /// Recent restarts, for the budget and the back-off.
    recent: VecDeque<Instant>,
    /// The process to watch next, when the last event kept one.
    current: Option<Proc>,
    /// A reload with a new config that came while a process was starting under the old
    /// one: done as soon as that process is ready.
    deferred: Option<oneshot::Sender<Result<(), String>>>,
}

impl SlotTask {
    /// The process to watch: the current one, or a new one started (again after each
    /// start failure, within the restart budget); `None` when the slot is to end.
    async fn process(&mut self) -> Option<Proc> {
        if let Some(p) = self.current.take() {
            return Some(p);
        }
        loop {
            // A reload that came while the slot had no process applies now.
            self.ctx.adopt_next_cfg();
            let port = self.ctx.pick_port(self.last_port);
            self.last_port = Some(port);
            match self.start(port).await {
                None => {
                    if let Some(b) = self.ctx.slot.current.load_full() {
                        let _ = killpg(Pid::from_raw(b.pid() as i32), Signal::SIGKILL);
                        b.set_state(WorkerState::Stopped);
                    }
                    return None;
                }
                Some(Ok(p)) => {
                    self.ctx.admit(&p);
                    return Some(p);
                }
                Some(Err((p, why))) => {
                    let (pid, up) = p
                        .as_ref()
                        .map_or((0, 0.0), |p| (p.backend.pid(), p.backend.uptime_s()));
                    if let Some(p) = &p {
                        SlotCtx::stop(p, self.ctx.cfg.stop_grace, &self.ctx.hurry).await;
                    }
                    self.ctx
                        .log_restart(RestartReason::StartFailed, &why, pid, up);
                    // The next start takes the new config.
                    if let Some(reply) = self.deferred.take() {
                        let _ = reply.send(Ok(()));
                    }
                    if self.pause().await.is_break() {
                        return None;
                    }
                }
            }
        }
    }

    /// Starts a process on `port`, answering commands meanwhile: a stop during start-up
    /// must not wait for the start time-out (`None`), a reload with a new config is done
    /// once this process is ready (`deferred`).
    async fn start(&mut self, port: u16) -> Option<Result<Proc, (Option<Proc>, String)>> {
        let (ctx, cmds, deferred) = (&self.ctx, &mut self.cmds, &mut self.deferred);
        let start = ctx.start(port);
        tokio::pin!(start);
        loop {
            tokio::select! {
                r = &mut start => return Some(r),
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
                    Some(SlotCmd::Stop(reply)) => { let _ = reply.send(()); return None; }
                    None => return None,
                }
            }
        }
    }

    /// The restart budget and back-off after a restart-worthy event; `Break` when the
    /// slot is to end (a stop meanwhile, or the budget spent and then a stop).
    async fn pause(&mut self) -> ControlFlow<()> {
        match self
            .ctx
            .pause_before_restart(&mut self.recent, &mut self.cmds)
            .await
        {
            Ok(()) => ControlFlow::Continue(()),
            Err(()) => ControlFlow::Break(()),
        }
    }

    /// Acts on what happened to process `p`; `Break` when the slot ends.
    async fn on_event(&mut self, p: Proc, event: Event) -> ControlFlow<()> {
        match event {
            Event::Exited(why) => {
                self.ctx.note_exited(&p, &why);
                self.pause().await
            }
            Event::Suspect(why) => self.suspect(p, &why).await,
            Event::Recovered => {
                self.current = Some(p);
                ControlFlow::Continue(())
            }
            Event::Unhealthy(why) => {
                // Out of rotation at once, its waiting requests sent elsewhere; the
                // replacement starts on the other port while the stuck one is stopped.
                let grace = self.ctx.retire_unhealthy(&p, &why).await;
                self.ctx.stop_later(p, grace);
                self.pause().await
            }
            Event::Cmd(SlotCmd::Reload(reply)) => {
                self.reload(p, reply).await;
                ControlFlow::Continue(())
            }
            Event::Cmd(SlotCmd::Stop(reply)) => {
                self.ctx.drain_and_stop(&p).await;
                let _ = reply.send(());
                ControlFlow::Break(())
            }
            Event::CmdsClosed => {
                self.ctx.drain_and_stop(&p).await;
                ControlFlow::Break(())
            }
        }
    }

    /// `p` stalled and failed a probe (`prestart`): its successor starts now.
    async fn suspect(&mut self, p: Proc, why: &str) -> ControlFlow<()> {
        let port = self.ctx.pick_port(Some(p.backend.addr().port()));
        match self.ctx.replace_suspect(p, port, why, &mut self.cmds).await {
            Early::Replaced(new) => {
                self.last_port = Some(port);
                self.current = Some(new);
                ControlFlow::Continue(())
            }
            Early::Kept(p) => {
                self.current = Some(p);
                ControlFlow::Continue(())
            }
            Early::Lost => {
                self.last_port = Some(port);
                self.pause().await
            }
            Early::Stopped => ControlFlow::Break(()),
        }
    }

    /// A rolling reload of this slot: a new process (under a live reload's new config,
    /// if any) must be ready before `p` is drained and stopped; if it is not, `p` keeps
    /// serving under its own settings.
    async fn reload(&mut self, p: Proc, reply: oneshot::Sender<Result<(), String>>) {
        // A live reload's new config, if any, for the new process only: the old one
        // keeps its settings until it is gone.
        let previous = self.ctx.adopt_next_cfg();
        let port = self.ctx.pick_port(Some(p.backend.addr().port()));
        let mut old_exit_seen = false;
        let result = {
            let start = self.ctx.start(port);
            tokio::pin!(start);
            loop {
                tokio::select! {
                    r = &mut start => break r,
                    _ = p.wait_exit(), if !old_exit_seen => {
                        // The old worker died meanwhile: out of rotation now.
                        old_exit_seen = true;
                        self.ctx.pool.remove(&p.backend);
                    }
                }
            }
        };
        let ctx = &mut self.ctx;
        match result {
            Ok(new) => {
                self.last_port = Some(port);
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
                self.current = Some(new);
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
                    self.current = Some(p);
                }
            }
        }
    }
}
