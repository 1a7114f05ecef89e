//! Waiting for a condition with a deadline: polls, never a timed assertion. The deadlines
//! are generous (the machines running the tests are shared and loaded); they only turn a
//! hang into a failure.

use std::time::{Duration, Instant};

/// Polls `cond` every 50 ms (blocking the thread) until it holds or `limit` passes;
/// `true` if it held.
pub fn poll(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Polls `cond` every 50 ms (sleeping on the tokio timer) until it holds or `limit`
/// passes; `true` if it held.
pub async fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls the async `f` every 50 ms until it returns `Some`, and returns that; panics
/// saying it timed out waiting for `what` once `limit` has passed.
pub async fn eventually_some<T>(
    what: &str,
    limit: Duration,
    mut f: impl AsyncFnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
