//! The request workers of one segment (one target, one step or part of a step).
//!
//! Threads × (a current-thread tokio runtime + a `LocalSet`). Every thread runs "slots": a
//! slot owns one keep-alive connection and runs [`slot`], the one worker loop. Where the
//! next request comes from — back to back (closed) or from a fixed schedule (open) — is the
//! [`Pacer`] strategy handed to it. Each thread records into its own [`Tally`] (histogram +
//! counters); the segment merges them when the threads end. No message per request.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::RequestSource;
use crate::http1::{Conn, Endpoint, Failure, RequestParts};
use crate::result::new_histogram;
use crate::timer::PreciseTimer;

/// How many requests a segment may send.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Limit {
    Time(Duration),
    Count(u64),
}

/// How requests are paced in a segment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Pacing {
    /// `connections` slots sending back to back.
    Closed { connections: u32 },
    /// Request `i` is due at `t0 + i / rate`; at most `max_in_flight` at once, of which
    /// `preconnect` connections are opened before the clock starts.
    Open {
        rate: f64,
        max_in_flight: u32,
        preconnect: u32,
    },
}

/// Everything a segment needs; shared read-only by its threads.
#[derive(Debug)]
pub(crate) struct SegmentSpec {
    pub(crate) addr: SocketAddr,
    pub(crate) endpoint: Endpoint,
    pub(crate) source: Arc<dyn RequestSource>,
    pub(crate) pacing: Pacing,
    pub(crate) limit: Limit,
    pub(crate) threads: u32,
    pub(crate) connect_timeout: Duration,
    pub(crate) timeout: Duration,
}

/// Counters one thread keeps; merged per segment, then per step.
#[derive(Debug)]
pub(crate) struct Tally {
    pub(crate) histogram: Histogram<u64>,
    pub(crate) requests: u64,
    pub(crate) errors: u64,
    pub(crate) late: u64,
    pub(crate) not_sent: u64,
    /// Requests (any outcome) completed inside the segment's time window.
    pub(crate) in_window: u64,
    pub(crate) error_kinds: BTreeMap<String, u64>,
    connect: u64,
    timeout: u64,
    io: u64,
    protocol: u64,
    /// Non-2xx statuses, few distinct ones: a small vector beats a map on the hot path.
    statuses: Vec<(u16, u64)>,
}

impl Tally {
    pub(crate) fn new() -> Tally {
        Tally {
            histogram: new_histogram(),
            requests: 0,
            errors: 0,
            late: 0,
            not_sent: 0,
            in_window: 0,
            error_kinds: BTreeMap::new(),
            connect: 0,
            timeout: 0,
            io: 0,
            protocol: 0,
            statuses: Vec::new(),
        }
    }

    fn record_response(&mut self, status: u16, latency: Duration) {
        self.requests += 1;
        let _ = self
            .histogram
            .record((latency.as_micros() as u64).clamp(1, self.histogram.high()));
        if !(200..300).contains(&status) {
            self.errors += 1;
            match self.statuses.iter_mut().find(|(s, _)| *s == status) {
                Some((_, n)) => *n += 1,
                None => self.statuses.push((status, 1)),
            }
        }
    }

    fn record_failure(&mut self, failure: Failure) {
        self.requests += 1;
        self.errors += 1;
        match failure {
            Failure::Connect => self.connect += 1,
            Failure::Timeout => self.timeout += 1,
            Failure::Io => self.io += 1,
            Failure::Protocol => self.protocol += 1,
        }
    }

    /// Moves the hot-path counters into `error_kinds` (keys `connect`, `timeout`, `io`,
    /// `protocol`, `status_NNN`).
    fn settle(&mut self) {
        for (key, n) in [
            ("connect", &mut self.connect),
            ("timeout", &mut self.timeout),
            ("io", &mut self.io),
            ("protocol", &mut self.protocol),
        ] {
            if *n > 0 {
                *self.error_kinds.entry(key.to_string()).or_default() += *n;
                *n = 0;
            }
        }
        for (status, n) in self.statuses.drain(..) {
            *self
                .error_kinds
                .entry(format!("status_{status}"))
                .or_default() += n;
        }
    }

