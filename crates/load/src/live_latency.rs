//! Latency percentiles while a segment runs, for the progress reports (the dashboard's
//! live chart): each thread counts its answers in coarse log buckets of relaxed atomics
//! next to its exact HdrHistogram; the control thread reads the buckets' growth over the
//! last second. No lock, no message per request; the step results keep using the exact
//! histograms.
//!
//! Buckets: exact below 16 µs, then 16 linear sub-buckets per power of two, so a bucket is
//! at most 1/16 of its lower bound wide and its midpoint is within 3.2 % of any value in it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Powers of two covered: up to 2^36 µs (19 hours), past any time-out.
const TOP_POWER: u32 = 36;
const BUCKETS: usize = ((TOP_POWER - 3) * 16) as usize;

/// Latency percentiles over the last second of a running segment, in milliseconds
/// (within 3.2 % of the exact figure; the step's result has the exact ones).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LiveLatency {
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
}

/// One thread's bucket counters.
#[derive(Debug)]
pub(crate) struct Buckets(Box<[AtomicU64]>);

impl Default for Buckets {
    fn default() -> Self {
        Buckets((0..BUCKETS).map(|_| AtomicU64::new(0)).collect())
    }
}

fn index(us: u64) -> usize {
    if us < 16 {
        return us as usize;
    }
    let e = us.ilog2().min(TOP_POWER - 1);
    let sub = (us.min((1 << TOP_POWER) - 1) >> (e - 4)) & 15;
    ((e - 3) * 16) as usize + sub as usize
}

/// The midpoint of bucket `i`, in µs.
fn midpoint(i: usize) -> f64 {
    if i < 16 {
        return i as f64;
    }
    let e = (i / 16) as u32 + 3;
    let sub = (i % 16) as u64;
    let width = 1u64 << (e - 4);
    ((16 + sub) * width) as f64 + (width as f64 - 1.0) / 2.0
}

impl Buckets {
    pub(crate) fn record(&self, latency_us: u64) {
        self.0[index(latency_us)].fetch_add(1, Ordering::Relaxed);
    }
}

/// The percentiles of the answers counted since `prev` was read (`now` minus `prev`).
fn quantiles(now: &[u64], prev: &[u64]) -> Option<LiveLatency> {
    let delta: Vec<u64> = now
        .iter()
        .zip(prev.iter().chain(std::iter::repeat(&0)))
        .map(|(a, b)| a.saturating_sub(*b))
        .collect();
    let total: u64 = delta.iter().sum();
    if total == 0 {
        return None;
    }
    let at = |q: f64| {
        let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
        let mut seen = 0;
        for (i, n) in delta.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return midpoint(i) / 1000.0;
            }
        }
        midpoint(delta.len() - 1) / 1000.0
    };
    Some(LiveLatency {
        p50: at(0.5),
        p90: at(0.9),
        p99: at(0.99),
    })
}

/// Turns the threads' buckets into percentiles over the last full second.
#[derive(Debug)]
pub(crate) struct Window {
    prev: Vec<u64>,
    since: Instant,
    current: Option<LiveLatency>,
}

impl Window {
    pub(crate) fn new() -> Window {
        Window {
            prev: Vec::new(),
            since: Instant::now(),
            current: None,
        }
    }

    /// The percentiles of the last completed second (`None` before the first one, or when
    /// nothing was answered in it).
    pub(crate) fn update<'a>(
        &mut self,
        threads: impl Iterator<Item = &'a Buckets>,
    ) -> Option<LiveLatency> {
        if self.since.elapsed() >= Duration::from_secs(1) {
            let mut now = vec![0u64; BUCKETS];
            for b in threads {
                for (sum, c) in now.iter_mut().zip(b.0.iter()) {
                    *sum += c.load(Ordering::Relaxed);
                }
            }
            self.current = quantiles(&now, &self.prev);
            self.prev = now;
            self.since = Instant::now();
        }
        self.current
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_value_lands_in_a_bucket_whose_midpoint_is_within_3_2_percent() {
        let mut v = 1u64;
        while v < (1 << 35) {
            for x in [v, v + v / 3, v + v / 2, 2 * v - 1] {
                let i = index(x);
                assert!(i < BUCKETS, "{x}");
                let m = midpoint(i);
                assert!(
                    (m - x as f64).abs() <= x as f64 * 0.032 + 0.5,
                    "{x} µs → bucket {i}, midpoint {m}"
                );
            }
            v *= 2;
        }
        assert_eq!(index(u64::MAX), BUCKETS - 1, "huge values stay in range");
    }

    #[test]
    fn percentiles_cover_only_what_was_counted_since_the_last_read() {
        let b = Buckets::default();
        for _ in 0..98 {
            b.record(1_000);
        }
        b.record(5_000);
        b.record(50_000);
        let mut now = vec![0; BUCKETS];
        for (n, c) in now.iter_mut().zip(b.0.iter()) {
            *n = c.load(Ordering::Relaxed);
        }
        let q = quantiles(&now, &[]).unwrap();
        assert!((q.p50 - 1.0).abs() < 0.032, "{q:?}");
        assert!((q.p99 - 5.0).abs() < 0.16, "{q:?}");
        assert_eq!(quantiles(&now, &now), None, "nothing new");
    }
}
