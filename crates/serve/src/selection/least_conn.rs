//! The worker with the fewest requests in flight.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::select::Selection;
use crate::backend::Backend;

/// The worker with the fewest requests in flight; the scan starts at a rotating offset
/// so ties (an idle set) are spread in turn instead of all going to the first worker.
#[derive(Debug, Default)]
pub(crate) struct LeastConn {
    next: AtomicUsize,
}

impl Selection for LeastConn {
    fn select<'a>(
        &self,
        backends: &'a [Arc<Backend>],
        avoid: Option<&Backend>,
        _key: Option<u64>,
    ) -> &'a Arc<Backend> {
        let n = backends.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let mut best: Option<&Arc<Backend>> = None;
        for k in 0..n {
            let b = &backends[(start + k) % n];
            if b.avoided(avoid) {
                continue;
            }
            if best.is_none_or(|x| b.in_flight() < x.in_flight()) {
                best = Some(b);
            }
        }
        best.unwrap_or(&backends[start % n])
    }
}
