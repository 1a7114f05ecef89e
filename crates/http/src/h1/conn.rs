//! One HTTP/1.1 connection over TCP or TLS: write a request, read its head, read or
//! skip its body, all in the caller's task (no connection task, no channel). The body
//! state lives in the connection, so a proxy can stream it out piece by piece and the
//! load generator can skip it without making a single `Bytes`.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use http::HeaderMap;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::wire::{self, ChunkedDecoder, Expect, Framing, HeadInfo, ResponseHead};
use crate::error::{Error, Phase};
use crate::stream::Stream;

/// Free space kept in the read buffer before each read.
const READ_RESERVE: usize = 16 * 1024;

/// Writes `len` as a chunk-size line (`1a2b\r\n`) into `out`; returns its length.
fn chunk_size_line(len: usize, out: &mut [u8; 18]) -> usize {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let digits = (usize::BITS - len.leading_zeros()).div_ceil(4).max(1) as usize;
    for i in 0..digits {
        out[digits - 1 - i] = HEX[(len >> (4 * i)) & 0xf];
    }
    out[digits] = b'\r';
    out[digits + 1] = b'\n';
    digits + 2
}

/// Where the current response body stands.
#[derive(Debug)]
enum Body {
    /// No response in progress, or its body has ended.
    Done,
    Length(u64),
    Chunked(ChunkedDecoder),
    Close,
}

/// An HTTP/1.1 client connection with its reused read buffer.
#[derive(Debug)]
pub struct H1Conn {
    stream: Stream,
    rbuf: BytesMut,
    body: Body,
    /// The last response allows another request on this connection.
    keep_alive: bool,
    max_head_bytes: usize,
    read_timeout: Option<Duration>,
    /// Responses read to their end on this connection.
    completed: u64,
    /// The trailer fields of the last chunked body read with `data`, once it ended
    /// (boxed: rare, and the connection stays small).
    trailers: Option<Box<HeaderMap>>,
    /// Interim (1xx) responses skipped before the last head `read_response` read.
    interim: u32,
    /// The `Trailer` values of the last head `read_response` read.
    declared_trailers: Box<[http::HeaderValue]>,
    /// What a proxy keeps per connection ([`H1Conn::request_buffer`],
    /// [`H1Conn::local_addr`]); boxed on first use so that a connection whose caller
    /// never asks (the load generator) stays small.
    kept: Option<Box<Kept>>,
}

/// Per-connection state only some callers use.
#[derive(Debug, Default)]
struct Kept {
    /// A reused buffer for request heads.
    wbuf: Vec<u8>,
    /// The local address, read once.
    local: Option<SocketAddr>,
}

impl H1Conn {
    /// Wraps a connected stream. `read_timeout` bounds each wait for response bytes
    /// (`None`: the caller's own deadline does); `max_head_bytes` limits a response head.
    pub fn new(stream: Stream, max_head_bytes: usize, read_timeout: Option<Duration>) -> Self {
        Self {
            stream,
            // Twice the reserve: a read buffer emptied by each response is then moved back
            // to its start once every many responses, not before every read.
            rbuf: BytesMut::with_capacity(2 * READ_RESERVE),
            body: Body::Done,
            keep_alive: true,
            max_head_bytes,
            read_timeout,
            completed: 0,
            trailers: None,
            interim: 0,
            declared_trailers: Box::default(),
            kept: None,
        }
    }

    /// The connection's local address (its port names it in `/proc/net/tcp`): one
    /// system call the first time, then remembered.
    pub fn local_addr(&mut self) -> io::Result<SocketAddr> {
        let kept = self.kept.get_or_insert_default();
        if let Some(a) = kept.local {
            return Ok(a);
        }
        let a = self.stream.tcp().local_addr()?;
        kept.local = Some(a);
        Ok(a)
    }

