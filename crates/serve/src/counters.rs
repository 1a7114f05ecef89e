//! Counters per app (an A/B arm is an app), as atomics, plus one latency histogram per
//! app, and the reasons they are counted by; `metrics` renders them in the Prometheus
//! text format, the live page reads them.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hdrhistogram::Histogram;

/// Why a worker was restarted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RestartReason {
    /// The process exited (crash, kill, or a clean exit nobody asked for).
    Exited,
    /// It failed its health probe N times in a row (e.g. a blocked event loop).
    Unhealthy,
    /// It never passed its first health check within the start time-out.
    StartFailed,
}

impl RestartReason {
    pub(crate) const ALL: [RestartReason; 3] = [
        RestartReason::Exited,
        RestartReason::Unhealthy,
        RestartReason::StartFailed,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            RestartReason::Exited => "exited",
            RestartReason::Unhealthy => "unhealthy",
            RestartReason::StartFailed => "start_failed",
        }
    }
}

/// Why a request whose worker failed was answered with an error instead of being resent
/// to another worker: the worker had taken it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NotResent {
    /// The worker had read it and then stopped answering (ejected by its health checks).
    Stalled,
    /// The worker had read it and then exited.
    Exited,
    /// The worker had begun to answer it (any byte), then broke off.
    Answered,
}

impl NotResent {
    pub(crate) const ALL: [NotResent; 3] =
        [NotResent::Stalled, NotResent::Exited, NotResent::Answered];

    pub(crate) fn name(self) -> &'static str {
        match self {
            NotResent::Stalled => "worker_stalled",
            NotResent::Exited => "worker_exited",
            NotResent::Answered => "partial_answer",
        }
    }

    /// For the log line: "its worker took it and …".
    pub(crate) fn what(self) -> &'static str {
        match self {
            NotResent::Stalled => "stopped answering",
            NotResent::Exited => "exited",
            NotResent::Answered => "broke off its answer",
        }
    }
}

/// What became of a connection a stuck direct-mode worker had accepted, when it was
/// replaced (see `rescue`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AtReplacement {
    /// The worker had read none of it: served on by another worker.
    Rescued,
    /// The worker had read (part of) its request and answered nothing: answered 504.
    HalfRead,
    /// The worker had answered on it, then read the client's next request (or part of
    /// it) without answering: answered 504.
    ReadAfterAnswer,
    /// The worker had already answered on it (a kept-alive connection, idle or cut
    /// mid-answer): closed with the worker, as its state cannot be told.
    InUse,
    /// Past the limit of connections taken from one worker: closed with the worker.
    OverLimit,
    /// The kernel refused `pidfd_getfd` (or `pidfd_open`): closed with the worker.
    NotTaken,
}

impl AtReplacement {
    pub(crate) const ALL: [AtReplacement; 6] = [
        AtReplacement::Rescued,
        AtReplacement::HalfRead,
        AtReplacement::ReadAfterAnswer,
        AtReplacement::InUse,
        AtReplacement::OverLimit,
        AtReplacement::NotTaken,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            AtReplacement::Rescued => "rescued",
            AtReplacement::HalfRead => "half_read",
            AtReplacement::ReadAfterAnswer => "read_after_answer",
            AtReplacement::InUse => "in_use",
            AtReplacement::OverLimit => "over_limit",
            AtReplacement::NotTaken => "not_taken",
        }
    }
}

/// Latencies up to an hour, in microseconds, 3 significant digits.
pub(crate) const MAX_LATENCY_US: u64 = 3_600_000_000;

#[derive(Debug)]
pub(crate) struct AppMetrics {
    pub(crate) requests: AtomicU64,
    pub(crate) errors: AtomicU64,
    pub(crate) retries: AtomicU64,
    pub(crate) no_worker: AtomicU64,
    /// 503s: every slot taken and `max_queued` requests waiting already.
    pub(crate) queue_full: AtomicU64,
    /// 503s: no slot came free within `queue_timeout`.
    pub(crate) queue_timeout: AtomicU64,
    pub(crate) mirrored: AtomicU64,
    /// Requests answered with a protocol switch (WebSocket handshakes).
    pub(crate) upgrades: AtomicU64,
    /// Switched connections still open.
    pub(crate) tunnels_open: AtomicU64,
    pub(crate) restarts: [AtomicU64; 3],
    pub(crate) reloads: AtomicU64,
    /// Workers replaced for passing `max_memory_mb`.
    pub(crate) memory_replacements: AtomicU64,
    /// Requests answered with an error instead of resent, by [`NotResent`].
    pub(crate) not_resent: [AtomicU64; 3],
    /// Connections of a stuck direct-mode worker at its replacement, by [`AtReplacement`].
    pub(crate) rescued: [AtomicU64; 6],
    /// Rescued connections still open.
    pub(crate) rescued_open: AtomicU64,
    /// Worker output lines dropped because scalpel's own output was not being read.
    pub(crate) log_lines_dropped: AtomicU64,
    /// Worker output lines cut at `log_line_max_bytes`.
    pub(crate) log_lines_cut: AtomicU64,
    latency: Mutex<Histogram<u64>>,
    latency_sum_us: AtomicU64,
    cpu_percent_bits: AtomicU64,
    rss_bytes: AtomicU64,
    pss_bytes: AtomicU64,
}

