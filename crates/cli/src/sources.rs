//! What `scalpel load` sends: `scalpel-requests`' templates, mixes and recorded traffic
//! behind the load crate's request seam ([`RequestSource`], one [`Renderer`] per load
//! thread, and a recording's [`RecordedSchedule`]).
//!
//! Each load thread renders into its own reused [`RenderedRequest`] and, for recorded
//! traffic, reads the file with its own reader: no lock, no allocation once warm.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use scalpel_load::result::{MalformedRecord, RecordedInfo};
use scalpel_load::{
    RecordedSchedule, RecordedTimes, Renderer, RequestParts, RequestSource, SourceError,
};
use scalpel_requests::{Mix, RecordReader, RecordedSource, RenderedRequest, RequestSet};

/// Copies a rendered request into the load crate's parts, reusing their buffers. Header
/// values are copied as bytes: a recorded value need not be UTF-8.
fn fill(r: &RenderedRequest, out: &mut RequestParts) {
    out.method.clear();
    out.method.push_str(r.method.as_str());
    out.path_and_query.clear();
    out.path_and_query.push_str(&r.path_and_query);
    out.headers.truncate(r.headers.len());
    for (i, (name, value)) in r.headers.iter().enumerate() {
        match out.headers.get_mut(i) {
            Some((n, v)) => {
                n.clear();
                n.push_str(name.as_str());
                v.clear();
                v.extend_from_slice(value.as_bytes());
            }
            None => out
                .headers
                .push((name.as_str().to_owned(), value.as_bytes().to_vec())),
        }
    }
    out.body.clear();
    out.body.extend_from_slice(&r.body);
}

/// One template over a data file (`-m`, `-H`, `--body`, `--data`).
#[derive(Debug)]
pub(crate) struct TemplateSource {
    set: Arc<RequestSet>,
    fixed: bool,
}

impl TemplateSource {
    pub(crate) fn new(set: RequestSet, fixed: bool) -> TemplateSource {
        TemplateSource {
            set: Arc::new(set),
            fixed,
        }
    }
}

struct TemplateRenderer {
    set: Arc<RequestSet>,
    out: RenderedRequest,
}

impl RequestSource for TemplateSource {
    fn is_fixed(&self) -> bool {
        self.fixed
    }

    fn renderer(&self) -> Box<dyn Renderer> {
        Box::new(TemplateRenderer {
            set: self.set.clone(),
            out: RenderedRequest::default(),
        })
    }
}

impl Renderer for TemplateRenderer {
    fn render(&mut self, index: u64, out: &mut RequestParts) -> Result<(), SourceError> {
        self.set.render_into(index, &mut self.out);
        fill(&self.out, out);
        Ok(())
    }
}

/// A mix of endpoints (`--mix`): request `i` goes to the endpoint the seeded pick gives
/// it, the same for every target; figures are kept per endpoint.
#[derive(Debug)]
pub(crate) struct MixSource {
    mix: Arc<Mix>,
    names: Vec<String>,
}

impl MixSource {
    pub(crate) fn new(mix: Mix) -> MixSource {
        let names = mix.entries().iter().map(|e| e.name().to_owned()).collect();
        MixSource {
            mix: Arc::new(mix),
            names,
        }
    }

    /// The mix.
    pub(crate) fn mix(&self) -> &Mix {
        &self.mix
    }
}

struct MixRenderer {
    mix: Arc<Mix>,
    out: RenderedRequest,
}

impl RequestSource for MixSource {
    fn is_fixed(&self) -> bool {
        false
    }

    fn renderer(&self) -> Box<dyn Renderer> {
        Box::new(MixRenderer {
            mix: self.mix.clone(),
            out: RenderedRequest::default(),
        })
    }

    fn endpoints(&self) -> &[String] {
        &self.names
    }

    fn endpoint_of(&self, index: u64) -> usize {
        self.mix.pick(index)
    }
}

impl Renderer for MixRenderer {
    fn render(&mut self, index: u64, out: &mut RequestParts) -> Result<(), SourceError> {
        self.mix.render_into(index, &mut self.out);
        fill(&self.out, out);
        Ok(())
    }
}

/// Recorded traffic (`--from`): on its recorded schedule, or as a pool used in file order
/// and looped when the run outlasts it.
#[derive(Debug)]
pub(crate) struct RecordedRequests {
    source: RecordedSource,
    /// Set when a request came from a second or later pass over the file.
    looped: Arc<AtomicBool>,
}

impl RecordedRequests {
    pub(crate) fn new(source: RecordedSource) -> RecordedRequests {
        RecordedRequests {
            source,
            looped: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The recording.
    pub(crate) fn source(&self) -> &RecordedSource {
        &self.source
    }

    /// Whether any request of the run came from a second or later pass over the file.
    pub(crate) fn looped(&self) -> bool {
        self.looped.load(Ordering::Relaxed)
    }

    /// What the recording held and how the run used it, for the result: replayed on its
    /// schedule at `speed`, or (`None`) a pool.
    pub(crate) fn info(&self, speed: Option<f64>) -> RecordedInfo {
        let summary = self.source.summary();
        RecordedInfo {
            file: self.source.path().display().to_string(),
            format: summary.format.to_string(),
            schedule: if speed.is_some() { "recorded" } else { "pool" }.to_owned(),
            speed,
            records: summary.read,
            usable: summary.usable,
            skipped: summary
                .skipped
                .iter()
                .map(|(reason, n)| (reason.name().to_owned(), n))
                .collect(),
            first_malformed: summary
                .first_malformed
                .iter()
                .map(|b| MalformedRecord {
                    line: b.line,
                    message: b.message.clone(),
                })
                .collect(),
            span_s: summary.span.as_secs_f64(),
            looped: self.looped(),
        }
    }
}

struct RecordedRenderer {
    reader: RecordReader,
    out: RenderedRequest,
    looped: Arc<AtomicBool>,
}

impl RequestSource for RecordedRequests {
    fn is_fixed(&self) -> bool {
        false
    }

    fn renderer(&self) -> Box<dyn Renderer> {
        Box::new(RecordedRenderer {
            reader: self.source.reader(),
            out: RenderedRequest::default(),
            looped: self.looped.clone(),
        })
    }

    fn recorded(&self) -> Option<&dyn RecordedSchedule> {
        Some(self)
    }
}

impl Renderer for RecordedRenderer {
    fn render(&mut self, index: u64, out: &mut RequestParts) -> Result<(), SourceError> {
        let record = self
            .reader
            .get_into(index, &mut self.out)
            .map_err(|e| SourceError(e.to_string()))?;
        if record.looped() {
            self.looped.store(true, Ordering::Relaxed);
        }
        fill(&self.out, out);
        Ok(())
    }
}

impl RecordedSchedule for RecordedRequests {
    fn len(&self) -> u64 {
        self.source.len()
    }

    fn span(&self) -> Duration {
        self.source.summary().span
    }

    fn times(&self, first: u64, stride: u64) -> Box<dyn RecordedTimes> {
        Box::new(Times {
            reader: self.source.share(first, stride),
            scratch: RenderedRequest::default(),
        })
    }
}

/// One load thread's share of the recorded times (its own reader of the file).
struct Times {
    reader: RecordReader,
    scratch: RenderedRequest,
}

impl RecordedTimes for Times {
    fn next_at(&mut self) -> Result<Option<Duration>, SourceError> {
        self.reader
            .next_into(&mut self.scratch)
            .map(|r| r.map(|r| r.at))
            .map_err(|e| SourceError(e.to_string()))
    }
}
