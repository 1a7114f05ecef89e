//! The cost projection: what a fleet serving N requests a second needs in vCPUs with each
//! target, from the CPU each target spent per request in one measured step, and what the
//! difference is worth in a year.
//!
//! Units, so that nobody has to guess: CPU per request is core-seconds of the watched process
//! tree divided by the requests completed in the step; one vCPU of the fleet is assumed to do
//! the work of one core of the measuring machine; the price is **US dollars per vCPU-hour**;
//! a year is 8,760 hours. Money is never a float: the price is held in millionths of a
//! dollar and the saving is computed in integers, then rounded to cents (half away from
//! zero) for display.

use std::fmt::Write as _;

use scalpel_load::result::{RunResult, StepResult};
use serde_json::json;

use crate::figures::{fmt_amount, fmt_count, fmt_rate};
use crate::table::Grid;

/// Hours in a (non-leap) year: the projection's period.
pub const HOURS_PER_YEAR: u64 = 24 * 365;

/// Millionths of a dollar in a dollar.
const MICROS_PER_DOLLAR: u64 = 1_000_000;

/// Above this price per vCPU-hour a figure is surely a typo (and the integers stay small).
const MAX_PRICE_DOLLARS: u64 = 1_000_000;

/// Why a projection cannot be made from the inputs given.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CostError {
    /// The price is not a plain decimal amount of dollars.
    #[error(
        "bad vCPU-hour price `{0}`: expected dollars as a plain decimal, e.g. 0.0416 (at most 6 decimals)"
    )]
    Price(String),
    /// The fleet rate is not a positive, finite number.
    #[error("bad fleet rate {0}: expected a positive number of requests per second")]
    FleetQps(f64),
    /// The headroom is outside `0 <= F < 1`.
    #[error(
        "bad headroom {0}: expected a fraction from 0 (run each vCPU flat out) to below 1, e.g. 0.3"
    )]
    Headroom(f64),
    /// The run has several steps and none was named.
    #[error("the run has {0} steps; name the one to project from with --step K (1 = the first)")]
    StepNeeded(usize),
    /// The named step does not exist for a target (a ramp stops a target at its failing step).
    #[error("target {target:?} has no step {step} (it ran steps 1 to {ran})")]
    NoSuchStep {
        /// Target name.
        target: String,
        /// The step asked for, 1-based.
        step: u32,
        /// How many steps the target ran.
        ran: usize,
    },
    /// A target's CPU was not sampled.
    #[error(
        "target {0:?} has no CPU figure in that step; measure with --watch-pid or --watch-port"
    )]
    NoCpu(String),
    /// A target completed no request, or used no CPU, in the step: nothing to divide by.
    #[error("target {target:?}: {why} in that step, so its CPU per request is unknown")]
    NothingMeasured {
        /// Target name.
        target: String,
        /// What was missing.
        why: &'static str,
    },
    /// The run has no targets.
    #[error("the run has no targets")]
    NoTargets,
    /// The projection does not fit in the integers used for money (absurd inputs).
    #[error("the projection is too large to compute ({0} vCPUs)")]
    TooLarge(f64),
}

/// A price per vCPU-hour in US dollars, held exactly in millionths of a dollar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VcpuHourPrice {
    micros: u64,
}

impl VcpuHourPrice {
    /// Parses dollars written as a plain decimal (`0.0416`, `$0.05`, `2`): digits, at most
    /// one point, at most six decimals; no sign, exponent or thousands separators.
    pub fn parse(text: &str) -> Result<Self, CostError> {
        let bad = || CostError::Price(text.to_owned());
        let digits = text.trim();
        let digits = digits.strip_prefix('$').unwrap_or(digits);
        let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
        let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        if (int.is_empty() && frac.is_empty())
            || !all_digits(int)
            || !all_digits(frac)
            || frac.len() > 6
            || int.len() > 7
        {
            return Err(bad());
        }
        let whole: u64 = if int.is_empty() {
            0
        } else {
            int.parse().map_err(|_| bad())?
        };
        if whole > MAX_PRICE_DOLLARS {
            return Err(bad());
        }
        let frac_micros: u64 = if frac.is_empty() {
            0
        } else {
            format!("{frac:0<6}").parse().map_err(|_| bad())?
        };
        Ok(Self {
            micros: whole * MICROS_PER_DOLLAR + frac_micros,
        })
    }

