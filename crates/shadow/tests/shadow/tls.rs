//! TLS and HTTP/2 on every side of the proxy and of replay, against real peers on
//! loopback: Node (`node:http2` with HTTP/1.1 allowed, `node:https`) and nginx (TLS + h2,
//! TLS without h2, a wrong-name certificate, plain HTTP), certificates made in the test.

use crate::peers;
use crate::support;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use scalpel_diff::{Comparer, NoiseRule, RouteNormalizer};
use scalpel_http::h1::{Expect, RequestWriter};
use scalpel_http::{Conn, Connector, HttpVersion, Peer, PeerOptions, ServerTls};
use scalpel_requests::{DataSet, Order, RequestSet, RequestTemplate};
use scalpel_shadow::{
    CompareSettings, Proxy, ProxyConfig, Reach, Recorder, Redactor, ReplayConfig, ShadowError,
    Upstream, replay,
};
use support::{Running, accounted, eventually, metric, metrics};

fn settings() -> CompareSettings {
    CompareSettings::new(
        Comparer::new(),
        RouteNormalizer::default(),
        NoiseRule::default(),
        Redactor::default(),
        50,
        false,
    )
}

/// An upstream at `url`, trusting the test CA, speaking `version`.
fn up(url: &str, ca: &std::path::Path, version: HttpVersion) -> Upstream {
    let mut o = PeerOptions::default();
    o.ca_file = Some(ca.to_path_buf());
    o.version = version;
    Upstream::parse(url).unwrap().with_options(o)
}

fn proxy_cfg(primary: Upstream, candidate: Upstream, tls: Option<ServerTls>) -> ProxyConfig {
    ProxyConfig {
        mirror_concurrency: 16,
        max_request_body: 64 << 10,
        tls,
        ..support::proxy_cfg(primary, candidate)
    }
}

async fn start(cfg: ProxyConfig) -> Running {
    let recorder = Arc::new(Recorder::new(settings(), None));
    let proxy = Proxy::bind(cfg, recorder.clone()).await.unwrap();
    for (role, _, reach) in proxy.upstreams() {
        assert!(matches!(reach, Reach::Ok(_)), "{role}: {reach:?}");
    }
    support::run(proxy, recorder)
}

/// A client of the proxy's TLS listener: `version` decides what ALPN offers.
async fn client(port: u16, ca: &std::path::Path, version: HttpVersion) -> Connector {
    let mut o = PeerOptions::default();
    o.ca_file = Some(ca.to_path_buf());
    o.version = version;
    let peer = Peer::parse(&format!("https://localhost:{port}"))
        .unwrap()
        .with_options(o);
    Connector::new(peer).await.unwrap()
}

/// GET `path` over h2 through `c`; status and body.
async fn get_h2(c: &Connector, path: &str) -> (u16, Bytes) {
    let Conn::H2(mut conn) = c.connect().await.unwrap().conn else {
        panic!("ALPN should have chosen h2");
    };
    let req = http::Request::get(c.peer().uri(path).unwrap())
        .body(())
        .unwrap();
    let mut res = conn.send(req, Bytes::new()).await.unwrap();
    let body = res.read_body(1 << 20).await.unwrap().unwrap();
    (res.status().as_u16(), body)
}

fn json(b: &[u8]) -> serde_json::Value {
    serde_json::from_slice(b).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(b)))
}

