//! `scalpel load --dashboard ADDR`: a live page (crate `scalpel-live`) that follows the run
//! from the load engine's progress reports, then serves the same report as `--html`.
//!
//! The server runs on a thread of its own with a current-thread runtime, apart from the
//! load threads; the progress callback only updates a small state behind a mutex, about
//! five times a second on the engine's control thread (never a request path).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use scalpel_live::{Chart, History, Kind, Line, Page, Snapshot};
use scalpel_load::{Progress, Slo, Stop};
use scalpel_procstat::{SampleMark, TreeSampler};
use serde::Serialize;

/// Points kept per target: an hour of one-second points.
const HISTORY: usize = 3600;
/// The shortest interval a point's CPU covers (points come about a second apart, the
/// target's readings every 100 ms): at 100 Hz, ±1 tick is ±1.4% of a core over it.
const CPU_INTERVAL_MIN: Duration = Duration::from_millis(700);

/// What the dashboard knows of a target before the run.
#[derive(Debug)]
pub(crate) struct DashTarget {
    pub(crate) name: String,
    pub(crate) url: String,
    pub(crate) sampler: Option<Arc<TreeSampler>>,
}

#[derive(Debug, Clone, Copy)]
struct Point {
    t: f64,
    offered: Option<f64>,
    achieved: f64,
    p50: Option<f64>,
    p99: Option<f64>,
    cpu: Option<f64>,
    rss: Option<u64>,
}

#[derive(Debug)]
struct TargetState {
    target: DashTarget,
    now: Option<TargetNow>,
    points: History<Point>,
    last_point: Option<Instant>,
    /// Where the next point's CPU interval starts (the last one's end).
    cpu_from: Option<SampleMark>,
    /// The CPU of the last point's whole interval: what the card shows.
    cpu: Option<f64>,
}

#[derive(Debug, Clone, Copy, Serialize)]
struct TargetNow {
    offered_rps: Option<f64>,
    achieved_rps: f64,
    mean_ms: f64,
    p50_ms: Option<f64>,
    p90_ms: Option<f64>,
    p99_ms: Option<f64>,
    errors: u64,
    completed: u64,
}

#[derive(Debug, Default, Clone, Serialize)]
struct StepNow {
    index: u32,
    count: u32,
    offered_rps: Option<f64>,
    target: Option<String>,
}

#[derive(Debug)]
struct State {
    page: Page,
    started: Instant,
    model: &'static str,
    slo: Option<Slo>,
    step: StepNow,
    left_s: Option<f64>,
    targets: Vec<TargetState>,
    /// The `--html` report, once the run is over: `/` serves it from then on.
    report: Option<Arc<String>>,
}

/// The running dashboard server.
#[derive(Debug)]
pub(crate) struct Dashboard {
    state: Arc<Mutex<State>>,
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|e| e.into_inner())
}

