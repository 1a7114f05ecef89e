//! Short-lived children are counted through their parent's cutime/cstime.
//!
//! Its own test binary: the truth here is this process's `getrusage(RUSAGE_CHILDREN)`,
//! which any other test's reaped children would pollute.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use scalpel_procstat::{TreeReading, TreeSampler, read_tree};
use scalpel_testkit::cpu_seconds;

/// CPU seconds of all children this process has reaped (and, through them, theirs):
/// the kernel's own accounting, read without /proc.
fn reaped_children_cpu_seconds() -> f64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes one `rusage` into the pointer we pass, which points to
    // enough zeroed, writable memory for it.
    #[allow(unsafe_code)]
    let usage = unsafe {
        assert_eq!(
            libc::getrusage(libc::RUSAGE_CHILDREN, usage.as_mut_ptr()),
            0
        );
        usage.assume_init()
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

#[test]
fn short_lived_children_are_counted_through_their_parent() {
    let truth_start = reaped_children_cpu_seconds();
    // Each child spins for a moment and exits; the root itself only waits. Children
    // live for a few ms each, mostly between two readings.
    let mut root = Command::new("sh")
        .args([
            "-c",
            r#"while :; do sh -c 'i=0; while [ $i -lt 3000 ]; do i=$((i+1)); done'; done"#,
        ])
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn sh");
    let pid = root.id();
    let first = read_tree(pid).expect("root is running");
    let sampler = TreeSampler::start(pid, Duration::from_millis(100)).expect("start");
    let mark = sampler.mark();

    // Wait (no fixed time) until the tree has used at least 1.5 CPU seconds.
    let deadline = Instant::now() + Duration::from_secs(120);
    let last = loop {
        let now = read_tree(pid).expect("root is running");
        if cpu_seconds(&first, &now) >= 1.5 {
            break now;
        }
        assert!(Instant::now() < deadline, "the children got no CPU time");
        std::thread::sleep(Duration::from_millis(100));
    };
    let step = sampler.summary_since(mark);
    let samples = sampler.stop();

    // SIGKILL the root only: the child running at that moment is re-parented, not
    // reaped by the root, so its last few ms are in neither figure.
    root.kill().expect("kill root");
    root.wait().expect("reap root");
    let truth = reaped_children_cpu_seconds() - truth_start;

    // The readings cover [first, last]; the truth is the root's whole life, which only
    // adds the short time before `first` and after `last`.
    let total = cpu_seconds(
        &TreeReading {
            cpu_ticks: 0,
            at: last.at - Duration::from_secs(1),
            ..last
        },
        &last,
    );
    assert!(
        total <= truth * 1.1 + 0.1,
        "readings saw {total:.2} CPU s, more than the {truth:.2} s the kernel charged"
    );
    assert!(
        total >= truth * 0.7 - 0.1,
        "readings saw only {total:.2} of {truth:.2} CPU s: short-lived children went missing"
    );
    assert!(
        step.cpu_percent_mean > 0.0,
        "the sampler saw no CPU: {step:?}"
    );
    // Children come and go one at a time: the tree is the root and at most one child.
    assert!(
        samples.iter().all(|s| (1..=2).contains(&s.processes)),
        "{samples:?}"
    );
}
