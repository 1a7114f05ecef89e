//! Starting a worker process, in one place: its command line (`{port}` and `{index}` in
//! the arguments), its environment ([`worker_env`]: serve's own less its secrets, the
//! app's `env`, then `PORT` and `WORKER_INDEX` under their configured names; in direct
//! mode the whole environment built before fork, with systemd's `LISTEN_FDS`, `LISTEN_FDNAMES` and `LISTEN_PID`, and the app's socket
//! on fd 3), its working directory, its own process group, its stdio, and its death with
//! the balancer; for Node workers the preload (`NODE_OPTIONS`, its heartbeat pipe on fd
//! 4). What a worker is given is decided here and nowhere else.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::fd::{AsRawFd, FromRawFd};
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::Signal;

use super::preload::{PIPE_FD, Pipe, PreloadFile};
use crate::config::AppConfig;

/// The Node preload for one worker: the script's file and the worker's heartbeat pipe.
pub(crate) struct Preload<'a> {
    pub(crate) file: &'a PreloadFile,
    pub(crate) pipe: &'a Pipe,
}

/// What serve reads from its own environment as a credential, never passed on to a
/// worker (issue 31): a worker runs the application, which has no business with the
/// admin token, and an application that dumps its environment (an error page, a crash
/// report, a `/debug/env`) would show it. An app's own `env` may still set one.
const SERVE_SECRETS: [&str; 1] = [crate::config::ADMIN_TOKEN_ENV];

/// Worker `index`'s environment on `port`: serve's own, less [`SERVE_SECRETS`], then the
/// app's `env`, then `PORT` and `WORKER_INDEX` under their configured names.
fn worker_env(cfg: &AppConfig, index: usize, port: u16) -> BTreeMap<OsString, OsString> {
    let mut vars: BTreeMap<OsString, OsString> = std::env::vars_os()
        .filter(|(k, _)| !SERVE_SECRETS.iter().any(|s| k == s))
        .collect();
    for (k, v) in &cfg.env {
        vars.insert(k.into(), v.into());
    }
    vars.insert(cfg.port_env.clone().into(), port.to_string().into());
    vars.insert(cfg.index_env.clone().into(), index.to_string().into());
    vars
}

/// The command that starts worker `index` of `cfg` on `port`: in direct mode with the
/// app's listening socket `direct`; with the Node `preload`; its stdout and stderr piped
/// when `capture`.
pub(crate) fn command(
    cfg: &AppConfig,
    index: usize,
    port: u16,
    direct: Option<&std::net::TcpListener>,
    preload: Option<Preload<'_>>,
    capture: bool,
) -> Result<tokio::process::Command, String> {
    let index_s = index.to_string();
    let port_s = port.to_string();
    // `{port}` and `{index}` in arguments, for programs that take a flag, not $PORT.
    let args = cfg.command[1..]
        .iter()
        .map(|a| a.replace("{port}", &port_s).replace("{index}", &index_s));
    let mut cmd = tokio::process::Command::new(&cfg.command[0]);
    cmd.args(args);
    let mut vars = worker_env(cfg, index, port);
    if let Some(p) = &preload {
        for (k, v) in preload_env(cfg, p.file, &port_s) {
            vars.insert(k.into(), v.into());
        }
    }
    match direct {
        None => {
            cmd.env_clear().envs(vars);
            die_with_parent(&mut cmd);
        }
        Some(sock) => {
            vars.insert("LISTEN_FDS".into(), "1".into());
            vars.insert("LISTEN_FDNAMES".into(), cfg.name.to_string().into());
            let env = DirectEnv::new(vars).map_err(|e| format!("environment: {e}"))?;
            socket_activation(&mut cmd, sock.as_raw_fd(), env);
        }
    }
    if let Some(p) = preload {
        give_fd(&mut cmd, p.pipe.write_fd(), PIPE_FD);
    }
    cmd.stdin(Stdio::null())
        // Its own process group: a terminal's Ctrl-C reaches the balancer only, which
        // then drains before stopping workers; stopping signals the whole group.
        .process_group(0)
        .kill_on_drop(true);
    let pipe = || {
        if capture {
            Stdio::piped()
        } else {
            Stdio::null()
        }
    };
    cmd.stdout(pipe()).stderr(pipe());
    if let Some(dir) = &cfg.cwd {
        cmd.current_dir(dir);
    }
    Ok(cmd)
}

/// How often the preload beats: four times a health time-out, at most every 250 ms.
pub(crate) fn beat_interval(cfg: &AppConfig) -> Duration {
    (cfg.health_timeout / 4).clamp(Duration::from_millis(20), Duration::from_millis(250))
}

