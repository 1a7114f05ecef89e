//! Pure comparison of two HTTP responses, for shadow traffic and A/B checks.
//!
//! `scalpel-diff` answers one question: *do these two responses say the same thing?*
//! It compares the status, chosen headers and the body — JSON by structure, field path
//! by field path, anything else byte for byte — and returns a list of [`Difference`]s,
//! each a path and a [`DiffKind`]. Around that it holds the other pure rules the shadow
//! proxy, the replay driver and `scalpel serve`'s A/B mode share: ignore patterns
//! ([`FieldPattern`]), route normalization ([`RouteNormalizer`]), Diffy's noise rule over
//! counts ([`NoiseRule`]) and consistent per-key sampling ([`Sampler`]).
//!
//! It must NOT do I/O: no sockets, files, clocks or threads. Everything here is a
//! function of its inputs, which keeps it easy to test and fuzz and lets every caller
//! bring its own HTTP stack.
//!
//! Undoing `Content-Encoding` ([`decode_body`]: gzip, deflate, br, zstd, with a cap on
//! the decoded size) lives here rather than in `scalpel-shadow`: it is a pure function of
//! bytes, it is part of this crate's question (the same document sent gzip by one side
//! and plain by the other is the same answer; only the `content-encoding` header
//! differs), and every caller of the comparison — the proxy, replay, `scalpel serve`'s
//! A/B mirror — needs it before comparing, and again to show samples as text.
//!
//! # Example
//!
//! ```
//! use http::HeaderMap;
//! use scalpel_diff::{Comparer, DiffKind, Response};
//!
//! let cmp = Comparer::new().ignore("$.items[*].ts").unwrap();
//! let headers = HeaderMap::new();
//! let old = br#"{"balance": 100, "items": [{"id": 1, "ts": 5}, {"id": 2, "ts": 6}]}"#;
//! let new = br#"{"balance": 100, "items": [{"id": 2, "ts": 9}, {"id": 1, "ts": 9}]}"#;
//! let diffs = cmp.compare(&Response::new(200, &headers, old), &Response::new(200, &headers, new));
//! assert_eq!(diffs.len(), 1);
//! assert_eq!(diffs[0].path(), "$.items");
//! assert_eq!(diffs[0].kind(), DiffKind::ArrayOrder);
//! ```
//!
//! # Design
//!
//! Arrays are compared element by element; only when that finds differences and the
//! lengths agree does the differ ask whether the arrays hold the same elements in
//! another order, and then reports one [`DiffKind::ArrayOrder`] instead of many value
//! changes. A length change is one [`DiffKind::ArrayLength`] (element-wise diffs of
//! shifted arrays would only be noise). Numbers compare as JSON values (`1 == 1.0`).

mod compare;
mod decode;
mod noise;
mod path;
mod route;
mod sample;

pub use compare::{Comparer, DiffKind, Difference, Response};
pub use decode::{DecodeError, content_codings, decode_body};
pub use noise::{FieldCounts, NoiseRule, Verdict};
pub use path::FieldPattern;
pub use route::RouteNormalizer;
pub use sample::{SampleKey, Sampler};

/// A rule given to this crate could not be understood.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A field pattern (`--ignore`, `--redact`) is malformed.
    #[error("bad field pattern `{pattern}`: {reason}")]
    Pattern {
        /// The pattern as given.
        pattern: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Not a valid header name.
    #[error("bad header name `{0}`")]
    HeaderName(String),
    /// A route pattern must start with `/`.
    #[error("bad route pattern `{0}`: must start with `/`")]
    Route(String),
    /// A sampling key must be `header:NAME`, `query:NAME` or `path:N`.
    #[error("bad sampling key `{0}`: expected header:NAME, query:NAME or path:N")]
    SampleKey(String),
    /// A percentage outside 0–100.
    #[error("bad percentage {0}: expected 0 to 100")]
    Percent(f64),
}
