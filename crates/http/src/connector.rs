//! Ties the layers together, as pingora-core's `connectors/`: TCP (with its time-out and
//! options), then TLS for `https://` (with the peer's verification and ALPN), then the
//! protocol ALPN or the peer's settings chose — an [`H1Conn`] or an [`H2Conn`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::TcpStream;

use crate::error::{Error, Phase};
use crate::h1::H1Conn;
use crate::h2::{H2Conn, H2Driver, H2Stats};
use crate::peer::{HttpVersion, Peer};
use crate::stream::Stream;
use crate::tls::TlsClient;

/// Makes connections to one peer. Built once (address resolved, CA file read, TLS
/// configuration made), then shared: cloning is an `Arc` increment, and
/// [`Connector::connect`] does no per-connection setup beyond the sockets.
#[derive(Debug, Clone)]
pub struct Connector {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    peer: Peer,
    addr: SocketAddr,
    tls: Option<TlsClient>,
    h2_stats: Arc<H2Stats>,
}

/// A connection of either protocol.
#[derive(Debug)]
pub enum Conn {
    /// HTTP/1.1.
    H1(H1Conn),
    /// HTTP/2.
    H2(H2Conn),
}

/// How long the steps of opening a connection took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// The TCP connect.
    pub tcp: Duration,
    /// The TLS handshake, for `https://` (keep it in its own histogram: it is not
    /// request latency).
    pub tls: Option<Duration>,
}

/// A new connection and how long it took to open.
#[derive(Debug)]
pub struct Connected {
    /// The connection.
    pub conn: Conn,
    /// Its opening times.
    pub timing: Timing,
}

impl Connector {
    /// A connector for `peer`: resolves its address (a `--resolve` entry first, then
    /// DNS, once) and builds its TLS configuration. Fails on an unusable CA file, an
    /// empty system trust store, a bad SNI name or an unknown host.
    pub async fn new(peer: Peer) -> Result<Connector, Error> {
        let addr = match peer.resolved() {
            Some(addr) => addr,
            None => tokio::net::lookup_host((peer.host(), peer.port()))
                .await
                .map_err(|source| Error::Resolve {
                    host: peer.host().to_string(),
                    source,
                })?
                .next()
                .ok_or_else(|| Error::Resolve {
                    host: peer.host().to_string(),
                    source: std::io::Error::new(std::io::ErrorKind::NotFound, "no address"),
                })?,
        };
        Self::with_addr(peer, addr)
    }

    /// A connector for `peer` at a known address (no lookup).
    pub fn with_addr(peer: Peer, addr: SocketAddr) -> Result<Connector, Error> {
        let tls = TlsClient::for_peer(&peer)?;
        Ok(Connector {
            inner: Arc::new(Inner {
                peer,
                addr,
                tls,
                h2_stats: Arc::new(H2Stats::default()),
            }),
        })
    }

    /// The peer.
    pub fn peer(&self) -> &Peer {
        &self.inner.peer
    }

    /// The address connections go to.
    pub fn addr(&self) -> SocketAddr {
        self.inner.addr
    }

    /// The HTTP/2 counters of every connection this connector made.
    pub fn h2_stats(&self) -> &Arc<H2Stats> {
        &self.inner.h2_stats
    }

    /// Opens the transport: TCP, then TLS for `https://`. Each step has the peer's
    /// connect time-out.
    pub async fn connect_stream(&self) -> Result<(Stream, Timing), Error> {
        let limit = self.inner.peer.options().connect_timeout;
        let start = Instant::now();
        let tcp = match tokio::time::timeout(limit, TcpStream::connect(self.inner.addr)).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Err(Error::Connect(e)),
            Err(_) => {
                return Err(Error::Timeout {
                    phase: Phase::Connect,
                    after: limit,
                });
            }
        };
        let _ = tcp.set_nodelay(true);
        let tcp_time = start.elapsed();
        match &self.inner.tls {
            None => Ok((
                Stream::Tcp(tcp),
                Timing {
                    tcp: tcp_time,
                    tls: None,
                },
            )),
            Some(tls) => {
                let (stream, took) = tls.handshake(tcp, limit).await?;
                Ok((
                    Stream::Tls(Box::new(stream)),
                    Timing {
                        tcp: tcp_time,
                        tls: Some(took),
                    },
                ))
            }
        }
    }

    /// Opens a connection and starts the protocol: HTTP/2 when ALPN chose `h2` (or by
    /// prior knowledge over `http://` with [`HttpVersion::Http2`]), else HTTP/1.1.
    pub async fn connect(&self) -> Result<Connected, Error> {
        self.connect_with(H2Driver::Runtime).await
    }

    /// [`Connector::connect`] with an HTTP/2 connection's driver task spawned where
    /// `driver` says.
    pub async fn connect_with(&self, driver: H2Driver) -> Result<Connected, Error> {
        let (stream, timing) = self.connect_stream().await?;
        let opts = self.inner.peer.options();
        let h2 = match &stream {
            Stream::Tls(_) => stream.alpn() == Some(b"h2"),
            Stream::Tcp(_) => opts.version == HttpVersion::Http2,
        };
        let conn = if h2 {
            let limit = opts.connect_timeout;
            let stats = Arc::clone(&self.inner.h2_stats);
            let handshake = H2Conn::handshake_on(stream, opts, stats, driver);
            match tokio::time::timeout(limit, handshake).await {
                Ok(c) => Conn::H2(c?),
                Err(_) => {
                    return Err(Error::Timeout {
                        phase: Phase::Handshake,
                        after: limit,
                    });
                }
            }
        } else {
            Conn::H1(H1Conn::new(stream, opts.max_head_bytes, opts.read_timeout))
        };
        Ok(Connected { conn, timing })
    }
}