    /// This connection's own buffer for the next request, cleared: encode a head (and a
    /// small body, to go out in the same write) into it, then send it with
    /// [`H1Conn::write_buffered_observed`]. Reused from request to request, so a proxy
    /// allocates nothing per request for its heads.
    pub fn request_buffer(&mut self) -> &mut Vec<u8> {
        let wbuf = &mut self.kept.get_or_insert_default().wbuf;
        wbuf.clear();
        wbuf
    }

    /// Writes what [`H1Conn::request_buffer`] holds, then `body` (`&[]` when the buffer
    /// holds all of it), as [`H1Conn::write_request_observed`] does.
    pub async fn write_buffered_observed(
        &mut self,
        body: &[u8],
        written: impl FnMut(usize),
    ) -> Result<(), Error> {
        let head = self
            .kept
            .as_mut()
            .map(|k| std::mem::take(&mut k.wbuf))
            .unwrap_or_default();
        let r = self.write_request_observed(&head, body, written).await;
        if let Some(k) = self.kept.as_mut() {
            k.wbuf = head;
        }
        r
    }

    /// The transport.
    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    /// How many responses this connection has carried to their end.
    pub fn completed(&self) -> u64 {
        self.completed
    }

    /// May another request go out on this connection? The last body has ended, the
    /// upstream keeps the connection alive, and it sent nothing past the response.
    pub fn is_reusable(&self) -> bool {
        matches!(self.body, Body::Done) && self.keep_alive && self.rbuf.is_empty()
    }

    /// For an idle connection taken from a pool: did the peer close it meanwhile (its
    /// keep-alive time-out) or send stray bytes? From the event loop's readiness: no
    /// system call while the connection is quiet.
    pub fn is_closed(&mut self) -> bool {
        !self.is_reusable() || self.stream.is_idle_closed()
    }

    /// Writes a whole request (head and body, already encoded). When not one byte
    /// could be written the error is [`Error::NotSent`]: the upstream never saw it.
    pub async fn write_request(&mut self, head: &[u8], body: &[u8]) -> Result<(), Error> {
        self.write_request_observed(head, body, |_| {}).await
    }

    /// [`H1Conn::write_request`], calling `written(n)` as each `n` bytes are handed to
    /// the kernel: a proxy that must never resend a request its upstream may have taken
    /// records how far it got, somewhere that outlives this future (a caller that gives
    /// up on the exchange drops it mid-write).
    pub async fn write_request_observed(
        &mut self,
        head: &[u8],
        body: &[u8],
        mut written: impl FnMut(usize),
    ) -> Result<(), Error> {
        debug_assert!(
            matches!(self.body, Body::Done),
            "a response body is still unread"
        );
        // Until a response head says otherwise, a connection with a request in flight is
        // not reusable: any error from here on leaves it so.
        self.keep_alive = false;
        let first = if head.is_empty() { body } else { head };
        let n = match self.stream.write(first).await {
            Ok(0) => return Err(Error::NotSent(io::ErrorKind::WriteZero.into())),
            Ok(n) => n,
            Err(e) => return Err(Error::NotSent(e)),
        };
        written(n);
        if n == first.len() && (head.is_empty() || body.is_empty()) && self.stream.is_tcp() {
            return Ok(()); // all of it in one write, and plain TCP has nothing to flush
        }
        let rest = async {
            self.stream.write_all(&first[n..]).await?;
            written(first.len() - n);
            if !head.is_empty() && !body.is_empty() {
                self.stream.write_all(body).await?;
                written(body.len());
            }
            self.stream.flush().await
        };
        rest.await.map_err(|e| Error::io(Phase::Write, e))
    }

