//! The connector against real peers on loopback: nginx (TLS, h2, h2c), Node (node:https,
//! node:http2) and raw sockets that misbehave on purpose.

use crate::util;

use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request};
use scalpel_http::h1::{Expect, H1Conn, H1Pool, RequestWriter};
use scalpel_http::{
    Conn, Connector, Error, ErrorKind, H2Conn, H2Driver, HttpVersion, Resolve, TlsError,
};
use util::*;

pub(crate) fn get(path: &str, host: &str) -> Vec<u8> {
    let mut out = Vec::new();
    let mut w = RequestWriter::new(&mut out, "GET", "", path);
    w.header(b"Host", host.as_bytes());
    w.finish();
    out
}

async fn h1(c: &Connector) -> H1Conn {
    match c.connect().await.unwrap().conn {
        Conn::H1(h) => h,
        Conn::H2(_) => panic!("expected HTTP/1.1"),
    }
}

async fn h2(c: &Connector) -> H2Conn {
    match c.connect().await.unwrap().conn {
        Conn::H2(h) => h,
        Conn::H1(_) => panic!("expected HTTP/2"),
    }
}

/// GET `path` on an h1 connection: status and whole body.
async fn fetch(conn: &mut H1Conn, path: &str, host: &str) -> Result<(u16, Bytes), Error> {
    conn.write_request(&get(path, host), &[]).await?;
    let head = conn.read_response(Expect::default()).await?;
    let body = conn.read_body(1 << 20).await?.expect("under the limit");
    Ok((head.status.as_u16(), body))
}

pub(crate) fn request(c: &Connector, path: &str) -> Request<()> {
    Request::builder()
        .uri(c.peer().uri(path).unwrap())
        .body(())
        .unwrap()
}

pub(crate) async fn fetch2(
    conn: &mut H2Conn,
    c: &Connector,
    path: &str,
) -> Result<(u16, Bytes), Error> {
    let mut res = conn.send(request(c, path), Bytes::new()).await?;
    let body = res.read_body(1 << 20).await?.expect("under the limit");
    Ok((res.status().as_u16(), body))
}

fn tls_error(r: Result<impl std::fmt::Debug, Error>) -> TlsError {
    match r {
        Err(Error::Tls(t)) => t,
        other => panic!("expected a TLS error, got {other:?}"),
    }
}

/// Polls `check` until it holds, for at most 10 s (the machine is loaded: no tight
/// margins).
pub(crate) async fn eventually(check: impl FnMut() -> bool) -> bool {
    scalpel_testkit::eventually(Duration::from_secs(10), check).await
}

// ---------------------------------------------------------------------------------------
// nginx

#[tokio::test]
async fn https_h1_against_nginx_reuses_its_connection_and_times_the_handshake() {
    let certs = certs();
    let nginx = nginx(&certs);
    let url = format!("https://localhost:{}", nginx.ports[0]);
    let c = connector(&url, trust(&certs.ca)).await.unwrap();
    let connected = c.connect().await.unwrap();
    let handshake = connected.timing.tls.expect("a TLS handshake was timed");
    assert!(handshake > Duration::ZERO);
    let Conn::H1(mut conn) = connected.conn else {
        panic!("HTTP/1.1 was asked for")
    };
    assert_eq!(conn.stream().alpn(), Some(&b"http/1.1"[..]));
    for i in 1..=5 {
        let (status, body) = fetch(&mut conn, "/", "localhost").await.unwrap();
        assert_eq!((status, &body[..]), (200, &b"hello from nginx\n"[..]));
        assert!(conn.is_reusable(), "request {i}");
    }
    assert_eq!(conn.completed(), 5, "five responses on one connection");
}

#[tokio::test]
async fn a_ca_file_with_several_certificates_is_trusted_and_one_without_the_issuer_is_not() {
    let certs = certs();
    let nginx = nginx(&certs);
    let url = format!("https://localhost:{}", nginx.ports[0]);
    let c = connector(&url, trust(&certs.bundle)).await.unwrap();
    let (status, _) = fetch(&mut h1(&c).await, "/", "localhost").await.unwrap();
    assert_eq!(status, 200);
    let c = connector(&url, trust(&certs.other_ca)).await.unwrap();
    let e = tls_error(c.connect().await);
    assert!(matches!(e, TlsError::NotTrusted { .. }), "{e}");
}

