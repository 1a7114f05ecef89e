//! The figures of a run arranged for reading: sections (one per step), rows (one per figure),
//! a value per target and a ratio to the first target. The terminal table and the HTML page
//! both render this one model, so they always show the same numbers.

use scalpel_load::result::{
    H2Events, LatencySummary, RecordedInfo, RunResult, StepResult, TargetResult,
};

/// Which way a figure should move for the candidate to be better.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Better {
    Lower,
    Higher,
    /// Neither way is better (requests, offered rate); the ratio is shown without a verdict.
    Neither,
    /// No ratio makes sense (yes/no figures, the offered rate everyone shares).
    NoRatio,
}

/// How a target compares with the first target on one figure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    Better,
    Worse,
    Same,
    Unknown,
}

impl Verdict {
    pub(crate) fn word(self) -> &'static str {
        match self {
            Verdict::Better => "better",
            Verdict::Worse => "worse",
            Verdict::Same | Verdict::Unknown => "",
        }
    }
}

/// One figure of one section.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    pub(crate) label: String,
    /// A sub-row (an error kind under `errors`).
    pub(crate) indent: bool,
    /// The figure per target, as text.
    pub(crate) cells: Vec<String>,
    /// From the second target on: the ratio to the first (`0.24x`) and its verdict.
    pub(crate) ratios: Vec<(String, Verdict)>,
}

/// One step, or the closed model's single measurement.
#[derive(Debug, Clone)]
pub(crate) struct Section {
    pub(crate) title: String,
    pub(crate) rows: Vec<Row>,
    /// Lines under the table: why a target's step broke the SLO, which step an interrupt
    /// cut short.
    pub(crate) notes: Vec<String>,
    /// A mix's endpoints: each endpoint's name and the same figures for its requests, in
    /// the mix's order (empty without a mix).
    pub(crate) endpoints: Vec<(String, Vec<Row>)>,
}

/// The step indices any target ran, in order.
pub(crate) fn step_indices(result: &RunResult) -> Vec<u32> {
    let mut indices: Vec<u32> = result
        .targets
        .iter()
        .flat_map(|t| t.steps.iter().map(|s| s.index))
        .collect();
    indices.sort_unstable();
    indices.dedup();
    indices
}

pub(crate) fn step_of(target: &TargetResult, index: u32) -> Option<&StepResult> {
    target.steps.iter().find(|s| s.index == index)
}

/// A section per step.
pub(crate) fn sections(result: &RunResult) -> Vec<Section> {
    let indices = step_indices(result);
    indices
        .iter()
        .map(|&index| {
            let steps: Vec<Option<&StepResult>> =
                result.targets.iter().map(|t| step_of(t, index)).collect();
            Section {
                title: section_title(result, &steps, index, indices.len()),
                rows: rows(&steps, false),
                notes: notes(result, index),
                endpoints: endpoint_rows(&steps),
            }
        })
        .collect()
}

fn section_title(
    result: &RunResult,
    steps: &[Option<&StepResult>],
    index: u32,
    count: usize,
) -> String {
    let any = steps.iter().flatten().next();
    let offered = any.and_then(|s| s.offered_rps);
    let duration = steps
        .iter()
        .flatten()
        .map(|s| s.duration_s)
        .fold(0.0, f64::max);
    let what = match offered {
        Some(rps) => format!("offered {} rps", fmt_rate(rps)),
        None => format!(
            "{} model, {} connections",
            result.config.model, result.config.connections
        ),
    };
    if count > 1 {
        format!("step {} of {count}: {what}, {duration:.1} s", index + 1)
    } else {
        format!("{what}, {duration:.1} s")
    }
}

