//! The payments example's hot path as a library: the ledger model, the in-memory read
//! model tailed from SQLite, the balance and stats answers, and their canonical JSON
//! (byte-identical to the Go service; see `payments/SPEC.md`). Also the deterministic
//! ledger generator used by tests and benchmarks.
//!
//! It must NOT speak HTTP or spawn threads: the `payments` binary owns sockets, runtimes and
//! the tail loop, and calls [`respond`] with a method, a raw path and a raw query.
//!
//! Main types:
//! - [`open`] loads a ledger file into a [`ReadModel`] and returns the [`Tailer`] that keeps
//!   it current ([`Tailer::poll`], every 100 ms in the service).
//! - [`ReadModel::snapshot`] gives the current immutable [`Snapshot`] without locking.
//! - [`respond`] answers one request into a reusable [`Scratch`] as a [`Reply`].
//! - [`generate`] writes a ledger from a seed ([`GenerateOptions`]).
//!
//! Design: per-user data sits behind an `Arc` inside the snapshot; the tailer applies new
//! rows copy-on-write (only the users that changed are cloned) and publishes a new snapshot
//! through an `ArcSwap`, so readers never wait for a writer and a writer never copies the
//! whole ledger. Each account keeps its transactions sorted by `ts`, so a stats window is a
//! binary search plus one pass; percentiles use `select_nth_unstable`; JSON is written
//! straight into a reused buffer.
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

mod api;
mod error;
mod generate;
mod ids;
mod load;
mod model;

pub use api::{ApiError, DEFAULT_DAYS, Reply, Scratch, parse_days, respond};
pub use error::Error;
pub use generate::{END_TS, GenerateOptions, GenerateSummary, SCHEMA, generate};
pub use ids::UserId;
pub use load::{Tailer, open};
pub use model::{ReadModel, Snapshot};

#[cfg(test)]
mod tests;
