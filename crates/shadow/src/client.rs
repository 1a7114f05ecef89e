//! Upstreams and how the shadow tools talk to them: through `scalpel-http`, the toolkit's
//! one connector (TCP or TLS, HTTP/1.1 or HTTP/2, settings per upstream).
//!
//! Two ways of sending:
//! - [`Client::exchange`], buffered: the whole answer within a size limit (and the
//!   mirror byte budget) — mirrors and replay;
//! - [`Client::forward`], streamed: the client's body is sent on as it arrives and the
//!   answer comes back as an [`UpstreamBody`] that a hyper server streams to the client —
//!   the proxy's primary.
//!
//! Which connection a request goes out on is `scalpel-http`'s session layer
//! ([`Sessions`]): HTTP/1.1 connections kept in a pool; an HTTP/2 upstream gets one
//! connection, shared by every request in flight, replaced when it ends (once, however
//! many requests find it ended). A request that failed on a pooled HTTP/1.1 connection
//! before one byte left (the upstream had closed it) is sent again on a new one, whatever
//! its method; that is all shadow resends.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use http::header::{CONTENT_LENGTH, HOST, PROXY_AUTHORIZATION, TE, TRAILER};
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use scalpel_http::h1::{self, Expect, H1Conn, RequestWriter};
use scalpel_http::{
    Conn, Connector, ErrorKind, H2Conn, H2Response, HttpVersion, Peer, PeerOptions, Resend, Scheme,
    Session, Sessions,
};

use crate::ShadowError;
use crate::budget::{Budget, Charge};
use crate::model::{ShadowRequest, ShadowResponse};

/// A service to send requests to: `http[s]://host[:port][/prefix]`, with the settings that
/// travel with it (TLS trust, `--resolve`, HTTP version; see [`scalpel_http::PeerOptions`]).
/// Time-outs are the run's (mirror, primary, replay time-outs), set when it starts.
#[derive(Debug, Clone)]
pub struct Upstream {
    peer: Peer,
}

impl Upstream {
    /// Parses `http://` or `https://host[:port][/prefix]` with default settings (HTTP/1.1,
    /// the system's trust store).
    pub fn parse(url: &str) -> Result<Self, ShadowError> {
        let peer = Peer::parse(url).map_err(|e| ShadowError::Url {
            url: url.to_string(),
            reason: e
                .to_string()
                .rsplit_once("`: ")
                .map_or_else(|| e.to_string(), |(_, why)| why.to_string()),
        })?;
        Ok(Self { peer })
    }

    /// The same upstream with these settings.
    pub fn with_options(mut self, options: PeerOptions) -> Self {
        self.peer = self.peer.with_options(options);
        self
    }

    /// The settings.
    pub fn options(&self) -> &PeerOptions {
        self.peer.options()
    }

    /// The URL and what a reader of a report must know about how it was reached: the
    /// protocol asked for, and `certificate NOT verified` under `--insecure`.
    pub fn describe(&self) -> String {
        let o = self.peer.options();
        let mut notes = Vec::new();
        match (o.version, self.peer.scheme()) {
            (HttpVersion::Http2, Scheme::Https) => notes.push("h2"),
            (HttpVersion::Http2, Scheme::Http) => notes.push("h2c"),
            (HttpVersion::Auto, Scheme::Https) => notes.push("h2 or http/1.1 by ALPN"),
            _ => {}
        }
        if o.insecure && self.peer.is_tls() {
            notes.push("certificate NOT verified (--insecure)");
        }
        if notes.is_empty() {
            self.to_string()
        } else {
            format!("{self} ({})", notes.join(", "))
        }
    }

    /// The peer, with `connect` as its connect and TLS handshake time-out and `read` as
    /// its wait for each piece of an answer (`None`: the caller's own deadline).
    fn peer_with(&self, connect: Duration, read: Option<Duration>) -> Peer {
        let mut peer = self.peer.clone();
        let o = peer.options_mut();
        o.connect_timeout = connect;
        o.read_timeout = read;
        peer
    }
}

impl std::fmt::Display for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.peer.base_url())
    }
}

/// A copy of `headers` for an upstream: without hop-by-hop headers (the toolkit's one
/// list, `scalpel_http`, with what `Connection` names), without `Host`, which the client
/// sets per upstream, and without `Proxy-Authorization`: credentials meant for a proxy
/// are never handed to the services behind it, least of all to a candidate.
pub(crate) fn forwardable(headers: &HeaderMap) -> HeaderMap {
    let mut out = scalpel_http::forwardable(headers);
    out.remove(HOST);
    out.remove(PROXY_AUTHORIZATION);
    out
}

