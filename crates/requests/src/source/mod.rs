//! Recorded traffic as a request source: access logs, HAR files and captures.
//!
//! [`RecordedSource::open`] detects the format (or takes the forced one), reads the whole
//! file once, streaming, to count what is usable and why the rest is skipped, and fails
//! when nothing is usable. Requests are then read by [`RecordReader`]s: each has its own
//! buffer and offset over the one open file, reads it again from the start, and holds one
//! record at a time — memory is constant whatever the file size.

mod access_log;
mod capture;
mod filter;
mod har;
mod read;
mod time;

use std::borrow::Cow;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

pub use filter::SourceOptions;
use read::{Line, Memory, PosReader, ReadAt};

use crate::RequestsError;
use crate::set::RenderedRequest;

/// The largest HAR request object or capture line read; larger ones are malformed.
pub(crate) const MAX_RECORD: usize = 64 << 20;

/// The formats of recorded traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SourceFormat {
    /// nginx or Apache access log: common or combined, with or without fields after them
    /// (such as nginx's `$request_time`).
    AccessLog,
    /// HAR 1.2, as exported by browsers and proxies.
    Har,
    /// Scalpel's capture format (see [`crate::CaptureWriter`]).
    Capture,
}

impl SourceFormat {
    /// The name used on command lines and in reports: `access-log`, `har`, `capture`.
    pub fn name(self) -> &'static str {
        match self {
            SourceFormat::AccessLog => "access-log",
            SourceFormat::Har => "har",
            SourceFormat::Capture => "capture",
        }
    }
}

impl std::fmt::Display for SourceFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for SourceFormat {
    type Err = RequestsError;

    /// `access-log` (also `combined`, `common`, `nginx`, `apache`), `har`, `capture`.
    fn from_str(s: &str) -> Result<SourceFormat, RequestsError> {
        match s.to_ascii_lowercase().as_str() {
            "access-log" | "combined" | "common" | "nginx" | "apache" => {
                Ok(SourceFormat::AccessLog)
            }
            "har" => Ok(SourceFormat::Har),
            "capture" => Ok(SourceFormat::Capture),
            _ => Err(RequestsError::InvalidOption {
                option: "from-format",
                value: s.to_owned(),
                message: "expected access-log, har or capture".to_owned(),
            }),
        }
    }
}

/// Why a recorded request was not used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SkipReason {
    /// The line or entry could not be parsed.
    Malformed,
    /// A well-formed record that cannot be replayed: no request line (`"-"`), `CONNECT`,
    /// `OPTIONS *`, a URL that is not http(s).
    NotReplayable,
    /// Its method is not one of the selected ones.
    MethodNotSelected,
    /// Its path matches no include pattern.
    PathNotIncluded,
    /// Its path matches an exclude pattern.
    PathExcluded,
    /// An unsafe method (anything but GET, HEAD, OPTIONS, TRACE) without `allow_unsafe`.
    Unsafe,
}

impl SkipReason {
    /// Every reason, in report order.
    pub const ALL: [SkipReason; 6] = [
        SkipReason::Malformed,
        SkipReason::NotReplayable,
        SkipReason::MethodNotSelected,
        SkipReason::PathNotIncluded,
        SkipReason::PathExcluded,
        SkipReason::Unsafe,
    ];

    /// A short name for tables and JSON: `malformed`, `not_replayable`, …
    pub fn name(self) -> &'static str {
        match self {
            SkipReason::Malformed => "malformed",
            SkipReason::NotReplayable => "not_replayable",
            SkipReason::MethodNotSelected => "method_not_selected",
            SkipReason::PathNotIncluded => "path_not_included",
            SkipReason::PathExcluded => "path_excluded",
            SkipReason::Unsafe => "unsafe_method",
        }
    }

    /// The reason in words.
    pub fn describe(self) -> &'static str {
        match self {
            SkipReason::Malformed => "malformed",
            SkipReason::NotReplayable => "not replayable",
            SkipReason::MethodNotSelected => "method not selected",
            SkipReason::PathNotIncluded => "path not included",
            SkipReason::PathExcluded => "path excluded",
            SkipReason::Unsafe => "unsafe method, not allowed",
        }
    }

    fn slot(self) -> usize {
        self as usize
    }
}

