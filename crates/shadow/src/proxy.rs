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
use http::header::{CONTENT_TYPE, TE};
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use scalpel_diff::{SampleKey, Sampler};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc, oneshot, watch};

use crate::ShadowError;
use crate::budget::{Budget, Charge};
use crate::client::{
    BufferedClient, ExchangeError, Upstream, accepts_trailers, buffered_client, connector,
    exchange, forwardable, head_failure, strip_hop_by_hop,
};
use crate::model::{Failure, ShadowRequest, ShadowResponse, SkipReason};
use crate::recorder::Recorder;

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
    /// Where `/metrics` (Prometheus text) and `/summary.json` are served.
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
}

/// What became of the primary's answer, for the mirror that waits for it.
enum PrimaryOutcome {
    /// The whole answer (its body within the capture limit).
    Done(ShadowResponse),
    /// The primary failed: counted as `primary:KIND`.
    Failed(Failure),
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
    primary: Client<hyper_util::client::legacy::connect::HttpConnector, ProxyBody>,
    queue: mpsc::Sender<MirrorJob>,
    recorder: Arc<Recorder>,
    counters: Arc<PathCounters>,
    budget: Arc<Budget>,
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

    /// Serves until `shutdown` completes, then stops within the mirror time-out: no new
    /// connection is accepted, open ones finish their request and close, queued mirrors
    /// are dropped and mirrors still in flight when the time is up are cancelled (both
    /// counted as `abandoned_at_shutdown`), and the counters are committed to the store.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<ProxyStats, ShadowError> {
        let cfg = self.cfg.clone();
        let (tx, rx) = mpsc::channel(cfg.queue.max(1));
        let primary = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector(cfg.primary_timeout));
        let counters = Arc::new(PathCounters::default());
        let ctx = Arc::new(Ctx {
            cfg: cfg.clone(),
            primary,
            queue: tx,
            recorder: self.recorder.clone(),
            counters: counters.clone(),
            budget: Budget::new(cfg.mirror_budget),
            seq: AtomicU64::new(0),
        });
        let (closing_tx, closing) = watch::channel(false);
        let slots = Arc::new(Semaphore::new(cfg.mirror_concurrency.max(1)));
        let (stop_mirrors, mirror_thread) =
            start_mirror_thread(rx, ctx.clone(), slots, closing.clone())?;
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
        let admin = self
            .admin
            .map(|l| tokio::spawn(serve_admin(l, ctx.clone())));

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
                    tokio::spawn(serve_client(stream, ctx.clone(), closing.clone()));
                }
            }
        }
        let stop_started = Instant::now();
        // Everything below fits in the mirror time-out: the docs promise no more.
        let deadline = stop_started + cfg.mirror_timeout;
        drop(self.listener);
        let _ = closing_tx.send(true);
        tracing::info!(
            in_flight = counters.in_flight.load(Ordering::Relaxed),
            wait = ?cfg.mirror_timeout,
            "shutting down: queued mirrors dropped, waiting for mirrors in flight"
        );
        while Instant::now() < deadline
            && (counters.in_flight.load(Ordering::Relaxed) > 0
                || counters.connections.load(Ordering::Relaxed) > 0)
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        flusher.abort();
        let _ = stop_mirrors.send(());
        // Joining drops the mirror runtime's tasks: what is still in flight is counted
        // as abandoned before the final commit.
        let _ = tokio::task::spawn_blocking(move || mirror_thread.join()).await;
        if let Some(a) = admin {
            a.abort();
        }
        let recorder = self.recorder.clone();
        let _ = tokio::task::spawn_blocking(move || recorder.flush_and_sync()).await;
        Ok(ProxyStats {
            requests: counters.requests.load(Ordering::Relaxed),
            chosen: counters.chosen.load(Ordering::Relaxed),
            mirrored: counters.mirrored.load(Ordering::Relaxed),
            shutdown: stop_started.elapsed(),
        })
    }
}

/// Returns once the proxy is shutting down.
async fn until_closing(closing: &mut watch::Receiver<bool>) {
    // The guard `wait_for` returns is dropped here, before any other await.
    let _ = closing.wait_for(|c| *c).await;
}

