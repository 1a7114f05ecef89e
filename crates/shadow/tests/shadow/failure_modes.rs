//! How the proxy and replay behave when a side misbehaves — slow, huge, compressed,
//! cut short, chatty with interim responses or trailers — each against real servers on
//! loopback. Every test is named after what broke before it was fixed.

use crate::support;

use std::io::Write as _;
use std::sync::Arc;
use std::time::Duration;

use scalpel_diff::{Comparer, NoiseRule, RouteNormalizer};
use scalpel_requests::{DataSet, Order, RequestSet, RequestTemplate};
use scalpel_shadow::{
    CompareSettings, ProxyConfig, Recorder, Redactor, ReplayConfig, Store, Upstream, replay,
};
use support::{
    Answer, Running, Step, accounted, dead_addr, eventually, get, metric, metrics, raw_exchange,
    raw_server, send, serve, start_with,
};

fn settings(comparer: Comparer) -> CompareSettings {
    CompareSettings::new(
        comparer,
        RouteNormalizer::default(),
        NoiseRule::default(),
        Redactor::new(["password"]),
        50,
        false,
    )
}

fn proxy_cfg(primary: &str, candidate: &str) -> ProxyConfig {
    support::proxy_cfg(
        Upstream::parse(primary).unwrap(),
        Upstream::parse(candidate).unwrap(),
    )
}

async fn start(cfg: ProxyConfig) -> Running {
    start_with(
        cfg,
        Arc::new(Recorder::new(settings(Comparer::new()), None)),
    )
    .await
}

fn gzip(b: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(b).unwrap();
    e.finish().unwrap()
}

fn answer_bytes(status: u16, headers: &[(&str, &str)], body: &[u8]) -> Answer {
    let mut a = Answer::json("").status(status);
    a.headers.clear();
    for (k, v) in headers {
        a = a.header(k, v);
    }
    a.body = body.to_vec();
    a
}

/// Issue #18.9: a 1 MiB answer and a slow candidate grew the proxy by one copy per queued
/// job (3.2 GB at 300 req/s). Now queued and in-flight bodies share a byte budget; past it
/// mirrors are skipped and counted, and the budget is never exceeded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn big_answers_and_a_slow_candidate_stay_within_the_mirror_byte_budget() {
    let big = format!("{{\"data\":\"{}\"}}", "x".repeat(1 << 20));
    let b2 = big.clone();
    let primary = serve(move |_| Answer::json(b2.clone())).await;
    let b3 = big.clone();
    let candidate = serve(move |_| Answer::json(b3.clone()).delay(Duration::from_secs(3))).await;
    let mut cfg = proxy_cfg(&primary.url(), &candidate.url());
    let budget = 4u64 << 20;
    cfg.mirror_budget = budget;
    let p = start(cfg).await;
    let c = support::client();
    for i in 0..12 {
        let got = get(&c, &format!("{}/big/{i}", p.url)).await;
        assert_eq!(
            got.body.len(),
            big.len(),
            "the client always gets everything"
        );
    }
    let s = eventually(
        "every mirror accounted",
        Duration::from_secs(60),
        async || {
            let s = p.recorder.summary();
            (accounted(&s) == 12).then_some(s)
        },
    )
    .await;
    let over = s.skipped_by_reason.get("over_budget").copied().unwrap_or(0);
    assert!(
        over >= 6,
        "12 answers of 1 MiB cannot all be held in 4 MiB: {s:?}"
    );
    assert!(s.compared >= 1, "{s:?}");
    assert_eq!(s.mismatched, 0);
    let m = metrics(&p.admin).await;
    let peak = metric(&m, "scalpel_shadow_mirror_bytes_peak").unwrap();
    assert!(
        peak > 0.0 && peak <= budget as f64,
        "peak {peak} of budget {budget}"
    );
    assert_eq!(
        metric(&m, "scalpel_shadow_skipped_total{reason=\"over_budget\"}"),
        Some(over as f64)
    );
    eventually("bytes given back", Duration::from_secs(30), async || {
        (metric(&metrics(&p.admin).await, "scalpel_shadow_mirror_bytes") == Some(0.0)).then_some(())
    })
    .await;
    let _ = p.stop.send(());
    let _ = p.task.await;
}

