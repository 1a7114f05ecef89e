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
//! equal: on a busy machine the mirrors fall behind and are skipped, not the clients.

use std::convert::Infallible;
use std::fmt::Write as _;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use http::header::CONTENT_TYPE;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use scalpel_diff::{SampleKey, Sampler};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, mpsc, oneshot};

use crate::ShadowError;
use crate::client::{
    BufferedClient, Upstream, buffered_client, connector, exchange, is_hop_by_hop,
};
use crate::model::{Failure, ShadowRequest, ShadowResponse, SkipReason};
use crate::recorder::Recorder;

mod live;

type ProxyBody = BoxBody<Bytes, hyper::Error>;

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
    /// Time-out of one candidate or secondary exchange, body included.
    pub mirror_timeout: Duration,
    /// Time-out for the primary's response head.
    pub primary_timeout: Duration,
    /// Request bodies up to this size are buffered and mirrored; larger ones go to the
    /// primary only and are counted as skipped.
    pub max_request_body: usize,
    /// Response bodies captured for comparison up to this size (the client always gets
    /// the whole body).
    pub max_response_body: usize,
    /// How often counters are written to the store.
    pub flush_interval: Duration,
}

/// Counters of the request path, exported as metrics.
#[derive(Debug, Default)]
struct PathCounters {
    requests: AtomicU64,
    primary_errors: AtomicU64,
    mirrored: AtomicU64,
    not_mirrored_method: AtomicU64,
    not_mirrored_sampled_out: AtomicU64,
    in_flight: AtomicU64,
}

struct MirrorJob {
    request: ShadowRequest,
    primary: oneshot::Receiver<Result<ShadowResponse, Failure>>,
}

struct Ctx {
    cfg: ProxyConfig,
    primary: Client<hyper_util::client::legacy::connect::HttpConnector, ProxyBody>,
    queue: mpsc::Sender<MirrorJob>,
    recorder: Arc<Recorder>,
    counters: PathCounters,
    seq: AtomicU64,
}

/// A bound proxy, ready to run.
#[derive(Debug)]
pub struct Proxy {
    listener: TcpListener,
    admin: Option<TcpListener>,
    cfg: ProxyConfig,
    recorder: Arc<Recorder>,
}

impl std::fmt::Debug for Ctx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ctx")
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

impl Proxy {
    /// Binds the listen and admin addresses.
    pub async fn bind(cfg: ProxyConfig, recorder: Arc<Recorder>) -> Result<Self, ShadowError> {
        let bind_err = |addr: SocketAddr| move |source| ShadowError::Bind { addr, source };
        let listener = TcpListener::bind(cfg.listen)
            .await
            .map_err(bind_err(cfg.listen))?;
        let admin = match cfg.admin {
            Some(a) => Some(TcpListener::bind(a).await.map_err(bind_err(a))?),
            None => None,
        };
        Ok(Self {
            listener,
            admin,
            cfg,
            recorder,
        })
    }

    /// The address clients connect to.
    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().unwrap_or(self.cfg.listen)
    }

    /// The admin address, if any.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// Serves until `shutdown` completes, then waits (up to the mirror time-out) for
    /// mirrors in flight and writes the counters to the store.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), ShadowError> {
        let cfg = self.cfg.clone();
        let (tx, rx) = mpsc::channel(cfg.queue.max(1));
        let primary = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector(cfg.primary_timeout));
        let ctx = Arc::new(Ctx {
            cfg: cfg.clone(),
            primary,
            queue: tx,
            recorder: self.recorder.clone(),
            counters: PathCounters::default(),
            seq: AtomicU64::new(0),
        });
        let slots = Arc::new(Semaphore::new(cfg.mirror_concurrency.max(1)));
        let (stop_mirrors, mirror_thread) = start_mirror_thread(rx, ctx.clone(), slots)?;
        let flusher = {
            let recorder = self.recorder.clone();
            let every = cfg.flush_interval;
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(every);
                loop {
                    tick.tick().await;
                    recorder.flush();
                }
            })
        };
        let admin = self.admin.map(|l| {
            let live = Arc::new(live::Live::new(&cfg));
            (
                tokio::spawn(serve_admin(l, ctx.clone(), live.clone())),
                tokio::spawn(live::run(live, ctx.clone())),
            )
        });

        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                accepted = self.listener.accept() => {
                    let (stream, _) = match accepted {
                        Ok(s) => s,
                        Err(e) => {
                            tracing::warn!(error = %e, "accept failed");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    };
                    let _ = stream.set_nodelay(true);
                    let ctx = ctx.clone();
                    tokio::spawn(async move {
                        let svc = service_fn(move |req| handle(req, ctx.clone()));
                        if let Err(e) = hyper::server::conn::http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), svc)
                            .await
                        {
                            tracing::debug!(error = %e, "client connection ended");
                        }
                    });
                }
            }
        }
        tracing::info!("shutting down: waiting for mirrors in flight");
        let deadline = Instant::now() + cfg.mirror_timeout + Duration::from_secs(1);
        while Instant::now() < deadline
            && (ctx.counters.in_flight.load(Ordering::Relaxed) > 0
                || ctx.queue.capacity() < ctx.queue.max_capacity())
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        flusher.abort();
        let _ = stop_mirrors.send(());
        let _ = tokio::task::spawn_blocking(move || mirror_thread.join()).await;
        if let Some((a, ticker)) = admin {
            a.abort();
            ticker.abort();
        }
        let recorder = self.recorder.clone();
        let _ = tokio::task::spawn_blocking(move || recorder.flush_and_sync()).await;
        Ok(())
    }
}

