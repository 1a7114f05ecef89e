//! The integration tests of scalpel-load, one test binary: each file here was its own
//! binary, and each linked tokio, hyper and rustls again (docs/CI.md). Filter by
//! file with its module name: `cargo test --test load FILE::`.

mod schedule;
mod sources;
