//! CPU% and memory (RSS and PSS) of a process tree, read from Linux `/proc` over time.
//!
//! A load test that watches only the server's own pid misses the work it hands to child
//! processes (a CLI spawned per request), and summing RSS over a tree counts shared pages
//! once per process. This crate measures a *tree*: a root process and all its
//! descendants, re-discovered at every reading so children started during the run count,
//! with PSS (proportional set size) beside RSS.
//!
//! It must not do HTTP or anything but read `/proc`; it runs on Linux only.
//!
//! Main items: [`read_tree`] / [`read_set`] give one [`TreeReading`]; [`trees_of`] finds
//! several trees in one pass and [`read_pids`] reads known processes without a pass; [`cpu_percent`]
//! turns two readings into CPU%; [`TreeSampler`] samples on a background thread,
//! summarizes windows ([`ResourceSummary`]) between [`SampleMark`]s and gives the CPU over
//! whole intervals ([`TreeSampler::cpu_since`], what a live chart draws); [`pid_listening_on`]
//! finds a server by its port; [`tree_pids`] lists a tree. For a supervisor:
//! [`listening_in_tree`] tells whether a port's listener is a process tree's own,
//! [`tcp_queues`] what a connection's peer has not read yet, [`connections_held`] which
//! connections of a port a process holds (and under which descriptor), and
//! [`process_ended`] whether a process has begun to exit; [`waits_on_socket`]
//! whether a worker takes connections from a socket it was handed (its event loop polls
//! it, or a thread blocks in `accept` on it) and [`accepted_in_tree`] whether it accepted
//! a given connection (the proof that a handshake alone does not give).
//!
//! # Accounting rules
//!
//! - **CPU**: for every live process of the tree, `utime + stime + cutime + cstime` from
//!   `/proc/PID/stat` (all threads included). When a child exits and its parent reaps
//!   it, the child's time moves into the parent's `cutime`/`cstime`, so the tree total
//!   does not drop: a short-lived child that lived between two readings is still counted
//!   once its parent has reaped it. A [`TreeSampler`] notices new children at its next
//!   once-a-second discovery; their time so far lands in that interval. CPU% = Δticks ÷ `_SC_CLK_TCK` ÷ Δwall × 100, so
//!   100.0 is one core busy.
//! - **RSS**: `/proc/PID/statm` resident pages × page size, summed (shared pages count
//!   once per process that maps them: an overestimate for forked workers).
//! - **PSS**: the `Pss:` line of `/proc/PID/smaps_rollup` (Linux 4.14+), summed; a shared
//!   page is split between the processes that map it, so the sum is the tree's real share
//!   of memory. `None` when any process's rollup cannot be read (another user's process).
//!   Reading it walks the process's page tables under its mmap lock — milliseconds for a
//!   large heap, long enough to show in the watched service's own p99 when read once a
//!   second under load (figures: docs/procstat.md). So [`TreeSampler`] reads PSS only
//!   when a window is summarized (the end of a load step), never during it; RSS (a
//!   counter, no page walk) is sampled throughout.
//! - **The sampler stays out of the way**: its thread runs at nice 19, each interval reads
//!   two small files per known process, and the tree is re-discovered (a pass over all of
//!   `/proc`) once a second. A sampler that scanned everything every 100 ms on the load
//!   generator's core stalled it for milliseconds, which showed as the watched service's
//!   latency (docs/load.md).
//! - Processes that exit during a reading are skipped, not errors.
//!
//! # Limits
//!
//! - A descendant whose parent exits is re-parented (to init or a subreaper) and leaves
//!   the tree, taking its accumulated CPU time out of the total: the total can drop,
//!   which [`cpu_percent`] reports as 0 for that interval. Daemonizing children are
//!   therefore undercounted; sample their own pid with [`read_set`].
//! - A child reaped by nobody in the tree (its parent ignores `SIGCHLD`) takes its time
//!   with it when it exits.
//! - A child that exits between the reading of its parent and its own reading is missed
//!   by that one reading and counted again at the next: per-interval peaks may jitter by
//!   a tick, window means do not.
//! - Resolution is one clock tick (10 ms at the usual 100 Hz) per process: ±10% of a core
//!   over one 100 ms sample, ±1% over a second. A figure shown live (a chart's point, a
//!   card) is therefore the CPU over its whole interval, ticks summed
//!   ([`TreeSampler::cpu_since`]), never the last short sample.
//! - `/proc/net/tcp*` shows the sockets of this network namespace only.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use scalpel_procstat::{TreeSampler, read_tree, cpu_percent};
//!
//! let me = std::process::id();
//! let before = read_tree(me)?;
//! let sampler = TreeSampler::start(me, Duration::from_millis(100))?;
//! let mark = sampler.mark();
//! let _work: u64 = (0..1_000_000u64).sum();
//! let step = sampler.summary_since(mark);
//! assert!(step.samples >= 1 && step.rss_bytes_peak > 0);
//! let after = read_tree(me)?;
//! assert!(cpu_percent(&before, &after) >= 0.0);
//! sampler.stop();
//! # Ok::<(), scalpel_procstat::ProcStatError>(())
//! ```

// `tree`: which processes make a tree (one pass over /proc), the listing both the
// readings (`proc`: CPU, memory, thread states) and the port owners (`sockets`) start
// from; `sampler`: the background thread over `proc`.
mod error;
mod proc;
mod sampler;
mod sockets;
mod tree;
mod waiting;

