//! HTTP/2 through the `h2` crate: a connection handle that carries many concurrent
//! streams, one driver task per connection (never one per request), and counters of
//! what a load test must see apart from ordinary errors — GOAWAY, RST_STREAM by reason,
//! and stalls on the peer's stream limit or its flow-control window.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use h2::client::SendRequest;
use h2::{RecvStream, SendStream};
use http::{HeaderMap, Request, StatusCode};

use crate::error::{Error, Phase, REASONS};
use crate::hop::strip_hop_by_hop;
use crate::peer::PeerOptions;
use crate::stream::Stream;

/// Counters of HTTP/2 events, shared by the connections that record into them (one per
/// connector by default). Updated only on rare events: atomics are cheap enough.
#[derive(Debug, Default)]
pub struct H2Stats {
    goaway: AtomicU64,
    rst: [AtomicU64; REASONS.len()],
    stall_streams: AtomicU64,
    stall_window: AtomicU64,
}

/// A snapshot of [`H2Stats`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct H2Counts {
    /// Connections the peer ended with GOAWAY (any reason, NO_ERROR included).
    pub goaway: u64,
    /// Streams the peer reset (RST_STREAM), all reasons.
    pub rst_stream: u64,
    /// Streams the peer reset, by reason (`cancel`, `refused_stream`, …), non-zero only.
    pub rst_by_reason: Vec<(&'static str, u64)>,
    /// Requests that had to wait for a free stream (the peer's
    /// SETTINGS_MAX_CONCURRENT_STREAMS was reached on their connection).
    pub stalled_on_streams: u64,
    /// Request bodies that had to wait for flow-control window (stream or connection).
    pub stalled_on_window: u64,
}

impl H2Stats {
    /// The counts so far.
    pub fn counts(&self) -> H2Counts {
        let by_reason: Vec<_> = REASONS
            .iter()
            .zip(&self.rst)
            .map(|(name, n)| (*name, n.load(Ordering::Relaxed)))
            .filter(|(_, n)| *n > 0)
            .collect();
        H2Counts {
            goaway: self.goaway.load(Ordering::Relaxed),
            rst_stream: by_reason.iter().map(|(_, n)| n).sum(),
            rst_by_reason: by_reason,
            stalled_on_streams: self.stall_streams.load(Ordering::Relaxed),
            stalled_on_window: self.stall_window.load(Ordering::Relaxed),
        }
    }

