//! `scalpel procstat` against real busy processes: each reports its own CPU time
//! (`os.times()`, the kernel's per-process clock read by the process itself), named with
//! spaces as pm2 names its daemon and workers, and the command must count exactly that —
//! user and system time, each process of a tree once.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use scalpel_testkit::{KillOnDrop, scalpel};
use serde_json::Value;

use crate::util::{assert_one_line_error, stdout, u};

/// Above any real pid (pid_max is at most 2^22).
const NO_SUCH_PID: u32 = 0x7FFF_FFF0;

/// A busy process named as its argument says, printing its own user and system ticks and
/// the ticks per second once it has burnt them, then standing still until its stdin closes
/// (shared with scripts/lib/proc-ticks-test.sh).
fn busy_script() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/lib/busy.py")
}

/// A process's own figures as it printed them: (user ticks, system ticks, ticks a second).
fn own(line: &str) -> (u64, u64, u64) {
    let n: Vec<u64> = line
        .split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect();
    (n[0], n[1], n[2])
}

/// A busy process named `name`, once it has burnt its time: the process and its own
/// (user ticks, system ticks, ticks a second).
fn busy(name: &str) -> (KillOnDrop, (u64, u64, u64)) {
    let mut child = KillOnDrop(
        Command::new("python3")
            .arg(busy_script())
            .arg(name)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs"),
    );
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    (child, own(&line))
}

fn procstat_json(args: &[&str]) -> Value {
    let mut all = vec!["procstat", "--json"];
    all.extend_from_slice(args);
    let out = scalpel(&all);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    serde_json::from_str(&stdout(&out)).unwrap_or_else(|e| panic!("{e}: {}", stdout(&out)))
}

/// The benches under-counted pm2 until 2026-12-02 (their own /proc parser read fields
/// from the start of the line, and pm2's names hold spaces): 0 for "PM2 v5.4.3: God",
/// user time without system time for "node /path/app". The command counts both, as the
/// process itself does.
#[test]
fn a_busy_process_named_with_spaces_counts_its_user_and_system_time() {
    for name in ["PM2 v5.4.3: God", "node /work/app", "a) b (c"] {
        let (child, (user, sys, hz)) = busy(name);
        let comm = std::fs::read_to_string(format!("/proc/{}/comm", child.id())).unwrap();
        assert_eq!(comm.trim_end_matches('\n'), &name[..name.len().min(15)]);
        assert!(
            sys > 0,
            "{name}: no system time burnt ({user} + {sys}): proves nothing"
        );
        let pid = child.id().to_string();
        let out = scalpel(&["procstat", "--ticks", &pid]);
        let got: u64 = stdout(&out)
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}: not a count: {:?} {:?}", out.stdout, out.stderr));
        // os.times() and /proc round the same kernel counts: a tick apart, per field.
        assert!(
            got.abs_diff(user + sys) <= 2,
            "{name}: procstat {got} ticks, the process's own {user} + {sys}"
        );
        let v = procstat_json(&[&pid]);
        let me = &v["pids"][0];
        assert_eq!(
            (u(&me["pid"]), u(&me["processes"])),
            (child.id().into(), 1),
            "{v}"
        );
        assert!(u(&me["cpu_ticks"]).abs_diff(user + sys) <= 2, "{v}");
        let secs = me["cpu_seconds"].as_f64().unwrap();
        assert!(
            (secs - u(&me["cpu_ticks"]) as f64 / hz as f64).abs() < 1e-9,
            "seconds are ticks at {hz} a second: {v}"
        );
        assert!(u(&me["rss_bytes"]) > 1 << 20, "{v}");
        assert!(
            u(&me["pss_bytes"]) > 0,
            "our own process: PSS is readable: {v}"
        );
        assert_eq!(v["all"]["cpu_ticks"], me["cpu_ticks"], "{v}");
    }
}

/// A tree counts every descendant, and a process given again (a worker beside its
/// supervisor) is counted once; `--no-tree` reads each PID alone; a PID that is gone
/// counts 0 and is said to be gone.
#[test]
fn a_tree_counts_each_process_once_and_a_gone_pid_counts_nothing() {
    let (a, (ua, sa, _)) = busy("worker a");
    let (b, (ub, sb, _)) = busy("worker b");
    // A shell with two busy children of its own, read once both have burnt their time.
    // The children read the shell's stdin (fd 3: an asynchronous list's own stdin is
    // /dev/null), so they end when the test drops the shell.
    let script = busy_script();
    let mut parent = KillOnDrop(
        Command::new("sh")
            .arg("-c")
            .arg(r#"exec 3<&0; python3 "$0" "child one" <&3 & python3 "$0" "child two" <&3 & wait"#)
            .arg(&script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("sh runs"),
    );
    let mut lines = BufReader::new(parent.stdout.take().unwrap()).lines();
    let children: u64 = (0..2)
        .map(|_| {
            let (user, sys, _) = own(&lines.next().unwrap().unwrap());
            user + sys
        })
        .sum();
    let (pa, pb, pp) = (a.id(), b.id(), parent.id());
    let gone = NO_SUCH_PID;
    let v = procstat_json(&[
        &pp.to_string(),
        &pa.to_string(),
        &pb.to_string(),
        &pa.to_string(),
        &gone.to_string(),
    ]);
    let pids = v["pids"].as_array().unwrap();
    assert_eq!(u(&pids[0]["processes"]), 3, "the shell and its two: {v}");
    assert_eq!(pids[4]["gone"], true, "{v}");
    assert_eq!(u(&pids[4]["cpu_ticks"]), 0, "{v}");
    let tree = u(&pids[0]["cpu_ticks"]);
    let (ta, tb) = (u(&pids[1]["cpu_ticks"]), u(&pids[2]["cpu_ticks"]));
    assert!(
        ta.abs_diff(ua + sa) <= 2 && tb.abs_diff(ub + sb) <= 2,
        "{v}"
    );
    assert_eq!(
        u(&v["all"]["cpu_ticks"]),
        tree + ta + tb,
        "a counted once: {v}"
    );
    assert_eq!(u(&v["all"]["processes"]), 5, "{v}");
    // The shell alone, and its tree: itself and what its children say they burnt.
    let alone = procstat_json(&["--no-tree", &pp.to_string()]);
    assert_eq!(u(&alone["pids"][0]["processes"]), 1, "{alone}");
    let shell = u(&alone["all"]["cpu_ticks"]);
    assert!(
        tree.abs_diff(shell + children) <= 3 * 2,
        "tree {tree} = shell {shell} + children {children}: {v}"
    );
    let ticks = scalpel(&["procstat", "--ticks", &gone.to_string()]);
    assert_eq!(stdout(&ticks).trim(), "0");
}

#[test]
fn bad_input_is_one_line_and_exit_2() {
    assert_one_line_error(&["procstat"], "PID");
    assert_one_line_error(&["procstat", "abc"], "abc");
    assert_one_line_error(&["procstat", "--ticks", "--json", "1"], "--json");
}
