//! Takes over the connections a stuck direct-mode worker had accepted, before it is
//! killed, so that a request waiting unread in one of them is not lost with it.
//!
//! In direct mode the workers accept from the socket serve owns; a worker that freezes
//! (a blocked event loop, SIGSTOP) stops accepting, but the connections it accepted just
//! before are in its own descriptor table, and killing it closed them: the requests in
//! them failed although the worker never read a byte of them (their bytes are still in
//! the kernel's receive queues). With `pidfd_open(2)` and `pidfd_getfd(2)` (Linux 5.6+;
//! serve is the worker's parent and the same user, which ptrace's access check asks
//! for) serve duplicates those sockets first; the worker's death then closes only its
//! copy. Each is classified by the kernel's own counts (`TCP_INFO`'s bytes received and
//! sent, `FIONREAD`'s unread bytes):
//!
//! - **rescued** — the worker read nothing and sent nothing: whatever the client sent is
//!   unread, so nobody took it. serve connects to the app's own socket (a healthy worker
//!   accepts it) and joins the two connections byte for byte ([`crate::tunnel`]) until
//!   both sides close or the idle time-out: keep-alive requests on it go on to the same
//!   healthy worker. No request is resent — the bytes go out once, to one worker.
//! - **half read** — the worker read (part of) a request and sent nothing: it may be the
//!   request that froze it, so it is never resent; the client gets the standard 504
//!   `worker_stalled` JSON error and the connection closes.
//! - **read after answer** — the worker had answered on it before, and then read (all of)
//!   new bytes from the client that it did not answer: a kept-alive client's next request,
//!   maybe the one that froze it. Answered like *half read* (504 `worker_stalled`, never
//!   resent). Told by four counts: nothing unread, everything the worker wrote acknowledged
//!   by the client (`tcpi_unacked`, `tcpi_notsent_bytes`), and the client's last data
//!   received at least one clock tick after the worker's last data sent
//!   (`tcpi_last_data_recv` < `tcpi_last_data_sent`, both in ms before the same instant,
//!   so a strict difference is a strict order of two kernel ticks). It relies on what an
//!   HTTP/1.1 client does: it sends its next request once it has the whole answer (no
//!   pipelining, which no browser, curl, Go, Node or wrk does by default). A pipelining
//!   client whose earlier answer was cut mid-body sees the 504 as a malformed body, and a
//!   WebSocket client that spoke last as an invalid frame: an error, as the close would be.
//! - **in use** — anything else the worker had answered on: its last act was to send
//!   (an idle kept-alive connection after a complete answer — or an answer it was
//!   streaming when it froze: the kernel's counts are the same for both, see the test
//!   `an_idle_connection_and_a_cut_stream_look_alike`), the two last data events fell in
//!   one clock tick, or bytes are unread after an answer (where the last request began
//!   cannot be told). It closes with the worker, as before: handed to another worker, a
//!   cut stream would wait for bytes that never come instead of seeing the close, and a
//!   server closing an idle kept-alive connection is what every HTTP client handles.
//!
//! The worker's process tree is stopped (SIGSTOP, then every thread seen stopped in
//! `/proc`: the signal takes effect at each thread's next entry into the kernel, not when
//! `kill` returns; a tree that does not stop within half a second is not rescued) before
//! anything is read, so its counts cannot move, and must be killed right after (SIGKILL,
//! no grace): after a grace period it could read from sockets serve now serves. When the kernel refuses the system calls
//! (seccomp, Yama's `ptrace_scope` 3, or 2 without `CAP_SYS_PTRACE`, Linux before 5.6), the tree
//! is let go again and the replacement proceeds as before, with one log line; the
//! connections it held (read from `/proc`, which needs no ptrace attach) are counted
//! `not_taken`.
//!
//! It must NOT take a connection the worker read from for another worker (a resend), nor
//! hold more than [`MAX_TAKEN`] connections of one worker, nor keep one without a time-out.

use std::collections::HashSet;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use http::StatusCode;
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use rustix::io::Errno;
use rustix::process::{PidfdFlags, PidfdGetfdFlags, pidfd_getfd, pidfd_open};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::counters::{AppMetrics, AtReplacement};

