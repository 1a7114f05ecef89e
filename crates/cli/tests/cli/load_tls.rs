//! `scalpel load` over TLS and HTTP/2 (issue #12), as a user runs it: the real binary
//! against real peers on loopback started here — nginx with TLS, h2 and h2c (the test
//! kit's `peers::hello`, as the connector's tests use it), nginx choosing its certificate by SNI, Node `node:http2`
//! servers that count concurrent streams, reset streams and hold back their flow-control
//! window — with certificates made by rcgen: good, expired, for the wrong name, untrusted.
//!
//! No timed assertions: counts are exact where the protocol makes them so, and every run
//! has a deadline only to turn a hang into a failure.

use std::path::Path;
use std::time::{Duration, Instant};

use scalpel_testkit::peers::Peer;
use scalpel_testkit::peers::hello::{Certs, certs, nginx, node};
use scalpel_testkit::{scalpel, scratch};
use serde_json::Value;

use crate::util::{assert_one_line_error, load_json, stderr, stdout as text, u};

// ---------------------------------------------------------------------------------------
// Running the binary

fn step(result: &Value) -> &Value {
    &result["targets"][0]["steps"][0]
}

/// Bad input: exit 2, one line on stderr that names the problem, nothing on stdout.
fn assert_refused(args: &[&str], mention: &str) {
    let mut all = vec!["load", "--no-progress", "-n", "5"];
    all.extend_from_slice(args);
    assert_one_line_error(&all, mention);
}

fn ca(certs: &Certs) -> &str {
    certs.ca.to_str().unwrap()
}

fn handshakes(s: &Value) -> u64 {
    let text = s["handshake_histogram"]
        .as_str()
        .expect("a handshake histogram");
    scalpel_load::result::decode_histogram(text).unwrap().len()
}

// ---------------------------------------------------------------------------------------
// Peers of our own: nginx choosing a certificate by SNI, Node h2c servers

/// nginx on one TLS port with two certificates: the good one for `scalpel.test` (chosen
/// by SNI) and, for any other name or none, the wrong-name one.
fn nginx_by_sni(certs: &Certs) -> Peer {
    scalpel_testkit::peers::nginx(1, |p, _| {
        format!(
            r#"
    access_log off;
    server {{
        listen 127.0.0.1:{port} ssl default_server;
        {wrong}
        location / {{ return 200 "default server\n"; }}
    }}
    server {{
        listen 127.0.0.1:{port} ssl;
        server_name scalpel.test;
        {good}
        location / {{ return 200 "scalpel.test\n"; }}
    }}
"#,
            port = p[0],
            wrong = certs.wrong_name.nginx_directives(),
            good = certs.good.nginx_directives(),
        )
    })
}

/// A Node `node:http2` server over plain TCP (h2c) that records, in `stats` (a JSON
/// file rewritten as streams end), the most streams it saw open at once, how many it
/// served and how many it reset. `/slow` answers after 100 ms, `/reset` resets every
/// fourth stream with CANCEL (`/reset?refused`: with REFUSED_STREAM), `/goaway` answers after 100 ms but ends each connection at
/// its tenth stream with a GOAWAY that refuses it and the streams after it, `/echo`
/// reads the request body and answers its length.
fn node_h2c(certs: &Certs, settings: &str, stats: &Path) -> Peer {
    let script = r#"
import http2 from 'node:http2';
import fs from 'node:fs';
const STATS = __STATS__;
let active = 0, max = 0, total = 0, resets = 0;
// Written aside and renamed: a reader never sees the file empty mid-write (a stream closing
// after the run, as the test reads it, made the read fail once).
const save = () => {
  fs.writeFileSync(STATS + '.tmp', JSON.stringify({ max, total, resets }));
  fs.renameSync(STATS + '.tmp', STATS);
};
const server = http2.createServer({ settings: __SETTINGS__ });
server.on('stream', (stream, headers) => {
  const path = headers[':path'];
  total++; active++; max = Math.max(max, active);
  let closed = false;
  stream.on('close', () => { if (!closed) { closed = true; active--; save(); } });
  stream.on('error', () => {});
  if (path.startsWith('/reset') && total % 4 === 0) {
    resets++;
    const c = http2.constants;
    stream.close(path.endsWith('?refused') ? c.NGHTTP2_REFUSED_STREAM : c.NGHTTP2_CANCEL);
    return;
  }
  const mine = (stream.session.streams = (stream.session.streams || 0) + 1);
  if (path === '/goaway' && mine === 10) {
    // GOAWAY naming the stream before this one: this and later streams are refused.
    stream.session.goaway(http2.constants.NGHTTP2_NO_ERROR, stream.id - 2);
    return;
  }
  let got = 0;
  stream.on('data', (d) => { got += d.length; });
  stream.on('end', () => {
    const reply = () => {
      if (!stream.destroyed) {
        stream.respond({ ':status': 200 });
        stream.end(`got ${got}\n`);
      }
    };
    if (path === '/slow' || path === '/goaway') setTimeout(reply, 100); else reply();
  });
});
server.listen(0, '127.0.0.1', () => {
  save();
  console.log('PORT ' + server.address().port);
  console.log('READY');
});
"#
    .replace("__STATS__", &format!("{:?}", stats.display().to_string()))
    .replace("__SETTINGS__", settings);
    node(&script, certs)
}