    pub(crate) fn merge(&mut self, mut other: Tally) {
        other.settle();
        self.settle();
        let _ = self.histogram.add(&other.histogram);
        self.requests += other.requests;
        self.errors += other.errors;
        self.late += other.late;
        self.not_sent += other.not_sent;
        self.in_window += other.in_window;
        for (k, n) in other.error_kinds {
            *self.error_kinds.entry(k).or_default() += n;
        }
    }
}

/// Live counters of one thread for the progress line: relaxed, uncontended atomics.
#[derive(Debug, Default)]
#[repr(align(128))] // one cache line pair per thread: no false sharing between threads
pub(crate) struct Live {
    pub(crate) completed: AtomicU64,
    pub(crate) errors: AtomicU64,
    pub(crate) latency_us_sum: AtomicU64,
    /// Coarse latency buckets for live percentiles (the dashboard).
    pub(crate) buckets: crate::live_latency::Buckets,
}

/// What a segment measured.
#[derive(Debug)]
pub(crate) struct Outcome {
    pub(crate) tally: Tally,
    /// From the common start to the last completion.
    pub(crate) wall: Duration,
    /// The time window of a time-bound segment (`tally.in_window` completed inside it).
    pub(crate) window: Option<Duration>,
}

/// Runs one segment on `spec.threads` OS threads; `watch` is called every ~200 ms on the
/// calling thread with the live counters, the start instant and whether it is still running.
pub(crate) fn run_segment(
    spec: Arc<SegmentSpec>,
    mut watch: impl FnMut(&[Arc<Live>], Instant),
) -> std::io::Result<Outcome> {
    let threads = spec.threads.max(1) as usize;
    let gate = Arc::new(Gate::default());
    let claim = Arc::new(AtomicU64::new(0));
    let lives: Vec<Arc<Live>> = (0..threads).map(|_| Arc::new(Live::default())).collect();
    let mut handles = Vec::with_capacity(threads);
    for (w, live) in lives.iter().enumerate() {
        let spec = spec.clone();
        let thread_gate = gate.clone();
        let claim = claim.clone();
        let live = live.clone();
        let handle = std::thread::Builder::new()
            .name(format!("scalpel-load-{w}"))
            .spawn(move || thread_main(spec, w as u64, thread_gate, claim, live));
        match handle {
            Ok(h) => handles.push(h),
            Err(e) => {
                // Release the threads already waiting, then report.
                gate.open(None);
                for h in handles {
                    let _ = h.join();
                }
                return Err(e);
            }
        }
    }
    gate.wait_ready(threads); // every thread has pre-connected
    let t0 = Instant::now() + Duration::from_millis(2);
    gate.open(Some(t0));
    while handles.iter().any(|h| !h.is_finished()) {
        std::thread::sleep(Duration::from_millis(50));
        watch(&lives, t0);
    }
    let mut total = Tally::new();
    let mut end = t0;
    for h in handles {
        let (tally, thread_end) = h
            .join()
            .map_err(|_| std::io::Error::other("a load worker thread panicked"))?;
        total.merge(tally);
        end = end.max(thread_end);
    }
    total.settle();
    Ok(Outcome {
        tally: total,
        wall: end.saturating_duration_since(t0),
        window: match spec.limit {
            Limit::Time(d) => Some(d),
            Limit::Count(_) => None,
        },
    })
}

/// Shares of `total` over `parts`, the first ones taking the remainder.
pub(crate) fn share(total: u64, parts: u64, index: u64) -> u64 {
    total / parts + u64::from(index < total % parts)
}

/// The start line of a segment: threads report ready, the coordinator opens it with the
/// common start instant, or with `None` to call the segment off.
#[derive(Debug, Default)]
struct Gate {
    state: Mutex<(usize, Option<Option<Instant>>)>,
    changed: Condvar,
}