/// At most this many connections are taken from one worker (each costs serve two
/// descriptors while it lasts); the rest close with the worker, counted `over_limit`.
pub(crate) const MAX_TAKEN: usize = 4096;
/// A rescued connection with no byte either way for this long is closed.
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Connecting to the app's socket for a rescued connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Writing an error answer to a client.
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// After an error answer, the client's remaining bytes are read and dropped for at most
/// this long before the close: a close with unread bytes would reset the connection, and
/// the client could lose the answer.
const LINGER: Duration = Duration::from_secs(2);

/// What a rescue found, by [`AtReplacement`] outcome.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Counts {
    pub(crate) rescued: u64,
    pub(crate) half_read: u64,
    pub(crate) read_after_answer: u64,
    pub(crate) in_use: u64,
    pub(crate) over_limit: u64,
}

impl std::fmt::Display for Counts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "its accepted connections: {} rescued (served on by another worker), {} half read \
             (answered 504 worker_stalled, not resent), {} read after an answer (answered 504 \
             worker_stalled, not resent), {} in use (closed with it), {} over the limit",
            self.rescued, self.half_read, self.read_after_answer, self.in_use, self.over_limit
        )
    }
}

/// How a rescue ended.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// The worker's tree is stopped and its connections are served (or answered) by
    /// serve now: it must be killed at once.
    Taken(Counts),
    /// No process was left to take anything from.
    Gone,
    /// The kernel refused; the tree runs again and is stopped as before. `held`: the
    /// connections it had accepted, which close with it (counted `not_taken`).
    Refused { error: String, held: u64 },
    /// A thread of the tree did not stop within [`STOP_WAIT`]; the tree runs again and is
    /// stopped as before, its `held` connections closing with it (counted `not_taken`).
    NotStopped { held: u64 },
}

/// The sockets taken from a stopped worker.
struct Taken {
    fresh: Vec<std::net::TcpStream>,
    half_read: Vec<std::net::TcpStream>,
    read_after_answer: Vec<std::net::TcpStream>,
    in_use: u64,
    over_limit: u64,
}

/// Stops the tree of worker `root`, takes the connections it accepted on `listen` and
/// serves them (see the module doc); counts them in `metrics`. The caller kills the
/// worker right after an [`Outcome::Taken`].
pub(crate) async fn rescue(root: u32, listen: SocketAddr, metrics: &Arc<AppMetrics>) -> Outcome {
    let taken = match tokio::task::spawn_blocking(move || take(root, listen)).await {
        Ok(Ok(t)) => t,
        Ok(Err(o)) => {
            if let Outcome::Refused { held, .. } | Outcome::NotStopped { held } = &o {
                count(metrics, AtReplacement::NotTaken, *held);
            }
            return o;
        }
        Err(e) => {
            return Outcome::Refused {
                error: format!("rescue task failed: {e}"),
                held: 0,
            };
        }
    };
    let counts = Counts {
        rescued: taken.fresh.len() as u64,
        half_read: taken.half_read.len() as u64,
        read_after_answer: taken.read_after_answer.len() as u64,
        in_use: taken.in_use,
        over_limit: taken.over_limit,
    };
    for (outcome, n) in [
        (AtReplacement::Rescued, counts.rescued),
        (AtReplacement::HalfRead, counts.half_read),
        (AtReplacement::ReadAfterAnswer, counts.read_after_answer),
        (AtReplacement::InUse, counts.in_use),
        (AtReplacement::OverLimit, counts.over_limit),
    ] {
        count(metrics, outcome, n);
    }
    let target = connect_address(listen);
    for s in taken.fresh {
        if let Some(client) = into_tokio(s) {
            metrics.rescued_open.fetch_add(1, Ordering::Relaxed);
            let metrics = metrics.clone();
            tokio::spawn(async move {
                serve_rescued(client, target).await;
                metrics.rescued_open.fetch_sub(1, Ordering::Relaxed);
            });
        }
    }
    for s in taken.half_read {
        if let Some(client) = into_tokio(s) {
            tokio::spawn(answer_and_close(
                client,
                StatusCode::GATEWAY_TIMEOUT,
                "worker_stalled",
                "the worker froze after reading this request (or part of it) and was \
                 replaced; not resent",
            ));
        }
    }
    for s in taken.read_after_answer {
        if let Some(client) = into_tokio(s) {
            tokio::spawn(answer_and_close(
                client,
                StatusCode::GATEWAY_TIMEOUT,
                "worker_stalled",
                "the worker answered on this connection before, then froze after reading this \
                 request (or part of it) and was replaced; not resent",
            ));
        }
    }
    Outcome::Taken(counts)
}

