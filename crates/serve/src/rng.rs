//! A cheap per-thread random number for the request path: an A/B arm without a sticky
//! key, power of two choices, a mirror's sample. Not for anything secret.

use std::cell::Cell;

thread_local! {
    // xorshift64*: a cheap per-thread RNG; seeded once per thread from the OS.
    static RNG: Cell<u64> = Cell::new(rand::random::<u64>() | 1);
}

/// A cheap per-thread random number.
pub(crate) fn fast_random() -> u64 {
    RNG.with(|c| {
        let mut x = c.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        c.set(x);
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    })
}
