//! The `--from` flags that `scalpel load` and `scalpel shadow replay` share — the format,
//! the path and method filters, the header rewrites and unsafe methods — turned into the
//! one [`SourceOptions`] both open a recording with.

use scalpel_requests::{SourceFormat, SourceOptions};

/// The recorded-traffic flags of one command, borrowed from its parsed arguments.
pub(crate) struct RecordedFlags<'a> {
    /// `--from-format`.
    pub(crate) format: Option<&'a str>,
    /// `--include-path`.
    pub(crate) include_path: &'a [String],
    /// `--exclude-path`.
    pub(crate) exclude_path: &'a [String],
    /// `-m`/`--method`: keep only these methods.
    pub(crate) methods: &'a [String],
    /// `--set-header`.
    pub(crate) set_header: &'a [String],
    /// `--drop-header`.
    pub(crate) drop_header: &'a [String],
    /// `--allow-unsafe`.
    pub(crate) allow_unsafe: bool,
}

impl RecordedFlags<'_> {
    /// The options to open the recording with; a bad format name, regular expression,
    /// method or header is an error naming it.
    pub(crate) fn source_options(&self) -> anyhow::Result<SourceOptions> {
        let mut options = SourceOptions::new().allow_unsafe(self.allow_unsafe);
        if let Some(format) = self.format {
            options = options.format(format.parse::<SourceFormat>()?);
        }
        for p in self.include_path {
            options = options.include_path(p)?;
        }
        for p in self.exclude_path {
            options = options.exclude_path(p)?;
        }
        for m in self.methods {
            options = options.method(m)?;
        }
        for h in self.set_header {
            options = options.set_header(h)?;
        }
        for h in self.drop_header {
            options = options.drop_header(h)?;
        }
        Ok(options)
    }
}
