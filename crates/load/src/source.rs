//! Where a run's requests come from: the seam the CLI implements over `scalpel-requests`
//! (templates over data, mixes, recorded traffic), and [`FixedRequest`], the simplest
//! source.

use std::time::Duration;

use crate::request::RequestParts;

/// Where a run's requests come from. Implemented by the CLI over `scalpel-requests`;
/// [`FixedRequest`] is the simplest one.
///
/// Shared by every load thread; each thread asks for its own [`Renderer`], which keeps
/// that thread's buffers and file readers between requests (no lock, no allocation once
/// warm). Request `index` is a pure function of the index for templates and mixes, so
/// every target of an A/B run gets the very same sequence.
pub trait RequestSource: Send + Sync + std::fmt::Debug + 'static {
    /// True when every index renders the same request: it is then encoded once, not per
    /// request.
    fn is_fixed(&self) -> bool;

    /// A renderer for one load thread.
    fn renderer(&self) -> Box<dyn Renderer>;

    /// The endpoints' names when the requests are a mix of endpoints: every figure is then
    /// kept per endpoint too (`endpoints[]` of each step). Empty (the default) otherwise.
    fn endpoints(&self) -> &[String] {
        &[]
    }

    /// The endpoint of request `index`, an index into [`RequestSource::endpoints`]: a pure
    /// function of `index` (requests never sent are counted against it too).
    fn endpoint_of(&self, _index: u64) -> usize {
        0
    }

    /// The recorded schedule, for [`Model::Recorded`]; `None` (the default) for sources
    /// without recorded times.
    fn recorded(&self) -> Option<&dyn RecordedSchedule> {
        None
    }
}

/// Renders requests for one load thread (see [`RequestSource::renderer`]).
pub trait Renderer {
    /// Fills `out` (reused between requests) with request `index`. The indexes one thread
    /// asks for only grow within a segment.
    ///
    /// # Errors
    ///
    /// The request cannot be produced (a recorded file that went away or was truncated
    /// while it was replayed): it is counted not sent, kind `local:source`.
    fn render(&mut self, index: u64, out: &mut RequestParts) -> Result<(), SourceError>;
}

/// Recorded traffic's own schedule: when each request was sent, after the first.
pub trait RecordedSchedule: Send + Sync + std::fmt::Debug {
    /// Requests in one pass over the recording.
    fn len(&self) -> u64;

    /// Always false: a recording has at least one request.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// From the first to the last request, as recorded.
    fn span(&self) -> Duration;

    /// The recorded times of requests `first`, `first + stride`, `first + 2·stride`, … in
    /// order, never decreasing: one load thread's share of the schedule.
    fn times(&self, first: u64, stride: u64) -> Box<dyn RecordedTimes>;
}

/// One thread's walk through a recorded schedule (see [`RecordedSchedule::times`]).
pub trait RecordedTimes {
    /// The next recorded time; `Ok(None)` after the last.
    ///
    /// # Errors
    ///
    /// The recording cannot be read any more; the thread's remaining requests are counted
    /// not sent, kind `local:source`.
    fn next_at(&mut self) -> Result<Option<Duration>, SourceError>;
}

/// A request source that failed while the run was going (see [`Renderer::render`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SourceError(pub String);

/// The same request every time.
#[derive(Debug, Clone)]
pub struct FixedRequest(RequestParts);

impl FixedRequest {
    /// A request without a body, e.g. `FixedRequest::new("GET", "/")`.
    pub fn new(method: &str, path_and_query: &str) -> FixedRequest {
        FixedRequest(RequestParts {
            method: method.to_string(),
            path_and_query: path_and_query.to_string(),
            ..RequestParts::default()
        })
    }

    /// A request from its parts.
    pub fn from_parts(parts: RequestParts) -> FixedRequest {
        FixedRequest(parts)
    }
}

impl RequestSource for FixedRequest {
    fn is_fixed(&self) -> bool {
        true
    }
    fn renderer(&self) -> Box<dyn Renderer> {
        Box::new(self.clone())
    }
}

impl Renderer for FixedRequest {
    fn render(&mut self, _index: u64, out: &mut RequestParts) -> Result<(), SourceError> {
        out.clone_from(&self.0);
        Ok(())
    }
}
