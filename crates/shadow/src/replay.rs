//! Replay: requests sent to every side, every pair compared.
//!
//! Requests come from a data set (a template over data, each row once) or from recorded
//! traffic (an access log, a HAR file, a capture): on the recorded schedule, its times
//! divided by a speed, or as a pool sent as fast as the concurrency allows. Every request
//! sent ends in exactly one of the recorder's counters.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use http::HeaderMap;
use scalpel_http::ErrorKind;
use scalpel_requests::{RecordedSource, RenderedRequest, RequestSet};
use tokio::sync::{Notify, Semaphore};

use crate::ShadowError;
use crate::client::{Client, ExchangeError, Reach, Upstream};
use crate::model::{ShadowRequest, ShadowResponse, SkipReason};
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
    /// Requests in flight at once (each one goes to every side concurrently). On a
    /// recorded schedule, the cap on requests in flight: a request that finds no free
    /// slot waits and is counted as late.
    pub concurrency: usize,
    /// Time-out of one exchange with one side, body included.
    pub timeout: Duration,
    /// Largest response body read; larger ones count as errors.
    pub max_body: usize,
}

impl ReplayConfig {
    /// The settings that cannot work, named by their flag: no request ever in flight
    /// (`-c 0`). [`Replay::connect`] checks it too.
    pub fn validate(&self) -> Result<(), ShadowError> {
        if self.concurrency == 0 {
            return Err(ShadowError::Setting {
                flag: "-c/--concurrency",
                problem: "must be at least 1".into(),
            });
        }
        Ok(())
    }
}

/// Where the replayed requests come from.
#[derive(Debug, Clone)]
pub enum ReplaySource {
    /// Every request of a data set, once.
    Set(Arc<RequestSet>),
    /// Recorded traffic, every usable request once.
    Recorded {
        /// The file, opened (checked and counted) already.
        source: RecordedSource,
        /// When each request is sent.
        schedule: Schedule,
    },
}

impl From<Arc<RequestSet>> for ReplaySource {
    fn from(set: Arc<RequestSet>) -> Self {
        ReplaySource::Set(set)
    }
}

/// When recorded requests are sent.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Schedule {
    /// At their recorded times after the first, divided by `speed` (2.0: twice as fast).
    Recorded {
        /// The speed-up, above zero.
        speed: f64,
    },
    /// In file order, as fast as the concurrency allows.
    Pool,
}

impl Schedule {
    /// The recorded schedule at `speed`; a speed that is not a number above zero is
    /// refused, naming `--speed`.
    pub fn recorded(speed: f64) -> Result<Schedule, ShadowError> {
        if !(speed.is_finite() && speed > 0.0) {
            return Err(ShadowError::Setting {
                flag: "--speed",
                problem: format!("{speed}: expected a number above 0 (2 replays twice as fast)"),
            });
        }
        Ok(Schedule::Recorded { speed })
    }
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
    /// Requests of the source that were never sent because the replay was stopped.
    pub not_sent: u64,
    /// Wall time.
    pub elapsed: Duration,
    /// On a recorded schedule: requests that found every slot (`concurrency`) taken at
    /// their time and waited for one.
    pub waited_for_slot: u64,
    /// On a recorded schedule: the most a request was sent after its time.
    pub max_lag: Duration,
}

