//! The live page at `/` of the admin address (front-end: `scalpel-live`).
//!
//! A ticker on the control plane reads the counters the balancer already keeps, once a
//! second, into bounded series (five minutes); a poll of the page builds its snapshot from
//! them and from `/status`. Nothing here runs on, or locks, a request path except one copy
//! of each app's latency histogram a second (the same lock a `/metrics` scrape takes).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use scalpel_live::{Action, Chart, History, Kind, Line, Page, Snapshot};
use serde::Serialize;
use tokio::sync::watch;

use crate::counters::MAX_LATENCY_US;
use crate::route::Route;
use crate::state::{Shared, Table};
use crate::status::{MirrorReport, Status, WorkerStatus};
use crate::supervisor::App;

const TICK: Duration = Duration::from_secs(1);
/// Points kept per series: five minutes of one-second ticks.
const HISTORY: usize = 300;
/// Ticks behind the tables' rate and latency figures.
const WINDOW: usize = 10;

/// A histogram's non-empty buckets as (highest equivalent value in µs, count).
type Compact = Vec<(u64, u64)>;

#[derive(Debug)]
pub(crate) struct Live {
    page: Page,
    ticks: Mutex<Ticks>,
}

#[derive(Debug)]
struct Ticks {
    started: Instant,
    /// The config generation the series below were made for (a live reload changes
    /// the apps and routes: the series follow, an app keeping its own by name).
    generation: u64,
    names: Vec<Arc<str>>,
    apps: Vec<AppSeries>,
    routes: Vec<RouteSeries>,
    /// Per worker pid: the last reading and the usage derived from it.
    workers: HashMap<u32, (scalpel_procstat::TreeReading, WorkerUsage)>,
}

#[derive(Debug, Clone, Copy, Default, Serialize)]
struct WorkerUsage {
    cpu_percent: Option<f64>,
    rss_bytes: u64,
    pss_bytes: Option<u64>,
}

#[derive(Debug)]
struct AppSeries {
    prev: Histogram<u64>,
    scratch: Histogram<u64>,
    prev_requests: u64,
    prev_errors: u64,
    points: History<AppPoint>,
    recent: VecDeque<Compact>,
}

#[derive(Debug, Clone, Copy)]
struct AppPoint {
    t: f64,
    dt: f64,
    requests: u64,
    errors: u64,
    p50: Option<f64>,
    p99: Option<f64>,
}

#[derive(Debug)]
struct RouteSeries {
    /// The route's arm counters: a reload that keeps the route hands the same ones on
    /// (`Route::carry_counters`), and its series goes on with them.
    counters: Vec<Arc<AtomicU64>>,
    prev: Vec<u64>,
    /// (t, dt, requests per arm in the tick).
    points: History<(f64, f64, Vec<u64>)>,
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_LATENCY_US, 3).expect("static bounds are valid")
}

/// Percentiles in ms of the merged compact histograms; `None` when they are empty.
fn quantiles<'a>(parts: impl Iterator<Item = &'a Compact>, qs: &[f64]) -> Option<Vec<f64>> {
    let mut all: Vec<(u64, u64)> = parts.flatten().copied().collect();
    let total: u64 = all.iter().map(|p| p.1).sum();
    if total == 0 {
        return None;
    }
    all.sort_unstable_by_key(|p| p.0);
    Some(
        qs.iter()
            .map(|q| {
                let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
                let mut seen = 0;
                let mut value = all.last().map_or(0, |p| p.0);
                for (v, n) in &all {
                    seen += n;
                    if seen >= rank {
                        value = *v;
                        break;
                    }
                }
                value as f64 / 1000.0
            })
            .collect(),
    )
}

fn app_series() -> AppSeries {
    AppSeries {
        prev: histogram(),
        scratch: histogram(),
        prev_requests: 0,
        prev_errors: 0,
        points: History::new(HISTORY),
        recent: VecDeque::new(),
    }
}

fn route_series(table: &Table) -> Vec<RouteSeries> {
    table.routes.iter().map(fresh_route_series).collect()
}

/// A series that starts now: its first point counts from the counters' current values
/// (carried over a reload, they are not zero).
fn fresh_route_series(route: &Route) -> RouteSeries {
    RouteSeries {
        counters: route.arm_requests.clone(),
        prev: route
            .arm_requests
            .iter()
            .map(|a| a.load(Ordering::Relaxed))
            .collect(),
        points: History::new(HISTORY),
    }
}