/// What a recorded file held and how the run used it, a sentence a line: the counts with
/// every reason a record was skipped, the first malformed lines with their numbers, the
/// schedule, and whether a pool was looped.
pub(crate) fn recorded_lines(r: &RecordedInfo) -> Vec<String> {
    let mut lines = Vec::new();
    lines.push(format!(
        "recorded traffic: {} ({}), {} records, {} usable",
        r.file,
        r.format,
        fmt_count(r.records as f64),
        fmt_count(r.usable as f64)
    ));
    if !r.skipped.is_empty() {
        let skipped: Vec<String> = r
            .skipped
            .iter()
            .map(|(reason, n)| format!("{} {}", fmt_count(*n as f64), reason.replace('_', " ")))
            .collect();
        lines.push(format!("  skipped: {}", skipped.join(", ")));
    }
    for bad in &r.first_malformed {
        lines.push(format!("  malformed, line {}: {}", bad.line, bad.message));
    }
    let span = r.span_s;
    lines.push(match r.speed {
        Some(speed) => format!(
            "schedule: as recorded ({span:.3} s from the first to the last request) at speed \
             {speed}: {:.3} s",
            span / speed
        ),
        None if r.looped => "schedule: the records as a pool in file order, at the load's pace; \
                             the run outlasted them, so they were LOOPED (used again from the top)"
            .to_owned(),
        None => "schedule: the records as a pool in file order, at the load's pace; each was \
                 used at most once per segment (not looped)"
            .to_owned(),
    });
    lines
}

/// Each endpoint's figures in a step, for every target: the endpoint seen as a step of its
/// own, shown with the step's rows (less the offered rate, which is the whole step's).
fn endpoint_rows(steps: &[Option<&StepResult>]) -> Vec<(String, Vec<Row>)> {
    let mut names: Vec<&str> = Vec::new();
    for step in steps.iter().flatten() {
        for e in &step.endpoints {
            if !names.contains(&e.name.as_str()) {
                names.push(&e.name);
            }
        }
    }
    names
        .into_iter()
        .map(|name| {
            let views: Vec<Option<StepResult>> = steps
                .iter()
                .map(|s| {
                    s.and_then(|s| {
                        s.endpoints
                            .iter()
                            .find(|e| e.name == name)
                            .map(|e| e.as_step(s))
                    })
                })
                .collect();
            let refs: Vec<Option<&StepResult>> = views.iter().map(Option::as_ref).collect();
            (name.to_owned(), rows(&refs, true))
        })
        .collect()
}

/// The columns of the endpoints at a glance, and the rows of the endpoint blocks they come
/// from (so both show the very same numbers).
pub(crate) const GLANCE: [(&str, &str); 5] = [
    ("rps", "achieved rps"),
    ("requests", "requests"),
    ("errors", "errors"),
    ("p50 ms", "latency p50 ms"),
    ("p99 ms", "latency p99 ms"),
];

/// A line per endpoint with the few figures of [`GLANCE`], per target (`-` where a target
/// has no such figure).
pub(crate) fn glance(
    endpoints: &[(String, Vec<Row>)],
    targets: usize,
) -> Vec<(String, Vec<String>)> {
    endpoints
        .iter()
        .map(|(name, rows)| {
            let mut cells = Vec::with_capacity(targets * GLANCE.len());
            for t in 0..targets {
                for (_, label) in GLANCE {
                    let cell = rows
                        .iter()
                        .find(|r| r.label == label)
                        .and_then(|r| r.cells.get(t))
                        .cloned()
                        .unwrap_or_else(|| "-".to_owned());
                    cells.push(cell);
                }
            }
            (name.clone(), cells)
        })
        .collect()
}

/// Why each target's step broke the SLO, and which were cut short by an interrupt.
fn notes(result: &RunResult, index: u32) -> Vec<String> {
    let mut notes = Vec::new();
    for target in &result.targets {
        let Some(step) = step_of(target, index) else {
            continue;
        };
        if step.partial {
            let mut note = format!(
                "{}: partial, the run was interrupted during this step",
                target.name
            );
            if step.interrupted > 0 {
                note.push_str(&format!(
                    " ({} requests in flight were cut)",
                    fmt_count(step.interrupted as f64)
                ));
            }
            notes.push(note);
        }
        if let Some(reason) = &step.slo_reason {
            notes.push(format!("{}: SLO broke: {reason}", target.name));
        }
    }
    notes
}

/// Reads one percentile of a latency summary.
type Percentile = fn(&LatencySummary) -> f64;

/// Reads one figure of a step (`None`: not measured).
type StepFigure = fn(&StepResult) -> Option<f64>;

