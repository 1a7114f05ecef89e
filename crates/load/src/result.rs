//! The result model of a load run: what `scalpel load` measured, per target and per step.
//!
//! This is the stable, serialized shape that `--json` writes and `scalpel report` reads and
//! merges. Scripts rely on these keys; add fields, never rename them. Every step carries its
//! latency HdrHistogram serialized (V2 + deflate, base64), so runs made on several machines
//! merge exactly: percentiles are recomputed from merged histograms, never averaged.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Version of the result file format, bumped on incompatible changes.
pub const FORMAT_VERSION: u32 = 1;

/// A whole run: one or more targets measured under identical schedules.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RunResult {
    /// Always [`FORMAT_VERSION`] when written by this version.
    pub format_version: u32,
    /// The tool and its version that wrote the file, e.g. `scalpel 0.1.0` (several,
    /// comma-separated, after a merge of runs from different versions).
    pub tool: String,
    /// Identifies each measured part: one id for a run, the ids of every part after a merge, so a
    /// run is never merged with itself. Empty in files from before it was recorded.
    #[serde(default)]
    pub part_ids: Vec<String>,
    /// The run was stopped by a signal (SIGINT, SIGTERM): the last step of each target
    /// that was running is `partial`, later steps were not run.
    #[serde(default)]
    pub interrupted: bool,
    /// When the run started, RFC 3339 UTC.
    pub started_at: String,
    /// Where it ran: host name, cores, CPU model, kernel.
    pub machine: Machine,
    /// The load model and its parameters, as given.
    pub config: RunConfig,
    /// One entry per target, in the order given; ratios are computed against the first.
    pub targets: Vec<TargetResult>,
    /// Which part of a sharded run (`--shard`) this file is; absent for a run in one process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<ShardInfo>,
    /// After `scalpel report merge` of a shard set: the set and each shard's own figures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shards: Option<ShardSet>,
}

/// One shard's place in a run spread over several processes or machines.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ShardInfo {
    /// The run's id, the same on every shard: `--run-id`, or derived from the settings and
    /// the start time.
    pub run_id: String,
    /// This shard's index, from 0 (as `JOB_COMPLETION_INDEX`); people read `index + 1` of
    /// `count`.
    pub index: u32,
    /// How many shards the run has.
    pub count: u32,
    /// The common start (`--start-at`), RFC 3339; `null` without one.
    pub start_at: Option<String>,
    /// How many seconds after the common start this shard's first step began; `null`
    /// without a common start.
    pub start_late_s: Option<f64>,
    /// A fingerprint of the settings that shape the traffic (targets, request, data, rates,
    /// counts, time-outs, SLO, the number of shards): equal on every shard of one run.
    pub settings: String,
}

/// A merged shard set: which run, and every shard's own figures, so a slow generator shows.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ShardSet {
    /// The run's id.
    pub run_id: String,
    /// How many shards the run has (all of them are merged).
    pub count: u32,
    /// The common start, RFC 3339; `null` without one.
    pub start_at: Option<String>,
    /// The settings fingerprint every shard carried.
    pub settings: String,
    /// Each shard's figures, by index.
    pub parts: Vec<ShardPart>,
    /// What the merge found wrong with the set without refusing it, one sentence each: a
    /// shard whose clock started a step more than a tenth of a step late, a step only some
    /// shards ran.
    pub flags: Vec<String>,
}

/// One shard's figures in a merged set.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ShardPart {
    /// The shard's index, from 0.
    pub index: u32,
    /// The machine it ran on.
    pub host: String,
    /// How late its first step started, in seconds, when there was a common start.
    pub start_late_s: Option<f64>,
    /// Its figures per target and step (no histograms: the merged steps hold the sum).
    pub targets: Vec<ShardTarget>,
}

/// One target's steps as one shard measured them.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ShardTarget {
    /// The target's name.
    pub name: String,
    /// Its steps in this shard, in order.
    pub steps: Vec<ShardStep>,
}

/// One step of one target as one shard measured it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ShardStep {
    /// Position of the step, from 0.
    pub index: u32,
    /// This shard's part of the asked rate.
    pub offered_rps: Option<f64>,
    /// What it achieved.
    pub achieved_rps: f64,
    /// Attempts that ended.
    pub requests: u64,
    /// Errors.
    pub errors: u64,
    /// Sent late for want of a free connection.
    pub late: u64,
    /// Never sent.
    pub not_sent: u64,
    /// Its latency percentiles.
    pub latency_ms: Option<LatencySummary>,
    /// How late its clock started, in seconds.
    pub start_late_s: Option<f64>,
    /// Its own verdict on its part (rps limits scaled to its share).
    pub slo_held: Option<bool>,
    /// Cut short by an interrupt.
    pub partial: bool,
}

