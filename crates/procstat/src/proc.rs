//! Reading `/proc`: per-process stat, memory, the process tree, and sockets.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io::ErrorKind;
use std::path::Path;
use std::sync::OnceLock;
use std::time::Instant;

use crate::sockets::{holds_socket, listening_socket_links};
use crate::{ProcStatError, TreeReading};

/// Kernel clock ticks per second (`_SC_CLK_TCK`), the unit of the times in `/proc/PID/stat`.
pub(crate) fn clock_ticks_per_second() -> u64 {
    static TICKS: OnceLock<u64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        // SAFETY: sysconf only reads a configuration value; it has no preconditions and
        // touches no memory of ours.
        #[allow(unsafe_code)]
        let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        // 100 is what Linux reports on every common architecture; only a failed call gets here.
        u64::try_from(ticks).ok().filter(|&t| t > 0).unwrap_or(100)
    })
}

/// Bytes per page, the unit of `/proc/PID/statm`.
pub(crate) fn page_size() -> u64 {
    static PAGE: OnceLock<u64> = OnceLock::new();
    *PAGE.get_or_init(|| {
        // SAFETY: as above, a read-only query without preconditions.
        #[allow(unsafe_code)]
        let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        u64::try_from(size).ok().filter(|&s| s > 0).unwrap_or(4096)
    })
}

/// The fields of `/proc/PID/stat` this crate uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stat {
    pub(crate) ppid: u32,
    /// utime + stime + cutime + cstime, in clock ticks.
    pub(crate) ticks: u64,
}

/// Parses one `/proc/PID/stat` line. The command name (field 2) is in parentheses and
/// may itself hold spaces and parentheses, so the fixed fields are read after the LAST ')'.
pub(crate) fn parse_stat(text: &str) -> Option<Stat> {
    let after = &text[text.rfind(')')? + 1..];
    // Fields from 3 (state) on; field n is at index n - 3.
    let fields: Vec<&str> = after.split_ascii_whitespace().take(15).collect();
    if fields.len() < 15 {
        return None;
    }
    let num = |n: usize| fields[n - 3].parse::<u64>().ok();
    // cutime/cstime are signed in the kernel's format ("%ld"), never negative in practice.
    let signed = |n: usize| fields[n - 3].parse::<i64>().ok().map(|v| v.max(0) as u64);
    Some(Stat {
        ppid: fields[4 - 3].parse().ok()?,
        ticks: num(14)? + num(15)? + signed(16)? + signed(17)?,
    })
}

/// The state letter of one `/proc/PID/stat` (or `/proc/PID/task/TID/stat`) line: field 3,
/// the first after the LAST ')'.
pub(crate) fn parse_state(text: &str) -> Option<char> {
    text[text.rfind(')')? + 1..]
        .split_ascii_whitespace()
        .next()?
        .chars()
        .next()
}

/// Whether every thread of `pid` is stopped (`T` by a signal, `t` by a tracer). `None`
/// when the process is gone (or a zombie: nothing of it runs).
pub(crate) fn all_threads_stopped(pid: u32) -> Option<bool> {
    let tasks = fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut any = false;
    for task in tasks.flatten() {
        // A thread that exits between the listing and the read runs no more.
        let Ok(text) = fs::read_to_string(task.path().join("stat")) else {
            continue;
        };
        match parse_state(&text) {
            Some('T' | 't' | 'Z' | 'X') => any = true,
            Some(_) => return Some(false),
            None => {}
        }
    }
    any.then_some(true)
}

/// The ids of every process now in `/proc` (its numeric entries).
fn all_pids() -> Result<impl Iterator<Item = u32>, ProcStatError> {
    let entries = fs::read_dir("/proc").map_err(|source| ProcStatError::Io {
        path: "/proc".into(),
        source,
    })?;
    Ok(entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok()))
}

/// Every visible process with its stat, in one pass over `/proc`.
/// Processes that vanish while being read are left out.
fn scan_all() -> Result<HashMap<u32, Stat>, ProcStatError> {
    let mut all = HashMap::new();
    for pid in all_pids()? {
        if let Some(stat) = read_stat(pid) {
            all.insert(pid, stat);
        }
    }
    Ok(all)
}

pub(crate) fn read_stat(pid: u32) -> Option<Stat> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text)
}

