//! The balancer's view of an app: the set of workers that may take traffic (swapped
//! whole with `ArcSwap`, written only by the supervisor), the selection algorithms
//! behind one trait, and — with `max_in_flight_per_worker` — the app's one FIFO queue of
//! requests waiting for a free worker slot.
//!
//! The queue exists for single-threaded CPU-bound workers: a request sent to a busy
//! worker waits behind whatever runs there (a 512-byte QR render: tens of ms), while one
//! held here goes to whichever worker frees first (M/G/k with a shared queue instead of
//! joining the shortest of k queues). Every claim of a slot and every hand-off happens
//! under the queue's lock, so a slot is never given twice; a slot freed goes to the
//! oldest waiter first, and a new request takes a slot only when no waiter can.

use std::cell::Cell;
use std::collections::VecDeque;
use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use scalpel_procstat::TcpQueue;
use tokio::sync::{Notify, oneshot};

use crate::config::Balance;
use crate::upstream::Attempt;

/// The life of one worker process, as `/status` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum WorkerState {
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
    pub fn name(self) -> &'static str {
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
pub struct Backend {
    app: Arc<str>,
    index: usize,
    addr: SocketAddr,
    pid: AtomicU32,
    state: AtomicU8,
    started: Instant,
    in_flight: AtomicUsize,
    /// Requests sent to it that have no response head yet.
    waiting: AtomicUsize,
    requests: AtomicU64,
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

/// Microseconds on one process-wide monotonic clock.
pub(crate) fn epoch_us() -> u64 {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    ORIGIN.get_or_init(Instant::now).elapsed().as_micros() as u64
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
            requests: AtomicU64::new(0),
            answered: AtomicU64::new(0),
            progress_us: AtomicU64::new(epoch_us()),
            stall_after_us: 0,
            ejected: AtomicU8::new(0),
            on_eject: Notify::new(),
            at_eject: Mutex::new(None),
        }
    }

    /// The app's name.
    pub fn app(&self) -> &str {
        &self.app
    }

    /// The worker's index within its app (0-based; `WORKER_INDEX`).
    pub fn index(&self) -> usize {
        self.index
    }

    /// Where the worker listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The worker's process id.
    pub fn pid(&self) -> u32 {
        self.pid.load(Ordering::Relaxed)
    }

    /// The worker's state.
    pub fn state(&self) -> WorkerState {
        WorkerState::from_u8(self.state.load(Ordering::Relaxed))
    }

    pub(crate) fn set_state(&self, s: WorkerState) {
        self.state.store(s as u8, Ordering::Relaxed);
    }

    /// Seconds since the process was started.
    pub fn uptime_s(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// Requests sent to it and not finished yet.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Requests sent to it so far.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
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
    pub fn stalled(&self) -> bool {
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

    /// Counts a request as in flight until the guard drops, and as waiting for its
    /// response head until [`InFlight::head_received`].
    pub(crate) fn begin(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        if self.waiting.fetch_add(1, Ordering::Relaxed) == 0 {
            // Nothing waited until now: the wait for an answer starts here.
            self.progress_us.store(epoch_us(), Ordering::Relaxed);
        }
        self.requests.fetch_add(1, Ordering::Relaxed);
        InFlight {
            backend: self.clone(),
            waiting: AtomicBool::new(true),
            pool: None,
        }
    }
}

/// A request in flight on a backend; dropping it ends the request (and, in a pool with
/// `max_in_flight_per_worker`, hands the freed slot to the oldest waiting request).
#[derive(Debug)]
pub(crate) struct InFlight {
    backend: Arc<Backend>,
    waiting: AtomicBool,
    pool: Option<Arc<Pool>>,
}

impl InFlight {
    pub(crate) fn backend(&self) -> &Arc<Backend> {
        &self.backend
    }

    /// The response head arrived: the worker answered (progress), and this request no
    /// longer waits, whatever its body does next.
    pub(crate) fn head_received(&self) {
        if self.waiting.swap(false, Ordering::Relaxed) {
            self.backend.waiting.fetch_sub(1, Ordering::Relaxed);
            self.backend.answered();
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if *self.waiting.get_mut() {
            self.backend.waiting.fetch_sub(1, Ordering::Relaxed);
        }
        self.backend.in_flight.fetch_sub(1, Ordering::Relaxed);
        if let Some(pool) = self.pool.take()
            && pool.per_worker.load(Ordering::Relaxed) > 0
        {
            pool.dispatch();
        }
    }
}

/// Which ready worker takes the next request. `avoid` is a worker that just failed this
/// request (a retry goes elsewhere when there is an elsewhere); a [`Backend::stalled`]
/// worker is passed over like it while another can be had.
pub trait Selection: Send + Sync + fmt::Debug {
    /// Picks one of `backends` (never empty).
    fn select<'a>(&self, backends: &'a [Arc<Backend>], avoid: Option<&Backend>)
    -> &'a Arc<Backend>;
}

fn avoided(b: &Arc<Backend>, avoid: Option<&Backend>) -> bool {
    avoid.is_some_and(|a| std::ptr::eq(Arc::as_ptr(b), a)) || b.stalled()
}

/// Each worker in turn.
#[derive(Debug, Default)]
pub struct RoundRobin {
    next: AtomicUsize,
}

impl Selection for RoundRobin {
    fn select<'a>(
        &self,
        backends: &'a [Arc<Backend>],
        avoid: Option<&Backend>,
    ) -> &'a Arc<Backend> {
        let n = backends.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        (0..n)
            .map(|k| &backends[(start + k) % n])
            .find(|b| !avoided(b, avoid))
            .unwrap_or(&backends[start % n])
    }
}

