//! The mirror byte budget: how many bytes of request and response bodies the proxy may
//! hold for mirrors that are queued or in flight.
//!
//! A queue bounded in jobs is not bounded in memory: 1,000 jobs of 3.5 MB answers are
//! 3.5 GB. Every body a mirror keeps is charged here as it is read; a charge that does
//! not fit is refused, and the mirror is skipped (`over_budget`) instead of growing the
//! proxy. A [`Charge`] gives its bytes back when dropped, wherever the mirror ends.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug)]
pub(crate) struct Budget {
    limit: u64,
    used: AtomicU64,
    peak: AtomicU64,
}

impl Budget {
    pub(crate) fn new(limit: u64) -> Arc<Self> {
        Arc::new(Self {
            limit,
            used: AtomicU64::new(0),
            peak: AtomicU64::new(0),
        })
    }

    /// An empty charge, to grow as bytes arrive.
    pub(crate) fn charge(self: &Arc<Self>) -> Charge {
        Charge {
            budget: self.clone(),
            bytes: 0,
        }
    }

    /// Bytes held now.
    pub(crate) fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// The most ever held at once.
    pub(crate) fn peak(&self) -> u64 {
        self.peak.load(Ordering::Relaxed)
    }

    pub(crate) fn limit(&self) -> u64 {
        self.limit
    }

    fn take(&self, n: u64) -> bool {
        let mut cur = self.used.load(Ordering::Relaxed);
        loop {
            let Some(next) = cur.checked_add(n).filter(|v| *v <= self.limit) else {
                return false;
            };
            match self
                .used
                .compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => {
                    self.peak.fetch_max(next, Ordering::Relaxed);
                    return true;
                }
                Err(actual) => cur = actual,
            }
        }
    }

    fn give_back(&self, n: u64) {
        self.used.fetch_sub(n, Ordering::AcqRel);
    }
}

/// Bytes charged to a [`Budget`] by one body; returned when dropped.
#[derive(Debug)]
pub(crate) struct Charge {
    budget: Arc<Budget>,
    bytes: u64,
}

impl Charge {
    /// Charges `n` more bytes; `false` (and nothing charged) when they do not fit.
    pub(crate) fn grow(&mut self, n: usize) -> bool {
        let n = n as u64;
        if self.budget.take(n) {
            self.bytes += n;
            true
        } else {
            false
        }
    }

    /// Moves this charge's bytes into a new one, leaving this one empty (to grow again).
    pub(crate) fn take(&mut self) -> Charge {
        Charge {
            budget: self.budget.clone(),
            bytes: std::mem::take(&mut self.bytes),
        }
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        if self.bytes > 0 {
            self.budget.give_back(self.bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_are_refused_past_the_limit_and_given_back_on_drop() {
        let b = Budget::new(100);
        let mut a = b.charge();
        assert!(a.grow(60));
        let mut c = b.charge();
        assert!(!c.grow(41), "60 + 41 is over 100");
        assert!(c.grow(40));
        assert_eq!(b.used(), 100);
        let moved = c.take();
        drop(c);
        assert_eq!(b.used(), 100, "the bytes moved with the new charge");
        drop((a, moved));
        assert_eq!((b.used(), b.peak()), (0, 100));
    }
}
