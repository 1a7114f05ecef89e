//! The Node preload: serve's side of it. The script (`preload.js`, compiled into the
//! binary) is written once at start to a private file — mode 0600 in a 0700 directory of
//! its own under `$XDG_RUNTIME_DIR` or the temporary directory, removed at exit — and
//! given to Node workers as `NODE_OPTIONS=--require <file>`, after whatever `NODE_OPTIONS`
//! the user set. Each worker gets the write end of a pipe on fd 4; its lines (`hb <lag>`,
//! `listen <port>`, `fd3 ok`, `fd3 error <why>`) are read here into a [`Beat`]: when the
//! event loop last turned, what the app listened on, whether fd 3 is served.

use std::fmt::Write as _;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::AsyncBufReadExt;

/// The script, as shipped.
const SCRIPT: &str = include_str!("preload.js");

/// The descriptor number the worker finds its heartbeat pipe on.
pub(crate) const PIPE_FD: i32 = 4;

/// The longest line read from a worker's pipe; longer ones are skipped.
const MAX_LINE: usize = 512;

/// The preload script written to its private file; the file and its directory are removed
/// when this is dropped (serve's exit).
#[derive(Debug)]
pub(crate) struct PreloadFile {
    dir: PathBuf,
    file: PathBuf,
}

impl PreloadFile {
    /// Writes the script to a new private directory.
    pub(crate) fn write() -> std::io::Result<Self> {
        use std::io::Write as _;
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        let base = std::env::var_os("XDG_RUNTIME_DIR")
            .map(PathBuf::from)
            .filter(|d| d.is_dir())
            .unwrap_or_else(std::env::temp_dir);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir = base.join(format!("scalpel-serve-{}-{nanos:x}", std::process::id()));
        // 0700 and new: nobody else can have placed or can replace the file Node loads.
        std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
        let file = dir.join("preload.cjs");
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&file)?;
        f.write_all(SCRIPT.as_bytes())?;
        Ok(Self { dir, file })
    }

    #[cfg(test)]
    pub(crate) fn path(&self) -> &std::path::Path {
        &self.file
    }

    /// `NODE_OPTIONS` for a worker: the user's own (the app's `env`, else serve's), then
    /// `--require` of the preload, quoted as Node's option parser reads it.
    pub(crate) fn node_options(&self, user: Option<&str>) -> String {
        let mut out = String::new();
        if let Some(u) = user.map(str::trim).filter(|u| !u.is_empty()) {
            out.push_str(u);
            out.push(' ');
        }
        let path = self.file.display().to_string();
        let _ = write!(
            out,
            "--require \"{}\"",
            path.replace('\\', "\\\\").replace('"', "\\\"")
        );
        out
    }
}

impl Drop for PreloadFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.file);
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// A worker's heartbeat pipe before spawn: the read end (serve's, close-on-exec) and the
/// write end, placed at descriptor 10 or above (so that moving it to [`PIPE_FD`] in the
/// child never meets the socket on fd 3) and non-blocking (a full pipe drops a line in
/// the worker instead of blocking its event loop).
pub(crate) struct Pipe {
    pub(crate) read: OwnedFd,
    pub(crate) write: OwnedFd,
}

impl Pipe {
    pub(crate) fn new() -> std::io::Result<Self> {
        let (r, w) = std::io::pipe()?;
        let write = rustix::io::fcntl_dupfd_cloexec(&w, 10)?;
        drop(w);
        rustix::io::ioctl_fionbio(&write, true)?;
        Ok(Self {
            read: r.into(),
            write,
        })
    }

    pub(crate) fn write_fd(&self) -> i32 {
        self.write.as_raw_fd()
    }
}

/// What a worker's preload has said so far.
#[derive(Debug)]
pub(crate) struct Beat {
    started: Instant,
    /// Milliseconds after `started` of the last line (0: none yet).
    last_ms: AtomicU64,
    /// The last event-loop lag reported.
    lag_ms: AtomicU64,
    listened: Mutex<Vec<u16>>,
    /// `None` until the preload served fd 3 (`Ok`) or failed to (`Err`).
    fd3: Mutex<Option<Result<(), String>>>,
}

impl Beat {
    fn new() -> Self {
        Self {
            started: Instant::now(),
            last_ms: AtomicU64::new(0),
            lag_ms: AtomicU64::new(0),
            listened: Mutex::new(Vec::new()),
            fd3: Mutex::new(None),
        }
    }

