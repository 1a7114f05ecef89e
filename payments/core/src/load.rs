//! Loading an SQLite ledger into a [`ReadModel`] and tailing it by `seq`, through the same
//! [`Feed`] as the PostgreSQL side (`pg.rs`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use payments_model::{Feed, ReadModel, Row};
use rusqlite::{Connection, OpenFlags, params};

use crate::error::{Error, SqliteContext};

/// Rows read per tail query (SPEC: `LIMIT 10000`, repeated while rows come back).
pub(crate) const TAIL_BATCH: i64 = 10_000;

const TAIL_SQL: &str = "SELECT seq, ts, user_id, currency, amount, status, category, counterparty \
     FROM transactions WHERE seq > ?1 ORDER BY seq LIMIT ?2";

/// Owns the SQLite connection and the writable side of the read model.
///
/// Run [`Tailer::poll`] on a thread that may block (rusqlite is synchronous); it applies
/// new rows copy-on-write and publishes a new [`crate::Snapshot`] into the [`ReadModel`], so
/// readers never wait for it.
#[derive(Debug)]
pub struct Tailer {
    path: PathBuf,
    conn: Connection,
    feed: Feed,
}

/// Opens the ledger read-only, loads it whole (users, accounts, transactions, in one read
/// transaction), and returns the read model with the tailer that keeps it current.
pub fn open(path: &Path) -> Result<(Arc<ReadModel>, Tailer), Error> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .at(path)?;
    conn.busy_timeout(Duration::from_secs(5)).at(path)?;
    let mut tailer = Tailer {
        path: path.to_path_buf(),
        conn,
        feed: Feed::new(),
    };
    tailer.conn.execute_batch("BEGIN").at(path)?;
    let loaded = tailer.load_all();
    let end = tailer.conn.execute_batch("COMMIT").at(path);
    loaded?;
    end?;
    let model = tailer.feed.model();
    Ok((model, tailer))
}

impl Tailer {
    fn load_all(&mut self) -> Result<(), Error> {
        let path = self.path.clone();
        {
            let mut stmt = self.conn.prepare("SELECT id FROM users").at(&path)?;
            let mut rows = stmt.query([]).at(&path)?;
            while let Some(row) = rows.next().at(&path)? {
                let raw = row.get_ref(0).and_then(|v| Ok(v.as_str()?)).at(&path)?;
                self.feed.add_user(raw);
            }
        }
        {
            let mut stmt = self
                .conn
                .prepare("SELECT user_id, currency FROM accounts")
                .at(&path)?;
            let mut rows = stmt.query([]).at(&path)?;
            while let Some(row) = rows.next().at(&path)? {
                let user = row.get_ref(0).and_then(|v| Ok(v.as_str()?)).at(&path)?;
                let currency = row.get_ref(1).and_then(|v| Ok(v.as_str()?)).at(&path)?;
                self.feed.add_account(user, currency);
            }
        }
        self.read_rows(i64::MAX)?;
        Ok(())
    }

    /// Applies every transaction with `seq` above the last one applied and, if there were
    /// any, publishes a new snapshot. Returns the number of rows applied.
    pub fn poll(&mut self, model: &ReadModel) -> Result<usize, Error> {
        let mut total = 0;
        loop {
            let n = self.read_rows(TAIL_BATCH)?;
            total += n;
            if (n as i64) < TAIL_BATCH {
                break;
            }
        }
        if total > 0 {
            self.feed.publish(model);
        }
        Ok(total)
    }

    /// The last sequence applied by this tailer (published or not).
    pub fn seq(&self) -> i64 {
        self.feed.seq()
    }

    fn read_rows(&mut self, limit: i64) -> Result<usize, Error> {
        let path = &self.path;
        let mut stmt = self.conn.prepare_cached(TAIL_SQL).at(path)?;
        let mut rows = stmt.query(params![self.feed.seq(), limit]).at(path)?;
        let mut n = 0;
        while let Some(row) = rows.next().at(path)? {
            let seq: i64 = row.get(0).at(path)?;
            let text = |i: usize| row.get_ref(i).and_then(|v| Ok(v.as_str()?)).at(path);
            let ledger_row = Row {
                seq,
                ts: row.get(1).at(path)?,
                user_id: text(2)?,
                currency: text(3)?,
                amount: row.get(4).at(path)?,
                status: text(5)?,
                category: text(6)?,
                counterparty: text(7)?,
            };
            self.feed.apply(&ledger_row).map_err(|bad| Error::BadRow {
                path: path.clone(),
                seq,
                what: bad.what,
            })?;
            n += 1;
        }
        Ok(n)
    }
}
