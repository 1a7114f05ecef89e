//! Runs a service's workers on per-worker ports behind a built-in HTTP/1.1 balancer:
//! the production runtime of `scalpel serve`.
//!
//! Each app of the config is a command (Node, Go, a Rust binary, anything that listens
//! on the port it is given) started as N worker processes; worker *i* is told its own
//! port through `PORT` and its index through `WORKER_INDEX`, so no worker depends on
//! the kernel's `SO_REUSEPORT` hash. A supervisor owns every process: it admits a
//! worker to rotation once its health check passes, probes it at an interval, and
//! replaces it — out of rotation at once, SIGTERM, SIGKILL after a grace period — when
//! it exits or fails N probes in a row (a blocked event loop). The balancer routes by
//! path prefix, method and header to apps, splits a route between apps by weight
//! (sticky by a key) for A/B tests, and picks a worker with round robin, least
//! connections or power of two choices — or, with `sticky_worker`, the same worker for
//! the same cookie, header or client address (rendezvous hashing over the ready workers'
//! slots: a worker that leaves or fails moves only its own keys). With
//! `max_in_flight_per_worker`, a worker gets at most that many requests at once and the
//! rest wait in the app's one bounded, time-limited FIFO queue for the first worker that
//! frees a slot (single-threaded workers with uneven request costs). An admin address serves a live page at `/`
//! (crate `scalpel-live`, docs/live.md), `/status`, `/metrics` (Prometheus) and
//! `POST /reload`: the config file is read again and applied by rolling replacement with
//! no failed request, or refused with its file and line while the running one stays
//! ([`Server::reload`], what SIGHUP does). With `[server.tls]` the client listener
//! terminates TLS (rustls, ALPN `h2` and `http/1.1`; hyper serves both; the PEM files
//! read by `scalpel_http::server_tls`, as the shadow proxy's) and the
//! certificate can be swapped while connections stay open ([`Server::reload_tls`]);
//! workers stay plain HTTP/1.1 on loopback. An app in direct mode
//! (`mode = "direct"`) skips the balancer: serve binds its `listen` address and hands the
//! one listening socket to every worker on fd 3 (systemd's socket activation), keeping
//! supervision and health checks on the workers' own ports; before a stuck direct worker
//! is killed, the connections it accepted but never read are taken from it
//! (`pidfd_getfd`) and served on by another worker (`rescue`). `max_memory_mb` replaces a
//! worker whose process tree grows past it, successor first.
//!
//! It must NOT compare responses or read `/proc` itself (that is `scalpel-diff` and
//! `scalpel-procstat`), nor parse command lines or print to the terminal beyond the
//! workers' prefixed output (the `scalpel` binary does that), nor ever resend a request
//! its worker had taken.
//!
//! Main types: [`Config`] (parse and check a TOML file: every error names the file and
//! line), [`Server`] (start, status, metrics, reload, shutdown), [`Selection`] with
//! [`RoundRobin`], [`LeastConn`] and [`PowerOfTwo`], [`HealthCheck`] with
//! [`HttpHealthCheck`], and [`Backend`] (one worker process as the balancer sees it).
//!
//! # Example
//!
//! ```no_run
//! use std::path::Path;
//! use scalpel_serve::{Config, ServeOptions, Server};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let config = Config::parse(r#"
//!     [server]
//!     listen = "127.0.0.1:8080"
//!     admin = "127.0.0.1:9090"
//!
//!     [[app]]
//!     name = "web"
//!     command = ["node", "app.js"]
//!     workers = 2
//!     port_base = 3001
//!
//!     [app.health]
//!     path = "/healthz"
//! "#, Path::new("serve.toml"))?;
//! let server = Server::start(config, ServeOptions::default()).await?;
//! server.wait_ready(std::time::Duration::from_secs(30)).await;
//! println!("{}", serde_json::to_string(&server.status())?);
//! server.reload().await?;   // what SIGHUP does
//! server.shutdown().await;  // what SIGTERM does: drain, then stop the workers
//! # Ok(()) }
//! ```
//!
//! # Design
//!
//! One seam per question, as in Pingora's load balancer: *which workers exist* is the
//! supervisor's business (one task per worker slot owns its process; reload and stop
//! reach it as commands), *are they healthy* is a [`HealthCheck`] whose verdicts move a
//! worker in or out of the pool, and *which one next* is a [`Selection`]. The pool's
//! ready set is an immutable `Vec` swapped whole with `ArcSwap`, so the request path
//! reads it without a lock; in-flight counts are atomics on each [`Backend`]. The apps and
//! routes of one config form a table, also swapped whole by a live reload: a request
//! loads it once, so it sees one config from route to worker. A new
//! incarnation of worker *i* takes the other of its two ports (`port_base + i` and
//! `port_base + i + workers`), so a replacement can start and become ready while the
//! process it replaces still holds its port; a worker counts as ready only when the
//! socket listening on its port belongs to its own process tree (a leftover process or a
//! second balancer on the same ports is never taken for it). Request bodies are buffered
//! (bounded by `max_body_bytes` and `body_read_timeout`) so that a request its worker
//! never took can be sent again; small response bodies are read whole before the head
//! goes out (one write), larger ones stream. A request the worker took — read, then froze
//! on or died with, or began to answer — is never resent: it may be a query of death, and
//! a resend would carry it to a healthy worker ("took" comes from the kernel: the worker's
//! unread socket queue in `/proc/net/tcp`, and whether its connection ended by a reset or
//! by the close of an exiting process). A failed health probe counts only when the worker
//! answered no proxied request since the previous probe, so an overloaded worker (its
//! probe queued behind requests) is not mistaken for a blocked one; only requests waiting
//! for their response head can make a worker "stalled", a streaming body is progress.
//!
//! The data plane is `threads` OS threads, each a current-thread runtime with its own
//! accept loop on the shared listening socket and its own keep-alive connections to the
//! workers (`upstream`), so a request and everything it wakes stay on one thread; the
//! control plane (supervisor, health checks, admin, sampler) runs on the caller's runtime.
//! Clients are served by hyper; the exchange with a worker runs in the request's own
//! task over the toolkit's one HTTP/1.1 codec (`scalpel_http::h1`, pooled per thread in
//! `upstream`; `h1` here writes only the proxy's request head), which halved the
//! balancer's user-space CPU per request against hyper's client connection
//! (docs/serve.md). Every error serve answers is `scalpel_http::error_body`. A request that switches protocols (WebSocket) ends as a `tunnel`
//! between the two connections. Mirror copies and their comparison run on a thread of
//! their own (low priority, bounded queue and byte budget, counted skips), never on the
//! data plane; worker output goes to scalpel's stdout through a bounded, lossy writer
//! thread, so a reader that stops never blocks supervision.

mod accept;
mod admin;
mod backend;
mod clock;
mod config;
mod counters;
mod error;
mod h1;
mod health;
mod ipnet;
mod live;
mod metrics;
mod mirror;
mod mirror_thread;
mod pool;
mod proxy;
mod reload;
mod rescue;
mod rng;
mod route;
mod sampler;
mod selection;
mod server;
mod state;
mod status;
mod sticky;
mod supervisor;
mod tls;
mod tunnel;
mod upstream;

pub use config::{ADMIN_TOKEN_ENV, Config, ConfigError};
pub use error::ServeError;
pub use server::{ServeOptions, Server};
pub use status::{AppStatus, MirrorReport, Status, WorkerStatus};
pub use supervisor::{LogBuffer, WorkerLogs};
