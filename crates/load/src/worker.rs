//! The request workers of one segment (one target, one step or part of a step).
//!
//! Threads × (a current-thread tokio runtime + a `LocalSet`). Every thread runs "slots": a
//! slot owns one keep-alive HTTP/1.1 connection, or one stream of an HTTP/2 connection it
//! shares with the thread's other slots (`crate::conn`), and runs [`slot`], the one
//! worker loop. Where the
//! next request comes from — back to back (closed) or from a fixed schedule (open) — is the
//! [`Pacer`] strategy handed to it. Each thread records into its own [`Tally`] (histogram +
//! counters); the segment merges them when the threads end. No message per request.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, VecDeque};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use scalpel_http::{Connector, ErrorKey, ErrorKind};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::conn::{H2Link, H2Slot, Link, OnOpen, h1_exchange, h1_ready, unsent};
use crate::request::{Endpoint, RequestParts};
use crate::result::new_histogram;
use crate::shard::Shard;
use crate::source::{RecordedTimes, Renderer, RequestSource};
use crate::stop::Stop;
use crate::timer::PreciseTimer;

/// How long a closed-model connection waits after a failed connect before it tries again:
/// a refused connect fails in microseconds, and without a pause the loop would spin on a
/// dead target. The time lost is counted as failed requests (see [`Tally::record_failure`]).
const RETRY_PAUSE: Duration = Duration::from_millis(10);

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
    /// Recorded traffic: request `k` is due at `t0 +` its recorded time `/ speed`; in
    /// flight as in `Open`.
    Recorded {
        speed: f64,
        max_in_flight: u32,
        preconnect: u32,
    },
}

/// Everything a segment needs; shared read-only by its threads.
#[derive(Debug)]
pub(crate) struct SegmentSpec {
    /// Opens connections to the target (TCP or TLS, its settings, its HTTP/2 counters).
    pub(crate) connector: Connector,
    pub(crate) endpoint: Endpoint,
    /// HTTP/2 with this many streams per connection; `None`: HTTP/1.1.
    pub(crate) h2_streams: Option<u32>,
    /// A new connection for every request (`--no-reuse`, HTTP/1.1).
    pub(crate) no_reuse: bool,
    pub(crate) source: Arc<dyn RequestSource>,
    pub(crate) pacing: Pacing,
    pub(crate) limit: Limit,
    pub(crate) threads: u32,
    pub(crate) timeout: Duration,
    /// Raised by a signal: stop claiming, cut what is in flight, report what was measured.
    pub(crate) stop: Stop,
    /// The closed model's pace of one connection before this segment (the mean latency of
    /// the target's answers so far in the run, or the probe's): what a failed connect is
    /// weighed against until this segment has answers of its own.
    pub(crate) typical_latency: Duration,
    /// This process's part of the run: request `i` of the segment's schedule is sent here
    /// only if the shard owns it (`Shard::WHOLE`: every request). Counts, rates and
    /// connections in `pacing` and `limit` are the whole run's.
    pub(crate) shard: Shard,
    /// When the segment is due to start on the run's common clock (`--start-at`); `None`:
    /// as soon as the connections are open.
    pub(crate) planned: Option<Instant>,
}

/// The moment a segment's clock starts and its limit from there. A segment ready after its
/// planned start begins at once and, when time-bound, ends where it was planned to end (but
/// lasts at least half its length), so the segments after it keep to the common clock.
#[derive(Debug, Clone, Copy)]
struct Start {
    t0: Instant,
    limit: Limit,
}

impl Start {
    /// The start of a segment whose threads are all ready at `ready`.
    fn at(ready: Instant, planned: Option<Instant>, limit: Limit) -> (Start, Option<Duration>) {
        // A moment for the threads to get from the gate to their clocks.
        let earliest = ready + Duration::from_millis(2);
        let Some(planned) = planned else {
            return (
                Start {
                    t0: earliest,
                    limit,
                },
                None,
            );
        };
        if planned >= earliest {
            return (Start { t0: planned, limit }, Some(Duration::ZERO));
        }
        let late = earliest - planned;
        let limit = match limit {
            Limit::Time(d) => Limit::Time(d.saturating_sub(late).max(d / 2)),
            count => count,
        };
        (
            Start {
                t0: earliest,
                limit,
            },
            Some(late),
        )
    }
}

/// Counters one thread keeps; merged per segment, then per step.
///
/// Every request due ends in exactly one place: `sent` (then `answered` or failed with no
/// answer), a failed connect (in `requests` and `errors`, never sent), `not_sent` (never
/// attempted, or the generator's own error: `local:*` kinds), or `interrupted`.
#[derive(Debug)]
pub(crate) struct Tally {
    /// Latency of every sent request: answers at their answer, requests with no answer
    /// (time-out, reset, broken body) at the moment they failed.
    pub(crate) histogram: Histogram<u64>,
    /// Attempts that ended: sent requests plus failed connects (weighted in the closed
    /// model, see [`Tally::record_failure`]).
    pub(crate) requests: u64,
    /// Requests written to a connection.
    pub(crate) sent: u64,
    /// Sent requests that got a whole response (any status).
    pub(crate) answered: u64,
    /// Failed connects, sent requests with no answer, and non-2xx answers.
    pub(crate) errors: u64,
    pub(crate) late: u64,
    /// Due but never attempted (no free connection when the step ended, or beyond what
    /// the generator could schedule), plus the generator's own failures (`local:*`).
    pub(crate) not_sent: u64,
    /// In flight when the run was interrupted: cut, in no other count.
    pub(crate) interrupted: u64,
    /// Answers (any status) inside the segment's time window.
    pub(crate) in_window: u64,
    /// Sum of the answers' latencies in µs: the closed model's pace per connection.
    answered_us: u64,
    pub(crate) error_kinds: BTreeMap<String, u64>,
    /// TLS handshakes of the connections opened (µs), apart from request latency; made at
    /// the first one (a histogram is ~400 KB: plain TCP runs need none).
    pub(crate) handshakes: Option<Histogram<u64>>,
    /// Connections opened (before the clock too), TLS or not.
    pub(crate) connections: u64,
    /// Failures by key (`connect`, `reset:cancel`, the generator's own `local:EMFILE`…):
    /// few distinct ones, so a small vector beats a map on the hot path.
    failures: Vec<(ErrorKey, u64)>,
    /// Non-2xx statuses, few distinct ones: a small vector beats a map on the hot path.
    statuses: Vec<(u16, u64)>,
    /// A mix's endpoints, each counted like the whole (their own histograms and counts),
    /// by the thread that did the work; empty without a mix.
    pub(crate) endpoints: Vec<Tally>,
}

