//! The terminal summary table.

use std::fmt::Write as _;

use scalpel_load::result::RunResult;

use crate::figures::{self, Verdict, step_indices};

/// The summary table of a run, for a terminal: a header saying what was run, a ramp overview
/// (one line per step) when there are several steps, then one block per step with a row per
/// figure, a column per target and, from the second target on, its ratio to the first
/// marked `better` or `worse` by the figure's direction; last the breaking points.
///
/// Plain ASCII; two targets fit in 100 columns.
pub fn summary_table(result: &RunResult) -> String {
    let mut out = String::new();
    header(result, &mut out);
    if step_indices(result).len() > 1 {
        overview(result, &mut out);
    }
    for section in figures::sections(result) {
        let _ = writeln!(out, "\n{}", section.title);
        figure_grid(result, &section.rows, &mut out);
        for note in &section.notes {
            for line in wrap(note, WIDTH, "  ") {
                let _ = writeln!(out, "{line}");
            }
        }
        // A mix: the endpoints at a glance, then every figure for each endpoint's requests.
        if !section.endpoints.is_empty() {
            let _ = writeln!(out, "\n{}: endpoints", section.title);
            let mut grid = Grid::default();
            let mut groups = vec![(String::new(), 1)];
            let mut head = vec!["endpoint".to_owned()];
            for target in &result.targets {
                groups.push((target.name.clone(), figures::GLANCE.len()));
                head.extend(figures::GLANCE.iter().map(|(h, _)| (*h).to_owned()));
            }
            if result.targets.len() > 1 {
                grid.groups = groups;
            }
            grid.rows.push(head);
            grid.rule_after_first = true;
            for (name, cells) in figures::glance(&section.endpoints, result.targets.len()) {
                let mut line = vec![name];
                line.extend(cells);
                grid.rows.push(line);
            }
            grid.render(&mut out);
        }
        for (name, rows) in &section.endpoints {
            let _ = writeln!(out, "\n{}: endpoint {name}", section.title);
            figure_grid(result, rows, &mut out);
        }
    }
    breaking_points(result, &mut out);
    shards(result, &mut out);
    out
}

/// A row per figure, a column per target and its ratio to the first.
fn figure_grid(result: &RunResult, rows: &[figures::Row], out: &mut String) {
    let mut grid = Grid::default();
    let mut head = vec![String::new()];
    for (i, target) in result.targets.iter().enumerate() {
        head.push(target.name.clone());
        if i > 0 {
            head.push(format!("{}/{}", target.name, result.targets[0].name));
        }
    }
    grid.rows.push(head);
    grid.rule_after_first = true;
    for row in rows {
        let label = if row.indent {
            format!("  {}", row.label)
        } else {
            row.label.clone()
        };
        let mut line = vec![label];
        for (i, cell) in row.cells.iter().enumerate() {
            line.push(cell.clone());
            if i > 0 {
                line.push(ratio_cell(&row.ratios[i - 1]));
            }
        }
        grid.rows.push(line);
    }
    grid.render(out);
}

/// A merged shard set: a row per shard with its own totals (a slow generator shows as
/// `behind`), then what the merge flagged.
fn shards(result: &RunResult, out: &mut String) {
    let Some(table) = crate::shards::table(result) else {
        return;
    };
    let _ = writeln!(out, "\n{}", table.title);
    let mut grid = Grid::default();
    let mut head: Vec<String> = table.head.iter().map(|h| (*h).to_owned()).collect();
    let any_behind = table.behind.iter().any(|b| *b);
    if any_behind {
        head.push(String::new());
    }
    grid.rows.push(head);
    grid.rule_after_first = true;
    grid.left_columns = (1..table.head.iter().position(|h| *h == "steps").unwrap_or(2)).collect();
    for (mut row, behind) in table.rows.into_iter().zip(table.behind) {
        if any_behind {
            row.push(if behind { "behind" } else { "" }.to_owned());
        }
        grid.rows.push(row);
    }
    grid.render(out);
    for flag in &table.flags {
        for line in wrap(&format!("! {flag}"), WIDTH, "  ") {
            let _ = writeln!(out, "{line}");
        }
    }
}

fn header(result: &RunResult, out: &mut String) {
    let c = &result.config;
    let m = &result.machine;
    let _ = writeln!(
        out,
        "{} run of {} on {} ({} cpus, {}, kernel {})",
        result.tool,
        result.started_at,
        if m.hosts.is_empty() {
            "?".to_owned()
        } else {
            m.hosts.join(", ")
        },
        m.cpus,
        m.cpu_model,
        m.kernel
    );
    let mut model = format!("{} model, {} connections", c.model, c.connections);
    if let Some(n) = c.max_in_flight {
        let _ = write!(model, ", at most {n} in flight");
    }
    if let Some(s) = c.step_duration_s {
        let _ = write!(model, ", {s} s per step");
    }
    if let Some(n) = c.requests_per_step {
        let _ = write!(model, ", {n} requests per step");
    }
    if let Some(slo) = &c.slo {
        let _ = write!(model, ", SLO {slo}");
    }
    let _ = writeln!(out, "{model}");
    if let Some(shard) = &result.shard {
        let start = shard
            .start_at
            .as_deref()
            .map(|s| format!(", common start {s}"))
            .unwrap_or_default();
        let late = shard
            .start_late_s
            .filter(|l| *l > 0.0)
            .map(|l| format!(", started {l:.3} s late"))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "shard {}/{} of run {}{start}{late}: connections, rates and counts are this shard's part",
            shard.index + 1,
            shard.count,
            shard.run_id
        );
    }
    if result.interrupted {
        let _ = writeln!(
            out,
            "INTERRUPTED: stopped by a signal; the last step run is partial, later steps were not run"
        );
    }
    let _ = writeln!(out, "request: {}", c.request);
    if let Some(r) = &c.recorded {
        for line in figures::recorded_lines(r) {
            let text = line.trim_start();
            let indent = &line[..line.len() - text.len()];
            for part in wrap(text, WIDTH - indent.len(), "  ") {
                let _ = writeln!(out, "{indent}{part}");
            }
        }
    }
    for target in &result.targets {
        let _ = writeln!(out, "target {}: {}", target.name, target.url);
        if let Some(line) = figures::connection_line(target) {
            let _ = writeln!(out, "  {line}");
        }
    }
    if result.targets.len() > 1 {
        let _ = writeln!(
            out,
            "ratios: target / {}; lower is better for latency, errors, CPU and memory, \
             higher for rates",
            result.targets[0].name
        );
    }
}

