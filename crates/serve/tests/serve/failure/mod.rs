//! Failure modes (issues 11 and 18): a worker that freezes on a request, dies with it,
//! streams, or sends a malformed answer; slow and lying clients; a port held by a
//! stranger; a worker that floods its output. Each test is named after what broke.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;

use crate::util::*;

fn restarts(h: &Harness, reason: &str) -> f64 {
    metric(
        &h.server.metrics_text(),
        &format!("scalpel_serve_restarts_total{{app=\"web\",reason=\"{reason}\"}}"),
    )
}

/// Issue 11, item 2 — the query of death. Two workers under steady load; one GET blocks
/// its worker's event loop. That request is answered 504 (naming why) and never resent,
/// so it costs exactly one worker; the requests queued behind it on that worker had not
/// been read and are resent, so no other request fails. Before: the GET was resent to
/// the other worker, which froze too, and ordinary requests failed with 502.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poison_request_costs_one_worker_and_fails_no_other_request() {
    capture_traces();
    let h = start(&format!(
        "{SERVER}{}",
        node_app("web", 2, "round_robin", "")
    ))
    .await;
    let before = h.pids(0);
    let load = Load::start(h.server.listen_addr(), "/", 2);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let poison = h.get("/block?ms=30000&marker=poison-11-2").await.unwrap();
    // Answered once its worker was taken out (health checks: about 2.4 s).
    assert_eq!(poison.status, 504, "{}", poison.body);
    let (kind, error) = poison.error();
    assert_eq!(kind, "worker_stalled", "{}", poison.body);
    assert!(
        error.contains("stopped answering while handling this request")
            && error.contains("not resent"),
        "{error}"
    );
    assert!(
        !error.contains("127.0.0.1"),
        "the worker's address leaked: {error}"
    );
    // The frozen worker is replaced; the other keeps its process.
    assert!(
        eventually(Duration::from_secs(30), || {
            let s = h.server.status();
            s.apps[0].ready == 2 && s.apps[0].workers.iter().all(|w| w.state == "ready")
        })
        .await,
        "{:?}",
        h.server.status()
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (ok, failed, failures) = load.finish().await;
    assert_eq!(
        failed, 0,
        "requests failed besides the poison one: {failures:?}"
    );
    assert!(ok > 10, "too few requests to mean anything: {ok}");
    let after = h.pids(0);
    let kept = before.iter().filter(|p| after.contains(p)).count();
    assert_eq!(
        kept, 1,
        "one worker replaced, one kept: {before:?} → {after:?}"
    );
    assert_eq!(
        restarts(&h, "unhealthy"),
        1.0,
        "{}",
        h.server.metrics_text()
    );
    let m = h.server.metrics_text();
    assert_eq!(
        metric(
            &m,
            "scalpel_serve_not_resent_total{app=\"web\",reason=\"worker_stalled\"}"
        ),
        1.0,
        "{m}"
    );
    // One log line with the method and the path.
    let logs = trace_text();
    let line = logs
        .lines()
        .find(|l| l.contains("request not resent") && l.contains("/block"))
        .unwrap_or_else(|| panic!("no log line for the poison request:\n{logs}"));
    assert!(
        line.contains("method=GET") && line.contains("reason=\"worker_stalled\""),
        "{line}"
    );
    h.server.shutdown().await;
}

/// The same rule for a request its worker dies with: answered 502, not resent, one
/// worker restarted. Before: resent to the other worker, which died too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_its_worker_dies_with_is_not_resent_to_kill_another() {
    let h = start(&format!(
        "{SERVER}{}",
        node_app("web", 2, "round_robin", "")
    ))
    .await;
    let r = h.get("/exit?code=3").await.unwrap();
    assert_eq!(r.status, 502, "{}", r.body);
    let (kind, error) = r.error();
    assert_eq!(kind, "worker_exited", "{}", r.body);
    assert!(
        error.contains("exited while handling this request") && !error.contains("127.0.0.1"),
        "{error}"
    );
    assert!(
        eventually(Duration::from_secs(30), || {
            restarts(&h, "exited") >= 1.0 && h.server.status().apps[0].ready == 2
        })
        .await,
        "{:?}",
        h.server.status()
    );
    // Settled: nothing else died.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(restarts(&h, "exited"), 1.0, "{}", h.server.metrics_text());
    let m = h.server.metrics_text();
    assert_eq!(
        metric(
            &m,
            "scalpel_serve_not_resent_total{app=\"web\",reason=\"worker_exited\"}"
        ),
        1.0,
        "{m}"
    );
    assert_eq!(
        metric(&m, "scalpel_serve_retries_total{app=\"web\"}"),
        0.0,
        "{m}"
    );
    h.server.shutdown().await;
}

