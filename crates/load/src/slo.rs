//! The SLO language (`p99<50ms,errors<1%,rps>1000`) and its evaluation against a step.

use std::fmt;
use std::time::Duration;

use crate::result::StepResult;

/// A service-level objective: every clause must hold for a step to hold.
///
/// Grammar: clauses separated by commas; each clause is `METRIC OP VALUE`:
/// - `p50`, `p90`, `p99`, `p999`, `max`, `mean` with `<` or `<=` and a duration with a unit
///   (`us`, `ms`, `s`), e.g. `p99<50ms`;
/// - `errors` with `<` or `<=` and a percentage, e.g. `errors<1%`;
/// - `rps` with `>` or `>=` and a number, e.g. `rps>=900` (achieved requests/s).
#[derive(Debug, Clone, PartialEq)]
pub struct Slo {
    text: String,
    clauses: Vec<Clause>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Metric {
    P50,
    P90,
    P99,
    P999,
    Max,
    Mean,
    Errors,
    Rps,
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct Clause {
    metric: Metric,
    inclusive: bool,
    /// Milliseconds for latencies, percent for errors, requests/s for rps.
    limit: f64,
}

/// A malformed `--slo`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("bad SLO clause `{clause}`: {why}")]
pub struct SloError {
    clause: String,
    why: String,
}

impl Slo {
    /// Parses an SLO such as `p99<50ms,errors<1%`.
    pub fn parse(text: &str) -> Result<Slo, SloError> {
        let mut clauses = Vec::new();
        for raw in text.split(',') {
            let raw = raw.trim();
            let err = |why: &str| SloError {
                clause: raw.to_string(),
                why: why.to_string(),
            };
            if raw.is_empty() {
                return Err(err(
                    "empty clause (expected e.g. `p99<50ms,errors<1%,rps>100`)",
                ));
            }
            let op_at = raw
                .find(['<', '>'])
                .ok_or_else(|| err("expected `<` or `>`"))?;
            let name = raw[..op_at].trim().to_ascii_lowercase();
            let mut rest = &raw[op_at..];
            let less = rest.starts_with('<');
            rest = &rest[1..];
            let inclusive = rest.starts_with('=');
            if inclusive {
                rest = &rest[1..];
            }
            let value = rest.trim();
            let metric = match name.as_str() {
                "p50" => Metric::P50,
                "p90" => Metric::P90,
                "p99" => Metric::P99,
                "p999" | "p99.9" => Metric::P999,
                "max" => Metric::Max,
                "mean" => Metric::Mean,
                "errors" => Metric::Errors,
                "rps" => Metric::Rps,
                _ => {
                    return Err(err(
                        "unknown metric (use p50, p90, p99, p999, max, mean, errors or rps)",
                    ));
                }
            };
            let limit = match metric {
                Metric::Errors => {
                    if !less {
                        return Err(err("errors take `<`, e.g. errors<1%"));
                    }
                    let number = value
                        .strip_suffix('%')
                        .ok_or_else(|| err("errors take a percentage, e.g. errors<1%"))?;
                    parse_number(number).ok_or_else(|| err("not a number"))?
                }
                Metric::Rps => {
                    if less {
                        return Err(err("rps takes `>`, e.g. rps>1000"));
                    }
                    parse_number(value).ok_or_else(|| err("not a number"))?
                }
                _ => {
                    if !less {
                        return Err(err("latencies take `<`, e.g. p99<50ms"));
                    }
                    let d = parse_duration(value).map_err(|e| err(&e.to_string()))?;
                    d.as_secs_f64() * 1000.0
                }
            };
            clauses.push(Clause {
                metric,
                inclusive,
                limit,
            });
        }
        Ok(Slo {
            text: text.trim().to_string(),
            clauses,
        })
    }

    /// The SLO as given.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// `None` when the step held, else why it broke, e.g. `p99 71.3ms >= 50ms at 4000 rps`.
    ///
    /// `errors` counts failed requests and requests that could not be sent at all
    /// (`not_sent`) against everything scheduled, so a target too slow to be offered the
    /// load does not pass. A step with no completed request breaks every clause.
    pub fn violation(&self, step: &StepResult) -> Option<String> {
        let at = match step.offered_rps {
            Some(rps) => format!(" at {} rps", fmt_num(rps)),
            None => String::new(),
        };
        if step.requests == 0 {
            return Some(format!("no request completed{at}"));
        }
        for c in &self.clauses {
            let l = &step.latency_ms;
            let (value, shown, limit_shown) = match c.metric {
                Metric::P50 => (l.p50, fmt_ms(l.p50), fmt_ms(c.limit)),
                Metric::P90 => (l.p90, fmt_ms(l.p90), fmt_ms(c.limit)),
                Metric::P99 => (l.p99, fmt_ms(l.p99), fmt_ms(c.limit)),
                Metric::P999 => (l.p999, fmt_ms(l.p999), fmt_ms(c.limit)),
                Metric::Max => (l.max, fmt_ms(l.max), fmt_ms(c.limit)),
                Metric::Mean => (l.mean, fmt_ms(l.mean), fmt_ms(c.limit)),
                Metric::Errors => {
                    let failed = step.errors + step.not_sent;
                    let all = step.requests + step.not_sent;
                    let pct = failed as f64 * 100.0 / all as f64;
                    (
                        pct,
                        format!("{}%", fmt_num(pct)),
                        format!("{}%", fmt_num(c.limit)),
                    )
                }
                Metric::Rps => (
                    step.achieved_rps,
                    fmt_num(step.achieved_rps),
                    fmt_num(c.limit),
                ),
            };
            let held = match (c.metric, c.inclusive) {
                (Metric::Rps, false) => value > c.limit,
                (Metric::Rps, true) => value >= c.limit,
                (_, false) => value < c.limit,
                (_, true) => value <= c.limit,
            };
            if !held {
                let negated = match (c.metric, c.inclusive) {
                    (Metric::Rps, false) => "<=",
                    (Metric::Rps, true) => "<",
                    (_, false) => ">=",
                    (_, true) => ">",
                };
                return Some(format!("{} {shown} {negated} {limit_shown}{at}", c.metric));
            }
        }
        None
    }
}

impl fmt::Display for Metric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Metric::P50 => "p50",
            Metric::P90 => "p90",
            Metric::P99 => "p99",
            Metric::P999 => "p999",
            Metric::Max => "max",
            Metric::Mean => "mean",
            Metric::Errors => "errors",
            Metric::Rps => "rps",
        })
    }
}

