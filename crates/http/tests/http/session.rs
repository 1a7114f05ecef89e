//! The session layer against real peers: a pooled HTTP/1.1 connection its peer reset
//! while it idled (the request resent once, on a new connection), a request the peer took
//! (never resent), and a shared HTTP/2 connection that died under two racing requests
//! (opened again once, for both) — nginx, Node and a raw peer on its own thread.

use crate::peers::{eventually, fetch2, get, node_h2, request};
use crate::util;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use bytes::Bytes;
use scalpel_http::h1::{Expect, H1Conn};
use scalpel_http::{
    Conn, Connector, Error, ErrorKind, H1Sessions, H2Conn, Resend, Reuse, Session, Sessions,
    SharedH2,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use util::*;

/// What the raw peer does after answering the first request of its first connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Then {
    /// Waits for the test's word, then resets the (idle) connection.
    ResetWhenTold,
    /// Reads the next request's head, then resets the connection while its body is still
    /// coming: it took (part of) the request.
    ResetAfterTheNextHead,
}

/// A raw HTTP/1.1 peer with its own thread and runtime (so the test's event loop can be
/// held still while the peer acts): answers every request `200 ok`, records each
/// connection's request lines, and misbehaves on its first connection as `then` says.
struct RawPeer {
    addr: std::net::SocketAddr,
    /// Request lines by connection, in accept order.
    seen: Arc<Mutex<Vec<Vec<String>>>>,
    reset: Option<tokio::sync::oneshot::Sender<()>>,
    reset_done: mpsc::Receiver<()>,
}

impl RawPeer {
    fn start(then: Then) -> RawPeer {
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        std_listener.set_nonblocking(true).unwrap();
        let addr = std_listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (reset, told) = tokio::sync::oneshot::channel();
        let (done, reset_done) = mpsc::channel();
        let log = Arc::clone(&seen);
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(serve(std_listener, log, then, told, done));
        });
        RawPeer {
            addr,
            seen,
            reset: Some(reset),
            reset_done,
        }
    }

    /// Tells the peer to reset its first connection and waits — blocking this thread, so
    /// the test's event loop does not see it happen — until it has.
    fn reset_now(&mut self) {
        let _ = self.reset.take().unwrap().send(());
        self.reset_done
            .recv_timeout(Duration::from_secs(10))
            .expect("the peer reset the connection");
        // The RST is on loopback; give the kernel a moment to file it.
        std::thread::sleep(Duration::from_millis(50));
    }

    fn seen(&self) -> Vec<Vec<String>> {
        self.seen.lock().unwrap().clone()
    }
}

async fn serve(
    listener: std::net::TcpListener,
    log: Arc<Mutex<Vec<Vec<String>>>>,
    then: Then,
    told: tokio::sync::oneshot::Receiver<()>,
    done: mpsc::Sender<()>,
) {
    let listener = TcpListener::from_std(listener).unwrap();
    let mut told = Some(told);
    loop {
        let (sock, _) = listener.accept().await.unwrap();
        let index = {
            let mut log = log.lock().unwrap();
            log.push(Vec::new());
            log.len() - 1
        };
        let first = (index == 0).then(|| (told.take().unwrap(), done.clone()));
        tokio::spawn(connection(sock, index, Arc::clone(&log), then, first));
    }
}

async fn connection(
    mut sock: TcpStream,
    index: usize,
    log: Arc<Mutex<Vec<Vec<String>>>>,
    then: Then,
    first: Option<(tokio::sync::oneshot::Receiver<()>, mpsc::Sender<()>)>,
) {
    let mut buf = Vec::new();
    let mut answered = 0;
    while let Some(line) = read_head(&mut sock, &mut buf).await {
        log.lock().unwrap()[index].push(line);
        if let Some((_, done)) = first.as_ref().filter(|_| answered == 1) {
            // The second request on the first connection: taken, then reset mid-body.
            assert_eq!(then, Then::ResetAfterTheNextHead);
            sock.set_zero_linger().unwrap();
            drop(sock);
            let _ = done.send(());
            return;
        }
        sock.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            .await
            .unwrap();
        answered += 1;
        if answered == 1
            && then == Then::ResetWhenTold
            && let Some((told, done)) = first
        {
            let _ = told.await;
            sock.set_zero_linger().unwrap();
            drop(sock);
            let _ = done.send(());
            return;
        }
        buf.clear(); // bodies here are small and read with their head, or none
    }
}

