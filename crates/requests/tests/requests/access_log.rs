//! Access logs written by a real nginx: a request sequence is sent over TCP to an nginx
//! started on loopback with three log formats (combined, combined + `$request_time`,
//! common), and each log is read back and compared with what was sent — requests, headers
//! and the recorded schedule.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use scalpel_requests::{RecordedSource, RenderedRequest, SkipReason, SourceFormat, SourceOptions};
use scalpel_testkit::peers::{Peer, nginx_in};

/// nginx on a free loopback port writing three access logs to `dir`: `combined.log`,
/// `timed.log` (combined + `$request_time`) and `common.log`.
fn start_nginx(dir: &Path) -> (Peer, u16) {
    let nginx = nginx_in(dir, 1, |ports, d| {
        let d = d.display();
        format!(
            r#"    log_format timed '$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent "$http_referer" "$http_user_agent" $request_time';
    log_format plain '$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent';
    access_log {d}/combined.log combined;
    access_log {d}/timed.log timed;
    access_log {d}/common.log plain;
    server {{
        listen 127.0.0.1:{port};
        location / {{ return 200 "ok\n"; }}
    }}
"#,
            port = ports[0]
        )
    });
    let port = nginx.ports[0];
    (nginx, port)
}

/// Sends raw bytes on a new connection and reads until nginx closes it.
fn send(port: u16, raw: &[u8]) -> SystemTime {
    let sent = SystemTime::now();
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect to nginx");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(raw).expect("send");
    let mut sink = Vec::new();
    let _ = s.read_to_end(&mut sink);
    sent
}

struct Sent {
    method: &'static str,
    /// What the request target means to the server, in origin form.
    path: &'static str,
    agent: &'static str,
    referer: Option<&'static str>,
    at: SystemTime,
}

fn request(method: &str, target: &[u8], agent: &str, referer: Option<&str>, body: &str) -> Vec<u8> {
    let mut raw = Vec::new();
    raw.extend_from_slice(method.as_bytes());
    raw.push(b' ');
    raw.extend_from_slice(target);
    raw.extend_from_slice(b" HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n");
    raw.extend_from_slice(format!("User-Agent: {agent}\r\n").as_bytes());
    if let Some(r) = referer {
        raw.extend_from_slice(format!("Referer: {r}\r\n").as_bytes());
    }
    raw.extend_from_slice(format!("Content-Length: {}\r\n\r\n{body}", body.len()).as_bytes());
    raw
}

/// The sequence: usable GETs (one with a raw UTF-8 target, one absolute-form, one with a
/// quote in its user agent), two unsafe methods, `OPTIONS *`, and a TLS hello sent to the
/// plain port, in three bursts over about four seconds.
fn send_sequence(port: u16) -> Vec<Sent> {
    let mut sent = Vec::new();
    let mut go = |method: &'static str,
                  target: &[u8],
                  path: &'static str,
                  agent: &'static str,
                  referer: Option<&'static str>,
                  body: &str| {
        let at = send(port, &request(method, target, agent, referer, body));
        sent.push(Sent {
            method,
            path,
            agent,
            referer,
            at,
        });
    };
    go("GET", b"/a?x=1", "/a?x=1", "scalpel-test/1", None, "");
    go(
        "GET",
        b"/users/42/stats?days=30",
        "/users/42/stats?days=30",
        "scalpel-test/2",
        Some("http://ref.example/page?p=1"),
        "",
    );
    go("HEAD", b"/h", "/h", "scalpel-test/3", None, "");
    go(
        "POST",
        b"/pay",
        "/pay",
        "scalpel-test/4",
        None,
        "{\"amount_minor\":1}",
    );
    go(
        "GET",
        "/café?q=☃".as_bytes(),
        "/caf%C3%A9?q=%E2%98%83",
        "scalpel-test/5",
        None,
        "",
    );
    go(
        "GET",
        b"http://example.com/abs?q=1",
        "/abs?q=1",
        "scalpel-test/6",
        None,
        "",
    );
    go("OPTIONS", b"*", "*", "scalpel-test/7", None, "");
    go("GET", b"/q", "/q", "Mozilla \"quoted\" \\ agent", None, "");
    // Not HTTP at all: nginx answers 400 and logs the bytes it got.
    let _ = send(
        port,
        b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03\r\n\r\n",
    );
    std::thread::sleep(Duration::from_millis(1500));
    go("GET", b"/later/1", "/later/1", "scalpel-test/9", None, "");
    go("GET", b"/later/2", "/later/2", "scalpel-test/10", None, "");
    go("GET", b"/later/3", "/later/3", "scalpel-test/11", None, "");
    std::thread::sleep(Duration::from_millis(2200));
    go(
        "DELETE",
        b"/items/9",
        "/items/9",
        "scalpel-test/12",
        None,
        "",
    );
    go("GET", b"/last", "/last", "scalpel-test/13", None, "");
    sent
}