    /// Writes a piece of a request body whose head (without body) went out with
    /// [`H1Conn::write_request`]: as it is (`chunked: false`, the head declared a
    /// `Content-Length`) or as one chunk (`chunked: true`, the head declared
    /// `Transfer-Encoding: chunked`). For a proxy that streams its client's body on.
    /// An empty piece writes nothing (an empty chunk would end the body).
    pub async fn write_body(&mut self, data: &[u8], chunked: bool) -> Result<(), Error> {
        if data.is_empty() {
            return Ok(());
        }
        let io = |e| Error::io(Phase::Write, e);
        if chunked {
            let mut size = [0u8; 18];
            let n = chunk_size_line(data.len(), &mut size);
            self.stream.write_all(&size[..n]).await.map_err(io)?;
            self.stream.write_all(data).await.map_err(io)?;
            self.stream.write_all(b"\r\n").await.map_err(io)
        } else {
            self.stream.write_all(data).await.map_err(io)
        }
    }

    /// Ends a body written with [`H1Conn::write_body`] (the last chunk for a chunked one)
    /// and flushes the request out.
    pub async fn finish_body(&mut self, chunked: bool) -> Result<(), Error> {
        let io = |e| Error::io(Phase::Write, e);
        if chunked {
            self.stream.write_all(b"0\r\n\r\n").await.map_err(io)?;
        }
        self.stream.flush().await.map_err(io)
    }

    /// Interim (1xx) responses (103 Early Hints…) skipped before the last head that
    /// [`H1Conn::read_response`] read: a proxy that cannot pass them on counts them.
    pub fn interim_responses(&self) -> u32 {
        self.interim
    }

    /// The values of the `Trailer` header of the last head [`H1Conn::read_response`]
    /// read (left out of its header map, being on the hop-by-hop list): a proxy that
    /// passes trailers on declares them to its own client with these.
    pub fn declared_trailers(&self) -> &[http::HeaderValue] {
        &self.declared_trailers
    }

    /// The trailer fields of the last chunked body read through [`H1Conn::data`] (or
    /// `poll_data`, `read_body`), once it has ended; `None` when it had none.
    pub fn take_trailers(&mut self) -> Option<HeaderMap> {
        self.trailers.take().map(|t| *t)
    }

    /// Reads the response head with its header map (hop-by-hop headers left out), for a
    /// proxy; the body is then read with [`H1Conn::data`] or [`H1Conn::read_body`].
    pub async fn read_response(&mut self, expect: Expect) -> Result<ResponseHead, Error> {
        self.read_response_observed(expect, || {}).await
    }

    /// [`H1Conn::read_response`], calling `received()` whenever bytes arrive before the
    /// head is complete: the first call means the upstream took the request (it began to
    /// answer), which a proxy that never resends a taken request must know even when it
    /// gives up on the exchange (dropping this future) before the head is whole.
    pub async fn read_response_observed(
        &mut self,
        expect: Expect,
        mut received: impl FnMut(),
    ) -> Result<ResponseHead, Error> {
        let expect = self.expect(expect);
        loop {
            if !self.rbuf.is_empty()
                && let Some((head, interim, declared)) =
                    wire::parse_response_counted(&mut self.rbuf, &expect)?
            {
                self.interim = interim;
                self.declared_trailers = declared.into_boxed_slice();
                self.start_body(head.framing, head.keep_alive);
                return Ok(head);
            }
            self.fill(Phase::Head).await?;
            received();
        }
    }

    /// Reads the response head without building a header map: status and framing only.
    pub async fn read_head(&mut self, expect: Expect) -> Result<HeadInfo, Error> {
        let expect = self.expect(expect);
        loop {
            if !self.rbuf.is_empty()
                && let Some(info) = wire::parse_head(&self.rbuf, &expect)?
            {
                self.rbuf.advance(info.len);
                self.start_body(info.framing, info.keep_alive);
                return Ok(info);
            }
            self.fill(Phase::Head).await?;
        }
    }

    /// The load generator's round trip: writes `request` (head and body, pre-encoded),
    /// reads the head, skips the body. Returns the status and whether the connection can
    /// carry the next request.
    pub async fn round_trip(&mut self, request: &[u8], head: bool) -> Result<(u16, bool), Error> {
        self.write_request(request, &[]).await?;
        let info = self
            .read_head(Expect {
                head,
                ..Expect::default()
            })
            .await?;
        self.skip_body().await?;
        Ok((info.status, self.is_reusable()))
    }

