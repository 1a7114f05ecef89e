//! Is a process waiting for connections on a given listening socket? The proof a
//! supervisor needs before it calls a worker ready on a socket it handed over (fd 3,
//! systemd's socket activation): not that the worker is alive or answers elsewhere, but
//! that it takes connections from *that* socket.
//!
//! Two kernel views answer it without touching the process:
//!
//! - **Its event loop polls the socket.** An epoll instance lists each file it watches in
//!   `/proc/PID/fdinfo/<epoll fd>` as a `tfd:` line with the file's inode (`ino:`, hex).
//!   Node (libuv), Python's asyncio and uvloop, Go's netpoller and Rust's tokio (mio) all
//!   register a listener they serve there; a listener they merely inherited is not.
//! - **A thread blocks in `accept` on it.** `/proc/PID/task/TID/syscall` shows the system
//!   call a sleeping thread is in, with its arguments: `accept`/`accept4` and, as the
//!   first argument, the descriptor, whose `/proc/PID/fd` link names the socket's inode.
//!
//! A thread blocked in `select` or `poll` may be waiting on the socket too, but the set it
//! waits on is in the process's memory, not in `/proc` ([`SocketWait::Unseen`] says that
//! one was seen); [`accepted_in_tree`] then proves an accept after the fact: the server
//! end of a connection the caller made appears in the process's descriptor table.

use std::fs;

use crate::ProcStatError;
use crate::sockets::{for_each_tcp_table, tcp_rows};
use crate::tree::tree_pids;

/// How a process tree takes connections from a listening socket, as far as `/proc` shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SocketWait {
    /// An epoll instance of process `pid` watches the socket: its event loop serves it.
    Polls {
        /// The process whose epoll instance lists the socket.
        pid: u32,
    },
    /// A thread of process `pid` is blocked in `accept`/`accept4` on the socket.
    Accepts {
        /// The process holding the thread.
        pid: u32,
    },
    /// Neither was seen. `selects`: a thread of the tree sleeps in `select`, `pselect6`,
    /// `poll` or `ppoll`, whose descriptor set `/proc` does not show — it may be waiting on
    /// the socket (gunicorn's sync worker does); an observed accept can tell.
    Unseen {
        /// A thread of the tree is blocked in a `select`/`poll` family call.
        selects: bool,
    },
}

/// System call numbers (they differ by architecture) of the calls [`waits_on_socket`] reads.
#[cfg(target_arch = "x86_64")]
mod nr {
    pub(super) const ACCEPT: &[u64] = &[43, 288];
    pub(super) const SELECT: &[u64] = &[7, 23, 270, 271];
}
#[cfg(target_arch = "aarch64")]
mod nr {
    pub(super) const ACCEPT: &[u64] = &[202, 242];
    pub(super) const SELECT: &[u64] = &[72, 73];
}
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
mod nr {
    pub(super) const ACCEPT: &[u64] = &[];
    pub(super) const SELECT: &[u64] = &[];
}

/// Whether `root` or one of its descendants waits for connections on the socket with
/// inode `inode` (see the module doc); the first process found that does.
///
/// # Errors
///
/// [`ProcStatError::NoSuchProcess`] when `root` is gone. Processes of the tree whose
/// descriptors or threads cannot be read (they exited meanwhile) are skipped.
pub fn waits_on_socket(root: u32, inode: u64) -> Result<SocketWait, ProcStatError> {
    let link = format!("socket:[{inode}]");
    let mut selects = false;
    for pid in root_then_tree(root)? {
        if epoll_watches(pid, inode) {
            return Ok(SocketWait::Polls { pid });
        }
        let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            let Ok(text) = fs::read_to_string(task.path().join("syscall")) else {
                continue;
            };
            match parse_syscall(&text) {
                Some((n, fd)) if nr::ACCEPT.contains(&n) => {
                    let target = fs::read_link(format!("/proc/{pid}/fd/{fd}"));
                    if target.is_ok_and(|t| t.to_str() == Some(link.as_str())) {
                        return Ok(SocketWait::Accepts { pid });
                    }
                }
                Some((n, _)) if nr::SELECT.contains(&n) => selects = true,
                _ => {}
            }
        }
    }
    Ok(SocketWait::Unseen { selects })
}