    /// The price in millionths of a dollar.
    pub fn micros(self) -> u64 {
        self.micros
    }

    /// As text with at least two and at most six decimals: `$0.0416`, `$2.00`.
    fn display(self) -> String {
        let whole = self.micros / MICROS_PER_DOLLAR;
        let frac = format!("{:06}", self.micros % MICROS_PER_DOLLAR);
        let frac = frac.trim_end_matches('0');
        let frac = format!("{frac:0<2}");
        format!("${}.{frac}", fmt_count(whole as f64))
    }
}

/// What to project: the fleet's rate, the price, the headroom, and optionally the step.
#[derive(Debug, Clone)]
pub struct CostOptions {
    fleet_qps: f64,
    price: VcpuHourPrice,
    headroom: f64,
    step: Option<u32>,
}

impl CostOptions {
    /// A fleet serving `fleet_qps` requests a second, paying `price` per vCPU-hour, with no
    /// headroom, from the run's only step.
    pub fn new(fleet_qps: f64, price: VcpuHourPrice) -> Result<Self, CostError> {
        if !(fleet_qps.is_finite() && fleet_qps > 0.0) {
            return Err(CostError::FleetQps(fleet_qps));
        }
        Ok(Self {
            fleet_qps,
            price,
            headroom: 0.0,
            step: None,
        })
    }

    /// The share of each vCPU kept idle, `0 <= F < 1`: vCPUs = busy vCPUs / (1 − F).
    pub fn headroom(mut self, headroom: f64) -> Result<Self, CostError> {
        if !(headroom.is_finite() && (0.0..1.0).contains(&headroom)) {
            return Err(CostError::Headroom(headroom));
        }
        self.headroom = headroom;
        Ok(self)
    }

    /// Project from step `step` (1-based, as the tables number them) instead of the only one.
    pub fn step(mut self, step: u32) -> Self {
        self.step = Some(step);
        self
    }
}

/// One target's part of a projection.
#[derive(Debug, Clone)]
struct TargetCost {
    name: String,
    offered_rps: Option<f64>,
    achieved_rps: f64,
    cpu_percent: f64,
    /// CPU-microseconds per request.
    cpu_us_per_request: f64,
    vcpu_exact: f64,
    /// Whole vCPUs to provision.
    vcpu: u64,
    /// Against the first target; `None` for the first.
    saving: Option<Saving>,
    notes: Vec<String>,
}

#[derive(Debug, Clone, Copy)]
struct Saving {
    vcpu_saved: i64,
    cents_per_year: i128,
}

/// The projection for every target of a run, the first target being the baseline.
#[derive(Debug, Clone)]
pub struct CostProjection {
    source: String,
    step: u32,
    fleet_qps: f64,
    headroom: f64,
    price: VcpuHourPrice,
    targets: Vec<TargetCost>,
}

