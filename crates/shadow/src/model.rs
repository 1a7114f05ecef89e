//! What one exchange is made of: the request and the responses of each side.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode};
use serde::{Deserialize, Serialize};

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
#[derive(Debug, Clone)]
pub struct ShadowResponse {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
    pub(crate) latency: Duration,
}

impl ShadowResponse {
    /// A response; `latency` is from sending the request to the last body byte.
    pub fn new(status: StatusCode, headers: HeaderMap, body: Bytes, latency: Duration) -> Self {
        Self {
            status,
            headers,
            body,
            latency,
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

    pub(crate) fn view(&self) -> scalpel_diff::Response<'_> {
        scalpel_diff::Response::new(self.status.as_u16(), &self.headers, &self.body)
    }
}

/// Why a side gave no comparable response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Failure {
    /// No complete answer within the time-out.
    Timeout,
    /// Could not connect, or the connection broke.
    Connect,
    /// The body was over the size limit.
    TooLarge,
    /// The exchange was abandoned (the client went away mid-body).
    Aborted,
}

impl Failure {
    /// The snake_case name used in metrics and reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Timeout => "timeout",
            Self::Connect => "connect",
            Self::TooLarge => "too_large",
            Self::Aborted => "aborted",
        }
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
    /// The primary failed or the client went away before the primary's body ended.
    PrimaryIncomplete,
}

impl SkipReason {
    /// Every reason, for zero-valued metrics.
    pub const ALL: [SkipReason; 4] = [
        Self::QueueFull,
        Self::RequestBodyTooLarge,
        Self::ResponseTooLarge,
        Self::PrimaryIncomplete,
    ];

    /// The snake_case name used in metrics and reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::QueueFull => "queue_full",
            Self::RequestBodyTooLarge => "request_body_too_large",
            Self::ResponseTooLarge => "response_too_large",
            Self::PrimaryIncomplete => "primary_incomplete",
        }
    }
}