impl Tally {
    pub(crate) fn new() -> Tally {
        Tally {
            histogram: new_histogram(),
            requests: 0,
            sent: 0,
            answered: 0,
            errors: 0,
            late: 0,
            not_sent: 0,
            interrupted: 0,
            in_window: 0,
            answered_us: 0,
            error_kinds: BTreeMap::new(),
            handshakes: None,
            connections: 0,
            failures: Vec::new(),
            statuses: Vec::new(),
            endpoints: Vec::new(),
        }
    }

    /// A tally that also counts each of `endpoints` endpoints apart.
    pub(crate) fn with_endpoints(endpoints: usize) -> Tally {
        let mut t = Tally::new();
        t.endpoints = (0..endpoints).map(|_| Tally::new()).collect();
        t
    }

    /// An answer, counted in the whole and in its endpoint's tally.
    fn record_response_at(
        &mut self,
        endpoint: Option<usize>,
        status: u16,
        latency: Duration,
        in_window: bool,
    ) {
        self.record_response(status, latency, in_window);
        if let Some(e) = endpoint.and_then(|e| self.endpoints.get_mut(e)) {
            e.record_response(status, latency, in_window);
        }
    }

    /// A failure, counted in the whole and in its endpoint's tally.
    fn record_failure_at(
        &mut self,
        endpoint: Option<usize>,
        failure: ErrorKey,
        latency: Duration,
        weight: u64,
    ) {
        self.record_failure(failure, latency, weight);
        if let Some(e) = endpoint.and_then(|e| self.endpoints.get_mut(e)) {
            e.record_failure(failure, latency, weight);
        }
    }

    /// A connection opened, with its TLS handshake time (`None` over plain TCP).
    pub(crate) fn record_open(&mut self, tls: Option<Duration>) {
        self.connections += 1;
        if let Some(d) = tls {
            let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
            let h = self.handshakes.get_or_insert_with(new_histogram);
            let _ = h.record(us.clamp(1, h.high()));
        }
    }

    fn record_latency(&mut self, latency: Duration) {
        let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        let _ = self.histogram.record(us.clamp(1, self.histogram.high()));
    }

    fn record_response(&mut self, status: u16, latency: Duration, in_window: bool) {
        self.requests += 1;
        self.sent += 1;
        self.answered += 1;
        self.in_window += u64::from(in_window);
        self.answered_us += u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.record_latency(latency);
        if !(200..300).contains(&status) {
            self.errors += 1;
            match self.statuses.iter_mut().find(|(s, _)| *s == status) {
                Some((_, n)) => *n += 1,
                None => self.statuses.push((status, 1)),
            }
        }
    }

    /// A request that got no answer. Sent ones (time-out, broken connection, bad
    /// response, a reset stream) go into the latency histogram at the moment they failed,
    /// as wrk2 and oha count a time-out: leaving them out would let a target that answers
    /// nothing show a fast p99. A failed connect or TLS handshake was never sent: it is an
    /// error with no latency, and counts `weight` times (the requests the connection would
    /// have completed in the time it lost). The generator's own failures are `not_sent`,
    /// never the target's.
    fn record_failure(&mut self, failure: ErrorKey, latency: Duration, weight: u64) {
        match failure.kind {
            ErrorKind::Local => self.not_sent += weight,
            ErrorKind::Connect | ErrorKind::Tls => {
                self.requests += weight;
                self.errors += weight;
            }
            _ => {
                self.requests += 1;
                self.sent += 1;
                self.errors += 1;
                self.record_latency(latency);
            }
        }
        let weight = if unsent(failure) { weight } else { 1 };
        match self.failures.iter_mut().find(|(k, _)| *k == failure) {
            Some((_, n)) => *n += weight,
            None => self.failures.push((failure, weight)),
        }
    }

    /// Mean latency of the answers so far, if any.
    pub(crate) fn answered_mean(&self) -> Option<Duration> {
        (self.answered > 0).then(|| Duration::from_micros(self.answered_us / self.answered))
    }

    /// Moves the hot-path counters into `error_kinds` (keys: scalpel-http's `ErrorKey`s
    /// — `connect`, `tls`, `timeout`, `reset`, `protocol`, `body_cut`, `too_large`,
    /// `reset:REASON` and `reset:goaway` for HTTP/2, `local:ERRNO` — and `status_NNN`).
    fn settle(&mut self) {
        for (key, n) in self.failures.drain(..) {
            *self.error_kinds.entry(key.to_string()).or_default() += n;
        }
        for (status, n) in self.statuses.drain(..) {
            *self
                .error_kinds
                .entry(format!("status_{status}"))
                .or_default() += n;
        }
        for e in &mut self.endpoints {
            e.settle();
        }
    }

