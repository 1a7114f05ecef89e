//! The connection layer of the hot path, over scalpel-http's connector: a slot's link to
//! the target — its own HTTP/1.1 connection, or one of the stream slots of an HTTP/2
//! connection it shares with the thread's other slots — opened on demand (the TLS
//! handshake timed apart from requests), checked before each request (a keep-alive
//! connection the server closed while idle is replaced, an HTTP/2 connection ended by
//! GOAWAY is reopened by one slot while the others wait: scalpel-http's session layer).
//! What went wrong is counted by scalpel-http's [`ErrorKey`]: its `ErrorKind` and, for
//! the generator's own limits and HTTP/2 resets, the errno or the reason.
//!
//! No task or channel per request: an HTTP/1.1 exchange runs in the slot's own task
//! (scalpel-http's `H1Conn`, no allocation per request); an HTTP/2 request is a stream
//! on a connection whose one driver task was spawned at its handshake.

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

use scalpel_http::h1::H1Conn;
use scalpel_http::{
    Conn, Connector, Error, ErrorKey, ErrorKind, H2Conn, H2Driver, H2Lease, Resend, SharedH2,
    TlsError,
};

/// load's part of the session layer's one resend rule: a request an HTTP/2 server refused
/// unprocessed goes out once more (nginx sends a GOAWAY every `keepalive_requests`). Its
/// HTTP/1.1 connections are each slot's own, checked before every request instead.
const RESEND: Resend = Resend {
    unsent_on_reused: false,
    refused_h2: true,
};

/// The request never left: no connection, no handshake, or the generator's own limit.
pub(crate) fn unsent(failure: ErrorKey) -> bool {
    matches!(
        failure.kind,
        ErrorKind::Connect | ErrorKind::Tls | ErrorKind::Local
    )
}

/// Called with the TLS handshake time (`None` over plain TCP) of each connection opened.
pub(crate) type OnOpen<'a> = &'a dyn Fn(Option<Duration>);

/// Opens a connection: TCP, TLS when `https://`, then the protocol. The connect future
/// (a TLS handshake's state is kilobytes) is boxed: inline, it would make every request's
/// future that large, and moving it cost more than the rare allocation. An HTTP/2
/// connection's driver task is spawned on the thread's `LocalSet`, beside the slots that
/// send on it (so an HTTP/2 connection must be opened inside it).
async fn open(connector: &Connector, on_open: OnOpen<'_>) -> Result<Conn, Error> {
    let connected = Box::pin(connector.connect_with(H2Driver::Local)).await?;
    on_open(connected.timing.tls);
    Ok(connected.conn)
}

/// Makes `conn` a live HTTP/1.1 connection: one the server closed while it sat idle (its
/// keep-alive time-out), or that sent bytes nobody asked for, is replaced before the
/// request is written — the request never reached anyone, so it is no error. Asks the
/// event loop's readiness: no system call on a live connection.
pub(crate) async fn h1_ready<'c>(
    conn: &'c mut Option<H1Conn>,
    connector: &Connector,
    on_open: OnOpen<'_>,
) -> Result<&'c mut H1Conn, ErrorKey> {
    if conn.as_mut().is_some_and(H1Conn::is_closed) {
        *conn = None;
    }
    if conn.is_none() {
        match open(connector, on_open).await.map_err(|e| e.key())? {
            Conn::H1(c) => *conn = Some(c),
            // HTTP/1.1 was the only offer
            Conn::H2(_) => return Err(ErrorKey::of(ErrorKind::Protocol)),
        }
    }
    Ok(conn.as_mut().expect("connected above"))
}

/// Sends one HTTP/1.1 request (pre-encoded) and skips its body: the status, and whether
/// the connection can carry the next request (not after `Connection: close`, a body
/// delimited by close, or a head with both Transfer-Encoding and Content-Length).
pub(crate) async fn h1_exchange(
    conn: &mut H1Conn,
    request: &[u8],
    head: bool,
) -> Result<(u16, bool), ErrorKey> {
    conn.round_trip(request, head).await.map_err(|e| e.key())
}

/// One HTTP/2 connection of a thread, shared by the stream slots attached to it: the
/// session layer's [`SharedH2`] (one slot reopens it when it ends, the others wait and
/// share the outcome), and the count of slots.
#[derive(Debug, Default)]
pub(crate) struct H2Link {
    shared: SharedH2,
    /// Stream slots attached.
    slots: Cell<u32>,
}

impl H2Link {
    /// Stream slots attached to this connection.
    pub(crate) fn slots(&self) -> u32 {
        self.slots.get()
    }

