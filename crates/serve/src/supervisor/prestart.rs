//! The `prestart` path: a worker that answers nothing failed a probe, so its successor
//! starts now, while the suspect is still watched. The successor joins the rotation as
//! soon as it is ready, next to the suspect (which gets no new requests while stalled);
//! then the suspect leaves — ejected and stopped once declared unhealthy, or drained and
//! stopped if it recovered (a long blocking request that ended). If the successor fails
//! to start, the suspect stays the slot's worker unless it is gone too.

use std::time::Duration;

use tokio::sync::mpsc;
use tracing::{info, warn};

use super::slot::{Event, Proc, SlotCmd, SlotCtx};
use crate::backend::Eject;
use crate::counters::RestartReason;

/// How the `prestart` path ended for a slot.
pub(super) enum Early {
    /// The successor serves; the suspect is gone or leaving.
    Replaced(Proc),
    /// The successor failed to start; the suspect is still the slot's worker.
    Kept(Proc),
    /// Neither: the successor failed and the suspect is gone (the slot restarts).
    Lost,
    /// The slot was told to stop.
    Stopped,
}

/// What the watch of the suspect found while its successor started.
struct Watched {
    /// The suspect's verdict, once there is one.
    verdict: Option<Event>,
    /// It is out already (unhealthy or exited).
    gone: bool,
    /// Its stop's grace period (none once a direct worker's connections were taken).
    grace: Duration,
}

impl SlotCtx {
    /// Starts the successor of suspect `p` on `port` while `p` is still watched (see the
    /// module doc).
    pub(super) async fn replace_suspect(
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
        let mut w = Watched {
            verdict: None,
            gone: false,
            grace: self.cfg.stop_grace,
        };
        let started = loop {
            tokio::select! {
                r = &mut start => break r,
                e = &mut watch, if w.verdict.is_none() => self.note_verdict(&p, e, &mut w).await,
            }
        };
        let new = match started {
            Ok(new) => new,
            Err((new, why)) => {
                drop(watch);
                return self.successor_failed(p, new, &why, w).await;
            }
        };
        self.admit(&new);
        let verdict = match w.verdict.take() {
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
        self.retire_suspect(p, new, verdict, &w).await
    }

    /// The suspect's verdict before its successor is ready: an unhealthy or exited
    /// suspect leaves at once (out now, its waiting requests elsewhere; stopped later).
    async fn note_verdict(&self, p: &Proc, e: Event, w: &mut Watched) {
        match &e {
            Event::Unhealthy(why) => {
                w.grace = self.retire_unhealthy(p, why).await;
                w.gone = true;
            }
            Event::Exited(why) => {
                self.note_exited(p, why);
                w.gone = true;
            }
            _ => {}
        }
        w.verdict = Some(e);
    }

    /// The successor did not become ready (`new`: its process, if it started): the
    /// suspect stays the slot's worker, unless it is gone or the slot was told to stop.
    async fn successor_failed(&self, p: Proc, new: Option<Proc>, why: &str, w: Watched) -> Early {
        if let Some(new) = &new {
            SlotCtx::stop(new, self.cfg.stop_grace, &self.hurry).await;
        }
        self.slot.current.store(Some(p.backend.clone()));
        warn!(app = %self.cfg.name, worker = self.slot.index, reason = %why,
            "early successor did not become ready");
        match w.verdict {
            _ if w.gone => {
                self.stop_later(p, w.grace);
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
        }
    }

    /// The successor `new` serves: the suspect `p` leaves as its `verdict` says.
    async fn retire_suspect(&self, p: Proc, new: Proc, verdict: Event, w: &Watched) -> Early {
        match verdict {
            _ if w.gone => self.stop_later(p, w.grace),
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
}
