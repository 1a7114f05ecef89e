//! Result files of `scalpel load`: read and write them as JSON, merge runs made on several
//! machines exactly, and present them as a terminal table or one self-contained HTML page
//! with SVG plots.
//!
//! This crate consumes the result model of [`scalpel_load::result`] ([`RunResult`] → targets
//! → steps, each step with its latency HdrHistogram). It must never run load or talk to the
//! network; the HTML it writes loads nothing either (inline CSS and SVG, no scripts).
//!
//! - [`read_json`] / [`write_json`] / [`to_json_string`]: the file format, with errors that
//!   name the file, line and column; writes are atomic.
//! - [`merge`]: histograms are added and percentiles recomputed from the sum, never
//!   averaged (the rule is in `docs/report.md` and on the function). The shards of one
//!   `scalpel load --shard` run (private module `shards`) are checked whole first — all of
//!   them, once each, same settings — and keep their own figures after the merge.
//! - [`summary_table`]: a column per target, the ratio to the first target marked `better`
//!   or `worse` by each figure's direction, one block per step.
//! - [`html`]: the same table, the breaking points and the plots.
//! - [`cost_projection`]: from each target's CPU per request in one step, the vCPUs a fleet
//!   needs at a given rate and the yearly saving (money in integers, shown to the cent).
//!
//! The table and the page render one model of the figures (private module `figures`), so
//! they always show the same numbers with the same rounding. The page draws its plots and
//! escapes its text with `scalpel-present`, the crate the shadow report and the live pages
//! draw with too.
//!
//! ```no_run
//! use std::path::Path;
//!
//! let a = scalpel_report::read_json(Path::new("host-a.json"))?;
//! let b = scalpel_report::read_json(Path::new("host-b.json"))?;
//! let both = scalpel_report::merge(&[a, b])?;
//! print!("{}", scalpel_report::summary_table(&both));
//! std::fs::write("report.html", scalpel_report::html(&both))?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! [`RunResult`]: scalpel_load::result::RunResult

mod cost;
mod error;
mod figures;
mod html;
mod json;
mod merge;
mod shards;
mod table;

pub use cost::{
    CostError, CostOptions, CostProjection, HOURS_PER_YEAR, VcpuHourPrice, cost_projection,
};
pub use error::ReportError;
pub use html::html;
pub use json::{
    check_writable, read_json, read_json_for_merge, to_json_line, to_json_string, write_html,
    write_json,
};
pub use merge::{MergeOptions, merge, merge_with};
pub use table::summary_table;
