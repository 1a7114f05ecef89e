//! The live page at `/` of the proxy's admin address (front-end: `scalpel-live`).
//!
//! A ticker on the proxy's control runtime reads the recorder's summary and the counters
//! once a second into a bounded series (five minutes); a poll of the page builds its
//! snapshot from them. The client-serving path is never locked: its counters are atomics,
//! and the recorder's lock is the one the mirror side already holds when it compares.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use scalpel_live::{Chart, History, Kind, Line, Page, Snapshot};
use serde::Serialize;

use super::{Ctx, ProxyConfig};
use crate::recent::{LatencyFigures, RecentDifference};
use crate::tally::{EndpointSummary, NoiseField};

/// Points kept: five minutes of one-second ticks.
const HISTORY: usize = 300;

#[derive(Debug, Clone, Copy)]
struct Point {
    t: f64,
    compared: u64,
    mismatched: u64,
    skipped: u64,
    consistency: Option<f64>,
    primary: LatencyFigures,
    candidate: LatencyFigures,
}

#[derive(Debug)]
pub(super) struct Live {
    page: Page,
    started: Instant,
    points: Mutex<History<Point>>,
}

impl Live {
    pub(super) fn new(cfg: &ProxyConfig) -> Live {
        let title = format!(
            "scalpel shadow proxy on {}: {} vs {}",
            cfg.listen, cfg.primary, cfg.candidate
        );
        Live {
            page: Page::new(Kind::Shadow, &title),
            started: Instant::now(),
            points: Mutex::new(History::new(HISTORY)),
        }
    }

