//! Real traffic as `scalpel load`'s input (issue #15): a mix of endpoints (`--mix`) and
//! recorded traffic (`--from`), run as a user runs them — the real binary against recording
//! HTTP/1.1 servers on loopback (raw TCP, a thread per connection, every request stored in
//! the order it arrived), and an access log written by a real nginx.
//!
//! No timed assertions: latency bounds are lower bounds caused by the servers' own sleeps,
//! and every run has a deadline only to turn a hang into a failure.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use scalpel_testkit::peers::{Peer, nginx_in};
use scalpel_testkit::raw::{RawRequest, serve_requests};
use scalpel_testkit::{scalpel, scratch};
use serde_json::Value;

use crate::util::{load_json_in as load_json, stderr, stdout, u};

// ---------------------------------------------------------------------------------------
// A recording server

/// One request as the server saw it.
type Seen = RawRequest;

/// The status and delay of the answer to a request.
type Handler = dyn Fn(&Seen) -> (u16, Duration) + Send + Sync;

struct Server {
    port: u16,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Server {
    fn start(handler: impl Fn(&Seen) -> (u16, Duration) + Send + Sync + 'static) -> Server {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let handler: Arc<Handler> = Arc::new(handler);
        let s = seen.clone();
        let port = serve_requests(move |req, writer| {
            s.lock().unwrap().push(req.clone());
            let (status, delay) = handler(req);
            std::thread::sleep(delay);
            let out = format!("HTTP/1.1 {status} X\r\nContent-Length: 3\r\n\r\nok\n");
            writer.write_all(out.as_bytes()).is_ok()
        });
        Server { port, seen }
    }

    fn ok() -> Server {
        Server::start(|_| (200, Duration::ZERO))
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    fn lines(&self) -> Vec<String> {
        self.seen()
            .iter()
            .map(|s| format!("{} {}", s.method, s.path))
            .collect()
    }
}

// ---------------------------------------------------------------------------------------
// Running the binary

// ---------------------------------------------------------------------------------------
// A mix of endpoints

const MIX: &str = r#"
[[request]]
name = "balance"
path = "/v1/accounts/{id}/balance"
headers = { Accept = "application/json" }
weight = 6

[[request]]
name = "stats"
path = "/v1/users/{id}/stats?days=30"
weight = 3

[[request]]
name = "transfer"
method = "POST"
path = "/v1/transfers"
headers = { "Content-Type" = "application/json" }
body = '{{"to": "{id}"}}'
weight = 1
"#;

fn write_mix(dir: &Path) -> (String, String) {
    let mix = dir.join("mix.toml");
    std::fs::write(&mix, MIX).unwrap();
    let ids = dir.join("ids.txt");
    let lines: Vec<String> = (1..=50).map(|i| format!("u{i}")).collect();
    std::fs::write(&ids, lines.join("\n")).unwrap();
    (
        mix.to_str().unwrap().to_owned(),
        ids.to_str().unwrap().to_owned(),
    )
}

/// The endpoint a path belongs to.
fn endpoint_of(seen: &Seen) -> &'static str {
    if seen.path.starts_with("/v1/accounts/") {
        "balance"
    } else if seen.path.starts_with("/v1/users/") {
        "stats"
    } else {
        "transfer"
    }
}

#[test]
fn a_mix_has_every_figure_per_endpoint_and_in_total() {
    let dir = scratch("mix-figures");
    let (mix, ids) = write_mix(&dir);
    // stats always fails with a 503; the others answer 200.
    let server = Server::start(|s| match endpoint_of(s) {
        "stats" => (503, Duration::ZERO),
        _ => (200, Duration::ZERO),
    });
    let (code, json, out) = load_json(
        &dir,
        "r",
        &[
            "--mix",
            &mix,
            "--data",
            &ids,
            "--rate",
            "400",
            "-n",
            "400",
            &server.url(),
        ],
    );
    assert_eq!(code, 0, "no SLO: exit 0; {}", stderr(&out));
    let step = &json["targets"][0]["steps"][0];
    let endpoints = step["endpoints"].as_array().expect("endpoints[]");
    let names: Vec<&str> = endpoints
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["balance", "stats", "transfer"], "the mix's order");
    let step_keys: Vec<&String> = step["latency_ms"].as_object().unwrap().keys().collect();
    // What the server saw, by endpoint: the run's 400 requests (the probe sends none).
    let seen = server.seen();
    assert_eq!(seen.len(), 400, "the run's requests, no more");
    let count = |name: &str| seen.iter().filter(|s| endpoint_of(s) == name).count() as u64;
    let mut total = 0;
    for e in endpoints {
        let name = e["name"].as_str().unwrap();
        for key in ["requests", "errors", "achieved_rps", "latency_ms"] {
            assert!(e.get(key).is_some(), "endpoint {name} has `{key}`: {e}");
        }
        let keys: Vec<&String> = e["latency_ms"].as_object().unwrap().keys().collect();
        assert_eq!(keys, step_keys, "the same latency keys as the step's");
        assert_eq!(
            u(&e["requests"]),
            count(name),
            "{name}: what the server got"
        );
        let errors = if name == "stats" { count(name) } else { 0 };
        assert_eq!(u(&e["errors"]), errors, "{name}: errors");
        if name == "stats" {
            assert_eq!(u(&e["error_kinds"]["status_503"]), errors);
        }
        assert!(e["achieved_rps"].as_f64().unwrap() > 0.0, "{name}");
        assert!(!e["histogram"].as_str().unwrap().is_empty(), "{name}");
        total += u(&e["requests"]);
    }
    assert_eq!(
        total,
        u(&step["requests"]),
        "the endpoints add up to the step"
    );
    let rps: f64 = endpoints
        .iter()
        .map(|e| e["achieved_rps"].as_f64().unwrap())
        .sum();
    assert!(
        (rps - step["achieved_rps"].as_f64().unwrap()).abs() < 1e-6,
        "rates add up: {rps} vs {}",
        step["achieved_rps"]
    );
    // The weights show (6:3:1 over 400 picks).
    assert!(count("balance") > count("stats") && count("stats") > count("transfer"));
    // POST bodies and headers came from the mix's templates.
    let transfer = seen.iter().find(|s| endpoint_of(s) == "transfer").unwrap();
    assert_eq!(transfer.method, "POST");
    assert!(String::from_utf8_lossy(&transfer.body).starts_with("{\"to\": \"u"));
    assert_eq!(transfer.header("content-type"), Some("application/json"));

