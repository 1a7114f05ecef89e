//! Real processes: busy loops, allocations, grandchildren started mid-run, and a real
//! listening socket. CPU figures are checked against the busy process's own CPU clock,
//! not against wall time, so they hold on a loaded machine.

use std::io::{BufRead, BufReader, Lines, Write};
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use scalpel_procstat::{
    ProcStatError, TreeSampler, cpu_percent, pid_listening_on, read_pids, read_set, read_tree,
    tree_pids, trees_of,
};
use scalpel_testkit::cpu_seconds;

const MIB: u64 = 1024 * 1024;
/// Generous: the machine is shared with other builds.
const DEADLINE: Duration = Duration::from_secs(90);
/// Above any real pid (pid_max is at most 2^22).
const NO_SUCH_PID: u32 = 0x7FFF_FFF0;

/// Allocates and touches `MIB` MiB, says "ready", then spins. Each line it reads on
/// stdin is answered with its own CPU time in seconds (`time.process_time()`, the
/// kernel's per-process CPU clock, not /proc/PID/stat ticks): the independent truth the
/// readings are checked against. It exits at end of input.
const PY_ALLOC_AND_SPIN: &str = "
import os, select, sys, time
x = bytearray(int(os.environ['MIB']) * 1024 * 1024)
for i in range(0, len(x), 4096):
    x[i] = 1
print('ready', flush=True)
while True:
    for _ in range(10000):
        pass
    if select.select([sys.stdin], [], [], 0)[0]:
        if not sys.stdin.readline():
            break
        print(time.process_time(), flush=True)
";

/// A process group that is killed whole when dropped, so no busy loop outlives a test.
struct Group {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Option<Lines<BufReader<ChildStdout>>>,
}

impl Group {
    fn spawn(command: &mut Command) -> Group {
        let mut child = command
            .process_group(0)
            .spawn()
            .expect("spawn test process");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().map(|out| BufReader::new(out).lines());
        Group {
            child,
            stdin,
            stdout,
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin piped");
        stdin.write_all(line.as_bytes()).expect("write to child");
        stdin.flush().expect("flush");
    }

    fn read_line(&mut self) -> String {
        let lines = self.stdout.as_mut().expect("stdout piped");
        match lines.next() {
            Some(Ok(line)) => line,
            other => panic!("child's output ended: {other:?}"),
        }
    }

    fn wait_ready(&mut self) {
        while self.read_line().trim() != "ready" {}
    }

    /// The spinner's own CPU time, in seconds.
    fn spinner_cpu_seconds(&mut self) -> f64 {
        self.send("?\n");
        let line = self.read_line();
        line.trim()
            .parse()
            .unwrap_or_else(|_| panic!("not a number: {line:?}"))
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.pid())])
            .status();
        let _ = self.child.wait();
    }
}

fn cores() -> f64 {
    std::thread::available_parallelism().map_or(64.0, |n| n.get() as f64)
}

/// Lets the spinner in `tree` burn at least one CPU second (however long the loaded
/// machine takes), then checks that the tree readings, and the sampler's step summary,
/// saw what the spinner itself reports.
fn check_cpu_against_the_spinner(tree: &mut Group, sampler: &TreeSampler) {
    let truth_start = tree.spinner_cpu_seconds();
    let a = read_tree(tree.pid()).expect("tree");
    let mark = sampler.mark();
    let deadline = Instant::now() + DEADLINE;
    while tree.spinner_cpu_seconds() - truth_start < 1.0 {
        assert!(Instant::now() < deadline, "the spinner got no CPU time");
        std::thread::sleep(Duration::from_millis(100));
    }
    let step = sampler.summary_since(mark);
    let b = read_tree(tree.pid()).expect("tree");
    let truth = tree.spinner_cpu_seconds() - truth_start;

    let measured = cpu_seconds(&a, &b);
    assert!(
        measured >= truth * 0.8 - 0.05 && measured <= truth * 1.1 + 0.05,
        "readings saw {measured:.2} CPU s, the spinner reports {truth:.2} s"
    );
    let wall = b.at.duration_since(a.at).as_secs_f64();
    let truth_percent = truth / wall * 100.0;
    assert!(
        step.cpu_percent_mean >= truth_percent * 0.5,
        "sampler mean {:.1}% vs the spinner's {truth_percent:.1}%: {step:?}",
        step.cpu_percent_mean
    );
    assert!(
        step.cpu_percent_mean <= 100.0 * cores() + 25.0,
        "more CPU than the machine has: {step:?}"
    );
    assert!(
        step.cpu_percent_peak >= step.cpu_percent_mean * 0.5,
        "{step:?}"
    );
}

