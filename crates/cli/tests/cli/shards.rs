//! One `scalpel load` run spread over N processes, as the Kubernetes Indexed Job of
//! `deploy/kubernetes/job.yaml` spreads it over N pods, and merged with `scalpel report merge`.
//!
//! The command line is read from the manifest itself (only the target, the data file, the
//! rates and the SLO are swapped for loopback-sized ones), and each process gets
//! `JOB_COMPLETION_INDEX` as Kubernetes sets it, so manifest and test cannot drift. The
//! target is a recording server on loopback that notes every request it serves, when it
//! arrived and when its answer left; the latencies checked against the merge are measured
//! here, never taken from the tool.
//!
//! No timed assertions: the server's own sleeps give exact lower bounds, upper bounds are a
//! second wide, and a late start is one this test caused by starting a process late.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use scalpel_load::result::{LatencySummary, decode_histogram, new_histogram};
use scalpel_testkit::raw::serve_requests;
use scalpel_testkit::{scalpel_bin, scratch};
use serde_json::Value;

use crate::util::{f, stderr, u};

// ---------------------------------------------------------------------------------------
// The recording server

/// One request as the server served it.
#[derive(Debug, Clone)]
struct Served {
    path: String,
    /// When its head had arrived.
    arrived: Instant,
    /// When the last byte of the answer was written.
    answered: Instant,
}

impl Served {
    /// Server-side latency: a lower bound of what the client measures for this request.
    fn held(&self) -> Duration {
        self.answered.duration_since(self.arrived)
    }
}

/// HTTP/1.1 on raw TCP, a thread per connection, keep-alive; `delay(path)` is how long it
/// holds each answer.
struct Recorder {
    port: u16,
    served: Arc<Mutex<Vec<Served>>>,
}

impl Recorder {
    fn start(delay: fn(&str) -> Duration) -> Recorder {
        let served = Arc::new(Mutex::new(Vec::new()));
        let log = served.clone();
        let port = serve_requests(move |req, writer| {
            let arrived = Instant::now();
            std::thread::sleep(delay(&req.path));
            let answer = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n";
            if writer.write_all(answer).is_err() {
                return false;
            }
            log.lock().unwrap().push(Served {
                path: req.path.clone(),
                arrived,
                answered: Instant::now(),
            });
            true
        });
        Recorder { port, served }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// What the runs sent, in order of arrival: everything served (a probe sends no
    /// request, #26.1: it sent each shard's first row once more, two ids twice for two
    /// shards).
    fn run_requests(&self) -> Vec<Served> {
        let mut all = self.served.lock().unwrap().clone();
        all.sort_by_key(|s| s.arrived);
        all
    }
}

/// The data row a request was rendered from: `/v1/users/{id}/stats` with ids `0, 1, 2, …`
/// one per line, so the id is the row.
fn row(path: &str) -> u64 {
    path.strip_prefix("/v1/users/")
        .and_then(|p| p.split('/').next())
        .and_then(|id| id.parse().ok())
        .unwrap_or_else(|| panic!("unexpected path {path}"))
}

/// Rows `i` with `i % 4 == 2` are held 2 s — in a 4-shard run, all of them shard 3's
/// (request `i` of the run is shard `i mod 4`'s and, in file order, renders row `i`); the
/// rest answer at once. Shard 3's percentiles are far from the others', so a merge that
/// averaged percentiles instead of adding histograms could not pass.
fn shard_three_slow(path: &str) -> Duration {
    if row(path) % 4 == 2 {
        SLOW
    } else {
        Duration::ZERO
    }
}

const SLOW: Duration = Duration::from_secs(2);

fn answer_at_once(_: &str) -> Duration {
    Duration::ZERO
}

// ---------------------------------------------------------------------------------------
// The manifest's command line

/// The Job's `completions`, `parallelism` and the container's `args`, read from the
/// manifest (block-style YAML as written there; a flow list or anchors would be refused).
struct Job {
    text: String,
    completions: u32,
    parallelism: u32,
    args: Vec<String>,
}

fn read_job() -> Job {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/kubernetes/job.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let number = |key: &str| -> u32 {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("  {key}: ")))
            .unwrap_or_else(|| panic!("job.yaml has no spec.{key}"))
            .trim()
            .parse()
            .unwrap()
    };
    let mut lines = text.lines().skip_while(|l| l.trim() != "args:");
    let header = lines.next().expect("job.yaml has container args");
    let indent = header.len() - header.trim_start().len();
    let mut args = Vec::new();
    for line in lines {
        let trimmed = line.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let Some(item) = trimmed.strip_prefix("- ") else {
            break;
        };
        if line.len() - trimmed.len() < indent {
            break;
        }
        let item = item.trim();
        let item = item
            .strip_prefix('"')
            .and_then(|i| i.strip_suffix('"'))
            .unwrap_or(item);
        args.push(item.to_string());
    }
    Job {
        completions: number("completions"),
        parallelism: number("parallelism"),
        args,
        text,
    }
}

