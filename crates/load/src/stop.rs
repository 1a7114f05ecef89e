//! The run's stop flag, raised from another thread (a signal handler).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

/// Asks a running load to stop early, e.g. from a SIGINT handler on another thread. The
/// run stops claiming requests, cuts those in flight (counted `interrupted`), marks the
/// step it was in `partial` and returns everything measured until then.
#[derive(Debug, Clone, Default)]
pub struct Stop(Arc<StopState>);

#[derive(Debug, Default)]
struct StopState {
    raised: AtomicBool,
    at: OnceLock<Instant>,
}

impl Stop {
    /// A stop that has not been raised.
    pub fn new() -> Stop {
        Stop::default()
    }

    /// Raises it (idempotent; the first call's time counts).
    pub fn stop(&self) {
        let _ = self.0.at.set(Instant::now());
        self.0.raised.store(true, Ordering::Release);
    }

    /// Whether it was raised.
    pub fn is_stopped(&self) -> bool {
        self.0.raised.load(Ordering::Acquire)
    }

    /// When it was raised.
    pub(crate) fn at(&self) -> Option<Instant> {
        if self.is_stopped() {
            self.0.at.get().copied()
        } else {
            None
        }
    }
}