/// How many records were skipped, by reason.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SkipCounts([u64; 6]);

impl SkipCounts {
    /// Records skipped for `reason`.
    pub fn get(&self, reason: SkipReason) -> u64 {
        self.0[reason.slot()]
    }

    /// Records skipped for any reason.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }

    /// The reasons that skipped anything, with their counts, in report order.
    pub fn iter(&self) -> impl Iterator<Item = (SkipReason, u64)> + '_ {
        SkipReason::ALL
            .into_iter()
            .map(|r| (r, self.get(r)))
            .filter(|&(_, n)| n > 0)
    }

    fn add(&mut self, reason: SkipReason) {
        self.0[reason.slot()] += 1;
    }
}

/// A malformed line or entry, as shown to the user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadRecord {
    /// 1-based line in the file (where a HAR entry starts).
    pub line: u64,
    /// What is wrong.
    pub message: String,
}

/// What a recorded-traffic file holds, counted when it was opened.
#[derive(Debug, Clone)]
pub struct SourceSummary {
    /// The format read.
    pub format: SourceFormat,
    /// Records found (usable or not; blank lines and capture headers are not records).
    pub read: u64,
    /// Records that pass the filters: the requests a run sends.
    pub usable: u64,
    /// Records skipped, by reason.
    pub skipped: SkipCounts,
    /// The first five malformed lines or entries.
    pub first_malformed: Vec<BadRecord>,
    /// From the first to the last usable request, by their recorded times.
    pub span: Duration,
    /// Bytes of the file read (later appends are not read).
    pub bytes: u64,
}

impl SourceSummary {
    /// The counts in words, e.g. `120 records: 100 usable, 15 malformed, 5 unsafe method,
    /// not allowed`.
    pub fn describe(&self) -> String {
        let mut text = format!("{} records: {} usable", self.read, self.usable);
        for (reason, n) in self.skipped.iter() {
            text.push_str(&format!(", {n} {}", reason.describe()));
        }
        if let Some(first) = self.first_malformed.first() {
            text.push_str(&format!(
                "; first malformed: line {}: {}",
                first.line, first.message
            ));
        }
        text
    }
}

/// One event of a format reader.
#[derive(Debug)]
pub(crate) enum Event {
    /// A record; its method and path are in the output, headers and body follow with
    /// `complete`.
    Record {
        line: u64,
        time_ns: i64,
    },
    /// A record that is not used (malformed or not replayable).
    Skip {
        line: u64,
        reason: SkipReason,
        message: Cow<'static, str>,
    },
    Eof,
}

/// A reader of one format.
pub(crate) trait Format: Send + std::fmt::Debug {
    /// The next record: method and path into `out` (which is reset), everything checked.
    fn next(&mut self, out: &mut RenderedRequest) -> io::Result<Event>;
    /// The headers and body of the record `next` just returned (already checked).
    fn complete(&mut self, out: &mut RenderedRequest);
    /// Back to the start of the file.
    fn rewind(&mut self);
}

#[derive(Debug)]
struct Inner {
    path: PathBuf,
    src: Arc<dyn ReadAt>,
    end: u64,
    options: SourceOptions,
    summary: SourceSummary,
    /// Recorded time of the first usable request: `Recorded::at` counts from it.
    first_ns: i64,
}

/// A recorded-traffic file, checked and counted, ready to be read by any number of
/// [`RecordReader`]s. Cheap to clone; `Send + Sync`.
#[derive(Debug, Clone)]
pub struct RecordedSource {
    inner: Arc<Inner>,
}

/// One request read from a recorded source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recorded {
    /// Its position among the usable requests, counting on across rounds:
    /// `round * len + k` for the `k`-th usable request of the file.
    pub index: u64,
    /// How many times the reader went back to the start before it (0 on the first pass).
    pub round: u64,
    /// When it was sent, after the first usable request of the file (within its round).
    /// Never decreasing within a round: a record stamped earlier than the one before it
    /// gets the earlier record's time. Scale it for a replay speed with
    /// `at.div_f64(speed)`.
    pub at: Duration,
    /// Its 1-based line in the file (where a HAR entry starts).
    pub line: u64,
}

impl Recorded {
    /// Whether the reader went back to the start before this record.
    pub fn looped(&self) -> bool {
        self.round > 0
    }
}

