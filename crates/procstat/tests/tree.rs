//! Real processes: busy loops, allocations, grandchildren started mid-run, short-lived
//! children, and a real listening socket.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use scalpel_procstat::{
    ProcStatError, TreeSampler, cpu_percent, pid_listening_on, read_set, read_tree, tree_pids,
};

const MIB: u64 = 1024 * 1024;
/// Generous: the machine is shared with other builds.
const DEADLINE: Duration = Duration::from_secs(90);
/// Above any real pid (pid_max is at most 2^22).
const NO_SUCH_PID: u32 = 0x7FFF_FFF0;

/// Allocates and touches `MIB` MiB, says "ready", then spins.
const PY_ALLOC_AND_SPIN: &str = "
import os, sys
x = bytearray(int(os.environ['MIB']) * 1024 * 1024)
for i in range(0, len(x), 4096):
    x[i] = 1
print('ready', flush=True)
while True:
    pass
";

/// A process group that is killed whole when dropped, so no busy loop outlives a test.
struct Group(Child);

impl Group {
    fn spawn(command: &mut Command) -> Group {
        let child = command
            .process_group(0)
            .spawn()
            .expect("spawn test process");
        Group(child)
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }

    /// Reads stdout until the process prints `ready`.
    fn wait_ready(&mut self) {
        let stdout = self.0.stdout.take().expect("stdout piped");
        let mut lines = BufReader::new(stdout).lines();
        loop {
            match lines.next() {
                Some(Ok(line)) if line.trim() == "ready" => return,
                Some(Ok(_)) => {}
                other => panic!("child ended before 'ready': {other:?}"),
            }
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.pid())])
            .status();
        let _ = self.0.wait();
    }
}

/// Polls one-second windows until one shows at least `percent` CPU; returns the best.
fn busiest_window(sampler: &TreeSampler, percent: f64) -> f64 {
    let deadline = Instant::now() + DEADLINE;
    let mut best = 0.0_f64;
    while Instant::now() < deadline {
        let mark = sampler.mark();
        std::thread::sleep(Duration::from_secs(1));
        let summary = sampler.summary_since(mark);
        assert!(
            summary.samples >= 1,
            "a window without samples: {summary:?}"
        );
        assert!(
            summary.cpu_percent_peak >= summary.cpu_percent_mean * 0.5,
            "peak below mean: {summary:?}"
        );
        best = best.max(summary.cpu_percent_mean);
        if best >= percent {
            break;
        }
    }
    best
}

fn cores() -> f64 {
    std::thread::available_parallelism().map_or(64.0, |n| n.get() as f64)
}

#[test]
fn busy_allocating_process_shows_cpu_rss_and_pss() {
    let mut child = Group::spawn(
        Command::new("python3")
            .args(["-c", PY_ALLOC_AND_SPIN])
            .env("MIB", "200")
            .stdout(Stdio::piped()),
    );
    child.wait_ready();
    let sampler = TreeSampler::start(child.pid(), Duration::from_millis(100)).expect("start");

    let cpu = busiest_window(&sampler, 50.0);
    assert!(
        cpu >= 50.0,
        "a spinning process never reached 50% CPU: {cpu:.1}%"
    );
    assert!(
        cpu <= 100.0 * cores() + 25.0,
        "more CPU than the machine has: {cpu:.1}%"
    );

    let summary = sampler.summary_since(sampler.mark());
    assert!(
        summary.rss_bytes_peak >= 200 * MIB,
        "RSS {} MiB < the 200 MiB touched",
        summary.rss_bytes_peak / MIB
    );
    // The bytearray is private to the process, so its PSS is all of it.
    let pss = summary
        .pss_bytes_peak
        .expect("PSS of our own child is readable");
    assert!(pss >= 200 * MIB, "PSS {} MiB < 200 MiB", pss / MIB);
    assert!(pss <= summary.rss_bytes_peak, "PSS above RSS: {summary:?}");

    let latest = sampler.latest().expect("a sample");
    assert_eq!(latest.processes, 1);
    let samples = sampler.stop();
    assert!(samples.len() >= 2, "{} samples", samples.len());
    assert!(
        samples.windows(2).all(|w| w[0].elapsed <= w[1].elapsed),
        "samples out of order"
    );
}

