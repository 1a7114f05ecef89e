//! A sleep with microsecond precision for the open model's schedule.
//!
//! tokio's timer wheel has 1 ms resolution and rounds deadlines up. A schedule paced by it
//! sends its requests in bursts once a millisecond, and since latency runs from each
//! request's intended time, the generator's own wait (0–1 ms, ~0.5 ms on average) lands in
//! every measured latency: at a few thousand requests per second that is most of a fast
//! service's p50 and squeezes old/new ratios toward 1. A timerfd is an hrtimer the thread's
//! own epoll watches, so the runtime wakes within microseconds of the intended time, at the
//! cost of one `timerfd_settime` per wake-up.

use std::io;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::time::Instant;

use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};
use tokio::io::unix::AsyncFd;

/// One reusable precise deadline (one per load thread). Falls back to tokio's timer when no
/// timerfd can be had (then with tokio's 1 ms resolution).
#[derive(Debug)]
pub(crate) struct PreciseTimer {
    fd: Option<AsyncFd<OwnedTimer>>,
}

/// The timer, owned by its `AsyncFd` registration: the fd cannot close while registered.
#[derive(Debug)]
struct OwnedTimer(TimerFd);

impl AsRawFd for OwnedTimer {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

impl PreciseTimer {
    /// Must be called inside a tokio runtime (the fd is registered with its reactor).
    pub(crate) fn new() -> PreciseTimer {
        let fd = TimerFd::new(
            ClockId::CLOCK_MONOTONIC,
            TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC,
        )
        .ok()
        // `AsyncFd::new` is deprecated because a registered fd could be closed behind the
        // reactor's back (tokio#8587); here the AsyncFd owns the only handle to it, so the
        // safe constructor is sound and `register` (unsafe) buys nothing.
        .and_then(|t| {
            #[allow(deprecated)]
            AsyncFd::new(OwnedTimer(t)).ok()
        });
        if fd.is_none() {
            tracing::warn!("no timerfd: the open model's pacing falls back to 1 ms ticks");
        }
        PreciseTimer { fd }
    }

    /// Returns at `at` or just after (never before). Cancel-safe: a dropped wait leaves at
    /// most a stale expiry, which the next call sees is early and re-arms past.
    pub(crate) async fn sleep_until(&self, at: Instant) {
        let Some(fd) = &self.fd else {
            tokio::time::sleep_until(at.into()).await;
            return;
        };
        loop {
            let now = Instant::now();
            if at <= now {
                return;
            }
            // Instant is CLOCK_MONOTONIC on Linux; a relative one-shot is enough. (A zero
            // duration would disarm, but `at > now` here.)
            let wait = TimeSpec::from_duration(at - now);
            if fd
                .get_ref()
                .0
                .set(Expiration::OneShot(wait), TimerSetTimeFlags::empty())
                .is_err()
            {
                tokio::time::sleep_until(at.into()).await;
                return;
            }
            loop {
                let Ok(mut guard) = fd.readable().await else {
                    tokio::time::sleep_until(at.into()).await;
                    return;
                };
                // Reading resets the expiry count; EAGAIN (not expired yet) clears readiness.
                match guard.try_io(|inner| inner.get_ref().0.wait().map_err(io::Error::from)) {
                    Ok(_) => break,
                    Err(_would_block) => continue,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// The timerfd path is taken here (Linux) and never wakes early, also after a stale
    /// expiry left by a cancelled wait. (How close it lands is a figure, in docs/load.md,
    /// not an assertion: a busy CI machine may deschedule the thread at any time.)
    #[test]
    fn uses_timerfd_and_never_wakes_early() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let timer = PreciseTimer::new();
            assert!(timer.fd.is_some(), "Linux has timerfd");
            // A cancelled wait leaves the timer armed for 100 µs from now.
            let early = Instant::now() + Duration::from_micros(100);
            let _ = tokio::time::timeout(Duration::from_micros(1), timer.sleep_until(early)).await;
            for i in 0..100u64 {
                let at = Instant::now() + Duration::from_micros(200 + (i * 37) % 400);
                timer.sleep_until(at).await;
                assert!(Instant::now() >= at, "woke before the deadline");
            }
            // A deadline in the past returns at once.
            timer
                .sleep_until(Instant::now() - Duration::from_millis(1))
                .await;
        });
    }
}
