//! The run: steps × targets × rounds of segments, alternating the targets' order, merging
//! each target's segments into one [`StepResult`] per step, judging the SLO, and assembling
//! the [`RunResult`].

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use scalpel_http::{Connector, HttpVersion};

use crate::live_latency::{LiveLatency, Window};
use crate::plan::{Model, Plan, PlanError, StepLimit};
use crate::result::{
    EndpointResult, FORMAT_VERSION, H2Events, LatencySummary, Machine, RunConfig, RunResult,
    StepResult, TargetResult, encode_histogram,
};
use crate::shard::Shard;
use crate::start::StartAt;
use crate::stop::Stop;
use crate::target::{ResourceUsage, Target};
use crate::worker::{Limit, Live, Outcome, Pacing, SegmentSpec, Tally, run_segment, share};

/// Failure to start a run.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The target could not be resolved or connected to, or did not answer the probe's
    /// HTTP/2 PING.
    #[error("target `{target}` ({url}) is unreachable: {why}")]
    Unreachable {
        /// Target name.
        target: String,
        /// Its base URL.
        url: String,
        /// What failed.
        why: String,
    },
    /// The target answers, but not as asked: its certificate does not verify, it has the
    /// wrong name, it refuses HTTP/2, or a CA file cannot be used.
    #[error("target `{target}` ({url}): {why}")]
    Refused {
        /// Target name.
        target: String,
        /// Its base URL.
        url: String,
        /// The problem, in one line.
        why: String,
    },
    /// The plan or its targets break a rule ([`Plan::validate`]).
    #[error(transparent)]
    Plan(#[from] PlanError),
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

/// Resolves every target and opens a connection (TLS and HTTP/2 as asked; an HTTP/2 one
/// answers a PING), so that a wrong address, a certificate that does not verify or a
/// server that refuses HTTP/2 gives one clear line before any load. No request is sent:
/// the server sees exactly the requests the run counts (docs/load.md, "The probe").
pub fn probe(plan: &Plan, targets: &[Target]) -> Result<(), LoadError> {
    resolve_all(plan, targets).map(|_| ())
}

/// Each target's connector and how long its probe took (the connection, and a PING over
/// HTTP/2).
fn resolve_all(plan: &Plan, targets: &[Target]) -> Result<Vec<(Connector, Duration)>, LoadError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let mut out = Vec::new();
        for t in targets {
            out.push(probe_target(plan, t).await?);
        }
        Ok(out)
    })
}

/// The plan's time-outs on the target's own settings: the connect time-out bounds the
/// TCP connect and the handshake; each request's own deadline replaces a per-read one.
fn peer_of(plan: &Plan, t: &Target) -> scalpel_http::Peer {
    let mut peer = t.endpoint.peer().clone();
    let o = peer.options_mut();
    o.connect_timeout = plan.connect_timeout;
    o.read_timeout = None;
    peer
}