    /// How long ago the event loop last turned; `None` before the first beat.
    pub(crate) fn age(&self) -> Option<Duration> {
        match self.last_ms.load(Ordering::Acquire) {
            0 => None,
            ms => Some(
                self.started
                    .elapsed()
                    .saturating_sub(Duration::from_millis(ms)),
            ),
        }
    }

    /// The event-loop lag the preload last measured.
    pub(crate) fn lag(&self) -> Duration {
        Duration::from_millis(self.lag_ms.load(Ordering::Relaxed))
    }

    /// The ports the app's servers asked to listen on, in order.
    pub(crate) fn listened(&self) -> Vec<u16> {
        self.listened
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Whether the preload serves fd 3 (`Some(Ok)`), failed to (`Some(Err)`), or has not
    /// said (`None`).
    pub(crate) fn fd3(&self) -> Option<Result<(), String>> {
        self.fd3.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Takes one line of the preload's.
    pub(crate) fn line(&self, line: &str) {
        let ms = (self.started.elapsed().as_millis() as u64).max(1);
        self.last_ms.store(ms, Ordering::Release);
        let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
        match word {
            "hb" => {
                if let Ok(lag) = rest.trim().parse() {
                    self.lag_ms.store(lag, Ordering::Relaxed);
                }
            }
            "listen" => {
                if let Ok(port) = rest.trim().parse() {
                    self.listened
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(port);
                }
            }
            "fd3" => {
                let verdict = match rest.split_once(' ') {
                    Some(("error", why)) => Err(why.trim().to_string()),
                    _ if rest.trim() == "ok" => Ok(()),
                    _ => Err(rest.trim().to_string()),
                };
                *self.fd3.lock().unwrap_or_else(|e| e.into_inner()) = Some(verdict);
            }
            _ => {}
        }
    }
}

/// Reads a worker's pipe into a new [`Beat`] until the worker closes it (its exit).
pub(crate) fn watch(read: OwnedFd) -> std::io::Result<std::sync::Arc<Beat>> {
    let rx = tokio::net::unix::pipe::Receiver::from_owned_fd(read)?;
    let beat = std::sync::Arc::new(Beat::new());
    let b = beat.clone();
    tokio::spawn(async move {
        let mut reader = tokio::io::BufReader::with_capacity(MAX_LINE, rx);
        let mut buf = Vec::with_capacity(MAX_LINE);
        loop {
            buf.clear();
            // Bounded: a line longer than the buffer is read in pieces and skipped.
            match reader.read_until(b'\n', &mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) if buf.len() > MAX_LINE || buf.last() != Some(&b'\n') => {}
                Ok(_) => b.line(String::from_utf8_lossy(&buf).trim_end()),
            }
        }
    });
    Ok(beat)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_update_what_the_worker_said() {
        let b = Beat::new();
        assert!(b.age().is_none());
        b.line("hb 12");
        assert!(b.age().is_some());
        assert_eq!(b.lag(), Duration::from_millis(12));
        b.line("listen 9100");
        b.line("listen 3001");
        assert_eq!(b.listened(), vec![9100, 3001]);
        assert_eq!(b.fd3(), None);
        b.line("fd3 error EBADF bad file descriptor");
        assert_eq!(b.fd3(), Some(Err("EBADF bad file descriptor".into())));
        b.line("fd3 ok");
        assert_eq!(b.fd3(), Some(Ok(())));
        b.line("something new");
    }

    #[test]
    fn node_options_keep_the_users_and_quote_the_path() {
        let f = PreloadFile::write().unwrap();
        let meta = std::fs::metadata(f.path()).unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        let dir = std::fs::metadata(f.path().parent().unwrap()).unwrap();
        assert_eq!(dir.permissions().mode() & 0o777, 0o700);
        let opts = f.node_options(Some("--max-old-space-size=512"));
        assert_eq!(
            opts,
            format!(
                "--max-old-space-size=512 --require \"{}\"",
                f.path().display()
            )
        );
        assert_eq!(
            f.node_options(None),
            format!("--require \"{}\"", f.path().display())
        );
        let path = f.path().to_path_buf();
        drop(f);
        assert!(!path.exists(), "removed when serve exits");
    }
}
