//! HTTP/1.1: the wire format ([`wire`]), a connection over TCP or TLS, a keep-alive pool.

mod conn;
mod forward;
mod pool;
pub mod wire;

pub use conn::H1Conn;
pub use forward::{Proxied, ProxyHeaders};
pub use pool::H1Pool;
pub use wire::{
    ChunkedDecoder, DEFAULT_MAX_HEAD_BYTES, Expect, Forwarded, Framing, HeadInfo, MAX_HEADERS,
    RequestWriter, ResponseHead, WireError, parse_head, parse_response, sends_length,
};
