//! The live pages of `scalpel serve`, `scalpel shadow proxy` and `scalpel load --dashboard`:
//! one small front-end (HTML, CSS and JavaScript embedded in the binary) that a tool serves
//! at `/` of its admin address and feeds with JSON snapshots.
//!
//! A tool answers two kinds of request with this crate:
//!
//! - [`Page::asset`]: `GET /`, `GET /live/live.css`, `GET /live/live.js` — the same bytes
//!   every time, compiled in with `include_str!`, nothing fetched from a CDN or anywhere
//!   else at run time. The page holds no data, so a tool may serve it without its admin
//!   token and ask for the token only on the data and the actions.
//! - [`Page::snapshot`] at [`SNAPSHOT_PATH`]: the tool builds a [`Snapshot`] — a JSON value
//!   of its own (documented per tool in `docs/live.md`, so people can build their own pages;
//!   Grafana users keep `/metrics`) plus [`Chart`]s — and gets back the reply the page polls.
//!
//! Replies are plain [`Reply`] values (status, headers, body), so the crate knows nothing of
//! hyper, of the tool's server, or of serve's, shadow's or load's internals. [`History`] is
//! a bounded ring for the "last minutes" series a tool keeps on its control plane.
//!
//! It must NOT read a tool's state itself, run a server, lock anything, or be called on a
//! data plane: a tool builds its snapshot from cheap reads of counters it already keeps,
//! off the request path, when the page asks (at most once a second per open page).
//!
//! # Design choices
//!
//! - **Polling, not server-sent events.** The page fetches the snapshot once a second
//!   (`interval_ms` in the reply, never more than 1000). Each tool already answers plain
//!   request/response admin calls; a poll needs no streaming body type in three different
//!   servers, survives a restarted tool without reconnect logic, and its cost is one
//!   snapshot per open page per second.
//! - **Charts are drawn on the server with the report's SVG code** (`scalpel-present`,
//!   which the load report draws with too), so a live chart looks like the same chart in
//!   `scalpel report html`; the page swaps the `<svg>` in. Tables are built in the browser from the JSON with `textContent` (never
//!   markup from data), so the JSON alone is enough to build a page.
//! - **Light and dark** follow `prefers-color-scheme`; every control is a native button or
//!   input (keyboard focus, a visible focus ring); tables are real tables with captions and
//!   header cells.
//!
//! # Example
//!
//! ```
//! use scalpel_live::{Action, Chart, Kind, Line, Page, Snapshot};
//!
//! let page = Page::new(Kind::Serve, "scalpel serve").with_action(Action::post("Reload config", "reload"));
//! // In the admin server, before the token check:
//! let reply = page.asset("GET", "/").expect("the page");
//! assert_eq!(reply.status, 200);
//! assert!(std::str::from_utf8(&reply.body).unwrap().contains("live/live.js"));
//! // Behind the token, at `scalpel_live::SNAPSHOT_PATH`:
//! let snapshot = Snapshot::new(serde_json::json!({ "apps": [] })).chart("rate", Chart {
//!     title: "requests/s".into(),
//!     lines: vec![Line { name: "web".into(), points: vec![(0.0, 10.0), (1.0, 12.0)], ..Line::default() }],
//!     ..Chart::default()
//! });
//! let reply = page.snapshot(&snapshot);
//! assert_eq!(reply.content_type, "application/json");
//! ```

mod history;
mod page;

pub use history::History;
pub use page::{Action, Kind, Page, Reply, SNAPSHOT_PATH, Snapshot};
pub use scalpel_present::{Chart, Line, color};
