//! The crate's error type.

use std::path::PathBuf;

/// What went wrong while generating, loading or tailing a ledger.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// SQLite failed on the ledger file.
    #[error("ledger {path}: {source}")]
    Sqlite {
        /// The ledger file.
        path: PathBuf,
        /// The SQLite error.
        #[source]
        source: rusqlite::Error,
    },
    /// The ledger holds a row this model cannot represent.
    #[error("ledger {path}: transaction seq {seq}: {what}")]
    BadRow {
        /// The ledger file.
        path: PathBuf,
        /// The offending row.
        seq: i64,
        /// What is wrong with it.
        what: String,
    },
    /// `generate` was asked to write over an existing file without `force`.
    #[error("{0} already exists (use --force to overwrite)")]
    Exists(PathBuf),
    /// Bad generator options.
    #[error("invalid options: {0}")]
    InvalidOptions(String),
    /// Writing the id list or removing an old file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// Adds the ledger path to SQLite errors.
pub(crate) trait SqliteContext<T> {
    fn at(self, path: &std::path::Path) -> Result<T, Error>;
}

impl<T> SqliteContext<T> for Result<T, rusqlite::Error> {
    fn at(self, path: &std::path::Path) -> Result<T, Error> {
        self.map_err(|source| Error::Sqlite {
            path: path.to_path_buf(),
            source,
        })
    }
}
