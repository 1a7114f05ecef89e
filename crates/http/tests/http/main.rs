//! The integration tests of scalpel-http, one test binary: each file here was its own
//! binary, and each linked tokio, hyper and rustls again (docs/CI.md). Filter by
//! file with its module name: `cargo test --test http FILE::`.

mod peers;
mod raw;
mod session;
mod util;
