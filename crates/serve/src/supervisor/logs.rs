//! Worker output: each line of a worker's stdout and stderr, prefixed with
//! `[app#index]`, to scalpel's own stdout and stderr through a bounded, lossy writer
//! thread (or a buffer, or nowhere), so a reader that stops never blocks supervision.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

use crate::counters::AppMetrics;

/// Where the workers' stdout and stderr lines go, each prefixed with `[app#index]`.
#[derive(Debug, Clone, Default)]
pub enum WorkerLogs {
    /// To this process's stdout and stderr respectively.
    #[default]
    Inherit,
    /// Nowhere.
    Discard,
    /// Into a buffer (the last lines only), e.g. for tests.
    Capture(LogBuffer),
}

/// The last worker log lines, shared.
#[derive(Debug, Clone, Default)]
pub struct LogBuffer(Arc<Mutex<VecDeque<String>>>);

/// Lines kept by a [`LogBuffer`].
const LOG_BUFFER_LINES: usize = 10_000;

/// Where worker output goes at run time.
#[derive(Debug, Clone)]
pub(crate) enum LogSink {
    /// Through the bounded queue of the process's stdio writer thread.
    Stdio(Arc<StdioWriter>),
    Capture(LogBuffer),
    Discard,
}

impl LogSink {
    /// The process's stdio writer (started on first use; stdout and stderr are the
    /// process's, so there is one), holding at most `limit` bytes of waiting lines.
    pub(crate) fn stdio(limit: usize) -> std::io::Result<Self> {
        static WRITER: std::sync::OnceLock<Arc<StdioWriter>> = std::sync::OnceLock::new();
        if let Some(w) = WRITER.get() {
            return Ok(LogSink::Stdio(w.clone()));
        }
        let w = Arc::new(StdioWriter {
            queue: Mutex::new(LineQueue::default()),
            ready: std::sync::Condvar::new(),
            limit,
        });
        let thread_w = w.clone();
        std::thread::Builder::new()
            .name("scalpel-worker-logs".into())
            .spawn(move || thread_w.run())?;
        Ok(LogSink::Stdio(WRITER.get_or_init(|| w).clone()))
    }

    /// Hands a line on without ever waiting; `false` when it was dropped (the writer is
    /// behind: scalpel's stdout or stderr is not being read).
    fn push(&self, is_err: bool, line: String) -> bool {
        match self {
            LogSink::Stdio(w) => w.push(is_err, line),
            LogSink::Capture(b) => {
                b.push(line);
                true
            }
            LogSink::Discard => true,
        }
    }
}

/// Worker output on its way to scalpel's stdout and stderr: a queue bounded in bytes,
/// written by a thread of its own. A reader that stops (`| less` left open, a full pipe)
/// blocks that thread only; supervision, health checks and the admin endpoints go on,
/// and lines past the bound are dropped and counted.
#[derive(Debug)]
pub(crate) struct StdioWriter {
    queue: Mutex<LineQueue>,
    ready: std::sync::Condvar,
    limit: usize,
}

#[derive(Debug, Default)]
struct LineQueue {
    lines: VecDeque<(bool, String)>,
    bytes: usize,
}

impl StdioWriter {
    fn push(&self, is_err: bool, line: String) -> bool {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        if q.bytes + line.len() > self.limit {
            return false;
        }
        q.bytes += line.len();
        q.lines.push_back((is_err, line));
        drop(q);
        self.ready.notify_one();
        true
    }

    fn run(&self) {
        use std::io::Write as _;
        loop {
            let (is_err, line) = {
                let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
                loop {
                    if let Some(l) = q.lines.pop_front() {
                        q.bytes -= l.1.len();
                        break l;
                    }
                    q = self.ready.wait(q).unwrap_or_else(|e| e.into_inner());
                }
            };
            // One write per line so lines of different workers do not interleave.
            let _ = if is_err {
                writeln!(std::io::stderr().lock(), "{line}")
            } else {
                writeln!(std::io::stdout().lock(), "{line}")
            };
        }
    }
}

impl LogBuffer {
    /// The lines so far (oldest first).
    pub fn lines(&self) -> Vec<String> {
        let b = self.0.lock().unwrap_or_else(|e| e.into_inner());
        b.iter().cloned().collect()
    }

    fn push(&self, line: String) {
        let mut b = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if b.len() == LOG_BUFFER_LINES {
            b.pop_front();
        }
        b.push_back(line);
    }
}

/// Forwards the stdout and stderr of `child` (those that were piped) to `logs`, each
/// line prefixed with `[name]`.
pub(crate) fn forward(
    child: &mut tokio::process::Child,
    name: &Arc<str>,
    logs: &LogSink,
    max: usize,
    metrics: &Arc<AppMetrics>,
) {
    let outputs = [
        (
            child
                .stdout
                .take()
                .map(|o| Box::new(o) as Box<dyn AsyncRead + Send + Unpin>),
            false,
        ),
        (
            child
                .stderr
                .take()
                .map(|e| Box::new(e) as Box<dyn AsyncRead + Send + Unpin>),
            true,
        ),
    ];
    for (out, is_err) in outputs {
        if let Some(out) = out {
            tokio::spawn(forward_lines(
                out,
                name.clone(),
                is_err,
                logs.clone(),
                max,
                metrics.clone(),
            ));
        }
    }
}

/// Forwards a worker's output line by line, prefixed with `[app#index]`. A line is
/// held only up to `max` bytes: the rest of a longer one (a worker writing megabytes
/// without a newline) is skipped and the line marked and counted as cut, so memory stays
/// bounded whatever the worker writes. Lines the sink cannot take at once are dropped and
/// counted: the worker and the supervisor never wait for scalpel's own output.
async fn forward_lines(
    stream: impl AsyncRead + Unpin,
    name: Arc<str>,
    is_err: bool,
    logs: LogSink,
    max: usize,
    metrics: Arc<AppMetrics>,
) {
    let mut reader = BufReader::with_capacity(64 * 1024, stream);
    let mut line: Vec<u8> = Vec::new();
    let mut cut: u64 = 0;
    loop {
        let (used, complete) = {
            let buf = match reader.fill_buf().await {
                Ok(b) if !b.is_empty() => b,
                _ => break,
            };
            let (piece, complete) = match buf.iter().position(|&b| b == b'\n') {
                Some(i) => (&buf[..i], true),
                None => (buf, false),
            };
            let take = piece.len().min(max.saturating_sub(line.len()));
            line.extend_from_slice(&piece[..take]);
            cut += (piece.len() - take) as u64;
            (piece.len() + usize::from(complete), complete)
        };
        reader.consume(used);
        if complete {
            emit_line(&name, is_err, &line, cut, &logs, &metrics);
            line.clear();
            cut = 0;
        }
    }
    if !line.is_empty() || cut > 0 {
        emit_line(&name, is_err, &line, cut, &logs, &metrics);
    }
}

fn emit_line(
    name: &str,
    is_err: bool,
    line: &[u8],
    cut: u64,
    logs: &LogSink,
    metrics: &AppMetrics,
) {
    let mut line = line;
    while let [rest @ .., b'\r'] = line {
        line = rest;
    }
    let mut text = format!("[{name}] {}", String::from_utf8_lossy(line));
    if cut > 0 {
        metrics.log_lines_cut.fetch_add(1, Ordering::Relaxed);
        text.push_str(&format!(" [... line cut: {cut} more bytes]"));
    }
    if !logs.push(is_err, text) {
        metrics.log_lines_dropped.fetch_add(1, Ordering::Relaxed);
    }
}