/// Starts the thread that runs every mirror exchange and comparison, apart from the
/// forwarding runtime: its own single-threaded runtime, at a lower CPU priority, so that
/// when the machine is short of CPU the mirrors fall behind (and are skipped, counted)
/// instead of the clients' requests. Measured: docs/shadow.md, "Performance".
fn start_mirror_thread(
    rx: mpsc::Receiver<MirrorJob>,
    ctx: Arc<Ctx>,
    slots: Arc<Semaphore>,
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
                tokio::select! {
                    () = dispatch(rx, ctx, slots) => {}
                    _ = stopped => {}
                }
            });
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

async fn dispatch(mut rx: mpsc::Receiver<MirrorJob>, ctx: Arc<Ctx>, slots: Arc<Semaphore>) {
    let client = buffered_client(ctx.cfg.mirror_timeout, ctx.cfg.mirror_concurrency);
    while let Some(job) = rx.recv().await {
        // Waiting here for a slot is what fills the queue when the candidate is slow.
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
        ctx.counters.in_flight.fetch_add(1, Ordering::Relaxed);
        let ctx = ctx.clone();
        let client = client.clone();
        // Spawned on the mirror thread's own runtime (the current one here).
        tokio::spawn(async move {
            run_mirror(job, &ctx, &client).await;
            ctx.counters.in_flight.fetch_sub(1, Ordering::Relaxed);
            drop(permit);
        });
    }
}

async fn run_mirror(job: MirrorJob, ctx: &Ctx, client: &BufferedClient) {
    let cfg = &ctx.cfg;
    let limit = cfg.max_response_body;
    let cand = exchange(
        client,
        &cfg.candidate,
        &job.request,
        cfg.mirror_timeout,
        limit,
    );
    let sec = async {
        match &cfg.secondary {
            Some(s) => Some(exchange(client, s, &job.request, cfg.mirror_timeout, limit).await),
            None => None,
        }
    };
    let (cand, sec) = tokio::join!(cand, sec);
    // The primary normally finished long ago; the wait is bounded in case a client
    // stalls reading its body.
    let wait = cfg.primary_timeout + cfg.mirror_timeout;
    let primary = match tokio::time::timeout(wait, job.primary).await {
        Ok(Ok(Ok(p))) => p,
        Ok(Ok(Err(Failure::TooLarge))) => {
            ctx.recorder.skip(SkipReason::ResponseTooLarge);
            return;
        }
        _ => {
            ctx.recorder.skip(SkipReason::PrimaryIncomplete);
            return;
        }
    };
    let recorder = &ctx.recorder;
    recorder.observe(
        &job.request,
        &primary,
        cand.as_ref().map_err(|f| *f),
        sec.as_ref().map(|r| r.as_ref().map_err(|f| *f)),
    );
}