use std::time::Instant;

pub use error::ProcStatError;
pub use sampler::{CpuInterval, ResourceSummary, Sample, SampleMark, TreeSampler};
pub use sockets::{
    HeldConnection, TcpQueue, connections_held, listening_in_tree, process_ended, process_exited,
    process_name, tcp_queues,
};
pub use waiting::{SocketWait, accepted_in_tree, waits_on_socket};

/// One reading of a process tree (or several trees, summed).
#[derive(Debug, Clone, Copy)]
pub struct TreeReading {
    /// When the reading was taken.
    pub at: Instant,
    /// utime + stime + cutime + cstime of every process, in clock ticks.
    pub cpu_ticks: u64,
    /// Summed resident set size.
    pub rss_bytes: u64,
    /// Summed proportional set size; `None` when it could not be read for every process.
    pub pss_bytes: Option<u64>,
    /// Processes counted.
    pub processes: u32,
}

/// The pid of the process that listens on TCP `port` (IPv4 or IPv6, this network
/// namespace). When a socket is shared (a forking server and its workers), the topmost
/// holder.
///
/// # Errors
///
/// [`ProcStatError::NotListening`] when no socket listens there,
/// [`ProcStatError::PermissionDenied`] when one does but its owner's file descriptors
/// cannot be read.
pub fn pid_listening_on(port: u16) -> Result<u32, ProcStatError> {
    sockets::pid_listening_on(port)
}

/// The kernel's ephemeral port range (`/proc/sys/net/ipv4/ip_local_port_range`): where
/// outgoing connections take their local ports. `None` when it cannot be read.
pub fn ephemeral_port_range() -> Option<(u16, u16)> {
    let text = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    parse_port_range(&text)
}

fn parse_port_range(text: &str) -> Option<(u16, u16)> {
    let mut it = text.split_whitespace().map(str::parse::<u16>);
    match (it.next()?.ok()?, it.next()?.ok()?) {
        (lo, hi) if lo <= hi => Some((lo, hi)),
        _ => None,
    }
}

#[cfg(test)]
#[test]
fn the_port_range_file_reads_as_two_ports() {
    assert_eq!(parse_port_range("32768\t60999\n"), Some((32768, 60999)));
    assert_eq!(parse_port_range("60999 32768"), None);
    assert_eq!(parse_port_range("x"), None);
    assert!(ephemeral_port_range().is_some(), "this machine has one");
}

/// Whether every thread of process `pid` has stopped (SIGSTOP or a tracer). A stop
/// signal takes effect when each thread next enters the kernel, not when `kill` returns:
/// a caller that must see a process's sockets stand still waits for `Some(true)`.
/// `Some(false)` while one thread still runs or sleeps; `None` when the process is gone.
pub fn all_threads_stopped(pid: u32) -> Option<bool> {
    proc::all_threads_stopped(pid)
}

/// `root` and all its descendants now, parents before children.
///
/// # Errors
///
/// [`ProcStatError::NoSuchProcess`] if `root` does not exist.
pub fn tree_pids(root: u32) -> Result<Vec<u32>, ProcStatError> {
    tree::tree_pids(root)
}

/// One reading of the tree under `root`.
///
/// # Errors
///
/// [`ProcStatError::NoSuchProcess`] if `root` is gone.
pub fn read_tree(root: u32) -> Result<TreeReading, ProcStatError> {
    proc::read_roots(&[root], true)
}

/// One reading of several trees summed (e.g. a balancer's workers). Roots that are gone
/// are skipped; a process in two of the trees counts once.
pub fn read_set(roots: &[u32]) -> TreeReading {
    proc::read_roots(roots, false).unwrap_or(TreeReading {
        at: Instant::now(),
        cpu_ticks: 0,
        rss_bytes: 0,
        pss_bytes: None,
        processes: 0,
    })
}

/// Each root's tree — the root first, then its descendants — from a single pass over
/// `/proc` (an empty list for a root that is gone; all empty when `/proc` cannot be read).
/// With [`read_pids`], a supervisor samples its workers without scanning `/proc` at every
/// reading: it discovers their trees now and then, and reads the known processes between.
pub fn trees_of(roots: &[u32]) -> Vec<Vec<u32>> {
    tree::trees_of(roots).unwrap_or_else(|_| vec![Vec::new(); roots.len()])
}

/// One reading of already discovered processes, `pids[0]` being the tree's root: two small
/// files per process, no pass over `/proc`; PSS (a walk of every process's page tables)
/// only `with_pss`. Processes gone meanwhile are skipped; `None` when the root is gone.
pub fn read_pids(pids: &[u32], with_pss: bool) -> Option<TreeReading> {
    proc::read_known_with(pids, with_pss)
}

/// CPU% between two readings of the same tree: 100.0 is one core busy. 0 when no time
/// passed or the total dropped (a descendant left the tree).
pub fn cpu_percent(earlier: &TreeReading, later: &TreeReading) -> f64 {
    let wall = later.at.saturating_duration_since(earlier.at).as_secs_f64();
    if wall <= 0.0 {
        return 0.0;
    }
    let ticks = later.cpu_ticks.saturating_sub(earlier.cpu_ticks) as f64;
    ticks / proc::clock_ticks_per_second() as f64 / wall * 100.0
}
