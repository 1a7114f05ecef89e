//! What one exchange is made of: the request and the responses of each side.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode};
use serde::{Deserialize, Serialize};

use crate::budget::Charge;

/// A request as sent to every side, body buffered.
#[derive(Debug, Clone)]
pub struct ShadowRequest {
    pub(crate) method: Method,
    pub(crate) path_and_query: String,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
}

impl ShadowRequest {
    /// A request of `method` to `path_and_query` (e.g. `/v1/users/7?days=30`).
    pub fn new(
        method: Method,
        path_and_query: impl Into<String>,
        headers: HeaderMap,
        body: Bytes,
    ) -> Self {
        Self {
            method,
            path_and_query: path_and_query.into(),
            headers,
            body,
        }
    }

    /// The method.
    pub fn method(&self) -> &Method {
        &self.method
    }

    /// The path and query.
    pub fn path_and_query(&self) -> &str {
        &self.path_and_query
    }
}

/// A complete response of one side.
#[derive(Debug)]
pub struct ShadowResponse {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
    pub(crate) latency: Duration,
    /// The mirror byte budget this body holds (proxy mirrors only), given back when the
    /// response is dropped after comparison.
    #[allow(dead_code, reason = "held for its Drop, which gives the bytes back")]
    pub(crate) charge: Option<Charge>,
}

impl Clone for ShadowResponse {
    /// The clone shares the body's bytes; the budget charge stays with the original.
    fn clone(&self) -> Self {
        Self {
            status: self.status,
            headers: self.headers.clone(),
            body: self.body.clone(),
            latency: self.latency,
            charge: None,
        }
    }
}

impl ShadowResponse {
    /// A response; `latency` is from sending the request to the last body byte.
    pub fn new(status: StatusCode, headers: HeaderMap, body: Bytes, latency: Duration) -> Self {
        Self {
            status,
            headers,
            body,
            latency,
            charge: None,
        }
    }

    /// The status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The body.
    pub fn body(&self) -> &Bytes {
        &self.body
    }

    /// The headers.
    pub fn headers(&self) -> &HeaderMap {
        &self.headers
    }

    /// From sending the request to the last body byte.
    pub fn latency(&self) -> Duration {
        self.latency
    }
}

/// Why a request chosen for comparison was not compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SkipReason {
    /// The mirror queue was full (the candidate is slower than the traffic).
    QueueFull,
    /// The request body was over `--max-body`, so it could not be replayed.
    RequestBodyTooLarge,
    /// The primary's body was over the capture limit.
    ResponseTooLarge,
    /// The client went away before the primary's body ended, so there is no complete
    /// answer to compare (a primary that fails is an error, `primary:KIND`, not a skip).
    PrimaryIncomplete,
    /// The mirror byte budget (queued and in-flight request and response bodies) was
    /// spent.
    OverBudget,
    /// The mirror waited in the queue longer than the maximum age: its candidate answer
    /// would be compared with a primary answer from too long ago.
    TooOld,
    /// A body, once its `Content-Encoding` was undone, was over the decoded-size cap.
    DecodedTooLarge,
    /// The proxy was stopped before the mirror finished (queued, or still in flight when
    /// the shutdown time was up).
    AbandonedAtShutdown,
}

impl SkipReason {
    /// Every reason, for zero-valued metrics.
    pub const ALL: [SkipReason; 8] = [
        Self::QueueFull,
        Self::RequestBodyTooLarge,
        Self::ResponseTooLarge,
        Self::PrimaryIncomplete,
        Self::OverBudget,
        Self::TooOld,
        Self::DecodedTooLarge,
        Self::AbandonedAtShutdown,
    ];

    /// The snake_case name used in metrics and reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::QueueFull => "queue_full",
            Self::RequestBodyTooLarge => "request_body_too_large",
            Self::ResponseTooLarge => "response_too_large",
            Self::PrimaryIncomplete => "primary_incomplete",
            Self::OverBudget => "over_budget",
            Self::TooOld => "too_old",
            Self::DecodedTooLarge => "decoded_too_large",
            Self::AbandonedAtShutdown => "abandoned_at_shutdown",
        }
    }
}
