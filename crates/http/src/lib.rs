#![doc = include_str!("../README.md")]

mod connector;
mod error;
pub mod fuzz;
mod guard;
pub mod h1;
mod h2;
mod hop;
mod host;
mod ipnet;
mod peer;
pub mod server_tls;
mod session;
mod stream;
mod tls;

pub use connector::{Conn, Connected, Connector, Timing};
pub use error::{
    Error, ErrorKey, ErrorKind, Phase, Side, TlsError, error_body, error_response, parse_error_body,
};
pub use guard::{AdminGuard, Refusal};
pub use h2::{H2BodySender, H2Conn, H2Counts, H2Driver, H2PendingResponse, H2Response, H2Stats};
pub use hop::{
    FORWARDING_CLAIMS, HOP_BY_HOP, HopByHop, forwardable, is_forwarding_claim, is_hop_by_hop,
    is_proxy_only, strip_forwarding_claims, strip_hop_by_hop,
};
pub use host::{HostError, request_host, valid_authority};
pub use ipnet::IpNet;
pub use peer::{HttpVersion, Peer, PeerOptions, Resolve, ResolveError, Scheme, UrlError};
pub use server_tls::ServerTls;
pub use session::{H1Sessions, H2Lease, Resend, Reuse, Session, Sessions, SharedH2};
pub use stream::Stream;
