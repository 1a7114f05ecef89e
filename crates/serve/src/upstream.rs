//! Keep-alive connections to the workers: one set of sessions per data-plane thread, so a
//! request, its upstream connection and its response all stay on the thread that
//! accepted the client. The exchange (write the request, read the head, read the body)
//! runs in the request's own task over `scalpel_http`'s one HTTP/1.1 codec ([`H1Conn`])
//! and its session layer ([`H1Sessions`]: checkout, release, and the resend of a request
//! whose write found a reused connection closed before one byte left), the same ones
//! `scalpel load` and `scalpel shadow` use. What is the balancer's own is only *what it
//! records* about each attempt ([`Attempt`]), so that `proxy` never sends a request its
//! worker took to another worker.
//!
//! A connection goes back to the pool only once its response body has ended; one
//! dropped earlier is closed. A pooled connection the worker closed meanwhile (its own
//! keep-alive time-out) is noticed before the request is written, from the readiness
//! the event loop already has, and replaced: the request never reached anyone.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode};
use scalpel_http::h1::{DEFAULT_MAX_HEAD_BYTES, Expect, H1Conn};
use scalpel_http::{Error, H1Sessions, Phase, Resend, Stream};
use tokio::net::TcpStream;

use crate::clock::epoch_us;
use crate::h1::{self, Outgoing};

/// Bodies up to this size go out in the same write as the request head.
const COALESCE_BODY_BYTES: usize = 16 * 1024;

/// Why an exchange with a worker failed: the toolkit's one error type, whose
/// [`Error::kind`] names it in serve's JSON error bodies as in load's and shadow's tables.
pub(crate) type UpstreamError = Error;

/// What one attempt to send a request got as far as, kept outside the exchange so that
/// it can be asked after the exchange was dropped (the worker was ejected): the local
/// port of its connection, the request bytes handed to the kernel, when, and whether any
/// byte came back. Atomics only because the request's task must be `Send`.
#[derive(Debug, Default)]
pub(crate) struct Attempt {
    local_port: AtomicU32,
    written: AtomicU64,
    sent_at_us: AtomicU64,
    received: AtomicBool,
}

impl Attempt {
    /// The local port of the connection the request went out on (0: none yet).
    pub(crate) fn local_port(&self) -> u16 {
        self.local_port.load(Ordering::Relaxed) as u16
    }

    /// Request bytes handed to the kernel so far.
    pub(crate) fn written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    /// When the last of them was (µs on the pool's clock).
    pub(crate) fn sent_at_us(&self) -> u64 {
        self.sent_at_us.load(Ordering::Relaxed)
    }

    /// Some byte of an answer arrived: the worker took the request, whatever followed.
    pub(crate) fn received(&self) -> bool {
        self.received.load(Ordering::Relaxed)
    }

    fn wrote(&self, n: usize) {
        self.written.fetch_add(n as u64, Ordering::Relaxed);
        self.sent_at_us.store(epoch_us(), Ordering::Relaxed);
    }
}

/// One data-plane thread's connections to every worker, by address.
#[derive(Debug)]
pub(crate) struct Upstreams {
    sessions: H1Sessions<SocketAddr>,
    connect_timeout: Duration,
    idle_timeout: Duration,
}

/// A worker's answer: status and headers (hop-by-hop ones left out) and the body still
/// to read from the connection.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: UpstreamBody,
    /// After a `101 Switching Protocols` (asked for by the request): the connection,
    /// which now speaks the new protocol.
    pub(crate) switched: Option<Switched>,
}

/// A worker connection switched to another protocol: the socket, and the bytes of the
/// new protocol that arrived with the 101.
#[derive(Debug)]
pub(crate) struct Switched {
    pub(crate) io: Stream,
    pub(crate) early: Bytes,
}

impl Upstreams {
    pub(crate) fn new(
        connect_timeout: Duration,
        idle_timeout: Duration,
        max_idle_per_worker: usize,
    ) -> Arc<Self> {
        Arc::new(Self {
            // Only what never left is resent here; a resend to another worker is
            // `proxy`'s decision.
            sessions: H1Sessions::new(
                idle_timeout,
                max_idle_per_worker,
                Resend {
                    unsent_on_reused: true,
                    refused_h2: false,
                },
            ),
            connect_timeout,
            idle_timeout,
        })
    }

