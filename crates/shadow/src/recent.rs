//! What the live pages show beyond the counters: the newest differing exchanges and the
//! two sides' latencies on compared pairs. Kept by the [`Recorder`](crate::Recorder) under
//! the lock it already holds when it records a pair (the mirror side, never a client's
//! request path), bounded in memory.

use std::collections::{BTreeMap, VecDeque};

use hdrhistogram::Histogram;
use scalpel_diff::Difference;
use serde::Serialize;

/// Newest differing exchanges kept.
const RECENT: usize = 50;
/// Endpoints whose latencies are kept; later ones are counted in the totals only.
const LATENCY_ENDPOINTS: usize = 256;
/// Latencies up to an hour, in microseconds, 2 significant digits (1% resolution is
/// plenty for "the candidate is slower", and keeps a histogram at a few KiB).
const MAX_US: u64 = 3_600_000_000;

/// One recent exchange where primary and candidate differed, secrets redacted.
#[derive(Debug, Clone, Serialize)]
pub struct RecentDifference {
    /// Milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// The route pattern.
    pub endpoint: String,
    /// The method.
    pub method: String,
    /// The request target, secret query values redacted.
    pub target: String,
    /// Primary vs candidate: each field path, the kind of difference and (shortened,
    /// redacted) both values.
    pub fields: Vec<Difference>,
}

/// Latency percentiles of one side, from the request to the last body byte.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct LatencyFigures {
    /// Responses measured.
    pub count: u64,
    /// Median, ms.
    pub p50: f64,
    /// 90th percentile, ms.
    pub p90: f64,
    /// 99th percentile, ms.
    pub p99: f64,
    /// Slowest, ms.
    pub max: f64,
}

/// Both sides' latencies on the pairs compared at one endpoint.
#[derive(Debug, Clone, Serialize)]
pub struct EndpointLatency {
    /// The route pattern.
    pub endpoint: String,
    /// The primary's.
    pub primary: LatencyFigures,
    /// The candidate's.
    pub candidate: LatencyFigures,
}

#[derive(Debug, Clone)]
pub(crate) struct Pair {
    primary: Histogram<u64>,
    candidate: Histogram<u64>,
}

impl Pair {
    fn new() -> Pair {
        let h = || Histogram::new_with_bounds(1, MAX_US, 2).expect("static bounds are valid");
        Pair {
            primary: h(),
            candidate: h(),
        }
    }

    fn record(&mut self, primary_us: u64, candidate_us: u64) {
        let _ = self.primary.record(primary_us.clamp(1, MAX_US));
        let _ = self.candidate.record(candidate_us.clamp(1, MAX_US));
    }
}

fn figures(h: &Histogram<u64>) -> LatencyFigures {
    if h.is_empty() {
        return LatencyFigures::default();
    }
    let ms = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    LatencyFigures {
        count: h.len(),
        p50: ms(0.5),
        p90: ms(0.9),
        p99: ms(0.99),
        max: h.max() as f64 / 1000.0,
    }
}

/// The recent differences and the latency histograms.
#[derive(Debug, Default)]
pub(crate) struct LiveTally {
    recent: VecDeque<RecentDifference>,
    per_endpoint: BTreeMap<String, Pair>,
    /// Since the last [`LiveTally::take_interval`]: the live page's time series.
    interval: Option<Pair>,
}

impl LiveTally {
    pub(crate) fn latency(&mut self, endpoint: &str, primary_us: u64, candidate_us: u64) {
        if let Some(p) = self.per_endpoint.get_mut(endpoint) {
            p.record(primary_us, candidate_us);
        } else if self.per_endpoint.len() < LATENCY_ENDPOINTS {
            let mut p = Pair::new();
            p.record(primary_us, candidate_us);
            self.per_endpoint.insert(endpoint.to_string(), p);
        }
        self.interval
            .get_or_insert_with(Pair::new)
            .record(primary_us, candidate_us);
    }

    pub(crate) fn difference(&mut self, d: RecentDifference) {
        if self.recent.len() == RECENT {
            self.recent.pop_front();
        }
        self.recent.push_back(d);
    }

    /// Newest first.
    pub(crate) fn recent(&self) -> Vec<RecentDifference> {
        self.recent.iter().rev().cloned().collect()
    }

    pub(crate) fn latencies(&self) -> Vec<EndpointLatency> {
        self.per_endpoint
            .iter()
            .map(|(endpoint, p)| EndpointLatency {
                endpoint: endpoint.clone(),
                primary: figures(&p.primary),
                candidate: figures(&p.candidate),
            })
            .collect()
    }

    /// Both sides' figures since the previous call, and a fresh interval.
    pub(crate) fn take_interval(&mut self) -> (LatencyFigures, LatencyFigures) {
        match self.interval.take() {
            Some(p) => (figures(&p.primary), figures(&p.candidate)),
            None => Default::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_newest_differences_and_per_endpoint_latencies() {
        let mut t = LiveTally::default();
        for i in 0..(RECENT as u64 + 5) {
            t.difference(RecentDifference {
                at_ms: i,
                endpoint: "/e".into(),
                method: "GET".into(),
                target: format!("/e/{i}"),
                fields: Vec::new(),
            });
        }
        let recent = t.recent();
        assert_eq!(recent.len(), RECENT);
        assert_eq!(recent[0].at_ms, RECENT as u64 + 4, "newest first");
        for _ in 0..99 {
            t.latency("/e", 1_000, 4_000);
        }
        t.latency("/e", 1_000, 50_000);
        let l = &t.latencies()[0];
        assert_eq!((l.primary.count, l.candidate.count), (100, 100));
        assert!((l.primary.p99 - 1.0).abs() < 0.02, "{:?}", l.primary);
        assert!((l.candidate.p50 - 4.0).abs() < 0.05, "{:?}", l.candidate);
        assert!((l.candidate.max - 50.0).abs() < 0.5, "{:?}", l.candidate);
        let (p, c) = t.take_interval();
        assert_eq!((p.count, c.count), (100, 100));
        assert_eq!(t.take_interval().0.count, 0, "a new interval starts empty");
    }
}