impl AppMetrics {
    pub(crate) fn new() -> Self {
        Self {
            requests: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            retries: AtomicU64::new(0),
            no_worker: AtomicU64::new(0),
            queue_full: AtomicU64::new(0),
            queue_timeout: AtomicU64::new(0),
            mirrored: AtomicU64::new(0),
            upgrades: AtomicU64::new(0),
            tunnels_open: AtomicU64::new(0),
            restarts: Default::default(),
            reloads: AtomicU64::new(0),
            memory_replacements: AtomicU64::new(0),
            not_resent: Default::default(),
            rescued: Default::default(),
            rescued_open: AtomicU64::new(0),
            log_lines_dropped: AtomicU64::new(0),
            log_lines_cut: AtomicU64::new(0),
            latency: Mutex::new(
                Histogram::new_with_bounds(1, MAX_LATENCY_US, 3).expect("static bounds are valid"),
            ),
            latency_sum_us: AtomicU64::new(0),
            cpu_percent_bits: AtomicU64::new(0f64.to_bits()),
            rss_bytes: AtomicU64::new(0),
            pss_bytes: AtomicU64::new(u64::MAX),
        }
    }

    pub(crate) fn restart(&self, r: RestartReason) -> u64 {
        let i = RestartReason::ALL
            .iter()
            .position(|&x| x == r)
            .unwrap_or_default();
        self.restarts[i].fetch_add(1, Ordering::Relaxed) + 1
    }

    pub(crate) fn not_resent(&self, why: NotResent) {
        let i = NotResent::ALL
            .iter()
            .position(|&x| x == why)
            .unwrap_or_default();
        self.not_resent[i].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn record_latency(&self, d: Duration) {
        let us = (d.as_micros() as u64).clamp(1, MAX_LATENCY_US);
        self.latency_sum_us.fetch_add(us, Ordering::Relaxed);
        let mut h = self.latency.lock().unwrap_or_else(|e| e.into_inner());
        let _ = h.record(us);
    }

    /// Copies the latency histogram into `into` (the live page's ticker, once a second:
    /// the lock is held for one copy of the counts, as long as a `/metrics` scrape holds it).
    pub(crate) fn copy_latency(&self, into: &mut Histogram<u64>) {
        // Zeroed before the lock, so under it `add` is one memcpy of the counts.
        into.reset();
        let h = self.latency.lock().unwrap_or_else(|e| e.into_inner());
        let _ = into.add(&*h);
    }

    pub(crate) fn set_resources(&self, cpu_percent: f64, rss: u64, pss: Option<u64>) {
        self.cpu_percent_bits
            .store(cpu_percent.to_bits(), Ordering::Relaxed);
        self.rss_bytes.store(rss, Ordering::Relaxed);
        self.pss_bytes
            .store(pss.unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    pub(crate) fn cpu_percent(&self) -> f64 {
        f64::from_bits(self.cpu_percent_bits.load(Ordering::Relaxed))
    }

    pub(crate) fn rss_bytes(&self) -> u64 {
        self.rss_bytes.load(Ordering::Relaxed)
    }

    pub(crate) fn pss_bytes(&self) -> Option<u64> {
        Some(self.pss_bytes.load(Ordering::Relaxed)).filter(|&v| v != u64::MAX)
    }

    /// (count, sum in seconds, [(quantile, seconds)]).
    pub(crate) fn latency_summary(&self) -> (u64, f64, Vec<(f64, f64)>) {
        let h = self.latency.lock().unwrap_or_else(|e| e.into_inner());
        let qs = [0.5, 0.9, 0.99, 0.999]
            .iter()
            .map(|&q| (q, h.value_at_quantile(q) as f64 / 1e6))
            .collect();
        (
            h.len(),
            self.latency_sum_us.load(Ordering::Relaxed) as f64 / 1e6,
            qs,
        )
    }
}
