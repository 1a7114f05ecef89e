//! `scalpel load --dashboard`: the live page's snapshot during a real run against a
//! loopback server, the report served at the end, and a taken address refused up front.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use scalpel_testkit::free_port;
use scalpel_testkit::raw::{http, serve_requests};

/// A tiny keep-alive HTTP/1.1 server answering every request with a small JSON body.
fn server() -> u16 {
    serve_requests(|_, out| {
        std::thread::sleep(Duration::from_millis(1));
        let body = "{\"ok\":true}";
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        out.write_all(head.as_bytes()).is_ok()
    })
}

/// GET `path` from `port`: (status, body), or `None` when nothing answers.
fn get(port: u16, path: &str) -> Option<(u16, String)> {
    http(port, "GET", path).ok()
}

#[test]
fn the_dashboard_follows_the_run_then_serves_the_html_report() {
    let target = server();
    let dash = free_port();
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("report.html");
    let mut child = Command::new(env!("CARGO_BIN_EXE_scalpel"))
        .args([
            "load",
            "--rate",
            "50",
            "-d",
            "4s",
            "--threads",
            "1",
            "-c",
            "2",
            "--dashboard",
            &format!("127.0.0.1:{dash}"),
            "--dashboard-linger",
            "20s",
            "--html",
            html.to_str().unwrap(),
            &format!("http://127.0.0.1:{target}/x"),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // During the run: the page, then a snapshot with the target's live figures.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut running = None;
    while Instant::now() < deadline {
        if let Some((200, body)) = get(dash, "/live/snapshot") {
            let v: serde_json::Value = serde_json::from_str(&body).unwrap();
            if v["data"]["state"] == "running" && v["data"]["targets"][0]["p99_ms"].is_number() {
                running = Some(v);
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let v = running.expect("a running snapshot with live percentiles");
    assert_eq!(v["kind"], "load");
    let t = &v["data"]["targets"][0];
    assert_eq!(t["name"], "target");
    assert_eq!(t["offered_rps"], 50.0);
    let p99 = t["p99_ms"].as_f64().unwrap();
    assert!(p99 > 0.5 && p99 < 5_000.0, "{t}");
    let (status, page) = get(dash, "/").unwrap();
    assert_eq!(status, 200);
    assert!(page.contains("live/live.js"));
    // After the run: `/` is the --html report itself, while the dashboard lingers.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut served = String::new();
    while Instant::now() < deadline {
        if let Some((200, body)) = get(dash, "/")
            && body.contains("<title>Load report")
        {
            served = body;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(!served.is_empty(), "the report was served");
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::fs::read_to_string(&html).map_or(true, |t| t != served) && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(std::fs::read_to_string(&html).unwrap(), served);
    let (status, _) = get(dash, "/live/snapshot").unwrap();
    assert_eq!(status, 200);
    let (status, body) = get(dash, "/nope").unwrap();
    assert_eq!(status, 404);
    assert!(body.contains("\"error\""));
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn a_taken_dashboard_address_is_one_line_and_exit_2_before_any_load() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_scalpel"))
        .args([
            "load",
            "-d",
            "1s",
            "--dashboard",
            &addr.to_string(),
            "http://127.0.0.1:9/",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].contains("--dashboard: cannot listen on"), "{err}");
}

/// A child killed when dropped, so no busy loop outlives a failed test.
struct Burner {
    child: std::process::Child,
    out: std::io::Lines<BufReader<std::process::ChildStdout>>,
}

impl Burner {
    fn start(share: &str) -> Burner {
        // procstat's burner: the CPU truth is measured in one way for every test.
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../procstat/tests/duty_cycle.py"
        );
        let mut child = Command::new("python3")
            .args([script, share])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs");
        let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
        assert_eq!(out.next().unwrap().unwrap(), "ready");
        Burner { child, out }
    }

    /// (its CPU seconds, its wall clock seconds).
    fn clock(&mut self) -> (f64, f64) {
        let stdin = self.child.stdin.as_mut().unwrap();
        stdin.write_all(b"?\n").unwrap();
        stdin.flush().unwrap();
        let line = self.out.next().unwrap().unwrap();
        let mut it = line.split_whitespace().map(|x| x.parse::<f64>().unwrap());
        (it.next().unwrap(), it.next().unwrap())
    }
}

impl Drop for Burner {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// #26.4: a target at a steady ~5% of a core was drawn 0%, 10%, 10%, 0%… and its card said
/// "CPU 0%": each figure was the last 100 ms sample, where one tick (10 ms) is 10%. Each
/// card and point is now the CPU over its whole interval (about a second): it reads what
/// the process's own CPU clock says, within a tick or two.
#[test]
fn the_dashboard_cpu_of_a_steady_five_percent_reads_five_percent() {
    let target = server();
    let dash = free_port();
    let mut burner = Burner::start("0.05");
    let mut child = Command::new(env!("CARGO_BIN_EXE_scalpel"))
        .args([
            "load",
            "--rate",
            "20",
            "-d",
            "10s",
            "--threads",
            "1",
            "--watch-pid",
            &burner.child.id().to_string(),
            "--dashboard",
            &format!("127.0.0.1:{dash}"),
            "--dashboard-linger",
            "0s",
            &format!("http://127.0.0.1:{target}/x"),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (cpu0, wall0) = burner.clock();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen: Vec<f64> = Vec::new();
    while seen.len() < 6 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1000));
        if let Some((200, body)) = get(dash, "/live/snapshot") {
            let v: serde_json::Value = serde_json::from_str(&body).unwrap();
            if let Some(cpu) = v["data"]["targets"][0]["cpu_percent"].as_f64() {
                seen.push(cpu);
            }
        }
    }
    let (cpu1, wall1) = burner.clock();
    let _ = child.kill();
    let _ = child.wait();
    let truth = (cpu1 - cpu0) / (wall1 - wall0) * 100.0;
    assert!(
        (3.0..=8.0).contains(&truth),
        "the burner itself ran at {truth:.1}% (the machine is too busy to test this)"
    );
    assert!(seen.len() >= 6, "CPU figures on the page: {seen:?}");
    for cpu in &seen {
        assert!(
            (cpu - truth).abs() <= 3.0,
            "the page showed {cpu:.1}% for a process at {truth:.1}%: {seen:?}"
        );
    }
}