/// What the Node preload adds to a worker's environment: `NODE_OPTIONS` with its
/// `--require` after the user's own (the app's `env`, else serve's), where its pipe is, how
/// often to beat, and the worker's port (the server to serve fd 3 with).
fn preload_env(cfg: &AppConfig, file: &PreloadFile, port: &str) -> [(String, String); 4] {
    let user = cfg
        .env
        .get("NODE_OPTIONS")
        .cloned()
        .or_else(|| std::env::var("NODE_OPTIONS").ok());
    [
        ("NODE_OPTIONS".into(), file.node_options(user.as_deref())),
        ("SCALPEL_PRELOAD_FD".into(), PIPE_FD.to_string()),
        (
            "SCALPEL_PRELOAD_BEAT_MS".into(),
            beat_interval(cfg).as_millis().to_string(),
        ),
        ("SCALPEL_PRELOAD_PORT".into(), port.to_string()),
    ]
}

/// The child gets `fd` (a close-on-exec descriptor of ours, numbered 10 or above) as
/// descriptor `to`, open across exec.
fn give_fd(cmd: &mut tokio::process::Command, fd: std::os::fd::RawFd, to: std::os::fd::RawFd) {
    // SAFETY: as in `die_with_parent`: one system call (dup2), no allocation, no lock.
    #[allow(unsafe_code)]
    unsafe {
        cmd.pre_exec(move || {
            use std::os::fd::BorrowedFd;
            // SAFETY: `fd` is open in the parent until the spawn returns.
            let from = BorrowedFd::borrow_raw(fd);
            // SAFETY: `to` in the child is at most a close-on-exec descriptor of the
            // parent's (or the socket already moved to fd 3, when `to` is not 3); dup2
            // replaces it and clears close-on-exec on the copy.
            let mut target = std::os::fd::OwnedFd::from_raw_fd(to);
            let r = rustix::io::dup2(from, &mut target);
            std::mem::forget(target);
            r.map(|_| ()).map_err(Into::into)
        });
    }
}

/// How a worker's process ended, for the log.
pub(crate) fn describe_exit(st: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (st.code(), st.signal()) {
        (Some(c), _) => format!("exit code {c}"),
        (None, Some(s)) => {
            let name = Signal::try_from(s).map_or_else(|_| s.to_string(), |s| s.to_string());
            format!("killed by {name}")
        }
        _ => st.to_string(),
    }
}

/// Fails when something already listens on `port` (or holds it), naming the holder.
pub(crate) fn port_free(port: u16) -> Result<(), String> {
    match std::net::TcpListener::bind(("127.0.0.1", port)) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => Err(format!(
            "port {port} is already in use ({}): a leftover worker of an earlier run, or \
             another scalpel serve with the same port_base?",
            port_holder(port)
        )),
        // Not ours to judge (no permission for a low port, …): the worker will say.
        Err(_) => Ok(()),
    }
}

/// Who listens on `port`, for an error message.
pub(crate) fn port_holder(port: u16) -> String {
    match scalpel_procstat::pid_listening_on(port) {
        Ok(pid) => {
            let name = scalpel_procstat::process_name(pid).unwrap_or_default();
            format!("held by pid {pid} `{name}`")
        }
        Err(scalpel_procstat::ProcStatError::NotListening { .. }) => {
            "held by a connection, not a listener".into()
        }
        Err(_) => "held by a process this user cannot see".into(),
    }
}

/// Why a worker could not be started, blaming the right thing: the working directory,
/// the program, or the system.
pub(crate) fn spawn_error(cfg: &AppConfig, e: &std::io::Error) -> String {
    let program = &cfg.command[0];
    if let Some(dir) = &cfg.cwd
        && !dir.is_dir()
    {
        return format!("cannot start in cwd {}: no such directory", dir.display());
    }
    match e.kind() {
        std::io::ErrorKind::NotFound => format!(
            "cannot start `{program}`: program not found{}",
            if program.contains('/') {
                String::new()
            } else {
                " on PATH".into()
            }
        ),
        std::io::ErrorKind::PermissionDenied => {
            format!("cannot start `{program}`: not executable (permission denied)")
        }
        _ => format!("cannot start `{program}`: {e}"),
    }
}

