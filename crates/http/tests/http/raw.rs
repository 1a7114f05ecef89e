//! The HTTP/1.1 connection against raw sockets that answer byte by byte, frame bodies
//! every way, misbehave, or go quiet.

use std::time::{Duration, Instant};

use scalpel_http::h1::{Expect, H1Conn, H1Pool, RequestWriter};
use scalpel_http::{Conn, Connector, ErrorKind, Peer, PeerOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Reads one request head off a raw server socket (bodies here are empty).
async fn read_request(sock: &mut TcpStream, buf: &mut Vec<u8>) -> Option<String> {
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end + 4]).to_string();
            buf.drain(..end + 4);
            return Some(head);
        }
        let mut chunk = [0u8; 4096];
        let n = sock.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Writes `bytes` a few at a time, so every parser state meets a read boundary.
async fn dribble(sock: &mut TcpStream, bytes: &[u8]) {
    for piece in bytes.chunks(7) {
        sock.write_all(piece).await.unwrap();
        sock.flush().await.unwrap();
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// A server that answers the i-th request on each connection with `answers[i]`, then
/// closes the connection.
async fn server(answers: Vec<&'static [u8]>, dribbled: bool) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let answers = answers.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                for answer in answers {
                    if read_request(&mut sock, &mut buf).await.is_none() {
                        return;
                    }
                    if dribbled {
                        dribble(&mut sock, answer).await;
                    } else {
                        sock.write_all(answer).await.unwrap();
                    }
                }
            });
        }
    });
    addr
}

async fn conn_to(addr: std::net::SocketAddr, set: impl FnOnce(&mut PeerOptions)) -> H1Conn {
    let mut options = PeerOptions::default();
    set(&mut options);
    let peer = Peer::parse(&format!("http://{addr}"))
        .unwrap()
        .with_options(options);
    let c = Connector::with_addr(peer, addr).unwrap();
    match c.connect().await.unwrap().conn {
        Conn::H1(h) => h,
        Conn::H2(_) => unreachable!(),
    }
}

fn get(method: &str) -> Vec<u8> {
    let mut out = Vec::new();
    let mut w = RequestWriter::new(&mut out, method, "", "/x");
    w.header(b"Host", b"t");
    w.finish();
    out
}

async fn exchange(conn: &mut H1Conn) -> Result<(u16, Vec<u8>), scalpel_http::Error> {
    conn.write_request(&get("GET"), &[]).await?;
    let head = conn.read_response(Expect::default()).await?;
    let mut body = Vec::new();
    while let Some(d) = conn.data().await {
        body.extend_from_slice(&d?);
    }
    Ok((head.status.as_u16(), body))
}

#[tokio::test]
async fn bodies_of_every_framing_arrive_whole_across_read_boundaries() {
    let addr = server(
        vec![
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n7\r\n, world\r\n0\r\n\r\n",
            b"HTTP/1.1 201 Created\r\ncontent-length: 10\r\n\r\n0123456789",
            b"HTTP/1.1 204 No Content\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nuntil the end",
        ],
        true,
    )
    .await;
    let mut conn = conn_to(addr, |_| {}).await;
    assert_eq!(
        exchange(&mut conn).await.unwrap(),
        (200, b"hello, world".to_vec())
    );
    assert!(conn.is_reusable());
    assert_eq!(
        exchange(&mut conn).await.unwrap(),
        (201, b"0123456789".to_vec())
    );
    assert_eq!(exchange(&mut conn).await.unwrap(), (204, Vec::new()));
    assert!(conn.is_reusable());
    assert_eq!(
        exchange(&mut conn).await.unwrap(),
        (200, b"until the end".to_vec())
    );
    assert!(
        !conn.is_reusable(),
        "a close-delimited body ends the connection"
    );
}

/// The load generator's path: status and reuse only, bodies skipped, HEAD framed right.
#[tokio::test]
async fn round_trips_skip_bodies_of_every_framing() {
    let addr = server(
        vec![
            b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n",
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
            b"HTTP/1.1 503 Busy\r\ncontent-length: 2\r\n\r\nno",
            b"HTTP/1.0 200 OK\r\n\r\nbye",
        ],
        true,
    )
    .await;
    let mut conn = conn_to(addr, |o| o.read_timeout = None).await;
    assert_eq!(
        conn.round_trip(&get("HEAD"), true).await.unwrap(),
        (200, true)
    );
    assert_eq!(
        conn.round_trip(&get("GET"), false).await.unwrap(),
        (200, true)
    );
    assert_eq!(
        conn.round_trip(&get("GET"), false).await.unwrap(),
        (503, true)
    );
    assert_eq!(
        conn.round_trip(&get("GET"), false).await.unwrap(),
        (200, false)
    );
}

