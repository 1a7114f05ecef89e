//! The admin listener: the live page (`/`), Prometheus `/metrics` and `/summary.json`, on
//! its own address, every request first through the toolkit's [`AdminGuard`] (a `Host`
//! that is not the admin's own is refused: DNS rebinding).

use std::convert::Infallible;
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use scalpel_http::AdminGuard;
use tokio::net::TcpListener;

use scalpel_requests::CaptureStats;

use super::{Ctx, PathCounters, live};
use crate::model::SkipReason;
use crate::tally::Summary;

/// A scraper has this long to send its request head.
const ADMIN_HEADER_TIMEOUT: Duration = Duration::from_secs(10);

pub(super) async fn serve_admin(
    listener: TcpListener,
    guard: AdminGuard,
    ctx: Arc<Ctx>,
    live: Arc<live::Live>,
) {
    let guard = Arc::new(guard);
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let ctx = ctx.clone();
        let live = live.clone();
        let guard = guard.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req: Request<Incoming>| {
                let ctx = ctx.clone();
                let live = live.clone();
                let checked = guard.check(req.method(), req.version(), req.uri(), req.headers());
                async move {
                    Ok::<_, Infallible>(match checked {
                        Ok(()) => admin_response(req.method(), req.uri().path(), &ctx, &live),
                        Err(refusal) => refusal.response().map(Full::new),
                    })
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(ADMIN_HEADER_TIMEOUT)
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
        _ => {
            return scalpel_http::error_response(
                StatusCode::NOT_FOUND,
                "not_found",
                &format!(
                    "no admin endpoint {path}: try / (the live page), /metrics or /summary.json"
                ),
            )
            .map(Full::new);
        }
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

/// Prometheus text exposition of the proxy's counters, one family of metrics after
/// another.
fn metrics_text(ctx: &Ctx) -> String {
    let s = ctx.recorder.summary();
    let capture = ctx
        .capture_sink
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .as_ref()
        .map(|s| s.stats());
    let mut m = Metrics(String::with_capacity(4096));
    request_path(&mut m, &ctx.counters);
    comparisons(&mut m, &s);
    store(&mut m, ctx);
    client_connections(&mut m, &ctx.counters);
    if let Some(k) = capture {
        capture_file(&mut m, &ctx.counters, &k);
    }
    mirrors(&mut m, ctx);
    consistency(&mut m, &s);
    m.0
}

/// Prometheus text being written.
struct Metrics(String);

impl Metrics {
    /// A counter: one line per set of labels (`{reason="method"}`, or none).
    fn counter(&mut self, name: &str, help: &str, rows: Vec<(String, u64)>) {
        let _ = writeln!(self.0, "# HELP {name} {help}\n# TYPE {name} counter");
        for (labels, v) in rows {
            let _ = writeln!(self.0, "{name}{labels} {v}");
        }
    }

    /// A counter without labels.
    fn one(&mut self, name: &str, help: &str, value: u64) {
        self.counter(name, help, vec![(String::new(), value)]);
    }

    /// A gauge without labels.
    fn gauge(&mut self, name: &str, help: &str, value: impl std::fmt::Display) {
        let _ = writeln!(
            self.0,
            "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}"
        );
    }
}

fn load(v: &AtomicU64) -> u64 {
    v.load(Ordering::Relaxed)
}

/// What the request path did: requests proxied, chosen, mirrored, or not and why.
fn request_path(m: &mut Metrics, c: &PathCounters) {
    m.one(
        "scalpel_shadow_requests_total",
        "Client requests proxied to the primary.",
        load(&c.requests),
    );
    m.one(
        "scalpel_shadow_primary_errors_total",
        "Requests the primary did not answer (502/504 to the client).",
        load(&c.primary_errors),
    );
    m.one(
        "scalpel_shadow_chosen_total",
        "Requests chosen for comparison; each ends in compared, failed or skipped.",
        load(&c.chosen),
    );
    m.one(
        "scalpel_shadow_mirrored_total",
        "Chosen requests queued for the candidate.",
        load(&c.mirrored),
    );
    m.one(
        "scalpel_shadow_client_timeouts_total",
        "Requests whose body did not arrive within the client time-out (408).",
        load(&c.client_timeouts),
    );
    m.one(
        "scalpel_shadow_bad_host_total",
        "Requests refused (400) for their Host: none, two, or not host[:port].",
        load(&c.bad_host),
    );
    m.one(
        "scalpel_shadow_informational_dropped_total",
        "1xx interim responses (103 Early Hints…) of the primary not passed on.",
        load(&c.informational_dropped),
    );
    m.counter(
        "scalpel_shadow_not_mirrored_total",
        "Requests not mirrored by policy.",
        vec![
            ("{reason=\"method\"}".into(), load(&c.not_mirrored_method)),
            (
                "{reason=\"sampled_out\"}".into(),
                load(&c.not_mirrored_sampled_out),
            ),
        ],
    );
}

/// Where every chosen request ended: compared (matched or not), failed by side and kind,
/// skipped by reason; and the fields that differ.
fn comparisons(m: &mut Metrics, s: &Summary) {
    m.counter(
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
    m.one(
        "scalpel_shadow_compared_total",
        "Response pairs compared.",
        s.compared,
    );
    m.one(
        "scalpel_shadow_matched_total",
        "Pairs without a real difference.",
        s.matched,
    );
    m.one(
        "scalpel_shadow_mismatched_total",
        "Pairs with a real difference.",
        s.mismatched,
    );
    m.one(
        "scalpel_shadow_failed_total",
        "Chosen requests not compared because the primary or the candidate failed.",
        s.errors,
    );
    m.counter(
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
    m.counter(
        "scalpel_shadow_field_differences_total",
        "Requests where primary and candidate differ at a field.",
        fields,
    );
    m.counter(
        "scalpel_shadow_redaction_withheld_total",
        "Parts of kept samples the --redact rules could not read, stored as [REDACTED], by part.",
        ["request_body", "response_body", "query"]
            .iter()
            .map(|p| {
                (
                    format!("{{part=\"{p}\"}}"),
                    s.redaction_withheld.get(*p).copied().unwrap_or(0),
                )
            })
            .collect(),
    );
}

/// Writes the store could not take.
fn store(m: &mut Metrics, ctx: &Ctx) {
    m.one(
        "scalpel_shadow_store_dropped_total",
        "Store writes dropped because the writer was behind.",
        ctx.recorder.store_dropped(),
    );
    m.one(
        "scalpel_shadow_store_failed_total",
        "Store transactions SQLite refused (disk full, file locked).",
        ctx.recorder.store_failed(),
    );
}

/// Client connections: served by protocol, open now, and failed TLS handshakes.
fn client_connections(m: &mut Metrics, c: &PathCounters) {
    m.one(
        "scalpel_shadow_client_tls_handshake_failures_total",
        "Client TLS handshakes that failed or did not finish within the client time-out.",
        load(&c.tls_handshake_failures),
    );
    m.counter(
        "scalpel_shadow_client_connections_total",
        "Client connections served, by protocol (h2 by ALPN over TLS).",
        vec![
            ("{protocol=\"http/1.1\"}".into(), load(&c.connections_h1)),
            ("{protocol=\"h2\"}".into(), load(&c.connections_h2)),
        ],
    );
    m.gauge(
        "scalpel_shadow_client_connections",
        "Client connections open now.",
        load(&c.connections),
    );
}

/// The capture file (`--capture`): records and bytes written, rotations, what was not
/// captured and why, the file's size and the writer's queue.
fn capture_file(m: &mut Metrics, c: &PathCounters, k: &CaptureStats) {
    m.one(
        "scalpel_shadow_capture_records_total",
        "Requests written to the capture file.",
        k.written,
    );
    m.one(
        "scalpel_shadow_capture_bytes_total",
        "Bytes written to the capture file (all rotations).",
        k.bytes_written,
    );
    m.one(
        "scalpel_shadow_capture_rotations_total",
        "Times the capture file was rotated at --capture-max-size.",
        k.rotations,
    );
    m.counter(
        "scalpel_shadow_capture_dropped_total",
        "Sampled requests not captured, by reason.",
        vec![
            (
                "{reason=\"queue_full\"}".into(),
                load(&c.capture_queue_full) + k.dropped_queue_full,
            ),
            (
                "{reason=\"body_too_large\"}".into(),
                load(&c.capture_body_too_large),
            ),
            ("{reason=\"record_too_large\"}".into(), k.dropped_too_large),
            ("{reason=\"write_error\"}".into(), k.write_errors),
        ],
    );
    m.counter(
        "scalpel_shadow_capture_redaction_withheld_total",
        "Captured requests whose body or query the --redact rules could not read, written as [REDACTED].",
        vec![
            ("{part=\"body\"}".into(), load(&c.capture_withheld_body)),
            ("{part=\"query\"}".into(), load(&c.capture_withheld_query)),
        ],
    );
    m.gauge(
        "scalpel_shadow_capture_file_bytes",
        "Size of the current capture file.",
        k.file_size,
    );
    m.gauge(
        "scalpel_shadow_capture_queued",
        "Records waiting for the capture writer.",
        k.queued,
    );
}

/// The mirror side now: exchanges in flight, jobs queued, bytes held against the budget.
fn mirrors(m: &mut Metrics, ctx: &Ctx) {
    m.gauge(
        "scalpel_shadow_mirror_in_flight",
        "Mirror exchanges running now.",
        load(&ctx.counters.in_flight),
    );
    m.gauge(
        "scalpel_shadow_mirror_queue_depth",
        "Mirror jobs waiting for a slot.",
        ctx.queue.max_capacity() - ctx.queue.capacity(),
    );
    let b = &ctx.budget;
    m.gauge(
        "scalpel_shadow_mirror_bytes",
        "Bytes of bodies held now for queued and in-flight mirrors.",
        b.used(),
    );
    m.gauge(
        "scalpel_shadow_mirror_bytes_peak",
        "The most bytes ever held at once for mirrors.",
        b.peak(),
    );
    m.gauge(
        "scalpel_shadow_mirror_budget_bytes",
        "The mirror byte budget (--mirror-budget).",
        b.limit(),
    );
}

/// The run's figures so far: consistency and how much of what was chosen it covers.
fn consistency(m: &mut Metrics, s: &Summary) {
    m.gauge(
        "scalpel_shadow_consistency_percent",
        "Matched pairs out of compared pairs.",
        s.consistency_percent,
    );
    m.gauge(
        "scalpel_shadow_coverage_percent",
        "Compared requests out of chosen ones (the rest failed or were skipped).",
        s.coverage_percent,
    );
}
