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
//! - a mix's endpoints are merged the same way, by name: histograms added, counts and
//!   rates summed; runs whose steps do not have the same endpoints are refused;
//! - SLO verdicts and breaking points are recomputed from the merged figures;
//! - a step cut short by an interrupt (`partial`) did not carry its whole load: like a step
//!   only some machines ran, it is left out;
//! - a run is never merged with itself: every part has an id (`part_ids`), and a merge
//!   that would hold one twice is refused, as is a file given twice;
//! - a target name at two different URLs, and runs of different scalpel versions (whose
//!   figures may be computed differently), are refused unless the caller allows them.

use std::collections::BTreeMap;

use scalpel_load::result::{
    EndpointResult, LatencySummary, RunResult, StepResult, TargetResult, decode_histogram,
    encode_histogram, new_histogram,
};

use scalpel_load::Slo;

use crate::ReportError;

/// What a merge may accept that it refuses by default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MergeOptions {
    /// Merge a target whose URL differs between runs (each machine may reach the same
    /// service by another address). The merged file keeps the first run's URL.
    pub allow_different_urls: bool,
    /// Merge runs written by different scalpel versions.
    pub allow_different_versions: bool,
}

/// Merges runs made at the same time on several machines against the same targets, with
/// the default (strict) [`MergeOptions`].
///
/// See the module rules: histograms are added and percentiles recomputed; runs whose
/// targets, steps or load models do not line up, or a run given twice, are refused with
/// [`ReportError::Mismatch`].
pub fn merge(runs: &[RunResult]) -> Result<RunResult, ReportError> {
    merge_with(runs, MergeOptions::default())
}

/// [`merge`] with options.
pub fn merge_with(runs: &[RunResult], options: MergeOptions) -> Result<RunResult, ReportError> {
    let (first, rest) = runs
        .split_first()
        .ok_or_else(|| mismatch("no runs given".to_owned()))?;
    // The shards of one run: all there, once each, same settings (names what is wrong).
    let shard_set = crate::shards::check_set(runs)?;
    check_distinct(runs)?;
    for (i, run) in rest.iter().enumerate() {
        check_compatible(first, run, i + 2, options)?;
    }
    let slo = match &first.config.slo {
        Some(text) => Some(
            Slo::parse(text).map_err(|e| mismatch(format!("the runs' SLO does not parse: {e}")))?,
        ),
        None => None,
    };

    let mut merged = first.clone();
    merged.tool = distinct(runs.iter().map(|r| r.tool.as_str())).join(", ");
    merged.part_ids = runs.iter().flat_map(part_ids).collect();
    merged.interrupted = runs.iter().any(|r| r.interrupted);
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
    if let Some(recorded) = &mut merged.config.recorded {
        // A pool any machine's run outlasted was looped.
        recorded.looped = runs
            .iter()
            .any(|r| r.config.recorded.as_ref().is_some_and(|x| x.looped));
    }

    for target in &mut merged.targets {
        let parts: Vec<&TargetResult> = runs
            .iter()
            .map(|run| find_target(run, &target.name))
            .collect();
        // The leading steps every run completed: a partial step did not carry its load.
        let common = parts
            .iter()
            .map(|t| t.steps.iter().take_while(|s| !s.partial).count())
            .min()
            .unwrap_or(0);
        target.steps.truncate(common);
        target.breaking_point = None;
        // A part measured without verifying the certificate makes the whole unverified.
        if let Some(c) = target.connection.as_mut() {
            c.insecure |= parts
                .iter()
                .any(|t| t.connection.as_ref().is_some_and(|c| c.insecure));
        }
        // Steps merge independently; decoding their histograms is most of a large merge's
        // work (100 files × 60 steps: 6,000 histograms), so it is shared among the cores.
        let name = target.name.as_str();
        let merged_steps = par_map(&target.steps, |step| {
            let pieces: Vec<&StepResult> = parts
                .iter()
                .map(|t| {
                    t.steps
                        .iter()
                        .find(|s| s.index == step.index)
                        .expect("checked by check_compatible")
                })
                .collect();
            merge_step(name, &pieces)
        });
        target.steps = merged_steps.into_iter().collect::<Result<_, _>>()?;
        check_left_out(&parts, common)?;
        if let Some(slo) = &slo {
            target.breaking_point = slo.judge(&mut target.steps);
        }
    }
    if let Some(basis) = shard_set {
        crate::shards::attach(&mut merged, runs, basis, slo.as_ref());
    }
    Ok(merged)
}

