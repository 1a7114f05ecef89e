//! The writable side of a read model: users, accounts and transaction rows go in, in
//! ledger order; snapshots come out.

use std::collections::HashMap;
use std::sync::Arc;

use crate::ids::{UserId, category_index};
use crate::model::{ReadModel, Snapshot, Tx, UserLedger};

/// One row of the `transactions` table, borrowed from whoever read it (a SQLite or
/// PostgreSQL row, or a batch the Go service handed over).
#[derive(Debug, Clone, Copy)]
pub struct Row<'a> {
    /// Ledger sequence, strictly increasing.
    pub seq: i64,
    /// Unix seconds, UTC.
    pub ts: i64,
    /// The user whose transaction this is.
    pub user_id: &'a str,
    /// Currency code.
    pub currency: &'a str,
    /// Signed amount in minor units.
    pub amount: i64,
    /// `settled` or `pending`.
    pub status: &'a str,
    /// One of the SPEC's categories.
    pub category: &'a str,
    /// A user id or `ext:NAME`.
    pub counterparty: &'a str,
}

/// A row this model cannot represent: an unknown status or category.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("transaction seq {seq}: {what}")]
pub struct BadRow {
    /// The row's `seq`.
    pub seq: i64,
    /// What is wrong with it.
    pub what: String,
}

/// Builds and updates a read model from rows fed in ledger order: users first (read once,
/// at start), then accounts, then transactions by `seq`. [`Feed::publish`] makes what was
/// applied visible to readers as a new [`Snapshot`].
///
/// Both stores' loaders and tailers in `payments-core` feed one; so does the Go service,
/// through `payments-ffi`, with the rows its own read model applies.
#[derive(Debug)]
pub struct Feed {
    seq: i64,
    clock: i64,
    index: Arc<HashMap<UserId, u32>>,
    users: Vec<Arc<UserLedger>>,
    names: Arc<Vec<Box<str>>>,
    /// Counterparty names that are not known users (`ext:…`, strangers).
    other_names: HashMap<Box<str>, u32>,
}

impl Default for Feed {
    fn default() -> Feed {
        Feed::new()
    }
}

impl Feed {
    /// An empty ledger: no users, `seq` 0.
    pub fn new() -> Feed {
        Feed {
            seq: 0,
            clock: 0,
            index: Arc::default(),
            users: Vec::new(),
            names: Arc::default(),
            other_names: HashMap::new(),
        }
    }

    /// The last `seq` applied (published or not).
    pub fn seq(&self) -> i64 {
        self.seq
    }

    /// Adds a `users` row, read at start (before any transaction). An id the API could
    /// never ask for is not a user of the read model; a repeated one is ignored.
    pub fn add_user(&mut self, raw: &str) {
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
    pub fn add_account(&mut self, user: &str, currency: &str) {
        if let Some(&i) = UserId::parse(user).and_then(|id| self.index.get(&id)) {
            Arc::make_mut(&mut self.users[i as usize]).account_mut(currency);
        }
    }

    /// A new read model holding what has been applied so far.
    pub fn model(&self) -> Arc<ReadModel> {
        Arc::new(ReadModel::new(self.snapshot()))
    }

    /// Makes what has been applied visible to `model`'s readers.
    pub fn publish(&self, model: &ReadModel) {
        model.publish(self.snapshot());
    }

    fn snapshot(&self) -> Snapshot {
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

    /// Applies one transaction. A row of a user not loaded at start is skipped (SPEC) but
    /// still advances `seq` and the ledger clock; so does a row refused as [`BadRow`].
    pub fn apply(&mut self, row: &Row<'_>) -> Result<(), BadRow> {
        self.seq = row.seq;
        self.clock = self.clock.max(row.ts);
        let Some(&slot) = UserId::parse(row.user_id).and_then(|id| self.index.get(&id)) else {
            return Ok(());
        };
        let bad = |what: String| BadRow { seq: row.seq, what };
        let category = category_index(row.category)
            .ok_or_else(|| bad(format!("category {:?}", row.category)))?;
        let pending = match row.status {
            "settled" => false,
            "pending" => true,
            other => return Err(bad(format!("status {other:?}"))),
        };
        let counterparty = self.counterparty_index(row.counterparty);
        // Copy-on-write: clones this user only if a published snapshot still shares it.
        let account = Arc::make_mut(&mut self.users[slot as usize]).account_mut(row.currency);
        let amount = row.amount;
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
            ts: row.ts,
            amount,
            counterparty,
            category,
        };
        // Rows come in seq order, which the ledger keeps in ts order; stay sorted anyway.
        match account.txs.last() {
            Some(last) if last.ts > row.ts => {
                let at = account.txs.partition_point(|t| t.ts <= row.ts);
                account.txs.insert(at, tx);
            }
            _ => account.txs.push(tx),
        }
        Ok(())
    }
}