    /// Reads and drops the rest of the body.
    pub async fn skip_body(&mut self) -> Result<(), Error> {
        loop {
            match &mut self.body {
                Body::Done => return Ok(()),
                Body::Length(left) => {
                    let n = (self.rbuf.len() as u64).min(*left);
                    self.rbuf.advance(n as usize);
                    *left -= n;
                    if *left == 0 {
                        self.end_body();
                        return Ok(());
                    }
                }
                Body::Chunked(dec) => {
                    dec.skip(&mut self.rbuf)?;
                    if dec.is_done() {
                        self.end_body();
                        return Ok(());
                    }
                }
                Body::Close => self.rbuf.clear(),
            }
            if self.fill(Phase::Body).await? == 0 {
                // only a close-delimited body ends here; `fill` reports the others
                self.end_body();
                return Ok(());
            }
        }
    }

    /// The next piece of the body; `None` at its end.
    pub async fn data(&mut self) -> Option<Result<Bytes, Error>> {
        std::future::poll_fn(|cx| self.poll_data(cx)).await
    }

    /// Reads the rest of the body, or `Ok(None)` once it is over `limit` bytes (the rest
    /// stays unread: drop the connection, or keep streaming with [`H1Conn::data`]).
    pub async fn read_body(&mut self, limit: usize) -> Result<Option<Bytes>, Error> {
        if self.remaining().is_some_and(|n| n > limit as u64) {
            return Ok(None);
        }
        let mut all = BytesMut::new();
        while let Some(d) = self.data().await {
            let d = d?;
            if all.is_empty() && self.is_body_done() {
                return Ok((d.len() <= limit).then_some(d)); // one piece: no copy
            }
            all.extend_from_slice(&d);
            if all.len() > limit {
                return Ok(None);
            }
        }
        Ok(Some(all.freeze()))
    }

    /// The body has been read to its end (or there was none).
    pub fn is_body_done(&self) -> bool {
        matches!(self.body, Body::Done)
    }

    /// The declared length still to come, when the upstream declared one.
    pub fn remaining(&self) -> Option<u64> {
        match self.body {
            Body::Length(n) => Some(n),
            Body::Done => Some(0),
            _ => None,
        }
    }

    /// Everything of the body that has arrived already, without waiting.
    pub fn take_buffered(&mut self) -> Result<Bytes, Error> {
        let mut all: Option<BytesMut> = None;
        let mut first = None;
        while let Some(d) = self.next_buffered()? {
            match (&mut first, &mut all) {
                (None, _) => first = Some(d),
                (Some(f), None) => {
                    let mut b = BytesMut::from(&f[..]);
                    b.extend_from_slice(&d);
                    all = Some(b);
                }
                (Some(_), Some(b)) => b.extend_from_slice(&d),
            }
        }
        Ok(match all {
            Some(b) => b.freeze(),
            None => first.unwrap_or_default(),
        })
    }

    /// After a `101 Switching Protocols`: the transport, and the bytes of the new
    /// protocol that arrived with the 101.
    pub fn into_upgraded(self) -> (Stream, Bytes) {
        (self.stream, self.rbuf.freeze())
    }