/// Reads up to the end of a request head; its first line.
async fn read_head(sock: &mut TcpStream, buf: &mut Vec<u8>) -> Option<String> {
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_string();
            return head.lines().next().map(str::to_string);
        }
        let mut chunk = [0u8; 4096];
        match sock.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

async fn dial(c: &Connector) -> Result<H1Conn, Error> {
    match c.connect().await?.conn {
        Conn::H1(conn) => Ok(conn),
        Conn::H2(_) => panic!("HTTP/1.1 was asked for"),
    }
}

/// Sends `head` and `body` through `sessions` (counting each write in `writes`) and reads
/// the `ok` answer; the connection goes back to the pool.
async fn exchange(
    sessions: &H1Sessions<()>,
    c: &Connector,
    writes: &AtomicUsize,
    head: &[u8],
    body: &[u8],
) -> Result<(u16, Reuse), Error> {
    let write = |mut conn: H1Conn| async move {
        writes.fetch_add(1, Ordering::Relaxed);
        let r = conn.write_request(head, body).await;
        (conn, r)
    };
    let (mut conn, reuse) = sessions.start(&(), || dial(c), write).await?;
    let status = conn.read_response(Expect::default()).await?.status;
    assert_eq!(conn.read_body(1 << 10).await?.unwrap(), "ok");
    sessions.release((), conn);
    Ok((status.as_u16(), reuse))
}

/// Runs `test` on a current-thread runtime (the test's event loop, which a blocked thread
/// holds still) with sessions resending by `resend` to `peer`.
fn with_sessions(
    peer: &mut RawPeer,
    resend: Resend,
    test: impl AsyncFnOnce(&mut RawPeer, &H1Sessions<()>, &Connector),
) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let url = format!("http://{}", peer.addr);
        let c = connector(&url, |_| {}).await.unwrap();
        let sessions = H1Sessions::new(Duration::from_secs(60), 4, resend);
        test(peer, &sessions, &c).await;
    });
}

/// The race the readiness check before reuse cannot see: the peer resets an idle pooled
/// connection after the event loop last looked (here: while the test holds its thread).
/// The write fails before one byte left, so the request goes out once more, on a new
/// connection — exactly once: the peer saw it once, on its second connection.
#[test]
fn a_stale_pooled_connection_reset_by_the_peer_gets_the_request_resent_exactly_once() {
    let mut peer = RawPeer::start(Then::ResetWhenTold);
    let writes = AtomicUsize::new(0);
    with_sessions(&mut peer, Resend::NEVER_TAKEN, async |peer, sessions, c| {
        let (a, b) = (get("/a", "t"), get("/b", "t"));
        let first = exchange(sessions, c, &writes, &a, &[]).await.unwrap();
        assert_eq!(first, (200, Reuse::New));
        // The event loop reads the idle connection once (nothing there), so its
        // readiness is clear; then it is held still while the peer resets it.
        sessions.prune();
        assert_eq!(sessions.idle(), 1);
        peer.reset_now();
        let second = exchange(sessions, c, &writes, &b, &[]).await.unwrap();
        assert_eq!(second, (200, Reuse::New), "answered on a new connection");
    });
    assert_eq!(
        writes.load(Ordering::Relaxed),
        3,
        "/a once; /b on the stale connection, then once more"
    );
    assert_eq!(
        peer.seen(),
        [vec!["GET /a HTTP/1.1"], vec!["GET /b HTTP/1.1"]]
    );
}

/// Without the rule (a tool's policy that resends nothing), the same race is an error of
/// kind `reset`, and nothing more goes out.
#[test]
fn without_the_resend_rule_the_same_race_is_an_error() {
    let mut peer = RawPeer::start(Then::ResetWhenTold);
    let writes = AtomicUsize::new(0);
    with_sessions(&mut peer, Resend::NEVER, async |peer, sessions, c| {
        let (a, b) = (get("/a", "t"), get("/b", "t"));
        exchange(sessions, c, &writes, &a, &[]).await.unwrap();
        sessions.prune();
        peer.reset_now();
        let e = exchange(sessions, c, &writes, &b, &[]).await.unwrap_err();
        assert!(matches!(e, Error::NotSent(_)), "{e:?}");
        assert_eq!(e.kind(), ErrorKind::Reset);
    });
    assert_eq!(writes.load(Ordering::Relaxed), 2);
    assert_eq!(peer.seen(), [vec!["GET /a HTTP/1.1"]]);
}