fn read_stats(stats: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(stats).unwrap()).unwrap()
}

// ---------------------------------------------------------------------------------------
// HTTPS over HTTP/1.1

/// https against nginx with the test CA: every request answered, one TLS handshake per
/// connection in its own histogram (not in request latency), the trust said in the
/// header and the JSON.
#[test]
fn https_h1_with_a_ca_file_answers_and_times_handshakes_apart() {
    let certs = certs();
    let nginx = nginx(&certs);
    let url = format!("https://localhost:{}/", nginx.ports[1]);
    let (code, r, out) = load_json(
        "https-h1",
        &["-c", "2", "-n", "60", "--cacert", ca(&certs), &url],
    );
    assert_eq!(code, 0, "{}", stderr(&out));
    let s = step(&r);
    assert_eq!((u(&s["answered"]), u(&s["errors"])), (60, 0), "{s}");
    // nginx ends a keep-alive connection after 20 requests: 60 requests on 2 connections
    // need at least 3 connections, each with one handshake.
    let opened = u(&s["connections_opened"]);
    assert!(opened >= 3, "{s}");
    assert_eq!(handshakes(s), opened, "a handshake per connection: {s}");
    assert!(s["handshake_ms"]["p50"].as_f64().unwrap() > 0.0, "{s}");
    let c = &r["targets"][0]["connection"];
    assert_eq!(c["protocol"], "http/1.1");
    assert_eq!(
        (c["tls"].as_bool(), c["insecure"].as_bool()),
        (Some(true), Some(false))
    );
    assert_eq!(c["server_name"], "localhost");
    assert_eq!(c["ca_file"], ca(&certs));
    let table = text(&out);
    assert!(
        table.contains("TLS, certificate of localhost verified against"),
        "{table}"
    );
    assert!(table.contains("TLS handshake p50 ms"), "{table}");
}

/// `--no-reuse` (as oha's --disable-keepalive): a new connection, so a new TLS handshake,
/// for every request — counted exactly.
#[test]
fn no_reuse_opens_a_connection_and_a_handshake_per_request() {
    let certs = certs();
    let nginx = nginx(&certs);
    let url = format!("https://localhost:{}/", nginx.ports[1]);
    let (code, r, out) = load_json(
        "no-reuse",
        &[
            "-c",
            "2",
            "-n",
            "40",
            "--no-reuse",
            "--cacert",
            ca(&certs),
            &url,
        ],
    );
    assert_eq!(code, 0, "{}", stderr(&out));
    let s = step(&r);
    assert_eq!((u(&s["sent"]), u(&s["answered"])), (40, 40), "{s}");
    assert_eq!(u(&s["connections_opened"]), 40, "{s}");
    assert_eq!(handshakes(s), 40, "{s}");
    assert_eq!(r["targets"][0]["connection"]["reuse"], false);
    assert!(text(&out).contains("a new connection per request"));
}