fn ratio_cell((text, verdict): &(String, Verdict)) -> String {
    match verdict.word() {
        "" => text.clone(),
        word => format!("{text} {word}"),
    }
}

/// One line per step: the few figures that show where each target gave in.
fn overview(result: &RunResult, out: &mut String) {
    let overview = figures::overview(result);
    let mut grid = Grid::default();
    let mut groups = vec![(String::new(), 2)];
    let mut head = vec!["step".to_owned(), "offered".to_owned()];
    for target in &result.targets {
        groups.push((target.name.clone(), overview.per_target.len()));
        head.extend(overview.per_target.iter().map(|h| (*h).to_owned()));
    }
    grid.groups = groups;
    grid.rows.push(head);
    grid.rule_after_first = true;
    for row in overview.rows {
        let mut line = vec![row.step, row.offered];
        line.extend(row.per_target.into_iter().flatten());
        grid.rows.push(line);
    }
    let _ = writeln!(out, "\nramp overview");
    grid.render(out);
}

fn breaking_points(result: &RunResult, out: &mut String) {
    let Some(slo) = &result.config.slo else {
        return;
    };
    let _ = writeln!(out, "\nbreaking point (SLO {slo})");
    let mut grid = Grid::default();
    for row in figures::breaking_points(result) {
        grid.rows
            .push(vec![row.target, row.rate, ratio_cell(&row.ratio), row.why]);
    }
    grid.left_columns = vec![0, 3];
    grid.wrap_last = true;
    grid.render(out);
}

/// The width the table keeps to: two targets fit.
const WIDTH: usize = 100;

/// Splits `text` at spaces into lines of at most `width` characters (a longer word stays
/// whole), the lines after the first starting with `indent`.
fn wrap(text: &str, width: usize, indent: &str) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        let start = if lines.is_empty() { "" } else { indent };
        if line.is_empty() {
            line = format!("{start}{word}");
        } else if line.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::replace(&mut line, format!("{indent}{word}")));
        } else {
            line.push(' ');
            line.push_str(word);
        }
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

/// Right-aligned columns (except the first and any listed), two spaces apart.
#[derive(Debug, Default)]
pub(crate) struct Grid {
    /// Optional group titles above the header, each spanning some columns.
    pub(crate) groups: Vec<(String, usize)>,
    pub(crate) rows: Vec<Vec<String>>,
    pub(crate) rule_after_first: bool,
    pub(crate) left_columns: Vec<usize>,
    /// Wrap a last cell that would pass [`WIDTH`] onto lines aligned under it.
    pub(crate) wrap_last: bool,
}

const GAP: &str = "  ";

impl Grid {
    pub(crate) fn render(&self, out: &mut String) {
        let columns = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let mut widths = vec![0; columns];
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate() {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
        // Widen the last column of a group whose title is longer than its columns.
        let mut start = 0;
        for (title, span) in &self.groups {
            let end = (start + span).min(columns);
            let inner: usize =
                widths[start..end].iter().sum::<usize>() + GAP.len() * span.saturating_sub(1);
            if title.chars().count() > inner && end > start {
                widths[end - 1] += title.chars().count() - inner;
            }
            start = end;
        }
        if !self.groups.is_empty() {
            let mut line = String::new();
            let mut start = 0;
            for (title, span) in &self.groups {
                let end = (start + span).min(columns);
                let inner: usize =
                    widths[start..end].iter().sum::<usize>() + GAP.len() * span.saturating_sub(1);
                if start > 0 {
                    line.push_str(GAP);
                }
                let _ = write!(line, "{title:^inner$}");
                start = end;
            }
            let _ = writeln!(out, "{}", line.trim_end());
        }
        let last = columns.saturating_sub(1);
        let last_start: usize = widths[..last].iter().map(|w| w + GAP.len()).sum();
        let last_width = WIDTH.saturating_sub(last_start).max(20);
        for (r, row) in self.rows.iter().enumerate() {
            let mut line = String::new();
            let mut more = Vec::new();
            for (i, width) in widths.iter().enumerate() {
                let mut cell = row.get(i).map_or("", String::as_str);
                if i > 0 {
                    line.push_str(GAP);
                }
                let wrapped;
                if self.wrap_last && i == last && cell.chars().count() > last_width {
                    wrapped = wrap(cell, last_width, "");
                    cell = &wrapped[0];
                    more = wrapped[1..].to_vec();
                }
                if i == 0 || self.left_columns.contains(&i) {
                    let _ = write!(line, "{cell:<width$}");
                } else {
                    let _ = write!(line, "{cell:>width$}");
                }
            }
            let _ = writeln!(out, "{}", line.trim_end());
            for rest in more {
                let _ = writeln!(out, "{:last_start$}{rest}", "");
            }
            if r == 0 && self.rule_after_first {
                let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
                let _ = writeln!(out, "{}", rule.join(GAP));
            }
        }
    }
}
