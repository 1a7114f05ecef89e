//! Who owns a TCP port, and what waits in a connection's queues: `/proc/net/tcp*` and
//! `/proc/PID/fd`, for a supervisor that must know whether a port is its worker's and
//! whether a worker has read a request it was sent.

use std::collections::HashSet;
use std::fs;
use std::io::ErrorKind;

use crate::ProcStatError;
use crate::tree::{all_pids, read_stat, tree_pids};

/// One TCP connection as the kernel reports it in `/proc/net/tcp` or `tcp6`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpQueue {
    /// The socket's own port.
    pub local_port: u16,
    /// The peer's port.
    pub remote_port: u16,
    /// Bytes sent and not yet acknowledged by the peer.
    pub tx_queue: u64,
    /// Bytes received and not yet read by the socket's owner.
    pub rx_queue: u64,
}

/// The connected (not listening) sockets of this network namespace with `port` on either
/// end, IPv4 and IPv6. On loopback both ends of a connection are listed, so for a
/// connection from port `c` to a server on `port`, the entry with `local_port == port`
/// and `remote_port == c` holds what the server has not read yet.
///
/// # Errors
///
/// [`ProcStatError::Io`] when `/proc/net/tcp` cannot be read.
pub fn tcp_queues(port: u16) -> Result<Vec<TcpQueue>, ProcStatError> {
    let mut out = Vec::new();
    for_each_tcp_table(|text| out.extend(parse_queues(text, port)))?;
    Ok(out)
}

/// Calls `each` with the text of `/proc/net/tcp`, then of `/proc/net/tcp6`: the one
/// reading of this namespace's socket tables. A missing `tcp6` is skipped (IPv6 may be
/// disabled); a missing `tcp` means no /proc at all, an error.
pub(crate) fn for_each_tcp_table(mut each: impl FnMut(&str)) -> Result<(), ProcStatError> {
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        match fs::read_to_string(table) {
            Ok(text) => each(&text),
            Err(e) if e.kind() == ErrorKind::NotFound && table.ends_with('6') => {}
            Err(source) => {
                return Err(ProcStatError::Io {
                    path: table.into(),
                    source,
                });
            }
        }
    }
    Ok(())
}

/// Inodes of TCP sockets in LISTEN state on `port`, from one `/proc/net/tcp*` table.
pub(crate) fn listening_inodes(table: &str, port: u16) -> Vec<u64> {
    tcp_rows(table)
        .filter(|r| r.listening() && r.local_port == port)
        .filter_map(|r| r.inode)
        .collect()
}

/// What a `/proc/PID/fd` link of a socket listening on `port` points to (`socket:[INODE]`),
/// IPv4 and IPv6; empty when nothing listens there.
pub(crate) fn listening_socket_links(port: u16) -> Result<HashSet<String>, ProcStatError> {
    let mut inodes = Vec::new();
    for_each_tcp_table(|text| inodes.extend(listening_inodes(text, port)))?;
    Ok(inodes.iter().map(|i| format!("socket:[{i}]")).collect())
}

/// Does one of the descriptors of a `/proc/PID/fd` listing link to a socket in `wanted`?
/// A descriptor closed meanwhile has no link and counts as not holding one.
pub(crate) fn holds_socket(fds: fs::ReadDir, wanted: &HashSet<String>) -> bool {
    fds.flatten().any(|fd| {
        fs::read_link(fd.path())
            .ok()
            .and_then(|target| target.to_str().map(|t| wanted.contains(t)))
            .unwrap_or(false)
    })
}

/// `st` of a listening socket in `/proc/net/tcp*`.
const LISTEN: &str = "0A";

/// One line of a `/proc/net/tcp*` table, the fields this crate reads.
pub(crate) struct TcpRow<'a> {
    pub(crate) local_port: u16,
    pub(crate) remote_port: u16,
    pub(crate) state: &'a str,
    /// `tx_queue:rx_queue`, hexadecimal.
    queues: &'a str,
    /// `None` when absent or 0 (a `TIME_WAIT` entry has no inode).
    pub(crate) inode: Option<u64>,
}

impl TcpRow<'_> {
    pub(crate) fn listening(&self) -> bool {
        self.state == LISTEN
    }
}