/// Issue 18, item 19 — never a resend once the worker sent any byte. A worker sends a
/// head and part of the body, then dies: the client gets a 502 and the other worker
/// never sees the request. Before: the GET was resent and ran twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_broken_mid_body_is_not_resent() {
    let h = start(&format!(
        "{SERVER}{}",
        node_app("web", 2, "round_robin", "")
    ))
    .await;
    // Round robin starts at worker 0, the one that dies.
    let r = h.get("/half?die=0").await.unwrap();
    assert_eq!(r.status, 502, "{}", r.body);
    let (kind, detail) = r.error();
    // The codec's kind, as load and shadow name a body cut short.
    assert_eq!(kind, "body_cut", "{}", r.body);
    assert!(detail.contains("broke off its answer"), "{detail}");
    let m = h.server.metrics_text();
    assert_eq!(
        metric(&m, "scalpel_serve_retries_total{app=\"web\"}"),
        0.0,
        "{m}"
    );
    assert_eq!(
        metric(
            &m,
            "scalpel_serve_not_resent_total{app=\"web\",reason=\"partial_answer\"}"
        ),
        1.0,
        "{m}"
    );
    h.server.shutdown().await;
}

/// Issue 18, item 19 — header limits are in bytes. 150 request headers and 200 response
/// headers pass (before: 431 past ~100 request headers whatever `max_header_bytes`,
/// and a 502 — then a resend — past 128 response headers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_headers_within_the_byte_limits_pass_both_ways() {
    let h = start(&format!(
        "{SERVER}max_header_bytes = \"64KiB\"\n{}",
        node_app("web", 1, "round_robin", "")
    ))
    .await;
    let mut req = http::Request::get(h.url("/echo"));
    for i in 0..150 {
        req = req.header(format!("x-r{i}"), i.to_string());
    }
    let r = send(&h.client, req.body(Full::new(Bytes::new())).unwrap())
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["headers"]["x-r149"], "149");
    // Read raw: the test's own client stops at 100 response headers.
    let raw = raw_exchange(
        h.server.listen_addr(),
        b"GET /headers?n=200 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
        Duration::from_secs(30),
    )
    .await;
    assert!(raw.starts_with("HTTP/1.1 200"), "{raw:?}");
    assert!(raw.ends_with("\r\n\r\nmany"), "{raw:?}");
    assert_eq!(raw.matches("\r\nx-h").count(), 200, "{raw:?}");
    h.server.shutdown().await;
}

