//! Shard sets: the results of one `scalpel load --shard I/N` run, one file per shard.
//!
//! Before a merge, [`check_set`] makes sure the files are one whole run: all `N` shards of
//! one run id, none twice, every one with the same settings — else it refuses, naming what
//! is missing or mixed. After the merge, [`attach`] keeps each shard's own figures (so a slow
//! generator shows) and flags what does not refuse the set but weakens it:
//!
//! - a shard whose clock started a step more than a tenth of a step late: the target never
//!   got the whole rate at once, so that step cannot hold the SLO;
//! - steps only some shards ran (a shard stopped after its own part broke the SLO, or was
//!   interrupted): they are left out of the merge, and when every merged step held, the
//!   run breaks at the first step not run in full — a rate not offered is never held.

use std::collections::BTreeMap;

use scalpel_load::Slo;
use scalpel_load::result::{
    BreakingPoint, RunConfig, RunResult, ShardInfo, ShardPart, ShardSet, ShardStep, ShardTarget,
    StepResult, TargetResult,
};

use crate::ReportError;
use crate::figures::{fmt_count, fmt_ms, fmt_percent};

/// A step may start this share of its length late and still count as lined up.
const ALIGNMENT_TOLERANCE: f64 = 0.1;

/// What every file of a checked set agrees on.
#[derive(Debug)]
pub(crate) struct SetBasis {
    run_id: String,
    count: u32,
    start_at: Option<String>,
    settings: String,
}

fn mismatch(message: String) -> ReportError {
    ReportError::Mismatch(message)
}

fn name(info: &ShardInfo) -> String {
    format!("{}/{}", info.index + 1, info.count)
}

/// `file 2` or `files 1, 3 and 4` (positions from 1, as given).
fn files(positions: &[usize]) -> String {
    match positions {
        [one] => format!("file {}", one + 1),
        many => {
            let numbers: Vec<String> = many.iter().map(|p| (p + 1).to_string()).collect();
            let (last, rest) = numbers.split_last().expect("two or more");
            format!("files {} and {last}", rest.join(", "))
        }
    }
}

/// Checks that `runs` are the shards of one run, all of them, once each, with the same
/// settings. `None` when no file is a shard (a plain merge of runs).
pub(crate) fn check_set(runs: &[RunResult]) -> Result<Option<SetBasis>, ReportError> {
    let Some(first) = runs.iter().position(|r| r.shard.is_some()) else {
        return Ok(None);
    };
    let info0 = runs[first].shard.as_ref().expect("found above");
    if let Some(plain) = runs.iter().position(|r| r.shard.is_none()) {
        return Err(mismatch(format!(
            "file {} is not a shard of a sharded run, while file {} is shard {} of run {}: \
             merge the shards of one run on their own",
            plain + 1,
            first + 1,
            name(info0),
            info0.run_id
        )));
    }
    let infos: Vec<&ShardInfo> = runs
        .iter()
        .map(|r| r.shard.as_ref().expect("all are shards"))
        .collect();
    one_run(&infos)?;
    one_split(&infos)?;
    let by_index = none_twice(&infos)?;
    same_settings(runs, &infos)?;
    let base = infos[0];
    all_present(&infos, &by_index)?;
    Ok(Some(SetBasis {
        run_id: base.run_id.clone(),
        count: base.count,
        start_at: base.start_at.clone(),
        settings: base.settings.clone(),
    }))
}

/// Every file is a shard of the same run id.
fn one_run(infos: &[&ShardInfo]) -> Result<(), ReportError> {
    let mut by_run: Vec<(&str, Vec<usize>)> = Vec::new();
    for (i, info) in infos.iter().enumerate() {
        match by_run.iter_mut().find(|(id, _)| *id == info.run_id) {
            Some((_, positions)) => positions.push(i),
            None => by_run.push((&info.run_id, vec![i])),
        }
    }
    if by_run.len() > 1 {
        let listed: Vec<String> = by_run
            .iter()
            .map(|(id, positions)| format!("{id} ({})", files(positions)))
            .collect();
        return Err(mismatch(format!(
            "the files hold shards of {} runs: {}; merge the shards of one run",
            by_run.len(),
            listed.join(", ")
        )));
    }
    Ok(())
}