fn json_error(status: StatusCode, message: &str) -> Response<ProxyBody> {
    let body = serde_json::json!({ "error": message }).to_string();
    let mut resp = Response::new(Full::new(Bytes::from(body)).map_err(|n| match n {}).boxed());
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

fn wants_mirror(ctx: &Ctx, method: &Method, pq: &str, headers: &HeaderMap) -> bool {
    if !(ctx.cfg.mirror_unsafe || method == Method::GET || method == Method::HEAD) {
        ctx.counters
            .not_mirrored_method
            .fetch_add(1, Ordering::Relaxed);
        return false;
    }
    let sampler = &ctx.cfg.sampler;
    if sampler.keeps_all() {
        return true;
    }
    let keep = match ctx
        .cfg
        .sample_key
        .as_ref()
        .and_then(|k| k.extract(pq, headers))
    {
        Some(key) => sampler.keep(key),
        None => sampler.keep_nth(ctx.seq.fetch_add(1, Ordering::Relaxed)),
    };
    if !keep {
        ctx.counters
            .not_mirrored_sampled_out
            .fetch_add(1, Ordering::Relaxed);
    }
    keep
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

async fn handle(req: Request<Incoming>, ctx: Arc<Ctx>) -> Result<Response<ProxyBody>, Infallible> {
    ctx.counters.requests.fetch_add(1, Ordering::Relaxed);
    let (parts, mut body) = req.into_parts();
    let pq = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    let mut mirror_tx = None;
    let forward_body: ProxyBody = if wants_mirror(&ctx, &parts.method, &pq, &parts.headers) {
        match buffer_body(&mut body, ctx.cfg.max_request_body).await {
            Ok(Ok(full)) => {
                let (tx, rx) = oneshot::channel();
                let job = MirrorJob {
                    request: ShadowRequest::new(
                        parts.method.clone(),
                        pq.clone(),
                        parts.headers.clone(),
                        full.clone(),
                    ),
                    primary: rx,
                };
                match ctx.queue.try_send(job) {
                    Ok(()) => {
                        ctx.counters.mirrored.fetch_add(1, Ordering::Relaxed);
                        mirror_tx = Some(tx);
                    }
                    Err(_) => ctx.recorder.skip(SkipReason::QueueFull),
                }
                Full::new(full).map_err(|n| match n {}).boxed()
            }
            Ok(Err(prefix)) => {
                ctx.recorder.skip(SkipReason::RequestBodyTooLarge);
                PrefixedBody {
                    prefix: Some(prefix),
                    rest: body,
                }
                .boxed()
            }
            Err(e) => {
                tracing::debug!(error = %e, "client body failed");
                return Ok(json_error(
                    StatusCode::BAD_REQUEST,
                    "could not read the request body",
                ));
            }
        }
    } else {
        body.boxed()
    };

    let uri = match ctx.cfg.primary.uri(&pq) {
        Ok(u) => u,
        Err(_) => return Ok(json_error(StatusCode::BAD_REQUEST, "bad request target")),
    };
    let mut out = Request::new(forward_body);
    *out.method_mut() = parts.method;
    *out.uri_mut() = uri;
    for (k, v) in &parts.headers {
        if !is_hop_by_hop(k) {
            out.headers_mut().append(k.clone(), v.clone());
        }
    }
    let start = Instant::now();
    let resp = match tokio::time::timeout(ctx.cfg.primary_timeout, ctx.primary.request(out)).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            ctx.counters.primary_errors.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(error = %e, "primary failed");
            if let Some(tx) = mirror_tx {
                let _ = tx.send(Err(Failure::Connect));
            }
            return Ok(json_error(
                StatusCode::BAD_GATEWAY,
                "the primary did not answer",
            ));
        }
        Err(_) => {
            ctx.counters.primary_errors.fetch_add(1, Ordering::Relaxed);
            if let Some(tx) = mirror_tx {
                let _ = tx.send(Err(Failure::Timeout));
            }
            return Ok(json_error(
                StatusCode::GATEWAY_TIMEOUT,
                "the primary timed out",
            ));
        }
    };
    let (mut head, body) = resp.into_parts();
    head.headers.retain_hop_by_hop();
    let body = match mirror_tx {
        Some(tx) => TeeBody {
            inner: body,
            buf: BytesMut::new(),
            limit: ctx.cfg.max_response_body,
            over: false,
            head: Some((head.status, head.headers.clone(), start)),
            tx: Some(tx),
        }
        .boxed(),
        None => body.boxed(),
    };
    Ok(Response::from_parts(head, body))
}

