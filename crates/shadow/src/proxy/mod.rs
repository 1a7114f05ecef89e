//! The mirroring proxy: the client gets the primary's answer, streamed, as soon as the
//! primary gives it; a copy of the request goes to the candidate (and secondary) through
//! a bounded queue, and the pair is compared off the request path.
//!
//! ```text
//! client ─▶ proxy ─▶ primary ─▶ proxy ─▶ client          (the request path: nothing else)
//!             │                   └─ tee (≤ limit) ─┐
//!             └─ try_send ─▶ queue ─▶ permit ─▶ candidate (+ secondary) ─▶ compare ─▶ counters, store
//! ```
//!
//! Everything right of the queue runs on one thread of its own (`scalpel-mirror`, its own
//! single-threaded runtime, nice 19), so mirror work never competes with forwarding as an
//! equal: on a busy machine the mirrors fall behind and are skipped, not the clients. The
//! capture (`--capture`) takes the same road: a bounded queue to that thread, which
//! redacts the request and hands it to the capture file's writer thread.
//!
//! Clients may connect over TLS ([`ProxyConfig::tls`]; ALPN `h2` or `http/1.1`); every
//! upstream is reached through `scalpel-http` with its own settings (https, h2, trust).

mod admin;
mod capture;

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::rt::{Read, Write};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use scalpel_diff::{SampleKey, Sampler};
use scalpel_http::{AdminGuard, ErrorKind, IpNet, ServerTls};
use scalpel_requests::{CaptureSink, CaptureStats};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc, oneshot, watch};
use tokio_rustls::TlsAcceptor;

use crate::ShadowError;
use crate::budget::{Budget, Charge};
use crate::client::{
    Client, ExchangeError, ForwardError, Forwarded, OutBody, Reach, Upstream, UpstreamBody,
    accepts_trailers, forwardable, strip_hop_by_hop,
};
use crate::model::{ShadowRequest, ShadowResponse, SkipReason};
use crate::recorder::Recorder;
use capture::CaptureJob;

mod live;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type ProxyBody = BoxBody<Bytes, BoxError>;

/// The most idle connections kept to the primary.
const PRIMARY_MAX_IDLE: usize = 256;

/// How the proxy runs.
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    /// Where clients connect.
    pub listen: SocketAddr,
    /// The service that answers clients.
    pub primary: Upstream,
    /// The service under test.
    pub candidate: Upstream,
    /// A second copy of the primary's code, to measure noise.
    pub secondary: Option<Upstream>,
    /// Where the live page (`/`), `/metrics` (Prometheus text) and `/summary.json` are served.
    pub admin: Option<SocketAddr>,
    /// Names besides the admin's own addresses and `localhost` by which clients reach the
    /// admin (`--admin-host`): any other `Host` is refused (421, against DNS rebinding).
    pub admin_hosts: Vec<String>,
    /// Peers whose forwarding claims (`X-Forwarded-*`, `Forwarded`, `X-Real-IP`…; see
    /// [`scalpel_http::is_forwarding_claim`]) reach the upstreams (`--trusted-proxy`);
    /// every other client's are removed.
    pub trusted_proxies: Vec<IpNet>,
    /// Share of requests mirrored.
    pub sampler: Sampler,
    /// Where a request's sampling key comes from (none: every n-th request).
    pub sample_key: Option<SampleKey>,
    /// Mirror methods other than GET and HEAD.
    pub mirror_unsafe: bool,
    /// Mirror jobs waiting for a free slot; past that, mirrors are skipped and counted.
    pub queue: usize,
    /// Mirror exchanges in flight at once.
    pub mirror_concurrency: usize,
    /// Time-out of one candidate or secondary exchange, body included; also the most a
    /// shutdown waits for mirrors in flight.
    pub mirror_timeout: Duration,
    /// Time-out for the primary's response head.
    pub primary_timeout: Duration,
    /// Request bodies up to this size are buffered and mirrored; larger ones go to the
    /// primary only and are counted as skipped.
    pub max_request_body: usize,
    /// Response bodies captured for comparison up to this size (the client always gets
    /// the whole body).
    pub max_response_body: usize,
    /// Bytes of request and response bodies held at once for mirrors that are queued or
    /// in flight (primary captures, candidate and secondary answers); a mirror that does
    /// not fit is skipped and counted (`over_budget`).
    pub mirror_budget: u64,
    /// A mirror that waited longer than this in the queue is dropped and counted
    /// (`too_old`) instead of comparing a candidate answer with an old primary answer.
    pub mirror_max_age: Duration,
    /// The most a client may take to send a request head, or a request body that is
    /// buffered for mirroring (408 past it); an idle keep-alive connection is closed
    /// after it too. A slow client then holds a connection for a bounded time only.
    pub client_timeout: Duration,
    /// How often counters are written to the store.
    pub flush_interval: Duration,
    /// Listen with TLS (certificate and key, ALPN `h2` and `http/1.1`); plain HTTP/1.1
    /// when `None`.
    pub tls: Option<ServerTls>,
}

impl ProxyConfig {
    /// The settings that cannot work, each named by its flag: no room in the mirror queue
    /// (`--queue 0`) or no mirror ever in flight (`--mirror-concurrency 0`). [`Proxy::bind`]
    /// checks it too.
    pub fn validate(&self) -> Result<(), ShadowError> {
        for (flag, value) in [
            ("--queue", self.queue),
            ("--mirror-concurrency", self.mirror_concurrency),
        ] {
            if value == 0 {
                return Err(ShadowError::Setting {
                    flag,
                    problem: "must be at least 1".into(),
                });
            }
        }
        Ok(())
    }
}

