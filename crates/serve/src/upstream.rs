//! Keep-alive connections to the workers: one pool per data-plane thread, so a request,
//! its upstream connection's task and its response all stay on the thread that accepted
//! the client.
//!
//! Why not hyper-util's legacy `Client` (used before, measured in docs/serve.md): it needs
//! an absolute URI per request (a `format!` and a parse), keeps one pool for every thread
//! behind a lock, and hands requests to connection tasks on whichever runtime thread they
//! landed. Here a checkout pops this thread's idle stack for the worker's address; the
//! request goes out in origin form with the client's own `Host`. hyper's
//! `client::conn::http1` still does the HTTP/1.1.
//!
//! A connection goes back to the pool only once its response body has ended; one dropped
//! earlier is closed (hyper closes a connection whose response is abandoned).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::client::conn::http1::{Builder, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// The sending half of one upstream connection.
pub(crate) type Sender = SendRequest<Full<Bytes>>;

/// Why an exchange with a worker failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum UpstreamError {
    /// No connection could be made: the worker never saw the request.
    #[error("connect: {0}")]
    Connect(#[source] std::io::Error),
    /// Connecting took longer than the configured time-out.
    #[error("connect: no connection within {0} ms")]
    ConnectTimeout(u128),
    /// The connection closed before the request was written: the worker never saw it.
    #[error("connection closed before the request was sent: {0}")]
    NotSent(#[source] hyper::Error),
    /// The request was written (or may have been) and then the exchange failed.
    #[error("{0}")]
    Exchange(#[source] hyper::Error),
}

impl UpstreamError {
    /// The worker certainly never received the request: resending is safe for any method.
    pub(crate) fn never_sent(&self) -> bool {
        matches!(
            self,
            UpstreamError::Connect(_)
                | UpstreamError::ConnectTimeout(_)
                | UpstreamError::NotSent(_)
        )
    }
}

struct Idle {
    tx: Sender,
    since: Instant,
}

/// One data-plane thread's connections to every worker, by address.
pub(crate) struct Upstreams {
    idle: Mutex<HashMap<SocketAddr, Vec<Idle>>>,
    connect_timeout: Duration,
    idle_timeout: Duration,
    max_idle_per_worker: usize,
}

impl std::fmt::Debug for Upstreams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstreams")
            .field("connect_timeout", &self.connect_timeout)
            .field("idle_timeout", &self.idle_timeout)
            .finish_non_exhaustive()
    }
}

/// A connection in use, returned to its pool by [`Lease::release`] once the response has
/// ended; dropped instead, it closes.
#[derive(Debug)]
pub(crate) struct Lease {
    tx: Sender,
    addr: SocketAddr,
    pool: Arc<Upstreams>,
}

impl Lease {
    /// The response is complete: the connection may carry the next request.
    pub(crate) fn release(self) {
        self.pool.checkin(self.addr, self.tx);
    }
}

impl Upstreams {
    pub(crate) fn new(
        connect_timeout: Duration,
        idle_timeout: Duration,
        max_idle_per_worker: usize,
    ) -> Arc<Self> {
        Arc::new(Self {
            idle: Mutex::new(HashMap::new()),
            connect_timeout,
            idle_timeout,
            max_idle_per_worker,
        })
    }

    /// Sends `req` (origin-form URI) to the worker at `addr` on an idle connection, or a
    /// new one. A pooled connection that turns out closed before the request left (the
    /// worker timed it out meanwhile) is replaced by a fresh one, once: the request never
    /// reached anyone.
    pub(crate) async fn send(
        self: &Arc<Self>,
        addr: SocketAddr,
        req: Request<Full<Bytes>>,
    ) -> Result<(Response<Incoming>, Lease), UpstreamError> {
        let mut req = req;
        let mut fresh = false;
        loop {
            let mut tx = match self.checkout(addr).await {
                Some(tx) => tx,
                None => {
                    fresh = true;
                    self.connect(addr).await?
                }
            };
            match tx.try_send_request(req).await {
                Ok(res) => {
                    let lease = Lease {
                        tx,
                        addr,
                        pool: Arc::clone(self),
                    };
                    return Ok((res, lease));
                }
                Err(mut e) => match e.take_message() {
                    Some(unsent) if !fresh => req = unsent,
                    Some(_) => return Err(UpstreamError::NotSent(e.into_error())),
                    None => return Err(UpstreamError::Exchange(e.into_error())),
                },
            }
        }
    }

