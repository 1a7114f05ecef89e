//! The SLO language (`p99<50ms,errors<1%,rps>1000`) and its evaluation against a step.
//!
//! The verdict fails closed: a step holds only on evidence that every clause holds.
//! - The rate must have been delivered: a step whose requests were late or never sent
//!   beyond 1% of those due did not get the load it names, so it cannot hold at it.
//! - A request that got no answer has no latency that could be below a limit: a
//!   percentile holds only if it is below the limit counting every such request as never
//!   answered; `max` and `mean` break on any. A request never sent (a failed connect, no
//!   free connection) has no latency at all: a latency clause cannot hold while any is
//!   missing.
//! - No request completed: every clause breaks.
//! - A clause may name one endpoint of a mix (`stats:p99<50ms`): it is judged on that
//!   endpoint's own figures by the same rules, delivery included; an endpoint with no
//!   figures, or none completed, breaks it. Clauses without a name judge the whole step.

use std::fmt;

use crate::result::{BreakingPoint, StepResult, decode_histogram};

/// Late plus not sent may be at most this share of the requests due for a step to hold.
const DELIVERY_TOLERANCE: f64 = 0.01;

/// A service-level objective: every clause must hold for a step to hold.
///
/// Grammar: clauses separated by commas; each clause is `METRIC OP VALUE`:
/// - `p50`, `p90`, `p99`, `p999`, `max`, `mean` with `<` or `<=` and a duration with a unit
///   (`us`, `ms`, `s`), e.g. `p99<50ms`;
/// - `errors` with `<` or `<=` and a percentage, e.g. `errors<1%`;
/// - `rps` with `>` or `>=` and a number, e.g. `rps>=900` (achieved requests/s).
///
/// A clause may start with an endpoint's name and a colon (`stats:p99<50ms`): it then
/// judges that endpoint of a mix alone. `stats:p99<50ms,errors<1%` is the endpoint's p99
/// and the whole step's errors; write `stats:errors<1%` for the endpoint's.
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

