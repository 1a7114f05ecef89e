//! The capture format: requests as a proxy received them, one JSON object per line.
//!
//! Written by [`CaptureWriter`] (directly) or [`CaptureSink`] (a bounded queue and a writer
//! thread, for a proxy that must never wait on a disk), read back as a recorded-traffic
//! source ([`crate::RecordedSource`]). The format is described for users in
//! `docs/requests.md`:
//!
//! ```text
//! {"scalpel_capture":1,"created_us":1767322800000000}
//! {"time_us":1767322800123456,"method":"GET","path":"/v1/users/7/stats?days=30","headers":[["accept","application/json"]]}
//! {"time_us":1767322800234567,"method":"POST","path":"/v1/upload","headers":[["content-type","image/png"]],"body":"iVBORw0K","body_encoding":"base64"}
//! ```
//!
//! Each record is one line, written with one `write` to a file opened for appending, so a
//! proxy killed mid-write loses at most the record being written; that partial line is
//! counted as malformed when read, and a writer reopening the file starts on a new line.

use std::borrow::Cow;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine;
use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method};
use serde::{Deserialize, Serialize};

use crate::RequestsError;

/// Options that create a file readable and writable by its owner only (mode 0600; the
/// umask can only take more away): every file that holds recorded traffic — captures and
/// their rotations here, the shadow store and reports — is created with them. An existing
/// file keeps the mode its owner gave it.
pub fn private_file() -> OpenOptions {
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut o = OpenOptions::new();
    o.mode(0o600);
    o
}

/// Room kept for the header line of a fresh file when deciding that a record is too large.
const HEADER_ALLOWANCE: u64 = 64;

/// The version written in the first line of every capture file.
pub const CAPTURE_VERSION: u32 = 1;

/// One request as received, to be written to a capture file.
///
/// The caller chooses and redacts the headers; the writer writes what it is given.
#[derive(Debug, Clone)]
pub struct CaptureRecord {
    /// When the request arrived.
    pub time: SystemTime,
    /// Its method.
    pub method: Method,
    /// Its path and query, as received (origin form).
    pub path_and_query: String,
    /// The headers to keep, in order.
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// Its body.
    pub body: Bytes,
}

impl CaptureRecord {
    /// An upper bound of the bytes its line takes, for queue budgets (base64 grows a
    /// binary body by a third; JSON escapes are counted at most twice).
    pub fn estimated_size(&self) -> u64 {
        let headers: usize = self
            .headers
            .iter()
            .map(|(n, v)| n.as_str().len() + 2 * v.len() + 8)
            .sum();
        (96 + 2 * self.path_and_query.len() + headers + self.body.len() * 2) as u64
    }
}

#[derive(Serialize, Deserialize)]
pub(crate) struct CaptureLine<'a> {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) scalpel_capture: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) created_us: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) time_us: Option<u64>,
    #[serde(default, borrow, skip_serializing_if = "Option::is_none")]
    pub(crate) method: Option<Cow<'a, str>>,
    #[serde(default, borrow, skip_serializing_if = "Option::is_none")]
    pub(crate) path: Option<Cow<'a, str>>,
    #[serde(default, borrow, skip_serializing_if = "Option::is_none")]
    pub(crate) headers: Option<Vec<Vec<Cow<'a, str>>>>,
    #[serde(default, borrow, skip_serializing_if = "Option::is_none")]
    pub(crate) body: Option<Cow<'a, str>>,
    #[serde(default, borrow, skip_serializing_if = "Option::is_none")]
    pub(crate) body_encoding: Option<Cow<'a, str>>,
}

