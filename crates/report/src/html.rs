//! The self-contained HTML page: inline CSS and inline SVG, no scripts, no network.

use std::fmt::Write as _;

use scalpel_load::result::{RunResult, StepResult, TargetResult, decode_histogram};
use scalpel_present::{
    BarChart, LineChart, NARROW, STYLE, Scale, Series, WIDE, color, escape_html,
};

use crate::figures::{
    self, Row, Section, Verdict, fmt_amount, fmt_ms, fmt_rate, held_text, step_indices, step_of,
};

/// One self-contained HTML page: what was run, the breaking points, the summary table, and
/// SVG plots of latency, throughput, CPU and memory per step (one series per target) and
/// of each target's latency distribution at one step.
///
/// The page is also well-formed XML (every element closed, only XML's own entities), so
/// any XML parser can check it.
pub fn html(result: &RunResult) -> String {
    let names: Vec<&str> = result.targets.iter().map(|t| t.name.as_str()).collect();
    let title = format!("Load report: {}", names.join(" vs "));
    let mut out = String::with_capacity(64 * 1024);
    let _ = write!(
        out,
        r#"<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"/><meta name="viewport" content="width=device-width, initial-scale=1"/><title>{t}</title><style>{STYLE}</style></head>
<body><main>
<header><h1>{t}</h1>{meta}</header>
"#,
        t = escape_html(&title),
        meta = meta(result)
    );
    cards(result, &mut out);
    summary(result, &mut out);
    shards(result, &mut out);
    plots(result, &mut out);
    distribution(result, &mut out);
    let _ = write!(
        out,
        r#"<footer>Written by {tool}. Percentiles come from HdrHistograms (1 µs resolution, 3 significant digits); merged runs add histograms, never average percentiles. Ratios are each target divided by {first}.</footer>
</main></body></html>
"#,
        tool = escape_html(&result.tool),
        first = escape_html(names.first().copied().unwrap_or("the first target"))
    );
    out
}

