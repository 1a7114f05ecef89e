//! Realistic result files built in code, with real HdrHistograms: the report's tests,
//! its examples (`sample_run`, `shard_files`) and the CLI's report tests.

use std::collections::BTreeMap;

use scalpel_load::result::{
    LatencySummary, Machine, RunConfig, RunResult, StepResult, TargetResult, encode_histogram,
    new_histogram,
};

/// A small deterministic generator (xorshift64*), so fixtures are the same on every run.
#[derive(Debug)]
pub struct Rng(u64);

impl Rng {
    /// Seeded with `seed` (0 counts as 1).
    pub fn new(seed: u64) -> Self {
        Rng(seed.max(1))
    }

    /// Uniform in (0, 1].
    pub fn next_f64(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let x = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D);
        ((x >> 11) as f64 + 1.0) / (1u64 << 53) as f64
    }

    /// Log-normal with the given median: the usual shape of service latency.
    pub fn log_normal(&mut self, median: f64, sigma: f64) -> f64 {
        let (u1, u2) = (self.next_f64(), self.next_f64());
        let normal = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
        median * (sigma * normal).exp()
    }
}

/// A step whose histogram holds exactly `values` (microseconds).
pub fn step_with_values(
    index: u32,
    offered_rps: Option<f64>,
    duration_s: f64,
    values: &[u64],
) -> StepResult {
    let mut histogram = new_histogram();
    for v in values {
        histogram.record(*v).unwrap();
    }
    StepResult {
        index,
        offered_rps,
        achieved_rps: values.len() as f64 / duration_s,
        duration_s,
        requests: values.len() as u64,
        sent: values.len() as u64,
        answered: values.len() as u64,
        failed: 0,
        errors: 0,
        error_kinds: BTreeMap::new(),
        late: 0,
        not_sent: 0,
        interrupted: 0,
        partial: false,
        latency_ms: LatencySummary::from_histogram(&histogram),
        histogram: encode_histogram(&histogram),
        cpu_percent: None,
        cpu_percent_peak: None,
        rss_mb: None,
        rss_mb_peak: None,
        pss_mb: None,
        pss_mb_peak: None,
        slo_held: None,
        slo_reason: None,
        connections_opened: 0,
        handshake_ms: None,
        handshake_histogram: None,
        h2: None,
        endpoints: Vec::new(),
        start_late_s: None,
    }
}

/// The machine block of a run on `host`.
pub fn machine(host: &str) -> Machine {
    Machine {
        hosts: vec![host.to_owned()],
        cpus: 2,
        cpu_model: "Test CPU @ 2.0GHz".to_owned(),
        kernel: "6.1.0".to_owned(),
    }
}

/// The config block of a run of `model` with `slo`.
pub fn config(model: &str, slo: Option<&str>) -> RunConfig {
    RunConfig {
        model: model.to_owned(),
        connections: 64,
        max_in_flight: (model != "closed").then_some(1000),
        step_duration_s: Some(10.0),
        requests_per_step: None,
        slo: slo.map(str::to_owned),
        request: "GET /balance/{user_id}".to_owned(),
        recorded: None,
    }
}

/// A whole run on `host` with `targets`.
pub fn run(host: &str, model: &str, slo: Option<&str>, targets: Vec<TargetResult>) -> RunResult {
    RunResult {
        format_version: scalpel_load::result::FORMAT_VERSION,
        tool: "scalpel 0.1.0".to_owned(),
        part_ids: vec![format!("{host}-2025-06-01T10:00:00Z-1")],
        interrupted: false,
        started_at: "2025-06-01T10:00:00Z".to_owned(),
        machine: machine(host),
        config: config(model, slo),
        targets,
        shard: None,
        shards: None,
    }
}

/// How a simulated service behaves: the rate at which it saturates its cores, its
/// unloaded median latency, and its memory.
#[derive(Debug, Clone, Copy)]
pub struct Service {
    /// The rate at which its cores saturate.
    pub capacity_rps: f64,
    /// Its unloaded median latency.
    pub median_ms: f64,
    /// The cores it has.
    pub cores: f64,
    /// Its memory at rest.
    pub base_rss_mb: f64,
    /// The memory each 1000 req/s adds.
    pub rss_mb_per_krps: f64,
}

