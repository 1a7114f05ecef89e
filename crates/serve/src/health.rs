//! Is a worker healthy? One probe, bounded by a time-out.

use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::time::Duration;

use scalpel_http::Stream;
use scalpel_http::h1::{DEFAULT_MAX_HEAD_BYTES, Expect, H1Conn, RequestWriter};

/// The most of a health answer's body that is read.
const MAX_PROBE_BODY: usize = 64 * 1024;

/// A health probe of one worker. The supervisor runs it at an interval and counts
/// failures in a row.
pub(crate) trait HealthCheck: Send + Sync + fmt::Debug {
    /// `Ok` when the worker at `addr` answers as healthy; `Err(reason)` otherwise.
    fn check(
        &self,
        addr: SocketAddr,
    ) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + '_>>;
}

/// `GET path` on a fresh connection must return a 2xx within the time-out. A fresh
/// connection per probe, so a worker whose event loop is blocked (the kernel still
/// accepts its connections) fails on the time-out rather than on a stale socket.
#[derive(Debug, Clone)]
pub(crate) struct HttpHealthCheck {
    path: String,
    timeout: Duration,
}

impl HttpHealthCheck {
    /// Probes `path` with `timeout` for the whole exchange.
    pub(crate) fn new(path: impl Into<String>, timeout: Duration) -> Self {
        Self {
            path: path.into(),
            timeout,
        }
    }

    /// One probe over the toolkit's HTTP/1.1 codec (`scalpel_http::h1`, as the proxied
    /// requests): a fresh connection, the answer's head, and its body up to a bound — the
    /// status decides, and an endless body must neither fill memory nor turn a passing
    /// probe into a time-out; reading some of it lets the worker see its answer taken.
    async fn probe(&self, addr: SocketAddr) -> Result<(), String> {
        let stream = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        let _ = stream.set_nodelay(true);
        let mut conn = H1Conn::new(Stream::Tcp(stream), DEFAULT_MAX_HEAD_BYTES, None);
        let mut head = Vec::new();
        let mut w = RequestWriter::new(&mut head, "GET", "", &self.path);
        w.header(b"Host", addr.to_string().as_bytes());
        w.header(b"User-Agent", b"scalpel-serve-health");
        w.finish();
        let exchange = async {
            conn.write_request(&head, &[]).await?;
            let res = conn.read_response(Expect::default()).await?;
            let _ = conn.read_body(MAX_PROBE_BODY).await;
            Ok::<_, scalpel_http::Error>(res.status)
        };
        match exchange.await {
            Ok(status) if status.is_success() => Ok(()),
            Ok(status) => Err(format!("status {}", status.as_u16())),
            Err(e) => Err(format!("request: {e}")),
        }
    }
}

impl HealthCheck for HttpHealthCheck {
    fn check(
        &self,
        addr: SocketAddr,
    ) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + '_>> {
        Box::pin(async move {
            match tokio::time::timeout(self.timeout, self.probe(addr)).await {
                Ok(r) => r,
                Err(_) => Err(format!("no answer within {} ms", self.timeout.as_millis())),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A worker whose health answer is a 2xx with an endless body passes, after reading
    /// a bounded part of it (before: the probe read until its time-out and failed, with
    /// the body in memory).
    #[tokio::test]
    async fn an_endless_health_body_is_read_only_up_to_a_bound() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut sock, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 1024];
            let _ = sock.read(&mut buf).await;
            let _ = sock
                .write_all(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
                .await;
            let chunk = format!("4000\r\n{}\r\n", "z".repeat(0x4000));
            while sock.write_all(chunk.as_bytes()).await.is_ok() {}
        });
        let check = HttpHealthCheck::new("/healthz", Duration::from_secs(20));
        assert_eq!(check.check(addr).await, Ok(()));
    }
}
