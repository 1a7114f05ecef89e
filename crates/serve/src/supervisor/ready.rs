//! Never ready without proof. A new worker joins rotation only when it is seen doing what
//! it is there for:
//!
//! - **direct mode**: taking connections from the shared socket — its event loop polls
//!   it, or a thread blocks in `accept` on it (`scalpel_procstat::waits_on_socket`); for a
//!   `select`-based server (gunicorn's sync worker), a probe connection to the socket seen
//!   accepted by its processes. Alive, or answering on `$PORT`, is not enough: that is how
//!   an app that never served fd 3 used to look ready while every request to it hung;
//! - and on its own port, by the app's probe: the health route's 2xx from a listener of
//!   its own process tree, the Node preload's heartbeat with the app listening on `$PORT`,
//!   or a connection accepted by its processes (not a handshake from the kernel's backlog).
//!   A direct worker with no listener on `$PORT` (uvicorn `--fd 3`, a socket-activated Go
//!   binary) is proven on the shared socket alone.
//!
//! One that shows no proof within `start_timeout` is reported with the reason and the fix.
//! A Node worker whose preload beats but whose app never listened (a queue worker) is
//! kept running under supervision, with no traffic.

use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use scalpel_procstat::SocketWait;
use tracing::warn;

use super::slot::{Proc, SlotCtx};
use crate::backend::WorkerState;
use crate::config::HealthKind;
use crate::health::Target;

/// What to do when a direct worker never takes the shared socket.
const DIRECT_FIX: &str = "serve fd 3: run it with the Node preload (the default for a node \
     command; `preload = true`), or uvicorn --fd 3, gunicorn --bind fd://3, Go \
     net.FileListener(os.NewFile(3, \"listen\")); or use mode = \"proxy\"";

/// The shared socket of a direct app, as the proof needs it.
#[derive(Debug, Clone, Copy)]
struct Shared {
    inode: u64,
    addr: SocketAddr,
}

/// One look at a starting worker.
enum Look {
    Ready { shared_only: bool },
    NotYet(String),
    Fail(String),
}

impl SlotCtx {
    /// Waits for `p`'s proof of readiness, up to `start_timeout`.
    pub(super) async fn until_ready(&self, mut p: Proc) -> Result<Proc, (Option<Proc>, String)> {
        let deadline = Instant::now() + self.cfg.start_timeout;
        // Poll faster than the steady-state interval: readiness gates traffic.
        let poll = self.cfg.health_interval.min(Duration::from_millis(100));
        let shared = self.direct.as_ref().and_then(|s| {
            let inode = rustix::fs::fstat(s.as_fd()).ok()?.st_ino;
            Some(Shared {
                inode,
                addr: loopback(s.local_addr().ok()?),
            })
        });
        let mut last;
        loop {
            if let Some(e) = p.exited() {
                return Err((Some(p), format!("exited while starting ({e})")));
            }
            match self.look(&p, shared).await {
                Look::Ready { shared_only } => {
                    p.shared_only = shared.filter(|_| shared_only).map(|s| s.inode);
                    return Ok(p);
                }
                Look::NotYet(why) => last = why,
                Look::Fail(why) => return Err((Some(p), why)),
            }
            if Instant::now() >= deadline {
                if self.serverless(&p) {
                    p.no_server = true;
                    return Ok(p);
                }
                let why = self.never_ready(&p, shared, &last).await;
                return Err((Some(p), why));
            }
            tokio::time::sleep(poll).await;
        }
    }

