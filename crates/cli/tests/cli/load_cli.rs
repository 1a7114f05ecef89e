//! `scalpel load` as a user runs it: the real binary against real HTTP/1.1 servers on
//! loopback, started here (raw TCP, one thread per connection, so that every byte on the
//! wire is under the test's control and every request is counted by the server itself).
//!
//! No timed assertions: bounds on latency are lower bounds caused by the server's own
//! sleeps, rate bounds are loose, and every run has a deadline only to turn a hang into a
//! failure.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use scalpel_testkit::raw::{RawRequest, serve_requests};
use scalpel_testkit::{ChildServer, child_server, read_json, scalpel, scratch, signal};

use crate::util::{assert_one_line_error as assert_one_line_usage_error, f, load_json, u};
use serde_json::Value;

// ---------------------------------------------------------------------------------------
// Test servers

/// One request as the server saw it.
type Seen = RawRequest;

/// How the server frames a response body.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Framing {
    Length,
    /// Several chunks and a trailer.
    Chunked,
    /// No length, `Connection: close`, body ends at close.
    Close,
}

#[derive(Debug, Clone)]
struct Reply {
    status: u16,
    body: &'static str,
    framing: Framing,
    delay: Option<Duration>,
    /// Extra `X-Filler-N: …` header lines, each `filler_len` bytes of value.
    extra_headers: usize,
    filler_len: usize,
}

impl Reply {
    fn ok() -> Reply {
        Reply {
            status: 200,
            body: "hello scalpel\n",
            framing: Framing::Length,
            delay: None,
            extra_headers: 0,
            filler_len: 8,
        }
    }
}

type Handler = dyn Fn(u64, &Seen) -> Reply + Send + Sync;

struct Server {
    port: u16,
    count: Arc<AtomicU64>,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Server {
    fn start(handler: impl Fn(u64, &Seen) -> Reply + Send + Sync + 'static) -> Server {
        let count = Arc::new(AtomicU64::new(0));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let handler: Arc<Handler> = Arc::new(handler);
        let (c, s) = (count.clone(), seen.clone());
        let port = serve_requests(move |req, writer| answer(req, writer, &c, &s, &*handler));
        Server { port, count, seen }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn received(&self) -> u64 {
        self.count.load(Ordering::SeqCst)
    }

    fn paths(&self) -> Vec<String> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .map(|s| s.path.clone())
            .collect()
    }
}

/// Counts and records `req`, then writes the answer `h` chose; `false` when the
/// connection is to end.
fn answer(
    req: &Seen,
    writer: &mut TcpStream,
    count: &AtomicU64,
    seen: &Mutex<Vec<Seen>>,
    h: &Handler,
) -> bool {
    let n = count.fetch_add(1, Ordering::SeqCst);
    seen.lock().unwrap().push(req.clone());
    let reply = h(n, req);
    if let Some(d) = reply.delay {
        std::thread::sleep(d);
    }
    let reason = if reply.status == 200 { "OK" } else { "Other" };
    let mut out = format!("HTTP/1.1 {} {reason}\r\nServer: test\r\n", reply.status);
    for i in 0..reply.extra_headers {
        out += &format!("X-Filler-{i}: {}\r\n", "f".repeat(reply.filler_len));
    }
    match reply.framing {
        Framing::Length => {
            out += &format!("Content-Length: {}\r\n\r\n{}", reply.body.len(), reply.body);
        }
        Framing::Chunked => {
            out += "Transfer-Encoding: chunked\r\n\r\n";
            let (a, b) = reply.body.split_at(reply.body.len() / 2);
            for chunk in [a, b] {
                if !chunk.is_empty() {
                    out += &format!("{:x};ext=1\r\n{chunk}\r\n", chunk.len());
                }
            }
            out += "0\r\nX-Trailer: yes\r\n\r\n";
        }
        Framing::Close => {
            out += &format!("Connection: close\r\n\r\n{}", reply.body);
        }
    }
    // Written in two pieces so the client must reassemble a split head.
    let bytes = out.as_bytes();
    let cut = bytes.len().min(20);
    if writer.write_all(&bytes[..cut]).is_err() || writer.write_all(&bytes[cut..]).is_err() {
        return false;
    }
    reply.framing != Framing::Close
}

/// A token bucket: `rate` tokens a second, at most `burst`; `true` when a token was taken.
struct Bucket {
    rate: f64,
    burst: f64,
    state: Mutex<(f64, Instant)>,
}

impl Bucket {
    fn new(rate: f64, burst: f64) -> Bucket {
        Bucket {
            rate,
            burst,
            state: Mutex::new((burst, Instant::now())),
        }
    }

    fn take(&self) -> bool {
        let mut s = self.state.lock().unwrap();
        let now = Instant::now();
        s.0 = (s.0 + now.duration_since(s.1).as_secs_f64() * self.rate).min(self.burst);
        s.1 = now;
        if s.0 >= 1.0 {
            s.0 -= 1.0;
            true
        } else {
            false
        }
    }
}

// ---------------------------------------------------------------------------------------
// Running the binary

fn step(result: &Value, target: usize, step: usize) -> &Value {
    &result["targets"][target]["steps"][step]
}

// ---------------------------------------------------------------------------------------
// Tests

#[test]
fn closed_model_reports_exactly_what_the_server_received() {
    let server = Server::start(|_, _| Reply::ok());
    let (code, r, out) = load_json("counts", &["-c", "4", "-n", "777", &server.url()]);
    assert_eq!(code, 0, "{}", String::from_utf8_lossy(&out.stderr));
    let s = step(&r, 0, 0);
    assert_eq!(u(&s["requests"]), 777);
    assert_eq!(u(&s["errors"]), 0);
    // Exactly what the run counts: the probe before it only connects (#26.1: it sent
    // request 0 once more, uncounted).
    assert_eq!(server.received(), 777);
    assert!(s["offered_rps"].is_null());
    assert!(s["cpu_percent"].is_null() && s["rss_mb"].is_null());
    assert!(f(&s["latency_ms"]["p50"]) > 0.0);
    // The table is on stdout.
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("777"), "{table}");
}