/// Counters of the request path, exported as metrics.
#[derive(Debug, Default)]
struct PathCounters {
    requests: AtomicU64,
    primary_errors: AtomicU64,
    chosen: AtomicU64,
    mirrored: AtomicU64,
    not_mirrored_method: AtomicU64,
    not_mirrored_sampled_out: AtomicU64,
    informational_dropped: AtomicU64,
    client_timeouts: AtomicU64,
    in_flight: AtomicU64,
    connections: AtomicU64,
    /// TLS handshakes with clients that failed or timed out.
    tls_handshake_failures: AtomicU64,
    /// Client connections by protocol: HTTP/1.1, HTTP/2 (over TLS by ALPN).
    connections_h1: AtomicU64,
    connections_h2: AtomicU64,
    /// Sampled requests not captured: the queue to the capture thread was full, or the
    /// body was over `max_request_body`.
    capture_queue_full: AtomicU64,
    capture_body_too_large: AtomicU64,
    /// Captured requests whose body or query the `--redact` rules withheld whole
    /// (`[REDACTED]`) because they could not be read.
    capture_withheld_body: AtomicU64,
    capture_withheld_query: AtomicU64,
    /// Requests refused (400) for their `Host`: none, two, or not `host[:port]`.
    bad_host: AtomicU64,
}

/// What the proxy did, returned by [`Proxy::run`] when it has stopped.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProxyStats {
    /// Client requests proxied to the primary.
    pub requests: u64,
    /// Requests chosen for comparison (method and sampling allowed it). Each one ended in
    /// exactly one of the recorder's `compared`, `errors` or `skipped` (by reason,
    /// `abandoned_at_shutdown` included).
    pub chosen: u64,
    /// Chosen requests that were queued for the candidate.
    pub mirrored: u64,
    /// From the shutdown signal to the counters committed.
    pub shutdown: Duration,
    /// What the capture file got, when there was one (after its writer finished).
    pub capture: Option<CaptureStats>,
    /// Captured requests whose body, and whose query, the `--redact` rules could not
    /// read: written as `[REDACTED]` (redaction fails closed).
    pub capture_withheld: (u64, u64),
}

/// What became of the primary's answer, for the mirror that waits for it.
enum PrimaryOutcome {
    /// The whole answer (its body within the capture limit).
    Done(ShadowResponse),
    /// The primary failed: counted as `primary:KIND`.
    Failed(ErrorKind),
    /// No answer to compare, through nobody's failure (client gone, over a limit).
    Skipped(SkipReason),
}

/// A chosen request's promise to end in exactly one counter: resolved by the code that
/// counts it, or, when dropped unresolved (its queue or task dropped at shutdown),
/// counted as `abandoned_at_shutdown`.
struct Pending {
    recorder: Arc<Recorder>,
    done: bool,
}

impl Pending {
    fn new(recorder: Arc<Recorder>) -> Self {
        Self {
            recorder,
            done: false,
        }
    }

    fn skip(mut self, reason: SkipReason) {
        self.done = true;
        self.recorder.skip(reason);
    }

    /// The outcome was counted elsewhere (compared or failed).
    fn resolved(mut self) {
        self.done = true;
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if !self.done {
            self.recorder.skip(SkipReason::AbandonedAtShutdown);
        }
    }
}

struct MirrorJob {
    request: ShadowRequest,
    primary: oneshot::Receiver<PrimaryOutcome>,
    received: Instant,
    /// The request's bytes, held against the budget while the job lives.
    _charge: Charge,
    pending: Pending,
}

struct Ctx {
    cfg: ProxyConfig,
    primary: Arc<Client>,
    candidate: Arc<Client>,
    secondary: Option<Arc<Client>>,
    queue: mpsc::Sender<MirrorJob>,
    recorder: Arc<Recorder>,
    counters: Arc<PathCounters>,
    budget: Arc<Budget>,
    seq: AtomicU64,
    /// Where sampled requests go to be captured (`None`: no capture).
    capture: Option<mpsc::Sender<CaptureJob>>,
    /// The capture file's writer, shared with the capture task and `/metrics`.
    capture_sink: Arc<Mutex<Option<CaptureSink>>>,
}

