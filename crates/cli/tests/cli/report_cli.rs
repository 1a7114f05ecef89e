//! `scalpel report` as a user runs it: the real binary on result files written here.

use std::path::Path;
use std::process::Output;

use scalpel_load::result::{
    LatencySummary, RunResult, TargetResult, decode_histogram, new_histogram,
};
use scalpel_testkit::results as common;
use scalpel_testkit::{scalpel, scratch};

fn write(dir: &Path, name: &str, run: &RunResult) -> String {
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_string_pretty(run).unwrap()).unwrap();
    path.to_str().unwrap().to_owned()
}

fn host_run(host: &str, seed: u64, median_us: f64) -> (RunResult, Vec<u64>) {
    let mut rng = common::Rng::new(seed);
    let values: Vec<u64> = (0..5000)
        .map(|_| rng.log_normal(median_us, 0.5).max(1.0) as u64)
        .collect();
    let step = common::step_with_values(0, Some(500.0), 10.0, &values);
    let target = TargetResult {
        name: "svc".into(),
        url: "http://127.0.0.1:9".into(),
        connection: None,
        steps: vec![step],
        breaking_point: None,
    };
    (common::run(host, "open", None, vec![target]), values)
}

fn stderr_line(out: &Output) -> String {
    let text = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(text.lines().count(), 1, "one line on stderr, got {text:?}");
    text
}