/// The worker with the fewest requests in flight; the scan starts at a rotating offset
/// so ties (an idle set) are spread in turn instead of all going to the first worker.
#[derive(Debug, Default)]
pub struct LeastConn {
    next: AtomicUsize,
}

impl Selection for LeastConn {
    fn select<'a>(
        &self,
        backends: &'a [Arc<Backend>],
        avoid: Option<&Backend>,
    ) -> &'a Arc<Backend> {
        let n = backends.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let mut best: Option<&Arc<Backend>> = None;
        for k in 0..n {
            let b = &backends[(start + k) % n];
            if avoided(b, avoid) {
                continue;
            }
            if best.is_none_or(|x| b.in_flight() < x.in_flight()) {
                best = Some(b);
            }
        }
        best.unwrap_or(&backends[start % n])
    }
}

/// Power of two choices: two distinct workers at random, the one with fewer requests in
/// flight. Nearly least-connections quality without scanning the set.
#[derive(Debug, Default)]
pub struct PowerOfTwo;

thread_local! {
    // xorshift64*: a cheap per-thread RNG; seeded once per thread from the OS.
    static RNG: Cell<u64> = Cell::new(rand::random::<u64>() | 1);
}

/// A cheap per-thread random number.
pub(crate) fn fast_random() -> u64 {
    RNG.with(|c| {
        let mut x = c.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        c.set(x);
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    })
}

impl Selection for PowerOfTwo {
    fn select<'a>(
        &self,
        backends: &'a [Arc<Backend>],
        avoid: Option<&Backend>,
    ) -> &'a Arc<Backend> {
        let n = backends.len();
        if n == 1 {
            return &backends[0];
        }
        let r = fast_random();
        let i = (r % n as u64) as usize;
        let mut j = ((r >> 32) % (n as u64 - 1)) as usize;
        if j >= i {
            j += 1;
        }
        let (a, b) = (&backends[i], &backends[j]);
        if avoided(a, avoid) {
            return b;
        }
        if avoided(b, avoid) {
            return a;
        }
        if b.in_flight() < a.in_flight() { b } else { a }
    }
}