trait RetainHopByHop {
    fn retain_hop_by_hop(&mut self);
}

impl RetainHopByHop for HeaderMap {
    /// Drops hop-by-hop headers (hyper frames the body itself).
    fn retain_hop_by_hop(&mut self) {
        let names: Vec<_> = self
            .keys()
            .filter(|k| is_hop_by_hop(k) && *k != http::header::HOST)
            .cloned()
            .collect();
        for n in names {
            self.remove(n);
        }
    }
}

/// A body that yields an already-read prefix, then the rest of the client's stream.
struct PrefixedBody {
    prefix: Option<Bytes>,
    rest: Incoming,
}

impl Body for PrefixedBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        if let Some(p) = self.prefix.take() {
            return Poll::Ready(Some(Ok(Frame::data(p))));
        }
        Pin::new(&mut self.rest).poll_frame(cx)
    }
}

/// The primary's body on its way to the client, copied (up to a limit) for comparison.
/// The client never waits for the copy: each frame is passed on as it arrives.
struct TeeBody {
    inner: Incoming,
    buf: BytesMut,
    limit: usize,
    over: bool,
    head: Option<(StatusCode, HeaderMap, Instant)>,
    tx: Option<oneshot::Sender<Result<ShadowResponse, Failure>>>,
}

impl TeeBody {
    fn finish(&mut self, outcome: Result<(), Failure>) {
        let Some(tx) = self.tx.take() else { return };
        let result = match (outcome, self.head.take()) {
            (Ok(()), Some((status, headers, start))) => Ok(ShadowResponse {
                status,
                headers,
                body: std::mem::take(&mut self.buf).freeze(),
                latency: start.elapsed(),
            }),
            (Err(f), _) => Err(f),
            (Ok(()), None) => Err(Failure::Aborted),
        };
        let _ = tx.send(result);
    }
}

impl Body for TeeBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref()
                    && !this.over
                    && this.tx.is_some()
                {
                    if this.buf.len() + data.len() > this.limit {
                        this.over = true;
                        this.buf = BytesMut::new();
                        this.finish(Err(Failure::TooLarge));
                    } else {
                        this.buf.extend_from_slice(data);
                    }
                }
            }
            Poll::Ready(None) => this.finish(Ok(())),
            Poll::Ready(Some(Err(_))) => this.finish(Err(Failure::Connect)),
            Poll::Pending => {}
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
            self.finish(Err(Failure::Aborted));
        }
    }
}

async fn serve_admin(listener: TcpListener, ctx: Arc<Ctx>, live: Arc<live::Live>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let ctx = ctx.clone();
        let live = live.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req: Request<Incoming>| {
                let ctx = ctx.clone();
                let live = live.clone();
                async move {
                    Ok::<_, Infallible>(admin_response(req.method(), req.uri().path(), &ctx, &live))
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}

/// A reply of the live page as a response.
fn live_response(reply: scalpel_live::Reply) -> Response<Full<Bytes>> {
    let headers = reply.headers();
    let mut resp = Response::new(Full::new(Bytes::from(reply.body.into_owned())));
    *resp.status_mut() = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::OK);
    for (name, value) in headers {
        resp.headers_mut()
            .insert(name, HeaderValue::from_static(value));
    }
    resp
}

fn admin_response(
    method: &Method,
    path: &str,
    ctx: &Ctx,
    live: &live::Live,
) -> Response<Full<Bytes>> {
    if let Some(reply) = live.page().asset(method.as_str(), path) {
        return live_response(reply);
    }
    if path == scalpel_live::SNAPSHOT_PATH {
        return live_response(live.page().snapshot(&live.snapshot(ctx)));
    }
    let (status, ct, body) = match path {
        "/metrics" => (
            StatusCode::OK,
            "text/plain; version=0.0.4",
            metrics_text(ctx),
        ),
        "/summary.json" => (
            StatusCode::OK,
            "application/json",
            serde_json::to_string_pretty(&ctx.recorder.summary()).unwrap_or_default(),
        ),
        _ => (
            StatusCode::NOT_FOUND,
            "application/json",
            r#"{"error":"not found: try / (the live page), /metrics or /summary.json"}"#
                .to_string(),
        ),
    };
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(ct));
    resp
}

fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Prometheus text exposition of the proxy's counters.
fn metrics_text(ctx: &Ctx) -> String {
    let c = &ctx.counters;
    let s = ctx.recorder.summary();
    let mut out = String::with_capacity(4096);
    let mut counter = |name: &str, help: &str, rows: Vec<(String, u64)>| {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
        for (labels, v) in rows {
            let _ = writeln!(out, "{name}{labels} {v}");
        }
    };
    let one = |v: &AtomicU64| vec![(String::new(), v.load(Ordering::Relaxed))];
    counter(
        "scalpel_shadow_requests_total",
        "Client requests proxied to the primary.",
        one(&c.requests),
    );
    counter(
        "scalpel_shadow_primary_errors_total",
        "Requests the primary did not answer (502/504 to the client).",
        one(&c.primary_errors),
    );
    counter(
        "scalpel_shadow_mirrored_total",
        "Requests queued for mirroring.",
        one(&c.mirrored),
    );
    counter(
        "scalpel_shadow_not_mirrored_total",
        "Requests not mirrored by policy.",
        vec![
            (
                "{reason=\"method\"}".into(),
                c.not_mirrored_method.load(Ordering::Relaxed),
            ),
            (
                "{reason=\"sampled_out\"}".into(),
                c.not_mirrored_sampled_out.load(Ordering::Relaxed),
            ),
        ],
    );
    counter(
        "scalpel_shadow_skipped_total",
        "Requests chosen for mirroring but not compared.",
        SkipReason::ALL
            .iter()
            .map(|r| {
                (
                    format!("{{reason=\"{}\"}}", r.as_str()),
                    s.skipped_by_reason.get(r.as_str()).copied().unwrap_or(0),
                )
            })
            .collect(),
    );
    counter(
        "scalpel_shadow_compared_total",
        "Response pairs compared.",
        vec![(String::new(), s.compared)],
    );
    counter(
        "scalpel_shadow_matched_total",
        "Pairs without a real difference.",
        vec![(String::new(), s.matched)],
    );
    counter(
        "scalpel_shadow_mismatched_total",
        "Pairs with a real difference.",
        vec![(String::new(), s.mismatched)],
    );
    counter(
        "scalpel_shadow_mirror_errors_total",
        "Mirror exchanges that failed, by side and kind.",
        s.errors_by_kind
            .iter()
            .map(|(k, v)| {
                let (side, kind) = k.split_once(':').unwrap_or((k, ""));
                (
                    format!("{{side=\"{}\",kind=\"{}\"}}", label(side), label(kind)),
                    *v,
                )
            })
            .collect(),
    );
    let mut fields = Vec::new();
    for ep in &s.endpoints {
        for (verdict, list) in [("real", &ep.fields), ("noise", &ep.noise)] {
            for f in list {
                fields.push((
                    format!(
                        "{{endpoint=\"{}\",path=\"{}\",kind=\"{}\",verdict=\"{verdict}\"}}",
                        label(&ep.endpoint),
                        label(&f.path),
                        f.kind
                    ),
                    f.count,
                ));
            }
        }
    }
    counter(
        "scalpel_shadow_field_differences_total",
        "Requests where primary and candidate differ at a field.",
        fields,
    );
    counter(
        "scalpel_shadow_store_dropped_total",
        "Store writes dropped because the writer was behind.",
        vec![(String::new(), ctx.recorder.store_dropped())],
    );
    let _ = writeln!(
        out,
        "# HELP scalpel_shadow_mirror_in_flight Mirror exchanges running now.\n# TYPE scalpel_shadow_mirror_in_flight gauge\nscalpel_shadow_mirror_in_flight {}",
        c.in_flight.load(Ordering::Relaxed)
    );
    let _ = writeln!(
        out,
        "# HELP scalpel_shadow_mirror_queue_depth Mirror jobs waiting for a slot.\n# TYPE scalpel_shadow_mirror_queue_depth gauge\nscalpel_shadow_mirror_queue_depth {}",
        ctx.queue.max_capacity() - ctx.queue.capacity()
    );
    let _ = writeln!(
        out,
        "# HELP scalpel_shadow_consistency_percent Matched pairs out of compared pairs.\n# TYPE scalpel_shadow_consistency_percent gauge\nscalpel_shadow_consistency_percent {}",
        s.consistency_percent
    );
    out
}