impl RecordedSource {
    /// Opens a file, detects or takes its format, and counts its records once (streaming;
    /// bytes appended to the file later are not read).
    ///
    /// # Errors
    ///
    /// An unreadable file ([`RequestsError::SourceIo`]), a format that cannot be told
    /// ([`RequestsError::UnknownFormat`]), or no usable request
    /// ([`RequestsError::NoUsableRequest`], with the counts in words).
    pub fn open(path: &Path, options: SourceOptions) -> Result<RecordedSource, RequestsError> {
        let io = |error| RequestsError::SourceIo {
            path: path.to_path_buf(),
            error,
        };
        let file = File::open(path).map_err(io)?;
        let meta = file.metadata().map_err(io)?;
        if meta.is_dir() {
            return Err(io(io::Error::new(
                io::ErrorKind::InvalidInput,
                "is a folder",
            )));
        }
        RecordedSource::from_reader(path, Arc::new(file), meta.len(), options)
    }

    /// The same over bytes in memory; `name` stands for the path in messages.
    ///
    /// # Errors
    ///
    /// As [`RecordedSource::open`].
    pub fn from_bytes(
        name: &str,
        bytes: Vec<u8>,
        options: SourceOptions,
    ) -> Result<RecordedSource, RequestsError> {
        let end = bytes.len() as u64;
        RecordedSource::from_reader(Path::new(name), Arc::new(Memory(bytes)), end, options)
    }

    fn from_reader(
        path: &Path,
        src: Arc<dyn ReadAt>,
        end: u64,
        options: SourceOptions,
    ) -> Result<RecordedSource, RequestsError> {
        let io = |error| RequestsError::SourceIo {
            path: path.to_path_buf(),
            error,
        };
        let format =
            match options.format {
                Some(f) => f,
                None => detect(&src, end).map_err(io)?.map_err(|message| {
                    RequestsError::UnknownFormat {
                        path: path.to_path_buf(),
                        message,
                    }
                })?,
            };
        let mut reader = new_format(format, &src, end);
        let mut summary = SourceSummary {
            format,
            read: 0,
            usable: 0,
            skipped: SkipCounts::default(),
            first_malformed: Vec::new(),
            span: Duration::ZERO,
            bytes: end,
        };
        let mut out = RenderedRequest::default();
        let (mut first_ns, mut last_ns) = (None::<i64>, i64::MIN);
        loop {
            match reader.next(&mut out).map_err(io)? {
                Event::Eof => break,
                Event::Skip {
                    line,
                    reason,
                    message,
                } => {
                    summary.read += 1;
                    summary.skipped.add(reason);
                    if reason == SkipReason::Malformed && summary.first_malformed.len() < 5 {
                        summary.first_malformed.push(BadRecord {
                            line,
                            message: message.into_owned(),
                        });
                    }
                }
                Event::Record { time_ns, .. } => {
                    summary.read += 1;
                    match options.classify(&out.method, &out.path_and_query) {
                        Err(reason) => summary.skipped.add(reason),
                        Ok(()) => {
                            summary.usable += 1;
                            first_ns.get_or_insert(time_ns);
                            last_ns = last_ns.max(time_ns);
                        }
                    }
                }
            }
        }
        let Some(first_ns) = first_ns else {
            let detail = if summary.read == 0 {
                format!("read as {format}: no records")
            } else {
                format!("read as {format}: {}", summary.describe())
            };
            return Err(RequestsError::NoUsableRequest {
                path: path.to_path_buf(),
                detail,
            });
        };
        summary.span = nanos(last_ns.saturating_sub(first_ns));
        Ok(RecordedSource {
            inner: Arc::new(Inner {
                path: path.to_path_buf(),
                src,
                end,
                options,
                summary,
                first_ns,
            }),
        })
    }

    /// The file read.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The format read.
    pub fn format(&self) -> SourceFormat {
        self.inner.summary.format
    }

    /// What the file holds.
    pub fn summary(&self) -> &SourceSummary {
        &self.inner.summary
    }

    /// Usable requests in the file (at least 1).
    pub fn len(&self) -> u64 {
        self.inner.summary.usable
    }

