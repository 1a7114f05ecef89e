//! The run: steps × targets × rounds of segments, alternating the targets' order, merging
//! each target's segments into one [`StepResult`] per step, judging the SLO, and assembling
//! the [`RunResult`].

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::http1::{Conn, Endpoint, RequestParts, UrlError};
use crate::live_latency::{LiveLatency, Window};
use crate::result::{
    BreakingPoint, FORMAT_VERSION, LatencySummary, Machine, RunConfig, RunResult, StepResult,
    TargetResult, encode_histogram,
};
use crate::slo::Slo;
use crate::worker::{Limit, Live, Outcome, Pacing, SegmentSpec, Tally, run_segment, share};

/// Renders request number `index` of a run. Implemented by the CLI over `scalpel-requests`;
/// [`FixedRequest`] is the simplest one.
pub trait RequestSource: Send + Sync + std::fmt::Debug + 'static {
    /// True when every index renders the same request: it is then encoded once, not per
    /// request.
    fn is_fixed(&self) -> bool;
    /// Fills `out` (reused between requests) with request `index`.
    fn render(&self, index: u64, out: &mut RequestParts);
}

/// The same request every time.
#[derive(Debug, Clone)]
pub struct FixedRequest(RequestParts);

impl FixedRequest {
    /// A request without a body, e.g. `FixedRequest::new("GET", "/")`.
    pub fn new(method: &str, path_and_query: &str) -> FixedRequest {
        FixedRequest(RequestParts {
            method: method.to_string(),
            path_and_query: path_and_query.to_string(),
            ..RequestParts::default()
        })
    }

    /// A request from its parts.
    pub fn from_parts(parts: RequestParts) -> FixedRequest {
        FixedRequest(parts)
    }
}

impl RequestSource for FixedRequest {
    fn is_fixed(&self) -> bool {
        true
    }
    fn render(&self, _index: u64, out: &mut RequestParts) {
        out.clone_from(&self.0);
    }
}

/// Resource use of a watched process tree over a segment (from `scalpel-procstat`).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ResourceUsage {
    /// Samples taken; segments are combined weighted by it.
    pub samples: u64,
    /// Mean CPU% (100 = one core) summed over the tree.
    pub cpu_percent_mean: f64,
    /// Peak CPU%.
    pub cpu_percent_peak: f64,
    /// Mean resident set size in bytes, summed over the tree.
    pub rss_bytes_mean: u64,
    /// Peak resident set size in bytes.
    pub rss_bytes_peak: u64,
    /// Mean proportional set size in bytes, where the kernel gives it.
    pub pss_bytes_mean: Option<u64>,
    /// Peak proportional set size in bytes.
    pub pss_bytes_peak: Option<u64>,
}

/// Watches a target's processes: `begin` at the start of each segment, `end` after it.
pub trait ResourceWatch: Send + std::fmt::Debug {
    /// Marks the start of a segment.
    fn begin(&mut self);
    /// The usage since the last `begin`; `None` when nothing could be sampled.
    fn end(&mut self) -> Option<ResourceUsage>;
}

/// One service to load: a name, a base URL, its requests and optionally its processes.
#[derive(Debug)]
pub struct Target {
    name: String,
    url: String,
    endpoint: Endpoint,
    source: Arc<dyn RequestSource>,
    watch: Option<Box<dyn ResourceWatch>>,
}

impl Target {
    /// A target named `name` at `base_url` (`http://host:port[/prefix]`).
    pub fn new(
        name: &str,
        base_url: &str,
        source: Arc<dyn RequestSource>,
    ) -> Result<Target, UrlError> {
        Ok(Target {
            name: name.to_string(),
            url: base_url.to_string(),
            endpoint: Endpoint::parse(base_url)?,
            source,
            watch: None,
        })
    }

    /// Samples this target's processes during every segment.
    pub fn with_watch(mut self, watch: Box<dyn ResourceWatch>) -> Target {
        self.watch = Some(watch);
        self
    }

    /// The target's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// The load model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Model {
    /// `connections` sending back to back (wrk).
    Closed,
    /// A fixed rate in requests/s (wrk2, vegeta).
    Open {
        /// Requests per second.
        rate: f64,
    },
    /// Rates `start, start+step, …` up to `max`, one step each, until the SLO breaks.
    Ramp {
        /// First rate.
        start: f64,
        /// Increment per step.
        step: f64,
        /// Highest rate.
        max: f64,
    },
}