/// A bound proxy, ready to run.
#[derive(Debug)]
pub struct Proxy {
    listener: TcpListener,
    admin: Option<(TcpListener, AdminGuard)>,
    cfg: ProxyConfig,
    recorder: Arc<Recorder>,
    clients: [Option<Arc<Client>>; 3],
    reach: Vec<(&'static str, String, Reach)>,
    capture: Option<CaptureSink>,
}

impl std::fmt::Debug for Ctx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ctx")
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

impl Proxy {
    /// Checks every upstream (one connection each: a certificate that does not verify, a
    /// wrong name, a server that refuses a required h2, an unusable CA file fail here,
    /// before any client is served; an upstream that does not answer yet is only noted,
    /// see [`Proxy::upstreams`]), then binds the listen and admin addresses.
    pub async fn bind(cfg: ProxyConfig, recorder: Arc<Recorder>) -> Result<Self, ShadowError> {
        cfg.validate()?;
        let primary = connect_client(
            "primary",
            &cfg.primary,
            cfg.primary_timeout,
            PRIMARY_MAX_IDLE,
        )
        .await?;
        let candidate = connect_client(
            "candidate",
            &cfg.candidate,
            cfg.mirror_timeout,
            cfg.mirror_concurrency,
        )
        .await?;
        let secondary = match &cfg.secondary {
            Some(s) => Some(
                connect_client("secondary", s, cfg.mirror_timeout, cfg.mirror_concurrency).await?,
            ),
            None => None,
        };
        let mut reach = vec![
            ("primary", cfg.primary.describe(), primary.1),
            ("candidate", cfg.candidate.describe(), candidate.1),
        ];
        if let (Some(s), Some(c)) = (&cfg.secondary, &secondary) {
            reach.push(("secondary", s.describe(), c.1.clone()));
        }
        let bind_err = |addr: SocketAddr| move |error| ShadowError::Bind { addr, error };
        let listener = TcpListener::bind(cfg.listen)
            .await
            .map_err(bind_err(cfg.listen))?;
        let admin = match cfg.admin {
            Some(a) => {
                let l = TcpListener::bind(a).await.map_err(bind_err(a))?;
                let guard = AdminGuard::new(l.local_addr().unwrap_or(a))
                    .with_names(&cfg.admin_hosts)
                    .map_err(ShadowError::AdminHost)?;
                Some((l, guard))
            }
            None => None,
        };
        Ok(Self {
            listener,
            admin,
            cfg,
            recorder,
            clients: [Some(primary.0), Some(candidate.0), secondary.map(|s| s.0)],
            reach,
            capture: None,
        })
    }

    /// Captures every sampled request (the proxy's sampling; redacted with the
    /// recorder's redaction rules) through `sink`, off the request path.
    pub fn with_capture(mut self, sink: CaptureSink) -> Self {
        self.capture = Some(sink);
        self
    }

    /// Each upstream (`primary`, `candidate`, `secondary`), how it is reached, and what
    /// the check at bind time found.
    pub fn upstreams(&self) -> &[(&'static str, String, Reach)] {
        &self.reach
    }

    /// The address clients connect to.
    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().unwrap_or(self.cfg.listen)
    }

    /// The admin address, if any.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin.as_ref().and_then(|(l, _)| l.local_addr().ok())
    }

    /// Serves until `shutdown` completes, then stops within the mirror time-out: no new
    /// connection is accepted, open ones finish their request and close, queued mirrors
    /// are dropped and mirrors still in flight when the time is up are cancelled (both
    /// counted as `abandoned_at_shutdown`), and the counters are committed to the store.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<ProxyStats, ShadowError> {
        let Proxy {
            listener,
            admin,
            cfg,
            recorder,
            clients,
            capture,
            ..
        } = self;
        let running = Running::start(cfg, recorder, clients, capture, admin)?;
        running.accept_until(&listener, shutdown).await;
        let stop_started = Instant::now();
        drop(listener);
        Ok(running.stop(stop_started).await)
    }
}

/// A proxy serving: the context its connections share, and the thread and tasks beside the
/// accept loop (the mirror thread, the store's flusher, the admin server and its ticker).
struct Running {
    ctx: Arc<Ctx>,
    tls: Option<TlsAcceptor>,
    closing_tx: watch::Sender<bool>,
    closing: watch::Receiver<bool>,
    stop_mirrors: oneshot::Sender<()>,
    mirror_thread: std::thread::JoinHandle<()>,
    flusher: tokio::task::JoinHandle<()>,
    admin: Option<(tokio::task::JoinHandle<()>, tokio::task::JoinHandle<()>)>,
}