#[test]
fn grandchildren_started_after_the_sampler_are_counted() {
    // The root waits for a line on stdin, then starts a child shell that starts the
    // allocating spinner: root -> sh -> python3, all after the sampler's first reading.
    let mut root = Group::spawn(
        Command::new("sh")
            .args(["-c", r#"read go; sh -c 'python3 -c "$PY" & wait' & wait"#])
            .env("PY", PY_ALLOC_AND_SPIN)
            .env("MIB", "100")
            .stdin(Stdio::piped())
            .stdout(Stdio::null()),
    );
    let sampler = TreeSampler::start(root.pid(), Duration::from_millis(100)).expect("start");
    let before = read_tree(root.pid()).expect("root is running");
    assert_eq!(before.processes, 1, "the root has no children yet");

    root.0
        .stdin
        .take()
        .expect("stdin piped")
        .write_all(b"go\n")
        .expect("write to the root");

    let deadline = Instant::now() + DEADLINE;
    let grown = loop {
        let latest = sampler.latest();
        if let Some(sample) = latest
            && sample.processes >= 3
            && sample.rss_bytes >= 100 * MIB
        {
            break sample;
        }
        assert!(
            Instant::now() < deadline,
            "the tree never showed its grandchild: {latest:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(grown.processes >= 3, "{grown:?}");

    let pids = tree_pids(root.pid()).expect("tree");
    assert_eq!(pids[0], root.pid(), "the root comes first");
    assert!(pids.len() >= 3, "tree {pids:?}");

    let cpu = busiest_window(&sampler, 50.0);
    assert!(
        cpu >= 50.0,
        "the spinning grandchild was not counted: {cpu:.1}%"
    );
}

#[test]
fn short_lived_children_are_counted_through_their_parent() {
    // Each child spins ~tens of ms and exits; the root itself does almost nothing.
    // Their time must show up via the root's cutime/cstime once reaped.
    let root = Group::spawn(
        Command::new("sh")
            .args([
                "-c",
                r#"while :; do sh -c 'i=0; while [ $i -lt 3000 ]; do i=$((i+1)); done'; done"#,
            ])
            .stdout(Stdio::null()),
    );
    let sampler = TreeSampler::start(root.pid(), Duration::from_millis(100)).expect("start");
    let cpu = busiest_window(&sampler, 50.0);
    assert!(
        cpu >= 50.0,
        "short-lived children's CPU went missing: {cpu:.1}%"
    );
    assert!(cpu <= 100.0 * cores() + 25.0, "{cpu:.1}%");
    // Children come and go one at a time: the tree is the root and at most one child.
    let samples = sampler.stop();
    assert!(
        samples.iter().all(|s| (1..=2).contains(&s.processes)),
        "{samples:?}"
    );
    drop(root);
}

#[test]
fn listener_of_this_process_is_found_by_port() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    assert_eq!(pid_listening_on(port).expect("found"), std::process::id());

    if let Ok(v6) = TcpListener::bind("[::1]:0") {
        let port6 = v6.local_addr().expect("addr").port();
        assert_eq!(
            pid_listening_on(port6).expect("found on ::1"),
            std::process::id()
        );
    }
}

#[test]
fn a_closed_port_is_a_clear_error() {
    let port = {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("addr").port()
    };
    match pid_listening_on(port) {
        Err(ProcStatError::NotListening { port: p }) => assert_eq!(p, port),
        other => panic!("expected NotListening for port {port}, got {other:?}"),
    }
}

#[test]
fn a_connected_but_not_listening_socket_does_not_count() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let client = std::net::TcpStream::connect(addr).expect("connect");
    let client_port = client.local_addr().expect("addr").port();
    assert!(matches!(
        pid_listening_on(client_port),
        Err(ProcStatError::NotListening { .. })
    ));
}

#[test]
fn missing_process_is_an_error_not_a_panic() {
    assert!(matches!(
        read_tree(NO_SUCH_PID),
        Err(ProcStatError::NoSuchProcess { pid: NO_SUCH_PID })
    ));
    assert!(matches!(
        tree_pids(NO_SUCH_PID),
        Err(ProcStatError::NoSuchProcess { .. })
    ));
    assert!(matches!(
        TreeSampler::start(NO_SUCH_PID, Duration::from_millis(10)),
        Err(ProcStatError::NoSuchProcess { .. })
    ));
    let nothing = read_set(&[NO_SUCH_PID]);
    assert_eq!(
        (nothing.processes, nothing.cpu_ticks, nothing.rss_bytes),
        (0, 0, 0)
    );
}

#[test]
fn a_process_in_two_trees_counts_once_and_gone_roots_are_skipped() {
    let me = std::process::id();
    let single = read_tree(me).expect("own tree");
    let set = read_set(&[me, me, NO_SUCH_PID]);
    assert_eq!(set.processes, single.processes);
    assert!(set.rss_bytes > 0);
}

#[test]
fn root_exiting_mid_run_keeps_the_samples() {
    let mut child = Group::spawn(
        Command::new("python3")
            .args(["-c", PY_ALLOC_AND_SPIN])
            .env("MIB", "20")
            .stdout(Stdio::piped()),
    );
    child.wait_ready();
    let sampler = TreeSampler::start(child.pid(), Duration::from_millis(50)).expect("start");
    let mark = sampler.mark();
    let deadline = Instant::now() + DEADLINE;
    while sampler.latest().is_none() {
        assert!(Instant::now() < deadline, "no sample");
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(child); // killed and reaped
    let after_exit = sampler.summary_since(mark);
    assert!(after_exit.samples >= 1, "{after_exit:?}");
    assert!(after_exit.rss_bytes_peak >= 20 * MIB, "{after_exit:?}");
    let samples = sampler.stop();
    assert!(!samples.is_empty());
}

#[test]
fn cpu_percent_of_this_process_while_it_spins() {
    let me = std::process::id();
    let before = read_tree(me).expect("own tree");
    // Spin until the kernel has charged at least 20 ticks to us (poll, no fixed time).
    let deadline = Instant::now() + DEADLINE;
    let mut x = 0u64;
    let after = loop {
        for i in 0..100_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        let now = read_tree(me).expect("own tree");
        if now.cpu_ticks >= before.cpu_ticks + 20 || Instant::now() > deadline {
            break now;
        }
    };
    std::hint::black_box(x);
    let percent = cpu_percent(&before, &after);
    assert!(percent > 0.0, "{percent}");
    assert!(percent <= 100.0 * cores() + 25.0, "{percent}");
    assert_eq!(
        cpu_percent(&after, &before),
        0.0,
        "backwards is 0, not negative"
    );
}
