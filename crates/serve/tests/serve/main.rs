//! The integration tests of scalpel-serve, one test binary: each file here was its own
//! binary, and each linked tokio, hyper and rustls again (docs/CI.md). Filter by
//! file with its module name: `cargo test --test serve FILE::`.

mod apps;
mod live;
mod queue;
mod rescue;
mod security;
mod serve;
mod tls;
mod util;