pub(crate) fn selection_for(b: Balance) -> Box<dyn Selection> {
    match b {
        Balance::RoundRobin => Box::new(RoundRobin::default()),
        Balance::LeastConn => Box::new(LeastConn::default()),
        Balance::PowerOfTwo => Box::new(PowerOfTwo),
    }
}

/// The workers of one app that may take traffic. The supervisor adds a worker once its
/// health check passes and removes it the moment it fails, exits or starts draining;
/// the proxy reads a snapshot per request without locking.
#[derive(Debug)]
pub(crate) struct Pool {
    ready: ArcSwap<Vec<Arc<Backend>>>,
    // Serializes writers only; readers never take it.
    write: Mutex<()>,
    /// The app's `balance`; a live reload swaps it (one lock-free load per request).
    selection: ArcSwap<Box<dyn Selection>>,
    changed: Notify,
    /// `max_in_flight_per_worker` (0: no limit, no queue); a live reload changes it.
    per_worker: AtomicUsize,
    /// `max_queued`: waiting requests past this are refused at once.
    max_queued: AtomicUsize,
    /// Requests waiting for a slot, oldest first. Every slot claim of a limited pool
    /// happens under this lock.
    waiters: Mutex<VecDeque<Waiter>>,
}

/// A request waiting in the queue: where its slot is sent, and the worker it must not
/// get (its first attempt failed there), if any.
#[derive(Debug)]
struct Waiter {
    tx: oneshot::Sender<InFlight>,
    avoid: Option<Arc<Backend>>,
}

/// Why a limited pool gave a request no worker slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// No worker was ready within `wait_for_worker`.
    NoWorker,
    /// Every slot was taken and `max_queued` requests were waiting already.
    QueueFull,
    /// It waited `queue_timeout` and no slot came free.
    QueueTimeout,
}

impl Pool {
    pub(crate) fn new(balance: Balance) -> Self {
        Self {
            ready: ArcSwap::from_pointee(Vec::new()),
            write: Mutex::new(()),
            selection: ArcSwap::from_pointee(selection_for(balance)),
            changed: Notify::new(),
            per_worker: AtomicUsize::new(0),
            max_queued: AtomicUsize::new(0),
            waiters: Mutex::new(VecDeque::new()),
        }
    }

    pub(crate) fn add(self: &Arc<Self>, b: Arc<Backend>) {
        {
            let _w = self.write.lock().unwrap_or_else(|e| e.into_inner());
            b.set_state(WorkerState::Ready);
            let mut next: Vec<Arc<Backend>> = (**self.ready.load()).clone();
            next.retain(|x| !Arc::ptr_eq(x, &b));
            next.push(b);
            next.sort_by_key(|x| x.index);
            self.ready.store(Arc::new(next));
        }
        self.changed.notify_waiters();
        // A new worker's slots go to the requests waiting for one.
        self.dispatch();
    }

    /// Sets `max_in_flight_per_worker` (0: off) and `max_queued` (start and live reload);
    /// waiting requests that now fit are sent at once.
    pub(crate) fn set_limit(self: &Arc<Self>, per_worker: usize, max_queued: usize) {
        self.max_queued.store(max_queued, Ordering::Relaxed);
        self.per_worker.store(per_worker, Ordering::Relaxed);
        self.dispatch();
    }

    /// Whether requests go through the slot queue ([`Pool::acquire`]).
    pub(crate) fn limited(&self) -> bool {
        self.per_worker.load(Ordering::Relaxed) > 0
    }

    /// Requests waiting for a slot now.
    pub(crate) fn queued(&self) -> usize {
        let q = self.waiters.lock().unwrap_or_else(|e| e.into_inner());
        q.iter().filter(|w| !w.tx.is_closed()).count()
    }

    /// Counts a request in flight on `b`, which `select` picked (the unlimited path and
    /// mirror copies): its end still hands a slot on if the pool is limited meanwhile.
    pub(crate) fn begin(self: &Arc<Self>, b: &Arc<Backend>) -> InFlight {
        let mut f = b.begin();
        f.pool = Some(self.clone());
        f
    }

