//! One plain HTTP/1.1 client connection as hyper serves it: what its requests share
//! ([`ClientConn`], one per connection, so a request clones nothing shared between
//! threads), its socket as hyper reads and writes it ([`ClientIo`]: a 408 for a request
//! head that came too late, and the one held-back answer below), and its responses as
//! hyper writes them ([`ConnBody`], counted when hyper is done with each).
//!
//! **Header slots.** hyper parses a request head into a fixed number of header slots:
//! 100 by default, on the stack and never initialised; any other number
//! (`max_headers`) is a heap array of that many slots filled in before every parse.
//! serve's head limit is in bytes (`max_header_bytes`), so it needs room for one slot
//! per 8 bytes of the limit (2,048 at the default 16 KiB): filling those slots was the
//! largest single cost of a proxied request (docs/serve.md, "Performance"). So a
//! connection starts with hyper's default slots, and a head with more than 100 header
//! lines — which hyper answers with its own `431` — is served again: the `431` is held
//! back ([`ClientIo::poll_write`] knows it is hyper's own answer, below), the connection
//! taken apart (hyper keeps the unparsed head in its read buffer) and served on by a
//! connection with the full slot count, which parses the same bytes from their start.
//! The client sees what it saw when every connection had the full slot count; the only
//! difference is that the head's time limit starts again once, at the switch.
//!
//! A write is hyper's own answer to a head it could not parse, never a response of the
//! proxy, when (1) hyper's write buffer was empty at its last flush (it flushes the IO
//! only then) and nothing was written since, so the write starts a message; and (2)
//! every request handed to the service had its response written whole by that flush —
//! the service is called before its response is written, and [`ConnBody`] counts a
//! response once hyper drops its body, which it does after it has buffered the body's
//! last bytes. A worker's own `431` is the response of a request the service took, so
//! it never meets (2). When (1) fails (a pipelined head after a response the client has
//! not read yet), the `431` goes out as hyper wrote it.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use hyper::body::{Body, Frame, SizeHint};

use crate::proxy::{Client, ProxyBody};
use crate::state::Shared;
use crate::upstream::Upstreams;

/// hyper's own answer to a request head over its header slots (or its buffer).
const HYPER_431: &[u8] = b"HTTP/1.1 431 ";

