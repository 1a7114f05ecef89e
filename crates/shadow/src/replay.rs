//! Replay: every request of a data set to every side, every pair compared.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use http::HeaderMap;
use scalpel_requests::{RenderedRequest, RequestSet};

use tokio::sync::Notify;

use crate::client::{BufferedClient, ExchangeError, Upstream, buffered_client, exchange};
use crate::model::{Failure, ShadowRequest, ShadowResponse, SkipReason};
use crate::recorder::Recorder;

/// How a replay runs.
#[derive(Debug, Clone)]
pub struct ReplayConfig {
    /// The service that is right by definition.
    pub primary: Upstream,
    /// The service under test.
    pub candidate: Upstream,
    /// A second copy of the primary's code, to measure noise.
    pub secondary: Option<Upstream>,
    /// Requests in flight at once (each one goes to every side concurrently).
    pub concurrency: usize,
    /// Time-out of one exchange with one side, body included.
    pub timeout: Duration,
    /// Largest response body read; larger ones count as errors.
    pub max_body: usize,
}

/// Live progress of a replay, readable from another task, and its stop button.
#[derive(Debug, Default)]
pub struct ReplayProgress {
    done: AtomicU64,
    total: AtomicU64,
    stopping: AtomicBool,
    stop: Notify,
}

impl ReplayProgress {
    /// Requests finished (compared or failed).
    pub fn done(&self) -> u64 {
        self.done.load(Ordering::Relaxed)
    }

    /// Requests in the run.
    pub fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }

    /// Stops the replay now (e.g. at SIGINT): no further request is sent, and the
    /// exchanges in flight are abandoned and counted as skipped
    /// (`abandoned_at_shutdown`), so that the counters written afterwards hold every
    /// request that was sent.
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        self.stop.notify_waiters();
    }

    fn stopped(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }
}

/// How a replay went, beside what the recorder counted.
#[derive(Debug, Clone, Copy)]
pub struct ReplayStats {
    /// Requests sent (to each side).
    pub requests: u64,
    /// Requests of the data set that were never sent because the replay was stopped.
    pub not_sent: u64,
    /// Wall time.
    pub elapsed: Duration,
}

impl ReplayStats {
    /// Response pairs per second.
    pub fn pairs_per_second(&self) -> f64 {
        self.requests as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Sends each of the `set.len()` requests once to every side and records each exchange.
pub async fn replay(
    set: Arc<RequestSet>,
    cfg: ReplayConfig,
    recorder: Arc<Recorder>,
    progress: Arc<ReplayProgress>,
) -> ReplayStats {
    let total = set.len() as u64;
    progress.total.store(total, Ordering::Relaxed);
    let next = Arc::new(AtomicU64::new(0));
    let cfg = Arc::new(cfg);
    let workers = cfg.concurrency.clamp(1, 4096);
    let client = buffered_client(cfg.timeout, workers);
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(workers);
    let sent = Arc::new(AtomicU64::new(0));
    for _ in 0..workers {
        let (set, cfg, recorder, progress, next, client, sent) = (
            set.clone(),
            cfg.clone(),
            recorder.clone(),
            progress.clone(),
            next.clone(),
            client.clone(),
            sent.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut rendered = RenderedRequest::default();
            loop {
                if progress.stopped() {
                    break;
                }
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    break;
                }
                sent.fetch_add(1, Ordering::Relaxed);
                set.render_into(i, &mut rendered);
                let mut headers = HeaderMap::with_capacity(rendered.headers.len());
                for (k, v) in &rendered.headers {
                    headers.append(k.clone(), v.clone());
                }
                let req = ShadowRequest::new(
                    rendered.method.clone(),
                    rendered.path_and_query.clone(),
                    headers,
                    rendered.body.clone(),
                );
                let (t, max) = (cfg.timeout, cfg.max_body);
                let secondary = async {
                    match &cfg.secondary {
                        Some(s) => Some(ask(&client, s, &req, t, max).await),
                        None => None,
                    }
                };
                let work = async {
                    tokio::join!(
                        ask(&client, &cfg.primary, &req, t, max),
                        ask(&client, &cfg.candidate, &req, t, max),
                        secondary
                    )
                };
                let stop = progress.stop.notified();
                tokio::pin!(stop);
                // Registered before the check, so a stop in between is not missed.
                stop.as_mut().enable();
                if progress.stopped() {
                    recorder.skip(SkipReason::AbandonedAtShutdown);
                    break;
                }
                let (p, c, s) = tokio::select! {
                    r = work => r,
                    () = stop => {
                        recorder.skip(SkipReason::AbandonedAtShutdown);
                        break;
                    }
                };
                // Every side is counted, whichever failed (a dead primary does not
                // hide a dead candidate).
                recorder.record(
                    &req,
                    p.as_ref().map_err(|f| *f),
                    c.as_ref().map_err(|f| *f),
                    s.as_ref().map(|r| r.as_ref().map_err(|f| *f)),
                );
                progress.done.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    let sent = sent.load(Ordering::Relaxed).min(total);
    ReplayStats {
        requests: sent,
        not_sent: total - sent,
        elapsed: start.elapsed(),
    }
}

/// One side's whole answer (replay holds no byte budget: one request per worker).
async fn ask(
    client: &BufferedClient,
    upstream: &Upstream,
    req: &ShadowRequest,
    timeout: Duration,
    max_body: usize,
) -> Result<ShadowResponse, Failure> {
    exchange(client, upstream, req, timeout, max_body, None)
        .await
        .map_err(|e| match e {
            ExchangeError::Failed(f) => f,
            ExchangeError::OverBudget => Failure::TooLarge,
        })
}
