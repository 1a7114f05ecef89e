//! What to send: request templates filled from data files, weighted mixes of endpoints,
//! and recorded traffic (access logs, HAR files, captures) — plus the capture writer.
//!
//! `scalpel load` and `scalpel shadow` get their requests from here, in one of three ways:
//!
//! - **A template over data.** `GET /v1/users/{id}/stats?days=30` over a file of 16,000
//!   user ids: [`RequestTemplate`] (the `{name}` language), [`DataSet`] (one value per
//!   line, or CSV with a header row), bound into a [`RequestSet`] in an [`Order`]
//!   (sequential or seeded shuffle), rendered on demand into a [`RenderedRequest`].
//! - **A mix of endpoints.** [`Mix`]: a TOML file of `[[request]]` tables, each a
//!   template with a name and a weight; request `i`'s endpoint is a pure function of the
//!   seed and `i`, so every worker and every target sees the same sequence.
//! - **Recorded traffic.** [`RecordedSource`]: an nginx/Apache access log, a HAR file or a
//!   capture, detected by content, filtered and rewritten by [`SourceOptions`], counted
//!   once ([`SourceSummary`]: usable requests, skips by [`SkipReason`], the first five
//!   malformed lines), then read by per-worker [`RecordReader`]s with each request's
//!   recorded time ([`Recorded::at`]) for replaying the recorded schedule, or in order as
//!   a pool, looped.
//!
//! [`CaptureWriter`] and [`CaptureSink`] write the capture format (a proxy's received
//! requests, one JSON object per line, appended, rotated at a size).
//!
//! It must not do network I/O: it knows what to send, never how. Reading data, mix,
//! recorded and capture files is its business; sockets are not. Errors are typed
//! ([`RequestsError`]) and name the file, line, template column or placeholder.
//!
//! # Design
//!
//! - **Validate once, render without failing.** [`RequestSet::new`] checks every data row
//!   (without rendering it); after that [`RequestSet::render_into`] cannot fail, takes no
//!   lock and reuses the caller's buffers (templated header values and bodies go into an
//!   arena inside [`RenderedRequest`] that is reclaimed on the next call), so a load
//!   worker calls it per request without allocating.
//! - **Memory bounded by the values, not the file.** A [`DataSet`] keeps its values in
//!   one compact buffer (about two bytes a row beyond the values); nothing is rendered
//!   ahead per row. Recorded files are never held: readers stream them through a 64 KiB
//!   buffer, one record at a time, with every line and entry size capped.
//! - **Seeded and portable.** The shuffled order is a Fisher–Yates permutation over
//!   SplitMix64 and a mix's picks are SplitMix64 outputs, written out here so that a seed
//!   gives the same sequence on every machine and version.
//! - **Readers, not indexes, for recorded traffic.** A recorded file is read in order by
//!   each worker's own [`RecordReader`] (its own offset over the shared file handle; a
//!   [`RecordedSource::share`] takes every `T`-th request), which keeps memory constant and
//!   needs no lock; [`RecordReader::get_into`] serves a sender that numbers its requests.
//!
//! The template language, data formats, mix files, recorded formats, the capture format
//! and the filters are described for users in `docs/requests.md`.
//!
//! # Example
//!
//! ```
//! use scalpel_requests::{DataSet, Order, RequestSet, RequestTemplate};
//!
//! let template = RequestTemplate::parse(
//!     "GET",
//!     "/v1/users/{id}/stats?days=30",
//!     &["Accept: application/json".to_owned(), "X-User: {id}".to_owned()],
//!     None,
//! )?;
//! let ids = DataSet::from_lines("ids", vec!["u-1".into(), "a b".into()]);
//! let set = RequestSet::new(template, Some(ids), Order::Sequential)?;
//! assert_eq!(set.len(), 2);
//!
//! let second = set.render(1);
//! assert_eq!(second.path_and_query, "/v1/users/a%20b/stats?days=30");
//! assert_eq!(second.headers[1].1, "a b");
//! // Wraps around.
//! assert_eq!(set.render(2).path_and_query, "/v1/users/u-1/stats?days=30");
//! # Ok::<(), scalpel_requests::RequestsError>(())
//! ```
//!
//! Recorded traffic:
//!
//! ```
//! use scalpel_requests::{RecordedSource, RenderedRequest, SourceOptions};
//!
//! let log = br#"10.0.0.1 - - [10/Oct/2000:13:55:36 -0700] "GET /a?x=1 HTTP/1.1" 200 5 "-" "curl/8"
//! 10.0.0.1 - - [10/Oct/2000:13:55:36 -0700] "POST /pay HTTP/1.1" 201 2 "-" "curl/8"
//! 10.0.0.1 - - [10/Oct/2000:13:55:37 -0700] "GET /b HTTP/1.1" 200 5 "-" "curl/8"
//! "#;
//! let source = RecordedSource::from_bytes("access.log", log.to_vec(), SourceOptions::new())?;
//! assert_eq!(source.len(), 2, "the POST is skipped: unsafe methods need allow_unsafe");
//!
//! let mut reader = source.reader();
//! let mut out = RenderedRequest::default();
//! let first = reader.next_into(&mut out)?.unwrap();
//! assert_eq!((out.path_and_query.as_str(), first.at.as_millis()), ("/a?x=1", 0));
//! let second = reader.next_into(&mut out)?.unwrap();
//! // Two lines in second :36, so /b (alone in :37) is 1 s after the first.
//! assert_eq!((out.path_and_query.as_str(), second.at.as_millis()), ("/b", 1000));
//! assert!(reader.next_into(&mut out)?.is_none());
//! # Ok::<(), scalpel_requests::RequestsError>(())
//! ```

mod capture;
mod data;
mod error;
mod mix;
mod order;
mod set;
mod source;
mod template;

pub use capture::{
    CAPTURE_VERSION, CaptureOptions, CaptureRecord, CaptureSink, CaptureStats, CaptureWriter,
    Written, private_file,
};
pub use data::DataSet;
pub use error::RequestsError;
pub use mix::{Mix, MixEntry};
pub use order::Order;
pub use set::{MAX_BODY, RenderedRequest, RequestSet};
pub use source::{
    BadRecord, RecordReader, Recorded, RecordedSource, SkipCounts, SkipReason, SourceFormat,
    SourceOptions, SourceSummary,
};
pub use template::RequestTemplate;