/// Issue 27, item 4 — a plain connection parses heads with hyper's default 100 header
/// slots and serves a head over them again with the full count (filling the full count
/// for every request was the largest cost of a proxied request). On one kept connection,
/// after an ordinary request, a head of 150 header lines reaches the worker — not
/// hyper's own 431 — and the connection serves the next request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_over_the_default_header_slots_on_a_kept_connection_reaches_the_worker() {
    use tokio::io::AsyncWriteExt;
    let h = start(&format!(
        "{SERVER}{}",
        node_app("web", 1, "round_robin", "")
    ))
    .await;
    let mut s = tokio::net::TcpStream::connect(h.server.listen_addr())
        .await
        .unwrap();
    let mut got = Vec::new();
    s.write_all(b"GET /echo?first HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    read_until(&mut s, &mut got, "/echo?first").await;
    // The first response written whole before the next head arrives.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut head = String::from("GET /echo?second HTTP/1.1\r\nHost: t\r\n");
    for i in 0..150 {
        head.push_str(&format!("x-r{i}: {i}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).await.unwrap();
    read_until(&mut s, &mut got, "\"x-r149\":\"149\"").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    s.write_all(b"GET /echo?third HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    read_until(&mut s, &mut got, "/echo?third").await;
    let text = String::from_utf8_lossy(&got);
    assert_eq!(text.matches("HTTP/1.1 200").count(), 3, "{text}");
    assert!(!text.contains(" 431 "), "{text}");
    h.server.shutdown().await;
}

/// Issue 11, item 3 — a streaming response is progress, not a stall. While one worker
/// streams server-sent events for seconds, round robin keeps sending it its share.
/// Before: with a stream open past `avoid_stalled_ms`, it got none (0 of 40).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_streaming_a_response_is_not_passed_over_as_stalled() {
    let h = start(&format!(
        "{SERVER}{}",
        node_app("web", 2, "round_robin", "avoid_stalled_ms = 200\n")
    ))
    .await;
    let addr = h.server.listen_addr();
    // An event a second: the gaps are longer than avoid_stalled_ms, so only the rule
    // itself (a response with its head is no stall) keeps the worker in turn.
    let stream =
        tokio::spawn(async move { get_at(&client(), addr, "/sse?ms=6000&every=1000").await });
    assert!(
        eventually(Duration::from_secs(20), || {
            h.server.status().apps[0]
                .workers
                .iter()
                .any(|w| w.in_flight == 1)
        })
        .await
    );
    let streaming = h.server.status().apps[0]
        .workers
        .iter()
        .find(|w| w.in_flight == 1)
        .and_then(|w| w.pid)
        .unwrap() as u64;
    // Well past avoid_stalled_ms, with the stream still open.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let mut seen: HashMap<u64, usize> = HashMap::new();
    for _ in 0..20 {
        let r = h.get("/").await.unwrap();
        *seen.entry(pid_of(&r)).or_default() += 1;
    }
    assert!(
        seen.get(&streaming).copied().unwrap_or(0) >= 5,
        "the streaming worker was passed over: {seen:?}"
    );
    let done = stream.await.unwrap().unwrap();
    assert_eq!(done.status, 200);
    assert!(done.body.contains("data: 3"), "{}", done.body);
    h.server.shutdown().await;
}

/// Issue 11, item 4 — the mirror copies only safe methods unless the route opts in, and
/// holds mirror bytes within `mirror_buffer_bytes` (skips past it are counted). Before:
/// every POST reached the mirror app, and comparisons ran on the client's thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mirror_copies_safe_methods_only_unless_a_route_opts_in() {
    let toml = format!(
        r#"[server]
listen = "127.0.0.1:0"
admin = "127.0.0.1:0"
mirror_buffer_bytes = 20000
{a}{m}
[[route]]
header = {{ name = "x-unsafe" }}
app = "a"
mirror = "m"
mirror_unsafe = true
mirror_ignore = ["$.pid", "$.headers"]

[[route]]
prefix = "/"
app = "a"
mirror = "m"
mirror_ignore = ["$.pid", "$.headers"]
"#,
        a = node_app("a", 1, "round_robin", ""),
        m = node_app("m", 1, "round_robin", ""),
    );
    let h = start(&toml).await;
    let post = |unsafe_ok: bool, body: Vec<u8>| {
        let mut b = http::Request::post(h.url("/echo"));
        if unsafe_ok {
            b = b.header("x-unsafe", "1");
        }
        b.body(Full::new(Bytes::from(body))).unwrap()
    };
    for _ in 0..5 {
        assert_eq!(
            send(&h.client, post(false, b"p".to_vec()))
                .await
                .unwrap()
                .status,
            200
        );
        assert_eq!(h.get("/echo").await.unwrap().status, 200);
        assert_eq!(
            send(&h.client, post(true, b"u".to_vec()))
                .await
                .unwrap()
                .status,
            200
        );
    }
    // Over the mirror budget: served, not copied, counted.
    let r = send(&h.client, post(true, vec![b'x'; 30000]))
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    assert!(
        eventually(Duration::from_secs(30), || {
            let m = h.server.metrics_text();
            metric(&m, "scalpel_serve_mirrored_total{app=\"m\"}") == 10.0
                && h.server
                    .mirror_reports()
                    .iter()
                    .map(|r| r.summary.compared + r.summary.errors)
                    .sum::<u64>()
                    == 10
        })
        .await,
        "{}\n{:?}",
        h.server.metrics_text(),
        h.server.mirror_reports()
    );
    let m = h.server.metrics_text();
    assert_eq!(
        metric(
            &m,
            "scalpel_serve_mirror_not_mirrored_total{route=\"1\",mirror=\"m\",reason=\"method\"}"
        ),
        5.0,
        "{m}"
    );
    let unsafe_route = &h.server.mirror_reports()[0].summary;
    assert_eq!(unsafe_route.compared, 5, "{unsafe_route:?}");
    assert_eq!(unsafe_route.skipped, 1, "over the budget: {unsafe_route:?}");
    // The comparisons ran on the mirror's own thread.
    let threads: Vec<String> = std::fs::read_dir("/proc/self/task")
        .unwrap()
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
        .map(|c| c.trim().to_string())
        .collect();
    assert!(threads.iter().any(|t| t == "scalpel-mirror"), "{threads:?}");
    h.server.shutdown().await;
}

/// The body of a raw answer read as the toolkit's one error body: kind and detail.
fn raw_error(answer: &str) -> (String, String) {
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    scalpel_http::parse_error_body(body.as_bytes())
        .unwrap_or_else(|| panic!("not the toolkit's error body: {answer:?}"))
}

/// Issue 11, item 5 — slow clients. A head or a body that does not arrive in time is
/// answered 408 and counted; connections past `max_connections` get a 503. Before: a
/// trickled body held its task (and up to 8 MiB) for ever, and connections had no cap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_get_408_and_connections_past_the_cap_503() {
    let h = start(&format!(
        "{SERVER}header_read_timeout = \"1s\"\nbody_read_timeout = \"1s\"\n{}",
        node_app("web", 1, "round_robin", "")
    ))
    .await;
    let addr = h.server.listen_addr();
    let slow_head = raw_exchange(
        addr,
        b"GET / HTTP/1.1\r\nHost: t\r\nX-A: ",
        Duration::from_secs(30),
    )
    .await;
    assert!(slow_head.starts_with("HTTP/1.1 408"), "{slow_head:?}");
    assert_eq!(raw_error(&slow_head).0, "client_timeout", "{slow_head:?}");
    let slow_body = raw_exchange(
        addr,
        b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\nonly a part",
        Duration::from_secs(30),
    )
    .await;
    assert!(slow_body.starts_with("HTTP/1.1 408"), "{slow_body:?}");
    let (kind, detail) = raw_error(&slow_body);
    assert_eq!(kind, "client_timeout");
    assert!(
        detail.contains("request body not received within 1s"),
        "{slow_body:?}"
    );
    // An idle kept-alive connection past the head time-out is closed quietly.
    let idle = raw_exchange(addr, b"", Duration::from_secs(30)).await;
    assert_eq!(idle, "", "an idle connection got an answer");
    let m = h.server.metrics_text();
    assert_eq!(
        metric(
            &m,
            "scalpel_serve_rejected_total{reason=\"header_timeout\"}"
        ),
        1.0,
        "{m}"
    );
    assert_eq!(
        metric(&m, "scalpel_serve_rejected_total{reason=\"body_timeout\"}"),
        1.0,
        "{m}"
    );
    h.server.shutdown().await;

    let h = start(&format!(
        "{SERVER}max_connections = 3\n{}",
        node_app("web", 1, "round_robin", "")
    ))
    .await;
    let addr = h.server.listen_addr();
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(tokio::net::TcpStream::connect(addr).await.unwrap());
    }
    assert!(
        eventually(Duration::from_secs(20), || {
            // The three are accepted (counted) before the fourth arrives.
            metric(&h.server.metrics_text(), "scalpel_serve_client_connections") == 3.0
        })
        .await,
        "{}",
        h.server.metrics_text()
    );
    let fourth = raw_exchange(
        addr,
        b"GET / HTTP/1.1\r\nHost: t\r\n\r\n",
        Duration::from_secs(30),
    )
    .await;
    assert!(fourth.starts_with("HTTP/1.1 503"), "{fourth:?}");
    let (kind, detail) = raw_error(&fourth);
    assert_eq!(kind, "too_many_connections");
    assert!(detail.contains("too many client connections"), "{fourth:?}");
    drop(held);
    // Room again once the balancer has seen them close.
    assert!(
        eventually(Duration::from_secs(20), || {
            metric(&h.server.metrics_text(), "scalpel_serve_client_connections") == 0.0
        })
        .await,
        "{}",
        h.server.metrics_text()
    );
    let mut ok = false;
    for _ in 0..50 {
        if h.get("/").await.is_ok_and(|r| r.status == 200) {
            ok = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(ok, "no room after the held connections closed");
    assert_eq!(
        metric(
            &h.server.metrics_text(),
            "scalpel_serve_rejected_total{reason=\"too_many_connections\"}"
        ),
        1.0
    );
    h.server.shutdown().await;
}

/// Issue 11, item 6 — a client's own `X-Forwarded-Proto` / `-For` are replaced, unless
/// it is a configured trusted proxy. Before: any client could claim https.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarding_headers_are_believed_from_trusted_proxies_only() {
    for (trusted, want_for, want_proto) in [
        ("", "127.0.0.1", "http"),
        (
            "trusted_proxies = [\"127.0.0.1/32\"]\n",
            "203.0.113.9, 127.0.0.1",
            "https",
        ),
    ] {
        let h = start(&format!(
            "{SERVER}{trusted}{}",
            node_app("web", 1, "round_robin", "")
        ))
        .await;
        let req = http::Request::get(h.url("/echo"))
            .header("x-forwarded-for", "203.0.113.9")
            .header("x-forwarded-proto", "https")
            .header("forwarded", "for=203.0.113.9;proto=https")
            .body(Full::new(Bytes::new()))
            .unwrap();
        let r = send(&h.client, req).await.unwrap();
        let headers = &r.json()["headers"];
        assert_eq!(headers["x-forwarded-for"], want_for, "{trusted}: {headers}");
        assert_eq!(
            headers["x-forwarded-proto"], want_proto,
            "{trusted}: {headers}"
        );
        assert_eq!(
            headers.get("forwarded").is_some(),
            !trusted.is_empty(),
            "{headers}"
        );
        h.server.shutdown().await;
    }
}

/// Issue 11, item 7 — framing. A worker answer with both Content-Length and
/// Transfer-Encoding is re-framed and its connection is not reused (before: it went
/// back to the pool, out of step); a client request with `Content-Length: 0` and a
/// chunked body keeps its body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ambiguous_framing_is_never_trusted_in_either_direction() {
    let h = start(&format!(
        "{SERVER}upstream_timeout = \"5s\"\n{}",
        node_app("web", 1, "round_robin", "")
    ))
    .await;
    let conns = |r: Reply| r.json()["connections"].as_u64().unwrap();
    let before = conns(h.get("/conns").await.unwrap());
    let r = h.get("/both").await.unwrap();
    assert_eq!((r.status, r.body.as_str()), (200, "hello"));
    assert!(r.headers.get("content-length").is_none_or(|v| v == "5"));
    // The next request must not go out on the connection /both left behind.
    let r = h.get("/").await.unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let after = conns(h.get("/conns").await.unwrap());
    assert!(
        after > before,
        "no new connection after /both: {before} → {after}"
    );

    let addr = h.server.listen_addr();
    let raw = raw_exchange(
        addr,
        b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        Duration::from_secs(30),
    )
    .await;
    assert!(raw.starts_with("HTTP/1.1 200"), "{raw:?}");
    assert!(
        raw.contains("\"body\":\"hello\""),
        "the chunked body was lost: {raw:?}"
    );
    h.server.shutdown().await;
}