/// Certificates that must not verify: each is one line naming the problem, exit 2,
/// before any load. `--insecure` goes through, and says so in the table and the JSON.
#[test]
fn bad_certificates_are_refused_before_any_load_and_insecure_is_said() {
    let certs = certs();
    let nginx = nginx(&certs);
    let p = &nginx.ports;
    let good = format!("https://localhost:{}/", p[1]);
    let expired = format!("https://localhost:{}/", p[3]);
    let wrong = format!("https://localhost:{}/", p[4]);
    let dir = scratch("bad-certs");
    let garbage = dir.join("garbage.pem");
    std::fs::write(&garbage, "not a certificate\n").unwrap();
    // The test CA is in no system store.
    assert_refused(&[&good], "the certificate of localhost is not trusted");
    assert_refused(
        &["--cacert", certs.other_ca.to_str().unwrap(), &good],
        "not trusted",
    );
    assert_refused(&["--cacert", ca(&certs), &expired], "has expired");
    assert_refused(
        &["--cacert", ca(&certs), &wrong],
        "not valid for the name localhost",
    );
    assert_refused(
        &["--cacert", garbage.to_str().unwrap(), &good],
        "cannot use CA file",
    );
    assert_refused(
        &["--cacert", "/nonexistent/ca.pem", &good],
        "cannot use CA file /nonexistent/ca.pem",
    );
    let (code, r, out) = load_json("insecure", &["-n", "10", "--insecure", &expired]);
    assert_eq!(code, 0, "{}", stderr(&out));
    assert_eq!(u(&step(&r)["answered"]), 10);
    assert_eq!(r["targets"][0]["connection"]["insecure"], true);
    assert!(
        text(&out).contains("certificate NOT verified (--insecure)"),
        "{}",
        text(&out)
    );
}

/// `--resolve` keeps the URL's name for SNI and verification: nginx picks its
/// certificate for `scalpel.test` by SNI. Without SNI (an IP address) it answers with
/// its default certificate, which is for another name.
#[test]
fn resolve_keeps_the_name_for_sni_and_the_certificate() {
    let certs = certs();
    let peer = nginx_by_sni(&certs);
    let port = peer.ports[0];
    let named = format!("https://scalpel.test:{port}/");
    let resolve = format!("scalpel.test:{port}:127.0.0.1");
    let (code, r, out) = load_json(
        "sni",
        &[
            "-n",
            "5",
            "--cacert",
            ca(&certs),
            "--resolve",
            &resolve,
            &named,
        ],
    );
    assert_eq!(code, 0, "{}", stderr(&out));
    assert_eq!(u(&step(&r)["answered"]), 5);
    let c = &r["targets"][0]["connection"];
    assert_eq!(c["server_name"], "scalpel.test");
    assert_eq!(c["address"], format!("127.0.0.1:{port}"));
    assert_refused(
        &[
            "--cacert",
            ca(&certs),
            &format!("https://127.0.0.1:{port}/"),
        ],
        "not valid for the name 127.0.0.1",
    );
    // A --resolve entry for another port does not apply: the name is looked up.
    assert_refused(
        &[
            "--cacert",
            ca(&certs),
            "--resolve",
            &format!("scalpel.test:{}:127.0.0.1", port.wrapping_add(1)),
            &named,
        ],
        "scalpel.test",
    );
}

// ---------------------------------------------------------------------------------------
// HTTP/2

