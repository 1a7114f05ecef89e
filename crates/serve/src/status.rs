//! What `/status` and `/mirror` answer, and the live page shows: every app and worker
//! as the supervisor and the pool see them now, and each mirrored route's comparison
//! results. Built on demand from the shared state, never on a request path.

use std::sync::atomic::Ordering;

use serde::Serialize;

use crate::backend::WorkerState;
use crate::state::Shared;

/// `/status`: every app and its workers.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    /// The apps, in config order.
    pub apps: Vec<AppStatus>,
}

/// One app in [`Status`].
#[derive(Debug, Clone, Serialize)]
pub struct AppStatus {
    /// The app's name.
    pub name: String,
    /// Selection algorithm.
    pub balance: &'static str,
    /// What proves a worker ready and alive: `http` (`[app.health] path`), `heartbeat`
    /// (the Node preload) or `accept` (a TCP accept check).
    pub health: &'static str,
    /// What keeps a client on one worker (`sticky_worker`), if anything.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sticky_worker: Option<String>,
    /// Workers in rotation.
    pub ready: usize,
    /// `max_in_flight_per_worker`, when set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_in_flight_per_worker: Option<usize>,
    /// Requests waiting in the app's queue for a free worker slot (0 without a limit).
    pub queued: usize,
    /// One entry per worker slot.
    pub workers: Vec<WorkerStatus>,
}

/// One worker in [`Status`].
#[derive(Debug, Clone, Serialize)]
pub struct WorkerStatus {
    /// Index within the app (`WORKER_INDEX`).
    pub index: usize,
    /// Process id of its current process (absent before the first spawn).
    pub pid: Option<u32>,
    /// The port it listens on.
    pub port: Option<u16>,
    /// `starting`, `ready`, `draining`, `stopped` (restart pending) or `failed`
    /// (restart budget spent).
    pub state: &'static str,
    /// Seconds since its current process started.
    pub uptime_s: f64,
    /// Restarts of this slot so far.
    pub restarts: u64,
    /// Requests in flight on it.
    pub in_flight: usize,
    /// Why its process was last replaced without a failure (e.g. `max_memory_mb`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replaced_because: Option<String>,
    /// Why the slot last restarted (`reason: detail`), if it has.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// `/mirror`: the comparison results of one mirrored route.
#[derive(Debug, Clone, Serialize)]
pub struct MirrorReport {
    /// The route's index in the config.
    pub route: usize,
    /// The route's prefix.
    pub prefix: String,
    /// The app that receives the copies.
    pub mirror: String,
    /// Counts, consistency and samples, as `scalpel shadow` reports them.
    pub summary: scalpel_shadow::Summary,
}

/// Every mirrored route's comparison results (`/mirror`, the live page, `/metrics`).
pub(crate) fn mirror_reports(shared: &Shared) -> Vec<MirrorReport> {
    let table = shared.table.load();
    table
        .routes
        .iter()
        .enumerate()
        .filter_map(|(i, r)| {
            r.mirror.as_ref().map(|m| MirrorReport {
                route: i,
                prefix: r.cfg.prefix.clone(),
                mirror: m.app.to_string(),
                summary: m.recorder.summary(),
            })
        })
        .collect()
}

/// Every app and worker now (`/status`, the live page).
pub(crate) fn status(shared: &Shared) -> Status {
    let table = shared.table.load();
    let apps = table
        .apps
        .iter()
        .map(|app| AppStatus {
            name: app.cfg.name.to_string(),
            balance: app.cfg.balance.name(),
            health: app.cfg.health.name(),
            sticky_worker: app.cfg.sticky_worker.as_ref().map(|k| k.to_string()),
            ready: app.pool.len(),
            max_in_flight_per_worker: Some(app.cfg.max_in_flight_per_worker).filter(|&n| n > 0),
            queued: app.pool.queued(),
            workers: app
                .slots
                .iter()
                .map(|slot| {
                    let b = slot.current.load_full();
                    let failed = slot.failed.load(Ordering::Relaxed);
                    WorkerStatus {
                        replaced_because: slot
                            .last_replaced
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .clone(),
                        index: slot.index,
                        pid: b.as_ref().map(|b| b.pid()),
                        port: b.as_ref().map(|b| b.addr().port()),
                        state: if failed {
                            "failed"
                        } else {
                            b.as_ref().map_or("starting", |b| b.state().name())
                        },
                        uptime_s: b.as_ref().map_or(0.0, |b| {
                            if b.state() == WorkerState::Stopped {
                                0.0
                            } else {
                                (b.uptime_s() * 10.0).round() / 10.0
                            }
                        }),
                        restarts: slot.restarts.load(Ordering::Relaxed),
                        in_flight: b.as_ref().map_or(0, |b| b.in_flight()),
                        last_error: slot
                            .last_error
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .clone(),
                    }
                })
                .collect(),
        })
        .collect();
    Status { apps }
}