impl Running {
    /// The shared context, the mirror thread (with the capture's task), the flusher that
    /// writes counters to the store every `flush_interval`, and the admin server.
    fn start(
        cfg: ProxyConfig,
        recorder: Arc<Recorder>,
        clients: [Option<Arc<Client>>; 3],
        capture: Option<CaptureSink>,
        admin: Option<(TcpListener, AdminGuard)>,
    ) -> Result<Running, ShadowError> {
        let (tx, rx) = mpsc::channel(cfg.queue.max(1));
        let [Some(primary), Some(candidate), secondary] = clients else {
            unreachable!("bind made the primary and candidate clients");
        };
        let (capture_tx, capture_rx) = match &capture {
            Some(_) => {
                let (t, r) = mpsc::channel(cfg.queue.max(1));
                (Some(t), Some(r))
            }
            None => (None, None),
        };
        let ctx = Arc::new(Ctx {
            cfg: cfg.clone(),
            primary,
            candidate,
            secondary,
            queue: tx,
            recorder: recorder.clone(),
            counters: Arc::new(PathCounters::default()),
            budget: Budget::new(cfg.mirror_budget),
            seq: AtomicU64::new(0),
            capture: capture_tx,
            capture_sink: Arc::new(Mutex::new(capture)),
        });
        let (closing_tx, closing) = watch::channel(false);
        let slots = Arc::new(Semaphore::new(cfg.mirror_concurrency.max(1)));
        let (stop_mirrors, mirror_thread) =
            start_mirror_thread(rx, capture_rx, ctx.clone(), slots, closing.clone())?;
        let every = cfg.flush_interval;
        let flusher = tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                recorder.flush();
            }
        });
        let admin = admin.map(|(l, guard)| {
            let live = Arc::new(live::Live::new(&cfg));
            (
                tokio::spawn(admin::serve_admin(l, guard, ctx.clone(), live.clone())),
                tokio::spawn(live::run(live, ctx.clone())),
            )
        });
        Ok(Running {
            tls: cfg.tls.as_ref().map(ServerTls::acceptor),
            ctx,
            closing_tx,
            closing,
            stop_mirrors,
            mirror_thread,
            flusher,
            admin,
        })
    }

    /// Accepts clients, a task each, until `shutdown` completes.
    async fn accept_until(&self, listener: &TcpListener, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                accepted = listener.accept() => {
                    let (stream, _) = match accepted {
                        Ok(s) => s,
                        Err(e) => {
                            tracing::warn!(error = %e, "accept failed");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    };
                    let _ = stream.set_nodelay(true);
                    let (ctx, closing, tls) =
                        (self.ctx.clone(), self.closing.clone(), self.tls.clone());
                    tokio::spawn(serve_client(stream, ctx, closing, tls));
                }
            }
        }
    }

    /// The stop after the listener closed: connections finish, mirrors in flight get the
    /// rest of the mirror time-out, then the mirror thread stops (what it still held is
    /// counted abandoned), the store is committed and the capture file closed.
    async fn stop(self, stop_started: Instant) -> ProxyStats {
        let ctx = self.ctx;
        let counters = ctx.counters.clone();
        // Everything below fits in the mirror time-out: the docs promise no more.
        let deadline = stop_started + ctx.cfg.mirror_timeout;
        let _ = self.closing_tx.send(true);
        tracing::info!(
            in_flight = counters.in_flight.load(Ordering::Relaxed),
            wait = ?ctx.cfg.mirror_timeout,
            "shutting down: queued mirrors dropped, waiting for mirrors in flight"
        );
        drain(&ctx, deadline).await;
        self.flusher.abort();
        let _ = self.stop_mirrors.send(());
        // Joining drops the mirror runtime's tasks: what is still in flight is counted
        // as abandoned before the final commit.
        let mirror_thread = self.mirror_thread;
        let _ = tokio::task::spawn_blocking(move || mirror_thread.join()).await;
        if let Some((a, ticker)) = self.admin {
            a.abort();
            ticker.abort();
        }
        let recorder = ctx.recorder.clone();
        let _ = tokio::task::spawn_blocking(move || recorder.flush_and_sync()).await;
        // The capture thread writes what is queued, then the file is complete.
        let sink = ctx
            .capture_sink
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        let capture = match sink {
            Some(s) => tokio::task::spawn_blocking(move || s.close()).await.ok(),
            None => None,
        };
        ProxyStats {
            requests: counters.requests.load(Ordering::Relaxed),
            chosen: counters.chosen.load(Ordering::Relaxed),
            mirrored: counters.mirrored.load(Ordering::Relaxed),
            shutdown: stop_started.elapsed(),
            capture,
            capture_withheld: (
                counters.capture_withheld_body.load(Ordering::Relaxed),
                counters.capture_withheld_query.load(Ordering::Relaxed),
            ),
        }
    }
}

