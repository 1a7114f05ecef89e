//! The integration tests of qr-core, one test binary: each file here was its own
//! binary, and each linked tokio, hyper and rustls again (docs/CI.md). Filter by
//! file with its module name: `cargo test --test core FILE::`.

mod decode;
mod golden;
mod npm_parity;