    /// Always false: opening fails when nothing is usable. Here for API symmetry.
    pub fn is_empty(&self) -> bool {
        self.inner.summary.usable == 0
    }

    /// A reader of every usable request, in file order, from the start.
    pub fn reader(&self) -> RecordReader {
        self.share(0, 1)
    }

    /// A reader of the usable requests whose [`Recorded::index`] is `share` modulo `of`:
    /// thread `w` of `T` takes `share(w, T)` and the threads together send every request
    /// once, in file order, without talking to each other. Each reader still parses the
    /// whole file (at over a million access-log lines a second, that is cheap).
    pub fn share(&self, share: u64, of: u64) -> RecordReader {
        let of = of.max(1);
        RecordReader {
            format: new_format(self.inner.summary.format, &self.inner.src, self.inner.end),
            inner: self.inner.clone(),
            next: 0,
            round: 0,
            share: share % of,
            of,
            looping: false,
            last_at: Duration::ZERO,
        }
    }
}

fn nanos(n: i64) -> Duration {
    Duration::from_nanos(u64::try_from(n).unwrap_or(0))
}

fn new_format(format: SourceFormat, src: &Arc<dyn ReadAt>, end: u64) -> Box<dyn Format> {
    match format {
        SourceFormat::AccessLog => Box::new(access_log::AccessLog::new(src.clone(), end)),
        SourceFormat::Har => Box::new(har::Har::new(src.clone(), end)),
        SourceFormat::Capture => Box::new(capture::CaptureReader::new(src.clone(), end)),
    }
}

/// Tells the format from the first lines: a JSON object line that is a capture header or
/// record → capture; any other `{` → HAR; one of the first 20 lines parsing as an access
/// log line → access log. `Ok(Err(message))` when nothing fits.
fn detect(src: &Arc<dyn ReadAt>, end: u64) -> io::Result<Result<SourceFormat, String>> {
    let mut r = PosReader::new(src.clone(), end.min(1 << 20));
    let mut line = Vec::new();
    let mut first: Option<String> = None;
    let mut seen = 0;
    while seen < 20 {
        match r.read_line(&mut line, access_log::MAX_LINE)? {
            Line::Eof => break,
            Line::Full | Line::TooLong => {}
        }
        let text = line
            .strip_prefix(b"\xEF\xBB\xBF")
            .unwrap_or(&line)
            .trim_ascii();
        if text.is_empty() {
            continue;
        }
        seen += 1;
        if first.is_none() {
            first = Some(String::from_utf8_lossy(&text[..text.len().min(80)]).into_owned());
            if text.first() == Some(&b'{') {
                let is_capture = serde_json::from_slice::<crate::capture::CaptureLine<'_>>(text)
                    .is_ok_and(|l| {
                        l.scalpel_capture.is_some() || (l.method.is_some() && l.path.is_some())
                    });
                return Ok(Ok(if is_capture {
                    SourceFormat::Capture
                } else {
                    SourceFormat::Har
                }));
            }
        }
        match access_log::parse_line(text) {
            Ok(_) => return Ok(Ok(SourceFormat::AccessLog)),
            Err((SkipReason::NotReplayable, _)) => return Ok(Ok(SourceFormat::AccessLog)),
            Err(_) => {}
        }
    }
    Ok(Err(match first {
        None => "the file is empty".to_owned(),
        Some(first) => format!(
            "cannot tell the format from its first lines (the first is {first:?}): expected \
             an access log (common or combined), a HAR file or a capture file; name the \
             format to force one"
        ),
    }))
}

/// Reads requests from a [`RecordedSource`], one at a time, into a caller's
/// [`RenderedRequest`]. Owned by one worker; holds one record and a 64 KiB buffer.
#[derive(Debug)]
pub struct RecordReader {
    inner: Arc<Inner>,
    format: Box<dyn Format>,
    /// The usable request `next` of the current round comes next.
    next: u64,
    round: u64,
    share: u64,
    of: u64,
    looping: bool,
    last_at: Duration,
}

impl RecordReader {
    /// With `true`, [`RecordReader::next_into`] goes back to the start at the end of the
    /// file, for ever ([`Recorded::round`] counts the passes); with `false` (the default)
    /// it returns `None` there.
    pub fn looping(mut self, on: bool) -> RecordReader {
        self.looping = on;
        self
    }