/// Waits until every log holds `lines` lines: nginx writes a request's line when it frees
/// the request, which for a request with a body can be after the client saw the answer.
fn wait_for_logs(dir: &Path, lines: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    for log in ["combined.log", "timed.log", "common.log"] {
        loop {
            let text = std::fs::read(dir.join(log)).unwrap_or_default();
            if text.iter().filter(|&&b| b == b'\n').count() >= lines {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{log}: nginx did not log {lines} requests"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn secs_between(a: SystemTime, b: SystemTime) -> f64 {
    match b.duration_since(a) {
        Ok(d) => d.as_secs_f64(),
        Err(e) => -e.duration().as_secs_f64(),
    }
}

struct Got {
    method: String,
    path: String,
    agent: Option<String>,
    referer: Option<String>,
    at: Duration,
    line: u64,
    body: usize,
}

fn read_all(source: &RecordedSource) -> Vec<Got> {
    let mut reader = source.reader();
    let mut out = RenderedRequest::default();
    let mut got = Vec::new();
    while let Some(r) = reader.next_into(&mut out).expect("read") {
        let header = |name: &str| {
            out.headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| String::from_utf8_lossy(v.as_bytes()).into_owned())
        };
        got.push(Got {
            method: out.method.to_string(),
            path: out.path_and_query.clone(),
            agent: header("user-agent"),
            referer: header("referer"),
            at: r.at,
            line: r.line,
            body: out.body.len(),
        });
    }
    got
}

/// For every line with a `[dd/Mon/yyyy:hh:mm:ss zone]` stamp: its second of the day, its
/// position in the run of lines with the same stamp, and the run's length.
fn stamps_by_line(path: &Path) -> std::collections::HashMap<u64, (u64, u64, u64)> {
    let text = std::fs::read_to_string(path).unwrap();
    let stamped: Vec<(u64, &str)> = text
        .lines()
        .enumerate()
        .filter_map(|(i, l)| Some((i as u64 + 1, l.split_once('[')?.1.split_once(']')?.0)))
        .collect();
    let mut out = std::collections::HashMap::new();
    let mut i = 0;
    while i < stamped.len() {
        let run = stamped[i..]
            .iter()
            .take_while(|(_, s)| *s == stamped[i].1)
            .count();
        let hms: Vec<u64> = stamped[i].1[12..20]
            .split(':')
            .map(|p| p.parse().unwrap())
            .collect();
        let secs = hms[0] * 3600 + hms[1] * 60 + hms[2];
        for j in 0..run {
            out.insert(stamped[i + j].0, (secs, j as u64, run as u64));
        }
        i += run;
    }
    out
}

#[test]
fn logs_written_by_a_real_nginx_replay_what_was_sent_on_the_recorded_schedule() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (nginx, port) = start_nginx(dir.path());
    let sent = send_sequence(port);
    wait_for_logs(dir.path(), sent.len() + 1);
    drop(nginx);

    let safe: Vec<&Sent> = sent
        .iter()
        .filter(|s| matches!(s.method, "GET" | "HEAD") && s.path != "*")
        .collect();
    for (log, with_headers) in [
        ("combined.log", true),
        ("timed.log", true),
        ("common.log", false),
    ] {
        let path = dir.path().join(log);
        let source = RecordedSource::open(&path, SourceOptions::new())
            .unwrap_or_else(|e| panic!("{log}: {e}"));
        assert_eq!(source.format(), SourceFormat::AccessLog, "{log} detected");
        let summary = source.summary();
        assert_eq!(
            summary.usable,
            safe.len() as u64,
            "{log}: {}",
            summary.describe()
        );
        assert_eq!(
            summary.skipped.get(SkipReason::Unsafe),
            2,
            "{log}: POST and DELETE"
        );
        assert_eq!(
            summary.skipped.get(SkipReason::NotReplayable),
            1,
            "{log}: OPTIONS *"
        );
        assert_eq!(
            summary.skipped.get(SkipReason::Malformed),
            1,
            "{log}: the TLS hello"
        );
        assert_eq!(summary.first_malformed.len(), 1);
        assert_eq!(summary.first_malformed[0].line, 9, "{log}: the 9th line");

        let got = read_all(&source);
        assert_eq!(got.len(), safe.len());
        let first_sent = safe[0].at;
        let mut last_at = Duration::ZERO;
        for (g, s) in got.iter().zip(&safe) {
            assert_eq!(
                (g.method.as_str(), g.path.as_str()),
                (s.method, s.path),
                "{log}"
            );
            assert_eq!(g.body, 0, "access logs hold no bodies");
            if with_headers {
                assert_eq!(g.agent.as_deref(), Some(s.agent), "{log} line {}", g.line);
                assert_eq!(g.referer.as_deref(), s.referer, "{log} line {}", g.line);
            } else {
                assert_eq!((g.agent.as_deref(), g.referer.as_deref()), (None, None));
            }
            // nginx stamps whole seconds; spread over the second, a request's time stays
            // within a second of when it was really sent (plus slack for a loaded machine).
            let real = secs_between(first_sent, s.at);
            let recorded = g.at.as_secs_f64();
            assert!(
                (recorded - real).abs() <= 2.5,
                "{log} {}: recorded at {recorded:.3} s, sent at {real:.3} s",
                s.path
            );
            assert!(g.at >= last_at, "times never go backwards");
            last_at = g.at;
        }
        // The span covers the two pauses (1.5 s + 2.2 s) within the stamps' resolution.
        let real_span = secs_between(first_sent, safe[safe.len() - 1].at);
        let span = summary.span.as_secs_f64();
        assert!(
            (span - real_span).abs() <= 2.5,
            "{log}: span {span} vs {real_span}"
        );
        assert_eq!(summary.span, got[got.len() - 1].at);
        // Each request's time follows the log's own stamps: the j-th of m lines stamped
        // with one second is at that second + j/m (computed here from the raw lines).
        let stamps = stamps_by_line(&path);
        let expected = |line: u64| {
            let (secs, j, m) = stamps[&line];
            secs as f64 + j as f64 / m as f64
        };
        let origin = expected(got[0].line);
        for g in &got {
            let want = expected(g.line) - origin;
            assert!(
                (g.at.as_secs_f64() - want).abs() < 1e-6,
                "{log} line {}: at {:?}, stamps say {want}",
                g.line,
                g.at
            );
        }

        // Unsafe methods when allowed: POST and DELETE come back (without their body).
        let all = RecordedSource::open(&path, SourceOptions::new().allow_unsafe(true)).unwrap();
        let got = read_all(&all);
        let methods: Vec<&str> = got.iter().map(|g| g.method.as_str()).collect();
        assert_eq!(methods.iter().filter(|m| **m == "POST").count(), 1);
        assert_eq!(methods.iter().filter(|m| **m == "DELETE").count(), 1);
        assert_eq!(all.summary().skipped.get(SkipReason::Unsafe), 0);
    }
}

#[test]
fn filters_shares_loops_and_malformed_lines_on_a_real_nginx_log() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (nginx, port) = start_nginx(dir.path());
    for i in 0..10 {
        send(
            port,
            &request("GET", format!("/v1/items/{i}").as_bytes(), "t", None, ""),
        );
        send(port, &request("GET", b"/health", "t", None, ""));
    }
    send(port, &request("PUT", b"/v1/items/1", "t", None, "x"));
    wait_for_logs(dir.path(), 21);
    drop(nginx);

    // Broken lines added to the real log: cut short, binary, far too long, blank.
    let mut log = std::fs::read(dir.path().join("timed.log")).unwrap();
    let good_lines = log.iter().filter(|&&b| b == b'\n').count() as u64;
    log.extend_from_slice(b"127.0.0.1 - - [10/Oct/2000:13:55:36 -0700] \"GET /cut\n");
    log.extend_from_slice(b"\x00\xff\xfe garbage\n\n   \n");
    log.extend_from_slice(&vec![b'x'; 100 << 10]);
    log.extend_from_slice(
        b"\n127.0.0.1 - - [99/Oct/2000:13:55:36 -0700] \"GET / HTTP/1.1\" 200 1\n",
    );
    let path = dir.path().join("broken.log");
    std::fs::write(&path, &log).unwrap();

    let options = SourceOptions::new()
        .include_path("^/v1/")
        .unwrap()
        .exclude_path("/9$")
        .unwrap()
        .set_header("X-Replay: yes")
        .unwrap()
        .drop_header("User-Agent")
        .unwrap();
    let source = RecordedSource::open(&path, options).unwrap();
    let s = source.summary();
    assert_eq!(s.usable, 9, "{}", s.describe());
    let counts = s.describe();
    assert_eq!(s.skipped.get(SkipReason::PathNotIncluded), 10, "{counts}");
    assert_eq!(s.skipped.get(SkipReason::PathExcluded), 1, "{counts}");
    assert_eq!(s.skipped.get(SkipReason::Unsafe), 1, "{counts}");
    assert_eq!(s.skipped.get(SkipReason::Malformed), 4, "{counts}");
    let lines: Vec<u64> = s.first_malformed.iter().map(|b| b.line).collect();
    assert_eq!(
        lines,
        [
            good_lines + 1,
            good_lines + 2,
            good_lines + 5,
            good_lines + 6
        ],
        "{:?}",
        s.first_malformed
    );
    assert!(
        s.first_malformed[2].message.contains("64 KiB"),
        "{:?}",
        s.first_malformed
    );

    let mut out = RenderedRequest::default();
    let mut reader = source.reader();
    let mut in_order = Vec::new();
    while let Some(r) = reader.next_into(&mut out).unwrap() {
        assert_eq!(out.headers.len(), 1, "user agent dropped, X-Replay set");
        assert_eq!(out.headers[0].0, "x-replay");
        in_order.push((r.index, out.path_and_query.clone()));
    }
    let want: Vec<String> = (0..9).map(|i| format!("/v1/items/{i}")).collect();
    assert_eq!(
        in_order.iter().map(|(_, p)| p.clone()).collect::<Vec<_>>(),
        want
    );

    // Two shares together hold every request once, each in order.
    let mut shared = Vec::new();
    for w in 0..2 {
        let mut r = source.share(w, 2);
        while let Some(rec) = r.next_into(&mut out).unwrap() {
            assert_eq!(rec.index % 2, w);
            shared.push((rec.index, out.path_and_query.clone()));
        }
    }
    shared.sort();
    assert_eq!(shared, in_order);

    // Looping: the 10th request is the first again, flagged.
    let mut r = source.reader().looping(true);
    let recs: Vec<_> = (0..20)
        .map(|_| {
            let rec = r.next_into(&mut out).unwrap().unwrap();
            (rec, out.path_and_query.clone())
        })
        .collect();
    assert!(!recs[8].0.looped() && recs[9].0.looped());
    assert_eq!((recs[9].0.index, recs[9].0.round), (9, 1));
    assert_eq!(recs[9].1, "/v1/items/0");
    assert_eq!(
        recs[9].0.at,
        Duration::ZERO,
        "a new round starts its clock again"
    );

    // Numbered access, forward and back, agrees with the sequence.
    let mut r = source.reader();
    for i in [3u64, 4, 8, 0, 12, 5] {
        let rec = r.get_into(i, &mut out).unwrap();
        assert_eq!(rec.index, i);
        assert_eq!(out.path_and_query, want[(i % 9) as usize], "index {i}");
        assert_eq!(rec.looped(), i >= 9);
    }
}