#[test]
fn content_length_chunked_and_close_delimited_bodies_all_parse() {
    let server = Server::start(|n, _| Reply {
        framing: [Framing::Length, Framing::Chunked, Framing::Close][(n % 3) as usize],
        ..Reply::ok()
    });
    let (code, r, _) = load_json("framing", &["-c", "3", "-n", "600", &server.url()]);
    assert_eq!(code, 0);
    let s = step(&r, 0, 0);
    assert_eq!((u(&s["requests"]), u(&s["errors"])), (600, 0), "{s}");
    assert_eq!(server.received(), 600);
}

#[test]
fn errors_are_counted_by_kind_and_status() {
    // Every 4th request is a 503, every 10th a 404, request 50 stalls past the time-out.
    let server = Server::start(|n, _| {
        let mut r = Reply::ok();
        if n == 50 {
            r.delay = Some(Duration::from_secs(5));
        } else if n % 10 == 0 {
            r.status = 404;
        } else if n % 4 == 0 {
            r.status = 503;
        }
        r
    });
    let (code, r, _) = load_json(
        "kinds",
        &[
            "-c",
            "1",
            "--threads",
            "1",
            "-n",
            "200",
            "--timeout",
            "1s",
            &server.url(),
        ],
    );
    assert_eq!(code, 0);
    let s = step(&r, 0, 0);
    let kinds: BTreeMap<String, u64> = serde_json::from_value(s["error_kinds"].clone()).unwrap();
    // Server request numbers: load requests are 0..200 (plus resends after the time-out
    // are new requests, so count what the server answered).
    let total = server.received();
    let expect_404 = (0..total).filter(|n| *n != 50 && n % 10 == 0).count() as u64;
    let expect_503 = (0..total)
        .filter(|n| *n != 50 && n % 10 != 0 && n % 4 == 0)
        .count() as u64;
    assert_eq!(kinds.get("timeout"), Some(&1), "{kinds:?}");
    assert_eq!(kinds.get("status_404"), Some(&expect_404), "{kinds:?}");
    assert_eq!(kinds.get("status_503"), Some(&expect_503), "{kinds:?}");
    assert_eq!(u(&s["errors"]), 1 + expect_404 + expect_503);
    assert_eq!(u(&s["requests"]), 200);
}

#[test]
fn open_model_holds_its_rate() {
    let server = Server::start(|_, _| Reply::ok());
    let (code, r, _) = load_json("rate", &["--rate", "200", "-d", "3s", &server.url()]);
    assert_eq!(code, 0);
    let s = step(&r, 0, 0);
    assert_eq!(f(&s["offered_rps"]), 200.0);
    let requests = u(&s["requests"]);
    let not_sent = u(&s["not_sent"]);
    // 600 scheduled; all are sent or counted as not sent, never silently dropped.
    assert_eq!(requests + not_sent, 600, "{s}");
    assert!(requests >= 450, "{s}");
    let achieved = f(&s["achieved_rps"]);
    assert!((120.0..=230.0).contains(&achieved), "achieved {achieved}");
    assert_eq!(server.received(), requests);
}

#[test]
fn a_stall_shows_in_the_open_model_percentiles() {
    // The server pauses 1 s once. With one connection, every request due during the pause
    // waits: measured from their intended send times, p99 and max must show the queueing.
    let server = Server::start(|n, _| Reply {
        delay: (n == 100).then_some(Duration::from_secs(1)),
        ..Reply::ok()
    });
    let (code, r, _) = load_json(
        "stall",
        &[
            "--rate",
            "100",
            "-d",
            "4s",
            "-c",
            "1",
            "--max-in-flight",
            "1",
            "--threads",
            "1",
            &server.url(),
        ],
    );
    assert_eq!(code, 0);
    let s = step(&r, 0, 0);
    let lat = &s["latency_ms"];
    assert!(f(&lat["max"]) >= 950.0, "{lat}");
    // About 100 of ~400 requests were due during the pause.
    assert!(f(&lat["p99"]) >= 500.0, "{lat}");
    assert!(f(&lat["p90"]) >= 50.0, "{lat}");
    assert!(u(&s["late"]) >= 50, "{s}");
}

#[test]
fn requests_still_waiting_when_time_is_up_are_not_sent_never_dropped() {
    // One connection allowed; the server stalls 3 s on a request near the middle of a 2 s
    // run. Everything due after it waits for the only connection: counted late while it
    // waits, and `not_sent` when the time is up — the schedule adds up exactly.
    let server = Server::start(|n, _| Reply {
        delay: (n == 100).then_some(Duration::from_secs(3)),
        ..Reply::ok()
    });
    let (code, r, _) = load_json(
        "not_sent",
        &[
            "--rate",
            "100",
            "-d",
            "2s",
            "-c",
            "1",
            "--max-in-flight",
            "1",
            "--threads",
            "1",
            &server.url(),
        ],
    );
    assert_eq!(code, 0);
    let s = step(&r, 0, 0);
    let (requests, not_sent) = (u(&s["requests"]), u(&s["not_sent"]));
    assert_eq!(requests + not_sent, 200, "{s}");
    // About 100 requests were due during the stall and before the end.
    assert!(not_sent >= 50, "{s}");
    assert_eq!(server.received(), requests, "{s}");
    // The stalled request's latency shows; the rate counts only what completed in time.
    assert!(f(&s["latency_ms"]["max"]) >= 2900.0, "{s}");
    assert!(f(&s["achieved_rps"]) < 80.0, "{s}");
}

