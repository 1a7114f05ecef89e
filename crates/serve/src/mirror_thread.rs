//! The mirror thread: sends each queued copy to the mirror app, waits for the served
//! answer the data plane captured ([`crate::mirror::Tee`]) and compares the two with
//! `scalpel-shadow`'s recorder — all on one thread of its own (`scalpel-mirror`, its own
//! single-threaded runtime, nice 19), never on the data plane.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use scalpel_http::ErrorKind;
use scalpel_shadow::{ShadowRequest, ShadowResponse, SkipReason};
use tokio::sync::{Semaphore, oneshot, watch};

use crate::h1::Outgoing;
use crate::mirror::{Copy, Held, MirrorJob, MirrorQueue};
use crate::state::Shared;
use crate::upstream::{Attempt, Upstreams};

/// Mirror exchanges in flight at once (all routes); queued copies wait for one.
const MIRROR_CONCURRENCY: usize = 64;

/// Starts the mirror thread: it waits for the shared state (sent through the returned
/// sender once the server is built), then runs every queued copy until `stop`.
pub(crate) fn start_mirror_thread(
    budget_bytes: usize,
    mut stop: watch::Receiver<bool>,
) -> std::io::Result<(MirrorQueue, oneshot::Sender<Arc<Shared>>)> {
    let (queue, mut rx) = MirrorQueue::new(budget_bytes);
    let (hand_over, shared_rx) = oneshot::channel::<Arc<Shared>>();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    std::thread::Builder::new()
        .name("scalpel-mirror".into())
        .spawn(move || {
            lower_this_thread_priority();
            rt.block_on(async move {
                let Ok(shared) = shared_rx.await else { return };
                let up = Upstreams::new(
                    shared.cfg.connect_timeout,
                    shared.cfg.pool_idle_timeout,
                    MIRROR_CONCURRENCY,
                );
                let slots = Arc::new(Semaphore::new(MIRROR_CONCURRENCY));
                let dispatch = async {
                    while let Some(job) = rx.recv().await {
                        // Waiting here for a slot is what fills the queue when the
                        // mirror app is slow.
                        let Ok(permit) = slots.clone().acquire_owned().await else {
                            return;
                        };
                        let (shared, up) = (shared.clone(), up.clone());
                        tokio::spawn(async move {
                            run(&shared, &up, job).await;
                            drop(permit);
                        });
                    }
                };
                tokio::select! {
                    () = dispatch => {}
                    _ = stop.wait_for(|s| *s) => {}
                }
            });
        })?;
    Ok((queue, hand_over))
}

/// Nice value of the mirror thread: the lowest, so that the data-plane threads (nice 0)
/// get nearly all of a core both want; mirrors get whatever CPU is idle.
const MIRROR_NICE: i32 = 19;

/// Lowers the calling thread's scheduling priority (Linux: `setpriority` with a thread
/// id acts on that thread only). Best effort.
fn lower_this_thread_priority() {
    let tid = rustix::thread::gettid();
    if rustix::process::setpriority_process(Some(tid), MIRROR_NICE).is_err() {
        tracing::debug!("could not lower the mirror thread's priority");
    }
}

/// Sends one copy, waits for the served answer, compares: all on the mirror thread.
async fn run(shared: &Arc<Shared>, up: &Arc<Upstreams>, job: MirrorJob) {
    let mirror = job.mirror.clone();
    let candidate = send_copy(shared, up, &mirror.app, &job.copy).await;
    let MirrorJob { copy, primary, .. } = job;
    // The served body normally ended long ago; the wait is bounded in case its client
    // reads slowly.
    let wait = shared.table.load().server.upstream_timeout * 2;
    let captured = match tokio::time::timeout(wait, primary).await {
        Ok(Ok(c)) => c,
        _ => Err(SkipReason::PrimaryIncomplete),
    };
    let recorder = &mirror.recorder;
    match captured {
        Ok(served) => {
            let request = ShadowRequest::new(copy.method, copy.target, copy.headers, copy.body);
            let primary =
                ShadowResponse::new(served.status, served.headers, served.body, served.latency);
            let candidate = candidate.as_ref().map(|(r, _)| r).map_err(|f| *f);
            recorder.observe(&request, &primary, candidate, None);
        }
        Err(reason) => recorder.skip(reason),
    }
}

async fn send_copy(
    shared: &Shared,
    up: &Arc<Upstreams>,
    app: &str,
    copy: &Copy,
) -> Result<(ShadowResponse, Option<Held>), ErrorKind> {
    let table = shared.table.load_full();
    let app = table
        .apps
        .iter()
        .find(|a| &*a.cfg.name == app)
        .ok_or(ErrorKind::Connect)?;
    let backend = app.pool.select(None, None).ok_or(ErrorKind::Connect)?;
    // Not held to the app's `max_in_flight_per_worker` (the mirror's own queue bounds
    // copies), but counted in its workers' slots.
    let in_flight = app.pool.begin(&backend);
    app.metrics.mirrored.fetch_add(1, Ordering::Relaxed);
    let req = Outgoing {
        method: &copy.method,
        target: &copy.target,
        headers: &copy.headers,
        client_ip: &copy.client_ip,
        body: &copy.body,
        upgrade: None,
        trusted: copy.trusted,
        https: copy.https,
    };
    let start = Instant::now();
    let lim = shared.table.load().server.clone();
    let max = lim.max_body_bytes as usize;
    let budget = shared
        .mirror_queue
        .as_ref()
        .map(|q| q.budget.clone())
        .ok_or(ErrorKind::Connect)?;
    let exchange = async {
        let mut answer = up
            .send(backend.addr(), &req, &Attempt::default())
            .await
            .map_err(|_| ErrorKind::Connect)?;
        in_flight.head_received();
        let limit = max.min(budget.available());
        let body = answer
            .body
            .read_up_to(limit)
            .await
            .map_err(|_| ErrorKind::Connect)?
            .ok_or(ErrorKind::TooLarge)?;
        let held = budget.reserve(body.len());
        Ok((
            ShadowResponse::new(answer.status, answer.headers, body, start.elapsed()),
            held,
        ))
    };
    tokio::time::timeout(lim.upstream_timeout, exchange)
        .await
        .unwrap_or(Err(ErrorKind::Timeout))
}
