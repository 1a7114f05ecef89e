//! The payments example's ledger stores for the Rust service: the in-memory read model
//! (`payments-model`, re-exported here: [`ReadModel`], [`respond`], [`Scratch`]) loaded and
//! tailed from SQLite or PostgreSQL, and the deterministic ledger generator used by tests
//! and benchmarks, for either store. The answers are byte-identical to the Go service's
//! (see `payments/SPEC.md`).
//!
//! It must NOT speak HTTP, spawn threads or own connections: the `payments` binary owns
//! sockets, runtimes, the PostgreSQL pool and the tail loop, and calls [`respond`] with a
//! method, a raw path and a raw query.
//!
//! Main types:
//! - [`Db`] is a `--db` value: `sqlite:PATH` (or a bare path) or a `postgres://` URL;
//!   [`schema`] gives `payments/schema.sql` for one store.
//! - [`open`] loads a ledger file into a [`ReadModel`] and returns the [`Tailer`] that keeps
//!   it current ([`Tailer::poll`], every 100 ms in the service); [`open_pg`] and
//!   [`PgTailer`] do the same over a PostgreSQL client.
//! - [`ReadModel::snapshot`] gives the current immutable [`Snapshot`] without locking.
//! - [`respond`] answers one request into a reusable [`Scratch`] as a [`Reply`].
//! - [`generate`] writes a ledger from a seed ([`GenerateOptions`]); [`generate_pg`] writes
//!   the same rows into PostgreSQL.
//!
//! PostgreSQL client: `tokio-postgres`, the async client the `postgres` and
//! `deadpool-postgres` crates are built on. The service is tokio already, so the client
//! runs on its runtime, and it is small: no macros, no compile-time query checking, no
//! database needed at build time (sqlx's `query!` wants one, or a prepared offline cache)
//! and a tenth of sqlx's dependencies to compile in CI. Its row stream lets the load read a
//! million rows without holding them, and its COPY sink writes the generated ledger in
//! seconds. The core takes a client; the pool (`deadpool-postgres`) is the binary's.
//!
//! Design: the loaders and tailers of both stores apply rows through one
//! [`payments_model::Feed`], which publishes copy-on-write snapshots (`payments-model`'s
//! crate doc says how); this crate only reads rows.
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! let db = dir.path().join("ledger.db");
//! let summary = payments_core::generate(&db, &payments_core::GenerateOptions::new(50, 7))?;
//! let (model, _tailer) = payments_core::open(&db)?;
//! let snapshot = model.snapshot();
//! let mut scratch = payments_core::Scratch::new();
//! let path = format!("/v1/users/{}/balance", summary.user_ids()[0]);
//! let reply = payments_core::respond(&snapshot, "GET", &path, None, &mut scratch);
//! assert_eq!(reply.status, 200);
//! assert!(reply.body.starts_with(br#"{"user_id":""#));
//! # Ok(()) }
//! ```

mod error;
mod generate;
mod load;
mod pg;
mod store;

pub use error::Error;
pub use generate::{END_TS, GenerateOptions, GenerateSummary, generate};
pub use load::{Tailer, open};
pub use payments_model::{
    ApiError, DEFAULT_DAYS, ReadModel, Reply, Scratch, Snapshot, UserId, parse_days, respond,
};
pub use pg::{PgTailer, generate_pg, open_pg};
pub use store::{Db, PgDb, StoreKind, schema};

#[cfg(test)]
mod tests;
