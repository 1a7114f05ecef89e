//! Loading an SQLite ledger into a [`ReadModel`] and tailing it by `seq`; the row-applying
//! [`State`] shared with the PostgreSQL side (`pg.rs`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, params};

use crate::error::{Error, SqliteContext};
use crate::ids::{UserId, category_index};
use crate::model::{ReadModel, Snapshot, Tx, UserLedger};

/// Rows read per tail query (SPEC: `LIMIT 10000`, repeated while rows come back).
pub(crate) const TAIL_BATCH: i64 = 10_000;

const TAIL_SQL: &str = "SELECT seq, ts, user_id, currency, amount, status, category, counterparty \
     FROM transactions WHERE seq > ?1 ORDER BY seq LIMIT ?2";

/// Owns the SQLite connection and the writable side of the read model.
///
/// Run [`Tailer::poll`] on a thread that may block (rusqlite is synchronous); it applies
/// new rows copy-on-write and publishes a new [`Snapshot`] into the [`ReadModel`], so
/// readers never wait for it.
#[derive(Debug)]
pub struct Tailer {
    path: PathBuf,
    conn: Connection,
    state: State,
}

/// The writable side of a read model, fed rows by a store's loader and tailer.
#[derive(Debug)]
pub(crate) struct State {
    pub(crate) seq: i64,
    clock: i64,
    index: Arc<HashMap<UserId, u32>>,
    users: Vec<Arc<UserLedger>>,
    names: Arc<Vec<Box<str>>>,
    /// Counterparty names that are not known users (`ext:…`, strangers).
    other_names: HashMap<Box<str>, u32>,
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
        state: State::empty(),
    };
    tailer.conn.execute_batch("BEGIN").at(path)?;
    let loaded = tailer.load_all();
    let end = tailer.conn.execute_batch("COMMIT").at(path);
    loaded?;
    end?;
    let model = Arc::new(ReadModel::new(tailer.state.snapshot()));
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
                self.state.add_user(raw);
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
                self.state.add_account(user, currency);
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
            model.publish(self.state.snapshot());
        }
        Ok(total)
    }

    /// The last sequence applied by this tailer (published or not).
    pub fn seq(&self) -> i64 {
        self.state.seq
    }

    fn read_rows(&mut self, limit: i64) -> Result<usize, Error> {
        let path = &self.path;
        let mut stmt = self.conn.prepare_cached(TAIL_SQL).at(path)?;
        let mut rows = stmt.query(params![self.state.seq, limit]).at(path)?;
        let mut n = 0;
        while let Some(row) = rows.next().at(path)? {
            let seq: i64 = row.get(0).at(path)?;
            let text = |i: usize| row.get_ref(i).and_then(|v| Ok(v.as_str()?)).at(path);
            let applied = self.state.apply(
                seq,
                row.get(1).at(path)?,
                text(2)?,
                text(3)?,
                row.get(4).at(path)?,
                text(5)?,
                text(6)?,
                text(7)?,
            );
            applied.map_err(|what| Error::BadRow {
                path: path.clone(),
                seq,
                what,
            })?;
            n += 1;
        }
        Ok(n)
    }
}

impl State {
    pub(crate) fn empty() -> State {
        State {
            seq: 0,
            clock: 0,
            index: Arc::default(),
            users: Vec::new(),
            names: Arc::default(),
            other_names: HashMap::new(),
        }
    }

    /// Adds a `users` row, read at start (before any transaction). An id the API could
    /// never ask for is not a user of the read model; a repeated one is ignored.
    pub(crate) fn add_user(&mut self, raw: &str) {
        let Some(id) = UserId::parse(raw) else {
            return;
        };
        let index = Arc::make_mut(&mut self.index);
        if index.contains_key(&id) {
            return;
        }
        index.insert(id, self.users.len() as u32);
        self.users.push(Arc::new(UserLedger::default()));
        Arc::make_mut(&mut self.names).push(raw.into());
    }

    /// Adds an `accounts` row of a known user (others are ignored).
    pub(crate) fn add_account(&mut self, user: &str, currency: &str) {
        if let Some(&i) = UserId::parse(user).and_then(|id| self.index.get(&id)) {
            Arc::make_mut(&mut self.users[i as usize]).account_mut(currency);
        }
    }

    pub(crate) fn snapshot(&self) -> Snapshot {
        Snapshot {
            seq: self.seq,
            clock: self.clock,
            index: Arc::clone(&self.index),
            users: self.users.clone(),
            names: Arc::clone(&self.names),
        }
    }

    fn counterparty_index(&mut self, name: &str) -> u32 {
        if let Some(&i) = UserId::parse(name).and_then(|id| self.index.get(&id)) {
            return i;
        }
        if let Some(&i) = self.other_names.get(name) {
            return i;
        }
        let names = Arc::make_mut(&mut self.names);
        let i = names.len() as u32;
        names.push(name.into());
        self.other_names.insert(name.into(), i);
        i
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn apply(
        &mut self,
        seq: i64,
        ts: i64,
        user: &str,
        currency: &str,
        amount: i64,
        status: &str,
        category: &str,
        counterparty: &str,
    ) -> Result<(), String> {
        self.seq = seq;
        self.clock = self.clock.max(ts);
        // SPEC: transactions of users not loaded at start are skipped.
        let Some(&slot) = UserId::parse(user).and_then(|id| self.index.get(&id)) else {
            return Ok(());
        };
        let category = category_index(category).ok_or_else(|| format!("category {category:?}"))?;
        let pending = match status {
            "settled" => false,
            "pending" => true,
            other => return Err(format!("status {other:?}")),
        };
        let counterparty = self.counterparty_index(counterparty);
        // Copy-on-write: clones this user only if a published snapshot still shares it.
        let account = Arc::make_mut(&mut self.users[slot as usize]).account_mut(currency);
        // Wrapping like Go's int64, so both services agree even past the edge.
        if pending {
            account.pending = account.pending.wrapping_add(amount);
            if amount < 0 {
                account.pending_out = account.pending_out.wrapping_add(amount);
            }
        } else {
            account.settled = account.settled.wrapping_add(amount);
        }
        let tx = Tx {
            ts,
            amount,
            counterparty,
            category,
        };
        // Rows come in seq order, which the ledger keeps in ts order; stay sorted anyway.
        match account.txs.last() {
            Some(last) if last.ts > ts => {
                let at = account.txs.partition_point(|t| t.ts <= ts);
                account.txs.insert(at, tx);
            }
            _ => account.txs.push(tx),
        }
        Ok(())
    }
}