#[tokio::test]
async fn h2_by_alpn_carries_concurrent_streams_on_one_connection() {
    let certs = certs();
    let nginx = nginx(&certs);
    let c = connector(
        &format!("https://localhost:{}", nginx.ports[0]),
        h2_with(&certs.ca),
    )
    .await
    .unwrap();
    let conn = h2(&c).await;
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..16 {
        let (mut conn, c) = (conn.clone(), c.clone());
        tasks.spawn(async move { fetch2(&mut conn, &c, "/").await });
    }
    let mut ok = 0;
    while let Some(r) = tasks.join_next().await {
        let (status, body) = r.unwrap().unwrap();
        assert_eq!((status, &body[..]), (200, &b"hello from nginx\n"[..]));
        ok += 1;
    }
    assert_eq!(ok, 16);
    assert!(conn.max_streams() >= 16, "nginx allows 128 streams");
    assert_eq!(conn.in_flight(), 0);
    assert_eq!(c.h2_stats().counts().rst_stream, 0);
}

/// The load generator's placement of the driver: on the thread's `LocalSet`, beside the
/// tasks sending on the connection (`H2Driver::Local`). It carries concurrent streams from
/// local tasks and still notices the end of the connection (nginx's GOAWAY after 20
/// requests), as the runtime-spawned driver does.
#[test]
fn a_driver_on_the_local_set_carries_streams_and_sees_goaway() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async {
        let certs = certs();
        let nginx = nginx(&certs);
        let c = connector(
            &format!("https://localhost:{}", nginx.ports[0]),
            h2_with(&certs.ca),
        )
        .await
        .unwrap();
        let conn = match c.connect_with(H2Driver::Local).await.unwrap().conn {
            Conn::H2(h) => h,
            Conn::H1(_) => panic!("expected HTTP/2"),
        };
        let tasks: Vec<_> = (0..4)
            .map(|_| {
                let (mut conn, c) = (conn.clone(), c.clone());
                tokio::task::spawn_local(async move {
                    for _ in 0..5 {
                        let (status, _) = fetch2(&mut conn, &c, "/").await.unwrap();
                        assert_eq!(status, 200);
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        assert!(
            eventually(|| conn.is_closed()).await,
            "the connection ended after 20 requests"
        );
        assert_eq!(c.h2_stats().counts().goaway, 1);
    });
}

/// nginx ends an h2 connection with GOAWAY after `keepalive_requests` (20) requests:
/// counted, and the connection reports itself closed so the caller opens a new one.
#[tokio::test]
async fn goaway_from_nginx_is_counted_and_closes_the_connection() {
    let certs = certs();
    let nginx = nginx(&certs);
    let c = connector(
        &format!("https://localhost:{}", nginx.ports[0]),
        h2_with(&certs.ca),
    )
    .await
    .unwrap();
    let mut conn = h2(&c).await;
    for _ in 0..20 {
        let (status, _) = fetch2(&mut conn, &c, "/").await.unwrap();
        assert_eq!(status, 200);
    }
    assert!(
        eventually(|| conn.is_closed()).await,
        "the connection ended"
    );
    assert_eq!(c.h2_stats().counts().goaway, 1);
    let e = fetch2(&mut conn, &c, "/").await.unwrap_err();
    assert_ne!(e.kind(), ErrorKind::Protocol, "{e}");
}

#[tokio::test]
async fn h2c_prior_knowledge_over_plain_http() {
    let certs = certs();
    let nginx = nginx(&certs);
    let c = connector(&format!("http://127.0.0.1:{}", nginx.ports[2]), |o| {
        o.version = HttpVersion::Http2
    })
    .await
    .unwrap();
    let connected = c.connect().await.unwrap();
    assert_eq!(connected.timing.tls, None);
    let Conn::H2(mut conn) = connected.conn else {
        panic!("h2c was asked for")
    };
    let (status, body) = fetch2(&mut conn, &c, "/").await.unwrap();
    assert_eq!((status, &body[..]), (200, &b"hello from nginx\n"[..]));
}

#[tokio::test]
async fn a_server_without_h2_is_refused_by_name_when_h2_is_required() {
    let certs = certs();
    let nginx = nginx(&certs);
    let url = format!("https://localhost:{}", nginx.ports[1]);
    let c = connector(&url, h2_with(&certs.ca)).await.unwrap();
    let r = c.connect().await;
    let e = r.as_ref().map(|_| ()).unwrap_err().to_string();
    assert!(e.starts_with("server does not speak h2"), "{e}");
    assert!(!e.contains('\n'), "one line: {e}");
    assert!(matches!(tls_error(r), TlsError::NoH2 { .. }));
    // Auto falls back to HTTP/1.1 there, and takes h2 where it is offered.
    let auto = |o: &mut scalpel_http::PeerOptions| {
        o.ca_file = Some(certs.ca.clone());
        o.version = HttpVersion::Auto;
    };
    let c = connector(&url, auto).await.unwrap();
    assert!(matches!(c.connect().await.unwrap().conn, Conn::H1(_)));
    let c = connector(&format!("https://localhost:{}", nginx.ports[0]), auto)
        .await
        .unwrap();
    assert!(matches!(c.connect().await.unwrap().conn, Conn::H2(_)));
}

#[tokio::test]
async fn bad_certificates_are_named_and_insecure_accepts_them() {
    let certs = certs();
    let nginx = nginx(&certs);
    let expired = format!("https://localhost:{}", nginx.ports[3]);
    let wrong = format!("https://localhost:{}", nginx.ports[4]);
    let untrusted = format!("https://localhost:{}", nginx.ports[0]);

    let e = tls_error(
        connector(&expired, trust(&certs.ca))
            .await
            .unwrap()
            .connect()
            .await,
    );
    assert!(matches!(e, TlsError::Expired { .. }), "{e}");
    assert_eq!(e.to_string(), "the certificate of localhost has expired");

    let e = tls_error(
        connector(&wrong, trust(&certs.ca))
            .await
            .unwrap()
            .connect()
            .await,
    );
    assert!(matches!(e, TlsError::NameMismatch { .. }), "{e}");
    assert!(
        e.to_string().contains("not valid for the name localhost"),
        "{e}"
    );

    // The system store does not know the test CA.
    let c = connector(&untrusted, |_| {}).await.unwrap();
    let r = c.connect().await;
    assert_eq!(r.as_ref().map(|_| ()).unwrap_err().kind(), ErrorKind::Tls);
    let e = tls_error(r);
    assert!(matches!(e, TlsError::NotTrusted { .. }), "{e}");
    assert!(e.to_string().contains("--cacert"), "says what to do: {e}");

    for url in [&expired, &wrong, &untrusted] {
        let c = connector(url, |o| o.insecure = true).await.unwrap();
        let (status, _) = fetch(&mut h1(&c).await, "/", "localhost").await.unwrap();
        assert_eq!(status, 200, "{url} with --insecure");
    }
}

#[tokio::test]
async fn resolve_and_sni_let_a_real_name_be_tested_against_loopback() {
    let certs = certs();
    let nginx = nginx(&certs);
    let port = nginx.ports[0];
    let c = connector(&format!("https://scalpel.test:{port}"), |o| {
        o.ca_file = Some(certs.ca.clone());
        o.resolve
            .push(Resolve::parse(&format!("scalpel.test:{port}:127.0.0.1")).unwrap());
    })
    .await
    .unwrap();
    assert_eq!(c.addr(), addr(port));
    let (status, _) = fetch(&mut h1(&c).await, "/", "scalpel.test").await.unwrap();
    assert_eq!(status, 200);
    // An address in the URL, the name given apart.
    let url = format!("https://127.0.0.1:{port}");
    let c = connector(&url, |o| {
        o.ca_file = Some(certs.ca.clone());
        o.sni = Some("scalpel.test".into());
    })
    .await
    .unwrap();
    assert_eq!(
        fetch(&mut h1(&c).await, "/", "scalpel.test")
            .await
            .unwrap()
            .0,
        200
    );
    let c = connector(&url, |o| {
        o.ca_file = Some(certs.ca.clone());
        o.sni = Some("other.test".into());
    })
    .await
    .unwrap();
    let e = tls_error(c.connect().await);
    assert!(matches!(e, TlsError::NameMismatch { .. }), "{e}");
}

#[tokio::test]
async fn an_unreadable_ca_file_fails_before_any_connection() {
    let certs = certs();
    let missing = certs.dir.path().join("nope.pem");
    let e = connector("https://localhost:1", trust(&missing))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Tls);
    let text = e.to_string();
    assert!(
        text.starts_with("cannot use CA file") && text.contains("nope.pem"),
        "{text}"
    );
    assert!(!text.contains('\n'));
}

/// nginx closes an idle keep-alive connection after 1 s (with a TLS close_notify):
/// the connection says so from readiness, and the pool does not hand it out.
#[tokio::test]
async fn an_idle_tls_connection_closed_by_nginx_is_noticed_before_reuse() {
    let certs = certs();
    let nginx = nginx(&certs);
    let c = connector(
        &format!("https://localhost:{}", nginx.ports[0]),
        trust(&certs.ca),
    )
    .await
    .unwrap();
    let mut conn = h1(&c).await;
    fetch(&mut conn, "/", "localhost").await.unwrap();
    assert!(!conn.is_closed(), "alive right after a response");
    let pool = H1Pool::new(Duration::from_secs(60), 4);
    pool.checkin("nginx", conn);
    assert_eq!(pool.idle(), 1);
    let mut conn = pool.checkout(&"nginx").expect("still open");
    assert!(
        eventually(|| conn.is_closed()).await,
        "nginx's keep-alive time-out was noticed"
    );
    // A second connection, idle in the pool after its response: pruned once nginx
    // closes it (no request needed to notice).
    let mut second = h1(&c).await;
    fetch(&mut second, "/", "localhost").await.unwrap();
    pool.checkin("nginx", second);
    assert_eq!(pool.idle(), 1);
    assert!(
        eventually(|| {
            pool.prune();
            pool.idle() == 0
        })
        .await
    );
}

// ---------------------------------------------------------------------------------------
// Node

const NODE_SERVERS: &str = r#"
import http2 from 'node:http2';
import https from 'node:https';
import fs from 'node:fs';
const cert = fs.readFileSync(process.argv[2]);
const key = fs.readFileSync(process.argv[3]);
const { NGHTTP2_CANCEL, NGHTTP2_REFUSED_STREAM } = http2.constants;
const h2 = http2.createSecureServer({ cert, key, settings: { maxConcurrentStreams: 2, initialWindowSize: 16384 } });
h2.on('stream', (stream, headers) => {
  const path = headers[':path'];
  stream.on('error', () => {}); // a refused stream is an 'error' event in Node
  if (path === '/reset') return stream.close(NGHTTP2_CANCEL);
  if (path === '/refuse') return stream.close(NGHTTP2_REFUSED_STREAM);
  if (path === '/slow') return setTimeout(() => { stream.respond({ ':status': 200 }); stream.end('slow'); }, 200);
  if (path === '/half') { stream.respond({ ':status': 200 }); stream.write('part'); return setTimeout(() => stream.session.socket.destroy(), 100); }
  if (path === '/trailers') {
    stream.respond({ ':status': 200 }, { waitForTrailers: true });
    stream.on('wantTrailers', () => stream.sendTrailers({ 'x-sum': '42' }));
    stream.end('body');
    return;
  }
  if (path === '/upload') {
    let n = 0;
    stream.on('data', (c) => { n += c.length; });
    stream.on('end', () => { stream.respond({ ':status': 200 }); stream.end(String(n)); });
    return;
  }
  stream.respond({ ':status': 200, 'content-type': 'text/plain' });
  stream.end('hello h2 from node');
});
const h1 = https.createServer({ cert, key }, (req, res) => {
  if (req.url === '/chunked') {
    res.write('a'.repeat(10));
    setTimeout(() => { res.write('b'.repeat(20)); res.end('c'); }, 20);
    return;
  }
  res.end('hello https from node');
});
h2.listen(0, '127.0.0.1', () => {
  h1.listen(0, '127.0.0.1', () => {
    console.log('PORT ' + h2.address().port);
    console.log('PORT ' + h1.address().port);
    console.log('READY');
  });
});
"#;

/// The Node servers, and a connector to their h2 one (TLS, the test CA, h2 required).
pub(crate) async fn node_h2(certs: &Certs) -> (scalpel_testkit::peers::Peer, Connector) {
    let node = node(NODE_SERVERS, certs);
    let url = format!("https://localhost:{}", node.ports[0]);
    let c = connector(&url, h2_with(&certs.ca)).await.unwrap();
    (node, c)
}

#[tokio::test]
async fn streams_reset_by_node_are_errors_and_counted_by_reason() {
    let certs = certs();
    let (_node, c) = node_h2(&certs).await;
    let mut conn = h2(&c).await;
    let e = fetch2(&mut conn, &c, "/reset").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Reset, "{e}");
    assert!(
        !e.never_sent(),
        "a cancelled stream may have been processed"
    );
    let e = fetch2(&mut conn, &c, "/refuse").await.unwrap_err();
    assert!(e.never_sent(), "REFUSED_STREAM means not processed: {e}");
    let counts = c.h2_stats().counts();
    assert_eq!(counts.rst_stream, 2, "{counts:?}");
    assert_eq!(counts.rst_by_reason, [("refused_stream", 1), ("cancel", 1)]);
    // The connection itself is fine.
    let (status, body) = fetch2(&mut conn, &c, "/").await.unwrap();
    assert_eq!((status, &body[..]), (200, &b"hello h2 from node"[..]));
    // A connection that drops in the middle of a body: the body was cut short.
    let e = fetch2(&mut conn, &c, "/half").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::BodyCut, "{e}");
    assert!(eventually(|| conn.is_closed()).await);
}