/// The manifest's arguments with loopback-sized values: `swap` maps a flag to its new
/// value; `--step-duration` becomes `-n REQUESTS` (a request count per step, so the data
/// walk of every process is exact whatever the machine's load); the cluster URL becomes
/// the recorder's.
fn test_args(
    job: &Job,
    start_at: &str,
    run_id: &str,
    swap: &[(&str, &str)],
    n: u64,
    url: &str,
) -> Vec<String> {
    let mut out = Vec::new();
    let mut args = job.args.iter();
    while let Some(arg) = args.next() {
        let arg = arg
            .replace("$(START_AT)", start_at)
            .replace("$(RUN_ID)", run_id);
        if arg == "--step-duration" {
            args.next();
            out.push("-n".to_string());
            out.push(n.to_string());
            continue;
        }
        if let Some((_, value)) = swap.iter().find(|(flag, _)| *flag == arg) {
            args.next();
            out.push(arg);
            out.push(value.to_string());
            continue;
        }
        if let Some(rest) = arg.strip_prefix("http://") {
            let path = &rest[rest.find('/').unwrap()..];
            out.push(format!("{url}{path}"));
            continue;
        }
        out.push(arg);
    }
    out
}

fn value_of<'a>(args: &'a [String], flag: &str) -> &'a str {
    let at = args
        .iter()
        .position(|a| a == flag)
        .unwrap_or_else(|| panic!("job.yaml's command line has no {flag}"));
    &args[at + 1]
}

// ---------------------------------------------------------------------------------------
// Processes

fn spawn(args: &[String], job_index: Option<u32>) -> Child {
    let mut cmd = Command::new(scalpel_bin());
    cmd.args(args)
        .env_remove("JOB_COMPLETION_INDEX")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(i) = job_index {
        // As Kubernetes sets it on the pods of an Indexed Job: from 0, in decimal.
        cmd.env("JOB_COMPLETION_INDEX", i.to_string());
    }
    cmd.spawn().expect("the scalpel binary runs")
}

/// Waits for a child with a deadline that only turns a hang into a failure.
fn finish(child: Child, what: &str) -> Output {
    scalpel_testkit::finish(child, Duration::from_secs(180), what)
}

/// `scalpel ARGS`, outside any Indexed Job (no `JOB_COMPLETION_INDEX`).
fn scalpel(args: &[&str]) -> Output {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    finish(spawn(&args, None), &format!("scalpel {args:?}"))
}

/// A common start `lead` from now, as Unix seconds with a fraction (run.sh gives whole
/// seconds; both are the grammar of --start-at).
fn start_in(lead: Duration) -> (SystemTime, String) {
    let at = SystemTime::now() + lead;
    let secs = at.duration_since(UNIX_EPOCH).unwrap().as_secs_f64();
    (at, format!("{secs:.3}"))
}

/// The JSON a process wrote on stdout (`--json -`): one line, the table went to stderr.
fn result_of(out: &Output, what: &str) -> Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        stdout.lines().count(),
        1,
        "{what}: stdout holds the JSON on one line; stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{what}: {e}: {stdout}"))
}

/// The data file: ids `0..rows`, one per line.
fn data_file(dir: &Path, rows: u64) -> PathBuf {
    let path = dir.join("ids.txt");
    let text: String = (0..rows).map(|i| format!("{i}\n")).collect();
    std::fs::write(&path, text).unwrap();
    path
}

