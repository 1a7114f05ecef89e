//! The connector's peers and what the tests of this binary share: the TLS/HTTP/2 peers
//! and certificates of the test kit (`scalpel_testkit::peers::hello`), and connectors
//! built from a URL and options.

#![allow(unused_imports, unreachable_pub)]

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use scalpel_http::{Connector, HttpVersion, Peer as HttpPeer, PeerOptions};
pub use scalpel_testkit::free_ports;
pub use scalpel_testkit::peers::hello::{Certs, Pair, certs, nginx, node};

/// A connector to `url` with the options `set` changes from the defaults.
pub async fn connector(
    url: &str,
    set: impl FnOnce(&mut PeerOptions),
) -> Result<Connector, scalpel_http::Error> {
    let mut options = PeerOptions::default();
    options.connect_timeout = Duration::from_secs(10);
    options.read_timeout = Some(Duration::from_secs(10));
    set(&mut options);
    Connector::new(HttpPeer::parse(url).unwrap().with_options(options)).await
}

/// Options that trust the CA file `ca`.
pub fn trust(ca: &Path) -> impl FnOnce(&mut PeerOptions) + '_ {
    move |o| o.ca_file = Some(ca.to_path_buf())
}

/// Options that trust `ca` and require HTTP/2.
pub fn h2_with(ca: &Path) -> impl FnOnce(&mut PeerOptions) + '_ {
    move |o| {
        o.ca_file = Some(ca.to_path_buf());
        o.version = HttpVersion::Http2;
    }
}

/// 127.0.0.1:`port`.
pub fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}
