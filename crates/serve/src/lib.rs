//! Runs a service's workers on per-worker ports behind a built-in HTTP/1.1 balancer:
//! the production runtime of `scalpel serve`.
//!
//! Each app of the config is a command (Node, Go, a Rust binary, anything that listens
//! on the port it is given) started as N worker processes; worker *i* is told its own
//! port through `PORT` and its index through `WORKER_INDEX`, so no worker depends on
//! the kernel's `SO_REUSEPORT` hash. A supervisor owns every process: it admits a
//! worker to rotation only with proof that it takes connections (never because it is
//! merely alive), probes it at an interval, and replaces it — out of rotation at once,
//! SIGTERM, SIGKILL after a grace period — when it exits or fails N probes in a row (a
//! blocked event loop). Apps run unchanged, with no health route: Node workers get a
//! preload (`NODE_OPTIONS=--require`, shipped in the binary) that reports the event
//! loop's heartbeat and, in direct mode, serves the app's own `$PORT` server on the shared
//! socket; other workers are probed by a TCP accept check (a connection their processes
//! accepted, not a handshake the kernel completed); `[app.health] path` probes a route.
//! [`toml_from_pm2`] turns a pm2 ecosystem file's apps into a config. The balancer routes by
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
//! It must NOT compare responses or sample processes itself: responses are compared by
//! `scalpel-diff` (through `scalpel-shadow`'s recorder), and every read of a process's
//! state, its sockets or `/proc/net/tcp` goes through `scalpel-procstat` (the kernel's
//! ephemeral port range and the proof that a worker takes connections from its socket
//! among them): serve reads nothing in `/proc` itself. Nor does it parse command lines or print to the terminal beyond the workers'
//! prefixed output (the `scalpel` binary does that), nor ever resend a request its worker
//! had taken.
//!
//! Main types: [`Config`] (parse and check a TOML file: every error names the file and
//! line, [`ConfigError`]), [`Server`] (start, status, metrics, reload, shutdown; its
//! errors are [`ServeError`]), [`Status`] and [`MirrorReport`] (what `/status` and
//! `/mirror` answer), and [`WorkerLogs`] (where worker output goes). The seams inside —
//! the selection algorithms, the health check, the worker as the balancer sees it — are
//! private: nothing outside the crate plugs into them.
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
//! reach it as commands), *are they healthy* is a health check whose verdicts move a
//! worker in or out of the pool, and *which one next* is a selection algorithm behind one
//! trait (round robin, least connections, power of two choices; rendezvous hashing for a
//! `sticky_worker` key, falling back to the app's algorithm). The pool's ready set is an
//! immutable `Vec` swapped whole with `ArcSwap`, so the request path reads it without a
//! lock; in-flight counts are atomics on each worker. The apps and routes of one config
//! form a table, also swapped whole by a live reload: a request loads it once, so it
//! sees one config from route to worker. A new incarnation of worker *i* takes the other
//! of its two ports (`port_base + i` and `port_base + i + workers`), so a replacement
//! can start and become ready while the process it replaces still holds its port; a
//! worker counts as ready only when the socket listening on its port belongs to its own
//! process tree (a leftover process or a second balancer on the same ports is never
//! taken for it). Request bodies are buffered (bounded by `max_body_bytes` and
//! `body_read_timeout`) so that a request its worker never took can be sent again; small
//! response bodies are read whole before the head goes out (one write), larger ones
//! stream. A request the worker took — read, then froze on or died with, or began to
//! answer — is never resent: it may be a query of death, and a resend would carry it to
//! a healthy worker ("took" comes from the kernel: the worker's unread socket queue in
//! `/proc/net/tcp`, and whether its connection ended by a reset or by the close of an
//! exiting process). A failed health probe counts only when the worker answered no
//! proxied request since the previous probe, so an overloaded worker (its probe queued
//! behind requests) is not mistaken for a blocked one; only requests waiting for their
//! response head can make a worker "stalled", a streaming body is progress.
//!
//! The data plane is `threads` OS threads, each a current-thread runtime with its own
//! accept loop on the shared listening socket and its own keep-alive connections to the
//! workers, so a request and everything it wakes stay on one thread; the control plane
//! (supervisor, health checks, admin, sampler) runs on the caller's runtime. Clients are
//! served by hyper; the exchange with a worker runs in the request's own task over the
//! toolkit's one HTTP/1.1 codec (`scalpel_http::h1`), rather than through hyper's client
//! connection and its per-request channel hand-offs (docs/serve.md, "Request
//! lifecycle", has the measurement). Every error serve answers is
//! `scalpel_http::error_body`. A request that switches protocols (WebSocket) ends as a
//! tunnel between the two connections. Mirror copies and their comparison run on a
//! thread of their own (low priority, bounded queue and byte budget, counted skips),
//! never on the data plane; worker output goes to scalpel's stdout through a bounded,
//! lossy writer thread, so a reader that stops never blocks supervision.
//!
//! # Where each concern lives
//!
//! Each module imports only modules below it in this list (no file imports one that
//! imports it back).
//!
//! | module | concern |
//! |---|---|
//! | `server` | the public face: start (bind, threads, apps, control plane), status, reload, shutdown |
//! | `admin` | the admin server: token check, `/status`, `/metrics`, `/mirror`, `POST /reload`, the live page |
//! | `sampler` | resource sampling through `scalpel-procstat`; the `max_memory_mb` check |
//! | `accept` | the data-plane threads, accept loops, connection cap, TLS, the raw 503/408 |
//! | `metrics` | the Prometheus text, one function per family |
//! | `live` | the live page's series and snapshot |
//! | `reload` | a live reload, step by step |
//! | `proxy` | the request path, one method per phase: `route`, `request_filter`, `upstream`, `response_filter`, `finish` |
//! | `status` | `/status` and `/mirror`: the types and the code that builds them |
//! | `mirror_thread` | the mirror thread: sends copies, compares |
//! | `state` | the runtime state every part reads (`Shared`, `Table`) |
//! | `supervisor` | worker processes: `slot`, `task`, `prestart`, `spawn` (command and environment), `preload` (the Node preload and its heartbeat pipe), `ready` (the proof before traffic), `logs` |
//! | `route` | a route at run time: rule, arms, counters, mirror |
//! | `pool`, `selection`, `backend`, `health` | the ready set and its queue; which worker next; one worker as the balancer sees it; the health probe |
//! | `mirror`, `rescue`, `tunnel` | the data plane's side of a mirror; taking over a stuck direct worker's connections; a switched connection |
//! | `upstream`, `h1` | the exchange with a worker over `scalpel_http::h1` |
//! | `error` | [`ServeError`] |
//! | `config` | the TOML: raw sections (`raw`), one check per section (`server`, `app`, `route`), errors with their line (`error`) |
//! | `pm2` | a pm2 ecosystem's apps (evaluated by `node`) as serve.toml |
//! | `counters`, `sticky`, `tls`, `clock`, `rng` | per-app counters; sticky keys; certificate swap; a µs clock; a cheap RNG (address ranges: `scalpel_http::IpNet`) |

mod accept;
mod admin;
mod backend;
mod client_conn;
mod clock;
mod config;
mod counters;
mod error;
mod h1;
mod health;
mod live;
mod metrics;
mod mirror;
mod mirror_thread;
mod pm2;
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
pub use pm2::toml_from_pm2;
pub use server::{ServeOptions, Server};
pub use status::{AppStatus, MirrorReport, Status, WorkerStatus};
pub use supervisor::{LogBuffer, WorkerLogs};
