//! The data plane's front door: `threads` OS threads, each a current-thread runtime with
//! its own accept loop on the shared listening socket and its own connections to the
//! workers; a connection over `max_connections` refused with a raw 503, a slow request
//! head answered 408, TLS (h2 or HTTP/1.1 by ALPN) terminated here. Each request then
//! goes through the phases of `proxy`.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use http::Request;
use hyper::body::Incoming;
use hyper::server::conn::{http1, http2};
use hyper::service::{HttpService, service_fn};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, watch};
use tokio_rustls::TlsAcceptor;

use crate::client_conn::{ClientConn, ClientIo, ConnBody, ConnFlags};
use crate::error::ServeError;
use crate::proxy::Client;
use crate::state::{ConnCount, Shared};
use crate::upstream::Upstreams;

/// Starts the data plane: `threads` OS threads, each with a current-thread runtime, an
/// accept loop on a clone of the listening socket and its own connections to the workers
/// (nginx's worker-process model, in threads). A client connection, the worker
/// connection its request borrows and every task they wake stay on one thread: no
/// work stealing, no cross-thread wake-up per request. Supervision, health checks and
/// the admin address run on the caller's runtime.
///
/// The threads start before the workers and wait for the shared state, sent through the
/// returned senders; dropped instead (the start failed later), they end.
pub(crate) fn start_data_plane(
    listener: TcpListener,
    threads: usize,
    stop: &watch::Receiver<bool>,
    end: &watch::Receiver<bool>,
    conns: &Arc<ConnCount>,
) -> Result<Vec<oneshot::Sender<Arc<Shared>>>, ServeError> {
    let std_listener = listener.into_std().map_err(ServeError::Threads)?;
    let mut hand_over = Vec::with_capacity(threads);
    for i in 0..threads {
        let listener = std_listener.try_clone().map_err(ServeError::Threads)?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(ServeError::Threads)?;
        let (tx, rx) = oneshot::channel::<Arc<Shared>>();
        hand_over.push(tx);
        let (stop, end, conns) = (stop.clone(), end.clone(), conns.clone());
        std::thread::Builder::new()
            .name(format!("serve-io-{i}"))
            .spawn(move || runtime.block_on(data_plane_thread(i, rx, listener, stop, end, conns)))
            .map_err(ServeError::Threads)?;
    }
    Ok(hand_over)
}

/// One data-plane thread: once the shared state arrives, its own worker connections
/// (pruned at their idle time-out) and its accept loop; then it serves its open
/// connections until the server is done with them.
async fn data_plane_thread(
    i: usize,
    shared: oneshot::Receiver<Arc<Shared>>,
    listener: std::net::TcpListener,
    stop: watch::Receiver<bool>,
    mut end: watch::Receiver<bool>,
    conns: Arc<ConnCount>,
) {
    let Ok(shared) = shared.await else { return };
    let listener = match TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(error = %e, "data-plane thread {i}: no listener");
            return;
        }
    };
    let up = Upstreams::new(
        shared.cfg.connect_timeout,
        shared.cfg.pool_idle_timeout,
        shared.cfg.pool_max_idle_per_worker,
    );
    let sweeper = Arc::clone(&up);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(sweeper.prune_every());
        loop {
            tick.tick().await;
            sweeper.prune();
        }
    });
    accept_loop(listener, shared, stop, conns, up).await;
    // Keep serving the open connections until the server is done with them (drained,
    // or the drain timed out) or is gone.
    let _ = end.wait_for(|e| *e).await;
}

/// Drives a client connection until it ends or the server stops accepting; then lets
/// the requests in flight finish and closes it.
macro_rules! serve_until_stopped {
    ($conn:expr, $stop:expr) => {{
        let mut conn = std::pin::pin!($conn);
        let stopping = tokio::select! {
            _ = conn.as_mut() => false,
            _ = $stop.wait_for(|s| *s) => true,
        };
        if stopping {
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        }
    }};
}

/// What every connection of one data-plane thread is served with.
struct Front {
    shared: Arc<Shared>,
    up: Arc<Upstreams>,
    conns: Arc<ConnCount>,
    http1: http1::Builder,
    h2: http2::Builder<TokioExecutor>,
    tls: Option<TlsAcceptor>,
    /// Refused connections lingering to let their 503 arrive.
    lingering: Arc<AtomicUsize>,
}