impl ShardStep {
    /// The shard's figures of a step.
    pub fn of(step: &StepResult) -> ShardStep {
        ShardStep {
            index: step.index,
            offered_rps: step.offered_rps,
            achieved_rps: step.achieved_rps,
            requests: step.requests,
            errors: step.errors,
            late: step.late,
            not_sent: step.not_sent,
            latency_ms: step.latency_ms,
            start_late_s: step.start_late_s,
            slo_held: step.slo_held,
            partial: step.partial,
        }
    }
}

/// The machine a run was made on (several when runs were merged).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct Machine {
    /// Host names, more than one after a merge.
    pub hosts: Vec<String>,
    /// Logical CPUs of the (first) host.
    pub cpus: u32,
    /// CPU model string from /proc/cpuinfo.
    pub cpu_model: String,
    /// Kernel release.
    pub kernel: String,
}

/// The load model of a run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RunConfig {
    /// `closed`, `open` or `ramp`.
    pub model: String,
    /// Connections (closed model) or the connection/in-flight limit (open models).
    pub connections: u32,
    /// Maximum requests in flight per target in the open models.
    pub max_in_flight: Option<u32>,
    /// Requested duration of each step in seconds, if time-bound.
    pub step_duration_s: Option<f64>,
    /// Requested request count per step, if count-bound.
    pub requests_per_step: Option<u64>,
    /// The SLO as given, e.g. `p99<50ms,errors<1%`.
    pub slo: Option<String>,
    /// The request template (method and URL template), or the mix or recorded file.
    pub request: String,
    /// Recorded traffic as the requests (`--from`): what the file held, what was skipped
    /// and why, and how the records were used. Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recorded: Option<RecordedInfo>,
}

/// Recorded traffic as a run's requests: the file's counts and how it was replayed.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RecordedInfo {
    /// The file, as given.
    pub file: String,
    /// Its format: `access-log`, `har` or `capture`.
    pub format: String,
    /// `recorded`: on the recorded schedule at `speed`; `pool`: in file order at the load
    /// model's pace (`--rate`, `--ramp`, `-c`).
    pub schedule: String,
    /// The replay speed of a recorded schedule (1 = as recorded); `null` for a pool.
    pub speed: Option<f64>,
    /// Records found, usable or not.
    pub records: u64,
    /// Records that passed every filter: the requests a run sends.
    pub usable: u64,
    /// Records skipped, by reason: `malformed`, `not_replayable`, `method_not_selected`,
    /// `path_not_included`, `path_excluded`, `unsafe_method`.
    pub skipped: BTreeMap<String, u64>,
    /// The first five malformed lines or entries.
    pub first_malformed: Vec<MalformedRecord>,
    /// From the first to the last usable request, as recorded, in seconds.
    pub span_s: f64,
    /// A pool that the run outlasted: its records were used again from the top.
    pub looped: bool,
}

/// A malformed line or entry of a recorded file.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct MalformedRecord {
    /// 1-based line in the file (where a HAR entry starts).
    pub line: u64,
    /// What is wrong with it.
    pub message: String,
}

/// Everything measured for one target.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TargetResult {
    /// The target's name (`--target NAME=URL`, or `target` for a single URL).
    pub name: String,
    /// Base URL the requests were sent to.
    pub url: String,
    /// How it was connected to: protocol, TLS and its verification, address; `null` in
    /// files from before it was recorded.
    #[serde(default)]
    pub connection: Option<ConnectionInfo>,
    /// Steps in the order run. The closed and fixed-rate open models have one step.
    pub steps: Vec<StepResult>,
    /// The highest rate that held the SLO, and why the next step broke it; `null` when no
    /// SLO was given or the SLO never broke.
    pub breaking_point: Option<BreakingPoint>,
}

