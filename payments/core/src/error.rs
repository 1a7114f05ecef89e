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
    /// PostgreSQL failed.
    #[error("ledger {db}: {what}")]
    Postgres {
        /// The database (no password).
        db: String,
        /// What was being done.
        what: &'static str,
        /// The client's error.
        #[source]
        source: tokio_postgres::Error,
    },
    /// A database call took longer than its limit.
    #[error("{0}: timed out")]
    TimedOut(&'static str),
    /// A `--db` that is neither a path nor a PostgreSQL URL.
    #[error("--db {0}")]
    InvalidDb(String),
    /// `generate` was asked to replace a database's ledger without `force`.
    #[error("{0} already holds a ledger (use --force to replace it)")]
    DbHasLedger(String),
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

/// Adds the database and what was being done to PostgreSQL errors.
pub(crate) trait PgContext<T> {
    fn pg(self, db: &str, what: &'static str) -> Result<T, Error>;
}

impl<T> PgContext<T> for Result<T, tokio_postgres::Error> {
    fn pg(self, db: &str, what: &'static str) -> Result<T, Error> {
        self.map_err(|source| Error::Postgres {
            db: db.to_string(),
            what,
            source,
        })
    }
}
