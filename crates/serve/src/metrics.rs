//! `/metrics`: the balancer's counters in the Prometheus text format, one small function
//! per family (or per group of families read the same way), written in a fixed order.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::counters::{AppMetrics, AtReplacement, NotResent, RestartReason};
use crate::state::{Shared, Table};
use crate::status::{MirrorReport, mirror_reports};

/// The metrics of the server whose state is `shared`.
pub(crate) fn text(shared: &Shared) -> String {
    let table = shared.table.load_full();
    let mut p = PromText::default();
    app_counters(&mut p, &table);
    queue(&mut p, &table);
    tunnels(&mut p, &table);
    restarts(&mut p, &table);
    not_resent(&mut p, &table);
    direct_rescue(&mut p, &table);
    worker_logs(&mut p, &table);
    latency(&mut p, &table);
    resources(&mut p, &table);
    workers(&mut p, &table);
    route_requests(&mut p, &table);
    mirrors(&mut p, &mirror_reports(shared));
    connections(&mut p, shared);
    rejected(&mut p, shared);
    not_mirrored(&mut p, &table);
    p.finish()
}

fn load(n: &AtomicU64) -> f64 {
    n.load(Ordering::Relaxed) as f64
}

/// A family with one sample per app, read from its counters.
fn per_app(
    p: &mut PromText,
    table: &Table,
    name: &str,
    kind: &str,
    help: &str,
    value: impl Fn(&AppMetrics) -> f64,
) {
    p.family(name, kind, help);
    for app in &table.apps {
        p.sample(name, &[("app", &app.cfg.name)], value(&app.metrics));
    }
}

/// Counters of requests per app.
fn app_counters(p: &mut PromText, table: &Table) {
    type Counter = fn(&AppMetrics) -> &AtomicU64;
    let counters: [(&str, &str, Counter); 8] = [
        (
            "scalpel_serve_requests_total",
            "Requests routed to the app (an A/B arm).",
            |m| &m.requests,
        ),
        (
            "scalpel_serve_errors_total",
            "Requests of the app answered 5xx (by a worker, or 502/503/504 by the balancer).",
            |m| &m.errors,
        ),
        (
            "scalpel_serve_retries_total",
            "Requests resent to another worker after the first one failed before answering.",
            |m| &m.retries,
        ),
        (
            "scalpel_serve_no_worker_total",
            "Requests answered 503 because no worker of the app became ready in time.",
            |m| &m.no_worker,
        ),
        (
            "scalpel_serve_reloads_total",
            "Workers replaced by a rolling reload.",
            |m| &m.reloads,
        ),
        (
            "scalpel_serve_memory_replacements_total",
            "Workers replaced (successor first, then drained) for passing max_memory_mb.",
            |m| &m.memory_replacements,
        ),
        (
            "scalpel_serve_mirrored_total",
            "Requests copied to the app as a mirror.",
            |m| &m.mirrored,
        ),
        (
            "scalpel_serve_upgrades_total",
            "Requests the app answered by switching protocols (WebSocket handshakes).",
            |m| &m.upgrades,
        ),
    ];
    for (name, help, get) in counters {
        per_app(p, table, name, "counter", help, |m| load(get(m)));
    }
}

/// `max_in_flight_per_worker`'s queue: waiting now, and refused.
fn queue(p: &mut PromText, table: &Table) {
    p.family(
        "scalpel_serve_queued",
        "gauge",
        "Requests waiting in the app's queue for a free worker slot (max_in_flight_per_worker).",
    );
    for app in &table.apps {
        p.sample(
            "scalpel_serve_queued",
            &[("app", &app.cfg.name)],
            app.pool.queued() as f64,
        );
    }
    p.family(
        "scalpel_serve_queue_rejected_total",
        "counter",
        "Requests answered 503 by the app's queue: queue_full (max_queued waiting already) or \
         queue_timeout (no free worker slot within queue_timeout).",
    );
    for app in &table.apps {
        for (reason, n) in [
            ("queue_full", &app.metrics.queue_full),
            ("queue_timeout", &app.metrics.queue_timeout),
        ] {
            p.sample(
                "scalpel_serve_queue_rejected_total",
                &[("app", &app.cfg.name), ("reason", reason)],
                load(n),
            );
        }
    }
}

fn tunnels(p: &mut PromText, table: &Table) {
    per_app(
        p,
        table,
        "scalpel_serve_tunnels_open",
        "gauge",
        "Switched connections (WebSockets) between clients and the app's workers still open.",
        |m| load(&m.tunnels_open),
    );
}