async fn probe_target(plan: &Plan, t: &Target) -> Result<(Connector, Duration), LoadError> {
    use scalpel_http::{Error, ErrorKind};
    let unreachable = |why: String| LoadError::Unreachable {
        target: t.name.clone(),
        url: t.url.clone(),
        why,
    };
    let refused = |why: String| LoadError::Refused {
        target: t.name.clone(),
        url: t.url.clone(),
        why,
    };
    let within = scalpel_units::format_duration(plan.connect_timeout);
    let peer = peer_of(plan, t);
    let h2c = peer.options().version == HttpVersion::Http2 && !peer.is_tls();
    let connector = match tokio::time::timeout(plan.connect_timeout, Connector::new(peer)).await {
        Err(_) => return Err(unreachable("name resolution timed out".into())),
        Ok(Err(Error::Resolve { source, .. })) => {
            return Err(unreachable(format!("cannot resolve host: {source}")));
        }
        Ok(Err(e)) => return Err(refused(e.to_string())),
        Ok(Ok(c)) => c,
    };
    let addr = connector.addr();
    let started = Instant::now();
    let connected = connector.connect().await.map_err(|e| match e {
        Error::Tls(tls) => refused(tls.to_string()),
        Error::Timeout {
            phase: scalpel_http::Phase::Handshake,
            ..
        } => refused(format!("no TLS handshake with {addr} within {within}")),
        Error::H2 { .. } if h2c => refused(no_h2c(&e)),
        e => match e.kind() {
            ErrorKind::Local => unreachable(format!(
                "cannot open a connection to {addr}: the load generator's own limit ({})",
                e.detail().unwrap_or("EINVAL")
            )),
            ErrorKind::Tls => refused(format!("TLS handshake with {addr} failed: {e}")),
            _ => unreachable(format!("cannot connect to {addr} within {within}")),
        },
    })?;
    // The probe sends no request: the server sees exactly the requests the run counts.
    // An HTTP/2 connection is proven by a PING answered (over plain TCP, the client's
    // preface alone proves nothing); an HTTP/1.1 one by the connection itself.
    let scalpel_http::Conn::H2(conn) = connected.conn else {
        return Ok((connector, started.elapsed()));
    };
    match tokio::time::timeout(plan.timeout, conn.ping()).await {
        Ok(Ok(())) => Ok((connector, started.elapsed())),
        Ok(Err(e)) if h2c => Err(refused(no_h2c(&e))),
        Ok(Err(e)) => Err(unreachable(format!(
            "no HTTP/2 answer from {addr}: {} ({e})",
            e.kind().describe()
        ))),
        Err(_) => Err(unreachable(format!(
            "no answer to an HTTP/2 PING within {}",
            scalpel_units::format_duration(plan.timeout)
        ))),
    }
}

/// What a failed HTTP/2 exchange over plain TCP most likely means.
fn no_h2c(e: &scalpel_http::Error) -> String {
    format!(
        "the server does not speak HTTP/2 over plain TCP (h2c, prior knowledge): {e}; drop \
         --http2, or use https:// for HTTP/2 by ALPN"
    )
}

struct StepAcc {
    tally: Tally,
    wall: Duration,
    /// Sum of the segments' time windows (time-bound steps).
    window: Option<Duration>,
    usage: Option<ResourceUsage>,
    /// Segments run; fewer than the plan's rounds when an interrupt came first.
    segments: u32,
    /// An interrupt cut a segment of this step short.
    cut: bool,
    /// HTTP/2 events of the step's segments (HTTP/2 targets only).
    h2: Option<H2Events>,
    /// The latest any of its segments started after its planned time on the common clock.
    start_late: Option<Duration>,
}

impl StepAcc {
    fn new(endpoints: usize) -> StepAcc {
        StepAcc {
            tally: Tally::with_endpoints(endpoints),
            wall: Duration::ZERO,
            window: None,
            usage: None,
            segments: 0,
            cut: false,
            start_late: None,
            h2: None,
        }
    }

    /// Adds one segment: its tally, time, resource use and HTTP/2 events.
    fn add(&mut self, outcome: Outcome, usage: Option<ResourceUsage>, h2: Option<H2Events>) {
        if let Some(events) = h2 {
            self.h2.get_or_insert_with(H2Events::default).add(&events);
        }
        self.tally.merge(outcome.tally);
        self.wall += outcome.wall;
        self.window = match (self.window, outcome.window) {
            (None, w) | (w, None) => w,
            (Some(a), Some(b)) => Some(a + b),
        };
        self.usage = combine(self.usage, usage);
        self.segments += 1;
        self.cut |= outcome.partial;
        self.start_late = self.start_late.max(outcome.start_late);
    }
}

/// What the run loop knows about one target between steps.
struct TargetState {
    /// Opens its connections: address resolved, TLS configured, HTTP/2 counters.
    connector: Connector,
    /// Still ramping (no step has broken the SLO yet).
    active: bool,
    /// One connection's pace in the closed model: the mean latency of the target's answers
    /// so far (at first the probe's: a connection, no request), to weigh failed connects
    /// against.
    pace: Duration,
}