fn micros(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// Appends the record's line (with its `\n`) to `out`.
pub(crate) fn encode_record(record: &CaptureRecord, out: &mut Vec<u8>) {
    let b64 = base64::engine::general_purpose::STANDARD;
    let headers = record
        .headers
        .iter()
        .map(
            |(name, value)| match std::str::from_utf8(value.as_bytes()) {
                Ok(text) => vec![Cow::Borrowed(name.as_str()), Cow::Borrowed(text)],
                Err(_) => vec![
                    Cow::Borrowed(name.as_str()),
                    Cow::Owned(b64.encode(value.as_bytes())),
                    Cow::Borrowed("base64"),
                ],
            },
        )
        .collect();
    let (body, body_encoding) = if record.body.is_empty() {
        (None, None)
    } else {
        match std::str::from_utf8(&record.body) {
            Ok(text) => (Some(Cow::Borrowed(text)), None),
            Err(_) => (
                Some(Cow::Owned(b64.encode(&record.body))),
                Some(Cow::Borrowed("base64")),
            ),
        }
    };
    let line = CaptureLine {
        scalpel_capture: None,
        created_us: None,
        time_us: Some(micros(record.time)),
        method: Some(Cow::Borrowed(record.method.as_str())),
        path: Some(Cow::Borrowed(&record.path_and_query)),
        headers: Some(headers),
        body,
        body_encoding,
    };
    // Serializing plain strings and numbers into a vector cannot fail.
    let _ = serde_json::to_writer(&mut *out, &line);
    out.push(b'\n');
}

fn header_line(out: &mut Vec<u8>) {
    let line = CaptureLine {
        scalpel_capture: Some(CAPTURE_VERSION),
        created_us: Some(micros(SystemTime::now())),
        time_us: None,
        method: None,
        path: None,
        headers: None,
        body: None,
        body_encoding: None,
    };
    let _ = serde_json::to_writer(&mut *out, &line);
    out.push(b'\n');
}

/// Where a capture file rotates and how many old files are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CaptureOptions {
    /// Rotate before a record would take the file over this many bytes; `None` never
    /// rotates. A record longer than this on its own is dropped (counted).
    pub max_size: Option<u64>,
    /// Rotated files kept beside the current one, as `FILE.1` (newest) … `FILE.N`
    /// (oldest, the logrotate convention); older ones are deleted. 0 deletes the
    /// full file at rotation.
    pub keep: u32,
}

impl Default for CaptureOptions {
    fn default() -> CaptureOptions {
        CaptureOptions {
            max_size: None,
            keep: 1,
        }
    }
}

/// What [`CaptureWriter::write`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// Appended to the current file.
    Appended,
    /// The file was rotated first, then the record written to the new one.
    Rotated,
    /// The record alone is longer than the maximum file size; nothing was written.
    TooLarge,
}

/// Appends records to a capture file, rotating it at a size. Plain file I/O, no thread;
/// see [`CaptureSink`] for the queued version a proxy uses.
#[derive(Debug)]
pub struct CaptureWriter {
    path: PathBuf,
    file: File,
    size: u64,
    options: CaptureOptions,
    line: Vec<u8>,
}

impl CaptureWriter {
    /// Opens `path` for appending (created with its header line when absent or empty).
    /// A file whose last record was cut off by a crash gets a line end first, so the next
    /// record is not glued to the broken one.
    ///
    /// # Errors
    ///
    /// [`RequestsError::Capture`] when the file cannot be opened or written.
    pub fn open(path: &Path, options: CaptureOptions) -> Result<CaptureWriter, RequestsError> {
        let io = |error| RequestsError::Capture {
            path: path.to_path_buf(),
            error,
        };
        let file = private_file()
            .create(true)
            .append(true)
            .read(true)
            .open(path)
            .map_err(io)?;
        let size = file.metadata().map_err(io)?.len();
        let mut writer = CaptureWriter {
            path: path.to_path_buf(),
            file,
            size,
            options,
            line: Vec::new(),
        };
        if size == 0 {
            writer.write_header()?;
        } else {
            let mut last = [0u8];
            writer.file.seek(SeekFrom::Start(size - 1)).map_err(io)?;
            writer.file.read_exact(&mut last).map_err(io)?;
            if last[0] != b'\n' {
                writer.file.write_all(b"\n").map_err(io)?;
                writer.size += 1;
            }
        }
        Ok(writer)
    }