    pub(crate) fn merge(&mut self, mut other: Tally) {
        other.settle();
        self.settle();
        if self.endpoints.len() < other.endpoints.len() {
            self.endpoints
                .resize_with(other.endpoints.len(), Tally::new);
        }
        for (mine, theirs) in self
            .endpoints
            .iter_mut()
            .zip(std::mem::take(&mut other.endpoints))
        {
            mine.merge(theirs);
        }
        let _ = self.histogram.add(&other.histogram);
        if let Some(theirs) = other.handshakes {
            match self.handshakes.as_mut() {
                Some(mine) => {
                    let _ = mine.add(&theirs);
                }
                None => self.handshakes = Some(theirs),
            }
        }
        self.connections += other.connections;
        self.requests += other.requests;
        self.sent += other.sent;
        self.answered += other.answered;
        self.errors += other.errors;
        self.late += other.late;
        self.not_sent += other.not_sent;
        self.interrupted += other.interrupted;
        self.in_window += other.in_window;
        self.answered_us = self.answered_us.saturating_add(other.answered_us);
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
    /// The time window of a time-bound segment (`tally.in_window` answered inside it),
    /// cut short at an interrupt.
    pub(crate) window: Option<Duration>,
    /// An interrupt ended the segment before its time or count was reached.
    pub(crate) partial: bool,
    /// How much later than planned the segment's clock started; `None` when it had no
    /// planned start.
    pub(crate) start_late: Option<Duration>,
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
    let (start, start_late) = Start::at(Instant::now(), spec.planned, spec.limit);
    let Start { t0, limit } = start;
    gate.open(Some(start));
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
    let stopped_at = spec.stop.at();
    let partial = stopped_at.is_some_and(|at| match limit {
        Limit::Time(d) => at < t0 + d,
        Limit::Count(_) => at < end,
    });
    Ok(Outcome {
        tally: total,
        wall: end.saturating_duration_since(t0),
        window: match (limit, stopped_at) {
            (Limit::Time(d), Some(at)) if partial => Some(at.saturating_duration_since(t0).min(d)),
            (Limit::Time(d), _) => Some(d),
            (Limit::Count(_), _) => None,
        },
        partial,
        start_late,
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
    state: Mutex<(usize, Option<Option<Start>>)>,
    changed: Condvar,
}

impl Gate {
    fn ready_and_wait(&self) -> Option<Start> {
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

    fn open(&self, t0: Option<Start>) {
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
            // No runtime for this thread (out of memory or descriptors): its share is
            // the generator's own failure, never the target's.
            gate.ready_and_wait();
            let mut t = Tally::with_endpoints(spec.source.endpoints().len());
            t.record_failure(ErrorKey::local("ENOMEM"), Duration::ZERO, 1);
            return (t, Instant::now());
        }
    };
    let local = tokio::task::LocalSet::new();
    let (slots, preconnect) = slot_counts(&spec, w, threads);
    // Connect before the clock starts, so the first requests do not pay for it; a failure
    // here is left for the run (the slot reconnects and counts the error). Their
    // handshakes are the step's all the same.
    let opened = RefCell::new(Vec::new());
    let on_open = |tls: Option<Duration>| opened.borrow_mut().push(tls);
    // Inside the LocalSet: an HTTP/2 connection's driver task is spawned there.
    let (links, h2_links) = local.block_on(&rt, open_links(&spec, slots, preconnect, &on_open));
    let Some(Start { t0, limit }) = gate.ready_and_wait() else {
        return (Tally::new(), Instant::now());
    };
    let ctx = Rc::new(Ctx::new(spec, t0, limit, h2_links, live));
    for tls in opened.take() {
        ctx.tally.borrow_mut().record_open(tls);
    }
    local.block_on(&rt, drive(ctx.clone(), links, slots, claim, t0, w, threads));
    let end = Instant::now();
    let tally = ctx.tally.clone();
    drop(ctx);
    let tally = Rc::try_unwrap(tally)
        .map(RefCell::into_inner)
        .unwrap_or_else(|rc| std::mem::replace(&mut rc.borrow_mut(), Tally::new()));
    (tally, end)
}

/// Thread `w`'s slots (requests in flight at most) and the connections it opens before
/// the clock. Over HTTP/2 each connection carries `streams` slots.
fn slot_counts(spec: &SegmentSpec, w: u64, threads: u64) -> (u64, u64) {
    let streams = u64::from(spec.h2_streams.unwrap_or(1).max(1));
    match spec.pacing {
        Pacing::Closed { connections } => {
            let n = share(u64::from(connections), threads, w);
            (n * streams, n)
        }
        Pacing::Open {
            max_in_flight,
            preconnect,
            ..
        }
        | Pacing::Recorded {
            max_in_flight,
            preconnect,
            ..
        } => {
            let n = share(u64::from(max_in_flight), threads, w).max(1);
            match spec.h2_streams {
                None => (n, share(u64::from(preconnect), threads, w).min(n)),
                Some(_) => {
                    let links = share(u64::from(preconnect), threads, w).max(1);
                    (n.min(links * streams), links)
                }
            }
        }
    }
}

/// The links opened before the clock: `preconnect` HTTP/1.1 connections, or HTTP/2
/// connections with the first slots spread over them (closed model: every slot now; open
/// models: a slot per connection, more as requests wait for one). With the HTTP/2
/// connections, for the slots started later.
async fn open_links(
    spec: &SegmentSpec,
    slots: u64,
    preconnect: u64,
    on_open: OnOpen<'_>,
) -> (Vec<Link>, Vec<Rc<H2Link>>) {
    if spec.h2_streams.is_none() {
        let mut out = Vec::with_capacity(preconnect as usize);
        for _ in 0..preconnect {
            let mut conn = None;
            let _ = h1_ready(&mut conn, &spec.connector, on_open).await;
            out.push(Link::H1(conn));
        }
        return (out, Vec::new());
    }
    let mut pool = Vec::new();
    for _ in 0..preconnect.max(1) {
        let link = Rc::new(H2Link::default());
        link.preconnect(&spec.connector, on_open).await;
        pool.push(link);
    }
    let first = match spec.pacing {
        Pacing::Closed { .. } => slots,
        Pacing::Open { .. } | Pacing::Recorded { .. } => pool.len() as u64,
    };
    let out = (0..first)
        .map(|i| Link::H2(H2Slot::attach(&pool[i as usize % pool.len()])))
        .collect();
    (out, pool)
}

/// Runs the thread's slots by the segment's pacing until its limit, with a watch on the
/// run's stop flag (raised by a signal on another thread) that wakes the slots, which then
/// cut what they have in flight.
async fn drive(
    ctx: Rc<Ctx>,
    links: Vec<Link>,
    slots: u64,
    claim: Arc<AtomicU64>,
    t0: Instant,
    w: u64,
    threads: u64,
) {
    let spec = ctx.spec.clone();
    let stop = spec.stop.clone();
    let halt = ctx.halt.clone();
    tokio::task::spawn_local(async move {
        while !stop.is_stopped() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        halt.raise();
    });
    match spec.pacing {
        Pacing::Closed { .. } => {
            let deadline = match ctx.limit {
                Limit::Time(d) => Some(t0 + d),
                Limit::Count(_) => None,
            };
            // The shard's part of the whole run's count: its own requests below it.
            let count = match ctx.limit {
                Limit::Count(n) => Some(spec.shard.share(n)),
                Limit::Time(_) => None,
            };
            let pacer = Rc::new(Pacer::Closed {
                deadline,
                count,
                claim,
                shard: spec.shard,
                stop: spec.stop.clone(),
            });
            // Wait for t0 so that every thread starts together.
            tokio::time::sleep_until(t0.into()).await;
            let handles: Vec<_> = links
                .into_iter()
                .take(slots as usize)
                .map(|l| tokio::task::spawn_local(slot(ctx.clone(), pacer.clone(), l, false)))
                .collect();
            join_or_cut(&ctx, handles).await;
        }
        Pacing::Open { rate, .. } => {
            let clock = Clock::Rate(rate);
            dispatch(ctx, links, slots, clock, t0, w, threads).await;
        }
        Pacing::Recorded { speed, .. } => {
            let clock = Clock::Recorded(speed);
            dispatch(ctx, links, slots, clock, t0, w, threads).await;
        }
    }
}

/// The request prepared once when every index renders the same one.
fn fixed_request(spec: &SegmentSpec, renderer: &mut dyn Renderer) -> Option<Prepared> {
    if !spec.source.is_fixed() {
        return None;
    }
    let mut parts = RequestParts::default();
    renderer.render(0, &mut parts).ok()?;
    let mut prepared = Prepared::new(spec.h2_streams.is_some());
    prepared.render(&parts, &spec.endpoint).ok()?;
    Some(prepared)
}

/// A request ready for the wire, its buffers reused from one request to the next.
enum Prepared {
    /// HTTP/1.1 bytes, and whether it is a HEAD (no body comes back).
    H1 { wire: Vec<u8>, head: bool },
    /// An HTTP/2 request and its body (`None` until rendered).
    H2(Option<Box<(http::Request<()>, Bytes)>>),
}

impl Prepared {
    fn new(h2: bool) -> Prepared {
        if h2 {
            Prepared::H2(None)
        } else {
            Prepared::H1 {
                wire: Vec::new(),
                head: false,
            }
        }
    }

    /// Encodes `parts`; a request HTTP/2 cannot carry (a header value with a line break,
    /// a bad method) is the generator's own failure: never sent.
    fn render(&mut self, parts: &RequestParts, endpoint: &Endpoint) -> Result<(), ErrorKey> {
        match self {
            Prepared::H1 { wire, head } => {
                parts.encode(endpoint, wire);
                *head = parts.is_head();
            }
            Prepared::H2(slot) => {
                let request = parts
                    .to_h2(endpoint)
                    .map_err(|_| ErrorKey::local("EINVAL"))?;
                *slot = Some(Box::new(request));
            }
        }
        Ok(())
    }
}

struct Ctx {
    spec: Arc<SegmentSpec>,
    /// This thread's view of the stop flag.
    halt: Rc<Halt>,
    /// Requests of this thread between "attempt" and "recorded": what an interrupt cuts.
    in_flight: Cell<u64>,
    /// The same per endpoint of a mix.
    in_flight_at: Vec<Cell<u64>>,
    /// Renders this thread's requests (its buffers and readers are reused).
    renderer: RefCell<Box<dyn Renderer>>,
    /// Completions up to this instant count towards the achieved rate (time-bound segments).
    window_end: Option<Instant>,
    /// The segment's limit from its start (see [`Start`]).
    limit: Limit,
    fixed: Option<Prepared>,
    /// This thread's HTTP/2 connections (empty over HTTP/1.1).
    h2_links: Vec<Rc<H2Link>>,
    tally: Rc<RefCell<Tally>>,
    live: Arc<Live>,
}

impl Ctx {
    /// A thread's context for a segment that started at `t0` with `limit`.
    fn new(
        spec: Arc<SegmentSpec>,
        t0: Instant,
        limit: Limit,
        h2_links: Vec<Rc<H2Link>>,
        live: Arc<Live>,
    ) -> Ctx {
        let endpoints = spec.source.endpoints().len();
        let mut renderer = spec.source.renderer();
        Ctx {
            halt: Rc::new(Halt::default()),
            in_flight: Cell::new(0),
            in_flight_at: (0..endpoints).map(|_| Cell::new(0)).collect(),
            window_end: match limit {
                Limit::Time(d) => Some(t0 + d),
                Limit::Count(_) => None,
            },
            limit,
            fixed: fixed_request(&spec, &mut *renderer),
            renderer: RefCell::new(renderer),
            h2_links,
            tally: Rc::new(RefCell::new(Tally::with_endpoints(endpoints))),
            live,
            spec,
        }
    }

    /// A link for a new slot: its own HTTP/1.1 connection (opened when it first sends),
    /// or a stream on the thread's HTTP/2 connection with the fewest slots.
    fn new_link(&self) -> Link {
        match self.h2_links.iter().min_by_key(|l| l.slots()) {
            Some(l) => Link::H2(H2Slot::attach(l)),
            None => Link::H1(None),
        }
    }
}

/// A thread's copy of the run's stop flag, with a wake-up for the slots waiting on it.
#[derive(Default)]
struct Halt {
    raised: Cell<bool>,
    wake: Notify,
}

impl Halt {
    fn raise(&self) {
        self.raised.set(true);
        self.wake.notify_waiters();
    }

    /// Resolves once the stop flag is raised.
    async fn raised(&self) {
        let notified = self.wake.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if self.raised.get() {
            return;
        }
        notified.await;
    }
}

/// One request to make: its index in the request set and, in the open model, when it was due.
#[derive(Debug, Clone, Copy)]
struct Ticket {
    index: u64,
    intended: Option<Instant>,
    /// It found no free connection when it fell due (the open models' `late`).
    late: bool,
}

/// Where a slot's next request comes from.
enum Pacer {
    /// Back to back until the deadline or until `count` requests were claimed by all threads;
    /// the `k`-th claim is the shard's `k`-th request of the run.
    Closed {
        deadline: Option<Instant>,
        count: Option<u64>,
        claim: Arc<AtomicU64>,
        shard: Shard,
        stop: Stop,
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
                shard,
                stop,
            } => {
                if deadline.is_some_and(|d| Instant::now() >= d) || stop.is_stopped() {
                    return None;
                }
                let k = claim.fetch_add(1, Ordering::Relaxed);
                if count.is_some_and(|n| k >= n) {
                    return None;
                }
                Some(Ticket {
                    index: shard.global(k),
                    intended: None,
                    late: false,
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
                tokio::select! {
                    () = s.wake.notified() => {}
                    () = s.halt.raised() => return None,
                }
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
    /// The thread's stop flag: no claims once it is raised.
    halt: Rc<Halt>,
    /// Recorded traffic: the recorded times of this thread's requests replace `i / rate`.
    recorded: Option<RecordedClock>,
}

/// One thread's share of a recorded schedule, read ahead only as far as requests fall due:
/// the times of requests due and not yet claimed are held (16 bytes each), nothing else.
struct RecordedClock {
    speed: f64,
    times: RefCell<Box<dyn RecordedTimes>>,
    /// Offsets from `t0` (recorded time ÷ speed) of requests `base..`, not yet claimed.
    ahead: RefCell<VecDeque<Duration>>,
    base: Cell<u64>,
    /// The recording could not be read past this request (it changed or failed while it
    /// was replayed): requests from here on are the generator's own failure.
    ended: Cell<Option<u64>>,
    /// Requests found due so far: recorded times never decrease, so this only grows
    /// (an interrupt's earlier instant walks it back).
    due: Cell<u64>,
}

impl RecordedClock {
    fn new(speed: f64, times: Box<dyn RecordedTimes>) -> RecordedClock {
        RecordedClock {
            speed,
            times: RefCell::new(times),
            ahead: RefCell::new(VecDeque::new()),
            base: Cell::new(0),
            ended: Cell::new(None),
            due: Cell::new(0),
        }
    }

    /// The offset of request `k` from `t0`; `None` when the recording cannot be read
    /// that far. Reads on as needed.
    fn offset(&self, k: u64) -> Option<Duration> {
        let mut ahead = self.ahead.borrow_mut();
        let base = self.base.get();
        if k < base {
            // Claimed already; never asked for by the schedule.
            return Some(ahead.front().copied().unwrap_or_default());
        }
        while base + ahead.len() as u64 <= k {
            if self.ended.get().is_some() {
                return None;
            }
            let read = base + ahead.len() as u64;
            match self.times.borrow_mut().next_at() {
                Ok(Some(at)) => {
                    let scaled =
                        Duration::try_from_secs_f64(at.as_secs_f64() / self.speed).unwrap_or(FAR);
                    ahead.push_back(scaled.min(FAR));
                }
                Ok(None) => {
                    tracing::warn!(
                        "the recording ended early, at its request {read} of this thread"
                    );
                    self.ended.set(Some(read));
                    return None;
                }
                Err(e) => {
                    tracing::warn!("the recording cannot be read further: {e}");
                    self.ended.set(Some(read));
                    return None;
                }
            }
        }
        ahead.get((k - base) as usize).copied()
    }

    /// Requests before `next` were claimed: their times are no longer needed.
    fn claimed(&self, next: u64) {
        let mut ahead = self.ahead.borrow_mut();
        while self.base.get() < next && ahead.pop_front().is_some() {
            self.base.set(self.base.get() + 1);
        }
    }
}

/// Later than any recorded schedule runs (a recorded time too large to add to an instant is
/// clamped to it): about 30 years.
const FAR: Duration = Duration::from_secs(1 << 30);

impl Schedule {
    /// Thread `w` of `threads`' part of the segment's schedule, and when its time is up
    /// (`None`: count-bound). Shard `s` of `N` owns requests `s + N·j`; its thread `w` of
    /// `T` owns every `T`-th of those: `s + N·w + N·T·k`. Over all shards and threads,
    /// each request exactly once.
    fn for_thread(
        ctx: &Ctx,
        clock: Clock,
        t0: Instant,
        w: u64,
        threads: u64,
    ) -> (Schedule, Option<Instant>) {
        // Number of requests of the whole schedule, over all threads of every shard.
        let (total, deadline) = match (ctx.limit, clock) {
            (Limit::Count(n), _) => (n, None),
            (Limit::Time(d), Clock::Rate(rate)) => (
                (d.as_secs_f64() * rate).ceil().max(0.0) as u64,
                Some(t0 + d),
            ),
            // The recording's requests until the time is up (those later never fall due).
            (Limit::Time(d), Clock::Recorded(_)) => (
                ctx.spec.source.recorded().map_or(0, |r| r.len()),
                Some(t0 + d),
            ),
        };
        let shards = u64::from(ctx.spec.shard.count());
        let first = ctx.spec.shard.global(w);
        let stride = shards * threads;
        let mine = if total > first {
            (total - first).div_ceil(stride)
        } else {
            0
        };
        let (period_s, recorded) = match clock {
            Clock::Rate(rate) => (1.0 / rate, None),
            Clock::Recorded(speed) => (
                0.0,
                ctx.spec
                    .source
                    .recorded()
                    .map(|r| RecordedClock::new(speed, r.times(first, stride))),
            ),
        };
        let sched = Schedule {
            t0,
            period_s,
            first,
            stride,
            mine,
            next: Cell::new(0),
            stop: Cell::new(mine),
            late_through: Cell::new(0),
            late: Cell::new(0),
            parked: Cell::new(0),
            coming: Cell::new(0),
            wake: Notify::new(),
            halt: ctx.halt.clone(),
            recorded,
        };
        (sched, deadline)
    }

    /// When the timer loop wakes next: the next request to fall due, the next tick while
    /// some wait, the end of the time — the earliest. (Reading a recording's next time may
    /// find its end: then nothing more falls due.) `None`: nothing to wake for.
    fn next_wake(
        &self,
        due: u64,
        unserved: bool,
        now: Instant,
        deadline: Option<Instant>,
    ) -> Option<Instant> {
        const TICK: Duration = Duration::from_millis(1);
        let next_due = (due < self.last())
            .then(|| self.intended(due))
            .filter(|_| due < self.last());
        let retry = unserved.then(|| now + TICK);
        next_due.into_iter().chain(retry).chain(deadline).min()
    }

    fn intended(&self, k: u64) -> Instant {
        match &self.recorded {
            None => {
                self.t0
                    + Duration::from_secs_f64((self.first + k * self.stride) as f64 * self.period_s)
            }
            Some(r) => {
                let offset = r.offset(k).unwrap_or(FAR);
                self.t0.checked_add(offset).unwrap_or(self.t0 + FAR)
            }
        }
    }

    /// This thread's requests that can be sent: `mine`, or fewer when a recording could not
    /// be read to its end.
    fn last(&self) -> u64 {
        match self.recorded.as_ref().and_then(|r| r.ended.get()) {
            Some(end) => end.min(self.mine),
            None => self.mine,
        }
    }

    /// Requests of this thread lost because the recording could not be read to its end.
    fn lost(&self) -> u64 {
        self.mine - self.last()
    }

    /// [`Schedule::due_by`] for a recorded schedule: walked on from the last count (times
    /// never decrease), reading the recording only as far as requests fall due.
    fn recorded_due_by(&self, r: &RecordedClock, now: Instant) -> u64 {
        let next = self.next.get();
        let mut due = r.due.get().max(next).min(self.last());
        while due > next && self.intended(due - 1) > now {
            due -= 1;
        }
        while due < self.last() && self.intended(due) <= now {
            due += 1;
        }
        let due = due.min(self.last());
        r.due.set(due);
        due
    }

    /// How many of this thread's requests are due by `now`, computed, not counted: at an
    /// absurd rate (1e10/s) counting them one by one took the generator 30–55 s for a
    /// 1 s run. The arithmetic is checked against [`Schedule::intended`] at the edge, so
    /// `due` agrees exactly with what [`Schedule::claim`] will find due.
    fn due_by(&self, now: Instant) -> u64 {
        if let Some(r) = &self.recorded {
            return self.recorded_due_by(r, now);
        }
        let elapsed = now.saturating_duration_since(self.t0).as_secs_f64();
        let global = (elapsed / self.period_s).floor();
        let mut due = if global < self.first as f64 {
            0
        } else {
            let k = ((global - self.first as f64) / self.stride as f64).floor();
            if k >= self.mine as f64 {
                self.mine
            } else {
                k as u64 + 1
            }
        };
        while due > 0 && self.intended(due - 1) > now {
            due -= 1;
        }
        while due < self.mine && self.intended(due) <= now {
            due += 1;
        }
        due
    }

    /// Takes the next request if it is due by `now`.
    fn claim(&self, now: Instant) -> Option<Ticket> {
        let k = self.next.get();
        if k >= self.end() || self.halt.raised.get() {
            return None;
        }
        let intended = self.intended(k);
        if intended > now {
            return None;
        }
        self.next.set(k + 1);
        let late = k < self.late_through.get();
        if late {
            self.late.set(self.late.get() + 1);
        }
        if k + 1 >= self.end() {
            self.wake.notify_waiters(); // the parked slots have nothing left: let them end
        }
        if let Some(r) = &self.recorded {
            r.claimed(k + 1);
        }
        Some(Ticket {
            index: self.first + k * self.stride,
            intended: Some(intended),
            late,
        })
    }

    fn exhausted(&self) -> bool {
        self.next.get() >= self.end() || self.halt.raised.get()
    }

    /// Claims stop here: `stop`, or where a recording could not be read further.
    fn end(&self) -> u64 {
        self.stop.get().min(self.last())
    }
}

/// The one worker loop: take a ticket, (re)connect if needed, send, read, record. `handed`:
/// the open model's timer started this slot for a due request.
///
/// Latency runs from the intended time in the open models (a request that waited for a
/// new connection carries its handshake: the user waited too), and from the moment the
/// request goes out on a ready connection in the closed model (as wrk): there the
/// connect and TLS handshake are measured apart, in their own histogram.
async fn slot(ctx: Rc<Ctx>, pacer: Rc<Pacer>, mut link: Link, handed: bool) {
    let spec = &ctx.spec;
    if let (true, Pacer::Open(s)) = (handed, &*pacer) {
        s.coming.set(s.coming.get().saturating_sub(1));
    }
    let mut parts = RequestParts::default();
    let mut own = Prepared::new(spec.h2_streams.is_some());
    let mixed = !ctx.in_flight_at.is_empty();
    while let Some(ticket) = pacer.next().await {
        let endpoint = mixed.then(|| spec.source.endpoint_of(ticket.index));
        if ticket.late
            && let Some(e) = endpoint
        {
            ctx.tally.borrow_mut().endpoints[e].late += 1;
        }
        let prepared = match &ctx.fixed {
            Some(fixed) => Ok(fixed),
            None => {
                let rendered = ctx.renderer.borrow_mut().render(ticket.index, &mut parts);
                if let Err(e) = rendered {
                    // The source failed (a recorded file truncated while it is replayed):
                    // the generator's own failure, counted not sent, never sent half-made.
                    source_failed(&ctx, &e, endpoint, pacer.is_closed()).await;
                    continue;
                }
                own.render(&parts, &spec.endpoint).map(|()| &own)
            }
        };
        let attempt_start = Instant::now();
        let (outcome, sent_at) = exchange(&ctx, &mut link, prepared, endpoint).await;
        let start = ticket.intended.or(sent_at).unwrap_or(attempt_start);
        let pause = record(
            &ctx,
            &pacer,
            &mut link,
            endpoint,
            outcome,
            start,
            attempt_start,
        );
        ctx.live.completed.fetch_add(1, Ordering::Relaxed);
        if let Some(until) = pause {
            tokio::time::sleep_until(until.into()).await;
        }
    }
}

/// One request on the slot's link within the time-out: (re)connects if needed, sends,
/// reads the answer. Returns the outcome and when the request went out (`None`: never
/// sent — it failed or timed out while connecting).
async fn exchange(
    ctx: &Ctx,
    link: &mut Link,
    prepared: Result<&Prepared, ErrorKey>,
    endpoint: Option<usize>,
) -> (Result<(u16, bool), ErrorKey>, Option<Instant>) {
    let spec = &ctx.spec;
    let on_open = |tls: Option<Duration>| ctx.tally.borrow_mut().record_open(tls);
    let sent_at = Cell::new(None);
    let mark_sent = || sent_at.set(Some(Instant::now()));
    let attempt = async {
        match (link, prepared?) {
            (Link::H1(conn), Prepared::H1 { wire, head }) => {
                let c = h1_ready(conn, &spec.connector, &on_open).await?;
                mark_sent();
                h1_exchange(c, wire, *head).await
            }
            // Boxed: HTTP/2 allocates per request anyway, and inline its future would
            // make every HTTP/1.1 request's future (moved at each await) as large.
            (Link::H2(slot), Prepared::H2(Some(r))) => {
                Box::pin(slot.exchange(&spec.connector, &on_open, &mark_sent, &r.0, &r.1))
                    .await
                    .map(|status| (status, true))
            }
            _ => Err(ErrorKey::local("EINVAL")), // not rendered: never sent
        }
    };
    // An interrupt aborts this task here, with the request counted in `in_flight`
    // ([`join_or_cut`]): no per-request wake-up registration on the hot path.
    let in_flight_at = endpoint.and_then(|e| ctx.in_flight_at.get(e));
    ctx.in_flight.set(ctx.in_flight.get() + 1);
    if let Some(n) = in_flight_at {
        n.set(n.get() + 1);
    }
    let outcome = tokio::time::timeout(spec.timeout, attempt).await;
    ctx.in_flight.set(ctx.in_flight.get() - 1);
    if let Some(n) = in_flight_at {
        n.set(n.get() - 1);
    }
    let outcome = match outcome {
        Ok(result) => result,
        // The time-out struck while connecting: the request was never sent.
        Err(_) if sent_at.get().is_none() => Err(ErrorKey::of(ErrorKind::Connect)),
        Err(_) => Err(ErrorKey::of(ErrorKind::Timeout)),
    };
    (outcome, sent_at.get())
}

/// Records one request's outcome in the thread's tally and the live counters; latency
/// runs from `start`. Returns until when a closed-model connection pauses after a failed
/// connect (see [`RETRY_PAUSE`]).
fn record(
    ctx: &Ctx,
    pacer: &Pacer,
    link: &mut Link,
    endpoint: Option<usize>,
    outcome: Result<(u16, bool), ErrorKey>,
    start: Instant,
    attempt_start: Instant,
) -> Option<Instant> {
    let spec = &ctx.spec;
    let now = Instant::now();
    let latency = now.saturating_duration_since(start);
    let mut pause = None;
    let mut tally = ctx.tally.borrow_mut();
    match outcome {
        Ok((status, reusable)) => {
            if !reusable || spec.no_reuse {
                link.close_h1();
            }
            let in_window = ctx.window_end.is_none_or(|end| now <= end);
            tally.record_response_at(endpoint, status, latency, in_window);
            let us = latency.as_micros() as u64;
            ctx.live.latency_us_sum.fetch_add(us, Ordering::Relaxed);
            ctx.live.buckets.record(us);
            if !(200..300).contains(&status) {
                ctx.live.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        Err(failure) => {
            // An HTTP/2 slot keeps its connection unless the failure ended it
            // (`crate::conn`); an HTTP/1.1 connection is not reused after one.
            link.close_h1();
            let unsent = unsent(failure);
            let mut weight = 1;
            if unsent && pacer.is_closed() {
                // The open model's schedule paces failed connects by itself; a
                // closed connection pauses before it tries again.
                let until = ctx.window_end.map_or(now + RETRY_PAUSE, |end| {
                    (now + RETRY_PAUSE).min(end).max(now)
                });
                pause = Some(until);
                // Time-bound, one error per pause while a live target gave one
                // answer per latency let a target down two thirds of the run pass
                // `errors<10%`. So a failed connect counts as the requests the
                // connection would have completed in the time it lost. (Count-
                // bound, each attempt is one of the requests asked for.)
                if ctx.window_end.is_some() {
                    let pace = tally.answered_mean().unwrap_or(spec.typical_latency);
                    weight = weigh(until.saturating_duration_since(attempt_start), pace);
                }
            }
            tally.record_failure_at(endpoint, failure, latency, weight);
            if failure.kind != ErrorKind::Local {
                ctx.live.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    pause
}

/// A request the source could not produce: counted not sent (`local:source`), logged once
/// per thread; a closed-model connection pauses as after a failed connect, so a broken
/// source does not spin.
async fn source_failed(
    ctx: &Ctx,
    error: &crate::source::SourceError,
    endpoint: Option<usize>,
    closed: bool,
) {
    {
        let mut tally = ctx.tally.borrow_mut();
        if !tally.failures.iter().any(|(k, _)| *k == SOURCE_FAILED) {
            tracing::warn!("the request source failed: {error}");
        }
        tally.record_failure_at(endpoint, SOURCE_FAILED, Duration::ZERO, 1);
    }
    ctx.live.completed.fetch_add(1, Ordering::Relaxed);
    if closed {
        let until = ctx.window_end.map_or(Instant::now() + RETRY_PAUSE, |end| {
            (Instant::now() + RETRY_PAUSE).min(end)
        });
        tokio::time::sleep_until(until.into()).await;
    }
}

/// The error kind (`local:source`) of requests the source could not produce.
const SOURCE_FAILED: ErrorKey = ErrorKey::local("source");

/// Waits for the slots to finish, or, when the run is interrupted, aborts them: what they
/// had in flight is counted `interrupted` (cut, in no other count).
async fn join_or_cut(ctx: &Ctx, mut handles: Vec<JoinHandle<()>>) {
    let cut = tokio::select! {
        () = async {
            for h in handles.iter_mut() {
                let _ = h.await;
            }
        } => false,
        () = ctx.halt.raised() => true,
    };
    if cut {
        for h in &handles {
            h.abort();
        }
        for h in handles {
            let _ = h.await;
        }
        let mut tally = ctx.tally.borrow_mut();
        tally.interrupted += ctx.in_flight.get();
        ctx.in_flight.set(0);
        for (e, n) in tally.endpoints.iter_mut().zip(&ctx.in_flight_at) {
            e.interrupted += n.replace(0);
        }
    }
}

/// How many requests a closed-model connection would have completed in `lost` at one
/// request per `pace`: at least one (the attempt itself).
pub(crate) fn weigh(lost: Duration, pace: Duration) -> u64 {
    let pace = pace.max(Duration::from_micros(1));
    ((lost.as_secs_f64() / pace.as_secs_f64()).round() as u64).max(1)
}

/// The open model's timer loop for thread `w` of `threads` (see [`Schedule`]). A request
/// that falls due goes to a slot that finishes or is parked; one still waiting a tick later
/// gets a new slot (new connection) while fewer than `max_slots` exist; otherwise it waits
/// for a slot to finish and is counted `late` (its latency still runs from its intended
/// time). Requests still waiting when the segment's
/// time is up are counted `not_sent`.
async fn dispatch(
    ctx: Rc<Ctx>,
    links: Vec<Link>,
    max_slots: u64,
    clock: Clock,
    t0: Instant,
    w: u64,
    threads: u64,
) {
    let (sched, deadline) = Schedule::for_thread(&ctx, clock, t0, w, threads);
    let sched = Rc::new(sched);
    let mut slots = Slots {
        ctx: ctx.clone(),
        pacer: Rc::new(Pacer::Open(sched.clone())),
        handles: Vec::new(),
        max: max_slots,
    };
    for link in links {
        slots.spawn(link, false);
    }
    // Requests `k < due` have fallen due; `k < seen` were already due at the previous tick.
    let mut due = 0u64;
    let mut seen = 0u64;
    let timer = PreciseTimer::new();
    const MIN_WAKE_GAP: Duration = Duration::from_micros(50);
    loop {
        let now = Instant::now();
        let time_up = deadline.is_some_and(|d| now >= d);
        if ctx.halt.raised.get() {
            sched.stop.set(sched.next.get()); // interrupted: nothing more goes out
            break;
        }
        due = due.max(sched.due_by(now));
        let unserved = slots.hand_out(&sched, due, seen);
        seen = due;
        if time_up {
            // What is handed over still goes out; what waits for a connection is not sent.
            let stop = (sched.next.get() + sched.coming.get()).min(sched.last());
            sched.stop.set(stop.max(sched.next.get()));
            break;
        }
        if sched.exhausted() || (due >= sched.last() && !unserved && deadline.is_none()) {
            break; // all claimed, or all handed over: the slots finish the rest
        }
        let Some(at) = sched.next_wake(due, unserved, now, deadline) else {
            break;
        };
        // At most one timer wake-up per MIN_WAKE_GAP: a wake-up costs three system calls,
        // and at 100k req/s one per request would eat half the generator's core. Requests
        // falling due within the gap leave together, at most MIN_WAKE_GAP late (still
        // measured from their intended time).
        tokio::select! {
            () = timer.sleep_until(at.max(now + MIN_WAKE_GAP)) => {}
            () = ctx.halt.raised() => {}
        }
        // Let the slots whose responses arrived with this wake-up claim due requests first.
        tokio::task::yield_now().await;
    }
    if sched.exhausted() {
        sched.wake.notify_waiters();
    }
    join_or_cut(&ctx, slots.handles).await;
    count_unsent(&ctx, &sched, deadline);
}

/// The open model's slots on one thread: each a task running [`slot`] on its own link.
struct Slots {
    ctx: Rc<Ctx>,
    pacer: Rc<Pacer>,
    handles: Vec<JoinHandle<()>>,
    /// The most slots (requests in flight) this thread may have.
    max: u64,
}

impl Slots {
    fn spawn(&mut self, link: Link, handed: bool) {
        let (ctx, pacer) = (self.ctx.clone(), self.pacer.clone());
        self.handles
            .push(tokio::task::spawn_local(slot(ctx, pacer, link, handed)));
    }

    /// Hands the requests due (`k < due`) and not claimed yet to slots: claims go in
    /// order, so the oldest are served first, by slots already on their way, then by
    /// parked slots woken now, then by new slots. Returns whether some are left waiting.
    fn hand_out(&mut self, sched: &Schedule, due: u64, seen: u64) -> bool {
        let next = sched.next.get();
        let unclaimed = due.saturating_sub(next);
        let on_way = sched.coming.get().min(unclaimed);
        let wake = sched.parked.get().min(unclaimed - on_way);
        for _ in 0..wake {
            sched.parked.set(sched.parked.get() - 1);
            sched.coming.set(sched.coming.get() + 1);
            sched.wake.notify_one();
        }
        // Requests due since an earlier tick that still have no slot: a new slot each (its
        // own new HTTP/1.1 connection, or a free stream of the thread's HTTP/2 connections)
        // while the limit allows, otherwise they wait for a busy one — late. (Requests due
        // for less than a tick get no new connection yet: a busy slot about to finish takes
        // most of them, and opening connections for them would only grow the pool.)
        // The pool grows by at most an eighth (at least one) a tick: a backlog left by a
        // stall of this thread (another process ran) is worked off by the existing
        // connections at closed-loop speed, where hundreds of new ones would only slow the
        // target; a slow target still gets its connections within tens of ticks.
        let waited = seen.saturating_sub(next).saturating_sub(on_way + wake);
        let room = self.max.saturating_sub(self.handles.len() as u64);
        let growth = (self.handles.len() as u64 / 8).max(1);
        let opened = waited.min(room).min(growth);
        for _ in 0..opened {
            sched.coming.set(sched.coming.get() + 1);
            let link = self.ctx.new_link();
            self.spawn(link, true);
        }
        if waited > opened && opened == room {
            let late_end = next + on_way + wake + waited;
            sched
                .late_through
                .set(sched.late_through.get().max(late_end));
        }
        unclaimed > on_way + wake
    }
}

/// Everything due and never claimed is `not_sent`, counted, not dropped — also what the
/// generator could not even schedule at an absurd rate. An interrupt ends the schedule
/// where it stood: requests not yet due then were never due. Requests a recording could
/// not give (it changed while it was replayed) are the generator's own failure, never the
/// target's, and never silently dropped.
fn count_unsent(ctx: &Ctx, sched: &Schedule, deadline: Option<Instant>) {
    let interrupted = ctx.halt.raised.get();
    let due_in_step = match (ctx.spec.stop.at(), deadline) {
        (Some(at), _) if interrupted => sched.due_by(at),
        // A recording cut by the time: what fell due before it.
        (_, Some(end)) if sched.recorded.is_some() => sched.due_by(end),
        _ => sched.last(),
    };
    let next = sched.next.get();
    let mut tally = ctx.tally.borrow_mut();
    tally.late += sched.late.get();
    tally.not_sent += due_in_step.saturating_sub(next);
    if !tally.endpoints.is_empty() {
        for k in next..due_in_step.max(next) {
            let e = ctx.spec.source.endpoint_of(sched.first + k * sched.stride);
            if let Some(e) = tally.endpoints.get_mut(e) {
                e.not_sent += 1;
            }
        }
    }
    let lost = if interrupted { 0 } else { sched.lost() };
    if lost > 0 {
        tally.record_failure(SOURCE_FAILED, Duration::ZERO, lost);
    }
}

/// Where an open schedule's intended times come from.
#[derive(Debug, Clone, Copy)]
enum Clock {
    /// Request `i` at `t0 + i / rate`.
    Rate(f64),
    /// At its recorded time ÷ this speed.
    Recorded(f64),
}
