//! A live reload (SIGHUP, `POST /reload`): the config file read again and checked as
//! `--check` does, what cannot change live refused, then applied with no failed request —
//! apps it adds start and must all be ready before anything else changes; each kept app
//! gets its new slots first (they join as they become ready), loses the ones it no longer
//! has (drained), and has every other worker replaced one at a time under its new
//! settings (new one ready before the old one drains); then the new routes and weights
//! take over in one swap, and apps it removes drain and stop. Without config changes,
//! this is the rolling restart of every worker that picks up new code.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use crate::backend::WorkerState;
use crate::config::Config;
use crate::error::ServeError;
use crate::route::Route;
use crate::state::{Shared, Table};
use crate::supervisor::{App, AppEnv, Slot, SlotCmd, start_app};

/// Reloads the config of the server whose state is `shared`; `lock` keeps reloads (and
/// a shutdown) one at a time. See [`crate::Server::reload`].
pub(crate) async fn reload(
    shared: &Shared,
    lock: &tokio::sync::Mutex<()>,
) -> Result<(), ServeError> {
    let _one_at_a_time = lock.lock().await;
    let refuse = |e: ServeError| {
        tracing::error!(error = %e, "reload refused; the running config stays");
        Err(e)
    };
    let next = match read_next(shared) {
        Ok(c) => c,
        Err(e) => return refuse(e),
    };
    let table = shared.table.load_full();
    // 1. Apps the config adds: started, and all ready, before anything else changes.
    let added = match start_added(shared, &table, &next).await {
        Ok(a) => a,
        Err(e) => return refuse(e),
    };
    // 2. Kept apps: resized, then rolled onto their new settings one worker at a time.
    let mut errors = Vec::new();
    let kept = roll_kept(&table, &next, &mut errors).await;
    // 3. One swap: the new apps, routes and weights.
    swap(shared, &table, &next, &kept, &added);
    let summary = next
        .apps
        .iter()
        .map(|a| format!("{}×{}", a.name, a.workers))
        .collect::<Vec<_>>()
        .join(", ");
    *shared
        .running
        .config
        .lock()
        .unwrap_or_else(|e| e.into_inner()) = next;
    // 4. Apps the config no longer has: out of the routes now, drained and stopped.
    stop_removed(shared, &table).await;
    if errors.is_empty() {
        tracing::info!(apps = %summary, "reload complete");
        Ok(())
    } else {
        Err(ServeError::Reload(errors))
    }
}

/// The config file read again and checked (programs, TLS files, what may change live)
/// against the one in use.
fn read_next(shared: &Shared) -> Result<Config, ServeError> {
    let old = shared
        .running
        .config
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let next = Config::from_file(old.path())
        .and_then(|c| c.check_programs().map(|()| c))
        .map_err(ServeError::Config)?;
    let tls = next.check_tls();
    if !tls.is_empty() {
        return Err(ServeError::Refused(format!(
            "{}: {}",
            old.path().display(),
            tls.join("; ")
        )));
    }
    if let Some(why) = old.not_live(&next) {
        return Err(ServeError::Refused(format!(
            "{}: {why}",
            old.path().display()
        )));
    }
    Ok(next)
}

/// Starts the apps `next` adds and waits until all are ready; on any failure, stops
/// those started and refuses the reload (nothing else has changed).
async fn start_added(
    shared: &Shared,
    table: &Table,
    next: &Config,
) -> Result<Vec<Arc<App>>, ServeError> {
    let running = &shared.running;
    let mut added: Vec<Arc<App>> = Vec::new();
    for cfg in next.apps.iter().filter(|c| find(table, &c.name).is_none()) {
        let sock = match cfg.listen {
            Some(addr) => match std::net::TcpListener::bind(addr) {
                Ok(l) => Some(Arc::new(l)),
                Err(error) => {
                    stop_slots(added.iter().flat_map(|a| a.slots.iter())).await;
                    return Err(ServeError::Refused(format!(
                        "app `{}`: cannot listen on {addr}: {error}",
                        cfg.name
                    )));
                }
            },
            None => None,
        };
        let env = AppEnv::new(
            running.logs.clone(),
            shared.cfg.log_line_max_bytes,
            shared.cfg.drain_timeout,
            running.hurry.clone(),
            sock,
            Some(running.preload.clone()),
        );
        added.push(Arc::new(start_app(cfg.clone(), env)));
    }
    for app in &added {
        if let Err(why) = wait_slots_ready(&app.slots, app.cfg.start_timeout).await {
            stop_slots(added.iter().flat_map(|a| a.slots.iter())).await;
            return Err(ServeError::Refused(format!(
                "app `{}` did not become ready ({why}); nothing was changed",
                app.cfg.name
            )));
        }
    }
    Ok(added)
}

/// The running app named `name`.
fn find(table: &Table, name: &str) -> Option<Arc<App>> {
    table.apps.iter().find(|a| &*a.cfg.name == name).cloned()
}