/// `root` first, then (lazily, a pass over all of `/proc`) its descendants: the worker
/// itself usually answers, and a supervisor asks every few hundred milliseconds.
fn root_then_tree(root: u32) -> Result<impl Iterator<Item = u32>, ProcStatError> {
    if !std::path::Path::new(&format!("/proc/{root}")).exists() {
        return Err(ProcStatError::NoSuchProcess { pid: root });
    }
    let mut rest: Option<std::vec::IntoIter<u32>> = None;
    let mut first = Some(root);
    Ok(std::iter::from_fn(move || {
        if let Some(r) = first.take() {
            return Some(r);
        }
        let it = rest.get_or_insert_with(|| {
            tree_pids(root)
                .unwrap_or_default()
                .into_iter()
                .filter(|&p| p != root)
                .collect::<Vec<_>>()
                .into_iter()
        });
        it.next()
    }))
}

/// Does an epoll instance of `pid` watch the file with inode `inode`?
fn epoll_watches(pid: u32, inode: u64) -> bool {
    let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        let is_epoll =
            fs::read_link(fd.path()).is_ok_and(|t| t.to_str() == Some("anon_inode:[eventpoll]"));
        is_epoll
            && fs::read_to_string(format!("/proc/{pid}/fdinfo/{}", fd.file_name().display()))
                .is_ok_and(|info| epoll_inodes(&info).any(|i| i == inode))
    })
}

/// The inodes an epoll instance's `fdinfo` lists (`tfd: … ino:HEX …` lines).
pub(crate) fn epoll_inodes(fdinfo: &str) -> impl Iterator<Item = u64> + '_ {
    fdinfo
        .lines()
        .filter(|l| l.starts_with("tfd:"))
        .filter_map(|l| {
            let ino = l
                .split_ascii_whitespace()
                .find_map(|f| f.strip_prefix("ino:"))?;
            u64::from_str_radix(ino, 16).ok()
        })
}

/// The call number and first argument of a sleeping thread's `/proc/…/syscall`
/// (`"43 0x3 0x7ffd… …"`); `None` when it runs (`running`) or is not in a call (`-1 …`).
pub(crate) fn parse_syscall(text: &str) -> Option<(u64, u64)> {
    let mut f = text.split_ascii_whitespace();
    let n = f.next()?.parse::<u64>().ok()?;
    let arg = f.next()?.strip_prefix("0x")?;
    Some((n, u64::from_str_radix(arg, 16).ok()?))
}

