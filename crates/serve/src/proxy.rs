//! The request path: route → arm → pool → selection → worker, with the proxy duties of
//! RFC 9110 §7.6 (hop-by-hop headers, `X-Forwarded-For`, `Via`), limits, one resend of
//! a request its worker never took (never sent, still unread when the worker was reset,
//! closed or ejected; idempotent ones only, unless it never left), and JSON errors. A
//! request its worker took — read, then stalled on, died with, or began to answer — is
//! never resent: it may be a poison request, and a resend would carry it to a healthy
//! worker.
//!
//! Per-request phases, in order: `route` (which route and arm), `request_filter`
//! (limits, headers), `upstream` (select, send, maybe retry), `response_filter`
//! (headers back), then `finish` (metrics, when the body ends).

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;

use crate::config::{RouteConfig, ServerConfig};
use crate::h1::Outgoing;
use crate::metrics::{AppMetrics, NotResent};
use crate::mirror::{Mirror, MirrorQueue, Tee};
use crate::pool::{Backend, Eject, InFlight, Refused, fast_random};
use crate::sticky;
use crate::supervisor::App;
use crate::tunnel;
use crate::upstream::{Answer, Attempt, UpstreamBody, UpstreamError, Upstreams};

/// Worker bodies up to this size (by `Content-Length`) are read whole before the
/// response goes out; larger or chunked ones stream.
const BUFFER_BODY_BYTES: u64 = 64 * 1024;

/// A route at run time: its rule and a request counter per arm.
#[derive(Debug)]
pub(crate) struct Route {
    pub(crate) cfg: RouteConfig,
    pub(crate) mirror: Option<Arc<Mirror>>,
    total_weight: u64,
    /// Shared with the route of the config before a live reload that kept this route
    /// and arm (same rule, same app): a Prometheus counter must never go down, and a
    /// request that picked its route in the old table still counts here.
    pub(crate) arm_requests: Vec<Arc<AtomicU64>>,
}

impl Route {
    pub(crate) fn new(cfg: RouteConfig) -> Result<Self, scalpel_shadow::ShadowError> {
        let mirror = match &cfg.mirror {
            Some(m) => Some(Arc::new(Mirror::new(m, &cfg.prefix)?)),
            None => None,
        };
        Ok(Self::with_mirror(cfg, mirror))
    }

    /// A route whose mirror, if any, is `mirror` (kept from before a live reload).
    pub(crate) fn with_mirror(cfg: RouteConfig, mirror: Option<Arc<Mirror>>) -> Self {
        Self {
            mirror,
            total_weight: cfg.arms.iter().map(|a| a.1).sum(),
            arm_requests: cfg.arms.iter().map(|_| Arc::default()).collect(),
            cfg,
        }
    }

