//! Inline SVG charts: lines over a numeric x axis (linear or log), and grouped bars.
//! No scripts, no external resources; hover titles come from SVG `<title>` elements.

use std::fmt::Write as _;

use crate::escape::escape_html;

/// Colours per target (Tableau 10): distinct, colour-blind friendly, print well.
const PALETTE: [&str; 8] = [
    "#4e79a7", "#e15759", "#59a14f", "#f28e2b", "#b07aa1", "#76b7b2", "#edc948", "#9c755f",
];

/// The colour of series `i` in the palette (Tableau 10, colour-blind friendly), repeating
/// after eight, so target *i* has the same colour on every chart.
pub fn color(i: usize) -> &'static str {
    PALETTE[i % PALETTE.len()]
}

const WIDTH: f64 = 540.0;
const HEIGHT: f64 = 300.0;
const LEFT: f64 = 62.0;
const RIGHT: f64 = 28.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 46.0;

/// How an axis maps values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    /// Evenly spaced values.
    Linear,
    /// Powers of ten evenly spaced (latencies); values at or below zero are not drawn.
    Log,
}

/// One line of a [`LineChart`].
#[derive(Debug, Clone)]
pub struct Series {
    /// The legend text.
    pub name: String,
    /// A CSS colour, usually [`color`]`(i)`.
    pub color: &'static str,
    /// SVG dash pattern; `None` for a solid line.
    pub dash: Option<&'static str>,
    /// Draw a marker (with a hover title) at every point.
    pub markers: bool,
    /// `(x, y)` points, drawn in order.
    pub points: Vec<(f64, f64)>,
    /// Hover text per point (same length as `points`, or empty).
    pub titles: Vec<String>,
}

/// A line chart with every choice open: the scales, the x ticks, where y starts. The
/// simpler [`crate::Chart`] is built on it.
#[derive(Debug, Clone)]
pub struct LineChart {
    /// The title drawn in the chart (and its accessible name).
    pub title: String,
    /// The x axis label.
    pub x_label: String,
    /// The y axis label.
    pub y_label: String,
    /// How x maps to the width.
    pub x_scale: Scale,
    /// How y maps to the height.
    pub y_scale: Scale,
    /// Tick positions and labels for x; computed when `None`.
    pub x_ticks: Option<Vec<(f64, String)>>,
    /// A linear y axis includes 0.
    pub y_from_zero: bool,
    /// The lines, drawn in order.
    pub series: Vec<Series>,
    /// A dashed grey y = x line (offered vs achieved).
    pub diagonal: bool,
    /// Horizontal limits drawn as labelled dashed lines (an SLO bound).
    pub thresholds: Vec<(f64, String)>,
    /// Drawing width ([`NARROW`] or [`WIDE`]); the height stays the same.
    pub width: f64,
}

/// The width of a chart in a two-column grid.
pub const NARROW: f64 = WIDTH;
/// The width of a chart that has a row to itself.
pub const WIDE: f64 = 2.0 * WIDTH;

struct Axis {
    scale: Scale,
    lo: f64,
    hi: f64,
    from: f64,
    to: f64,
}

impl Axis {
    fn map(&self, v: f64) -> f64 {
        let (v, lo, hi) = match self.scale {
            Scale::Linear => (v, self.lo, self.hi),
            Scale::Log => (v.max(self.lo).log10(), self.lo.log10(), self.hi.log10()),
        };
        let t = if hi > lo { (v - lo) / (hi - lo) } else { 0.5 };
        self.from + t * (self.to - self.from)
    }
}

/// About five round ticks (1, 2, 5 × 10^k) covering `lo..=hi`.
fn linear_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let span = (hi - lo).max(f64::MIN_POSITIVE);
    let raw = span / 5.0;
    let magnitude = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * magnitude)
        .find(|s| span / s <= 6.0)
        .unwrap_or(10.0 * magnitude);
    let mut ticks = Vec::new();
    let mut t = (lo / step).ceil() * step;
    while t <= hi + step * 1e-9 {
        ticks.push(if t.abs() < step * 1e-9 { 0.0 } else { t });
        t += step;
    }
    ticks
}

/// Powers of ten within `lo..=hi`, with 2 and 5 between them when the range is narrow.
fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let (a, b) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
    let multipliers: &[f64] = if b - a <= 2 { &[1.0, 2.0, 5.0] } else { &[1.0] };
    let mut ticks = Vec::new();
    for e in a..=b {
        for m in multipliers {
            let t = m * 10f64.powi(e);
            if t >= lo * 0.999 && t <= hi * 1.001 {
                ticks.push(t);
            }
        }
    }
    ticks
}

