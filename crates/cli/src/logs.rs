//! Log lines to stderr that never make their caller wait: for `scalpel serve`, whose
//! supervisor and admin endpoints must go on when nobody reads stderr (a paused terminal,
//! a full pipe). Lines go through a queue bounded in bytes to a thread that writes them;
//! past the bound they are dropped, and the count is written once the writer catches up.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Bytes of log lines waiting at most.
const LIMIT: usize = 1 << 20;

#[derive(Debug, Default)]
struct Queue {
    lines: VecDeque<Vec<u8>>,
    bytes: usize,
    dropped: u64,
    /// The writer thread is in a write (so an empty queue is not yet written out).
    writing: bool,
}

#[derive(Debug, Default)]
struct Shared {
    queue: Mutex<Queue>,
    ready: Condvar,
    idle: Condvar,
}

/// The `MakeWriter` for tracing: each event is collected, then queued whole.
#[derive(Debug, Clone)]
pub(crate) struct LossyStderr(Arc<Shared>);

/// Waits (bounded) for the queued lines at exit.
#[derive(Debug)]
pub(crate) struct Flush(Arc<Shared>);

/// Starts the writer thread, writing to stderr.
pub(crate) fn lossy_stderr() -> (LossyStderr, Flush) {
    lossy(std::io::stderr())
}

/// Starts the writer thread, writing to `out`.
fn lossy(out: impl std::io::Write + Send + 'static) -> (LossyStderr, Flush) {
    let shared = Arc::new(Shared::default());
    let thread = shared.clone();
    let started = std::thread::Builder::new()
        .name("scalpel-log".into())
        .spawn(move || run(&thread, out));
    if started.is_err() {
        // No thread: lines pile up to the bound and are dropped; nothing blocks.
        eprintln!("scalpel: cannot start the log writer thread; logs are dropped");
    }
    (LossyStderr(shared.clone()), Flush(shared))
}

fn run(shared: &Shared, mut out: impl std::io::Write) {
    loop {
        let (line, dropped) = {
            let mut q = shared.queue.lock().unwrap_or_else(|e| e.into_inner());
            loop {
                if let Some(l) = q.lines.pop_front() {
                    q.bytes -= l.len();
                    q.writing = true;
                    let dropped = std::mem::take(&mut q.dropped);
                    break (l, dropped);
                }
                shared.idle.notify_all();
                q = shared.ready.wait(q).unwrap_or_else(|e| e.into_inner());
            }
        };
        if dropped > 0 {
            let _ = writeln!(out, "[{dropped} log lines dropped: stderr was not read]");
        }
        let _ = out.write_all(&line);
        shared
            .queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .writing = false;
    }
}

impl Flush {
    /// Waits until every queued line is written, at most `limit`.
    pub(crate) fn wait(&self, limit: Duration) {
        let deadline = Instant::now() + limit;
        let mut q = self.0.queue.lock().unwrap_or_else(|e| e.into_inner());
        while !q.lines.is_empty() || q.writing {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            q = self
                .0
                .idle
                .wait_timeout(q, left.min(Duration::from_millis(50)))
                .map(|(q, _)| q)
                .unwrap_or_else(|e| e.into_inner().0);
        }
    }
}

/// One event's text, queued when dropped.
#[derive(Debug)]
pub(crate) struct Line {
    shared: Arc<Shared>,
    buf: Vec<u8>,
}

impl std::io::Write for Line {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for Line {
    fn drop(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        let mut q = self.shared.queue.lock().unwrap_or_else(|e| e.into_inner());
        if q.bytes + self.buf.len() > LIMIT {
            q.dropped += 1;
            return;
        }
        q.bytes += self.buf.len();
        q.lines.push_back(std::mem::take(&mut self.buf));
        drop(q);
        self.shared.ready.notify_one();
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LossyStderr {
    type Writer = Line;

    fn make_writer(&'a self) -> Line {
        Line {
            shared: self.0.clone(),
            buf: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;
    use std::sync::mpsc;
    use tracing_subscriber::fmt::MakeWriter as _;

    /// A stderr whose reader stopped: every write waits until the test lets it go.
    struct Stuck {
        go: mpsc::Receiver<()>,
        seen: Arc<Mutex<Vec<u8>>>,
    }

    impl std::io::Write for Stuck {
        fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
            let _ = self.go.recv();
            self.seen.lock().unwrap().extend_from_slice(data);
            Ok(data.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Logging never waits for a stderr nobody reads: 8 MiB of lines are taken at once
    /// while the writer is stuck (past the bound they are dropped), and once it moves
    /// again the count of dropped lines is written.
    #[test]
    fn a_stuck_stderr_never_blocks_logging() {
        let (go, gate) = mpsc::channel();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (writer, flush) = lossy(Stuck {
            go: gate,
            seen: seen.clone(),
        });
        let (done_tx, done) = mpsc::channel();
        let logging = std::thread::spawn(move || {
            let line = vec![b'x'; 1023];
            for _ in 0..8192 {
                let mut w = writer.make_writer();
                w.write_all(&line).unwrap();
                w.write_all(b"\n").unwrap();
            }
            done_tx.send(()).unwrap();
        });
        assert!(
            done.recv_timeout(Duration::from_secs(60)).is_ok(),
            "logging waited for the stuck writer"
        );
        logging.join().unwrap();
        // Let the writer go: everything queued comes out, with the count of the rest.
        std::thread::spawn(move || while go.send(()).is_ok() {});
        flush.wait(Duration::from_secs(60));
        let text = String::from_utf8_lossy(&seen.lock().unwrap()).into_owned();
        // The writer may start late and take a first count while the logger still drops,
        // so the drops can be reported in more than one note: add them all.
        let notes: Vec<u64> = text
            .lines()
            .filter_map(|l| l.strip_prefix('[')?.split(' ').next()?.parse().ok())
            .collect();
        assert!(!notes.is_empty(), "a dropped-lines note");
        let dropped: u64 = notes.iter().sum();
        let written = text.lines().filter(|l| l.starts_with('x')).count() as u64;
        assert!(
            dropped > 0 && written > 0,
            "{dropped} dropped, {written} written"
        );
        assert_eq!(dropped + written, 8192);
    }
}