    /// One look: the shared socket first (direct mode), then the worker's own port.
    async fn look(&self, p: &Proc, shared: Option<Shared>) -> Look {
        let target = p.target();
        if let Some(s) = shared
            && !takes_from(&target, s).await
        {
            return Look::NotYet("not taking connections from fd 3 yet".into());
        }
        let port = target.addr.port();
        // Whose listener is on the port, asked after the probe that needs it: a worker
        // that starts listening between the two must not be taken for a stranger.
        let own = || async {
            owns_listener(target.pid, port)
                .await
                .map_err(|e| format!("cannot tell who listens on port {port}: {e}"))
        };
        match &self.cfg.health {
            HealthKind::Heartbeat if target.beat.as_ref().is_none_or(|b| b.age().is_none()) => {
                Look::NotYet("no heartbeat yet".into())
            }
            HealthKind::Heartbeat => match own().await {
                Ok(true) => Look::Ready { shared_only: false },
                Ok(false) => Look::NotYet(format!("not listening on {port}")),
                Err(e) => Look::Fail(e),
            },
            // A direct worker with no listener of its own (uvicorn --fd 3, a socket-activated
            // binary): proven on the shared socket alone.
            HealthKind::Accept if shared.is_some() && !matches!(own().await, Ok(true)) => {
                Look::Ready { shared_only: true }
            }
            // The accept check's proof is a connection held by the worker's own processes.
            HealthKind::Accept => match self.health.check(&target).await {
                Ok(()) => Look::Ready { shared_only: false },
                // Someone listens, and not the worker: a stranger holds its port. Asked in
                // this order so that a worker that starts listening between the two reads
                // is not taken for a stranger.
                Err(_) if listened(port).await && matches!(own().await, Ok(false)) => {
                    Look::Fail(format!(
                        "port {port} answers, but not from this worker's processes ({}); \
                         the worker's own listen failed",
                        super::spawn::port_holder(port)
                    ))
                }
                Err(e) => Look::NotYet(e),
            },
            HealthKind::Http(_) => match self.health.check(&target).await {
                Err(e) => Look::NotYet(e),
                // An answer proves that something listens on the port, not that it is this
                // worker: only a listening socket of its own process tree counts.
                Ok(()) => match own().await {
                    Ok(true) => Look::Ready { shared_only: false },
                    Ok(false) => Look::Fail(format!(
                        "port {port} answers, but not from this worker's processes ({}); the \
                         worker's own listen failed",
                        super::spawn::port_holder(port)
                    )),
                    Err(e) => Look::Fail(e),
                },
            },
        }
    }

    /// A Node worker whose preload beats and whose app never listened (a queue worker):
    /// kept, supervised, out of rotation. Says so once.
    fn serverless(&self, p: &Proc) -> bool {
        let Some(beat) = &p.beat else {
            return false;
        };
        if self.cfg.health != HealthKind::Heartbeat
            || beat.age().is_none_or(|a| a > self.cfg.health_timeout)
            || !beat.listened().is_empty()
        {
            return false;
        }
        warn!(
            app = %self.cfg.name,
            worker = self.slot.index,
            pid = p.backend.pid(),
            "worker never listened within start_timeout: kept running as a worker without a \
             server (a queue worker?): restarted when it exits or its event loop blocks, \
             given no traffic"
        );
        p.backend.set_state(WorkerState::Ready);
        true
    }

    /// Why `p` never became ready, and what to do about it: one line.
    async fn never_ready(&self, p: &Proc, shared: Option<Shared>, last: &str) -> String {
        let t = self.cfg.start_timeout.as_millis();
        let port = p.backend.addr().port();
        let env = &self.cfg.port_env;
        let who = format!("worker {} of {}", self.slot.index, self.cfg.name);
        let own = owns_listener(p.backend.pid(), port).await.unwrap_or(false);
        if let Some(s) = shared
            && !takes_from(&p.target(), s).await
        {
            let why = match &p.beat {
                Some(b) => match (b.listened(), b.fd3()) {
                    (l, _) if l.is_empty() => {
                        "the app never listened (a worker without a server has nothing to \
                         serve on fd 3)"
                            .to_string()
                    }
                    (_, Some(Err(e))) => format!("the Node preload could not serve fd 3: {e}"),
                    (l, _) if !l.contains(&port) => {
                        format!("the app listened on {l:?}, none of them ${env} ({port})")
                    }
                    _ => "the app listens on $PORT but fd 3 was not served".into(),
                },
                None if own => format!("the app listens only on ${env} ({port})"),
                None => "the app never took fd 3 into its event loop".into(),
            };
            return format!(
                "{who} never accepted on the shared socket (fd 3) within {t} ms: {why}; {DIRECT_FIX}"
            );
        }
        match &self.cfg.health {
            HealthKind::Http(path) => {
                format!("health check GET {path} not passing after {t} ms (last: {last})")
            }
            HealthKind::Heartbeat if p.beat.as_ref().is_none_or(|b| b.age().is_none()) => {
                format!(
                    "{who}: no heartbeat from the Node preload within {t} ms: the command must \
                     be node itself (a shell wrapper must `exec node …`), or set preload = false \
                     and [app.health] path"
                )
            }
            HealthKind::Heartbeat => format!(
                "{who} never listened on ${env} ({port}) within {t} ms (it listened on {:?}): \
                 it must listen on process.env.{env}",
                p.beat.as_ref().map(|b| b.listened()).unwrap_or_default()
            ),
            HealthKind::Accept => format!(
                "{who} never accepted a connection on ${env} ({port}) within {t} ms ({last}): it \
                 must listen on 127.0.0.1:${env} (or {{port}} in its arguments)"
            ),
        }
    }
}