/// How long each step lasts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum StepLimit {
    /// A wall-clock duration.
    Duration(Duration),
    /// A number of requests.
    Requests(u64),
}

/// Everything about a run except the targets.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Closed, open or ramp.
    pub model: Model,
    /// Length of each step (the only step in closed and open).
    pub limit: StepLimit,
    /// Closed: connections. Open/ramp: connections opened before the clock starts.
    pub connections: u32,
    /// Open/ramp: most requests in flight (and connections) per target.
    pub max_in_flight: u32,
    /// OS threads, each with its own single-threaded runtime.
    pub threads: u32,
    /// Time-out for establishing a connection.
    pub connect_timeout: Duration,
    /// Time-out for a whole request (connect, send, receive).
    pub timeout: Duration,
    /// The SLO each step is judged by.
    pub slo: Option<Slo>,
    /// Segments per step and target, run in alternating target order (A,B then B,A).
    pub rounds: u32,
    /// A description of the request for the result file, e.g. `GET /v1/users/{id}`.
    pub request_label: String,
}

/// Failure to start a run.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The target could not be resolved, connected to or did not answer the probe request.
    #[error("target `{target}` ({url}) is unreachable: {why}")]
    Unreachable {
        /// Target name.
        target: String,
        /// Its base URL.
        url: String,
        /// What failed.
        why: String,
    },
    /// The plan makes no sense (no targets, zero rate, …).
    #[error("{0}")]
    BadPlan(String),
    /// Threads or runtimes could not be created.
    #[error("could not start the load workers: {0}")]
    Io(#[from] std::io::Error),
}

/// A snapshot for a progress line, given every ~200 ms.
#[derive(Debug, Clone)]
pub struct Progress<'a> {
    /// Target being loaded.
    pub target: &'a str,
    /// Step index and number of steps planned.
    pub step: u32,
    /// Steps planned in total.
    pub steps: u32,
    /// Asked rate of the step, if open.
    pub offered_rps: Option<f64>,
    /// Completions per second over the last interval.
    pub rps: f64,
    /// Mean latency over the last interval in ms.
    pub mean_latency_ms: f64,
    /// Percentiles over the last full second (within 3.2 %; `None` before the first
    /// second of a segment or when nothing was answered in it).
    pub latency_ms: Option<LiveLatency>,
    /// Errors so far in this segment.
    pub errors: u64,
    /// Requests completed so far in this segment.
    pub completed: u64,
    /// Estimated time left in the whole run, when time-bound.
    pub left: Option<Duration>,
}

impl Plan {
    fn rates(&self) -> Vec<Option<f64>> {
        match self.model {
            Model::Closed => vec![None],
            Model::Open { rate } => vec![Some(rate)],
            Model::Ramp { start, step, max } => {
                let mut out = Vec::new();
                let mut k = 0.0;
                loop {
                    let rate = start + k * step;
                    if rate > max * (1.0 + 1e-9) || out.len() >= 10_000 {
                        break;
                    }
                    out.push(Some(rate));
                    k += 1.0;
                }
                out
            }
        }
    }

    fn validate(&self, targets: &[Target]) -> Result<(), LoadError> {
        let bad = |s: &str| Err(LoadError::BadPlan(s.to_string()));
        if targets.is_empty() {
            return bad("no target");
        }
        for (i, t) in targets.iter().enumerate() {
            if targets[..i].iter().any(|o| o.name == t.name) {
                return Err(LoadError::BadPlan(format!(
                    "target name `{}` given twice",
                    t.name
                )));
            }
        }
        match self.model {
            Model::Closed if self.connections == 0 => return bad("connections must be at least 1"),
            Model::Open { rate } if !(rate > 0.0 && rate.is_finite()) => {
                return bad("the rate must be a positive number");
            }
            Model::Ramp { start, step, max }
                if !(start > 0.0 && step > 0.0 && max >= start && max.is_finite()) =>
            {
                return bad(
                    "--ramp needs START,STEP,MAX with START > 0, STEP > 0 and MAX >= START",
                );
            }
            _ => {}
        }
        if self.max_in_flight == 0 {
            return bad("the in-flight limit must be at least 1");
        }
        if self.rounds == 0 || self.threads == 0 {
            return bad("rounds and threads must be at least 1");
        }
        match self.limit {
            StepLimit::Duration(d) if d.is_zero() => bad("the duration must be longer than 0"),
            StepLimit::Requests(0) => bad("the request count must be at least 1"),
            StepLimit::Requests(n) if n < u64::from(self.rounds) => {
                bad("the request count must be at least the number of rounds")
            }
            _ => Ok(()),
        }
    }
}

