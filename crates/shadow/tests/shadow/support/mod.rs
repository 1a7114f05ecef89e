//! Test servers whose answers the test controls, and a small HTTP client, on loopback.
#![allow(dead_code, unreachable_pub, missing_docs)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;

/// What a test server answers.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub delay: Duration,
}

impl Answer {
    pub fn json(body: impl Into<String>) -> Self {
        Self {
            status: 200,
            headers: vec![("content-type".into(), "application/json".into())],
            body: body.into().into_bytes(),
            delay: Duration::ZERO,
        }
    }

    pub fn status(mut self, s: u16) -> Self {
        self.status = s;
        self
    }

    pub fn header(mut self, k: &str, v: &str) -> Self {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(k));
        self.headers.push((k.into(), v.into()));
        self
    }

    pub fn delay(mut self, d: Duration) -> Self {
        self.delay = d;
        self
    }
}

/// What a test server was asked.
#[derive(Debug, Clone)]
pub struct Asked {
    pub method: String,
    pub path_and_query: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

pub type Handler = Arc<dyn Fn(&Asked) -> Answer + Send + Sync>;

#[derive(Debug)]
pub struct TestServer {
    pub addr: SocketAddr,
    pub hits: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl TestServer {
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn hits(&self) -> u64 {
        self.hits.load(Ordering::SeqCst)
    }

    /// Stops accepting; open connections are dropped with the runtime's tasks.
    pub fn stop(&self) {
        self.task.abort();
    }
}

/// Starts a server on an ephemeral loopback port. Call inside a tokio runtime.
pub async fn serve(handler: impl Fn(&Asked) -> Answer + Send + Sync + 'static) -> TestServer {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let handler: Handler = Arc::new(handler);
    let hits = Arc::new(AtomicU64::new(0));
    let h2 = hits.clone();
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let handler = handler.clone();
            let hits = h2.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req: Request<Incoming>| {
                    let handler = handler.clone();
                    let hits = hits.clone();
                    async move {
                        let (parts, body) = req.into_parts();
                        let body = body
                            .collect()
                            .await
                            .map(|b| b.to_bytes().to_vec())
                            .unwrap_or_default();
                        let asked = Asked {
                            method: parts.method.to_string(),
                            path_and_query: parts
                                .uri
                                .path_and_query()
                                .map_or("/".into(), |p| p.to_string()),
                            headers: parts
                                .headers
                                .iter()
                                .map(|(k, v)| {
                                    (k.to_string(), String::from_utf8_lossy(v.as_bytes()).into())
                                })
                                .collect(),
                            body,
                        };
                        hits.fetch_add(1, Ordering::SeqCst);
                        let a = handler(&asked);
                        if !a.delay.is_zero() {
                            tokio::time::sleep(a.delay).await;
                        }
                        let mut resp = Response::new(Full::new(Bytes::from(a.body)));
                        *resp.status_mut() = hyper::StatusCode::from_u16(a.status).unwrap();
                        for (k, v) in a.headers {
                            resp.headers_mut().append(
                                hyper::header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                                v.parse().unwrap(),
                            );
                        }
                        Ok::<_, Infallible>(resp)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    TestServer { addr, hits, task }
}

/// A loopback address nothing listens on (bound, then closed).
pub fn dead_addr() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

pub type TestClient = Client<HttpConnector, Full<Bytes>>;

pub fn client() -> TestClient {
    Client::builder(TokioExecutor::new()).build_http()
}

/// A whole response and how long it took.
#[derive(Debug)]
pub struct Got {
    pub status: u16,
    pub headers: hyper::HeaderMap,
    pub body: Vec<u8>,
    pub elapsed: Duration,
}

pub async fn send(
    c: &TestClient,
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Got {
    let mut b = Request::builder().method(method).uri(url);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let req = b.body(Full::new(Bytes::copy_from_slice(body))).unwrap();
    let start = Instant::now();
    let resp = tokio::time::timeout(Duration::from_secs(30), c.request(req))
        .await
        .expect("request timed out")
        .expect("request failed");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp
        .into_body()
        .collect()
        .await
        .unwrap()
        .to_bytes()
        .to_vec();
    Got {
        status,
        headers,
        body,
        elapsed: start.elapsed(),
    }
}

pub async fn get(c: &TestClient, url: &str) -> Got {
    send(c, "GET", url, &[], b"").await
}

/// Polls `f` until it returns `Some`, or panics with `what` after `limit`.
pub async fn eventually<T>(
    what: &str,
    limit: Duration,
    mut f: impl AsyncFnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One step of what a raw server writes back.
#[derive(Debug, Clone)]
pub enum Step {
    Write(Vec<u8>),
    Sleep(Duration),
}

/// A request head as a raw server read it (lower-cased header names).
#[derive(Debug, Clone)]
pub struct RawAsked {
    pub head: String,
}

impl RawAsked {
    pub fn header(&self, name: &str) -> Option<String> {
        self.head.lines().skip(1).find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_string())
        })
    }

    pub fn path(&self) -> String {
        self.head.split(' ').nth(1).unwrap_or("/").to_string()
    }
}

#[derive(Debug)]
pub struct RawServer {
    pub addr: SocketAddr,
    pub asked: Arc<std::sync::Mutex<Vec<RawAsked>>>,
    task: tokio::task::JoinHandle<()>,
}

impl RawServer {
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn asked(&self) -> Vec<RawAsked> {
        self.asked.lock().unwrap().clone()
    }
}

impl Drop for RawServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A server that writes exactly the bytes a test scripts, to misbehave on purpose (cut a
/// body short, send 103 Early Hints, trailers, no `Date`). It reads one request head
/// (and a `Content-Length` body), plays the script, and closes the connection.
pub async fn raw_server(
    script: impl Fn(&RawAsked) -> Vec<Step> + Send + Sync + 'static,
) -> RawServer {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let asked = Arc::new(std::sync::Mutex::new(Vec::new()));
    let script = Arc::new(script);
    let log = asked.clone();
    let task = tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                continue;
            };
            let (script, log) = (script.clone(), log.clone());
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                let head_end = loop {
                    if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        break i + 4;
                    }
                    match stream.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                };
                let asked = RawAsked {
                    head: String::from_utf8_lossy(&buf[..head_end]).into_owned(),
                };
                let len: usize = asked
                    .header("content-length")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                while buf.len() < head_end + len {
                    match stream.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                let steps = script(&asked);
                log.lock().unwrap().push(asked);
                for step in steps {
                    match step {
                        Step::Write(b) => {
                            if stream.write_all(&b).await.is_err() {
                                return;
                            }
                            let _ = stream.flush().await;
                        }
                        Step::Sleep(d) => tokio::time::sleep(d).await,
                    }
                }
                let _ = stream.shutdown().await;
            });
        }
    });
    RawServer { addr, asked, task }
}

/// Sends raw request bytes and reads everything until the server closes (or `limit`).
pub async fn raw_exchange(addr: &str, request: &[u8]) -> Vec<u8> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = addr.trim_start_matches("http://");
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(request).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut out))
        .await
        .expect("raw exchange timed out")
        .unwrap();
    out
}