    /// Sends `req` to the worker at `addr` on an idle connection, or a new one, and reads
    /// the response head. A pooled connection whose write fails before any byte left is
    /// replaced by a fresh one, once: the request never reached anyone.
    pub(crate) async fn send(
        self: &Arc<Self>,
        addr: SocketAddr,
        req: &Outgoing<'_>,
        track: &Attempt,
    ) -> Result<Answer, UpstreamError> {
        let coalesce = req.body.len() <= COALESCE_BODY_BYTES;
        let write = |mut conn: H1Conn| async move {
            let port = conn.local_addr().map_or(0, |a| a.port());
            track.local_port.store(u32::from(port), Ordering::Relaxed);
            let buf = conn.request_buffer();
            h1::encode_request(req, addr, buf);
            let body: &[u8] = if coalesce {
                buf.extend_from_slice(req.body);
                &[]
            } else {
                req.body
            };
            let written = conn.write_buffered_observed(body, |n| track.wrote(n)).await;
            (conn, written)
        };
        let (mut conn, _) = self
            .sessions
            .start(&addr, || self.connect(addr), write)
            .await?;
        let expect = Expect {
            head: *req.method == Method::HEAD,
            upgrade: req.upgrade.is_some(),
            ..Expect::default()
        };
        let head = conn
            .read_response_observed(expect, || track.received.store(true, Ordering::Relaxed))
            .await?;
        if head.status == StatusCode::SWITCHING_PROTOCOLS {
            let (io, early) = conn.into_upgraded();
            return Ok(Answer {
                status: head.status,
                headers: head.headers,
                body: UpstreamBody {
                    conn: None,
                    pool: Arc::clone(self),
                    addr,
                },
                switched: Some(Switched { io, early }),
            });
        }
        let mut body = UpstreamBody {
            conn: Some(Box::new(conn)),
            pool: Arc::clone(self),
            addr,
        };
        body.settle();
        Ok(Answer {
            status: head.status,
            headers: head.headers,
            body,
            switched: None,
        })
    }

    /// Closes idle connections older than the idle time-out or already closed by their
    /// worker (a worker replaced on another port leaves its old ones behind); run
    /// periodically by each data-plane thread, so `pool_idle_timeout_ms` holds without
    /// traffic too.
    pub(crate) fn prune(&self) {
        self.sessions.prune();
    }

    /// How often [`Upstreams::prune`] should run: a quarter of the idle time-out, between
    /// 100 ms and 5 s.
    pub(crate) fn prune_every(&self) -> Duration {
        (self.idle_timeout / 4).clamp(Duration::from_millis(100), Duration::from_secs(5))
    }

    #[cfg(test)]
    fn idle_count(&self) -> usize {
        self.sessions.idle()
    }

    async fn connect(&self, addr: SocketAddr) -> Result<H1Conn, UpstreamError> {
        let io = tokio::time::timeout(self.connect_timeout, TcpStream::connect(addr))
            .await
            .map_err(|_| Error::Timeout {
                phase: Phase::Connect,
                after: self.connect_timeout,
            })?
            .map_err(Error::Connect)?;
        let _ = io.set_nodelay(true);
        // No read time-out of the codec's own: the balancer bounds the whole exchange
        // (`upstream_timeout`), which saves a timer per read.
        Ok(H1Conn::new(Stream::Tcp(io), DEFAULT_MAX_HEAD_BYTES, None))
    }
}

/// A response body still on its worker connection. Once it has been read to its end,
/// the connection goes back to the pool (when the worker keeps it alive); dropped
/// before that, the connection closes.
#[derive(Debug)]
pub(crate) struct UpstreamBody {
    /// Boxed: the body lives in every response, the connection only while it streams.
    conn: Option<Box<H1Conn>>,
    pool: Arc<Upstreams>,
    addr: SocketAddr,
}

impl UpstreamBody {
    /// The whole body has been read.
    pub(crate) fn is_end(&self) -> bool {
        self.conn.as_ref().is_none_or(|c| c.is_body_done())
    }

    /// The declared length still to come, when the worker declared one.
    pub(crate) fn remaining(&self) -> Option<u64> {
        self.conn.as_ref().map_or(Some(0), |c| c.remaining())
    }

    /// At the body's end, the connection goes back to the pool: only when the worker
    /// keeps it alive and sent nothing past the response (the pool checks).
    fn settle(&mut self) {
        if self.is_end()
            && let Some(conn) = self.conn.take()
        {
            self.pool.sessions.release(self.addr, *conn);
        }
    }

    /// Everything of the body that has been read already, without waiting.
    pub(crate) fn take_buffered(&mut self) -> Result<Bytes, UpstreamError> {
        let Some(conn) = self.conn.as_mut() else {
            return Ok(Bytes::new());
        };
        let data = conn.take_buffered();
        self.settle();
        data
    }