/// A request the peer took — it read the head, then reset the reused connection while
/// the body was still being written — is never resent: the write fails after bytes left,
/// the error is the caller's, and no second connection is opened.
#[test]
fn a_request_the_peer_took_is_never_resent() {
    let mut peer = RawPeer::start(Then::ResetAfterTheNextHead);
    let writes = AtomicUsize::new(0);
    with_sessions(&mut peer, Resend::NEVER_TAKEN, async |_, sessions, c| {
        let a = get("/a", "t");
        let first = exchange(sessions, c, &writes, &a, &[]).await.unwrap();
        assert_eq!(first, (200, Reuse::New));
        // More body than the kernel's buffers hold: the peer resets while it is written.
        let body = vec![b'x'; 16 << 20];
        let mut head = Vec::new();
        let mut w = scalpel_http::h1::RequestWriter::new(&mut head, "POST", "", "/b");
        w.header(b"Host", b"t");
        w.content_length(body.len() as u64);
        w.finish();
        let e = exchange(sessions, c, &writes, &head, &body)
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Reset, "{e:?}");
        assert!(!e.never_sent(), "{e:?}");
    });
    assert_eq!(writes.load(Ordering::Relaxed), 2, "/b written once");
    assert_eq!(
        peer.seen(),
        [vec!["GET /a HTTP/1.1", "POST /b HTTP/1.1"]],
        "one connection, each request once"
    );
}

// ---------------------------------------------------------------------------------------
// The shared HTTP/2 connection

/// Opens an h2 connection to `c`, counting it, after `delay` (a slow handshake, so that
/// racing requests meet while it is under way).
async fn open_h2(c: &Connector, opens: &AtomicUsize, delay: Duration) -> Result<H2Conn, Error> {
    opens.fetch_add(1, Ordering::Relaxed);
    tokio::time::sleep(delay).await;
    match c.connect().await?.conn {
        Conn::H2(conn) => Ok(conn),
        Conn::H1(_) => panic!("h2 was asked for"),
    }
}

/// [`fetch2`] on a connection handed in and back, as [`SharedH2::send`] wants it.
async fn fetch_on(
    mut conn: H2Conn,
    c: &Connector,
    path: &str,
) -> (H2Conn, Result<(u16, Bytes), Error>) {
    let r = fetch2(&mut conn, c, path).await;
    (conn, r)
}

/// Two tasks that send `GET /` through `shared` at the same moment, each opening (when
/// it has to) a connection that takes 200 ms: their answers.
async fn race(
    shared: &Arc<SharedH2>,
    c: &Connector,
    opens: &Arc<AtomicUsize>,
) -> Vec<Result<(u16, Bytes), Error>> {
    let start = Arc::new(tokio::sync::Barrier::new(2));
    let mut racers = tokio::task::JoinSet::new();
    for _ in 0..2 {
        let (shared, start) = (Arc::clone(shared), Arc::clone(&start));
        let (c, opens) = (c.clone(), Arc::clone(opens));
        racers.spawn(async move {
            start.wait().await;
            let slow = Duration::from_millis(200);
            let open = || open_h2(&c, &opens, slow);
            let exchange = |conn| fetch_on(conn, &c, "/");
            shared.send(&mut None, Resend::NEVER, open, exchange).await
        });
    }
    racers.join_all().await
}

/// Two requests at once on a shared connection nginx has closed (its keep-alive time-out):
/// one of them opens the next connection, the other waits for it; both are answered on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_requests_racing_a_dead_shared_h2_connection_open_one_new_connection() {
    let certs = certs();
    let nginx = nginx(&certs);
    let c = connector(&format!("http://127.0.0.1:{}", nginx.ports[2]), |o| {
        o.version = scalpel_http::HttpVersion::Http2
    })
    .await
    .unwrap();
    let shared = Arc::new(SharedH2::new());
    let opens = Arc::new(AtomicUsize::new(0));
    let (status, _) = shared
        .send(
            &mut None,
            Resend::NEVER,
            || open_h2(&c, &opens, Duration::ZERO),
            |conn| fetch_on(conn, &c, "/"),
        )
        .await
        .unwrap();
    assert_eq!(status, 200);
    assert!(
        eventually(|| shared.live().is_none()).await,
        "nginx closed the idle connection (keepalive_timeout 1s)"
    );
    for answer in race(&shared, &c, &opens).await {
        assert_eq!(answer.unwrap().0, 200);
    }
    assert_eq!(opens.load(Ordering::Relaxed), 2, "the first, and one more");
}

