//! Exact merge of runs made at the same time on several machines.
//!
//! The rules (also in docs/report.md):
//! - targets are matched by name, steps by index; the model, SLO, request template and
//!   step duration must be equal, or the merge is refused;
//! - the load engine stops a target at the first step that breaks the SLO, so machines can
//!   have run a different number of steps: a target keeps the steps every run has (the
//!   same leading steps, at the same offered rates, or the merge is refused); a step that
//!   only some machines ran does not carry the whole load and is left out;
//! - latency histograms are added exactly and every percentile is recomputed from the sum,
//!   never averaged;
//! - counts (requests, errors and their kinds, late, not sent) and rates (offered and
//!   achieved, since the machines loaded the target concurrently) are summed; connections,
//!   the in-flight limit and a per-step request count are summed too; a step lasts as long
//!   as its longest part;
//! - CPU and memory describe the target, not the load machine: when one run watched the
//!   target its figures are kept as they are; when several did (each watched the same
//!   process over the same time) the means are averaged weighted by step duration and the
//!   peaks are the highest peak;
//! - SLO verdicts and breaking points are recomputed from the merged figures.

use std::collections::BTreeMap;

use scalpel_load::result::{
    BreakingPoint, LatencySummary, RunResult, StepResult, TargetResult, decode_histogram,
    encode_histogram, new_histogram,
};

use scalpel_load::Slo;

use crate::ReportError;

/// Merges runs made at the same time on several machines against the same targets.
///
/// See the module rules: histograms are added and percentiles recomputed; runs whose
/// targets, steps or load models do not line up are refused with [`ReportError::Mismatch`].
pub fn merge(runs: &[RunResult]) -> Result<RunResult, ReportError> {
    let (first, rest) = runs
        .split_first()
        .ok_or_else(|| mismatch("no runs given".to_owned()))?;
    for (i, run) in rest.iter().enumerate() {
        check_compatible(first, run, i + 1)?;
    }
    let slo = match &first.config.slo {
        Some(text) => Some(
            Slo::parse(text).map_err(|e| mismatch(format!("the runs' SLO does not parse: {e}")))?,
        ),
        None => None,
    };

    let mut merged = first.clone();
    merged.started_at = runs
        .iter()
        .map(|r| r.started_at.as_str())
        .min()
        .unwrap_or_default()
        .to_owned();
    merged.machine.hosts = runs
        .iter()
        .flat_map(|r| r.machine.hosts.iter().cloned())
        .collect();
    merged.config.connections = runs.iter().map(|r| r.config.connections).sum();
    merged.config.max_in_flight = sum_options(runs.iter().map(|r| r.config.max_in_flight));
    merged.config.requests_per_step = sum_options(runs.iter().map(|r| r.config.requests_per_step));

    for target in &mut merged.targets {
        let parts: Vec<&TargetResult> = runs
            .iter()
            .map(|run| find_target(run, &target.name))
            .collect();
        let common = parts.iter().map(|t| t.steps.len()).min().unwrap_or(0);
        target.steps.truncate(common);
        target.breaking_point = None;
        for step in &mut target.steps {
            let pieces: Vec<&StepResult> = parts
                .iter()
                .map(|t| {
                    t.steps
                        .iter()
                        .find(|s| s.index == step.index)
                        .expect("checked by check_compatible")
                })
                .collect();
            *step = merge_step(&target.name, &pieces)?;
        }
        if let Some(slo) = &slo {
            target.breaking_point = judge(slo, &mut target.steps);
        }
    }
    Ok(merged)
}

fn mismatch(message: String) -> ReportError {
    ReportError::Mismatch(message)
}

fn sum_options<T: std::iter::Sum<T>>(values: impl Iterator<Item = Option<T>>) -> Option<T> {
    values
        .collect::<Option<Vec<T>>>()
        .map(|v| v.into_iter().sum())
}

fn find_target<'a>(run: &'a RunResult, name: &str) -> &'a TargetResult {
    run.targets
        .iter()
        .find(|t| t.name == name)
        .expect("checked by check_compatible")
}

/// Refuses runs that do not describe the same schedule against the same targets.
fn check_compatible(first: &RunResult, other: &RunResult, n: usize) -> Result<(), ReportError> {
    let (a, b) = (&first.config, &other.config);
    let same = |what: &str, x: String, y: String| {
        if x == y {
            Ok(())
        } else {
            Err(mismatch(format!(
                "run 1 and run {} differ in {what}: {x} vs {y}",
                n + 1
            )))
        }
    };
    same(
        "format version",
        first.format_version.to_string(),
        other.format_version.to_string(),
    )?;
    same("load model", a.model.clone(), b.model.clone())?;
    same("SLO", format!("{:?}", a.slo), format!("{:?}", b.slo))?;
    same("request", a.request.clone(), b.request.clone())?;
    same(
        "step duration",
        format!("{:?}", a.step_duration_s),
        format!("{:?}", b.step_duration_s),
    )?;
    let names = |run: &RunResult| {
        let mut names: Vec<String> = run.targets.iter().map(|t| t.name.clone()).collect();
        names.sort();
        names
    };
    same("targets", names(first).join(", "), names(other).join(", "))?;
    if first.targets.len()
        != names(first)
            .iter()
            .collect::<std::collections::BTreeSet<_>>()
            .len()
    {
        return Err(mismatch("run 1 names a target twice".to_owned()));
    }
    for target in &first.targets {
        let theirs = find_target(other, &target.name);
        let steps = |t: &TargetResult| {
            t.steps
                .iter()
                .map(|s| format!("{}@{}", s.index, fmt_rate(s.offered_rps)))
                .collect::<Vec<_>>()
        };
        let (ours, their) = (steps(target), steps(theirs));
        let common = ours.len().min(their.len());
        let numbered = |t: &TargetResult| {
            t.steps
                .iter()
                .enumerate()
                .all(|(i, s)| s.index as usize == i)
        };
        if ours[..common] != their[..common] || !numbered(target) || !numbered(theirs) {
            return Err(mismatch(format!(
                "target {:?}: run 1 and run {} ran different steps (index@offered rps): [{}] vs [{}]",
                target.name,
                n + 1,
                ours.join(" "),
                their.join(" ")
            )));
        }
    }
    Ok(())
}