    fn changed(&self, message: &str) -> RequestsError {
        RequestsError::SourceChanged {
            path: self.inner.path.clone(),
            message: message.to_owned(),
        }
    }

    fn rewind(&mut self) {
        self.format.rewind();
        self.next = 0;
        self.last_at = Duration::ZERO;
    }

    /// Reads on to the next usable request (of any share); `None` at the end of the file.
    fn advance(
        &mut self,
        out: &mut RenderedRequest,
    ) -> Result<Option<(u64, Duration, u64)>, RequestsError> {
        let io = |error| RequestsError::SourceIo {
            path: self.inner.path.clone(),
            error,
        };
        loop {
            match self.format.next(out).map_err(io)? {
                Event::Eof => return Ok(None),
                Event::Skip { .. } => {}
                Event::Record { line, time_ns } => {
                    if self
                        .inner
                        .options
                        .classify(&out.method, &out.path_and_query)
                        .is_err()
                    {
                        continue;
                    }
                    let k = self.next;
                    self.next += 1;
                    let at = nanos(time_ns.saturating_sub(self.inner.first_ns));
                    self.last_at = self.last_at.max(at);
                    return Ok(Some((k, self.last_at, line)));
                }
            }
        }
    }

    fn finish(&mut self, out: &mut RenderedRequest) {
        self.format.complete(out);
        self.inner.options.rewrite(&mut out.headers);
    }

    /// The next request of this reader's share, in file order: its method, path, headers
    /// (rewritten by the options) and body into `out`.
    ///
    /// # Errors
    ///
    /// A read error, or a looping reader that finds no usable request in a whole pass
    /// (the file was truncated in place while it was replayed).
    pub fn next_into(
        &mut self,
        out: &mut RenderedRequest,
    ) -> Result<Option<Recorded>, RequestsError> {
        let len = self.inner.summary.usable;
        loop {
            let Some((k, at, line)) = self.advance(out)? else {
                if !self.looping {
                    return Ok(None);
                }
                if self.next == 0 {
                    return Err(self.changed("a whole pass found no usable request"));
                }
                self.rewind();
                self.round += 1;
                continue;
            };
            let index = self.round.saturating_mul(len).saturating_add(k);
            if index % self.of != self.share {
                continue;
            }
            self.finish(out);
            return Ok(Some(Recorded {
                index,
                round: self.round,
                at,
                line,
            }));
        }
    }

    /// Request `index` (wrapping: `index % len` of round `index / len`), for a sender
    /// that numbers its requests itself. Moving forward reads on; moving back starts
    /// again from the top of the file, so call it with growing indexes.
    ///
    /// # Errors
    ///
    /// A read error, or fewer usable requests than when the source was opened.
    pub fn get_into(
        &mut self,
        index: u64,
        out: &mut RenderedRequest,
    ) -> Result<Recorded, RequestsError> {
        let len = self.inner.summary.usable.max(1);
        let (round, k) = (index / len, index % len);
        if round != self.round || k < self.next {
            self.rewind();
            self.round = round;
        }
        loop {
            let Some((at_k, at, line)) = self.advance(out)? else {
                return Err(self.changed("it holds fewer usable requests than when it was opened"));
            };
            if at_k == k {
                self.finish(out);
                return Ok(Recorded {
                    index,
                    round,
                    at,
                    line,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_are_shared_and_readers_move_between_threads() {
        fn shared<T: Send + Sync>() {}
        fn movable<T: Send>() {}
        shared::<RecordedSource>();
        movable::<RecordReader>();
        shared::<crate::Mix>();
        shared::<crate::CaptureSink>();
    }

    #[test]
    fn format_names_round_trip() {
        for f in [
            SourceFormat::AccessLog,
            SourceFormat::Har,
            SourceFormat::Capture,
        ] {
            assert_eq!(f.name().parse::<SourceFormat>().unwrap(), f);
        }
        assert_eq!(
            "Combined".parse::<SourceFormat>().unwrap(),
            SourceFormat::AccessLog
        );
        assert!(matches!(
            "csv".parse::<SourceFormat>(),
            Err(RequestsError::InvalidOption {
                option: "from-format",
                ..
            })
        ));
    }
}
