//! Replay: every request of a data set to every side, every pair compared.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use http::HeaderMap;
use scalpel_requests::{RenderedRequest, RequestSet};

use crate::client::{Upstream, buffered_client, exchange};
use crate::model::ShadowRequest;
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

/// Live progress of a replay, readable from another task.
#[derive(Debug, Default)]
pub struct ReplayProgress {
    done: AtomicU64,
    total: AtomicU64,
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
}

/// How a replay went, beside what the recorder counted.
#[derive(Debug, Clone, Copy)]
pub struct ReplayStats {
    /// Requests sent (to each side).
    pub requests: u64,
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
    for _ in 0..workers {
        let (set, cfg, recorder, progress, next, client) = (
            set.clone(),
            cfg.clone(),
            recorder.clone(),
            progress.clone(),
            next.clone(),
            client.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut rendered = RenderedRequest::default();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    break;
                }
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
                        Some(s) => Some(exchange(&client, s, &req, t, max).await),
                        None => None,
                    }
                };
                let (p, c, s) = tokio::join!(
                    exchange(&client, &cfg.primary, &req, t, max),
                    exchange(&client, &cfg.candidate, &req, t, max),
                    secondary
                );
                match p {
                    Ok(p) => {
                        recorder.observe(
                            &req,
                            &p,
                            c.as_ref().map_err(|f| *f),
                            s.as_ref().map(|r| r.as_ref().map_err(|f| *f)),
                        );
                    }
                    Err(f) => recorder.primary_failed(&req.path_and_query, f),
                }
                progress.done.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    ReplayStats {
        requests: total,
        elapsed: start.elapsed(),
    }
}
