//! One process-wide monotonic clock in microseconds, as a plain number: what an atomic
//! can hold (a worker's last progress, when an attempt was sent) and two parts can compare
//! (the balancer's view of a worker and the record of a request's attempt).

use std::sync::OnceLock;
use std::time::Instant;

/// Microseconds on one process-wide monotonic clock.
pub(crate) fn epoch_us() -> u64 {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    ORIGIN.get_or_init(Instant::now).elapsed().as_micros() as u64
}