/// Written raw, past hyper, when a request head did not arrive in time: the toolkit's one
/// error body (`scalpel_http::error_body`; accept's test checks the two agree).
pub(crate) const HEAD_TIMEOUT: &[u8] = b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\ncontent-length: 71\r\nconnection: close\r\n\r\n{\"error\":\"client_timeout\",\"detail\":\"request head not received in time\"}";

/// What every request of one client connection shares: cloned once per request, and
/// touched by this connection's thread only.
#[derive(Debug)]
pub(crate) struct ClientConn {
    pub(crate) shared: Arc<Shared>,
    /// The data-plane thread's connections to the workers.
    pub(crate) up: Arc<Upstreams>,
    pub(crate) client: Client,
    pub(crate) flags: ConnFlags,
}

/// Set by the connection's task and its requests, read by [`ClientIo`] (and back).
#[derive(Debug, Default)]
pub(crate) struct ConnFlags {
    /// hyper gave up waiting for a request head.
    pub(crate) timed_out: AtomicBool,
    /// A 408 was written for it.
    pub(crate) answered_408: AtomicBool,
    /// Requests handed to the service.
    calls: AtomicU64,
    /// Responses whose body hyper has dropped (all of it buffered or written).
    finished: AtomicU64,
    /// hyper's `431` was held back: the head is to be served again.
    held: AtomicBool,
}

impl ConnFlags {
    /// A request reaches the service (before any of its response is written).
    pub(crate) fn called(&self) {
        self.calls.fetch_add(1, Ordering::Relaxed);
    }

    /// hyper's `431` for a head over the default header slots was held back: the
    /// connection is to be served again from that head with the full slot count.
    pub(crate) fn held(&self) -> bool {
        self.held.load(Ordering::Relaxed)
    }
}

/// A response body that counts, when hyper drops it, as a response hyper is done with.
#[derive(Debug)]
pub(crate) struct ConnBody {
    pub(crate) body: ProxyBody,
    pub(crate) conn: Arc<ClientConn>,
}

impl Drop for ConnBody {
    fn drop(&mut self) {
        self.conn.flags.finished.fetch_add(1, Ordering::Relaxed);
    }
}

impl Body for ConnBody {
    type Data = Bytes;
    type Error = <ProxyBody as Body>::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// A plain client connection as hyper sees it: the socket; whether a request has begun
/// since the last response — so that a connection closed for a slow request head gets
/// a 408 (hyper just closes it), while an idle keep-alive one closes quietly; and the
/// bookkeeping that tells hyper's own `431` from a response (module doc).
#[derive(Debug)]
pub(crate) struct ClientIo {
    stream: tokio::net::TcpStream,
    /// Read before the socket: the head hyper could not parse, served again.
    replay: Bytes,
    mid_request: bool,
    /// Nothing written since hyper's last flush of an empty buffer.
    clean: bool,
    /// Responses hyper was done with at that flush.
    flushed: u64,
    /// This connection may hold back hyper's `431` (not one already served again).
    may_hold: bool,
    /// Holding back: every write and the shutdown are swallowed.
    holding: bool,
    conn: Arc<ClientConn>,
}

impl ClientIo {
    pub(crate) fn new(stream: tokio::net::TcpStream, conn: Arc<ClientConn>) -> Self {
        Self {
            stream,
            replay: Bytes::new(),
            mid_request: false,
            clean: true,
            flushed: 0,
            may_hold: true,
            holding: false,
            conn,
        }
    }

    /// The same connection, to be served again from `unparsed` (the head hyper answered
    /// `431`, and whatever followed it) by a connection with the full header slots; it
    /// holds nothing back any more.
    pub(crate) fn replayed(mut self, unparsed: Bytes) -> Self {
        self.replay = unparsed;
        self.clean = true;
        self.may_hold = false;
        self.holding = false;
        self.conn.flags.held.store(false, Ordering::Relaxed);
        self
    }

    /// Whether the write starting with `first` is hyper's own `431`, to hold back.
    fn hold(&mut self, first: &[u8]) -> bool {
        if !self.holding
            && self.may_hold
            && self.clean
            && first.starts_with(HYPER_431)
            && self.conn.flags.calls.load(Ordering::Relaxed) == self.flushed
        {
            self.holding = true;
            self.conn.flags.held.store(true, Ordering::Relaxed);
        }
        self.holding
    }

    fn wrote(&mut self, r: &Poll<std::io::Result<usize>>) {
        if matches!(r, Poll::Ready(Ok(n)) if *n > 0) {
            self.mid_request = false;
            self.clean = false;
        }
    }
}

impl Drop for ClientIo {
    fn drop(&mut self) {
        let flags = &self.conn.flags;
        if self.mid_request && flags.timed_out.load(Ordering::Relaxed) {
            let _ = self.stream.try_write(HEAD_TIMEOUT);
            flags.answered_408.store(true, Ordering::Relaxed);
        }
    }
}

impl tokio::io::AsyncRead for ClientIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let me = self.get_mut();
        if !me.replay.is_empty() {
            let n = me.replay.len().min(buf.remaining());
            buf.put_slice(&me.replay[..n]);
            me.replay.advance(n);
            me.mid_request = true;
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        let r = Pin::new(&mut me.stream).poll_read(cx, buf);
        if buf.filled().len() > before {
            me.mid_request = true;
        }
        r
    }
}

impl tokio::io::AsyncWrite for ClientIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let me = self.get_mut();
        if me.hold(data) {
            return Poll::Ready(Ok(data.len()));
        }
        let r = Pin::new(&mut me.stream).poll_write(cx, data);
        me.wrote(&r);
        r
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let me = self.get_mut();
        let first = bufs
            .iter()
            .find(|b| !b.is_empty())
            .map_or(&[][..], |b| &b[..]);
        if me.hold(first) {
            return Poll::Ready(Ok(bufs.iter().map(|b| b.len()).sum()));
        }
        let r = Pin::new(&mut me.stream).poll_write_vectored(cx, bufs);
        me.wrote(&r);
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let me = self.get_mut();
        if me.holding {
            return Poll::Ready(Ok(()));
        }
        // hyper flushes its IO only once its own buffer is written whole: from here the
        // next write starts a message.
        me.clean = true;
        me.flushed = me.conn.flags.finished.load(Ordering::Relaxed);
        Pin::new(&mut me.stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let me = self.get_mut();
        if me.holding {
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut me.stream).poll_shutdown(cx)
    }
}