/// Issue 18, item 15 — a worker is ready only when the port's listener is its own. A
/// stranger (here: the test app, started by hand) holds the worker's first port: the
/// worker is not started there, and says why; its next incarnation takes the pair's
/// other port. Before: the stranger answered the health check, the worker counted as
/// ready, and every request went to the stranger.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stranger_on_a_workers_port_is_never_taken_for_the_worker() {
    capture_traces();
    let base = free_base(2);
    let stranger = KillOnDrop(
        std::process::Command::new("node")
            .arg(app_js())
            .env("PORT", base.to_string())
            .env("WORKER_INDEX", "stranger")
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let c = client();
    let at = std::net::SocketAddr::from(([127, 0, 0, 1], base));
    assert!(
        {
            let mut up = false;
            for _ in 0..200 {
                if get_at(&c, at, "/healthz").await.is_ok() {
                    up = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            up
        },
        "the stranger did not start"
    );
    let toml = format!(
        "{SERVER}\n[[app]]\nname = \"web\"\ncommand = [\"node\", \"{js}\"]\nworkers = 1\nport_base = {base}\nstart_timeout_ms = 60000\n[app.restart]\nbackoff_ms = 10\n",
        js = app_js().display()
    );
    let h = start(&toml).await;
    let w = &h.server.status().apps[0].workers[0];
    assert_eq!(w.port, Some(base + 1), "{w:?}");
    for _ in 0..5 {
        let r = h.get("/").await.unwrap();
        assert_ne!(
            pid_of(&r),
            u64::from(stranger.0.id()),
            "a request reached the stranger"
        );
        assert_eq!(r.json()["index"], "0");
    }
    let logs = trace_text();
    assert!(
        logs.lines().any(|l| l.contains("start_failed")
            && l.contains(&format!("port {base} is already in use"))
            && l.contains(&format!("pid {}", stranger.0.id()))),
        "{logs}"
    );
    h.server.shutdown().await;
}

/// The test app listening on these ports at the end of a test, killed (leftovers of a
/// failure); anything else that listens there is left alone.
struct KillListeners(Vec<u16>);

impl Drop for KillListeners {
    fn drop(&mut self) {
        for &port in &self.0 {
            let ours = |pid: u32| {
                std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
                    String::from_utf8_lossy(&c).contains(&*app_js().to_string_lossy())
                })
            };
            if let Ok(pid) = scalpel_procstat::pid_listening_on(port)
                && ours(pid)
            {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
    }
}

/// Issue 18, item 15 — the worker's own listen failed, and a daemon it started (out of
/// its process tree) answers on its port: the health check passes, the ownership check
/// does not. The worker is not admitted; the error says the port answers for someone
/// else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_port_answered_from_outside_the_workers_tree_is_not_ready() {
    capture_traces();
    let base = free_base(2);
    let js = app_js();
    // The worker starts a daemon (double fork: it leaves the worker's tree) that
    // listens on the worker's port, and never listens itself.
    let toml = format!(
        "{SERVER}\n[[app]]\nname = \"web\"\ncommand = [\"sh\", \"-c\", \"(setsid node {js} >/dev/null 2>&1 &) ; exec sleep 600\"]\nworkers = 1\nport_base = {base}\nstart_timeout_ms = 20000\n[app.restart]\nmax_restarts = 0\n",
        js = js.display()
    );
    let config = scalpel_serve::Config::parse(&toml, std::path::Path::new("t.toml")).unwrap();
    let server = scalpel_serve::Server::start(
        config,
        scalpel_serve::ServeOptions {
            worker_logs: scalpel_serve::WorkerLogs::Discard,
        },
    )
    .await
    .unwrap();
    let found = eventually(Duration::from_secs(60), || {
        trace_text().lines().any(|l| {
            l.contains("start_failed")
                && l.contains(&format!(
                    "port {base} answers, but not from this worker's processes"
                ))
        })
    })
    .await;
    let status = server.status();
    // Clean up the daemon, whoever holds the port now.
    drop(KillListeners(vec![base, base + 1]));
    assert!(found, "no ownership error:\n{}", trace_text());
    assert_eq!(
        status.apps[0].ready, 0,
        "admitted a worker that does not listen: {status:?}"
    );
    server.shutdown().await;
}

/// Issue 18, item 15 (third reproduction) — a worker's `setsid` child keeps the worker's
/// port after the worker is stopped. Stopping a worker now also stops the processes of
/// its tree that left its process group, so reload after reload works. Before: the
/// child kept the port, and every later incarnation on it exited while the reload
/// answered "reloaded".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reloads_stop_a_workers_setsid_children_with_it() {
    let base = free_base(2);
    // Should the test fail, no setsid child outlives it holding a port.
    let _cleanup = KillListeners(vec![base, base + 1]);
    let toml = format!(
        "{SERVER}\n[[app]]\nname = \"web\"\ncommand = [\"sh\", \"-c\", \"setsid node {js} & wait\"]\nworkers = 1\nport_base = {base}\nstart_timeout_ms = 60000\n",
        js = app_js().display()
    );
    let h = start(&toml).await;
    let mut served = Vec::new();
    for round in 0..3 {
        let r = h.get("/").await.unwrap();
        assert_eq!(r.status, 200, "round {round}: {}", r.body);
        served.push(pid_of(&r));
        if round < 2 {
            h.server
                .reload()
                .await
                .unwrap_or_else(|e| panic!("reload {round}: {e}"));
        }
    }
    assert_eq!(
        served
            .iter()
            .collect::<std::collections::HashSet<_>>()
            .len(),
        3,
        "each reload serves from a new process: {served:?}"
    );
    for pid in &served[..2] {
        assert!(
            eventually(Duration::from_secs(20), || !process_alive(*pid as u32)).await,
            "the setsid child {pid} outlived its worker"
        );
    }
    h.server.shutdown().await;
}

