//! Where a ledger lives (`--db`): an SQLite file or a PostgreSQL database, and the one
//! schema both are made from.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use crate::error::Error;

/// `payments/schema.sql`, both dialects; see [`schema`].
const SCHEMA_TEXT: &str = include_str!("../../schema.sql");

/// The two stores a ledger can live in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    /// One SQLite file (WAL).
    Sqlite,
    /// A PostgreSQL database.
    Postgres,
}

impl StoreKind {
    /// `sqlite` or `postgres`, as in the schema's dialect markers and `/metrics`.
    pub fn name(self) -> &'static str {
        match self {
            StoreKind::Sqlite => "sqlite",
            StoreKind::Postgres => "postgres",
        }
    }
}

/// `payments/schema.sql` for one store: a line ending in `-- sqlite only` or
/// `-- postgres only` is kept for that store alone (the file's header says why).
pub fn schema(store: StoreKind) -> String {
    let mut out = String::with_capacity(SCHEMA_TEXT.len());
    for line in SCHEMA_TEXT.lines() {
        let trimmed = line.trim_end();
        let only = ["sqlite", "postgres"]
            .into_iter()
            .find(|kind| trimmed.ends_with(&format!("-- {kind} only")));
        if only.is_some_and(|kind| kind != store.name()) {
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// A `--db` value: `sqlite:PATH` or a bare path, or a `postgres://` (`postgresql://`) URL.
#[derive(Clone)]
pub enum Db {
    /// An SQLite ledger file.
    Sqlite(PathBuf),
    /// A PostgreSQL database (boxed: a client configuration is large).
    Postgres(Box<PgDb>),
}

/// A parsed PostgreSQL URL (`postgres://user@host/db?host=/socket/dir&port=N`).
#[derive(Clone)]
pub struct PgDb {
    config: tokio_postgres::Config,
}

impl PgDb {
    /// The client configuration: `application_name` is `payments` and the connect
    /// time-out 5 s unless the URL says otherwise.
    pub fn config(&self) -> &tokio_postgres::Config {
        &self.config
    }
}

impl Db {
    /// The store this value names.
    pub fn kind(&self) -> StoreKind {
        match self {
            Db::Sqlite(_) => StoreKind::Sqlite,
            Db::Postgres(_) => StoreKind::Postgres,
        }
    }
}

impl FromStr for Db {
    type Err = Error;

    fn from_str(s: &str) -> Result<Db, Error> {
        if s.starts_with("postgres://") || s.starts_with("postgresql://") {
            let mut config = tokio_postgres::Config::from_str(s)
                .map_err(|e| Error::InvalidDb(format!("{s:?}: {e}")))?;
            if config.get_application_name().is_none() {
                config.application_name("payments");
            }
            if config.get_connect_timeout().is_none() {
                config.connect_timeout(Duration::from_secs(5));
            }
            return Ok(Db::Postgres(Box::new(PgDb { config })));
        }
        let path = s.strip_prefix("sqlite:").unwrap_or(s);
        if path.is_empty() {
            return Err(Error::InvalidDb(
                "want sqlite:PATH, a path, or a postgres:// URL".into(),
            ));
        }
        Ok(Db::Sqlite(PathBuf::from(path)))
    }
}

/// Shown in logs and errors: the path, or `postgres://user@host/db` (`?host=DIR` for a
/// unix socket) without a password.
impl fmt::Display for Db {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Db::Sqlite(path) => write!(f, "{}", path.display()),
            Db::Postgres(pg) => fmt::Display::fmt(pg, f),
        }
    }
}

impl fmt::Display for PgDb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.config;
        let (host, socket) = match c.get_hosts().first() {
            Some(tokio_postgres::config::Host::Tcp(name)) => (name.clone(), None),
            Some(tokio_postgres::config::Host::Unix(dir)) => (String::new(), Some(dir)),
            None => (String::new(), None),
        };
        let user = c.get_user().unwrap_or("");
        let db = c.get_dbname().unwrap_or("");
        write!(f, "postgres://{user}@{host}/{db}")?;
        if let Some(dir) = socket {
            write!(f, "?host={}", dir.display())?;
        }
        Ok(())
    }
}

impl fmt::Debug for Db {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Db({self})")
    }
}

impl fmt::Debug for PgDb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PgDb({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_db_is_a_path_an_sqlite_url_or_a_postgres_url() {
        assert!(
            matches!("ledger.db".parse::<Db>().unwrap(), Db::Sqlite(p) if p == std::path::Path::new("ledger.db"))
        );
        assert!(
            matches!("sqlite:/x/l.db".parse::<Db>().unwrap(), Db::Sqlite(p) if p == std::path::Path::new("/x/l.db"))
        );
        let db: Db = "postgres://alice:secret@/ledger?host=/tmp/pg.x&port=5433"
            .parse()
            .unwrap();
        let Db::Postgres(pg) = &db else {
            panic!("{db:?}")
        };
        assert_eq!(pg.config().get_ports(), [5433]);
        assert_eq!(pg.config().get_dbname(), Some("ledger"));
        assert_eq!(
            pg.config().get_hosts(),
            [tokio_postgres::config::Host::Unix("/tmp/pg.x".into())]
        );
        assert_eq!(pg.config().get_application_name(), Some("payments"));
        // The password never reaches a log line.
        assert_eq!(db.to_string(), "postgres://alice@/ledger?host=/tmp/pg.x");
        for bad in [
            "",
            "sqlite:",
            "postgres://u@/db?port=x",
            "postgres://u@/db?sslmode=maybe",
        ] {
            assert!(bad.parse::<Db>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn each_store_gets_its_own_lines_of_the_one_schema() {
        let sqlite = schema(StoreKind::Sqlite);
        let pg = schema(StoreKind::Postgres);
        let (rowid, identity) = (
            "INTEGER PRIMARY KEY AUTOINCREMENT",
            "GENERATED BY DEFAULT AS IDENTITY",
        );
        assert!(sqlite.contains(rowid) && !sqlite.contains(identity));
        assert!(pg.contains(identity) && !pg.contains(rowid));
        assert!(!pg.contains("WITHOUT ROWID;") && !pg.contains("PRAGMA journal_mode"));
        // Everything else is shared.
        let shared = |s: &str| {
            s.lines()
                .filter(|l| !l.ends_with(" only"))
                .collect::<Vec<_>>()
                .join("\n")
        };
        assert_eq!(shared(&sqlite), shared(&pg));
    }
}