impl Dashboard {
    /// Binds `addr` (an error here stops the command before any load) and serves the page.
    pub(crate) fn start(
        addr: SocketAddr,
        model: &'static str,
        slo: Option<Slo>,
        targets: Vec<DashTarget>,
    ) -> anyhow::Result<Dashboard> {
        let listener = std::net::TcpListener::bind(addr)
            .with_context(|| format!("--dashboard: cannot listen on {addr}"))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let names: Vec<&str> = targets.iter().map(|t| t.name.as_str()).collect();
        let title = format!("scalpel load: {}", names.join(" vs "));
        let state = Arc::new(Mutex::new(State {
            page: Page::new(Kind::Load, &title),
            started: Instant::now(),
            model,
            slo,
            step: StepNow::default(),
            left_s: None,
            targets: targets
                .into_iter()
                .map(|target| TargetState {
                    cpu_from: target.sampler.as_ref().map(|s| s.mark()),
                    target,
                    now: None,
                    points: History::new(HISTORY),
                    last_point: None,
                    cpu: None,
                })
                .collect(),
            report: None,
        }));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let served = state.clone();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("--dashboard: cannot start its runtime")?;
        let thread = std::thread::Builder::new()
            .name("scalpel-dashboard".into())
            .spawn(move || runtime.block_on(serve(listener, served, stopped)))
            .context("--dashboard: cannot start its thread")?;
        Ok(Dashboard {
            state,
            addr,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Takes one progress report of the engine (about five a second).
    pub(crate) fn progress(&self, p: &Progress<'_>) {
        let mut s = lock(&self.state);
        let t = s.started.elapsed().as_secs_f64();
        s.step = StepNow {
            index: p.step,
            count: p.steps,
            offered_rps: p.offered_rps,
            target: Some(p.target.to_string()),
        };
        s.left_s = p.left.map(|d| d.as_secs_f64());
        let Some(ts) = s.targets.iter_mut().find(|x| x.target.name == p.target) else {
            return;
        };
        let latency = p.latency_ms;
        let now = TargetNow {
            offered_rps: p.offered_rps,
            achieved_rps: p.rps,
            mean_ms: p.mean_latency_ms,
            p50_ms: latency.map(|l| l.p50),
            p90_ms: latency.map(|l| l.p90),
            p99_ms: latency.map(|l| l.p99),
            errors: p.errors,
            completed: p.completed,
        };
        ts.now = Some(now);
        if ts
            .last_point
            .is_none_or(|at| at.elapsed() >= Duration::from_millis(950))
        {
            ts.last_point = Some(Instant::now());
            let sample = ts.target.sampler.as_ref().and_then(|s| s.latest());
            // The CPU of the point's whole interval (ticks summed since the last point), not
            // the last 100 ms sample: a tick is 10% of one, so a steady 5% read 0% or 10%.
            // A shorter interval (the first point, soon after the start) waits for the next
            // point, which then covers both.
            let interval = match (&ts.target.sampler, ts.cpu_from) {
                (Some(sampler), Some(from)) => sampler
                    .cpu_since(from)
                    .filter(|i| i.wall >= CPU_INTERVAL_MIN),
                _ => None,
            };
            if let Some(interval) = interval {
                ts.cpu_from = Some(interval.end);
                ts.cpu = Some(interval.cpu_percent);
            }
            ts.points.push(Point {
                t,
                offered: p.offered_rps,
                achieved: p.rps,
                p50: now.p50_ms,
                p99: now.p99_ms,
                cpu: interval.map(|i| i.cpu_percent),
                rss: sample.map(|s| s.rss_bytes),
            });
        }
    }

    /// The run is over: `/` serves `report` from now on, and the open page switches to it.
    pub(crate) fn finish(&self, report: String) {
        lock(&self.state).report = Some(Arc::new(report));
    }

    /// Keeps serving for `linger` (so an open page fetches the report) unless `stop` is
    /// set (a signal), then stops.
    pub(crate) fn close(mut self, linger: Duration, stop: &Stop) {
        let until = Instant::now() + linger;
        while !stop.is_stopped() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(50).min(until - Instant::now()));
        }
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn serve(
    listener: std::net::TcpListener,
    state: Arc<Mutex<State>>,
    mut stopped: tokio::sync::oneshot::Receiver<()>,
) {
    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
        return;
    };
    loop {
        let stream = tokio::select! {
            r = listener.accept() => match r {
                Ok((s, _)) => s,
                Err(_) => { tokio::time::sleep(Duration::from_millis(50)).await; continue; }
            },
            _ = &mut stopped => return,
        };
        let state = state.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req: Request<Incoming>| {
                let state = state.clone();
                async move { Ok::<_, Infallible>(answer(&state, &req)) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(Duration::from_secs(10))
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}

fn answer(state: &Mutex<State>, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    let (method, path) = (req.method().as_str(), req.uri().path());
    let s = lock(state);
    if let (Some(report), "GET" | "HEAD", "/" | "/index.html") = (&s.report, method, path) {
        // The report is self-contained (inline style and SVG, no script).
        let mut res = Response::new(Full::new(Bytes::from(report.as_bytes().to_vec())));
        res.headers_mut().insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static("text/html; charset=utf-8"),
        );
        res.headers_mut().insert(
            hyper::header::CACHE_CONTROL,
            hyper::header::HeaderValue::from_static("no-store"),
        );
        return res;
    }
    if path == "/favicon.ico" {
        // The report names no icon, so a browser asks for this one: nothing, and no error.
        let mut res = Response::new(Full::new(Bytes::new()));
        *res.status_mut() = StatusCode::NO_CONTENT;
        return res;
    }
    let reply = if let Some(r) = s.page.asset(method, path) {
        r
    } else if path == scalpel_live::SNAPSHOT_PATH && method == "GET" {
        s.page.snapshot(&snapshot(&s))
    } else {
        let mut res = Response::new(Full::new(Bytes::from(format!(
            "{{\"error\":\"no dashboard resource {}: try /\"}}",
            path.escape_default()
        ))));
        *res.status_mut() = StatusCode::NOT_FOUND;
        res.headers_mut().insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static("application/json"),
        );
        return res;
    };
    let headers = reply.headers();
    let mut res = Response::new(Full::new(Bytes::from(reply.body.into_owned())));
    *res.status_mut() = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::OK);
    for (name, value) in headers {
        res.headers_mut()
            .insert(name, hyper::header::HeaderValue::from_static(value));
    }
    res
}

#[derive(Serialize)]
struct TargetOut<'a> {
    name: &'a str,
    url: &'a str,
    #[serde(flatten)]
    now: Option<TargetNow>,
    cpu_percent: Option<f64>,
    rss_bytes: Option<u64>,
}

#[derive(Serialize)]
struct LoadOut<'a> {
    state: &'static str,
    model: &'static str,
    slo: Option<&'a str>,
    elapsed_s: f64,
    left_s: Option<f64>,
    step: &'a StepNow,
    targets: Vec<TargetOut<'a>>,
}

