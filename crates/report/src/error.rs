//! The one error type of the crate.

use std::path::PathBuf;

/// Why a result file could not be read, written or merged.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReportError {
    /// The file could not be opened or read (missing, permissions, …).
    #[error("cannot read {path}: {error}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The underlying I/O error (shown in the message, so not chained as a source).
        error: std::io::Error,
    },
    /// The file could not be written or moved into place.
    #[error("cannot write {path}: {error}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The underlying I/O error (shown in the message, so not chained as a source).
        error: std::io::Error,
    },
    /// The file is not valid JSON, or not the shape of a result file.
    #[error("{path}:{line}:{column}: not a scalpel result file: {message}")]
    Json {
        /// The file.
        path: PathBuf,
        /// 1-based line of the fault.
        line: usize,
        /// 1-based column of the fault.
        column: usize,
        /// What serde_json says is wrong.
        message: String,
    },
    /// The file was written by an incompatible version of the format.
    #[error(
        "{path}: result format version {found} is not supported (this scalpel reads version {expected})"
    )]
    FormatVersion {
        /// The file.
        path: PathBuf,
        /// The version in the file.
        found: u64,
        /// The version this build reads.
        expected: u32,
    },
    /// A step's histogram does not decode.
    #[error("target {target:?} step {step}: {error}")]
    Histogram {
        /// Target name.
        target: String,
        /// Step index.
        step: u32,
        /// The decoding error (shown in the message, so not chained as a source).
        error: scalpel_load::result::HistogramError,
    },
    /// A histogram of one of the runs being merged does not decode. `run` is the run's
    /// position among those given, from 1, so a caller that read them from files can name
    /// the file.
    #[error("run {run}: target {target:?} step {}: {error}", .step + 1)]
    RunHistogram {
        /// Position of the run among those merged, from 1.
        run: usize,
        /// Target name.
        target: String,
        /// Step index (shown from 1).
        step: u32,
        /// The decoding error (shown in the message, so not chained as a source).
        error: scalpel_load::result::HistogramError,
    },
    /// Runs that do not describe the same schedule against the same targets.
    #[error("cannot merge: {0}")]
    Mismatch(String),
}