/// Runs the plan against the targets and returns everything measured. `progress` is called
/// about five times a second from the calling thread.
pub fn run(
    plan: &Plan,
    targets: Vec<Target>,
    progress: &mut dyn FnMut(&Progress<'_>),
) -> Result<RunResult, LoadError> {
    run_until(plan, targets, progress, &Stop::new())
}

/// [`run`], ending early when `stop` is raised (a signal): the steps finished so far and
/// the one that was running, marked `partial`, are returned with
/// [`RunResult::interrupted`] set.
pub fn run_until(
    plan: &Plan,
    mut targets: Vec<Target>,
    progress: &mut dyn FnMut(&Progress<'_>),
    stop: &Stop,
) -> Result<RunResult, LoadError> {
    plan.validate(&targets)?;
    let mut states: Vec<TargetState> = resolve_all(plan, &targets)?
        .into_iter()
        .map(|(connector, probe)| TargetState {
            connector,
            active: true,
            pace: probe,
        })
        .collect();
    let started_at = plan
        .start_at
        .map_or_else(rfc3339_now, |at| at.max(StartAt::now()).to_string());
    let run_id = new_run_id(&started_at);
    // A shard judges its own part: `rps` limits are the whole run's.
    let slo = plan.slo.as_ref().map(|s| s.for_part(plan.shard.count()));
    let rates = plan.rates();
    let mut results: Vec<TargetResult> = targets
        .iter()
        .zip(&states)
        .map(|(t, state)| TargetResult {
            name: t.name.clone(),
            url: t.url.clone(),
            connection: Some(t.connection_info(&state.connector)),
            steps: Vec::new(),
            breaking_point: None,
        })
        .collect();
    let mut clock = SegmentClock {
        segments_left: (rates.len() * targets.len()) as u32 * plan.rounds,
        sequence: 0,
        anchor: anchor(plan),
    };
    for (step_index, rate) in rates.iter().enumerate() {
        if stop.is_stopped() || !states.iter().any(|s| s.active) {
            break;
        }
        let step = StepPlan {
            index: step_index as u32,
            steps: rates.len() as u32,
            rate: *rate,
        };
        let accs = run_step(
            plan,
            &step,
            &mut targets,
            &mut states,
            &mut clock,
            stop,
            progress,
        )?;
        for (ti, acc) in accs.into_iter().enumerate() {
            let Some(acc) = acc else { continue };
            let result = &mut results[ti];
            result
                .steps
                .push(step_result_of(plan, &step, &targets[ti], acc));
            if let Some(slo) = &slo {
                result.breaking_point = slo.judge(&mut result.steps);
                states[ti].active = result.breaking_point.is_none();
            }
        }
        // Segments of targets that stopped are not run: keep the time-left estimate honest.
        let live = states.iter().filter(|s| s.active).count() as u32;
        let steps_after = (rates.len() - step_index - 1) as u32;
        clock.segments_left = clock.segments_left.min(live * plan.rounds * steps_after);
    }
    Ok(RunResult {
        format_version: FORMAT_VERSION,
        tool: format!("scalpel {}", env!("CARGO_PKG_VERSION")),
        part_ids: vec![run_id],
        interrupted: stop.is_stopped(),
        started_at,
        machine: machine(),
        config: run_config(plan),
        targets: results,
        // The caller, which knows the run's id and settings, describes the shard.
        shard: None,
        shards: None,
    })
}

/// The common clock (`start_at`) on this process's monotonic one; steps are planned from
/// it.
fn anchor(plan: &Plan) -> Option<Instant> {
    plan.start_at.map(|at| {
        let now = (Instant::now(), StartAt::now());
        let ahead = now.1.seconds_until(at);
        if ahead >= 0.0 {
            now.0 + Duration::from_secs_f64(ahead)
        } else {
            now.0
                .checked_sub(Duration::from_secs_f64(-ahead))
                .unwrap_or(now.0)
        }
    })
}

/// A target's result of one step from its segments: this shard's part of the offered
/// rate and of the count, `partial` when an interrupt cut a segment or left one out.
fn step_result_of(plan: &Plan, step: &StepPlan, target: &Target, acc: StepAcc) -> StepResult {
    let partial = acc.cut || acc.segments < plan.rounds;
    // This shard's part of the step's rate: every N-th request of the schedule.
    let offered = offered_rate(plan, target, step.rate).map(|r| plan.shard.rate(r));
    let limit = match plan.limit {
        StepLimit::Requests(n) => StepLimit::Requests(plan.shard.share(n)),
        d => d,
    };
    let mut result = step_result(step.index, offered, limit, target.source.endpoints(), acc);
    result.partial = partial;
    result
}

/// One step's rate and place in the run.
struct StepPlan {
    index: u32,
    steps: u32,
    rate: Option<f64>,
}

/// The alternation and the time-left estimate across the run.
struct SegmentClock {
    segments_left: u32,
    /// Rounds run so far: odd ones run the targets in reverse order.
    sequence: u64,
    /// The common clock's start (`--start-at`) on this process's monotonic clock.
    anchor: Option<Instant>,
}

impl SegmentClock {
    /// When segment `slot` of the run (counting every target's segments in the order of
    /// the alternation, also those of targets that stopped, so the plan is the same on every
    /// shard) is due on the common clock: `slot` segment-lengths after the anchor when
    /// time-bound; only the first when count-bound (its length is not known ahead).
    fn planned(&self, slot: u64, segment_time: Option<Duration>) -> Option<Instant> {
        let anchor = self.anchor?;
        match segment_time {
            Some(seg) => Some(anchor + seg.saturating_mul(u32::try_from(slot).ok()?)),
            None => (slot == 0).then_some(anchor),
        }
    }
}

/// Sleeps until `at` less a margin to open the connections in, in short naps so an
/// interrupt is seen at once: a segment's threads then wait for the rest at the gate, on
/// connections too fresh for a server's idle time-out.
fn wait_until(at: Instant, stop: &Stop) {
    const MARGIN: Duration = Duration::from_secs(1);
    loop {
        let now = Instant::now();
        if stop.is_stopped() || now + MARGIN >= at {
            return;
        }
        std::thread::sleep((at - MARGIN - now).min(Duration::from_millis(100)));
    }
}

/// Runs one step: `rounds` segments of every active target, in alternating order, until
/// done or stopped. Returns each target's accumulated segments (`None` for targets that
/// did not run in this step).
fn run_step(
    plan: &Plan,
    step: &StepPlan,
    targets: &mut [Target],
    states: &mut [TargetState],
    clock: &mut SegmentClock,
    stop: &Stop,
    progress: &mut dyn FnMut(&Progress<'_>),
) -> Result<Vec<Option<StepAcc>>, LoadError> {
    let rounds = plan.rounds;
    let segment_time = match plan.limit {
        StepLimit::Duration(d) => Some(d / rounds),
        StepLimit::Requests(_) => None,
    };
    let live: Vec<usize> = (0..targets.len()).filter(|&i| states[i].active).collect();
    let mut accs: Vec<Option<StepAcc>> = (0..targets.len()).map(|_| None).collect();
    let n_targets = targets.len() as u64;
    'rounds: for round in 0..rounds {
        // Alternate the order each round, continuing across steps: A,B then B,A, …
        let reversed = clock.sequence % 2 == 1;
        let mut order = live.clone();
        if reversed {
            order.reverse();
        }
        clock.sequence += 1;
        for &ti in &order {
            if stop.is_stopped() {
                break 'rounds;
            }
            // The segment's place on the common clock, the same on every shard.
            let position = if reversed {
                n_targets - 1 - ti as u64
            } else {
                ti as u64
            };
            let slot = (u64::from(step.index) * u64::from(rounds) + u64::from(round)) * n_targets
                + position;
            let planned = clock.planned(slot, segment_time);
            if let Some(at) = planned {
                wait_until(at, stop);
                if stop.is_stopped() {
                    break 'rounds;
                }
            }
            let limit = match plan.limit {
                StepLimit::Duration(_) => Limit::Time(segment_time.expect("time-bound")),
                StepLimit::Requests(n) => {
                    Limit::Count(share(n, u64::from(rounds), u64::from(round)))
                }
            };
            let segment = Segment {
                plan,
                step,
                limit,
                planned,
                segment_time,
                stop,
            };
            segment.run(
                &mut targets[ti],
                &mut states[ti],
                clock,
                &mut accs[ti],
                progress,
            )?;
        }
    }
    Ok(accs)
}

/// One segment of one target: its place in the step and on the clock.
struct Segment<'a> {
    plan: &'a Plan,
    step: &'a StepPlan,
    limit: Limit,
    planned: Option<Instant>,
    segment_time: Option<Duration>,
    stop: &'a Stop,
}

impl Segment<'_> {
    /// Runs the segment on its threads, with the progress line fed, the target's processes
    /// watched and its HTTP/2 events counted, and adds what it measured to the step's
    /// `acc` (made after the first segment, so no empty histogram waits beside the
    /// threads' own).
    fn run(
        &self,
        target: &mut Target,
        state: &mut TargetState,
        clock: &mut SegmentClock,
        acc: &mut Option<StepAcc>,
        progress: &mut dyn FnMut(&Progress<'_>),
    ) -> Result<(), LoadError> {
        let connector = state.connector.clone();
        let h2_before = target.h2_streams().map(|_| connector.h2_stats().counts());
        let spec = Arc::new(self.spec(target, state));
        if let Some(w) = target.watch.as_mut() {
            w.begin();
        }
        let seg_left_after = clock.segments_left.saturating_sub(1);
        let mut show = LiveProgress {
            name: &target.name,
            step: self.step,
            shard: self.plan.shard,
            segment_time: self.segment_time,
            seg_left_after,
            last: (Instant::now(), 0, 0),
            window: Window::new(),
        };
        let outcome: Outcome = run_segment(spec, |lives, t0| show.report(lives, t0, progress))?;
        clock.segments_left = seg_left_after;
        let usage = target.watch.as_mut().and_then(|w| w.end());
        if let Some(pace) = outcome.tally.answered_mean() {
            state.pace = pace;
        }
        let h2 = h2_before.map(|before| H2Events::between(&before, &connector.h2_stats().counts()));
        acc.get_or_insert_with(|| StepAcc::new(target.source.endpoints().len()))
            .add(outcome, usage, h2);
        Ok(())
    }

    /// What the segment's threads share: the target, its pacing, limits and threads.
    fn spec(&self, target: &Target, state: &TargetState) -> SegmentSpec {
        let plan = self.plan;
        let h2_streams = target.h2_streams();
        let pacing = self.pacing(h2_streams);
        SegmentSpec {
            connector: state.connector.clone(),
            endpoint: target.endpoint.clone(),
            h2_streams,
            no_reuse: target.no_reuse,
            source: target.source.clone(),
            pacing,
            limit: self.limit,
            threads: segment_threads(plan.threads, pacing, h2_streams),
            timeout: plan.timeout,
            stop: self.stop.clone(),
            typical_latency: state.pace,
            shard: plan.shard,
            planned: self.planned,
        }
    }

    /// The model at this step's rate. Rates and counts stay the whole run's (the schedule
    /// is shared out by index); connections and the in-flight limit are this shard's part.
    /// The open models' limits over HTTP/2: `connections` connections (all opened before
    /// the clock) and at most their streams in flight.
    fn pacing(&self, h2_streams: Option<u32>) -> Pacing {
        let plan = self.plan;
        let part = |n: u32| plan.shard.share(u64::from(n)) as u32;
        let (max_in_flight, preconnect) = match h2_streams {
            None => (
                part(plan.max_in_flight),
                part(plan.connections).min(part(plan.max_in_flight)),
            ),
            Some(streams) => (
                part(plan.max_in_flight).min(part(plan.connections).saturating_mul(streams)),
                part(plan.connections),
            ),
        };
        match (plan.model, self.step.rate) {
            (Model::Recorded { speed }, _) => Pacing::Recorded {
                speed,
                max_in_flight,
                preconnect,
            },
            (_, None) => Pacing::Closed {
                connections: part(plan.connections),
            },
            (_, Some(rate)) => Pacing::Open {
                rate,
                max_in_flight,
                preconnect,
            },
        }
    }
}

/// Threads for a segment: no more than it has connections (closed), connections to open
/// first (open over HTTP/2: a thread needs a connection of its own) or requests in flight.
fn segment_threads(threads: u32, pacing: Pacing, h2_streams: Option<u32>) -> u32 {
    match (pacing, h2_streams) {
        (Pacing::Closed { connections }, _) => threads.min(connections).max(1),
        (Pacing::Open { preconnect, .. } | Pacing::Recorded { preconnect, .. }, Some(_)) => {
            threads.min(preconnect).max(1)
        }
        (Pacing::Open { max_in_flight, .. } | Pacing::Recorded { max_in_flight, .. }, None) => {
            threads.min(max_in_flight).max(1)
        }
    }
}

/// The progress line's view of one segment.
struct LiveProgress<'a> {
    name: &'a str,
    step: &'a StepPlan,
    shard: Shard,
    segment_time: Option<Duration>,
    seg_left_after: u32,
    /// When the line was last given, with the completions and latency sum then.
    last: (Instant, u64, u64),
    /// Live percentiles over the last full second.
    window: Window,
}

