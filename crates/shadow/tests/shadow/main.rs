//! The integration tests of scalpel-shadow, one test binary: each file here was its own
//! binary, and each linked tokio, hyper and rustls again (docs/CI.md). Filter by
//! file with its module name: `cargo test --test shadow FILE::`.

mod failure_modes;
mod props;
mod shadow;
mod support;
mod tls;

// The TLS and HTTP/2 peers that all answer the same JSON document (the test kit's).
use scalpel_testkit::peers::json as peers;