/// Issue #18.9: mirrors queued behind a slow candidate were compared 80 s after the
/// answers. A mirror older than the maximum age is dropped and counted instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mirrors_older_than_the_max_age_are_dropped_and_counted() {
    let primary = serve(|_| Answer::json("{}")).await;
    let candidate = serve(|_| Answer::json("{}").delay(Duration::from_secs(2))).await;
    let mut cfg = proxy_cfg(&primary.url(), &candidate.url());
    cfg.mirror_concurrency = 1;
    cfg.mirror_max_age = Duration::from_secs(1);
    let p = start(cfg).await;
    let c = support::client();
    for _ in 0..4 {
        assert_eq!(get(&c, &format!("{}/x", p.url)).await.status, 200);
    }
    let s = eventually("4 accounted", Duration::from_secs(60), async || {
        let s = p.recorder.summary();
        (accounted(&s) == 4).then_some(s)
    })
    .await;
    // The first runs at once; each other one waited 2 s or more for the single slot.
    assert_eq!(s.compared, 1, "{s:?}");
    assert_eq!(s.skipped_by_reason.get("too_old"), Some(&3), "{s:?}");
    let m = metrics(&p.admin).await;
    assert_eq!(
        metric(&m, "scalpel_shadow_skipped_total{reason=\"too_old\"}"),
        Some(3.0),
        "{m}"
    );
    let _ = p.stop.send(());
    let _ = p.task.await;
}

/// Issue #18.10: at shutdown, queued and in-flight mirrors vanished from the counts. Now
/// each ends in exactly one counter; the ones cut off are `abandoned_at_shutdown`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_counts_every_chosen_request_once() {
    let primary = serve(|_| Answer::json("{}")).await;
    let candidate = serve(|a| {
        let slow = !a.path_and_query.starts_with("/fast");
        Answer::json("{}").delay(if slow {
            Duration::from_secs(60)
        } else {
            Duration::ZERO
        })
    })
    .await;
    let mut cfg = proxy_cfg(&primary.url(), &candidate.url());
    cfg.mirror_concurrency = 2;
    cfg.mirror_timeout = Duration::from_secs(2);
    let p = start(cfg).await;
    let c = support::client();
    for i in 0..3 {
        get(&c, &format!("{}/fast/{i}", p.url)).await;
    }
    eventually("fast ones compared", Duration::from_secs(30), async || {
        (p.recorder.summary().compared == 3).then_some(())
    })
    .await;
    for i in 0..7 {
        get(&c, &format!("{}/slow/{i}", p.url)).await;
    }
    let _ = p.stop.send(());
    let stats = tokio::time::timeout(Duration::from_secs(60), p.task)
        .await
        .expect("the proxy stops")
        .unwrap();
    let s = p.recorder.summary();
    assert_eq!(stats.chosen, 10);
    assert_eq!(accounted(&s), stats.chosen, "{s:?}");
    assert_eq!(s.compared, 3);
    // The 5 queued are abandoned; the 2 in flight either time out (their own time-out
    // is the shutdown's wait) or are abandoned when the wait is over.
    let abandoned = s.skipped_by_reason.get("abandoned_at_shutdown").copied();
    let timeouts = s
        .errors_by_kind
        .get("candidate:timeout")
        .copied()
        .unwrap_or(0);
    assert!(abandoned >= Some(5), "{s:?}");
    assert_eq!(abandoned.unwrap_or(0) + timeouts, 7, "{s:?}");
    // Never 100 % over requests nobody compared.
    assert_eq!(s.consistency_text(), "30.00–100.00%");
}