/// Does the worker take connections from the shared socket? Its event loop polls it or a
/// thread accepts on it; a `select`-based server is asked by a probe connection.
async fn takes_from(target: &Target, s: Shared) -> bool {
    let pid = target.pid;
    let seen =
        tokio::task::spawn_blocking(move || scalpel_procstat::waits_on_socket(pid, s.inode)).await;
    match seen {
        Ok(Ok(SocketWait::Polls { .. } | SocketWait::Accepts { .. })) => true,
        Ok(Ok(SocketWait::Unseen { selects: true })) => observed_accept(pid, s.addr).await,
        _ => false,
    }
}

/// A probe connection to the shared socket, seen accepted by `pid`'s processes within
/// 300 ms. Another worker may take it instead: then not this time.
async fn observed_accept(pid: u32, addr: SocketAddr) -> bool {
    let Ok(Ok(stream)) = tokio::time::timeout(
        Duration::from_millis(300),
        tokio::net::TcpStream::connect(addr),
    )
    .await
    else {
        return false;
    };
    let Ok(peer) = stream.local_addr().map(|a| a.port()) else {
        return false;
    };
    let deadline = Instant::now() + Duration::from_millis(300);
    while Instant::now() < deadline {
        let seen = tokio::task::spawn_blocking(move || {
            scalpel_procstat::accepted_in_tree(pid, addr.port(), peer)
        })
        .await;
        if matches!(seen, Ok(Ok(true))) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

/// A direct worker proven on the shared socket alone (no listener on its own port): its
/// periodic probe asks whether it still takes connections from it. What serve cannot see
/// this way — a loop stuck while the socket stays registered — is said in docs/serve.md.
pub(super) async fn still_polls(target: &Target, inode: u64) -> Result<(), String> {
    let pid = target.pid;
    match tokio::task::spawn_blocking(move || scalpel_procstat::waits_on_socket(pid, inode)).await {
        Ok(Ok(SocketWait::Polls { .. } | SocketWait::Accepts { .. })) => Ok(()),
        // A select()-based worker is only seen by an accept; it was proven at start.
        Ok(Ok(SocketWait::Unseen { selects: true })) => Ok(()),
        Ok(Ok(SocketWait::Unseen { selects: false })) => {
            Err("no longer takes connections from the shared socket".into())
        }
        Ok(Err(e)) => Err(e.to_string()),
        Err(e) => Err(e.to_string()),
    }
}

/// Whether any process listens on `port`.
async fn listened(port: u16) -> bool {
    tokio::task::spawn_blocking(move || scalpel_procstat::pid_listening_on(port).is_ok())
        .await
        .unwrap_or(false)
}

/// Whether the socket listening on `port` belongs to `pid`'s process tree.
async fn owns_listener(pid: u32, port: u16) -> Result<bool, String> {
    match tokio::task::spawn_blocking(move || scalpel_procstat::listening_in_tree(pid, port)).await
    {
        Ok(Ok(owned)) => Ok(owned),
        // Gone meanwhile: the next round reports the exit.
        Ok(Err(scalpel_procstat::ProcStatError::NoSuchProcess { .. })) => Ok(false),
        Ok(Err(e)) => Err(e.to_string()),
        Err(e) => Err(e.to_string()),
    }
}

/// Where a probe connects to reach a socket bound to `addr` (an unspecified address means
/// every local one: loopback).
fn loopback(addr: SocketAddr) -> SocketAddr {
    match addr {
        SocketAddr::V4(a) if a.ip().is_unspecified() => {
            SocketAddr::from(([127, 0, 0, 1], a.port()))
        }
        SocketAddr::V6(a) if a.ip().is_unspecified() => {
            SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, a.port()))
        }
        a => a,
    }
}