/// Makes the worker die (SIGKILL) when the balancer dies, even by SIGKILL, when nobody
/// is left to stop it. (Linux: the signal follows the *thread* that spawned the child;
/// workers are spawned from the control-plane runtime, whose threads live as long as it.)
fn die_with_parent(cmd: &mut tokio::process::Command) {
    let parent = rustix::process::getpid();
    // SAFETY: the closure runs in the forked child of a multi-threaded process, before
    // exec, where only async-signal-safe work is allowed: `after_fork` makes two system
    // calls (prctl, getppid) and builds its error from an errno, allocating nothing and
    // taking no lock (a test counts its allocations).
    #[allow(unsafe_code)]
    unsafe {
        cmd.pre_exec(move || after_fork(parent));
    }
}

/// A worker's whole environment, built before fork so that the child only fills in
/// `LISTEN_PID` (its own pid, unknown before fork) and points `environ` at it.
struct DirectEnv {
    _vars: Vec<std::ffi::CString>,
    ptrs: Vec<*const std::ffi::c_char>,
    /// The ten digit places of `LISTEN_PID=`, inside one of `_vars`' buffers.
    pid_digits: *mut u8,
}

// SAFETY: the raw pointers point into `_vars`, owned by the same value and never
// reallocated after construction.
#[allow(unsafe_code)]
unsafe impl Send for DirectEnv {}
#[allow(unsafe_code)]
unsafe impl Sync for DirectEnv {}

impl DirectEnv {
    fn new(vars: BTreeMap<OsString, OsString>) -> Result<Self, std::ffi::NulError> {
        use std::os::unix::ffi::OsStrExt;
        let mut owned = Vec::with_capacity(vars.len() + 1);
        for (k, v) in vars.iter().filter(|(k, _)| k.as_bytes() != b"LISTEN_PID") {
            let mut kv = k.as_bytes().to_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            owned.push(std::ffi::CString::new(kv)?);
        }
        // Ten places hold any pid (at most 2^22 on Linux); unused ones stay NUL.
        let pid = std::ffi::CString::new("LISTEN_PID=0000000000")?;
        let pid_digits = {
            let bytes = pid.as_bytes().as_ptr().cast_mut();
            // SAFETY: 11 is the length of `LISTEN_PID=`, within the 21-byte buffer.
            #[allow(unsafe_code)]
            unsafe {
                bytes.add(11)
            }
        };
        // Moving a CString moves its heap pointer, not its buffer.
        owned.push(pid);
        let mut ptrs: Vec<_> = owned.iter().map(|c| c.as_ptr()).collect();
        ptrs.push(std::ptr::null());
        Ok(DirectEnv {
            _vars: owned,
            ptrs,
            pid_digits,
        })
    }

    /// Writes `pid` in decimal into the `LISTEN_PID` buffer; async-signal-safe.
    fn set_pid(&self, pid: u32) {
        let mut digits = [0u8; 10];
        let mut n = pid;
        let mut len = 0;
        loop {
            digits[len] = b'0' + (n % 10) as u8;
            len += 1;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        for i in 0..10 {
            let b = if i < len { digits[len - 1 - i] } else { 0 };
            // SAFETY: `pid_digits` points at ten writable bytes of a buffer this value owns.
            #[allow(unsafe_code)]
            unsafe {
                *self.pid_digits.add(i) = b;
            }
        }
    }
}

#[allow(unsafe_code)]
unsafe extern "C" {
    static mut environ: *const *const std::ffi::c_char;
}

/// Socket activation (systemd's convention): the child gets `sock` on fd 3 and the
/// environment of `env` with `LISTEN_PID` set to its own pid; plus [`die_with_parent`].
/// The Command's own environment stays untouched, so std execs with `environ`, which the
/// child points at `env` (its copy of the parent's memory) right before exec.
fn socket_activation(cmd: &mut tokio::process::Command, sock: std::os::fd::RawFd, env: DirectEnv) {
    let parent = rustix::process::getpid();
    // SAFETY: as in `die_with_parent`: only system calls (prctl, getppid, getpid, dup2,
    // fcntl) and writes into memory allocated before fork; no allocation, no lock.
    #[allow(unsafe_code)]
    unsafe {
        cmd.pre_exec(move || {
            after_fork(parent)?;
            direct_after_fork(sock, &env)
        });
    }
}

/// The child's side of [`socket_activation`]; async-signal-safe.
fn direct_after_fork(sock: std::os::fd::RawFd, env: &DirectEnv) -> std::io::Result<()> {
    use std::os::fd::BorrowedFd;
    // SAFETY: `sock` is the listener the parent keeps open for the app's lifetime.
    #[allow(unsafe_code)]
    let fd = unsafe { BorrowedFd::borrow_raw(sock) };
    if sock == 3 {
        // dup2 onto itself keeps close-on-exec: clear it instead.
        rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::empty())?;
    } else {
        // SAFETY: fd 3 in the child is at most a close-on-exec descriptor of the parent's
        // runtime (epoll, eventfd), opened long before any worker; dup2 replaces it.
        #[allow(unsafe_code)]
        let mut three = unsafe { std::os::fd::OwnedFd::from_raw_fd(3) };
        let r = rustix::io::dup2(fd, &mut three);
        std::mem::forget(three);
        r?;
    }
    env.set_pid(rustix::process::getpid().as_raw_nonzero().get() as u32);
    // SAFETY: the child is single-threaded here; `env.ptrs` is a NULL-terminated array of
    // NUL-terminated strings that lives until exec (the closure owns it).
    #[allow(unsafe_code)]
    unsafe {
        environ = env.ptrs.as_ptr();
    }
    Ok(())
}

