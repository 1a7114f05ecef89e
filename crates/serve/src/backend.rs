//! One worker process as the balancer sees it: where it listens, its state, its
//! requests in flight and waiting, when it last made progress (the stall rule), and —
//! once the supervisor ejects it — which of its requests it had read (from the kernel's
//! socket queues), so that only a request it never took goes elsewhere.

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use scalpel_procstat::TcpQueue;
use tokio::sync::Notify;

use crate::clock::epoch_us;
use crate::upstream::Attempt;

/// The life of one worker process, as `/status` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum WorkerState {
    /// Spawned, health check not passed yet: gets no traffic.
    Starting = 0,
    /// Health check passed: in rotation.
    Ready = 1,
    /// Out of rotation, finishing its requests, then stopped.
    Draining = 2,
    /// Stopped or exited.
    Stopped = 3,
}

impl WorkerState {
    fn from_u8(v: u8) -> Self {
        match v {
            0 => WorkerState::Starting,
            1 => WorkerState::Ready,
            2 => WorkerState::Draining,
            _ => WorkerState::Stopped,
        }
    }

    /// Lower-case name used in `/status`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            WorkerState::Starting => "starting",
            WorkerState::Ready => "ready",
            WorkerState::Draining => "draining",
            WorkerState::Stopped => "stopped",
        }
    }
}

/// One worker process of an app: where it listens and what it is doing. Counters are
/// atomics shared by the proxy (in flight) and the supervisor (state).
pub(crate) struct Backend {
    app: Arc<str>,
    index: usize,
    addr: SocketAddr,
    pid: AtomicU32,
    state: AtomicU8,
    started: Instant,
    in_flight: AtomicUsize,
    /// Requests sent to it that have no response head yet.
    waiting: AtomicUsize,
    answered: AtomicU64,
    /// When it last made progress: a response head, body bytes, or its first waiting
    /// request after none (µs since [`epoch_us`]'s origin).
    progress_us: AtomicU64,
    /// [`Backend::stalled`] after this many µs without progress (0: never).
    stall_after_us: u64,
    /// [`Eject`] level reached, as a number (0: none).
    ejected: AtomicU8,
    on_eject: Notify,
    /// Its connections' queues when it was ejected: which requests it had read.
    at_eject: Mutex<Option<Arc<EjectSnapshot>>>,
}

/// How far a worker is taken off its waiting requests ([`Backend::eject`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Eject {
    /// Requests it has not read go elsewhere; those it had read wait for it.
    Queued = 1,
    /// It is being stopped: every waiting request ends now.
    All = 2,
}

/// The socket queues of an ejected worker's connections, read at the ejection.
#[derive(Debug)]
struct EjectSnapshot {
    at_us: u64,
    /// `None` when `/proc/net/tcp` could not be read.
    queues: Option<Vec<TcpQueue>>,
}

impl fmt::Debug for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Backend")
            .field("app", &self.app)
            .field("index", &self.index)
            .field("addr", &self.addr)
            .field("pid", &self.pid())
            .field("state", &self.state())
            .field("in_flight", &self.in_flight())
            .finish()
    }
}

impl Backend {
    pub(crate) fn new(app: Arc<str>, index: usize, addr: SocketAddr, pid: u32) -> Self {
        Self {
            app,
            index,
            addr,
            pid: AtomicU32::new(pid),
            state: AtomicU8::new(WorkerState::Starting as u8),
            started: Instant::now(),
            in_flight: AtomicUsize::new(0),
            waiting: AtomicUsize::new(0),
            answered: AtomicU64::new(0),
            progress_us: AtomicU64::new(epoch_us()),
            stall_after_us: 0,
            ejected: AtomicU8::new(0),
            on_eject: Notify::new(),
            at_eject: Mutex::new(None),
        }
    }

    /// The worker's index within its app (0-based; `WORKER_INDEX`).
    pub(crate) fn index(&self) -> usize {
        self.index
    }