impl ReplayStats {
    /// Response pairs per second.
    pub fn pairs_per_second(&self) -> f64 {
        self.requests as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// A replay whose upstreams are checked and ready: [`Replay::connect`], then
/// [`Replay::run`].
#[derive(Debug)]
pub struct Replay {
    cfg: ReplayConfig,
    clients: Clients,
    reach: Vec<(&'static str, String, Reach)>,
}

#[derive(Debug, Clone)]
struct Clients {
    primary: Arc<Client>,
    candidate: Arc<Client>,
    secondary: Option<Arc<Client>>,
}

impl Replay {
    /// Makes a client per upstream and checks each with one connection: a certificate
    /// that does not verify or is for another name, a server that refuses a required h2,
    /// an unusable CA file fail here, before any request. An upstream that does not
    /// answer is only noted ([`Replay::upstreams`]): its requests fail and are counted.
    pub async fn connect(cfg: ReplayConfig) -> Result<Replay, ShadowError> {
        cfg.validate()?;
        let workers = cfg.concurrency.clamp(1, 4096);
        let one = async |role: &'static str, up: &Upstream| {
            let err = |error| ShadowError::Upstream {
                role,
                url: up.to_string(),
                error,
            };
            let client = Client::new(up, cfg.timeout, None, workers)
                .await
                .map_err(err)?;
            let reach = client.check(role).await?;
            Ok::<_, ShadowError>((client, (role, up.describe(), reach)))
        };
        let (primary, p) = one("primary", &cfg.primary).await?;
        let (candidate, c) = one("candidate", &cfg.candidate).await?;
        let mut reach = vec![p, c];
        let secondary = match &cfg.secondary {
            Some(s) => {
                let (client, r) = one("secondary", s).await?;
                reach.push(r);
                Some(client)
            }
            None => None,
        };
        Ok(Replay {
            cfg,
            clients: Clients {
                primary,
                candidate,
                secondary,
            },
            reach,
        })
    }

    /// Each upstream (`primary`, `candidate`, `secondary`), how it is reached, and what
    /// the check found.
    pub fn upstreams(&self) -> &[(&'static str, String, Reach)] {
        &self.reach
    }

    /// Sends every request of `source` once to every side and records each exchange.
    /// Fails only when a recorded file cannot be read on (it was truncated meanwhile);
    /// what was sent until then is recorded.
    pub async fn run(
        &self,
        source: impl Into<ReplaySource>,
        recorder: Arc<Recorder>,
        progress: Arc<ReplayProgress>,
    ) -> Result<ReplayStats, ShadowError> {
        let run = Run {
            cfg: Arc::new(self.cfg.clone()),
            clients: self.clients.clone(),
            recorder,
            progress,
            sent: Arc::new(AtomicU64::new(0)),
        };
        let start = Instant::now();
        let (total, timing) = match source.into() {
            ReplaySource::Set(set) => {
                let total = set.len() as u64;
                run.progress.total.store(total, Ordering::Relaxed);
                run.set(set).await;
                (total, Ok((0, Duration::ZERO)))
            }
            ReplaySource::Recorded { source, schedule } => {
                let total = source.len();
                run.progress.total.store(total, Ordering::Relaxed);
                let timing = match schedule {
                    Schedule::Pool => run.pool(&source).await.map(|()| (0, Duration::ZERO)),
                    Schedule::Recorded { speed } => run.scheduled(&source, speed).await,
                };
                (total, timing)
            }
        };
        let (waited_for_slot, max_lag) = timing?;
        let sent = run.sent.load(Ordering::Relaxed).min(total);
        Ok(ReplayStats {
            requests: sent,
            not_sent: total - sent,
            elapsed: start.elapsed(),
            waited_for_slot,
            max_lag,
        })
    }
}

/// [`Replay::connect`] then [`Replay::run`].
pub async fn replay(
    source: impl Into<ReplaySource>,
    cfg: ReplayConfig,
    recorder: Arc<Recorder>,
    progress: Arc<ReplayProgress>,
) -> Result<ReplayStats, ShadowError> {
    Replay::connect(cfg)
        .await?
        .run(source, recorder, progress)
        .await
}

/// The shared state of one run.
#[derive(Clone)]
struct Run {
    cfg: Arc<ReplayConfig>,
    clients: Clients,
    recorder: Arc<Recorder>,
    progress: Arc<ReplayProgress>,
    sent: Arc<AtomicU64>,
}

impl Run {
    fn workers(&self) -> usize {
        self.cfg.concurrency.clamp(1, 4096)
    }

    /// A data set: workers take the next index until every row was sent.
    async fn set(&self, set: Arc<RequestSet>) {
        let total = set.len() as u64;
        let next = Arc::new(AtomicU64::new(0));
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..self.workers() {
            let (run, set, next) = (self.clone(), set.clone(), next.clone());
            tasks.spawn(async move {
                let mut rendered = RenderedRequest::default();
                while !run.progress.stopped() {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= total {
                        break;
                    }
                    set.render_into(i, &mut rendered);
                    if !run.one(shadow_request(&rendered)).await {
                        break;
                    }
                }
            });
        }
        while tasks.join_next().await.is_some() {}
    }

    /// Recorded traffic as a pool: worker `w` of `W` sends every `W`-th usable request,
    /// in file order, as fast as its exchanges complete.
    async fn pool(&self, source: &RecordedSource) -> Result<(), ShadowError> {
        let workers = self.workers() as u64;
        let mut tasks = tokio::task::JoinSet::new();
        for w in 0..workers {
            let run = self.clone();
            let mut reader = source.share(w, workers);
            tasks.spawn(async move {
                let mut rendered = RenderedRequest::default();
                while !run.progress.stopped() {
                    match reader.next_into(&mut rendered) {
                        Ok(Some(_)) => {}
                        Ok(None) => break,
                        Err(e) => {
                            run.progress.stop();
                            return Err(ShadowError::from(e));
                        }
                    }
                    if !run.one(shadow_request(&rendered)).await {
                        break;
                    }
                }
                Ok(())
            });
        }
        let mut first_error = None;
        while let Some(done) = tasks.join_next().await {
            if let Ok(Err(e)) = done {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Recorded traffic on its schedule: each request at its recorded time divided by
    /// `speed`, at most `concurrency` in flight (a request that finds none free waits,
    /// and is counted). Returns how many waited and the longest lag behind schedule.
    async fn scheduled(
        &self,
        source: &RecordedSource,
        speed: f64,
    ) -> Result<(u64, Duration), ShadowError> {
        let slots = Arc::new(Semaphore::new(self.workers()));
        let mut reader = source.reader();
        let mut rendered = RenderedRequest::default();
        let mut tasks = tokio::task::JoinSet::new();
        let (mut waited, mut max_lag) = (0u64, Duration::ZERO);
        let start = tokio::time::Instant::now();
        let mut failed = None;
        while !self.progress.stopped() {
            let at = match reader.next_into(&mut rendered) {
                Ok(Some(r)) => r.at,
                Ok(None) => break,
                Err(e) => {
                    self.progress.stop();
                    failed = Some(ShadowError::from(e));
                    break;
                }
            };
            let due = start + at.div_f64(speed);
            if self.until(tokio::time::sleep_until(due)).await.is_none() {
                break;
            }
            let permit = match slots.clone().try_acquire_owned() {
                Ok(p) => p,
                Err(_) => {
                    waited += 1;
                    match self.until(slots.clone().acquire_owned()).await {
                        Some(Ok(p)) => p,
                        _ => break,
                    }
                }
            };
            max_lag = max_lag.max(tokio::time::Instant::now().saturating_duration_since(due));
            let (run, req) = (self.clone(), shadow_request(&rendered));
            tasks.spawn(async move {
                run.one(req).await;
                drop(permit);
            });
            // Reap what has finished, so a long replay holds only what is in flight.
            while tasks.try_join_next().is_some() {}
        }
        while tasks.join_next().await.is_some() {}
        match failed {
            Some(e) => Err(e),
            None => Ok((waited, max_lag)),
        }
    }

    /// Waits for `work` unless the replay is stopped first (`None` then).
    async fn until<T>(&self, work: impl Future<Output = T>) -> Option<T> {
        let stop = self.progress.stop.notified();
        tokio::pin!(stop);
        stop.as_mut().enable();
        if self.progress.stopped() {
            return None;
        }
        tokio::select! {
            r = work => Some(r),
            () = stop => None,
        }
    }

    /// Sends one request to every side and records the exchange; `false` when the replay
    /// was stopped meanwhile (the request is then counted as abandoned).
    async fn one(&self, req: ShadowRequest) -> bool {
        self.sent.fetch_add(1, Ordering::Relaxed);
        let (cfg, c) = (&self.cfg, &self.clients);
        let (t, max) = (cfg.timeout, cfg.max_body);
        let secondary = async {
            match &c.secondary {
                Some(s) => Some(ask(s, &req, t, max).await),
                None => None,
            }
        };
        let work = async {
            tokio::join!(
                ask(&c.primary, &req, t, max),
                ask(&c.candidate, &req, t, max),
                secondary
            )
        };
        let Some((p, c, s)) = self.until(work).await else {
            self.recorder.skip(SkipReason::AbandonedAtShutdown);
            return false;
        };
        // Every side is counted, whichever failed (a dead primary does not hide a dead
        // candidate).
        self.recorder.record(
            &req,
            p.as_ref().map_err(|f| *f),
            c.as_ref().map_err(|f| *f),
            s.as_ref().map(|r| r.as_ref().map_err(|f| *f)),
        );
        self.progress.done.fetch_add(1, Ordering::Relaxed);
        true
    }
}

/// A rendered request (template or recorded) as the shadow tools send it.
fn shadow_request(r: &RenderedRequest) -> ShadowRequest {
    let mut headers = HeaderMap::with_capacity(r.headers.len());
    for (k, v) in &r.headers {
        headers.append(k.clone(), v.clone());
    }
    ShadowRequest::new(
        r.method.clone(),
        r.path_and_query.clone(),
        headers,
        r.body.clone(),
    )
}

/// One side's whole answer (replay holds no byte budget: one request per worker).
async fn ask(
    client: &Client,
    req: &ShadowRequest,
    timeout: Duration,
    max_body: usize,
) -> Result<ShadowResponse, ErrorKind> {
    client
        .exchange(req, timeout, max_body, None)
        .await
        .map_err(|e| match e {
            ExchangeError::Failed(f) => f,
            ExchangeError::OverBudget => ErrorKind::TooLarge,
        })
}
