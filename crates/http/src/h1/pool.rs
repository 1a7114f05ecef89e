//! Idle HTTP/1.1 connections kept for reuse, by key (an upstream's address, a peer).
//! A connection goes in only when its response ended cleanly and the upstream keeps it
//! alive; it comes out only if the upstream has not closed it meanwhile (noticed from
//! readiness, before the request is written) and it has not idled past the time-out.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::conn::H1Conn;

/// A pool of idle connections by key. Meant per thread (the balancer keeps one per
/// data-plane thread), so its lock is uncontended.
#[derive(Debug)]
pub struct H1Pool<K> {
    idle: Mutex<HashMap<K, Vec<(H1Conn, Instant)>>>,
    idle_timeout: Duration,
    max_idle_per_key: usize,
}

impl<K: Hash + Eq> H1Pool<K> {
    /// A pool keeping at most `max_idle_per_key` connections per key, each for at most
    /// `idle_timeout`.
    pub fn new(idle_timeout: Duration, max_idle_per_key: usize) -> Self {
        Self {
            idle: Mutex::new(HashMap::new()),
            idle_timeout,
            max_idle_per_key,
        }
    }

    /// An idle connection for `key` that is still open, if any (newest first).
    pub fn checkout(&self, key: &K) -> Option<H1Conn> {
        loop {
            let (mut conn, since) = {
                let mut map = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
                map.get_mut(key).and_then(Vec::pop)
            }?;
            if since.elapsed() < self.idle_timeout && !conn.is_closed() {
                return Some(conn);
            } // else dropping it closes it
        }
    }

    /// Gives a connection back; kept only when it can carry another request and there
    /// is room.
    pub fn checkin(&self, key: K, conn: H1Conn) {
        if !conn.is_reusable() {
            return;
        }
        let mut map = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        let list = map.entry(key).or_default();
        if list.len() < self.max_idle_per_key {
            list.push((conn, Instant::now()));
        }
    }

    /// Closes idle connections past the time-out or already closed by their peer; run it
    /// periodically (every quarter of the idle time-out, say) so the time-out holds
    /// without traffic too.
    pub fn prune(&self) {
        let mut map = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        for list in map.values_mut() {
            list.retain_mut(|(c, since)| since.elapsed() < self.idle_timeout && !c.is_closed());
        }
        map.retain(|_, list| !list.is_empty());
    }

    /// Idle connections held, over all keys.
    pub fn idle(&self) -> usize {
        let map = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        map.values().map(Vec::len).sum()
    }
}