/// h2 by ALPN against nginx, 2 connections × 4 streams. nginx ends each connection with
/// GOAWAY after 20 requests (its keepalive_requests): the requests it refused go out
/// again on a new connection, so every request is answered and the GOAWAYs are counted.
#[test]
fn h2_over_tls_survives_goaway_and_counts_it() {
    let certs = certs();
    let nginx = nginx(&certs);
    let url = format!("https://localhost:{}/", nginx.ports[0]);
    let (code, r, out) = load_json(
        "h2-tls",
        &[
            "--http2",
            "-c",
            "2",
            "--streams",
            "4",
            "-n",
            "200",
            "--cacert",
            ca(&certs),
            &url,
        ],
    );
    assert_eq!(code, 0, "{}", stderr(&out));
    let s = step(&r);
    assert_eq!((u(&s["answered"]), u(&s["errors"])), (200, 0), "{s}");
    assert!(
        u(&s["h2"]["goaway"]) >= 5,
        "a GOAWAY every 20 requests: {s}"
    );
    assert!(u(&s["connections_opened"]) >= 10, "{s}");
    assert_eq!(handshakes(s), u(&s["connections_opened"]), "{s}");
    let c = &r["targets"][0]["connection"];
    assert_eq!(
        (c["protocol"].as_str(), c["streams"].as_u64()),
        (Some("h2"), Some(4))
    );
    let table = text(&out);
    assert!(
        table.contains("HTTP/2 (h2 by ALPN), 4 streams per connection"),
        "{table}"
    );
    assert!(table.contains("h2 GOAWAY"), "{table}");
}

/// A server that does not offer h2 when --http2 asks for it, over TLS (ALPN) or over
/// plain TCP (no h2c): one line, exit 2, before any load.
#[test]
fn a_server_that_refuses_h2_is_refused_before_any_load() {
    let certs = certs();
    let nginx = nginx(&certs);
    assert_refused(
        &[
            "--http2",
            "--cacert",
            ca(&certs),
            &format!("https://localhost:{}/", nginx.ports[1]),
        ],
        "server does not speak h2",
    );
    // nginx's TLS port answers plain TCP with an HTTP/1.1 400, never with h2.
    assert_refused(
        &["--http2", &format!("http://127.0.0.1:{}/", nginx.ports[1])],
        "does not speak HTTP/2 over plain TCP",
    );
    // h2c where it is spoken: nginx's `http2` port without TLS.
    let (code, r, out) = load_json(
        "h2c",
        &[
            "--http2",
            "-n",
            "10",
            &format!("http://127.0.0.1:{}/", nginx.ports[2]),
        ],
    );
    assert_eq!(code, 0, "{}", stderr(&out));
    assert_eq!(u(&step(&r)["answered"]), 10);
    assert_eq!(r["targets"][0]["connection"]["protocol"], "h2c");
    assert!(
        step(&r)["handshake_ms"].is_null(),
        "no TLS, no handshake figures"
    );
}