/// How a target was connected to.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct ConnectionInfo {
    /// `http/1.1`, `h2` (HTTP/2 by ALPN over TLS) or `h2c` (HTTP/2 with prior knowledge
    /// over plain TCP).
    pub protocol: String,
    /// TLS (`https://`).
    pub tls: bool,
    /// The server's certificate was NOT verified (`--insecure`): the connection was
    /// encrypted, but to whoever answered.
    pub insecure: bool,
    /// The CA file trusted instead of the system's store (`--cacert`), if any.
    pub ca_file: Option<String>,
    /// The name sent as SNI and verified in the certificate (TLS only).
    pub server_name: Option<String>,
    /// The address connected to (`--resolve` or DNS).
    pub address: String,
    /// HTTP/2 streams per connection (`--streams`).
    pub streams: Option<u32>,
    /// Connections were kept alive for the next request (false with `--no-reuse`).
    pub reuse: bool,
}

/// HTTP/2 events of a step, counted by kind: what a load test must see apart from
/// ordinary errors.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct H2Events {
    /// Connections the server ended with GOAWAY (any reason, NO_ERROR included: nginx
    /// sends one every `keepalive_requests`). A request a GOAWAY refused goes out once
    /// more on a new connection; a second refusal is an error `reset:goaway`.
    pub goaway: u64,
    /// Streams the server reset (RST_STREAM), all reasons; each is also an error
    /// `reset:REASON` (`protocol:REASON` for a protocol error, `body_cut:REASON` once the
    /// head came), except a `refused_stream` that went out again and was answered.
    pub rst_stream: u64,
    /// Streams the server reset, by reason (`cancel`, `refused_stream`, …).
    pub rst_by_reason: BTreeMap<String, u64>,
    /// Requests that waited for a free stream: the server's
    /// SETTINGS_MAX_CONCURRENT_STREAMS was reached on their connection (its latency
    /// includes the wait).
    pub stalled_on_streams: u64,
    /// Request bodies that waited for the server's flow-control window.
    pub stalled_on_window: u64,
}

impl H2Events {
    /// The events between two snapshots of a connector's counters.
    pub(crate) fn between(
        before: &scalpel_http::H2Counts,
        after: &scalpel_http::H2Counts,
    ) -> H2Events {
        let mut rst_by_reason = BTreeMap::new();
        for (reason, n) in &after.rst_by_reason {
            let was = before
                .rst_by_reason
                .iter()
                .find(|(r, _)| r == reason)
                .map_or(0, |(_, n)| *n);
            if *n > was {
                rst_by_reason.insert((*reason).to_string(), n - was);
            }
        }
        H2Events {
            goaway: after.goaway.saturating_sub(before.goaway),
            rst_stream: after.rst_stream.saturating_sub(before.rst_stream),
            rst_by_reason,
            stalled_on_streams: after
                .stalled_on_streams
                .saturating_sub(before.stalled_on_streams),
            stalled_on_window: after
                .stalled_on_window
                .saturating_sub(before.stalled_on_window),
        }
    }

    /// Adds another segment's (or machine's) events.
    pub fn add(&mut self, other: &H2Events) {
        self.goaway += other.goaway;
        self.rst_stream += other.rst_stream;
        for (reason, n) in &other.rst_by_reason {
            *self.rst_by_reason.entry(reason.clone()).or_default() += n;
        }
        self.stalled_on_streams += other.stalled_on_streams;
        self.stalled_on_window += other.stalled_on_window;
    }
}

/// The last step that held, and what broke after it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct BreakingPoint {
    /// Offered rate (requests/s) of the last step that held the SLO; 0 when even the first
    /// step broke it; `null` in the closed model, which offers no rate.
    pub rps: Option<f64>,
    /// Why the first failing step failed: every clause that broke, e.g.
    /// `p99 71.3ms >= 50ms, errors 3% >= 1% at 4000 rps`.
    pub reason: String,
}

