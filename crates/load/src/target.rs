//! One service to load: its URL and connection settings, its requests, and the watch on
//! its processes.

use std::sync::Arc;

use scalpel_http::{Connector, HttpVersion, PeerOptions};

use crate::request::{Endpoint, UrlError};
use crate::result::ConnectionInfo;
use crate::source::RequestSource;

/// Resource use of a watched process tree over a segment (from `scalpel-procstat`).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ResourceUsage {
    /// Samples taken; segments are combined weighted by it.
    pub samples: u64,
    /// Mean CPU% (100 = one core) summed over the tree.
    pub cpu_percent_mean: f64,
    /// Peak CPU%.
    pub cpu_percent_peak: f64,
    /// Mean resident set size in bytes, summed over the tree.
    pub rss_bytes_mean: u64,
    /// Peak resident set size in bytes.
    pub rss_bytes_peak: u64,
    /// Mean proportional set size in bytes, where the kernel gives it.
    pub pss_bytes_mean: Option<u64>,
    /// Peak proportional set size in bytes.
    pub pss_bytes_peak: Option<u64>,
}

/// Watches a target's processes: `begin` at the start of each segment, `end` after it.
pub trait ResourceWatch: Send + std::fmt::Debug {
    /// Marks the start of a segment.
    fn begin(&mut self);
    /// The usage since the last `begin`; `None` when nothing could be sampled.
    fn end(&mut self) -> Option<ResourceUsage>;
}

/// One service to load: a name, a base URL, its requests and optionally its processes.
#[derive(Debug)]
pub struct Target {
    pub(crate) name: String,
    pub(crate) url: String,
    pub(crate) endpoint: Endpoint,
    pub(crate) source: Arc<dyn RequestSource>,
    pub(crate) watch: Option<Box<dyn ResourceWatch>>,
    /// HTTP/2 streams per connection (h2load's `-m`).
    pub(crate) streams: u32,
    pub(crate) no_reuse: bool,
}

impl Target {
    /// A target named `name` at `base_url` (`http[s]://host[:port][/prefix]`), HTTP/1.1
    /// with keep-alive and the default TLS settings (the system's trust store).
    pub fn new(
        name: &str,
        base_url: &str,
        source: Arc<dyn RequestSource>,
    ) -> Result<Target, UrlError> {
        Ok(Target {
            name: name.to_string(),
            url: base_url.to_string(),
            endpoint: Endpoint::parse(base_url)?,
            source,
            watch: None,
            streams: 1,
            no_reuse: false,
        })
    }

    /// The settings that travel with the target: HTTP version (HTTP/2 by ALPN over TLS,
    /// prior knowledge over `http://`), CA file or `insecure`, SNI name, `--resolve`
    /// entries, the response head limit. Its time-outs are replaced by the plan's: the
    /// connect time-out, and the whole-request time-out instead of a per-read one.
    pub fn with_options(mut self, options: PeerOptions) -> Target {
        self.endpoint.set_options(options);
        self
    }

    /// HTTP/2: concurrent streams on each connection (h2load's `-m`; default 1). The
    /// closed model keeps connections × streams requests in flight.
    pub fn with_streams(mut self, streams: u32) -> Target {
        self.streams = streams;
        self
    }

    /// A new connection for every request, to measure the cost of connecting and the TLS
    /// handshake (oha's `--disable-keepalive`): each request says `Connection: close`.
    pub fn with_no_reuse(mut self, no_reuse: bool) -> Target {
        self.no_reuse = no_reuse;
        self.endpoint.set_close_each(no_reuse);
        self
    }

    /// HTTP/2 streams per connection, when the target is spoken to over HTTP/2.
    pub(crate) fn h2_streams(&self) -> Option<u32> {
        (self.endpoint.peer().options().version == HttpVersion::Http2).then_some(self.streams)
    }

    /// How the target was connected to, for the result.
    pub(crate) fn connection_info(&self, connector: &Connector) -> ConnectionInfo {
        let peer = self.endpoint.peer();
        let o = peer.options();
        let h2 = o.version == HttpVersion::Http2;
        ConnectionInfo {
            protocol: match (h2, peer.is_tls()) {
                (true, true) => "h2",
                (true, false) => "h2c",
                (false, _) => "http/1.1",
            }
            .to_string(),
            tls: peer.is_tls(),
            insecure: peer.is_tls() && o.insecure,
            ca_file: (peer.is_tls() && !o.insecure)
                .then(|| o.ca_file.as_ref().map(|p| p.display().to_string()))
                .flatten(),
            server_name: peer.is_tls().then(|| peer.tls_name().to_string()),
            address: connector.addr().to_string(),
            streams: h2.then_some(self.streams),
            reuse: !self.no_reuse,
        }
    }

    /// Samples this target's processes during every segment.
    pub fn with_watch(mut self, watch: Box<dyn ResourceWatch>) -> Target {
        self.watch = Some(watch);
        self
    }

    /// The target's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}