/// Each app `next` keeps, resized to its new `workers` and rolled onto its new settings
/// one worker at a time; what failed goes to `errors` (the old worker keeps serving).
async fn roll_kept(table: &Table, next: &Config, errors: &mut Vec<String>) -> Vec<Arc<App>> {
    let mut kept: Vec<Arc<App>> = Vec::new();
    for cfg in next.apps.iter() {
        let Some(before) = find(table, &cfg.name) else {
            continue;
        };
        let (app, extra) = before.resized(cfg.clone());
        // Fewer workers: the extra ones drain first, which frees their ports for the
        // new pairs of the others.
        stop_slots(extra.iter()).await;
        let kept_slots = before.slots.len().min(app.slots.len());
        if let Err(why) = wait_slots_ready(&app.slots[kept_slots..], cfg.start_timeout).await {
            errors.push(format!("{}: new worker not ready: {why}", cfg.name));
        }
        for slot in &app.slots[..kept_slots] {
            *slot.next_cfg.lock().unwrap_or_else(|e| e.into_inner()) = Some(cfg.clone());
            let (tx, rx) = oneshot::channel();
            if !slot.send(SlotCmd::Reload(tx)).await {
                errors.push(format!("{}#{}: supervisor gone", cfg.name, slot.index));
                continue;
            }
            match rx.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => errors.push(e),
                Err(_) => errors.push(format!("{}#{}: no answer", cfg.name, slot.index)),
            }
        }
        kept.push(Arc::new(app));
    }
    kept
}

/// The new table in one swap: `next`'s apps (kept and added), its routes with the
/// counters and mirrors they keep, and each kept app's selection and slot limit.
fn swap(shared: &Shared, table: &Table, next: &Config, kept: &[Arc<App>], added: &[Arc<App>]) {
    let apps: Vec<Arc<App>> = next
        .apps
        .iter()
        .filter_map(|c| {
            kept.iter()
                .chain(added)
                .find(|a| a.cfg.name == c.name)
                .cloned()
        })
        .collect();
    let routes = next_routes(table, next);
    for app in kept {
        // An app's `balance` (and sticky key) changes with the routes, in the same moment.
        if find(table, &app.cfg.name).is_some_and(|old| {
            old.cfg.balance != app.cfg.balance
                || old.cfg.sticky_worker.is_some() != app.cfg.sticky_worker.is_some()
        }) {
            app.pool
                .set_selection(app.cfg.balance, app.cfg.sticky_worker.is_some());
        }
        // So do its slot limit and queue (requests waiting now keep their place).
        app.pool
            .set_limit(app.cfg.max_in_flight_per_worker, app.cfg.max_queued);
    }
    shared.table.store(Arc::new(Table {
        generation: table.generation + 1,
        apps,
        routes,
        server: Arc::new(next.server.clone()),
    }));
}

/// `next`'s routes. A mirror is kept as it was (a change to one is refused), with its
/// comparisons and store; a route the reload keeps (same rule) keeps its counters, arm
/// by arm (same app), so `/metrics` counters stay monotonic. Each old route is taken
/// over once.
fn next_routes(table: &Table, next: &Config) -> Vec<Route> {
    let mut routes = next
        .routes
        .iter()
        .cloned()
        .map(|r| {
            let mirror = r.mirror.as_ref().and_then(|m| {
                table
                    .routes
                    .iter()
                    .filter_map(|o| o.mirror.as_ref().zip(o.cfg.mirror.as_ref()))
                    .find(|(_, oc)| oc.key == m.key)
                    .map(|(om, _)| om.clone())
            });
            Route::with_mirror(r, mirror)
        })
        .collect::<Vec<_>>();
    let mut taken = vec![false; table.routes.len()];
    for route in &mut routes {
        let Some(oi) =
            (0..table.routes.len()).find(|&oi| !taken[oi] && table.routes[oi].same_rule(route))
        else {
            continue;
        };
        taken[oi] = true;
        route.carry_counters(
            |a| next.apps.get(a).map(|c| &*c.name),
            &table.routes[oi],
            |a| table.apps.get(a).map(|x| &*x.cfg.name),
        );
    }
    routes
}

/// The apps of `before` the table in use no longer has: drained and stopped.
async fn stop_removed(shared: &Shared, before: &Table) {
    let now = shared.table.load();
    let removed: Vec<Arc<App>> = before
        .apps
        .iter()
        .filter(|a| !now.apps.iter().any(|n| n.cfg.name == a.cfg.name))
        .cloned()
        .collect();
    drop(now);
    stop_slots(removed.iter().flat_map(|a| a.slots.iter())).await;
    for app in &removed {
        tracing::info!(app = %app.cfg.name, "app removed by the reload: drained and stopped");
    }
}

/// Stops these slots (each drains its worker first), all at once; returns when they are.
async fn stop_slots(slots: impl Iterator<Item = &Arc<Slot>>) {
    let mut waits = Vec::new();
    for slot in slots {
        let (tx, rx) = oneshot::channel();
        if slot.send(SlotCmd::Stop(tx)).await {
            waits.push(rx);
        }
    }
    for w in waits {
        let _ = w.await;
    }
}

/// Waits until every one of `slots` has a ready worker, up to `start_timeout` and a
/// margin; the last start failure of one that does not, as the error.
async fn wait_slots_ready(slots: &[Arc<Slot>], start_timeout: Duration) -> Result<(), String> {
    let deadline = Instant::now() + start_timeout + Duration::from_secs(5);
    loop {
        let not_ready = slots.iter().find(|s| {
            s.current
                .load()
                .as_ref()
                .is_none_or(|b| b.state() != WorkerState::Ready)
        });
        let Some(slot) = not_ready else {
            return Ok(());
        };
        let failed = slot.failed.load(Ordering::Relaxed);
        if Instant::now() >= deadline || failed {
            let why = slot
                .last_error
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone()
                .unwrap_or_else(|| "not ready in time".into());
            return Err(format!("worker {}: {why}", slot.index));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