    /// A slot on a ready worker for a request of a limited pool: at once when one is
    /// free and nobody waits for it, else after waiting in the queue (FIFO) up to
    /// `queue_timeout`. First, with no ready worker at all, it waits up to
    /// `wait_for_worker` for one, as [`Pool::select_wait`] does. `avoid`: the worker a
    /// first attempt failed on, used only when no other worker is ready.
    pub(crate) async fn acquire(
        self: &Arc<Self>,
        avoid: Option<&Arc<Backend>>,
        wait_for_worker: Duration,
        queue_timeout: Duration,
    ) -> Result<InFlight, Refused> {
        if self.ready.load().is_empty() {
            let deadline = tokio::time::Instant::now() + wait_for_worker;
            loop {
                let notified = self.changed.notified();
                if !self.ready.load().is_empty() {
                    break;
                }
                if tokio::time::timeout_at(deadline, notified).await.is_err() {
                    return Err(Refused::NoWorker);
                }
            }
        }
        let rx = {
            let mut spare = Vec::new();
            let mut q = self.waiters.lock().unwrap_or_else(|e| e.into_inner());
            // Those already waiting go first.
            self.dispatch_locked(&mut q, &mut spare);
            let claimed = if q.is_empty() {
                self.claim(avoid.map(|a| &**a))
            } else {
                None
            };
            let got = match claimed {
                Some(f) => Ok(f),
                None => {
                    let max = self.max_queued.load(Ordering::Relaxed);
                    if q.len() >= max {
                        q.retain(|w| !w.tx.is_closed());
                    }
                    if q.len() >= max {
                        Err(None)
                    } else {
                        let (tx, rx) = oneshot::channel();
                        q.push_back(Waiter {
                            tx,
                            avoid: avoid.cloned(),
                        });
                        Err(Some(rx))
                    }
                }
            };
            drop(q);
            drop(spare);
            match got {
                Ok(f) => return Ok(f),
                Err(Some(rx)) => rx,
                Err(None) => return Err(Refused::QueueFull),
            }
        };
        match tokio::time::timeout(queue_timeout, rx).await {
            Ok(Ok(f)) => Ok(f),
            // The pool itself went away (its app was removed): no worker will come.
            Ok(Err(_)) => Err(Refused::NoWorker),
            Err(_) => Err(Refused::QueueTimeout),
        }
    }

    /// Hands free slots to waiting requests, oldest first (after a slot was freed, a
    /// worker joined, or the limit changed).
    fn dispatch(self: &Arc<Self>) {
        let mut spare = Vec::new();
        {
            let mut q = self.waiters.lock().unwrap_or_else(|e| e.into_inner());
            self.dispatch_locked(&mut q, &mut spare);
        }
        // A slot sent to a waiter that had just given up comes back here; dropping it
        // (outside the lock) frees it and dispatches again.
        drop(spare);
    }

    fn dispatch_locked(self: &Arc<Self>, q: &mut VecDeque<Waiter>, spare: &mut Vec<InFlight>) {
        let mut i = 0;
        while i < q.len() {
            if q[i].tx.is_closed() {
                q.remove(i);
                continue;
            }
            match self.claim(q[i].avoid.as_deref()) {
                Some(f) => {
                    let w = q.remove(i).expect("index checked");
                    if let Err(f) = w.tx.send(f) {
                        spare.push(f);
                    }
                }
                // Nothing free at all: the others wait too.
                None if q[i].avoid.is_none() => break,
                // Only the worker this one avoids is free: the next may take it.
                None => i += 1,
            }
        }
    }

