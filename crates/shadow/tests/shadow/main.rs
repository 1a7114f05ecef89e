//! The integration tests of scalpel-shadow, one test binary: each file here was its own
//! binary, and each linked tokio, hyper and rustls again (docs/CI.md). Filter by
//! file with its module name: `cargo test --test shadow FILE::`.

mod failure_modes;
mod peers;
mod props;
mod shadow;
mod support;
mod tls;