/// Removes hop-by-hop headers from a response head in place (the toolkit's one list,
/// with what `Connection` names), except `Trailer`: it is end to end (RFC 9110 §6.6.2,
/// not among §7.6.1's hop-by-hop fields), and hyper's server sends a client the
/// trailers it asked for only when the head declares them.
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let trailer: Vec<_> = headers.get_all(TRAILER).iter().cloned().collect();
    scalpel_http::strip_hop_by_hop(headers);
    for v in trailer {
        headers.append(TRAILER, v);
    }
}

/// Whether a client's `TE` accepts trailers.
pub(crate) fn accepts_trailers(headers: &HeaderMap) -> bool {
    headers
        .get_all(TE)
        .iter()
        .flat_map(|v| v.as_bytes().split(|b| *b == b','))
        .any(|t| {
            let t = t.trim_ascii();
            t.eq_ignore_ascii_case(b"trailers")
        })
}

/// What a check of an upstream found before any traffic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reach {
    /// A connection was opened; the protocol it speaks (`h2`, `http/1.1`).
    Ok(&'static str),
    /// No connection could be opened (refused, time-out): the run goes on and counts
    /// the failures by kind, as it would if the upstream went away later.
    Unreachable(String),
}

/// Connections to one upstream: `scalpel-http`'s sessions with its peer (the connector,
/// an HTTP/1.1 pool and the shared HTTP/2 connection; a request whose write found a
/// pooled connection closed before one byte left is written again on a new one).
#[derive(Debug)]
pub(crate) struct Client {
    sessions: Sessions,
}

/// Shadow's resend policy: HTTP/1.1 requests the upstream never took, whatever their
/// method; nothing on HTTP/2 (a streamed body is consumed as it is sent).
const RESEND: Resend = Resend {
    unsent_on_reused: true,
    refused_h2: false,
};

/// Why a buffered exchange gave no response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ExchangeError {
    /// The side failed.
    Failed(ErrorKind),
    /// The mirror byte budget could not hold the body: not the side's fault.
    OverBudget,
}

impl From<scalpel_http::Error> for ExchangeError {
    fn from(e: scalpel_http::Error) -> Self {
        ExchangeError::Failed(e.kind())
    }
}

/// Why a forwarded request got no response head.
#[derive(Debug)]
pub(crate) enum ForwardError {
    /// The upstream failed.
    Upstream(scalpel_http::Error),
    /// The client's body could not be read (it went away, or sent a broken body).
    ClientBody(hyper::Error),
    /// The request cannot be expressed for this upstream (a target HTTP/2 refuses).
    BadRequest(String),
}

/// The body sent with a forwarded request.
pub(crate) enum OutBody {
    /// Read whole already (buffered for mirroring or capture).
    Full(Bytes),
    /// Still arriving from the client: `prefix` (read already), then the rest.
    Stream {
        prefix: Option<Bytes>,
        rest: Incoming,
    },
}

impl OutBody {
    /// Its length, when known before it is sent (else it goes chunked on HTTP/1.1).
    fn length(&self) -> Option<u64> {
        match self {
            OutBody::Full(b) => Some(b.len() as u64),
            OutBody::Stream { prefix, rest } => {
                let before = prefix.as_ref().map_or(0, |p| p.len() as u64);
                rest.size_hint().exact().map(|n| before + n)
            }
        }
    }
}

/// The head of a forwarded request's answer and its body, still on the connection.
pub(crate) struct Forwarded {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: UpstreamBody,
    /// Interim (1xx) answers skipped before the head (hyper's server cannot pass them on).
    pub(crate) interim: u32,
}

/// A request's head and the part of its body that goes out with it on HTTP/1.1.
#[derive(Clone, Copy)]
struct H1Request<'a> {
    method: &'a Method,
    pq: &'a str,
    headers: &'a HeaderMap,
    /// The body's length (`None`: chunked).
    length: Option<u64>,
    te_trailers: bool,
    /// Written with the head (a whole body), or nothing (a body streamed after it).
    body: &'a [u8],
}

