//! `--capture`: the requests the proxy receives, sampled with its sampling and redacted
//! with its redaction rules, written to a capture file that `shadow replay --from` and
//! `load --from` read back.
//!
//! The request path only does a `try_send` of what it already holds (the body's bytes
//! are shared, not copied); the redaction runs on the mirror thread and the file is
//! written by the capture writer's own thread behind its bounded queue
//! ([`scalpel_requests::CaptureSink`]). A full queue drops the record and counts it: a
//! slow disk never slows a client.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use bytes::Bytes;
use http::{HeaderMap, Method};
use scalpel_requests::{CaptureRecord, CaptureSink};
use tokio::sync::mpsc;

use super::{Ctx, PathCounters};
use crate::redact::{REDACTED, Redactor};

/// A sampled request on its way to the capture file, not yet redacted.
pub(super) struct CaptureJob {
    time: SystemTime,
    method: Method,
    path_and_query: String,
    /// The end-to-end headers, as forwarded to the primary.
    headers: HeaderMap,
    body: Bytes,
}

/// Offers a request to the capture queue without waiting; a full queue is counted.
pub(super) fn queue(
    ctx: &Ctx,
    time: SystemTime,
    method: &Method,
    pq: &str,
    headers: &HeaderMap,
    body: &Bytes,
) {
    let Some(tx) = &ctx.capture else { return };
    let job = CaptureJob {
        time,
        method: method.clone(),
        path_and_query: pq.to_string(),
        headers: headers.clone(),
        body: body.clone(),
    };
    if tx.try_send(job).is_err() {
        ctx.counters
            .capture_queue_full
            .fetch_add(1, Ordering::Relaxed);
    }
}

/// Redacts each queued request and hands it to the writer (on the mirror thread).
pub(super) async fn run(
    mut jobs: mpsc::Receiver<CaptureJob>,
    sink: Arc<Mutex<Option<CaptureSink>>>,
    redactor: Redactor,
    counters: Arc<PathCounters>,
) {
    while let Some(job) = jobs.recv().await {
        let (record, withheld) = redacted(&redactor, job);
        if withheld.body {
            counters
                .capture_withheld_body
                .fetch_add(1, Ordering::Relaxed);
        }
        if withheld.query {
            counters
                .capture_withheld_query
                .fetch_add(1, Ordering::Relaxed);
        }
        let guard = sink.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(sink) = guard.as_ref() else { return };
        // The sink counts what it drops (queue full, too large).
        sink.offer(record);
    }
}

/// What redaction withheld whole of one captured request.
#[derive(Debug, Clone, Copy, Default)]
struct Withheld {
    body: bool,
    query: bool,
}

/// The capture record of a request, secrets replaced: headers, query parameters, JSON
/// and form fields, as in the stored samples; a body or query the `--redact` rules could
/// not read is withheld whole (and said so, to be counted).
fn redacted(redactor: &Redactor, job: CaptureJob) -> (CaptureRecord, Withheld) {
    let headers = redactor.headers(&job.headers);
    let body = redactor.redact_body(&job.headers, &job.body);
    // `[` and `]` are not allowed in a request target: the marker is percent-encoded so
    // the captured target stays one a server accepts (it decodes back to the marker).
    let target = redactor.redact_target(&job.path_and_query);
    let withheld = Withheld {
        body: body.withheld,
        query: target.withheld,
    };
    let target = target.value.replace(REDACTED, "%5BREDACTED%5D");
    let record = CaptureRecord {
        time: job.time,
        method: job.method,
        path_and_query: target,
        headers: headers
            .iter()
            .map(|(n, v)| (n.clone(), v.clone()))
            .collect(),
        body: body.value,
    };
    (record, withheld)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn captured_requests_are_redacted_and_their_target_stays_valid() {
        let mut headers = HeaderMap::new();
        headers.insert("authorization", "Bearer s3cret".parse().unwrap());
        headers.insert("content-type", "application/json".parse().unwrap());
        headers.insert("x-keep", "1".parse().unwrap());
        let job = CaptureJob {
            time: SystemTime::UNIX_EPOCH,
            method: Method::POST,
            path_and_query: "/v1/pay?token=abc&n=1".into(),
            headers,
            body: Bytes::from_static(br#"{"password":"hunter2","amount_minor":500}"#),
        };
        let (r, withheld) = redacted(&Redactor::new(["token", "password"]), job);
        assert!(!withheld.body && !withheld.query);
        assert_eq!(r.path_and_query, "/v1/pay?token=%5BREDACTED%5D&n=1");
        assert!(r.path_and_query.parse::<http::Uri>().is_ok());
        let find = |n: &str| {
            r.headers
                .iter()
                .find(|(k, _)| k == n)
                .map(|(_, v)| v.clone())
        };
        assert_eq!(find("authorization").unwrap(), REDACTED);
        assert_eq!(find("x-keep").unwrap(), "1");
        let body = String::from_utf8(r.body.to_vec()).unwrap();
        assert!(!body.contains("hunter2") && body.contains("500"), "{body}");
    }
}
