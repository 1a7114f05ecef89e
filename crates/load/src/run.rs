//! The run: steps × targets × rounds of segments, alternating the targets' order, merging
//! each target's segments into one [`StepResult`] per step, judging the SLO, and assembling
//! the [`RunResult`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use scalpel_http::{Connector, HttpVersion, PeerOptions};

use crate::live_latency::{LiveLatency, Window};
use crate::request::{Endpoint, RequestParts, UrlError};
use crate::result::{
    ConnectionInfo, EndpointResult, FORMAT_VERSION, H2Events, LatencySummary, Machine, RunConfig,
    RunResult, StepResult, TargetResult, encode_histogram,
};
use crate::shard::Shard;
use crate::slo::Slo;
use crate::start::StartAt;
use crate::worker::{Limit, Live, Outcome, Pacing, SegmentSpec, Tally, run_segment, share};

/// Where a run's requests come from. Implemented by the CLI over `scalpel-requests`;
/// [`FixedRequest`] is the simplest one.
///
/// Shared by every load thread; each thread asks for its own [`Renderer`], which keeps
/// that thread's buffers and file readers between requests (no lock, no allocation once
/// warm). Request `index` is a pure function of the index for templates and mixes, so
/// every target of an A/B run gets the very same sequence.
pub trait RequestSource: Send + Sync + std::fmt::Debug + 'static {
    /// True when every index renders the same request: it is then encoded once, not per
    /// request.
    fn is_fixed(&self) -> bool;

    /// A renderer for one load thread.
    fn renderer(&self) -> Box<dyn Renderer>;

    /// The endpoints' names when the requests are a mix of endpoints: every figure is then
    /// kept per endpoint too (`endpoints[]` of each step). Empty (the default) otherwise.
    fn endpoints(&self) -> &[String] {
        &[]
    }

    /// The endpoint of request `index`, an index into [`RequestSource::endpoints`]: a pure
    /// function of `index` (requests never sent are counted against it too).
    fn endpoint_of(&self, _index: u64) -> usize {
        0
    }

    /// Whether the probe before the run sends request 0 (the default) or only opens a
    /// connection: recorded traffic is replayed exactly, and a recorded POST must not be
    /// sent one extra time.
    fn probe_with_request(&self) -> bool {
        true
    }

    /// The recorded schedule, for [`Model::Recorded`]; `None` (the default) for sources
    /// without recorded times.
    fn recorded(&self) -> Option<&dyn RecordedSchedule> {
        None
    }
}

/// Renders requests for one load thread (see [`RequestSource::renderer`]).
pub trait Renderer {
    /// Fills `out` (reused between requests) with request `index`. The indexes one thread
    /// asks for only grow within a segment.
    ///
    /// # Errors
    ///
    /// The request cannot be produced (a recorded file that went away or was truncated
    /// while it was replayed): it is counted not sent, kind `local:source`.
    fn render(&mut self, index: u64, out: &mut RequestParts) -> Result<(), SourceError>;
}

/// Recorded traffic's own schedule: when each request was sent, after the first.
pub trait RecordedSchedule: Send + Sync + std::fmt::Debug {
    /// Requests in one pass over the recording.
    fn len(&self) -> u64;

    /// Always false: a recording has at least one request.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// From the first to the last request, as recorded.
    fn span(&self) -> Duration;

    /// The recorded times of requests `first`, `first + stride`, `first + 2·stride`, … in
    /// order, never decreasing: one load thread's share of the schedule.
    fn times(&self, first: u64, stride: u64) -> Box<dyn RecordedTimes>;
}

/// One thread's walk through a recorded schedule (see [`RecordedSchedule::times`]).
pub trait RecordedTimes {
    /// The next recorded time; `Ok(None)` after the last.
    ///
    /// # Errors
    ///
    /// The recording cannot be read any more; the thread's remaining requests are counted
    /// not sent, kind `local:source`.
    fn next_at(&mut self) -> Result<Option<Duration>, SourceError>;
}

/// A request source that failed while the run was going (see [`Renderer::render`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SourceError(pub String);

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
    fn renderer(&self) -> Box<dyn Renderer> {
        Box::new(self.clone())
    }
}

impl Renderer for FixedRequest {
    fn render(&mut self, _index: u64, out: &mut RequestParts) -> Result<(), SourceError> {
        out.clone_from(&self.0);
        Ok(())
    }
}