#[test]
fn ramp_stops_at_the_first_step_over_capacity() {
    // 200 req/s (burst 100) served, 503 beyond. Steps 50 (holds with a wide margin), 500
    // (about half refused), 950 (never reached).
    let bucket = Bucket::new(200.0, 100.0);
    let server = Server::start(move |_, _| {
        if bucket.take() {
            Reply::ok()
        } else {
            Reply {
                status: 503,
                ..Reply::ok()
            }
        }
    });
    let (code, r, out) = load_json(
        "ramp",
        &[
            "--ramp",
            "50,450,950",
            "--step-duration",
            "2s",
            "--slo",
            "errors<10%",
            &server.url(),
        ],
    );
    assert_eq!(
        code,
        1,
        "the SLO broke: exit 1; {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let t = &r["targets"][0];
    let steps = t["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 2, "stops at the first failing step: {t}");
    assert_eq!(f(&steps[0]["offered_rps"]), 50.0);
    assert_eq!(steps[0]["slo_held"], Value::Bool(true));
    assert_eq!(steps[1]["slo_held"], Value::Bool(false));
    assert!(u(&steps[1]["error_kinds"]["status_503"]) > 0);
    assert_eq!(f(&t["breaking_point"]["rps"]), 50.0);
    let reason = t["breaking_point"]["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("errors ") && reason.ends_with("at 500 rps"),
        "{reason}"
    );
}

#[test]
fn slo_that_holds_exits_zero_with_no_breaking_point() {
    let server = Server::start(|_, _| Reply::ok());
    let (code, r, _) = load_json(
        "slo-ok",
        &[
            "--ramp",
            "20,20,40",
            "--step-duration",
            "1s",
            "--slo",
            "errors<50%",
            &server.url(),
        ],
    );
    assert_eq!(code, 0);
    assert!(r["targets"][0]["breaking_point"].is_null());
    assert_eq!(r["targets"][0]["steps"].as_array().unwrap().len(), 2);
}

fn data_file(dir: &Path, ids: &[String]) -> PathBuf {
    let path = dir.join("ids.txt");
    std::fs::write(&path, ids.join("\n") + "\n").unwrap();
    path
}

#[test]
fn placeholders_are_filled_from_the_data_file_in_order() {
    let server = Server::start(|_, _| Reply::ok());
    let dir = scratch("data");
    let ids: Vec<String> = (0..20).map(|i| format!("u{}", 1000 + i * 7)).collect();
    let data = data_file(&dir, &ids);
    let url = format!("{}/v1/users/{{id}}/stats?days=30", server.url());
    let (code, _, _) = load_json(
        "data-run",
        &[
            "-c",
            "1",
            "--threads",
            "1",
            "-n",
            "20",
            "-m",
            "POST",
            "-H",
            "X-User: {id}",
            "--body",
            "{{\"user\":\"{id}\"}}",
            "--data",
            data.to_str().unwrap(),
            &url,
        ],
    );
    assert_eq!(code, 0);
    let seen = server.seen.lock().unwrap().clone();
    // The run sends requests 0..20 in file order (and the probe none).
    assert_eq!(seen.len(), 20);
    for (req, id) in seen.iter().zip(&ids) {
        assert_eq!(req.method, "POST");
        assert_eq!(req.path, format!("/v1/users/{id}/stats?days=30"));
        assert!(
            req.headers
                .iter()
                .any(|(n, v)| n.eq_ignore_ascii_case("x-user") && v == id),
            "{req:?}"
        );
        assert_eq!(req.body, format!("{{\"user\":\"{id}\"}}").into_bytes());
    }
}

/// #26.2: a JSON body written as JSON (`{"to":"{id}","amount":5}`, as k6 and vegeta users
/// write it) was refused with `unknown modifier "\"{id"`. It reaches the server as the
/// intended bytes, nested objects' `}}` included; `{{`/`}}` still escape.
#[test]
fn a_json_body_with_placeholders_reaches_the_server_as_written() {
    let server = Server::start(|_, _| Reply::ok());
    let dir = scratch("json-body-data");
    let rows = "id,amount\nu-1,5\nu-2,70\nu-3,0\n";
    let data = dir.join("rows.csv");
    std::fs::write(&data, rows).unwrap();
    let body = r#"{"to":"{id}","amount":{"minor":{amount},"currency":"EUR"},"note":"{{id}}"}"#;
    let (code, _, out) = load_json(
        "json-body",
        &[
            "-c",
            "1",
            "--threads",
            "1",
            "-n",
            "3",
            "-m",
            "POST",
            "--body",
            body,
            "--data",
            data.to_str().unwrap(),
            &server.url(),
        ],
    );
    assert_eq!(code, 0, "{}", String::from_utf8_lossy(&out.stderr));
    let bodies: Vec<String> = server
        .seen
        .lock()
        .unwrap()
        .iter()
        .map(|s| String::from_utf8_lossy(&s.body).into_owned())
        .collect();
    let want: Vec<String> = [("u-1", 5), ("u-2", 70), ("u-3", 0)]
        .iter()
        .map(|(id, minor)| {
            format!(
                r#"{{"to":"{id}","amount":{{"minor":{minor},"currency":"EUR"}},"note":"{{id}}"}}"#
            )
        })
        .collect();
    assert_eq!(bodies, want);
    // A placeholder that names no column: named, with the file's columns.
    assert_one_line_usage_error(
        &[
            "load",
            "--no-progress",
            "-n",
            "1",
            "--body",
            r#"{"to":"{user}"}"#,
            "--data",
            data.to_str().unwrap(),
            &server.url(),
        ],
        "placeholder {user} is not a column",
    );
    assert_eq!(server.received(), 3, "nothing sent for the refused run");
}

#[test]
fn shuffle_visits_every_row_in_a_seeded_order() {
    let dir = scratch("shuffle");
    let ids: Vec<String> = (0..50).map(|i| format!("id{i}")).collect();
    let data = data_file(&dir, &ids);
    let run = |seed: &str| {
        let server = Server::start(|_, _| Reply::ok());
        let url = format!("{}/u/{{id}}", server.url());
        let out = scalpel(&[
            "load",
            "--no-progress",
            "-c",
            "1",
            "--threads",
            "1",
            "-n",
            "50",
            "--data",
            data.to_str().unwrap(),
            "--shuffle",
            seed,
            &url,
        ]);
        assert_eq!(out.status.code(), Some(0));
        server.paths()
    };
    let a = run("7");
    let b = run("7");
    assert_eq!(a, b, "the same seed gives the same order");
    let file_order: Vec<String> = ids.iter().map(|i| format!("/u/{i}")).collect();
    assert_ne!(a, file_order);
    let mut sorted = a.clone();
    sorted.sort();
    let mut expected = file_order.clone();
    expected.sort();
    assert_eq!(sorted, expected, "every row exactly once");
}

#[test]
fn targets_side_by_side_get_identical_schedules() {
    let a = Server::start(|_, _| Reply::ok());
    let b = Server::start(|_, _| Reply {
        delay: Some(Duration::from_millis(2)),
        ..Reply::ok()
    });
    let (code, r, out) = load_json(
        "pair",
        &[
            "-n",
            "300",
            "-c",
            "2",
            "--target",
            &format!("fast={}", a.url()),
            "--target",
            &format!("slow={}", b.url()),
            "/x",
        ],
    );
    assert_eq!(code, 0);
    let names: Vec<&str> = r["targets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["fast", "slow"]);
    for t in 0..2 {
        assert_eq!(u(&step(&r, t, 0)["requests"]), 300);
    }
    assert_eq!(a.received(), 300);
    assert_eq!(b.received(), 300);
    assert!(a.paths().iter().all(|p| p == "/x"));
    // The slow one's latency includes its 2 ms sleep.
    assert!(f(&step(&r, 1, 0)["latency_ms"]["p50"]) >= 2.0);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("fast") && table.contains("slow"), "{table}");
}

/// The watched child: a real HTTP server process (this test binary re-run) that holds
/// 64 MiB and keeps one core busy, so CPU% and memory have something to show.
#[test]
#[ignore = "helper process for watched_process_cpu_and_memory_are_sampled"]
fn child_server_process() {
    let Some(kind) = std::env::var_os("SCALPEL_LOAD_TEST_CHILD") else {
        return;
    };
    // `plain`: only the server (a target to kill); otherwise busy and holding memory.
    if kind != "plain" {
        let memory: Vec<u8> = (0..64 * 1024 * 1024).map(|i| (i % 251) as u8).collect();
        std::thread::spawn(move || {
            let mut x = 0u64;
            loop {
                for v in &memory {
                    x = x.wrapping_mul(31).wrapping_add(u64::from(*v));
                }
                std::hint::black_box(x);
            }
        });
    }
    let server = Server::start(|_, _| Reply::ok());
    println!("PORT {}", server.port);
    std::io::stdout().flush().unwrap();
    // Live until the parent closes our stdin (or kills us).
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    std::process::exit(0);
}

fn start_child_server() -> ChildServer {
    start_child_server_kind("busy")
}

fn start_child_server_kind(kind: &str) -> ChildServer {
    child_server(
        "load_cli::child_server_process",
        &[("SCALPEL_LOAD_TEST_CHILD", kind)],
    )
}

#[test]
fn watched_process_cpu_and_memory_are_sampled() {
    let child = start_child_server();
    let url = format!("http://127.0.0.1:{}/", child.port);
    let pid = child.child.id().to_string();
    let port = child.port.to_string();
    for (test, flag, value) in [
        ("watch-pid", "--watch-pid", &pid),
        ("watch-port", "--watch-port", &port),
    ] {
        let (code, r, out) = load_json(test, &["--rate", "100", "-d", "2s", flag, value, &url]);
        assert_eq!(code, 0, "{}", String::from_utf8_lossy(&out.stderr));
        let s = step(&r, 0, 0);
        let cpu = f(&s["cpu_percent"]);
        let rss = f(&s["rss_mb"]);
        assert!(cpu > 5.0, "a busy child shows CPU: {s}");
        assert!(rss >= 60.0, "64 MiB held: {s}");
        assert!(f(&s["rss_mb_peak"]) >= rss);
        assert!(f(&s["cpu_percent_peak"]) >= cpu * 0.5);
    }
}

#[test]
fn bad_input_is_one_line_and_exit_2() {
    let server = Server::start(|_, _| Reply::ok());
    let ok = server.url();
    let closed_port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let dead = format!("http://127.0.0.1:{closed_port}/");
    let dir = scratch("bad");
    let empty = dir.join("empty.txt");
    std::fs::write(&empty, "").unwrap();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (vec![dead.clone()], "unreachable"),
        (vec![format!("{ok}/v1/{{id")], "{"),
        (vec![format!("{ok}/v1/{{id}}")], "id"),
        (
            vec![
                "--data".into(),
                "/nonexistent/ids.txt".into(),
                format!("{ok}/{{id}}"),
            ],
            "/nonexistent/ids.txt",
        ),
        (
            vec![
                "--data".into(),
                empty.to_str().unwrap().into(),
                format!("{ok}/{{id}}"),
            ],
            "no values",
        ),
        (vec!["--slo".into(), "p98<5ms".into(), ok.clone()], "SLO"),
        (vec!["--slo".into(), "p99<5".into(), ok.clone()], "SLO"),
        (vec!["-d".into(), "10x".into(), ok.clone()], "duration"),
        (
            vec!["--timeout".into(), "soon".into(), ok.clone()],
            "--timeout",
        ),
        (vec!["--ramp".into(), "10,0,5".into(), ok.clone()], "--ramp"),
        (vec!["--rate".into(), "0".into(), ok.clone()], "--rate"),
        (
            vec![
                "--rate".into(),
                "100".into(),
                "--step-duration".into(),
                "1s".into(),
                ok.clone(),
            ],
            "--step-duration",
        ),
        (vec!["https://127.0.0.1:1/".into()], "unreachable"),
        (vec!["ftp://x/".into()], "http[s]://"),
        // TLS and HTTP/2 flags (#12): refused before any load, never ignored.
        (
            vec!["--streams".into(), "4".into(), ok.clone()],
            "--streams applies to HTTP/2",
        ),
        (
            vec!["--http2".into(), "--no-reuse".into(), ok.clone()],
            "--no-reuse",
        ),
        (vec!["--insecure".into(), ok.clone()], "https://"),
        (
            vec!["--cacert".into(), "/nonexistent/ca.pem".into(), ok.clone()],
            "https://",
        ),
        (
            vec![
                "--cacert".into(),
                "/nonexistent/ca.pem".into(),
                "https://127.0.0.1:1/".into(),
            ],
            "cannot use CA file /nonexistent/ca.pem",
        ),
        (
            vec!["--resolve".into(), "localhost:443".into(), ok.clone()],
            "HOST:PORT:ADDR",
        ),
        (vec!["-c".into(), "0".into(), ok.clone()], "connections"),
        (vec!["-c".into(), "many".into(), ok.clone()], "many"),
        (
            vec!["--watch-port".into(), closed_port.to_string(), ok.clone()],
            "listening",
        ),
        (
            vec!["--watch-pid".into(), "999999999".into(), ok.clone()],
            "999999999",
        ),
        (vec!["--target".into(), "a".into()], "NAME=BASE_URL"),
        (vec!["--no-such-flag".into(), ok.clone()], "--no-such-flag"),
        (vec![], "URL"),
    ];
    for (args, mention) in cases {
        let mut all = vec!["load", "--no-progress"];
        all.extend(args.iter().map(String::as_str));
        assert_one_line_usage_error(&all, mention);
    }
    // Nothing was sent to the good server (a probe only connects).
    assert_eq!(server.received(), 0);
}

#[test]
fn progress_line_is_printed_when_asked() {
    let server = Server::start(|_, _| Reply::ok());
    let out = scalpel(&[
        "load",
        "--progress",
        "--rate",
        "50",
        "-d",
        "2s",
        &server.url(),
    ]);
    assert_eq!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("req/s") && err.contains("left"), "{err}");
    let quiet = scalpel(&["load", "--no-progress", "-n", "10", &server.url()]);
    assert!(
        quiet.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&quiet.stderr)
    );
}