/// The rows of one `/proc/net/tcp*` table (the heading and malformed lines skipped): the
/// one parser of the format for every reader in this crate.
pub(crate) fn tcp_rows(table: &str) -> impl Iterator<Item = TcpRow<'_>> {
    let port_of = |addr: &str| u16::from_str_radix(addr.rsplit(':').next()?, 16).ok();
    table.lines().skip(1).filter_map(move |line| {
        // sl local rem st tx:rx tr:when retrnsmt uid timeout inode
        let f: Vec<&str> = line.split_ascii_whitespace().collect();
        let (local, remote, state, queues) = (f.get(1)?, f.get(2)?, f.get(3)?, f.get(4)?);
        Some(TcpRow {
            local_port: port_of(local)?,
            remote_port: port_of(remote)?,
            state,
            queues,
            inode: f.get(9).and_then(|i| i.parse().ok()).filter(|&i| i != 0),
        })
    })
}

/// The entries of one `/proc/net/tcp*` table with `port` on either end, except listening
/// sockets.
pub(crate) fn parse_queues(table: &str, port: u16) -> Vec<TcpQueue> {
    tcp_rows(table)
        .filter(|r| !r.listening() && (r.local_port == port || r.remote_port == port))
        .filter_map(|r| {
            let (tx, rx) = r.queues.split_once(':')?;
            Some(TcpQueue {
                local_port: r.local_port,
                remote_port: r.remote_port,
                tx_queue: u64::from_str_radix(tx, 16).ok()?,
                rx_queue: u64::from_str_radix(rx, 16).ok()?,
            })
        })
        .collect()
}

/// The pid of the process that listens on TCP `port`: the topmost holder of the socket
/// (a forking server shares it with its workers).
pub(crate) fn pid_listening_on(port: u16) -> Result<u32, ProcStatError> {
    let wanted = listening_socket_links(port)?;
    if wanted.is_empty() {
        return Err(ProcStatError::NotListening { port });
    }

    let mut holders = Vec::new();
    let mut denied = false;
    for pid in all_pids()? {
        let fds = match fs::read_dir(format!("/proc/{pid}/fd")) {
            Ok(fds) => fds,
            Err(e) if e.kind() == ErrorKind::PermissionDenied => {
                denied = true;
                continue;
            }
            Err(_) => continue, // exited meanwhile
        };
        if holds_socket(fds, &wanted) {
            holders.push(pid);
        }
    }
    if holders.is_empty() {
        return Err(if denied {
            ProcStatError::PermissionDenied { port }
        } else {
            ProcStatError::NotListening { port }
        });
    }
    // A forked server shares its socket with its workers: report the topmost holder.
    let topmost: Vec<u32> = holders
        .iter()
        .copied()
        .filter(|&pid| read_stat(pid).is_none_or(|s| !holders.contains(&s.ppid)))
        .collect();
    Ok(topmost.into_iter().min().unwrap_or(holders[0]))
}

/// Does a socket listening on TCP `port` belong to `root` or one of its descendants?
/// `Ok(false)` when nothing listens there, or when another process does (a leftover
/// worker, a second balancer with the same ports): a health check on that port would
/// reach a stranger.
///
/// # Errors
///
/// [`ProcStatError::NoSuchProcess`] when `root` is gone; [`ProcStatError::Io`] when the
/// socket tables cannot be read.
pub fn listening_in_tree(root: u32, port: u16) -> Result<bool, ProcStatError> {
    let wanted = listening_socket_links(port)?;
    if wanted.is_empty() {
        return Ok(false);
    }
    for pid in tree_pids(root)? {
        let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue; // exited meanwhile
        };
        if holds_socket(fds, &wanted) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// A connected TCP socket a process holds: its descriptor number in that process (what
/// `pidfd_getfd(2)` takes), its inode, and the peer's port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeldConnection {
    /// The file descriptor number in the holding process's table.
    pub fd: i32,
    /// The socket's inode: one socket held by two processes has one inode.
    pub inode: u64,
    /// The peer's port.
    pub remote_port: u16,
}

