//! Harness for the serve tests: a server from TOML text, an HTTP client with time-outs,
//! background load, the balancer's own log lines; and what they use of the test kit
//! (`scalpel_testkit`): free port ranges claimed across processes, the Node test app,
//! waits, Prometheus samples, raw exchanges.

#![allow(dead_code, unreachable_pub, unused_imports)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use scalpel_serve::{Config, LogBuffer, ServeOptions, Server, WorkerLogs};
use scalpel_testkit::scripted::{TestClient, fetch};
use tokio::io::AsyncRead;

pub use scalpel_testkit::apps::{go_build, node_apps, test_apps, venv_bin};
pub use scalpel_testkit::peers::app_js;
pub use scalpel_testkit::scripted::client;
pub use scalpel_testkit::{
    Claim, KillOnDrop, claim_port, eventually, free_base, free_base_from, metric, port_lock_dir,
    process_alive,
};

/// An `[[app]]` table running tests/apps/app.js.
pub fn node_app(name: &str, workers: u16, balance: &str, extra: &str) -> String {
    let base = free_base(workers * 2);
    format!(
        r#"
[[app]]
name = "{name}"
command = ["node", "{js}"]
workers = {workers}
port_base = {base}
balance = "{balance}"
start_timeout_ms = 60000
{extra}
"#,
        js = app_js().display()
    )
}

pub const SERVER: &str = "[server]\nlisten = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\n";

pub struct Harness {
    pub server: Server,
    pub logs: LogBuffer,
    pub client: TestClient,
    /// The config file the server was started from (a reload reads it again).
    pub config_path: PathBuf,
    _dir: tempfile::TempDir,
}

pub async fn start(toml: &str) -> Harness {
    let h = start_unready(toml).await;
    assert!(
        h.server.wait_ready(Duration::from_secs(60)).await,
        "workers not ready: {:?}\nlogs: {:?}",
        h.server.status(),
        h.logs.lines()
    );
    h
}

/// A server from `toml`, its workers maybe not ready yet.
pub async fn start_unready(toml: &str) -> Harness {
    let dir = tempfile::tempdir().expect("temp dir");
    let config_path = dir.path().join("test.toml");
    std::fs::write(&config_path, toml).expect("config written");
    let config = Config::from_file(&config_path).expect("test config is valid");
    let logs = LogBuffer::default();
    let server = Server::start(
        config,
        ServeOptions {
            worker_logs: WorkerLogs::Capture(logs.clone()),
        },
    )
    .await
    .expect("server starts");
    Harness {
        server,
        logs,
        client: client(),
        config_path,
        _dir: dir,
    }
}

impl Harness {
    /// Replaces the config file (the next reload reads it).
    pub fn write_config(&self, toml: &str) {
        std::fs::write(&self.config_path, toml).expect("config written");
    }
}

/// A whole response, its body as text.
pub struct Reply {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: String,
}

impl Reply {
    /// The body as JSON (panics when it is not).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    /// The body read as the toolkit's one error body (`scalpel_http::parse_error_body`):
    /// its kind and its detail. Panics when the body does not follow that grammar.
    pub fn error(&self) -> (String, String) {
        scalpel_http::parse_error_body(self.body.as_bytes())
            .unwrap_or_else(|| panic!("not the toolkit's error body: {}", self.body))
    }
}

