//! Is a worker healthy? One probe, bounded by a time-out: an HTTP `GET` of the app's
//! health route when it has one, else the Node preload's heartbeat, else a TCP accept
//! check (a connection the worker's own processes accepted).

use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use scalpel_http::Stream;
use scalpel_http::h1::{DEFAULT_MAX_HEAD_BYTES, Expect, H1Conn, RequestWriter};

/// The most of a health answer's body that is read.
const MAX_PROBE_BODY: usize = 64 * 1024;

/// The worker a probe looks at: its own port, its process (the root of its tree) and,
/// for a Node worker, what its preload says.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub(crate) addr: SocketAddr,
    pub(crate) pid: u32,
    pub(crate) beat: Option<Arc<crate::supervisor::Beat>>,
}

/// A health probe of one worker. The supervisor runs it at an interval and counts
/// failures in a row.
pub(crate) trait HealthCheck: Send + Sync + fmt::Debug {
    /// `Ok` when the worker answers as healthy; `Err(reason)` otherwise.
    fn check<'a>(
        &'a self,
        target: &'a Target,
    ) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + 'a>>;
}

/// The probe for `kind` with `timeout`.
pub(crate) fn for_kind(
    kind: &crate::config::HealthKind,
    timeout: Duration,
) -> Box<dyn HealthCheck> {
    use crate::config::HealthKind;
    match kind {
        HealthKind::Http(path) => Box::new(HttpHealthCheck::new(path.clone(), timeout)),
        HealthKind::Heartbeat => Box::new(HeartbeatCheck { timeout }),
        HealthKind::Accept => Box::new(AcceptCheck { timeout }),
    }
}

/// The Node preload's heartbeat: the worker's event loop turns within the time-out of the
/// probe — as an HTTP probe is answered when the loop next runs, and fails when it does
/// not within its time-out. A loop blocked longer sends nothing, however busy its port's
/// backlog looks.
#[derive(Debug, Clone)]
pub(crate) struct HeartbeatCheck {
    pub(crate) timeout: Duration,
}

impl HeartbeatCheck {
    async fn probe(&self, beat: &crate::supervisor::Beat) -> Result<(), String> {
        // Fresh: within two beats (the preload beats every `timeout / 4`).
        let fresh = self.timeout / 2;
        let deadline = Instant::now() + self.timeout;
        loop {
            if beat.age().is_some_and(|age| age <= fresh) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(match beat.age() {
                    Some(age) => format!(
                        "no heartbeat for {} ms (event loop blocked; last lag {} ms)",
                        age.as_millis(),
                        beat.lag().as_millis()
                    ),
                    None => "no heartbeat from the Node preload yet".into(),
                });
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

impl HealthCheck for HeartbeatCheck {
    fn check<'a>(
        &'a self,
        target: &'a Target,
    ) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + 'a>> {
        Box::pin(async move {
            match &target.beat {
                Some(beat) => self.probe(beat).await,
                None => Err("no heartbeat pipe (the Node preload is not loaded)".into()),
            }
        })
    }
}

/// A TCP accept check: a connection to the worker's port must be *accepted* by one of the
/// worker's own processes within the time-out — its server end in their descriptor
/// tables (`scalpel_procstat::accepted_in_tree`). A handshake alone proves nothing: the
/// kernel completes it from the listen backlog of an app whose loop is stuck.
#[derive(Debug, Clone)]
pub(crate) struct AcceptCheck {
    pub(crate) timeout: Duration,
}

impl AcceptCheck {
    async fn probe(&self, target: &Target) -> Result<(), String> {
        let deadline = Instant::now() + self.timeout;
        let stream =
            tokio::time::timeout(self.timeout, tokio::net::TcpStream::connect(target.addr))
                .await
                .map_err(|_| {
                    format!(
                        "connect: no handshake within {} ms",
                        self.timeout.as_millis()
                    )
                })?
                .map_err(|e| format!("connect: {e}"))?;
        let peer = stream.local_addr().map_err(|e| e.to_string())?.port();
        let (pid, port) = (target.pid, target.addr.port());
        loop {
            let seen = tokio::task::spawn_blocking(move || {
                scalpel_procstat::accepted_in_tree(pid, port, peer)
            })
            .await
            .map_err(|e| e.to_string())?;
            match seen {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(e) => return Err(format!("cannot see the accept: {e}")),
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "connection not accepted within {} ms (the handshake alone came from the kernel's backlog)",
                    self.timeout.as_millis()
                ));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

impl HealthCheck for AcceptCheck {
    fn check<'a>(
        &'a self,
        target: &'a Target,
    ) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + 'a>> {
        Box::pin(self.probe(target))
    }
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
    fn check<'a>(
        &'a self,
        target: &'a Target,
    ) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + 'a>> {
        Box::pin(async move {
            match tokio::time::timeout(self.timeout, self.probe(target.addr)).await {
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
        let target = Target {
            addr,
            pid: std::process::id(),
            beat: None,
        };
        assert_eq!(check.check(&target).await, Ok(()));
    }
}

#[cfg(test)]
mod accept_tests {
    use super::*;

    /// A listener whose owner never accepts (a hung app): the handshake completes from
    /// the backlog, the accept check still fails; once accepted, it passes.
    #[tokio::test]
    async fn a_handshake_from_the_backlog_is_not_an_accept() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let target = Target {
            addr: l.local_addr().unwrap(),
            pid: std::process::id(),
            beat: None,
        };
        let check = AcceptCheck {
            timeout: Duration::from_millis(300),
        };
        let e = check.check(&target).await.unwrap_err();
        assert!(e.contains("not accepted"), "{e}");
        let accepting = std::thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            std::thread::sleep(Duration::from_millis(500));
            drop(s);
            let (s, _) = l.accept().unwrap();
            std::thread::sleep(Duration::from_millis(500));
            drop(s);
        });
        // The first accept takes the old backlog entry; the second is this probe's.
        let check = AcceptCheck {
            timeout: Duration::from_secs(5),
        };
        assert_eq!(check.check(&target).await, Ok(()));
        accepting.join().unwrap();
    }
}
