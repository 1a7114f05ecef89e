//! `scalpel procstat PID…`: the CPU time and memory of process trees now, read by
//! scalpel-procstat exactly as `scalpel load --watch-pid` and `scalpel serve` read them
//! (docs/procstat.md), for scripts that measure around runs of their own (the bench
//! scripts take two readings and subtract).
//!
//! Each PID is a tree: the process and all its descendants, each process counted once
//! even when trees nest (a worker given beside its supervisor); `--no-tree` reads each
//! PID alone. A PID that is gone counts 0, so a script's subtraction never breaks.

use std::process::ExitCode;
use std::time::Duration;

use scalpel_procstat::{TreeReading, cpu_percent, read_pids, trees_of};
use serde_json::json;

/// Arguments of `scalpel procstat`.
#[derive(Debug, clap::Args)]
pub(crate) struct ProcstatArgs {
    /// The processes: each with all its descendants (see --no-tree).
    #[arg(value_name = "PID", required = true)]
    pids: Vec<u32>,
    /// Each PID alone, without its descendants.
    #[arg(long)]
    no_tree: bool,
    /// Print only the CPU clock ticks of all the PIDs together (each process once), one
    /// integer: what a script subtracts around a run. No PSS is read.
    #[arg(long, conflicts_with = "json")]
    ticks: bool,
    /// Print JSON: each PID's reading and all of them together.
    #[arg(long)]
    json: bool,
    /// Leave PSS out: reading it walks each process's page tables under its memory-map
    /// lock (milliseconds for a large heap).
    #[arg(long)]
    no_pss: bool,
}

/// What one PID (or all of them) came to.
#[derive(Debug, Clone, Copy, Default)]
struct Figures {
    processes: u32,
    cpu_ticks: u64,
    cpu_seconds: f64,
    rss_bytes: u64,
    /// `None` when it was not read, or could not be for every process.
    pss_bytes: Option<u64>,
}

impl Figures {
    fn of(reading: &TreeReading) -> Figures {
        Figures {
            processes: reading.processes,
            cpu_ticks: reading.cpu_ticks,
            cpu_seconds: cpu_seconds(reading),
            rss_bytes: reading.rss_bytes,
            pss_bytes: reading.pss_bytes,
        }
    }

    fn add(self, other: Figures) -> Figures {
        Figures {
            processes: self.processes + other.processes,
            cpu_ticks: self.cpu_ticks + other.cpu_ticks,
            cpu_seconds: self.cpu_seconds + other.cpu_seconds,
            rss_bytes: self.rss_bytes + other.rss_bytes,
            pss_bytes: self.pss_bytes.zip(other.pss_bytes).map(|(a, b)| a + b),
        }
    }

    fn json(&self) -> serde_json::Value {
        json!({
            "processes": self.processes,
            "cpu_ticks": self.cpu_ticks,
            "cpu_seconds": self.cpu_seconds,
            "rss_bytes": self.rss_bytes,
            "pss_bytes": self.pss_bytes,
        })
    }
}

/// The CPU seconds of a reading, in procstat's own clock ticks: its CPU% over a window of
/// exactly one second that began at zero ticks.
fn cpu_seconds(reading: &TreeReading) -> f64 {
    let Some(start) = reading.at.checked_sub(Duration::from_secs(1)) else {
        return 0.0;
    };
    let zero = TreeReading {
        at: start,
        cpu_ticks: 0,
        ..*reading
    };
    cpu_percent(&zero, reading) / 100.0
}

/// Runs `scalpel procstat`.
pub(crate) fn run(args: ProcstatArgs) -> anyhow::Result<ExitCode> {
    let with_pss = !(args.no_pss || args.ticks);
    // Each PID's processes, the PID first; empty when it is gone.
    let groups: Vec<Vec<u32>> = if args.no_tree {
        args.pids.iter().map(|&p| vec![p]).collect()
    } else {
        trees_of(&args.pids)
    };
    // One reading per PID, `None` when it is gone (or went between finding its tree and
    // reading it); `all` sums the same readings, so the rows add up.
    let each: Vec<(u32, Option<Figures>)> = args
        .pids
        .iter()
        .zip(&groups)
        .map(|(&pid, group)| (pid, read_pids(group, with_pss).map(|r| Figures::of(&r))))
        .collect();
    let none = Figures {
        pss_bytes: with_pss.then_some(0),
        ..Figures::default()
    };
    let all = distinct(&args.pids, &groups)
        .into_iter()
        .filter_map(|i| each[i].1)
        .fold(none, Figures::add);
    if args.ticks {
        println!("{}", all.cpu_ticks);
        return Ok(ExitCode::SUCCESS);
    }
    if args.json {
        let trees: Vec<serde_json::Value> = each
            .iter()
            .map(|(pid, f)| {
                let mut v = f.unwrap_or_default().json();
                v["pid"] = json!(pid);
                v["gone"] = json!(f.is_none());
                v
            })
            .collect();
        let out = json!({ "tree": !args.no_tree, "pids": trees, "all": all.json() });
        println!("{out}");
    } else {
        print!("{}", table(&each, &all));
    }
    Ok(ExitCode::SUCCESS)
}

/// The indexes of the groups to sum so that each process counts once: trees either nest or
/// are apart, so a group whose PID lies in another PID's group is left out, and so is a
/// PID given twice.
fn distinct(pids: &[u32], groups: &[Vec<u32>]) -> Vec<usize> {
    let mut kept: Vec<usize> = Vec::new();
    for (i, group) in groups.iter().enumerate() {
        let pid = pids[i];
        let inside_another = groups
            .iter()
            .enumerate()
            .any(|(j, g)| pids[j] != pid && g.contains(&pid));
        let again = kept.iter().any(|&k| pids[k] == pid);
        if !group.is_empty() && !inside_another && !again {
            kept.push(i);
        }
    }
    kept
}

fn table(each: &[(u32, Option<Figures>)], all: &Figures) -> String {
    let mib = |b: u64| format!("{:.1}", b as f64 / (1024.0 * 1024.0));
    let row = |name: &str, f: &Figures| {
        format!(
            "{name:<10} {:>9} {:>12} {:>10.2} {:>9} {:>9}\n",
            f.processes,
            f.cpu_ticks,
            f.cpu_seconds,
            mib(f.rss_bytes),
            f.pss_bytes.map_or_else(|| "-".to_string(), mib)
        )
    };
    let mut out = format!(
        "{:<10} {:>9} {:>12} {:>10} {:>9} {:>9}\n",
        "pid", "processes", "cpu_ticks", "cpu_s", "rss_mib", "pss_mib"
    );
    for (pid, f) in each {
        match f {
            Some(f) => out += &row(&pid.to_string(), f),
            None => out += &format!("{pid:<10} gone\n"),
        }
    }
    out += &row("all", all);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_and_repeated_pids_count_once() {
        // 10 is the parent of 11; 20 is apart; 11 and 10 given again; 30 is gone.
        let pids = [11, 10, 20, 10, 30];
        let groups = vec![vec![11], vec![10, 11], vec![20], vec![10, 11], vec![]];
        assert_eq!(distinct(&pids, &groups), vec![1, 2]);
    }
}