    /// Opens the connection now (before the clock starts); a failure is left for the
    /// run, whose slots try again and count it.
    pub(crate) async fn preconnect(&self, connector: &Connector, on_open: OnOpen<'_>) {
        if let Ok(Conn::H2(c)) = open(connector, on_open).await {
            self.shared.install(c);
        }
    }
}

/// A slot's place on a shared HTTP/2 connection: one request in flight at a time, so
/// `M` slots on a link keep `M` streams busy.
#[derive(Debug)]
pub(crate) struct H2Slot {
    link: Rc<H2Link>,
    /// The slot's own handle on the link's connection (checked with two atomic loads
    /// before each request).
    mine: Option<H2Lease>,
}

impl H2Slot {
    pub(crate) fn attach(link: &Rc<H2Link>) -> H2Slot {
        link.slots.set(link.slots.get() + 1);
        H2Slot {
            link: link.clone(),
            mine: None,
        }
    }

    /// Sends one request on the link's connection, opening it when there is none or it
    /// has ended (or waiting for the slot that is opening it); `sent` is called as the
    /// request is about to go out, then the request is sent and its body skipped.
    ///
    /// A request the server refused without processing it goes out once more (the
    /// session layer's rule, [`RESEND`]), as an HTTP/1.1 connection closed while idle is
    /// replaced: only a second refusal counts as an error. Refused are the streams past a
    /// GOAWAY (RFC 9113 §6.8; nginx sends one every `keepalive_requests`), sent again on a
    /// new connection, and a stream reset with REFUSED_STREAM (§8.7: a server limiting
    /// concurrent streams refuses those a client opened before its SETTINGS arrived), sent
    /// again on the same one. Both still count among the step's HTTP/2 events.
    pub(crate) async fn exchange(
        &mut self,
        connector: &Connector,
        on_open: OnOpen<'_>,
        sent: &dyn Fn(),
        request: &http::Request<()>,
        body: &bytes::Bytes,
    ) -> Result<u16, ErrorKey> {
        let open_h2 = || async {
            match open(connector, on_open).await? {
                Conn::H2(c) => Ok(c),
                // Only h2 was offered, so this cannot happen; never loop on it.
                Conn::H1(_) => Err(Error::Tls(TlsError::NoH2 {
                    chosen: "http/1.1".into(),
                })),
            }
        };
        let exchange = |mut conn: H2Conn| async move {
            sent();
            let status = conn.round_trip(request.clone(), body.clone()).await;
            (conn, status)
        };
        self.link
            .shared
            .send(&mut self.mine, RESEND, open_h2, exchange)
            .await
            .map_err(|e| e.key())
    }
}

impl Drop for H2Slot {
    fn drop(&mut self) {
        self.link.slots.set(self.link.slots.get().saturating_sub(1));
    }
}

/// What a slot sends requests on.
#[derive(Debug)]
pub(crate) enum Link {
    /// HTTP/1.1: a connection of its own, or none yet.
    H1(Option<H1Conn>),
    /// HTTP/2: a stream slot on a connection shared with other slots.
    H2(H2Slot),
}

impl Link {
    /// Drops the slot's HTTP/1.1 connection (`--no-reuse`, or it cannot be reused).
    pub(crate) fn close_h1(&mut self) {
        if let Link::H1(c) = self {
            *c = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::sync::Arc;

    use scalpel_http::{Peer, PeerOptions};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// Serves each of `responses` on its own connection (written, then closed) and returns
    /// what the client made of each, through the hot path's own functions.
    fn exchange(responses: Vec<Vec<u8>>) -> Vec<Result<(u16, bool), ErrorKey>> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let n = responses.len();
            tokio::spawn(async move {
                for bytes in responses {
                    let (mut s, _) = listener.accept().await.unwrap();
                    let mut request = [0u8; 1024];
                    let _ = s.read(&mut request).await;
                    let _ = s.write_all(&bytes).await;
                    let _ = s.shutdown().await;
                }
            });
            let mut options = PeerOptions::default();
            options.read_timeout = None;
            let peer = Peer::parse(&format!("http://{addr}"))
                .unwrap()
                .with_options(options);
            let connector = Connector::new(peer).await.unwrap();
            let opened = Arc::new(std::sync::atomic::AtomicU64::new(0));
            let mut out = Vec::new();
            for _ in 0..n {
                let mut conn = None;
                let count = opened.clone();
                let on_open = move |tls: Option<Duration>| {
                    assert_eq!(tls, None, "no TLS over http://");
                    count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                };
                let c = h1_ready(&mut conn, &connector, &on_open).await.unwrap();
                let result = tokio::time::timeout(
                    Duration::from_secs(5),
                    h1_exchange(c, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", false),
                )
                .await
                .unwrap_or(Err(ErrorKey::of(ErrorKind::Timeout)));
                out.push(result);
            }
            assert_eq!(opened.load(std::sync::atomic::Ordering::Relaxed), n as u64);
            out
        })
    }