    /// Where the worker listens.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The worker's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.pid.load(Ordering::Relaxed)
    }

    /// The worker's state.
    pub(crate) fn state(&self) -> WorkerState {
        WorkerState::from_u8(self.state.load(Ordering::Relaxed))
    }

    pub(crate) fn set_state(&self, s: WorkerState) {
        self.state.store(s as u8, Ordering::Relaxed);
    }

    /// Seconds since the process was started.
    pub(crate) fn uptime_s(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// Requests sent to it and not finished yet.
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Counts a response head received from the worker: proof that it is not stuck.
    fn answered(&self) {
        self.answered.fetch_add(1, Ordering::Relaxed);
        self.progress_us.store(epoch_us(), Ordering::Relaxed);
    }

    /// Body bytes arrived from the worker (a download, a stream of events): it is alive,
    /// for the stall rule and for the health checks alike.
    pub(crate) fn body_progress(&self) {
        self.answered.fetch_add(1, Ordering::Relaxed);
        self.progress_us.store(epoch_us(), Ordering::Relaxed);
    }

    /// Sets how long it may hold requests without answering any before it counts as
    /// stalled (zero: never).
    pub(crate) fn with_stall_after(mut self, after: Duration) -> Self {
        self.stall_after_us = after.as_micros() as u64;
        self
    }

    /// It has requests waiting for their response head and has made no progress for the
    /// app's `avoid_stalled_ms`: a blocked event loop, long before health checks can
    /// tell. Only waiting requests count: a response whose body is still streaming (a
    /// download, server-sent events) is progress, not a stall. Selection sends it nothing
    /// new until it answers again (or all workers stall).
    pub(crate) fn stalled(&self) -> bool {
        self.stall_after_us > 0
            && self.waiting.load(Ordering::Relaxed) > 0
            && epoch_us().saturating_sub(self.progress_us.load(Ordering::Relaxed))
                > self.stall_after_us
    }

    /// Response heads received from the worker so far.
    pub(crate) fn answers(&self) -> u64 {
        self.answered.load(Ordering::Relaxed)
    }

    /// Takes the worker's waiting requests off it: those it has not read go elsewhere;
    /// with [`Eject::All`] (it failed its health checks and is being stopped) those it
    /// had read are answered at once, with [`Eject::Queued`] (a `prestart` successor
    /// took over from a suspect that may still recover) they keep waiting for it. First
    /// its connections' queues are read, so that each request can tell whether the
    /// worker had read it ([`Backend::took`]).
    pub(crate) fn eject(&self, level: Eject) {
        let queues = scalpel_procstat::tcp_queues(self.addr.port()).ok();
        *self.at_eject.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(EjectSnapshot {
            at_us: epoch_us(),
            queues,
        }));
        self.ejected.fetch_max(level as u8, Ordering::AcqRel);
        self.on_eject.notify_waiters();
    }

    /// After [`Backend::eject`]: had the worker read (any of) the request of `attempt`?
    /// A request still whole in the worker's socket queue (or the connection still in
    /// its accept queue) was only waiting behind whatever stopped it, and may go to
    /// another worker; one it had read is the suspect — it may be what stopped it — and
    /// is never resent. When the kernel's tables cannot tell, the answer is "read"
    /// (fail closed: a poison request must not spread).
    pub(crate) fn took(&self, attempt: &Attempt) -> bool {
        let written = attempt.written();
        if written == 0 {
            return false; // nothing of it left this process
        }
        let snapshot = self
            .at_eject
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let fresh;
        let queues = match &snapshot {
            // Written before the snapshot: the snapshot saw it.
            Some(s) if attempt.sent_at_us() < s.at_us => s.queues.as_deref(),
            _ => {
                fresh = scalpel_procstat::tcp_queues(self.addr.port()).ok();
                fresh.as_deref()
            }
        };
        let Some(queues) = queues else { return true };
        let (worker, ours) = (self.addr.port(), attempt.local_port());
        let unread = queues
            .iter()
            .find(|q| q.local_port == worker && q.remote_port == ours)
            .map(|q| q.rx_queue);
        let unsent = queues
            .iter()
            .find(|q| q.local_port == ours && q.remote_port == worker)
            .map_or(0, |q| q.tx_queue);
        unread.is_none_or(|rx| rx + unsent < written)
    }

    /// Resolves once [`Backend::eject`] has been called with `level` or above; the level
    /// reached.
    pub(crate) async fn ejected(&self, level: Eject) -> Eject {
        loop {
            let notified = self.on_eject.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let now = self.ejected.load(Ordering::Acquire);
            if now >= level as u8 {
                return if now >= Eject::All as u8 {
                    Eject::All
                } else {
                    Eject::Queued
                };
            }
            notified.await;
        }
    }

    /// A request starts on it: in flight, and waiting for its response head (the pool's
    /// `InFlight` guard pairs this with [`Backend::head_arrived`] and [`Backend::leave`]).
    pub(crate) fn enter(&self) {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        if self.waiting.fetch_add(1, Ordering::Relaxed) == 0 {
            // Nothing waited until now: the wait for an answer starts here.
            self.progress_us.store(epoch_us(), Ordering::Relaxed);
        }
    }

    /// The response head of a request arrived: it no longer waits, and the worker made
    /// progress.
    pub(crate) fn head_arrived(&self) {
        self.waiting.fetch_sub(1, Ordering::Relaxed);
        self.answered();
    }

    /// A request ends; `waiting`: its response head never came.
    pub(crate) fn leave(&self, waiting: bool) {
        if waiting {
            self.waiting.fetch_sub(1, Ordering::Relaxed);
        }
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
    }

    /// Passed over by selection: the worker a request just failed on (`avoid`), or one
    /// that is [`Backend::stalled`].
    pub(crate) fn avoided(&self, avoid: Option<&Backend>) -> bool {
        avoid.is_some_and(|a| std::ptr::eq(self, a)) || self.stalled()
    }
}

/// Workers of an app `t` in these slots, on ports 1000 + slot (unit tests).
#[cfg(test)]
pub(crate) fn test_backends(slots: impl IntoIterator<Item = usize>) -> Vec<Arc<Backend>> {
    slots
        .into_iter()
        .map(|i| {
            Arc::new(Backend::new(
                "t".into(),
                i,
                SocketAddr::from(([127, 0, 0, 1], 1000 + i as u16)),
                0,
            ))
        })
        .collect()
}
