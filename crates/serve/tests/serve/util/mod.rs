//! Harness for the serve tests: free port ranges, a server from TOML text, an HTTP
//! client with time-outs, and poll-with-deadline.

#![allow(dead_code, unreachable_pub)]

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use scalpel_serve::{Config, LogBuffer, ServeOptions, Server, WorkerLogs};

pub fn app_js() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/apps/app.js")
}

/// A base port with `count` free ports above it (bind-probed), random so parallel tests
/// and other users of the machine do not collide. Below Linux's ephemeral range (32768 and
/// up): a port probed free now must still be free when a replacement worker binds it
/// seconds later, and outgoing connections (the tests' clients, the balancer's pool) take
/// their local ports from the ephemeral range — one landed on a reload's spare port once.
///
/// A range is never handed out twice in one test process: a bind probe cannot see a range
/// given to another app of the same config (or a parallel test) whose workers have not
/// bound it yet, and two random ranges overlapped once (a config refused as invalid). Nor
/// to two test processes at once (several worktrees' runs of these tests on one machine):
/// each port is claimed with a lock file held until the process ends ([`claim_port`]),
/// since a range's spare port stays unbound between a worker and its successor.
pub fn free_base(count: u16) -> u16 {
    let candidates = std::iter::repeat_with(|| 20_000 + (rand::random::<u16>() % 12_000));
    free_base_from(count, candidates.take(200))
        .unwrap_or_else(|| panic!("no free port range of {count}"))
}

/// [`free_base`] over the given candidate bases; `None` when none is free.
pub fn free_base_from(count: u16, candidates: impl IntoIterator<Item = u16>) -> Option<u16> {
    static GIVEN: std::sync::Mutex<Vec<(u16, u16)>> = std::sync::Mutex::new(Vec::new());
    // The lock files of the claimed ports, open (so held) for the life of the process.
    static CLAIMED: std::sync::Mutex<Vec<std::fs::File>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    for base in candidates {
        let end = base + count; // exclusive
        if given.iter().any(|&(b, e)| base < e && b < end) {
            continue;
        }
        let mut claims = Vec::new();
        let all_claimed = (base..end).all(|p| match claim_port(p) {
            Claim::Held(f) => {
                claims.push(f);
                true
            }
            Claim::Unavailable => true,
            Claim::Taken => false,
        });
        if all_claimed && (base..end).all(|p| TcpListener::bind(("127.0.0.1", p)).is_ok()) {
            given.push((base, end));
            CLAIMED
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend(claims);
            return Some(base);
        }
        // Dropping `claims` releases them.
    }
    None
}

pub enum Claim {
    /// This process holds the port's lock (while the file stays open).
    Held(std::fs::File),
    /// Another process holds it.
    Taken,
    /// No lock could be made (the directory is not writable): the bind probe alone decides.
    Unavailable,
}

/// The machine-wide lock directory of the test ports.
pub fn port_lock_dir() -> PathBuf {
    std::env::temp_dir().join("scalpel-test-ports")
}

/// Claims `port` for this process with an exclusive `flock` on its lock file, which the
/// kernel releases when the file is closed or the process ends, however it ends.
pub fn claim_port(port: u16) -> Claim {
    let dir = port_lock_dir();
    let file = std::fs::create_dir_all(&dir).and_then(|()| {
        std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join(port.to_string()))
    });
    let Ok(file) = file else {
        return Claim::Unavailable;
    };
    match file.try_lock() {
        Ok(()) => Claim::Held(file),
        Err(std::fs::TryLockError::WouldBlock) => Claim::Taken,
        Err(std::fs::TryLockError::Error(_)) => Claim::Unavailable,
    }
}

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
    pub client: Client<HttpConnector, Full<Bytes>>,
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

/// The repository's test apps (tests/apps: Node, Python and Go apps as users write them).
pub fn test_apps() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/apps")
}