/// Asks a running load to stop early, e.g. from a SIGINT handler on another thread. The
/// run stops claiming requests, cuts those in flight (counted `interrupted`), marks the
/// step it was in `partial` and returns everything measured until then.
#[derive(Debug, Clone, Default)]
pub struct Stop(Arc<StopState>);

#[derive(Debug, Default)]
struct StopState {
    raised: AtomicBool,
    at: OnceLock<Instant>,
}

impl Stop {
    /// A stop that has not been raised.
    pub fn new() -> Stop {
        Stop::default()
    }

    /// Raises it (idempotent; the first call's time counts).
    pub fn stop(&self) {
        let _ = self.0.at.set(Instant::now());
        self.0.raised.store(true, Ordering::Release);
    }

    /// Whether it was raised.
    pub fn is_stopped(&self) -> bool {
        self.0.raised.load(Ordering::Acquire)
    }

    /// When it was raised.
    pub(crate) fn at(&self) -> Option<Instant> {
        if self.is_stopped() {
            self.0.at.get().copied()
        } else {
            None
        }
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
    /// HTTP/2 streams per connection (h2load's `-m`).
    streams: u32,
    no_reuse: bool,
}

impl Target {
    /// A target named `name` at `base_url` (`http[s]://host[:port][/prefix]`), HTTP/1.1
    /// with keep-alive and the default TLS settings (the system's trust store).
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
            streams: 1,
            no_reuse: false,
        })
    }

    /// The settings that travel with the target: HTTP version (HTTP/2 by ALPN over TLS,
    /// prior knowledge over `http://`), CA file or `insecure`, SNI name, `--resolve`
    /// entries, the response head limit. Its time-outs are replaced by the plan's: the
    /// connect time-out, and the whole-request time-out instead of a per-read one.
    pub fn with_options(mut self, options: PeerOptions) -> Target {
        self.endpoint.set_options(options);
        self
    }

    /// HTTP/2: concurrent streams on each connection (h2load's `-m`; default 1). The
    /// closed model keeps connections × streams requests in flight.
    pub fn with_streams(mut self, streams: u32) -> Target {
        self.streams = streams.max(1);
        self
    }

    /// A new connection for every request, to measure the cost of connecting and the TLS
    /// handshake (oha's `--disable-keepalive`): each request says `Connection: close`.
    pub fn with_no_reuse(mut self, no_reuse: bool) -> Target {
        self.no_reuse = no_reuse;
        self.endpoint.set_close_each(no_reuse);
        self
    }

    /// HTTP/2 streams per connection, when the target is spoken to over HTTP/2.
    fn h2_streams(&self) -> Option<u32> {
        (self.endpoint.peer().options().version == HttpVersion::Http2).then_some(self.streams)
    }

    /// How the target was connected to, for the result.
    fn connection_info(&self, connector: &Connector) -> ConnectionInfo {
        let peer = self.endpoint.peer();
        let o = peer.options();
        let h2 = o.version == HttpVersion::Http2;
        ConnectionInfo {
            protocol: match (h2, peer.is_tls()) {
                (true, true) => "h2",
                (true, false) => "h2c",
                (false, _) => "http/1.1",
            }
            .to_string(),
            tls: peer.is_tls(),
            insecure: peer.is_tls() && o.insecure,
            ca_file: (peer.is_tls() && !o.insecure)
                .then(|| o.ca_file.as_ref().map(|p| p.display().to_string()))
                .flatten(),
            server_name: peer.is_tls().then(|| peer.tls_name().to_string()),
            address: connector.addr().to_string(),
            streams: h2.then_some(self.streams),
            reuse: !self.no_reuse,
        }
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
    /// Recorded traffic on its recorded schedule: request `k` is due at its recorded time
    /// (after the first request) divided by `speed`. The source must have a
    /// [`RequestSource::recorded`] schedule; thread `w` of `T` takes requests `w, w+T, …`.
    Recorded {
        /// 1 replays at the recorded pace, 10 ten times faster.
        speed: f64,
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
    /// This process's part of a run spread over several (`--shard`); rates, `connections`,
    /// `max_in_flight` and request counts above are the whole run's, and this process takes
    /// its share of each (see [`crate::shard`]). [`Shard::WHOLE`] for a run in one process.
    pub shard: Shard,
    /// The common clock (`--start-at`): the first step starts at this wall-clock time, and
    /// time-bound step `k` (segment `k` of the alternation) `k` step-lengths later, so the
    /// steps of every shard line up. `None`: start as soon as the connections are open.
    pub start_at: Option<StartAt>,
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
            Model::Closed | Model::Recorded { .. } => vec![None],
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
            Model::Recorded { speed } => {
                if !(speed > 0.0 && speed.is_finite()) {
                    return bad("the replay speed must be a positive number");
                }
                if let Some(t) = targets.iter().find(|t| t.source.recorded().is_none()) {
                    return Err(LoadError::BadPlan(format!(
                        "target `{}`: a recorded schedule needs recorded traffic as its source",
                        t.name
                    )));
                }
            }
            _ => {}
        }
        if self.max_in_flight == 0 {
            return bad("the in-flight limit must be at least 1");
        }
        // Every shard refuses alike: one that got nothing would make the set incomplete.
        let shards = self.shard.count();
        if self.connections < shards {
            return Err(LoadError::BadPlan(format!(
                "{} connections are the whole run's: too few for {shards} shards (at least one each)",
                self.connections
            )));
        }
        if !matches!(self.model, Model::Closed) && self.max_in_flight < shards {
            return Err(LoadError::BadPlan(format!(
                "the in-flight limit {} is the whole run's: too low for {shards} shards (at least one each)",
                self.max_in_flight
            )));
        }
        if self.rounds == 0 || self.threads == 0 {
            return bad("rounds and threads must be at least 1");
        }
        match self.limit {
            StepLimit::Duration(d) if d.is_zero() => bad("the duration must be longer than 0"),
            StepLimit::Requests(0) => bad("the request count must be at least 1"),
            StepLimit::Requests(n) if n < u64::from(self.rounds) * u64::from(shards) => {
                bad("the request count must be at least the number of rounds times the shards")
            }
            _ => Ok(()),
        }
    }
}