/// Sends `req` and reads the whole response (60 s at most).
pub async fn send(client: &TestClient, req: http::Request<Full<Bytes>>) -> Result<Reply, String> {
    let (status, headers, body) = fetch(client, req, Duration::from_secs(60)).await?;
    Ok(Reply {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

/// The `pid` field of a JSON answer of the test app (which worker answered).
pub fn pid_of(reply: &Reply) -> u64 {
    reply.json()["pid"].as_u64().expect("pid in reply")
}

impl Harness {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.server.listen_addr())
    }

    pub async fn get(&self, path: &str) -> Result<Reply, String> {
        get_at(&self.client, self.server.listen_addr(), path).await
    }

    pub fn status_json(&self) -> serde_json::Value {
        serde_json::to_value(self.server.status()).unwrap()
    }

    /// pids of the app's workers, by index.
    pub fn pids(&self, app: usize) -> Vec<Option<u32>> {
        self.server.status().apps[app]
            .workers
            .iter()
            .map(|w| w.pid)
            .collect()
    }
}

pub async fn get_at(client: &TestClient, addr: SocketAddr, path: &str) -> Result<Reply, String> {
    let req = http::Request::get(format!("http://{addr}{path}"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    send(client, req).await
}

/// Background load: `concurrency` loops of GET `path` until stopped; counts outcomes.
pub struct Load {
    pub ok: Arc<AtomicU64>,
    pub failed: Arc<AtomicU64>,
    pub failures: Arc<std::sync::Mutex<Vec<String>>>,
    stop: tokio::sync::watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    pub fn start(addr: SocketAddr, path: &str, concurrency: usize) -> Self {
        let ok = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(AtomicU64::new(0));
        let failures = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (stop, rx) = tokio::sync::watch::channel(false);
        let tasks = (0..concurrency)
            .map(|_| {
                let (ok, failed, failures, rx) =
                    (ok.clone(), failed.clone(), failures.clone(), rx.clone());
                let path = path.to_string();
                tokio::spawn(async move {
                    let c = client();
                    while !*rx.borrow() {
                        match get_at(&c, addr, &path).await {
                            Ok(r) if r.status == 200 => {
                                ok.fetch_add(1, Ordering::Relaxed);
                            }
                            Ok(r) => {
                                failed.fetch_add(1, Ordering::Relaxed);
                                failures
                                    .lock()
                                    .unwrap()
                                    .push(format!("{}: {}", r.status, r.body));
                            }
                            Err(e) => {
                                failed.fetch_add(1, Ordering::Relaxed);
                                failures.lock().unwrap().push(e);
                            }
                        }
                    }
                })
            })
            .collect();
        Self {
            ok,
            failed,
            failures,
            stop,
            tasks,
        }
    }

    /// Stops the loops; returns (ok, failed, failure messages).
    pub async fn finish(self) -> (u64, u64, Vec<String>) {
        let _ = self.stop.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
        let f = self.failures.lock().unwrap().clone();
        (
            self.ok.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
            f,
        )
    }
}

/// Stopped by a signal (SIGSTOP), every thread of it: the reading serve's rescue waits for.
pub fn process_stopped(pid: u32) -> bool {
    scalpel_procstat::all_threads_stopped(pid) == Some(true)
}

/// The balancer's own log lines (tracing, every test of this binary), from a subscriber
/// installed on first use; search them for a marker unique to the test.
pub fn trace_text() -> String {
    let buf = trace_buffer();
    let b = buf.lock().unwrap();
    String::from_utf8_lossy(&b).into_owned()
}

/// Installs the capturing subscriber (call before starting a server whose logs matter).
pub fn capture_traces() {
    let _ = trace_buffer();
}

fn trace_buffer() -> Arc<std::sync::Mutex<Vec<u8>>> {
    static BUF: std::sync::OnceLock<Arc<std::sync::Mutex<Vec<u8>>>> = std::sync::OnceLock::new();
    BUF.get_or_init(|| {
        let buf = Arc::new(std::sync::Mutex::new(Vec::new()));
        let writer = buf.clone();
        let _ = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(move || TraceWriter(writer.clone()))
            .with_max_level(tracing::Level::INFO)
            .try_init();
        buf
    })
    .clone()
}

struct TraceWriter(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for TraceWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(data);
        Ok(data.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// One raw HTTP/1.1 exchange on a fresh connection: writes `request`, reads until the
/// server closes or `limit` passes; the bytes received, as text.
pub async fn raw_exchange(addr: SocketAddr, request: &[u8], limit: Duration) -> String {
    let (got, _) = scalpel_testkit::net::raw_exchange(addr, request, limit).await;
    String::from_utf8_lossy(&got).into_owned()
}

/// Reads from `s` into `got` until it holds `want` (10 s at most); fails the test when the
/// stream closes or the time passes first.
pub async fn read_until<S: AsyncRead + Unpin>(s: &mut S, got: &mut Vec<u8>, want: &str) {
    let found = scalpel_testkit::net::read_until(s, got, want, Duration::from_secs(10)).await;
    assert!(found, "no {want:?} in {:?}", String::from_utf8_lossy(got));
}