/// Issue 18, item 17 — a worker line longer than `log_line_max_bytes` is cut (and
/// counted), so a worker writing without newlines cannot grow the balancer's memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_line_longer_than_the_limit_is_cut_and_counted() {
    let h = start(&format!(
        "{SERVER}log_line_max_bytes = \"1KiB\"\n{}",
        node_app("web", 1, "round_robin", "")
    ))
    .await;
    assert_eq!(h.get("/print?kb=2048").await.unwrap().body, "printed");
    assert!(
        eventually(Duration::from_secs(30), || {
            h.logs
                .lines()
                .iter()
                .any(|l| l == "[web#0] after the long line")
        })
        .await,
        "{:?}",
        h.logs
            .lines()
            .iter()
            .map(|l| &l[..l.len().min(80)])
            .collect::<Vec<_>>()
    );
    let lines = h.logs.lines();
    let long = lines
        .iter()
        .find(|l| l.starts_with("[web#0] ppp"))
        .expect("the long line, cut");
    assert!(long.len() < 1200, "not cut: {} bytes", long.len());
    assert!(
        long.ends_with(&format!(
            "[... line cut: {} more bytes]",
            2048 * 1024 - 1024
        )),
        "{}",
        &long[long.len() - 60..]
    );
    assert_eq!(
        metric(
            &h.server.metrics_text(),
            "scalpel_serve_worker_log_lines_cut_total{app=\"web\"}"
        ),
        1.0
    );
    h.server.shutdown().await;
}

