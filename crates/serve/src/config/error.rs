//! A configuration error names the file and, where the input has one, the line: every
//! section's check reports through one [`Fail`] of the file being read.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::raw::{Human, Millis};

/// A configuration that cannot be used: the file, the line (when known) and why.
#[derive(Debug, thiserror::Error)]
#[error("{}{}: {reason}", path.display(), line.map(|l| format!(":{l}")).unwrap_or_default())]
pub struct ConfigError {
    path: PathBuf,
    line: Option<usize>,
    reason: String,
}

impl ConfigError {
    /// An error about the file at `path`, at `line` when known.
    pub(super) fn new(path: &Path, line: Option<usize>, reason: String) -> Self {
        Self {
            path: path.to_path_buf(),
            line,
            reason,
        }
    }

    /// The configuration file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The 1-based line the error is on, when it can be placed.
    pub fn line(&self) -> Option<usize> {
        self.line
    }

    /// Why the configuration was rejected.
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

/// The errors of one file being read: its path, and its text to find a span's line in.
#[derive(Debug, Clone, Copy)]
pub(super) struct Fail<'a> {
    pub(super) path: &'a Path,
    pub(super) text: &'a str,
}

impl Fail<'_> {
    /// The error `reason`, on the line where `span` starts (none for an empty span: a
    /// default, not written in the file).
    pub(super) fn at(&self, span: Option<Range<usize>>, reason: String) -> ConfigError {
        let line = span.filter(|s| s.end > 0).map(|s| self.line(s.start));
        ConfigError::new(self.path, line, reason)
    }

    /// The 1-based line of byte `offset`.
    pub(super) fn line(&self, offset: usize) -> usize {
        line_of(self.text, offset)
    }

    /// A duration key given as `key = "30s"` or `key_ms = 30000` (one of them), else
    /// `default`.
    pub(super) fn duration(
        &self,
        human: &Human,
        ms: &Millis,
        key: &str,
        default: Duration,
    ) -> Result<Duration, ConfigError> {
        match (human, ms) {
            (Some(h), Some(_)) => Err(self.at(
                Some(h.span()),
                format!("set either `{key}` or `{key}_ms`, not both"),
            )),
            (Some(h), None) => Ok(h.get_ref().0),
            (None, Some(m)) => Ok(Duration::from_millis(*m.get_ref())),
            (None, None) => Ok(default),
        }
    }

    /// [`Fail::duration`] with its default in milliseconds.
    pub(super) fn ms(
        &self,
        human: &Human,
        ms: &Millis,
        key: &str,
        default_ms: u64,
    ) -> Result<Duration, ConfigError> {
        self.duration(human, ms, key, Duration::from_millis(default_ms))
    }
}

/// The 1-based line of byte `offset` of `text`.
pub(super) fn line_of(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    text.as_bytes()[..end]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}
