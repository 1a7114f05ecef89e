//! Processes of a test: the `scalpel` binary, children killed however a test ends, waits
//! with a deadline, signals, this test binary re-run as a helper child, scratch folders.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, ExitStatus, Output, Stdio};
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The `scalpel` binary cargo built for this test run. Cargo names it in
/// `CARGO_BIN_EXE_scalpel` while it runs an integration test of the package that has it
/// (the CLI's); otherwise it sits in the target profile directory, beside `deps/` where
/// the test binary runs.
pub fn scalpel_bin() -> PathBuf {
    if let Some(path) = std::env::var_os("CARGO_BIN_EXE_scalpel") {
        return PathBuf::from(path);
    }
    let path = profile_dir().join("scalpel");
    assert!(
        path.exists(),
        "{} is not built: cargo build -p scalpel",
        path.display()
    );
    path
}

/// The target profile directory of this test binary (`target/release` for
/// `target/release/deps/NAME-HASH`).
pub(crate) fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut dir = exe.parent().expect("a directory").to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    dir
}

/// Runs `scalpel ARGS` (stdin closed, stdout and stderr captured) with a deadline of
/// 120 s that only turns a hang into a failure.
pub fn scalpel(args: &[&str]) -> Output {
    let child = Command::new(scalpel_bin())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the scalpel binary runs");
    finish(
        child,
        Duration::from_secs(120),
        &format!("scalpel {args:?}"),
    )
}

/// Waits for `child` (stdout and stderr piped) and returns its output; past `limit` it is
/// killed and the test fails naming `what`, with the child's stderr: a deadline that only
/// turns a hang into a failure.
pub fn finish(mut child: Child, limit: Duration, what: &str) -> Output {
    // Drained on threads: a child that fills a pipe nobody reads would never exit.
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    let Some(status) = wait_exit(&mut child, limit) else {
        let _ = child.kill();
        let _ = child.wait();
        let stderr = stderr.join().unwrap_or_default();
        panic!("{what} hung; stderr: {}", String::from_utf8_lossy(&stderr));
    };
    Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    }
}

fn drain(pipe: Option<impl Read + Send + 'static>) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut all = Vec::new();
        if let Some(mut pipe) = pipe {
            let _ = pipe.read_to_end(&mut all);
        }
        all
    })
}