/// Runs the N shards of one run at once, each with its index, and returns their results in
/// index order, with the files written for `report merge`.
fn run_shards(
    dir: &Path,
    args: &[String],
    count: u32,
    late: &[(u32, Duration)],
) -> Vec<(Value, PathBuf)> {
    let mut children = Vec::new();
    for index in 0..count {
        if let Some((_, wait)) = late.iter().find(|(i, _)| *i == index) {
            std::thread::sleep(*wait);
        }
        children.push((index, spawn(args, Some(index))));
    }
    children
        .into_iter()
        .map(|(index, child)| {
            let what = format!("shard with JOB_COMPLETION_INDEX={index}");
            let out = finish(child, &what);
            assert!(out.status.success(), "{what}: {}", stderr(&out));
            // The table of a `--json -` run is on stderr.
            assert!(stderr(&out).contains("p99"), "{what}: {}", stderr(&out));
            let path = dir.join(format!("shard-{index}.json"));
            std::fs::write(&path, &out.stdout).unwrap();
            (result_of(&out, &what), path)
        })
        .collect()
}

fn merge(files: &[&Path], extra: &[&str]) -> Output {
    let mut args: Vec<String> = vec!["report".into(), "merge".into()];
    args.extend(files.iter().map(|p| p.to_str().unwrap().to_string()));
    args.extend(extra.iter().map(|s| s.to_string()));
    finish(spawn(&args, None), "report merge")
}

/// Rows per step, in the order served: each row is sent once per step, and a row belongs to
/// one shard, which finishes a step before its next one, so a row's k-th arrival is its
/// step k's.
fn by_step(served: &[Served], steps: usize) -> Vec<Vec<Served>> {
    let mut sorted = served.to_vec();
    sorted.sort_by_key(|s| s.arrived);
    let mut seen: BTreeMap<u64, usize> = BTreeMap::new();
    let mut out = vec![Vec::new(); steps];
    for s in sorted {
        let k = seen.entry(row(&s.path)).or_insert(0);
        assert!(
            *k < steps,
            "row {} sent more than once a step",
            row(&s.path)
        );
        out[*k].push(s.clone());
        *k += 1;
    }
    out
}

/// The value at quantile `q` of `values`, as HdrHistogram picks it (the smallest value with
/// at least `q` of the count at or below it).
fn quantile(values: &mut [Duration], q: f64) -> Duration {
    values.sort();
    let rank = ((q * values.len() as f64).ceil() as usize).clamp(1, values.len());
    values[rank - 1]
}

// ---------------------------------------------------------------------------------------
// Tests