    /// Takes over the counters of the route of the config before a reload with the same
    /// rule (prefix, method, header): arm by arm, where the arm goes to the same app
    /// (`app_name` of an arm's app index; `old_app_name` for `old`'s). A new arm starts
    /// at zero; the counters of an arm or route the reload removed go with it.
    pub(crate) fn carry_counters<'a>(
        &mut self,
        app_name: impl Fn(usize) -> Option<&'a str>,
        old: &Route,
        old_app_name: impl Fn(usize) -> Option<&'a str>,
    ) {
        for (i, &(app, _)) in self.cfg.arms.iter().enumerate() {
            let Some(name) = app_name(app) else {
                continue;
            };
            if let Some(ai) = old
                .cfg
                .arms
                .iter()
                .position(|&(o, _)| old_app_name(o) == Some(name))
            {
                self.arm_requests[i] = old.arm_requests[ai].clone();
            }
        }
    }

    /// Same rule: what makes a route "the same route" across a reload.
    pub(crate) fn same_rule(&self, other: &Route) -> bool {
        self.cfg.prefix == other.cfg.prefix
            && self.cfg.method == other.cfg.method
            && self.cfg.header == other.cfg.header
    }

    fn matches(&self, method: &Method, path: &str, headers: &HeaderMap) -> bool {
        let p = &self.cfg.prefix;
        let prefix_ok = path.starts_with(p.as_str())
            && (p.ends_with('/') || path.len() == p.len() || path.as_bytes()[p.len()] == b'/');
        prefix_ok
            && self.cfg.method.as_ref().is_none_or(|m| m == method)
            && self.cfg.header.as_ref().is_none_or(|(name, value)| {
                headers.get_all(name).iter().any(|v| {
                    value
                        .as_ref()
                        .is_none_or(|want| v.to_str().is_ok_and(|v| v.trim() == want))
                })
            })
    }

    /// Index into `cfg.arms`: by the sticky key's hash when present, else at random,
    /// in proportion to the weights.
    fn pick_arm(&self, src: &sticky::Source<'_>) -> usize {
        if self.cfg.arms.len() == 1 {
            return 0;
        }
        let key = self.cfg.sticky.as_ref().and_then(|k| sticky::hash(k, src));
        let roll = key.unwrap_or_else(fast_random) % self.total_weight;
        let mut acc = 0;
        for (i, &(_, w)) in self.cfg.arms.iter().enumerate() {
            acc += w;
            if roll < acc {
                return i;
            }
        }
        self.cfg.arms.len() - 1
    }
}

/// Everything the request path reads; built once, shared by every connection.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) cfg: ServerConfig,
    /// The apps, routes and `[server]` limits in use; a live reload swaps the whole
    /// table, so a request sees one config from its route to its worker.
    pub(crate) table: ArcSwap<Table>,
    /// The mirror thread's queue, when a route mirrors.
    pub(crate) mirror_queue: Option<MirrorQueue>,
    pub(crate) rejected: Rejected,
    pub(crate) connections: Arc<crate::server::ConnCount>,
    /// The client listener's certificates (`[server.tls]`), reloaded on SIGHUP.
    pub(crate) tls: Option<crate::tls::Endpoint>,
    /// The admin address's certificates (`[server.admin_tls]`).
    pub(crate) admin_tls: Option<crate::tls::Endpoint>,
    /// The config in use and what a live reload starts new apps with.
    pub(crate) running: crate::server::Running,
}

/// The apps and routes of one config generation (routes name apps by index).
#[derive(Debug)]
pub(crate) struct Table {
    /// Counts the live reloads applied (0: the config read at start).
    pub(crate) generation: u64,
    pub(crate) apps: Vec<Arc<App>>,
    pub(crate) routes: Vec<Route>,
    /// The `[server]` section of this generation: its limits and time-outs are read per
    /// request (and per connection) from here, so a reload changes them live. Listeners,
    /// threads and buffers sized at start are read from `Shared::cfg` (a reload refuses
    /// changing them).
    pub(crate) server: Arc<ServerConfig>,
}

/// Requests and connections refused before reaching an app, by reason.
#[derive(Debug, Default)]
pub(crate) struct Rejected {
    pub(crate) no_route: AtomicU64,
    pub(crate) too_large: AtomicU64,
    /// Request bodies not received within `body_read_timeout` (408).
    pub(crate) body_timeout: AtomicU64,
    /// Request heads not received within `header_read_timeout` (408).
    pub(crate) header_timeout: AtomicU64,
    /// Connections over `max_connections` (503).
    pub(crate) too_many_connections: AtomicU64,
}

/// Who sent a request: the peer's address (for `X-Forwarded-For`) and whether it is a
/// trusted proxy; worked out once per connection.
#[derive(Debug)]
pub(crate) struct Client {
    pub(crate) ip: Arc<str>,
    pub(crate) trusted: bool,
    /// The connection came over TLS (`X-Forwarded-Proto: https` unless a trusted proxy
    /// said otherwise).
    pub(crate) https: bool,
}