/// The rows of a figures table being built, each figure over the same steps.
struct Rows<'a> {
    steps: &'a [Option<&'a StepResult>],
    rows: Vec<Row>,
}

impl Rows<'_> {
    /// Adds a row of one figure: `get` reads it from a step (`-` where a target has no
    /// step or no figure), `fmt` writes it, `better` says which way its ratios lean.
    fn add(
        &mut self,
        label: &str,
        indent: bool,
        better: Better,
        get: &dyn Fn(&StepResult) -> Option<f64>,
        fmt: &dyn Fn(f64) -> String,
    ) {
        let values: Vec<Option<f64>> = self.steps.iter().map(|s| s.and_then(get)).collect();
        self.rows.push(Row {
            label: label.to_owned(),
            indent,
            cells: values
                .iter()
                .map(|v| v.map_or_else(|| "-".to_owned(), fmt))
                .collect(),
            ratios: ratios(&values, better),
        });
    }
}

/// The figures of a step per target; `endpoint`: of one endpoint of a mix, whose share of
/// the offered rate is not known ahead (its picks are random), so it has no offered row.
fn rows(steps: &[Option<&StepResult>], endpoint: bool) -> Vec<Row> {
    let mut rows = Rows {
        steps,
        rows: Vec::new(),
    };
    let open = rows.present().any(|s| s.offered_rps.is_some());
    rows.volume(open && !endpoint);
    rows.errors(open);
    rows.latency();
    rows.connections();
    rows.h2();
    rows.resources();
    rows.slo();
    rows.rows
}

impl<'a> Rows<'a> {
    /// The steps that exist (a target may have stopped before this step).
    fn present(&self) -> impl Iterator<Item = &'a StepResult> + 'a {
        self.steps.iter().flatten().copied()
    }

    /// How much was asked, sent and answered.
    fn volume(&mut self, offered: bool) {
        if offered {
            self.add(
                "offered rps",
                false,
                Better::NoRatio,
                &|s| s.offered_rps,
                &fmt_rate,
            );
        }
        self.add(
            "achieved rps",
            false,
            Better::Higher,
            &|s| Some(s.achieved_rps),
            &fmt_rate,
        );
        self.add(
            "requests",
            false,
            Better::Neither,
            &|s| Some(s.requests as f64),
            &fmt_count,
        );
        self.add(
            "sent",
            false,
            Better::Neither,
            &|s| Some(s.sent as f64),
            &fmt_count,
        );
        self.add(
            "answered",
            false,
            Better::Higher,
            &|s| Some(s.answered as f64),
            &fmt_count,
        );
        self.add(
            "no answer",
            false,
            Better::Lower,
            &|s| Some(s.failed as f64),
            &fmt_count,
        );
    }

    /// Errors with their share of requests and a sub-row per kind; in the open models,
    /// the requests that were late or never sent. The generator's own failures
    /// (`local:*`) are not the target's errors: they are listed under "not sent", where
    /// they are counted.
    fn errors(&mut self, open: bool) {
        let values: Vec<Option<f64>> = self
            .steps
            .iter()
            .map(|s| s.map(|s| s.errors as f64))
            .collect();
        self.rows.push(Row {
            label: "errors".to_owned(),
            indent: false,
            cells: self
                .steps
                .iter()
                .map(|s| match s {
                    Some(s) if s.errors > 0 && s.requests > 0 => format!(
                        "{} ({})",
                        fmt_count(s.errors as f64),
                        fmt_percent(s.errors as f64 * 100.0 / s.requests as f64)
                    ),
                    Some(s) => fmt_count(s.errors as f64),
                    None => "-".to_owned(),
                })
                .collect(),
            ratios: ratios(&values, Better::Lower),
        });
        let mut kinds: Vec<&String> = self.present().flat_map(|s| s.error_kinds.keys()).collect();
        kinds.sort();
        kinds.dedup();
        let (local, kinds): (Vec<&String>, Vec<&String>) =
            kinds.into_iter().partition(|k| k.starts_with("local:"));
        self.kinds(&kinds);
        if open {
            self.add(
                "late",
                false,
                Better::Lower,
                &|s| Some(s.late as f64),
                &fmt_count,
            );
        }
        if open || self.present().any(|s| s.not_sent > 0) {
            self.add(
                "not sent",
                false,
                Better::Lower,
                &|s| Some(s.not_sent as f64),
                &fmt_count,
            );
            self.kinds(&local);
        }
        if self.present().any(|s| s.interrupted > 0) {
            self.add(
                "cut at interrupt",
                false,
                Better::NoRatio,
                &|s| Some(s.interrupted as f64),
                &fmt_count,
            );
        }
    }