/// Resolves every target and sends it one request (request 0), so that a wrong address
/// gives one clear error before any load.
pub fn probe(plan: &Plan, targets: &[Target]) -> Result<(), LoadError> {
    resolve_all(plan, targets).map(|_| ())
}

fn resolve_all(plan: &Plan, targets: &[Target]) -> Result<Vec<std::net::SocketAddr>, LoadError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let mut addrs = Vec::new();
        for t in targets {
            let fail = |why: String| LoadError::Unreachable {
                target: t.name.clone(),
                url: t.url.clone(),
                why,
            };
            let addr = tokio::time::timeout(plan.connect_timeout, t.endpoint.resolve())
                .await
                .map_err(|_| fail("name resolution timed out".into()))?
                .map_err(|e| fail(format!("cannot resolve host: {e}")))?;
            let mut conn = Conn::connect(addr, plan.connect_timeout)
                .await
                .map_err(|_| {
                    fail(format!(
                        "cannot connect to {addr} within {:?}",
                        plan.connect_timeout
                    ))
                })?;
            let mut parts = RequestParts::default();
            t.source.render(0, &mut parts);
            let mut wire = Vec::new();
            parts.encode(&t.endpoint, &mut wire);
            match tokio::time::timeout(plan.timeout, conn.round_trip(&wire, parts.is_head())).await
            {
                Ok(Ok(_)) => {}
                Ok(Err(f)) => return Err(fail(format!("probe request failed ({f:?})"))),
                Err(_) => {
                    return Err(fail(format!(
                        "no response to a probe request within {:?}",
                        plan.timeout
                    )));
                }
            }
            addrs.push(addr);
        }
        Ok(addrs)
    })
}

struct StepAcc {
    tally: Tally,
    wall: Duration,
    /// Sum of the segments' time windows (time-bound steps).
    window: Option<Duration>,
    usage: Option<ResourceUsage>,
}

