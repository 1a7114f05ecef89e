//! A/B with a mirror: a sample of a route's requests is also sent to a third app, and
//! its answer is compared with the one the client got, by `scalpel-shadow`'s
//! [`Recorder`] (which compares with `scalpel-diff`) — the engine of `scalpel shadow
//! proxy`, and its shape:
//!
//! ```text
//! client ─▶ data plane ─▶ worker ─▶ data plane ─▶ client        (the request path)
//!               │                      └─ tee (≤ max_body_bytes) ─┐
//!               └─ try_send ─▶ queue ─▶ mirror thread: copy ─▶ mirror app, compare ─▶ counters, store
//! ```
//!
//! The data plane does three cheap things for a mirrored request: a sampling decision, a
//! `try_send` of the (already buffered) request on a bounded queue, and a copy of the
//! served body as it streams out. Sending the copy, reading the mirror app's answer and
//! comparing the two run on one thread of their own (`scalpel-mirror`, its own
//! single-threaded runtime, nice 19), so mirror work never competes with the clients'
//! requests as an equal: on a busy machine mirrors fall behind and are skipped (counted),
//! never the clients. Bytes held for mirrors — request bodies queued, served bodies
//! captured, mirror answers read — share one budget (`mirror_buffer_bytes`); past it a
//! copy is skipped and counted (`queue_full`), so a slow mirror app cannot grow memory.
//!
//! Only safe methods (GET, HEAD, OPTIONS) are mirrored unless the route says
//! `mirror_unsafe = true`: a copied POST would do its work a second time.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, Method, StatusCode};
use scalpel_diff::{NoiseRule, RouteNormalizer};
use scalpel_shadow::{CompareSettings, Recorder, Redactor, SkipReason};
use tokio::sync::{mpsc, oneshot};

use crate::config::MirrorConfig;
use crate::h1::Outgoing;
use crate::rng::fast_random;

/// Copies waiting for the mirror thread; past this (or the byte budget) they are
/// skipped (`queue_full`).
const MIRROR_QUEUE: usize = 1024;

/// Samples kept per route for `/mirror`.
const MAX_SAMPLES: usize = 50;

/// The served response, captured for comparison, or why it could not be.
pub(crate) type Captured = Result<Served, SkipReason>;

/// A served response as the client got it, with its share of the mirror budget (given
/// back once it has been compared).
#[derive(Debug)]
pub(crate) struct Served {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
    pub(crate) latency: Duration,
    _held: Vec<Held>,
}

#[derive(Debug)]
pub(crate) struct Mirror {
    /// The app the copies go to, by name: a live reload may move it in the app list.
    pub(crate) app: Arc<str>,
    percent: f64,
    unsafe_methods: bool,
    pub(crate) recorder: Arc<Recorder>,
    /// Requests of the route not copied because of their method.
    pub(crate) skipped_method: AtomicU64,
}

impl Mirror {
    /// Opens the route's store when it has one (its counters and samples resume).
    pub(crate) fn new(
        cfg: &MirrorConfig,
        route: &str,
    ) -> Result<Self, scalpel_shadow::ShadowError> {
        let settings = CompareSettings::new(
            cfg.comparer.clone(),
            RouteNormalizer::default(),
            NoiseRule::default(),
            Redactor::default(),
            MAX_SAMPLES,
            false,
        );
        let recorder = match &cfg.store {
            Some(path) => Recorder::with_store(
                settings,
                path,
                &[
                    ("mode", "scalpel serve mirror".to_string()),
                    ("route", route.to_string()),
                ],
            )?,
            None => Recorder::new(settings, None),
        };
        Ok(Self {
            app: cfg.app_name.clone(),
            percent: cfg.percent,
            unsafe_methods: cfg.unsafe_methods,
            recorder: Arc::new(recorder),
            skipped_method: AtomicU64::new(0),
        })
    }

    fn sampled(&self) -> bool {
        self.percent >= 100.0 || ((fast_random() % 1_000_000) as f64) < self.percent * 10_000.0
    }

    /// Queues the copy of `req` for the mirror thread, when its method may be copied, it
    /// is sampled and the queue and budget have room; returns where to send the served
    /// response once its body has ended. Never waits.
    pub(crate) fn begin(self: &Arc<Self>, queue: &MirrorQueue, req: &Outgoing<'_>) -> Option<Tee> {
        let safe = matches!(*req.method, Method::GET | Method::HEAD | Method::OPTIONS);
        if !safe && !self.unsafe_methods {
            self.skipped_method.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        if !self.sampled() {
            return None;
        }
        let Some(held) = queue.budget.reserve(req.body.len()) else {
            self.recorder.skip(SkipReason::QueueFull);
            return None;
        };
        let (tx, rx) = oneshot::channel::<Captured>();
        let job = MirrorJob {
            mirror: self.clone(),
            copy: Copy {
                method: req.method.clone(),
                target: req.target.to_string(),
                headers: req.headers.clone(),
                client_ip: req.client_ip.to_string(),
                trusted: req.trusted,
                https: req.https,
                body: req.body.clone(),
            },
            primary: rx,
            _held: held,
        };
        if queue.tx.try_send(job).is_err() {
            self.recorder.skip(SkipReason::QueueFull);
            return None;
        }
        Some(Tee::new(tx, queue.budget.clone()))
    }
}

/// Bytes held for mirrors, shared by the data plane and the mirror thread.
#[derive(Debug)]
pub(crate) struct Budget {
    used: AtomicUsize,
    limit: usize,
}

impl Budget {
    /// `n` more bytes, when they fit; released when the guard drops.
    pub(crate) fn reserve(self: &Arc<Self>, n: usize) -> Option<Held> {
        let mut used = self.used.load(Ordering::Relaxed);
        loop {
            if used.checked_add(n)? > self.limit {
                return None;
            }
            match self.used.compare_exchange_weak(
                used,
                used + n,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Some(Held(self.clone(), n)),
                Err(now) => used = now,
            }
        }
    }

