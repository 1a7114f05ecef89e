//! The connection layer of the hot path, over scalpel-http's connector: a slot's link to
//! the target — its own HTTP/1.1 connection, or one of the stream slots of an HTTP/2
//! connection it shares with the thread's other slots — opened on demand (the TLS
//! handshake timed apart from requests), checked before each request (a keep-alive
//! connection the server closed while idle is replaced, an HTTP/2 connection ended by
//! GOAWAY is reopened), and the sorting of what went wrong into the kinds the result
//! counts.
//!
//! No task or channel per request: an HTTP/1.1 exchange runs in the slot's own task
//! (scalpel-http's `H1Conn`, no allocation per request); an HTTP/2 request is a stream
//! on a connection whose one driver task was spawned at its handshake.

use std::cell::{Cell, RefCell};
use std::io;
use std::rc::Rc;
use std::time::Duration;

use scalpel_http::h1::H1Conn;
use scalpel_http::{Conn, Connector, Error, H2Conn, H2Driver};
use tokio::sync::Notify;

/// Why a request did not get a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    /// Could not connect to the target (refused, unreachable, connect time-out): the
    /// request was never sent.
    Connect,
    /// The TLS handshake failed (certificate, alert, ALPN, time-out): never sent.
    Tls,
    /// The generator's own limit, not the target's fault (no descriptor, no ephemeral
    /// port, no buffer memory, a request it could not encode): never sent. The name is
    /// the errno.
    Local(&'static str),
    /// The request was sent and no whole response came within the request time-out.
    Timeout,
    /// The connection broke while writing or reading (a reset, a body cut short).
    Io,
    /// The response was not valid HTTP, or over a byte limit.
    Protocol,
    /// HTTP/2: the server reset the request's stream (RST_STREAM), with this reason.
    Reset(&'static str),
    /// HTTP/2: the server's GOAWAY refused the request, again on a new connection.
    GoAway,
}

impl Failure {
    /// Sorts a scalpel-http error into the kinds a result counts.
    pub(crate) fn from_error(e: &Error) -> Failure {
        use scalpel_http::Phase;
        if let Some(reason) = e.reset_by_peer() {
            return Failure::Reset(reason);
        }
        if e.refused_by_goaway() {
            return Failure::GoAway;
        }
        let io =
            |e: &io::Error, otherwise: Failure| local_errno(e).map_or(otherwise, Failure::Local);
        match e {
            Error::Resolve { .. } => Failure::Connect,
            Error::Connect(e) => io(e, Failure::Connect),
            Error::Timeout {
                phase: Phase::Connect,
                ..
            } => Failure::Connect,
            Error::Timeout {
                phase: Phase::Handshake,
                ..
            }
            | Error::Tls(_) => Failure::Tls,
            Error::Timeout { .. } => Failure::Timeout,
            Error::Io {
                phase: Phase::Handshake,
                source,
            } => io(source, Failure::Tls),
            Error::Io { source, .. } | Error::NotSent(source) => io(source, Failure::Io),
            Error::Closed { .. } => Failure::Io,
            Error::Wire(_) | Error::BodyTooLarge(_) => Failure::Protocol,
            Error::H2 {
                phase: Phase::Handshake,
                ..
            } => Failure::Connect,
            Error::H2 { source, .. } => match source.get_io() {
                Some(e) => io(e, Failure::Io),
                None if source.is_library() || source.is_go_away() => Failure::Protocol,
                None => Failure::Io,
            },
            Error::Request(_) => Failure::Local("EINVAL"),
            _ => Failure::Io,
        }
    }

    /// The request never left: no connection, no handshake, or the generator's own limit.
    pub(crate) fn unsent(self) -> bool {
        matches!(self, Failure::Connect | Failure::Tls | Failure::Local(_))
    }

    /// The connection cannot carry more requests after this failure (an HTTP/2 stream
    /// reset or a slow answer leave it usable).
    fn ends_connection(self) -> bool {
        !matches!(self, Failure::Reset(_) | Failure::Timeout)
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Connect => f.write_str("could not connect"),
            Failure::Tls => f.write_str("the TLS handshake failed"),
            Failure::Local(errno) => write!(f, "the load generator's own limit ({errno})"),
            Failure::Timeout => f.write_str("no response within the time-out"),
            Failure::Io => f.write_str("the connection broke before the response was complete"),
            Failure::Protocol => f.write_str("the response is not valid HTTP/1.1 or over a limit"),
            Failure::Reset(reason) => write!(f, "the server reset the stream ({reason})"),
            Failure::GoAway => f.write_str("the server's GOAWAY refused the request"),
        }
    }
}