/// Resolves every target, opens a connection (TLS and HTTP/2 as asked) and sends it one
/// request (request 0), so that a wrong address, a certificate that does not verify or a
/// server that refuses HTTP/2 gives one clear line before any load.
pub fn probe(plan: &Plan, targets: &[Target]) -> Result<(), LoadError> {
    resolve_all(plan, targets).map(|_| ())
}

/// Each target's connector and the latency of its probe request.
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
    // Recorded traffic is replayed exactly: the connection is the probe.
    if !t.source.probe_with_request() {
        return Ok((connector, started.elapsed()));
    }
    // The shard's own first request: a sharded run probes with N different ones.
    let mut parts = RequestParts::default();
    t.source
        .renderer()
        .render(plan.shard.global(0), &mut parts)
        .map_err(|e| unreachable(format!("cannot make the probe request: {e}")))?;
    let failed = |e: &Error| {
        let what = e.kind().describe();
        unreachable(format!("the probe request failed: {what} ({e})"))
    };
    let answer = async {
        match connected.conn {
            scalpel_http::Conn::H1(mut conn) => {
                let mut wire = Vec::new();
                parts.encode(&t.endpoint, &mut wire);
                conn.round_trip(&wire, parts.is_head())
                    .await
                    .map_err(|e| failed(&e))?;
            }
            scalpel_http::Conn::H2(mut conn) => {
                let (request, body) = parts
                    .to_h2(&t.endpoint)
                    .map_err(|e| refused(format!("the request cannot be sent over HTTP/2: {e}")))?;
                conn.round_trip(request, body).await.map_err(|e| {
                    if h2c && e.reset_by_peer().is_none() {
                        refused(no_h2c(&e))
                    } else {
                        failed(&e)
                    }
                })?;
            }
        }
        Ok(())
    };
    match tokio::time::timeout(plan.timeout, answer).await {
        Ok(Ok(())) => Ok((connector, started.elapsed())),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(unreachable(format!(
            "no response to a probe request within {}",
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

/// What the run loop knows about one target between steps.
struct TargetState {
    /// Opens its connections: address resolved, TLS configured, HTTP/2 counters.
    connector: Connector,
    /// Still ramping (no step has broken the SLO yet).
    active: bool,
    /// One connection's pace in the closed model: the mean latency of the target's answers
    /// so far (the probe's at first), to weigh failed connects against.
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
    // The common clock on this process's monotonic one; steps are planned from it.
    let anchor = plan.start_at.map(|at| {
        let now = (Instant::now(), StartAt::now());
        let ahead = now.1.seconds_until(at);
        if ahead >= 0.0 {
            now.0 + Duration::from_secs_f64(ahead)
        } else {
            now.0
                .checked_sub(Duration::from_secs_f64(-ahead))
                .unwrap_or(now.0)
        }
    });
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
        anchor,
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
            let partial = acc.cut || acc.segments < plan.rounds;
            // This shard's part of the step's rate: every N-th request of the schedule.
            let offered = offered_rate(plan, &targets[ti], *rate).map(|r| plan.shard.rate(r));
            let limit = match plan.limit {
                StepLimit::Requests(n) => StepLimit::Requests(plan.shard.share(n)),
                d => d,
            };
            let names = targets[ti].source.endpoints();
            let mut result = step_result(step.index, offered, limit, names, acc);
            result.partial = partial;
            let target = &mut results[ti];
            target.steps.push(result);
            if let Some(slo) = &slo {
                target.breaking_point = slo.judge(&mut target.steps);
                states[ti].active = target.breaking_point.is_none();
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
            // Rates and counts stay the whole run's (the schedule is shared out by index);
            // connections and the in-flight limit are this shard's part.
            let part = |n: u32| plan.shard.share(u64::from(n)) as u32;
            let h2_streams = targets[ti].h2_streams();
            // The open models' limits: over HTTP/2, `connections` connections (all opened
            // before the clock) and at most their streams in flight.
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
            let pacing = match (plan.model, step.rate) {
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
            };
            let seg_threads = match (pacing, h2_streams) {
                (Pacing::Closed { connections }, _) => plan.threads.min(connections).max(1),
                // HTTP/2: a thread needs a connection of its own.
                (
                    Pacing::Open { preconnect, .. } | Pacing::Recorded { preconnect, .. },
                    Some(_),
                ) => plan.threads.min(preconnect).max(1),
                (
                    Pacing::Open { max_in_flight, .. } | Pacing::Recorded { max_in_flight, .. },
                    None,
                ) => plan.threads.min(max_in_flight).max(1),
            };
            let target = &mut targets[ti];
            let connector = states[ti].connector.clone();
            let h2_before = h2_streams.map(|_| connector.h2_stats().counts());
            let spec = Arc::new(SegmentSpec {
                connector: connector.clone(),
                endpoint: target.endpoint.clone(),
                h2_streams,
                no_reuse: target.no_reuse,
                source: target.source.clone(),
                pacing,
                limit,
                threads: seg_threads,
                timeout: plan.timeout,
                stop: stop.clone(),
                typical_latency: states[ti].pace,
                shard: plan.shard,
                planned,
            });
            if let Some(w) = target.watch.as_mut() {
                w.begin();
            }
            let seg_left_after = clock.segments_left.saturating_sub(1);
            let mut show = LiveProgress {
                name: &target.name,
                step,
                shard: plan.shard,
                segment_time,
                seg_left_after,
                last: (Instant::now(), 0, 0),
                window: Window::new(),
            };
            let outcome: Outcome = run_segment(spec, |lives, t0| show.report(lives, t0, progress))?;
            clock.segments_left = seg_left_after;
            let usage = targets[ti].watch.as_mut().and_then(|w| w.end());
            if let Some(pace) = outcome.tally.answered_mean() {
                states[ti].pace = pace;
            }
            let endpoints = targets[ti].source.endpoints().len();
            let acc = accs[ti].get_or_insert_with(|| StepAcc {
                tally: Tally::with_endpoints(endpoints),
                wall: Duration::ZERO,
                window: None,
                usage: None,
                segments: 0,
                cut: false,
                start_late: None,
                h2: None,
            });
            if let Some(before) = h2_before {
                let events = H2Events::between(&before, &connector.h2_stats().counts());
                acc.h2.get_or_insert_with(H2Events::default).add(&events);
            }
            acc.tally.merge(outcome.tally);
            acc.wall += outcome.wall;
            acc.window = match (acc.window, outcome.window) {
                (None, w) | (w, None) => w,
                (Some(a), Some(b)) => Some(a + b),
            };
            acc.usage = combine(acc.usage, usage);
            acc.segments += 1;
            acc.cut |= outcome.partial;
            acc.start_late = acc.start_late.max(outcome.start_late);
        }
    }
    Ok(accs)
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
    let model = match plan.model {
        Model::Closed => "closed",
        Model::Open { .. } => "open",
        Model::Ramp { .. } => "ramp",
        Model::Recorded { .. } => "recorded",
    };
    // A shard writes its own part; `scalpel report merge` adds the parts up again.
    let part = |n: u32| plan.shard.share(u64::from(n)) as u32;
    RunConfig {
        model: model.to_string(),
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
            shard: Shard::WHOLE,
            start_at: None,
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