/// Projects the fleet's vCPUs and yearly saving for every target of `result`, from the
/// CPU per request measured in one step (the run's only step, or the one named in
/// `options`). `source` names the result file in the output.
///
/// Per target: CPU µs/request = CPU% ÷ 100 ÷ achieved rps × 10⁶; vCPUs = fleet rate ×
/// CPU s/request ÷ (1 − headroom), provisioned as whole vCPUs (rounded up). Each later
/// target saves (baseline vCPUs − its vCPUs) × price × 8,760 h a year.
pub fn cost_projection(
    result: &RunResult,
    source: &str,
    options: &CostOptions,
) -> Result<CostProjection, CostError> {
    if result.targets.is_empty() {
        return Err(CostError::NoTargets);
    }
    let step = match options.step {
        Some(step) => step,
        None => {
            let most = result
                .targets
                .iter()
                .map(|t| t.steps.len())
                .max()
                .unwrap_or(0);
            if most != 1 {
                return Err(CostError::StepNeeded(most));
            }
            1
        }
    };
    let mut targets = Vec::with_capacity(result.targets.len());
    for target in &result.targets {
        let found = step
            .checked_sub(1)
            .and_then(|index| target.steps.iter().find(|s| s.index == index));
        let Some(s) = found else {
            return Err(CostError::NoSuchStep {
                target: target.name.clone(),
                step,
                ran: target.steps.len(),
            });
        };
        targets.push(target_cost(&target.name, s, options)?);
    }
    let base = targets[0].vcpu;
    for t in targets.iter_mut().skip(1) {
        let vcpu_saved = base as i64 - t.vcpu as i64;
        let micros =
            i128::from(vcpu_saved) * i128::from(options.price.micros) * i128::from(HOURS_PER_YEAR);
        t.saving = Some(Saving {
            vcpu_saved,
            cents_per_year: round_div(micros, (MICROS_PER_DOLLAR / 100).into()),
        });
    }
    Ok(CostProjection {
        source: source.to_owned(),
        step,
        fleet_qps: options.fleet_qps,
        headroom: options.headroom,
        price: options.price,
        targets,
    })
}

fn target_cost(name: &str, s: &StepResult, options: &CostOptions) -> Result<TargetCost, CostError> {
    let cpu_percent = s
        .cpu_percent
        .ok_or_else(|| CostError::NoCpu(name.to_owned()))?;
    let nothing = |why| CostError::NothingMeasured {
        target: name.to_owned(),
        why,
    };
    if s.requests == 0 || !positive(s.achieved_rps) {
        return Err(nothing("no request completed"));
    }
    if !positive(cpu_percent) {
        return Err(nothing("no CPU time was measured"));
    }
    let cpu_s_per_request = cpu_percent / 100.0 / s.achieved_rps;
    let vcpu_exact = options.fleet_qps * cpu_s_per_request / (1.0 - options.headroom);
    // 2^53: beyond it whole numbers are no longer exact in an f64.
    if !(vcpu_exact.is_finite() && vcpu_exact < 9.0e15) {
        return Err(CostError::TooLarge(vcpu_exact));
    }
    // A hair under a whole number is float error, not a reason to buy one more vCPU.
    let vcpu = (vcpu_exact - 1e-9).ceil().max(0.0) as u64;
    let mut notes = Vec::new();
    if s.slo_held == Some(false) {
        notes.push(format!(
            "{name}: the step broke the SLO; its CPU per request is from an overloaded service"
        ));
    }
    if s.errors > 0 {
        notes.push(format!(
            "{name}: {} of {} requests in the step failed; they are counted as requests",
            s.errors, s.requests
        ));
    }
    if let Some(offered) = s.offered_rps
        && s.achieved_rps < 0.95 * offered
    {
        notes.push(format!(
            "{name}: achieved {} of the {} req/s offered",
            fmt_rate(s.achieved_rps),
            fmt_rate(offered)
        ));
    }
    Ok(TargetCost {
        name: name.to_owned(),
        offered_rps: s.offered_rps,
        achieved_rps: s.achieved_rps,
        cpu_percent,
        cpu_us_per_request: cpu_s_per_request * 1e6,
        vcpu_exact,
        vcpu,
        saving: None,
        notes,
    })
}

/// A finite number above zero (NaN is not).
fn positive(x: f64) -> bool {
    x.is_finite() && x > 0.0
}

/// `n / d` rounded half away from zero (`d > 0`).
fn round_div(n: i128, d: i128) -> i128 {
    let q = n / d;
    let r = n % d;
    if 2 * r.abs() >= d { q + n.signum() } else { q }
}