    // The table has a block per endpoint, and the HTML a table per endpoint.
    let table = stdout(&out);
    for name in ["balance", "stats", "transfer"] {
        assert!(table.contains(&format!("endpoint {name}")), "{table}");
    }
    let html = dir.join("r.html");
    let shown = scalpel(&[
        "report",
        "html",
        dir.join("r.json").to_str().unwrap(),
        "-o",
        html.to_str().unwrap(),
    ]);
    assert!(shown.status.success(), "{}", stderr(&shown));
    let page = std::fs::read_to_string(&html).unwrap();
    for name in ["balance", "stats", "transfer"] {
        assert!(
            page.contains(&format!("endpoint {name}</h4>")),
            "{name} in the page"
        );
    }
}

#[test]
fn every_target_gets_the_same_seeded_sequence_of_endpoints() {
    let dir = scratch("mix-same");
    let (mix, ids) = write_mix(&dir);
    let (a, b) = (Server::ok(), Server::ok());
    let args = |seed: &'static str| {
        vec![
            "load".to_owned(),
            "--no-progress".into(),
            "--mix".into(),
            mix.clone(),
            "--mix-seed".into(),
            seed.into(),
            "--data".into(),
            ids.clone(),
            // One connection, one round: each server sees the requests in index order.
            "-c".into(),
            "1".into(),
            "--rounds".into(),
            "1".into(),
            "-n".into(),
            "300".into(),
            "--target".into(),
            format!("a={}", a.url()),
            "--target".into(),
            format!("b={}", b.url()),
        ]
    };
    let run = |seed| {
        let args = args(seed);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = scalpel(&args);
        assert!(out.status.success(), "{}", stderr(&out));
    };
    run("7");
    let (seq_a, seq_b) = (a.lines(), b.lines());
    assert_eq!(seq_a.len(), 300, "the run's requests, no more");
    assert_eq!(seq_a, seq_b, "A and B get the very same sequence");
    // It is the sequence the library's seeded picks give.
    let parsed = scalpel_requests::Mix::from_path(
        Path::new(&mix),
        Some(scalpel_requests::DataSet::from_path(Path::new(&ids)).unwrap()),
        scalpel_requests::Order::Sequential,
        7,
    )
    .unwrap();
    let expected: Vec<String> = (0..300)
        .map(|i| {
            let (_, r) = parsed.render(i);
            format!("{} {}", r.method, r.path_and_query)
        })
        .collect();
    assert_eq!(seq_a, expected, "request i is the seeded pick i");
    // Another seed, another sequence (and again the same for both).
    run("8");
    let (more_a, more_b) = (a.lines()[300..].to_vec(), b.lines()[300..].to_vec());
    assert_eq!(more_a, more_b);
    assert_ne!(more_a, seq_a);
}

