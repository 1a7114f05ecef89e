//! HTTP servers whose answers the test scripts, and a small client with time-outs, on
//! loopback (hyper on tokio): [`serve`] answers what a closure says, [`raw_server`] writes
//! exactly the bytes a script gives (to misbehave on purpose), [`send`] / [`get`] fetch a
//! whole response.

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
    /// The status code.
    pub status: u16,
    /// The header lines, in order.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
    /// How long the server waits before answering.
    pub delay: Duration,
}

impl Answer {
    /// 200 with `body` as `application/json`, at once.
    pub fn json(body: impl Into<String>) -> Self {
        Self {
            status: 200,
            headers: vec![("content-type".into(), "application/json".into())],
            body: body.into().into_bytes(),
            delay: Duration::ZERO,
        }
    }

    /// With status `s`.
    pub fn status(mut self, s: u16) -> Self {
        self.status = s;
        self
    }

    /// With header `k: v` (replacing one of that name).
    pub fn header(mut self, k: &str, v: &str) -> Self {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(k));
        self.headers.push((k.into(), v.into()));
        self
    }

    /// Answered after `d`.
    pub fn delay(mut self, d: Duration) -> Self {
        self.delay = d;
        self
    }
}

/// What a test server was asked.
#[derive(Debug, Clone)]
pub struct Asked {
    /// The method.
    pub method: String,
    /// The path and query of the request target.
    pub path_and_query: String,
    /// The headers, names lower-cased (as hyper gives them).
    pub headers: Vec<(String, String)>,
    /// The whole body.
    pub body: Vec<u8>,
}

/// What decides a [`serve`] server's answers.
pub type Handler = Arc<dyn Fn(&Asked) -> Answer + Send + Sync>;

/// A running [`serve`] server (it runs until [`TestServer::stop`] or the runtime ends).
#[derive(Debug)]
pub struct TestServer {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Requests answered so far.
    pub hits: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl TestServer {
    /// `http://ADDR`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Requests answered so far.
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

/// A plain-HTTP client with hyper's connection pool.
pub type TestClient = Client<HttpConnector, Full<Bytes>>;

/// A new [`TestClient`].
pub fn client() -> TestClient {
    Client::builder(TokioExecutor::new()).build_http()
}

/// A whole response and how long it took.
#[derive(Debug)]
pub struct Got {
    /// The status code.
    pub status: u16,
    /// The headers.
    pub headers: hyper::HeaderMap,
    /// The whole body.
    pub body: Vec<u8>,
    /// From sending to the last byte of the body.
    pub elapsed: Duration,
}

/// Sends `method url` with `headers` and `body` (30 s at most); panics when it fails.
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
    let req = b
        .body(Full::new(Bytes::copy_from_slice(body)))
        .expect("a valid request");
    let start = Instant::now();
    let (status, headers, body) = fetch(c, req, Duration::from_secs(30))
        .await
        .unwrap_or_else(|e| panic!("{method} {url}: {e}"));
    Got {
        status,
        headers,
        body: body.to_vec(),
        elapsed: start.elapsed(),
    }
}

/// Sends `req` and reads the whole response within `limit`: (status, headers, body), or
/// what went wrong.
pub async fn fetch(
    c: &TestClient,
    req: Request<Full<Bytes>>,
    limit: Duration,
) -> Result<(u16, hyper::HeaderMap, Bytes), String> {
    let exchange = async {
        let resp = c.request(req).await.map_err(|e| format!("{e:?}"))?;
        let (parts, body) = resp.into_parts();
        let body = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
        Ok((parts.status.as_u16(), parts.headers, body))
    };
    tokio::time::timeout(limit, exchange)
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {limit:?}")))
}

/// [`send`] a GET without a body.
pub async fn get(c: &TestClient, url: &str) -> Got {
    send(c, "GET", url, &[], b"").await
}

/// One step of what a raw server writes back.
#[derive(Debug, Clone)]
pub enum Step {
    /// Write these bytes (and flush).
    Write(Vec<u8>),
    /// Wait this long.
    Sleep(Duration),
}

/// A request head as a raw server read it (lower-cased header names).
#[derive(Debug, Clone)]
pub struct RawAsked {
    /// The request head, as sent (up to and with the blank line).
    pub head: String,
}

impl RawAsked {
    /// The value of the first header named `name` (any case).
    pub fn header(&self, name: &str) -> Option<String> {
        self.head.lines().skip(1).find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_string())
        })
    }

    /// The request target.
    pub fn path(&self) -> String {
        self.head.split(' ').nth(1).unwrap_or("/").to_string()
    }
}

/// A running [`raw_server`] (stopped when dropped).
#[derive(Debug)]
pub struct RawServer {
    /// Where it listens.
    pub addr: SocketAddr,
    /// The request heads it read, in order.
    pub asked: Arc<std::sync::Mutex<Vec<RawAsked>>>,
    task: tokio::task::JoinHandle<()>,
}

impl RawServer {
    /// `http://ADDR`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The request heads it read so far.
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

/// Sends raw request bytes to `addr` (`http://HOST:PORT` or `HOST:PORT`) and reads
/// everything until the server closes; panics when it does not within 30 s.
pub async fn raw_exchange(addr: &str, request: &[u8]) -> Vec<u8> {
    let addr: std::net::SocketAddr = addr
        .trim_start_matches("http://")
        .parse()
        .unwrap_or_else(|e| panic!("{addr}: {e}"));
    let (out, closed) = crate::net::raw_exchange(addr, request, Duration::from_secs(30)).await;
    assert!(closed, "raw exchange timed out");
    out
}
