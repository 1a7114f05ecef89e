//! The runtime state every part of the balancer reads: the table of apps and routes of
//! the config in use (swapped whole by a live reload), the refusal counters, the client
//! connection count, the TLS endpoints, and what a reload needs. It imports nothing
//! above it: the request path, the admin server, the sampler, reload and the live page
//! all read it, none of them is read by it.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use tokio::sync::Notify;

use crate::config::{Config, ServerConfig};
use crate::mirror::MirrorQueue;
use crate::route::Route;
use crate::supervisor::{App, Hurry, LogSink, PreloadFile};
use crate::tls::Endpoint;

/// Everything the request path reads; built once, shared by every connection.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) cfg: ServerConfig,
    /// The apps, routes and `[server]` limits in use; a live reload swaps the whole
    /// table, so a request sees one config from its route to its worker.
    pub(crate) table: ArcSwap<Table>,
    /// The mirror thread's queue, when a route mirrors.
    pub(crate) mirror_queue: Option<MirrorQueue>,
    pub(crate) rejected: Rejected,
    pub(crate) connections: Arc<ConnCount>,
    /// The client listener's certificates (`[server.tls]`), reloaded on SIGHUP.
    pub(crate) tls: Option<Endpoint>,
    /// The admin address's certificates (`[server.admin_tls]`).
    pub(crate) admin_tls: Option<Endpoint>,
    /// The config in use and what a live reload starts new apps with.
    pub(crate) running: Running,
}

/// The apps and routes of one config generation (routes name apps by index).
#[derive(Debug)]
pub(crate) struct Table {
    /// Counts the live reloads applied (0: the config read at start).
    pub(crate) generation: u64,
    pub(crate) apps: Vec<Arc<App>>,
    pub(crate) routes: Vec<Route>,
    /// The `[server]` section of this generation: its limits and time-outs are read per
    /// request (and per connection) from here, so a reload changes them live. Listeners,
    /// threads and buffers sized at start are read from `Shared::cfg` (a reload refuses
    /// changing them).
    pub(crate) server: Arc<ServerConfig>,
}

/// Requests and connections refused before reaching an app, by reason.
#[derive(Debug, Default)]
pub(crate) struct Rejected {
    pub(crate) no_route: AtomicU64,
    pub(crate) too_large: AtomicU64,
    /// Request bodies not received within `body_read_timeout` (408).
    pub(crate) body_timeout: AtomicU64,
    /// Request heads not received within `header_read_timeout` (408).
    pub(crate) header_timeout: AtomicU64,
    /// Connections over `max_connections` (503).
    pub(crate) too_many_connections: AtomicU64,
}

/// What a live reload needs besides the shared state: the config in use (the next one is
/// diffed against it) and what new apps' slots are started with.
#[derive(Debug)]
pub(crate) struct Running {
    pub(crate) config: Mutex<Config>,
    pub(crate) logs: LogSink,
    pub(crate) hurry: Arc<Hurry>,
    /// The Node preload's file, for apps a live reload adds.
    pub(crate) preload: Arc<PreloadFile>,
}

/// Client connections open, across the data-plane threads.
#[derive(Debug, Default)]
pub(crate) struct ConnCount {
    active: AtomicUsize,
    idle: Notify,
}

impl ConnCount {
    /// Connections open now.
    pub(crate) fn active(&self) -> usize {
        self.active.load(Ordering::Acquire)
    }

    /// Counts a connection open until the guard drops.
    pub(crate) fn open(self: &Arc<Self>) -> ConnGuard {
        self.active.fetch_add(1, Ordering::AcqRel);
        ConnGuard(self.clone())
    }

    /// Resolves when the last open connection closes (none open: when one opens and
    /// closes). Created before [`ConnCount::active`] is read, it misses no close.
    pub(crate) fn idle(&self) -> tokio::sync::futures::Notified<'_> {
        self.idle.notified()
    }
}

/// One open client connection ([`ConnCount::open`]).
#[derive(Debug)]
pub(crate) struct ConnGuard(Arc<ConnCount>);

impl Drop for ConnGuard {
    fn drop(&mut self) {
        if self.0.active.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}