/// The build's target directory (this test binary is `<target>/<profile>/deps/…`).
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    exe.ancestors().nth(3).expect("target dir").to_path_buf()
}

/// A program of the test apps' Python environment (`./run setup` makes it).
pub fn venv_bin(name: &str) -> PathBuf {
    let bin = target_dir().join("apps/venv/bin").join(name);
    assert!(
        bin.exists(),
        "{} is missing: run ./run setup (it installs tests/apps/python/requirements.txt)",
        bin.display()
    );
    bin
}

/// The Node test apps' directory, its packages installed (`./run setup`).
pub fn node_apps() -> PathBuf {
    let dir = test_apps().join("node");
    assert!(
        dir.join("node_modules/express").is_dir(),
        "{}/node_modules is missing: run ./run setup (npm ci in tests/apps/node)",
        dir.display()
    );
    dir
}

/// `tests/apps/go/NAME/main.go` built into `dir` (standard library only).
pub fn go_build(name: &str, dir: &Path) -> PathBuf {
    let bin = dir.join(name);
    let src = test_apps().join("go").join(name).join("main.go");
    let built = std::process::Command::new("go")
        .arg("build")
        .arg("-o")
        .arg(&bin)
        .arg(&src)
        .env("GO111MODULE", "off")
        .status();
    assert!(
        matches!(built, Ok(s) if s.success()),
        "go build {}: {built:?}",
        src.display()
    );
    bin
}

impl Harness {
    /// Replaces the config file (the next reload reads it).
    pub fn write_config(&self, toml: &str) {
        std::fs::write(&self.config_path, toml).expect("config written");
    }
}

pub fn client() -> Client<HttpConnector, Full<Bytes>> {
    Client::builder(TokioExecutor::new()).build_http()
}

pub struct Reply {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: String,
}

impl Reply {
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

pub async fn send(
    client: &Client<HttpConnector, Full<Bytes>>,
    req: http::Request<Full<Bytes>>,
) -> Result<Reply, String> {
    let fut = async {
        let res = client.request(req).await.map_err(|e| format!("{e:?}"))?;
        let (parts, body) = res.into_parts();
        let body = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
        Ok(Reply {
            status: parts.status.as_u16(),
            headers: parts.headers,
            body: String::from_utf8_lossy(&body).into_owned(),
        })
    };
    tokio::time::timeout(Duration::from_secs(60), fut)
        .await
        .unwrap_or_else(|_| Err("no answer within 60 s".into()))
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

pub async fn get_at(
    client: &Client<HttpConnector, Full<Bytes>>,
    addr: SocketAddr,
    path: &str,
) -> Result<Reply, String> {
    let req = http::Request::get(format!("http://{addr}{path}"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    send(client, req).await
}

/// Polls `cond` every 50 ms until it holds or `limit` passes; `true` if it held.
pub async fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
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

pub fn process_alive(pid: u32) -> bool {
    // A zombie still has a /proc entry; its state letter is Z.
    process_state(pid).is_some_and(|c| c != 'Z')
}

/// Stopped by a signal (SIGSTOP), every thread of it: the reading serve's rescue waits for.
pub fn process_stopped(pid: u32) -> bool {
    scalpel_procstat::all_threads_stopped(pid) == Some(true)
}

/// The state letter of `/proc/PID/stat`; `None` when the process is gone.
fn process_state(pid: u32) -> Option<char> {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()?
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next())
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

/// One raw HTTP/1.1 exchange on a fresh connection: writes `request` (in pieces with
/// pauses when `pause` is set), reads until the server closes or `limit` passes; the
/// bytes received.
pub async fn raw_exchange(addr: SocketAddr, request: &[u8], limit: Duration) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(request).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(limit, s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

/// A metric's value in Prometheus text (0 when absent).
pub fn metric(text: &str, sample: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(sample).and_then(|v| v.strip_prefix(' ')))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}