impl Ticks {
    /// Makes the series match `table` after a live reload: an app that is still there
    /// keeps its series, a new one starts empty; so does a route, kept when it has the
    /// same arm counters (the reload kept its rule and arms).
    fn fit(&mut self, table: &Table) {
        if self.generation == table.generation {
            return;
        }
        let mut old: HashMap<Arc<str>, AppSeries> = std::mem::take(&mut self.names)
            .into_iter()
            .zip(std::mem::take(&mut self.apps))
            .collect();
        for app in &table.apps {
            self.names.push(app.cfg.name.clone());
            self.apps
                .push(old.remove(&app.cfg.name).unwrap_or_else(app_series));
        }
        let mut old_routes = std::mem::take(&mut self.routes);
        for route in &table.routes {
            let same = |s: &RouteSeries| {
                s.counters.len() == route.arm_requests.len()
                    && s.counters
                        .iter()
                        .zip(&route.arm_requests)
                        .all(|(a, b)| Arc::ptr_eq(a, b))
            };
            self.routes.push(match old_routes.iter().position(same) {
                Some(i) => old_routes.swap_remove(i),
                None => fresh_route_series(route),
            });
        }
        self.generation = table.generation;
    }
}

impl Live {
    pub(crate) fn new(shared: &Shared) -> Live {
        let title = format!("scalpel serve on {}", shared.cfg.listen);
        let table = shared.table.load_full();
        Live {
            page: Page::new(Kind::Serve, &title)
                .with_action(Action::post("Reload config", "reload")),
            ticks: Mutex::new(Ticks {
                started: Instant::now(),
                generation: table.generation,
                names: table.apps.iter().map(|a| a.cfg.name.clone()).collect(),
                apps: table.apps.iter().map(|_| app_series()).collect(),
                routes: route_series(&table),
                workers: HashMap::new(),
            }),
        }
    }

