//! The resource sampler: every worker's process tree read with scalpel-procstat at
//! `sample_interval` — each app's CPU%, RSS and PSS for `/metrics`, each worker's for the
//! live page, and the `max_memory_mb` check that replaces a worker grown past it. On the
//! control plane; the reads themselves on a blocking thread.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use scalpel_procstat::TreeReading;
use tokio::sync::watch;

use crate::backend::WorkerState;
use crate::live::Live;
use crate::state::{Shared, Table};
use crate::supervisor::{App, SlotCmd};

/// A worker's PSS (a walk of its page tables, under its memory lock, that stalls the
/// worker's own page faults meanwhile) is read at every sample until one is taken while the
/// worker is ready (a reading from its start-up — a shell before its `exec`, a runtime
/// still loading, slow on a busy machine — is far below what it will hold), then every this
/// many samples; CPU and RSS (two small files per process) every sample. An app with
/// `max_memory_mb` has its PSS read every sample: its limit is checked on it.
const PSS_EVERY: u64 = 10;
/// The workers' process trees are found (a pass over all of `/proc`, a file read per
/// process of the machine) when a worker is new and then every this many samples; the
/// processes known are read in between. Measured under direct mode at 10,000 req/s: the
/// passes were most of serve's own CPU (docs/serve.md, "Direct mode").
const DISCOVER_EVERY: u64 = 10;