/// A short tick label: `1,500`, `0.5`, `20k`, `1.5M`.
pub fn tick_label(v: f64) -> String {
    let a = v.abs();
    let trim = |s: String| {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_owned()
        } else {
            s
        }
    };
    if a >= 1e6 {
        format!("{}M", trim(format!("{:.2}", v / 1e6)))
    } else if a >= 1e3 {
        format!("{}k", trim(format!("{:.1}", v / 1e3)))
    } else if a >= 1.0 || a == 0.0 {
        trim(format!("{v:.2}"))
    } else {
        trim(format!("{v:.4}"))
    }
}

fn bounds(values: impl Iterator<Item = f64>, scale: Scale, from_zero: bool) -> (f64, f64) {
    let mut lo = f64::INFINITY;
    let mut hi = f64::NEG_INFINITY;
    for v in values.filter(|v| v.is_finite() && (scale == Scale::Linear || *v > 0.0)) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !lo.is_finite() {
        return if scale == Scale::Log {
            (1.0, 10.0)
        } else {
            (0.0, 1.0)
        };
    }
    match scale {
        Scale::Linear => {
            if from_zero {
                lo = lo.min(0.0);
            }
            if hi - lo <= f64::EPSILON {
                hi = lo + if lo == 0.0 { 1.0 } else { lo.abs() * 0.1 };
            }
            // Round outwards to ticks so lines never touch the frame.
            let ticks = linear_ticks(lo, hi);
            let step = if ticks.len() > 1 {
                ticks[1] - ticks[0]
            } else {
                hi - lo
            };
            let lo = if from_zero && lo >= 0.0 {
                0.0
            } else {
                (lo / step).floor() * step
            };
            ((lo), (hi / step).ceil() * step)
        }
        Scale::Log => {
            let lo = 10f64.powf(lo.log10().floor());
            let mut hi = 10f64.powf(hi.log10().ceil());
            if hi <= lo {
                hi = lo * 10.0;
            }
            (lo, hi)
        }
    }
}

fn open_svg(out: &mut String, title: &str, width: f64) {
    let _ = write!(
        out,
        r#"<svg class="chart" viewBox="0 0 {width} {HEIGHT}" width="{width}" height="{HEIGHT}" role="img" aria-label="{t}"><title>{t}</title><text class="chart-title" x="{LEFT}" y="18">{t}</text>"#,
        t = escape_html(title)
    );
}