impl Client {
    /// A client for `up`: resolves its address and builds its TLS configuration (an
    /// unusable CA file or an unknown host fails here). `connect` bounds the TCP connect
    /// and the TLS handshake; `read` each wait for the answer (`None`: the caller's own
    /// deadline).
    pub(crate) async fn new(
        up: &Upstream,
        connect: Duration,
        read: Option<Duration>,
        max_idle: usize,
    ) -> Result<Arc<Client>, scalpel_http::Error> {
        let connector = Connector::new(up.peer_with(connect, read)).await?;
        Ok(Arc::new(Client {
            sessions: Sessions::new(connector, max_idle, RESEND),
        }))
    }

    /// Opens one connection, to find before any traffic what would otherwise fail every
    /// request: a certificate that does not verify or is for another name, a server that
    /// refuses h2 when it is required. Over `http://` with HTTP/2 (prior knowledge, no
    /// ALPN to ask) one PING is sent, since only an answer shows the server speaks h2c —
    /// never a request: the upstream sees only the requests the tool counts. The
    /// connection is closed again (it may have been opened on another runtime than the one
    /// that will use the client).
    pub(crate) async fn check(&self, role: &'static str) -> Result<Reach, ShadowError> {
        let url = self.peer().base_url();
        let setting = |error| ShadowError::Upstream {
            role,
            url: url.clone(),
            error,
        };
        match self.sessions.connector().connect().await {
            Ok(c) => match c.conn {
                Conn::H1(_) => Ok(Reach::Ok("http/1.1")),
                Conn::H2(conn) if self.peer().is_tls() => {
                    drop(conn);
                    Ok(Reach::Ok("h2"))
                }
                Conn::H2(conn) => {
                    let limit = self.peer().options().connect_timeout;
                    match tokio::time::timeout(limit, conn.ping()).await {
                        Ok(Ok(())) => Ok(Reach::Ok("h2c")),
                        Ok(Err(e)) => Err(ShadowError::NoH2c {
                            role,
                            url,
                            detail: e.to_string(),
                        }),
                        Err(_) => Ok(Reach::Unreachable(format!(
                            "no answer to an h2c PING within {limit:?}"
                        ))),
                    }
                }
            },
            Err(e) if bad_setting(&e) => Err(setting(e)),
            Err(e) => Ok(Reach::Unreachable(e.to_string())),
        }
    }

    fn peer(&self) -> &Peer {
        self.sessions.connector().peer()
    }

    /// A connection for the next request (the shared HTTP/2 one, or an HTTP/1.1 one with
    /// `req`'s head, and its body when whole, written).
    async fn start(&self, req: H1Request<'_>) -> Result<Session, scalpel_http::Error> {
        let write = |mut conn: H1Conn| async move {
            self.h1_head(conn.request_buffer(), req);
            let written = conn.write_buffered_observed(req.body, |_| {}).await;
            (conn, written)
        };
        self.sessions.start(write).await
    }

    /// The request head for HTTP/1.1, into `out`: request line, `Host` of this upstream,
    /// the client's end-to-end headers, and the body's framing.
    fn h1_head(&self, out: &mut Vec<u8>, req: H1Request<'_>) {
        let peer = self.peer();
        let method = req.method.as_str();
        let mut w = RequestWriter::new(out, method, peer.prefix(), req.pq);
        w.header(b"Host", peer.authority().as_bytes());
        w.forward(req.headers);
        if req.te_trailers {
            w.header(b"TE", b"trailers");
        }
        w.body_length(method.as_bytes(), req.length);
        w.finish();
    }

    /// The request for HTTP/2: absolute URI (its `:authority` is this upstream), the
    /// client's end-to-end headers. `Content-Length` is left to the frames.
    fn h2_request(
        &self,
        method: &Method,
        pq: &str,
        headers: &HeaderMap,
    ) -> Result<Request<()>, String> {
        let uri = self
            .peer()
            .uri(pq)
            .map_err(|e| format!("bad request target {pq:?}: {e}"))?;
        let mut req = Request::new(());
        *req.method_mut() = method.clone();
        *req.uri_mut() = uri;
        *req.headers_mut() = headers.clone();
        req.headers_mut().remove(CONTENT_LENGTH);
        Ok(req)
    }