/// Clients reach the proxy over TLS with h2 and with HTTP/1.1; the proxy forwards to a
/// Node h2 primary and mirrors to an nginx TLS + h2 candidate; a large POST is streamed
/// through to the primary without being mirrored; every GET is compared and consistent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_and_h2_on_every_side_of_the_proxy() {
    let certs = peers::certs();
    let node = peers::node(&certs);
    let nginx = peers::nginx(&certs);
    let tls = ServerTls::from_pem_files(&certs.good.cert, &certs.good.key, true).unwrap();
    let p = start(proxy_cfg(
        up(
            &format!("https://localhost:{}", node.ports[0]),
            &certs.ca,
            HttpVersion::Http2,
        ),
        up(
            &format!("https://localhost:{}", nginx.ports[0]),
            &certs.ca,
            HttpVersion::Http2,
        ),
        Some(tls),
    ))
    .await;

    let h2 = client(p.port, &certs.ca, HttpVersion::Auto).await;
    for id in 1..=10 {
        let path = format!("/v1/users/{id}?days=30");
        let (status, body) = get_h2(&h2, &path).await;
        assert_eq!(status, 200);
        assert_eq!(json(&body)["path"], path.as_str(), "from the Node primary");
    }

    let h1 = client(p.port, &certs.ca, HttpVersion::Http1).await;
    let Conn::H1(mut conn) = h1.connect().await.unwrap().conn else {
        panic!("ALPN should have chosen http/1.1");
    };
    for id in 11..=15 {
        let mut head = Vec::new();
        let mut w = RequestWriter::new(&mut head, "GET", "", &format!("/v1/users/{id}"));
        w.header(b"Host", b"localhost");
        w.finish();
        conn.write_request(&head, &[]).await.unwrap();
        let r = conn.read_response(Expect::default()).await.unwrap();
        let body = conn.read_body(1 << 20).await.unwrap().unwrap();
        assert_eq!(
            (r.status.as_u16(), json(&body)["method"].clone()),
            (200, "GET".into())
        );
    }
    // 300 KiB in 30 chunks, over the mirror limit and not a mirrored method: streamed on.
    let mut head = Vec::new();
    let mut w = RequestWriter::new(&mut head, "POST", "", "/upload");
    w.header(b"Host", b"localhost");
    w.header(b"Transfer-Encoding", b"chunked");
    w.finish();
    conn.write_request(&head, &[]).await.unwrap();
    for i in 0..30u8 {
        conn.write_body(&vec![b'a' + i % 26; 10 << 10], true)
            .await
            .unwrap();
    }
    conn.finish_body(true).await.unwrap();
    let r = conn.read_response(Expect::default()).await.unwrap();
    let body = conn.read_body(1 << 20).await.unwrap().unwrap();
    assert_eq!(r.status.as_u16(), 200);
    assert_eq!(json(&body)["body"].as_str().unwrap().len(), 300 << 10);

    let s = eventually("15 compared", Duration::from_secs(60), async || {
        let s = p.recorder.summary();
        (accounted(&s) >= 15).then_some(s)
    })
    .await;
    assert_eq!((s.compared, s.mismatched, s.errors), (15, 0, 0), "{s:?}");
    let m = metrics(&p.admin).await;
    assert!(
        metric(
            &m,
            "scalpel_shadow_client_connections_total{protocol=\"h2\"}"
        )
        .unwrap()
            >= 10.0,
        "{m}"
    );
    assert!(
        metric(
            &m,
            "scalpel_shadow_client_connections_total{protocol=\"http/1.1\"}"
        )
        .unwrap()
            >= 1.0,
        "{m}"
    );
    assert_eq!(
        metric(&m, "scalpel_shadow_not_mirrored_total{reason=\"method\"}"),
        Some(1.0)
    );
    let _ = p.stop.send(());
    let _ = p.task.await;
}

/// Replay against an https HTTP/1.1 primary (Node, no ALPN) and an h2 candidate (nginx):
/// every pair compared and consistent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_against_https_and_h2_upstreams() {
    let certs = peers::certs();
    let node = peers::node(&certs);
    let nginx = peers::nginx(&certs);
    let t = RequestTemplate::parse("GET", "/v1/users/{id}/stats", &[], None).unwrap();
    let ids = DataSet::from_lines("id", (1..=20).map(|i| i.to_string()).collect());
    let set = Arc::new(RequestSet::new(t, Some(ids), Order::Sequential).unwrap());
    let recorder = Arc::new(Recorder::new(settings(), None));
    let stats = replay(
        set,
        ReplayConfig {
            primary: up(
                &format!("https://localhost:{}", node.ports[1]),
                &certs.ca,
                HttpVersion::Http1,
            ),
            candidate: up(
                &format!("https://localhost:{}", nginx.ports[0]),
                &certs.ca,
                HttpVersion::Http2,
            ),
            secondary: None,
            concurrency: 4,
            timeout: Duration::from_secs(20),
            max_body: 1 << 20,
        },
        recorder.clone(),
        Arc::default(),
    )
    .await
    .unwrap();
    assert_eq!(stats.requests, 20);
    let s = recorder.summary();
    assert_eq!((s.compared, s.matched, s.errors), (20, 20, 0), "{s:?}");
    assert_eq!(s.endpoints[0].endpoint, "/v1/users/{id}/stats");
}

/// A certificate that stops verifying during a run (here: the candidate starts
/// presenting a certificate for another name) fails each mirror as `candidate:tls`,
/// counted by kind, while every client still gets the primary's answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_that_goes_bad_during_a_run_is_counted_as_tls() {
    let certs = peers::certs();
    let node = peers::node(&certs);
    let nginx = peers::nginx(&certs);
    let p = start(proxy_cfg(
        Upstream::parse(&format!("http://127.0.0.1:{}", nginx.ports[3])).unwrap(),
        up(
            &format!("https://localhost:{}", node.ports[1]),
            &certs.ca,
            HttpVersion::Http1,
        ),
        None,
    ))
    .await;
    // The check at bind time passed; from now on the candidate is for `other.test`.
    peers::swap_node_certificate(&node);
    let c = support::client();
    for id in 1..=5 {
        let got = support::get(&c, &format!("http://127.0.0.1:{}/v1/x/{id}", p.port)).await;
        assert_eq!(got.status, 200);
        assert_eq!(json(&got.body)["path"], format!("/v1/x/{id}"));
    }
    let s = eventually("5 accounted", Duration::from_secs(60), async || {
        let s = p.recorder.summary();
        (accounted(&s) == 5).then_some(s)
    })
    .await;
    assert_eq!(s.errors_by_kind.get("candidate:tls"), Some(&5), "{s:?}");
    let m = metrics(&p.admin).await;
    assert_eq!(
        metric(
            &m,
            "scalpel_shadow_mirror_errors_total{side=\"candidate\",kind=\"tls\"}"
        ),
        Some(5.0),
        "{m}"
    );
    let _ = p.stop.send(());
    let _ = p.task.await;
}