impl Gate {
    fn ready_and_wait(&self) -> Option<Instant> {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.0 += 1;
        self.changed.notify_all();
        loop {
            if let Some(t0) = s.1 {
                return t0;
            }
            s = self.changed.wait(s).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn wait_ready(&self, threads: usize) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        while s.0 < threads {
            s = self.changed.wait(s).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn open(&self, t0: Option<Instant>) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.1 = Some(t0);
        self.changed.notify_all();
    }
}

fn thread_main(
    spec: Arc<SegmentSpec>,
    w: u64,
    gate: Arc<Gate>,
    claim: Arc<AtomicU64>,
    live: Arc<Live>,
) -> (Tally, Instant) {
    let threads = u64::from(spec.threads.max(1));
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(_) => {
            gate.ready_and_wait();
            let mut t = Tally::new();
            t.record_failure(Failure::Io);
            return (t, Instant::now());
        }
    };
    let local = tokio::task::LocalSet::new();
    let (slots, preconnect) = match spec.pacing {
        Pacing::Closed { connections } => {
            let n = share(u64::from(connections), threads, w);
            (n, n)
        }
        Pacing::Open {
            max_in_flight,
            preconnect,
            ..
        } => {
            let n = share(u64::from(max_in_flight), threads, w).max(1);
            (n, share(u64::from(preconnect), threads, w).min(n))
        }
    };
    // Connect before the clock starts, so the first requests do not pay for it; a failure
    // here is left for the run (the slot reconnects and counts the error).
    let conns: Vec<Option<Conn>> = rt.block_on(async {
        let mut out = Vec::with_capacity(preconnect as usize);
        for _ in 0..preconnect {
            out.push(Conn::connect(spec.addr, spec.connect_timeout).await.ok());
        }
        out
    });
    let Some(t0) = gate.ready_and_wait() else {
        return (Tally::new(), Instant::now());
    };
    let tally = Rc::new(RefCell::new(Tally::new()));
    let ctx = Rc::new(Ctx {
        window_end: match spec.limit {
            Limit::Time(d) => Some(t0 + d),
            Limit::Count(_) => None,
        },
        spec: spec.clone(),
        fixed: fixed_request(&spec),
        tally: tally.clone(),
        live,
    });
    local.block_on(&rt, async {
        match spec.pacing {
            Pacing::Closed { .. } => {
                let deadline = match spec.limit {
                    Limit::Time(d) => Some(t0 + d),
                    Limit::Count(_) => None,
                };
                let count = match spec.limit {
                    Limit::Count(n) => Some(n),
                    Limit::Time(_) => None,
                };
                let pacer = Rc::new(Pacer::Closed {
                    deadline,
                    count,
                    claim,
                });
                // Wait for t0 so that every thread starts together.
                tokio::time::sleep_until(t0.into()).await;
                let handles: Vec<_> = conns
                    .into_iter()
                    .take(slots as usize)
                    .map(|c| tokio::task::spawn_local(slot(ctx.clone(), pacer.clone(), c, false)))
                    .collect();
                for h in handles {
                    let _ = h.await;
                }
            }
            Pacing::Open { rate, .. } => {
                dispatch(ctx.clone(), conns, slots, rate, t0, w, threads).await;
            }
        }
    });
    let end = Instant::now();
    drop(ctx);
    let tally = Rc::try_unwrap(tally)
        .map(RefCell::into_inner)
        .unwrap_or_else(|rc| std::mem::replace(&mut rc.borrow_mut(), Tally::new()));
    (tally, end)
}

/// The pre-encoded request when every index renders the same bytes.
fn fixed_request(spec: &SegmentSpec) -> Option<(Vec<u8>, bool)> {
    if !spec.source.is_fixed() {
        return None;
    }
    let mut parts = RequestParts::default();
    spec.source.render(0, &mut parts);
    let mut wire = Vec::new();
    parts.encode(&spec.endpoint, &mut wire);
    Some((wire, parts.is_head()))
}

struct Ctx {
    spec: Arc<SegmentSpec>,
    /// Completions up to this instant count towards the achieved rate (time-bound segments).
    window_end: Option<Instant>,
    fixed: Option<(Vec<u8>, bool)>,
    tally: Rc<RefCell<Tally>>,
    live: Arc<Live>,
}

/// One request to make: its index in the request set and, in the open model, when it was due.
#[derive(Debug, Clone, Copy)]
struct Ticket {
    index: u64,
    intended: Option<Instant>,
}

/// Where a slot's next request comes from.
enum Pacer {
    /// Back to back until the deadline or until `count` requests were claimed by all threads.
    Closed {
        deadline: Option<Instant>,
        count: Option<u64>,
        claim: Arc<AtomicU64>,
    },
    /// Claimed from the thread's share of the schedule when due.
    Open(Rc<Schedule>),
}

impl Pacer {
    async fn next(&self) -> Option<Ticket> {
        match self {
            Pacer::Closed {
                deadline,
                count,
                claim,
            } => {
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    return None;
                }
                let index = claim.fetch_add(1, Ordering::Relaxed);
                if count.is_some_and(|n| index >= n) {
                    return None;
                }
                Some(Ticket {
                    index,
                    intended: None,
                })
            }
            Pacer::Open(s) => loop {
                if let Some(t) = s.claim(Instant::now()) {
                    return Some(t);
                }
                if s.exhausted() {
                    return None;
                }
                // Nothing due yet: wait for the thread's timer to hand over a due request.
                s.parked.set(s.parked.get() + 1);
                s.wake.notified().await;
                s.coming.set(s.coming.get().saturating_sub(1));
            },
        }
    }