impl LiveProgress<'_> {
    fn report(
        &mut self,
        lives: &[Arc<Live>],
        t0: Instant,
        progress: &mut dyn FnMut(&Progress<'_>),
    ) {
        let now = Instant::now();
        if now.duration_since(self.last.0) < Duration::from_millis(200) {
            return;
        }
        let sum = |f: fn(&Live) -> u64| lives.iter().map(|l| f(l)).sum::<u64>();
        let completed = sum(|l| l.completed.load(Ordering::Relaxed));
        let errors = sum(|l| l.errors.load(Ordering::Relaxed));
        let lat = sum(|l| l.latency_us_sum.load(Ordering::Relaxed));
        let dt = now.duration_since(self.last.0).as_secs_f64();
        let dn = completed.saturating_sub(self.last.1);
        let mean = if dn > 0 {
            lat.saturating_sub(self.last.2) as f64 / dn as f64 / 1000.0
        } else {
            0.0
        };
        let left = self.segment_time.map(|seg| {
            seg.saturating_sub(now.saturating_duration_since(t0)) + seg * self.seg_left_after
        });
        progress(&Progress {
            target: self.name,
            step: self.step.index,
            steps: self.step.steps,
            offered_rps: self.step.rate.map(|r| self.shard.rate(r)),
            rps: dn as f64 / dt,
            mean_latency_ms: mean,
            latency_ms: self.window.update(lives.iter().map(|l| &l.buckets)),
            errors,
            completed,
            left,
        });
        self.last = (now, completed, lat);
    }
}

