//! Readings of known processes from `/proc`: CPU ticks, memory (RSS, PSS) and thread
//! states. Which processes make a tree is `tree`'s business.

use std::fs;
use std::io::ErrorKind;
use std::path::Path;
use std::sync::OnceLock;
use std::time::Instant;

use crate::tree::{Stat, discover_with, read_stat};
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

/// One reading over the trees of `roots`; `Err` only if `/proc` itself is unreadable.
/// `required` makes a missing first root an error.
pub(crate) fn read_roots(roots: &[u32], required: bool) -> Result<TreeReading, ProcStatError> {
    let (all, pids) = discover_with(roots, required)?;
    Ok(read_pids_with(&pids, true, |pid| all.get(&pid).copied()))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_is_read_after_the_last_parenthesis() {
        assert_eq!(parse_state("7 (PM2 v5.4.3: God) S 1 7"), Some('S'));
        assert_eq!(parse_state("7 (a) T) t 1 7"), Some('t'));
        assert_eq!(parse_state("7 (x)"), None);
        assert_eq!(parse_state("no parenthesis"), None);
    }

    #[test]
    fn pss_line() {
        let text = "55d0-7ffe ---p 00000000 00:00 0 [rollup]\nRss:  2048 kB\nPss:  1536 kB\nPss_Anon: 3 kB\n";
        assert_eq!(parse_pss_kib(text), Some(1536));
        assert_eq!(parse_pss_kib(""), None);
    }
}
