//! The toolkit's test kit: what the test binaries of every crate need to run real
//! counterparts and wait for them, written once.
//!
//! Scalpel's tests check behaviour against real parts on loopback — nginx, Node servers,
//! raw TCP peers that write every byte by hand, the `scalpel` binary as a process — and
//! each binary used to carry its own copy of how to start them. This crate holds the one
//! copy, as linkerd2-proxy's `linkerd-app-integration` does for its proxy tests:
//!
//! - **Processes**: [`scalpel`] / [`scalpel_bin`] (the built CLI), [`finish`] and
//!   [`wait_exit`] (deadlines that only turn a hang into a failure), [`signal`], [`curl`],
//!   [`KillOnDrop`], [`collect_lines`], [`child_test`] and [`child_server`] (this test
//!   binary re-run as a helper process), [`scratch`] folders, [`process_alive`],
//!   [`cpu_seconds`] (between two procstat readings).
//! - **Ports**: [`free_port`] / [`free_ports`] (ephemeral), [`free_base`] (a range below
//!   the ephemeral ones, claimed across test processes with `flock`, [`claim_port`]).
//! - **Waiting**: [`poll`] (blocking), [`eventually`] and [`eventually_some`] (async).
//! - **Reading what servers say**: [`metric`] (a Prometheus sample), [`read_json`].
//! - **Certificates**: [`certs`] (a test CA and good, expired, wrong-name, self-signed
//!   server certificates), [`write_self_signed`].
//! - **Peers**: [`peers`] (nginx from a config of the test's own, Node scripts; the
//!   shared [`peers::hello`] and [`peers::json`] sets), [`raw`] (HTTP/1.1 by hand on
//!   blocking sockets), [`net`] (raw bytes on tokio streams), [`scripted`] (hyper servers
//!   whose answers a closure gives, a client with time-outs).
//! - **Result files**: [`results`] (runs with real histograms, built in code).
//!
//! A test binary's own `util` module re-exports what it uses from here, beside the
//! helpers that belong to that binary alone (a harness around one crate's server).
//!
//! It must NOT be a normal dependency of any crate — only a `[dev-dependencies]` entry —
//! and must NOT hold product code: nothing here may decide a behaviour a test then
//! checks. No mocks either: every peer here is the real program on loopback. Deadlines
//! are generous and only turn a hang into a failure; figures of speed belong to
//! benchmarks, never to assertions here.
//!
//! # Example
//!
//! ```
//! use std::io::Write as _;
//! use scalpel_testkit::raw::{http, serve_requests};
//!
//! // A raw HTTP/1.1 server whose every byte is the test's, and a one-shot client.
//! let port = serve_requests(|req, w| {
//!     let body = format!("you asked for {}", req.path);
//!     let _ = write!(w, "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}", body.len());
//!     req.header("connection") != Some("close")
//! });
//! assert_eq!(http(port, "GET", "/x").unwrap(), (200, "you asked for /x".to_string()));
//! assert!(scalpel_testkit::poll(std::time::Duration::from_secs(1), || true));
//! ```

pub mod apps;
mod certs;
pub mod net;
pub mod peers;
mod ports;
mod process;
mod prom;
pub mod raw;
pub mod results;
pub mod scripted;
mod wait;

pub use certs::{Certs, Pair, certs, write_self_signed};
pub use ports::{
    Claim, claim_port, free_base, free_base_from, free_port, free_ports, port_lock_dir,
};
pub use process::{
    ChildServer, KillOnDrop, child_server, child_test, collect_lines, cpu_seconds, curl, finish,
    process_alive, read_json, scalpel, scalpel_bin, scratch, signal, wait_exit,
};
pub use prom::{metric, metric_value};
pub use wait::{eventually, eventually_some, poll};
