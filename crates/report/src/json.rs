//! Reading and writing result files.

use std::io::Write as _;
use std::path::Path;

use scalpel_load::result::{FORMAT_VERSION, RunResult, decode_histogram};

use crate::ReportError;

/// Reads a result file written by `scalpel load --json` or [`write_json`].
///
/// The format version is checked before the shape, so a file from a future version says
/// so instead of failing on a missing key.
pub fn read_json(path: &Path) -> Result<RunResult, ReportError> {
    let text = std::fs::read_to_string(path).map_err(|error| ReportError::Read {
        path: path.to_owned(),
        error,
    })?;
    let json_error = |err: serde_json::Error| ReportError::Json {
        path: path.to_owned(),
        line: err.line(),
        column: err.column(),
        message: strip_position(&err.to_string()),
    };
    let value: serde_json::Value = serde_json::from_str(&text).map_err(json_error)?;
    match value
        .get("format_version")
        .and_then(serde_json::Value::as_u64)
    {
        Some(v) if v == u64::from(FORMAT_VERSION) => {}
        Some(found) => {
            return Err(ReportError::FormatVersion {
                path: path.to_owned(),
                found,
                expected: FORMAT_VERSION,
            });
        }
        None => {
            return Err(ReportError::Json {
                path: path.to_owned(),
                line: 1,
                column: 1,
                message: "no numeric \"format_version\" key".to_owned(),
            });
        }
    }
    // Parse the text again (not the Value) so shape errors keep their line and column.
    let result: RunResult = serde_json::from_str(&text).map_err(json_error)?;
    // A histogram that does not decode would only fail later, in a merge or a plot.
    for target in &result.targets {
        for step in &target.steps {
            decode_histogram(&step.histogram).map_err(|error| ReportError::Histogram {
                target: target.name.clone(),
                step: step.index,
                error,
            })?;
        }
    }
    Ok(result)
}

/// serde_json appends " at line L column C" to its messages; the error shows them already.
fn strip_position(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(at) => message[..at].to_owned(),
        None => message.to_owned(),
    }
}

/// The result as pretty-printed JSON, with a trailing newline.
pub fn to_json_string(result: &RunResult) -> String {
    let mut text =
        serde_json::to_string_pretty(result).expect("the result model always serializes");
    text.push('\n');
    text
}

/// Writes the result as pretty JSON, atomically: a temporary file in the same directory is
/// written, flushed to disk and renamed over `path`, so a reader never sees half a file.
pub fn write_json(result: &RunResult, path: &Path) -> Result<(), ReportError> {
    let write_error = |error: std::io::Error| ReportError::Write {
        path: path.to_owned(),
        error,
    };
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let mut file = tempfile::Builder::new()
        .prefix(".scalpel-")
        .suffix(".tmp")
        .tempfile_in(dir)
        .map_err(write_error)?;
    file.write_all(to_json_string(result).as_bytes())
        .map_err(write_error)?;
    file.as_file().sync_all().map_err(write_error)?;
    file.persist(path).map_err(|err| write_error(err.error))?;
    Ok(())
}