/// Node allows 2 concurrent streams and a 16 KiB window: 8 requests at once wait for
/// streams, a 256 KiB upload waits for window; both are counted, and all complete.
#[tokio::test]
async fn stream_limit_and_window_stalls_are_counted_apart() {
    let certs = certs();
    let (_node, c) = node_h2(&certs).await;
    let mut conn = h2(&c).await;
    fetch2(&mut conn, &c, "/").await.unwrap(); // SETTINGS have arrived
    assert_eq!(conn.max_streams(), 2);
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let (mut conn, c) = (conn.clone(), c.clone());
        tasks.spawn(async move { fetch2(&mut conn, &c, "/slow").await });
    }
    while let Some(r) = tasks.join_next().await {
        assert_eq!(r.unwrap().unwrap().1, "slow");
    }
    let counts = c.h2_stats().counts();
    assert!(counts.stalled_on_streams >= 6, "{counts:?}");
    assert_eq!(counts.stalled_on_window, 0, "no bodies sent yet");

    let upload = Bytes::from(vec![b'x'; 256 * 1024]);
    let req = Request::builder()
        .method(Method::POST)
        .uri(c.peer().uri("/upload").unwrap())
        .body(())
        .unwrap();
    let mut res = conn.send(req, upload).await.unwrap();
    assert_eq!(res.read_body(100).await.unwrap().unwrap(), "262144");
    assert!(c.h2_stats().counts().stalled_on_window >= 1);
}