fn run_config(plan: &Plan) -> RunConfig {
    // A shard writes its own part; `scalpel report merge` adds the parts up again.
    let part = |n: u32| plan.shard.share(u64::from(n)) as u32;
    RunConfig {
        model: plan.model.name().to_string(),
        connections: part(plan.connections),
        max_in_flight: (!matches!(plan.model, Model::Closed)).then_some(part(plan.max_in_flight)),
        step_duration_s: match plan.limit {
            StepLimit::Duration(d) => Some(d.as_secs_f64()),
            StepLimit::Requests(_) => None,
        },
        requests_per_step: match plan.limit {
            StepLimit::Requests(n) => Some(plan.shard.share(n)),
            StepLimit::Duration(_) => None,
        },
        slo: plan.slo.as_ref().map(|s| s.as_str().to_string()),
        request: plan.request_label.clone(),
        recorded: None,
    }
}

/// An id unlikely to repeat: the start time, the host, the process and the nanoseconds,
/// so that `scalpel report merge` can tell a run given twice from two runs.
fn new_run_id(started_at: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "{}-{}-{}-{nanos:09}",
        read_trimmed("/proc/sys/kernel/hostname"),
        started_at,
        std::process::id()
    )
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

/// The step's asked rate: the plan's, or a recording's mean rate at the replay speed
/// (`None` for a recording whose requests were all stamped at one instant).
fn offered_rate(plan: &Plan, target: &Target, rate: Option<f64>) -> Option<f64> {
    match (plan.model, target.source.recorded()) {
        (Model::Recorded { speed }, Some(r)) => {
            let span = r.span().as_secs_f64() / speed;
            (span > 0.0).then(|| r.len() as f64 / span)
        }
        _ => rate,
    }
}