#[test]
fn a_log_with_no_usable_request_is_an_error_that_counts_why() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("unsafe.log");
    std::fs::write(
        &path,
        "1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] \"POST /a HTTP/1.1\" 200 1\n\
         1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] \"-\" 400 0\n\
         garbage\n",
    )
    .unwrap();
    let err = RecordedSource::open(&path, SourceOptions::new()).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("no usable request"), "{text}");
    assert!(text.contains("1 unsafe method"), "{text}");
    assert!(text.contains("1 not replayable"), "{text}");
    assert!(text.contains("1 malformed"), "{text}");
    assert!(text.contains("line 3"), "{text}");
    assert!(text.contains(&path.display().to_string()), "{text}");

    let empty = dir.path().join("empty.log");
    std::fs::write(&empty, "").unwrap();
    let err = RecordedSource::open(&empty, SourceOptions::new()).unwrap_err();
    assert!(err.to_string().contains("empty"), "{err}");

    let prose = dir.path().join("prose.txt");
    std::fs::write(&prose, "hello\nworld\n").unwrap();
    let err = RecordedSource::open(&prose, SourceOptions::new()).unwrap_err();
    assert!(err.to_string().contains("cannot tell the format"), "{err}");
    // Forced, the same file is read as a log and nothing in it is usable.
    let err = RecordedSource::open(&prose, SourceOptions::new().format(SourceFormat::AccessLog))
        .unwrap_err();
    assert!(err.to_string().contains("2 malformed"), "{err}");
}
