//! The ledger in PostgreSQL: loading a [`ReadModel`] and tailing it by `seq` (as `load.rs`
//! does for SQLite, with the same [`State`]), over a client the caller owns.
//!
//! Order matters for tailing by `seq`: PostgreSQL hands out identity values when a row is
//! inserted, not when it commits, so two writers could commit seq 11 after a reader saw 12.
//! The ledger's one writer (the Go service) appends while holding the `transactions` table
//! in SHARE ROW EXCLUSIVE mode (self-exclusive, and it blocks every other INSERT), so seq
//! values are taken and committed in order and `seq > last` never skips a row.

use std::path::PathBuf;
use std::pin::pin;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::{SinkExt, TryStreamExt};
use payments_model::{Feed, ReadModel, Row};
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, GenericClient, IsolationLevel};

use crate::error::{Error, PgContext};
use crate::generate::{GenerateOptions, GenerateSummary, Plan};
use crate::load::TAIL_BATCH;
use crate::store::{StoreKind, schema};

const TAIL_SQL: &str = "SELECT seq, ts, user_id, currency, amount, status, category, counterparty \
     FROM transactions WHERE seq > $1 ORDER BY seq LIMIT $2";

/// Keeps a read model loaded from PostgreSQL current: call [`PgTailer::poll`] with any
/// client of the database (a pooled one; a connection lost in between is simply another
/// client next time, since the tailer holds only the last `seq` applied).
#[derive(Debug)]
pub struct PgTailer {
    db: String,
    feed: Feed,
}

