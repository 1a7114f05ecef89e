//! One HTTP/2 connection shared by every request to a peer, replaced when it ends, with
//! a single-flight reconnect: requests that find it dead while another is opening the
//! next one wait for that attempt and share its outcome — its connection, or its failure
//! — instead of each opening one.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::error::{Error, ErrorKind};
use crate::h2::H2Conn;

use super::Resend;

/// A peer's shared HTTP/2 connection. `Send + Sync`: a proxy shares it between runtime
/// threads; a load generator's thread holds its own (the lock is then uncontended, and
/// taken only when a connection is replaced — a request on a live one checks two atomics).
#[derive(Debug, Default)]
pub struct SharedH2 {
    /// The live connection, or none (never opened, or it ended).
    current: Mutex<Option<H2Lease>>,
    /// Bumped at each new connection: a lease of an older one is stale.
    generation: AtomicU64,
    /// One opening at a time; holds the outcome of the last attempt.
    opening: tokio::sync::Mutex<Attempts>,
    /// Attempts that ended (readable without waiting for `opening`).
    ended: AtomicU64,
}

#[derive(Debug, Default)]
struct Attempts {
    /// The last attempt's failure, if it failed.
    failed: Option<Arc<Error>>,
}

/// A caller's handle on the shared connection: its own clone of the connection (an
/// `H2Conn` clone may have one request waiting for a stream, so each concurrent sender
/// keeps its own) and the generation it belongs to.
#[derive(Debug, Clone)]
pub struct H2Lease {
    conn: H2Conn,
    generation: u64,
}

impl H2Lease {
    /// The connection, to send on.
    pub fn conn(&mut self) -> &mut H2Conn {
        &mut self.conn
    }

    /// The connection, given up by the lease.
    pub fn into_conn(self) -> H2Conn {
        self.conn
    }
}

impl SharedH2 {
    /// No connection yet.
    pub fn new() -> SharedH2 {
        SharedH2::default()
    }

    /// Makes `conn` (opened elsewhere: before a run's clock starts, or by a first
    /// connection whose ALPN chose h2) the shared connection, replacing any other.
    pub fn install(&self, conn: H2Conn) -> H2Lease {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        let lease = H2Lease {
            conn,
            generation: self.generation.fetch_add(1, Ordering::AcqRel) + 1,
        };
        *current = Some(lease.clone());
        lease
    }

    /// A lease on the current connection, if it is live.
    pub fn live(&self) -> Option<H2Lease> {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        if current.as_ref().is_some_and(|l| l.conn.is_closed()) {
            *current = None;
        }
        current.clone()
    }

    /// Is `lease` still on the shared connection, and that connection live? Two atomic
    /// loads, no lock: the check a sender makes before each request.
    pub fn holds(&self, lease: &H2Lease) -> bool {
        lease.generation == self.generation.load(Ordering::Acquire) && !lease.conn.is_closed()
    }

    /// Forgets the connection of `lease` (it ended, or failed in a way that ends it): the
    /// next request opens another. A newer connection is left alone.
    pub fn forget(&self, lease: &H2Lease) {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        if current
            .as_ref()
            .is_some_and(|l| l.generation == lease.generation)
        {
            *current = None;
        }
    }

    /// A lease on a live connection: the current one, or one `open` makes. One opening
    /// at a time: a caller that arrives while another opens waits for it and takes its
    /// connection, or — if that attempt failed while it waited — its failure
    /// ([`Error::Shared`]). A caller that comes after a failed attempt tries again. If the
    /// opening caller is dropped mid-attempt (its request timed out), a waiter opens.
    pub async fn lease<O>(&self, open: impl FnOnce() -> O) -> Result<H2Lease, Error>
    where
        O: Future<Output = Result<H2Conn, Error>>,
    {
        if let Some(lease) = self.live() {
            return Ok(lease);
        }
        let seen = self.ended.load(Ordering::Acquire);
        let mut attempts = self.opening.lock().await;
        if let Some(lease) = self.live() {
            return Ok(lease);
        }
        if self.ended.load(Ordering::Acquire) > seen
            && let Some(failed) = &attempts.failed
        {
            return Err(Error::Shared(Arc::clone(failed)));
        }
        let outcome = open().await;
        self.ended.fetch_add(1, Ordering::AcqRel);
        match outcome {
            Ok(conn) => {
                attempts.failed = None;
                Ok(self.install(conn))
            }
            Err(e) => {
                let e = Arc::new(e);
                attempts.failed = Some(Arc::clone(&e));
                Err(Error::Shared(e))
            }
        }
    }

    /// Sends one request with `exchange` on the caller's `lease` (renewed first when it is
    /// stale: `open` makes a connection if none is live), and applies the one resend rule
    /// for HTTP/2 ([`Resend::refused_h2`]). After a failure that ends the connection (all
    /// but a stream the peer reset and a time-out) the connection is forgotten, so the
    /// next request, or the resend, opens another. The connection goes into `exchange`
    /// and comes back with the outcome (no clone of the handle per request; the caller's
    /// future stays `Send` when its parts are).
    pub async fn send<T, O, X>(
        &self,
        lease: &mut Option<H2Lease>,
        resend: Resend,
        mut open: impl FnMut() -> O,
        mut exchange: impl FnMut(H2Conn) -> X,
    ) -> Result<T, Error>
    where
        O: Future<Output = Result<H2Conn, Error>>,
        X: Future<Output = (H2Conn, Result<T, Error>)>,
    {
        let mut resent = false;
        loop {
            let held = match lease.take() {
                Some(l) if self.holds(&l) => l,
                _ => self.lease(&mut open).await?,
            };
            let generation = held.generation;
            let (conn, outcome) = exchange(held.conn).await;
            let mine = lease.insert(H2Lease { conn, generation });
            match outcome {
                Ok(v) => return Ok(v),
                Err(e) => {
                    if ends_connection(&e) {
                        self.forget(mine);
                        *lease = None;
                    }
                    if !resent && resend.again_h2(&e) {
                        resent = true;
                        continue;
                    }
                    return Err(e);
                }
            }
        }
    }
}

/// An HTTP/2 failure after which the connection carries no more requests: all but a
/// stream the peer reset (the connection goes on) and a time-out (a slow answer).
fn ends_connection(e: &Error) -> bool {
    e.reset_by_peer().is_none() && e.kind() != ErrorKind::Timeout
}