#[test]
fn merge_prints_the_exact_merge_as_json() {
    let dir = scratch("merge");
    let (a, a_values) = host_run("host-a", 1, 1500.0);
    let (b, b_values) = host_run("host-b", 2, 6000.0);
    let (pa, pb) = (write(&dir, "a.json", &a), write(&dir, "b.json", &b));

    let out = scalpel(&["report", "merge", &pa, &pb]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let merged: RunResult = serde_json::from_slice(&out.stdout).unwrap();
    let mut all = new_histogram();
    for v in a_values.iter().chain(&b_values) {
        all.record(*v).unwrap();
    }
    let step = &merged.targets[0].steps[0];
    assert_eq!(step.latency_ms, LatencySummary::from_histogram(&all));
    assert_eq!(decode_histogram(&step.histogram).unwrap(), all);
    assert_eq!(merged.machine.hosts, ["host-a", "host-b"]);

    // -o writes the same document to a file.
    let out_path = dir.join("merged.json");
    let out2 = scalpel(&[
        "report",
        "merge",
        &pa,
        &pb,
        "-o",
        out_path.to_str().unwrap(),
    ]);
    assert!(out2.status.success());
    assert!(out2.stdout.is_empty());
    assert_eq!(std::fs::read(&out_path).unwrap(), out.stdout);
}

#[test]
fn show_prints_the_table_and_html_writes_a_page() {
    let dir = scratch("show");
    let run = scalpel_report::merge(&[common::go_vs_rust_ramp(
        "bench",
        &[2000.0, 4000.0, 8000.0],
        1.0,
        5,
    )])
    .unwrap();
    let path = write(&dir, "run.json", &run);

    let out = scalpel(&["report", "show", &path]);
    assert!(out.status.success());
    let table = String::from_utf8(out.stdout).unwrap();
    assert_eq!(table, scalpel_report::summary_table(&run));
    assert!(table.contains("rust/go") && table.contains("breaking point"));

    let page = dir.join("run.html");
    let out = scalpel(&["report", "html", &path, "-o", page.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let html = std::fs::read_to_string(&page).unwrap();
    assert_eq!(html, scalpel_report::html(&run));
    assert!(html.starts_with("<!DOCTYPE html>") && html.trim_end().ends_with("</html>"));
}

#[test]
fn bad_input_is_one_line_on_stderr_and_exit_2() {
    let dir = scratch("bad");
    let missing = dir.join("missing.json");
    let out = scalpel(&["report", "show", missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let line = stderr_line(&out);
    assert!(line.starts_with("scalpel: cannot read "), "{line}");
    // The cause is said once, not repeated by the error chain.
    assert_eq!(line.matches("os error").count(), 1, "{line}");

    let broken = dir.join("broken.json");
    std::fs::write(&broken, "{\"format_version\": 1,\n  oops").unwrap();
    let out = scalpel(&[
        "report",
        "html",
        broken.to_str().unwrap(),
        "-o",
        dir.join("x.html").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr_line(&out).contains("broken.json:2:"));
    assert!(!dir.join("x.html").exists());

    let (a, _) = host_run("a", 1, 1000.0);
    let (mut b, _) = host_run("b", 2, 1000.0);
    b.targets[0].name = "other".into();
    let (pa, pb) = (write(&dir, "a.json", &a), write(&dir, "b.json", &b));
    let out = scalpel(&["report", "merge", &pa, &pb]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr_line(&out).starts_with("scalpel: cannot merge: run 1 and run 2 differ in targets")
    );
    assert!(out.stdout.is_empty());

    // One file is not a merge: exit 2, one line.
    let out = scalpel(&["report", "merge", &pa]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr_line(&out).contains("give two or more"));
}

/// #18.14: `report merge` without arguments named no missing argument.
#[test]
fn merge_without_files_names_what_is_missing() {
    let out = scalpel(&["report", "merge"]);
    assert_eq!(out.status.code(), Some(2));
    let line = stderr_line(&out);
    assert!(
        line.contains("RUN") && line.contains("result files"),
        "{line}"
    );
    // The same holds for every missing required argument (here `-o`).
    let out = scalpel(&["report", "html", "x.json"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr_line(&out).contains("--output"));
}

/// #18.14: a file merged with itself doubled every rate.
#[test]
fn merge_refuses_a_file_given_twice() {
    let dir = scratch("twice");
    let (a, _) = host_run("host-a", 1, 1500.0);
    let pa = write(&dir, "a.json", &a);
    let copy = write(&dir, "copy.json", &a);
    let same_via_dot = format!("{}/./a.json", dir.display());
    for (x, y, says) in [
        (&pa, &same_via_dot, "are the same file"),
        (&pa, &copy, "are the same run"),
    ] {
        let out = scalpel(&["report", "merge", x, y]);
        assert_eq!(out.status.code(), Some(2), "{x} {y}");
        let line = stderr_line(&out);
        assert!(line.contains(says), "{line}");
        assert!(out.stdout.is_empty());
    }
}

/// #18.14: differing target URLs and scalpel versions are named, and merged only when
/// allowed by a flag.
#[test]
fn merge_names_differing_urls_and_versions_and_takes_them_when_allowed() {
    let dir = scratch("differ");
    let (a, _) = host_run("host-a", 1, 1500.0);
    let (mut b, _) = host_run("host-b", 2, 1500.0);
    b.targets[0].url = "http://10.1.2.3:80".into();
    b.tool = "scalpel 9.9.9".into();
    let (pa, pb) = (write(&dir, "a.json", &a), write(&dir, "b.json", &b));
    let out = scalpel(&["report", "merge", &pa, &pb]);
    assert_eq!(out.status.code(), Some(2));
    let line = stderr_line(&out);
    assert!(
        line.contains("scalpel 0.1.0 (run 1) vs scalpel 9.9.9 (run 2)"),
        "{line}"
    );
    let out = scalpel(&["report", "merge", "--allow-different-versions", &pa, &pb]);
    assert_eq!(out.status.code(), Some(2));
    let line = stderr_line(&out);
    assert!(
        line.contains("http://127.0.0.1:9 in run 1 but http://10.1.2.3:80 in run 2"),
        "{line}"
    );
    let out = scalpel(&[
        "report",
        "merge",
        "--allow-different-versions",
        "--allow-different-urls",
        &pa,
        &pb,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let merged: RunResult = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(merged.tool, "scalpel 0.1.0, scalpel 9.9.9");
}

/// #16: the merge decodes each histogram once (the files are no longer checked on reading),
/// so a histogram that does not decode is found by the merge: it must still be exit 2 and
/// one line, and the line must name the file (the check on reading named none).
#[test]
fn merge_names_the_file_whose_histogram_does_not_decode() {
    let dir = scratch("histogram");
    let (a, _) = host_run("host-a", 1, 1500.0);
    let (b, _) = host_run("host-b", 2, 1500.0);
    let (mut c, _) = host_run("host-c", 3, 1500.0);
    c.targets[0].steps[0].histogram = "bm90IGEgaGlzdG9ncmFt".into();
    let paths = [
        write(&dir, "a.json", &a),
        write(&dir, "b.json", &b),
        write(&dir, "c.json", &c),
    ];
    let out = scalpel(&["report", "merge", &paths[0], &paths[1], &paths[2]]);
    assert_eq!(out.status.code(), Some(2));
    let line = stderr_line(&out);
    assert!(
        line.starts_with(&format!(
            "scalpel: {}: run 3: target \"svc\" step 1: histogram",
            paths[2]
        )),
        "{line}"
    );
    assert!(out.stdout.is_empty());
}