    fn write_header(&mut self) -> Result<(), RequestsError> {
        let mut header = Vec::with_capacity(64);
        header_line(&mut header);
        self.file
            .write_all(&header)
            .map_err(|error| RequestsError::Capture {
                path: self.path.clone(),
                error,
            })?;
        self.size += header.len() as u64;
        Ok(())
    }

    /// Appends one record as one `write`, rotating first when it would not fit.
    ///
    /// # Errors
    ///
    /// [`RequestsError::Capture`] when writing or rotating fails (the disk is full, the
    /// folder went away). The writer stays usable: the next record tries again.
    pub fn write(&mut self, record: &CaptureRecord) -> Result<Written, RequestsError> {
        self.line.clear();
        encode_record(record, &mut self.line);
        let len = self.line.len() as u64;
        let mut written = Written::Appended;
        if let Some(max) = self.options.max_size {
            // A record that would not fit even in a fresh file (after its header line).
            if len + HEADER_ALLOWANCE > max {
                return Ok(Written::TooLarge);
            }
            if self.size + len > max {
                self.rotate()?;
                written = Written::Rotated;
            }
        }
        self.file
            .write_all(&self.line)
            .map_err(|error| RequestsError::Capture {
                path: self.path.clone(),
                error,
            })?;
        self.size += len;
        Ok(written)
    }

    fn rotate(&mut self) -> Result<(), RequestsError> {
        let io = |error| RequestsError::Capture {
            path: self.path.clone(),
            error,
        };
        let numbered = |n: u32| {
            let mut name = self.path.as_os_str().to_owned();
            name.push(format!(".{n}"));
            PathBuf::from(name)
        };
        if self.options.keep == 0 {
            std::fs::remove_file(&self.path).map_err(io)?;
        } else {
            let _ = std::fs::remove_file(numbered(self.options.keep));
            for n in (1..self.options.keep).rev() {
                match std::fs::rename(numbered(n), numbered(n + 1)) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(e)),
                    _ => {}
                }
            }
            std::fs::rename(&self.path, numbered(1)).map_err(io)?;
        }
        self.file = private_file()
            .create(true)
            .append(true)
            .read(true)
            .open(&self.path)
            .map_err(io)?;
        self.size = 0;
        self.write_header()
    }

    /// Bytes in the current file.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The current file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Counters of a [`CaptureSink`], for `/metrics` and the end-of-run summary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CaptureStats {
    /// Records written.
    pub written: u64,
    /// Bytes written, over all files.
    pub bytes_written: u64,
    /// Bytes in the current file.
    pub file_size: u64,
    /// Rotations done.
    pub rotations: u64,
    /// Records dropped because the queue was full (in records or bytes).
    pub dropped_queue_full: u64,
    /// Records dropped because one alone exceeds the maximum file size.
    pub dropped_too_large: u64,
    /// Records lost to write or rotation errors.
    pub write_errors: u64,
    /// Records waiting in the queue now.
    pub queued: u64,
    /// Estimated bytes waiting in the queue now.
    pub queued_bytes: u64,
}

#[derive(Debug, Default)]
struct Counters {
    written: AtomicU64,
    bytes_written: AtomicU64,
    file_size: AtomicU64,
    rotations: AtomicU64,
    dropped_queue_full: AtomicU64,
    dropped_too_large: AtomicU64,
    write_errors: AtomicU64,
    queued: AtomicU64,
    queued_bytes: AtomicU64,
    last_error: Mutex<Option<String>>,
}

/// A capture writer behind a bounded queue, on its own thread.
///
/// [`CaptureSink::offer`] never blocks and never allocates beyond the record: when the
/// queue holds `max_records` records or `max_bytes` (estimated) bytes, the record is
/// dropped and counted. A slow or full disk therefore costs captured records, never the
/// proxy's clients.
#[derive(Debug)]
pub struct CaptureSink {
    tx: Option<SyncSender<(CaptureRecord, u64)>>,
    counters: Arc<Counters>,
    max_bytes: u64,
    thread: Option<JoinHandle<()>>,
}

