//! The in-memory read model: per-user accounts with their transactions, published as
//! immutable snapshots.

use std::collections::HashMap;
use std::sync::Arc;

use arc_swap::{ArcSwap, Guard};

use crate::ids::UserId;

/// One applied transaction, as small as the queries need (24 bytes).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tx {
    pub(crate) ts: i64,
    pub(crate) amount: i64,
    /// Index into [`Snapshot::names`].
    pub(crate) counterparty: u32,
    /// Index into [`crate::ids::CATEGORIES`].
    pub(crate) category: u8,
}

/// One account of a user: running balances and its transactions sorted by `ts`.
#[derive(Debug, Clone)]
pub(crate) struct Account {
    pub(crate) currency: Box<str>,
    pub(crate) settled: i64,
    pub(crate) pending: i64,
    /// Sum of the negative pending amounts (money on its way out).
    pub(crate) pending_out: i64,
    pub(crate) txs: Vec<Tx>,
}

/// A user's accounts, sorted by currency code.
#[derive(Debug, Clone, Default)]
pub(crate) struct UserLedger {
    pub(crate) accounts: Vec<Account>,
}

impl UserLedger {
    /// The account in `currency`, created (in sorted position) when missing.
    pub(crate) fn account_mut(&mut self, currency: &str) -> &mut Account {
        let at = match self
            .accounts
            .binary_search_by(|a| (*a.currency).cmp(currency))
        {
            Ok(i) => i,
            Err(i) => {
                self.accounts.insert(
                    i,
                    Account {
                        currency: currency.into(),
                        settled: 0,
                        pending: 0,
                        pending_out: 0,
                        txs: Vec::new(),
                    },
                );
                i
            }
        };
        &mut self.accounts[at]
    }
}

/// The ledger as of one sequence number. Immutable once published; readers hold it for
/// the length of one request.
///
/// Users sit behind their own `Arc` so that publishing a new snapshot copies only the
/// users that changed (copy-on-write), not the whole ledger.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub(crate) seq: i64,
    pub(crate) clock: i64,
    pub(crate) index: Arc<HashMap<UserId, u32>>,
    pub(crate) users: Vec<Arc<UserLedger>>,
    /// Counterparty names by index (user ids first, then other names as met).
    pub(crate) names: Arc<Vec<Box<str>>>,
}

impl Snapshot {
    /// The last transaction sequence applied (0 for an empty ledger).
    pub fn seq(&self) -> i64 {
        self.seq
    }

    /// The ledger clock: `ts` of the newest applied transaction (0 if none).
    pub fn clock(&self) -> i64 {
        self.clock
    }

    /// Number of known users.
    pub fn user_count(&self) -> usize {
        self.users.len()
    }

    /// Number of applied transactions held in memory.
    pub fn transaction_count(&self) -> usize {
        self.users
            .iter()
            .flat_map(|u| u.accounts.iter())
            .map(|a| a.txs.len())
            .sum()
    }

    pub(crate) fn user(&self, id: UserId) -> Option<&UserLedger> {
        self.index.get(&id).map(|&i| &*self.users[i as usize])
    }
}

/// The shared handle: the current [`Snapshot`], swapped atomically by the tailer and read
/// without locks by request handlers.
#[derive(Debug)]
pub struct ReadModel {
    current: ArcSwap<Snapshot>,
}

impl ReadModel {
    pub(crate) fn new(snapshot: Snapshot) -> ReadModel {
        ReadModel {
            current: ArcSwap::from_pointee(snapshot),
        }
    }

    /// The current snapshot; cheap (no lock, usually no reference-count traffic).
    pub fn snapshot(&self) -> Guard<Arc<Snapshot>> {
        self.current.load()
    }

    /// The current snapshot as an owned `Arc`, to keep beyond a short borrow.
    pub fn snapshot_owned(&self) -> Arc<Snapshot> {
        self.current.load_full()
    }

    pub(crate) fn publish(&self, snapshot: Snapshot) {
        self.current.store(Arc::new(snapshot));
    }
}