#[test]
fn json_histograms_are_real_hdrhistograms() {
    let server = Server::start(|_, _| Reply::ok());
    let dir = scratch("html");
    let html = dir.join("r.html");
    let (code, r, _) = load_json(
        "hist",
        &[
            "-n",
            "321",
            "-c",
            "2",
            "--html",
            html.to_str().unwrap(),
            &server.url(),
        ],
    );
    assert_eq!(code, 0);
    let s = step(&r, 0, 0);
    let h = scalpel_load::result::decode_histogram(s["histogram"].as_str().unwrap()).unwrap();
    assert_eq!(h.len(), 321);
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(
        page.contains("<svg") || page.contains("<html"),
        "an HTML page"
    );
}

// ---------------------------------------------------------------------------------------
// Failure modes (issues #11 and #18): each test names what broke.

/// A `scalpel load` still running, its stderr read line by line on a thread.
struct Running {
    child: Child,
    lines: std::sync::mpsc::Receiver<String>,
    stderr: Arc<Mutex<String>>,
}

impl Running {
    fn start(args: &[&str]) -> Running {
        Running::start_with(Command::new(env!("CARGO_BIN_EXE_scalpel")).args(args))
    }

    fn start_with(command: &mut Command) -> Running {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the scalpel binary runs");
        let (tx, lines) = std::sync::mpsc::channel();
        let stderr = Arc::new(Mutex::new(String::new()));
        let all = stderr.clone();
        let pipe = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                all.lock().unwrap().push_str(&line);
                all.lock().unwrap().push('\n');
                let _ = tx.send(line);
            }
        });
        Running {
            child,
            lines,
            stderr,
        }
    }

    /// Waits for a stderr line containing `text` (a deadline only turns a hang into a
    /// failure).
    fn wait_for(&self, text: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Ok(line) = self.lines.recv_timeout(Duration::from_millis(200))
                && line.contains(text)
            {
                return;
            }
        }
        panic!(
            "no line with {text:?} on stderr: {}",
            self.stderr.lock().unwrap()
        );
    }

    fn signal(&self, name: &str) {
        signal(self.child.id(), name);
    }

    /// Exit code, stdout, stderr.
    fn finish(mut self) -> (i32, String, String) {
        assert!(
            scalpel_testkit::wait_exit(&mut self.child, Duration::from_secs(120)).is_some(),
            "scalpel hung"
        );
        let mut stdout = String::new();
        self.child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut stdout)
            .unwrap();
        let code = self.child.wait().unwrap().code().unwrap_or(-1);
        // Let the reader thread drain the pipe.
        std::thread::sleep(Duration::from_millis(100));
        let stderr = self.stderr.lock().unwrap().clone();
        (code, stdout, stderr)
    }
}

