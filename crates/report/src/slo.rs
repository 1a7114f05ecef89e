//! A minimal reader of the SLO string (`p99<50ms,errors<1%`), used to re-judge merged steps.
//!
//! The load engine judges each step while it runs; after a merge the percentiles change, so
//! the verdicts must be recomputed from the merged figures with the same rules.

use scalpel_load::result::StepResult;

/// One clause of an SLO: a figure that must stay below a bound.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Clause {
    figure: Figure,
    inclusive: bool,
    /// Milliseconds for latency figures, percent for errors.
    bound: f64,
    /// The bound as written, for messages (`50ms`, `1%`).
    bound_text: String,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Figure {
    Mean,
    P50,
    P90,
    P99,
    P999,
    Max,
    ErrorPercent,
}

impl Figure {
    fn name(self) -> &'static str {
        match self {
            Figure::Mean => "mean",
            Figure::P50 => "p50",
            Figure::P90 => "p90",
            Figure::P99 => "p99",
            Figure::P999 => "p999",
            Figure::Max => "max",
            Figure::ErrorPercent => "errors",
        }
    }
}

/// A parsed SLO: every clause must hold.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Slo {
    clauses: Vec<Clause>,
}

impl Slo {
    /// Parses `p99<50ms,errors<1%`. Figures: mean, p50, p90, p99, p999 (or p99.9), max with
    /// a unit of us, ms or s; `errors` with `%`. `<` and `<=` are accepted.
    pub(crate) fn parse(text: &str) -> Result<Slo, String> {
        let mut clauses = Vec::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            clauses.push(parse_clause(part)?);
        }
        if clauses.is_empty() {
            return Err(format!("SLO {text:?} has no clause"));
        }
        Ok(Slo { clauses })
    }

    /// The bound in milliseconds on a latency figure (`p50`, `p90`, `p99`, `p99.9`, `mean`,
    /// `max`), if the SLO has one.
    pub(crate) fn latency_bound_ms(&self, figure: &str) -> Option<f64> {
        let wanted = if figure == "p99.9" { "p999" } else { figure };
        self.clauses
            .iter()
            .find(|c| c.figure != Figure::ErrorPercent && c.figure.name() == wanted)
            .map(|c| c.bound)
    }

    /// The first clause the step breaks, as `p99 71.3ms >= 50ms`; `None` when it holds.
    pub(crate) fn violation(&self, step: &StepResult) -> Option<String> {
        self.clauses.iter().find_map(|clause| {
            let (actual, actual_text) = match clause.figure {
                Figure::ErrorPercent => {
                    let pct = if step.requests == 0 {
                        0.0
                    } else {
                        step.errors as f64 * 100.0 / step.requests as f64
                    };
                    (pct, format!("{pct:.2}%"))
                }
                latency => {
                    let l = &step.latency_ms;
                    let ms = match latency {
                        Figure::Mean => l.mean,
                        Figure::P50 => l.p50,
                        Figure::P90 => l.p90,
                        Figure::P99 => l.p99,
                        Figure::P999 => l.p999,
                        _ => l.max,
                    };
                    (ms, format!("{}ms", crate::figures::fmt_ms(ms)))
                }
            };
            let holds = if clause.inclusive {
                actual <= clause.bound
            } else {
                actual < clause.bound
            };
            (!holds).then(|| {
                let op = if clause.inclusive { ">" } else { ">=" };
                format!(
                    "{} {actual_text} {op} {}",
                    clause.figure.name(),
                    clause.bound_text
                )
            })
        })
    }
}

fn parse_clause(part: &str) -> Result<Clause, String> {
    let (name, rest, inclusive) = if let Some((name, rest)) = part.split_once("<=") {
        (name, rest, true)
    } else if let Some((name, rest)) = part.split_once('<') {
        (name, rest, false)
    } else {
        return Err(format!("SLO clause {part:?} has no '<'"));
    };
    let name = name.trim().to_ascii_lowercase();
    let rest = rest.trim();
    let figure = match name.as_str() {
        "mean" => Figure::Mean,
        "p50" => Figure::P50,
        "p90" => Figure::P90,
        "p99" => Figure::P99,
        "p999" | "p99.9" => Figure::P999,
        "max" => Figure::Max,
        "errors" | "error" => Figure::ErrorPercent,
        _ => return Err(format!("SLO clause {part:?}: unknown figure {name:?}")),
    };
    let split = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (number, unit) = rest.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("SLO clause {part:?}: {number:?} is not a number"))?;
    let bound = match (figure, unit.trim()) {
        (Figure::ErrorPercent, "%") => value,
        (Figure::ErrorPercent, _) => {
            return Err(format!("SLO clause {part:?}: errors take a '%' bound"));
        }
        (_, "us" | "µs") => value / 1000.0,
        (_, "ms") => value,
        (_, "s") => value * 1000.0,
        (_, unit) => {
            return Err(format!(
                "SLO clause {part:?}: unit {unit:?} is not us, ms or s"
            ));
        }
    };
    Ok(Clause {
        figure,
        inclusive,
        bound,
        bound_text: rest.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use scalpel_load::result::LatencySummary;

    fn step(p99: f64, requests: u64, errors: u64) -> StepResult {
        StepResult {
            index: 0,
            offered_rps: Some(100.0),
            achieved_rps: 100.0,
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
    fn latency_and_error_clauses_are_judged_in_order() {
        let slo = Slo::parse("p99<50ms, errors<1%").unwrap();
        assert_eq!(slo.violation(&step(49.9, 1000, 9)), None);
        assert_eq!(
            slo.violation(&step(71.3, 1000, 0)).as_deref(),
            Some("p99 71.30ms >= 50ms")
        );
        assert_eq!(
            slo.violation(&step(10.0, 1000, 10)).as_deref(),
            Some("errors 1.00% >= 1%")
        );
    }

    #[test]
    fn units_convert_to_milliseconds() {
        let slo = Slo::parse("p99<0.05s").unwrap();
        assert!(slo.violation(&step(49.0, 1, 0)).is_none());
        assert!(slo.violation(&step(50.0, 1, 0)).is_some());
        let slo = Slo::parse("p99<=500us").unwrap();
        assert!(slo.violation(&step(0.5, 1, 0)).is_none());
        assert!(slo.violation(&step(0.501, 1, 0)).is_some());
    }

    #[test]
    fn malformed_slo_is_an_error() {
        for bad in ["", "p99", "p98<5ms", "p99<5", "errors<1ms", "p99<abcms"] {
            assert!(Slo::parse(bad).is_err(), "{bad:?} should not parse");
        }
    }
}