/// One step of one target.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct StepResult {
    /// Position of the step, from 0.
    pub index: u32,
    /// Asked rate in requests/s; `null` in the closed model.
    pub offered_rps: Option<f64>,
    /// Answers (any status) per second: time-bound steps count the answers inside the
    /// scheduled window and divide by its length; count-bound steps divide all answers by
    /// `duration_s`, or by the schedule's length when that is longer (so a short step
    /// never shows more than was offered).
    pub achieved_rps: f64,
    /// Wall time of the step in seconds, from the start to the last completion.
    pub duration_s: f64,
    /// Attempts that ended: `sent` plus failed connects (in the closed model, a failed
    /// connect counts as the requests the connection would have sent in the time lost).
    pub requests: u64,
    /// Requests written to a connection.
    #[serde(default)]
    pub sent: u64,
    /// Sent requests that got a whole response, any status.
    #[serde(default)]
    pub answered: u64,
    /// Sent requests that got no answer: time-out, broken connection, invalid response.
    #[serde(default)]
    pub failed: u64,
    /// Failed connects, sent requests with no answer, and non-2xx answers.
    pub errors: u64,
    /// Errors by kind: scalpel-http's `ErrorKind` names — `connect`, `tls` (a handshake
    /// that failed: never sent), `timeout`, `reset`, `protocol`, `body_cut`, `too_large` —
    /// with HTTP/2's `reset:REASON` and `reset:goaway`, and `status_503`, … Every non-2xx
    /// status has its own key. Kinds `local:ERRNO` (`local:EMFILE`, …) are the load
    /// generator's own failures: counted in `not_sent`, never in `errors`. Files written
    /// before that vocabulary read with its names ([`current_kind`]).
    #[serde(deserialize_with = "current_kinds")]
    pub error_kinds: BTreeMap<String, u64>,
    /// Open models: requests whose send started later than their intended time because
    /// the in-flight limit was reached (their latency still counts from the intended time).
    pub late: u64,
    /// Requests due that were never sent: still waiting for a free connection when the
    /// step ended, beyond what the generator could schedule, or failed by the generator's
    /// own limits (`local:*` kinds); counted, never silently dropped.
    pub not_sent: u64,
    /// Requests in flight when the run was interrupted (partial steps only); in no other
    /// count.
    #[serde(default)]
    pub interrupted: u64,
    /// The step was cut short by an interrupt: its figures cover the time until then, and
    /// it has no SLO verdict.
    #[serde(default)]
    pub partial: bool,
    /// Latency summary in milliseconds, from the histogram below; `null` when nothing was
    /// sent (an empty histogram has no percentiles, and 0 would read as fast).
    pub latency_ms: Option<LatencySummary>,
    /// The latency histogram (microseconds), HdrHistogram V2+deflate, base64: every sent
    /// request, answered ones at their answer and the others at the moment they failed.
    pub histogram: String,
    /// Mean CPU% of the watched process tree (100 = one core); `null` when not watched.
    pub cpu_percent: Option<f64>,
    /// Peak CPU% of the watched process tree over the step's samples.
    pub cpu_percent_peak: Option<f64>,
    /// Mean resident memory of the watched tree in MiB; `null` when not watched.
    pub rss_mb: Option<f64>,
    /// Peak resident memory of the watched tree in MiB.
    pub rss_mb_peak: Option<f64>,
    /// Mean proportional set size of the tree in MiB, where the kernel gives it.
    pub pss_mb: Option<f64>,
    /// Peak proportional set size of the tree in MiB.
    pub pss_mb_peak: Option<f64>,
    /// Whether this step held the SLO; `null` when no SLO was given or the step is partial.
    pub slo_held: Option<bool>,
    /// Why the step did not hold: every clause that broke; `null` when it held.
    #[serde(default)]
    pub slo_reason: Option<String>,
    /// Connections opened for the step (those opened before its clock started too).
    #[serde(default)]
    pub connections_opened: u64,
    /// The TLS handshakes of those connections in milliseconds, measured apart from
    /// request latency; `null` over plain TCP.
    #[serde(default)]
    pub handshake_ms: Option<LatencySummary>,
    /// Their histogram (microseconds), encoded as `histogram`; `null` when none.
    #[serde(default)]
    pub handshake_histogram: Option<String>,
    /// HTTP/2 events (GOAWAY, RST_STREAM by reason, stalls); `null` over HTTP/1.1.
    #[serde(default)]
    pub h2: Option<H2Events>,
    /// With a common clock (`--start-at`): how many seconds after its planned time the
    /// step's clock started (0 when on time); `null` without one, and for count-bound steps
    /// after the first, whose start cannot be planned. In a merged run, the latest shard's.
    #[serde(default)]
    pub start_late_s: Option<f64>,
    /// With a mix of endpoints (`--mix`): the same figures per endpoint, in the mix file's
    /// order; they add up to the step's. Absent without a mix.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub endpoints: Vec<EndpointResult>,
}