/// One open-model step of a simulated service: queueing makes latency climb as the offered
/// rate nears capacity; past it the service completes only its capacity, requests queue,
/// some time out and some are never sent.
pub fn simulated_step(
    service: Service,
    index: u32,
    offered: f64,
    duration_s: f64,
    seed: u64,
) -> StepResult {
    let mut rng = Rng::new(seed);
    let load = offered / service.capacity_rps;
    let achieved = offered.min(service.capacity_rps * 0.98);
    let requests = (achieved * duration_s).round() as u64;
    let queueing = if load < 0.95 {
        1.0 / (1.0 - load * 0.9)
    } else {
        8.0 + 40.0 * (load - 0.95)
    };
    let median_us = service.median_ms * 1000.0 * queueing;
    let sigma = 0.35 + 0.25 * load.min(1.5);
    // Record a sample of values with weights instead of every request: the same shape,
    // far fewer record calls.
    let samples = 4000u64.min(requests.max(1));
    let weight = (requests / samples).max(1);
    let mut histogram = new_histogram();
    for _ in 0..samples {
        let v = rng.log_normal(median_us, sigma).max(1.0) as u64;
        histogram.record_n(v, weight).unwrap();
    }
    let timeouts = if load > 1.0 {
        (requests as f64 * (load - 1.0) * 0.05) as u64
    } else {
        0
    };
    let status_503 = if load > 1.1 {
        (requests as f64 * 0.01) as u64
    } else {
        0
    };
    let mut error_kinds = BTreeMap::new();
    if timeouts > 0 {
        error_kinds.insert("timeout".to_owned(), timeouts);
    }
    if status_503 > 0 {
        error_kinds.insert("status_503".to_owned(), status_503);
    }
    let cpu = (achieved / service.capacity_rps) * service.cores * 100.0;
    let rss = service.base_rss_mb + service.rss_mb_per_krps * achieved / 1000.0;
    StepResult {
        index,
        offered_rps: Some(offered),
        achieved_rps: (histogram.len() - timeouts) as f64 / duration_s,
        duration_s,
        requests: histogram.len(),
        sent: histogram.len(),
        answered: histogram.len() - timeouts,
        failed: timeouts,
        errors: timeouts + status_503,
        error_kinds,
        late: if load > 0.9 {
            (requests as f64 * (load - 0.9) * 0.3) as u64
        } else {
            0
        },
        not_sent: if load > 1.0 {
            ((offered - achieved) * duration_s * 0.5) as u64
        } else {
            0
        },
        interrupted: 0,
        partial: false,
        latency_ms: LatencySummary::from_histogram(&histogram),
        histogram: encode_histogram(&histogram),
        cpu_percent: Some(cpu),
        cpu_percent_peak: Some((cpu * 1.12).min(service.cores * 100.0)),
        rss_mb: Some(rss),
        rss_mb_peak: Some(rss * 1.08),
        pss_mb: Some(rss * 0.86),
        pss_mb_peak: Some(rss * 0.93),
        slo_held: None,
        slo_reason: None,
        connections_opened: 0,
        handshake_ms: None,
        handshake_histogram: None,
        h2: None,
        endpoints: Vec::new(),
        start_late_s: None,
    }
}

/// The payments story in miniature: a Go service and its Rust rewrite under a ramp.
pub fn go_vs_rust_ramp(host: &str, offered: &[f64], duration_s: f64, seed: u64) -> RunResult {
    let go = Service {
        capacity_rps: 6000.0,
        median_ms: 1.6,
        cores: 2.0,
        base_rss_mb: 38.0,
        rss_mb_per_krps: 5.5,
    };
    let rust = Service {
        capacity_rps: 11000.0,
        median_ms: 0.7,
        cores: 2.0,
        base_rss_mb: 9.0,
        rss_mb_per_krps: 0.9,
    };
    let target = |name: &str, port: u16, service: Service, salt: u64| TargetResult {
        name: name.to_owned(),
        url: format!("http://127.0.0.1:{port}"),
        connection: None,
        steps: offered
            .iter()
            .enumerate()
            .map(|(i, &rps)| {
                simulated_step(
                    service,
                    i as u32,
                    rps,
                    duration_s,
                    seed * 1000 + salt * 100 + i as u64,
                )
            })
            .collect(),
        breaking_point: None,
    };
    run(
        host,
        "ramp",
        Some("p99<50ms,errors<1%"),
        vec![target("go", 8081, go, 1), target("rust", 8082, rust, 2)],
    )
}