#[derive(Debug, Clone, PartialEq)]
struct Clause {
    /// The endpoint of a mix it judges; `None`: the whole step.
    endpoint: Option<String>,
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
            let (endpoint, name) = match raw[..op_at].split_once(':') {
                None => (None, raw[..op_at].trim().to_ascii_lowercase()),
                Some((endpoint, name)) => {
                    let endpoint = endpoint.trim();
                    if endpoint.is_empty()
                        || !endpoint
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
                    {
                        return Err(err(
                            "an endpoint name is letters, digits, `_`, `-` and `.`, e.g. \
                             `stats:p99<50ms`",
                        ));
                    }
                    (Some(endpoint.to_string()), name.trim().to_ascii_lowercase())
                }
            };
            let mut rest = &raw[op_at..];
            let less = rest.starts_with('<');
            rest = &rest[1..];
            let inclusive = rest.starts_with('=');
            if inclusive {
                rest = &rest[1..];
            }
            let value = rest.trim();
            let metric = Metric::from_name(&name).ok_or_else(|| {
                err("unknown metric (use p50, p90, p99, p999, max, mean, errors or rps)")
            })?;
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
                    let d =
                        scalpel_units::parse_duration(value).map_err(|e| err(&e.to_string()))?;
                    d.as_secs_f64() * 1000.0
                }
            };
            clauses.push(Clause {
                endpoint,
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

    /// The SLO a shard judges its own part by, one of `parts` equal parts of a run: `rps`
    /// limits divided by `parts` (they name the whole run's rate), every other clause as it
    /// is. The text stays the whole run's.
    pub fn for_part(&self, parts: u32) -> Slo {
        let mut part = self.clone();
        for c in &mut part.clauses {
            if c.metric == Metric::Rps {
                c.limit /= f64::from(parts.max(1));
            }
        }
        part
    }

    /// The SLO as given.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The endpoints its clauses name, each once, in order.
    pub fn endpoints(&self) -> Vec<&str> {
        let mut names: Vec<&str> = Vec::new();
        for name in self.clauses.iter().filter_map(|c| c.endpoint.as_deref()) {
            if !names.contains(&name) {
                names.push(name);
            }
        }
        names
    }

    /// The limit in milliseconds this SLO puts on a latency figure (`p50`, `p90`, `p99`,
    /// `p999` or `p99.9`, `max`, `mean`), if it has one: the line a chart draws.
    pub fn latency_bound_ms(&self, figure: &str) -> Option<f64> {
        let wanted = Metric::from_name(figure).filter(|m| m.is_latency())?;
        self.clauses
            .iter()
            .find(|c| c.metric == wanted && c.endpoint.is_none())
            .map(|c| c.limit)
    }

    /// `None` when the step held, else every clause it broke, e.g.
    /// `p99 71.36ms >= 50ms, errors 3% >= 1% at 4000 rps` (see the module's rules).
    ///
    /// `errors` counts failed requests and requests never sent (`not_sent`, except the
    /// load generator's own `local:*` failures, which are no fault of the target) against
    /// everything due, so a target too slow to be offered the load does not pass.
    pub fn violation(&self, step: &StepResult) -> Option<String> {
        let at = match step.offered_rps {
            Some(rps) => format!(" at {} rps", fmt_num(rps)),
            None => String::new(),
        };
        if step.partial {
            return Some(format!("the step was interrupted before its end{at}"));
        }
        if step.requests == 0 {
            return Some(format!("no request completed{at}"));
        }
        let mut broken = Vec::new();
        self.scope_violations(None, step, &mut broken);
        for name in self.endpoints() {
            match step.endpoints.iter().find(|e| e.name == name) {
                None => broken.push(format!("{name}: no such endpoint in this step")),
                Some(e) => self.scope_violations(Some(name), &e.as_step(step), &mut broken),
            }
        }
        (!broken.is_empty()).then(|| format!("{}{at}", broken.join(", ")))
    }

    /// The broken clauses of one scope — the whole step (`endpoint` `None`), or one
    /// endpoint seen as a step — with the delivery rule first; an endpoint's are prefixed
    /// with its name.
    fn scope_violations(&self, endpoint: Option<&str>, step: &StepResult, out: &mut Vec<String>) {
        let named = |why: String| match endpoint {
            Some(name) => format!("{name}: {why}"),
            None => why,
        };
        if step.requests == 0 {
            out.push(named("no request completed".to_owned()));
            return;
        }
        let due = step.due();
        let local = step.local_failures();
        let short = step.late + step.not_sent;
        if short as f64 > due as f64 * DELIVERY_TOLERANCE {
            let mut why = format!(
                "late or not sent {}% > {}% ({short} of {due}: the rate was not delivered",
                fmt_num(short as f64 * 100.0 / due as f64),
                fmt_num(DELIVERY_TOLERANCE * 100.0)
            );
            if local > 0 {
                why.push_str(&format!("; {local} were the load generator's own errors"));
            }
            why.push(')');
            out.push(named(why));
        }
        let latencies = Latencies::of(step);
        for c in self
            .clauses
            .iter()
            .filter(|c| c.endpoint.as_deref() == endpoint)
        {
            if let Some(why) = self.clause_violation(c, step, &latencies) {
                out.push(named(why));
            }
        }
    }

    /// Judges a target's steps in order: sets each step's verdict and reason, and returns
    /// the breaking point — the offered rate of the last step that held before the first
    /// that broke (0 when the first broke; `None` in the closed model, which offers no
    /// rate), with that step's reason — or `None` when no step broke. A partial step (cut
    /// by an interrupt) gets no verdict: it lacks the evidence either way. `scalpel load`
    /// and `scalpel report merge` both judge with this.
    pub fn judge(&self, steps: &mut [StepResult]) -> Option<BreakingPoint> {
        let mut breaking_point = None;
        let mut last_held = None;
        for step in steps.iter_mut() {
            step.slo_reason = None;
            if step.partial {
                step.slo_held = None;
                continue;
            }
            match self.violation(step) {
                None => {
                    step.slo_held = Some(true);
                    if breaking_point.is_none() {
                        last_held = step.offered_rps;
                    }
                }
                Some(reason) => {
                    step.slo_held = Some(false);
                    step.slo_reason = Some(reason.clone());
                    if breaking_point.is_none() {
                        breaking_point = Some(BreakingPoint {
                            rps: step.offered_rps.map(|_| last_held.unwrap_or(0.0)),
                            reason,
                        });
                    }
                }
            }
        }
        breaking_point
    }

    fn clause_violation(&self, c: &Clause, step: &StepResult, lat: &Latencies) -> Option<String> {
        let due = step.due();
        let (value, shown, limit_shown) = match c.metric {
            Metric::Errors => {
                let local = step.local_failures();
                let failed = step.errors + step.not_sent - local;
                let all = due - local;
                let pct = if all == 0 {
                    100.0
                } else {
                    failed as f64 * 100.0 / all as f64
                };
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
            latency => {
                let never_sent = due.saturating_sub(step.sent);
                if never_sent > 0 {
                    return Some(format!(
                        "{latency} unknown: {never_sent} of {due} requests were never sent"
                    ));
                }
                let value = match lat.bound(latency) {
                    Ok(v) => v,
                    Err(why) => return Some(format!("{latency} unknown: {why}")),
                };
                (value, fmt_ms(value), fmt_ms(c.limit))
            }
        };
        let held = match (c.metric, c.inclusive) {
            (Metric::Rps, false) => value > c.limit,
            (Metric::Rps, true) => value >= c.limit,
            (_, false) => value < c.limit,
            (_, true) => value <= c.limit,
        };
        if held {
            return None;
        }
        let negated = match (c.metric, c.inclusive) {
            (Metric::Rps, false) => "<=",
            (Metric::Rps, true) => "<",
            (_, false) => ">=",
            (_, true) => ">",
        };
        Some(format!("{} {shown} {negated} {limit_shown}", c.metric))
    }
}

/// A step's latency figures for judging: the histogram holds answers and, at the moment
/// they failed, the sent requests that got no answer (`failed`).
struct Latencies {
    histogram: Option<hdrhistogram::Histogram<u64>>,
    sent: u64,
    failed: u64,
}

impl Latencies {
    fn of(step: &StepResult) -> Latencies {
        Latencies {
            histogram: decode_histogram(&step.histogram)
                .ok()
                .filter(|h| !h.is_empty()),
            sent: step.sent,
            failed: step.failed,
        }
    }

    /// A value in ms the figure is certainly at or below, counting every request with no
    /// answer as never answered; `Err` when no such value exists.
    ///
    /// For the q-quantile: with a share `f` of the sent requests unanswered, the true
    /// value (unanswered = infinite) is the answered requests' value at rank `q·n`, which
    /// is at most the recorded histogram's value at quantile `q + f` (taking `f·n` values
    /// out of a sorted list moves a rank down by at most `f·n`). Above quantile 1 there is
    /// none. With no failures this is the plain percentile.
    fn bound(&self, metric: Metric) -> Result<f64, String> {
        let Some(h) = &self.histogram else {
            return Err("no latency was recorded".into());
        };
        let no_answer = || {
            format!(
                "{} of {} sent requests got no answer",
                self.failed, self.sent
            )
        };
        let q = match metric {
            Metric::P50 => 0.50,
            Metric::P90 => 0.90,
            Metric::P99 => 0.99,
            Metric::P999 => 0.999,
            Metric::Max | Metric::Mean if self.failed > 0 => return Err(no_answer()),
            Metric::Max => return Ok(h.max() as f64 / 1000.0),
            Metric::Mean => return Ok(h.mean() / 1000.0),
            Metric::Errors | Metric::Rps => unreachable!("not a latency"),
        };
        let f = if self.sent == 0 {
            1.0
        } else {
            self.failed as f64 / self.sent as f64
        };
        let at = q + f;
        if at > 1.0 + 1e-12 {
            return Err(no_answer());
        }
        Ok(h.value_at_quantile(at.min(1.0)) as f64 / 1000.0)
    }
}

impl Metric {
    /// The metric a clause or a chart names (`p999` or `p99.9`), lowercase; the one table
    /// of names for parsing and for [`Slo::latency_bound_ms`].
    fn from_name(name: &str) -> Option<Metric> {
        Some(match name {
            "p50" => Metric::P50,
            "p90" => Metric::P90,
            "p99" => Metric::P99,
            "p999" | "p99.9" => Metric::P999,
            "max" => Metric::Max,
            "mean" => Metric::Mean,
            "errors" => Metric::Errors,
            "rps" => Metric::Rps,
            _ => return None,
        })
    }

    /// A latency figure (its limit is in milliseconds), not the error share or the rate.
    fn is_latency(self) -> bool {
        !matches!(self, Metric::Errors | Metric::Rps)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::result::{LatencySummary, encode_histogram, new_histogram};

    /// A step built the way the engine builds one: answers and no-answer failures in one
    /// real histogram (µs), counts that add up.
    struct Made {
        answered_us: Vec<u64>,
        failed_us: Vec<u64>,
        connect_failures: u64,
        not_sent: u64,
        late: u64,
        non_2xx: u64,
    }

    impl Made {
        fn answers(answered_us: Vec<u64>) -> Made {
            Made {
                answered_us,
                failed_us: Vec::new(),
                connect_failures: 0,
                not_sent: 0,
                late: 0,
                non_2xx: 0,
            }
        }

        fn step(&self) -> StepResult {
            let mut h = new_histogram();
            for v in self.answered_us.iter().chain(&self.failed_us) {
                h.record(*v).unwrap();
            }
            let answered = self.answered_us.len() as u64;
            let failed = self.failed_us.len() as u64;
            let sent = answered + failed;
            StepResult {
                index: 0,
                offered_rps: Some(4000.0),
                achieved_rps: 3990.0,
                duration_s: 1.0,
                requests: sent + self.connect_failures,
                sent,
                answered,
                failed,
                errors: failed + self.connect_failures + self.non_2xx,
                error_kinds: Default::default(),
                late: self.late,
                not_sent: self.not_sent,
                interrupted: 0,
                partial: false,
                latency_ms: LatencySummary::from_histogram(&h),
                histogram: encode_histogram(&h),
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

        /// The step as an endpoint of a mix named `name`.
        fn endpoint(&self, name: &str) -> crate::result::EndpointResult {
            let s = self.step();
            crate::result::EndpointResult {
                name: name.to_owned(),
                achieved_rps: s.achieved_rps,
                requests: s.requests,
                sent: s.sent,
                answered: s.answered,
                failed: s.failed,
                errors: s.errors,
                error_kinds: s.error_kinds,
                late: s.late,
                not_sent: s.not_sent,
                interrupted: s.interrupted,
                latency_ms: s.latency_ms,
                histogram: s.histogram,
            }
        }
    }

    /// A step of a mix made of `parts`, its totals the sum of the parts (histograms added).
    fn mixed(parts: &[(&str, &Made)]) -> StepResult {
        let mut all = Made::answers(Vec::new());
        for (_, m) in parts {
            all.answered_us.extend(&m.answered_us);
            all.failed_us.extend(&m.failed_us);
            all.connect_failures += m.connect_failures;
            all.not_sent += m.not_sent;
            all.late += m.late;
            all.non_2xx += m.non_2xx;
        }
        let mut step = all.step();
        step.endpoints = parts.iter().map(|(n, m)| m.endpoint(n)).collect();
        step
    }

    /// `n` answers at 1 ms and the rest at `slow_us`, `slow` of them.
    fn answers(n: usize, slow: usize, slow_us: u64) -> Vec<u64> {
        let mut v = vec![1000; n - slow];
        v.extend(std::iter::repeat_n(slow_us, slow));
        v
    }

    #[test]
    fn parses_and_evaluates_every_metric_kind() {
        let slo = Slo::parse("p99<50ms, errors<1%, rps>=3000").unwrap();
        let mut ok = Made::answers(answers(1000, 5, 49_000));
        ok.non_2xx = 9;
        assert_eq!(slo.violation(&ok.step()), None);
        let slow = Made::answers(answers(1000, 20, 71_300));
        assert_eq!(
            slo.violation(&slow.step()).as_deref(),
            Some("p99 71.36ms >= 50ms at 4000 rps")
        );
        let mut errors = Made::answers(answers(1000, 0, 0));
        errors.non_2xx = 10;
        assert_eq!(
            slo.violation(&errors.step()).as_deref(),
            Some("errors 1% >= 1% at 4000 rps")
        );
        let slo = Slo::parse("rps>4000").unwrap();
        assert_eq!(
            slo.violation(&Made::answers(answers(1000, 0, 0)).step())
                .as_deref(),
            Some("rps 3990 <= 4000 at 4000 rps")
        );
        let slo = Slo::parse("max<=1s,p999<800us,p50<1.5s,mean<2s,p90<1s").unwrap();
        assert_eq!(slo.clauses.len(), 5);
        assert_eq!(slo.clauses[1].limit, 0.8);
        assert_eq!(slo.latency_bound_ms("p99.9"), Some(0.8));
        assert_eq!(slo.latency_bound_ms("p99"), None);
    }

    #[test]
    fn every_broken_clause_is_named() {
        let slo = Slo::parse("p99<50ms,errors<1%").unwrap();
        let mut both = Made::answers(answers(1000, 20, 71_300));
        both.non_2xx = 30;
        assert_eq!(
            slo.violation(&both.step()).as_deref(),
            Some("p99 71.36ms >= 50ms, errors 3% >= 1% at 4000 rps")
        );
    }

    /// #11.1: a target that answered a few requests and then let every other one time
    /// out had a p99 from the few answers (and 0 from an empty histogram): "SLO ok".
    #[test]
    fn timed_out_requests_never_make_a_latency_clause_hold() {
        let slo = Slo::parse("p99<1s").unwrap();
        // Three fast answers, 97 time-outs recorded at 300 ms: below the limit as
        // recorded, but none of them was ever answered.
        let mut step = Made::answers(vec![2000; 3]);
        step.failed_us = vec![300_000; 97];
        let why = slo.violation(&step.step()).unwrap();
        assert_eq!(
            why,
            "p99 unknown: 97 of 100 sent requests got no answer at 4000 rps"
        );
        // Nothing answered at all.
        let mut none = Made::answers(Vec::new());
        none.failed_us = vec![300_000; 50];
        assert!(slo.violation(&none.step()).is_some());
        // max and mean break on any request without an answer.
        let slo = Slo::parse("max<1s").unwrap();
        let mut one = Made::answers(answers(1000, 0, 0));
        one.failed_us = vec![300_000];
        assert!(
            slo.violation(&one.step())
                .unwrap()
                .starts_with("max unknown")
        );
    }

    #[test]
    fn a_percentile_counts_requests_without_an_answer_as_never_answered() {
        // 98 answers at 1 ms, one at 60 ms, one time-out recorded early at 20 ms (it was
        // sent late). As recorded p99 is 20 ms; with the time-out never answered it is the
        // 60 ms answer.
        let slo = Slo::parse("p99<50ms").unwrap();
        let mut step = Made::answers(answers(99, 1, 60_000));
        step.failed_us = vec![20_000];
        assert_eq!(
            slo.violation(&step.step()).as_deref(),
            Some("p99 60.03ms >= 50ms at 4000 rps")
        );
        // Under the percentile's share, a time-out does not break it.
        let mut fine = Made::answers(answers(999, 0, 0));
        fine.failed_us = vec![300_000];
        assert_eq!(slo.violation(&fine.step()), None);
    }

    #[test]
    fn a_latency_clause_needs_every_due_request_sent() {
        let slo = Slo::parse("p99<50ms").unwrap();
        let mut refused = Made::answers(answers(1000, 0, 0));
        refused.connect_failures = 3;
        assert_eq!(
            slo.violation(&refused.step()).as_deref(),
            Some("p99 unknown: 3 of 1003 requests were never sent at 4000 rps")
        );
        let mut unsent = Made::answers(answers(1000, 0, 0));
        unsent.not_sent = 2;
        assert!(
            slo.violation(&unsent.step())
                .unwrap()
                .starts_with("p99 unknown")
        );
    }

    #[test]
    fn a_rate_not_delivered_is_not_held() {
        let slo = Slo::parse("errors<50%").unwrap();
        let mut late = Made::answers(answers(1000, 0, 0));
        late.late = 20;
        assert_eq!(
            slo.violation(&late.step()).as_deref(),
            Some("late or not sent 2% > 1% (20 of 1000: the rate was not delivered) at 4000 rps")
        );
        let mut within = Made::answers(answers(1000, 0, 0));
        within.late = 10;
        assert_eq!(slo.violation(&within.step()), None);
    }

    #[test]
    fn the_generators_own_failures_are_not_the_targets_errors() {
        let slo = Slo::parse("errors<1%").unwrap();
        let mut made = Made::answers(answers(1000, 0, 0));
        made.not_sent = 5;
        let mut step = made.step();
        step.error_kinds.insert("local:EMFILE".into(), 5);
        assert_eq!(slo.violation(&step), None);
        // Beyond the delivery tolerance it breaks, and says whose fault.
        made.not_sent = 50;
        let mut step = made.step();
        step.error_kinds.insert("local:EMFILE".into(), 50);
        let why = slo.violation(&step).unwrap();
        assert!(
            why.contains("50 were the load generator's own errors"),
            "{why}"
        );
        assert!(!why.contains("errors "), "{why}");
    }

    #[test]
    fn partial_and_empty_steps_never_hold() {
        let slo = Slo::parse("errors<100%").unwrap();
        let mut partial = Made::answers(answers(10, 0, 0)).step();
        partial.partial = true;
        assert!(slo.violation(&partial).is_some());
        let empty = Made::answers(Vec::new()).step();
        assert_eq!(
            slo.violation(&empty).as_deref(),
            Some("no request completed at 4000 rps")
        );
    }

    #[test]
    fn a_clause_may_name_an_endpoint() {
        let slo = Slo::parse("stats:p99<50ms, errors<1%, balance-v2.x:errors<=2%").unwrap();
        assert_eq!(slo.endpoints(), ["stats", "balance-v2.x"]);
        assert_eq!(slo.clauses[0].endpoint.as_deref(), Some("stats"));
        assert_eq!(slo.clauses[1].endpoint, None, "no name: the whole step");
        // A chart line is drawn for the whole step's limits only.
        assert_eq!(slo.latency_bound_ms("p99"), None);
        for bad in [
            ":p99<5ms",
            "a b:p99<5ms",
            "st/ats:p99<5ms",
            "stats:p98<5ms",
            "stats:",
        ] {
            assert!(Slo::parse(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn an_endpoint_clause_judges_that_endpoint_alone() {
        let slo = Slo::parse("stats:p99<50ms,errors<1%").unwrap();
        let fast = Made::answers(answers(1000, 0, 0));
        let slow = Made::answers(answers(1000, 20, 71_300));
        // The slow endpoint is named: it breaks, and the reason says which.
        let step = mixed(&[("balance", &fast), ("stats", &slow)]);
        assert_eq!(
            slo.violation(&step).as_deref(),
            Some("stats: p99 71.36ms >= 50ms at 4000 rps")
        );
        // The slow one is the other endpoint: the named one holds, and so does the step's
        // error rate.
        let step = mixed(&[("balance", &slow), ("stats", &fast)]);
        assert_eq!(slo.violation(&step), None);
    }

    #[test]
    fn an_endpoint_clause_fails_closed() {
        let slo = Slo::parse("stats:p99<50ms").unwrap();
        let fast = Made::answers(answers(1000, 0, 0));
        // No such endpoint in the step: no evidence.
        let step = mixed(&[("balance", &fast)]);
        assert_eq!(
            slo.violation(&step).as_deref(),
            Some("stats: no such endpoint in this step at 4000 rps")
        );
        // The endpoint got no request.
        let none = Made::answers(Vec::new());
        let step = mixed(&[("balance", &fast), ("stats", &none)]);
        assert_eq!(
            slo.violation(&step).as_deref(),
            Some("stats: no request completed at 4000 rps")
        );
        // Its requests timed out: fast as recorded, never answered.
        let mut timed_out = Made::answers(vec![2000; 3]);
        timed_out.failed_us = vec![30_000; 97];
        let step = mixed(&[("balance", &fast), ("stats", &timed_out)]);
        assert_eq!(
            slo.violation(&step).as_deref(),
            Some("stats: p99 unknown: 97 of 100 sent requests got no answer at 4000 rps")
        );
        // Its share of the rate was not delivered, though the whole step's was.
        let mut short = Made::answers(answers(100, 0, 0));
        short.not_sent = 5;
        let step = mixed(&[
            ("balance", &Made::answers(answers(10_000, 0, 0))),
            ("stats", &short),
        ]);
        let why = slo.violation(&step).unwrap();
        assert!(
            why.starts_with("stats: late or not sent 4.76% > 1%"),
            "{why}"
        );
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
            "p99<99999999999999999999999s",
            "errors<abc%",
            ",",
        ] {
            assert!(Slo::parse(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    mod prop {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            /// Any text: an SLO or an error, never a panic.
            #[test]
            fn any_text_parses_or_errs(text in ".{0,64}") {
                let _ = Slo::parse(&text);
            }

            /// Text made of the grammar's own pieces reaches the deeper branches.
            #[test]
            fn near_miss_slos_parse_or_err(
                parts in proptest::collection::vec(
                    "([a-z.]{1,4}:)?(p50|p90|p99|p999|p99\\.9|max|mean|errors|rps|x)?[<>]?=?[0-9.eE+-]{0,12}(us|ms|s|m|h|%|µs)?",
                    0..5,
                )
            ) {
                let text = parts.join(",");
                if let Ok(slo) = Slo::parse(&text) {
                    // A parsed SLO judges any step without panicking.
                    let _ = slo.violation(&Made::answers(vec![1, 2, 3]).step());
                    let _ = slo.latency_bound_ms("p99");
                }
            }
        }
    }
}
