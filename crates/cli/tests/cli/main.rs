//! The integration tests of the scalpel binary, driven as a real process, one test binary: each file here was its own
//! binary, and each linked tokio, hyper and rustls again (docs/CI.md). Filter by
//! file with its module name: `cargo test --test cli FILE::`.

mod cost_cli;
mod dashboard_cli;
mod load_cli;
mod load_tls;
mod pm2_cli;
mod procstat_cli;
mod report_cli;
mod security;
mod serve_cli;
mod serve_refused;
mod shadow_cli;
mod shards;
mod traffic;
mod util;