impl CaptureSink {
    /// Starts the writer thread.
    ///
    /// # Errors
    ///
    /// The thread cannot be spawned.
    pub fn start(
        writer: CaptureWriter,
        max_records: usize,
        max_bytes: u64,
    ) -> Result<CaptureSink, RequestsError> {
        let (tx, rx) = std::sync::mpsc::sync_channel::<(CaptureRecord, u64)>(max_records.max(1));
        let counters = Arc::new(Counters::default());
        counters.file_size.store(writer.size(), Ordering::Relaxed);
        let path = writer.path().to_path_buf();
        let c = counters.clone();
        let thread = std::thread::Builder::new()
            .name("scalpel-capture".to_owned())
            .spawn(move || {
                let mut writer = writer;
                for (record, estimate) in rx {
                    c.queued.fetch_sub(1, Ordering::Relaxed);
                    c.queued_bytes.fetch_sub(estimate, Ordering::Relaxed);
                    let before = writer.size();
                    match writer.write(&record) {
                        Ok(Written::TooLarge) => {
                            c.dropped_too_large.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(done) => {
                            let grew = if done == Written::Rotated {
                                c.rotations.fetch_add(1, Ordering::Relaxed);
                                writer.size()
                            } else {
                                writer.size() - before
                            };
                            c.written.fetch_add(1, Ordering::Relaxed);
                            c.bytes_written.fetch_add(grew, Ordering::Relaxed);
                        }
                        Err(e) => {
                            c.write_errors.fetch_add(1, Ordering::Relaxed);
                            if let Ok(mut last) = c.last_error.lock() {
                                *last = Some(e.to_string());
                            }
                        }
                    }
                    c.file_size.store(writer.size(), Ordering::Relaxed);
                }
            })
            .map_err(|error| RequestsError::Capture { path, error })?;
        Ok(CaptureSink {
            tx: Some(tx),
            counters,
            max_bytes,
            thread: Some(thread),
        })
    }

    /// Queues a record for writing; false when it was dropped (queue full, counted).
    pub fn offer(&self, record: CaptureRecord) -> bool {
        let c = &self.counters;
        let Some(tx) = &self.tx else {
            return false;
        };
        let estimate = record.estimated_size();
        let queued = c.queued_bytes.fetch_add(estimate, Ordering::Relaxed) + estimate;
        if queued > self.max_bytes {
            c.queued_bytes.fetch_sub(estimate, Ordering::Relaxed);
            c.dropped_queue_full.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        c.queued.fetch_add(1, Ordering::Relaxed);
        match tx.try_send((record, estimate)) {
            Ok(()) => true,
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                c.queued.fetch_sub(1, Ordering::Relaxed);
                c.queued_bytes.fetch_sub(estimate, Ordering::Relaxed);
                c.dropped_queue_full.fetch_add(1, Ordering::Relaxed);
                false
            }
        }
    }

    /// The counters now.
    pub fn stats(&self) -> CaptureStats {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        CaptureStats {
            written: get(&c.written),
            bytes_written: get(&c.bytes_written),
            file_size: get(&c.file_size),
            rotations: get(&c.rotations),
            dropped_queue_full: get(&c.dropped_queue_full),
            dropped_too_large: get(&c.dropped_too_large),
            write_errors: get(&c.write_errors),
            queued: get(&c.queued),
            queued_bytes: get(&c.queued_bytes),
        }
    }

    /// The last write error, if any (the count is in [`CaptureStats::write_errors`]).
    pub fn last_error(&self) -> Option<String> {
        self.counters.last_error.lock().ok().and_then(|e| e.clone())
    }

    /// Writes what is queued, stops the thread and returns the final counters.
    pub fn close(mut self) -> CaptureStats {
        self.tx = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        self.stats()
    }
}

impl Drop for CaptureSink {
    fn drop(&mut self) {
        // Closing the channel lets the thread write what is queued and end on its own.
        self.tx = None;
    }
}