    /// A slot on a worker with one free (fewer than `max_in_flight_per_worker` in
    /// flight), chosen among those by the app's `balance`; stalled workers and `avoid`
    /// only when no other worker is ready at all. Called under the queue's lock only.
    fn claim(self: &Arc<Self>, avoid: Option<&Backend>) -> Option<InFlight> {
        let limit = match self.per_worker.load(Ordering::Relaxed) {
            0 => usize::MAX,
            n => n,
        };
        let set = self.ready.load();
        let others = set.iter().any(|b| !avoided(b, avoid));
        let free: Vec<Arc<Backend>> = set
            .iter()
            .filter(|b| (!others || !avoided(b, avoid)) && b.in_flight() < limit)
            .cloned()
            .collect();
        if free.is_empty() {
            return None;
        }
        let b = self.selection.load().select(&free, None).clone();
        Some(self.begin(&b))
    }

    pub(crate) fn remove(&self, b: &Arc<Backend>) {
        let _w = self.write.lock().unwrap_or_else(|e| e.into_inner());
        let mut next: Vec<Arc<Backend>> = (**self.ready.load()).clone();
        next.retain(|x| !Arc::ptr_eq(x, b));
        self.ready.store(Arc::new(next));
    }

    /// Selects by `balance` from now on (a live reload; a new rotation starts afresh).
    pub(crate) fn set_balance(&self, balance: Balance) {
        self.selection
            .store(std::sync::Arc::new(selection_for(balance)));
    }

    pub(crate) fn len(&self) -> usize {
        self.ready.load().len()
    }

    /// A ready worker, or `None` when there is none right now. With a sticky `key` (the
    /// hash of the app's `sticky_worker` key), the key's own worker by rendezvous hashing
    /// unless it is passed over (stalled, or `avoid`): then the key's next one; a request
    /// without a key, or when every worker is passed over, gets the app's selection.
    pub(crate) fn select(&self, avoid: Option<&Backend>, key: Option<u64>) -> Option<Arc<Backend>> {
        let set = self.ready.load();
        if set.is_empty() {
            return None;
        }
        if let Some(key) = key
            && let Some(b) = crate::sticky::rendezvous(&set, key, |b| !avoided(b, avoid))
        {
            return Some(b.clone());
        }
        Some(self.selection.load().select(&set, avoid).clone())
    }