    /// An idle connection to `addr` that is ready for a request, if any.
    async fn checkout(&self, addr: SocketAddr) -> Option<Sender> {
        loop {
            let idle = {
                let mut map = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
                map.get_mut(&addr).and_then(Vec::pop)
            }?;
            if idle.tx.is_closed() || idle.since.elapsed() >= self.idle_timeout {
                continue; // dropping it closes the connection
            }
            let mut tx = idle.tx;
            if tx.is_ready() {
                return Some(tx);
            }
            // Checked in right after its body ended: the connection task may not have
            // marked it ready yet. It will, or it is closed (an error).
            if tx.ready().await.is_ok() {
                return Some(tx);
            }
        }
    }

    fn checkin(&self, addr: SocketAddr, tx: Sender) {
        if tx.is_closed() {
            return;
        }
        let mut map = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        let list = map.entry(addr).or_default();
        if list.len() < self.max_idle_per_worker {
            list.push(Idle {
                tx,
                since: Instant::now(),
            });
        }
    }

    /// Closes idle connections older than the idle time-out or already closed by their
    /// worker (a worker replaced on another port leaves its old ones behind); run
    /// periodically by each data-plane thread, so `pool_idle_timeout_ms` holds without
    /// traffic too.
    pub(crate) fn prune(&self) {
        let mut map = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        for list in map.values_mut() {
            list.retain(|i| !i.tx.is_closed() && i.since.elapsed() < self.idle_timeout);
        }
        map.retain(|_, list| !list.is_empty());
    }

    /// How often [`Upstreams::prune`] should run: a quarter of the idle time-out, between
    /// 100 ms and 5 s.
    pub(crate) fn prune_every(&self) -> Duration {
        (self.idle_timeout / 4).clamp(Duration::from_millis(100), Duration::from_secs(5))
    }

    #[cfg(test)]
    fn idle_count(&self) -> usize {
        let map = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        map.values().map(Vec::len).sum()
    }

    async fn connect(&self, addr: SocketAddr) -> Result<Sender, UpstreamError> {
        let stream = tokio::time::timeout(self.connect_timeout, TcpStream::connect(addr))
            .await
            .map_err(|_| UpstreamError::ConnectTimeout(self.connect_timeout.as_millis()))?
            .map_err(UpstreamError::Connect)?;
        let _ = stream.set_nodelay(true);
        let (tx, conn) = Builder::new()
            .handshake(TokioIo::new(stream))
            .await
            .map_err(UpstreamError::Exchange)?;
        // The connection's task runs on this thread's runtime, next to its requests.
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "upstream connection ended");
            }
        });
        Ok(tx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;
    use tokio::net::TcpListener;

    /// An idle connection past the time-out is closed by `prune` (the worker side reads
    /// EOF), without any request coming along to notice it.
    #[tokio::test]
    async fn prune_closes_expired_idle_connections() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let worker = tokio::spawn(async move {
            let (mut sock, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 64];
            // No request is ever sent: the first read ends only when the pool closes it.
            sock.read(&mut buf).await.unwrap()
        });
        let pool = Upstreams::new(Duration::from_secs(2), Duration::from_millis(50), 8);
        let tx = pool.connect(addr).await.unwrap();
        pool.checkin(addr, tx);
        assert_eq!(pool.idle_count(), 1);
        pool.prune();
        assert_eq!(pool.idle_count(), 1, "not expired yet");
        tokio::time::sleep(Duration::from_millis(1100)).await;
        pool.prune();
        assert_eq!(pool.idle_count(), 0);
        let read = tokio::time::timeout(Duration::from_secs(10), worker)
            .await
            .expect("the worker saw the connection close")
            .unwrap();
        assert_eq!(read, 0, "EOF, no bytes");
    }
}
