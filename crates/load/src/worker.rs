//! The request workers of one segment (one target, one step or part of a step).
//!
//! Threads × (a current-thread tokio runtime + a `LocalSet`). Every thread runs "slots": a
//! slot owns one keep-alive connection and runs [`slot`], the one worker loop. Where the
//! next request comes from — back to back (closed) or from a fixed schedule (open) — is the
//! [`Pacer`] strategy handed to it. Each thread records into its own [`Tally`] (histogram +
//! counters); the segment merges them when the threads end. No message per request.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, VecDeque};
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
}

/// What a segment measured.
#[derive(Debug)]
pub(crate) struct Outcome {
    pub(crate) tally: Tally,
    /// From the common start to the last completion.
    pub(crate) wall: Duration,
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
                    .map(|c| tokio::task::spawn_local(slot(ctx.clone(), pacer.clone(), c)))
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
    /// Tickets released by the thread's dispatcher at their intended times.
    Open(Rc<OpenQueue>),
}

struct OpenQueue {
    queue: RefCell<VecDeque<Ticket>>,
    /// Slots not working on a request (waiting for a ticket, or spawned and not yet run).
    idle: Cell<usize>,
    done: Cell<bool>,
    work: Notify,
    freed: Notify,
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
            Pacer::Open(q) => loop {
                if let Some(t) = q.queue.borrow_mut().pop_front() {
                    q.idle.set(q.idle.get() - 1);
                    return Some(t);
                }
                if q.done.get() {
                    q.idle.set(q.idle.get() - 1);
                    return None;
                }
                q.work.notified().await;
            },
        }
    }

    fn finished(&self) {
        if let Pacer::Open(q) = self {
            q.idle.set(q.idle.get() + 1);
            q.freed.notify_one();
        }
    }

    fn is_closed(&self) -> bool {
        matches!(self, Pacer::Closed { .. })
    }
}

/// The one worker loop: take a ticket, (re)connect if needed, send, read, record.
async fn slot(ctx: Rc<Ctx>, pacer: Rc<Pacer>, mut conn: Option<Conn>) {
    let spec = &ctx.spec;
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
        let latency = start.elapsed();
        let mut connect_failed = false;
        {
            let mut tally = ctx.tally.borrow_mut();
            match outcome {
                Ok((status, reusable)) => {
                    if !reusable {
                        conn = None;
                    }
                    tally.record_response(status, latency);
                    ctx.live
                        .latency_us_sum
                        .fetch_add(latency.as_micros() as u64, Ordering::Relaxed);
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
        pacer.finished();
        if connect_failed && pacer.is_closed() {
            // A refused connection fails in microseconds; without a pause a closed loop
            // would spin on it. The open model needs none: its schedule paces it.
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

/// The open model's schedule for thread `w` of `threads`: global request `i = w + k·threads`
/// is due at `t0 + i / rate`. A due request goes to an idle slot, or a new one (new
/// connection) while fewer than `max_slots` exist; otherwise it waits for one to free up and
/// is counted `late` (its latency still runs from its intended time). Requests still waiting
/// when the segment's time is up are counted `not_sent`.
async fn dispatch(
    ctx: Rc<Ctx>,
    conns: Vec<Option<Conn>>,
    max_slots: u64,
    rate: f64,
    t0: Instant,
    w: u64,
    threads: u64,
) {
    let queue = Rc::new(OpenQueue {
        queue: RefCell::new(VecDeque::new()),
        idle: Cell::new(0),
        done: Cell::new(false),
        work: Notify::new(),
        freed: Notify::new(),
    });
    let pacer = Rc::new(Pacer::Open(queue.clone()));
    let mut handles: Vec<JoinHandle<()>> = Vec::new();
    let spawn = |conn: Option<Conn>, handles: &mut Vec<JoinHandle<()>>| {
        queue.idle.set(queue.idle.get() + 1);
        handles.push(tokio::task::spawn_local(slot(
            ctx.clone(),
            pacer.clone(),
            conn,
        )));
    };
    for c in conns {
        spawn(c, &mut handles);
    }
    let period_s = 1.0 / rate;
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
    let mut late = 0;
    let mut dispatched = 0;
    'schedule: while dispatched < mine {
        let i = w + dispatched * threads;
        let intended = t0 + Duration::from_secs_f64(i as f64 * period_s);
        if intended > Instant::now() {
            tokio::time::sleep_until(intended.into()).await;
        }
        let mut waited = false;
        loop {
            if queue.idle.get() > queue.queue.borrow().len() {
                break;
            }
            if (handles.len() as u64) < max_slots {
                spawn(None, &mut handles);
                break;
            }
            waited = true;
            match deadline {
                Some(d) => {
                    if Instant::now() >= d {
                        break 'schedule;
                    }
                    tokio::select! {
                        _ = queue.freed.notified() => {}
                        _ = tokio::time::sleep_until(d.into()) => {}
                    }
                }
                None => queue.freed.notified().await,
            }
        }
        if waited {
            late += 1;
        }
        queue.queue.borrow_mut().push_back(Ticket {
            index: i,
            intended: Some(intended),
        });
        queue.work.notify_one();
        dispatched += 1;
    }
    queue.done.set(true);
    queue.work.notify_waiters();
    for h in handles {
        let _ = h.await;
    }
    let mut tally = ctx.tally.borrow_mut();
    tally.late += late;
    tally.not_sent += mine - dispatched;
}