#[test]
fn a_target_that_stops_answering_breaks_a_latency_slo() {
    let server = Server::start(|n, _| Reply {
        // Two are answered; then nothing, for longer than any time-out.
        delay: (n >= 2).then_some(Duration::from_secs(20)),
        ..Reply::ok()
    });
    let (code, r, out) = load_json(
        "stops-answering",
        &[
            "--ramp",
            "50,50,100",
            "--step-duration",
            "2s",
            "--timeout",
            "300ms",
            "--slo",
            "p99<50ms",
            &server.url(),
        ],
    );
    let table = String::from_utf8_lossy(&out.stdout);
    assert_eq!(code, 1, "the SLO broke: exit 1\n{table}");
    let t = &r["targets"][0];
    let s = &t["steps"][0];
    assert_eq!(s["slo_held"], Value::Bool(false), "{s}");
    // Sent, answered and failed apart; every sent request is in the latency picture, the
    // time-outs at the moment they failed.
    let (sent, answered, failed) = (u(&s["sent"]), u(&s["answered"]), u(&s["failed"]));
    assert_eq!(sent, answered + failed, "{s}");
    assert!(answered <= 2 && failed >= 50, "{s}");
    let h = scalpel_load::result::decode_histogram(s["histogram"].as_str().unwrap()).unwrap();
    assert_eq!(h.len(), sent, "time-outs are in the histogram");
    assert!(f(&s["latency_ms"]["max"]) >= 290.0, "{s}");
    // The table says why, and shows the three counts.
    let reason = t["breaking_point"]["reason"].as_str().unwrap();
    assert!(reason.starts_with("p99 "), "{reason}");
    assert!(table.contains("broke: p99"), "{table}");
    for row in ["sent", "answered", "no answer"] {
        assert!(table.lines().any(|l| l.starts_with(row)), "{row}: {table}");
    }
    // No rate held: the breaking point is below the first step, never a rate.
    assert_eq!(f(&t["breaking_point"]["rps"]), 0.0);
    assert!(table.contains("< 50.0 rps"), "{table}");
}