    /// Bytes that may still be held.
    pub(crate) fn available(&self) -> usize {
        self.limit.saturating_sub(self.used.load(Ordering::Relaxed))
    }
}

/// Bytes of the mirror budget, given back on drop.
#[derive(Debug)]
pub(crate) struct Held(Arc<Budget>, usize);

impl Drop for Held {
    fn drop(&mut self) {
        self.0.used.fetch_sub(self.1, Ordering::Relaxed);
    }
}

/// The data plane's end of the mirror queue.
#[derive(Debug)]
pub(crate) struct MirrorQueue {
    tx: mpsc::Sender<MirrorJob>,
    pub(crate) budget: Arc<Budget>,
}

impl MirrorQueue {
    /// A queue of copies for the mirror thread (the receiver is its end) and the byte
    /// budget they share with the served bodies captured for them.
    pub(crate) fn new(budget_bytes: usize) -> (Self, mpsc::Receiver<MirrorJob>) {
        let (tx, rx) = mpsc::channel::<MirrorJob>(MIRROR_QUEUE);
        let budget = Arc::new(Budget {
            used: AtomicUsize::new(0),
            limit: budget_bytes,
        });
        (MirrorQueue { tx, budget }, rx)
    }
}

/// One copy to make and compare.
#[derive(Debug)]
pub(crate) struct MirrorJob {
    /// The route's mirror (kept across live reloads that leave it unchanged).
    pub(crate) mirror: Arc<Mirror>,
    pub(crate) copy: Copy,
    /// The served response, once its body has ended.
    pub(crate) primary: oneshot::Receiver<Captured>,
    /// The request body's share of the budget.
    _held: Held,
}

/// The mirror's own copy of a request, sent after the client's request has moved on.
#[derive(Debug)]
pub(crate) struct Copy {
    pub(crate) method: Method,
    pub(crate) target: String,
    pub(crate) headers: HeaderMap,
    pub(crate) client_ip: String,
    pub(crate) trusted: bool,
    pub(crate) https: bool,
    pub(crate) body: Bytes,
}

/// Copies a served body as it streams, up to a limit and within the mirror budget, and
/// hands it over when it ends.
#[derive(Debug)]
pub(crate) struct Tee {
    tx: Option<oneshot::Sender<Captured>>,
    status: StatusCode,
    headers: HeaderMap,
    buf: BytesMut,
    limit: usize,
    start: Instant,
    budget: Arc<Budget>,
    held: Vec<Held>,
}

impl Tee {
    fn new(tx: oneshot::Sender<Captured>, budget: Arc<Budget>) -> Self {
        Self {
            tx: Some(tx),
            status: StatusCode::OK,
            headers: HeaderMap::new(),
            buf: BytesMut::new(),
            limit: 0,
            start: Instant::now(),
            budget,
            held: Vec::new(),
        }
    }

    /// The served response's head: from here on its body is copied.
    pub(crate) fn head(
        &mut self,
        status: StatusCode,
        headers: HeaderMap,
        limit: usize,
        start: Instant,
    ) {
        self.status = status;
        self.headers = headers;
        self.limit = limit;
        self.start = start;
    }

    pub(crate) fn data(&mut self, d: &Bytes) {
        if self.tx.is_none() || d.is_empty() {
            return;
        }
        if self.buf.len() + d.len() > self.limit {
            self.finish(Err(SkipReason::ResponseTooLarge));
            return;
        }
        match self.budget.reserve(d.len()) {
            Some(h) => {
                self.held.push(h);
                self.buf.extend_from_slice(d);
            }
            None => self.finish(Err(SkipReason::QueueFull)),
        }
    }

    pub(crate) fn end(&mut self) {
        if self.tx.is_some() {
            let served = Served {
                status: self.status,
                headers: std::mem::take(&mut self.headers),
                body: std::mem::take(&mut self.buf).freeze(),
                latency: self.start.elapsed(),
                _held: std::mem::take(&mut self.held),
            };
            self.finish(Ok(served));
        }
    }

    pub(crate) fn fail(&mut self) {
        self.finish(Err(SkipReason::PrimaryIncomplete));
    }

    fn finish(&mut self, c: Captured) {
        if let Some(tx) = self.tx.take() {
            let _ = tx.send(c);
        }
        // Skipped: what was copied so far goes, with its budget.
        self.held.clear();
        self.buf = BytesMut::new();
    }
}

impl Drop for Tee {
    fn drop(&mut self) {
        // The client went away or the body broke before its end.
        self.fail();
    }
}