async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
    conns: Arc<ConnCount>,
    up: Arc<Upstreams>,
) {
    let mut http1 = http1::Builder::new();
    http1.timer(TokioTimer::new()).keep_alive(true);
    let mut h2 = http2::Builder::new(TokioExecutor::new());
    h2.timer(TokioTimer::new());
    let tls = shared
        .tls
        .as_ref()
        .map(|t| TlsAcceptor::from(t.config.clone()));
    let front = Front {
        shared,
        up,
        conns,
        http1,
        h2,
        tls,
        lingering: Arc::new(AtomicUsize::new(0)),
    };
    loop {
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    // Out of file descriptors and the like: pause, do not spin.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stop.wait_for(|s| *s) => return,
        };
        front.accept(stream, peer, &stop);
    }
}

impl Front {
    /// One accepted connection: refused past `max_connections`, else served on a task of
    /// its own under the limits of the config in force now (a reload swaps them; a
    /// connection keeps its own).
    fn accept(&self, stream: TcpStream, peer: SocketAddr, stop: &watch::Receiver<bool>) {
        let lim = self.shared.table.load().server.clone();
        if self.conns.active() >= lim.max_connections {
            self.shared
                .rejected
                .too_many_connections
                .fetch_add(1, Ordering::Relaxed);
            refuse(stream, &self.lingering);
            return;
        }
        let _ = stream.set_nodelay(true);
        let guard = self.conns.open();
        let mut http1 = self.http1.clone();
        http1
            .header_read_timeout(lim.header_read_timeout)
            .max_buf_size(lim.max_header_bytes);
        let slots = max_request_headers(lim.max_header_bytes);
        let mut h2 = self.h2.clone();
        h2.max_header_list_size(u32::try_from(lim.max_header_bytes).unwrap_or(u32::MAX));
        let tls = self.tls.clone();
        // Worked out once per connection: the address for X-Forwarded-For, and whether
        // this peer's own forwarding headers are believed.
        let conn = Arc::new(ClientConn {
            shared: self.shared.clone(),
            up: self.up.clone(),
            client: Client {
                ip: peer.ip().to_canonical().to_string().into(),
                trusted: lim.trusted_proxies.iter().any(|n| n.contains(peer.ip())),
                https: tls.is_some(),
            },
            flags: ConnFlags::default(),
        });
        let stop = stop.clone();
        let head_timeout = lim.header_read_timeout;
        tokio::spawn(async move {
            let _guard = guard;
            // One clone per request, of this connection's own context: nothing shared
            // with the other data-plane threads is cloned on the request path.
            let svc = {
                let conn = conn.clone();
                service_fn(move |req: Request<Incoming>| {
                    let conn = conn.clone();
                    conn.flags.called();
                    async move {
                        let res = conn.shared.handle(&conn.up, &conn.client, req).await;
                        Ok::<_, Infallible>(res.map(|body| ConnBody { body, conn }))
                    }
                })
            };
            match tls {
                Some(acceptor) => {
                    // A TLS connection keeps the full header slots from the start (no
                    // held-back 431 over TLS: client_conn's doc).
                    http1.max_headers(slots);
                    serve_tls(acceptor, stream, peer, head_timeout, http1, h2, svc, stop).await;
                }
                None => serve_plain(conn, stream, http1, slots, svc, stop).await,
            }
        });
    }
}

/// A TLS connection: the handshake within the request head's time limit (a peer that
/// never finishes one does not hold a connection slot for long), then HTTP/2 or
/// HTTP/1.1 as ALPN agreed.
#[allow(clippy::too_many_arguments)]
async fn serve_tls<S>(
    acceptor: TlsAcceptor,
    stream: TcpStream,
    peer: SocketAddr,
    limit: Duration,
    http1: http1::Builder,
    h2: http2::Builder<TokioExecutor>,
    svc: S,
    mut stop: watch::Receiver<bool>,
) where
    S: HttpService<Incoming, ResBody = ConnBody, Error = Infallible>,
    S::Future: Send + 'static,
{
    let handshake = tokio::select! {
        r = tokio::time::timeout(limit, acceptor.accept(stream)) => r,
        _ = stop.wait_for(|s| *s) => return,
    };
    let stream = match handshake {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            tracing::debug!(error = %e, %peer, "TLS handshake failed");
            return;
        }
        Err(_) => {
            tracing::debug!(%peer, "TLS handshake timed out");
            return;
        }
    };
    if stream.get_ref().1.alpn_protocol() == Some(b"h2") {
        let conn = h2.serve_connection(TokioIo::new(stream), svc);
        serve_until_stopped!(conn, stop);
    } else {
        let conn = http1
            .serve_connection(TokioIo::new(stream), svc)
            .with_upgrades();
        serve_until_stopped!(conn, stop);
    }
}