/// Waits, until `deadline`, for mirrors in flight and open connections to end, then for
/// the requests queued for the capture to reach its writer before the mirror thread
/// (which redacts them) stops: a capture keeps every request it accepted. The capture
/// task offers each one in the same poll that takes it off the queue.
async fn drain(ctx: &Ctx, deadline: Instant) {
    let counters = &ctx.counters;
    while Instant::now() < deadline
        && (counters.in_flight.load(Ordering::Relaxed) > 0
            || counters.connections.load(Ordering::Relaxed) > 0)
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if let Some(tx) = &ctx.capture {
        while Instant::now() < deadline && tx.capacity() < tx.max_capacity() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// Returns once the proxy is shutting down.
async fn until_closing(closing: &mut watch::Receiver<bool>) {
    // The guard `wait_for` returns is dropped here, before any other await.
    let _ = closing.wait_for(|c| *c).await;
}

/// Makes an upstream's client and checks it (see [`Proxy::bind`]).
async fn connect_client(
    role: &'static str,
    up: &Upstream,
    timeout: Duration,
    max_idle: usize,
) -> Result<(Arc<Client>, Reach), ShadowError> {
    let err = |error| ShadowError::Upstream {
        role,
        url: up.to_string(),
        error,
    };
    let client = Client::new(up, timeout, None, max_idle)
        .await
        .map_err(err)?;
    let reach = client.check(role).await?;
    Ok((client, reach))
}

/// One client connection (TLS first when configured; HTTP/2 when ALPN chose it). At
/// shutdown it finishes the request in progress and closes.
async fn serve_client(
    stream: TcpStream,
    ctx: Arc<Ctx>,
    closing: watch::Receiver<bool>,
    tls: Option<TlsAcceptor>,
) {
    let counters = ctx.counters.clone();
    counters.connections.fetch_add(1, Ordering::Relaxed);
    let trusted = stream
        .peer_addr()
        .is_ok_and(|p| ctx.cfg.trusted_proxies.iter().any(|n| n.contains(p.ip())));
    match tls {
        None => serve_h1(TokioIo::new(stream), ctx, closing, trusted).await,
        Some(acceptor) => {
            // A client that never finishes its handshake holds a connection for the
            // client time-out at most, as one that never sends a head.
            let limit = ctx.cfg.client_timeout;
            match tokio::time::timeout(limit, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => {
                    let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
                    if h2 {
                        serve_h2(TokioIo::new(tls), ctx, closing, trusted).await;
                    } else {
                        serve_h1(TokioIo::new(tls), ctx, closing, trusted).await;
                    }
                }
                Ok(Err(e)) => {
                    counters
                        .tls_handshake_failures
                        .fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(error = %e, "client TLS handshake failed");
                }
                Err(_) => {
                    counters
                        .tls_handshake_failures
                        .fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }
    counters.connections.fetch_sub(1, Ordering::Relaxed);
}

async fn serve_h1<I>(io: I, ctx: Arc<Ctx>, mut closing: watch::Receiver<bool>, trusted: bool)
where
    I: Read + Write + Unpin + Send + 'static,
{
    ctx.counters.connections_h1.fetch_add(1, Ordering::Relaxed);
    let client_timeout = ctx.cfg.client_timeout;
    let svc = service_fn(move |req| handle(req, ctx.clone(), trusted));
    let mut builder = hyper::server::conn::http1::Builder::new();
    // The client must see the primary's headers, not ours: no `date` the primary did
    // not send.
    builder.auto_date_header(false);
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(client_timeout);
    let conn = builder.serve_connection(io, svc);
    tokio::pin!(conn);
    let result = tokio::select! {
        r = conn.as_mut() => r,
        () = until_closing(&mut closing) => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = result {
        tracing::debug!(error = %e, "client connection ended");
    }
}

async fn serve_h2<I>(io: I, ctx: Arc<Ctx>, mut closing: watch::Receiver<bool>, trusted: bool)
where
    I: Read + Write + Unpin + Send + 'static,
{
    ctx.counters.connections_h2.fetch_add(1, Ordering::Relaxed);
    let client_timeout = ctx.cfg.client_timeout;
    let svc = service_fn(move |req| handle(req, ctx.clone(), trusted));
    let mut builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    builder.auto_date_header(false);
    // An idle HTTP/2 client is pinged, and dropped when it stops answering.
    builder
        .timer(TokioTimer::new())
        .keep_alive_interval(client_timeout)
        .keep_alive_timeout(client_timeout);
    let conn = builder.serve_connection(io, svc);
    tokio::pin!(conn);
    let result = tokio::select! {
        r = conn.as_mut() => r,
        () = until_closing(&mut closing) => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = result {
        tracing::debug!(error = %e, "client h2 connection ended");
    }
}

/// Starts the thread that runs every mirror exchange and comparison, apart from the
/// forwarding runtime: its own single-threaded runtime, at a lower CPU priority, so that
/// when the machine is short of CPU the mirrors fall behind (and are skipped, counted)
/// instead of the clients' requests. Measured: docs/shadow.md, "Performance".
fn start_mirror_thread(
    rx: mpsc::Receiver<MirrorJob>,
    capture: Option<mpsc::Receiver<CaptureJob>>,
    ctx: Arc<Ctx>,
    slots: Arc<Semaphore>,
    closing: watch::Receiver<bool>,
) -> Result<(oneshot::Sender<()>, std::thread::JoinHandle<()>), ShadowError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(ShadowError::MirrorThread)?;
    let (stop, stopped) = oneshot::channel::<()>();
    let thread = std::thread::Builder::new()
        .name("scalpel-mirror".into())
        .spawn(move || {
            lower_this_thread_priority();
            rt.block_on(async move {
                if let Some(jobs) = capture {
                    tokio::spawn(capture::run(
                        jobs,
                        ctx.capture_sink.clone(),
                        ctx.recorder.settings().redactor().clone(),
                        ctx.counters.clone(),
                    ));
                }
                tokio::pin!(stopped);
                tokio::select! {
                    () = dispatch(rx, ctx, slots, closing) => {
                        // Queue closed and drained: wait for the stop (the tasks in
                        // flight run until then).
                        let _ = (&mut stopped).await;
                    }
                    _ = &mut stopped => {}
                }
            });
            // `rt` is dropped here with every task still in flight.
        })
        .map_err(ShadowError::MirrorThread)?;
    Ok((stop, thread))
}

/// Nice value of the mirror thread: the lowest, so that the forwarding threads (nice 0)
/// get ~98 % of a core both want (CFS weights 1024 vs 15). It still gets whatever CPU
/// is idle; when there is none, mirrors fall behind and are skipped (counted).
const MIRROR_NICE: i32 = 19;

/// Lowers the calling thread's scheduling priority (Linux: `setpriority` with a thread id
/// acts on that thread only). Best effort: a failure leaves the priority as it was.
fn lower_this_thread_priority() {
    #[cfg(target_os = "linux")]
    #[allow(unsafe_code)]
    {
        // SAFETY: plain system calls without pointers; `gettid` cannot fail and
        // `setpriority` only reads its integer arguments.
        let rc = unsafe {
            let tid = libc::gettid();
            libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, MIRROR_NICE)
        };
        if rc != 0 {
            tracing::debug!("could not lower the mirror thread's priority");
        }
    }
}

async fn dispatch(
    mut rx: mpsc::Receiver<MirrorJob>,
    ctx: Arc<Ctx>,
    slots: Arc<Semaphore>,
    mut closing: watch::Receiver<bool>,
) {
    loop {
        let job = tokio::select! {
            biased;
            () = until_closing(&mut closing) => break,
            job = rx.recv() => match job {
                Some(j) => j,
                None => break,
            },
        };
        // Waiting here for a slot is what fills the queue when the candidate is slow.
        let permit = tokio::select! {
            biased;
            () = until_closing(&mut closing) => break,
            p = slots.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
        };
        if job.received.elapsed() > ctx.cfg.mirror_max_age {
            job.pending.skip(SkipReason::TooOld);
            continue;
        }
        ctx.counters.in_flight.fetch_add(1, Ordering::Relaxed);
        let ctx = ctx.clone();
        // Spawned on the mirror thread's own runtime (the current one here).
        tokio::spawn(async move {
            run_mirror(job, &ctx).await;
            ctx.counters.in_flight.fetch_sub(1, Ordering::Relaxed);
            drop(permit);
        });
    }
    // Shutting down: nothing more is taken; every job still queued (and the one held,
    // if any, dropped with this frame) is counted as abandoned by its `Pending`.
    rx.close();
    while let Ok(job) = rx.try_recv() {
        drop(job);
    }
}

async fn run_mirror(job: MirrorJob, ctx: &Ctx) {
    let cfg = &ctx.cfg;
    let limit = cfg.max_response_body;
    let budget = Some(&ctx.budget);
    let cand = ctx
        .candidate
        .exchange(&job.request, cfg.mirror_timeout, limit, budget);
    let sec = async {
        match &ctx.secondary {
            Some(s) => Some(
                s.exchange(&job.request, cfg.mirror_timeout, limit, budget)
                    .await,
            ),
            None => None,
        }
    };
    let (cand, sec) = tokio::join!(cand, sec);
    // The primary normally finished long ago; the wait is bounded in case a client
    // stalls reading its body.
    let wait = cfg.primary_timeout + cfg.mirror_timeout;
    let primary = match tokio::time::timeout(wait, job.primary).await {
        Ok(Ok(PrimaryOutcome::Done(p))) => Ok(p),
        Ok(Ok(PrimaryOutcome::Failed(f))) => Err(f),
        Ok(Ok(PrimaryOutcome::Skipped(reason))) => return job.pending.skip(reason),
        // The request's task ended before the primary answered (the client went away).
        Ok(Err(_)) | Err(_) => return job.pending.skip(SkipReason::PrimaryIncomplete),
    };
    fn side(
        r: &Result<ShadowResponse, ExchangeError>,
    ) -> Option<Result<&ShadowResponse, ErrorKind>> {
        match r {
            Ok(r) => Some(Ok(r)),
            Err(ExchangeError::Failed(f)) => Some(Err(*f)),
            Err(ExchangeError::OverBudget) => None,
        }
    }
    // A body the budget could not hold is nobody's failure: the pair is skipped.
    let Some(c) = side(&cand) else {
        return job.pending.skip(SkipReason::OverBudget);
    };
    let s = match sec.as_ref().map(side) {
        None => None,
        Some(Some(s)) => Some(s),
        Some(None) => return job.pending.skip(SkipReason::OverBudget),
    };
    ctx.recorder
        .record(&job.request, primary.as_ref().map_err(|f| *f), c, s);
    job.pending.resolved();
}

/// The toolkit's one JSON error body (`scalpel_http::error_body`): a stable kind for
/// scripts, a detail for people.
fn json_error(status: StatusCode, kind: &str, detail: &str) -> Response<ProxyBody> {
    scalpel_http::error_response(status, kind, detail)
        .map(|b| Full::new(b).map_err(|n| match n {}).boxed())
}

/// What a request is chosen for: a mirror (method allowed and sampled in) and/or the
/// capture (sampled in, any method: replay filters unsafe methods itself).
fn choose(ctx: &Ctx, method: &Method, pq: &str, headers: &HeaderMap) -> (bool, bool) {
    let method_ok = ctx.cfg.mirror_unsafe || method == Method::GET || method == Method::HEAD;
    if !method_ok {
        ctx.counters
            .not_mirrored_method
            .fetch_add(1, Ordering::Relaxed);
        if ctx.capture.is_none() {
            return (false, false);
        }
    }
    let sampled = sampled(ctx, pq, headers);
    if method_ok && !sampled {
        ctx.counters
            .not_mirrored_sampled_out
            .fetch_add(1, Ordering::Relaxed);
    }
    (method_ok && sampled, sampled && ctx.capture.is_some())
}

/// The proxy's sampling decision for one request.
fn sampled(ctx: &Ctx, pq: &str, headers: &HeaderMap) -> bool {
    let sampler = &ctx.cfg.sampler;
    if sampler.keeps_all() {
        return true;
    }
    match ctx
        .cfg
        .sample_key
        .as_ref()
        .and_then(|k| k.extract(pq, headers))
    {
        Some(key) => sampler.keep(key),
        None => sampler.keep_nth(ctx.seq.fetch_add(1, Ordering::Relaxed)),
    }
}

/// Reads up to `limit` bytes of body. `Ok(full)` when it all fit; `Err(prefix)` when it
/// is larger, with what was read so far (the rest is still in `body`).
async fn buffer_body(
    body: &mut Incoming,
    limit: usize,
) -> Result<Result<Bytes, Bytes>, hyper::Error> {
    let mut buf = BytesMut::new();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            buf.extend_from_slice(&data);
            if buf.len() > limit {
                return Ok(Err(buf.freeze()));
            }
        }
    }
    Ok(Ok(buf.freeze()))
}

/// One client request. `trusted`: the client is one of the `trusted_proxies`, whose
/// forwarding claims stand.
async fn handle(
    req: Request<Incoming>,
    ctx: Arc<Ctx>,
    trusted: bool,
) -> Result<Response<ProxyBody>, Infallible> {
    ctx.counters.requests.fetch_add(1, Ordering::Relaxed);
    let received = SystemTime::now();
    let (mut parts, body) = req.into_parts();
    // No host, two, or one that is not `host[:port]`: 400 (RFC 9112 §3.2), never passed
    // on, mirrored or captured.
    if let Err(e) = scalpel_http::request_host(parts.version, &parts.uri, &parts.headers) {
        ctx.counters.bad_host.fetch_add(1, Ordering::Relaxed);
        return Ok(json_error(
            StatusCode::BAD_REQUEST,
            e.kind(),
            &e.to_string(),
        ));
    }
    // What a client that is not a trusted proxy claims about its address or scheme
    // reaches neither the primary nor a mirror, nor the capture.
    if !trusted {
        scalpel_http::strip_forwarding_claims(&mut parts.headers);
    }
    let pq = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    let headers = forwardable(&parts.headers);
    let (out, mirror_tx) = match request_filter(&ctx, &parts, &pq, &headers, body, received).await {
        Ok(taken) => taken,
        Err(refused) => return Ok(refused),
    };
    // `TE` is hop-by-hop, but a client that accepts trailers can only get them if the
    // primary is told this hop accepts them too (the proxy passes them on).
    let te = accepts_trailers(&parts.headers);
    let forward = ctx.primary.forward(&parts.method, &pq, &headers, te, out);
    let answer = match tokio::time::timeout(ctx.cfg.primary_timeout, forward).await {
        Ok(Ok(a)) => a,
        Ok(Err(e)) => return Ok(forward_failed(&ctx, e, mirror_tx)),
        Err(_) => {
            ctx.counters.primary_errors.fetch_add(1, Ordering::Relaxed);
            if let Some(tx) = mirror_tx {
                let _ = tx.send(PrimaryOutcome::Failed(ErrorKind::Timeout));
            }
            return Ok(json_error(
                StatusCode::GATEWAY_TIMEOUT,
                "primary_timeout",
                "the primary did not answer within the primary time-out",
            ));
        }
    };
    Ok(response_filter(&ctx, answer, mirror_tx))
}

/// The request's way to the primary: streamed through, or — when it is chosen for a
/// mirror or the capture — buffered (up to the limit, within the client time-out) and
/// copied to the mirror queue and the capture. With the mirror job's sender for the
/// primary's answer; `Err` is the answer to a client whose body did not arrive.
async fn request_filter(
    ctx: &Ctx,
    parts: &http::request::Parts,
    pq: &str,
    headers: &HeaderMap,
    mut body: Incoming,
    received: SystemTime,
) -> Result<(OutBody, Option<oneshot::Sender<PrimaryOutcome>>), Response<ProxyBody>> {
    let (mirror, capture) = choose(ctx, &parts.method, pq, &parts.headers);
    if !(mirror || capture) {
        let out = OutBody::Stream {
            prefix: None,
            rest: body,
        };
        return Ok((out, None));
    }
    let read = buffer_body(&mut body, ctx.cfg.max_request_body);
    let Ok(read) = tokio::time::timeout(ctx.cfg.client_timeout, read).await else {
        ctx.counters.client_timeouts.fetch_add(1, Ordering::Relaxed);
        return Err(json_error(
            StatusCode::REQUEST_TIMEOUT,
            "client_timeout",
            "the request body did not arrive within the client time-out",
        ));
    };
    let mut mirror_tx = None;
    let out = match read {
        Ok(Ok(full)) => {
            if mirror {
                ctx.counters.chosen.fetch_add(1, Ordering::Relaxed);
                mirror_tx = queue_mirror(ctx, &parts.method, pq, &parts.headers, &full);
            }
            if capture {
                capture::queue(ctx, received, &parts.method, pq, headers, &full);
            }
            OutBody::Full(full)
        }
        Ok(Err(prefix)) => {
            if mirror {
                ctx.counters.chosen.fetch_add(1, Ordering::Relaxed);
                ctx.recorder.skip(SkipReason::RequestBodyTooLarge);
            }
            if capture {
                ctx.counters
                    .capture_body_too_large
                    .fetch_add(1, Ordering::Relaxed);
            }
            OutBody::Stream {
                prefix: Some(prefix),
                rest: body,
            }
        }
        Err(e) => return Err(client_body_error(&e)),
    };
    Ok((out, mirror_tx))
}

/// The primary's answer on its way to the client: hop-by-hop headers removed, and, for a
/// mirrored request, its body teed (up to the limit) to the mirror job.
fn response_filter(
    ctx: &Ctx,
    answer: Forwarded,
    mirror_tx: Option<oneshot::Sender<PrimaryOutcome>>,
) -> Response<ProxyBody> {
    // hyper's server has no way to send an interim response, so a 103 Early Hints (or
    // any 1xx) from the primary cannot be passed on; it is counted, not lost silently.
    if answer.interim > 0 {
        ctx.counters
            .informational_dropped
            .fetch_add(u64::from(answer.interim), Ordering::Relaxed);
    }
    let start = Instant::now();
    let mut head_headers = answer.headers;
    // hyper frames the body itself; `Trailer` stays (it is end to end).
    strip_hop_by_hop(&mut head_headers);
    let body = match mirror_tx {
        Some(tx) => TeeBody {
            inner: answer.body,
            buf: BytesMut::new(),
            limit: ctx.cfg.max_response_body,
            charge: ctx.budget.charge(),
            head: Some((answer.status, head_headers.clone(), start)),
            tx: Some(tx),
        }
        .map_err(BoxError::from)
        .boxed(),
        None => answer.body.map_err(BoxError::from).boxed(),
    };
    let mut response = Response::new(body);
    *response.status_mut() = answer.status;
    *response.headers_mut() = head_headers;
    response
}

/// The answer when the client's body could not be read.
fn client_body_error(e: &hyper::Error) -> Response<ProxyBody> {
    tracing::debug!(error = %e, "client body failed");
    json_error(
        StatusCode::BAD_REQUEST,
        "bad_request",
        "could not read the request body",
    )
}

/// The answer when the primary gave none: counted, the mirror told, and a JSON error.
fn forward_failed(
    ctx: &Ctx,
    e: ForwardError,
    mirror_tx: Option<oneshot::Sender<PrimaryOutcome>>,
) -> Response<ProxyBody> {
    match e {
        ForwardError::Upstream(e) => {
            ctx.counters.primary_errors.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(error = %e, "primary failed");
            let failure = e.kind();
            if let Some(tx) = mirror_tx {
                let _ = tx.send(PrimaryOutcome::Failed(failure));
            }
            json_error(
                e.kind().gateway_status(),
                &format!("primary_{}", failure.name()),
                &format!("the primary did not answer: {e}"),
            )
        }
        ForwardError::ClientBody(e) => {
            if let Some(tx) = mirror_tx {
                let _ = tx.send(PrimaryOutcome::Skipped(SkipReason::PrimaryIncomplete));
            }
            client_body_error(&e)
        }
        ForwardError::BadRequest(why) => {
            if let Some(tx) = mirror_tx {
                let _ = tx.send(PrimaryOutcome::Skipped(SkipReason::PrimaryIncomplete));
            }
            json_error(StatusCode::BAD_REQUEST, "bad_request", &why)
        }
    }
}

/// Queues the mirror of a chosen request whose body was read whole, or counts why not;
/// returns where to send the primary's answer when it is queued.
fn queue_mirror(
    ctx: &Ctx,
    method: &Method,
    pq: &str,
    headers: &HeaderMap,
    body: &Bytes,
) -> Option<oneshot::Sender<PrimaryOutcome>> {
    let pending = Pending::new(ctx.recorder.clone());
    let mut charge = ctx.budget.charge();
    let size = body.len()
        + pq.len()
        + headers
            .iter()
            .map(|(k, v)| k.as_str().len() + v.len())
            .sum::<usize>();
    if !charge.grow(size) {
        pending.skip(SkipReason::OverBudget);
        return None;
    }
    let (tx, rx) = oneshot::channel();
    let job = MirrorJob {
        request: ShadowRequest::new(method.clone(), pq, headers.clone(), body.clone()),
        primary: rx,
        received: Instant::now(),
        _charge: charge,
        pending,
    };
    match ctx.queue.try_send(job) {
        Ok(()) => {
            ctx.counters.mirrored.fetch_add(1, Ordering::Relaxed);
            Some(tx)
        }
        Err(mpsc::error::TrySendError::Full(job)) => {
            job.pending.skip(SkipReason::QueueFull);
            None
        }
        Err(mpsc::error::TrySendError::Closed(job)) => {
            job.pending.skip(SkipReason::AbandonedAtShutdown);
            None
        }
    }
}

/// The primary's body on its way to the client, copied (up to a limit, within the
/// mirror byte budget) for comparison. The client never waits for the copy: each frame
/// is passed on as it arrives.
struct TeeBody {
    inner: UpstreamBody,
    buf: BytesMut,
    limit: usize,
    charge: Charge,
    head: Option<(StatusCode, HeaderMap, Instant)>,
    tx: Option<oneshot::Sender<PrimaryOutcome>>,
}

impl TeeBody {
    /// Hands the captured answer (or why there is none) to the mirror, once.
    fn finish(&mut self, outcome: Result<(), PrimaryOutcome>) {
        let Some(tx) = self.tx.take() else { return };
        let result = match (outcome, self.head.take()) {
            (Ok(()), Some((status, headers, start))) => PrimaryOutcome::Done(ShadowResponse {
                status,
                headers,
                body: std::mem::take(&mut self.buf).freeze(),
                latency: start.elapsed(),
                // The bytes stay charged until the mirror has compared them.
                charge: Some(self.charge.take()),
            }),
            (Err(o), _) => o,
            (Ok(()), None) => PrimaryOutcome::Skipped(SkipReason::PrimaryIncomplete),
        };
        // The copy is no longer needed here, whatever happened to it.
        self.buf = BytesMut::new();
        drop(self.charge.take());
        let _ = tx.send(result);
    }
}

impl Body for TeeBody {
    type Data = Bytes;
    type Error = scalpel_http::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, scalpel_http::Error>>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) if this.tx.is_some() => {
                if let Some(data) = frame.data_ref() {
                    if this.buf.len() + data.len() > this.limit {
                        this.finish(Err(PrimaryOutcome::Skipped(SkipReason::ResponseTooLarge)));
                    } else if !this.charge.grow(data.len()) {
                        this.finish(Err(PrimaryOutcome::Skipped(SkipReason::OverBudget)));
                    } else {
                        this.buf.extend_from_slice(data);
                    }
                } else if frame.is_trailers() {
                    // Trailers are the last frame: the answer is complete.
                    this.finish(Ok(()));
                }
            }
            Poll::Ready(None) => this.finish(Ok(())),
            // The head came; the body broke: cut short (`body_cut`), or a bad chunk or an
            // h2 protocol error (`protocol`), as the connector sorts it.
            Poll::Ready(Some(Err(e))) => this.finish(Err(PrimaryOutcome::Failed(e.kind()))),
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for TeeBody {
    fn drop(&mut self) {
        // An empty body can be complete without a final poll.
        if self.inner.is_end_stream() {
            self.finish(Ok(()));
        } else {
            self.finish(Err(PrimaryOutcome::Skipped(SkipReason::PrimaryIncomplete)));
        }
    }
}