/// Issue #18.11: the proxy dropped the trailers a client asked for (`TE: trailers`) and
/// counted every such complete answer as `primary_incomplete`, never comparing it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trailers_reach_the_client_and_the_answer_is_compared() {
    let body = br#"{"ok":true}"#;
    let primary = raw_server(move |asked| {
        let trailers = asked.header("te").is_some_and(|t| t.contains("trailers"));
        let mut r = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\ntrailer: x-checksum\r\nconnection: close\r\n\r\n{:x}\r\n",
            body.len()
        )
        .into_bytes();
        r.extend_from_slice(body);
        r.extend_from_slice(b"\r\n0\r\n");
        if trailers {
            r.extend_from_slice(b"x-checksum: abc123\r\n");
        }
        r.extend_from_slice(b"\r\n");
        vec![Step::Write(r)]
    })
    .await;
    let candidate = serve(move |_| Answer::json(String::from_utf8_lossy(body))).await;
    let p = start(proxy_cfg(&primary.url(), &candidate.url())).await;
    let raw = raw_exchange(
        &p.url,
        b"GET /t HTTP/1.1\r\nhost: x\r\nte: trailers\r\nconnection: close\r\n\r\n",
    )
    .await;
    let text = String::from_utf8_lossy(&raw);
    assert!(text.contains("{\"ok\":true}"), "{text}");
    let after_last_chunk = text.split("\r\n0\r\n").nth(1).unwrap_or_default();
    assert!(
        after_last_chunk
            .to_ascii_lowercase()
            .contains("x-checksum: abc123"),
        "trailer not passed on:\n{text}"
    );
    assert!(
        primary.asked()[0]
            .header("te")
            .is_some_and(|t| t == "trailers"),
        "the primary must be told trailers are accepted: {:?}",
        primary.asked()
    );
    let s = eventually("compared", Duration::from_secs(30), async || {
        let s = p.recorder.summary();
        (accounted(&s) == 1).then_some(s)
    })
    .await;
    assert_eq!((s.compared, s.skipped), (1, 0), "{s:?}");
    let _ = p.stop.send(());
    let _ = p.task.await;
}