/// Decodes the histograms of the steps the merge leaves out (beyond `common`), only to
/// check them: the files are read without decoding ([`crate::read_json_for_merge`]), and a
/// file with a histogram that does not decode is refused wherever it is.
fn check_left_out(parts: &[&TargetResult], common: usize) -> Result<(), ReportError> {
    for (i, part) in parts.iter().enumerate() {
        for step in part.steps.iter().skip(common) {
            let texts = std::iter::once(&step.histogram)
                .chain(&step.handshake_histogram)
                .chain(step.endpoints.iter().map(|e| &e.histogram));
            for text in texts {
                decode(i + 1, &part.name, step.index, text)?;
            }
        }
    }
    Ok(())
}

/// `f` over `items` on up to as many threads as there are cores, results in order.
pub(crate) fn par_map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let threads = std::thread::available_parallelism()
        .map_or(1, std::num::NonZero::get)
        .min(items.len());
    if threads <= 1 {
        return items.iter().map(f).collect();
    }
    let chunk = items.len().div_ceil(threads);
    std::thread::scope(|scope| {
        let f = &f;
        let handles: Vec<_> = items
            .chunks(chunk)
            .map(|part| scope.spawn(move || part.iter().map(f).collect::<Vec<R>>()))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("a merge thread panicked"))
            .collect()
    })
}

fn mismatch(message: String) -> ReportError {
    ReportError::Mismatch(message)
}

fn sum_options<T: std::iter::Sum<T>>(values: impl Iterator<Item = Option<T>>) -> Option<T> {
    values
        .collect::<Option<Vec<T>>>()
        .map(|v| v.into_iter().sum())
}

/// The values in first-seen order, each once.
fn distinct<'a>(values: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut out: Vec<&str> = Vec::new();
    for v in values {
        if !out.contains(&v) {
            out.push(v);
        }
    }
    out
}

/// The ids of a run's parts; for a file from before ids were recorded, its hosts and start
/// time stand in (two runs on one host started in the same second look alike).
fn part_ids(run: &RunResult) -> Vec<String> {
    if run.part_ids.is_empty() {
        vec![format!(
            "{}@{}",
            run.machine.hosts.join("+"),
            run.started_at
        )]
    } else {
        run.part_ids.clone()
    }
}

fn find_target<'a>(run: &'a RunResult, name: &str) -> &'a TargetResult {
    run.targets
        .iter()
        .find(|t| t.name == name)
        .expect("checked by check_compatible")
}

/// Refuses a run given twice, or a merged file together with one of its parts: every
/// request would count twice and every rate would double.
fn check_distinct(runs: &[RunResult]) -> Result<(), ReportError> {
    let ids: Vec<Vec<String>> = runs.iter().map(part_ids).collect();
    for j in 1..runs.len() {
        for i in 0..j {
            let same = runs[i] == runs[j];
            let shared = ids[i].iter().find(|id| ids[j].contains(id));
            if same || shared.is_some() {
                let what = match shared {
                    Some(id) if !same => format!("both hold the measurements of run {id}"),
                    _ => "are the same run".to_owned(),
                };
                return Err(mismatch(format!(
                    "run {} and run {} {what}; a run merged with itself would count every \
                     request twice",
                    i + 1,
                    j + 1
                )));
            }
        }
    }
    Ok(())
}

