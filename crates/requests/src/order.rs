//! Request order: as in the data, or a seeded permutation.

/// The order in which [`RequestSet::render`](crate::RequestSet::render) walks the data rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Order {
    /// Row 0, 1, 2, ... as in the data file.
    #[default]
    Sequential,
    /// A permutation of the rows fixed by `seed`: every row once per round, and the same
    /// seed gives the same order on every machine and every version of this crate.
    Shuffled {
        /// The seed of the permutation.
        seed: u64,
    },
}

/// A permutation of `0..len` by Fisher–Yates over SplitMix64.
///
/// Written out here rather than taken from `rand`, because `rand` does not promise that
/// `StdRng` yields the same stream across its versions; a load run must replay the same
/// order wherever it runs.
pub(crate) fn permutation(len: usize, seed: u64) -> Vec<u32> {
    let mut order: Vec<u32> = (0..len as u32).collect();
    let mut rng = SplitMix64(seed);
    for i in (1..len).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        order.swap(i, j);
    }
    order
}

/// The `(i + 1)`-th output of SplitMix64 seeded with `seed`, computed directly: SplitMix64's
/// state after `n` steps is `seed + n·γ`, so any position of the stream costs the same.
/// A mix uses it to pick request `i`'s endpoint without shared state between workers.
pub(crate) fn splitmix_at(seed: u64, i: u64) -> u64 {
    let mut rng = SplitMix64(seed.wrapping_add(i.wrapping_mul(0x9E37_79B9_7F4A_7C15)));
    rng.next()
}

/// SplitMix64 (Steele, Lea, Flood 2014): tiny, fast, passes BigCrush; fine for shuffling.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..bound` (Lemire's multiply-shift with rejection; no modulo bias).
    fn below(&mut self, bound: u64) -> u64 {
        let threshold = bound.wrapping_neg() % bound;
        loop {
            let product = u128::from(self.next()) * u128::from(bound);
            if (product as u64) >= threshold {
                return (product >> 64) as u64;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permutation_holds_every_row_once() {
        let mut p = permutation(1000, 7);
        assert_ne!(p, (0..1000).collect::<Vec<u32>>(), "not shuffled");
        p.sort_unstable();
        assert_eq!(p, (0..1000).collect::<Vec<u32>>());
    }

    #[test]
    fn same_seed_same_order_other_seed_other_order() {
        assert_eq!(permutation(500, 42), permutation(500, 42));
        assert_ne!(permutation(500, 42), permutation(500, 43));
    }

    #[test]
    fn splitmix_matches_reference_stream() {
        // First outputs of SplitMix64 seeded with 1234567, from the reference C code
        // (splitmix64.c by Sebastiano Vigna), so the order is stable across platforms.
        let mut rng = SplitMix64(1_234_567);
        let got: Vec<u64> = (0..3).map(|_| rng.next()).collect();
        assert_eq!(
            got,
            [
                6_457_827_717_110_365_317,
                3_203_168_211_198_807_973,
                9_817_491_932_198_370_423
            ]
        );
    }

    #[test]
    fn splitmix_at_is_the_stream_at_that_position() {
        let mut rng = SplitMix64(1_234_567);
        for i in 0..100 {
            assert_eq!(splitmix_at(1_234_567, i), rng.next(), "position {i}");
        }
    }

    #[test]
    fn tiny_lengths() {
        assert!(permutation(0, 1).is_empty());
        assert_eq!(permutation(1, 1), [0]);
    }
}