#[tokio::test]
async fn https_h1_to_node_reads_a_chunked_body_arriving_in_pieces() {
    let certs = certs();
    let node = node(NODE_SERVERS, &certs);
    let c = connector(
        &format!("https://localhost:{}", node.ports[1]),
        trust(&certs.ca),
    )
    .await
    .unwrap();
    let mut conn = h1(&c).await;
    let (status, body) = fetch(&mut conn, "/chunked", "localhost").await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(body, format!("{}{}c", "a".repeat(10), "b".repeat(20)));
    assert!(conn.is_reusable());
    let (status, body) = fetch(&mut conn, "/", "localhost").await.unwrap();
    assert_eq!((status, &body[..]), (200, &b"hello https from node"[..]));
}

/// A proxy streams its client's body onto an h2 stream piece by piece (here 64 pieces
/// of 4 KiB through Node's 16 KiB window), and reads the answer's trailers.
#[tokio::test]
async fn a_streamed_h2_request_body_arrives_whole_and_trailers_are_read() {
    let certs = certs();
    let (_node, c) = node_h2(&certs).await;
    let mut conn = h2(&c).await;
    let req = Request::builder()
        .method(Method::POST)
        .uri(c.peer().uri("/upload").unwrap())
        .body(())
        .unwrap();
    let (pending, mut body) = conn.send_streaming(req).await.unwrap();
    for _ in 0..64 {
        body.send(Bytes::from(vec![b'y'; 4096]), false)
            .await
            .unwrap();
    }
    body.send(Bytes::new(), true).await.unwrap();
    let mut res = pending.response().await.unwrap();
    assert_eq!(res.read_body(100).await.unwrap().unwrap(), "262144");
    assert!(res.trailers().await.unwrap().is_none());

    let mut res = conn
        .send(request(&c, "/trailers"), Bytes::new())
        .await
        .unwrap();
    assert_eq!(res.read_body(100).await.unwrap().unwrap(), "body");
    assert_eq!(res.trailers().await.unwrap().unwrap()["x-sum"], "42");
}