    /// A sub-row per error kind.
    fn kinds(&mut self, kinds: &[&String]) {
        for kind in kinds {
            self.add(
                kind,
                true,
                Better::Lower,
                &|s| Some(s.error_kinds.get(*kind).copied().unwrap_or(0) as f64),
                &fmt_count,
            );
        }
    }

    /// The latency percentiles (`-` where nothing was measured, never a fast-looking 0).
    fn latency(&mut self) {
        let figures: [(&str, Percentile); 6] = [
            ("latency mean ms", |l| l.mean),
            ("latency p50 ms", |l| l.p50),
            ("latency p90 ms", |l| l.p90),
            ("latency p99 ms", |l| l.p99),
            ("latency p99.9 ms", |l| l.p999),
            ("latency max ms", |l| l.max),
        ];
        for (label, get) in figures {
            self.add(
                label,
                false,
                Better::Lower,
                &|s| s.latency_ms.as_ref().map(get),
                &fmt_ms,
            );
        }
    }

    /// Connections and TLS handshakes, measured apart from request latency.
    fn connections(&mut self) {
        if self
            .present()
            .any(|s| s.handshake_ms.is_some() || s.h2.is_some())
        {
            self.add(
                "connections opened",
                false,
                Better::Neither,
                &|s| Some(s.connections_opened as f64),
                &fmt_count,
            );
        }
        if !self.present().any(|s| s.handshake_ms.is_some()) {
            return;
        }
        let figures: [(&str, Percentile); 3] = [
            ("TLS handshake p50 ms", |l| l.p50),
            ("TLS handshake p99 ms", |l| l.p99),
            ("TLS handshake max ms", |l| l.max),
        ];
        for (label, get) in figures {
            self.add(
                label,
                false,
                Better::Lower,
                &|s| s.handshake_ms.as_ref().map(get),
                &fmt_ms,
            );
        }
    }

    /// HTTP/2 events by kind (their failed requests are also under `errors`).
    fn h2(&mut self) {
        if !self.present().any(|s| s.h2.is_some()) {
            return;
        }
        let h2 =
            |s: &StepResult, get: &dyn Fn(&H2Events) -> u64| s.h2.as_ref().map(|e| get(e) as f64);
        self.add(
            "h2 GOAWAY",
            false,
            Better::Lower,
            &|s| h2(s, &|e| e.goaway),
            &fmt_count,
        );
        self.add(
            "h2 RST_STREAM",
            false,
            Better::Lower,
            &|s| h2(s, &|e| e.rst_stream),
            &fmt_count,
        );
        let mut reasons: Vec<&String> = self
            .present()
            .filter_map(|s| s.h2.as_ref())
            .flat_map(|e| e.rst_by_reason.keys())
            .collect();
        reasons.sort();
        reasons.dedup();
        for reason in reasons {
            self.add(
                reason,
                true,
                Better::Lower,
                &|s| h2(s, &|e| e.rst_by_reason.get(reason).copied().unwrap_or(0)),
                &fmt_count,
            );
        }
        self.add(
            "h2 waited for a stream",
            false,
            Better::Lower,
            &|s| h2(s, &|e| e.stalled_on_streams),
            &fmt_count,
        );
        self.add(
            "h2 waited for window",
            false,
            Better::Lower,
            &|s| h2(s, &|e| e.stalled_on_window),
            &fmt_count,
        );
    }

