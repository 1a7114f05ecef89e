//! Reading and writing result files.

use std::io::Write as _;
use std::path::Path;

use scalpel_load::result::{FORMAT_VERSION, RunResult, decode_histogram};

use crate::ReportError;

/// Reads a result file written by `scalpel load --json` or [`write_json`].
///
/// The format version is checked before the shape, so a file from a future version says
/// so instead of failing on a missing key. Every step's histogram is decoded once to check
/// it: one that does not decode would only fail later, in a plot.
pub fn read_json(path: &Path) -> Result<RunResult, ReportError> {
    let result = read_json_for_merge(path)?;
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

/// [`read_json`] without decoding the histograms, for a caller that decodes each of them
/// next: [`crate::merge`] does, and names a bad one by its run
/// ([`ReportError::RunHistogram`]). Decoding is most of a large merge's work (100 files of
/// 60 steps hold 6,000 histograms); checking them here as well did it twice.
pub fn read_json_for_merge(path: &Path) -> Result<RunResult, ReportError> {
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
    let mut value: serde_json::Value = serde_json::from_str(&text).map_err(json_error)?;
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
    let mut result: RunResult = serde_json::from_str(&text).map_err(json_error)?;
    upgrade(&mut value, &mut result);
    Ok(result)
}

/// Fills in what files written before a key existed lack, from what they have: `sent`,
/// `answered` and `failed` from the error kinds (those versions left failed requests out
/// of the histogram, so such a step's latency stays that of its answers).
fn upgrade(value: &mut serde_json::Value, result: &mut RunResult) {
    let Some(targets) = value.get_mut("targets").and_then(|t| t.as_array_mut()) else {
        return;
    };
    for (target, json) in result.targets.iter_mut().zip(targets) {
        let Some(steps) = json.get_mut("steps").and_then(|s| s.as_array_mut()) else {
            continue;
        };
        for (step, json) in target.steps.iter_mut().zip(steps) {
            if json.get("answered").is_some() {
                continue;
            }
            let kind = |k: &str| step.error_kinds.get(k).copied().unwrap_or(0);
            // Those files' `io` reads as `reset` (scalpel_load::result::current_kind).
            let no_answer = kind("timeout") + kind("reset") + kind("protocol");
            step.sent = step.requests.saturating_sub(kind("connect"));
            step.failed = no_answer.min(step.sent);
            step.answered = step.sent - step.failed;
        }
    }
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
/// The file is readable by others as any new file is (0666 less the umask, usually 0644).
pub fn write_json(result: &RunResult, path: &Path) -> Result<(), ReportError> {
    write_atomic(path, to_json_string(result).as_bytes())
}

/// The result as JSON on one line, ending in a newline: what `scalpel load --json -` prints,
/// so it can be picked out of a log that also holds other lines (`kubectl logs`).
pub fn to_json_line(result: &RunResult) -> String {
    let mut text = serde_json::to_string(result).expect("the result model always serializes");
    text.push('\n');
    text
}

/// Writes the HTML page ([`crate::html`]) for the result, atomically like [`write_json`].
pub fn write_html(result: &RunResult, path: &Path) -> Result<(), ReportError> {
    write_atomic(path, crate::html(result).as_bytes())
}

/// Checks, before any work, that `path` can be written: its directory exists and takes a
/// new file, and `path` itself is not a directory. A run that measures for minutes and
/// then cannot write its result has lost them.
pub fn check_writable(path: &Path) -> Result<(), ReportError> {
    let write_error = |error: std::io::Error| ReportError::Write {
        path: path.to_owned(),
        error,
    };
    if path.is_dir() {
        return Err(write_error(std::io::Error::new(
            std::io::ErrorKind::IsADirectory,
            "it is a directory",
        )));
    }
    let dir = parent_dir(path);
    tempfile::Builder::new()
        .prefix(".scalpel-check-")
        .tempfile_in(dir)
        .map(drop)
        .map_err(|error| match error.kind() {
            std::io::ErrorKind::NotFound => write_error(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("no such directory {}", dir.display()),
            )),
            _ => write_error(error),
        })
}

fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), ReportError> {
    use std::os::unix::fs::PermissionsExt as _;
    let write_error = |error: std::io::Error| ReportError::Write {
        path: path.to_owned(),
        error,
    };
    let dir = parent_dir(path);
    // A temporary file is 0600 by default; a result file is as readable as any other new
    // file: 0666 here, less the process's umask, applied by the kernel at creation.
    let mut file = tempfile::Builder::new()
        .prefix(".scalpel-")
        .suffix(".tmp")
        .permissions(std::fs::Permissions::from_mode(0o666))
        .tempfile_in(dir)
        .map_err(write_error)?;
    file.write_all(bytes).map_err(write_error)?;
    file.as_file().sync_all().map_err(write_error)?;
    file.persist(path).map_err(|err| write_error(err.error))?;
    Ok(())
}