fn spinner(mib: u32) -> Group {
    let mut child = Group::spawn(
        Command::new("python3")
            .args(["-c", PY_ALLOC_AND_SPIN])
            .env("MIB", mib.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped()),
    );
    child.wait_ready();
    child
}

#[test]
fn busy_allocating_process_shows_cpu_rss_and_pss() {
    let mut child = spinner(200);
    let sampler = TreeSampler::start(child.pid(), Duration::from_millis(100)).expect("start");

    check_cpu_against_the_spinner(&mut child, &sampler);

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
    // fd 3 carries the root's stdin down, since background jobs get /dev/null.
    let mut root = Group::spawn(
        Command::new("sh")
            .args([
                "-c",
                r#"read go; exec 3<&0; sh -c 'python3 -c "$PY" <&3 & wait' & wait"#,
            ])
            .env("PY", PY_ALLOC_AND_SPIN)
            .env("MIB", "100")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped()),
    );
    let sampler = TreeSampler::start(root.pid(), Duration::from_millis(100)).expect("start");
    let before = read_tree(root.pid()).expect("root is running");
    assert_eq!(before.processes, 1, "the root has no children yet");

    root.send("go\n");
    root.wait_ready();

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

    check_cpu_against_the_spinner(&mut root, &sampler);
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
    // A child of its own, not this test process: other tests in this binary start and
    // reap children at any moment, so this process's tree changes between two readings.
    let mut child = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .expect("spawn sleep");
    let pid = child.id();
    let single = read_tree(pid).expect("child's tree");
    let set = read_set(&[pid, pid, NO_SUCH_PID]);
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!((single.processes, set.processes), (1, 1));
    assert!(set.rss_bytes > 0);
}