/// Issue 18, item 20 — the admin endpoints take `HEAD` and a bearer scheme in any case.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_takes_head_and_a_lowercase_bearer_scheme() {
    let h = start(&format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\nadmin_token = \"s3cret-token-0123\"\n{}",
        node_app("web", 1, "round_robin", "")
    ))
    .await;
    let admin = h.server.admin_addr().unwrap();
    for (method, auth, want) in [
        ("HEAD", "Bearer s3cret-token-0123", 200),
        ("GET", "bearer s3cret-token-0123", 200),
        ("GET", "BEARER  s3cret-token-0123", 200),
        ("GET", "Basic s3cret-token-0123", 401),
        ("GET", "bearer wrong", 401),
    ] {
        let req = http::Request::builder()
            .method(method)
            .uri(format!("http://{admin}/status"))
            .header("authorization", auth)
            .body(Full::new(Bytes::new()))
            .unwrap();
        let r = send(&h.client, req).await.unwrap();
        assert_eq!(r.status, want, "{method} with {auth:?}: {}", r.body);
        if method == "HEAD" {
            assert!(r.body.is_empty());
        }
    }
    h.server.shutdown().await;
}

/// A sibling of issue 11, item 5, on the admin address: at most 64 connections at once,
/// so idle or slow clients cannot take the control plane's file descriptors; the next
/// one is closed unanswered, and there is room again once they leave.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_connections_are_capped() {
    let h = start(&format!(
        "{SERVER}{}",
        node_app("web", 1, "round_robin", "")
    ))
    .await;
    let admin = h.server.admin_addr().unwrap();
    let mut held = Vec::new();
    for _ in 0..64 {
        held.push(tokio::net::TcpStream::connect(admin).await.unwrap());
    }
    // Accepted in order: the 65th finds no slot.
    let refused = raw_exchange(
        admin,
        b"GET /status HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(refused, "", "a 65th admin connection was served");
    drop(held);
    let mut ok = false;
    for _ in 0..100 {
        if get_at(&h.client, admin, "/status")
            .await
            .is_ok_and(|r| r.status == 200)
        {
            ok = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        ok,
        "no room on the admin address after the held connections closed"
    );
    h.server.shutdown().await;
}