fn meta(result: &RunResult) -> String {
    let c = &result.config;
    let m = &result.machine;
    let mut items = Vec::new();
    if result.interrupted {
        items.push((
            "INTERRUPTED",
            "stopped by a signal: the last step run is partial, later steps were not run"
                .to_owned(),
        ));
    }
    items.extend([
        ("started", result.started_at.clone()),
        ("hosts", m.hosts.join(", ")),
        (
            "machine",
            format!("{} cpus, {}, kernel {}", m.cpus, m.cpu_model, m.kernel),
        ),
        (
            "model",
            format!("{}, {} connections", c.model, c.connections),
        ),
        ("request", c.request.clone()),
    ]);
    if let Some(r) = &c.recorded {
        for line in figures::recorded_lines(r) {
            let key = if line.starts_with("  malformed") {
                "malformed"
            } else if line.starts_with("  skipped") {
                "skipped"
            } else if line.starts_with("schedule") {
                "schedule"
            } else {
                "recorded"
            };
            let text = line.trim_start();
            let text = text.strip_prefix("schedule: ").unwrap_or(text);
            let text = text.strip_prefix("skipped: ").unwrap_or(text);
            let text = text.strip_prefix("malformed, ").unwrap_or(text);
            let text = text.strip_prefix("recorded traffic: ").unwrap_or(text);
            items.push((key, text.to_owned()));
        }
    }
    if let Some(n) = c.max_in_flight {
        items.push(("in flight", format!("at most {n}")));
    }
    if let Some(shard) = &result.shard {
        items.push((
            "shard",
            format!(
                "{}/{} of run {} (connections, rates and counts are this shard's part){}",
                shard.index + 1,
                shard.count,
                shard.run_id,
                shard
                    .start_late_s
                    .filter(|l| *l > 0.0)
                    .map(|l| format!(", started {l:.3} s late"))
                    .unwrap_or_default()
            ),
        ));
    }
    if let Some(set) = &result.shards {
        items.push(("shards", format!("all {} of run {}", set.count, set.run_id)));
    }
    if let Some(s) = c.step_duration_s {
        items.push(("step", format!("{s} s")));
    }
    if let Some(n) = c.requests_per_step {
        items.push(("step", format!("{n} requests")));
    }
    if let Some(slo) = &c.slo {
        items.push(("SLO", slo.clone()));
    }
    for target in &result.targets {
        items.push(("target", format!("{} = {}", target.name, target.url)));
        if let Some(line) = crate::figures::connection_line(target) {
            items.push(("connection", format!("{}: {line}", target.name)));
        }
    }
    let mut out = String::from(r#"<dl class="meta">"#);
    for (key, value) in items {
        let _ = write!(
            out,
            "<div><dt>{}</dt><dd>{}</dd></div>",
            escape_html(key),
            escape_html(&value)
        );
    }
    out.push_str("</dl>");
    out
}

/// The step every target ran where none had broken the SLO yet, the last such; else the
/// last step. Comparing there compares the targets under a load they all held. A step cut
/// short by an interrupt is no place to compare.
fn comparison_step(result: &RunResult) -> Option<u32> {
    let indices = step_indices(result);
    let whole = |i: u32| {
        result
            .targets
            .iter()
            .all(|t| step_of(t, i).is_some_and(|s| !s.partial))
    };
    indices
        .iter()
        .rev()
        .find(|&&i| {
            whole(i)
                && result.targets.iter().all(|t| {
                    t.steps
                        .iter()
                        .filter(|s| s.index <= i)
                        .all(|s| s.slo_held != Some(false))
                })
        })
        .or_else(|| indices.iter().rev().find(|&&i| whole(i)))
        .or(indices.last())
        .copied()
}

fn cards(result: &RunResult, out: &mut String) {
    let at = comparison_step(result);
    out.push_str(r#"<section class="cards">"#);
    let breaking = figures::breaking_points(result);
    for (i, target) in result.targets.iter().enumerate() {
        let step = at.and_then(|at| step_of(target, at));
        let _ = write!(
            out,
            r#"<div class="card" style="border-top-color:{c}"><div class="card-name" style="color:{c}">{n}</div>"#,
            c = color(i),
            n = escape_html(&target.name)
        );
        if result.config.slo.is_some() {
            let row = &breaking[i];
            let _ = write!(
                out,
                r#"<div class="card-figure">{r}</div><div class="card-label">breaking point{ratio}</div><div class="card-note">{why}</div>"#,
                r = escape_html(&row.rate),
                ratio = ratio_span(&row.ratio),
                why = escape_html(&row.why)
            );
        } else if let Some(s) = step {
            let _ = write!(
                out,
                r#"<div class="card-figure">{r} rps</div><div class="card-label">achieved</div>"#,
                r = escape_html(&fmt_rate(s.achieved_rps))
            );
        }
        if let Some(s) = step {
            let mut note = match s.latency_ms {
                Some(l) => format!("p99 {} ms", fmt_ms(l.p99)),
                None => "p99 -".to_owned(),
            };
            if let Some(cpu) = s.cpu_percent {
                let _ = write!(note, " · CPU {}%", fmt_amount(cpu));
            }
            if let Some(mem) = s.pss_mb.or(s.rss_mb) {
                let kind = if s.pss_mb.is_some() { "PSS" } else { "RSS" };
                let _ = write!(note, " · {kind} {} MiB", fmt_amount(mem));
            }
            if let Some(rps) = s.offered_rps {
                let _ = write!(note, " at {} rps", fmt_rate(rps));
            }
            let _ = write!(
                out,
                r#"<div class="card-note">{}</div>"#,
                escape_html(&note)
            );
        }
        out.push_str("</div>");
    }
    out.push_str("</section>\n");
}

fn ratio_span((text, verdict): &(String, Verdict)) -> String {
    if text.is_empty() {
        return String::new();
    }
    let class = match verdict {
        Verdict::Better => "better",
        Verdict::Worse => "worse",
        _ => "neutral",
    };
    format!(
        r#" <span class="ratio {class}">{} {}</span>"#,
        escape_html(text),
        verdict.word()
    )
}

fn summary(result: &RunResult, out: &mut String) {
    out.push_str("<section><h2>Summary</h2>");
    let sections = figures::sections(result);
    if sections.len() > 1 {
        overview(result, out);
    }
    let at = comparison_step(result);
    let indices = step_indices(result);
    for (section, index) in sections.iter().zip(&indices) {
        if sections.len() > 1 {
            let open = if Some(*index) == at {
                " open=\"open\""
            } else {
                ""
            };
            let _ = write!(
                out,
                "<details{open}><summary>{}</summary>",
                escape_html(&section.title)
            );
            section_table(result, section, out);
            out.push_str("</details>");
        } else {
            let _ = write!(out, "<h3>{}</h3>", escape_html(&section.title));
            section_table(result, section, out);
        }
        for note in &section.notes {
            let _ = write!(out, r#"<p class="note">{}</p>"#, escape_html(note));
        }
    }
    out.push_str("</section>\n");
}

/// A merged shard set: each shard's own totals, the ones that fell behind marked, and the
/// merge's flags.
fn shards(result: &RunResult, out: &mut String) {
    let Some(table) = crate::shards::table(result) else {
        return;
    };
    let _ = write!(
        out,
        r#"<section><h2>Shards</h2><p class="note">{}</p><table class="shards"><thead><tr>"#,
        escape_html(&table.title)
    );
    for h in &table.head {
        let _ = write!(out, "<th>{}</th>", escape_html(h));
    }
    out.push_str("</tr></thead><tbody>");
    for (row, behind) in table.rows.iter().zip(&table.behind) {
        out.push_str("<tr>");
        for (i, cell) in row.iter().enumerate() {
            let class = match (i, behind) {
                (0, true) => r#" class="first worse""#,
                (0, false) => r#" class="first""#,
                _ => "",
            };
            let _ = write!(out, "<td{class}>{}</td>", escape_html(cell));
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table>");
    for flag in &table.flags {
        let _ = write!(out, r#"<p class="note worse">{}</p>"#, escape_html(flag));
    }
    out.push_str("</section>\n");
}

fn overview(result: &RunResult, out: &mut String) {
    let overview = figures::overview(result);
    let span = overview.per_target.len();
    out.push_str(
        r#"<h3>Ramp overview</h3><table class="overview"><thead><tr><th colspan="2"></th>"#,
    );
    target_group_heads(result, span, out);
    out.push_str("</tr><tr><th>step</th><th>offered rps</th>");
    for _ in &result.targets {
        for h in &overview.per_target {
            let _ = write!(out, "<th>{}</th>", escape_html(h));
        }
    }
    out.push_str("</tr></thead><tbody>");
    for row in &overview.rows {
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td>",
            escape_html(&row.step),
            escape_html(&row.offered)
        );
        for cells in &row.per_target {
            for (j, cell) in cells.iter().enumerate() {
                let class = if j == 0 {
                    " class=\"first\""
                } else if cell == held_text(Some(false)) {
                    " class=\"worse\""
                } else {
                    ""
                };
                let _ = write!(out, "<td{class}>{}</td>", escape_html(cell));
            }
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table>");
}

/// One heading cell per target, in its colour, over the `span` columns of its figures.
fn target_group_heads(result: &RunResult, span: usize, out: &mut String) {
    for (i, target) in result.targets.iter().enumerate() {
        let _ = write!(
            out,
            r#"<th class="group" colspan="{span}" style="color:{c}">{n}</th>"#,
            c = color(i),
            n = escape_html(&target.name)
        );
    }
}

/// A step's table, then one per endpoint of a mix.
fn section_table(result: &RunResult, section: &Section, out: &mut String) {
    figure_table(result, &section.rows, out);
    if !section.endpoints.is_empty() {
        glance_table(result, section, out);
    }
    for (name, rows) in &section.endpoints {
        let _ = write!(
            out,
            r#"<h4 class="endpoint">endpoint {}</h4>"#,
            escape_html(name)
        );
        figure_table(result, rows, out);
    }
}

/// A line per endpoint of a mix with its few main figures, per target.
fn glance_table(result: &RunResult, section: &Section, out: &mut String) {
    let span = figures::GLANCE.len();
    out.push_str(
        r#"<h4 class="endpoint">endpoints</h4><table class="overview"><thead><tr><th></th>"#,
    );
    target_group_heads(result, span, out);
    out.push_str("</tr><tr><th>endpoint</th>");
    for _ in &result.targets {
        for (head, _) in figures::GLANCE {
            let _ = write!(out, "<th>{}</th>", escape_html(head));
        }
    }
    out.push_str("</tr></thead><tbody>");
    for (name, cells) in figures::glance(&section.endpoints, result.targets.len()) {
        let _ = write!(out, "<tr><td>{}</td>", escape_html(&name));
        for cell in cells {
            let _ = write!(out, "<td>{}</td>", escape_html(&cell));
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table>");
}

fn figure_table(result: &RunResult, rows: &[Row], out: &mut String) {
    out.push_str(r#"<table class="figures"><thead><tr><th>figure</th>"#);
    let first = result.targets.first().map_or("", |t| t.name.as_str());
    for (i, target) in result.targets.iter().enumerate() {
        let _ = write!(
            out,
            r#"<th style="color:{}">{}</th>"#,
            color(i),
            escape_html(&target.name)
        );
        if i > 0 {
            let _ = write!(
                out,
                "<th>{} / {}</th>",
                escape_html(&target.name),
                escape_html(first)
            );
        }
    }
    out.push_str("</tr></thead><tbody>");
    for Row {
        label,
        indent,
        cells,
        ratios,
    } in rows
    {
        let class = if *indent { r#" class="sub""# } else { "" };
        let _ = write!(out, "<tr{class}><th>{}</th>", escape_html(label));
        for (i, cell) in cells.iter().enumerate() {
            let _ = write!(out, "<td>{}</td>", escape_html(cell));
            if i > 0 {
                let (text, verdict) = &ratios[i - 1];
                let class = match verdict {
                    Verdict::Better => "ratio better",
                    Verdict::Worse => "ratio worse",
                    _ => "ratio",
                };
                let word = verdict.word();
                let _ = write!(
                    out,
                    r#"<td class="{class}">{}{}</td>"#,
                    escape_html(text),
                    if word.is_empty() {
                        String::new()
                    } else {
                        format!(" {word}")
                    }
                );
            }
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table>");
}

/// The x position of a step: its offered rate when every step has one, else its number.
fn x_of(step: &StepResult, by_rate: bool) -> f64 {
    if by_rate {
        step.offered_rps.unwrap_or(0.0)
    } else {
        f64::from(step.index + 1)
    }
}

fn line_series(
    result: &RunResult,
    by_rate: bool,
    suffix: &str,
    dash: Option<&'static str>,
    unit: &str,
    get: &dyn Fn(&StepResult) -> Option<f64>,
    fmt: fn(f64) -> String,
) -> Vec<Series> {
    result
        .targets
        .iter()
        .enumerate()
        .map(|(i, target)| {
            let steps: Vec<(&StepResult, f64)> = target
                .steps
                .iter()
                .filter_map(|s| get(s).map(|v| (s, v)))
                .collect();
            Series {
                name: format!("{}{suffix}", target.name),
                color: color(i),
                dash,
                markers: true,
                points: steps.iter().map(|(s, v)| (x_of(s, by_rate), *v)).collect(),
                titles: steps
                    .iter()
                    .map(|(s, v)| {
                        let at = match s.offered_rps {
                            Some(rps) if by_rate => format!("{} rps", fmt_rate(rps)),
                            _ => format!("step {}", s.index + 1),
                        };
                        format!("{}{suffix} at {at}: {} {unit}", target.name, fmt(*v))
                    })
                    .collect(),
            }
        })
        .filter(|s| !s.points.is_empty())
        .collect()
}

/// Reads one figure of a step, if it was measured.
type Figure = fn(&StepResult) -> Option<f64>;

fn plots(result: &RunResult, out: &mut String) {
    let indices = step_indices(result);
    if indices.is_empty() {
        return;
    }
    let all = || result.targets.iter().flat_map(|t| &t.steps);
    let has_cpu = all().any(|s| s.cpu_percent.is_some());
    let has_mem = all().any(|s| s.rss_mb.is_some() || s.pss_mb.is_some());
    if indices.len() == 1 {
        bar_plots(result, has_cpu, has_mem, out);
        return;
    }
    let axis = StepAxis::new(all().all(|s| s.offered_rps.is_some()), &indices);
    latency_plots(result, &axis, out);
    out.push_str(r#"<section><h2>Throughput, CPU and memory</h2><div class="grid">"#);
    throughput_plot(result, &axis, out);
    if has_cpu {
        cpu_plots(result, &axis, out);
    }
    if has_mem {
        memory_plot(result, &axis, out);
    }
    out.push_str("</div></section>\n");
}

/// The x axis of the per-step line charts: the offered rate when every step has one,
/// otherwise the step's number.
struct StepAxis {
    by_rate: bool,
    x_ticks: Option<Vec<(f64, String)>>,
}

impl StepAxis {
    fn new(by_rate: bool, indices: &[u32]) -> StepAxis {
        let x_ticks = (!by_rate).then(|| {
            indices
                .iter()
                .map(|i| (f64::from(i + 1), (i + 1).to_string()))
                .collect()
        });
        StepAxis { by_rate, x_ticks }
    }

    /// One line per target over this axis; the y axis from zero when linear.
    fn chart(
        &self,
        title: &str,
        y_label: &str,
        y_scale: Scale,
        series: Vec<Series>,
        diagonal: bool,
        thresholds: Vec<(f64, String)>,
    ) -> String {
        LineChart {
            title: title.to_owned(),
            x_label: if self.by_rate {
                "offered rate (requests/s)"
            } else {
                "step"
            }
            .to_owned(),
            y_label: y_label.to_owned(),
            x_scale: Scale::Linear,
            y_scale,
            x_ticks: self.x_ticks.clone(),
            y_from_zero: y_scale == Scale::Linear,
            series,
            diagonal,
            thresholds,
            width: NARROW,
        }
        .render()
    }
}

/// A chart per percentile, each with the run's SLO bound on it when there is one.
fn latency_plots(result: &RunResult, axis: &StepAxis, out: &mut String) {
    out.push_str(r#"<section><h2>Latency per step</h2><p class="note">Log scale. Latency counts from each request's intended send time, so queueing in an overloaded target shows here.</p><div class="grid">"#);
    let percentiles: [(&str, Figure); 4] = [
        ("p50", |s| s.latency_ms.map(|l| l.p50)),
        ("p90", |s| s.latency_ms.map(|l| l.p90)),
        ("p99", |s| s.latency_ms.map(|l| l.p99)),
        ("p99.9", |s| s.latency_ms.map(|l| l.p999)),
    ];
    // The run's own SLO, read by the load engine's parser: one grammar.
    let slo = result
        .config
        .slo
        .as_deref()
        .and_then(|text| scalpel_load::Slo::parse(text).ok());
    for (name, get) in percentiles {
        let series = line_series(result, axis.by_rate, "", None, "ms", &get, fmt_ms);
        let limit = slo.as_ref().and_then(|slo| slo.latency_bound_ms(name));
        let thresholds = limit
            .map(|ms| vec![(ms, format!("SLO {name} < {} ms", fmt_ms(ms)))])
            .unwrap_or_default();
        out.push_str(&axis.chart(
            &format!("{name} latency"),
            "milliseconds",
            Scale::Log,
            series,
            false,
            thresholds,
        ));
    }
    out.push_str("</div></section>\n");
}

/// Achieved rate per step, against the offered rate's diagonal when the steps have one.
fn throughput_plot(result: &RunResult, axis: &StepAxis, out: &mut String) {
    let mut series = line_series(
        result,
        axis.by_rate,
        "",
        None,
        "rps",
        &|s| Some(s.achieved_rps),
        fmt_rate,
    );
    let title = if axis.by_rate {
        "Achieved vs offered rate (dashed: achieved = offered)"
    } else {
        "Achieved rate"
    };
    for s in &mut series {
        s.name = format!("{} achieved", s.name);
    }
    out.push_str(&axis.chart(
        title,
        "requests/s",
        Scale::Linear,
        series,
        axis.by_rate,
        Vec::new(),
    ));
}

/// CPU of each target's process tree (mean and peak), and requests per fully used core.
fn cpu_plots(result: &RunResult, axis: &StepAxis, out: &mut String) {
    let by_rate = axis.by_rate;
    let mut series = line_series(
        result,
        by_rate,
        " mean",
        None,
        "%",
        &|s| s.cpu_percent,
        fmt_amount,
    );
    series.extend(line_series(
        result,
        by_rate,
        " peak",
        Some("2 3"),
        "%",
        &|s| s.cpu_percent_peak,
        fmt_amount,
    ));
    out.push_str(&axis.chart(
        "CPU of the target's process tree (100% = one core)",
        "CPU %",
        Scale::Linear,
        series,
        false,
        Vec::new(),
    ));
    let series = line_series(
        result,
        by_rate,
        "",
        None,
        "rps per core",
        &figures::rps_per_core,
        fmt_rate,
    );
    out.push_str(&axis.chart(
        "Efficiency: requests/s per fully used core",
        "requests/s per core",
        Scale::Linear,
        series,
        false,
        Vec::new(),
    ));
}

/// RSS and PSS of each target's process tree.
fn memory_plot(result: &RunResult, axis: &StepAxis, out: &mut String) {
    let by_rate = axis.by_rate;
    let mut series = line_series(
        result,
        by_rate,
        " RSS",
        None,
        "MiB",
        &|s| s.rss_mb,
        fmt_amount,
    );
    series.extend(line_series(
        result,
        by_rate,
        " PSS",
        Some("6 3"),
        "MiB",
        &|s| s.pss_mb,
        fmt_amount,
    ));
    out.push_str(&axis.chart(
        "Memory of the target's process tree (mean per step)",
        "MiB",
        Scale::Linear,
        series,
        false,
        Vec::new(),
    ));
}

fn bar_plots(result: &RunResult, has_cpu: bool, has_mem: bool, out: &mut String) {
    let group = |get: &dyn Fn(&StepResult) -> Vec<Option<f64>>| -> Vec<(String, &'static str, Vec<Option<f64>>)> {
        result
            .targets
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), color(i), t.steps.first().map(get).unwrap_or_default()))
            .collect()
    };
    let strings = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    out.push_str(r#"<section><h2>Latency, throughput, CPU and memory</h2><div class="grid">"#);
    out.push_str(
        &BarChart {
            title: "Latency".to_owned(),
            y_label: "milliseconds".to_owned(),
            categories: strings(&["mean", "p50", "p90", "p99", "p99.9", "max"]),
            groups: group(&|s| match s.latency_ms {
                Some(l) => [l.mean, l.p50, l.p90, l.p99, l.p999, l.max]
                    .map(Some)
                    .to_vec(),
                None => vec![None; 6],
            }),
            value_label: fmt_ms,
        }
        .render(),
    );
    let mut rate_categories = strings(&["achieved"]);
    if has_cpu {
        rate_categories.push("per CPU core".to_owned());
    }
    out.push_str(
        &BarChart {
            title: "Throughput".to_owned(),
            y_label: "requests/s".to_owned(),
            categories: rate_categories,
            groups: group(&|s| {
                let mut v = vec![Some(s.achieved_rps)];
                if has_cpu {
                    v.push(figures::rps_per_core(s));
                }
                v
            }),
            value_label: fmt_rate,
        }
        .render(),
    );
    if has_cpu {
        out.push_str(
            &BarChart {
                title: "CPU of the target's process tree (100% = one core)".to_owned(),
                y_label: "CPU %".to_owned(),
                categories: strings(&["mean", "peak"]),
                groups: group(&|s| vec![s.cpu_percent, s.cpu_percent_peak]),
                value_label: fmt_amount,
            }
            .render(),
        );
    }
    if has_mem {
        out.push_str(
            &BarChart {
                title: "Memory of the target's process tree".to_owned(),
                y_label: "MiB".to_owned(),
                categories: strings(&["RSS mean", "RSS peak", "PSS mean", "PSS peak"]),
                groups: group(&|s| vec![s.rss_mb, s.rss_mb_peak, s.pss_mb, s.pss_mb_peak]),
                value_label: fmt_amount,
            }
            .render(),
        );
    }
    out.push_str("</div></section>\n");
}

/// The percentile spectrum of each target at the comparison step, on HdrHistogram's usual
/// axes: x = 1 / (1 − quantile) on a log scale, so 90%, 99%, 99.9% … are evenly spaced.
fn distribution(result: &RunResult, out: &mut String) {
    let Some(at) = comparison_step(result) else {
        return;
    };
    let mut series = Vec::new();
    let mut widest: f64 = 10.0;
    for (i, target) in result.targets.iter().enumerate() {
        if let Some(points) = spectrum(target, at) {
            widest = widest.max(points.last().map_or(10.0, |p| p.0));
            series.push(Series {
                name: target.name.clone(),
                color: color(i),
                dash: None,
                markers: false,
                points,
                titles: Vec::new(),
            });
        }
    }
    if series.is_empty() {
        return;
    }
    let decades = widest.log10().ceil().clamp(1.0, 6.0) as i32;
    let labels = ["0%", "90%", "99%", "99.9%", "99.99%", "99.999%", "99.9999%"];
    let x_ticks = (0..=decades)
        .map(|e| (10f64.powi(e), labels[e as usize].to_owned()))
        .collect();
    let step_name = step_of(&result.targets[0], at)
        .and_then(|s| s.offered_rps)
        .map_or_else(
            || format!("step {}", at + 1),
            |r| format!("step {}, {} rps offered", at + 1, fmt_rate(r)),
        );
    let chart = LineChart {
        title: format!("Latency by percentile ({step_name})"),
        x_label: "percentile".to_owned(),
        y_label: "milliseconds".to_owned(),
        x_scale: Scale::Log,
        y_scale: Scale::Linear,
        x_ticks: Some(x_ticks),
        y_from_zero: true,
        series,
        diagonal: false,
        thresholds: Vec::new(),
        width: WIDE,
    };
    let _ = writeln!(
        out,
        r#"<section><h2>Latency distribution</h2><p class="note">At the last step every target held{slo}: the whole spectrum, from each target's exact histogram.</p>{}</section>"#,
        chart.render(),
        slo = if result.config.slo.is_some() {
            " the SLO"
        } else {
            ""
        }
    );
}

/// (1 / (1 − q), latency ms) along the histogram, up to its largest value.
fn spectrum(target: &TargetResult, index: u32) -> Option<Vec<(f64, f64)>> {
    let step = step_of(target, index)?;
    let histogram = decode_histogram(&step.histogram).ok()?;
    if histogram.is_empty() {
        return None;
    }
    let cap = (histogram.len() as f64).clamp(10.0, 1e6);
    let mut points: Vec<(f64, f64)> = histogram
        .iter_quantiles(5)
        .map(|v| (v.quantile_iterated_to(), v.value_iterated_to()))
        .filter(|(q, _)| *q < 1.0)
        .map(|(q, value)| ((1.0 / (1.0 - q)).min(cap), value as f64 / 1000.0))
        .collect();
    points.push((cap, histogram.max() as f64 / 1000.0));
    Some(points)
}
