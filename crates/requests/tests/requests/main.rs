//! The integration tests of scalpel-requests, one test binary: each file here was its own
//! binary, and each linked tokio, hyper and rustls again (docs/CI.md). Filter by
//! file with its module name: `cargo test --test requests FILE::`.

mod access_log;
mod capture;
mod files;
mod har;
mod memory;
mod mix;
mod props;
