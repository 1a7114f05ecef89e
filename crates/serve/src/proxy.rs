//! The request path: route → arm → pool → selection → worker, with the proxy duties of
//! RFC 9110 §7.6 (hop-by-hop headers, `X-Forwarded-For`, `Via`), limits, one resend of
//! a request its worker never took (never sent, still unread when the worker was reset,
//! closed or ejected; idempotent ones only, unless it never left), and JSON errors. A
//! request its worker took — read, then stalled on, died with, or began to answer — is
//! never resent: it may be a poison request, and a resend would carry it to a healthy
//! worker.
//!
//! Per-request phases, methods called in this order as pingora-proxy's `ProxyHttp`
//! hooks are: `route` (which route and arm), `request_filter` (limits, the body, the
//! headers), `upstream` (a worker, the exchange, maybe one resend), `response_filter`
//! (the answer as the client's response: whole, streamed or switched), then `finish`
//! (metrics; latency when the body ends). A request filter (a header rule, a check of
//! the client) belongs in `request_filter`; `upstream` is the only phase that talks to
//! a worker.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;

use crate::backend::{Backend, Eject};
use crate::config::ServerConfig;
use crate::counters::{AppMetrics, NotResent};
use crate::h1::Outgoing;
use crate::mirror::{Mirror, Tee};
use crate::pool::{InFlight, Refused};
use crate::state::{Shared, Table};
use crate::sticky;
use crate::supervisor::App;
use crate::tunnel;
use crate::upstream::{Answer, Attempt, UpstreamBody, UpstreamError, Upstreams};

/// Worker bodies up to this size (by `Content-Length`) are read whole before the
/// response goes out; larger or chunked ones stream.
const BUFFER_BODY_BYTES: u64 = 64 * 1024;

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

/// What a sticky key is read from: the request's path and headers, and its client.
fn key_source<'a>(
    lim: &'a ServerConfig,
    client: &'a Client,
    path: &'a str,
    headers: &'a HeaderMap,
) -> sticky::Source<'a> {
    sticky::Source {
        path,
        headers,
        peer: &client.ip,
        trusted: client.trusted,
        trusted_proxies: &lim.trusted_proxies,
    }
}

/// A request past `request_filter`: the head to forward, its body read whole, and the
/// protocol it asks to switch to.
struct Filtered {
    parts: http::request::Parts,
    body: Bytes,
    upgrade: Option<HeaderValue>,
    on_upgrade: Option<OnUpgrade>,
}

impl Filtered {
    /// The request as the worker gets it: origin form (`/path?query`; a client's absolute
    /// form is reduced), with the proxy's headers added as it is written.
    fn outgoing<'a>(&'a self, client: &'a Client) -> Outgoing<'a> {
        Outgoing {
            method: &self.parts.method,
            target: self.parts.uri.path_and_query().map_or("/", |p| p.as_str()),
            headers: &self.parts.headers,
            client_ip: &client.ip,
            body: &self.body,
            upgrade: self.upgrade.as_ref(),
            trusted: client.trusted,
            https: client.https,
        }
    }
}

/// A worker's answer as `upstream` hands it to `response_filter`: its head, the part of
/// its body already read (all of a small one), and the worker's count of it.
struct Answered {
    answer: Answer,
    first: Bytes,
    in_flight: InFlight,
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

/// The phases of a request, in the order [`Shared::handle`] and `forward` call them (as
/// pingora-proxy's `ProxyHttp` hooks): `route`, `request_filter`, `upstream`,
/// `response_filter`, `finish`. A phase that answers the request itself (an error)
/// returns that answer as its `Err`.
// The `Err` is the response itself, moved out as a plain return would move it; boxing it
// would cost an allocation per error answer.
#[allow(clippy::result_large_err)]
impl Shared {
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
        let (app_index, mirror) = match self.route(&table, client, &req) {
            Ok(to) => to,
            Err(res) => return res,
        };
        let app = table.apps[app_index].clone();
        // The limits stay those of the request's own generation, whatever reloads follow.
        let lim = table.server.clone();
        drop(table);
        app.metrics.requests.fetch_add(1, Ordering::Relaxed);
        let res = self
            .forward(up, &app, &lim, mirror.as_ref(), client, req)
            .await;
        Self::finish(&app, &res);
        res
    }