/// One pass finds each root's own tree (a shell and its child); the known processes are
/// then read without a pass, PSS only where asked (a supervisor reads it seldom: it walks
/// page tables); a gone root has an empty tree and no reading, not an error.
#[test]
fn trees_found_in_one_pass_are_read_without_one_and_pss_only_where_asked() {
    let a = spinner(60);
    let b = Group::spawn(
        Command::new("sh")
            .args(["-c", "sleep 30 & wait"])
            .stdout(Stdio::null()),
    );
    let deadline = Instant::now() + DEADLINE;
    while tree_pids(b.pid()).map_or(0, |p| p.len()) < 2 {
        assert!(
            Instant::now() < deadline,
            "the shell never started its child"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let trees = trees_of(&[a.pid(), b.pid(), NO_SUCH_PID]);
    assert_eq!(trees.len(), 3);
    assert_eq!(trees[0], [a.pid()]);
    assert_eq!((trees[1].len(), trees[1][0]), (2, b.pid()), "{trees:?}");
    assert!(trees[2].is_empty(), "a gone root: {:?}", trees[2]);
    let ra = read_pids(&trees[0], true).expect("a is running");
    let rb = read_pids(&trees[1], false).expect("b is running");
    assert!(read_pids(&trees[2], true).is_none());
    assert!(
        read_pids(&[NO_SUCH_PID, b.pid()], false).is_none(),
        "the root is gone"
    );
    assert_eq!((ra.processes, rb.processes), (1, 2), "{ra:?} {rb:?}");
    let pss = ra.pss_bytes.expect("PSS asked for and readable");
    assert!(
        pss >= 60 * MIB,
        "PSS {} MiB < the 60 MiB touched",
        pss / MIB
    );
    assert_eq!(rb.pss_bytes, None, "PSS read though not asked for");
    assert!(
        ra.rss_bytes >= 60 * MIB && rb.rss_bytes > 0,
        "{ra:?} {rb:?}"
    );
    // The same tree a reading with its own pass sees.
    assert_eq!(
        read_tree(b.pid()).expect("b's tree").processes,
        rb.processes
    );
}

#[test]
fn root_exiting_mid_run_keeps_the_samples() {
    let child = spinner(20);
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

/// The duty-cycle burner (its doc is in the file), shared with the CLI's dashboard test.
fn duty_cycle_script() -> String {
    format!("{}/tests/duty_cycle.py", env!("CARGO_MANIFEST_DIR"))
}

/// #26.4: a live page drew a steady ~5% as 0%, 10%, 10%, 0% — each point one 100 ms sample,
/// where a tick (10 ms) is 10%. `cpu_since` sums the ticks of each whole interval: for a
/// process at a quarter of a core, every one-second interval reads what the process's own
/// CPU clock says, and the intervals chained from each other's ends cover the time.
#[test]
fn cpu_over_whole_intervals_matches_a_process_at_a_quarter_of_a_core() {
    let mut burner = Group::spawn(
        Command::new("python3")
            .args([duty_cycle_script().as_str(), "0.25"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped()),
    );
    burner.wait_ready();
    let sampler = TreeSampler::start(burner.pid(), Duration::from_millis(100)).expect("start");
    let clock = |b: &mut Group| -> (f64, f64) {
        b.send("?\n");
        let line = b.read_line();
        let mut it = line.split_whitespace().map(|x| x.parse::<f64>().unwrap());
        (it.next().unwrap(), it.next().unwrap())
    };
    std::thread::sleep(Duration::from_millis(300));
    let (cpu0, wall0) = clock(&mut burner);
    let mut mark = sampler.mark();
    let mut intervals = Vec::new();
    for _ in 0..5 {
        std::thread::sleep(Duration::from_millis(1000));
        let iv = sampler.cpu_since(mark).expect("a reading in a second");
        mark = iv.end;
        intervals.push(iv);
    }
    let (cpu1, wall1) = clock(&mut burner);
    let truth = (cpu1 - cpu0) / (wall1 - wall0) * 100.0;
    assert!(
        (10.0..=30.0).contains(&truth),
        "the burner itself ran at {truth:.1}% (the machine is too busy to test this)"
    );
    for iv in &intervals {
        assert!(
            (iv.cpu_percent - truth).abs() <= 7.0,
            "an interval of {:?} read {:.1}%, the burner ran at {truth:.1}%: {intervals:?}",
            iv.wall,
            iv.cpu_percent
        );
    }
    // Chained, they cover the five seconds: no gap between one's end and the next's start.
    let walls: Duration = intervals.iter().map(|iv| iv.wall).sum();
    let span = Duration::from_secs_f64(wall1 - wall0);
    assert!(
        // The first starts at the reading before the mark; the sampler may lag when busy.
        walls >= Duration::from_millis(4500) && walls <= span + Duration::from_millis(300),
        "{walls:?} of {span:?}: {intervals:?}"
    );
    sampler.stop();
}

/// The sampler thread must never compete with the load it measures: it lowers itself to
/// nice 19 (field 19 of its /proc task stat), while this test's thread keeps its own.
#[test]
fn the_sampler_thread_runs_at_the_lowest_priority() {
    let me = std::process::id();
    let sampler = TreeSampler::start(me, Duration::from_millis(20)).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let name = format!("procstat-{me}");
    let mut nice_of_sampler = None;
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        let Some((comm, rest)) = stat.split_once(") ") else {
            continue;
        };
        // Fields after the name start at field 3 (state); nice is field 19.
        let nice: i32 = rest.split_whitespace().nth(16).unwrap().parse().unwrap();
        if comm.ends_with(&format!("({name}")) {
            nice_of_sampler = Some(nice);
        }
    }
    assert_eq!(
        nice_of_sampler,
        Some(19),
        "sampler thread not found or not at nice 19"
    );
    assert!(sampler.latest().is_some());
    sampler.stop();
}

/// SIGSTOP takes effect when each thread next enters the kernel; the rescue of a frozen
/// worker's connections must wait for that (a real multi-threaded Node process: its
/// libuv and V8 threads must all stop, not only the main one).
#[test]
fn a_stopped_process_reads_stopped_only_once_every_thread_has_stopped() {
    let mut child = Command::new("node")
        .args(["-e", "setInterval(() => {}, 1000)"])
        .stdin(Stdio::null())
        .spawn()
        .expect("node");
    let pid = child.id();
    let wait_for = |want: Option<bool>| {
        let start = Instant::now();
        while scalpel_procstat::all_threads_stopped(pid) != want {
            assert!(start.elapsed() < DEADLINE, "pid {pid} never read {want:?}");
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    // Node starts its worker threads after exec: wait until there are several.
    let start = Instant::now();
    while std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |d| d.count()) < 2 {
        assert!(start.elapsed() < DEADLINE, "node never started its threads");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(scalpel_procstat::all_threads_stopped(pid), Some(false));
    scalpel_testkit::signal(pid, "STOP");
    wait_for(Some(true));
    scalpel_testkit::signal(pid, "CONT");
    wait_for(Some(false));
    child.kill().expect("kill node");
    child.wait().expect("reap node");
    assert_eq!(scalpel_procstat::all_threads_stopped(pid), None);
}