fn legend(out: &mut String, entries: &[(String, &'static str, Option<&'static str>)]) {
    let mut x = LEFT;
    for (name, color, dash) in entries {
        let dash_attr = dash
            .map(|d| format!(r#" stroke-dasharray="{d}""#))
            .unwrap_or_default();
        let _ = write!(
            out,
            r#"<line x1="{x}" y1="30" x2="{x2}" y2="30" stroke="{color}" stroke-width="2.5"{dash_attr}/><text class="legend" x="{tx}" y="34">{name}</text>"#,
            x2 = x + 18.0,
            tx = x + 22.0,
            name = escape_html(name)
        );
        x += 30.0 + 6.5 * name.chars().count() as f64;
    }
}

impl LineChart {
    /// The chart as one `<svg>` element: no scripts, no external resources.
    pub fn render(&self) -> String {
        let mut out = String::new();
        open_svg(&mut out, &self.title, self.width);
        let (x, y) = self.axes();
        self.grid(&x, &y, &mut out);
        self.frame_and_labels(&mut out);
        self.reference_lines(&x, &y, &mut out);
        for series in &self.series {
            polyline(series, &x, &y, &mut out);
        }
        let entries: Vec<_> = self
            .series
            .iter()
            .map(|s| (s.name.clone(), s.color, s.dash))
            .collect();
        legend(&mut out, &entries);
        out.push_str("</svg>");
        out
    }

    /// The x and y axes over the points (and the limits, and the diagonal's range), rounded
    /// outwards to ticks.
    fn axes(&self) -> (Axis, Axis) {
        let xs = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.0));
        let ys = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1));
        let (xlo, xhi) = match &self.x_ticks {
            Some(ticks) if !ticks.is_empty() => (
                ticks.iter().map(|t| t.0).fold(f64::INFINITY, f64::min),
                ticks.iter().map(|t| t.0).fold(f64::NEG_INFINITY, f64::max),
            ),
            _ => bounds(xs, self.x_scale, false),
        };
        let limits = self.thresholds.iter().map(|t| t.0);
        let (mut ylo, mut yhi) = bounds(ys.chain(limits), self.y_scale, self.y_from_zero);
        if self.diagonal {
            let (dlo, dhi) = bounds(
                [ylo, yhi, xlo, xhi].into_iter(),
                self.y_scale,
                self.y_from_zero,
            );
            ylo = ylo.min(dlo);
            yhi = yhi.max(dhi);
        }
        let x = Axis {
            scale: self.x_scale,
            lo: xlo,
            hi: xhi,
            from: LEFT,
            to: self.width - RIGHT,
        };
        let y = Axis {
            scale: self.y_scale,
            lo: ylo,
            hi: yhi,
            from: HEIGHT - BOTTOM,
            to: TOP,
        };
        (x, y)
    }

    /// Grid lines with their tick labels, y then x.
    fn grid(&self, x: &Axis, y: &Axis, out: &mut String) {
        let y_ticks = match self.y_scale {
            Scale::Linear => linear_ticks(y.lo, y.hi),
            Scale::Log => log_ticks(y.lo, y.hi),
        };
        for t in &y_ticks {
            let py = y.map(*t);
            let _ = write!(
                out,
                r#"<line class="grid" x1="{LEFT}" y1="{py:.1}" x2="{x2}" y2="{py:.1}"/><text class="tick" x="{tx}" y="{ty:.1}" text-anchor="end">{l}</text>"#,
                x2 = self.width - RIGHT,
                tx = LEFT - 6.0,
                ty = py + 4.0,
                l = escape_html(&tick_label(*t))
            );
        }
        let x_ticks: Vec<(f64, String)> = match &self.x_ticks {
            Some(ticks) => ticks.clone(),
            None => match self.x_scale {
                Scale::Linear => linear_ticks(x.lo, x.hi),
                Scale::Log => log_ticks(x.lo, x.hi),
            }
            .into_iter()
            .map(|t| (t, tick_label(t)))
            .collect(),
        };
        for (t, label) in &x_ticks {
            let px = x.map(*t);
            let _ = write!(
                out,
                r#"<line class="grid" x1="{px:.1}" y1="{TOP}" x2="{px:.1}" y2="{y2}"/><text class="tick" x="{px:.1}" y="{ty}" text-anchor="middle">{l}</text>"#,
                y2 = HEIGHT - BOTTOM,
                ty = HEIGHT - BOTTOM + 16.0,
                l = escape_html(label)
            );
        }
    }

    /// The dashed y = x diagonal and the labelled limits.
    fn reference_lines(&self, x: &Axis, y: &Axis, out: &mut String) {
        if self.diagonal {
            let (a, b) = (x.lo.max(y.lo), x.hi.min(y.hi));
            let _ = write!(
                out,
                r##"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#9aa3ad" stroke-width="1.2" stroke-dasharray="5 4"/>"##,
                x.map(a),
                y.map(a),
                x.map(b),
                y.map(b)
            );
        }
        for (limit, label) in &self.thresholds {
            let py = y.map(*limit);
            let _ = write!(
                out,
                r##"<line x1="{LEFT}" y1="{py:.1}" x2="{x2}" y2="{py:.1}" stroke="#b42318" stroke-width="1.2" stroke-dasharray="6 4"/><text class="limit" x="{tx}" y="{ty:.1}" text-anchor="end">{l}</text>"##,
                x2 = self.width - RIGHT,
                tx = self.width - RIGHT - 4.0,
                ty = py - 4.0,
                l = escape_html(label)
            );
        }
    }

    fn frame_and_labels(&self, out: &mut String) {
        let _ = write!(
            out,
            r#"<rect class="frame" x="{LEFT}" y="{TOP}" width="{w}" height="{h}"/><text class="axis-label" x="{cx}" y="{ly}" text-anchor="middle">{xl}</text><text class="axis-label" transform="translate(14 {cy}) rotate(-90)" text-anchor="middle">{yl}</text>"#,
            w = self.width - LEFT - RIGHT,
            h = HEIGHT - TOP - BOTTOM,
            cx = (LEFT + self.width - RIGHT) / 2.0,
            ly = HEIGHT - 8.0,
            cy = (TOP + HEIGHT - BOTTOM) / 2.0,
            xl = escape_html(&self.x_label),
            yl = escape_html(&self.y_label)
        );
    }
}