/// One endpoint of a mix in one step: the step's figures for the requests that went to it.
/// Its histogram is kept so runs merge per endpoint exactly, as steps do.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct EndpointResult {
    /// The endpoint's name in the mix file.
    pub name: String,
    /// Its answers per second, over the same span as the step's `achieved_rps`.
    pub achieved_rps: f64,
    /// Attempts that ended (as the step's `requests`).
    pub requests: u64,
    /// Requests written to a connection.
    pub sent: u64,
    /// Sent requests that got a whole response.
    pub answered: u64,
    /// Sent requests that got no answer.
    pub failed: u64,
    /// Failed connects, sent requests with no answer, and non-2xx answers.
    pub errors: u64,
    /// Errors by kind, as the step's.
    #[serde(deserialize_with = "current_kinds")]
    pub error_kinds: BTreeMap<String, u64>,
    /// Sent later than intended for want of a free connection (open models).
    pub late: u64,
    /// Due but never sent.
    pub not_sent: u64,
    /// In flight when the run was interrupted.
    pub interrupted: u64,
    /// Latency summary in milliseconds (same keys as the step's); `null` when nothing
    /// was sent.
    pub latency_ms: Option<LatencySummary>,
    /// Its latency histogram (µs), HdrHistogram V2+deflate, base64.
    pub histogram: String,
}

impl EndpointResult {
    /// The endpoint seen as a step of its own — the step's rate, duration and
    /// interruption with the endpoint's counts and histogram — so an SLO judges it with
    /// the very rules it judges a step with.
    pub fn as_step(&self, step: &StepResult) -> StepResult {
        StepResult {
            index: step.index,
            offered_rps: step.offered_rps,
            achieved_rps: self.achieved_rps,
            duration_s: step.duration_s,
            requests: self.requests,
            sent: self.sent,
            answered: self.answered,
            failed: self.failed,
            errors: self.errors,
            error_kinds: self.error_kinds.clone(),
            late: self.late,
            not_sent: self.not_sent,
            interrupted: self.interrupted,
            partial: step.partial,
            latency_ms: self.latency_ms,
            histogram: self.histogram.clone(),
            cpu_percent: None,
            cpu_percent_peak: None,
            rss_mb: None,
            rss_mb_peak: None,
            pss_mb: None,
            pss_mb_peak: None,
            slo_held: None,
            slo_reason: None,
            start_late_s: None,
            // Connections are the step's, shared by its endpoints.
            connections_opened: 0,
            handshake_ms: None,
            handshake_histogram: None,
            h2: None,
            endpoints: Vec::new(),
        }
    }
}

impl StepResult {
    /// Requests the step was due to make: every attempt plus those never sent.
    pub fn due(&self) -> u64 {
        self.requests + self.not_sent
    }

    /// Requests the load generator itself failed to send (`local:*` error kinds).
    pub fn local_failures(&self) -> u64 {
        self.error_kinds
            .iter()
            .filter(|(k, _)| k.starts_with("local:"))
            .map(|(_, n)| n)
            .sum()
    }
}

/// An error kind as written now, for a key a file written before the one vocabulary of
/// failures (scalpel-http's `ErrorKind`, December 2026) holds: `io` (a connection that
/// broke, before or during the body: those files did not tell the two apart) is `reset`,
/// `goaway` is `reset:goaway`, `rst_stream:REASON` is `reset:REASON` (`protocol:REASON`
/// for the protocol-error reasons). Every other key is kept as it is.
pub fn current_kind(key: String) -> String {
    if key == "io" {
        return "reset".to_owned();
    }
    if key == "goaway" {
        return "reset:goaway".to_owned();
    }
    match key.strip_prefix("rst_stream:") {
        Some(reason @ ("protocol_error" | "frame_size_error" | "compression_error")) => {
            format!("protocol:{reason}")
        }
        Some(reason) => format!("reset:{reason}"),
        None => key,
    }
}

/// `error_kinds` read with today's names ([`current_kind`]); counts of two old keys that
/// now share a name are added.
fn current_kinds<'de, D>(d: D) -> Result<BTreeMap<String, u64>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    let mut kinds = BTreeMap::new();
    for (key, n) in BTreeMap::<String, u64>::deserialize(d)? {
        *kinds.entry(current_kind(key)).or_default() += n;
    }
    Ok(kinds)
}

/// Latency percentiles in milliseconds.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Default)]
pub struct LatencySummary {
    /// Arithmetic mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Largest recorded latency.
    pub max: f64,
}