/// Cents as dollars: `$1,234.56`, `-$12.00`.
fn fmt_money(cents: i128) -> String {
    let sign = if cents < 0 { "-" } else { "" };
    let cents = cents.unsigned_abs();
    format!(
        "{sign}${}.{:02}",
        fmt_count((cents / 100) as f64),
        cents % 100
    )
}

/// Dollars with two decimals for JSON (`230563.2`), from exact cents.
fn dollars(cents: i128) -> f64 {
    // Exact for any saving below ~$90 trillion (2^53 cents).
    cents as f64 / 100.0
}

fn fmt_us(us: f64) -> String {
    if us >= 100.0 {
        fmt_amount(us)
    } else {
        format!("{us:.2}")
    }
}

impl CostProjection {
    /// The vCPUs to provision per target, in the run's order.
    pub fn vcpus(&self) -> Vec<(&str, u64)> {
        self.targets
            .iter()
            .map(|t| (t.name.as_str(), t.vcpu))
            .collect()
    }

    /// The yearly saving of each later target against the first, in cents.
    pub fn yearly_savings_cents(&self) -> Vec<(&str, i128)> {
        self.targets
            .iter()
            .filter_map(|t| t.saving.map(|s| (t.name.as_str(), s.cents_per_year)))
            .collect()
    }

    fn vcpu_formula(&self, t: &TargetCost) -> String {
        let headroom = if self.headroom > 0.0 {
            format!(" ÷ (1 − {})", trim_float(self.headroom))
        } else {
            String::new()
        };
        format!(
            "vCPUs = {} req/s × {} µs CPU/request{headroom} = {} → {} (whole vCPUs)",
            fmt_rate(self.fleet_qps),
            fmt_us(t.cpu_us_per_request),
            fmt_amount(t.vcpu_exact),
            fmt_count(t.vcpu as f64)
        )
    }

    fn saving_formula(&self, t: &TargetCost) -> Option<String> {
        let s = t.saving?;
        let base = &self.targets[0];
        Some(format!(
            "({} {} − {} {}) vCPU × {}/vCPU-hour × {} h/year = {} a year",
            base.name,
            fmt_count(base.vcpu as f64),
            t.name,
            fmt_count(t.vcpu as f64),
            self.price.display(),
            fmt_count(HOURS_PER_YEAR as f64),
            fmt_money(s.cents_per_year)
        ))
    }