/// The roots that exist and all their descendants, each once, parents before children.
fn descendants(all: &HashMap<u32, Stat>, roots: &[u32]) -> Vec<u32> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for (&pid, stat) in all {
        children.entry(stat.ppid).or_default().push(pid);
    }
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for &root in roots {
        if !all.contains_key(&root) || !seen.insert(root) {
            continue;
        }
        let start = out.len();
        out.push(root);
        let mut next = start;
        while next < out.len() {
            let pid = out[next];
            next += 1;
            if let Some(kids) = children.get(&pid) {
                for &kid in kids {
                    if seen.insert(kid) {
                        out.push(kid);
                    }
                }
            }
        }
    }
    out
}

/// `root` and all its descendants now.
pub(crate) fn tree_pids(root: u32) -> Result<Vec<u32>, ProcStatError> {
    let all = scan_all()?;
    if !all.contains_key(&root) {
        return Err(ProcStatError::NoSuchProcess { pid: root });
    }
    Ok(descendants(&all, &[root]))
}

/// One reading over the trees of `roots`; `Err` only if `/proc` itself is unreadable.
/// `required` makes a missing first root an error.
pub(crate) fn read_roots(roots: &[u32], required: bool) -> Result<TreeReading, ProcStatError> {
    let (all, pids) = discover_with(roots, required)?;
    Ok(read_pids_with(&pids, true, |pid| all.get(&pid).copied()))
}

/// Each root's tree (root first), all from one pass over `/proc`; empty for a root
/// that is gone.
pub(crate) fn trees_of(roots: &[u32]) -> Result<Vec<Vec<u32>>, ProcStatError> {
    let all = scan_all()?;
    Ok(roots
        .iter()
        .map(|&root| {
            if all.contains_key(&root) {
                descendants(&all, &[root])
            } else {
                Vec::new()
            }
        })
        .collect())
}

/// The roots that exist and all their descendants now (one pass over `/proc`).
/// `required` makes a missing first root an error.
pub(crate) fn discover(roots: &[u32], required: bool) -> Result<Vec<u32>, ProcStatError> {
    discover_with(roots, required).map(|(_, pids)| pids)
}

fn discover_with(
    roots: &[u32],
    required: bool,
) -> Result<(HashMap<u32, Stat>, Vec<u32>), ProcStatError> {
    let all = scan_all()?;
    if required && roots.first().is_some_and(|root| !all.contains_key(root)) {
        return Err(ProcStatError::NoSuchProcess { pid: roots[0] });
    }
    let pids = descendants(&all, roots);
    Ok((all, pids))
}

/// One reading of already discovered processes, root first: two small files each, no scan
/// of `/proc`, no PSS. `None` when the root (`pids[0]`) is gone.
pub(crate) fn read_known(pids: &[u32]) -> Option<TreeReading> {
    read_known_with(pids, false)
}

/// [`read_known`], with PSS when `with_pss`.
pub(crate) fn read_known_with(pids: &[u32], with_pss: bool) -> Option<TreeReading> {
    let root = *pids.first()?;
    let root_seen = std::cell::Cell::new(false);
    let reading = read_pids_with(pids, with_pss, |pid| {
        let stat = read_stat(pid);
        if pid == root && stat.is_some() {
            root_seen.set(true);
        }
        stat
    });
    root_seen.get().then_some(reading)
}

/// Summed PSS of `pids` (smaps_rollup walks page tables: milliseconds for a few hundred
/// MiB); processes gone meanwhile are skipped; `None` when any is unreadable.
pub(crate) fn pss_of(pids: &[u32]) -> Option<u64> {
    let mut total = 0;
    for &pid in pids {
        match read_pss(pid) {
            Pss::Bytes(bytes) => total += bytes,
            Pss::Gone => {}
            Pss::Unreadable => return None,
        }
    }
    Some(total)
}

fn read_pids_with(
    pids: &[u32],
    with_pss: bool,
    stat_of: impl Fn(u32) -> Option<Stat>,
) -> TreeReading {
    let at = Instant::now();
    let page = page_size();
    let mut reading = TreeReading {
        at,
        cpu_ticks: 0,
        rss_bytes: 0,
        pss_bytes: None,
        processes: 0,
    };
    for &pid in pids {
        let Some(stat) = stat_of(pid) else { continue };
        reading.cpu_ticks += stat.ticks;
        reading.processes += 1;
        if let Some(pages) = read_statm_resident(pid) {
            reading.rss_bytes += pages * page;
        }
    }
    if with_pss {
        reading.pss_bytes = pss_of(pids);
    }
    reading
}