/// A plain HTTP/1.1 connection, with hyper's default header slots; a head over them is
/// served again with `slots` (client_conn's doc). One whose request head did not arrive
/// in time is answered 408 (when a request had begun) and counted.
async fn serve_plain<S>(
    conn: Arc<ClientConn>,
    stream: TcpStream,
    http1: http1::Builder,
    slots: usize,
    svc: S,
    mut stop: watch::Receiver<bool>,
) where
    S: HttpService<Incoming, ResBody = ConnBody, Error = Infallible> + Unpin,
    S::Future: Send + 'static,
{
    let io = ClientIo::new(stream, conn.clone());
    // Boxed, so that it can be dropped (and its socket with it) before counting.
    let mut served = Box::pin(
        http1
            .serve_connection(TokioIo::new(io), svc)
            .with_upgrades(),
    );
    let r = loop {
        let ended = tokio::select! {
            r = served.as_mut() => Some(r),
            _ = stop.wait_for(|s| *s) => None,
        };
        let Some(r) = ended else {
            // Finish the request in flight, then close.
            served.as_mut().graceful_shutdown();
            let _ = served.await;
            return;
        };
        if !conn.flags.held() {
            break r;
        }
        // hyper answered a head over its default slots with a 431, held back: the same
        // bytes, from that head on, go to a connection with the full slot count.
        let Some(parts) = Pin::into_inner(served).into_parts() else {
            return;
        };
        let io = parts.io.into_inner().replayed(parts.read_buf);
        let mut full = http1.clone();
        full.max_headers(slots);
        served = Box::pin(
            full.serve_connection(TokioIo::new(io), parts.service)
                .with_upgrades(),
        );
    };
    if let Err(e) = r
        && e.is_timeout()
    {
        // The request head did not arrive in time: the connection's drop answers 408
        // when a request had begun.
        conn.flags.timed_out.store(true, Ordering::Relaxed);
    }
    drop(served);
    if conn.flags.answered_408.load(Ordering::Relaxed) {
        conn.shared
            .rejected
            .header_timeout
            .fetch_add(1, Ordering::Relaxed);
    }
}

/// hyper's cap on request header lines for a head limit of `bytes` (see `Front::accept`).
fn max_request_headers(bytes: usize) -> usize {
    (bytes / 8).clamp(100, 8192)
}

/// Written raw, before (or instead of) hyper: the toolkit's one error body
/// (`scalpel_http::error_body`; a test checks the two agree, length included).
const TOO_MANY_CONNECTIONS: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: 78\r\nconnection: close\r\nretry-after: 1\r\n\r\n{\"error\":\"too_many_connections\",\"detail\":\"too many client connections; retry\"}";

/// Connections over `max_connections` get a 503 and are closed. The answer is written
/// without waiting (it fits any fresh socket buffer); the connection then lingers a
/// moment, reading what the client sent, so that closing it does not reset the answer
/// away — at most 64 at once, the rest are closed at once.
fn refuse(stream: tokio::net::TcpStream, lingering: &Arc<AtomicUsize>) {
    let _ = stream.try_write(TOO_MANY_CONNECTIONS);
    if lingering.fetch_add(1, Ordering::Relaxed) >= 64 {
        lingering.fetch_sub(1, Ordering::Relaxed);
        return;
    }
    let lingering = lingering.clone();
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let mut stream = stream;
        let _ = stream.shutdown().await;
        let mut sink = [0u8; 4096];
        let _ = tokio::time::timeout(Duration::from_secs(1), async {
            while let Ok(n) = stream.read(&mut sink).await {
                if n == 0 {
                    break;
                }
            }
        })
        .await;
        lingering.fetch_sub(1, Ordering::Relaxed);
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client_conn::HEAD_TIMEOUT;

    /// The answers written raw, past hyper, are the toolkit's one error body, framed by
    /// their own exact length (a stale `content-length` after an edit of the text would
    /// cut the body or hang the client).
    #[test]
    fn raw_error_answers_carry_the_one_error_body() {
        for (raw, status, kind) in [
            (TOO_MANY_CONNECTIONS, 503, "too_many_connections"),
            (HEAD_TIMEOUT, 408, "client_timeout"),
        ] {
            let mut slots = [httparse::EMPTY_HEADER; 8];
            let mut res = httparse::Response::new(&mut slots);
            let httparse::Status::Complete(n) = res.parse(raw).unwrap() else {
                panic!("incomplete head");
            };
            assert_eq!(res.code, Some(status));
            let length: usize = res
                .headers
                .iter()
                .find(|h| h.name == "content-length")
                .map(|h| std::str::from_utf8(h.value).unwrap().parse().unwrap())
                .unwrap();
            let body = &raw[n..];
            assert_eq!(length, body.len(), "content-length of the {status}");
            let v: serde_json::Value = serde_json::from_slice(body).unwrap();
            let detail = v["detail"].as_str().unwrap();
            assert_eq!(body, &scalpel_http::error_body(kind, detail)[..]);
        }
    }
}