    /// Sends `req` and reads the whole response, all within `timeout`. With a `budget`,
    /// every body byte read is charged to it first (the charge travels with the response).
    pub(crate) async fn exchange(
        &self,
        req: &ShadowRequest,
        timeout: Duration,
        max_body: usize,
        budget: Option<&Arc<Budget>>,
    ) -> Result<ShadowResponse, ExchangeError> {
        let start = Instant::now();
        let headers = &forwardable(&req.headers);
        let work = async {
            let first = H1Request {
                method: &req.method,
                pq: &req.path_and_query,
                headers,
                length: Some(req.body.len() as u64),
                te_trailers: false,
                body: &req.body,
            };
            let (status, headers, body, charge) = match self.start(first).await? {
                Session::H1(conn, _) => self.exchange_h1(conn, req, max_body, budget).await?,
                Session::H2(conn) => {
                    self.exchange_h2(conn, req, headers, max_body, budget)
                        .await?
                }
            };
            Ok(ShadowResponse {
                status,
                headers,
                body,
                latency: start.elapsed(),
                charge,
            })
        };
        tokio::time::timeout(timeout, work)
            .await
            .unwrap_or(Err(ExchangeError::Failed(ErrorKind::Timeout)))
    }

    /// The answer to a request written on `conn`, read whole.
    async fn exchange_h1(
        &self,
        mut conn: H1Conn,
        req: &ShadowRequest,
        max_body: usize,
        budget: Option<&Arc<Budget>>,
    ) -> Result<Buffered, ExchangeError> {
        let resp = conn
            .read_response(Expect {
                head: req.method == Method::HEAD,
                ..Expect::default()
            })
            .await?;
        let mut buf = Collect::new(max_body, budget);
        while let Some(piece) = conn.data().await {
            buf.push(&piece?)?;
        }
        let (body, charge) = buf.finish();
        self.sessions.release(conn);
        Ok((resp.status, resp.headers, body, charge))
    }

    async fn exchange_h2(
        &self,
        mut conn: H2Conn,
        req: &ShadowRequest,
        headers: &HeaderMap,
        max_body: usize,
        budget: Option<&Arc<Budget>>,
    ) -> Result<Buffered, ExchangeError> {
        let request = self
            .h2_request(&req.method, &req.path_and_query, headers)
            .map_err(|_| ExchangeError::Failed(ErrorKind::Protocol))?;
        let mut resp = conn.send(request, req.body.clone()).await?;
        let mut buf = Collect::new(max_body, budget);
        while let Some(piece) = resp.data().await {
            buf.push(&piece?)?;
        }
        let (body, charge) = buf.finish();
        Ok((resp.status(), resp.headers().clone(), body, charge))
    }

    /// Sends a client's request on and returns the answer's head with its body still to
    /// come. `te_trailers`: the client accepts trailers, so the upstream is told this
    /// hop does too. The caller bounds the whole call with its time-out.
    pub(crate) async fn forward(
        self: &Arc<Self>,
        method: &Method,
        pq: &str,
        headers: &HeaderMap,
        te_trailers: bool,
        body: OutBody,
    ) -> Result<Forwarded, ForwardError> {
        let length = body.length();
        let first = H1Request {
            method,
            pq,
            headers,
            length,
            te_trailers,
            body: match &body {
                OutBody::Full(b) => b,
                OutBody::Stream { .. } => &[],
            },
        };
        match self.start(first).await.map_err(ForwardError::Upstream)? {
            Session::H1(conn, _) => self.forward_h1(conn, method, length.is_none(), body).await,
            Session::H2(conn) => self.forward_h2(conn, method, pq, headers, body).await,
        }
    }

    /// The rest of a request whose head went out on `conn` (a streamed body; a whole one
    /// went with the head), and the answer's head.
    async fn forward_h1(
        self: &Arc<Self>,
        mut conn: H1Conn,
        method: &Method,
        chunked: bool,
        body: OutBody,
    ) -> Result<Forwarded, ForwardError> {
        let up = ForwardError::Upstream;
        if let OutBody::Stream { prefix, mut rest } = body {
            if let Some(p) = prefix {
                conn.write_body(&p, chunked).await.map_err(up)?;
            }
            while let Some(frame) = rest.frame().await {
                let frame = frame.map_err(ForwardError::ClientBody)?;
                if let Some(data) = frame.data_ref() {
                    conn.write_body(data, chunked).await.map_err(up)?;
                }
            }
            conn.finish_body(chunked).await.map_err(up)?;
        }
        let resp = conn
            .read_response(Expect {
                head: method == Method::HEAD,
                ..Expect::default()
            })
            .await
            .map_err(up)?;
        let mut headers = resp.headers;
        for v in conn.declared_trailers() {
            headers.append(TRAILER, v.clone());
        }
        let interim = conn.interim_responses();
        Ok(Forwarded {
            status: resp.status,
            headers,
            interim,
            body: UpstreamBody::H1 {
                conn: Some(conn),
                client: Arc::clone(self),
                chunked: resp.framing == h1::Framing::Chunked,
                ended: false,
            },
        })
    }

