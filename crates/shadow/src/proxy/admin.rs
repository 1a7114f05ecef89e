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

use super::{Ctx, live};
use crate::model::SkipReason;

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
        "scalpel_shadow_bad_host_total",
        "Requests refused (400) for their Host: none, two, or not host[:port].",
        one(&c.bad_host),
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
    counter(
        "scalpel_shadow_client_tls_handshake_failures_total",
        "Client TLS handshakes that failed or did not finish within the client time-out.",
        one(&c.tls_handshake_failures),
    );
    counter(
        "scalpel_shadow_client_connections_total",
        "Client connections served, by protocol (h2 by ALPN over TLS).",
        vec![
            (
                "{protocol=\"http/1.1\"}".into(),
                c.connections_h1.load(Ordering::Relaxed),
            ),
            (
                "{protocol=\"h2\"}".into(),
                c.connections_h2.load(Ordering::Relaxed),
            ),
        ],
    );
    let capture = ctx
        .capture_sink
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .as_ref()
        .map(|s| s.stats());
    if let Some(k) = capture {
        counter(
            "scalpel_shadow_capture_records_total",
            "Requests written to the capture file.",
            vec![(String::new(), k.written)],
        );
        counter(
            "scalpel_shadow_capture_bytes_total",
            "Bytes written to the capture file (all rotations).",
            vec![(String::new(), k.bytes_written)],
        );
        counter(
            "scalpel_shadow_capture_rotations_total",
            "Times the capture file was rotated at --capture-max-size.",
            vec![(String::new(), k.rotations)],
        );
        counter(
            "scalpel_shadow_capture_dropped_total",
            "Sampled requests not captured, by reason.",
            vec![
                (
                    "{reason=\"queue_full\"}".into(),
                    c.capture_queue_full.load(Ordering::Relaxed) + k.dropped_queue_full,
                ),
                (
                    "{reason=\"body_too_large\"}".into(),
                    c.capture_body_too_large.load(Ordering::Relaxed),
                ),
                ("{reason=\"record_too_large\"}".into(), k.dropped_too_large),
                ("{reason=\"write_error\"}".into(), k.write_errors),
            ],
        );
        counter(
            "scalpel_shadow_capture_redaction_withheld_total",
            "Captured requests whose body or query the --redact rules could not read, written as [REDACTED].",
            vec![
                (
                    "{part=\"body\"}".into(),
                    c.capture_withheld_body.load(Ordering::Relaxed),
                ),
                (
                    "{part=\"query\"}".into(),
                    c.capture_withheld_query.load(Ordering::Relaxed),
                ),
            ],
        );
    }
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
    if let Some(k) = capture {
        gauge(
            "scalpel_shadow_capture_file_bytes",
            "Size of the current capture file.",
            k.file_size.to_string(),
        );
        gauge(
            "scalpel_shadow_capture_queued",
            "Records waiting for the capture writer.",
            k.queued.to_string(),
        );
    }
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