/// The connected (not listening) TCP sockets that process `pid` holds whose own port is
/// `port`, IPv4 and IPv6, read from the process's network namespace
/// (`/proc/PID/net/tcp*`) and its descriptors (`/proc/PID/fd`): for a supervisor that
/// takes over the connections a stuck worker accepted on a shared socket.
///
/// # Errors
///
/// [`ProcStatError::NoSuchProcess`] when `pid` is gone; [`ProcStatError::Io`] when its
/// tables or descriptors cannot be read (another user's process).
pub fn connections_held(pid: u32, port: u16) -> Result<Vec<HeldConnection>, ProcStatError> {
    let mut by_inode = std::collections::HashMap::new();
    for table in ["tcp", "tcp6"] {
        let path = format!("/proc/{pid}/net/{table}");
        match fs::read_to_string(&path) {
            Ok(text) => by_inode.extend(connected_inodes(&text, port)),
            Err(e) if e.kind() == ErrorKind::NotFound && table == "tcp" => {
                return Err(ProcStatError::NoSuchProcess { pid });
            }
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(source) => {
                return Err(ProcStatError::Io {
                    path: path.into(),
                    source,
                });
            }
        }
    }
    let dir = format!("/proc/{pid}/fd");
    let entries = match fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            return Err(ProcStatError::NoSuchProcess { pid });
        }
        Err(source) => {
            return Err(ProcStatError::Io {
                path: dir.into(),
                source,
            });
        }
    };
    let mut out = Vec::new();
    if by_inode.is_empty() {
        return Ok(out);
    }
    for entry in entries.flatten() {
        let Some(fd) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        // A descriptor closed meanwhile has no link: skipped.
        let Ok(target) = fs::read_link(entry.path()) else {
            continue;
        };
        let inode = target
            .to_str()
            .and_then(|t| t.strip_prefix("socket:["))
            .and_then(|t| t.strip_suffix(']'))
            .and_then(|t| t.parse::<u64>().ok());
        if let Some(inode) = inode
            && let Some(&remote_port) = by_inode.get(&inode)
        {
            out.push(HeldConnection {
                fd,
                inode,
                remote_port,
            });
        }
    }
    out.sort_by_key(|c| c.fd);
    Ok(out)
}

/// `(inode, remote port)` of the connected sockets whose own port is `port` in one
/// `/proc/net/tcp*` table (listening sockets and sockets without an inode, such as
/// `TIME_WAIT` ones, left out).
pub(crate) fn connected_inodes(table: &str, port: u16) -> Vec<(u64, u16)> {
    tcp_rows(table)
        .filter(|r| !r.listening() && r.local_port == port)
        .filter_map(|r| Some((r.inode?, r.remote_port)))
        .collect()
}

/// The command name of process `pid` (`/proc/PID/comm`), for messages.
pub fn process_name(pid: u32) -> Option<String> {
    fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .map(|c| c.trim().to_string())
}

/// `PF_EXITING` in the flags of `/proc/PID/stat`: the process has begun to exit (its
/// sockets are being or have been closed).
const PF_EXITING: u64 = 0x4;

/// Has process `pid` ended or begun to end: gone, a zombie, or exiting? A connection
/// that a process's exit closed is seen by its peer only after the kernel set the
/// process's exiting flag, so a peer that reads end-of-file and then asks this gets
/// `true` when (and only when) the close came from the exit.
pub fn process_ended(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(text) => stat_says_ended(&text),
        Err(_) => true,
    }
}

/// Has process `pid` finished exiting: gone, or a zombie (its files, sockets included,
/// are closed)? Unlike [`process_ended`], `false` while the exit is still under way.
pub fn process_exited(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(text) => text
            .rfind(')')
            .and_then(|c| text[c + 1..].split_ascii_whitespace().next())
            .is_none_or(|state| matches!(state, "Z" | "X" | "x")),
        Err(_) => true,
    }
}