/// Every file says the run was split into the same number of shards.
fn one_split(infos: &[&ShardInfo]) -> Result<(), ReportError> {
    let info0 = infos[0];
    match infos.iter().position(|i| i.count != info0.count) {
        Some(other) => Err(mismatch(format!(
            "run {} was split in different ways: file 1 is shard {}, file {} is shard {}",
            info0.run_id,
            name(info0),
            other + 1,
            name(infos[other])
        ))),
        None => Ok(()),
    }
}

/// No shard is given twice; the files of each shard index.
fn none_twice(infos: &[&ShardInfo]) -> Result<BTreeMap<u32, Vec<usize>>, ReportError> {
    let mut by_index: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for (i, info) in infos.iter().enumerate() {
        by_index.entry(info.index).or_default().push(i);
    }
    if let Some((index, positions)) = by_index.iter().find(|(_, p)| p.len() > 1) {
        return Err(mismatch(format!(
            "shard {}/{} is given twice ({}): its requests would count twice",
            index + 1,
            infos[0].count,
            files(positions)
        )));
    }
    Ok(by_index)
}

/// Every shard ran with the first one's settings and common start.
fn same_settings(runs: &[RunResult], infos: &[&ShardInfo]) -> Result<(), ReportError> {
    let base = infos[0];
    for (i, info) in infos.iter().enumerate().skip(1) {
        if info.settings != base.settings || info.start_at != base.start_at {
            let what = difference(&runs[0].config, &runs[i].config, base, info);
            return Err(mismatch(format!(
                "shard {} ({}) ran with other settings than shard {} (file 1): {what}; every \
                 shard must run the same command line",
                name(info),
                files(&[i]),
                name(base)
            )));
        }
    }
    Ok(())
}

/// `shard 2`, `shards 2 and 4` or `shards 1, 2 and 4` (indexes from 0, shown from 1).
fn numbered(noun: &str, indexes: &[u32]) -> String {
    let numbers: Vec<String> = indexes.iter().map(|i| (i + 1).to_string()).collect();
    match numbers.split_last() {
        Some((last, [])) => format!("{noun} {last}"),
        Some((last, rest)) => format!("{noun}s {} and {last}", rest.join(", ")),
        None => format!("no {noun}"),
    }
}

/// Every shard of the split is there.
fn all_present(
    infos: &[&ShardInfo],
    by_index: &BTreeMap<u32, Vec<usize>>,
) -> Result<(), ReportError> {
    let base = infos[0];
    let count = base.count;
    // All of them: one file of a 2-shard run is as incomplete as three of four.
    let missing: Vec<u32> = (0..count).filter(|i| !by_index.contains_key(i)).collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(mismatch(format!(
        "{} of {count} missing (run id {}): give the result files of all {count} \
         shards ({} given)",
        numbered("shard", &missing),
        base.run_id,
        infos.len()
    )))
}

/// What differs between two shards' settings, as far as the result files show it.
fn difference(a: &RunConfig, b: &RunConfig, ia: &ShardInfo, ib: &ShardInfo) -> String {
    let opt = |s: &Option<String>| s.clone().unwrap_or_else(|| "none".to_owned());
    let mut parts = Vec::new();
    if ia.start_at != ib.start_at {
        parts.push(format!(
            "--start-at {} vs {}",
            opt(&ia.start_at),
            opt(&ib.start_at)
        ));
    }
    if a.model != b.model {
        parts.push(format!("model {} vs {}", a.model, b.model));
    }
    if a.slo != b.slo {
        parts.push(format!("SLO {} vs {}", opt(&a.slo), opt(&b.slo)));
    }
    if a.request != b.request {
        parts.push(format!("request {} vs {}", a.request, b.request));
    }
    if a.step_duration_s != b.step_duration_s {
        parts.push(format!(
            "step length {:?} vs {:?} s",
            a.step_duration_s, b.step_duration_s
        ));
    }
    if parts.is_empty() {
        format!(
            "settings fingerprint {} vs {} (rates, counts, data, headers or time-outs differ)",
            ia.settings, ib.settings
        )
    } else {
        format!("settings differ: {}", parts.join(", "))
    }
}

