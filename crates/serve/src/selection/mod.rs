//! *Which ready worker next*: one trait ([`Selection`], in `select.rs`) and one file per
//! algorithm, as pingora-load-balancing's `selection/` — round robin, least connections,
//! power of two choices, and rendezvous hashing for a sticky key (`sticky_worker`), which
//! falls back to the app's algorithm for a request without a key.

mod least_conn;
mod power_of_two;
mod rendezvous;
mod round_robin;
mod select;

pub(crate) use least_conn::LeastConn;
pub(crate) use power_of_two::PowerOfTwo;
pub(crate) use rendezvous::Rendezvous;
pub(crate) use round_robin::RoundRobin;
pub(crate) use select::Selection;

use crate::config::Balance;

/// The selection of an app: its `balance`, behind rendezvous hashing when it has a
/// `sticky_worker` key.
pub(crate) fn for_app(balance: Balance, sticky: bool) -> Box<dyn Selection> {
    let by_balance: Box<dyn Selection> = match balance {
        Balance::RoundRobin => Box::new(RoundRobin::default()),
        Balance::LeastConn => Box::new(LeastConn::default()),
        Balance::PowerOfTwo => Box::new(PowerOfTwo),
    };
    if sticky {
        Box::new(Rendezvous::new(by_balance))
    } else {
        by_balance
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{Backend, test_backends};
    use std::sync::Arc;

    fn set(n: usize) -> Vec<Arc<Backend>> {
        test_backends(0..n)
    }

    #[test]
    fn round_robin_visits_each_in_turn() {
        let b = set(3);
        let rr = RoundRobin::default();
        let picks: Vec<usize> = (0..6).map(|_| rr.select(&b, None, None).index()).collect();
        assert_eq!(picks, vec![0, 1, 2, 0, 1, 2]);
    }

    #[test]
    fn least_conn_prefers_idle_and_spreads_ties() {
        let b = set(3);
        b[0].enter();
        b[0].enter();
        b[1].enter();
        let lc = LeastConn::default();
        for _ in 0..5 {
            assert_eq!(lc.select(&b, None, None).index(), 2);
        }
        let idle = set(2);
        let picks: Vec<usize> = (0..4)
            .map(|_| lc.select(&idle, None, None).index())
            .collect();
        assert!(picks.contains(&0) && picks.contains(&1), "{picks:?}");
    }

    #[test]
    fn power_of_two_never_picks_the_busiest_of_two_and_honours_avoid() {
        let b = set(2);
        (0..5).for_each(|_| b[1].enter());
        for _ in 0..100 {
            assert_eq!(PowerOfTwo.select(&b, None, None).index(), 0);
            assert_eq!(PowerOfTwo.select(&b, Some(&b[0]), None).index(), 1);
        }
    }

    #[test]
    fn avoid_skips_the_failed_worker() {
        let b = set(2);
        let rr = RoundRobin::default();
        let lc = LeastConn::default();
        for _ in 0..10 {
            assert_eq!(rr.select(&b, Some(&b[0]), None).index(), 1);
            assert_eq!(lc.select(&b, Some(&b[1]), None).index(), 0);
        }
    }

    /// `sticky_worker`: a request with a key goes to its key's worker whatever the load;
    /// one without a key to the app's own algorithm (here the least busy worker).
    #[test]
    fn a_sticky_selection_takes_the_key_and_falls_back_without_one() {
        let b = set(3);
        (0..3).for_each(|_| b[0].enter());
        b[1].enter();
        let s = for_app(Balance::LeastConn, true);
        for key in 0..50u64 {
            let owner = s.select(&b, None, Some(key)).index();
            assert_eq!(
                s.select(&b, None, Some(key)).index(),
                owner,
                "key {key} moved"
            );
            assert_ne!(
                s.select(&b, Some(&b[owner]), Some(key)).index(),
                owner,
                "a failed worker is passed over"
            );
        }
        let owners: std::collections::HashSet<usize> = (0..50u64)
            .map(|k| s.select(&b, None, Some(k)).index())
            .collect();
        assert!(
            owners.contains(&0),
            "the key decides, not the load: {owners:?}"
        );
        for _ in 0..5 {
            assert_eq!(s.select(&b, None, None).index(), 2);
        }
    }
}