/// Waits for `child` to exit, `limit` at most; `None` when it is still running.
pub fn wait_exit(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("wait for a child") {
            return Some(status);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sends signal `name` (`"TERM"`, `"HUP"`, `"KILL"`, `"INT"`, `"STOP"`, `"CONT"`…) to
/// process `pid`; panics when it cannot be sent (no such process).
pub fn signal(pid: u32, name: &str) {
    let sig = nix::sys::signal::Signal::from_str(&format!("SIG{name}"))
        .unwrap_or_else(|_| panic!("no signal SIG{name}"));
    let target = nix::unistd::Pid::from_raw(i32::try_from(pid).expect("a pid"));
    nix::sys::signal::kill(target, sig).unwrap_or_else(|e| panic!("kill -{name} {pid}: {e}"));
}

/// Runs `curl -sS --max-time 20 ARGS` (a client that is not ours) and returns what it
/// wrote on stdout; fails the test when curl fails.
pub fn curl(args: &[&str]) -> String {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "20"])
        .args(args)
        .output()
        .expect("curl is not installed: run scripts/setup.sh");
    assert!(
        out.status.success(),
        "curl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Is process `pid` still running: neither gone nor a zombie (procstat's reading of
/// `/proc/PID/stat`).
pub fn process_alive(pid: u32) -> bool {
    !scalpel_procstat::process_exited(pid)
}

/// CPU seconds between two procstat readings of one tree, through procstat's public API
/// (its CPU% times the wall time between them).
pub fn cpu_seconds(a: &scalpel_procstat::TreeReading, b: &scalpel_procstat::TreeReading) -> f64 {
    scalpel_procstat::cpu_percent(a, b) / 100.0 * b.at.duration_since(a.at).as_secs_f64()
}

/// A child process killed (SIGKILL) and reaped when dropped, so a failing test leaves
/// nothing running; derefs to the [`Child`].
#[derive(Debug)]
pub struct KillOnDrop(pub Child);

impl std::ops::Deref for KillOnDrop {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for KillOnDrop {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Collects the lines of a child's pipe (its stderr, usually) on a thread, so the child
/// never blocks on a full pipe; the lines so far are in the returned buffer.
pub fn collect_lines(pipe: impl Read + Send + 'static) -> Arc<Mutex<Vec<String>>> {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let sink = lines.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines().map_while(Result::ok) {
            sink.lock().unwrap_or_else(|e| e.into_inner()).push(line);
        }
    });
    lines
}

/// This test binary again, to run the ignored test `test` (its full path, e.g.
/// `load_cli::child_server_process`) alone as a helper process: a real server or writer
/// of the test's own, in another process. The caller adds its environment and pipes.
pub fn child_test(test: &str) -> Command {
    let mut command = Command::new(std::env::current_exe().expect("the test binary's path"));
    command.args([
        "--exact",
        test,
        "--ignored",
        "--nocapture",
        "--test-threads",
        "1",
    ]);
    command
}

/// A helper server of the test's own in another process (see [`child_server`]).
#[derive(Debug)]
pub struct ChildServer {
    /// The process, killed when this is dropped.
    pub child: KillOnDrop,
    /// Where it listens on loopback.
    pub port: u16,
}

/// Starts [`child_test`]`(test)` with `env` as a server: the ignored test prints `PORT n`
/// once it listens and lives until its stdin closes (when this is dropped) or it is
/// killed.
pub fn child_server(test: &str, env: &[(&str, &str)]) -> ChildServer {
    let mut child = KillOnDrop(
        child_test(test)
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the test binary runs"),
    );
    let port = read_port(child.stdout.take().expect("stdout piped"));
    ChildServer { child, port }
}

/// Reads `stdout` until a line holding `PORT n` (what a helper child prints once it
/// listens; libtest may print its `test … ...` prefix on the same line).
fn read_port(stdout: ChildStdout) -> u16 {
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("the child's stdout");
        if let Some((_, p)) = line.split_once("PORT ") {
            return p.trim().parse().expect("a port number");
        }
    }
    panic!("the child ended without printing its port");
}

/// A fresh, empty directory for one test under the target directory's scratch space
/// (`target/tmp`, what cargo names `CARGO_TARGET_TMPDIR`), left in place after the test
/// to be looked at. Unique per call in this process: tests of one binary that pick the
/// same name never share it.
pub fn scratch(test: &str) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let base = profile_dir()
        .parent()
        .map_or_else(std::env::temp_dir, |target| target.join("tmp"));
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let dir = base.join(format!("{test}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|e| panic!("scratch directory {}: {e}", dir.display()));
    dir
}

/// The text of `path` as JSON (panics naming the file when it is not).
pub fn read_json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}: {text}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scratch_directories_are_fresh_and_never_shared() {
        let a = scratch("same");
        std::fs::write(a.join("f"), "x").unwrap();
        let b = scratch("same");
        assert_ne!(a, b);
        assert!(b.read_dir().unwrap().next().is_none(), "{b:?} is not empty");
        assert!(a.join("f").exists());
    }

    #[test]
    fn finish_returns_what_a_child_wrote_and_a_hang_fails() {
        let child = Command::new("sh")
            .args(["-c", "echo out; echo err >&2; exit 3"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out = finish(child, Duration::from_secs(30), "sh");
        assert_eq!(out.status.code(), Some(3));
        assert_eq!(
            (&out.stdout[..], &out.stderr[..]),
            (&b"out\n"[..], &b"err\n"[..])
        );
        let sleeper = Command::new("sleep")
            .arg("30")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let pid = sleeper.id();
        let hung =
            std::panic::catch_unwind(|| finish(sleeper, Duration::from_millis(200), "sleep"));
        assert!(hung.is_err(), "a hang must fail the test");
        assert!(!process_alive(pid), "the hung child is killed");
    }

    #[test]
    fn signals_reach_the_process_by_name() {
        let mut child = KillOnDrop(Command::new("sleep").arg("30").spawn().unwrap());
        signal(child.id(), "TERM");
        let status = wait_exit(&mut child, Duration::from_secs(30)).expect("exited");
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(15)
        );
    }
}