/// The balancer's response body: an error or a worker's body, which ends the request's
/// accounting (in flight, latency) when it finishes or is dropped.
#[derive(Debug)]
pub(crate) enum ProxyBody {
    Full(Option<Bytes>),
    /// A small worker body, read whole before the head goes out.
    Buffered {
        data: Option<Bytes>,
        _finish: Finish,
    },
    /// A worker body streamed as it arrives; its connection goes back to the pool at
    /// the end.
    Upstream {
        /// Bytes already read from `body`, sent first.
        first: Option<Bytes>,
        body: UpstreamBody,
        finish: Finish,
        tee: Option<Box<Tee>>,
    },
}

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = UpstreamError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, UpstreamError>>> {
        match self.get_mut() {
            ProxyBody::Full(b) | ProxyBody::Buffered { data: b, .. } => {
                Poll::Ready(b.take().map(|b| Ok(Frame::data(b))))
            }
            ProxyBody::Upstream {
                first,
                body,
                tee,
                finish,
            } => {
                if let Some(b) = first.take() {
                    return Poll::Ready(Some(Ok(Frame::data(b))));
                }
                let r = body.poll_data(cx);
                if let Poll::Ready(Some(Ok(_))) = &r {
                    // A streaming body is the worker's progress, not a stall.
                    finish.in_flight.backend().body_progress();
                }
                if let Some(t) = tee {
                    match &r {
                        Poll::Ready(Some(Ok(d))) => {
                            t.data(d);
                            if body.is_end() {
                                t.end();
                            }
                        }
                        Poll::Ready(None) => t.end(),
                        Poll::Ready(Some(Err(_))) => t.fail(),
                        Poll::Pending => {}
                    }
                }
                r.map(|o| o.map(|r| r.map(Frame::data)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ProxyBody::Full(b) | ProxyBody::Buffered { data: b, .. } => b.is_none(),
            ProxyBody::Upstream { first, body, .. } => first.is_none() && body.is_end(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ProxyBody::Full(b) | ProxyBody::Buffered { data: b, .. } => {
                SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64))
            }
            ProxyBody::Upstream { first, body, .. } => {
                let n = first.as_ref().map_or(0, |b| b.len() as u64);
                match body.remaining() {
                    Some(rest) => SizeHint::with_exact(n + rest),
                    None => {
                        let mut h = SizeHint::new();
                        h.set_lower(n);
                        h
                    }
                }
            }
        }
    }
}

/// Ends a forwarded request: the worker's in-flight count and the arm's latency.
#[derive(Debug)]
pub(crate) struct Finish {
    in_flight: InFlight,
    metrics: Arc<AppMetrics>,
    start: Instant,
}

impl Drop for Finish {
    fn drop(&mut self) {
        self.metrics.record_latency(self.start.elapsed());
    }
}

/// The toolkit's one JSON error body (`scalpel_http::error_body`, the one shadow answers
/// with): `{"error":"<kind>","detail":"<text>"}`, a stable short kind for scripts and a
/// detail for people. The kinds serve answers with are listed in docs/serve.md.
pub(crate) fn json_error(status: StatusCode, kind: &str, detail: &str) -> Response<ProxyBody> {
    scalpel_http::error_response(status, kind, detail).map(|b| ProxyBody::Full(Some(b)))
}

/// A JSON error after which the client connection closes (its request was not read
/// whole, so the connection is out of step).
fn json_error_closing(status: StatusCode, kind: &str, detail: &str) -> Response<ProxyBody> {
    let mut res = json_error(status, kind, detail);
    res.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    res
}

fn idempotent(m: &Method) -> bool {
    matches!(
        *m,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE
    )
}

/// What became of a request the worker had (or may have had) taken.
// Lives for a moment on one request's stack: boxing the answer would cost an allocation
// per request.
#[allow(clippy::large_enum_variant)]
enum Outcome {
    /// The exchange finished (answered, failed, or timed out).
    Done(Result<Result<(Answer, Bytes), UpstreamError>, tokio::time::error::Elapsed>),
    /// The supervisor took the worker off this request; `taken`: the worker had read it.
    Ejected { taken: bool },
}

impl Shared {
    /// What a sticky key of `req` is read from.
    fn sticky_source<'a>(
        lim: &'a ServerConfig,
        client: &'a Client,
        req: &'a Request<Incoming>,
    ) -> sticky::Source<'a> {
        sticky::Source {
            path: req.uri().path(),
            headers: req.headers(),
            peer: &client.ip,
            trusted: client.trusted,
            trusted_proxies: &lim.trusted_proxies,
        }
    }

    /// Phase `route`: the route's index (or `None` when no route matches; with no routes
    /// configured, everything goes to the first app).
    fn route(table: &Table, req: &Request<Incoming>) -> Result<Option<usize>, ()> {
        if table.routes.is_empty() {
            return Ok(None);
        }
        let path = req.uri().path();
        table
            .routes
            .iter()
            .position(|r| r.matches(req.method(), path, req.headers()))
            .map(Some)
            .ok_or(())
    }

    /// Serves one client request on the calling data-plane thread, whose connections to
    /// the workers are `up`.
    pub(crate) async fn handle(
        self: &Arc<Self>,
        up: &Arc<Upstreams>,
        client: &Client,
        req: Request<Incoming>,
    ) -> Response<ProxyBody> {
        // One load of the table: the route and its app come from the same config, and
        // the request keeps its app (and mirror) even if a reload swaps the table.
        let table = self.table.load();
        let (app_index, mirror) = match Self::route(&table, &req) {
            // No routes: the first proxy app (a direct app has its own address).
            Ok(None) => match table.apps.iter().position(|a| a.cfg.listen.is_none()) {
                Some(i) => (i, None),
                None => {
                    self.rejected.no_route.fetch_add(1, Ordering::Relaxed);
                    return json_error(
                        StatusCode::NOT_FOUND,
                        "no_route",
                        "no proxy app here: every app is mode = \"direct\" and listens on its own address",
                    );
                }
            },
            Ok(Some(r)) => {
                let route = &table.routes[r];
                let arm = route.pick_arm(&Self::sticky_source(&table.server, client, &req));
                route.arm_requests[arm].fetch_add(1, Ordering::Relaxed);
                (route.cfg.arms[arm].0, route.mirror.clone())
            }
            Err(()) => {
                self.rejected.no_route.fetch_add(1, Ordering::Relaxed);
                let msg = format!("no route for {} {}", req.method(), req.uri().path());
                return json_error(StatusCode::NOT_FOUND, "no_route", &msg);
            }
        };
        let app = table.apps[app_index].clone();
        // The limits stay those of the request's own generation, whatever reloads follow.
        let lim = table.server.clone();
        drop(table);
        app.metrics.requests.fetch_add(1, Ordering::Relaxed);
        let res = self
            .forward(up, &app, &lim, mirror.as_ref(), client, req)
            .await;
        if res.status().is_server_error() {
            app.metrics.errors.fetch_add(1, Ordering::Relaxed);
        }
        res
    }

    async fn forward(
        self: &Arc<Self>,
        up: &Arc<Upstreams>,
        app: &App,
        lim: &ServerConfig,
        mirror: Option<&Arc<Mirror>>,
        client: &Client,
        req: Request<Incoming>,
    ) -> Response<ProxyBody> {
        let start = Instant::now();
        // Phase `request_filter`: limits and headers.
        let mut req = req;
        let upgrade = upgrade_asked(&req);
        let on_upgrade = upgrade.is_some().then(|| hyper::upgrade::on(&mut req));
        let (mut parts, body) = req.into_parts();
        let max = lim.max_body_bytes;
        // The body's length as hyper framed it (a chunked body has none), never the
        // client's own header: with both `Content-Length` and `Transfer-Encoding`, the
        // chunked framing is the one that counts (RFC 9112 §6.3).
        if body.size_hint().lower() > max {
            self.rejected.too_large.fetch_add(1, Ordering::Relaxed);
            return json_error_closing(
                StatusCode::PAYLOAD_TOO_LARGE,
                "too_large",
                &format!("request body over the {max}-byte limit"),
            );
        }
        // Bodies are buffered (bounded in size and in time) so a failed attempt can be
        // sent again, and a slow client holds no worker while it trickles.
        let body = if body.is_end_stream() {
            Bytes::new()
        } else {
            let read = Limited::new(body, max as usize).collect();
            match tokio::time::timeout(lim.body_read_timeout, read).await {
                Ok(Ok(c)) => c.to_bytes(),
                Ok(Err(e)) => {
                    return if e.is::<http_body_util::LengthLimitError>() {
                        self.rejected.too_large.fetch_add(1, Ordering::Relaxed);
                        json_error_closing(
                            StatusCode::PAYLOAD_TOO_LARGE,
                            "too_large",
                            &format!("request body over the {max}-byte limit"),
                        )
                    } else {
                        json_error_closing(
                            StatusCode::BAD_REQUEST,
                            "bad_request",
                            &format!("reading request body: {e}"),
                        )
                    };
                }
                Err(_) => {
                    self.rejected.body_timeout.fetch_add(1, Ordering::Relaxed);
                    return json_error_closing(
                        StatusCode::REQUEST_TIMEOUT,
                        "client_timeout",
                        &format!(
                            "request body not received within {}",
                            scalpel_units::format_duration(lim.body_read_timeout)
                        ),
                    );
                }
            }
        };
        // An HTTP/2 request names its host in `:authority` only; a worker reads `Host`.
        if !parts.headers.contains_key(header::HOST)
            && let Some(host) = parts
                .uri
                .authority()
                .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
        {
            parts.headers.insert(header::HOST, host);
        }
        // Workers get origin form (`/path?query`); a client's absolute form is reduced.
        let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let method = parts.method;
        let retry_ok = lim.retry_idempotent && idempotent(&method);
        let out = Outgoing {
            method: &method,
            target,
            headers: &parts.headers,
            client_ip: &client.ip,
            body: &body,
            upgrade: upgrade.as_ref(),
            trusted: client.trusted,
            https: client.https,
        };
        // A switched connection is not a response a mirror could compare.
        let mut tee = match (mirror, &self.mirror_queue) {
            (Some(m), Some(queue)) if upgrade.is_none() => m.begin(queue, &out),
            _ => None,
        };

        // Phase `upstream`.
        let worker_key = app.cfg.sticky_worker.as_ref().and_then(|k| {
            let src = sticky::Source {
                path: parts.uri.path(),
                headers: &parts.headers,
                peer: &client.ip,
                trusted: client.trusted,
                trusted_proxies: &lim.trusted_proxies,
            };
            sticky::hash(k, &src)
        });
        let mut avoid: Option<Arc<Backend>> = None;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let in_flight = if app.pool.limited() {
                // `max_in_flight_per_worker`: a slot on a worker, from the app's queue.
                match app
                    .pool
                    .acquire(avoid.as_ref(), lim.wait_for_worker, app.cfg.queue_timeout)
                    .await
                {
                    Ok(f) => f,
                    Err(why) => return self.refused(app, why),
                }
            } else {
                match app
                    .pool
                    .select_wait(avoid.as_deref(), worker_key, lim.wait_for_worker)
                    .await
                {
                    Some(b) => app.pool.begin(&b),
                    None => return self.refused(app, Refused::NoWorker),
                }
            };
            let backend = in_flight.backend().clone();
            // Formatted only when needed (errors): not on the request path.
            let name = || format!("{}#{}", app.cfg.name, backend.index());
            let track = Attempt::default();
            let outcome = {
                let exchange = async {
                    let mut answer = up.send(backend.addr(), &out, &track).await?;
                    in_flight.head_received();
                    // Phase `response_filter` (hop-by-hop headers were left out already).
                    // A small declared body is read whole (one write to the client);
                    // otherwise what is here goes first and the rest streams.
                    let small = answer
                        .body
                        .remaining()
                        .is_some_and(|n| n <= BUFFER_BODY_BYTES);
                    let first = if small {
                        answer.body.read_to_end().await?
                    } else {
                        answer.body.take_buffered()?
                    };
                    Ok::<_, UpstreamError>((answer, first))
                };
                let timed = tokio::time::timeout(lim.upstream_timeout, exchange);
                tokio::pin!(timed);
                // The supervisor may take the worker off its requests meanwhile: all of them
                // (it is stuck and being stopped; no answer will come — dropping the
                // exchange closes its connection), or only the ones it has not read (a
                // `prestart` successor took over; a request it had read may still be
                // answered, as may one that cannot be resent).
                let mut wait_for = Eject::Queued;
                loop {
                    tokio::select! {
                        r = &mut timed => break Outcome::Done(r),
                        level = backend.ejected(wait_for) => {
                            let taken = track.received() || backend.took(&track);
                            // Under a partial ejection, only what can go elsewhere leaves.
                            if level == Eject::All || (!taken && attempt == 1 && retry_ok) {
                                break Outcome::Ejected { taken };
                            }
                            wait_for = Eject::All;
                        }
                    }
                }
            };
            match outcome {
                Outcome::Done(Ok(Ok((answer, _)))) if answer.switched.is_some() => {
                    let finish = Finish {
                        in_flight,
                        metrics: app.metrics.clone(),
                        start,
                    };
                    return self.switch(app, lim.tunnel_idle_timeout, answer, on_upgrade, finish);
                }
                Outcome::Done(Ok(Ok((answer, first)))) => {
                    let ended = answer.body.is_end();
                    let tee = tee.take().map(|mut t| {
                        let max = lim.max_body_bytes as usize;
                        t.head(answer.status, answer.headers.clone(), max, start);
                        t.data(&first);
                        if ended {
                            t.end();
                        }
                        Box::new(t)
                    });
                    let finish = Finish {
                        in_flight,
                        metrics: app.metrics.clone(),
                        start,
                    };
                    let first = Some(first).filter(|b| !b.is_empty());
                    let body = if ended {
                        ProxyBody::Buffered {
                            data: first,
                            _finish: finish,
                        }
                    } else {
                        ProxyBody::Upstream {
                            first,
                            body: answer.body,
                            finish,
                            tee,
                        }
                    };
                    let mut res = Response::new(body);
                    *res.status_mut() = answer.status;
                    *res.headers_mut() = answer.headers;
                    return res;
                }
                Outcome::Done(Ok(Err(e))) => {
                    // Never resent once the worker sent any byte: it took the request.
                    // Reset before any byte: its kernel still held (part of) the request
                    // unread. End of file before any byte: a worker that has begun to
                    // exit took it with it; one that lives closed a kept-alive connection
                    // as the request arrived (its keep-alive time-out), unread.
                    let verdict =
                        if e.never_sent() || (!track.received() && e.is_connection_reset()) {
                            Ok(())
                        } else if track.received() {
                            Err(NotResent::Answered)
                        } else if scalpel_procstat::process_ended(backend.pid()) {
                            Err(NotResent::Exited)
                        } else {
                            Ok(())
                        };
                    match verdict {
                        Ok(()) if attempt == 1 && (e.never_sent() || retry_ok) => {
                            app.metrics.retries.fetch_add(1, Ordering::Relaxed);
                            tracing::debug!(worker = %name(), error = %e, "resending on another worker");
                            avoid = Some(in_flight.backend().clone());
                            continue;
                        }
                        Ok(()) => {
                            // The kind is the codec's (`connect`, `reset`, `protocol`, …),
                            // named as load and shadow name it.
                            let kind = e.kind();
                            return json_error(
                                kind.gateway_status(),
                                kind.name(),
                                &format!("worker {} failed: {e}", name()),
                            );
                        }
                        Err(why) => {
                            return self.not_resent(app, &name(), &method, target, why, Some(&e));
                        }
                    }
                }
                Outcome::Done(Err(_)) => {
                    let msg = format!(
                        "worker {} did not answer within {}",
                        name(),
                        scalpel_units::format_duration(lim.upstream_timeout)
                    );
                    return json_error(StatusCode::GATEWAY_TIMEOUT, "timeout", &msg);
                }
                Outcome::Ejected { taken } => {
                    if taken {
                        return self.not_resent(
                            app,
                            &name(),
                            &method,
                            target,
                            NotResent::Stalled,
                            None,
                        );
                    }
                    // Only queued behind whatever stopped the worker: it never read this
                    // one.
                    if attempt == 1 && retry_ok {
                        app.metrics.retries.fetch_add(1, Ordering::Relaxed);
                        avoid = Some(backend.clone());
                        continue;
                    }
                    return json_error(
                        StatusCode::BAD_GATEWAY,
                        "worker_stopped",
                        &format!(
                            "worker {} stopped answering before reading this request, \
                             which is not resent ({})",
                            name(),
                            if attempt > 1 {
                                "it was resent once already"
                            } else if !lim.retry_idempotent {
                                "retry_idempotent is off"
                            } else {
                                "its method is not idempotent"
                            }
                        ),
                    );
                }
            }
        }
    }

    /// No worker slot for the request: none ready within `wait_for_worker` (503
    /// `no_worker`), or — with `max_in_flight_per_worker` — the queue full (503
    /// `queue_full`, `Retry-After: 1`) or no slot within `queue_timeout` (503
    /// `queue_timeout`). Counted per app.
    fn refused(&self, app: &App, why: Refused) -> Response<ProxyBody> {
        let name = &app.cfg.name;
        match why {
            Refused::NoWorker => {
                app.metrics.no_worker.fetch_add(1, Ordering::Relaxed);
                json_error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "no_worker",
                    &format!("no ready worker for app `{name}`"),
                )
            }
            Refused::QueueFull => {
                app.metrics.queue_full.fetch_add(1, Ordering::Relaxed);
                let mut res = json_error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "queue_full",
                    &format!(
                        "every worker of app `{name}` has max_in_flight_per_worker = {} requests \
                         and {} more wait (max_queued)",
                        app.cfg.max_in_flight_per_worker, app.cfg.max_queued
                    ),
                );
                res.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
                res
            }
            Refused::QueueTimeout => {
                app.metrics.queue_timeout.fetch_add(1, Ordering::Relaxed);
                json_error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "queue_timeout",
                    &format!(
                        "no worker of app `{name}` had a free slot within {} (queue_timeout)",
                        scalpel_units::format_duration(app.cfg.queue_timeout)
                    ),
                )
            }
        }
    }

    /// A request its worker took and then did not answer (whole): answered here, never
    /// resent — it may be what broke the worker, and another worker would go the same
    /// way — and logged and counted.
    fn not_resent(
        &self,
        app: &App,
        worker: &str,
        method: &Method,
        target: &str,
        why: NotResent,
        error: Option<&UpstreamError>,
    ) -> Response<ProxyBody> {
        app.metrics.not_resent(why);
        let path = target.split('?').next().unwrap_or(target);
        tracing::warn!(
            app = %app.cfg.name,
            worker,
            method = %method,
            path,
            reason = why.name(),
            error = error.map(|e| e.to_string()).unwrap_or_default(),
            "request not resent: its worker took it and {}",
            why.what()
        );
        let (status, msg) = match why {
            NotResent::Stalled => (
                StatusCode::GATEWAY_TIMEOUT,
                format!(
                    "worker {worker} stopped answering while handling this request; it is not \
                     resent to another worker, since it may be what stopped it"
                ),
            ),
            NotResent::Exited => (
                StatusCode::BAD_GATEWAY,
                format!(
                    "worker {worker} exited while handling this request; it is not resent to \
                     another worker, since it may be what ended it"
                ),
            ),
            NotResent::Answered => (
                StatusCode::BAD_GATEWAY,
                format!(
                    "worker {worker} broke off its answer ({}); the request is not resent, \
                     since the worker had already taken it",
                    error.map(|e| e.to_string()).unwrap_or_default()
                ),
            ),
        };
        // A broken answer is named by the codec's kind (`body_cut`, `protocol`, …, as load
        // and shadow name it); a stall or an exit by serve's own reason.
        let kind = match (why, error) {
            (NotResent::Answered, Some(e)) => e.kind().name(),
            _ => why.name(),
        };
        json_error(status, kind, &msg)
    }
}