/// Refuses runs that do not describe the same schedule against the same targets. `n` is
/// the other run's position, from 1.
fn check_compatible(
    first: &RunResult,
    other: &RunResult,
    n: usize,
    options: MergeOptions,
) -> Result<(), ReportError> {
    let (a, b) = (&first.config, &other.config);
    let same = |what: &str, x: &str, y: &str| {
        if x == y {
            Ok(())
        } else {
            Err(mismatch(format!(
                "run 1 and run {n} differ in {what}: {x} (run 1) vs {y} (run {n})"
            )))
        }
    };
    same(
        "format version",
        &first.format_version.to_string(),
        &other.format_version.to_string(),
    )?;
    if !options.allow_different_versions && first.tool != other.tool {
        return Err(mismatch(format!(
            "run 1 and run {n} were written by different versions: {} (run 1) vs {} (run {n}); \
             their figures may be computed differently (pass --allow-different-versions to \
             merge them anyway)",
            first.tool, other.tool
        )));
    }
    same("load model", &a.model, &b.model)?;
    let slo = |s: &Option<String>| s.clone().unwrap_or_else(|| "no SLO".to_owned());
    same("SLO", &slo(&a.slo), &slo(&b.slo))?;
    same("request", &a.request, &b.request)?;
    // Requests per step are summed (each machine's share): only a duration must match.
    let length = |c: &scalpel_load::result::RunConfig| match c.step_duration_s {
        Some(s) => format!("{s} s per step"),
        None => "a request count per step".to_owned(),
    };
    same("step length", &length(a), &length(b))?;
    let names = |run: &RunResult| {
        let mut names: Vec<String> = run.targets.iter().map(|t| t.name.clone()).collect();
        names.sort();
        names
    };
    same(
        "targets",
        &names(first).join(", "),
        &names(other).join(", "),
    )?;
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
        if !options.allow_different_urls && target.url != theirs.url {
            return Err(mismatch(format!(
                "target \"{}\" is {} in run 1 but {} in run {n}: are they the same service? \
                 (pass --allow-different-urls if they are)",
                target.name, target.url, theirs.url
            )));
        }
        let numbered = |t: &TargetResult| {
            t.steps
                .iter()
                .enumerate()
                .all(|(i, s)| s.index as usize == i)
        };
        for (run, t) in [(1, target), (n, theirs)] {
            if !numbered(t) {
                return Err(mismatch(format!(
                    "target \"{}\" in run {run}: its steps are not numbered 1, 2, 3, … (a \
                     step is missing or repeated)",
                    t.name
                )));
            }
        }
        let differs = target
            .steps
            .iter()
            .zip(&theirs.steps)
            .find(|(x, y)| x.offered_rps != y.offered_rps);
        if let Some((x, y)) = differs {
            return Err(mismatch(format!(
                "target \"{}\": run 1 and run {n} ran step {} at different rates: {} (run 1) \
                 vs {} (run {n})",
                target.name,
                x.index + 1,
                fmt_rate(x.offered_rps),
                fmt_rate(y.offered_rps)
            )));
        }
    }
    Ok(())
}

fn fmt_rate(rate: Option<f64>) -> String {
    rate.map_or_else(|| "closed".to_owned(), |r| format!("{r} rps"))
}

/// Decodes the histogram of run `run` (from 1): the one place a merge decodes, once per
/// histogram, naming the run of one that does not decode.
fn decode(
    run: usize,
    target: &str,
    step: u32,
    text: &str,
) -> Result<hdrhistogram::Histogram<u64>, ReportError> {
    decode_histogram(text).map_err(|error| ReportError::RunHistogram {
        run,
        target: target.to_owned(),
        step,
        error,
    })
}

/// The sum of the pieces' histograms, exactly. The pieces are in the order of the runs.
fn add_histograms<'a>(
    target: &str,
    step: u32,
    histograms: impl Iterator<Item = &'a str>,
) -> Result<hdrhistogram::Histogram<u64>, ReportError> {
    let mut histogram = new_histogram();
    histogram.auto(true);
    for (i, text) in histograms.enumerate() {
        let h = decode(i + 1, target, step, text)?;
        histogram.add(&h).map_err(|_| {
            mismatch(format!(
                "target \"{target}\" step {}: the histograms cannot be added (different \
                 ranges or precision)",
                step + 1
            ))
        })?;
    }
    Ok(histogram)
}

fn add_kinds<'a>(kinds: impl Iterator<Item = &'a BTreeMap<String, u64>>) -> BTreeMap<String, u64> {
    let mut sum = BTreeMap::new();
    for map in kinds {
        for (kind, count) in map {
            *sum.entry(kind.clone()).or_insert(0) += count;
        }
    }
    sum
}

