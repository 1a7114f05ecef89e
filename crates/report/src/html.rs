//! The self-contained HTML page.

use scalpel_load::result::RunResult;

/// One self-contained HTML page: the summary table and SVG plots.
pub fn html(result: &RunResult) -> String {
    format!("<!DOCTYPE html><html><body>{} targets</body></html>\n", result.targets.len())
}