fn parse_number(s: &str) -> Option<f64> {
    let v: f64 = s.trim().parse().ok()?;
    (v.is_finite() && v >= 0.0).then_some(v)
}

fn fmt_num(v: f64) -> String {
    if v == v.trunc() && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        let s = format!("{v:.2}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

fn fmt_ms(ms: f64) -> String {
    if ms >= 1000.0 {
        format!("{}s", fmt_num((ms / 10.0).round() / 100.0))
    } else if ms < 1.0 {
        format!("{}us", fmt_num((ms * 1000.0).round()))
    } else {
        format!("{}ms", fmt_num((ms * 100.0).round() / 100.0))
    }
}

/// A malformed duration such as `10x` or `-3s`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("bad duration `{0}` (expected a number with a unit: us, ms, s, m or h, e.g. 30s)")]
pub struct DurationError(String);

/// Parses `250us`, `50ms`, `30s`, `1.5s`, `2m`, `1h`. A unit is required; zero is allowed.
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let t = text.trim();
    let bad = || DurationError(text.to_string());
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(bad)?;
    let (number, unit) = t.split_at(split);
    let value: f64 = number.parse().map_err(|_| bad())?;
    let scale = match unit.trim() {
        "us" | "µs" => 1e-6,
        "ms" => 1e-3,
        "s" => 1.0,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        _ => return Err(bad()),
    };
    let secs = value * scale;
    if !secs.is_finite() || secs > 1e9 {
        return Err(bad());
    }
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::result::LatencySummary;

    fn step(p99: f64, requests: u64, errors: u64) -> StepResult {
        StepResult {
            index: 0,
            offered_rps: Some(4000.0),
            achieved_rps: 3990.0,
            duration_s: 1.0,
            requests,
            errors,
            error_kinds: Default::default(),
            late: 0,
            not_sent: 0,
            latency_ms: LatencySummary {
                p99,
                ..Default::default()
            },
            histogram: String::new(),
            cpu_percent: None,
            cpu_percent_peak: None,
            rss_mb: None,
            rss_mb_peak: None,
            pss_mb: None,
            pss_mb_peak: None,
            slo_held: None,
        }
    }

    #[test]
    fn parses_and_evaluates_every_metric_kind() {
        let slo = Slo::parse("p99<50ms, errors<1%, rps>=3000").unwrap();
        assert_eq!(slo.violation(&step(49.9, 1000, 9)), None);
        assert_eq!(
            slo.violation(&step(71.3, 1000, 0)).as_deref(),
            Some("p99 71.3ms >= 50ms at 4000 rps")
        );
        assert_eq!(
            slo.violation(&step(1.0, 1000, 10)).as_deref(),
            Some("errors 1% >= 1% at 4000 rps")
        );
        let slo = Slo::parse("rps>4000").unwrap();
        assert_eq!(
            slo.violation(&step(1.0, 1000, 0)).as_deref(),
            Some("rps 3990 <= 4000 at 4000 rps")
        );
        let slo = Slo::parse("max<=1s,p999<800us,p50<1.5s,mean<2s,p90<1s").unwrap();
        assert_eq!(slo.clauses.len(), 5);
        assert_eq!(slo.clauses[1].limit, 0.8);
    }

    #[test]
    fn rejects_malformed_slos() {
        for bad in [
            "",
            "p99",
            "p98<5ms",
            "p99<5",
            "p99<5xs",
            "errors<1",
            "rps<5",
            "p99>5ms",
            "p99<-1ms",
            "errors<abc%",
            ",",
        ] {
            assert!(Slo::parse(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn durations_need_a_unit() {
        assert_eq!(parse_duration("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        for bad in ["30", "s", "-1s", "1.2.3s", "10x", ""] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }
}