/// The errno names of failures that are the generator's own: its descriptor table, its
/// ephemeral ports, its memory. Counted as `local:NAME`, never against the target.
fn local_errno(error: &io::Error) -> Option<&'static str> {
    use nix::errno::Errno;
    Some(match Errno::from_raw(error.raw_os_error()?) {
        Errno::EMFILE => "EMFILE",
        Errno::ENFILE => "ENFILE",
        Errno::ENOBUFS => "ENOBUFS",
        Errno::ENOMEM => "ENOMEM",
        Errno::EADDRNOTAVAIL => "EADDRNOTAVAIL",
        Errno::EADDRINUSE => "EADDRINUSE",
        _ => return None,
    })
}

/// Called with the TLS handshake time (`None` over plain TCP) of each connection opened.
pub(crate) type OnOpen<'a> = &'a dyn Fn(Option<Duration>);

/// Opens a connection: TCP, TLS when `https://`, then the protocol. The connect future
/// (a TLS handshake's state is kilobytes) is boxed: inline, it would make every request's
/// future that large, and moving it cost more than the rare allocation. An HTTP/2
/// connection's driver task is spawned on the thread's `LocalSet`, beside the slots that
/// send on it (so an HTTP/2 connection must be opened inside it).
async fn open(connector: &Connector, on_open: OnOpen<'_>) -> Result<Conn, Failure> {
    let connected = Box::pin(connector.connect_with(H2Driver::Local))
        .await
        .map_err(|e| Failure::from_error(&e))?;
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
) -> Result<&'c mut H1Conn, Failure> {
    if conn.as_mut().is_some_and(H1Conn::is_closed) {
        *conn = None;
    }
    if conn.is_none() {
        match open(connector, on_open).await? {
            Conn::H1(c) => *conn = Some(c),
            Conn::H2(_) => return Err(Failure::Protocol), // HTTP/1.1 was the only offer
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
) -> Result<(u16, bool), Failure> {
    conn.round_trip(request, head)
        .await
        .map_err(|e| Failure::from_error(&e))
}

/// One HTTP/2 connection of a thread, shared by the stream slots attached to it. Single
/// threaded (the thread's `LocalSet`): cells, no locks.
#[derive(Debug, Default)]
pub(crate) struct H2Link {
    conn: RefCell<Option<H2Conn>>,
    /// Bumped at each new connection: a slot's handle of an older one is stale.
    generation: Cell<u64>,
    /// A slot is opening the connection; the others wait for it.
    opening: Cell<bool>,
    /// Attempts to open that ended, and the failure of the last one if it failed: the
    /// slots that waited for an attempt share its failure instead of each trying again.
    attempts: Cell<u64>,
    failed: Cell<Option<Failure>>,
    opened: Notify,
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
            *self.conn.borrow_mut() = Some(c);
            self.generation.set(self.generation.get() + 1);
        }
    }
}

/// Resets `opening` and wakes the waiting slots however the attempt ends, also when the
/// opening slot's request times out or is cut by an interrupt mid-handshake.
struct Opening<'a>(&'a H2Link);

impl Drop for Opening<'_> {
    fn drop(&mut self) {
        self.0.opening.set(false);
        self.0.opened.notify_waiters();
    }
}

/// A slot's place on a shared HTTP/2 connection: one request in flight at a time, so
/// `M` slots on a link keep `M` streams busy.
#[derive(Debug)]
pub(crate) struct H2Slot {
    link: Rc<H2Link>,
    /// The slot's own handle and the generation it belongs to.
    mine: Option<(H2Conn, u64)>,
}

impl H2Slot {
    pub(crate) fn attach(link: &Rc<H2Link>) -> H2Slot {
        link.slots.set(link.slots.get() + 1);
        H2Slot {
            link: link.clone(),
            mine: None,
        }
    }

