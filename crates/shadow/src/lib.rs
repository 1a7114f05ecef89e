//! Shadow traffic: send the same requests to the old service and the new one, compare
//! every pair of responses, and keep durable evidence of every difference.
//!
//! Two ways to get pairs: [`Proxy`] sits in front of the primary (the service that
//! answers clients) and mirrors a sample of live requests to a candidate, never letting
//! the candidate delay or fail a client (it may listen with TLS, HTTP/2 or HTTP/1.1 by
//! ALPN, and capture what it receives for later replays); [`replay`] sends every request
//! of a data set (a [`scalpel_requests::RequestSet`]) or of recorded traffic (a
//! [`scalpel_requests::RecordedSource`]: access log, HAR, capture — on its recorded
//! schedule or as a pool, see [`ReplaySource`]) to both before any live traffic. Every
//! [`Upstream`] is reached through `scalpel-http` with its own settings (https, h2, trust,
//! `--resolve`), checked with one connection before any traffic. Both hand each
//! exchange to a [`Recorder`] — the engine that `scalpel serve`'s A/B mode reuses — which
//! compares with [`scalpel_diff`], counts per endpoint and field, separates noise when a
//! secondary copy of the old service takes part, redacts secrets ([`Redactor`]), and
//! writes samples and counters to a SQLite [`Store`] on its own thread. What a run
//! concludes is read from its [`Summary`] in three forms that never disagree: the
//! [`Verdict`] (pass only when pairs were compared, no side failed and at least
//! [`MinConsistency`] matched), the terminal table ([`text_table`]) and the HTML page
//! ([`render_html`]). Settings that cannot work are refused before any traffic, each
//! naming its flag ([`ProxyConfig::validate`], [`ReplayConfig::validate`],
//! [`Schedule::recorded`]).
//!
//! This crate must NOT hold comparison rules of its own (they live in `scalpel-diff`),
//! an HTTP client or TLS code of its own (`scalpel-http`), parsers of recorded traffic
//! (`scalpel-requests`), print to the terminal, or parse command lines (that is the
//! `scalpel` binary's job; it prints the table and the verdict this crate makes). Its pages
//! escape with `scalpel-present`, never the load crates. SQLite and the capture file are
//! never written on a request path.
//!
//! # Example
//!
//! ```no_run
//! use std::sync::Arc;
//! use scalpel_diff::{Comparer, NoiseRule, RouteNormalizer};
//! use scalpel_requests::{DataSet, Order, RequestSet, RequestTemplate};
//! use scalpel_shadow::*;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let settings = CompareSettings::new(Comparer::new().ignore("$.generated_at")?,
//!     RouteNormalizer::default(), NoiseRule::default(), Redactor::default(), 50, false);
//! let recorder = Arc::new(Recorder::new(settings, None));
//! let template = RequestTemplate::parse("GET", "/v1/users/{id}/stats", &[], None)?;
//! let ids = DataSet::from_lines("id", vec!["1".into(), "2".into()]);
//! let set = Arc::new(RequestSet::new(template, Some(ids), Order::Sequential)?);
//! let cfg = ReplayConfig {
//!     primary: Upstream::parse("http://127.0.0.1:8080")?,
//!     candidate: Upstream::parse("http://127.0.0.1:8081")?,
//!     secondary: None,
//!     concurrency: 16,
//!     timeout: std::time::Duration::from_secs(10),
//!     max_body: 8 << 20,
//! };
//! replay(set, cfg, recorder.clone(), Arc::default()).await?;
//! let summary = recorder.summary();
//! print!("{}", text_table(&summary));
//! println!("{}", Verdict::judge(&summary, MinConsistency::ALL)); // PASS: 100.00% consistent, …
//! # Ok(()) }
//! ```
//!
//! # Design
//!
//! The proxy's request path does three cheap things beyond forwarding: a sampling
//! decision, buffering a (bounded) request body, and a `try_send` on a bounded queue.
//! The primary's body is streamed to the client frame by frame and copied up to a limit
//! on the way; the copy reaches the mirror task through a oneshot when the body ends.
//! Mirror tasks wait for a slot of a semaphore, so a slow candidate fills the queue and
//! further mirrors are skipped and counted, never queued without bound — in jobs
//! (`queue`), in bytes (every body a mirror holds is charged to one byte budget) and in
//! age (a mirror that waited too long is dropped). Every request chosen for comparison
//! ends in exactly one counter — compared, failed (by side and kind) or skipped (by
//! reason) — including at shutdown, where what is cut off is `abandoned_at_shutdown`. A
//! request's mismatch is decided at report time from counted "difference signatures"
//! (the set of fields that differed), because whether a field is noise depends on all
//! requests. Bodies are compared after their `Content-Encoding` is undone, by
//! `scalpel_diff::decode_body` (pure, so it lives with the comparison rules).