    pub(super) fn page(&self) -> &Page {
        &self.page
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, History<Point>> {
        self.points.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn tick(&self, ctx: &Ctx) {
        let s = ctx.recorder.summary();
        let (primary, candidate) = ctx.recorder.take_interval_latency();
        self.lock().push(Point {
            t: self.started.elapsed().as_secs_f64(),
            compared: s.compared,
            mismatched: s.mismatched,
            skipped: s.skipped,
            consistency: (s.compared > 0).then_some(s.consistency_percent),
            primary,
            candidate,
        });
    }

    /// The page's JSON (docs/live.md, "scalpel shadow proxy") and its charts.
    pub(super) fn snapshot(&self, ctx: &Ctx) -> Snapshot {
        let load = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
        let c = &ctx.counters;
        let s = ctx.recorder.summary();
        let latencies = ctx.recorder.latencies();
        let endpoints = s
            .endpoints
            .into_iter()
            .map(|e| {
                let l = latencies.iter().find(|l| l.endpoint == e.endpoint);
                EndpointOut {
                    primary_ms: l.map(|l| l.primary),
                    candidate_ms: l.map(|l| l.candidate),
                    summary: e,
                }
            })
            .collect();
        let data = ShadowOut {
            upstreams: Upstreams {
                primary: ctx.cfg.primary.to_string(),
                candidate: ctx.cfg.candidate.to_string(),
                secondary: ctx.cfg.secondary.as_ref().map(|u| u.to_string()),
            },
            requests: load(&c.requests),
            primary_errors: load(&c.primary_errors),
            mirrored: load(&c.mirrored),
            sampled_out: load(&c.not_mirrored_sampled_out),
            not_mirrored_method: load(&c.not_mirrored_method),
            mirror_in_flight: load(&c.in_flight),
            queue_depth: (ctx.queue.max_capacity() - ctx.queue.capacity()) as u64,
            compared: s.compared,
            matched: s.matched,
            mismatched: s.mismatched,
            skipped: s.skipped,
            skipped_by_reason: s.skipped_by_reason,
            errors: s.errors,
            errors_by_kind: s.errors_by_kind,
            consistency_percent: s.consistency_percent,
            noise_classified: s.secondary,
            endpoints,
            noise: s.noise,
            newest_differences: ctx.recorder.recent_differences(),
        };
        let mut snap = Snapshot::new(data);
        self.charts(&mut snap);
        snap
    }

    fn charts(&self, snap: &mut Snapshot) {
        let points = self.lock();
        let now = self.started.elapsed().as_secs_f64();
        let x = |t: f64| (t - now).min(0.0);
        let x_label = "seconds (0 = now)".to_string();
        let pairs: Vec<(&Point, &Point)> = points.iter().zip(points.iter().skip(1)).collect();
        let rate = |f: fn(&Point) -> u64, name: &str, color_index: usize| Line {
            name: name.into(),
            color_index,
            dashed: false,
            points: pairs
                .iter()
                .map(|(a, b)| {
                    let dt = (b.t - a.t).max(1e-3);
                    (x(b.t), f(b).saturating_sub(f(a)) as f64 / dt)
                })
                .collect(),
        };
        snap.push_chart(
            "shadow-consistency",
            Chart {
                title: "Consistency so far (matched ÷ compared)".into(),
                x_label: x_label.clone(),
                y_label: "percent".into(),
                lines: vec![Line {
                    name: "consistency".into(),
                    points: points
                        .iter()
                        .filter_map(|p| p.consistency.map(|c| (x(p.t), c)))
                        .collect(),
                    ..Line::default()
                }],
                limits: vec![(100.0, "100%".into())],
                ..Chart::default()
            },
        );
        snap.push_chart(
            "shadow-rate",
            Chart {
                title: "Pairs per second".into(),
                x_label: x_label.clone(),
                y_label: "per second".into(),
                lines: vec![
                    rate(|p| p.compared, "compared", 0),
                    rate(|p| p.mismatched, "mismatched", 1),
                    rate(|p| p.skipped, "skipped", 3),
                ],
                ..Chart::default()
            },
        );
        let lat =
            |name: &str, color_index: usize, dashed: bool, f: fn(&Point) -> (u64, f64)| Line {
                name: name.into(),
                color_index,
                dashed,
                points: points
                    .iter()
                    .filter_map(|p| {
                        let (n, v) = f(p);
                        (n > 0).then_some((x(p.t), v))
                    })
                    .collect(),
            };
        snap.push_chart(
            "shadow-latency",
            Chart {
                title: "Latency on compared pairs, each second (p99 solid, p50 dashed)".into(),
                x_label,
                y_label: "milliseconds".into(),
                y_log: true,
                lines: vec![
                    lat("primary p99", 0, false, |p| {
                        (p.primary.count, p.primary.p99)
                    }),
                    lat("candidate p99", 1, false, |p| {
                        (p.candidate.count, p.candidate.p99)
                    }),
                    lat("primary p50", 0, true, |p| (p.primary.count, p.primary.p50)),
                    lat("candidate p50", 1, true, |p| {
                        (p.candidate.count, p.candidate.p50)
                    }),
                ],
                wide: false,
                ..Chart::default()
            },
        );
    }
}

/// Ticks once a second until aborted (with the admin server).
pub(super) async fn run(live: Arc<Live>, ctx: Arc<Ctx>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        live.tick(&ctx);
    }
}

#[derive(Serialize)]
struct Upstreams {
    primary: String,
    candidate: String,
    secondary: Option<String>,
}

#[derive(Serialize)]
struct EndpointOut {
    #[serde(flatten)]
    summary: EndpointSummary,
    primary_ms: Option<LatencyFigures>,
    candidate_ms: Option<LatencyFigures>,
}

#[derive(Serialize)]
struct ShadowOut {
    upstreams: Upstreams,
    requests: u64,
    primary_errors: u64,
    mirrored: u64,
    sampled_out: u64,
    not_mirrored_method: u64,
    mirror_in_flight: u64,
    queue_depth: u64,
    compared: u64,
    matched: u64,
    mismatched: u64,
    skipped: u64,
    skipped_by_reason: std::collections::BTreeMap<String, u64>,
    errors: u64,
    errors_by_kind: std::collections::BTreeMap<String, u64>,
    consistency_percent: f64,
    noise_classified: bool,
    endpoints: Vec<EndpointOut>,
    noise: Vec<NoiseField>,
    newest_differences: Vec<RecentDifference>,
}