/// #26.1: the server sees exactly the requests a run counts, over h2c too, where only an
/// answer shows the server speaks HTTP/2: `load`'s probe sent request 0 once more, and
/// `shadow replay`'s check sent a `HEAD /` to each upstream; both now send a PING.
#[test]
fn h2c_probes_send_no_request() {
    let certs = certs();
    let dir = scratch("h2c-probe");
    let (pstats, cstats) = (dir.join("primary.json"), dir.join("candidate.json"));
    let (primary, candidate) = (
        node_h2c(&certs, "{}", &pstats),
        node_h2c(&certs, "{}", &cstats),
    );
    let ids = dir.join("ids.txt");
    std::fs::write(&ids, (0..12).map(|i| format!("u{i}\n")).collect::<String>()).unwrap();
    let url = |s: &Peer| format!("http://127.0.0.1:{}", s.ports[0]);
    let out = scalpel(&[
        "shadow",
        "replay",
        "--http2",
        "--primary",
        &url(&primary),
        "--candidate",
        &url(&candidate),
        "--template",
        "/v1/users/{id}",
        "--data",
        ids.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    for stats in [&pstats, &cstats] {
        assert_eq!(settled_total(stats, 12), 12, "{}", stats.display());
    }
    let (code, r, out) = load_json(
        "h2c-probe",
        &[
            "--http2",
            "-c",
            "2",
            "-n",
            "30",
            &format!("{}/x", url(&primary)),
        ],
    );
    assert_eq!(code, 0, "{}", stderr(&out));
    assert_eq!(u(&step(&r)["answered"]), 30);
    assert_eq!(settled_total(&pstats, 12 + 30), 12 + 30);
}

/// The server's stream count once it has reached `at_least` (its file is rewritten as each
/// stream closes, which may trail the client's exit a little) and a moment more has passed
/// for any stream beyond it to show.
fn settled_total(stats: &Path, at_least: u64) -> u64 {
    // Read while Node may be rewriting it: a torn read is tried again.
    let total = || loop {
        let text = std::fs::read_to_string(stats).unwrap_or_default();
        if let Some(n) = serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|v| v["total"].as_u64())
        {
            return n;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while total() < at_least && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(300));
    total()
}

/// The closed model keeps connections × streams requests in flight: a Node server whose
/// answers take 100 ms sees exactly 2 × 4 = 8 streams open at once, never more.
#[test]
fn h2_closed_model_keeps_connections_times_streams_in_flight() {
    let certs = certs();
    let dir = scratch("h2-inflight");
    let stats = dir.join("stats.json");
    let server = node_h2c(&certs, "{}", &stats);
    let url = format!("http://127.0.0.1:{}/slow", server.ports[0]);
    let (code, r, out) = load_json(
        "h2-inflight",
        &["--http2", "-c", "2", "--streams", "4", "-d", "2s", &url],
    );
    assert_eq!(code, 0, "{}", stderr(&out));
    let s = step(&r);
    assert_eq!(u(&s["errors"]), 0, "{s}");
    let seen = read_stats(&stats);
    assert_eq!(seen["max"], 8, "streams open at once at the server: {seen}");
    assert_eq!(u(&s["connections_opened"]), 2, "{s}");
    assert_eq!(u(&s["h2"]["stalled_on_streams"]), 0, "{s}");
}

/// A server that resets streams: each reset request is an error `reset:cancel`
/// (sent, no answer), counted again under the step's HTTP/2 events; the other requests
/// on the same connection go on.
#[test]
fn streams_the_server_resets_are_errors_by_reason() {
    let certs = certs();
    let dir = scratch("h2-reset");
    let stats = dir.join("stats.json");
    let server = node_h2c(&certs, "{}", &stats);
    let url = format!("http://127.0.0.1:{}/reset", server.ports[0]);
    let (code, r, out) = load_json(
        "h2-reset",
        &["--http2", "-c", "1", "--streams", "2", "-n", "101", &url],
    );
    assert_eq!(code, 0, "{}", stderr(&out));
    let s = step(&r);
    let seen = read_stats(&stats);
    // The run's 101 streams, no more: the probe's PING opens none.
    let resets = u(&seen["resets"]);
    assert_eq!(u(&seen["total"]), 101, "{seen}");
    assert_eq!(resets, 25, "every fourth of streams 1..=101: {seen}");
    assert_eq!(u(&s["error_kinds"]["reset:cancel"]), resets, "{s}");
    assert_eq!(u(&s["h2"]["rst_stream"]), resets, "{s}");
    assert_eq!(u(&s["h2"]["rst_by_reason"]["cancel"]), resets, "{s}");
    assert_eq!(u(&s["answered"]) + resets, 101, "{s}");
    assert_eq!(u(&s["failed"]), resets, "{s}");
    assert_eq!(
        u(&s["connections_opened"]),
        1,
        "a reset stream keeps its connection: {s}"
    );
    let table = text(&out);
    assert!(
        table.contains("reset:cancel") && table.contains("h2 RST_STREAM"),
        "{table}"
    );
}

/// Flow-control stalls by kind: a server allowing 2 streams while 4 are asked for makes
/// requests wait for a stream; a 16 KiB window makes 64 KiB bodies wait for window.
#[test]
fn h2_stalls_on_the_servers_limits_are_counted_by_kind() {
    let certs = certs();
    let dir = scratch("h2-stalls");
    let limited = dir.join("limited.json");
    let server = node_h2c(&certs, "{ maxConcurrentStreams: 2 }", &limited);
    let url = format!("http://127.0.0.1:{}/slow", server.ports[0]);
    let (code, r, out) = load_json(
        "h2-streams",
        &["--http2", "-c", "1", "--streams", "4", "-n", "40", &url],
    );
    assert_eq!(code, 0, "{}", stderr(&out));
    let s = step(&r);
    assert_eq!((u(&s["answered"]), u(&s["errors"])), (40, 0), "{s}");
    assert!(u(&s["h2"]["stalled_on_streams"]) > 0, "{s}");
    assert_eq!(read_stats(&limited)["max"], 2, "the server's limit held");

    let windowed = dir.join("windowed.json");
    let server = node_h2c(&certs, "{ initialWindowSize: 16384 }", &windowed);
    let body = dir.join("body.bin");
    std::fs::write(&body, "x".repeat(64 * 1024)).unwrap();
    let url = format!("http://127.0.0.1:{}/echo", server.ports[0]);
    let (code, r, out) = load_json(
        "h2-window",
        &[
            "--http2",
            "-m",
            "POST",
            "--body-file",
            body.to_str().unwrap(),
            "-c",
            "1",
            "-n",
            "10",
            &url,
        ],
    );
    assert_eq!(code, 0, "{}", stderr(&out));
    let s = step(&r);
    assert_eq!((u(&s["answered"]), u(&s["errors"])), (10, 0), "{s}");
    assert!(u(&s["h2"]["stalled_on_window"]) > 0, "{s}");
    assert!(text(&out).contains("h2 waited for window"));
}

/// The open model over HTTP/2 spreads requests over the connections' free streams; a
/// request that finds none waits and is counted late, its latency still from its
/// intended time (never lower): 1 connection × 2 streams of 100 ms answers carry at most
/// 20 requests a second, 40 are asked for.
#[test]
fn h2_open_model_counts_requests_without_a_free_stream_as_late() {
    let certs = certs();
    let dir = scratch("h2-open");
    let stats = dir.join("stats.json");
    let server = node_h2c(&certs, "{}", &stats);
    let url = format!("http://127.0.0.1:{}/slow", server.ports[0]);
    let (code, r, out) = load_json(
        "h2-open",
        &[
            "--http2",
            "-c",
            "1",
            "--streams",
            "2",
            "--rate",
            "40",
            "-d",
            "2s",
            &url,
        ],
    );
    assert_eq!(code, 0, "{}", stderr(&out));
    let s = step(&r);
    assert!(u(&s["late"]) > 0, "{s}");
    assert_eq!(
        u(&s["connections_opened"]),
        1,
        "no connection beyond -c: {s}"
    );
    assert_eq!(read_stats(&stats)["max"], 2, "never more than the streams");
    // Waiting for a stream is part of the latency: above the server's own 100 ms.
    assert!(s["latency_ms"]["p90"].as_f64().unwrap() > 150.0, "{s}");
}

/// #11.7 over TLS: a keep-alive connection the server closed while idle (nginx's
/// keepalive_timeout is 1 s here; requests come every 2 s) is noticed before the next
/// request and replaced — no error, one new connection (and handshake) each time.
#[test]
fn an_idle_tls_connection_the_server_closed_is_replaced_not_an_error() {
    let certs = certs();
    let nginx = nginx(&certs);
    let url = format!("https://localhost:{}/", nginx.ports[1]);
    let (code, r, out) = load_json(
        "tls-idle",
        &[
            "--rate",
            "0.5",
            "-d",
            "5s",
            "-c",
            "1",
            "--max-in-flight",
            "1",
            "--threads",
            "1",
            "--cacert",
            ca(&certs),
            &url,
        ],
    );
    assert_eq!(code, 0, "{}", stderr(&out));
    let s = step(&r);
    assert_eq!((u(&s["answered"]), u(&s["errors"])), (3, 0), "{s}");
    assert_eq!(u(&s["connections_opened"]), 3, "{s}");
    assert_eq!(handshakes(s), 3, "{s}");
}

/// TLS failures during a run are errors by kind: a front that passes the first three
/// connections to nginx and then drops each new one in its handshake. With --no-reuse
/// every request needs a handshake: the probe's connection, the pre-opened one and one more
/// get through; the other eight requests fail as `tls`, never sent.
#[test]
fn tls_failures_during_a_run_are_errors_by_kind() {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    let certs = certs();
    let nginx = nginx(&certs);
    let upstream = nginx.ports[1];
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for (n, client) in listener.incoming().flatten().enumerate() {
            if n >= 3 {
                let mut hello = [0u8; 512];
                let mut client = client;
                let _ = client.read(&mut hello); // the ClientHello, then gone
                continue;
            }
            let server = TcpStream::connect(("127.0.0.1", upstream)).unwrap();
            for (mut from, mut to) in [
                (client.try_clone().unwrap(), server.try_clone().unwrap()),
                (server, client),
            ] {
                std::thread::spawn(move || {
                    let mut buf = [0u8; 16 * 1024];
                    while let Ok(n) = from.read(&mut buf) {
                        if n == 0 || to.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    let _ = to.shutdown(std::net::Shutdown::Write);
                });
            }
        }
    });
    let url = format!("https://localhost:{port}/");
    let (code, r, out) = load_json(
        "tls-during",
        &[
            "-c",
            "1",
            "-n",
            "10",
            "--no-reuse",
            "--cacert",
            ca(&certs),
            &url,
        ],
    );
    assert_eq!(code, 0, "{}", stderr(&out));
    let s = step(&r);
    assert_eq!(u(&s["answered"]), 2, "{s}");
    assert_eq!(u(&s["error_kinds"]["tls"]), 8, "{s}");
    assert_eq!(u(&s["sent"]), 2, "a failed handshake sends nothing: {s}");
    assert!(text(&out).contains("tls"), "{}", text(&out));
}

/// Streams past a GOAWAY's last stream id were never processed (RFC 9113 §6.8): they go
/// out again on a new connection instead of counting as errors, and each GOAWAY is
/// counted. The Node server refuses every connection's tenth stream and those after it.
#[test]
fn requests_a_goaway_refused_go_out_again_on_a_new_connection() {
    let certs = certs();
    let dir = scratch("h2-goaway");
    let stats = dir.join("stats.json");
    let server = node_h2c(&certs, "{}", &stats);
    let url = format!("http://127.0.0.1:{}/goaway", server.ports[0]);
    let (code, r, out) = load_json(
        "h2-goaway",
        &["--http2", "-c", "1", "--streams", "4", "-n", "40", &url],
    );
    assert_eq!(code, 0, "{}", stderr(&out));
    let s = step(&r);
    assert_eq!((u(&s["answered"]), u(&s["errors"])), (40, 0), "{s}");
    let goaways = u(&s["h2"]["goaway"]);
    assert!(goaways >= 4, "40 requests, 9 a connection: {s}");
    assert!(u(&s["connections_opened"]) > goaways, "{s}");
}

/// A stream reset with REFUSED_STREAM was not processed (RFC 9113 §8.7): it goes out again
/// on the same connection, and only the reset is counted (by reason), not an error.
#[test]
fn refused_streams_go_out_again_and_are_counted_not_failed() {
    let certs = certs();
    let dir = scratch("h2-refused");
    let stats = dir.join("stats.json");
    let server = node_h2c(&certs, "{}", &stats);
    let url = format!("http://127.0.0.1:{}/reset?refused", server.ports[0]);
    let (code, r, out) = load_json(
        "h2-refused",
        &["--http2", "-c", "1", "--streams", "2", "-n", "101", &url],
    );
    assert_eq!(code, 0, "{}", stderr(&out));
    let s = step(&r);
    assert_eq!((u(&s["answered"]), u(&s["errors"])), (101, 0), "{s}");
    let resets = u(&read_stats(&stats)["resets"]);
    assert!(resets >= 25, "{resets}");
    assert_eq!(
        u(&s["h2"]["rst_by_reason"]["refused_stream"]),
        resets,
        "{s}"
    );
    assert_eq!(u(&s["connections_opened"]), 1, "{s}");
}
