//! Each worker in turn.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::select::Selection;
use crate::backend::Backend;

/// Each worker in turn.
#[derive(Debug, Default)]
pub(crate) struct RoundRobin {
    next: AtomicUsize,
}

impl Selection for RoundRobin {
    fn select<'a>(
        &self,
        backends: &'a [Arc<Backend>],
        avoid: Option<&Backend>,
        _key: Option<u64>,
    ) -> &'a Arc<Backend> {
        let n = backends.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        (0..n)
            .map(|k| &backends[(start + k) % n])
            .find(|b| !b.avoided(avoid))
            .unwrap_or(&backends[start % n])
    }
}