    pub(crate) fn page(&self) -> &Page {
        &self.page
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Ticks> {
        self.ticks.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// One tick: each app's requests, errors and latency since the last tick, and each
    /// route arm's requests.
    fn sample(&self, shared: &Shared, last: &mut Instant) {
        let now = Instant::now();
        let dt = now.duration_since(*last).as_secs_f64().max(1e-3);
        *last = now;
        let table = shared.table.load_full();
        let mut ticks = self.lock();
        ticks.fit(&table);
        let t = now.duration_since(ticks.started).as_secs_f64();
        for (app, s) in table.apps.iter().zip(ticks.apps.iter_mut()) {
            app.metrics.copy_latency(&mut s.scratch);
            let delta: Compact = s
                .scratch
                .iter_recorded()
                .filter_map(|v| {
                    let value = v.value_iterated_to();
                    let n = v.count_at_value().saturating_sub(s.prev.count_at(value));
                    (n > 0).then_some((value, n))
                })
                .collect();
            std::mem::swap(&mut s.prev, &mut s.scratch);
            let requests = app.metrics.requests.load(Ordering::Relaxed);
            let errors = app.metrics.errors.load(Ordering::Relaxed);
            let q = quantiles(std::iter::once(&delta), &[0.5, 0.99]);
            s.points.push(AppPoint {
                t,
                dt,
                requests: requests.saturating_sub(s.prev_requests),
                errors: errors.saturating_sub(s.prev_errors),
                p50: q.as_ref().map(|q| q[0]),
                p99: q.as_ref().map(|q| q[1]),
            });
            s.prev_requests = requests;
            s.prev_errors = errors;
            if s.recent.len() == WINDOW {
                s.recent.pop_front();
            }
            s.recent.push_back(delta);
        }
        for (route, s) in table.routes.iter().zip(ticks.routes.iter_mut()) {
            let now: Vec<u64> = route
                .arm_requests
                .iter()
                .map(|a| a.load(Ordering::Relaxed))
                .collect();
            let deltas = now
                .iter()
                .zip(&s.prev)
                .map(|(a, b)| a.saturating_sub(*b))
                .collect();
            s.points.push((t, dt, deltas));
            s.prev = now;
        }
    }

    /// Each worker's latest reading (by pid), from the resource sampler.
    pub(crate) fn set_workers(&self, readings: Vec<(u32, scalpel_procstat::TreeReading)>) {
        let mut ticks = self.lock();
        let mut next = HashMap::with_capacity(readings.len());
        for (pid, reading) in readings {
            let cpu = ticks
                .workers
                .get(&pid)
                .map(|(prev, _)| scalpel_procstat::cpu_percent(prev, &reading));
            let usage = WorkerUsage {
                cpu_percent: cpu,
                rss_bytes: reading.rss_bytes,
                pss_bytes: reading.pss_bytes,
            };
            next.insert(pid, (reading, usage));
        }
        ticks.workers = next;
    }

    /// The page's JSON (docs/live.md, "scalpel serve") and its charts.
    pub(crate) fn snapshot(
        &self,
        shared: &Shared,
        status: Status,
        mirrors: Vec<MirrorReport>,
    ) -> Snapshot {
        let table = shared.table.load_full();
        let mut ticks = self.lock();
        ticks.fit(&table);
        let now_t = ticks.started.elapsed().as_secs_f64();
        let apps = app_rows(&table, &ticks, status);
        let routes = route_rows(&table, &ticks, &apps);
        let mirrors = mirror_rows(&table, mirrors);
        let mut snap = Snapshot::new(ServeOut {
            window_s: WINDOW as u64,
            history_s: HISTORY as u64,
            apps,
            routes,
            mirrors,
        });
        charts(&mut snap, &table, &ticks, now_t);
        snap
    }
}

/// Requests and errors per second over the last [`WINDOW`] points.
fn window_rates(points: &History<AppPoint>) -> (f64, f64) {
    let last: Vec<&AppPoint> = points.iter().rev().take(WINDOW).collect();
    let secs: f64 = last.iter().map(|p| p.dt).sum();
    let sum = |f: fn(&AppPoint) -> u64| last.iter().map(|p| f(p)).sum::<u64>() as f64;
    if secs > 0.0 {
        (sum(|p| p.requests) / secs, sum(|p| p.errors) / secs)
    } else {
        (0.0, 0.0)
    }
}

/// Each app of `status` with its rates, latency percentiles and resources. `status`
/// was read apart from `table`: a reload in between leaves out what no longer matches
/// (the next poll has it).
fn app_rows(table: &Table, ticks: &Ticks, status: Status) -> Vec<AppOut> {
    status
        .apps
        .into_iter()
        .enumerate()
        .filter_map(|(i, a)| {
            let app = table.apps.get(i).filter(|x| *x.cfg.name == a.name)?;
            let series = ticks.apps.get(i)?;
            let (rps, errors_per_s) = window_rates(&series.points);
            let q = quantiles(series.recent.iter(), &[0.5, 0.9, 0.99]);
            let workers = a
                .workers
                .into_iter()
                .map(|w| worker_row(app, ticks, w))
                .collect();
            Some(AppOut {
                name: a.name,
                balance: a.balance,
                ready: a.ready,
                rps,
                errors_per_s,
                p50_ms: q.as_ref().map(|q| q[0]),
                p90_ms: q.as_ref().map(|q| q[1]),
                p99_ms: q.as_ref().map(|q| q[2]),
                cpu_percent: app.metrics.cpu_percent(),
                rss_bytes: app.metrics.rss_bytes(),
                pss_bytes: app.metrics.pss_bytes(),
                workers,
            })
        })
        .collect()
}

/// One worker with its last restart and its process tree's usage.
fn worker_row(app: &App, ticks: &Ticks, w: WorkerStatus) -> WorkerOut {
    let last_restart = app
        .slots
        .get(w.index)
        .and_then(|slot| *slot.last_restart.lock().unwrap_or_else(|e| e.into_inner()));
    let usage = w
        .pid
        .and_then(|pid| ticks.workers.get(&pid))
        .map(|(_, u)| *u);
    WorkerOut {
        last_restart: last_restart.map(|(reason, at)| LastRestart {
            reason: reason.name(),
            ago_s: (at.elapsed().as_secs_f64() * 10.0).round() / 10.0,
        }),
        cpu_percent: usage.and_then(|u| u.cpu_percent),
        rss_bytes: usage.map(|u| u.rss_bytes),
        pss_bytes: usage.and_then(|u| u.pss_bytes),
        status: w,
    }
}

/// Each route with its arms' rates (an arm's errors and latency are its app's); with no
/// `[[route]]`, the first app as one implicit route.
fn route_rows(table: &Table, ticks: &Ticks, apps: &[AppOut]) -> Vec<RouteOut> {
    let mut routes: Vec<RouteOut> = table
        .routes
        .iter()
        .zip(&ticks.routes)
        .enumerate()
        .map(|(index, (route, series))| {
            let last: Vec<_> = series.points.iter().rev().take(WINDOW).collect();
            let secs: f64 = last.iter().map(|p| p.1).sum();
            let arms = route
                .cfg
                .arms
                .iter()
                .enumerate()
                .filter_map(|(ai, &(app, weight))| {
                    let n: u64 = last.iter().map(|p| p.2[ai]).sum();
                    let name = &table.apps.get(app)?.cfg.name;
                    let a = apps.iter().find(|a| *a.name == **name)?;
                    let requests = route.arm_requests[ai].load(Ordering::Relaxed);
                    let rps = if secs > 0.0 { n as f64 / secs } else { 0.0 };
                    Some(arm_row(a, weight, requests, rps))
                })
                .collect();
            RouteOut {
                index,
                prefix: route.cfg.prefix.clone(),
                arms,
            }
        })
        .collect();
    if table.routes.is_empty()
        && let Some(a) = apps.first()
    {
        // No [[route]]: every request goes to the first app, as one implicit route.
        let requests = table.apps[0].metrics.requests.load(Ordering::Relaxed);
        routes.push(RouteOut {
            index: 0,
            prefix: "/".into(),
            arms: vec![arm_row(a, 1, requests, a.rps)],
        });
    }
    routes
}

fn arm_row(a: &AppOut, weight: u64, requests: u64, rps: f64) -> ArmOut {
    ArmOut {
        app: a.name.clone(),
        weight,
        requests,
        rps,
        errors_per_s: a.errors_per_s,
        p50_ms: a.p50_ms,
        p90_ms: a.p90_ms,
        p99_ms: a.p99_ms,
    }
}

/// Each mirrored route's results, with its newest differences.
fn mirror_rows(table: &Table, mirrors: Vec<MirrorReport>) -> Vec<MirrorOut> {
    mirrors
        .into_iter()
        .map(|m| {
            let recent = table
                .routes
                .get(m.route)
                .and_then(|r| r.mirror.as_ref())
                .map(|x| x.recorder.recent_differences())
                .unwrap_or_default();
            MirrorOut {
                route: m.route,
                prefix: m.prefix,
                mirror: m.mirror,
                compared: m.summary.compared,
                matched: m.summary.matched,
                mismatched: m.summary.mismatched,
                skipped: m.summary.skipped,
                errors: m.summary.errors,
                consistency_percent: m.summary.consistency_percent,
                endpoints: m.summary.endpoints,
                newest_differences: recent,
            }
        })
        .collect()
}

/// The page's charts: requests per second per route and arm, latency and errors per app,
/// against seconds before now.
fn charts(snap: &mut Snapshot, table: &Table, ticks: &Ticks, now_t: f64) {
    rate_chart(snap, table, ticks, now_t);
    app_charts(snap, table, ticks, now_t);
}

/// Requests per second per route and arm (the first app alone with no `[[route]]`).
fn rate_chart(snap: &mut Snapshot, table: &Table, ticks: &Ticks, now_t: f64) {
    let x = |t: f64| (t - now_t).min(0.0);
    let x_label = "seconds (0 = now)".to_string();
    let mut rate = Vec::new();
    for (route, series) in table.routes.iter().zip(&ticks.routes) {
        for (ai, &(app, _)) in route.cfg.arms.iter().enumerate() {
            rate.push(Line {
                name: format!("{} → {}", route.cfg.prefix, table.apps[app].cfg.name),
                color_index: rate.len(),
                dashed: false,
                points: series
                    .points
                    .iter()
                    .map(|(t, dt, n)| (x(*t), n[ai] as f64 / dt))
                    .collect(),
            });
        }
    }
    if let (true, Some(app), Some(series)) = (
        table.routes.is_empty(),
        table.apps.first(),
        ticks.apps.first(),
    ) {
        rate.push(Line {
            name: format!("/ → {}", app.cfg.name),
            color_index: 0,
            dashed: false,
            points: series
                .points
                .iter()
                .map(|p| (x(p.t), p.requests as f64 / p.dt))
                .collect(),
        });
    }
    snap.push_chart(
        "route-rate",
        Chart {
            title: "Requests per second, per route and arm".into(),
            x_label: x_label.clone(),
            y_label: "requests/s".into(),
            lines: rate,
            ..Chart::default()
        },
    );
}

/// Latency (p99, p50) and errors per second per app.
fn app_charts(snap: &mut Snapshot, table: &Table, ticks: &Ticks, now_t: f64) {
    let x = |t: f64| (t - now_t).min(0.0);
    let x_label = "seconds (0 = now)".to_string();
    let mut latency = Vec::new();
    let mut errors = Vec::new();
    for (i, (app, series)) in table.apps.iter().zip(&ticks.apps).enumerate() {
        for (figure, dashed) in [("p99", false), ("p50", true)] {
            latency.push(Line {
                name: format!("{} {figure}", app.cfg.name),
                color_index: i,
                dashed,
                points: series
                    .points
                    .iter()
                    .filter_map(|p| {
                        let v = if dashed { p.p50 } else { p.p99 };
                        v.map(|v| (x(p.t), v))
                    })
                    .collect(),
            });
        }
        errors.push(Line {
            name: app.cfg.name.to_string(),
            color_index: i,
            dashed: false,
            points: series
                .points
                .iter()
                .map(|p| (x(p.t), p.errors as f64 / p.dt))
                .collect(),
        });
    }
    snap.push_chart(
        "route-latency",
        Chart {
            title: "Latency per app, each second (p99 solid, p50 dashed)".into(),
            x_label: x_label.clone(),
            y_label: "milliseconds".into(),
            y_log: true,
            lines: latency,
            ..Chart::default()
        },
    );
    snap.push_chart(
        "route-errors",
        Chart {
            title: "Errors (5xx) per second, per app".into(),
            x_label,
            y_label: "errors/s".into(),
            lines: errors,
            ..Chart::default()
        },
    );
}

/// Ticks until `stop`: counters every second. The worker processes' figures come from
/// the resource sampler (`Live::set_workers`), which reads `/proc` once for everyone.
pub(crate) async fn run(shared: Arc<Shared>, live: Arc<Live>, mut stop: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last = Instant::now();
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        live.sample(&shared, &mut last);
    }
}

#[derive(Serialize)]
struct ServeOut {
    window_s: u64,
    history_s: u64,
    apps: Vec<AppOut>,
    routes: Vec<RouteOut>,
    mirrors: Vec<MirrorOut>,
}

#[derive(Serialize)]
struct AppOut {
    name: String,
    balance: &'static str,
    ready: usize,
    rps: f64,
    errors_per_s: f64,
    p50_ms: Option<f64>,
    p90_ms: Option<f64>,
    p99_ms: Option<f64>,
    cpu_percent: f64,
    rss_bytes: u64,
    pss_bytes: Option<u64>,
    workers: Vec<WorkerOut>,
}

#[derive(Serialize)]
struct WorkerOut {
    #[serde(flatten)]
    status: WorkerStatus,
    last_restart: Option<LastRestart>,
    cpu_percent: Option<f64>,
    rss_bytes: Option<u64>,
    pss_bytes: Option<u64>,
}

#[derive(Serialize, Clone, Copy)]
struct LastRestart {
    reason: &'static str,
    ago_s: f64,
}

#[derive(Serialize)]
struct RouteOut {
    index: usize,
    prefix: String,
    arms: Vec<ArmOut>,
}

#[derive(Serialize)]
struct ArmOut {
    app: String,
    weight: u64,
    requests: u64,
    rps: f64,
    errors_per_s: f64,
    p50_ms: Option<f64>,
    p90_ms: Option<f64>,
    p99_ms: Option<f64>,
}

#[derive(Serialize)]
struct MirrorOut {
    route: usize,
    prefix: String,
    mirror: String,
    compared: u64,
    matched: u64,
    mismatched: u64,
    skipped: u64,
    errors: u64,
    consistency_percent: f64,
    endpoints: Vec<scalpel_shadow::EndpointSummary>,
    newest_differences: Vec<scalpel_shadow::RecentDifference>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_merged_ticks_walk_the_counts() {
        let a: Compact = vec![(1000, 98), (5000, 1)];
        let b: Compact = vec![(2000, 0), (9000, 1)];
        let q = quantiles([&a, &b].into_iter(), &[0.5, 0.99, 1.0]).unwrap();
        assert_eq!(q, vec![1.0, 5.0, 9.0]);
        assert!(quantiles(std::iter::empty(), &[0.5]).is_none());
    }
}
