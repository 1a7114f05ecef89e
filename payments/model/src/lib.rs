//! The payments example's hot path without I/O: the in-memory read model of a ledger and
//! its answers — `GET /v1/users/{id}/balance` and `/stats` as status and canonical JSON,
//! byte-identical to the Go service (see `payments/SPEC.md`).
//!
//! It must NOT read a database, speak HTTP, spawn threads or print. `payments-core` feeds it
//! from SQLite or PostgreSQL for the `payments` binary; `payments-ffi` feeds it the rows the
//! Go service reads and answers through a C ABI (tier 3 of the ladder). Keeping the store
//! clients out of this crate is what lets the C library stay small: the Go service links
//! its own SQLite (go-sqlite3), and a static library carrying rusqlite's bundled copy
//! would define every `sqlite3_*` symbol a second time.
//!
//! Main types:
//! - [`Feed`] takes users, accounts and transaction [`Row`]s in ledger order and publishes
//!   them into a [`ReadModel`].
//! - [`ReadModel::snapshot`] gives the current immutable [`Snapshot`] without locking.
//! - [`respond`] answers one request into a reusable [`Scratch`] as a [`Reply`].
//!
//! Design: per-user data sits behind an `Arc` inside the snapshot; the feed applies rows
//! copy-on-write (only the users that changed are cloned) and publishes a new snapshot
//! through an `ArcSwap`, so readers never wait for a writer and a writer never copies the
//! whole ledger. Each account keeps its transactions sorted by `ts`, so a stats window is
//! a binary search plus one pass; percentiles use `select_nth_unstable`; JSON is written
//! straight into a reused buffer.
//!
//! ```
//! use payments_model::{Feed, Row, Scratch, respond};
//!
//! let mut feed = Feed::new();
//! feed.add_user("u0123456789ab");
//! feed.apply(&Row {
//!     seq: 1,
//!     ts: 1_782_777_600,
//!     user_id: "u0123456789ab",
//!     currency: "EUR",
//!     amount: 1500,
//!     status: "settled",
//!     category: "topup",
//!     counterparty: "ext:topup",
//! })?;
//! let model = feed.model();
//! let mut scratch = Scratch::new();
//! let reply = respond(&model.snapshot(), "GET", "/v1/users/u0123456789ab/balance", None, &mut scratch);
//! assert_eq!(reply.status, 200);
//! assert_eq!(
//!     reply.body,
//!     br#"{"user_id":"u0123456789ab","seq":1,"balances":[{"currency":"EUR","settled":1500,"pending":0,"available":1500}]}"#
//! );
//! # Ok::<(), payments_model::BadRow>(())
//! ```

mod api;
mod feed;
mod ids;
mod model;

pub use api::{ApiError, DEFAULT_DAYS, Reply, Scratch, parse_days, respond};
pub use feed::{BadRow, Feed, Row};
pub use ids::{SECONDS_PER_DAY, UserId};
pub use model::{ReadModel, Snapshot};