/// Adds the shard set to a merged result: each shard's figures, the flags, and the
/// verdicts a flag takes away (see the module doc). `runs` are the checked shards.
pub(crate) fn attach(
    merged: &mut RunResult,
    runs: &[RunResult],
    basis: SetBasis,
    slo: Option<&Slo>,
) {
    let mut shards: Vec<(&ShardInfo, &RunResult)> = runs
        .iter()
        .map(|r| (r.shard.as_ref().expect("checked"), r))
        .collect();
    shards.sort_by_key(|(info, _)| info.index);
    let mut flags = Vec::new();
    for target in &mut merged.targets {
        let misaligned = late_starts(&target.name, &shards, &mut flags);
        let not_in_full = run_by_some(target, &shards, &mut flags);
        for step in &mut target.steps {
            step.start_late_s = latest_start(&target.name, step.index, &shards);
        }
        if slo.is_some() {
            rejudge(target, &misaligned, not_in_full);
        }
    }
    merged.shard = None;
    merged.shards = Some(ShardSet {
        run_id: basis.run_id,
        count: basis.count,
        start_at: basis.start_at,
        settings: basis.settings,
        parts: parts(&shards),
        flags,
    });
}

/// Each shard's own figures, in shard order.
fn parts(shards: &[(&ShardInfo, &RunResult)]) -> Vec<ShardPart> {
    shards
        .iter()
        .map(|(info, run)| ShardPart {
            index: info.index,
            host: run.machine.hosts.join(", "),
            start_late_s: info.start_late_s,
            targets: run
                .targets
                .iter()
                .map(|t| ShardTarget {
                    name: t.name.clone(),
                    steps: t.steps.iter().map(ShardStep::of).collect(),
                })
                .collect(),
        })
        .collect()
}

/// The steps of `target` some shard started more than a tenth of a step late, each with
/// why it cannot hold the SLO; a flag per shard that did.
fn late_starts(
    target: &str,
    shards: &[(&ShardInfo, &RunResult)],
    flags: &mut Vec<String>,
) -> BTreeMap<u32, String> {
    let mut misaligned: BTreeMap<u32, String> = BTreeMap::new();
    for (info, run) in shards {
        let Some(theirs) = run.targets.iter().find(|t| t.name == target) else {
            continue;
        };
        let late: Vec<(&StepResult, f64, f64)> = theirs
            .steps
            .iter()
            .filter_map(|s| {
                let length = run.config.step_duration_s.unwrap_or(s.duration_s);
                let late = s.start_late_s?;
                (late > length * ALIGNMENT_TOLERANCE).then_some((s, late, length))
            })
            .collect();
        if late.is_empty() {
            continue;
        }
        let worst = late.iter().map(|l| l.1).fold(0.0, f64::max);
        let length = late[0].2;
        let steps: Vec<u32> = late.iter().map(|l| l.0.index).collect();
        flags.push(format!(
            "shard {} started {} of target \"{target}\" late, up to {} s (more than a tenth of a \
             {} s step): the target never got the whole rate at once there",
            name(info),
            step_list(&steps),
            round2(worst),
            round2(length)
        ));
        for l in late {
            misaligned.entry(l.0.index).or_insert_with(|| {
                format!(
                    "shard {} started this step {} s late (more than a tenth of it): the \
                     whole rate was not offered at once",
                    name(info),
                    round2(l.1)
                )
            });
        }
    }
    misaligned
}

