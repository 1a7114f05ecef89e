//! HTTP/1.1 sessions by key: a pool of idle connections, checkout of a reused or new one
//! (saying which), release, and the resend of a request whose first write found the
//! reused connection closed.

use std::future::Future;
use std::hash::Hash;
use std::time::Duration;

use crate::error::Error;
use crate::h1::{H1Conn, H1Pool};

use super::{Resend, Reuse};

/// Idle HTTP/1.1 connections by key (an upstream's address, a peer) and the resend rule.
/// Meant per thread or per peer; its lock is held only to take or give back a connection.
#[derive(Debug)]
pub struct H1Sessions<K> {
    pool: H1Pool<K>,
    resend: Resend,
}

impl<K: Hash + Eq + Clone> H1Sessions<K> {
    /// Sessions keeping at most `max_idle_per_key` idle connections per key, each for at
    /// most `idle_timeout`, resending by the tool's `resend`.
    pub fn new(idle_timeout: Duration, max_idle_per_key: usize, resend: Resend) -> Self {
        Self {
            pool: H1Pool::new(idle_timeout, max_idle_per_key),
            resend,
        }
    }

    /// An idle connection for `key` that is still open, if any.
    pub fn checkout(&self, key: &K) -> Option<H1Conn> {
        self.pool.checkout(key)
    }

    /// Starts a request: takes an idle connection for `key` (one the peer closed while it
    /// idled is passed over, from the readiness the event loop has) or opens one with
    /// `dial`, and runs `write` on it — the request, or its head when the body follows;
    /// `write` hands the connection back with its outcome. When it fails on a reused
    /// connection before one byte left ([`Error::NotSent`]: the peer closed it as the
    /// request came), the peer never took the request, so it is written once more on a
    /// new connection, whatever its method ([`Resend::unsent_on_reused`]). Returns the
    /// connection, to read the answer on, and whether it was reused.
    ///
    /// The connection goes into `write` and comes back (rather than a `&mut` borrow) so
    /// that the caller's future stays `Send` when its parts are: a future borrowing a
    /// closure's argument cannot be proven `Send` for every lifetime.
    pub async fn start<D, W>(
        &self,
        key: &K,
        mut dial: impl FnMut() -> D,
        mut write: impl FnMut(H1Conn) -> W,
    ) -> Result<(H1Conn, Reuse), Error>
    where
        D: Future<Output = Result<H1Conn, Error>>,
        W: Future<Output = (H1Conn, Result<(), Error>)>,
    {
        let (conn, reuse) = match self.pool.checkout(key) {
            Some(c) => (c, Reuse::Reused),
            None => (dial().await?, Reuse::New),
        };
        match write(conn).await {
            (conn, Ok(())) => Ok((conn, reuse)),
            (stale, Err(e)) if self.resend.again_h1(&e, reuse) => {
                drop(stale);
                match write(dial().await?).await {
                    (conn, Ok(())) => Ok((conn, Reuse::New)),
                    (_, Err(e)) => Err(e),
                }
            }
            (_, Err(e)) => Err(e),
        }
    }

    /// Gives a connection back once its response has ended: kept when it can carry
    /// another request and there is room, closed otherwise.
    pub fn release(&self, key: K, conn: H1Conn) {
        self.pool.checkin(key, conn);
    }

    /// Closes idle connections past the idle time-out or closed by their peer; run it
    /// periodically so the time-out holds without traffic too.
    pub fn prune(&self) {
        self.pool.prune();
    }

    /// Idle connections held, over all keys.
    pub fn idle(&self) -> usize {
        self.pool.idle()
    }
}