/// A family of counters per app and reason (or outcome): `names[i]` labels `counts[i]`.
fn per_app_reason(
    p: &mut PromText,
    table: &Table,
    (name, label, help): (&str, &str, &str),
    names: &[&str],
    counts: impl Fn(&AppMetrics) -> &[AtomicU64],
) {
    p.family(name, "counter", help);
    for app in &table.apps {
        for (reason, n) in names.iter().zip(counts(&app.metrics)) {
            p.sample(name, &[("app", &app.cfg.name), (label, reason)], load(n));
        }
    }
}

fn restarts(p: &mut PromText, table: &Table) {
    let names = RestartReason::ALL.map(RestartReason::name);
    per_app_reason(
        p,
        table,
        (
            "scalpel_serve_restarts_total",
            "reason",
            "Worker restarts by reason (exited, unhealthy, start_failed).",
        ),
        &names,
        |m| &m.restarts,
    );
}

fn not_resent(p: &mut PromText, table: &Table) {
    let names = NotResent::ALL.map(NotResent::name);
    per_app_reason(
        p,
        table,
        (
            "scalpel_serve_not_resent_total",
            "reason",
            "Requests answered 502/504 instead of resent, because their worker had taken them \
             (worker_stalled, worker_exited, partial_answer): a request that stops or kills a \
             worker must not reach another one.",
        ),
        &names,
        |m| &m.not_resent,
    );
}

/// A stuck direct-mode worker's connections at its replacement, and those rescued.
fn direct_rescue(p: &mut PromText, table: &Table) {
    let names = AtReplacement::ALL.map(AtReplacement::name);
    per_app_reason(
        p,
        table,
        (
            "scalpel_serve_direct_connections_at_replacement_total",
            "outcome",
            "Connections a stuck direct-mode worker had accepted when it was replaced: rescued \
             (it had read none of it; served on by another worker), half_read (it had read its \
             request, or part of it: answered 504, not resent), read_after_answer (it had \
             answered on it, then read a next request: answered 504, not resent), in_use (it \
             had answered on it: closed with it), over_limit, not_taken (the kernel refused \
             pidfd_getfd, or its threads did not stop: closed with it).",
        ),
        &names,
        |m| &m.rescued,
    );
    per_app(
        p,
        table,
        "scalpel_serve_direct_rescued_open",
        "gauge",
        "Rescued connections of a replaced direct-mode worker still open (served by serve).",
        |m| load(&m.rescued_open),
    );
}

fn worker_logs(p: &mut PromText, table: &Table) {
    per_app(
        p,
        table,
        "scalpel_serve_worker_log_lines_dropped_total",
        "counter",
        "Worker output lines dropped because scalpel's stdout/stderr was not read fast enough.",
        |m| load(&m.log_lines_dropped),
    );
    per_app(
        p,
        table,
        "scalpel_serve_worker_log_lines_cut_total",
        "counter",
        "Worker output lines cut at log_line_max_bytes.",
        |m| load(&m.log_lines_cut),
    );
}

fn latency(p: &mut PromText, table: &Table) {
    let name = "scalpel_serve_latency_seconds";
    p.family(
        name,
        "summary",
        "Time from receiving a request to the end of the response body, per app.",
    );
    for app in &table.apps {
        let (count, sum, qs) = app.metrics.latency_summary();
        for (q, v) in qs {
            let q = q.to_string();
            p.sample(name, &[("app", &app.cfg.name), ("quantile", &q)], v);
        }
        p.sample(
            "scalpel_serve_latency_seconds_sum",
            &[("app", &app.cfg.name)],
            sum,
        );
        p.sample(
            "scalpel_serve_latency_seconds_count",
            &[("app", &app.cfg.name)],
            count as f64,
        );
    }
}

/// CPU and memory of each app's worker trees, as the sampler last read them.
fn resources(p: &mut PromText, table: &Table) {
    per_app(
        p,
        table,
        "scalpel_serve_cpu_percent",
        "gauge",
        "CPU of the app's workers (process trees) over the last sample interval; 100 = one core.",
        AppMetrics::cpu_percent,
    );
    per_app(
        p,
        table,
        "scalpel_serve_memory_rss_bytes",
        "gauge",
        "Summed RSS of the app's worker trees.",
        |m| m.rss_bytes() as f64,
    );
    let name = "scalpel_serve_memory_pss_bytes";
    p.family(
        name,
        "gauge",
        "Summed PSS of the app's worker trees (absent when unreadable).",
    );
    for app in &table.apps {
        if let Some(pss) = app.metrics.pss_bytes() {
            p.sample(name, &[("app", &app.cfg.name)], pss as f64);
        }
    }
}

