//! The small pieces every page of the toolkit draws with: the one HTML escaper, inline SVG
//! line and bar charts, and the pages' one style sheet.
//!
//! Four kinds of page use it: the load report (`scalpel-report`), the shadow report
//! (`scalpel-shadow`), and the live pages of `scalpel serve`, `scalpel shadow proxy` and
//! `scalpel load --dashboard` (through `scalpel-live`). A chart on a live page and the same
//! chart in a report are drawn by the same code and look alike.
//!
//! It must NOT import any other toolkit crate, read or write files, or know what a figure
//! means (a load step, a mirror, a worker): callers hand it numbers and words. That is why
//! it is a crate of its own — a page beside the balancer or the proxy would otherwise link
//! the load generator and its result model just to escape a string or draw a line.
//!
//! - [`escape_html`]: text and attribute values for HTML and SVG.
//! - [`Chart`] / [`Line`]: a line chart in a few fields (the live pages).
//! - [`LineChart`] / [`Series`] / [`BarChart`]: the charts with every choice open (scales,
//!   x ticks, where y starts), as the load report draws its plots.
//! - [`STYLE`]: the style sheet (light colours) of the report and the charts; the live
//!   pages add their dark colours after it.
//!
//! # Design
//!
//! - **Its own crate, not part of `scalpel-live`.** The live crate is a front-end (an HTML
//!   shell and a script that polls); a static report has no use for either, and the
//!   report must not depend on the live pages. Escaping and drawing are what both need.
//! - **SVG strings, no drawing library.** A chart is a few hundred bytes of `<polyline>`,
//!   `<line>` and `<text>`, written with `write!`: no scripts, no external resources, and
//!   the page stays one self-contained file. Hover text is SVG `<title>`.
//!
//! # Example
//!
//! ```
//! use scalpel_present::{Chart, Line, escape_html};
//!
//! let svg = Chart {
//!     title: "p99 <ms>".into(),
//!     y_log: true,
//!     limits: vec![(50.0, "SLO p99 < 50 ms".into())],
//!     lines: vec![Line { name: "go".into(), points: vec![(0.0, 3.0), (1.0, 7.0)], ..Line::default() }],
//!     ..Chart::default()
//! }
//! .render();
//! assert!(svg.starts_with("<svg") && svg.contains("p99 &lt;ms&gt;"));
//! assert_eq!(escape_html("a & b"), "a &amp; b");
//! ```

mod chart;
mod escape;
mod svg;

pub use chart::{Chart, Line};
pub use escape::escape_html;
pub use svg::{BarChart, LineChart, NARROW, Scale, Series, WIDE, color, tick_label};

/// The pages' style sheet (light colours): the report's layout (cards, tables, folds) and
/// the charts' classes (`svg.chart`, `.tick`, `.limit`, …).
pub const STYLE: &str = include_str!("style.css");