/// The child's side of [`die_with_parent`]; async-signal-safe.
fn after_fork(parent: rustix::process::Pid) -> std::io::Result<()> {
    rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))?;
    // The balancer died between fork and prctl: no signal will come. An errno, not a
    // message: `io::Error::other` would allocate here.
    if rustix::process::getppid() != Some(parent) {
        return Err(rustix::io::Errno::SRCH.into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Counts the allocations the current thread makes while watched.
    struct Counting;

    static WATCHED_ALLOCS: AtomicUsize = AtomicUsize::new(0);

    thread_local! {
        static WATCHING: Cell<bool> = const { Cell::new(false) };
    }

    // SAFETY: forwards to the system allocator unchanged; the counting touches only an
    // atomic and a const-initialized thread-local (no allocation, no lock).
    #[allow(unsafe_code)]
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            if WATCHING.with(Cell::get) {
                WATCHED_ALLOCS.fetch_add(1, Ordering::Relaxed);
            }
            // SAFETY: the caller's contract is passed on to the system allocator.
            unsafe { System.alloc(layout) }
        }

        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            // SAFETY: as above.
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    #[global_allocator]
    static ALLOCATOR: Counting = Counting;

    fn allocations_of<T>(f: impl FnOnce() -> T) -> (T, usize) {
        let before = WATCHED_ALLOCS.load(Ordering::Relaxed);
        WATCHING.with(|w| w.set(true));
        let out = f();
        WATCHING.with(|w| w.set(false));
        (out, WATCHED_ALLOCS.load(Ordering::Relaxed) - before)
    }

    /// Issue 14 — the child writes its pid into the prepared environment without
    /// allocating, and the entry reads as `LISTEN_PID=<pid>` (no leftover digits).
    #[test]
    fn listen_pid_is_written_in_place_without_allocating() {
        let vars = BTreeMap::from([(OsString::from("LISTEN_PID"), OsString::from("stale"))]);
        let env = DirectEnv::new(vars).unwrap();
        for pid in [4_194_303u32, 7, 123_456] {
            let ((), n) = allocations_of(|| env.set_pid(pid));
            assert_eq!(n, 0);
            let entries: Vec<String> = env.ptrs[..env.ptrs.len() - 1]
                .iter()
                // SAFETY: each pointer is a NUL-terminated string owned by `env`.
                .map(|&p| {
                    #[allow(unsafe_code)]
                    unsafe { std::ffi::CStr::from_ptr(p) }
                        .to_string_lossy()
                        .into_owned()
                })
                .collect();
            assert_eq!(entries, vec![format!("LISTEN_PID={pid}")]);
        }
    }

    /// Between fork and exec only async-signal-safe work is allowed: no allocation (the
    /// allocator's lock may be held by a thread that no longer exists in the child), on
    /// the success path and on the error path alike.
    #[test]
    fn the_pre_exec_hook_allocates_nothing() {
        let parent = rustix::process::getppid().expect("the test has a parent");
        let (ok, n) = allocations_of(|| after_fork(parent));
        // Undo the death signal this test set on itself.
        let _ = rustix::process::set_parent_process_death_signal(None);
        assert!(ok.is_ok(), "{ok:?}");
        assert_eq!(n, 0, "allocations on the success path");
        // A "parent" that is not ours: the error path, as when the balancer died.
        let (err, n) = allocations_of(|| after_fork(rustix::process::getpid()));
        let _ = rustix::process::set_parent_process_death_signal(None);
        let err = err.expect_err("a foreign parent is an error");
        assert_eq!(n, 0, "allocations on the error path: {err}");
        assert_eq!(
            err.raw_os_error(),
            Some(rustix::io::Errno::SRCH.raw_os_error())
        );
    }
}