    /// The projection for a terminal: the inputs, a row per target, the formulas with the
    /// numbers put in, and any note on the step measured.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let first = &self.targets[0];
        let at = match first.offered_rps {
            Some(rps) => format!(" (offered {} rps)", fmt_rate(rps)),
            None => String::new(),
        };
        let _ = writeln!(
            out,
            "cost projection from {}, step {}{at}",
            self.source, self.step
        );
        let headroom = if self.headroom > 0.0 {
            format!(
                "headroom {}% (each vCPU at most {}% busy)",
                trim_float(self.headroom * 100.0),
                trim_float((1.0 - self.headroom) * 100.0)
            )
        } else {
            "no headroom (each vCPU 100% busy)".to_owned()
        };
        let _ = writeln!(
            out,
            "fleet rate {} req/s, {headroom}, price {} per vCPU-hour (US dollars), {} h a year",
            fmt_rate(self.fleet_qps),
            self.price.display(),
            fmt_count(HOURS_PER_YEAR as f64)
        );
        let _ = writeln!(
            out,
            "one fleet vCPU is assumed to do the work of one core of the measuring machine\n"
        );
        let mut grid = Grid {
            rule_after_first: true,
            ..Grid::default()
        };
        grid.rows.push(
            [
                "target",
                "CPU %",
                "achieved rps",
                "CPU µs/request",
                "vCPUs exact",
                "vCPUs",
                &format!("freed vs {}", first.name),
                "yearly saving",
            ]
            .map(str::to_owned)
            .to_vec(),
        );
        for t in &self.targets {
            grid.rows.push(vec![
                t.name.clone(),
                fmt_amount(t.cpu_percent),
                fmt_rate(t.achieved_rps),
                fmt_us(t.cpu_us_per_request),
                fmt_amount(t.vcpu_exact),
                fmt_count(t.vcpu as f64),
                t.saving
                    .map_or("-".to_owned(), |s| fmt_count(s.vcpu_saved as f64)),
                t.saving
                    .map_or("-".to_owned(), |s| fmt_money(s.cents_per_year)),
            ]);
        }
        grid.render(&mut out);
        out.push('\n');
        for t in &self.targets {
            let _ = writeln!(out, "{}: {}", t.name, self.vcpu_formula(t));
        }
        for t in &self.targets {
            if let Some(f) = self.saving_formula(t) {
                let _ = writeln!(out, "saving with {}: {f}", t.name);
            }
        }
        for note in self.targets.iter().flat_map(|t| &t.notes) {
            let _ = writeln!(out, "note: {note}");
        }
        out
    }

    /// The projection as JSON. With exactly two targets the top level also carries
    /// `vcpu_saved`, `yearly_saving` (dollars), `yearly_saving_cents` and `formula` for the
    /// second against the first; per target they are always in `targets[]`.
    pub fn to_json(&self) -> serde_json::Value {
        let targets: Vec<serde_json::Value> = self
            .targets
            .iter()
            .map(|t| {
                json!({
                    "name": t.name,
                    "offered_rps": t.offered_rps,
                    "achieved_rps": t.achieved_rps,
                    "cpu_percent": t.cpu_percent,
                    "cpu_us_per_request": t.cpu_us_per_request,
                    "vcpu_exact": t.vcpu_exact,
                    "vcpu": t.vcpu,
                    "vcpu_formula": self.vcpu_formula(t),
                    "vcpu_saved": t.saving.map(|s| s.vcpu_saved),
                    "yearly_saving": t.saving.map(|s| dollars(s.cents_per_year)),
                    "yearly_saving_cents": t.saving.map(|s| s.cents_per_year as i64),
                    "saving_formula": self.saving_formula(t),
                    "notes": t.notes,
                })
            })
            .collect();
        let vcpu: serde_json::Map<String, serde_json::Value> = self
            .targets
            .iter()
            .map(|t| (t.name.clone(), json!(t.vcpu)))
            .collect();
        let mut out = json!({
            "source": self.source,
            "step": self.step,
            "fleet_qps": self.fleet_qps,
            "headroom": self.headroom,
            "currency": "USD",
            "vcpu_hour_price": self.price.micros as f64 / MICROS_PER_DOLLAR as f64,
            "vcpu_hour_price_micros": self.price.micros,
            "hours_per_year": HOURS_PER_YEAR,
            "baseline": self.targets[0].name,
            "vcpu": vcpu,
            "targets": targets,
        });
        if let [_, second] = self.targets.as_slice()
            && let Some(s) = second.saving
        {
            out["vcpu_saved"] = json!(s.vcpu_saved);
            out["yearly_saving"] = json!(dollars(s.cents_per_year));
            out["yearly_saving_cents"] = json!(s.cents_per_year as i64);
            out["formula"] = json!(self.saving_formula(second));
        }
        out
    }
}