fn count(metrics: &AppMetrics, outcome: AtReplacement, n: u64) {
    let i = AtReplacement::ALL
        .iter()
        .position(|r| *r == outcome)
        .unwrap_or(0);
    metrics.rescued[i].fetch_add(n, Ordering::Relaxed);
}

fn into_tokio(s: std::net::TcpStream) -> Option<TcpStream> {
    s.set_nonblocking(true).ok()?;
    TcpStream::from_std(s).ok()
}

/// Where serve connects to reach the app's socket: its address, with an unspecified IP
/// (`0.0.0.0`, `::`) replaced by loopback.
fn connect_address(listen: SocketAddr) -> SocketAddr {
    match listen.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => (Ipv4Addr::LOCALHOST, listen.port()).into(),
        IpAddr::V6(ip) if ip.is_unspecified() => (Ipv6Addr::LOCALHOST, listen.port()).into(),
        _ => listen,
    }
}

/// A rescued connection: joined to a new connection to the app's socket (a healthy
/// worker accepts it) until both close or the idle time-out. When the app's socket
/// cannot be reached, the client gets 503 `no_worker` (it had sent nothing anyone read).
async fn serve_rescued(client: TcpStream, target: SocketAddr) {
    let connected = match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(target)).await {
        Ok(Ok(w)) => Ok(w),
        Ok(Err(e)) => Err(format!(
            "the app's socket {target} refused the rescued connection: {e}"
        )),
        Err(_) => Err(format!(
            "the app's socket {target} did not accept within 5 s"
        )),
    };
    let worker = match connected {
        Ok(w) => w,
        Err(detail) => {
            let status = StatusCode::SERVICE_UNAVAILABLE;
            return answer_and_close(client, status, "no_worker", &detail).await;
        }
    };
    let _ = worker.set_nodelay(true);
    let _ = crate::tunnel::join(client, worker, b"", IDLE_TIMEOUT).await;
}