/// Issue 11 item 7: a response with both Transfer-Encoding and Content-Length is read by
/// its chunked framing, and its connection is not reused.
#[tokio::test]
async fn a_response_with_length_and_chunked_is_reframed_and_its_connection_retired() {
    let addr = server(
        vec![b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"],
        false,
    )
    .await;
    let mut conn = conn_to(addr, |_| {}).await;
    conn.write_request(&get("GET"), &[]).await.unwrap();
    let head = conn.read_response(Expect::default()).await.unwrap();
    assert!(head.reframed && head.headers.get("content-length").is_none());
    assert_eq!(conn.read_body(100).await.unwrap().unwrap(), "hello");
    assert!(!conn.is_reusable());
    let pool = H1Pool::new(Duration::from_secs(60), 4);
    pool.checkin(addr, conn);
    assert_eq!(pool.idle(), 0, "not pooled");
}

/// Issue 11 item 7: a keep-alive connection the server closed while idle is noticed
/// before a request is written on it (the load generator counted an error instead).
#[tokio::test]
async fn a_connection_the_server_closed_while_idle_is_noticed_before_reuse() {
    let addr = server(
        vec![b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"],
        false,
    )
    .await;
    let mut conn = conn_to(addr, |_| {}).await;
    assert_eq!(exchange(&mut conn).await.unwrap().0, 200);
    assert!(conn.is_reusable(), "the response itself allowed reuse");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !conn.is_closed() {
        assert!(
            Instant::now() < deadline,
            "the server's close was never noticed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let pool = H1Pool::new(Duration::from_secs(60), 4);
    pool.checkin(addr, conn);
    assert!(
        pool.checkout(&addr).is_none(),
        "a closed connection is not handed out"
    );
}

#[tokio::test]
async fn broken_answers_are_errors_by_kind() {
    let cases: Vec<(&'static [u8], ErrorKind)> = vec![
        (b"NOT HTTP\r\n\r\n", ErrorKind::Protocol),
        (
            b"HTTP/1.1 101 Switching Protocols\r\n\r\n",
            ErrorKind::Protocol,
        ),
        (b"", ErrorKind::Reset),
        (
            b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nshort",
            ErrorKind::BodyCut,
        ),
        (
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhel",
            ErrorKind::BodyCut,
        ),
        (
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
            ErrorKind::Protocol,
        ),
    ];
    for (answer, kind) in cases {
        let addr = server(vec![answer], false).await;
        let mut conn = conn_to(addr, |_| {}).await;
        let e = exchange(&mut conn).await.unwrap_err();
        assert_eq!(e.kind(), kind, "{:?}: {e}", String::from_utf8_lossy(answer));
        assert!(!conn.is_reusable());
    }
    let big: &'static [u8] = Box::leak(
        format!("HTTP/1.1 200 OK\r\nx-big: {}\r\n\r\n", "a".repeat(4096))
            .into_bytes()
            .into_boxed_slice(),
    );
    let addr = server(vec![big], false).await;
    let mut conn = conn_to(addr, |o| o.max_head_bytes = 1024).await;
    let e = exchange(&mut conn).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::TooLarge, "{e}");

    let refused = {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        l.local_addr().unwrap()
    };
    let peer = Peer::parse(&format!("http://{refused}")).unwrap();
    let e = Connector::with_addr(peer, refused)
        .unwrap()
        .connect()
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Connect);
    assert!(e.never_sent(), "{e}");
}

/// A server that reads the request and never answers: the read time-out ends the wait.
#[tokio::test]
async fn a_silent_server_runs_into_the_read_timeout() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut sock, _) = listener.accept().await.unwrap();
        let mut buf = Vec::new();
        read_request(&mut sock, &mut buf).await;
        tokio::time::sleep(Duration::from_secs(60)).await;
    });
    let mut conn = conn_to(addr, |o| o.read_timeout = Some(Duration::from_millis(300))).await;
    let e = exchange(&mut conn).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
    assert_eq!(
        e.to_string(),
        "time-out waiting for the response head: nothing within 300ms"
    );
    let res = e.to_response();
    assert_eq!(res.status(), 504);
}

/// A proxy streams its client's body on: pieces as they come, with a declared length or
/// chunked; the server receives the very bytes, and 1xx and trailers of the answer are
/// reported.
#[tokio::test]
async fn streamed_request_bodies_arrive_whole_and_trailers_and_interim_answers_are_reported() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (seen_tx, mut seen) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
    tokio::spawn(async move {
        let (mut sock, _) = listener.accept().await.unwrap();
        for expect_end in [&b"abcdefgh"[..], &b"0\r\n\r\n"[..]] {
            let mut got = Vec::new();
            let mut chunk = [0u8; 4096];
            while !got.ends_with(expect_end) {
                let n = sock.read(&mut chunk).await.unwrap();
                assert!(n > 0, "closed early: {:?}", String::from_utf8_lossy(&got));
                got.extend_from_slice(&chunk[..n]);
            }
            seen_tx.send(got).unwrap();
            dribble(
                &mut sock,
                b"HTTP/1.1 103 Early Hints\r\nlink: </s>\r\n\r\nHTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ntrailer: x-sum\r\n\r\n2\r\nok\r\n0\r\nx-sum: 9\r\n\r\n",
            )
            .await;
        }
    });
    let mut conn = conn_to(addr, |_| {}).await;
    for chunked in [false, true] {
        let mut head = Vec::new();
        let mut w = RequestWriter::new(&mut head, "POST", "", "/up");
        w.header(b"Host", b"t");
        if chunked {
            w.header(b"Transfer-Encoding", b"chunked");
        } else {
            w.content_length(8);
        }
        w.finish();
        conn.write_request(&head, &[]).await.unwrap();
        for piece in [&b"abc"[..], b"", b"defgh"] {
            conn.write_body(piece, chunked).await.unwrap();
        }
        conn.finish_body(chunked).await.unwrap();
        let wire = seen.recv().await.unwrap();
        let body = &wire[wire.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4..];
        let expected: &[u8] = if chunked {
            b"3\r\nabc\r\n5\r\ndefgh\r\n0\r\n\r\n"
        } else {
            b"abcdefgh"
        };
        assert_eq!(body, expected);
        let resp = conn.read_response(Expect::default()).await.unwrap();
        assert_eq!((resp.status.as_u16(), conn.interim_responses()), (200, 1));
        assert_eq!(conn.declared_trailers(), ["x-sum"]);
        assert!(conn.take_trailers().is_none(), "not before the body ends");
        assert_eq!(&conn.read_body(100).await.unwrap().unwrap()[..], b"ok");
        assert_eq!(conn.take_trailers().unwrap()["x-sum"], "9");
        assert!(conn.is_reusable());
    }
}