/// Settings that cannot work fail at bind, before any client is served, naming the
/// upstream and the problem: an untrusted certificate, a wrong name, a server that
/// refuses a required h2 (over TLS by ALPN, and h2c to a server that speaks only
/// HTTP/1.1), an unusable CA file. An upstream that is merely down is only noted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_upstream_settings_fail_at_bind_and_a_down_upstream_is_only_noted() {
    let certs = peers::certs();
    let node = peers::node(&certs);
    let nginx = peers::nginx(&certs);
    let fine = Upstream::parse(&format!("http://127.0.0.1:{}", nginx.ports[3])).unwrap();
    let missing_ca = certs.dir.path().join("missing.pem");
    let untrusted = Upstream::parse(&format!("https://localhost:{}", nginx.ports[0])).unwrap();
    let cases = [
        (untrusted, "is not trusted"),
        (
            up(
                &format!("https://127.0.0.1:{}", nginx.ports[2]),
                &certs.ca,
                HttpVersion::Http1,
            ),
            "not valid for the name 127.0.0.1",
        ),
        (
            up(
                &format!("https://localhost:{}", node.ports[1]),
                &certs.ca,
                HttpVersion::Http2,
            ),
            "server does not speak h2",
        ),
        (
            up(
                &format!("https://localhost:{}", nginx.ports[1]),
                &certs.ca,
                HttpVersion::Http2,
            ),
            "server does not speak h2",
        ),
        (
            up(
                &format!("http://127.0.0.1:{}", nginx.ports[3]),
                &certs.ca,
                HttpVersion::Http2,
            ),
            "does not speak h2c",
        ),
        (
            up(
                &format!("https://localhost:{}", nginx.ports[0]),
                &missing_ca,
                HttpVersion::Http1,
            ),
            "cannot use CA file",
        ),
    ];
    for (candidate, expected) in cases {
        let url = candidate.to_string();
        let e = Proxy::bind(
            proxy_cfg(fine.clone(), candidate, None),
            Arc::new(Recorder::new(settings(), None)),
        )
        .await
        .unwrap_err();
        assert!(
            matches!(
                e,
                ShadowError::Upstream {
                    role: "candidate",
                    ..
                } | ShadowError::NoH2c {
                    role: "candidate",
                    ..
                }
            ),
            "{e:?}"
        );
        let text = e.to_string();
        assert!(
            text.starts_with(&format!("candidate {url}: ")) && text.contains(expected),
            "{url}: {text}"
        );
        assert_eq!(text.lines().count(), 1, "{text}");
    }
    let dead = format!("http://{}", support::dead_addr());
    let proxy = Proxy::bind(
        proxy_cfg(fine, Upstream::parse(&dead).unwrap(), None),
        Arc::new(Recorder::new(settings(), None)),
    )
    .await
    .unwrap();
    assert!(
        matches!(&proxy.upstreams()[1].2, Reach::Unreachable(why) if why.contains("connect")),
        "{:?}",
        proxy.upstreams()
    );
}

/// An HTTP/1.1 client behind the proxy and an h2 primary whose answers carry a
/// `Content-Length` (nginx): hyper's HTTP/1 server stops reading a body once it has sent
/// the declared length, before h2's end of stream arrives; the proxy counted every such
/// complete answer as `primary_incomplete` and compared none. The declared length now
/// ends the body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h1_clients_of_an_h2_primary_with_content_length_are_compared() {
    let certs = peers::certs();
    let nginx = peers::nginx(&certs);
    let h2 = |port: u16| {
        up(
            &format!("https://localhost:{port}"),
            &certs.ca,
            HttpVersion::Http2,
        )
    };
    let p = start(proxy_cfg(h2(nginx.ports[4]), h2(nginx.ports[4]), None)).await;
    let c = support::client();
    for id in 1..=10 {
        let got = support::get(&c, &format!("http://127.0.0.1:{}/big/{id}", p.port)).await;
        assert_eq!(got.status, 200);
        assert!(
            got.headers.contains_key("content-length"),
            "{:?}",
            got.headers
        );
        assert_eq!(json(&got.body)["path"], format!("/big/{id}"));
    }
    let s = eventually("10 accounted", Duration::from_secs(60), async || {
        let s = p.recorder.summary();
        (accounted(&s) == 10).then_some(s)
    })
    .await;
    assert_eq!((s.compared, s.skipped), (10, 0), "{s:?}");
    let _ = p.stop.send(());
    let _ = p.task.await;
}