/// Workers in rotation per app, and requests in flight per worker.
fn workers(p: &mut PromText, table: &Table) {
    p.family(
        "scalpel_serve_workers_ready",
        "gauge",
        "Workers of the app in rotation.",
    );
    for app in &table.apps {
        p.sample(
            "scalpel_serve_workers_ready",
            &[("app", &app.cfg.name)],
            app.pool.len() as f64,
        );
    }
    let name = "scalpel_serve_worker_in_flight";
    p.family(name, "gauge", "Requests in flight per worker.");
    for app in &table.apps {
        for slot in &app.slots {
            if let Some(b) = slot.current.load_full() {
                let w = slot.index.to_string();
                p.sample(
                    name,
                    &[("app", &app.cfg.name), ("worker", &w)],
                    b.in_flight() as f64,
                );
            }
        }
    }
}

fn route_requests(p: &mut PromText, table: &Table) {
    let name = "scalpel_serve_route_requests_total";
    p.family(
        name,
        "counter",
        "Requests per route and arm (the A/B split as it happened).",
    );
    for (ri, route) in table.routes.iter().enumerate() {
        let r = ri.to_string();
        for (ai, &(app, _)) in route.cfg.arms.iter().enumerate() {
            p.sample(
                name,
                &[
                    ("route", &r),
                    ("prefix", &route.cfg.prefix),
                    ("app", &table.apps[app].cfg.name),
                ],
                load(&route.arm_requests[ai]),
            );
        }
    }
}

/// Each mirrored route's comparison results.
fn mirrors(p: &mut PromText, reports: &[MirrorReport]) {
    type Field = fn(&scalpel_shadow::Summary) -> f64;
    let families: [(&str, &str, &str, Field); 5] = [
        (
            "scalpel_serve_mirror_compared_total",
            "counter",
            "Served responses compared with the mirror app's.",
            |s| s.compared as f64,
        ),
        (
            "scalpel_serve_mirror_mismatched_total",
            "counter",
            "Compared pairs with at least one real difference.",
            |s| s.mismatched as f64,
        ),
        (
            "scalpel_serve_mirror_skipped_total",
            "counter",
            "Sampled requests not compared (mirror busy, body too large, client gone).",
            |s| s.skipped as f64,
        ),
        (
            "scalpel_serve_mirror_errors_total",
            "counter",
            "Copies the mirror app failed (time-out, connection).",
            |s| s.errors as f64,
        ),
        (
            "scalpel_serve_mirror_consistency_percent",
            "gauge",
            "matched / compared × 100.",
            |s| s.consistency_percent,
        ),
    ];
    for (name, kind, help, get) in families {
        p.family(name, kind, help);
        for r in reports {
            let route = r.route.to_string();
            p.sample(
                name,
                &[("route", &route), ("mirror", &r.mirror)],
                get(&r.summary),
            );
        }
    }
}

fn connections(p: &mut PromText, shared: &Shared) {
    p.family(
        "scalpel_serve_client_connections",
        "gauge",
        "Client connections open (max_connections caps it).",
    );
    p.sample(
        "scalpel_serve_client_connections",
        &[],
        shared.connections.active() as f64,
    );
}

fn rejected(p: &mut PromText, shared: &Shared) {
    let name = "scalpel_serve_rejected_total";
    p.family(
        name,
        "counter",
        "Requests and connections refused before reaching an app, by reason.",
    );
    let r = &shared.rejected;
    for (reason, n) in [
        ("no_route", &r.no_route),
        ("body_too_large", &r.too_large),
        ("body_timeout", &r.body_timeout),
        ("header_timeout", &r.header_timeout),
        ("too_many_connections", &r.too_many_connections),
    ] {
        p.sample(name, &[("reason", reason)], load(n));
    }
}

fn not_mirrored(p: &mut PromText, table: &Table) {
    let name = "scalpel_serve_mirror_not_mirrored_total";
    p.family(
        name,
        "counter",
        "Requests of a mirrored route not copied because of their method (only GET, HEAD \
         and OPTIONS are, unless the route sets mirror_unsafe).",
    );
    for (i, route) in table.routes.iter().enumerate() {
        if let Some(m) = &route.mirror {
            let ri = i.to_string();
            p.sample(
                name,
                &[("route", &ri), ("mirror", &m.app), ("reason", "method")],
                load(&m.skipped_method),
            );
        }
    }
}

/// Writes Prometheus text: one `# HELP`/`# TYPE` header per family, then its samples.
#[derive(Debug, Default)]
pub(crate) struct PromText {
    out: String,
}

impl PromText {
    pub(crate) fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }

    pub(crate) fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let v = v
                    .replace('\\', "\\\\")
                    .replace('"', "\\\"")
                    .replace('\n', "\\n");
                let _ = write!(self.out, "{k}=\"{v}\"");
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {value}");
    }

    pub(crate) fn finish(self) -> String {
        self.out
    }
}