pub(crate) fn stat_says_ended(text: &str) -> bool {
    let Some(close) = text.rfind(')') else {
        return true;
    };
    // Fields from 3 (state) on; the flags are field 9.
    let fields: Vec<&str> = text[close + 1..].split_ascii_whitespace().take(7).collect();
    let (Some(state), Some(flags)) = (fields.first(), fields.get(9 - 3)) else {
        return true;
    };
    let flags = flags.parse::<u64>().unwrap_or(0);
    matches!(*state, "Z" | "X" | "x") || flags & PF_EXITING != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_table() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 5555 1 0000000000000000 100 0 0 10 0\n\
   1: 0100007F:1F90 0100007F:D431 01 00000000:00000000 00:00000000 00000000  1000        0 6666 1 0000000000000000 20 4 30 10 -1\n\
   2: 00000000:0050 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 7777 1 0000000000000000 100 0 0 10 0\n";
        assert_eq!(listening_inodes(table, 8080), [5555]);
        assert_eq!(listening_inodes(table, 80), [7777]);
        assert!(listening_inodes(table, 81).is_empty());
    }

    #[test]
    fn queues_of_both_ends_of_a_loopback_connection() {
        // A client on 44444 talking to a server on 3001 (0x0BB9): the server has 0x4E (78)
        // bytes it did not read; the listener itself is left out.
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:0BB9 00000000:0000 0A 00000000:00000002 00:00000000 00000000  1000        0 111 1\n\
   1: 0100007F:0BB9 0100007F:AD9C 01 00000000:0000004E 00:00000000 00000000  1000        0 222 1\n\
   2: 0100007F:AD9C 0100007F:0BB9 01 00000010:00000000 00:00000000 00000000  1000        0 333 1\n\
   3: 0100007F:1F90 0100007F:AD9D 01 00000000:00000001 00:00000000 00000000  1000        0 444 1\n\
   4: garbage\n";
        let q = parse_queues(table, 3001);
        assert_eq!(
            q,
            vec![
                TcpQueue {
                    local_port: 3001,
                    remote_port: 44444,
                    tx_queue: 0,
                    rx_queue: 78
                },
                TcpQueue {
                    local_port: 44444,
                    remote_port: 3001,
                    tx_queue: 16,
                    rx_queue: 0
                },
            ]
        );
    }

    #[test]
    fn connected_sockets_of_a_port_by_inode() {
        // A server on 3001 (0x0BB9): its listener (111) and a TIME_WAIT entry (inode 0)
        // are left out, as is the client's end (local port 44444) and another port.
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:0BB9 00000000:0000 0A 00000000:00000002 00:00000000 00000000  1000        0 111 1\n\
   1: 0100007F:0BB9 0100007F:AD9C 01 00000000:0000004E 00:00000000 00000000  1000        0 222 1\n\
   2: 0100007F:AD9C 0100007F:0BB9 01 00000010:00000000 00:00000000 00000000  1000        0 333 1\n\
   3: 0100007F:0BB9 0100007F:AD9E 06 00000000:00000000 03:00000000 00000000     0        0 0 3\n\
   4: 0100007F:0BB9 0100007F:AD9F 08 00000000:00000010 00:00000000 00000000  1000        0 555 1\n\
   5: 0100007F:1F90 0100007F:AD9D 01 00000000:00000001 00:00000000 00000000  1000        0 444 1\n\
   6: garbage\n";
        assert_eq!(
            connected_inodes(table, 3001),
            vec![(222, 44444), (555, 44447)]
        );
    }

    #[test]
    fn a_process_holds_its_accepted_connection_under_its_descriptor() {
        use std::os::fd::AsRawFd;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let client = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let (server, _) = l.accept().unwrap();
        let held = connections_held(std::process::id(), port).unwrap();
        assert_eq!(held.len(), 1, "{held:?}");
        assert_eq!(held[0].fd, server.as_raw_fd());
        assert_eq!(held[0].remote_port, client.local_addr().unwrap().port());
        drop(server);
        assert!(
            connections_held(std::process::id(), port)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn ended_processes_by_state_and_flags() {
        let stat = |state: &str, flags: u64| {
            format!("123 (a (b) c) {state} 1 123 123 0 -1 {flags} 0 0 0 0 1 2 0 0 20 0 1 0")
        };
        assert!(!stat_says_ended(&stat("S", 0x400000)));
        assert!(!stat_says_ended(&stat("R", 0)));
        assert!(stat_says_ended(&stat("Z", 0)));
        assert!(stat_says_ended(&stat("S", 0x400004)));
        assert!(stat_says_ended("truncated"));
        assert!(!process_ended(std::process::id()));
        assert!(!process_exited(std::process::id()));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        // Exited but not reaped: a zombie, which counts as exited.
        while !process_exited(pid) {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(process_ended(pid));
        child.wait().unwrap();
        assert!(process_exited(pid), "reaped: gone");
    }

    #[test]
    fn a_listener_belongs_to_its_owners_tree_only() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        assert!(listening_in_tree(std::process::id(), port).unwrap());
        // A child of ours does not hold our socket: it is not in the child's tree.
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let owned = listening_in_tree(child.id(), port);
        let _ = child.kill();
        let _ = child.wait();
        assert!(
            !owned.unwrap(),
            "a stranger's listener counted as the child's"
        );
        drop(l);
        assert!(!listening_in_tree(std::process::id(), port).unwrap());
    }
}