fn step_result(
    index: u32,
    offered: Option<f64>,
    limit: StepLimit,
    names: &[String],
    mut acc: StepAcc,
) -> StepResult {
    let endpoints = std::mem::take(&mut acc.tally.endpoints);
    let t = &acc.tally;
    let secs = acc.wall.as_secs_f64();
    // Time-bound: answers inside the scheduled window ÷ its length (as wrk), so the wait
    // for the last in-flight requests does not dilute the rate. Count-bound: all answers ÷
    // the wall time from start to the last completion — or ÷ the schedule's own length
    // when that is longer: 5 requests at 50 rps span 0.1 s, and dividing by the 80 ms to
    // the last answer showed 62 rps "achieved" of 50 offered. An endpoint's rate is its
    // answers over the same span as the step's.
    let span = match (acc.window, limit, offered) {
        (Some(w), _, _) => w.as_secs_f64(),
        (None, StepLimit::Requests(_), Some(rate)) if rate > 0.0 => {
            secs.max((t.requests + t.not_sent) as f64 / rate)
        }
        (None, _, _) => secs,
    };
    let start_late_s = acc.start_late.map(|d| d.as_secs_f64());
    let windowed = acc.window.is_some();
    let achieved = |t: &Tally| {
        let done = if windowed { t.in_window } else { t.answered };
        if span > 0.0 { done as f64 / span } else { 0.0 }
    };
    let mb = |b: u64| b as f64 / (1024.0 * 1024.0);
    let u = acc.usage;
    StepResult {
        index,
        offered_rps: offered,
        achieved_rps: achieved(t),
        duration_s: secs,
        requests: t.requests,
        sent: t.sent,
        answered: t.answered,
        failed: t.sent - t.answered,
        errors: t.errors,
        error_kinds: t.error_kinds.clone(),
        late: t.late,
        not_sent: t.not_sent,
        interrupted: t.interrupted,
        partial: false,
        latency_ms: LatencySummary::from_histogram(&t.histogram),
        histogram: encode_histogram(&t.histogram),
        cpu_percent: u.map(|u| u.cpu_percent_mean),
        cpu_percent_peak: u.map(|u| u.cpu_percent_peak),
        rss_mb: u.map(|u| mb(u.rss_bytes_mean)),
        rss_mb_peak: u.map(|u| mb(u.rss_bytes_peak)),
        pss_mb: u.and_then(|u| u.pss_bytes_mean).map(mb),
        pss_mb_peak: u.and_then(|u| u.pss_bytes_peak).map(mb),
        slo_held: None,
        slo_reason: None,
        start_late_s,
        connections_opened: t.connections,
        handshake_ms: t
            .handshakes
            .as_ref()
            .and_then(LatencySummary::from_histogram),
        handshake_histogram: t.handshakes.as_ref().map(encode_histogram),
        h2: acc.h2.clone(),
        endpoints: names
            .iter()
            .zip(&endpoints)
            .map(|(name, t)| EndpointResult {
                name: name.clone(),
                achieved_rps: achieved(t),
                requests: t.requests,
                sent: t.sent,
                answered: t.answered,
                failed: t.sent - t.answered,
                errors: t.errors,
                error_kinds: t.error_kinds.clone(),
                late: t.late,
                not_sent: t.not_sent,
                interrupted: t.interrupted,
                latency_ms: LatencySummary::from_histogram(&t.histogram),
                histogram: encode_histogram(&t.histogram),
            })
            .collect(),
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

/// Now as RFC 3339 UTC to the second, e.g. `2025-06-01T12:00:00Z`.
fn rfc3339_now() -> String {
    let now = StartAt::now().since_epoch();
    StartAt::from_unix(Duration::from_secs(now.as_secs())).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamp_is_rfc3339() {
        let s = rfc3339_now();
        assert_eq!(s.len(), 20, "{s}");
        assert!(s.starts_with("20") && s.ends_with('Z'));
    }
}