#[test]
fn an_slo_may_name_one_endpoint() {
    let dir = scratch("mix-slo");
    let (mix, ids) = write_mix(&dir);
    // stats takes at least 30 ms; the others answer at once.
    let server = Server::start(|s| match endpoint_of(s) {
        "stats" => (200, Duration::from_millis(30)),
        _ => (200, Duration::ZERO),
    });
    let run = |slo: &str| {
        load_json(
            &dir,
            "slo",
            &[
                "--mix",
                &mix,
                "--data",
                &ids,
                "-c",
                "4",
                "-n",
                "120",
                "--slo",
                slo,
                &server.url(),
            ],
        )
    };
    let (code, json, out) = run("stats:p99<10ms,errors<1%");
    assert_eq!(code, 1, "stats is slower than 10 ms; {}", stderr(&out));
    let reason = json["targets"][0]["steps"][0]["slo_reason"]
        .as_str()
        .unwrap();
    assert!(reason.starts_with("stats: p99 "), "{reason}");
    assert!(
        stdout(&out).contains("SLO broke: stats: p99"),
        "{}",
        stdout(&out)
    );
    // The same limit on an endpoint that answers at once holds.
    let (code, json, out) = run("balance:p99<10s,transfer:errors<1%");
    assert_eq!(code, 0, "{}", stdout(&out));
    assert_eq!(json["targets"][0]["steps"][0]["slo_held"], true);

    // Naming an endpoint the mix does not have, one of weight 0, or any without a mix:
    // one line, exit 2, before any load.
    std::fs::write(
        dir.join("zero.toml"),
        "[[request]]\nname = \"a\"\npath = \"/a\"\n[[request]]\nname = \"off\"\npath = \"/off\"\nweight = 0\n",
    )
    .unwrap();
    let zero = dir.join("zero.toml");
    for (args, says) in [
        (
            vec!["--mix", &mix, "--data", &ids, "--slo", "nope:p99<1s"],
            "--slo names the endpoint `nope`, which is not in",
        ),
        (
            vec!["--mix", zero.to_str().unwrap(), "--slo", "off:p99<1s"],
            "whose weight in",
        ),
        (
            vec!["--slo", "stats:p99<1s"],
            "--slo names the endpoint `stats`, but there is no --mix",
        ),
    ] {
        let before = server.seen().len();
        let url = server.url();
        let mut all = vec!["load", "-n", "5"];
        all.extend(args);
        all.push(&url);
        let out = scalpel(&all);
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        let err = stderr(&out);
        assert!(err.contains(says), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert_eq!(server.seen().len(), before, "nothing was sent");
    }
}

#[test]
fn report_merge_merges_endpoints_exactly() {
    let dir = scratch("mix-merge");
    let (mix, ids) = write_mix(&dir);
    let server = Server::start(|s| match endpoint_of(s) {
        "stats" => (200, Duration::from_millis(2)),
        _ => (200, Duration::ZERO),
    });
    let args = ["--mix", &mix, "--data", &ids, "-c", "2", "-n", "150"];
    let (a, ja, _) = load_json(&dir, "a", &[&args[..], &[&server.url()]].concat());
    let (b, jb, _) = load_json(&dir, "b", &[&args[..], &[&server.url()]].concat());
    assert_eq!((a, b), (0, 0));
    let merged = dir.join("merged.json");
    let out = scalpel(&[
        "report",
        "merge",
        dir.join("a.json").to_str().unwrap(),
        dir.join("b.json").to_str().unwrap(),
        "-o",
        merged.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let m: Value = serde_json::from_str(&std::fs::read_to_string(&merged).unwrap()).unwrap();
    let ep = |j: &Value, k: usize| j["targets"][0]["steps"][0]["endpoints"][k].clone();
    for k in 0..3 {
        let (x, y, z) = (ep(&ja, k), ep(&jb, k), ep(&m, k));
        assert_eq!(z["name"], x["name"]);
        for key in ["requests", "sent", "answered", "errors", "not_sent"] {
            assert_eq!(u(&z[key]), u(&x[key]) + u(&y[key]), "{} {key}", z["name"]);
        }
        // The histograms were added, not the percentiles averaged.
        let decode = |v: &Value| {
            scalpel_load::result::decode_histogram(v["histogram"].as_str().unwrap()).unwrap()
        };
        let mut sum = decode(&x);
        sum.add(decode(&y)).unwrap();
        let merged_h = decode(&z);
        assert_eq!(merged_h.len(), sum.len());
        let p99 = sum.value_at_quantile(0.99) as f64 / 1000.0;
        assert_eq!(
            z["latency_ms"]["p99"].as_f64().unwrap(),
            p99,
            "{}",
            z["name"]
        );
    }
}

// ---------------------------------------------------------------------------------------
// Recorded traffic

/// nginx on a free loopback port writing a combined access log to `dir/access.log`.
fn start_nginx(dir: &Path) -> (Peer, u16) {
    let nginx = nginx_in(dir, 1, |ports, d| {
        format!(
            "    access_log {}/access.log combined;\n    server {{\n        listen 127.0.0.1:{};\n        location / {{ return 200 \"ok\\n\"; }}\n    }}\n",
            d.display(),
            ports[0]
        )
    });
    let port = nginx.ports[0];
    (nginx, port)
}

/// Sends one request on a new connection (as curl would) and reads the answer.
fn send(port: u16, method: &str, path: &str) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let body = if method == "POST" { "{\"a\":1}" } else { "" };
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: shop.example\r\nUser-Agent: test/1\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut sink = Vec::new();
    let _ = s.read_to_end(&mut sink);
}

fn wait_for_lines(path: &Path, lines: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read(path).unwrap_or_default();
        if text.iter().filter(|&&b| b == b'\n').count() >= lines {
            return;
        }
        assert!(Instant::now() < deadline, "nginx did not log {lines} lines");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn an_nginx_access_log_is_replayed_in_its_recorded_order() {
    let dir = scratch("nginx-replay");
    let (nginx, port) = start_nginx(&dir);
    // A sequence over about three seconds, with unsafe methods among the reads.
    let sent: Vec<(&str, &str)> = vec![
        ("GET", "/"),
        ("GET", "/v1/users/42/stats?days=30"),
        ("POST", "/v1/transfers"),
        ("HEAD", "/health"),
        ("GET", "/v1/accounts/7/balance?currency=EUR"),
        ("GET", "/search?q=a%20b&page=2"),
        ("DELETE", "/v1/items/9"),
        ("GET", "/v1/users/43/stats?days=7"),
        ("GET", "/static/app.js"),
    ];
    for (i, (method, path)) in sent.iter().enumerate() {
        send(port, method, path);
        if i % 3 == 2 {
            std::thread::sleep(Duration::from_millis(1100));
        }
    }
    let log = dir.join("access.log");
    wait_for_lines(&log, sent.len());
    drop(nginx);
    // Six lines nginx never wrote, at known line numbers after its own.
    let mut text = std::fs::read_to_string(&log).unwrap();
    for i in 0..6 {
        text.push_str(&format!("garbage line {i}\n"));
    }
    std::fs::write(&log, text).unwrap();
    let malformed_from = sent.len() as u64 + 1;

    // Replayed ten times faster against a recording server, one connection so that what
    // arrives is in the order sent.
    let server = Server::ok();
    let (code, json, out) = load_json(
        &dir,
        "replay",
        &[
            "--from",
            log.to_str().unwrap(),
            "--speed",
            "10",
            "--max-in-flight",
            "1",
            &server.url(),
        ],
    );
    assert_eq!(code, 0, "{}", stderr(&out));
    let safe: Vec<String> = sent
        .iter()
        .filter(|(m, _)| matches!(*m, "GET" | "HEAD"))
        .map(|(m, p)| format!("{m} {p}"))
        .collect();
    assert_eq!(
        server.lines(),
        safe,
        "what the server saw is the recorded sequence"
    );
    // The recorded headers came along; the recorded host did not.
    let first = &server.seen()[0];
    assert_eq!(first.header("user-agent"), Some("test/1"));
    assert_eq!(
        first.header("host"),
        Some(format!("127.0.0.1:{}", server.port).as_str())
    );
    // What was skipped and why, with the first five malformed lines and their numbers.
    let recorded = &json["config"]["recorded"];
    assert_eq!(recorded["format"], "access-log");
    assert_eq!(recorded["schedule"], "recorded");
    assert_eq!(recorded["speed"], 10.0);
    assert_eq!(u(&recorded["usable"]), safe.len() as u64);
    assert_eq!(u(&recorded["skipped"]["unsafe_method"]), 2);
    assert_eq!(u(&recorded["skipped"]["malformed"]), 6);
    let lines: Vec<u64> = recorded["first_malformed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| u(&b["line"]))
        .collect();
    assert_eq!(
        lines,
        (malformed_from..malformed_from + 5).collect::<Vec<_>>()
    );
    assert_eq!(recorded["looped"], false);
    let table = stdout(&out);
    assert!(
        table.contains("skipped: 6 malformed, 2 unsafe method"),
        "{table}"
    );
    assert!(
        table.contains(&format!("malformed, line {malformed_from}: ")),
        "{table}"
    );
    let step = &json["targets"][0]["steps"][0];
    assert_eq!(u(&step["requests"]), safe.len() as u64);
    assert!(
        step["offered_rps"].as_f64().unwrap() > 0.0,
        "the recording's mean rate"
    );

    // With --allow-unsafe and a method filter: the POST and DELETE too, only those.
    let server = Server::ok();
    let (code, _, out) = load_json(
        &dir,
        "unsafe",
        &[
            "--from",
            log.to_str().unwrap(),
            "--speed",
            "10",
            "--max-in-flight",
            "1",
            "--allow-unsafe",
            "-m",
            "POST",
            "-m",
            "DELETE",
            &server.url(),
        ],
    );
    assert_eq!(code, 0, "{}", stderr(&out));
    assert_eq!(
        server.lines(),
        ["POST /v1/transfers", "DELETE /v1/items/9"],
        "access logs hold no bodies: the POST goes out empty"
    );
    assert_eq!(server.seen()[0].header("content-length"), Some("0"));
}

fn har(entries: &[(&str, &str, Option<&str>)]) -> String {
    let entries: Vec<Value> = entries
        .iter()
        .enumerate()
        .map(|(i, (method, url, body))| {
            let mut request = serde_json::json!({
                "method": method,
                "url": url,
                "httpVersion": "HTTP/1.1",
                "headers": [
                    {"name": "Host", "value": "shop.example"},
                    {"name": "X-Trace", "value": format!("t{i}")},
                    {"name": "Cookie", "value": "session=secret"}
                ],
                "queryString": [],
                "headersSize": -1,
                "bodySize": body.map_or(0, |b| b.len())
            });
            if let Some(b) = body {
                request["postData"] =
                    serde_json::json!({"mimeType": "application/json", "text": b});
            }
            serde_json::json!({
                "startedDateTime": format!("2026-01-02T03:04:05.{:03}Z", i * 100),
                "time": 1.0,
                "request": request,
                "response": {"status": 200, "statusText": "OK", "httpVersion": "HTTP/1.1",
                             "headers": [], "content": {"size": 0, "mimeType": "text/plain"},
                             "redirectURL": "", "headersSize": -1, "bodySize": 0},
                "cache": {}, "timings": {"send": 0, "wait": 1, "receive": 0}
            })
        })
        .collect();
    serde_json::json!({"log": {"version": "1.2", "creator": {"name": "test", "version": "1"},
                       "entries": entries}})
    .to_string()
}

#[test]
fn a_har_with_post_bodies_is_replayed_with_and_without_allow_unsafe() {
    let dir = scratch("har");
    let file = dir.join("shop.har");
    std::fs::write(
        &file,
        har(&[
            ("GET", "https://shop.example/cart?x=1", None),
            (
                "POST",
                "https://shop.example/v1/orders",
                Some("{\"sku\":\"a-1\"}"),
            ),
            ("GET", "https://shop.example/v1/orders/1", None),
            (
                "PUT",
                "https://shop.example/v1/orders/1",
                Some("{\"qty\":2}"),
            ),
        ]),
    )
    .unwrap();
    let file = file.to_str().unwrap();
    let base = [
        "--from",
        file,
        "--max-in-flight",
        "1",
        "--drop-header",
        "Cookie",
    ];

    let server = Server::ok();
    let (code, json, out) = load_json(&dir, "safe", &[&base[..], &[&server.url()]].concat());
    assert_eq!(code, 0, "{}", stderr(&out));
    assert_eq!(server.lines(), ["GET /cart?x=1", "GET /v1/orders/1"]);
    assert_eq!(
        u(&json["config"]["recorded"]["skipped"]["unsafe_method"]),
        2
    );
    assert_eq!(json["config"]["recorded"]["format"], "har");

    let server = Server::ok();
    let (code, _, out) = load_json(
        &dir,
        "unsafe",
        &[
            &base[..],
            &[
                "--allow-unsafe",
                "--set-header",
                "Authorization: Bearer test",
                &server.url(),
            ],
        ]
        .concat(),
    );
    assert_eq!(code, 0, "{}", stderr(&out));
    let seen = server.seen();
    let lines: Vec<String> = seen
        .iter()
        .map(|s| format!("{} {}", s.method, s.path))
        .collect();
    assert_eq!(
        lines,
        [
            "GET /cart?x=1",
            "POST /v1/orders",
            "GET /v1/orders/1",
            "PUT /v1/orders/1"
        ]
    );
    assert_eq!(seen[1].body, b"{\"sku\":\"a-1\"}");
    assert_eq!(seen[3].body, b"{\"qty\":2}");
    assert_eq!(seen[1].header("content-type"), Some("application/json"));
    for (i, s) in seen.iter().enumerate() {
        assert_eq!(
            s.header("x-trace"),
            Some(format!("t{i}").as_str()),
            "recorded header"
        );
        assert_eq!(s.header("cookie"), None, "--drop-header");
        assert_eq!(
            s.header("authorization"),
            Some("Bearer test"),
            "--set-header"
        );
        assert_ne!(s.header("host"), Some("shop.example"), "the target's host");
    }

    // Only unsafe requests and no --allow-unsafe: nothing usable, one line, exit 2.
    let only_posts = dir.join("posts.har");
    std::fs::write(
        &only_posts,
        har(&[("POST", "https://shop.example/v1/orders", Some("{}"))]),
    )
    .unwrap();
    let server = Server::ok();
    let out = scalpel(&[
        "load",
        "--from",
        only_posts.to_str().unwrap(),
        &server.url(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("no usable request") && err.contains("1 unsafe method, not allowed"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(server.seen().is_empty(), "nothing was sent");
}

#[test]
fn records_are_a_pool_with_a_rate_and_are_looped_when_the_run_outlasts_them() {
    let dir = scratch("pool");
    let log = dir.join("access.log");
    std::fs::write(
        &log,
        "1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] \"GET /one HTTP/1.1\" 200 5 \"-\" \"a\"\n\
         1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] \"GET /two HTTP/1.1\" 200 5 \"-\" \"a\"\n\
         1.2.3.4 - - [10/Oct/2000:14:55:36 -0700] \"GET /three HTTP/1.1\" 200 5 \"-\" \"a\"\n",
    )
    .unwrap();
    let log = log.to_str().unwrap();
    // An hour between the second and third: as a pool the schedule is the rate's.
    let server = Server::ok();
    let (code, json, out) = load_json(
        &dir,
        "looped",
        &[
            "--from",
            log,
            "--rate",
            "200",
            "-n",
            "8",
            "--max-in-flight",
            "1",
            "--threads",
            "1",
            &server.url(),
        ],
    );
    assert_eq!(code, 0, "{}", stderr(&out));
    assert_eq!(
        server.lines(),
        [
            "GET /one",
            "GET /two",
            "GET /three",
            "GET /one",
            "GET /two",
            "GET /three",
            "GET /one",
            "GET /two"
        ],
        "in file order, looped; the probe only connects"
    );
    assert_eq!(json["config"]["recorded"]["schedule"], "pool");
    assert_eq!(json["config"]["recorded"]["looped"], true);
    assert!(stdout(&out).contains("LOOPED"), "{}", stdout(&out));

    // A pool the run does not outlast is not looped; -c also makes it a pool.
    let server = Server::ok();
    let (code, json, out) = load_json(
        &dir,
        "once",
        &["--from", log, "-c", "1", "-n", "3", &server.url()],
    );
    assert_eq!(code, 0, "{}", stderr(&out));
    assert_eq!(server.lines(), ["GET /one", "GET /two", "GET /three"]);
    assert_eq!(json["config"]["recorded"]["looped"], false);
    assert_eq!(json["config"]["model"], "closed");
}

#[test]
fn bad_replay_flags_are_one_line_and_exit_2() {
    let dir = scratch("bad-flags");
    let log = dir.join("access.log");
    std::fs::write(
        &log,
        "1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] \"GET /one HTTP/1.1\" 200 5 \"-\" \"a\"\n",
    )
    .unwrap();
    let log = log.to_str().unwrap();
    let server = Server::ok();
    let url = server.url();
    for (args, says) in [
        (
            vec!["--from", log, "--speed", "2", "--rate", "10"],
            "--speed is the pace",
        ),
        (
            vec!["--from", log, "--speed", "0"],
            "--speed must be above 0",
        ),
        (vec!["--from", log, "-n", "5"], "has only 1 usable requests"),
        (
            vec!["--from", log, "--from-format", "csv"],
            "expected access-log, har or capture",
        ),
        (vec!["--from", log, "-m", "get"], "upper case"),
        (vec!["--from", log, "--include-path", "("], "include-path"),
        (vec!["--from", log, "--data", log], "cannot be used with"),
        (
            vec!["-m", "GET", "-m", "POST"],
            "-m/--method takes one method",
        ),
        (vec!["--speed", "2"], "--from"),
    ] {
        let mut all = vec!["load"];
        all.extend(args.iter().copied());
        all.push(&url);
        let out = scalpel(&all);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(err.contains(says), "{args:?}: {err}");
        assert_eq!(
            err.lines().filter(|l| l.starts_with("scalpel: ")).count(),
            1,
            "{err}"
        );
    }
    assert!(server.seen().is_empty(), "nothing was sent");
}

/// A log of `n` GETs of `/r/0`, `/r/1`, …, two a second.
fn numbered_log(path: &Path, n: usize) {
    let mut text = String::new();
    for i in 0..n {
        text.push_str(&format!(
            "1.2.3.4 - - [10/Oct/2000:13:{:02}:{:02} -0700] \"GET /r/{i} HTTP/1.1\" 200 5 \"-\" \"a\"\n",
            i / 2 / 60,
            i / 2 % 60
        ));
    }
    std::fs::write(path, text).unwrap();
}

#[test]
fn shards_split_the_records_disjointly() {
    let dir = scratch("shards");
    let log = dir.join("access.log");
    numbered_log(&log, 20);
    let log = log.to_str().unwrap();
    let all: Vec<String> = (0..20).map(|i| format!("GET /r/{i}")).collect();
    // On the recorded schedule (a hundred times faster) and as a pool.
    for (mode, extra) in [
        ("recorded", vec!["--speed", "100", "--max-in-flight", "2"]),
        (
            "pool",
            vec!["--rate", "200", "-n", "20", "--max-in-flight", "2"],
        ),
    ] {
        let mut seen = Vec::new();
        for shard in ["1/2", "2/2"] {
            let server = Server::ok();
            let mut args = vec![
                "--from",
                log,
                "--threads",
                "1",
                "--shard",
                shard,
                "--run-id",
                "traffic-test",
            ];
            args.extend(extra.iter().copied());
            let url = server.url();
            args.push(&url);
            let (code, json, out) = load_json(&dir, &format!("{mode}-{}", &shard[..1]), &args);
            assert_eq!(code, 0, "{mode} {shard}: {}", stderr(&out));
            let mut lines = server.lines();
            lines.sort();
            let step = &json["targets"][0]["steps"][0];
            assert_eq!(
                u(&step["requests"]),
                10,
                "{mode} {shard}: half of them each"
            );
            seen.push(lines);
        }
        let (a, b) = (&seen[0], &seen[1]);
        assert!(
            a.iter().all(|l| !b.contains(l)),
            "{mode}: disjoint: {a:?} {b:?}"
        );
        let mut union: Vec<String> = a.iter().chain(b).cloned().collect();
        union.sort();
        let mut expected = all.clone();
        expected.sort();
        assert_eq!(union, expected, "{mode}: together every record once");
    }
}