    async fn forward_h2(
        &self,
        mut conn: H2Conn,
        method: &Method,
        pq: &str,
        headers: &HeaderMap,
        body: OutBody,
    ) -> Result<Forwarded, ForwardError> {
        let up = ForwardError::Upstream;
        let request = self
            .h2_request(method, pq, headers)
            .map_err(ForwardError::BadRequest)?;
        let resp = match body {
            OutBody::Full(b) => conn.send(request, b).await.map_err(up)?,
            OutBody::Stream { prefix, mut rest } => {
                let (pending, mut sender) = conn.send_streaming(request).await.map_err(up)?;
                if let Some(p) = prefix {
                    sender.send(p, false).await.map_err(up)?;
                }
                while let Some(frame) = rest.frame().await {
                    let frame = frame.map_err(ForwardError::ClientBody)?;
                    if let Ok(data) = frame.into_data() {
                        sender.send(data, false).await.map_err(up)?;
                    }
                }
                sender.send(Bytes::new(), true).await.map_err(up)?;
                pending.response().await.map_err(up)?
            }
        };
        let headers = resp.headers().clone();
        let remaining = headers
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok());
        Ok(Forwarded {
            status: resp.status(),
            headers,
            interim: 0,
            body: UpstreamBody::H2 {
                resp: Box::new(resp),
                remaining,
                data_done: false,
                finished: false,
            },
        })
    }
}

/// A connection error that no amount of waiting fixes: a setting is wrong (trust, name,
/// protocol), so the run should not start.
fn bad_setting(e: &scalpel_http::Error) -> bool {
    match e {
        scalpel_http::Error::Tls(_) | scalpel_http::Error::Resolve { .. } => true,
        // h2 over `http://` (prior knowledge) to a server that does not speak it.
        scalpel_http::Error::H2 { phase, .. } => *phase == scalpel_http::Phase::Handshake,
        _ => false,
    }
}

type Buffered = (StatusCode, HeaderMap, Bytes, Option<Charge>);

/// A body read whole, within a size limit and (for mirrors) the byte budget.
struct Collect {
    buf: BytesMut,
    max: usize,
    charge: Option<Charge>,
}

impl Collect {
    fn new(max: usize, budget: Option<&Arc<Budget>>) -> Self {
        Self {
            buf: BytesMut::new(),
            max,
            charge: budget.map(|b| b.charge()),
        }
    }

    fn push(&mut self, data: &[u8]) -> Result<(), ExchangeError> {
        if self.buf.len() + data.len() > self.max {
            return Err(ExchangeError::Failed(ErrorKind::TooLarge));
        }
        if let Some(c) = self.charge.as_mut()
            && !c.grow(data.len())
        {
            return Err(ExchangeError::OverBudget);
        }
        self.buf.extend_from_slice(data);
        Ok(())
    }

    fn finish(self) -> (Bytes, Option<Charge>) {
        (self.buf.freeze(), self.charge)
    }
}

/// The body of a forwarded answer, read from the upstream as the client's connection
/// takes it. An HTTP/1.1 connection goes back to the pool once its body has ended.
pub(crate) enum UpstreamBody {
    H1 {
        conn: Option<H1Conn>,
        client: Arc<Client>,
        /// A chunked body may end with trailers: it is polled to its end.
        chunked: bool,
        /// `poll_frame` returned its end.
        ended: bool,
    },
    H2 {
        resp: Box<H2Response>,
        /// Bytes still to come by the answer's `Content-Length`. A server that has
        /// written that many (hyper's HTTP/1 one) stops reading before h2's end of
        /// stream may have arrived: the declared length ends the body.
        remaining: Option<u64>,
        data_done: bool,
        finished: bool,
    },
}