    fn is_closed(&self) -> bool {
        matches!(self, Pacer::Closed { .. })
    }
}

/// One thread's share of the open model's schedule: its `k`-th request is global request
/// `i = first + k·stride`, due at `t0 + i / rate`. Shared (single-threaded) by the thread's
/// slots and its timer loop ([`dispatch`]).
///
/// A slot that finishes a request claims the next one itself when it is already due — no
/// hand-off, no wake-up; that is the common case under load. Otherwise the slot parks, and
/// the timer loop, waking at the next request's intended time (a timerfd, microsecond
/// precision: see [`crate::timer`]), hands the requests that fell due to parked slots. A
/// request still without a slot a tick (1 ms) later gets a new connection (the pool grows
/// by at most an eighth a tick), or, when the in-flight limit is reached, waits for a busy
/// one and is counted late.
struct Schedule {
    t0: Instant,
    period_s: f64,
    first: u64,
    stride: u64,
    /// This thread's number of requests in the whole schedule.
    mine: u64,
    /// The next request (`k`) not yet claimed.
    next: Cell<u64>,
    /// Claims stop here (`mine`, lowered when the time is up).
    stop: Cell<u64>,
    /// Requests `k < late_through` found no free connection when they fell due.
    late_through: Cell<u64>,
    late: Cell<u64>,
    /// Slots waiting for work and not yet woken.
    parked: Cell<u64>,
    /// Slots woken or spawned for due requests that have not claimed yet.
    coming: Cell<u64>,
    wake: Notify,
}

impl Schedule {
    fn intended(&self, k: u64) -> Instant {
        self.t0 + Duration::from_secs_f64((self.first + k * self.stride) as f64 * self.period_s)
    }

    /// Takes the next request if it is due by `now`.
    fn claim(&self, now: Instant) -> Option<Ticket> {
        let k = self.next.get();
        if k >= self.stop.get() {
            return None;
        }
        let intended = self.intended(k);
        if intended > now {
            return None;
        }
        self.next.set(k + 1);
        if k < self.late_through.get() {
            self.late.set(self.late.get() + 1);
        }
        if k + 1 >= self.stop.get() {
            self.wake.notify_waiters(); // the parked slots have nothing left: let them end
        }
        Some(Ticket {
            index: self.first + k * self.stride,
            intended: Some(intended),
        })
    }