/// One series as a polyline, with a marker and hover title at each point when asked.
fn polyline(series: &Series, x: &Axis, y: &Axis, out: &mut String) {
    let points: Vec<String> = series
        .points
        .iter()
        .map(|(px, py)| format!("{:.1},{:.1}", x.map(*px), y.map(*py)))
        .collect();
    let dash = series
        .dash
        .map(|d| format!(r#" stroke-dasharray="{d}""#))
        .unwrap_or_default();
    let _ = write!(
        out,
        r#"<polyline class="series" data-series="{n}" fill="none" stroke="{c}" stroke-width="2" stroke-linejoin="round"{dash} points="{p}"/>"#,
        n = escape_html(&series.name),
        c = series.color,
        p = points.join(" ")
    );
    if !series.markers {
        return;
    }
    for (i, (px, py)) in series.points.iter().enumerate() {
        let title = series
            .titles
            .get(i)
            .map(|t| escape_html(t))
            .unwrap_or_default();
        let _ = write!(
            out,
            r#"<circle cx="{:.1}" cy="{:.1}" r="3.2" fill="{c}" stroke="white" stroke-width="1"><title>{title}</title></circle>"#,
            x.map(*px),
            y.map(*py),
            c = series.color
        );
    }
}

/// Bars grouped by category, one bar per target, value printed above each bar.
#[derive(Debug, Clone)]
pub struct BarChart {
    /// The title drawn in the chart (and its accessible name).
    pub title: String,
    /// The y axis label.
    pub y_label: String,
    /// The groups along x.
    pub categories: Vec<String>,
    /// Per target: name, colour, one value per category (`None` = not measured).
    pub groups: Vec<(String, &'static str, Vec<Option<f64>>)>,
    /// How to print a value above its bar.
    pub value_label: fn(f64) -> String,
}

impl BarChart {
    /// The chart as one `<svg>` element: no scripts, no external resources.
    pub fn render(&self) -> String {
        let mut out = String::new();
        open_svg(&mut out, &self.title, WIDTH);
        let values = self
            .groups
            .iter()
            .flat_map(|g| g.2.iter().flatten().copied());
        let (lo, hi) = bounds(values, Scale::Linear, true);
        let y = Axis {
            scale: Scale::Linear,
            lo,
            hi,
            from: HEIGHT - BOTTOM,
            to: TOP,
        };
        for t in linear_ticks(lo, hi) {
            let py = y.map(t);
            let _ = write!(
                out,
                r#"<line class="grid" x1="{LEFT}" y1="{py:.1}" x2="{x2}" y2="{py:.1}"/><text class="tick" x="{tx}" y="{ty:.1}" text-anchor="end">{l}</text>"#,
                x2 = WIDTH - RIGHT,
                tx = LEFT - 6.0,
                ty = py + 4.0,
                l = escape_html(&tick_label(t))
            );
        }
        let _ = write!(
            out,
            r#"<rect class="frame" x="{LEFT}" y="{TOP}" width="{w}" height="{h}"/><text class="axis-label" transform="translate(14 {cy}) rotate(-90)" text-anchor="middle">{yl}</text>"#,
            w = WIDTH - LEFT - RIGHT,
            h = HEIGHT - TOP - BOTTOM,
            cy = (TOP + HEIGHT - BOTTOM) / 2.0,
            yl = escape_html(&self.y_label)
        );
        let n = self.categories.len().max(1) as f64;
        let slot = (WIDTH - LEFT - RIGHT) / n;
        let bars = self.groups.len().max(1) as f64;
        let bar = (slot * 0.7 / bars).min(48.0);
        for (c, category) in self.categories.iter().enumerate() {
            let center = LEFT + slot * (c as f64 + 0.5);
            let _ = write!(
                out,
                r#"<text class="tick" x="{center:.1}" y="{ty}" text-anchor="middle">{l}</text>"#,
                ty = HEIGHT - BOTTOM + 16.0,
                l = escape_html(category)
            );
            for (g, (name, color, values)) in self.groups.iter().enumerate() {
                let Some(v) = values.get(c).copied().flatten() else {
                    continue;
                };
                let x0 = center - bar * bars / 2.0 + bar * g as f64;
                let top = y.map(v);
                let base = y.map(0.0);
                let _ = write!(
                    out,
                    r#"<rect x="{x0:.1}" y="{top:.1}" width="{w:.1}" height="{h:.1}" fill="{color}"><title>{t}</title></rect><text class="bar-value" x="{tx:.1}" y="{vy:.1}" text-anchor="middle">{vl}</text>"#,
                    w = bar - 2.0,
                    h = (base - top).max(0.0),
                    t = escape_html(&format!("{name} · {category}: {}", (self.value_label)(v))),
                    tx = x0 + (bar - 2.0) / 2.0,
                    vy = top - 4.0,
                    vl = escape_html(&(self.value_label)(v))
                );
            }
        }
        let entries: Vec<_> = self
            .groups
            .iter()
            .map(|g| (g.0.clone(), g.1, None))
            .collect();
        legend(&mut out, &entries);
        out.push_str("</svg>");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_cover_the_range() {
        assert_eq!(linear_ticks(0.0, 10.0), vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        assert_eq!(
            linear_ticks(0.0, 12_000.0),
            vec![0.0, 2000.0, 4000.0, 6000.0, 8000.0, 10_000.0, 12_000.0]
        );
        assert_eq!(log_ticks(0.1, 1000.0), vec![0.1, 1.0, 10.0, 100.0, 1000.0]);
        assert_eq!(
            log_ticks(1.0, 100.0),
            vec![1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0]
        );
        assert_eq!(tick_label(20_000.0), "20k");
        assert_eq!(tick_label(2_500.0), "2.5k");
        assert_eq!(tick_label(0.25), "0.25");
    }
}