/// #11.7: a keep-alive connection the server closed while idle was reused, and the
/// request counted as an error instead of going out on a new connection.
#[test]
fn a_keep_alive_connection_closed_while_idle_is_replaced_not_an_error() {
    // A server that closes a connection idle for 100 ms (its keep-alive time-out).
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let connections = Arc::new(AtomicU64::new(0));
    let count = connections.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            count.fetch_add(1, Ordering::SeqCst);
            std::thread::spawn(move || {
                let _ = stream.set_nodelay(true);
                let _ = stream.set_read_timeout(Some(Duration::from_millis(100)));
                let mut writer = stream.try_clone().unwrap();
                let mut reader = BufReader::new(stream);
                loop {
                    let mut head = String::new();
                    loop {
                        let mut line = String::new();
                        match reader.read_line(&mut line) {
                            Ok(0) | Err(_) => return, // idle too long, or gone: close
                            Ok(_) if line == "\r\n" => break,
                            Ok(_) => head.push_str(&line),
                        }
                    }
                    let body = "idle test\n";
                    let reply = format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if writer.write_all(reply.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    let url = format!("http://127.0.0.1:{port}/");
    // One connection, a request every 500 ms: each finds its connection closed by then.
    let (code, r, out) = load_json(
        "idle-close",
        &[
            "--rate",
            "2",
            "-d",
            "3s",
            "-c",
            "1",
            "--max-in-flight",
            "1",
            "--threads",
            "1",
            &url,
        ],
    );
    assert_eq!(code, 0, "{}", String::from_utf8_lossy(&out.stderr));
    let s = step(&r, 0, 0);
    assert_eq!(u(&s["requests"]), 6, "{s}");
    assert_eq!(u(&s["errors"]), 0, "{s}");
    assert!(
        connections.load(Ordering::SeqCst) >= 4,
        "new connections were opened"
    );
}

/// #18.1: SIGINT in the third step of a ramp exited 130 with nothing printed and no
/// `--json` file, though two steps had finished.
#[test]
fn an_interrupt_mid_ramp_reports_the_finished_steps_and_the_partial_one() {
    let server = Server::start(|_, _| Reply::ok());
    let dir = scratch("sigint");
    let (json, html) = (dir.join("r.json"), dir.join("r.html"));
    let run = Running::start(&[
        "load",
        "--progress",
        "--ramp",
        "20,20,100",
        "--step-duration",
        "3s",
        "--slo",
        "errors<1%",
        "--json",
        json.to_str().unwrap(),
        "--html",
        html.to_str().unwrap(),
        &server.url(),
    ]);
    run.wait_for("step 3/5");
    run.signal("INT");
    let (code, stdout, stderr) = run.finish();
    assert_eq!(code, 130, "{stderr}");
    // The table is printed: two whole steps and the third, marked partial.
    assert!(
        stdout.contains("step 1 of 3") && stdout.contains("step 3 of 3"),
        "{stdout}"
    );
    assert!(
        stdout.contains("partial, the run was interrupted"),
        "{stdout}"
    );
    assert!(stdout.contains("INTERRUPTED"), "{stdout}");
    let r = read_json(&json);
    assert_eq!(r["interrupted"], Value::Bool(true));
    let steps = r["targets"][0]["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 3, "{r}");
    for s in &steps[..2] {
        assert_eq!(s["partial"], Value::Bool(false));
        assert_eq!(s["slo_held"], Value::Bool(true));
    }
    assert_eq!(steps[2]["partial"], Value::Bool(true));
    assert!(
        steps[2]["slo_held"].is_null(),
        "a partial step has no verdict"
    );
    assert!(u(&steps[2]["requests"]) > 0);
    assert!(r["targets"][0]["breaking_point"].is_null());
    assert!(
        std::fs::read_to_string(&html)
            .unwrap()
            .contains("INTERRUPTED")
    );
}

/// #18.2: `--json /nonexistent/x.json` ran the whole duration, then exited 2 without
/// printing the table.
#[test]
fn a_bad_output_path_is_refused_before_any_load() {
    let server = Server::start(|_, _| Reply::ok());
    for flag in ["--json", "--html"] {
        assert_one_line_usage_error(
            &[
                "load",
                "--no-progress",
                "-d",
                "30s",
                flag,
                "/nonexistent/x.out",
                &server.url(),
            ],
            "/nonexistent",
        );
    }
    assert_eq!(server.received(), 0, "not even the probe was sent");
}

/// #18.2: a write that fails at the end (the directory went away during the run) still
/// leaves the table on stdout, and says what was lost.
#[test]
fn a_write_failure_at_the_end_still_prints_the_table() {
    let server = Server::start(|_, _| Reply::ok());
    let dir = scratch("write-fails").join("gone");
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("r.json");
    let run = Running::start(&[
        "load",
        "--progress",
        "--rate",
        "20",
        "-d",
        "3s",
        "--json",
        json.to_str().unwrap(),
        &server.url(),
    ]);
    run.wait_for("req/s");
    std::fs::remove_dir_all(&dir).unwrap();
    let (code, stdout, stderr) = run.finish();
    assert_eq!(code, 2, "{stderr}");
    assert!(stdout.contains("achieved rps"), "the table: {stdout}");
    assert!(stderr.contains("cannot write"), "{stderr}");
}

/// #18.3: `--rate 1e10 -d 1s` ran for 31–56 s and reported the generator's collapse as the
/// target's rate. A rate above what one generator can schedule is refused.
#[test]
fn an_absurd_rate_is_refused_with_one_line() {
    let server = Server::start(|_, _| Reply::ok());
    for args in [
        vec!["--rate", "1e10"],
        vec!["--ramp", "1000,1000000,20000000"],
    ] {
        let mut all = vec!["load", "--no-progress", "-d", "1s"];
        if args[0] == "--ramp" {
            all = vec!["load", "--no-progress", "--step-duration", "1s"];
        }
        all.extend(&args);
        let url = server.url();
        all.push(&url);
        assert_one_line_usage_error(&all, "more than one load generator can schedule");
    }
}

/// #18.4: nginx killed after 1 s of `-c 4 -d 3s` gave 4.8% errors and "SLO held": failed
/// connects were paced at 1 ms while answers took 50 µs. Also #18.8: the dead target's
/// PSS read 0.0 instead of "-".
#[test]
fn a_target_that_dies_during_a_closed_run_shows_its_downtime() {
    let mut target = start_child_server_kind("plain");
    let url = format!("http://127.0.0.1:{}/", target.port);
    let pid = target.child.id().to_string();
    let dir = scratch("dies");
    let json = dir.join("r.json");
    let run = Running::start(&[
        "load",
        "--progress",
        "-c",
        "4",
        "-d",
        "4s",
        "--slo",
        "errors<10%",
        "--watch-pid",
        &pid,
        "--json",
        json.to_str().unwrap(),
        &url,
    ]);
    run.wait_for("req/s");
    // Down for the rest of the run (most of it).
    target.child.kill().unwrap();
    target.child.wait().unwrap();
    let (code, stdout, stderr) = run.finish();
    assert_eq!(code, 1, "a dead target fails errors<10%: {stdout}{stderr}");
    let r = read_json(&json);
    let s = step(&r, 0, 0);
    let share = f(&s["errors"]) / f(&s["requests"]);
    assert!(share > 0.3, "errors reflect the downtime: {share} {s}");
    assert!(u(&s["error_kinds"]["connect"]) > 0, "{s}");
    // PSS of a tree that exited is not measured, not 0.
    assert!(s["pss_mb"].is_null(), "{s}");
    assert!(!stdout.contains("PSS MiB mean         0.0"), "{stdout}");
    // The closed model offers no rate: no "breaking point" of 0.0 rps.
    assert!(r["targets"][0]["breaking_point"]["rps"].is_null());
    let bp = stdout
        .lines()
        .skip_while(|l| !l.starts_with("breaking point"))
        .nth(1)
        .unwrap();
    assert!(!bp.contains("rps"), "{bp}");
    assert!(bp.contains("broke: errors"), "{bp}");
}

/// #18.5: with `ulimit -n 20000`, `-c 30000` gave the generator's own EMFILE as the
/// target's connect errors. The soft limit is raised up to the hard one; what still does
/// not fit is refused.
#[test]
fn connections_beyond_the_descriptor_limit_are_refused_or_fitted() {
    let server = Server::start(|_, _| Reply::ok());
    let bin = env!("CARGO_BIN_EXE_scalpel");
    let url = server.url();
    // Hard limit 200: 1000 connections cannot fit.
    let out = Command::new("sh")
        .args([
            "-c",
            &format!("ulimit -n 200 && exec {bin} load --no-progress -c 1000 -n 10 {url}"),
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("open files") && err.contains("-c 1000"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    // Soft limit 100, hard limit higher: raised, and 150 connections work.
    let out = Command::new("sh")
        .args([
            "-c",
            &format!("ulimit -S -n 100 && exec {bin} load --no-progress -c 150 -n 600 {url}"),
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let errors = |l: &str| l.split_whitespace().collect::<Vec<_>>() == ["errors", "0"];
    assert!(text.lines().any(errors), "no errors: {text}");
}

/// #18.5: descriptors the generator runs out of anyway (here, taken by inherited files)
/// are its own errors, `local:EMFILE`, counted as not sent — never the target's.
#[test]
fn the_generators_own_errors_are_not_the_targets() {
    let server = Server::start(|_, _| Reply::ok());
    let bin = env!("CARGO_BIN_EXE_scalpel");
    let dir = scratch("emfile");
    let json = dir.join("r.json");
    // 120 descriptors, 60 of them taken by files the shell opens before exec.
    let script = format!(
        "ulimit -n 120 && for i in $(seq 3 62); do eval \"exec $i</dev/null\"; done && \
         exec {bin} load --no-progress -c 50 -d 2s --json {} {}",
        json.display(),
        server.url()
    );
    let out = Command::new("bash").args(["-c", &script]).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = read_json(&json);
    let s = step(&r, 0, 0);
    let local = u(&s["error_kinds"]["local:EMFILE"]);
    assert!(local > 0, "{s}");
    assert_eq!(u(&s["errors"]), 0, "the target made no error: {s}");
    assert!(u(&s["not_sent"]) >= local, "{s}");
    assert!(s["error_kinds"].get("connect").is_none(), "{s}");
}

/// #18.7: any response with 64 or more header lines failed every request. Limits are in
/// bytes: 100 headers pass, a head over 64 KiB does not.
#[test]
fn response_headers_are_limited_by_bytes_not_by_count() {
    let many = Server::start(|_, _| Reply {
        extra_headers: 100,
        ..Reply::ok()
    });
    let (code, r, out) = load_json("headers", &["-c", "2", "-n", "50", &many.url()]);
    assert_eq!(code, 0, "{}", String::from_utf8_lossy(&out.stderr));
    let s = step(&r, 0, 0);
    assert_eq!((u(&s["answered"]), u(&s["errors"])), (50, 0), "{s}");
    // 80 headers of 1 KiB: a 80 KiB head is refused, every time, counted by kind (the probe
    // only connects, so it is the run that finds it).
    let huge = Server::start(|_, _| Reply {
        extra_headers: 80,
        filler_len: 1024,
        ..Reply::ok()
    });
    let (code, r, out) = load_json("huge-head", &["-c", "1", "-n", "5", &huge.url()]);
    assert_eq!(code, 0, "{}", String::from_utf8_lossy(&out.stderr));
    let s = step(&r, 0, 0);
    assert_eq!((u(&s["answered"]), u(&s["failed"])), (0, 5), "{s}");
    let kinds: Vec<&String> = s["error_kinds"].as_object().unwrap().keys().collect();
    assert_eq!(kinds, ["too_large"], "{s}");
    assert_eq!(huge.received(), 5);
}

/// #18.8: `--ramp … -n 5` showed an achieved rate above the offered one; result files were
/// created 0600; an SLO that breaks in the closed model printed a breaking point of 0.0 rps.
#[test]
fn small_figures_are_honest_and_files_are_readable() {
    let server = Server::start(|_, _| Reply::ok());
    let dir = scratch("small");
    let (json, html) = (dir.join("r.json"), dir.join("r.html"));
    let bin = env!("CARGO_BIN_EXE_scalpel");
    let out = Command::new("sh")
        .args([
            "-c",
            &format!(
                "umask 022 && exec {bin} load --no-progress --ramp 50,50,150 -n 5 --json {} --html {} {}",
                json.display(),
                html.display(),
                server.url()
            ),
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = read_json(&json);
    for s in r["targets"][0]["steps"].as_array().unwrap() {
        assert!(
            f(&s["achieved_rps"]) <= f(&s["offered_rps"]) * 1.0001,
            "achieved above offered: {s}"
        );
    }
    use std::os::unix::fs::PermissionsExt as _;
    for path in [&json, &html] {
        let mode = std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o644, "{}", path.display());
    }
    // Closed model, an SLO that cannot hold: no breaking point "0.0 rps".
    let out = scalpel(&[
        "load",
        "--no-progress",
        "-n",
        "20",
        "--slo",
        "p50<1us",
        &server.url(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let table = String::from_utf8_lossy(&out.stdout);
    let bp = table
        .lines()
        .skip_while(|l| !l.starts_with("breaking point"))
        .nth(1)
        .unwrap();
    assert!(!bp.contains("0.0 rps") && bp.contains("broke: p50"), "{bp}");
}