#[test]
fn the_manifest_runs_one_sharded_load_as_n_processes_merged_exactly() {
    let job = read_job();
    assert_eq!(
        job.completions, job.parallelism,
        "every shard must run at once: parallelism = completions"
    );
    let count = job.completions;
    assert_eq!(
        value_of(&job.args, "--shard"),
        format!("auto/{count}"),
        "--shard auto/N with N = the Job's completions"
    );
    assert_eq!(
        value_of(&job.args, "--json"),
        "-",
        "results travel on stdout"
    );
    assert!(job.args.iter().any(|a| a == "--no-progress"));
    // A shard whose own part breaks the SLO exits 1: with a Job-wide `backoffLimit: 0` that
    // failed the Job and Kubernetes killed the other shards mid-run. No index is retried
    // (a retried shard would send its part twice), and none ends the others.
    assert!(
        job.text.contains("\n  backoffLimitPerIndex: 0\n"),
        "no retry per index"
    );
    assert!(
        !job.text.contains("\n  backoffLimit:"),
        "no Job-wide failure limit"
    );
    assert!(job.args.iter().any(|a| a == "--ramp"));
    assert_eq!(count, 4, "the delays below are laid out for 4 shards");

    let dir = scratch("manifest");
    let data = data_file(&dir, 2000);
    let per_step = 600u64; // 2 steps, no row twice in a step
    let (rates, steps) = ("200,200,400", 2usize);
    let swap = [
        ("--ramp", rates),
        ("--slo", "p99<10s,errors<1%"),
        ("--data", data.to_str().unwrap()),
        // The test server accepts on one thread with a 128-connection backlog.
        ("-c", "8"),
    ];

    // The reference: the same run in one process, without --shard.
    let single_server = Recorder::start(shard_three_slow);
    let (_, at) = start_in(Duration::from_secs(4));
    let mut single_args = test_args(&job, &at, "single", &swap, per_step, &single_server.url());
    for flag in ["--shard", "--run-id"] {
        let at = single_args.iter().position(|a| a == flag).unwrap();
        single_args.drain(at..at + 2);
    }
    let single = finish(spawn(&single_args, None), "the single run");
    assert!(single.status.success(), "{}", stderr(&single));
    let single_result = result_of(&single, "the single run");
    let single_sent = single_server.run_requests();

    // The sharded run: N processes, JOB_COMPLETION_INDEX 0..N.
    let server = Recorder::start(shard_three_slow);
    let (_, at) = start_in(Duration::from_secs(4));
    let args = test_args(&job, &at, "k8s-test", &swap, per_step, &server.url());
    let shards = run_shards(&dir, &args, count, &[]);
    let sent = server.run_requests();

    // Each result names its run, its index and the count.
    for (index, (r, _)) in shards.iter().enumerate() {
        let s = &r["shard"];
        assert_eq!(s["run_id"], "k8s-test", "{s}");
        assert_eq!(u(&s["index"]), index as u64, "{s}");
        assert_eq!(u(&s["count"]), u64::from(count), "{s}");
        assert_eq!(s["settings"], shards[0].0["shard"]["settings"]);
        assert!(f(&s["start_late_s"]) < 0.5, "started on time: {s}");
    }
    assert!(single_result["shard"].is_null());

    // The data walk: together the shards sent exactly what the single run sent, request for
    // request, and no row twice in a step.
    let rows = |served: &[Served]| {
        let mut r: Vec<u64> = served.iter().map(|s| row(&s.path)).collect();
        r.sort_unstable();
        r
    };
    let (sharded_rows, single_rows) = (rows(&sent), rows(&single_sent));
    if sharded_rows != single_rows {
        let only = |a: &[u64], b: &[u64]| {
            let mut b = b.to_vec();
            a.iter()
                .filter(|x| match b.iter().position(|y| y == *x) {
                    Some(i) => {
                        b.remove(i);
                        false
                    }
                    None => true,
                })
                .copied()
                .collect::<Vec<u64>>()
        };
        panic!(
            "the union of the shards' walks is not the single run's: {} vs {} requests; only \
             the shards sent {:?}; only the single run sent {:?}; single run's errors: {}",
            sharded_rows.len(),
            single_rows.len(),
            only(&sharded_rows, &single_rows),
            only(&single_rows, &sharded_rows),
            single_result["targets"][0]["steps"]
        );
    }
    assert_eq!(sent.len() as u64, per_step * steps as u64);
    let expected: Vec<u64> = {
        let mut e: Vec<u64> = (0..steps as u64).flat_map(|_| 0..per_step).collect();
        e.sort_unstable();
        e
    };
    assert_eq!(rows(&sent), expected, "rows 0..{per_step} once per step");
    let sent_by_step = by_step(&sent, steps);

    // Each shard's part: its share of the requests and of the rate, rows of its own residue.
    for (index, (r, _)) in shards.iter().enumerate() {
        for (k, step) in r["targets"][0]["steps"]
            .as_array()
            .unwrap()
            .iter()
            .enumerate()
        {
            assert_eq!(u(&step["requests"]), per_step / u64::from(count), "{step}");
            let total: f64 = [200.0, 400.0][k];
            assert!((f(&step["offered_rps"]) - total / f64::from(count)).abs() < 1e-9);
        }
        let mine: Vec<&Served> = sent
            .iter()
            .filter(|s| row(&s.path) % 4 == index as u64)
            .collect();
        assert_eq!(
            mine.len() as u64,
            per_step / u64::from(count) * steps as u64
        );
    }

    // The merge: exit 0 (the SLO held), rates added, histograms added exactly.
    let files: Vec<&Path> = shards.iter().map(|(_, p)| p.as_path()).collect();
    let merged_path = dir.join("merged.json");
    let html = dir.join("merged.html");
    let out = merge(
        &files,
        &[
            "-o",
            merged_path.to_str().unwrap(),
            "--html",
            html.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let merged: Value =
        serde_json::from_str(&std::fs::read_to_string(&merged_path).unwrap()).unwrap();
    let merged_steps = merged["targets"][0]["steps"].as_array().unwrap();
    assert_eq!(merged_steps.len(), steps);
    for (k, step) in merged_steps.iter().enumerate() {
        let parts: Vec<&Value> = shards
            .iter()
            .map(|(r, _)| &r["targets"][0]["steps"][k])
            .collect();
        // Offered rates add up to the asked total; achieved and counts are the sums.
        assert!(
            (f(&step["offered_rps"]) - [200.0, 400.0][k]).abs() < 1e-9,
            "{step}"
        );
        let achieved: f64 = parts.iter().map(|p| f(&p["achieved_rps"])).sum();
        assert!((f(&step["achieved_rps"]) - achieved).abs() < 1e-6 * achieved.max(1.0));
        assert_eq!(u(&step["requests"]), per_step);
        assert_eq!(u(&step["requests"]), sent_by_step[k].len() as u64);
        assert_eq!(step["slo_held"], true, "{step}");

        // The merged histogram is the sum of the shards' and its percentiles are recomputed
        // from it.
        let mut sum = new_histogram();
        for p in &parts {
            sum.add(decode_histogram(p["histogram"].as_str().unwrap()).unwrap())
                .unwrap();
        }
        let merged_hist = decode_histogram(step["histogram"].as_str().unwrap()).unwrap();
        assert_eq!(merged_hist, sum);
        assert_eq!(merged_hist.len(), sent_by_step[k].len() as u64);
        let summary: LatencySummary = serde_json::from_value(step["latency_ms"].clone()).unwrap();
        assert_eq!(Some(summary), LatencySummary::from_histogram(&sum));

        // Against the raw latencies measured here over every shard's requests: each client
        // latency is at least the server's hold (exact lower bound, within the histogram's
        // 0.1%), and at most a second more on loopback.
        let mut held: Vec<Duration> = sent_by_step[k].iter().map(Served::held).collect();
        for (q, name) in [(0.5, "p50"), (0.9, "p90"), (0.99, "p99")] {
            let raw = quantile(&mut held, q).as_secs_f64() * 1000.0;
            let got = f(&step["latency_ms"][name]);
            assert!(
                got >= raw * 0.999 && got <= raw + 1000.0,
                "step {k} {name}: merged {got} ms, raw {raw} ms"
            );
        }
        // A quarter is held 2 s: p50 is fast, p90 slow. Averaging the shards' p90s (three
        // fast, one slow) would give ~0.5 s and fail the lower bound above.
        assert!(f(&step["latency_ms"]["p90"]) >= SLOW.as_secs_f64() * 1000.0 * 0.999);
    }

    // The per-shard figures are in the merged JSON, and shard 3's slowness shows there.
    let parts = merged["shards"]["parts"]
        .as_array()
        .expect("per-shard figures");
    assert_eq!(parts.len(), count as usize);
    for (index, part) in parts.iter().enumerate() {
        assert_eq!(u(&part["index"]), index as u64);
        let p99 = f(&part["targets"][0]["steps"][0]["latency_ms"]["p99"]);
        if index == 2 {
            assert!(p99 >= 1999.0, "shard 3 is the slow one: {p99}");
        } else {
            assert!(p99 < 1999.0, "shard {} is fast: {p99}", index + 1);
        }
    }
    assert_eq!(merged["shards"]["run_id"], "k8s-test");
    // ... in the table (on stderr) and in the page.
    let table = stderr(&out);
    for index in 1..=count {
        assert!(table.contains(&format!("{index}/{count}")), "{table}");
    }
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(
        page.contains("Shards") && page.contains(&format!("3/{count}")),
        "per-shard table in the page"
    );
}

#[test]
fn report_merge_refuses_an_incomplete_or_mixed_set_naming_what_is_wrong() {
    let job = read_job();
    let count = job.completions;
    let dir = scratch("refuse");
    let data = data_file(&dir, 500);
    let server = Recorder::start(answer_at_once);
    let swap = [
        ("--ramp", "400,400,400"),
        ("--slo", "p99<10s"),
        ("--data", data.to_str().unwrap()),
    ];
    let (_, at) = start_in(Duration::from_secs(3));
    let args = test_args(&job, &at, "run-a", &swap, 200, &server.url());
    let a_dir = dir.join("a");
    std::fs::create_dir_all(&a_dir).unwrap();
    let a = run_shards(&a_dir, &args, count, &[]);

    // The same run id, other settings (the SLO differs): one shard of it, as index 1.
    let b_dir = dir.join("b");
    std::fs::create_dir_all(&b_dir).unwrap();
    let swap_b = [("--slo", "p99<9s"), swap[0], swap[2]];
    let (_, at_b) = start_in(Duration::from_secs(2));
    let args_b = test_args(&job, &at_b, "run-a", &swap_b, 200, &server.url());
    let out = finish(spawn(&args_b, Some(1)), "run b");
    assert!(out.status.success(), "{}", stderr(&out));
    let b1 = b_dir.join("shard-1.json");
    std::fs::write(&b1, &out.stdout).unwrap();

    // Another run (its own id), shard index 1.
    let (_, at_c) = start_in(Duration::from_secs(2));
    let args_c = test_args(&job, &at_c, "run-c", &swap, 200, &server.url());
    let out = finish(spawn(&args_c, Some(1)), "run c");
    assert!(out.status.success(), "{}", stderr(&out));
    let c1 = dir.join("c-shard-1.json");
    std::fs::write(&c1, &out.stdout).unwrap();

    let paths: Vec<&Path> = a.iter().map(|(_, p)| p.as_path()).collect();
    let copy = dir.join("copy-of-shard-0.json");
    std::fs::copy(paths[0], &copy).unwrap();

    let refused = |files: Vec<&Path>, needle: &str| {
        let out = merge(&files, &[]);
        let text = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{needle}: {text}");
        assert_eq!(text.lines().count(), 1, "one line: {text}");
        assert!(text.contains(needle), "expected `{needle}` in: {text}");
        assert!(out.stdout.is_empty());
    };
    // One missing.
    refused(
        paths[..3].to_vec(),
        &format!("shard 4 of {count} missing (run id "),
    );
    // One file alone is the same fault (#26.3: it was "not a merge: give two or more").
    let others: Vec<String> = (2..count).map(|i| i.to_string()).collect();
    refused(
        paths[..1].to_vec(),
        &format!(
            "shards {} and {count} of {count} missing (run id run-a)",
            others.join(", ")
        ),
    );
    // One twice (another file with the same content).
    refused(
        vec![paths[0], paths[1], paths[2], paths[3], &copy],
        &format!("shard 1/{count} is given twice"),
    );
    // Another run's shard in place of ours.
    refused(vec![paths[0], &c1, paths[2], paths[3]], "run-c");
    // Same run id, other settings.
    refused(vec![paths[0], &b1, paths[2], paths[3]], "settings");
    // A plain run among shards.
    let plain = dir.join("plain.json");
    let out = scalpel(&[
        "load",
        "--no-progress",
        "-n",
        "50",
        "--json",
        plain.to_str().unwrap(),
        &server.url(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    refused(
        vec![paths[0], paths[1], paths[2], paths[3], &plain],
        "not a shard",
    );
    // The full set merges.
    let out = merge(&paths, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn the_merge_re_judges_the_slo_on_the_whole_run_and_exits_1_when_it_broke() {
    // Shard 3 alone breaks `p99<1s` (all its requests take 2 s) and stops after step 1;
    // the others hold and go on. The whole run broke at step 1: exit 1, and the steps only
    // some shards ran are not counted as held.
    let job = read_job();
    let count = job.completions;
    let dir = scratch("slo");
    let data = data_file(&dir, 1000);
    let server = Recorder::start(shard_three_slow);
    let swap = [
        ("--ramp", "200,200,400"),
        ("--slo", "p99<1s"),
        ("--data", data.to_str().unwrap()),
    ];
    let (_, at) = start_in(Duration::from_secs(3));
    let args = test_args(&job, &at, "slo-run", &swap, 200, &server.url());
    let mut children = Vec::new();
    for index in 0..count {
        children.push((index, spawn(&args, Some(index))));
    }
    let mut files = Vec::new();
    for (index, child) in children {
        let out = finish(child, "shard");
        // A shard exits 1 when its own part broke the SLO.
        let expected = if index == 2 { 1 } else { 0 };
        assert_eq!(
            out.status.code(),
            Some(expected),
            "shard {index}: {}",
            stderr(&out)
        );
        let path = dir.join(format!("shard-{index}.json"));
        std::fs::write(&path, &out.stdout).unwrap();
        files.push(path);
    }
    let paths: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
    let out = merge(&paths, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let merged: Value = serde_json::from_slice(&out.stdout).unwrap();
    let target = &merged["targets"][0];
    assert_eq!(target["steps"][0]["slo_held"], false);
    assert!(!target["breaking_point"].is_null());
    // The table went to stderr beside the JSON on stdout, with the slow shard in it.
    assert!(
        stderr(&out).contains(&format!("3/{count}")),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_shard_that_starts_late_says_so_and_the_merge_flags_it() {
    // Two shards with time-bound steps of 4 s; the second process is started 2 s after the
    // common start, more than a tenth of a step late.
    let dir = scratch("late");
    let server = Recorder::start(answer_at_once);
    let (_, at) = start_in(Duration::from_secs(2));
    let args: Vec<String> = [
        "load",
        "--shard",
        "auto/2",
        "--start-at",
        &at,
        "--run-id",
        "late-run",
        "--rate",
        "100",
        "-d",
        "4s",
        "--json",
        "-",
        "--no-progress",
        &server.url(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let shards = run_shards(&dir, &args, 2, &[(1, Duration::from_secs(4))]);
    let late = f(&shards[1].0["shard"]["start_late_s"]);
    assert!(late >= 2.0, "shard 2 started at least 2 s late: {late}");
    assert!(f(&shards[0].0["shard"]["start_late_s"]) < 0.4);
    let files: Vec<&Path> = shards.iter().map(|(_, p)| p.as_path()).collect();
    let out = merge(&files, &[]);
    let merged: Value = serde_json::from_slice(&out.stdout).unwrap();
    let flags = merged["shards"]["flags"].as_array().unwrap();
    assert!(
        flags
            .iter()
            .any(|f| f.as_str().unwrap().contains("shard 2/2")),
        "{flags:?}"
    );
    assert!(stderr(&out).contains("late"), "{}", stderr(&out));
}

#[test]
fn closed_model_shards_split_the_connections_and_the_count_and_walk_disjoint_rows() {
    // `-c 5 -n 301`, three shards: 2, 2 and 1 connections, 101, 100 and 100 requests;
    // together rows 0..301 once each, as one process would send them.
    let dir = scratch("closed");
    let data = data_file(&dir, 400);
    let server = Recorder::start(answer_at_once);
    let (_, at) = start_in(Duration::from_secs(2));
    let args: Vec<String> = [
        "load",
        "--shard",
        "auto/3",
        "--start-at",
        &at,
        "-c",
        "5",
        "-n",
        "301",
        "--data",
        data.to_str().unwrap(),
        "--json",
        "-",
        "--no-progress",
        &format!("{}/v1/users/{{id}}/stats", server.url()),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let shards = run_shards(&dir, &args, 3, &[]);
    for (index, (r, _)) in shards.iter().enumerate() {
        assert_eq!(u(&r["config"]["connections"]), [2, 2, 1][index]);
        assert_eq!(
            u(&r["targets"][0]["steps"][0]["requests"]),
            [101, 100, 100][index]
        );
        assert!(r["targets"][0]["steps"][0]["offered_rps"].is_null());
    }
    let mut rows: Vec<u64> = server.run_requests().iter().map(|s| row(&s.path)).collect();
    rows.sort_unstable();
    assert_eq!(rows, (0..301).collect::<Vec<u64>>());
    // The run id was derived (no --run-id), the same on every shard.
    let id = shards[0].0["shard"]["run_id"].as_str().unwrap();
    assert!(id.starts_with("run-"), "{id}");
    assert!(shards.iter().all(|(r, _)| r["shard"]["run_id"] == id));
    let files: Vec<&Path> = shards.iter().map(|(_, p)| p.as_path()).collect();
    let out = merge(&files, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let merged: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(u(&merged["config"]["connections"]), 5);
    assert_eq!(u(&merged["targets"][0]["steps"][0]["requests"]), 301);
}

#[test]
fn bad_shard_flags_are_one_line_and_exit_2() {
    for (args, env, needle) in [
        (vec!["--shard", "5/4", "--run-id", "x"], None, "--shard"),
        (
            vec!["--shard", "auto/4", "--run-id", "x"],
            None,
            "JOB_COMPLETION_INDEX",
        ),
        (
            vec!["--shard", "auto/4", "--run-id", "x"],
            Some(4),
            "JOB_COMPLETION_INDEX",
        ),
        (vec!["--shard", "2/4"], None, "--start-at"),
        (
            vec!["--shard", "2/4", "--start-at", "tomorrow"],
            None,
            "--start-at",
        ),
        (vec!["--shard", "2/4", "--run-id", "a b"], None, "--run-id"),
        (
            vec!["--shard", "2/4", "--run-id", "x", "-c", "3"],
            None,
            "-c",
        ),
    ] {
        let mut all: Vec<String> = vec!["load".into(), "-n".into(), "10".into()];
        all.extend(args.iter().map(|s| s.to_string()));
        all.push("http://127.0.0.1:9/".into());
        let out = finish(spawn(&all, env), "bad flags");
        let text = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {text}");
        assert_eq!(text.lines().count(), 1, "{args:?}: {text}");
        assert!(text.contains(needle), "{args:?}: {text}");
    }
}

/// `deploy/kubernetes/run.sh` end to end but for the cluster: a stand-in `kubectl` on PATH
/// records what is applied and serves, as each pod's log, the output of a real shard process
/// whose stdout and stderr went to one file — as the kubelet keeps them, interleaved. The
/// script must pick each result line out of its log and merge the set.
#[test]
fn run_sh_picks_each_result_out_of_a_log_that_holds_stderr_too_and_merges_them() {
    let job = read_job();
    let count = job.completions;
    let dir = scratch("run-sh");
    let data = data_file(&dir, 500);
    let server = Recorder::start(answer_at_once);
    let swap = [
        ("--ramp", "200,200,200"),
        ("--slo", "p99<10s"),
        ("--data", data.to_str().unwrap()),
        ("-c", "8"),
    ];
    let (_, at) = start_in(Duration::from_secs(3));
    let args = test_args(&job, &at, "k8s-run-sh", &swap, 100, &server.url());
    let logs = dir.join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let children: Vec<Child> = (0..count)
        .map(|i| {
            let log = std::fs::File::create(logs.join(format!("pod-{i}.log"))).unwrap();
            Command::new(env!("CARGO_BIN_EXE_scalpel"))
                .args(&args)
                .env("JOB_COMPLETION_INDEX", i.to_string())
                .stdin(Stdio::null())
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let out = finish(child, "shard");
        assert!(out.status.success());
    }
    // The logs hold more than the result: the table and the waiting line from stderr.
    let log0 = std::fs::read_to_string(logs.join("pod-0.log")).unwrap();
    assert!(log0.lines().count() > 5 && log0.contains("p99"), "{log0}");

    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let kubectl = bin.join("kubectl");
    std::fs::write(
        &kubectl,
        r#"#!/usr/bin/env bash
# A stand-in for kubectl: what run.sh asks of a cluster, answered from files.
case "$1" in
    apply) cat >>"$FAKE/applied.yaml" ;;
    delete) ;;
    wait) case "$*" in *condition=complete*) exit 0 ;; *) sleep 30 ;; esac ;;
    get) all="$*"; idx="${all##*job-completion-index=}"; echo "pod-${idx%% *}" ;;
    logs) cat "$FAKE/logs/$2.log" ;;
    *) echo "kubectl stand-in: unexpected $*" >&2; exit 1 ;;
esac
"#,
    )
    .unwrap();
    Command::new("chmod")
        .arg("+x")
        .arg(&kubectl)
        .status()
        .unwrap();
    let out_dir = dir.join("out");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/kubernetes/run.sh");
    let run = Command::new("bash")
        .arg(&script)
        .arg(&out_dir)
        .env(
            "PATH",
            format!("{}:{}", bin.display(), std::env::var("PATH").unwrap()),
        )
        .env("FAKE", &dir)
        .env("LEAD", "0")
        .env("SCALPEL", env!("CARGO_BIN_EXE_scalpel"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = finish(run, "run.sh");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // The Job was applied with the start time and run id filled in.
    let applied = std::fs::read_to_string(dir.join("applied.yaml")).unwrap();
    assert!(!applied.contains("PLACEHOLDER"), "{applied}");
    assert!(applied.contains("value: \"k8s-"), "{applied}");
    // Every shard's result was picked out whole, and the set merged.
    for i in 0..count {
        let text = std::fs::read_to_string(out_dir.join(format!("shard-{i}.json"))).unwrap();
        let r: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(u(&r["shard"]["index"]), u64::from(i));
    }
    let merged: Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("merged.json")).unwrap())
            .unwrap();
    assert_eq!(
        merged["shards"]["parts"].as_array().unwrap().len(),
        count as usize
    );
    assert_eq!(u(&merged["targets"][0]["steps"][0]["requests"]), 100);
    assert!(out_dir.join("merged.html").exists());
}
