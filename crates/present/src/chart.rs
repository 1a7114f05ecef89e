//! The simple face of the line charts, for pages that draw a few lines over time (the live
//! pages of `scalpel serve`, `scalpel shadow proxy` and `scalpel load --dashboard`): a chart
//! is a title, axis labels, lines (each with a palette colour by index, so target *i* has
//! the same colour on every chart) and optional horizontal limits (an SLO bound). Drawn by
//! the same [`LineChart`] as the load report's plots, so a live chart and a report chart
//! look alike.

use crate::svg::{self, LineChart, Scale, Series, color};

/// One line of a [`Chart`].
#[derive(Debug, Clone, Default)]
pub struct Line {
    /// The legend text.
    pub name: String,
    /// The palette colour (see [`color`]).
    pub color_index: usize,
    /// Drawn dashed (a second figure of the same series, e.g. p50 beside p99).
    pub dashed: bool,
    /// `(x, y)` points; non-finite values are skipped.
    pub points: Vec<(f64, f64)>,
}

/// A line chart over a linear x axis.
#[derive(Debug, Clone, Default)]
pub struct Chart {
    /// The title drawn in the chart (and its accessible name).
    pub title: String,
    /// The x axis label.
    pub x_label: String,
    /// The y axis label.
    pub y_label: String,
    /// A logarithmic y axis (latencies); otherwise linear from zero.
    pub y_log: bool,
    /// A dashed y = x line (offered vs achieved rate).
    pub diagonal: bool,
    /// Horizontal limits drawn as labelled dashed red lines.
    pub limits: Vec<(f64, String)>,
    /// The lines, drawn in order.
    pub lines: Vec<Line>,
    /// Twice the usual width (a chart with a row to itself).
    pub wide: bool,
}

impl Chart {
    /// The chart as one `<svg>` element: no scripts, no external resources.
    pub fn render(&self) -> String {
        let y_scale = if self.y_log {
            Scale::Log
        } else {
            Scale::Linear
        };
        let series = self
            .lines
            .iter()
            .map(|l| {
                let points: Vec<(f64, f64)> = l
                    .points
                    .iter()
                    .copied()
                    .filter(|(x, y)| x.is_finite() && y.is_finite() && (!self.y_log || *y > 0.0))
                    .collect();
                // A line of one or two points is hard to see without its points.
                let markers = points.len() <= 2;
                Series {
                    name: l.name.clone(),
                    color: color(l.color_index),
                    dash: l.dashed.then_some("5 3"),
                    markers,
                    titles: points
                        .iter()
                        .map(|(x, y)| {
                            format!(
                                "{}: {} at {}",
                                l.name,
                                svg::tick_label(*y),
                                svg::tick_label(*x)
                            )
                        })
                        .collect(),
                    points,
                }
            })
            .collect();
        LineChart {
            title: self.title.clone(),
            x_label: self.x_label.clone(),
            y_label: self.y_label.clone(),
            x_scale: Scale::Linear,
            y_scale,
            x_ticks: None,
            y_from_zero: !self.y_log,
            series,
            diagonal: self.diagonal,
            thresholds: self.limits.clone(),
            width: if self.wide { svg::WIDE } else { svg::NARROW },
        }
        .render()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chart_is_one_well_formed_svg_with_its_lines_and_limit() {
        let chart = Chart {
            title: "p99 <latency>".into(),
            x_label: "seconds".into(),
            y_label: "ms".into(),
            y_log: true,
            limits: vec![(50.0, "SLO p99 < 50 ms".into())],
            lines: vec![Line {
                name: "go".into(),
                points: vec![(0.0, 3.0), (1.0, f64::NAN), (2.0, 0.0), (3.0, 7.0)],
                ..Line::default()
            }],
            ..Chart::default()
        };
        let svg = chart.render();
        let doc = roxmltree::Document::parse(&svg).expect("well-formed XML");
        let line = doc
            .descendants()
            .find(|n| n.attribute("data-series") == Some("go"))
            .expect("the line is drawn");
        // NaN and the zero (log axis) are dropped: two points left.
        assert_eq!(line.attribute("points").unwrap().split(' ').count(), 2);
        assert!(svg.contains("SLO p99 &lt; 50 ms"));
        assert!(svg.contains("p99 &lt;latency&gt;"));
        assert_eq!(color(0), color(8));
    }
}