fn fmt_rate(rate: Option<f64>) -> String {
    rate.map_or_else(|| "closed".to_owned(), |r| format!("{r}"))
}

fn merge_step(target: &str, pieces: &[&StepResult]) -> Result<StepResult, ReportError> {
    let first = pieces[0];
    let mut histogram = new_histogram();
    histogram.auto(true);
    for piece in pieces {
        let h = decode_histogram(&piece.histogram).map_err(|error| ReportError::Histogram {
            target: target.to_owned(),
            step: piece.index,
            error,
        })?;
        histogram
            .add(&h)
            .map_err(|e| mismatch(format!("target {target:?} step {}: {e:?}", piece.index)))?;
    }
    let mut error_kinds = BTreeMap::new();
    for piece in pieces {
        for (kind, count) in &piece.error_kinds {
            *error_kinds.entry(kind.clone()).or_insert(0) += count;
        }
    }
    let duration_s = pieces.iter().map(|p| p.duration_s).fold(0.0, f64::max);
    let (cpu_percent, cpu_percent_peak) = resource(pieces, |p| (p.cpu_percent, p.cpu_percent_peak));
    let (rss_mb, rss_mb_peak) = resource(pieces, |p| (p.rss_mb, p.rss_mb_peak));
    let (pss_mb, pss_mb_peak) = resource(pieces, |p| (p.pss_mb, p.pss_mb_peak));
    Ok(StepResult {
        index: first.index,
        offered_rps: first
            .offered_rps
            .map(|_| pieces.iter().filter_map(|p| p.offered_rps).sum()),
        achieved_rps: pieces.iter().map(|p| p.achieved_rps).sum(),
        duration_s,
        requests: pieces.iter().map(|p| p.requests).sum(),
        errors: pieces.iter().map(|p| p.errors).sum(),
        error_kinds,
        late: pieces.iter().map(|p| p.late).sum(),
        not_sent: pieces.iter().map(|p| p.not_sent).sum(),
        latency_ms: LatencySummary::from_histogram(&histogram),
        histogram: encode_histogram(&histogram),
        cpu_percent,
        cpu_percent_peak,
        rss_mb,
        rss_mb_peak,
        pss_mb,
        pss_mb_peak,
        slo_held: first.slo_held,
    })
}

/// Mean and peak of a resource figure over the runs that watched the target: the single
/// watcher's figures as they are, or the duration-weighted mean of means and the highest peak.
fn resource(
    pieces: &[&StepResult],
    get: impl Fn(&StepResult) -> (Option<f64>, Option<f64>),
) -> (Option<f64>, Option<f64>) {
    let watched: Vec<(f64, Option<f64>, f64)> = pieces
        .iter()
        .filter_map(|p| {
            let (mean, peak) = get(p);
            mean.map(|m| (m, peak, p.duration_s))
        })
        .collect();
    match watched.as_slice() {
        [] => (None, None),
        [(mean, peak, _)] => (Some(*mean), *peak),
        many => {
            let weight: f64 = many.iter().map(|w| w.2).sum();
            let mean = if weight > 0.0 {
                many.iter().map(|(m, _, d)| m * d).sum::<f64>() / weight
            } else {
                many.iter().map(|w| w.0).sum::<f64>() / many.len() as f64
            };
            let peak = many.iter().filter_map(|w| w.1).reduce(f64::max);
            (Some(mean), peak)
        }
    }
}

/// Sets each step's verdict with the load engine's own rules and returns the breaking
/// point as the engine does: the offered rate of the last step before the first one that
/// broke the SLO (0 when the first broke it), or `None` when every step held.
pub(crate) fn judge(slo: &Slo, steps: &mut [StepResult]) -> Option<BreakingPoint> {
    let mut breaking_point = None;
    let mut last_held_rps = 0.0;
    for step in steps.iter_mut() {
        let violation = slo.violation(step);
        step.slo_held = Some(violation.is_none());
        match violation {
            None if breaking_point.is_none() => {
                last_held_rps = step.offered_rps.unwrap_or(step.achieved_rps);
            }
            None => {}
            Some(reason) if breaking_point.is_none() => {
                breaking_point = Some(BreakingPoint {
                    rps: last_held_rps,
                    reason,
                });
            }
            Some(_) => {}
        }
    }
    breaking_point
}