/// Issue #18.12: a gzip candidate and an identity primary with the same JSON were a body
/// mismatch; two gzip bodies differing at `$.a` were reported at `body`; samples held gzip
/// bytes as replacement characters. Now bodies are decoded before comparing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compressed_bodies_are_compared_as_documents_and_stored_as_text() {
    let doc = br#"{"a":1,"b":"two","password":"hunter2"}"#;
    let other = br#"{"a":2,"b":"two","password":"hunter2"}"#;
    let mut br = Vec::new();
    brotli::BrotliCompress(&mut &doc[..], &mut br, &Default::default()).unwrap();
    let zst = zstd::stream::encode_all(&doc[..], 3).unwrap();
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    z.write_all(doc).unwrap();
    let zlib = z.finish().unwrap();
    let bomb = gzip(&vec![b' '; 8 << 20]);
    let binary: Vec<u8> = (0..=255u8).collect();
    let primary = serve(move |a| match a.path_and_query.as_str() {
        "/both-gzip" => answer_bytes(200, &[("content-encoding", "gzip")], &gzip(doc)),
        "/binary" => answer_bytes(200, &[("content-type", "image/png")], &binary),
        _ => answer_bytes(200, &[("content-type", "application/json")], doc),
    })
    .await;
    let (br2, zst2, zlib2, bomb2) = (br.clone(), zst.clone(), zlib.clone(), bomb.clone());
    let candidate = serve(move |a| {
        let json = ("content-type", "application/json");
        match a.path_and_query.as_str() {
            "/gzip" => answer_bytes(200, &[json, ("content-encoding", "gzip")], &gzip(doc)),
            "/br" => answer_bytes(200, &[json, ("content-encoding", "br")], &br2),
            "/zstd" => answer_bytes(200, &[json, ("content-encoding", "zstd")], &zst2),
            "/deflate" => answer_bytes(200, &[json, ("content-encoding", "deflate")], &zlib2),
            "/both-gzip" => answer_bytes(200, &[("content-encoding", "gzip")], &gzip(other)),
            "/bomb" => answer_bytes(200, &[json, ("content-encoding", "gzip")], &bomb2),
            "/binary" => {
                let mut b: Vec<u8> = (0..=255u8).collect();
                b[7] = 0;
                answer_bytes(200, &[("content-type", "image/png")], &b)
            }
            _ => answer_bytes(200, &[json], doc),
        }
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("s.db");
    let recorder = Arc::new(
        Recorder::with_store(
            settings(Comparer::new().ignore_header("content-encoding").unwrap())
                .with_max_decoded_body(1 << 20),
            &store,
            &[],
        )
        .unwrap(),
    );
    let p = start_with(proxy_cfg(&primary.url(), &candidate.url()), recorder).await;
    let c = support::client();
    let paths = [
        "/gzip",
        "/br",
        "/zstd",
        "/deflate",
        "/both-gzip",
        "/bomb",
        "/binary",
    ];
    for path in paths {
        assert_eq!(get(&c, &format!("{}{path}", p.url)).await.status, 200);
    }
    let s = eventually("all accounted", Duration::from_secs(30), async || {
        let s = p.recorder.summary();
        (accounted(&s) == paths.len() as u64).then_some(s)
    })
    .await;
    // Same document in four codings: matches. The zip bomb: skipped, not decoded whole.
    assert_eq!(
        s.skipped_by_reason.get("decoded_too_large"),
        Some(&1),
        "{s:?}"
    );
    assert_eq!((s.compared, s.mismatched), (6, 2), "{s:?}");
    let fields: Vec<(String, String, u64)> = s
        .endpoints
        .iter()
        .flat_map(|e| {
            e.fields
                .iter()
                .map(|f| (e.endpoint.clone(), f.path.clone(), f.count))
        })
        .collect();
    assert_eq!(
        fields,
        vec![
            ("/binary".to_string(), "body".to_string(), 1),
            ("/both-gzip".to_string(), "$.a".to_string(), 1),
        ]
    );
    let _ = p.stop.send(());
    let _ = p.task.await;

    // Samples, as stored: decoded text (secrets redacted inside the gzip body too);
    // never a replacement character. A binary body cannot be read by the `password`
    // rule: withheld whole and counted (redaction fails closed; issue 31).
    let run = Store::read(&store).unwrap();
    let json = serde_json::to_value(run.samples()).unwrap();
    let text = json.to_string();
    assert!(!text.contains('\u{fffd}'), "{text}");
    assert!(
        !text.contains("hunter2"),
        "a secret inside a gzip body: {text}"
    );
    let gz = json
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["endpoint"] == "/both-gzip")
        .unwrap();
    assert_eq!(gz["candidate"]["body_encoding"], "text");
    assert!(
        gz["candidate"]["body"]
            .as_str()
            .unwrap()
            .starts_with("{\"a\":2")
    );
    let bin = json
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["endpoint"] == "/binary")
        .unwrap();
    assert_eq!(bin["primary"]["body"], "[REDACTED]", "{bin}");
    assert_eq!(bin["candidate"]["body"], "[REDACTED]", "{bin}");
    assert_eq!(bin["differences"][0]["primary"], "[REDACTED]", "{bin}");
    let withheld = &run.summary(None).redaction_withheld;
    assert_eq!(withheld.get("response_body"), Some(&2), "{withheld:?}");
}

/// Issue #18.12: without `--ignore-header content-encoding` the encoding is one header
/// difference, not a body difference.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_encoding_alone_is_a_header_difference() {
    let doc = br#"{"a":1}"#;
    let primary = serve(move |_| answer_bytes(200, &[], doc)).await;
    let candidate =
        serve(move |_| answer_bytes(200, &[("content-encoding", "gzip")], &gzip(doc))).await;
    let recorder = Arc::new(Recorder::new(settings(Comparer::new()), None));
    let set = {
        let t = RequestTemplate::parse("GET", "/x", &[], None).unwrap();
        Arc::new(RequestSet::new(t, None, Order::Sequential).unwrap())
    };
    replay(
        set,
        replay_cfg(&primary.url(), &candidate.url()),
        recorder.clone(),
        Arc::default(),
    )
    .await
    .unwrap();
    let s = recorder.summary();
    assert_eq!(s.mismatched, 1);
    let f = &s.endpoints[0].fields;
    assert_eq!(
        f.iter().map(|f| f.path.as_str()).collect::<Vec<_>>(),
        vec!["header:content-encoding"]
    );
}