/// Two requests at once to a peer that is down: one connection attempt, whose failure
/// both get; a request after it tries again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_waiting_for_a_failed_h2_connect_share_its_failure() {
    let port = free_ports(1)[0];
    let c = connector(&format!("http://127.0.0.1:{port}"), |o| {
        o.version = scalpel_http::HttpVersion::Http2
    })
    .await
    .unwrap();
    let shared = Arc::new(SharedH2::new());
    let opens = Arc::new(AtomicUsize::new(0));
    for answer in race(&shared, &c, &opens).await {
        let e = answer.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Connect, "{e}");
        assert!(e.never_sent(), "{e}");
    }
    assert_eq!(opens.load(Ordering::Relaxed), 1, "one attempt for both");
    let again = shared.lease(|| open_h2(&c, &opens, Duration::ZERO)).await;
    assert!(again.is_err());
    assert_eq!(
        opens.load(Ordering::Relaxed),
        2,
        "a later request tries again"
    );
}

/// A stream the peer refuses (REFUSED_STREAM: not processed) goes out once more on the
/// same connection when the tool's policy allows it, never a third time; with a policy
/// that resends nothing, once.
#[tokio::test]
async fn a_refused_stream_is_sent_again_once_on_the_same_connection() {
    let certs = certs();
    let (_node, c) = node_h2(&certs).await;
    for (policy, sends) in [(Resend::NEVER_TAKEN, 2), (Resend::NEVER, 1)] {
        let shared = SharedH2::new();
        let opens = Arc::new(AtomicUsize::new(0));
        let tries = AtomicUsize::new(0);
        let mut lease = None;
        let e = shared
            .send(
                &mut lease,
                policy,
                || open_h2(&c, &opens, Duration::ZERO),
                |conn| {
                    tries.fetch_add(1, Ordering::Relaxed);
                    fetch_on(conn, &c, "/refuse")
                },
            )
            .await
            .unwrap_err();
        assert_eq!(e.reset_by_peer(), Some("refused_stream"), "{e}");
        assert_eq!(tries.load(Ordering::Relaxed), sends, "{policy:?}");
        assert_eq!(opens.load(Ordering::Relaxed), 1, "the connection goes on");
        assert!(lease.is_some(), "the lease is kept");
    }
}

/// One peer's sessions say which connection a request got: over HTTP/1.1 a new one,
/// then the same one reused once released; a peer whose ALPN chose h2 gets the shared
/// HTTP/2 connection from its first request on.
#[tokio::test]
async fn sessions_say_reused_or_new_and_follow_alpn() {
    let certs = certs();
    let nginx = nginx(&certs);
    let auto = |o: &mut scalpel_http::PeerOptions| {
        o.ca_file = Some(certs.ca.clone());
        o.version = scalpel_http::HttpVersion::Auto;
    };
    let h1_only = connector(&format!("https://localhost:{}", nginx.ports[1]), auto)
        .await
        .unwrap();
    let sessions = Sessions::new(h1_only, 4, Resend::NEVER_TAKEN);
    let wire = &get("/", "localhost");
    for expected in [Reuse::New, Reuse::Reused] {
        let session = sessions
            .start(|mut conn: H1Conn| async move {
                let r = conn.write_request(wire, &[]).await;
                (conn, r)
            })
            .await
            .unwrap();
        let Session::H1(mut conn, reuse) = session else {
            panic!("ALPN offered http/1.1 only")
        };
        assert_eq!(reuse, expected);
        conn.read_response(Expect::default()).await.unwrap();
        assert_eq!(
            conn.read_body(1 << 10).await.unwrap().unwrap(),
            "hello from nginx\n"
        );
        sessions.release(conn);
    }
    let h2 = connector(&format!("https://localhost:{}", nginx.ports[0]), auto)
        .await
        .unwrap();
    let sessions = Sessions::new(h2.clone(), 4, Resend::NEVER_TAKEN);
    for _ in 0..2 {
        let session = sessions
            .start(|conn: H1Conn| async move { panic!("the peer speaks h2: {conn:?}") })
            .await;
        let Ok(Session::H2(mut conn)) = session else {
            panic!("ALPN chose h2: {session:?}")
        };
        let mut res = conn.send(request(&h2, "/"), Bytes::new()).await.unwrap();
        assert_eq!(res.status(), 200);
        res.skip_body().await.unwrap();
    }
}
