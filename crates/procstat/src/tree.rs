//! Which processes make a tree: one pass over `/proc` reads every process's parent (from
//! `/proc/PID/stat`), and a tree is a root with all its descendants. The readings (`proc`)
//! and the port owners (`sockets`) both start from these listings.

use std::collections::{HashMap, HashSet};
use std::fs;

use crate::ProcStatError;

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

/// The ids of every process now in `/proc` (its numeric entries).
pub(crate) fn all_pids() -> Result<impl Iterator<Item = u32>, ProcStatError> {
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

/// The roots that exist and all their descendants, each once, parents before children,
/// with every process's stat from the same pass. `required` makes a missing first root an
/// error.
pub(crate) fn discover_with(
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
