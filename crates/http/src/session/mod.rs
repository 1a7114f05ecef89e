//! The session layer, above the connector (as pingora-core's `connectors/http`): which
//! connection a request goes out on — a reused one or a new one, and the caller is told
//! which — how it is given back, and the one rule for sending a request again: **only a
//! request the peer never took, and at most once.**
//!
//! - [`H1Sessions`] — idle HTTP/1.1 connections by key, [`H1Sessions::start`] (checkout
//!   or dial, write, resend once on a new connection when the reused one was closed
//!   before one byte left) and [`H1Sessions::release`].
//! - [`SharedH2`] — one HTTP/2 connection shared by every request to a peer, replaced
//!   when it ends, reopened by one caller while the others wait and share the outcome;
//!   [`SharedH2::send`] resends a request the peer refused unprocessed.
//! - [`Sessions`] — both for one peer, as ALPN or the peer's settings choose
//!   (pingora's `get_http_session` / `release_http_session`): a peer whose first
//!   connection chose h2 gets the shared connection from then on.
//!
//! What a tool may resend is its own policy, given as a [`Resend`]: the balancer's rule
//! that a request its worker took is never resent, and its idempotency rule for a resend
//! to *another* worker, stay in `scalpel-serve`; this layer only ever resends what the
//! peer certainly never processed, to the same peer.

mod h1;
mod h2;

use std::future::Future;
use std::sync::PoisonError;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::connector::{Conn, Connector};
use crate::error::{Error, TlsError};
use crate::h1::H1Conn;
use crate::h2::H2Conn;
use crate::peer::HttpVersion;

pub use h1::H1Sessions;
pub use h2::{H2Lease, SharedH2};

/// Whether a request's connection came from the pool or was opened for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reuse {
    /// An idle connection, kept from an earlier request (its peer may have closed it
    /// meanwhile).
    Reused,
    /// A connection opened for this request.
    New,
}

/// What a tool lets the session layer send again — only ever a request its peer never
/// took, and at most once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resend {
    /// HTTP/1.1: a request whose first write failed before one byte left, on a reused
    /// connection (its peer closed it as the request came: its keep-alive time-out), is
    /// written once more on a new connection, whatever its method.
    pub unsent_on_reused: bool,
    /// HTTP/2: a request the peer refused unprocessed — its stream past the last stream
    /// id of the peer's GOAWAY (RFC 9113 §6.8), or reset with REFUSED_STREAM (§8.7) — is
    /// sent once more: after a GOAWAY on a new connection, after REFUSED_STREAM on the
    /// same one.
    pub refused_h2: bool,
}

impl Resend {
    /// Never send anything again.
    pub const NEVER: Resend = Resend {
        unsent_on_reused: false,
        refused_h2: false,
    };

    /// Send again, once, every request the peer never took.
    pub const NEVER_TAKEN: Resend = Resend {
        unsent_on_reused: true,
        refused_h2: true,
    };

    /// May a request whose first write on a `reuse` connection failed with `e` be
    /// written again on a new connection?
    fn again_h1(self, e: &Error, reuse: Reuse) -> bool {
        self.unsent_on_reused && reuse == Reuse::Reused && matches!(e, Error::NotSent(_))
    }

    /// May an HTTP/2 request that failed with `e` be sent again?
    fn again_h2(self, e: &Error) -> bool {
        self.refused_h2 && (e.refused_by_goaway() || e.reset_by_peer() == Some("refused_stream"))
    }
}

/// A connection for one request to a [`Sessions`] peer.
#[derive(Debug)]
pub enum Session {
    /// HTTP/1.1, the request (or its head) already written; give the connection back
    /// with [`Sessions::release`] once its response has ended.
    H1(H1Conn, Reuse),
    /// A handle on the peer's shared HTTP/2 connection, to send the request on.
    H2(H2Conn),
}

/// The connections to one peer: its [`Connector`], an HTTP/1.1 pool and the shared HTTP/2
/// connection. The peer speaks HTTP/2 when its settings ask for it or once a connection's
/// ALPN chose it; a peer whose ALPN later chooses HTTP/1.1 goes back to the pool.
#[derive(Debug)]
pub struct Sessions {
    connector: Connector,
    h1: H1Sessions<()>,
    h2: SharedH2,
    h2_mode: AtomicBool,
}

impl Sessions {
    /// Sessions with `connector`'s peer, keeping at most `max_idle` idle HTTP/1.1
    /// connections (each for the peer's idle time-out), resending by `resend`.
    pub fn new(connector: Connector, max_idle: usize, resend: Resend) -> Sessions {
        let options = connector.peer().options();
        let idle: Duration = options.idle_timeout;
        let h2 = options.version == HttpVersion::Http2;
        Sessions {
            h1: H1Sessions::new(idle, max_idle.max(1), resend),
            h2: SharedH2::new(),
            h2_mode: AtomicBool::new(h2),
            connector,
        }
    }

    /// The connector (for a check that opens a connection of its own).
    pub fn connector(&self) -> &Connector {
        &self.connector
    }

    /// A connection for the next request (pingora's `get_http_session`): the shared
    /// HTTP/2 one, or an HTTP/1.1 one — reused or new, and `write_h1` already run on it,
    /// with [`H1Sessions::start`]'s resend rule. An HTTP/2 request is the caller's to send.
    pub async fn start<W>(&self, write_h1: impl FnMut(H1Conn) -> W) -> Result<Session, Error>
    where
        W: Future<Output = (H1Conn, Result<(), Error>)>,
    {
        if self.h2_mode.load(Ordering::Relaxed) {
            match self.h2.lease(|| self.open_h2()).await {
                Ok(lease) => return Ok(Session::H2(lease.into_conn())),
                // Its ALPN chose HTTP/1.1 this time: the pool's path.
                Err(_) if !self.h2_mode.load(Ordering::Relaxed) => {}
                Err(e) => return Err(e),
            }
        }
        let chose_h2 = std::sync::Mutex::new(None);
        let dial = || async {
            match self.connector.connect().await?.conn {
                Conn::H1(c) => Ok(c),
                Conn::H2(c) => {
                    *chose_h2.lock().unwrap_or_else(PoisonError::into_inner) = Some(c);
                    Err(Error::Request("ALPN chose h2".into())) // not returned: see below
                }
            }
        };
        let started = self.h1.start(&(), dial, write_h1).await;
        if let Some(conn) = chose_h2
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner)
        {
            self.h2_mode.store(true, Ordering::Relaxed);
            return Ok(Session::H2(self.h2.install(conn).into_conn()));
        }
        started.map(|(conn, reuse)| Session::H1(conn, reuse))
    }

    /// Gives an HTTP/1.1 connection back once its response has ended (pingora's
    /// `release_http_session`): kept for the next request when it can carry one.
    pub fn release(&self, conn: H1Conn) {
        self.h1.release((), conn);
    }

    async fn open_h2(&self) -> Result<H2Conn, Error> {
        match self.connector.connect().await?.conn {
            Conn::H2(c) => Ok(c),
            Conn::H1(_) => {
                self.h2_mode.store(false, Ordering::Relaxed);
                Err(Error::Tls(TlsError::NoH2 {
                    chosen: "http/1.1".into(),
                }))
            }
        }
    }
}