impl Shared {
    /// The worker agreed to switch protocols (a WebSocket handshake): the 101 goes to the
    /// client, and once hyper hands over the client's connection the two are joined by a
    /// tunnel task on this thread. An open tunnel is not a request in flight (it would
    /// make its worker look busy, or stalled, for as long as it lasts); it counts in
    /// `scalpel_tunnels_open`.
    fn switch(
        &self,
        app: &App,
        idle: Duration,
        answer: Answer,
        on_upgrade: Option<OnUpgrade>,
        finish: Finish,
    ) -> Response<ProxyBody> {
        let (Some(switched), Some(on_upgrade)) = (answer.switched, on_upgrade) else {
            // parse_response accepts a 101 only when the request asked for it.
            return json_error(
                StatusCode::BAD_GATEWAY,
                "protocol",
                "unexpected protocol switch",
            );
        };
        let metrics = app.metrics.clone();
        metrics.upgrades.fetch_add(1, Ordering::Relaxed);
        metrics.tunnels_open.fetch_add(1, Ordering::Relaxed);
        let app_name = app.cfg.name.clone();
        tokio::spawn(async move {
            let _open = TunnelOpen(metrics);
            let client = match on_upgrade.await {
                Ok(c) => TokioIo::new(c),
                Err(e) => {
                    tracing::debug!(app = %app_name, error = %e, "client left before the switch");
                    return;
                }
            };
            match tunnel::join(client, switched.io, &switched.early, idle).await {
                Ok(end) => tracing::debug!(app = %app_name, ?end, "tunnel closed"),
                Err(e) => tracing::debug!(app = %app_name, error = %e, "tunnel broke"),
            }
        });
        let mut res = Response::new(ProxyBody::Buffered {
            data: None,
            _finish: finish,
        });
        *res.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
        *res.headers_mut() = answer.headers;
        res.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        res
    }
}

/// Decrements the app's open-tunnel gauge when the tunnel task ends.
struct TunnelOpen(Arc<AppMetrics>);

impl Drop for TunnelOpen {
    fn drop(&mut self) {
        self.0.tunnels_open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The protocol a request asks to switch to: an HTTP/1.1 `Upgrade` header together with
/// `upgrade` among its `Connection` tokens (RFC 9110 §7.8).
fn upgrade_asked(req: &Request<Incoming>) -> Option<HeaderValue> {
    if req.version() != http::Version::HTTP_11 {
        return None;
    }
    let protocol = req.headers().get(header::UPGRADE)?;
    let asked = req
        .headers()
        .get_all(header::CONNECTION)
        .iter()
        .flat_map(|v| v.as_bytes().split(|&b| b == b','))
        .any(|t| t.trim_ascii().eq_ignore_ascii_case(b"upgrade"));
    asked.then(|| protocol.clone())
}