    fn head_with(headers: usize, value_len: usize) -> Vec<u8> {
        let mut head = String::from("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n");
        for i in 0..headers {
            head += &format!("X-H{i}: {}\r\n", "v".repeat(value_len));
        }
        head += "\r\nok";
        head.into_bytes()
    }

    /// #18.7: 64 header lines were a protocol error; the limit is 64 KiB of head (over it:
    /// `too_large`, counted `protocol` before the one error vocabulary).
    #[test]
    fn heads_are_limited_by_bytes_not_by_header_count() {
        let results = exchange(vec![
            head_with(65, 8),
            head_with(2000, 8),
            head_with(60, 1000),
            head_with(70, 1000),
        ]);
        assert_eq!(results[0], Ok((200, true)));
        assert_eq!(
            results[1],
            Ok((200, true)),
            "2000 short headers fit in 64 KiB"
        );
        assert_eq!(results[2], Ok((200, true)), "60 KiB of head");
        assert_eq!(
            results[3],
            Err(ErrorKey::of(ErrorKind::TooLarge)),
            "70 KiB of head"
        );
    }

    /// RFC 9112 §6.3: a response with both Transfer-Encoding and Content-Length is read by
    /// its chunks and its connection not reused; two different lengths are an error.
    #[test]
    fn ambiguous_framing_is_not_reused_or_refused() {
        let results = exchange(vec![
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n".to_vec(),
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok".to_vec(),
        ]);
        assert_eq!(results[0], Ok((200, false)));
        assert_eq!(results[1], Err(ErrorKey::of(ErrorKind::Protocol)));
    }

    /// A seeded mutation test of the response path over real sockets: any bytes end in an
    /// answer or a failure, never a panic or a hang.
    #[test]
    fn mutated_responses_never_panic() {
        let seeds: [&[u8]; 4] = [
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;x=1\r\nhello\r\n0\r\nT: 1\r\n\r\n",
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.0 404 No\r\nConnection: keep-alive\r\n\r\nbody",
            b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n",
        ];
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut cases = Vec::new();
        for i in 0..200 {
            let mut bytes = seeds[i % seeds.len()].to_vec();
            for _ in 0..(1 + next() % 4) {
                let at = (next() as usize) % (bytes.len() + 1);
                match next() % 4 {
                    0 if at < bytes.len() => bytes[at] = next() as u8,
                    1 if at < bytes.len() => {
                        bytes.remove(at);
                    }
                    2 => bytes.insert(at, b"\r\n:0;-9fF"[(next() % 9) as usize]),
                    _ => bytes.truncate(at),
                }
            }
            cases.push(bytes);
        }
        let results = exchange(cases);
        assert_eq!(results.len(), 200);
    }

    /// The generator's own limits are counted by errno and never as sent; failed connects
    /// and handshakes were never sent either; everything else was.
    #[test]
    fn errors_sort_into_the_keys_a_result_counts() {
        let os = io::Error::from_raw_os_error;
        let key = |e: Error| e.key();
        assert_eq!(
            key(Error::Connect(os(libc_errno::ECONNREFUSED))),
            ErrorKey::of(ErrorKind::Connect)
        );
        assert_eq!(
            key(Error::Connect(os(libc_errno::EMFILE))),
            ErrorKey::local("EMFILE")
        );
        assert_eq!(
            key(Error::Connect(os(libc_errno::EADDRNOTAVAIL))).to_string(),
            "local:EADDRNOTAVAIL"
        );
        for never in [ErrorKind::Connect, ErrorKind::Tls, ErrorKind::Local] {
            assert!(unsent(ErrorKey::of(never)));
        }
        assert!(unsent(ErrorKey::local("source")));
        for sent in [
            ErrorKind::Timeout,
            ErrorKind::Reset,
            ErrorKind::BodyCut,
            ErrorKind::Protocol,
            ErrorKind::TooLarge,
        ] {
            assert!(!unsent(ErrorKey::of(sent)));
        }
    }

    /// The errno values the test needs, from nix (no libc dependency of its own).
    mod libc_errno {
        use nix::errno::Errno;
        pub(super) const ECONNREFUSED: i32 = Errno::ECONNREFUSED as i32;
        pub(super) const EMFILE: i32 = Errno::EMFILE as i32;
        pub(super) const EADDRNOTAVAIL: i32 = Errno::EADDRNOTAVAIL as i32;
    }
}
