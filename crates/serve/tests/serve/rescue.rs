//! Issue 14 — a frozen direct-mode worker's accepted connections are taken over before it
//! is killed (pidfd_getfd): a request it never read is answered by another worker, one
//! it had read part of gets the JSON error, and nothing it read is resent.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::util::*;

/// Connections opened to the frozen worker, each given a request only once it is frozen.
const FRESH: usize = 4;

fn direct_config(listen: SocketAddr) -> String {
    let base = free_base(4);
    format!(
        "{SERVER}\n[[app]]\nname = \"web\"\ncommand = [\"node\", \"{js}\"]\nworkers = 2\n\
         port_base = {base}\nmode = \"direct\"\nlisten = \"{listen}\"\nstart_timeout_ms = 60000\n",
        js = app_js().display()
    )
}

fn signal(pid: u32, sig: &str) {
    scalpel_testkit::signal(pid, sig);
}

/// Reads one response with a `Content-Length` body (app.js's `/pid`) from a kept-alive
/// connection: (head, body).
async fn read_response(c: &mut TcpStream) -> Result<(String, String), String> {
    tokio::time::timeout(
        Duration::from_secs(60),
        scalpel_testkit::net::read_response(c),
    )
    .await
    .map_err(|_| "no answer in 60 s".to_string())?
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_mode_frozen_workers_unread_connections_are_answered_by_another_worker() {
    capture_traces();
    let listen = SocketAddr::from(([127, 0, 0, 1], free_base(1)));
    let h = start(&direct_config(listen)).await;
    let status = h.server.status();
    let victim = status.apps[0].workers[0].pid.unwrap();
    let other = status.apps[0].workers[1].pid.unwrap();

    // Only the victim accepts while the other is stopped: the connections are its own.
    signal(other, "STOP");
    let mut fresh = Vec::new();
    for _ in 0..FRESH {
        fresh.push(TcpStream::connect(listen).await.expect("connect"));
    }
    // One request the victim reads in part: a head and 10 of 100 body bytes.
    let mut half = TcpStream::connect(listen).await.expect("connect");
    half.write_all(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789")
        .await
        .unwrap();
    let half_port = half.local_addr().unwrap().port();
    let accepted = eventually(Duration::from_secs(30), || {
        let held = scalpel_procstat::connections_held(victim, listen.port()).unwrap_or_default();
        let read_half = scalpel_procstat::tcp_queues(listen.port())
            .unwrap_or_default()
            .iter()
            .any(|q| {
                q.local_port == listen.port() && q.remote_port == half_port && q.rx_queue == 0
            });
        held.len() == FRESH + 1 && read_half
    })
    .await;
    // Frozen with the connections accepted and the half request read, then the other
    // worker runs again.
    signal(victim, "STOP");
    signal(other, "CONT");
    assert!(
        accepted,
        "the victim did not accept and read: {:?}",
        scalpel_procstat::connections_held(victim, listen.port())
    );

    // The requests go out now: their bytes wait, unread, in the frozen worker's sockets.
    // The first connection is kept alive for a second request.
    for (i, c) in fresh.iter_mut().enumerate() {
        let close = if i == 0 { "" } else { "Connection: close\r\n" };
        c.write_all(format!("GET /pid HTTP/1.1\r\nHost: x\r\n{close}\r\n").as_bytes())
            .await
            .unwrap();
    }
    let mut answered_by = Vec::new();
    for (i, c) in fresh.iter_mut().enumerate() {
        let (head, body) = read_response(c)
            .await
            .unwrap_or_else(|e| panic!("connection {i}: {e}"));
        assert!(head.starts_with("HTTP/1.1 200"), "connection {i}: {head}");
        answered_by.push(body.trim().parse::<u32>().expect("a pid"));
    }
    // The kept-alive one goes on being served.
    fresh[0]
        .write_all(b"GET /pid HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let (head, body) = read_response(&mut fresh[0])
        .await
        .expect("second request on the rescued connection");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    answered_by.push(body.trim().parse::<u32>().expect("a pid"));
    assert!(
        !answered_by.contains(&victim),
        "the frozen worker {victim} answered: {answered_by:?}"
    );

    // The half-read request: the JSON error, never resent (no worker echoes it).
    let mut got = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(60), half.read_to_end(&mut got)).await;
    let got = String::from_utf8_lossy(&got).into_owned();
    assert!(
        got.starts_with("HTTP/1.1 504"),
        "half-read request: {got:?}"
    );
    let body = got.split("\r\n\r\n").nth(1).unwrap_or_default();
    let (kind, _) = scalpel_http::parse_error_body(body.as_bytes())
        .unwrap_or_else(|| panic!("not the JSON error grammar: {got:?}"));
    assert_eq!(kind, "worker_stalled");

    let m = h.server.metrics_text();
    let at = |outcome: &str| {
        metric(
            &m,
            &format!(
                "scalpel_serve_direct_connections_at_replacement_total{{app=\"web\",outcome=\"{outcome}\"}}"
            ),
        )
    };
    assert_eq!(at("rescued"), FRESH as f64, "{m}");
    assert_eq!(at("half_read"), 1.0, "{m}");
    assert_eq!(at("in_use"), 0.0, "{m}");
    let log = trace_text();
    assert!(
        log.lines().any(|l| l.contains("worker restart")
            && l.contains(&format!("pid={victim}"))
            && l.contains(&format!("{FRESH} rescued"))),
        "no restart line with the counts:\n{log}"
    );
    assert!(
        eventually(Duration::from_secs(20), || !process_alive(victim)).await,
        "the frozen worker was not killed"
    );
    h.server.shutdown().await;
}

/// Reads from `c` until `want` has arrived (or 60 s pass); what arrived.
async fn read_until(c: &mut TcpStream, want: &str) -> String {
    let mut got = Vec::new();
    scalpel_testkit::net::read_until(c, &mut got, want, Duration::from_secs(60)).await;
    String::from_utf8_lossy(&got).into_owned()
}

/// Reads `c` to its end (or 60 s); (bytes, how it ended).
async fn read_to_close(c: &mut TcpStream) -> (String, String) {
    let mut got = Vec::new();
    let end = match tokio::time::timeout(Duration::from_secs(60), c.read_to_end(&mut got)).await {
        Ok(Ok(_)) => "closed".to_string(),
        Ok(Err(e)) => format!("error: {e}"),
        Err(_) => "no close in 60 s".to_string(),
    };
    (String::from_utf8_lossy(&got).into_owned(), end)
}

/// Issue 14 — kept-alive connections of a worker that froze: one on which it had answered
/// a request and then read the next one (the request that froze it) gets the 504
/// `worker_stalled` answer, not a bare close; one idle after a complete answer, and one
/// whose streamed answer it was writing, close with it (the kernel's counts cannot tell
/// those two apart, so neither is handed to another worker: the stream's client sees the
/// cut, not a wait).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_mode_a_request_read_after_an_answer_gets_504_and_idle_connections_close() {
    capture_traces();
    let listen = SocketAddr::from(([127, 0, 0, 1], free_base(1)));
    let h = start(&direct_config(listen)).await;
    let status = h.server.status();
    let victim = status.apps[0].workers[0].pid.unwrap();
    let other = status.apps[0].workers[1].pid.unwrap();

    // Only the victim accepts while the other is stopped: the three connections are its.
    signal(other, "STOP");
    let mut next = TcpStream::connect(listen).await.expect("connect");
    let mut idle = TcpStream::connect(listen).await.expect("connect");
    let mut stream = TcpStream::connect(listen).await.expect("connect");
    let accepted = eventually(Duration::from_secs(30), || {
        scalpel_procstat::connections_held(victim, listen.port()).is_ok_and(|h| h.len() == 3)
    })
    .await;
    signal(other, "CONT");
    assert!(accepted, "the victim did not accept the three connections");

    for (name, c) in [("next", &mut next), ("idle", &mut idle)] {
        c.write_all(b"GET /pid HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let (head, body) = read_response(c)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(head.starts_with("HTTP/1.1 200"), "{name}: {head}");
        assert_eq!(body.trim(), victim.to_string(), "{name}");
    }
    stream
        .write_all(b"GET /sse?ms=600000&every=50 HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let began = read_until(&mut stream, "data: 1\n").await;
    assert!(
        began.contains("data: 1\n"),
        "the stream did not begin: {began:?}"
    );
    // Well over a kernel tick after the answer: the next request freezes the worker.
    tokio::time::sleep(Duration::from_millis(200)).await;
    next.write_all(b"GET /block?ms=600000 HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();

    let (got, end) = read_to_close(&mut next).await;
    assert!(
        got.starts_with("HTTP/1.1 504"),
        "the request read after an answer: {got:?} ({end})"
    );
    let body = got.split("\r\n\r\n").nth(1).unwrap_or_default();
    let (kind, _) = scalpel_http::parse_error_body(body.as_bytes())
        .unwrap_or_else(|| panic!("not the JSON error grammar: {got:?}"));
    assert_eq!(kind, "worker_stalled");

    let (got, end) = read_to_close(&mut idle).await;
    assert_eq!(
        (got.as_str(), end.as_str()),
        ("", "closed"),
        "the idle kept-alive connection"
    );
    let (got, end) = read_to_close(&mut stream).await;
    assert_ne!(end, "no close in 60 s", "the cut stream hung: {got:?}");
    assert!(
        !got.ends_with("0\r\n\r\n"),
        "the cut stream ended as if complete: {got:?}"
    );

    let m = h.server.metrics_text();
    let at = |outcome: &str| {
        metric(
            &m,
            &format!(
                "scalpel_serve_direct_connections_at_replacement_total{{app=\"web\",outcome=\"{outcome}\"}}"
            ),
        )
    };
    assert_eq!(at("read_after_answer"), 1.0, "{m}");
    assert_eq!(at("in_use"), 2.0, "{m}");
    assert_eq!(
        at("rescued") + at("half_read") + at("not_taken"),
        0.0,
        "{m}"
    );
    let log = trace_text();
    assert!(
        log.lines().any(|l| l.contains("worker restart")
            && l.contains(&format!("pid={victim}"))
            && l.contains("1 read after an answer")),
        "no restart line with the counts:\n{log}"
    );
    // A new connection is served (by the other worker or the successor).
    let mut fresh = TcpStream::connect(listen).await.expect("connect");
    fresh
        .write_all(b"GET /pid HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let (head, body) = read_response(&mut fresh).await.expect("a new connection");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_ne!(body.trim(), victim.to_string());
    h.server.shutdown().await;
}