/// When some shards ran more steps of `target` in full than the merge holds (others
/// stopped): a flag, and the first step not run by all with why.
fn run_by_some(
    target: &TargetResult,
    shards: &[(&ShardInfo, &RunResult)],
    flags: &mut Vec<String>,
) -> Option<(usize, String)> {
    let full = |run: &RunResult| {
        run.targets
            .iter()
            .find(|t| t.name == target.name)
            .map_or(0, |t| t.steps.iter().take_while(|s| !s.partial).count())
    };
    let most = shards.iter().map(|(_, r)| full(r)).max().unwrap_or(0);
    let common = target.steps.len();
    if most <= common {
        return None;
    }
    let short: Vec<String> = shards
        .iter()
        .filter(|(_, r)| full(r) == common)
        .map(|(info, _)| name(info))
        .collect();
    let steps: Vec<u32> = (common as u32..most as u32).collect();
    let why = format!(
        "shard{} {} stopped after step {common} (its own part broke the SLO, or it was \
         interrupted)",
        if short.len() > 1 { "s" } else { "" },
        short.join(", ")
    );
    flags.push(format!(
        "{} of target \"{}\" were run by only some shards ({why}): left out of the merge",
        step_list(&steps),
        target.name
    ));
    Some((common, why))
}

/// The latest any shard started step `index` of `target` after the common clock.
fn latest_start(target: &str, index: u32, shards: &[(&ShardInfo, &RunResult)]) -> Option<f64> {
    shards
        .iter()
        .filter_map(|(_, r)| {
            r.targets
                .iter()
                .find(|t| t.name == target)
                .and_then(|t| t.steps.iter().find(|s| s.index == index))
                .and_then(|s| s.start_late_s)
        })
        .reduce(f64::max)
}

/// The verdicts a flag takes away: a misaligned step does not hold, and a run whose every
/// merged step held breaks at the first step not run in full.
fn rejudge(
    target: &mut TargetResult,
    misaligned: &BTreeMap<u32, String>,
    not_in_full: Option<(usize, String)>,
) {
    for step in &mut target.steps {
        if let Some(why) = misaligned.get(&step.index)
            && step.slo_held == Some(true)
        {
            step.slo_held = Some(false);
            step.slo_reason = Some(why.clone());
        }
    }
    target.breaking_point = breaking_point(&target.steps);
    if target.breaking_point.is_none()
        && let Some((next, why)) = not_in_full
    {
        target.breaking_point = Some(BreakingPoint {
            rps: target.steps.last().and_then(|s| s.offered_rps),
            reason: format!(
                "step {} was not run by every shard ({why}): its whole rate was never offered",
                next + 1
            ),
        });
    }
}

/// The breaking point from the steps' verdicts, as [`Slo::judge`] gives it.
fn breaking_point(steps: &[StepResult]) -> Option<BreakingPoint> {
    let mut last_held = None;
    for s in steps {
        match s.slo_held {
            Some(true) => last_held = s.offered_rps,
            Some(false) => {
                return Some(BreakingPoint {
                    rps: s.offered_rps.map(|_| last_held.unwrap_or(0.0)),
                    reason: s.slo_reason.clone().unwrap_or_default(),
                });
            }
            None => {}
        }
    }
    None
}

/// `step 2`, `steps 2–4`, `steps 1, 3 and 5–6` (numbers from 1).
fn step_list(indices: &[u32]) -> String {
    let mut ranges: Vec<(u32, u32)> = Vec::new();
    for &i in indices {
        match ranges.last_mut() {
            Some((_, end)) if *end + 1 == i => *end = i,
            _ => ranges.push((i, i)),
        }
    }
    let text: Vec<String> = ranges
        .iter()
        .map(|&(a, b)| {
            if a == b {
                (a + 1).to_string()
            } else {
                format!("{}–{}", a + 1, b + 1)
            }
        })
        .collect();
    match text.as_slice() {
        [one] if !one.contains('–') => format!("step {one}"),
        [one] => format!("steps {one}"),
        many => {
            let (last, rest) = many.split_last().expect("two or more");
            format!("steps {} and {last}", rest.join(", "))
        }
    }
}