fn replay_cfg(p: &str, c: &str) -> ReplayConfig {
    ReplayConfig {
        primary: Upstream::parse(p).unwrap(),
        candidate: Upstream::parse(c).unwrap(),
        secondary: None,
        concurrency: 2,
        timeout: Duration::from_secs(3),
        max_body: 1 << 20,
    }
}

fn ids(n: u64) -> Arc<RequestSet> {
    let t = RequestTemplate::parse("GET", "/v1/users/{id}", &[], None).unwrap();
    let d = DataSet::from_lines("id", (1..=n).map(|i| i.to_string()).collect());
    Arc::new(RequestSet::new(t, Some(d), Order::Sequential).unwrap())
}

/// Issue #18.13: a body cut short was `primary:connect`, and when both sides failed only
/// the primary's error was counted. Now: `:body_cut` (`:body` before the one error
/// vocabulary), and every failed side is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_cut_short_is_a_body_error_and_both_failed_sides_are_counted() {
    let cut = || {
        raw_server(|_| {
            vec![Step::Write(
                b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n{\"partial\":".to_vec(),
            )]
        })
    };
    let (p_cut, c_cut) = (cut().await, cut().await);
    let recorder = Arc::new(Recorder::new(settings(Comparer::new()), None));
    replay(
        ids(3),
        replay_cfg(&p_cut.url(), &c_cut.url()),
        recorder.clone(),
        Arc::default(),
    )
    .await
    .unwrap();
    let s = recorder.summary();
    assert_eq!(s.errors, 3, "each request once: {s:?}");
    assert_eq!(s.errors_by_kind.get("primary:body_cut"), Some(&3), "{s:?}");
    assert_eq!(
        s.errors_by_kind.get("candidate:body_cut"),
        Some(&3),
        "{s:?}"
    );

    // A dead primary and a candidate that times out: both named.
    let slow = serve(|_| Answer::json("{}").delay(Duration::from_secs(10))).await;
    let dead = format!("http://{}", dead_addr());
    let recorder = Arc::new(Recorder::new(settings(Comparer::new()), None));
    replay(
        ids(2),
        replay_cfg(&dead, &slow.url()),
        recorder.clone(),
        Arc::default(),
    )
    .await
    .unwrap();
    let s = recorder.summary();
    assert_eq!(s.errors, 2);
    assert_eq!(s.errors_by_kind.get("primary:connect"), Some(&2), "{s:?}");
    assert_eq!(s.errors_by_kind.get("candidate:timeout"), Some(&2), "{s:?}");

    // Garbage instead of HTTP is a protocol error, in the proxy too.
    let garbage = raw_server(|_| vec![Step::Write(b"SSH-2.0-OpenSSH_9.6\r\n\r\n".to_vec())]).await;
    let fine = serve(|_| Answer::json("{}")).await;
    let p = start(proxy_cfg(&garbage.url(), &fine.url())).await;
    let c = support::client();
    assert_eq!(get(&c, &format!("{}/g", p.url)).await.status, 502);
    let s = eventually("accounted", Duration::from_secs(30), async || {
        let s = p.recorder.summary();
        (accounted(&s) == 1).then_some(s)
    })
    .await;
    assert_eq!(s.errors_by_kind.get("primary:protocol"), Some(&1), "{s:?}");
    let _ = p.stop.send(());
    let _ = p.task.await;
}