/// What the page polls: the run's state and each target's figures now, and the charts.
fn snapshot(s: &State) -> Snapshot {
    let targets = s
        .targets
        .iter()
        .map(|t| {
            let sample = t.target.sampler.as_ref().and_then(|x| x.latest());
            TargetOut {
                name: &t.target.name,
                url: &t.target.url,
                now: t.now,
                cpu_percent: t.cpu,
                rss_bytes: sample.map(|x| x.rss_bytes),
            }
        })
        .collect();
    let mut snap = Snapshot::new(LoadOut {
        state: if s.report.is_some() {
            "finished"
        } else {
            "running"
        },
        model: s.model,
        slo: s.slo.as_ref().map(Slo::as_str),
        elapsed_s: (s.started.elapsed().as_secs_f64() * 10.0).round() / 10.0,
        left_s: s.left_s.map(|l| l.round()),
        step: &s.step,
        targets,
    });
    for (id, chart) in charts(s) {
        snap.push_chart(id, chart);
    }
    snap
}

/// The x axis of every chart.
const SINCE_START: &str = "seconds since the start";

/// One line over a target's points: `f` reads the figure from a point (`None`: no point).
fn series(
    target: &TargetState,
    i: usize,
    name: String,
    dashed: bool,
    f: &dyn Fn(&Point) -> Option<f64>,
) -> Line {
    Line {
        name,
        color_index: i,
        dashed,
        points: target
            .points
            .iter()
            .filter_map(|p| f(p).map(|v| (p.t, v)))
            .collect(),
    }
}

/// Rate and latency for every target; CPU and memory when some target is watched.
fn charts(s: &State) -> Vec<(&'static str, Chart)> {
    let mut out = vec![
        ("load-rate", rate_chart(s)),
        ("load-latency", latency_chart(s)),
    ];
    let (mut cpu, mut memory) = (Vec::new(), Vec::new());
    for (i, t) in s.targets.iter().enumerate() {
        if t.target.sampler.is_some() {
            let name = &t.target.name;
            cpu.push(series(t, i, name.clone(), false, &|p| p.cpu));
            memory.push(series(t, i, name.clone(), false, &|p| {
                p.rss.map(|b| b as f64 / 1_048_576.0)
            }));
        }
    }
    if !cpu.is_empty() {
        out.push((
            "load-cpu",
            Chart {
                title: "Targets' CPU (100% = one core)".into(),
                x_label: SINCE_START.into(),
                y_label: "percent".into(),
                lines: cpu,
                ..Chart::default()
            },
        ));
        out.push((
            "load-memory",
            Chart {
                title: "Targets' memory (RSS)".into(),
                x_label: SINCE_START.into(),
                y_label: "MiB".into(),
                lines: memory,
                ..Chart::default()
            },
        ));
    }
    out
}

/// Achieved rate per target, and the offered rate dashed when the model has one.
fn rate_chart(s: &State) -> Chart {
    let mut rate = Vec::new();
    for (i, t) in s.targets.iter().enumerate() {
        let name = &t.target.name;
        rate.push(series(t, i, format!("{name} achieved"), false, &|p| {
            Some(p.achieved)
        }));
        if t.points.iter().any(|p| p.offered.is_some()) {
            rate.push(series(t, i, format!("{name} offered"), true, &|p| {
                p.offered
            }));
        }
    }
    Chart {
        title: "Offered (dashed) and achieved rate".into(),
        x_label: SINCE_START.into(),
        y_label: "requests/s".into(),
        lines: rate,
        ..Chart::default()
    }
}

/// p99 and p50 each second per target, with the SLO's bounds on them.
fn latency_chart(s: &State) -> Chart {
    let mut latency = Vec::new();
    for (i, t) in s.targets.iter().enumerate() {
        let name = &t.target.name;
        latency.push(series(t, i, format!("{name} p99"), false, &|p| p.p99));
        latency.push(series(t, i, format!("{name} p50"), true, &|p| p.p50));
    }
    let limits = s
        .slo
        .as_ref()
        .map(|slo| {
            ["p99", "p50"]
                .iter()
                .filter_map(|f| {
                    slo.latency_bound_ms(f)
                        .map(|ms| (ms, format!("SLO {f} < {ms} ms")))
                })
                .collect()
        })
        .unwrap_or_default();
    Chart {
        title: "Latency each second (p99 solid, p50 dashed)".into(),
        x_label: SINCE_START.into(),
        y_label: "milliseconds".into(),
        y_log: true,
        limits,
        lines: latency,
        ..Chart::default()
    }
}