/// A float without trailing zeros: `0.3`, `70`, `12.5`.
fn trim_float(v: f64) -> String {
    let s = format!("{v:.4}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use scalpel_load::result::{
        LatencySummary, Machine, RunConfig, StepResult, TargetResult, encode_histogram,
        new_histogram,
    };

    fn step(index: u32, rps: f64, cpu: Option<f64>) -> StepResult {
        StepResult {
            index,
            offered_rps: Some(rps),
            achieved_rps: rps,
            duration_s: 10.0,
            requests: (rps * 10.0) as u64,
            endpoints: Vec::new(),
            sent: (rps * 10.0) as u64,
            answered: (rps * 10.0) as u64,
            failed: 0,
            errors: 0,
            error_kinds: Default::default(),
            late: 0,
            not_sent: 0,
            interrupted: 0,
            partial: false,
            latency_ms: Some(LatencySummary::default()),
            histogram: encode_histogram(&new_histogram()),
            cpu_percent: cpu,
            cpu_percent_peak: cpu,
            rss_mb: None,
            rss_mb_peak: None,
            pss_mb: None,
            pss_mb_peak: None,
            slo_held: None,
            slo_reason: None,
            start_late_s: None,
            connections_opened: 0,
            handshake_ms: None,
            handshake_histogram: None,
            h2: None,
        }
    }

    fn run(targets: Vec<(&str, Vec<StepResult>)>) -> RunResult {
        RunResult {
            format_version: 1,
            tool: "test".into(),
            part_ids: Vec::new(),
            interrupted: false,
            started_at: "2026-01-01T00:00:00Z".into(),
            machine: Machine::default(),
            config: RunConfig {
                model: "open".into(),
                connections: 50,
                max_in_flight: Some(1000),
                step_duration_s: Some(10.0),
                requests_per_step: None,
                slo: None,
                request: "GET /".into(),
                recorded: None,
            },
            targets: targets
                .into_iter()
                .map(|(name, steps)| TargetResult {
                    name: name.into(),
                    url: "http://127.0.0.1:1".into(),
                    connection: None,
                    steps,
                    breaking_point: None,
                })
                .collect(),
            shard: None,
            shards: None,
        }
    }

    #[test]
    fn prices_parse_exactly_and_reject_anything_else() {
        assert_eq!(VcpuHourPrice::parse("0.0416").unwrap().micros(), 41_600);
        assert_eq!(VcpuHourPrice::parse("$2").unwrap().micros(), 2_000_000);
        assert_eq!(VcpuHourPrice::parse(".5").unwrap().micros(), 500_000);
        assert_eq!(VcpuHourPrice::parse("3.").unwrap().micros(), 3_000_000);
        assert_eq!(VcpuHourPrice::parse("0.000001").unwrap().micros(), 1);
        for bad in [
            "",
            ".",
            "-1",
            "1e3",
            "0.0000001",
            "1,000",
            "abc",
            "1.2.3",
            "$",
            "99999999",
            "+1",
        ] {
            assert!(VcpuHourPrice::parse(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(VcpuHourPrice::parse("0.0416").unwrap().display(), "$0.0416");
        assert_eq!(VcpuHourPrice::parse("1200").unwrap().display(), "$1,200.00");
    }

    /// The story's arithmetic, by hand: at 80,000 req/s, go at 78.3% of a core for 40,000
    /// req/s = 19.575 µs/request, rust 52.0% = 13 µs/request.
    #[test]
    fn the_arithmetic_matches_a_hand_computation() {
        let r = run(vec![
            ("go", vec![step(0, 40_000.0, Some(78.3))]),
            ("rust", vec![step(0, 40_000.0, Some(52.0))]),
        ]);
        let price = VcpuHourPrice::parse("0.04").unwrap();
        let opts = CostOptions::new(80_000.0, price)
            .unwrap()
            .headroom(0.2)
            .unwrap();
        let p = cost_projection(&r, "x.json", &opts).unwrap();
        // go: 80,000 × 19.575e-6 / 0.8 = 1.957 5 → 2; rust: 80,000 × 13e-6 / 0.8 = 1.3 → 2.
        assert_eq!(p.vcpus(), vec![("go", 2), ("rust", 2)]);
        assert_eq!(p.yearly_savings_cents(), vec![("rust", 0)]);
        // A fleet 1,000 times larger: 1,957.5 → 1,958 and 1,300 → 1,300; saved 658 vCPU ×
        // $0.04 × 8,760 h = $230,563.20.
        let opts = CostOptions::new(80_000_000.0, price)
            .unwrap()
            .headroom(0.2)
            .unwrap();
        let p = cost_projection(&r, "x.json", &opts).unwrap();
        assert_eq!(p.vcpus(), vec![("go", 1958), ("rust", 1300)]);
        assert_eq!(p.yearly_savings_cents(), vec![("rust", 23_056_320)]);
        let table = p.table();
        assert!(table.contains("$230,563.20"), "{table}");
        assert!(
            table.contains("(go 1,958 − rust 1,300) vCPU × $0.04/vCPU-hour × 8,760 h/year"),
            "{table}"
        );
        assert!(
            table.contains("80,000,000 req/s × 13.00 µs CPU/request ÷ (1 − 0.2) = 1,300.0 → 1,300"),
            "{table}"
        );
        let j = p.to_json();
        assert_eq!(j["vcpu"]["go"], 1958);
        assert_eq!(j["vcpu_saved"], 658);
        assert_eq!(j["yearly_saving_cents"], 23_056_320);
        assert_eq!(j["yearly_saving"], 230_563.2);
        let us = j["targets"][1]["cpu_us_per_request"].as_f64().unwrap();
        assert!((us - 13.0).abs() < 1e-9, "{us}");
    }

    #[test]
    fn cents_round_half_away_from_zero_and_a_dearer_candidate_shows_a_loss() {
        assert_eq!(round_div(5_000, 10_000), 1);
        assert_eq!(round_div(4_999, 10_000), 0);
        assert_eq!(round_div(-5_000, 10_000), -1);
        assert_eq!(fmt_money(-1234), "-$12.34");
        assert_eq!(fmt_money(123_456_789), "$1,234,567.89");
        // rust slower here: 1 vCPU more costs 1 × $0.000001 × 8,760 = $0.00876 → $0.01.
        let r = run(vec![
            ("go", vec![step(0, 1000.0, Some(10.0))]),
            ("rust", vec![step(0, 1000.0, Some(20.0))]),
        ]);
        let price = VcpuHourPrice::parse("0.000001").unwrap();
        let p = cost_projection(&r, "x", &CostOptions::new(10_000.0, price).unwrap()).unwrap();
        assert_eq!(p.vcpus(), vec![("go", 1), ("rust", 2)]);
        assert_eq!(p.yearly_savings_cents(), vec![("rust", -1)]);
    }

    #[test]
    fn bad_inputs_are_errors() {
        let price = VcpuHourPrice::parse("1").unwrap();
        assert!(CostOptions::new(0.0, price).is_err());
        assert!(CostOptions::new(f64::NAN, price).is_err());
        assert!(CostOptions::new(-5.0, price).is_err());
        let ok = CostOptions::new(100.0, price).unwrap();
        assert!(ok.clone().headroom(1.0).is_err());
        assert!(ok.clone().headroom(-0.1).is_err());
        let ramp = run(vec![(
            "a",
            vec![step(0, 100.0, Some(1.0)), step(1, 200.0, Some(2.0))],
        )]);
        assert!(matches!(
            cost_projection(&ramp, "x", &ok),
            Err(CostError::StepNeeded(2))
        ));
        assert!(cost_projection(&ramp, "x", &ok.clone().step(2)).is_ok());
        for k in [0, 3] {
            assert!(matches!(
                cost_projection(&ramp, "x", &ok.clone().step(k)),
                Err(CostError::NoSuchStep { .. })
            ));
        }
        let unwatched = run(vec![("a", vec![step(0, 100.0, None)])]);
        assert!(matches!(
            cost_projection(&unwatched, "x", &ok),
            Err(CostError::NoCpu(_))
        ));
        let idle = run(vec![("a", vec![step(0, 100.0, Some(0.0))])]);
        assert!(matches!(
            cost_projection(&idle, "x", &ok),
            Err(CostError::NothingMeasured { .. })
        ));
        assert!(matches!(
            cost_projection(&run(vec![]), "x", &ok),
            Err(CostError::NoTargets)
        ));
    }
}
