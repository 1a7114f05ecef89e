//! The terminal summary table.

use scalpel_load::result::RunResult;

/// The summary table of a run, for a terminal.
pub fn summary_table(result: &RunResult) -> String {
    format!("{} targets\n", result.targets.len())
}