    /// Makes `mine` a live handle on the link's connection, opening it (or waiting for
    /// the slot that is opening it) when there is none or it has ended; returns its
    /// generation.
    async fn ready(&mut self, connector: &Connector, on_open: OnOpen<'_>) -> Result<u64, Failure> {
        let link = self.link.clone();
        loop {
            let generation = link.generation.get();
            if let Some((c, g)) = &self.mine
                && *g == generation
                && !c.is_closed()
            {
                return Ok(generation);
            }
            self.mine = None;
            let shared = link
                .conn
                .borrow()
                .as_ref()
                .filter(|c| !c.is_closed())
                .cloned();
            if let Some(c) = shared {
                self.mine = Some((c, generation));
                continue;
            }
            if link.opening.get() {
                let attempt = link.attempts.get();
                let notified = link.opened.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if link.opening.get() {
                    notified.await;
                }
                if link.attempts.get() > attempt
                    && let Some(failure) = link.failed.get()
                {
                    return Err(failure);
                }
                continue;
            }
            link.opening.set(true);
            let guard = Opening(&link);
            let result = open(connector, on_open).await;
            link.attempts.set(link.attempts.get() + 1);
            match result {
                Ok(Conn::H2(c)) => {
                    *link.conn.borrow_mut() = Some(c);
                    link.generation.set(generation + 1);
                    link.failed.set(None);
                }
                Ok(Conn::H1(_)) => {
                    // Only h2 was offered, so this cannot happen; never loop on it.
                    link.failed.set(Some(Failure::Protocol));
                    drop(guard);
                    return Err(Failure::Protocol);
                }
                Err(failure) => {
                    link.failed.set(Some(failure));
                    drop(guard);
                    return Err(failure);
                }
            }
            drop(guard);
        }
    }

    /// Forgets the connection of `generation` (it ended): the next request opens another.
    fn kill(&mut self, generation: u64) {
        self.mine = None;
        if self.link.generation.get() == generation {
            *self.link.conn.borrow_mut() = None;
        }
    }

    /// A live handle, opening the connection when needed; `sent` is called once the
    /// request is about to go out, then the request is sent and its body skipped.
    ///
    /// A request the server refused without processing it goes out once more, as an
    /// HTTP/1.1 connection closed while idle is replaced: only a second refusal counts
    /// as an error. Refused are the streams past a GOAWAY (RFC 9113 §6.8; nginx sends one
    /// every `keepalive_requests`), sent again on a new connection, and a stream reset
    /// with REFUSED_STREAM (§8.7: a server limiting concurrent streams refuses those a
    /// client opened before its SETTINGS arrived), sent again on the same one. Both still
    /// count among the step's HTTP/2 events.
    pub(crate) async fn exchange(
        &mut self,
        connector: &Connector,
        on_open: OnOpen<'_>,
        sent: &dyn Fn(),
        request: &http::Request<()>,
        body: &bytes::Bytes,
    ) -> Result<u16, Failure> {
        let mut refused = false;
        loop {
            let generation = self.ready(connector, on_open).await?;
            let (conn, _) = self.mine.as_mut().expect("made ready above");
            sent();
            match conn.round_trip(request.clone(), body.clone()).await {
                Ok(status) => return Ok(status),
                Err(e) => {
                    let failure = Failure::from_error(&e);
                    if failure.ends_connection() {
                        self.kill(generation);
                    }
                    let unprocessed =
                        matches!(failure, Failure::GoAway | Failure::Reset("refused_stream"));
                    if unprocessed && !refused {
                        refused = true;
                        continue;
                    }
                    return Err(failure);
                }
            }
        }
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
    use std::sync::Arc;

    use scalpel_http::{Peer, PeerOptions};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// Serves each of `responses` on its own connection (written, then closed) and returns
    /// what the client made of each, through the hot path's own functions.
    fn exchange(responses: Vec<Vec<u8>>) -> Vec<Result<(u16, bool), Failure>> {
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
                .unwrap_or(Err(Failure::Timeout));
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

    /// #18.7: 64 header lines were a protocol error; the limit is 64 KiB of head.
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
        assert_eq!(results[3], Err(Failure::Protocol), "70 KiB of head");
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
        assert_eq!(results[1], Err(Failure::Protocol));
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

    #[test]
    fn errors_sort_into_the_kinds_a_result_counts() {
        let os = io::Error::from_raw_os_error;
        assert_eq!(
            Failure::from_error(&Error::Connect(os(libc_errno::ECONNREFUSED))),
            Failure::Connect
        );
        assert_eq!(
            Failure::from_error(&Error::Connect(os(libc_errno::EMFILE))),
            Failure::Local("EMFILE")
        );
        assert_eq!(
            Failure::from_error(&Error::Connect(os(libc_errno::EADDRNOTAVAIL))),
            Failure::Local("EADDRNOTAVAIL")
        );
        for unsent in [Failure::Connect, Failure::Tls, Failure::Local("EMFILE")] {
            assert!(unsent.unsent());
        }
        for sent in [
            Failure::Timeout,
            Failure::Io,
            Failure::Protocol,
            Failure::Reset("cancel"),
            Failure::GoAway,
        ] {
            assert!(!sent.unsent());
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