/// Writes one JSON error answer (`scalpel_http::error_body`) with `Connection: close`,
/// then closes gracefully: the client's remaining bytes are read and dropped for a
/// moment, so that the close does not reset the connection under the answer.
async fn answer_and_close(mut client: TcpStream, status: StatusCode, kind: &str, detail: &str) {
    let body = scalpel_http::error_body(kind, detail);
    let mut out = format!(
        "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or(""),
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(&body);
    let written = tokio::time::timeout(WRITE_TIMEOUT, client.write_all(&out)).await;
    if !matches!(written, Ok(Ok(()))) {
        return;
    }
    let _ = client.shutdown().await;
    let _ = tokio::time::timeout(LINGER, async {
        let mut sink = [0u8; 4096];
        while matches!(client.read(&mut sink).await, Ok(n) if n > 0) {}
    })
    .await;
}

/// The blocking part: stop the tree, take and classify its connections on `listen`.
fn take(root: u32, listen: SocketAddr) -> Result<Taken, Outcome> {
    let Some(root_pid) = rustix::process::Pid::from_raw(root as i32) else {
        return Err(Outcome::Gone);
    };
    // Asked first: a kernel that refuses it leaves the worker untouched.
    let root_fd = match pidfd_open(root_pid, PidfdFlags::empty()) {
        Ok(fd) => fd,
        Err(Errno::SRCH) => return Err(Outcome::Gone),
        Err(e) => {
            let pids = scalpel_procstat::tree_pids(root).unwrap_or_default();
            return Err(Outcome::Refused {
                error: format!("pidfd_open: {e}"),
                held: held_by(&pids, listen.port()),
            });
        }
    };
    let pids = scalpel_procstat::tree_pids(root).map_err(|_| Outcome::Gone)?;
    freeze(root, &pids, Signal::SIGSTOP);
    if !all_stopped(&pids, STOP_WAIT) {
        // A thread still running (or in uninterruptible sleep) could read from a socket
        // after it was classified as untouched: no rescue, the connections close with it.
        let held = held_by(&pids, listen.port());
        freeze(root, &pids, Signal::SIGCONT);
        return Err(Outcome::NotStopped { held });
    }
    let taken = take_stopped(&root_fd, root, &pids, listen).map_err(|error| Outcome::Refused {
        error,
        // Counted while the tree is still stopped: the figure is what closes with it.
        held: held_by(&pids, listen.port()),
    });
    if taken.is_err() {
        freeze(root, &pids, Signal::SIGCONT);
    }
    taken
}

/// How many distinct connections on `port` the processes `pids` hold (read from `/proc`,
/// which a kernel that refuses `pidfd_getfd` still shows to the worker's parent).
fn held_by(pids: &[u32], port: u16) -> u64 {
    let mut inodes = HashSet::new();
    for &pid in pids {
        for h in scalpel_procstat::connections_held(pid, port).unwrap_or_default() {
            inodes.insert(h.inode);
        }
    }
    inodes.len() as u64
}

/// How long the tree may take to stop after SIGSTOP: a running thread stops at its next
/// entry into the kernel (microseconds); one in uninterruptible sleep only when it wakes.
pub(crate) const STOP_WAIT: Duration = Duration::from_millis(500);

/// Waits until every thread of `pids` has stopped (or gone): SIGSTOP takes effect when
/// each thread next enters the kernel, not when `kill` returns, and until then a thread
/// on the other core may still read from the sockets about to be classified.
fn all_stopped(pids: &[u32], limit: Duration) -> bool {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if pids
            .iter()
            .all(|&p| scalpel_procstat::all_threads_stopped(p) != Some(false))
        {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Sends `sig` to the worker's process group and every process of its tree (some may
/// have left the group).
fn freeze(root: u32, pids: &[u32], sig: Signal) {
    let _ = killpg(Pid::from_raw(root as i32), sig);
    for &p in pids {
        let _ = kill(Pid::from_raw(p as i32), sig);
    }
}

fn take_stopped(
    root_fd: &std::os::fd::OwnedFd,
    root: u32,
    pids: &[u32],
    listen: SocketAddr,
) -> Result<Taken, String> {
    let mut t = Taken {
        fresh: Vec::new(),
        half_read: Vec::new(),
        read_after_answer: Vec::new(),
        in_use: 0,
        over_limit: 0,
    };
    let mut seen = HashSet::new();
    for &pid in pids {
        let own;
        let pidfd = if pid == root {
            root_fd
        } else {
            let Some(p) = rustix::process::Pid::from_raw(pid as i32) else {
                continue;
            };
            match pidfd_open(p, PidfdFlags::empty()) {
                Ok(fd) => {
                    own = fd;
                    &own
                }
                Err(_) => continue, // exited meanwhile
            }
        };
        let Ok(held) = scalpel_procstat::connections_held(pid, listen.port()) else {
            continue;
        };
        for h in held {
            if !seen.insert(h.inode) {
                continue; // the same socket in another process of the tree
            }
            if t.fresh.len() + t.half_read.len() + t.read_after_answer.len() >= MAX_TAKEN {
                t.over_limit += 1;
                continue;
            }
            let fd = match pidfd_getfd(pidfd, h.fd, PidfdGetfdFlags::empty()) {
                Ok(fd) => fd,
                Err(e @ (Errno::PERM | Errno::ACCESS | Errno::NOSYS)) => {
                    return Err(format!("pidfd_getfd: {e}"));
                }
                Err(_) => continue, // closed meanwhile
            };
            let s = std::net::TcpStream::from(fd);
            // The descriptor number could name another socket by now (the worker is
            // stopped, so it cannot, but the check is cheap): the local address decides.
            let ours = s.local_addr().is_ok_and(|a| {
                a.port() == listen.port() && (listen.ip().is_unspecified() || a.ip() == listen.ip())
            });
            if !ours || s.peer_addr().is_err() {
                continue;
            }
            match classify(&s) {
                Ok(State::Fresh) => t.fresh.push(s),
                Ok(State::HalfRead) => t.half_read.push(s),
                Ok(State::ReadAfterAnswer) => t.read_after_answer.push(s),
                Ok(State::InUse) | Err(_) => t.in_use += 1,
            }
        }
    }
    Ok(t)
}

/// What the worker did with a connection, by the kernel's counts.
#[derive(Debug, PartialEq, Eq)]
enum State {
    /// It read nothing and sent nothing.
    Fresh,
    /// It read something and sent nothing.
    HalfRead,
    /// It sent something, then read (all of) what the client sent after it.
    ReadAfterAnswer,
    /// Anything else it sent something on.
    InUse,
}

/// The kernel's figures for one connection, as [`state_of`] reads them.
#[derive(Debug, Clone, Copy, Default)]
struct Kernel {
    /// Data bytes received from the client (`tcpi_bytes_received`).
    received: u64,
    /// Of those, not read by the worker (`FIONREAD`).
    unread: u64,
    /// Data bytes sent to the client, resends included (`tcpi_bytes_sent`).
    sent: u64,
    /// Segments sent and not acknowledged (`tcpi_unacked`) plus bytes written and not
    /// sent yet (`tcpi_notsent_bytes`): 0 when the client has everything written.
    unacknowledged: u64,
    /// Milliseconds since the last data received and since the last data sent
    /// (`tcpi_last_data_recv`, `tcpi_last_data_sent`), in kernel ticks (4 ms at 250 Hz).
    since_received_ms: u32,
    since_sent_ms: u32,
}

fn classify(s: &std::net::TcpStream) -> io::Result<State> {
    let unread = rustix::io::ioctl_fionread(s.as_fd())?;
    Ok(state_of(Kernel {
        unread,
        ..tcp_counts(s)?
    }))
}

fn state_of(k: Kernel) -> State {
    let read = k.received.saturating_sub(k.unread);
    match (read, k.sent) {
        (0, 0) => State::Fresh,
        (_, 0) => State::HalfRead,
        // The client's data came strictly after the worker's last data (a tick apart: a
        // tie orders nothing), the client had all of it, and the worker read it all.
        (1.., _)
            if k.unread == 0 && k.unacknowledged == 0 && k.since_received_ms < k.since_sent_ms =>
        {
            State::ReadAfterAnswer
        }
        _ => State::InUse,
    }
}

/// `TCP_INFO`'s counts of the connection (`unread` left 0): needs Linux 4.19+ for
/// `tcpi_bytes_sent`.
fn tcp_counts(s: &std::net::TcpStream) -> io::Result<Kernel> {
    use std::os::fd::AsRawFd;
    let mut info = std::mem::MaybeUninit::<libc::tcp_info>::zeroed();
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: `info` is a zeroed `tcp_info` (all integers: zero is a valid value) of
    // `len` bytes; the kernel writes at most `len` bytes into it and sets `len` to what
    // it wrote. The descriptor is a socket this function borrows.
    #[allow(unsafe_code)]
    let rc = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            info.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: zero-initialized above, then (partly) written by the kernel.
    #[allow(unsafe_code)]
    let info = unsafe { info.assume_init() };
    let full = std::mem::offset_of!(libc::tcp_info, tcpi_bytes_sent) + 8;
    if (len as usize) < full {
        // A kernel before 4.19 does not count the bytes sent: not enough to tell.
        return Err(io::Error::other("TCP_INFO without tcpi_bytes_sent"));
    }
    Ok(Kernel {
        received: info.tcpi_bytes_received,
        unread: 0,
        sent: info.tcpi_bytes_sent,
        unacknowledged: u64::from(info.tcpi_unacked) + u64::from(info.tcpi_notsent_bytes),
        since_received_ms: info.tcpi_last_data_recv,
        since_sent_ms: info.tcpi_last_data_sent,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    /// The kernel's counts tell the three cases apart, read on real loopback sockets:
    /// accepted and unread, read in part, answered.
    #[test]
    fn a_connection_is_fresh_half_read_or_in_use_by_the_kernels_counts() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut server, _) = l.accept().unwrap();
        assert_eq!(classify(&server).unwrap(), State::Fresh, "nothing sent yet");
        client.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
        wait_unread(&server, 18);
        assert_eq!(classify(&server).unwrap(), State::Fresh, "sent, unread");
        let mut buf = [0u8; 4];
        server.read_exact(&mut buf).unwrap();
        assert_eq!(classify(&server).unwrap(), State::HalfRead);
        server.write_all(b"HTTP/1.1 200 OK\r\n").unwrap();
        assert_eq!(classify(&server).unwrap(), State::InUse);
    }

    fn wait_unread(s: &std::net::TcpStream, n: u64) {
        for _ in 0..1000 {
            if rustix::io::ioctl_fionread(s.as_fd()).unwrap() >= n {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        panic!("the bytes never arrived");
    }

    /// A connection whose worker answered a request and another whose worker was
    /// streaming an answer when it froze give the kernel's counts the same shape (all
    /// read, all acknowledged, the last data sent after the last received): which is
    /// why neither is handed to another worker. A next request read after a complete
    /// answer is told apart.
    #[test]
    fn an_idle_connection_and_a_cut_stream_look_alike() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let pair = || {
            let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
            let (s, _) = l.accept().unwrap();
            (c, s)
        };
        let exchange = |c: &mut std::net::TcpStream, s: &mut std::net::TcpStream, out: &[u8]| {
            c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
            let mut buf = [0u8; 27];
            s.read_exact(&mut buf).unwrap();
            s.write_all(out).unwrap();
            let mut got = vec![0u8; out.len()];
            c.read_exact(&mut got).unwrap();
            wait_acked(s);
        };
        let (mut c1, mut idle) = pair();
        exchange(
            &mut c1,
            &mut idle,
            b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok",
        );
        let (mut c2, mut cut) = pair();
        exchange(
            &mut c2,
            &mut cut,
            b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nfirst",
        );
        for (name, s) in [("idle", &idle), ("cut", &cut)] {
            let k = tcp_counts(s).unwrap();
            assert_eq!(k.unacknowledged, 0, "{name}: {k:?}");
            assert!(k.since_received_ms >= k.since_sent_ms, "{name}: {k:?}");
            assert_eq!(classify(s).unwrap(), State::InUse, "{name}: {k:?}");
        }
        // The next request, sent well over a tick (<= 10 ms at 100 Hz) after the
        // answer, and read by the worker: answered 504 then, not closed.
        std::thread::sleep(Duration::from_millis(50));
        c1.write_all(b"GET /next HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        wait_unread(&idle, 31);
        assert_eq!(
            classify(&idle).unwrap(),
            State::InUse,
            "unread: where it began is unknown"
        );
        let mut buf = [0u8; 31];
        idle.read_exact(&mut buf).unwrap();
        assert_eq!(classify(&idle).unwrap(), State::ReadAfterAnswer);
    }

    fn wait_acked(s: &std::net::TcpStream) {
        for _ in 0..1000 {
            if tcp_counts(s).unwrap().unacknowledged == 0 {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        panic!("never acknowledged");
    }

    #[test]
    fn states_from_counts() {
        let k = |received, unread, sent| Kernel {
            received,
            unread,
            sent,
            ..Kernel::default()
        };
        assert_eq!(state_of(k(0, 0, 0)), State::Fresh);
        assert_eq!(state_of(k(120, 120, 0)), State::Fresh);
        assert_eq!(state_of(k(120, 20, 0)), State::HalfRead);
        assert_eq!(state_of(k(120, 0, 0)), State::HalfRead);
        assert_eq!(state_of(k(240, 120, 300)), State::InUse);
        assert_eq!(state_of(k(0, 0, 5)), State::InUse);
        // Data received after the last sent (ms ago: smaller is later), all read, all
        // acknowledged: a request read after an answer.
        let after = |unread, unacknowledged, since_received_ms, since_sent_ms| Kernel {
            received: 240,
            unread,
            sent: 300,
            unacknowledged,
            since_received_ms,
            since_sent_ms,
        };
        assert_eq!(state_of(after(0, 0, 4, 104)), State::ReadAfterAnswer);
        assert_eq!(
            state_of(after(0, 0, 104, 104)),
            State::InUse,
            "one tick: no order"
        );
        assert_eq!(
            state_of(after(0, 0, 108, 104)),
            State::InUse,
            "answered last"
        );
        assert_eq!(
            state_of(after(0, 1, 4, 104)),
            State::InUse,
            "answer not all acked"
        );
        assert_eq!(state_of(after(120, 0, 4, 104)), State::InUse, "unread");
        let server_first = Kernel {
            sent: 300,
            since_received_ms: 4,
            since_sent_ms: 104,
            ..Kernel::default()
        };
        assert_eq!(state_of(server_first), State::InUse, "nothing read");
    }

    #[test]
    fn an_unspecified_listen_address_is_reached_on_loopback() {
        assert_eq!(
            connect_address("0.0.0.0:8080".parse().unwrap()),
            "127.0.0.1:8080".parse::<SocketAddr>().unwrap()
        );
        assert_eq!(
            connect_address("[::]:8080".parse().unwrap()),
            "[::1]:8080".parse::<SocketAddr>().unwrap()
        );
        assert_eq!(
            connect_address("127.0.0.2:81".parse().unwrap()),
            "127.0.0.2:81".parse::<SocketAddr>().unwrap()
        );
    }
}