/// Has `root` or one of its descendants accepted the connection from the caller's local
/// port `peer_port` to the listening port `port`: does one of them hold its server end?
/// (The kernel completes a handshake from the listen backlog whether or not the server
/// ever accepts; only a descriptor in the server's table proves the accept.)
///
/// # Errors
///
/// [`ProcStatError::NoSuchProcess`] when `root` is gone; [`ProcStatError::Io`] when the
/// socket tables cannot be read.
pub fn accepted_in_tree(root: u32, port: u16, peer_port: u16) -> Result<bool, ProcStatError> {
    let mut links = Vec::new();
    for_each_tcp_table(|text| {
        links.extend(
            tcp_rows(text)
                .filter(|r| !r.listening() && r.local_port == port && r.remote_port == peer_port)
                .filter_map(|r| r.inode)
                .map(|i| format!("socket:[{i}]")),
        );
    })?;
    if links.is_empty() {
        // Not in the tables yet (or already closed): nobody holds it.
        return Ok(false);
    }
    for pid in root_then_tree(root)? {
        let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        let holds = fds.flatten().any(|fd| {
            fs::read_link(fd.path())
                .is_ok_and(|t| t.to_str().is_some_and(|t| links.iter().any(|l| l == t)))
        });
        if holds {
            return Ok(true);
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::{AsRawFd, FromRawFd};
    use std::os::unix::fs::MetadataExt;

    fn inode_of(fd: &impl AsRawFd) -> u64 {
        fs::metadata(format!("/proc/self/fd/{}", fd.as_raw_fd()))
            .unwrap()
            .ino()
    }

    #[test]
    fn epoll_fdinfo_lines_give_the_watched_inodes() {
        let info = "pos:\t0\nflags:\t02000002\nmnt_id:\t15\nino:\t1057\n\
tfd:        3 events:       19 data:                3  pos:0 ino:2b5c sdev:8\n\
tfd:       12 events: 80000019 data:        c00000000c  pos:0 ino:1f sdev:9\n";
        assert_eq!(epoll_inodes(info).collect::<Vec<_>>(), vec![0x2b5c, 0x1f]);
    }

    #[test]
    fn a_sleeping_threads_call_and_first_argument() {
        assert_eq!(
            parse_syscall("43 0x3 0x7ffd1 0x7ffd2 0x0 0x0 0x0 0x7ffd 0x7f12\n"),
            Some((43, 3))
        );
        assert_eq!(parse_syscall("running\n"), None);
        assert_eq!(parse_syscall("-1 0x7ffd 0x4011\n"), None);
    }

    /// A real epoll instance of this process watching a real listener: the proof.
    #[test]
    fn an_epoll_instance_watching_the_listener_is_seen() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let me = std::process::id();
        assert_eq!(
            waits_on_socket(me, inode_of(&l)).unwrap(),
            SocketWait::Unseen { selects: false }
        );
        // SAFETY: plain system calls on descriptors this test owns; `ev` outlives the call.
        #[allow(unsafe_code)]
        let ep = unsafe {
            let ep = libc::epoll_create1(libc::EPOLL_CLOEXEC);
            assert!(ep >= 0);
            let mut ev = libc::epoll_event {
                events: libc::EPOLLIN as u32,
                u64: 1,
            };
            assert_eq!(
                libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, l.as_raw_fd(), &mut ev),
                0
            );
            std::os::fd::OwnedFd::from_raw_fd(ep)
        };
        assert_eq!(
            waits_on_socket(me, inode_of(&l)).unwrap(),
            SocketWait::Polls { pid: me }
        );
        assert_eq!(
            waits_on_socket(me, inode_of(&other)).unwrap(),
            SocketWait::Unseen { selects: false },
            "a listener the epoll does not watch"
        );
        drop(ep);
    }

    /// A thread blocked in accept(2) on the listener: seen through its syscall file.
    #[test]
    fn a_thread_blocked_in_accept_is_seen() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let ino = inode_of(&l);
        let t = std::thread::spawn(move || l.accept().map(|_| ()));
        let me = std::process::id();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let seen = loop {
            let w = waits_on_socket(me, ino).unwrap();
            if w != (SocketWait::Unseen { selects: false }) || std::time::Instant::now() > deadline
            {
                break w;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        };
        let _ = std::net::TcpStream::connect(addr);
        t.join().unwrap().unwrap();
        assert_eq!(seen, SocketWait::Accepts { pid: me });
    }

    #[test]
    fn an_accepted_connection_is_seen_only_after_the_accept() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let client = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let peer = client.local_addr().unwrap().port();
        let me = std::process::id();
        // The handshake is done (the kernel's backlog), the server never accepted.
        assert!(!accepted_in_tree(me, port, peer).unwrap());
        let (server, _) = l.accept().unwrap();
        assert!(accepted_in_tree(me, port, peer).unwrap());
        drop(server);
        assert!(!accepted_in_tree(me, port, peer).unwrap());
    }
}