    /// CPU and memory of the watched process trees.
    fn resources(&mut self) {
        if self.present().any(|s| s.cpu_percent.is_some()) {
            self.add(
                "CPU % mean",
                false,
                Better::Lower,
                &|s| s.cpu_percent,
                &fmt_amount,
            );
            self.add(
                "CPU % peak",
                false,
                Better::Lower,
                &|s| s.cpu_percent_peak,
                &fmt_amount,
            );
            self.add(
                "rps per CPU core",
                false,
                Better::Higher,
                &rps_per_core,
                &fmt_rate,
            );
        }
        let memory: [(&str, StepFigure); 4] = [
            ("RSS MiB mean", |s| s.rss_mb),
            ("RSS MiB peak", |s| s.rss_mb_peak),
            ("PSS MiB mean", |s| s.pss_mb),
            ("PSS MiB peak", |s| s.pss_mb_peak),
        ];
        // Each pair shown when its mean was measured for some target.
        for pair in memory.chunks(2) {
            if !self.present().any(|s| (pair[0].1)(s).is_some()) {
                continue;
            }
            for (label, get) in pair {
                self.add(label, false, Better::Lower, get, &fmt_amount);
            }
        }
    }

    /// Whether each target's step held the SLO (no ratio: yes or no).
    fn slo(&mut self) {
        if !self.present().any(|s| s.slo_held.is_some()) {
            return;
        }
        self.rows.push(Row {
            label: "SLO held".to_owned(),
            indent: false,
            cells: self
                .steps
                .iter()
                .map(|s| held_text(s.and_then(|s| s.slo_held)).to_owned())
                .collect(),
            ratios: vec![(String::new(), Verdict::Unknown); self.steps.len().saturating_sub(1)],
        });
    }
}

/// How a target was connected to, in one line, when it was anything but plain HTTP/1.1
/// with keep-alive: protocol, TLS and whether the certificate was verified (an
/// unverified one is said in capitals), connections per request, the address.
pub(crate) fn connection_line(target: &TargetResult) -> Option<String> {
    let c = target.connection.as_ref()?;
    if c.protocol == "http/1.1" && !c.tls && c.reuse {
        return None;
    }
    let mut parts = vec![match (c.protocol.as_str(), c.streams) {
        ("h2", Some(m)) => format!("HTTP/2 (h2 by ALPN), {m} streams per connection"),
        ("h2c", Some(m)) => format!("HTTP/2 (h2c, prior knowledge), {m} streams per connection"),
        (p, _) => p.to_uppercase(),
    }];
    if c.tls {
        let name = c.server_name.as_deref().unwrap_or("?");
        parts.push(if c.insecure {
            format!("TLS, certificate NOT verified (--insecure), SNI {name}")
        } else if let Some(ca) = &c.ca_file {
            format!("TLS, certificate of {name} verified against {ca}")
        } else {
            format!("TLS, certificate of {name} verified against the system's trust store")
        });
    }
    if !c.reuse {
        parts.push("a new connection per request".to_owned());
    }
    parts.push(format!("connected to {}", c.address));
    Some(parts.join("; "))
}

/// The ramp overview: a line per step with the few figures that show where each target
/// gave in.
#[derive(Debug)]
pub(crate) struct Overview {
    /// Column titles repeated for every target.
    pub(crate) per_target: Vec<&'static str>,
    pub(crate) rows: Vec<OverviewRow>,
}

#[derive(Debug)]
pub(crate) struct OverviewRow {
    pub(crate) step: String,
    pub(crate) offered: String,
    /// Per target, one cell per `per_target` column.
    pub(crate) per_target: Vec<Vec<String>>,
}

pub(crate) fn overview(result: &RunResult) -> Overview {
    let all = || result.targets.iter().flat_map(|t| &t.steps);
    let has_cpu = all().any(|s| s.cpu_percent.is_some());
    let has_slo = all().any(|s| s.slo_held.is_some());
    let mut per_target = vec!["rps", "p99 ms", "errors"];
    if has_cpu {
        per_target.push("CPU %");
    }
    if has_slo {
        per_target.push("SLO");
    }
    let rows = step_indices(result)
        .into_iter()
        .map(|index| {
            let offered = result
                .targets
                .iter()
                .find_map(|t| step_of(t, index))
                .and_then(|s| s.offered_rps)
                .map_or_else(|| "-".to_owned(), fmt_rate);
            let per_target = result
                .targets
                .iter()
                .map(|target| match step_of(target, index) {
                    Some(s) => {
                        let mut cells = vec![
                            fmt_rate(s.achieved_rps),
                            s.latency_ms
                                .map_or_else(|| "-".to_owned(), |l| fmt_ms(l.p99)),
                            if s.requests == 0 {
                                "-".to_owned()
                            } else {
                                fmt_percent(s.errors as f64 * 100.0 / s.requests as f64)
                            },
                        ];
                        if has_cpu {
                            cells.push(
                                s.cpu_percent
                                    .map_or_else(|| "-".to_owned(), |c| format!("{c:.0}")),
                            );
                        }
                        if has_slo {
                            cells.push(if s.partial {
                                "cut".to_owned()
                            } else {
                                held_text(s.slo_held).to_owned()
                            });
                        }
                        cells
                    }
                    None => vec!["-".to_owned(); per_target.len()],
                })
                .collect();
            OverviewRow {
                step: (index + 1).to_string(),
                offered,
                per_target,
            }
        })
        .collect();
    Overview { per_target, rows }
}

