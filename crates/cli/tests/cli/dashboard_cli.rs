//! `scalpel load --dashboard`: the live page's snapshot during a real run against a
//! loopback server, the report served at the end, and a taken address refused up front.

use std::io::Write;
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
