//! Rendezvous (highest random weight) hashing for a sticky key: the same client to the
//! same worker while it is ready.

use std::sync::Arc;

use super::select::Selection;
use crate::backend::Backend;
use crate::sticky::mix;

/// `sticky_worker`: a request with a key goes to the key's worker by rendezvous hashing
/// over the ready workers' slot indexes (a worker that leaves or fails moves only its own
/// keys); a request without one, or whose every worker is passed over, to the app's own
/// algorithm.
#[derive(Debug)]
pub(crate) struct Rendezvous {
    otherwise: Box<dyn Selection>,
}

impl Rendezvous {
    /// Rendezvous hashing for requests with a key, `otherwise` for the rest.
    pub(crate) fn new(otherwise: Box<dyn Selection>) -> Self {
        Self { otherwise }
    }
}

impl Selection for Rendezvous {
    fn select<'a>(
        &self,
        backends: &'a [Arc<Backend>],
        avoid: Option<&Backend>,
        key: Option<u64>,
    ) -> &'a Arc<Backend> {
        if let Some(key) = key
            && let Some(b) = rendezvous(backends, key, |b| !b.avoided(avoid))
        {
            return b;
        }
        self.otherwise.select(backends, avoid, None)
    }
}

/// The worker for key hash `key` among `backends` (the ready set), by rendezvous
/// (highest random weight) hashing over their slot indexes: each (key, slot) pair gets a
/// score and the highest wins. A worker that leaves takes only its own keys with it
/// (each moves to its key's next-highest slot), the others' keys stay where they were,
/// and a successor in the same slot gets the slot's keys back. `eligible` passes over a
/// worker (stalled, or the one that just failed this request): its keys go to their
/// next slot, only while it is passed over. `None` when no worker is eligible.
fn rendezvous<'a>(
    backends: &'a [Arc<Backend>],
    key: u64,
    eligible: impl Fn(&Arc<Backend>) -> bool,
) -> Option<&'a Arc<Backend>> {
    let mut best: Option<(u64, &'a Arc<Backend>)> = None;
    for b in backends {
        if !eligible(b) {
            continue;
        }
        let score = mix(key ^ mix(b.index() as u64 ^ 0x9e37_79b9_7f4a_7c15));
        // `>=`: of two incarnations of one slot (a `prestart` successor next to its
        // suspect, in the order they joined), the newer.
        if best.is_none_or(|(s, _)| score >= s) {
            best = Some((score, b));
        }
    }
    best.map(|(_, b)| b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::test_backends;
    use crate::sticky::hash_bytes;
    use std::collections::HashMap;

    fn set(slots: &[usize]) -> Vec<Arc<Backend>> {
        test_backends(slots.iter().copied())
    }

    fn owners(backends: &[Arc<Backend>], keys: u64) -> HashMap<u64, usize> {
        (0..keys)
            .map(|k| {
                let key = hash_bytes(format!("client-{k}").as_bytes());
                (k, rendezvous(backends, key, |_| true).unwrap().index())
            })
            .collect()
    }

    /// Removing a slot moves exactly its keys; the others keep theirs; adding it back
    /// returns its keys; and the keys spread over all slots.
    #[test]
    fn rendezvous_moves_only_the_keys_of_a_slot_that_leaves() {
        let all = set(&[0, 1, 2, 3]);
        let before = owners(&all, 4000);
        for slot in 0..4 {
            let n = before.values().filter(|&&s| s == slot).count();
            assert!((700..1300).contains(&n), "slot {slot} got {n} of 4000 keys");
        }
        let without_2 = set(&[0, 1, 3]);
        let after = owners(&without_2, 4000);
        for (k, &was) in &before {
            if was == 2 {
                assert_ne!(after[k], 2);
            } else {
                assert_eq!(after[k], was, "key {k} moved from slot {was}");
            }
        }
        assert_eq!(owners(&set(&[0, 1, 2, 3]), 4000), before);
    }

    /// A passed-over worker's keys go elsewhere while it is passed over, and only those.
    #[test]
    fn an_ineligible_worker_loses_only_its_own_keys() {
        let all = set(&[0, 1, 2]);
        let before = owners(&all, 600);
        for k in 0..600u64 {
            let key = hash_bytes(format!("client-{k}").as_bytes());
            let got = rendezvous(&all, key, |b| b.index() != 1).unwrap().index();
            if before[&k] == 1 {
                assert_ne!(got, 1);
            } else {
                assert_eq!(got, before[&k]);
            }
        }
        assert!(rendezvous(&all, 7, |_| false).is_none());
    }

    /// Two incarnations of one slot (a `prestart` successor beside its suspect): the
    /// newer, which joined the set later, takes the slot's keys.
    #[test]
    fn the_newer_incarnation_of_a_slot_wins() {
        let mut b = set(&[0, 1]);
        b.push(set(&[1]).remove(0));
        for k in 0..200u64 {
            let got = rendezvous(&b, mix(k), |_| true).unwrap();
            if got.index() == 1 {
                assert!(Arc::ptr_eq(got, &b[2]));
            }
        }
    }
}