    /// Reads the rest of the body.
    pub(crate) async fn read_to_end(&mut self) -> Result<Bytes, UpstreamError> {
        Ok(self.read_up_to(usize::MAX).await?.unwrap_or_default())
    }

    /// Reads the rest of the body, or `None` once it is over `limit` bytes.
    pub(crate) async fn read_up_to(
        &mut self,
        limit: usize,
    ) -> Result<Option<Bytes>, UpstreamError> {
        let Some(conn) = self.conn.as_mut() else {
            return Ok(Some(Bytes::new()));
        };
        let data = conn.read_body(limit).await;
        self.settle();
        data
    }

    /// The next piece of body, reading from the connection as needed; `None` at the end.
    pub(crate) fn poll_data(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Bytes, UpstreamError>>> {
        let Some(conn) = self.conn.as_mut() else {
            return Poll::Ready(None);
        };
        let r = conn.poll_data(cx);
        if r.is_ready() {
            self.settle();
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use scalpel_http::h1::WireError;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// Reads one request head (and a `content-length` body) off a raw worker socket.
    async fn read_request(sock: &mut TcpStream, buf: &mut Vec<u8>) -> Option<String> {
        loop {
            if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&buf[..end + 4]).to_string();
                let len = head
                    .lines()
                    .find_map(|l| {
                        let (name, value) = l.split_once(": ")?;
                        name.eq_ignore_ascii_case("content-length").then_some(value)
                    })
                    .map_or(0, |v| v.trim().parse::<usize>().unwrap());
                while buf.len() < end + 4 + len {
                    let mut chunk = [0u8; 4096];
                    let n = sock.read(&mut chunk).await.unwrap();
                    buf.extend_from_slice(&chunk[..n]);
                }
                buf.drain(..end + 4 + len);
                return Some(head);
            }
            let mut chunk = [0u8; 4096];
            let n = sock.read(&mut chunk).await.ok()?;
            if n == 0 {
                return None;
            }
            buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// Writes `bytes` a few at a time, so every parser state meets a read boundary.
    async fn dribble(sock: &mut TcpStream, bytes: &[u8]) {
        for piece in bytes.chunks(7) {
            sock.write_all(piece).await.unwrap();
            sock.flush().await.unwrap();
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    fn get<'a>(method: &'a Method, body: &'a Bytes, headers: &'a HeaderMap) -> Outgoing<'a> {
        Outgoing {
            method,
            target: "/x",
            headers,
            client_ip: "127.0.0.1",
            body,
            upgrade: None,
            trusted: false,
            https: false,
        }
    }

    async fn body_of(answer: &mut Answer) -> Vec<u8> {
        let mut out = Vec::new();
        while let Some(d) = std::future::poll_fn(|cx| answer.body.poll_data(cx)).await {
            out.extend_from_slice(&d.unwrap());
        }
        out
    }

    /// A worker answering in 7-byte pieces: a chunked body, then a length-delimited one
    /// on the same connection (it went back to the pool), then a body delimited by
    /// closing the connection (which is then not pooled).
    #[tokio::test]
    async fn bodies_of_every_framing_arrive_whole_across_read_boundaries() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let worker = tokio::spawn(async move {
            let (mut sock, _) = listener.accept().await.unwrap();
            let mut buf = Vec::new();
            let first = read_request(&mut sock, &mut buf).await.unwrap();
            dribble(&mut sock, b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nx-a: 1\r\n\r\n5\r\nhello\r\n7\r\n, world\r\n0\r\n\r\n").await;
            let second = read_request(&mut sock, &mut buf).await.unwrap();
            dribble(
                &mut sock,
                b"HTTP/1.1 201 Created\r\ncontent-length: 10\r\n\r\n0123456789",
            )
            .await;
            let third = read_request(&mut sock, &mut buf).await.unwrap();
            dribble(
                &mut sock,
                b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nuntil the end",
            )
            .await;
            drop(sock);
            (first, second, third)
        });
        let pool = Upstreams::new(Duration::from_secs(2), Duration::from_secs(60), 8);
        let (get_m, post_m, no_body, headers) =
            (Method::GET, Method::POST, Bytes::new(), HeaderMap::new());
        let mut a = pool
            .send(addr, &get(&get_m, &no_body, &headers), &Attempt::default())
            .await
            .unwrap();
        assert_eq!(a.headers["x-a"], "1");
        assert!(a.headers.get("transfer-encoding").is_none());
        assert_eq!(body_of(&mut a).await, b"hello, world");
        assert_eq!(
            pool.idle_count(),
            1,
            "back in the pool after the last chunk"
        );
        let payload = Bytes::from_static(b"payload");
        let mut a = pool
            .send(addr, &get(&post_m, &payload, &headers), &Attempt::default())
            .await
            .unwrap();
        assert_eq!(a.status, StatusCode::CREATED);
        let first = a.body.take_buffered().unwrap();
        assert_eq!(a.body.remaining(), Some(10 - first.len() as u64));
        let rest = a.body.read_to_end().await.unwrap();
        assert_eq!([&first[..], &rest[..]].concat(), b"0123456789");
        assert!(a.body.is_end());
        assert_eq!(pool.idle_count(), 1);
        let mut a = pool
            .send(addr, &get(&get_m, &no_body, &headers), &Attempt::default())
            .await
            .unwrap();
        assert_eq!(body_of(&mut a).await, b"until the end");
        assert_eq!(
            pool.idle_count(),
            0,
            "a close-delimited connection is not reused"
        );
        let (first, second, third) = worker.await.unwrap();
        assert!(first.starts_with("GET /x HTTP/1.1\r\n"), "{first}");
        assert!(
            second.starts_with("POST /x HTTP/1.1\r\n") && second.contains("Content-Length: 7\r\n"),
            "{second}"
        );
        assert!(third.contains("x-forwarded-for: 127.0.0.1\r\n"), "{third}");
    }

    /// The worker closes an idle pooled connection (its keep-alive time-out): the next
    /// request notices before writing and goes out on a fresh connection.
    #[tokio::test]
    async fn a_pooled_connection_closed_by_the_worker_is_replaced() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let worker = tokio::spawn(async move {
            let mut served = 0;
            for _ in 0..2 {
                let (mut sock, _) = listener.accept().await.unwrap();
                let mut buf = Vec::new();
                read_request(&mut sock, &mut buf).await.unwrap();
                sock.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                    .await
                    .unwrap();
                served += 1;
                // Closes right after answering, as a keep-alive time-out would.
            }
            served
        });
        let pool = Upstreams::new(Duration::from_secs(2), Duration::from_secs(60), 8);
        let (m, b, h) = (Method::POST, Bytes::from_static(b"once"), HeaderMap::new());
        for _ in 0..2 {
            let mut a = pool
                .send(addr, &get(&m, &b, &h), &Attempt::default())
                .await
                .unwrap();
            assert_eq!(a.body.read_to_end().await.unwrap(), "ok");
            // Let the event loop see the worker's FIN.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(
            worker.await.unwrap(),
            2,
            "each request got its own connection"
        );
    }

    /// Garbage, an upgrade and a connection closed before the head are errors, and a
    /// body cut short is an error, not a short body.
    #[tokio::test]
    async fn broken_answers_are_errors() {
        let answers: [&[u8]; 4] = [
            b"NOT HTTP\r\n\r\n",
            b"HTTP/1.1 101 Switching Protocols\r\n\r\n",
            b"",
            b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nshort",
        ];
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            for answer in answers {
                let (mut sock, _) = listener.accept().await.unwrap();
                let mut buf = Vec::new();
                read_request(&mut sock, &mut buf).await.unwrap();
                sock.write_all(answer).await.unwrap();
            }
        });
        let pool = Upstreams::new(Duration::from_secs(2), Duration::from_secs(60), 8);
        let (m, b, h) = (Method::GET, Bytes::new(), HeaderMap::new());
        let e = pool
            .send(addr, &get(&m, &b, &h), &Attempt::default())
            .await
            .unwrap_err();
        assert!(matches!(e, Error::Wire(WireError::Head(_))), "{e}");
        let e = pool
            .send(addr, &get(&m, &b, &h), &Attempt::default())
            .await
            .unwrap_err();
        assert!(matches!(e, Error::Wire(WireError::Upgrade)), "{e}");
        let e = pool
            .send(addr, &get(&m, &b, &h), &Attempt::default())
            .await
            .unwrap_err();
        assert!(
            matches!(e, Error::Closed { phase: Phase::Head }) && !e.never_sent(),
            "{e}"
        );
        let mut a = pool
            .send(addr, &get(&m, &b, &h), &Attempt::default())
            .await
            .unwrap();
        let e = a.body.read_to_end().await.unwrap_err();
        assert!(matches!(e, Error::Closed { phase: Phase::Body }), "{e}");
        assert_eq!(pool.idle_count(), 0);
        let refused = {
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            l.local_addr().unwrap()
        };
        let e = pool
            .send(refused, &get(&m, &b, &h), &Attempt::default())
            .await
            .unwrap_err();
        assert!(e.never_sent(), "{e}");
    }

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
        let conn = pool.connect(addr).await.unwrap();
        pool.sessions.release(addr, conn);
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