    /// The next piece of the body, reading from the connection as needed.
    pub fn poll_data(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, Error>>> {
        loop {
            match self.next_buffered() {
                Ok(Some(d)) => return Poll::Ready(Some(Ok(d))),
                Ok(None) if self.is_body_done() => return Poll::Ready(None),
                Ok(None) => {}
                Err(e) => return Poll::Ready(Some(Err(e))),
            }
            self.rbuf.reserve(READ_RESERVE);
            let read = {
                let fut = pin!(self.stream.read_buf(&mut self.rbuf));
                fut.poll(cx)
            };
            match read {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok(0)) if matches!(self.body, Body::Close) => {
                    self.end_body();
                    return Poll::Ready(None);
                }
                Poll::Ready(Ok(0)) => {
                    self.keep_alive = false;
                    return Poll::Ready(Some(Err(Error::Closed { phase: Phase::Body })));
                }
                Poll::Ready(Ok(_)) => {}
                Poll::Ready(Err(e)) => {
                    self.keep_alive = false;
                    return Poll::Ready(Some(Err(Error::io(Phase::Body, e))));
                }
            }
        }
    }

    /// The next piece of body from what has been read already, consumed.
    fn next_buffered(&mut self) -> Result<Option<Bytes>, Error> {
        let data = match &mut self.body {
            Body::Done => None,
            Body::Length(_) | Body::Close if self.rbuf.is_empty() => None,
            Body::Length(left) => {
                let n = (self.rbuf.len() as u64).min(*left) as usize;
                *left -= n as u64;
                let d = self.rbuf.split_to(n).freeze();
                if *left == 0 {
                    self.end_body();
                }
                Some(d)
            }
            Body::Chunked(dec) => {
                let d = dec
                    .decode(&mut self.rbuf)
                    .inspect_err(|_| self.keep_alive = false)?;
                if dec.is_done() {
                    self.trailers = dec.take_trailers().map(Box::new);
                    self.end_body();
                }
                d
            }
            Body::Close => Some(self.rbuf.split().freeze()),
        };
        Ok(data)
    }

    fn expect(&self, mut expect: Expect) -> Expect {
        expect.max_head_bytes = self.max_head_bytes;
        expect
    }

    fn start_body(&mut self, framing: Framing, keep_alive: bool) {
        self.keep_alive = keep_alive;
        self.trailers = None;
        self.body = match framing {
            Framing::Empty | Framing::Length(0) => Body::Done,
            Framing::Length(n) => Body::Length(n),
            Framing::Chunked => Body::Chunked(ChunkedDecoder::new()),
            Framing::Close => Body::Close,
        };
        if matches!(self.body, Body::Done) {
            self.completed += 1;
        }
    }

    fn end_body(&mut self) {
        if matches!(self.body, Body::Close) {
            self.keep_alive = false;
        }
        self.body = Body::Done;
        self.completed += 1;
    }

    /// Reads more bytes into the buffer (under the read time-out); 0 only for a
    /// close-delimited body's end — end of stream anywhere else is an error.
    async fn fill(&mut self, phase: Phase) -> Result<usize, Error> {
        self.rbuf.reserve(READ_RESERVE);
        let read = self.stream.read_buf(&mut self.rbuf);
        let n = match self.read_timeout {
            None => read.await,
            Some(limit) => match tokio::time::timeout(limit, read).await {
                Ok(r) => r,
                Err(_) => {
                    self.keep_alive = false;
                    return Err(Error::Timeout {
                        phase,
                        after: limit,
                    });
                }
            },
        };
        match n {
            Ok(0) if phase == Phase::Body && matches!(self.body, Body::Close) => Ok(0),
            Ok(0) => {
                self.keep_alive = false;
                Err(Error::Closed { phase })
            }
            Ok(n) => Ok(n),
            Err(e) => {
                self.keep_alive = false;
                Err(Error::io(phase, e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::chunk_size_line;

    #[test]
    fn chunk_size_lines_are_lower_hex_without_leading_zeros() {
        let mut out = [0u8; 18];
        for (len, line) in [
            (1usize, "1\r\n"),
            (15, "f\r\n"),
            (16, "10\r\n"),
            (0x1a2b, "1a2b\r\n"),
            (usize::MAX, "ffffffffffffffff\r\n"),
        ] {
            let n = chunk_size_line(len, &mut out);
            assert_eq!(std::str::from_utf8(&out[..n]).unwrap(), line);
        }
    }
}