    fn exhausted(&self) -> bool {
        self.next.get() >= self.stop.get()
    }
}

/// The one worker loop: take a ticket, (re)connect if needed, send, read, record. `handed`:
/// the open model's timer started this slot for a due request.
async fn slot(ctx: Rc<Ctx>, pacer: Rc<Pacer>, mut conn: Option<Conn>, handed: bool) {
    let spec = &ctx.spec;
    if let (true, Pacer::Open(s)) = (handed, &*pacer) {
        s.coming.set(s.coming.get().saturating_sub(1));
    }
    let mut parts = RequestParts::default();
    let mut wire = Vec::new();
    while let Some(ticket) = pacer.next().await {
        let (request, head): (&[u8], bool) = match &ctx.fixed {
            Some((bytes, head)) => (bytes, *head),
            None => {
                spec.source.render(ticket.index, &mut parts);
                parts.encode(&spec.endpoint, &mut wire);
                (&wire, parts.is_head())
            }
        };
        let start = ticket.intended.unwrap_or_else(Instant::now);
        let attempt = async {
            if conn.is_none() {
                conn = Some(Conn::connect(spec.addr, spec.connect_timeout).await?);
            }
            let c = conn.as_mut().expect("connected above");
            c.round_trip(request, head).await
        };
        let outcome = match tokio::time::timeout(spec.timeout, attempt).await {
            Ok(result) => result,
            Err(_) => Err(Failure::Timeout),
        };
        let now = Instant::now();
        let latency = now.saturating_duration_since(start);
        let mut connect_failed = false;
        {
            let mut tally = ctx.tally.borrow_mut();
            if ctx.window_end.is_none_or(|end| now <= end) {
                tally.in_window += 1;
            }
            match outcome {
                Ok((status, reusable)) => {
                    if !reusable {
                        conn = None;
                    }
                    tally.record_response(status, latency);
                    let us = latency.as_micros() as u64;
                    ctx.live.latency_us_sum.fetch_add(us, Ordering::Relaxed);
                    ctx.live.buckets.record(us);
                    if !(200..300).contains(&status) {
                        ctx.live.errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Err(failure) => {
                    conn = None;
                    connect_failed = matches!(failure, Failure::Connect);
                    tally.record_failure(failure);
                    ctx.live.errors.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        ctx.live.completed.fetch_add(1, Ordering::Relaxed);
        if connect_failed && pacer.is_closed() {
            // A refused connection fails in microseconds; without a pause a closed loop
            // would spin on it. The open model needs none: its schedule paces it.
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

/// The open model's timer loop for thread `w` of `threads` (see [`Schedule`]). A request
/// that falls due goes to a slot that finishes or is parked; one still waiting a tick later
/// gets a new slot (new connection) while fewer than `max_slots` exist; otherwise it waits
/// for a slot to finish and is counted `late` (its latency still runs from its intended
/// time). Requests still waiting when the segment's
/// time is up are counted `not_sent`.
async fn dispatch(
    ctx: Rc<Ctx>,
    conns: Vec<Option<Conn>>,
    max_slots: u64,
    rate: f64,
    t0: Instant,
    w: u64,
    threads: u64,
) {
    // Number of requests of the whole schedule, over all threads.
    let (total, deadline) = match ctx.spec.limit {
        Limit::Count(n) => (n, None),
        Limit::Time(d) => (
            (d.as_secs_f64() * rate).ceil().max(0.0) as u64,
            Some(t0 + d),
        ),
    };
    let mine = if total > w {
        (total - w).div_ceil(threads)
    } else {
        0
    };
    let sched = Rc::new(Schedule {
        t0,
        period_s: 1.0 / rate,
        first: w,
        stride: threads,
        mine,
        next: Cell::new(0),
        stop: Cell::new(mine),
        late_through: Cell::new(0),
        late: Cell::new(0),
        parked: Cell::new(0),
        coming: Cell::new(0),
        wake: Notify::new(),
    });
    let pacer = Rc::new(Pacer::Open(sched.clone()));
    let mut handles: Vec<JoinHandle<()>> = Vec::new();
    let spawn = |conn: Option<Conn>, handed: bool, handles: &mut Vec<JoinHandle<()>>| {
        handles.push(tokio::task::spawn_local(slot(
            ctx.clone(),
            pacer.clone(),
            conn,
            handed,
        )));
    };
    for c in conns {
        spawn(c, false, &mut handles);
    }
    // Requests `k < due` have fallen due; `k < seen` were already due at the previous tick.
    let mut due = 0u64;
    let mut seen = 0u64;
    let tick = Duration::from_millis(1);
    let timer = PreciseTimer::new();
    const MIN_WAKE_GAP: Duration = Duration::from_micros(50);
    loop {
        let now = Instant::now();
        let time_up = deadline.is_some_and(|d| now >= d);
        while due < sched.mine && sched.intended(due) <= now {
            due += 1;
        }
        // Due and not claimed yet. Claims go in order, so the oldest are served first: by
        // slots already on their way, then by parked slots woken now.
        let next = sched.next.get();
        let unclaimed = due.saturating_sub(next);
        let on_way = sched.coming.get().min(unclaimed);
        let wake = sched.parked.get().min(unclaimed - on_way);
        for _ in 0..wake {
            sched.parked.set(sched.parked.get() - 1);
            sched.coming.set(sched.coming.get() + 1);
            sched.wake.notify_one();
        }
        // Requests due since an earlier tick that still have no slot: a new connection each
        // while the limit allows, otherwise they wait for a busy one — late. (Requests due
        // for less than a tick get no new connection yet: a busy slot about to finish takes
        // most of them, and opening connections for them would only grow the pool.)
        // The pool grows by at most an eighth (at least one) a tick: a backlog left by a
        // stall of this thread (another process ran) is worked off by the existing
        // connections at closed-loop speed, where hundreds of new ones would only slow the
        // target; a slow target still gets its connections within tens of ticks.
        let waited = seen.saturating_sub(next).saturating_sub(on_way + wake);
        let room = max_slots.saturating_sub(handles.len() as u64);
        let growth = (handles.len() as u64 / 8).max(1);
        let opened = waited.min(room).min(growth);
        for _ in 0..opened {
            sched.coming.set(sched.coming.get() + 1);
            spawn(None, true, &mut handles);
        }
        if waited > opened && opened == room {
            let late_end = next + on_way + wake + waited;
            sched
                .late_through
                .set(sched.late_through.get().max(late_end));
        }
        seen = due;
        if time_up {
            // What is handed over still goes out; what waits for a connection is not sent.
            let stop = (sched.next.get() + sched.coming.get()).min(sched.mine);
            sched.stop.set(stop.max(sched.next.get()));
            break;
        }
        let unserved = unclaimed > on_way + wake;
        if sched.exhausted() || (due >= sched.mine && !unserved && deadline.is_none()) {
            break; // all claimed, or all handed over: the slots finish the rest
        }
        // The next request to fall due, the next tick while some wait, the end of the time.
        let next_due = (due < sched.mine).then(|| sched.intended(due));
        let retry = unserved.then(|| now + tick);
        let Some(at) = next_due.into_iter().chain(retry).chain(deadline).min() else {
            break;
        };
        // At most one timer wake-up per MIN_WAKE_GAP: a wake-up costs three system calls,
        // and at 100k req/s one per request would eat half the generator's core. Requests
        // falling due within the gap leave together, at most MIN_WAKE_GAP late (still
        // measured from their intended time).
        timer.sleep_until(at.max(now + MIN_WAKE_GAP)).await;
        // Let the slots whose responses arrived with this wake-up claim due requests first.
        tokio::task::yield_now().await;
    }
    if sched.exhausted() {
        sched.wake.notify_waiters();
    }
    for h in handles {
        let _ = h.await;
    }
    let mut tally = ctx.tally.borrow_mut();
    tally.late += sched.late.get();
    tally.not_sent += sched.mine - sched.next.get();
}