/// One client connection. At shutdown it finishes the request in progress and closes.
async fn serve_client(stream: TcpStream, ctx: Arc<Ctx>, mut closing: watch::Receiver<bool>) {
    let counters = ctx.counters.clone();
    let client_timeout = ctx.cfg.client_timeout;
    counters.connections.fetch_add(1, Ordering::Relaxed);
    let svc = service_fn(move |req| handle(req, ctx.clone()));
    let mut builder = hyper::server::conn::http1::Builder::new();
    // The client must see the primary's headers, not ours: no `date` the primary did
    // not send.
    builder.auto_date_header(false);
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(client_timeout);
    let conn = builder.serve_connection(TokioIo::new(stream), svc);
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
    counters.connections.fetch_sub(1, Ordering::Relaxed);
}

/// Starts the thread that runs every mirror exchange and comparison, apart from the
/// forwarding runtime: its own single-threaded runtime, at a lower CPU priority, so that
/// when the machine is short of CPU the mirrors fall behind (and are skipped, counted)
/// instead of the clients' requests. Measured: docs/shadow.md, "Performance".
fn start_mirror_thread(
    rx: mpsc::Receiver<MirrorJob>,
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
    let client = buffered_client(ctx.cfg.mirror_timeout, ctx.cfg.mirror_concurrency);
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
        let client = client.clone();
        // Spawned on the mirror thread's own runtime (the current one here).
        tokio::spawn(async move {
            run_mirror(job, &ctx, &client).await;
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

async fn run_mirror(job: MirrorJob, ctx: &Ctx, client: &BufferedClient) {
    let cfg = &ctx.cfg;
    let limit = cfg.max_response_body;
    let budget = Some(&ctx.budget);
    let cand = exchange(
        client,
        &cfg.candidate,
        &job.request,
        cfg.mirror_timeout,
        limit,
        budget,
    );
    let sec = async {
        match &cfg.secondary {
            Some(s) => {
                Some(exchange(client, s, &job.request, cfg.mirror_timeout, limit, budget).await)
            }
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
    fn side(r: &Result<ShadowResponse, ExchangeError>) -> Option<Result<&ShadowResponse, Failure>> {
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
        let read = buffer_body(&mut body, ctx.cfg.max_request_body);
        let Ok(read) = tokio::time::timeout(ctx.cfg.client_timeout, read).await else {
            ctx.counters.client_timeouts.fetch_add(1, Ordering::Relaxed);
            return Ok(json_error(
                StatusCode::REQUEST_TIMEOUT,
                "client_timeout",
                "the request body did not arrive within the client time-out",
            ));
        };
        match read {
            Ok(Ok(full)) => {
                ctx.counters.chosen.fetch_add(1, Ordering::Relaxed);
                mirror_tx = queue_mirror(&ctx, &parts.method, &pq, &parts.headers, &full);
                Full::new(full).map_err(|n| match n {}).boxed()
            }
            Ok(Err(prefix)) => {
                ctx.counters.chosen.fetch_add(1, Ordering::Relaxed);
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
                    "bad_request",
                    "could not read the request body",
                ));
            }
        }
    } else {
        body.boxed()
    };

    let uri = match ctx.cfg.primary.uri(&pq) {
        Ok(u) => u,
        Err(_) => {
            if let Some(tx) = mirror_tx {
                let _ = tx.send(PrimaryOutcome::Skipped(SkipReason::PrimaryIncomplete));
            }
            return Ok(json_error(
                StatusCode::BAD_REQUEST,
                "bad_request",
                "bad request target",
            ));
        }
    };
    let mut out = Request::new(forward_body);
    *out.method_mut() = parts.method;
    *out.uri_mut() = uri;
    *out.headers_mut() = forwardable(&parts.headers);
    // `TE` is hop-by-hop, but a client that accepts trailers can only get them if the
    // primary is told this hop accepts them too (the proxy passes them on).
    if accepts_trailers(&parts.headers) {
        out.headers_mut()
            .insert(TE, HeaderValue::from_static("trailers"));
    }
    // hyper's server has no way to send an interim response, so a 103 Early Hints (or
    // any 1xx) from the primary cannot be passed on; it is counted, not lost silently.
    let counters = ctx.counters.clone();
    hyper::ext::on_informational(&mut out, move |_| {
        counters
            .informational_dropped
            .fetch_add(1, Ordering::Relaxed);
    });
    let start = Instant::now();
    let resp = match tokio::time::timeout(ctx.cfg.primary_timeout, ctx.primary.request(out)).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            ctx.counters.primary_errors.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(error = %e, "primary failed");
            if let Some(tx) = mirror_tx {
                let _ = tx.send(PrimaryOutcome::Failed(head_failure(&e)));
            }
            let kind = head_failure(&e);
            return Ok(json_error(
                StatusCode::BAD_GATEWAY,
                &format!("primary_{}", kind.as_str()),
                "the primary did not answer",
            ));
        }
        Err(_) => {
            ctx.counters.primary_errors.fetch_add(1, Ordering::Relaxed);
            if let Some(tx) = mirror_tx {
                let _ = tx.send(PrimaryOutcome::Failed(Failure::Timeout));
            }
            return Ok(json_error(
                StatusCode::GATEWAY_TIMEOUT,
                "primary_timeout",
                "the primary did not answer within the primary time-out",
            ));
        }
    };
    let (mut head, body) = resp.into_parts();
    // hyper frames the body itself; `Trailer` stays (it is end to end).
    strip_hop_by_hop(&mut head.headers);
    let body = match mirror_tx {
        Some(tx) => TeeBody {
            inner: body,
            buf: BytesMut::new(),
            limit: ctx.cfg.max_response_body,
            charge: ctx.budget.charge(),
            head: Some((head.status, head.headers.clone(), start)),
            tx: Some(tx),
        }
        .boxed(),
        None => body.boxed(),
    };
    Ok(Response::from_parts(head, body))
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

/// The primary's body on its way to the client, copied (up to a limit, within the
/// mirror byte budget) for comparison. The client never waits for the copy: each frame
/// is passed on as it arrives.
struct TeeBody {
    inner: Incoming,
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
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
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
            // The head came; the body broke (cut short, a bad chunk).
            Poll::Ready(Some(Err(_))) => this.finish(Err(PrimaryOutcome::Failed(Failure::Body))),
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

/// A scraper has this long to send its request head.
const ADMIN_HEADER_TIMEOUT: Duration = Duration::from_secs(10);

async fn serve_admin(listener: TcpListener, ctx: Arc<Ctx>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let ctx = ctx.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req: Request<Incoming>| {
                let ctx = ctx.clone();
                async move { Ok::<_, Infallible>(admin_response(req.uri().path(), &ctx)) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(ADMIN_HEADER_TIMEOUT)
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}

fn admin_response(path: &str, ctx: &Ctx) -> Response<Full<Bytes>> {
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
            r#"{"error":"not found: try /metrics or /summary.json"}"#.to_string(),
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
        "scalpel_shadow_chosen_total",
        "Requests chosen for comparison; each ends in compared, failed or skipped.",
        one(&c.chosen),
    );
    counter(
        "scalpel_shadow_mirrored_total",
        "Chosen requests queued for the candidate.",
        one(&c.mirrored),
    );
    counter(
        "scalpel_shadow_client_timeouts_total",
        "Requests whose body did not arrive within the client time-out (408).",
        one(&c.client_timeouts),
    );
    counter(
        "scalpel_shadow_informational_dropped_total",
        "1xx interim responses (103 Early Hints…) of the primary not passed on.",
        one(&c.informational_dropped),
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
        "scalpel_shadow_failed_total",
        "Chosen requests not compared because the primary or the candidate failed.",
        vec![(String::new(), s.errors)],
    );
    counter(
        "scalpel_shadow_mirror_errors_total",
        "Failed sides of chosen requests, by side and kind (both sides when both failed).",
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
    counter(
        "scalpel_shadow_store_failed_total",
        "Store transactions SQLite refused (disk full, file locked).",
        vec![(String::new(), ctx.recorder.store_failed())],
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
    let mut gauge = |name: &str, help: &str, v: String| {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
    };
    let b = &ctx.budget;
    gauge(
        "scalpel_shadow_mirror_bytes",
        "Bytes of bodies held now for queued and in-flight mirrors.",
        b.used().to_string(),
    );
    gauge(
        "scalpel_shadow_mirror_bytes_peak",
        "The most bytes ever held at once for mirrors.",
        b.peak().to_string(),
    );
    gauge(
        "scalpel_shadow_mirror_budget_bytes",
        "The mirror byte budget (--mirror-budget).",
        b.limit().to_string(),
    );
    gauge(
        "scalpel_shadow_client_connections",
        "Client connections open now.",
        c.connections.load(Ordering::Relaxed).to_string(),
    );
    gauge(
        "scalpel_shadow_consistency_percent",
        "Matched pairs out of compared pairs.",
        s.consistency_percent.to_string(),
    );
    gauge(
        "scalpel_shadow_coverage_percent",
        "Compared requests out of chosen ones (the rest failed or were skipped).",
        s.coverage_percent.to_string(),
    );
    out
}