    /// Counts a stream reset by the peer.
    fn note(&self, e: &h2::Error) {
        if e.is_reset()
            && e.is_remote()
            && let Some(reason) = e.reason()
        {
            let i = (u32::from(reason) as usize).min(REASONS.len() - 1);
            self.rst[i].fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[derive(Debug)]
struct Shared {
    stats: Arc<H2Stats>,
    closed: AtomicBool,
    in_flight: AtomicUsize,
    /// The connection's one PING handle (`H2Conn::ping`), taken while a ping is out.
    ping: std::sync::Mutex<Option<h2::PingPong>>,
}

/// Where an HTTP/2 connection's driver task runs (the one task that reads and writes
/// its socket for all its streams).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum H2Driver {
    /// On the tokio runtime (`tokio::spawn`): any worker of a multi-thread runtime.
    #[default]
    Runtime,
    /// On the current thread's `LocalSet` (`spawn_local`), beside the tasks that send on
    /// the connection: a load generator's thread, whose request tasks live there, then
    /// runs every wake-up of a request on one scheduler. Must be called inside a
    /// `LocalSet` (tokio panics otherwise).
    Local,
}

/// An HTTP/2 connection: a cheap clonable handle (each clone may have one request
/// waiting for a stream; give each concurrent sender its own clone). The connection
/// itself is driven by one task spawned at the handshake ([`H2Driver`]).
#[derive(Debug, Clone)]
pub struct H2Conn {
    send: SendRequest<Bytes>,
    shared: Arc<Shared>,
    read_timeout: Option<Duration>,
}

/// Counts one request in flight on its connection until dropped.
#[derive(Debug)]
struct InFlight(Arc<Shared>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

impl H2Conn {
    /// Starts HTTP/2 on a connected stream (after ALPN chose `h2`, or prior knowledge
    /// over plain TCP) and spawns its driver task on the runtime. Events are counted
    /// into `stats`.
    pub async fn handshake(
        stream: Stream,
        options: &PeerOptions,
        stats: Arc<H2Stats>,
    ) -> Result<H2Conn, Error> {
        Self::handshake_on(stream, options, stats, H2Driver::Runtime).await
    }

    /// [`H2Conn::handshake`] with the driver task spawned where `driver` says.
    pub async fn handshake_on(
        stream: Stream,
        options: &PeerOptions,
        stats: Arc<H2Stats>,
        driver: H2Driver,
    ) -> Result<H2Conn, Error> {
        let (send, mut connection) = h2::client::Builder::new()
            .initial_window_size(options.h2_stream_window)
            .initial_connection_window_size(options.h2_connection_window)
            .max_header_list_size(u32::try_from(options.max_head_bytes).unwrap_or(u32::MAX))
            .enable_push(false)
            .handshake::<_, Bytes>(stream)
            .await
            .map_err(|e| Error::H2 {
                phase: Phase::Handshake,
                source: e,
            })?;
        let shared = Arc::new(Shared {
            stats,
            closed: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            ping: std::sync::Mutex::new(connection.ping_pong()),
        });
        let ended = Arc::clone(&shared);
        let drive = async move {
            let end = connection.await;
            // Ended while handles still exist: the peer closed it. A remote GOAWAY shows
            // as an error (or, with NO_ERROR, as a clean end while we still hold handles).
            let ours = Arc::strong_count(&ended) == 1;
            let goaway = match &end {
                Err(e) => e.is_go_away() && e.is_remote(),
                Ok(()) => !ours,
            };
            if goaway {
                ended.stats.goaway.fetch_add(1, Ordering::Relaxed);
            }
            if let Err(e) = &end {
                tracing::debug!(error = %e, "h2 connection ended");
            }
            ended.closed.store(true, Ordering::Release);
        };
        match driver {
            H2Driver::Runtime => drop(tokio::spawn(drive)),
            H2Driver::Local => drop(tokio::task::spawn_local(drive)),
        }
        Ok(H2Conn {
            send,
            shared,
            read_timeout: options.read_timeout,
        })
    }

    /// Sends one PING and waits for its answer: proof that the peer speaks HTTP/2 (it must
    /// send its SETTINGS before anything else), without sending a request. The handshake
    /// alone proves nothing over plain TCP: the client's preface is written and not
    /// answered. Unbounded: the caller sets the time limit.
    pub async fn ping(&self) -> Result<(), Error> {
        let handle = || {
            self.shared
                .ping
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
        };
        let Some(mut ping) = handle().take() else {
            return Err(Error::Request(
                "a PING is already out on this connection".into(),
            ));
        };
        let pong = ping.ping(h2::Ping::opaque()).await;
        *handle() = Some(ping);
        pong.map(drop).map_err(|source| Error::H2 {
            phase: Phase::Handshake,
            source,
        })
    }

    /// The connection has ended (GOAWAY, error, or closed): open a new one.
    pub fn is_closed(&self) -> bool {
        self.shared.closed.load(Ordering::Acquire)
    }

    /// The peer's current limit on concurrent streams.
    pub fn max_streams(&self) -> usize {
        self.send.current_max_send_streams()
    }

    /// Requests in flight on this connection (all handles).
    pub fn in_flight(&self) -> usize {
        self.shared.in_flight.load(Ordering::Relaxed)
    }

    /// The counters this connection records into.
    pub fn stats(&self) -> &Arc<H2Stats> {
        &self.shared.stats
    }

    /// Sends a request (its URI absolute: `https://host/path`, see
    /// [`crate::Peer::uri`]) with a whole body, and waits for the response head.
    /// Hop-by-hop headers, which HTTP/2 forbids, are dropped on the way.
    pub async fn send(&mut self, request: Request<()>, body: Bytes) -> Result<H2Response, Error> {
        let end = body.is_empty();
        let (pending, mut sender) = self.open(request, end).await?;
        if !end {
            sender.send(body, true).await?;
        }
        pending.response().await
    }

    /// Opens a stream for a request whose body is sent piece by piece with the returned
    /// [`H2BodySender`] (a proxy streaming its client's body on), and returns the
    /// response still to come. Send the body before awaiting the response: the peer may
    /// wait for the whole body before it answers.
    pub async fn send_streaming(
        &mut self,
        request: Request<()>,
    ) -> Result<(H2PendingResponse, H2BodySender), Error> {
        self.open(request, false).await
    }

    async fn open(
        &mut self,
        mut request: Request<()>,
        end: bool,
    ) -> Result<(H2PendingResponse, H2BodySender), Error> {
        strip_hop_by_hop(request.headers_mut());
        let h2err = |phase| move |source| Error::H2 { phase, source };
        let stats = Arc::clone(&self.shared.stats);
        std::future::poll_fn(|cx| self.send.poll_ready(cx))
            .await
            .inspect_err(|e| stats.note(e))
            .map_err(h2err(Phase::Write))?;
        let before = self.shared.in_flight.fetch_add(1, Ordering::Relaxed);
        let flight = InFlight(Arc::clone(&self.shared));
        if before >= self.send.current_max_send_streams() {
            stats.stall_streams.fetch_add(1, Ordering::Relaxed);
        }
        let (response, sender) = self
            .send
            .send_request(request, end)
            .inspect_err(|e| stats.note(e))
            .map_err(h2err(Phase::Write))?;
        Ok((
            H2PendingResponse {
                response,
                stats: Arc::clone(&stats),
                read_timeout: self.read_timeout,
                flight,
            },
            H2BodySender {
                sender,
                stats,
                sent_any: false,
                counted: false,
            },
        ))
    }

    /// The load generator's round trip: send, read the head, skip the body; the status.
    pub async fn round_trip(&mut self, request: Request<()>, body: Bytes) -> Result<u16, Error> {
        let mut response = self.send(request, body).await?;
        response.skip_body().await?;
        Ok(response.status.as_u16())
    }
}

/// The body of a request on an HTTP/2 stream, sent piece by piece as flow control
/// allows. Dropping it before the end resets the stream (the request is abandoned).
#[derive(Debug)]
pub struct H2BodySender {
    sender: SendStream<Bytes>,
    stats: Arc<H2Stats>,
    sent_any: bool,
    /// A window stall of this body was counted already.
    counted: bool,
}

impl H2BodySender {
    /// Sends `data` as DATA frames, waiting for flow-control window as needed; `end`
    /// ends the body (an empty `data` with `end` just ends it). A wait for window after
    /// the first frame counts as a window stall (the first wait is the stream opening).
    pub async fn send(&mut self, data: Bytes, end: bool) -> Result<(), Error> {
        let stats = Arc::clone(&self.stats);
        self.send_inner(data, end)
            .await
            .inspect_err(|e| stats.note(e))
            .map_err(|source| Error::H2 {
                phase: Phase::Write,
                source,
            })
    }

    async fn send_inner(&mut self, mut body: Bytes, end: bool) -> Result<(), h2::Error> {
        if body.is_empty() {
            if end {
                self.sender.send_data(Bytes::new(), true)?;
            }
            return Ok(());
        }
        self.sender.reserve_capacity(body.len());
        while !body.is_empty() {
            let mut cap = self.sender.capacity();
            if cap == 0 {
                if self.sent_any && !self.counted {
                    self.stats.stall_window.fetch_add(1, Ordering::Relaxed);
                    self.counted = true;
                }
                cap = match std::future::poll_fn(|cx| self.sender.poll_capacity(cx)).await {
                    Some(r) => r?,
                    None => return Err(h2::Error::from(h2::Reason::CANCEL)),
                };
                if cap == 0 {
                    continue;
                }
            }
            let piece = body.split_to(cap.min(body.len()));
            self.sender.send_data(piece, end && body.is_empty())?;
            self.sent_any = true;
            if !body.is_empty() {
                self.sender.reserve_capacity(body.len());
            }
        }
        Ok(())
    }
}

/// A request sent (or being sent) whose response head has not been read yet.
#[derive(Debug)]
pub struct H2PendingResponse {
    response: h2::client::ResponseFuture,
    stats: Arc<H2Stats>,
    read_timeout: Option<Duration>,
    flight: InFlight,
}

impl H2PendingResponse {
    /// Waits for the response head (under the read time-out).
    pub async fn response(self) -> Result<H2Response, Error> {
        let stats = self.stats;
        let response = within(self.read_timeout, Phase::Head, async {
            self.response
                .await
                .inspect_err(|e| stats.note(e))
                .map_err(|source| Error::H2 {
                    phase: Phase::Head,
                    source,
                })
        })
        .await?;
        let (parts, body) = response.into_parts();
        Ok(H2Response {
            status: parts.status,
            headers: parts.headers,
            body,
            stats,
            read_timeout: self.read_timeout,
            _flight: self.flight,
        })
    }
}

async fn within<T>(
    limit: Option<Duration>,
    phase: Phase,
    work: impl Future<Output = Result<T, Error>>,
) -> Result<T, Error> {
    match limit {
        None => work.await,
        Some(after) => tokio::time::timeout(after, work)
            .await
            .unwrap_or(Err(Error::Timeout { phase, after })),
    }
}

/// An HTTP/2 response: the head, and the body still arriving on its stream. Dropping it
/// before the end resets the stream (CANCEL), which frees the stream slot.
#[derive(Debug)]
pub struct H2Response {
    status: StatusCode,
    headers: HeaderMap,
    body: RecvStream,
    stats: Arc<H2Stats>,
    read_timeout: Option<Duration>,
    _flight: InFlight,
}

impl H2Response {
    /// The status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The headers.
    pub fn headers(&self) -> &HeaderMap {
        &self.headers
    }

    /// The body has ended.
    pub fn is_body_done(&self) -> bool {
        self.body.is_end_stream()
    }

    /// The next piece of the body, its flow-control window given back at once.
    pub fn poll_data(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, Error>>> {
        match self.body.poll_data(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Ready(Some(Ok(d))) => {
                let _ = self.body.flow_control().release_capacity(d.len());
                Poll::Ready(Some(Ok(d)))
            }
            Poll::Ready(Some(Err(e))) => {
                self.stats.note(&e);
                Poll::Ready(Some(Err(Error::H2 {
                    phase: Phase::Body,
                    source: e,
                })))
            }
        }
    }

    /// The next piece of the body (under the read time-out); `None` at its end.
    pub async fn data(&mut self) -> Option<Result<Bytes, Error>> {
        let limit = self.read_timeout;
        let next = std::future::poll_fn(|cx| self.poll_data(cx));
        match limit {
            None => next.await,
            Some(after) => {
                tokio::time::timeout(after, next)
                    .await
                    .unwrap_or(Some(Err(Error::Timeout {
                        phase: Phase::Body,
                        after,
                    })))
            }
        }
    }

    /// Reads the rest of the body, or `Ok(None)` once it is over `limit` bytes.
    pub async fn read_body(&mut self, limit: usize) -> Result<Option<Bytes>, Error> {
        let mut all = bytes::BytesMut::new();
        while let Some(d) = self.data().await {
            all.extend_from_slice(&d?);
            if all.len() > limit {
                return Ok(None);
            }
        }
        Ok(Some(all.freeze()))
    }

    /// Reads and drops the rest of the body.
    pub async fn skip_body(&mut self) -> Result<(), Error> {
        while let Some(d) = self.data().await {
            d?;
        }
        Ok(())
    }

    /// The trailer fields, once the body has been read to its end (under the read
    /// time-out); `None` when the response has none.
    pub async fn trailers(&mut self) -> Result<Option<HeaderMap>, Error> {
        within(self.read_timeout, Phase::Body, async {
            std::future::poll_fn(|cx| self.poll_trailers(cx)).await
        })
        .await
    }

    /// [`H2Response::trailers`] for a caller that polls (a body passed on to a server).
    pub fn poll_trailers(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Option<HeaderMap>, Error>> {
        match self.body.poll_trailers(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Ok(t)) => Poll::Ready(Ok(t)),
            Poll::Ready(Err(e)) => {
                self.stats.note(&e);
                Poll::Ready(Err(Error::H2 {
                    phase: Phase::Body,
                    source: e,
                }))
            }
        }
    }
}
