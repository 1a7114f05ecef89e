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
    /// The tool that wrote the file, e.g. `scalpel 0.1.0`.
    pub tool: String,
    /// When the run started, RFC 3339 UTC.
    pub started_at: String,
    /// Where it ran: host name, cores, CPU model, kernel.
    pub machine: Machine,
    /// The load model and its parameters, as given.
    pub config: RunConfig,
    /// One entry per target, in the order given; ratios are computed against the first.
    pub targets: Vec<TargetResult>,
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
    /// The request template (method and URL template).
    pub request: String,
}

/// Everything measured for one target.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TargetResult {
    /// The target's name (`--target NAME=URL`, or `target` for a single URL).
    pub name: String,
    /// Base URL the requests were sent to.
    pub url: String,
    /// Steps in the order run. The closed and fixed-rate open models have one step.
    pub steps: Vec<StepResult>,
    /// The highest rate that held the SLO, and why the next step broke it; `null` when no
    /// SLO was given or the SLO never broke.
    pub breaking_point: Option<BreakingPoint>,
}

/// The last step that held, and what broke after it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct BreakingPoint {
    /// Offered rate (requests/s) of the last step that held the SLO; 0 when even the first
    /// step broke it.
    pub rps: f64,
    /// Why the first failing step failed, e.g. `p99 71.3ms >= 50ms at 4000 rps`.
    pub reason: String,
}

/// One step of one target.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct StepResult {
    /// Position of the step, from 0.
    pub index: u32,
    /// Asked rate in requests/s; `null` in the closed model.
    pub offered_rps: Option<f64>,
    /// Requests completed (any outcome) per second: time-bound steps count the completions
    /// inside the scheduled window and divide by its length; count-bound steps divide all
    /// completions by `duration_s`.
    pub achieved_rps: f64,
    /// Wall time of the step in seconds, from the start to the last completion.
    pub duration_s: f64,
    /// Requests completed in the step (successes and errors).
    pub requests: u64,
    /// Requests that failed: connection errors, time-outs and non-2xx statuses.
    pub errors: u64,
    /// Errors by kind: `connect`, `timeout`, `io`, `status_503`, … Every non-2xx status has
    /// its own key.
    pub error_kinds: BTreeMap<String, u64>,
    /// Open models: requests whose send started later than their intended time because
    /// the in-flight limit was reached (their latency still counts from the intended time).
    pub late: u64,
    /// Open models: requests that were never sent because the step ended while they waited
    /// for a free slot; counted, never silently dropped.
    pub not_sent: u64,
    /// Latency summary in milliseconds, from the histogram below.
    pub latency_ms: LatencySummary,
    /// The latency histogram (microseconds), HdrHistogram V2+deflate, base64.
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
    /// Whether this step held the SLO; `null` when no SLO was given.
    pub slo_held: Option<bool>,
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
    /// Percentiles of a microsecond histogram, in milliseconds. An empty histogram gives zeros.
    pub fn from_histogram(histogram: &hdrhistogram::Histogram<u64>) -> Self {
        if histogram.is_empty() {
            return Self::default();
        }
        let ms = |us: u64| us as f64 / 1000.0;
        Self {
            mean: histogram.mean() / 1000.0,
            p50: ms(histogram.value_at_quantile(0.50)),
            p90: ms(histogram.value_at_quantile(0.90)),
            p99: ms(histogram.value_at_quantile(0.99)),
            p999: ms(histogram.value_at_quantile(0.999)),
            max: ms(histogram.max()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn garbage_histogram_is_an_error_not_a_panic() {
        assert!(decode_histogram("not base64!").is_err());
        assert!(decode_histogram("AAAA").is_err());
    }
}
