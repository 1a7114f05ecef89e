//! The supervisor owns every worker process: it spawns each on its own port, admits it
//! to the pool once its health check passes, probes it at an interval, and replaces it
//! when it exits or stops answering, with exponential back-off and a restart budget.
//! Each worker slot is one task (`task`); commands (reload, stop) reach it over a
//! channel, so the slot's state has a single owner. Its rooms: `slot` (a slot's face
//! and its context), `task` (the slot's life), `prestart` (a stalled worker's successor
//! started early), `spawn` (how a worker process is started: command, environment,
//! socket activation), `preload` (the Node preload: its file, its heartbeat pipe), `ready`
//! (the proof a new worker must show before it gets traffic) and `logs` (where worker
//! output goes).

mod logs;
mod preload;
mod prestart;
mod ready;
mod slot;
mod spawn;
mod task;

use std::sync::Arc;

pub(crate) use logs::LogSink;
pub use logs::{LogBuffer, WorkerLogs};
pub(crate) use preload::{Beat, PreloadFile};
pub(crate) use slot::{AppEnv, Hurry, Slot, SlotCmd};

use crate::config::AppConfig;
use crate::counters::AppMetrics;
use crate::pool::Pool;
use slot::SlotCtx;

/// An app at run time: its config, its pool, its metrics and its slots. A live reload
/// builds a new `App` of the same name around the same pool and metrics (see
/// [`App::resized`]), so counters and the rotation carry over.
#[derive(Debug)]
pub(crate) struct App {
    pub(crate) cfg: Arc<AppConfig>,
    pub(crate) pool: Arc<Pool>,
    pub(crate) metrics: Arc<AppMetrics>,
    pub(crate) slots: Vec<Arc<Slot>>,
    env: AppEnv,
}

/// Starts the slots of `cfg`; each begins spawning its worker at once.
pub(crate) fn start_app(cfg: Arc<AppConfig>, env: AppEnv) -> App {
    let pool = Arc::new(Pool::new(cfg.balance, cfg.sticky_worker.is_some()));
    pool.set_limit(cfg.max_in_flight_per_worker, cfg.max_queued);
    let metrics = Arc::new(AppMetrics::new());
    let slots = (0..cfg.workers)
        .map(|index| start_slot(&cfg, &pool, &metrics, &env, index, false))
        .collect();
    App {
        cfg,
        pool,
        metrics,
        slots,
        env,
    }
}

/// Starts slot `index` of the app of `cfg`: its task begins spawning its worker at once.
fn start_slot(
    cfg: &Arc<AppConfig>,
    pool: &Arc<Pool>,
    metrics: &Arc<AppMetrics>,
    env: &AppEnv,
    index: usize,
    added_live: bool,
) -> Arc<Slot> {
    let (slot, cmds) = Slot::new(index);
    let ctx = SlotCtx::new(cfg, pool, metrics, slot.clone(), env, added_live);
    tokio::spawn(task::run_slot(ctx, cmds));
    slot
}

impl App {
    /// The same app (pool, metrics, shared state) under `cfg`: the slots below
    /// `cfg.workers` are kept (the caller rolls them onto `cfg`), new ones start at once
    /// with `cfg`; slots past `cfg.workers` are returned for the caller to stop.
    pub(crate) fn resized(&self, cfg: Arc<AppConfig>) -> (App, Vec<Arc<Slot>>) {
        let keep = self.slots.len().min(cfg.workers);
        let mut slots: Vec<Arc<Slot>> = self.slots[..keep].to_vec();
        let extra = self.slots[keep..].to_vec();
        for index in keep..cfg.workers {
            slots.push(start_slot(
                &cfg,
                &self.pool,
                &self.metrics,
                &self.env,
                index,
                true,
            ));
        }
        (
            App {
                cfg,
                pool: self.pool.clone(),
                metrics: self.metrics.clone(),
                slots,
                env: self.env.clone(),
            },
            extra,
        )
    }
}
