//! Power of two choices.

use std::sync::Arc;

use super::select::Selection;
use crate::backend::Backend;
use crate::rng::fast_random;

/// Power of two choices: two distinct workers at random, the one with fewer requests in
/// flight. Nearly least-connections quality without scanning the set.
#[derive(Debug, Default)]
pub(crate) struct PowerOfTwo;

impl Selection for PowerOfTwo {
    fn select<'a>(
        &self,
        backends: &'a [Arc<Backend>],
        avoid: Option<&Backend>,
        _key: Option<u64>,
    ) -> &'a Arc<Backend> {
        let n = backends.len();
        if n == 1 {
            return &backends[0];
        }
        let r = fast_random();
        let i = (r % n as u64) as usize;
        let mut j = ((r >> 32) % (n as u64 - 1)) as usize;
        if j >= i {
            j += 1;
        }
        let (a, b) = (&backends[i], &backends[j]);
        if a.avoided(avoid) {
            return b;
        }
        if b.avoided(avoid) {
            return a;
        }
        if b.in_flight() < a.in_flight() { b } else { a }
    }
}