/// Samples every worker's process tree with scalpel-procstat: each app's CPU% between two
/// readings of the same set of workers (a changed set starts a new baseline), RSS and PSS;
/// the per-worker readings go to the live page (which reads nothing itself) and to the
/// `max_memory_mb` check. A child a worker starts is counted from the next discovery (its
/// CPU so far lands then); one it reaps counts in the worker's own times.
pub(crate) async fn sample_resources(
    shared: Arc<Shared>,
    live: Option<Arc<Live>>,
    mut stop: watch::Receiver<bool>,
) {
    let mut sampler = Sampler::default();
    let mut tick = tokio::time::interval(shared.cfg.sample_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for n in 0u64.. {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        let table = shared.table.load_full();
        sampler.fit(&table);
        // Mirror counters to their stores (queued for the store's own thread; never blocks).
        for route in &table.routes {
            if let Some(m) = &route.mirror {
                m.recorder.flush();
            }
        }
        let apps = worker_pids(&table);
        let Some(now) = sampler.read(&table, &apps, n).await else {
            continue;
        };
        sampler.account(&table, apps, &now);
        if let Some(live) = &live {
            live.set_workers(now.into_iter().collect());
        }
    }
}

/// What the sampler keeps from one sample to the next.
#[derive(Debug, Default)]
struct Sampler {
    /// Per app: its worker pids and their summed reading at the last sample.
    last: Vec<Option<(Vec<u32>, TreeReading)>>,
    /// The config generation `last` belongs to.
    generation: Option<u64>,
    /// The latest PSS read of each worker (`None`: unreadable), and whether it was read
    /// while the worker was ready (else it is read again at the next sample).
    pss_of: HashMap<u32, (Option<u64>, bool)>,
    /// Each worker's process tree, as last discovered (the worker first).
    trees: HashMap<u32, Vec<u32>>,
}

/// Each app's running worker pids (sorted, without duplicates).
fn worker_pids(table: &Table) -> Vec<Vec<u32>> {
    table
        .apps
        .iter()
        .map(|app| {
            let mut pids: Vec<u32> = app
                .slots
                .iter()
                .filter_map(|s| s.current.load_full())
                .filter(|b| b.state() != WorkerState::Stopped && b.pid() > 0)
                .map(|b| b.pid())
                .collect();
            pids.sort_unstable();
            pids.dedup();
            pids
        })
        .collect()
}

impl Sampler {
    /// A live reload changed the apps: new baselines.
    fn fit(&mut self, table: &Table) {
        if self.generation != Some(table.generation) {
            self.generation = Some(table.generation);
            self.last = vec![None; table.apps.len()];
        }
    }

    /// Each worker's tree read now, by worker pid (its PSS as last read when it is not
    /// read this time); `None` when the blocking read could not run.
    async fn read(
        &mut self,
        table: &Table,
        apps: &[Vec<u32>],
        n: u64,
    ) -> Option<HashMap<u32, TreeReading>> {
        let ready: HashSet<u32> = table
            .apps
            .iter()
            .flat_map(|app| app.slots.iter())
            .filter_map(|s| s.current.load_full())
            .filter(|b| b.state() == WorkerState::Ready)
            .map(|b| b.pid())
            .collect();
        // (worker pid, read its PSS now)
        let roots: Vec<(u32, bool)> = table
            .apps
            .iter()
            .zip(apps)
            .flat_map(|(app, pids)| {
                let every = app.cfg.max_memory_bytes.is_some() || n.is_multiple_of(PSS_EVERY);
                pids.iter()
                    .map(|&pid| {
                        let settled = self.pss_of.get(&pid).is_some_and(|&(_, ready)| ready);
                        (pid, every || !settled)
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        let discover = n.is_multiple_of(DISCOVER_EVERY)
            || roots.iter().any(|(pid, _)| !self.trees.contains_key(pid));
        let (known, readings) =
            read_trees(roots.clone(), std::mem::take(&mut self.trees), discover).await?;
        self.trees = known;
        self.trees.retain(|_, tree| !tree.is_empty());
        let mut now: HashMap<u32, TreeReading> = HashMap::new();
        for (&(pid, read_pss), reading) in roots.iter().zip(readings) {
            let Some(mut reading) = reading else {
                continue;
            };
            if read_pss {
                self.pss_of
                    .insert(pid, (reading.pss_bytes, ready.contains(&pid)));
            }
            reading.pss_bytes = self.pss_of.get(&pid).and_then(|&(pss, _)| pss);
            now.insert(pid, reading);
        }
        self.pss_of.retain(|pid, _| now.contains_key(pid));
        Some(now)
    }

    /// Each app's sum of its workers' readings: its CPU% since the last sample of the
    /// same workers, RSS and PSS to its metrics; then its `max_memory_mb` check.
    fn account(&mut self, table: &Table, apps: Vec<Vec<u32>>, now: &HashMap<u32, TreeReading>) {
        for (i, (app, pids)) in table.apps.iter().zip(apps).enumerate() {
            let mut sum = TreeReading {
                at: Instant::now(),
                cpu_ticks: 0,
                rss_bytes: 0,
                pss_bytes: Some(0),
                processes: 0,
            };
            for r in pids.iter().filter_map(|p| now.get(p)) {
                sum.at = r.at;
                sum.cpu_ticks += r.cpu_ticks;
                sum.rss_bytes += r.rss_bytes;
                sum.processes += r.processes;
                sum.pss_bytes = sum.pss_bytes.zip(r.pss_bytes).map(|(a, b)| a + b);
            }
            if sum.processes == 0 {
                sum.pss_bytes = None;
            }
            let cpu = match &self.last[i] {
                Some((prev_pids, prev)) if *prev_pids == pids => {
                    scalpel_procstat::cpu_percent(prev, &sum)
                }
                _ => app.metrics.cpu_percent(),
            };
            app.metrics.set_resources(cpu, sum.rss_bytes, sum.pss_bytes);
            self.last[i] = Some((pids, sum));
            if let Some(limit) = app.cfg.max_memory_bytes {
                check_memory(app, limit, now);
            }
        }
    }
}

/// On a blocking thread: the process trees of `roots` (found afresh with `discover`,
/// else the `known` ones), and each root's tree read (with its PSS when asked).
async fn read_trees(
    roots: Vec<(u32, bool)>,
    known: HashMap<u32, Vec<u32>>,
    discover: bool,
) -> Option<(HashMap<u32, Vec<u32>>, Vec<Option<TreeReading>>)> {
    tokio::task::spawn_blocking(move || {
        let known: HashMap<u32, Vec<u32>> = if discover {
            let pids: Vec<u32> = roots.iter().map(|r| r.0).collect();
            pids.iter()
                .copied()
                .zip(scalpel_procstat::trees_of(&pids))
                .collect()
        } else {
            known
        };
        let readings: Vec<Option<TreeReading>> = roots
            .iter()
            .map(|&(pid, pss)| {
                known
                    .get(&pid)
                    .and_then(|tree| scalpel_procstat::read_pids(tree, pss))
            })
            .collect();
        (known, readings)
    })
    .await
    .ok()
}

/// Replaces each ready worker of `app` whose process tree's PSS (in `readings`, by pid)
/// passes `limit`: the successor starts and joins before the old one drains (a rolling
/// reload of that slot), so no request is lost, unlike a kill-first restart.
fn check_memory(app: &Arc<App>, limit: u64, readings: &HashMap<u32, TreeReading>) {
    for slot in &app.slots {
        let Some(b) = slot.current.load_full() else {
            continue;
        };
        if b.state() != WorkerState::Ready
            || b.pid() == 0
            || slot.memory_replacing.load(Ordering::Relaxed)
        {
            continue;
        }
        let pid = b.pid();
        let Some(pss) = readings.get(&pid).and_then(|r| r.pss_bytes) else {
            continue;
        };
        if pss <= limit {
            continue;
        }
        slot.memory_replacing.store(true, Ordering::Relaxed);
        let why = format!(
            "max_memory_mb: PSS {} MiB over {} MiB",
            pss / (1024 * 1024),
            limit / (1024 * 1024)
        );
        tracing::warn!(app = %app.cfg.name, worker = slot.index, pid, pss_bytes = pss,
            limit_bytes = limit, "worker over max_memory_mb; its successor starts, then it drains");
        app.metrics
            .memory_replacements
            .fetch_add(1, Ordering::Relaxed);
        let slot = slot.clone();
        tokio::spawn(async move {
            let (tx, rx) = tokio::sync::oneshot::channel();
            if slot.send(SlotCmd::Reload(tx)).await {
                let _ = rx.await;
            }
            *slot.last_replaced.lock().unwrap_or_else(|e| e.into_inner()) = Some(why);
            slot.memory_replacing.store(false, Ordering::Relaxed);
        });
    }
}