fn read_statm_resident(pid: u32) -> Option<u64> {
    let text = fs::read_to_string(format!("/proc/{pid}/statm")).ok()?;
    text.split_ascii_whitespace().nth(1)?.parse().ok()
}

enum Pss {
    Bytes(u64),
    /// The process exited between reads: not a failure.
    Gone,
    /// Not permitted, or a kernel without smaps_rollup (before 4.14).
    Unreadable,
}

fn read_pss(pid: u32) -> Pss {
    match fs::read_to_string(format!("/proc/{pid}/smaps_rollup")) {
        // A zombie or kernel thread has an empty rollup: it holds no memory.
        Ok(text) => Pss::Bytes(parse_pss_kib(&text).unwrap_or(0) * 1024),
        Err(e) if e.kind() == ErrorKind::NotFound || e.raw_os_error() == Some(libc::ESRCH) => {
            if Path::new(&format!("/proc/{pid}")).exists() {
                Pss::Unreadable
            } else {
                Pss::Gone
            }
        }
        Err(_) => Pss::Unreadable,
    }
}

/// The `Pss:` line of smaps_rollup, in KiB.
pub(crate) fn parse_pss_kib(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|line| line.strip_prefix("Pss:"))
        .and_then(|rest| rest.split_ascii_whitespace().next())
        .and_then(|kib| kib.parse().ok())
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_with_spaces_and_parentheses_in_the_name() {
        let line = "4242 (a) (b c)) S 17 4242 4242 0 -1 4194560 100 0 0 0 \
                    11 22 33 44 20 0 1 0 12345 1000 200 18446744073709551615";
        assert_eq!(
            parse_stat(line),
            Some(Stat {
                ppid: 17,
                ticks: 11 + 22 + 33 + 44
            })
        );
    }

    #[test]
    fn state_is_read_after_the_last_parenthesis() {
        assert_eq!(parse_state("7 (PM2 v5.4.3: God) S 1 7"), Some('S'));
        assert_eq!(parse_state("7 (a) T) t 1 7"), Some('t'));
        assert_eq!(parse_state("7 (x)"), None);
        assert_eq!(parse_state("no parenthesis"), None);
    }

    #[test]
    fn truncated_stat_is_none_not_a_panic() {
        assert_eq!(parse_stat("1 (x) S 0 1"), None);
        assert_eq!(parse_stat("no parenthesis"), None);
        assert_eq!(parse_stat(""), None);
    }

    #[test]
    fn own_stat_parses_and_names_our_parent() {
        let me = read_stat(std::process::id()).expect("own /proc/PID/stat");
        assert_eq!(me.ppid, std::os::unix::process::parent_id());
    }

    #[test]
    fn pss_line() {
        let text = "55d0-7ffe ---p 00000000 00:00 0 [rollup]\nRss:  2048 kB\nPss:  1536 kB\nPss_Anon: 3 kB\n";
        assert_eq!(parse_pss_kib(text), Some(1536));
        assert_eq!(parse_pss_kib(""), None);
    }

    #[test]
    fn listen_table() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 5555 1 0000000000000000 100 0 0 10 0\n\
   1: 0100007F:1F90 0100007F:D431 01 00000000:00000000 00:00000000 00000000  1000        0 6666 1 0000000000000000 20 4 30 10 -1\n\
   2: 00000000:0050 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 7777 1 0000000000000000 100 0 0 10 0\n";
        use crate::sockets::listening_inodes;
        assert_eq!(listening_inodes(table, 8080), [5555]);
        assert_eq!(listening_inodes(table, 80), [7777]);
        assert!(listening_inodes(table, 81).is_empty());
    }

    #[test]
    fn descendants_walks_the_whole_tree_once() {
        let stat = |ppid| Stat { ppid, ticks: 0 };
        let all: HashMap<u32, Stat> = [
            (1, stat(0)),
            (10, stat(1)),
            (11, stat(10)),
            (12, stat(11)),
            (13, stat(10)),
            (20, stat(1)),
        ]
        .into_iter()
        .collect();
        let mut tree = descendants(&all, &[10, 11, 99]);
        tree.sort_unstable();
        assert_eq!(tree, [10, 11, 12, 13]);
    }
}