pub(crate) fn held_text(held: Option<bool>) -> &'static str {
    match held {
        Some(true) => "ok",
        Some(false) => "NO",
        None => "-",
    }
}

/// One target's breaking point, ready to print.
#[derive(Debug)]
pub(crate) struct BreakingRow {
    pub(crate) target: String,
    /// `4,000 rps`, or `>= 12,000 rps` when every step held.
    pub(crate) rate: String,
    pub(crate) ratio: (String, Verdict),
    pub(crate) why: String,
}

pub(crate) fn breaking_points(result: &RunResult) -> Vec<BreakingRow> {
    // The rate a target is credited with: the last offered rate that held; a lower bound
    // (the top step) when every step held. `None` when no rate held or none was offered
    // (the closed model), so no ratio is formed from a rate that was never delivered.
    let rate_of = |t: &TargetResult| match &t.breaking_point {
        Some(bp) => bp.rps.filter(|r| *r > 0.0),
        None => t
            .steps
            .iter()
            .filter(|s| s.slo_held == Some(true))
            .filter_map(|s| s.offered_rps)
            .reduce(f64::max),
    };
    let base = result.targets.first().and_then(rate_of);
    result
        .targets
        .iter()
        .enumerate()
        .map(|(i, target)| {
            let first_offered = target.steps.first().and_then(|s| s.offered_rps);
            let (rate, why) = match &target.breaking_point {
                Some(bp) => (
                    match (bp.rps, first_offered) {
                        (Some(r), _) if r > 0.0 => format!("{} rps", fmt_rate(r)),
                        // Even the first step broke: no rate held.
                        (Some(_), Some(first)) => format!("< {} rps", fmt_rate(first)),
                        _ => "-".to_owned(),
                    },
                    format!("broke: {}", bp.reason),
                ),
                None => match rate_of(target) {
                    Some(r) => (
                        format!(">= {} rps", fmt_rate(r)),
                        "held at every step".to_owned(),
                    ),
                    None if target.steps.iter().any(|s| s.partial) => {
                        ("-".to_owned(), "interrupted before a verdict".to_owned())
                    }
                    None if target.steps.iter().all(|s| s.offered_rps.is_none())
                        && target.steps.iter().any(|s| s.slo_held == Some(true)) =>
                    {
                        (
                            "-".to_owned(),
                            "held (closed model: no rate offered)".to_owned(),
                        )
                    }
                    None => ("-".to_owned(), "no verdict".to_owned()),
                },
            };
            let ratio = if i == 0 {
                (String::new(), Verdict::Unknown)
            } else {
                ratios(&[base, rate_of(target)], Better::Higher).remove(0)
            };
            BreakingRow {
                target: target.name.clone(),
                rate,
                ratio,
                why,
            }
        })
        .collect()
}

/// Requests per second per fully used core: what "2x QPS per vCPU" claims are made of.
pub(crate) fn rps_per_core(step: &StepResult) -> Option<f64> {
    step.cpu_percent
        .filter(|cpu| *cpu > 0.0)
        .map(|cpu| step.achieved_rps / (cpu / 100.0))
}