/// Failure to read a serialized histogram back.
#[derive(Debug, thiserror::Error)]
pub enum HistogramError {
    /// The base64 text is malformed.
    #[error("histogram is not valid base64: {0}")]
    Base64(#[from] base64::DecodeError),
    /// The bytes are not a V2 (deflate) HdrHistogram.
    #[error("histogram does not deserialize: {0}")]
    Decode(#[from] hdrhistogram::serialization::DeserializeError),
}

/// Lowest and highest trackable latency in microseconds, and significant digits: 1 µs to one
/// hour at 3 digits, the range wrk2 uses.
pub const HISTOGRAM_BOUNDS: (u64, u64, u8) = (1, 3_600_000_000, 3);

/// A new, empty latency histogram in microseconds with the project's bounds.
pub fn new_histogram() -> hdrhistogram::Histogram<u64> {
    let (low, high, sigfig) = HISTOGRAM_BOUNDS;
    hdrhistogram::Histogram::new_with_bounds(low, high, sigfig)
        .expect("constant histogram bounds are valid")
}

/// Serializes a latency histogram (V2 + deflate) to base64 for the result file.
pub fn encode_histogram(histogram: &hdrhistogram::Histogram<u64>) -> String {
    use base64::Engine as _;
    use hdrhistogram::serialization::Serializer as _;
    let mut bytes = Vec::new();
    hdrhistogram::serialization::V2DeflateSerializer::new()
        .serialize(histogram, &mut bytes)
        .expect("serializing into a Vec cannot fail");
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Reads back a histogram written by [`encode_histogram`].
pub fn decode_histogram(text: &str) -> Result<hdrhistogram::Histogram<u64>, HistogramError> {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD.decode(text)?;
    let histogram =
        hdrhistogram::serialization::Deserializer::new().deserialize(&mut bytes.as_slice())?;
    Ok(histogram)
}

impl LatencySummary {
    /// Percentiles of a microsecond histogram, in milliseconds; `None` for an empty one
    /// (no latency was measured, which must never read as 0 ms).
    pub fn from_histogram(histogram: &hdrhistogram::Histogram<u64>) -> Option<Self> {
        if histogram.is_empty() {
            return None;
        }
        let ms = |us: u64| us as f64 / 1000.0;
        Some(Self {
            mean: histogram.mean() / 1000.0,
            p50: ms(histogram.value_at_quantile(0.50)),
            p90: ms(histogram.value_at_quantile(0.90)),
            p99: ms(histogram.value_at_quantile(0.99)),
            p999: ms(histogram.value_at_quantile(0.999)),
            max: ms(histogram.max()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Result files written before the one vocabulary of failures — by `scalpel load`
    /// (December 2026) against a Node peer that dropped every third HTTP/1.1 connection
    /// and reset every fourth h2 stream — read with scalpel-http's `ErrorKind` names, and
    /// write back with them.
    #[test]
    fn files_from_before_the_one_error_vocabulary_read_with_its_names() {
        let kinds = |text: &str| {
            let run: RunResult = serde_json::from_str(text).unwrap();
            let again: RunResult =
                serde_json::from_str(&serde_json::to_string(&run).unwrap()).unwrap();
            assert_eq!(again, run, "written back as read");
            run.targets[0].steps[0].error_kinds.clone()
        };
        let h1 = kinds(include_str!(
            "../tests/fixtures/kinds-before-errorkind-h1.json"
        ));
        assert_eq!(
            h1,
            BTreeMap::from([("reset".into(), 10), ("status_503".into(), 10)]),
            "`io` is `reset`"
        );
        let h2 = kinds(include_str!(
            "../tests/fixtures/kinds-before-errorkind-h2.json"
        ));
        assert_eq!(h2, BTreeMap::from([("reset:cancel".into(), 10)]));
        for (old, new) in [
            ("goaway", "reset:goaway"),
            ("rst_stream:protocol_error", "protocol:protocol_error"),
            ("io", "reset"),
            ("local:EMFILE", "local:EMFILE"),
            ("status_503", "status_503"),
            ("body_cut", "body_cut"),
        ] {
            assert_eq!(current_kind(old.to_owned()), new);
        }
    }

    #[test]
    fn histogram_survives_base64_round_trip() {
        let mut h = new_histogram();
        for v in [5u64, 120, 3_000, 45_000, 1_000_000] {
            h.record(v).unwrap();
        }
        let back = decode_histogram(&encode_histogram(&h)).unwrap();
        assert_eq!(back.len(), 5);
        assert_eq!(
            LatencySummary::from_histogram(&back),
            LatencySummary::from_histogram(&h)
        );
    }

    #[test]
    fn empty_histogram_has_no_percentiles_not_zeros() {
        assert_eq!(LatencySummary::from_histogram(&new_histogram()), None);
    }

    #[test]
    fn garbage_histogram_is_an_error_not_a_panic() {
        assert!(decode_histogram("not base64!").is_err());
        assert!(decode_histogram("AAAA").is_err());
    }
}