/// Loads the whole ledger (users, accounts, transactions) in one REPEATABLE READ, read-only
/// transaction on `client`, and returns the read model with the tailer that keeps it
/// current. `db` names the database in errors.
pub async fn open_pg(client: &mut Client, db: &str) -> Result<(Arc<ReadModel>, PgTailer), Error> {
    let tx = client
        .build_transaction()
        .isolation_level(IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await
        .pg(db, "beginning the load")?;
    let mut tailer = PgTailer {
        db: db.to_string(),
        feed: Feed::new(),
    };
    for row in tx
        .query("SELECT id FROM users", &[])
        .await
        .pg(db, "reading users")?
    {
        tailer
            .feed
            .add_user(row.try_get(0).pg(db, "reading users")?);
    }
    for row in tx
        .query("SELECT user_id, currency FROM accounts", &[])
        .await
        .pg(db, "reading accounts")?
    {
        tailer.feed.add_account(
            row.try_get(0).pg(db, "reading accounts")?,
            row.try_get(1).pg(db, "reading accounts")?,
        );
    }
    tailer.read_rows(&tx, i64::MAX).await?;
    tx.commit().await.pg(db, "ending the load")?;
    let model = tailer.feed.model();
    Ok((model, tailer))
}

impl PgTailer {
    /// Applies every transaction with `seq` above the last one applied and, if there were
    /// any, publishes a new snapshot. Returns the number of rows applied.
    pub async fn poll(
        &mut self,
        client: &impl GenericClient,
        model: &ReadModel,
    ) -> Result<usize, Error> {
        let mut total = 0;
        loop {
            let n = self.read_rows(client, TAIL_BATCH).await?;
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

    /// Streams rows (a million at start, without holding them all) into the state.
    async fn read_rows(&mut self, client: &impl GenericClient, limit: i64) -> Result<usize, Error> {
        let db = self.db.as_str();
        let after = self.feed.seq();
        let params: [&(dyn ToSql + Sync); 2] = [&after, &limit];
        let rows = client
            .query_raw(TAIL_SQL, params)
            .await
            .pg(db, "reading transactions")?;
        let mut rows = pin!(rows);
        let mut n = 0;
        while let Some(row) = rows.try_next().await.pg(db, "reading transactions")? {
            let get = |i| row.try_get::<_, &str>(i).pg(db, "reading transactions");
            let seq: i64 = row.try_get(0).pg(db, "reading transactions")?;
            let ts: i64 = row.try_get(1).pg(db, "reading transactions")?;
            let amount: i64 = row.try_get(4).pg(db, "reading transactions")?;
            let ledger_row = Row {
                seq,
                ts,
                user_id: get(2)?,
                currency: get(3)?,
                amount,
                status: get(5)?,
                category: get(6)?,
                counterparty: get(7)?,
            };
            self.feed.apply(&ledger_row).map_err(|bad| Error::BadRow {
                path: PathBuf::from(db),
                seq,
                what: bad.what,
            })?;
            n += 1;
        }
        Ok(n)
    }
}

/// The ledger tables, children first (the order they are dropped in).
const TABLES: &str = "transfers, transactions, accounts, users";

/// Bytes of COPY text sent per message.
const COPY_CHUNK: usize = 1 << 20;

/// Writes a new ledger into the database of `client`: the same rows, in the same order,
/// as [`crate::generate`] writes into SQLite (so `seq` values match too), in one
/// transaction with COPY. A database that already holds a ledger table is refused unless
/// `options` say force, then the tables are dropped first.
pub async fn generate_pg(
    client: &mut Client,
    db: &str,
    options: &GenerateOptions,
) -> Result<GenerateSummary, Error> {
    let plan = Plan::new(options)?;
    let tx = client.transaction().await.pg(db, "beginning")?;
    let existing: i64 = tx
        .query_one(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = current_schema() \
             AND table_name IN ('users', 'accounts', 'transactions', 'transfers')",
            &[],
        )
        .await
        .pg(db, "looking for a ledger")?
        .get(0);
    if existing > 0 {
        if !options.forced() {
            return Err(Error::DbHasLedger(db.to_string()));
        }
        tx.batch_execute(&format!("DROP TABLE IF EXISTS {TABLES}"))
            .await
            .pg(db, "dropping the old ledger")?;
    }
    tx.batch_execute(&schema(StoreKind::Postgres))
        .await
        .pg(db, "creating the schema")?;
    let users = plan
        .users()
        .map(|(id, created_at)| format!("{id}\t{created_at}\n"));
    copy(&tx, db, "COPY users (id, created_at) FROM STDIN", users).await?;
    let rows = plan.rows().map(|r| {
        format!(
            "{}\t{}\t{}\t{}\t{}\t{}\t{}\n",
            r.ts, r.user, r.currency, r.amount, r.status, r.category, r.counterparty
        )
    });
    let copy_rows = "COPY transactions (ts, user_id, currency, amount, status, category, \
                     counterparty) FROM STDIN";
    copy(&tx, db, copy_rows, rows).await?;
    let accounts = plan
        .accounts()
        .into_iter()
        .map(|(u, c, s, p)| format!("{u}\t{c}\t{s}\t{p}\n"));
    let copy_accounts = "COPY accounts (user_id, currency, settled, pending) FROM STDIN";
    copy(&tx, db, copy_accounts, accounts).await?;
    tx.commit().await.pg(db, "committing")?;
    client
        .batch_execute("ANALYZE users, accounts, transactions")
        .await
        .pg(db, "analyzing")?;
    Ok(plan.summary())
}

/// Sends COPY text lines (no tab, newline or backslash inside a value: ids, codes and
/// integers only) in chunks of about a megabyte.
async fn copy(
    tx: &tokio_postgres::Transaction<'_>,
    db: &str,
    statement: &str,
    lines: impl Iterator<Item = String>,
) -> Result<(), Error> {
    let sink = tx.copy_in(statement).await.pg(db, "starting COPY")?;
    let mut sink = pin!(sink);
    let mut chunk = Vec::with_capacity(COPY_CHUNK);
    for line in lines {
        chunk.extend_from_slice(line.as_bytes());
        if chunk.len() >= COPY_CHUNK {
            let full = std::mem::replace(&mut chunk, Vec::with_capacity(COPY_CHUNK));
            sink.send(Bytes::from(full))
                .await
                .pg(db, "sending COPY data")?;
        }
    }
    if !chunk.is_empty() {
        sink.send(Bytes::from(chunk))
            .await
            .pg(db, "sending COPY data")?;
    }
    sink.as_mut().finish().await.pg(db, "finishing COPY")?;
    Ok(())
}
