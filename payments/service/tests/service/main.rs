//! The integration tests of the payments service, one test binary: each file here was its own
//! binary, and each linked tokio, hyper and rustls again (docs/CI.md). Filter by
//! file with its module name: `cargo test --test service FILE::`.

mod cross;
mod generate;
mod pg;
mod serve;
mod util;