    /// Phases `request_filter`, `upstream` and `response_filter` for a request routed to
    /// `app`.
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
        let mut req = match self.request_filter(lim, req).await {
            Ok(r) => r,
            Err(res) => return res,
        };
        let on_upgrade = req.on_upgrade.take();
        let out = req.outgoing(client);
        // A switched connection is not a response a mirror could compare.
        let tee = match (mirror, &self.mirror_queue) {
            (Some(m), Some(queue)) if req.upgrade.is_none() => m.begin(queue, &out),
            _ => None,
        };
        let answered = match self.upstream(up, app, lim, client, &req, &out).await {
            Ok(a) => a,
            Err(res) => return res,
        };
        self.response_filter(app, lim, answered, on_upgrade, tee, start)
    }

    /// Phase `route`: the app (and mirror) of the request — the arm of the first route
    /// that matches, by weight or sticky key; with no routes, the first proxy app — or
    /// a 404.
    fn route(
        &self,
        table: &Table,
        client: &Client,
        req: &Request<Incoming>,
    ) -> Result<(usize, Option<Arc<Mirror>>), Response<ProxyBody>> {
        if table.routes.is_empty() {
            // No routes: the first proxy app (a direct app has its own address).
            return match table.apps.iter().position(|a| a.cfg.listen.is_none()) {
                Some(i) => Ok((i, None)),
                None => {
                    self.rejected.no_route.fetch_add(1, Ordering::Relaxed);
                    Err(json_error(
                        StatusCode::NOT_FOUND,
                        "no_route",
                        "no proxy app here: every app is mode = \"direct\" and listens on its own address",
                    ))
                }
            };
        }
        let path = req.uri().path();
        let Some(route) = table
            .routes
            .iter()
            .find(|r| r.matches(req.method(), path, req.headers()))
        else {
            self.rejected.no_route.fetch_add(1, Ordering::Relaxed);
            let msg = format!("no route for {} {}", req.method(), path);
            return Err(json_error(StatusCode::NOT_FOUND, "no_route", &msg));
        };
        let arm = route.pick_arm(&key_source(&table.server, client, path, req.headers()));
        route.arm_requests[arm].fetch_add(1, Ordering::Relaxed);
        Ok((route.cfg.arms[arm].0, route.mirror.clone()))
    }

    /// Phase `request_filter`: the limits, the body read whole, and the head made ready
    /// for a worker (`Host` from an HTTP/2 `:authority`). The proxy's own headers
    /// (hop-by-hop left out, `X-Forwarded-*`, `Via`) are written with the head (`h1`).
    async fn request_filter(
        &self,
        lim: &ServerConfig,
        req: Request<Incoming>,
    ) -> Result<Filtered, Response<ProxyBody>> {
        // RFC 9112 §3.2: no `Host`, two, or one that is not `host[:port]` is a 400, read
        // by the toolkit's one reader (the shadow proxy's too); never forwarded with a
        // `Host` serve made up (the worker's own address) or with the client's second.
        if let Err(e) = scalpel_http::request_host(req.version(), req.uri(), req.headers()) {
            return Err(json_error_closing(
                StatusCode::BAD_REQUEST,
                e.kind(),
                &e.to_string(),
            ));
        }
        let mut req = req;
        let upgrade = upgrade_asked(&req);
        let on_upgrade = upgrade.is_some().then(|| hyper::upgrade::on(&mut req));
        let (mut parts, body) = req.into_parts();
        let body = self.read_body(lim, body).await?;
        // An HTTP/2 request names its host in `:authority` only; a worker reads `Host`.
        if !parts.headers.contains_key(header::HOST)
            && let Some(host) = parts
                .uri
                .authority()
                .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
        {
            parts.headers.insert(header::HOST, host);
        }
        Ok(Filtered {
            parts,
            body,
            upgrade,
            on_upgrade,
        })
    }

    /// The request body, buffered (bounded in size and in time) so that a failed attempt
    /// can be sent again, and a slow client holds no worker while it trickles.
    async fn read_body(
        &self,
        lim: &ServerConfig,
        body: Incoming,
    ) -> Result<Bytes, Response<ProxyBody>> {
        let max = lim.max_body_bytes;
        let too_large = || {
            self.rejected.too_large.fetch_add(1, Ordering::Relaxed);
            json_error_closing(
                StatusCode::PAYLOAD_TOO_LARGE,
                "too_large",
                &format!("request body over the {max}-byte limit"),
            )
        };
        // The body's length as hyper framed it (a chunked body has none), never the
        // client's own header: with both `Content-Length` and `Transfer-Encoding`, the
        // chunked framing is the one that counts (RFC 9112 §6.3).
        if body.size_hint().lower() > max {
            return Err(too_large());
        }
        if body.is_end_stream() {
            return Ok(Bytes::new());
        }
        let read = Limited::new(body, max as usize).collect();
        match tokio::time::timeout(lim.body_read_timeout, read).await {
            Ok(Ok(c)) => Ok(c.to_bytes()),
            Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => Err(too_large()),
            Ok(Err(e)) => Err(json_error_closing(
                StatusCode::BAD_REQUEST,
                "bad_request",
                &format!("reading request body: {e}"),
            )),
            Err(_) => {
                self.rejected.body_timeout.fetch_add(1, Ordering::Relaxed);
                Err(json_error_closing(
                    StatusCode::REQUEST_TIMEOUT,
                    "client_timeout",
                    &format!(
                        "request body not received within {}",
                        scalpel_units::format_duration(lim.body_read_timeout)
                    ),
                ))
            }
        }
    }

    /// Phase `upstream`: a worker of the app, the exchange with it, and — when the
    /// worker never took the request — one resend to another worker.
    async fn upstream(
        &self,
        up: &Arc<Upstreams>,
        app: &App,
        lim: &ServerConfig,
        client: &Client,
        req: &Filtered,
        out: &Outgoing<'_>,
    ) -> Result<Answered, Response<ProxyBody>> {
        let retry_ok = lim.retry_idempotent && idempotent(out.method);
        let key = app.cfg.sticky_worker.as_ref().and_then(|k| {
            let src = key_source(lim, client, req.parts.uri.path(), &req.parts.headers);
            sticky::hash(k, &src)
        });
        let mut avoid: Option<Arc<Backend>> = None;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let first_try = attempt == 1;
            let in_flight = self.worker(app, lim, avoid.as_ref(), key).await?;
            let backend = in_flight.backend().clone();
            // Formatted only when needed (errors): not on the request path.
            let name = || format!("{}#{}", app.cfg.name, backend.index());
            let track = Attempt::default();
            let may_leave = first_try && retry_ok;
            match Self::exchange(up, lim, &in_flight, out, &track, may_leave).await {
                Outcome::Done(Ok(Ok((answer, first)))) => {
                    return Ok(Answered {
                        answer,
                        first,
                        in_flight,
                    });
                }
                Outcome::Done(Ok(Err(e))) => {
                    self.failed(app, &backend, out, &e, &track, first_try, retry_ok)?;
                }
                Outcome::Done(Err(_)) => {
                    let msg = format!(
                        "worker {} did not answer within {}",
                        name(),
                        scalpel_units::format_duration(lim.upstream_timeout)
                    );
                    return Err(json_error(StatusCode::GATEWAY_TIMEOUT, "timeout", &msg));
                }
                Outcome::Ejected { taken: true } => {
                    let why = NotResent::Stalled;
                    return Err(self.not_resent(app, &name(), out.method, out.target, why, None));
                }
                // Only queued behind whatever stopped the worker: it never read this one.
                Outcome::Ejected { taken: false } if may_leave => {
                    app.metrics.retries.fetch_add(1, Ordering::Relaxed);
                }
                Outcome::Ejected { taken: false } => {
                    return Err(worker_stopped(&name(), attempt, lim));
                }
            }
            avoid = Some(backend);
        }
    }

    /// A worker for the request: with `max_in_flight_per_worker`, a slot from the app's
    /// queue; otherwise the app's selection, waiting up to `wait_for_worker` for a ready
    /// worker. `avoid`: the worker a first attempt failed on.
    async fn worker(
        &self,
        app: &App,
        lim: &ServerConfig,
        avoid: Option<&Arc<Backend>>,
        key: Option<u64>,
    ) -> Result<InFlight, Response<ProxyBody>> {
        if app.pool.limited() {
            return app
                .pool
                .acquire(avoid, lim.wait_for_worker, app.cfg.queue_timeout)
                .await
                .map_err(|why| self.refused(app, why));
        }
        match app
            .pool
            .select_wait(avoid.map(|a| &**a), key, lim.wait_for_worker)
            .await
        {
            Some(b) => Ok(app.pool.begin(&b)),
            None => Err(self.refused(app, Refused::NoWorker)),
        }
    }

    /// One exchange with the worker of `in_flight`, within `upstream_timeout`: the
    /// request, the response head, and a small declared body read whole (one write to
    /// the client), else what is here already (the rest streams). `may_leave`: the
    /// request may go elsewhere if the worker is ejected before it took it.
    async fn exchange(
        up: &Arc<Upstreams>,
        lim: &ServerConfig,
        in_flight: &InFlight,
        out: &Outgoing<'_>,
        track: &Attempt,
        may_leave: bool,
    ) -> Outcome {
        let backend = in_flight.backend();
        let exchange = async {
            let mut answer = up.send(backend.addr(), out, track).await?;
            in_flight.head_received();
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
        // (it is stuck and being stopped; no answer will come — dropping the exchange
        // closes its connection), or only the ones it has not read (a `prestart`
        // successor took over; a request it had read may still be answered, as may one
        // that cannot be resent).
        let mut wait_for = Eject::Queued;
        loop {
            tokio::select! {
                r = &mut timed => break Outcome::Done(r),
                level = backend.ejected(wait_for) => {
                    let taken = track.received() || backend.took(track);
                    // Under a partial ejection, only what can go elsewhere leaves.
                    if level == Eject::All || (!taken && may_leave) {
                        break Outcome::Ejected { taken };
                    }
                    wait_for = Eject::All;
                }
            }
        }
    }

    /// An exchange that failed with `e`: `Ok` when the request goes to another worker
    /// (the worker never took it, and this was the first attempt), else the answer.
    #[allow(clippy::too_many_arguments)]
    fn failed(
        &self,
        app: &App,
        backend: &Backend,
        out: &Outgoing<'_>,
        e: &UpstreamError,
        track: &Attempt,
        first_try: bool,
        retry_ok: bool,
    ) -> Result<(), Response<ProxyBody>> {
        let name = || format!("{}#{}", app.cfg.name, backend.index());
        // Never resent once the worker sent any byte: it took the request. Reset before
        // any byte: its kernel still held (part of) the request unread. End of file
        // before any byte: a worker that has begun to exit took it with it; one that
        // lives closed a kept-alive connection as the request arrived (its keep-alive
        // time-out), unread.
        let verdict = if e.never_sent() || (!track.received() && e.is_connection_reset()) {
            Ok(())
        } else if track.received() {
            Err(NotResent::Answered)
        } else if scalpel_procstat::process_ended(backend.pid()) {
            Err(NotResent::Exited)
        } else {
            Ok(())
        };
        match verdict {
            Ok(()) if first_try && (e.never_sent() || retry_ok) => {
                app.metrics.retries.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(worker = %name(), error = %e, "resending on another worker");
                Ok(())
            }
            Ok(()) => {
                // The kind is the codec's (`connect`, `reset`, `protocol`, …), named as
                // load and shadow name it.
                let kind = e.kind();
                Err(json_error(
                    kind.gateway_status(),
                    kind.name(),
                    &format!("worker {} failed: {e}", name()),
                ))
            }
            Err(why) => Err(self.not_resent(app, &name(), out.method, out.target, why, Some(e))),
        }
    }

    /// Phase `response_filter`: the worker's answer as the client's response (its
    /// hop-by-hop headers were left out as it was read). A protocol switch becomes a
    /// tunnel; a body that ended goes out whole; a longer one streams, copied to the
    /// mirror's tee when the request is mirrored.
    fn response_filter(
        &self,
        app: &App,
        lim: &ServerConfig,
        answered: Answered,
        on_upgrade: Option<OnUpgrade>,
        tee: Option<Tee>,
        start: Instant,
    ) -> Response<ProxyBody> {
        let Answered {
            answer,
            first,
            in_flight,
        } = answered;
        let finish = Finish {
            in_flight,
            metrics: app.metrics.clone(),
            start,
        };
        if answer.switched.is_some() {
            return self.switch(app, lim.tunnel_idle_timeout, answer, on_upgrade, finish);
        }
        let ended = answer.body.is_end();
        let tee = tee.map(|mut t| {
            t.head(
                answer.status,
                answer.headers.clone(),
                lim.max_body_bytes as usize,
                start,
            );
            t.data(&first);
            if ended {
                t.end();
            }
            Box::new(t)
        });
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
        res
    }

    /// Phase `finish`, as the answer leaves: an error answer (5xx, the worker's or the
    /// balancer's) counts for its app. The request's latency and its worker's in-flight
    /// count end with its body ([`Finish`]).
    fn finish(app: &App, res: &Response<ProxyBody>) {
        if res.status().is_server_error() {
            app.metrics.errors.fetch_add(1, Ordering::Relaxed);
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

/// The answer to a request whose worker stopped before reading it, when it may not go to
/// another worker: said why (a resend already, retries off, or not idempotent).
fn worker_stopped(worker: &str, attempt: u32, lim: &ServerConfig) -> Response<ProxyBody> {
    json_error(
        StatusCode::BAD_GATEWAY,
        "worker_stopped",
        &format!(
            "worker {worker} stopped answering before reading this request, which is not \
             resent ({})",
            if attempt > 1 {
                "it was resent once already"
            } else if !lim.retry_idempotent {
                "retry_idempotent is off"
            } else {
                "its method is not idempotent"
            }
        ),
    )
}