    /// Like [`Pool::select`], waiting up to `wait` for a worker to become ready (start-up,
    /// or the only worker being replaced).
    pub(crate) async fn select_wait(
        &self,
        avoid: Option<&Backend>,
        key: Option<u64>,
        wait: std::time::Duration,
    ) -> Option<Arc<Backend>> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let notified = self.changed.notified();
            if let Some(b) = self.select(avoid, key) {
                return Some(b);
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(n: usize) -> Vec<Arc<Backend>> {
        (0..n)
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

    #[test]
    fn round_robin_visits_each_in_turn() {
        let b = set(3);
        let rr = RoundRobin::default();
        let picks: Vec<usize> = (0..6).map(|_| rr.select(&b, None).index()).collect();
        assert_eq!(picks, vec![0, 1, 2, 0, 1, 2]);
    }

    #[test]
    fn least_conn_prefers_idle_and_spreads_ties() {
        let b = set(3);
        let _busy = b[0].begin();
        let _busy2 = b[0].begin();
        let _one = b[1].begin();
        let lc = LeastConn::default();
        for _ in 0..5 {
            assert_eq!(lc.select(&b, None).index(), 2);
        }
        let idle = set(2);
        let picks: Vec<usize> = (0..4).map(|_| lc.select(&idle, None).index()).collect();
        assert!(picks.contains(&0) && picks.contains(&1), "{picks:?}");
    }

    #[test]
    fn power_of_two_never_picks_the_busiest_of_two_and_honours_avoid() {
        let b = set(2);
        let _g: Vec<_> = (0..5).map(|_| b[1].begin()).collect();
        for _ in 0..100 {
            assert_eq!(PowerOfTwo.select(&b, None).index(), 0);
            assert_eq!(PowerOfTwo.select(&b, Some(&b[0])).index(), 1);
        }
    }

    #[test]
    fn avoid_skips_the_failed_worker() {
        let b = set(2);
        let rr = RoundRobin::default();
        let lc = LeastConn::default();
        for _ in 0..10 {
            assert_eq!(rr.select(&b, Some(&b[0])).index(), 1);
            assert_eq!(lc.select(&b, Some(&b[1])).index(), 0);
        }
    }

    /// A worker holding requests it does not answer is passed over by every method until
    /// it answers; an idle one or one that answers is not stalled, however long it idled.
    #[test]
    fn a_stalled_worker_gets_nothing_new_until_it_answers() {
        let addr = |p| SocketAddr::from(([127, 0, 0, 1], p));
        let quick = |i| {
            Arc::new(
                Backend::new("t".into(), i, addr(2000 + i as u16), 0)
                    .with_stall_after(Duration::from_millis(1)),
            )
        };
        // Worker 1 never stalls in this test, however the machine pauses it.
        let never = Arc::new(
            Backend::new("t".into(), 1, addr(2001), 0).with_stall_after(Duration::from_secs(3600)),
        );
        let b = vec![quick(0), never];
        std::thread::sleep(Duration::from_millis(5));
        assert!(!b[0].stalled(), "idle is not stalled");
        let stuck = b[0].begin(); // the wait starts now, not at creation
        assert!(!Backend::new("t".into(), 9, addr(2009), 0).stalled());
        std::thread::sleep(Duration::from_millis(5));
        assert!(b[0].stalled());
        // Worker 1 is busier, yet the only one that can answer.
        let busy: Vec<_> = (0..3).map(|_| b[1].begin()).collect();
        busy[0].head_received();
        let (rr, lc) = (RoundRobin::default(), LeastConn::default());
        for _ in 0..4 {
            assert_eq!(rr.select(&b, None).index(), 1);
            assert_eq!(lc.select(&b, None).index(), 1);
            assert_eq!(PowerOfTwo.select(&b, None).index(), 1);
        }
        // An answer makes it eligible again (checked with a threshold no pause can reach).
        let patient = Arc::new(
            Backend::new("t".into(), 3, addr(2003), 0).with_stall_after(Duration::from_secs(3600)),
        );
        let _g = patient.begin();
        let g2 = patient.begin();
        g2.head_received();
        assert!(!patient.stalled());
        drop(stuck);
        assert!(!b[0].stalled(), "nothing in flight: not stalled");
    }

    /// A response whose head has arrived and whose body still streams (a download,
    /// server-sent events) is progress: however long it lasts, its worker is not
    /// stalled, and keeps getting new requests.
    #[test]
    fn a_streaming_response_does_not_make_its_worker_stalled() {
        let b = Arc::new(
            Backend::new("t".into(), 0, SocketAddr::from(([127, 0, 0, 1], 2100)), 0)
                .with_stall_after(Duration::from_millis(1)),
        );
        let stream = b.begin();
        stream.head_received();
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(b.in_flight(), 1, "the stream is still in flight");
        assert!(!b.stalled(), "a streaming body made its worker stalled");
        let other = Arc::new(Backend::new(
            "t".into(),
            1,
            SocketAddr::from(([127, 0, 0, 1], 2101)),
            0,
        ));
        let rr = RoundRobin::default();
        let both = vec![b.clone(), other];
        let picks: Vec<usize> = (0..4).map(|_| rr.select(&both, None).index()).collect();
        assert!(
            picks.contains(&0),
            "the streaming worker got nothing: {picks:?}"
        );
        // A request that waits for its head behind the stream does count.
        let waiting = b.begin();
        std::thread::sleep(Duration::from_millis(5));
        assert!(b.stalled());
        drop(waiting);
        assert!(!b.stalled());
    }

    fn limited_pool(workers: usize, per_worker: usize, max_queued: usize) -> Arc<Pool> {
        let pool = Arc::new(Pool::new(Balance::LeastConn));
        pool.set_limit(per_worker, max_queued);
        for b in set(workers) {
            pool.add(b);
        }
        pool
    }

    /// Waits (yielding) until `n` requests are queued.
    async fn until_queued(pool: &Pool, n: usize) {
        for _ in 0..10_000 {
            if pool.queued() == n {
                return;
            }
            tokio::task::yield_now().await;
        }
        panic!("never {n} queued: {}", pool.queued());
    }

    /// With one slot per worker, the requests past the slots wait; each freed slot goes
    /// to the oldest waiter (whichever worker freed it), never to two requests at once.
    #[tokio::test]
    async fn a_freed_slot_goes_to_the_oldest_waiter_and_never_twice() {
        let pool = limited_pool(2, 1, 10);
        let long = Duration::from_secs(3600);
        let a = pool.acquire(None, long, long).await.unwrap();
        let b = pool.acquire(None, long, long).await.unwrap();
        assert_ne!(a.backend().index(), b.backend().index());
        let p = pool.clone();
        let first = tokio::spawn(async move { p.acquire(None, long, long).await });
        until_queued(&pool, 1).await;
        let p = pool.clone();
        let second = tokio::spawn(async move { p.acquire(None, long, long).await });
        until_queued(&pool, 2).await;
        let (b_index, a_index) = (b.backend().index(), a.backend().index());
        drop(b);
        let got = first.await.unwrap().unwrap();
        assert_eq!(
            got.backend().index(),
            b_index,
            "the oldest waiter gets the freed slot"
        );
        assert_eq!(pool.queued(), 1);
        assert!(!second.is_finished());
        assert_eq!(got.backend().in_flight(), 1, "one request per slot");
        drop(a);
        let got2 = second.await.unwrap().unwrap();
        assert_eq!(got2.backend().index(), a_index);
        assert_eq!(pool.queued(), 0);
    }

    /// The queue is bounded: past `max_queued` a request is refused at once; a waiter
    /// gives up after `queue_timeout`, and the slot freed later is not lost to it.
    #[tokio::test]
    async fn the_queue_refuses_when_full_and_waiters_time_out() {
        let pool = limited_pool(1, 1, 1);
        let long = Duration::from_secs(3600);
        let held = pool.acquire(None, long, long).await.unwrap();
        let p = pool.clone();
        let waiter = tokio::spawn(async move { p.acquire(None, long, long).await });
        until_queued(&pool, 1).await;
        let full = pool.acquire(None, long, long).await.unwrap_err();
        assert_eq!(full, Refused::QueueFull);
        waiter.abort();
        let _ = waiter.await;
        let timed = pool
            .acquire(None, long, Duration::from_millis(20))
            .await
            .unwrap_err();
        assert_eq!(timed, Refused::QueueTimeout);
        drop(held);
        // The slot is free again, for the next request.
        let again = pool.acquire(None, long, long).await.unwrap();
        assert_eq!(again.backend().in_flight(), 1);
    }

    /// A resend avoids the worker its first attempt failed on, while another worker is
    /// ready: it waits for that one's slot even if the avoided worker's is free.
    #[tokio::test]
    async fn a_resend_waits_for_another_worker_than_the_one_it_failed_on() {
        let pool = limited_pool(2, 1, 10);
        let long = Duration::from_secs(3600);
        let a = pool.acquire(None, long, long).await.unwrap();
        let b = pool.acquire(None, long, long).await.unwrap();
        let failed_on = a.backend().clone();
        drop(a);
        let p = pool.clone();
        let avoid = failed_on.clone();
        let resend = tokio::spawn(async move { p.acquire(Some(&avoid), long, long).await });
        until_queued(&pool, 1).await;
        let b_index = b.backend().index();
        drop(b);
        let got = resend.await.unwrap().unwrap();
        assert_eq!(got.backend().index(), b_index);
        assert_ne!(got.backend().index(), failed_on.index());
    }
}