/// Each endpoint of a mix merged across the pieces, by name, as steps are merged.
fn merge_endpoints(
    target: &str,
    pieces: &[&StepResult],
) -> Result<Vec<EndpointResult>, ReportError> {
    let first = pieces[0];
    let names = |s: &StepResult| {
        s.endpoints
            .iter()
            .map(|e| e.name.clone())
            .collect::<Vec<_>>()
    };
    for (n, piece) in pieces.iter().enumerate().skip(1) {
        if names(piece) != names(first) {
            return Err(mismatch(format!(
                "target \"{target}\" step {}: run 1 and run {} have different endpoints: [{}] \
                 (run 1) vs [{}] (run {})",
                first.index + 1,
                n + 1,
                names(first).join(", "),
                names(piece).join(", "),
                n + 1
            )));
        }
    }
    first
        .endpoints
        .iter()
        .enumerate()
        .map(|(k, e)| {
            let parts: Vec<&EndpointResult> = pieces.iter().map(|p| &p.endpoints[k]).collect();
            let sum = |get: fn(&EndpointResult) -> u64| parts.iter().map(|p| get(p)).sum::<u64>();
            let histogram = add_histograms(
                target,
                first.index,
                parts.iter().map(|p| p.histogram.as_str()),
            )?;
            Ok(EndpointResult {
                name: e.name.clone(),
                achieved_rps: parts.iter().map(|p| p.achieved_rps).sum(),
                requests: sum(|p| p.requests),
                sent: sum(|p| p.sent),
                answered: sum(|p| p.answered),
                failed: sum(|p| p.failed),
                errors: sum(|p| p.errors),
                error_kinds: add_kinds(parts.iter().map(|p| &p.error_kinds)),
                late: sum(|p| p.late),
                not_sent: sum(|p| p.not_sent),
                interrupted: sum(|p| p.interrupted),
                latency_ms: LatencySummary::from_histogram(&histogram),
                histogram: encode_histogram(&histogram),
            })
        })
        .collect()
}

fn merge_step(target: &str, pieces: &[&StepResult]) -> Result<StepResult, ReportError> {
    let first = pieces[0];
    let histogram = add_histograms(
        target,
        first.index,
        pieces.iter().map(|p| p.histogram.as_str()),
    )?;
    let error_kinds = add_kinds(pieces.iter().map(|p| &p.error_kinds));
    let sum = |get: fn(&StepResult) -> u64| pieces.iter().map(|p| get(p)).sum::<u64>();
    let duration_s = pieces.iter().map(|p| p.duration_s).fold(0.0, f64::max);
    let (cpu_percent, cpu_percent_peak) = resource(pieces, |p| (p.cpu_percent, p.cpu_percent_peak));
    let (rss_mb, rss_mb_peak) = resource(pieces, |p| (p.rss_mb, p.rss_mb_peak));
    let (pss_mb, pss_mb_peak) = resource(pieces, |p| (p.pss_mb, p.pss_mb_peak));
    let mut handshakes: Option<hdrhistogram::Histogram<u64>> = None;
    for (i, piece) in pieces.iter().enumerate() {
        let Some(text) = &piece.handshake_histogram else {
            continue;
        };
        let h = decode(i + 1, target, piece.index, text)?;
        match handshakes.as_mut() {
            None => handshakes = Some(h),
            Some(all) => all.add(&h).map_err(|_| {
                mismatch(format!(
                    "target \"{target}\" step {}: the handshake histograms cannot be added",
                    piece.index + 1
                ))
            })?,
        }
    }
    let h2 = pieces
        .iter()
        .filter_map(|p| p.h2.as_ref())
        .fold(None, |all, e| {
            let mut all: scalpel_load::result::H2Events = all.unwrap_or_default();
            all.add(e);
            Some(all)
        });
    Ok(StepResult {
        index: first.index,
        offered_rps: first
            .offered_rps
            .map(|_| pieces.iter().filter_map(|p| p.offered_rps).sum()),
        achieved_rps: pieces.iter().map(|p| p.achieved_rps).sum(),
        duration_s,
        requests: sum(|p| p.requests),
        sent: sum(|p| p.sent),
        answered: sum(|p| p.answered),
        failed: sum(|p| p.failed),
        errors: sum(|p| p.errors),
        error_kinds,
        late: sum(|p| p.late),
        not_sent: sum(|p| p.not_sent),
        interrupted: sum(|p| p.interrupted),
        partial: false,
        latency_ms: LatencySummary::from_histogram(&histogram),
        histogram: encode_histogram(&histogram),
        cpu_percent,
        cpu_percent_peak,
        rss_mb,
        rss_mb_peak,
        pss_mb,
        pss_mb_peak,
        slo_held: None,
        slo_reason: None,
        connections_opened: sum(|p| p.connections_opened),
        handshake_ms: handshakes.as_ref().and_then(LatencySummary::from_histogram),
        handshake_histogram: handshakes.as_ref().map(encode_histogram),
        h2,
        start_late_s: pieces
            .iter()
            .filter_map(|p| p.start_late_s)
            .reduce(f64::max),
        endpoints: merge_endpoints(target, pieces)?,
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