/// Runs the plan against the targets and returns everything measured. `progress` is called
/// about five times a second from the calling thread.
pub fn run(
    plan: &Plan,
    mut targets: Vec<Target>,
    progress: &mut dyn FnMut(&Progress<'_>),
) -> Result<RunResult, LoadError> {
    plan.validate(&targets)?;
    let started_at = rfc3339_now();
    let addrs = resolve_all(plan, &targets)?;
    let rates = plan.rates();
    let threads = plan.threads;
    let mut results: Vec<TargetResult> = targets
        .iter()
        .map(|t| TargetResult {
            name: t.name.clone(),
            url: t.url.clone(),
            steps: Vec::new(),
            breaking_point: None,
        })
        .collect();
    let mut active: Vec<bool> = vec![true; targets.len()];
    let mut last_held: Vec<Option<f64>> = vec![None; targets.len()];
    let rounds = plan.rounds;
    let segment_time = match plan.limit {
        StepLimit::Duration(d) => Some(d / rounds),
        StepLimit::Requests(_) => None,
    };
    let mut segments_left = (rates.len() * targets.len()) as u32 * rounds;
    let mut sequence = 0u64;
    for (step_index, rate) in rates.iter().enumerate() {
        let live_targets: Vec<usize> = (0..targets.len()).filter(|&i| active[i]).collect();
        if live_targets.is_empty() {
            break;
        }
        let mut accs: Vec<Option<StepAcc>> = (0..targets.len()).map(|_| None).collect();
        for round in 0..rounds {
            // Alternate the order each round, continuing across steps: A,B then B,A, …
            let mut order = live_targets.clone();
            if sequence % 2 == 1 {
                order.reverse();
            }
            sequence += 1;
            for &ti in &order {
                let limit = match plan.limit {
                    StepLimit::Duration(_) => Limit::Time(segment_time.expect("time-bound")),
                    StepLimit::Requests(n) => {
                        Limit::Count(share(n, u64::from(rounds), u64::from(round)))
                    }
                };
                let pacing = match rate {
                    None => Pacing::Closed {
                        connections: plan.connections,
                    },
                    Some(rate) => Pacing::Open {
                        rate: *rate,
                        max_in_flight: plan.max_in_flight,
                        preconnect: plan.connections.min(plan.max_in_flight),
                    },
                };
                let seg_threads = match pacing {
                    Pacing::Closed { connections } => threads.min(connections).max(1),
                    Pacing::Open { max_in_flight, .. } => threads.min(max_in_flight).max(1),
                };
                let target = &mut targets[ti];
                let spec = Arc::new(SegmentSpec {
                    addr: addrs[ti],
                    endpoint: target.endpoint.clone(),
                    source: target.source.clone(),
                    pacing,
                    limit,
                    threads: seg_threads,
                    connect_timeout: plan.connect_timeout,
                    timeout: plan.timeout,
                });
                if let Some(w) = target.watch.as_mut() {
                    w.begin();
                }
                let mut last = (Instant::now(), 0u64, 0u64);
                let mut window = Window::new();
                let name = target.name.clone();
                let steps = rates.len() as u32;
                let seg_left_after = segments_left.saturating_sub(1);
                let outcome: Outcome = run_segment(spec, |lives: &[Arc<Live>], t0: Instant| {
                    let now = Instant::now();
                    if now.duration_since(last.0) < Duration::from_millis(200) {
                        return;
                    }
                    let sum = |f: fn(&Live) -> u64| lives.iter().map(|l| f(l)).sum::<u64>();
                    let completed = sum(|l| l.completed.load(std::sync::atomic::Ordering::Relaxed));
                    let errors = sum(|l| l.errors.load(std::sync::atomic::Ordering::Relaxed));
                    let lat = sum(|l| l.latency_us_sum.load(std::sync::atomic::Ordering::Relaxed));
                    let dt = now.duration_since(last.0).as_secs_f64();
                    let dn = completed - last.1;
                    let mean = if dn > 0 {
                        (lat - last.2) as f64 / dn as f64 / 1000.0
                    } else {
                        0.0
                    };
                    let left = segment_time.map(|seg| {
                        seg.saturating_sub(now.saturating_duration_since(t0)) + seg * seg_left_after
                    });
                    let latency_ms = window.update(lives.iter().map(|l| &l.buckets));
                    progress(&Progress {
                        target: &name,
                        step: step_index as u32,
                        steps,
                        offered_rps: *rate,
                        rps: dn as f64 / dt,
                        mean_latency_ms: mean,
                        latency_ms,
                        errors,
                        completed,
                        left,
                    });
                    last = (now, completed, lat);
                })?;
                segments_left = seg_left_after;
                let usage = targets[ti].watch.as_mut().and_then(|w| w.end());
                let acc = accs[ti].get_or_insert_with(|| StepAcc {
                    tally: Tally::new(),
                    wall: Duration::ZERO,
                    window: None,
                    usage: None,
                });
                acc.tally.merge(outcome.tally);
                acc.wall += outcome.wall;
                acc.window = match (acc.window, outcome.window) {
                    (None, w) | (w, None) => w,
                    (Some(a), Some(b)) => Some(a + b),
                };
                acc.usage = combine(acc.usage, usage);
            }
        }
        for &ti in &live_targets {
            let acc = accs[ti].take().expect("every live target ran this step");
            let mut step = step_result(step_index as u32, *rate, acc);
            if let Some(slo) = &plan.slo {
                match slo.violation(&step) {
                    None => {
                        step.slo_held = Some(true);
                        last_held[ti] = Some(rate.unwrap_or(step.achieved_rps));
                    }
                    Some(reason) => {
                        step.slo_held = Some(false);
                        active[ti] = false;
                        results[ti].breaking_point = Some(BreakingPoint {
                            rps: last_held[ti].unwrap_or(0.0),
                            reason,
                        });
                    }
                }
            }
            results[ti].steps.push(step);
        }
        // Segments of targets that stopped are not run: keep the time-left estimate honest.
        let stopped = (0..targets.len()).filter(|&i| !active[i]).count() as u32;
        let steps_after = (rates.len() - step_index - 1) as u32;
        segments_left = segments_left.min((targets.len() as u32 - stopped) * rounds * steps_after);
    }
    let model = match plan.model {
        Model::Closed => "closed",
        Model::Open { .. } => "open",
        Model::Ramp { .. } => "ramp",
    };
    Ok(RunResult {
        format_version: FORMAT_VERSION,
        tool: format!("scalpel {}", env!("CARGO_PKG_VERSION")),
        started_at,
        machine: machine(),
        config: RunConfig {
            model: model.to_string(),
            connections: plan.connections,
            max_in_flight: (!matches!(plan.model, Model::Closed)).then_some(plan.max_in_flight),
            step_duration_s: match plan.limit {
                StepLimit::Duration(d) => Some(d.as_secs_f64()),
                StepLimit::Requests(_) => None,
            },
            requests_per_step: match plan.limit {
                StepLimit::Requests(n) => Some(n),
                StepLimit::Duration(_) => None,
            },
            slo: plan.slo.as_ref().map(|s| s.as_str().to_string()),
            request: plan.request_label.clone(),
        },
        targets: results,
    })
}

fn combine(a: Option<ResourceUsage>, b: Option<ResourceUsage>) -> Option<ResourceUsage> {
    match (a, b) {
        (None, x) | (x, None) => x,
        (Some(a), Some(b)) => {
            let n = (a.samples + b.samples).max(1);
            let wmean = |x: u64, y: u64| {
                ((x as u128 * a.samples as u128 + y as u128 * b.samples as u128) / n as u128) as u64
            };
            Some(ResourceUsage {
                samples: a.samples + b.samples,
                cpu_percent_mean: (a.cpu_percent_mean * a.samples as f64
                    + b.cpu_percent_mean * b.samples as f64)
                    / n as f64,
                cpu_percent_peak: a.cpu_percent_peak.max(b.cpu_percent_peak),
                rss_bytes_mean: wmean(a.rss_bytes_mean, b.rss_bytes_mean),
                rss_bytes_peak: a.rss_bytes_peak.max(b.rss_bytes_peak),
                pss_bytes_mean: match (a.pss_bytes_mean, b.pss_bytes_mean) {
                    (Some(x), Some(y)) => Some(wmean(x, y)),
                    (x, y) => x.or(y),
                },
                pss_bytes_peak: a.pss_bytes_peak.max(b.pss_bytes_peak),
            })
        }
    }
}

fn step_result(index: u32, offered: Option<f64>, acc: StepAcc) -> StepResult {
    let t = acc.tally;
    let secs = acc.wall.as_secs_f64();
    // Time-bound: completions inside the scheduled window ÷ its length (as wrk), so the
    // wait for the last in-flight requests does not dilute the rate. Count-bound: all
    // completions ÷ the wall time from start to the last completion.
    let (done, span) = match acc.window {
        Some(w) => (t.in_window, w.as_secs_f64()),
        None => (t.requests, secs),
    };
    let mb = |b: u64| b as f64 / (1024.0 * 1024.0);
    let u = acc.usage;
    StepResult {
        index,
        offered_rps: offered,
        achieved_rps: if span > 0.0 { done as f64 / span } else { 0.0 },
        duration_s: secs,
        requests: t.requests,
        errors: t.errors,
        error_kinds: t.error_kinds.clone(),
        late: t.late,
        not_sent: t.not_sent,
        latency_ms: LatencySummary::from_histogram(&t.histogram),
        histogram: encode_histogram(&t.histogram),
        cpu_percent: u.map(|u| u.cpu_percent_mean),
        cpu_percent_peak: u.map(|u| u.cpu_percent_peak),
        rss_mb: u.map(|u| mb(u.rss_bytes_mean)),
        rss_mb_peak: u.map(|u| mb(u.rss_bytes_peak)),
        pss_mb: u.and_then(|u| u.pss_bytes_mean).map(mb),
        pss_mb_peak: u.and_then(|u| u.pss_bytes_peak).map(mb),
        slo_held: None,
    }
}

fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// The machine this process runs on.
fn machine() -> Machine {
    let cpu_model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_default();
    Machine {
        hosts: vec![read_trimmed("/proc/sys/kernel/hostname")],
        cpus: std::thread::available_parallelism()
            .map(|n| n.get() as u32)
            .unwrap_or(1),
        cpu_model,
        kernel: read_trimmed("/proc/sys/kernel/osrelease"),
    }
}

/// Now as RFC 3339 UTC, e.g. `2025-06-01T12:00:00Z`.
fn rfc3339_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ramp_rates_include_max() {
        let plan = Plan {
            model: Model::Ramp {
                start: 100.0,
                step: 100.0,
                max: 500.0,
            },
            limit: StepLimit::Duration(Duration::from_secs(1)),
            connections: 1,
            max_in_flight: 1,
            threads: 1,
            connect_timeout: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
            slo: None,
            rounds: 1,
            request_label: String::new(),
        };
        let r: Vec<f64> = plan.rates().into_iter().flatten().collect();
        assert_eq!(r, vec![100.0, 200.0, 300.0, 400.0, 500.0]);
    }

    #[test]
    fn timestamp_is_rfc3339() {
        let s = rfc3339_now();
        assert_eq!(s.len(), 20, "{s}");
        assert!(s.starts_with("20") && s.ends_with('Z'));
    }
}