/// Ratio of each later target to the first, with a verdict by the figure's direction.
pub(crate) fn ratios(values: &[Option<f64>], better: Better) -> Vec<(String, Verdict)> {
    let base = values.first().copied().flatten();
    values
        .iter()
        .skip(1)
        .map(|value| match (better, base, value) {
            (Better::NoRatio, _, _) => (String::new(), Verdict::Unknown),
            (_, Some(base), Some(value)) => ratio(base, *value, better),
            _ => ("-".to_owned(), Verdict::Unknown),
        })
        .collect()
}

fn ratio(base: f64, value: f64, better: Better) -> (String, Verdict) {
    if base == 0.0 {
        return if value == 0.0 {
            ("=".to_owned(), Verdict::Same)
        } else {
            ("-".to_owned(), Verdict::Unknown)
        };
    }
    let r = value / base;
    let text = fmt_ratio(r);
    let verdict = if text == "1.00x" {
        Verdict::Same
    } else {
        match better {
            Better::Lower if r < 1.0 => Verdict::Better,
            Better::Lower => Verdict::Worse,
            Better::Higher if r > 1.0 => Verdict::Better,
            Better::Higher => Verdict::Worse,
            Better::Neither | Better::NoRatio => Verdict::Unknown,
        }
    };
    (text, verdict)
}

pub(crate) fn fmt_ratio(r: f64) -> String {
    if r >= 100.0 {
        format!("{r:.0}x")
    } else if r >= 10.0 {
        format!("{r:.1}x")
    } else {
        format!("{r:.2}x")
    }
}

/// An integer with thousands separators: `1,234,567`.
pub(crate) fn fmt_count(value: f64) -> String {
    group(&format!("{value:.0}"))
}

/// A rate: whole numbers from 1000 up, one decimal below.
pub(crate) fn fmt_rate(value: f64) -> String {
    if value.abs() >= 1000.0 {
        group(&format!("{value:.0}"))
    } else {
        format!("{value:.1}")
    }
}

/// Milliseconds with the precision HdrHistogram's three significant digits support.
pub(crate) fn fmt_ms(value: f64) -> String {
    if value >= 100.0 {
        group(&format!("{value:.1}"))
    } else if value >= 1.0 {
        format!("{value:.2}")
    } else {
        format!("{value:.3}")
    }
}

/// CPU percent or MiB: one decimal.
pub(crate) fn fmt_amount(value: f64) -> String {
    group(&format!("{value:.1}"))
}

pub(crate) fn fmt_percent(value: f64) -> String {
    if value >= 10.0 {
        format!("{value:.1}%")
    } else {
        format!("{value:.2}%")
    }
}

/// Inserts `,` every three digits of the integer part.
fn group(number: &str) -> String {
    let (sign, rest) = match number.strip_prefix('-') {
        Some(rest) => ("-", rest),
        None => ("", number),
    };
    let (int, frac) = match rest.split_once('.') {
        Some((int, frac)) => (int, Some(frac)),
        None => (rest, None),
    };
    let mut out = String::with_capacity(number.len() + int.len() / 3);
    out.push_str(sign);
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if let Some(frac) = frac {
        out.push('.');
        out.push_str(frac);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_grouped_and_ratios_judged_by_direction() {
        assert_eq!(fmt_count(1234567.0), "1,234,567");
        assert_eq!(fmt_rate(85012.4), "85,012");
        assert_eq!(fmt_rate(999.94), "999.9");
        assert_eq!(fmt_ms(19.87), "19.87");
        assert_eq!(fmt_ms(0.0512), "0.051");
        assert_eq!(
            ratio(19.87, 4.79, Better::Lower),
            ("0.24x".to_owned(), Verdict::Better)
        );
        assert_eq!(
            ratio(85_000.0, 150_000.0, Better::Higher),
            ("1.76x".to_owned(), Verdict::Better)
        );
        assert_eq!(
            ratio(52.0, 78.3, Better::Lower),
            ("1.51x".to_owned(), Verdict::Worse)
        );
        assert_eq!(
            ratio(100.0, 100.2, Better::Lower),
            ("1.00x".to_owned(), Verdict::Same)
        );
        assert_eq!(ratio(0.0, 0.0, Better::Lower).1, Verdict::Same);
        assert_eq!(ratio(0.0, 3.0, Better::Lower).1, Verdict::Unknown);
    }
}