/// Issue #18.13: the proxy added a `date` the primary did not send, and forwarded headers
/// named in `Connection`. And 103 Early Hints: hyper's server cannot send an interim
/// response, so they are counted (not passed on), and the final answer is unharmed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_adds_no_date_drops_connection_named_headers_and_counts_early_hints() {
    let primary = raw_server(|asked| {
        let mut steps = Vec::new();
        if asked.path() == "/hints" {
            steps.push(Step::Write(
                b"HTTP/1.1 103 Early Hints\r\nlink: </style.css>; rel=preload\r\n\r\n".to_vec(),
            ));
            steps.push(Step::Sleep(Duration::from_millis(50)));
        }
        steps.push(Step::Write(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: x-resp-hop, close\r\nx-resp-hop: 1\r\ncontent-length: 2\r\n\r\n{}"
                .to_vec(),
        ));
        steps
    })
    .await;
    let candidate = raw_server(|_| {
        vec![Step::Write(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"
                .to_vec(),
        )]
    })
    .await;
    let p = start(proxy_cfg(&primary.url(), &candidate.url())).await;
    let c = support::client();
    let got = send(
        &c,
        "GET",
        &format!("{}/plain", p.url),
        &[
            ("connection", "x-hop"),
            ("x-hop", "secret"),
            ("x-keep", "1"),
        ],
        b"",
    )
    .await;
    assert_eq!((got.status, got.body.as_slice()), (200, &b"{}"[..]));
    assert!(got.headers.get("date").is_none(), "{:?}", got.headers);
    assert!(got.headers.get("x-resp-hop").is_none(), "{:?}", got.headers);
    let got = get(&c, &format!("{}/hints", p.url)).await;
    assert_eq!((got.status, got.body.as_slice()), (200, &b"{}"[..]));
    eventually("both compared", Duration::from_secs(30), async || {
        (p.recorder.summary().compared == 2).then_some(())
    })
    .await;
    let plain: Vec<_> = primary
        .asked()
        .into_iter()
        .chain(candidate.asked())
        .filter(|a| a.path() == "/plain")
        .collect();
    assert_eq!(plain.len(), 2);
    for asked in plain {
        assert_eq!(asked.header("x-hop"), None, "{}", asked.head);
        assert_eq!(
            asked.header("x-keep").as_deref(),
            Some("1"),
            "{}",
            asked.head
        );
    }
    let m = metrics(&p.admin).await;
    assert_eq!(
        metric(&m, "scalpel_shadow_informational_dropped_total"),
        Some(1.0),
        "{m}"
    );
    let _ = p.stop.send(());
    let _ = p.task.await;
}

/// A sibling in the proxy's client side: no deadline on a request head or on a body
/// buffered for mirroring, so a client trickling bytes held a connection (and a chosen
/// mirror) forever. Now: the head within the client time-out (else the connection is
/// closed), the body within it (else 408, counted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_are_cut_off_at_the_client_timeout() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let primary = serve(|_| Answer::json("{}")).await;
    let candidate = serve(|_| Answer::json("{}")).await;
    let mut cfg = proxy_cfg(&primary.url(), &candidate.url());
    cfg.client_timeout = Duration::from_secs(1);
    let p = start(cfg).await;
    let addr = p.url.trim_start_matches("http://").to_string();

    // Half a head, then silence: the proxy closes the connection.
    let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
    s.write_all(b"GET /slow HTTP/1.1\r\nhost: x\r\n")
        .await
        .unwrap();
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut buf))
        .await
        .expect("a half-sent head must not hold the connection open")
        .unwrap();

    // A whole head, part of the body, then silence: 408 with a JSON body.
    let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
    s.write_all(b"GET /slow HTTP/1.1\r\nhost: x\r\ncontent-length: 10\r\n\r\n12")
        .await
        .unwrap();
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(30), s.read(&mut buf))
        .await
        .expect("a trickled body must be answered")
        .unwrap();
    let text = String::from_utf8_lossy(&buf[..n]);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("{\"error\":"), "{text}");
    let m = metrics(&p.admin).await;
    assert_eq!(
        metric(&m, "scalpel_shadow_client_timeouts_total"),
        Some(1.0),
        "{m}"
    );
    assert_eq!(primary.hits(), 0);
    let _ = p.stop.send(());
    let _ = p.task.await;
}
