//! The integration tests of scalpel-report, one test binary: each file here was its own
//! binary, and each linked tokio, hyper and rustls again (docs/CI.md). Filter by
//! file with its module name: `cargo test --test report FILE::`.

mod endpoints;
mod report;
mod shard_sets;

// Result files built in code, with real histograms (the test kit's).
use scalpel_testkit::results as common;