impl UpstreamBody {
    /// Gives a connection whose body has ended back to the pool.
    fn release(conn: &mut Option<H1Conn>, client: &Client) {
        if let Some(c) = conn.take()
            && c.is_body_done()
        {
            client.sessions.release(c);
        }
    }
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = scalpel_http::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, scalpel_http::Error>>> {
        match self.get_mut() {
            UpstreamBody::H1 {
                conn,
                client,
                ended,
                ..
            } => {
                let Some(c) = conn.as_mut() else {
                    *ended = true;
                    return Poll::Ready(None);
                };
                if !c.is_body_done() {
                    match c.poll_data(cx) {
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(Some(Ok(d))) => return Poll::Ready(Some(Ok(Frame::data(d)))),
                        Poll::Ready(Some(Err(e))) => {
                            *conn = None; // broken: never reused
                            return Poll::Ready(Some(Err(e)));
                        }
                        Poll::Ready(None) => {}
                    }
                }
                let trailers = conn.as_mut().and_then(H1Conn::take_trailers);
                UpstreamBody::release(conn, client);
                if trailers.is_none() {
                    *ended = true;
                }
                Poll::Ready(trailers.map(|t| Ok(Frame::trailers(t))))
            }
            UpstreamBody::H2 {
                resp,
                remaining,
                data_done,
                finished,
            } => {
                if *finished {
                    return Poll::Ready(None);
                }
                if !*data_done {
                    match resp.poll_data(cx) {
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(Some(r)) => {
                            match &r {
                                Ok(d) => {
                                    if let Some(n) = remaining.as_mut() {
                                        *n = n.saturating_sub(d.len() as u64);
                                    }
                                }
                                Err(_) => *finished = true,
                            }
                            return Poll::Ready(Some(r.map(Frame::data)));
                        }
                        Poll::Ready(None) => *data_done = true,
                    }
                }
                match resp.poll_trailers(cx) {
                    Poll::Pending => Poll::Pending,
                    Poll::Ready(r) => {
                        *finished = true;
                        Poll::Ready(r.transpose().map(|r| r.map(Frame::trailers)))
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            // Trailers are known only once the body has been read: a chunked body is
            // polled to its end.
            UpstreamBody::H1 {
                conn,
                chunked,
                ended,
                ..
            } => *ended || (!*chunked && conn.as_ref().is_none_or(H1Conn::is_body_done)),
            UpstreamBody::H2 {
                resp,
                finished,
                remaining,
                ..
            } => *finished || resp.is_body_done() || *remaining == Some(0),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            UpstreamBody::H1 { conn: Some(c), .. } => match c.remaining() {
                Some(n) => SizeHint::with_exact(n),
                None => SizeHint::default(),
            },
            UpstreamBody::H1 { conn: None, .. } => SizeHint::with_exact(0),
            UpstreamBody::H2 {
                remaining: Some(n), ..
            } => SizeHint::with_exact(*n),
            UpstreamBody::H2 { .. } => SizeHint::default(),
        }
    }
}

impl Drop for UpstreamBody {
    fn drop(&mut self) {
        // An empty body may never be polled: its connection is still reusable.
        if let UpstreamBody::H1 { conn, client, .. } = self {
            UpstreamBody::release(conn, client);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_rules_keep_trailer_and_drop_what_connection_names() {
        let mut h = HeaderMap::new();
        for (k, v) in [
            ("connection", "x-hop, close"),
            ("x-hop", "1"),
            ("host", "proxy:9000"),
            ("proxy-authorization", "Basic c2VjcmV0"),
            ("te", "trailers"),
            ("trailer", "x-sum"),
            ("x-keep", "1"),
        ] {
            h.append(k, http::HeaderValue::from_static(v));
        }
        let fwd = forwardable(&h);
        let names: Vec<&str> = fwd.keys().map(|k| k.as_str()).collect();
        assert_eq!(names, ["x-keep"]);
        assert!(accepts_trailers(&h));
        strip_hop_by_hop(&mut h);
        assert!(h.contains_key("trailer") && h.contains_key("x-keep"));
        assert!(!h.contains_key("x-hop") && !h.contains_key("connection") && !h.contains_key("te"));
    }

    #[test]
    fn upstreams_parse_http_and_https_with_prefix_and_reject_what_cannot_work() {
        let u = Upstream::parse("http://127.0.0.1:8080/base/").unwrap();
        assert_eq!(u.to_string(), "http://127.0.0.1:8080/base");
        let u = Upstream::parse("https://api.example.test").unwrap();
        assert_eq!(u.to_string(), "https://api.example.test");
        let mut o = PeerOptions::default();
        o.insecure = true;
        o.version = HttpVersion::Http2;
        assert_eq!(
            u.with_options(o).describe(),
            "https://api.example.test (h2, certificate NOT verified (--insecure))"
        );
        for bad in ["ftp://a", "a:1", "http://u:p@a:1", "http://a:1/?q=1", "::"] {
            let e = Upstream::parse(bad).unwrap_err().to_string();
            assert!(e.starts_with(&format!("bad upstream URL `{bad}`: ")), "{e}");
            assert!(!e.contains("bad URL"), "said once: {e}");
        }
    }
}