fn round2(x: f64) -> String {
    let s = format!("{x:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// The per-shard table of a merged set, for the terminal and the page alike: a row per
/// shard (and target, when there are several) with its totals over its steps.
#[derive(Debug)]
pub(crate) struct ShardTable {
    pub(crate) title: String,
    pub(crate) head: Vec<&'static str>,
    pub(crate) rows: Vec<Vec<String>>,
    /// Rows whose shard fell behind: achieved under 99% of offered, late or unsent
    /// requests, or a late start.
    pub(crate) behind: Vec<bool>,
    pub(crate) flags: Vec<String>,
}

/// The per-shard table, or `None` for a run that is not a merged shard set.
pub(crate) fn table(result: &RunResult) -> Option<ShardTable> {
    let set = result.shards.as_ref()?;
    let several = result.targets.len() > 1;
    let mut head = vec!["shard", "host"];
    if several {
        head.push("target");
    }
    head.extend([
        "steps",
        "requests",
        "achieved/offered",
        "late",
        "not sent",
        "errors",
        "worst p99 ms",
        "start late s",
    ]);
    let mut rows = Vec::new();
    let mut behind = Vec::new();
    for part in &set.parts {
        for target in &part.targets {
            let steps = &target.steps;
            let sum = |f: fn(&ShardStep) -> u64| steps.iter().map(f).sum::<u64>();
            let offered: f64 = steps.iter().filter_map(|s| s.offered_rps).sum();
            let achieved: f64 = steps
                .iter()
                .filter(|s| s.offered_rps.is_some())
                .map(|s| s.achieved_rps)
                .sum();
            let delivered = (offered > 0.0).then(|| achieved * 100.0 / offered);
            let (requests, errors) = (sum(|s| s.requests), sum(|s| s.errors));
            let (late, not_sent) = (sum(|s| s.late), sum(|s| s.not_sent));
            let p99 = steps
                .iter()
                .filter_map(|s| s.latency_ms.map(|l| l.p99))
                .reduce(f64::max);
            let start_late = steps.iter().filter_map(|s| s.start_late_s).reduce(f64::max);
            let tolerance = result
                .config
                .step_duration_s
                .map(|d| d * ALIGNMENT_TOLERANCE);
            behind.push(
                delivered.is_some_and(|d| d < 99.0)
                    || late > 0
                    || not_sent > 0
                    || matches!((start_late, tolerance), (Some(l), Some(t)) if l > t),
            );
            let mut row = vec![
                format!("{}/{}", part.index + 1, set.count),
                part.host.clone(),
            ];
            if several {
                row.push(target.name.clone());
            }
            row.extend([
                steps.len().to_string(),
                fmt_count(requests as f64),
                delivered.map_or_else(|| "-".to_owned(), fmt_percent),
                fmt_count(late as f64),
                fmt_count(not_sent as f64),
                if requests == 0 {
                    "-".to_owned()
                } else {
                    fmt_percent(errors as f64 * 100.0 / requests as f64)
                },
                p99.map_or_else(|| "-".to_owned(), fmt_ms),
                start_late.map_or_else(|| "-".to_owned(), round2),
            ]);
            rows.push(row);
        }
    }
    let start = set
        .start_at
        .as_deref()
        .map(|s| format!(", common start {s}"))
        .unwrap_or_default();
    Some(ShardTable {
        title: format!(
            "shards of run {} ({} of them{start})",
            set.run_id, set.count
        ),
        head,
        rows,
        behind,
        flags: set.flags.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_lists_read_as_ranges() {
        assert_eq!(step_list(&[1]), "step 2");
        assert_eq!(step_list(&[1, 2, 3]), "steps 2–4");
        assert_eq!(step_list(&[0, 2, 4, 5]), "steps 1, 3 and 5–6");
    }

    #[test]
    fn file_lists_read_as_english() {
        assert_eq!(files(&[1]), "file 2");
        assert_eq!(files(&[0, 4]), "files 1 and 5");
        assert_eq!(files(&[0, 2, 3]), "files 1, 3 and 4");
    }
}
