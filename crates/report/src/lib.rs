//! Load result files: JSON, exact histogram merge, terminal tables and self-contained HTML
//! with SVG plots.
//!
//! This crate consumes the result model of [`scalpel_load::result`]; it never runs load.

mod error;
mod html;
mod json;
mod merge;
mod table;

pub use error::ReportError;
pub use html::html;
pub use json::{read_json, to_json_string, write_json};
pub use merge::merge;
pub use table::summary_table;