mod budget;
mod client;
mod model;
mod proxy;
mod recent;
mod recorder;
mod redact;
mod replay;
mod report;
mod store;
mod tally;

pub use client::{Reach, Upstream};
pub use model::{ShadowRequest, ShadowResponse, SkipReason};
pub use proxy::{Proxy, ProxyConfig, ProxyStats};
pub use recent::{EndpointLatency, LatencyFigures, RecentDifference};
pub use recorder::{CompareSettings, DEFAULT_MAX_DECODED_BODY, Observation, Recorder};
pub use redact::{REDACTED, Redacted, Redactor};
pub use replay::{
    Replay, ReplayConfig, ReplayProgress, ReplaySource, ReplayStats, Schedule, replay,
};
pub use report::{MinConsistency, Verdict, render_html, text_table};
pub use store::{Store, StoredRun};
pub use tally::{
    EndpointSummary, FieldSummary, NoiseField, Sample, SampleResponse, Summary, consistency_text,
};

use std::net::SocketAddr;
use std::path::PathBuf;

use scalpel_diff::NoiseRule;

/// What can go wrong outside the comparison itself.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ShadowError {
    /// An upstream URL that cannot be used.
    #[error("bad upstream URL `{url}`: {reason}")]
    Url {
        /// The URL as given.
        url: String,
        /// Why.
        reason: String,
    },
    /// A listen or admin address could not be bound.
    #[error("cannot listen on {addr}: {error}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS error (in the message already, so not a `source`).
        error: std::io::Error,
    },
    /// An `--admin-host` name that is not `host[:port]`.
    #[error("--admin-host {0:?} is not a host name or host:port")]
    AdminHost(String),
    /// The proxy's mirror thread or its runtime could not be started.
    #[error("cannot start the mirror thread: {0}")]
    MirrorThread(std::io::Error),
    /// An upstream whose settings cannot work: a certificate that does not verify or is
    /// for another name, a server that refuses a required h2, an unusable CA file, a host
    /// that does not resolve. Found before any traffic.
    #[error("{role} {url}: {error}")]
    Upstream {
        /// `primary`, `candidate` or `secondary`.
        role: &'static str,
        /// The upstream's URL.
        url: String,
        /// What the connector found (in the message already: not a `source`, so that
        /// a report of the error chain says it once).
        error: scalpel_http::Error,
    },
    /// `--http2` over `http://` (prior knowledge) to a server that does not speak it.
    #[error(
        "{role} {url}: the server does not speak h2c (HTTP/2 over http:// by prior knowledge): {detail}; drop --http2 to use HTTP/1.1"
    )]
    NoH2c {
        /// `primary`, `candidate` or `secondary`.
        role: &'static str,
        /// The upstream's URL.
        url: String,
        /// How the HTTP/2 exchange failed.
        detail: String,
    },
    /// A recorded-traffic file or the capture file cannot be used.
    #[error(transparent)]
    Requests(#[from] scalpel_requests::RequestsError),
    /// A setting out of its range, named by its flag (`--min-consistency 120: …`).
    #[error("{flag} {problem}")]
    Setting {
        /// The `scalpel shadow` flag.
        flag: &'static str,
        /// The value and what was expected.
        problem: String,
    },
    /// The store could not be opened, read or written.
    #[error("store {}: {reason}", path.display())]
    Store {
        /// The store file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}

impl StoredRun {
    /// Rebuilds the summary from the stored counters, with the noise rule the run used
    /// (or `rule` to override it).
    pub fn summary(&self, rule: Option<NoiseRule>) -> Summary {
        let num = |k: &str| self.meta.get(k).and_then(|v| v.parse::<f64>().ok());
        let rule = rule.unwrap_or_else(|| {
            match (num("noise_relative_percent"), num("noise_absolute_percent")) {
                (Some(r), Some(a)) => NoiseRule::new(r, a),
                _ => NoiseRule::default(),
            }
        });
        let secondary = self.meta.get("secondary").is_some_and(|v| v == "true");
        self.tally.summarize(&rule, secondary)
    }
}
