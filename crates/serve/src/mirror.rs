//! A/B with a mirror: a sample of a route's requests is also sent to a third app, and
//! its answer is compared with the one the client got, by `scalpel-shadow`'s
//! [`Recorder`] (which compares with `scalpel-diff`). The client never waits for the
//! mirror: the copy runs in its own task, at most [`MIRROR_CONCURRENCY`] at a time
//! (further copies are skipped and counted), and the served body is copied frame by
//! frame as it streams out.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, Method, StatusCode};
use scalpel_diff::{NoiseRule, RouteNormalizer};
use scalpel_shadow::{
    CompareSettings, Failure, Recorder, Redactor, ShadowRequest, ShadowResponse, SkipReason,
};
use tokio::sync::{Semaphore, oneshot};

use crate::config::MirrorConfig;
use crate::h1::Outgoing;
use crate::pool::fast_random;
use crate::proxy::Shared;
use crate::upstream::Upstreams;

/// Mirror exchanges in flight per route; beyond it copies are skipped (`queue_full`).
pub(crate) const MIRROR_CONCURRENCY: usize = 64;

/// Samples kept per route for `/mirror`.
const MAX_SAMPLES: usize = 50;

/// The served response, captured for comparison, or why it could not be.
pub(crate) type Captured = Result<(StatusCode, HeaderMap, Bytes, Duration), SkipReason>;

#[derive(Debug)]
pub(crate) struct Mirror {
    pub(crate) app: usize,
    percent: f64,
    pub(crate) recorder: Arc<Recorder>,
    slots: Arc<Semaphore>,
}

impl Mirror {
    /// Opens the route's store when it has one (its counters and samples resume).
    pub(crate) fn new(
        cfg: &MirrorConfig,
        route: &str,
    ) -> Result<Self, scalpel_shadow::ShadowError> {
        let settings = CompareSettings::new(
            cfg.comparer.clone(),
            RouteNormalizer::default(),
            NoiseRule::default(),
            Redactor::default(),
            MAX_SAMPLES,
            false,
        );
        let recorder = match &cfg.store {
            Some(path) => Recorder::with_store(
                settings,
                path,
                &[
                    ("mode", "scalpel serve mirror".to_string()),
                    ("route", route.to_string()),
                ],
            )?,
            None => Recorder::new(settings, None),
        };
        Ok(Self {
            app: cfg.app,
            percent: cfg.percent,
            recorder: Arc::new(recorder),
            slots: Arc::new(Semaphore::new(MIRROR_CONCURRENCY)),
        })
    }

    fn sampled(&self) -> bool {
        self.percent >= 100.0 || ((fast_random() % 1_000_000) as f64) < self.percent * 10_000.0
    }

    /// Starts the copy of `req` to the mirror app, when sampled and a slot is free;
    /// returns where to send the served response once its body has ended.
    pub(crate) fn begin(
        &self,
        shared: &Arc<Shared>,
        up: &Arc<Upstreams>,
        req: &Outgoing<'_>,
    ) -> Option<oneshot::Sender<Captured>> {
        if !self.sampled() {
            return None;
        }
        let Ok(permit) = self.slots.clone().try_acquire_owned() else {
            self.recorder.skip(SkipReason::QueueFull);
            return None;
        };
        let (tx, rx) = oneshot::channel::<Captured>();
        let shared = shared.clone();
        let up = up.clone();
        let recorder = self.recorder.clone();
        let app = self.app;
        let copy = Copy {
            method: req.method.clone(),
            target: req.target.to_string(),
            headers: req.headers.clone(),
            client_ip: req.client_ip.to_string(),
            body: req.body.clone(),
        };
        // ShadowRequest has no body/header accessors, so the copy is built from ours.
        let shadow = ShadowRequest::new(
            copy.method.clone(),
            copy.target.clone(),
            copy.headers.clone(),
            copy.body.clone(),
        );
        tokio::spawn(async move {
            let _permit = permit;
            let candidate = send_copy(&shared, &up, app, &copy).await;
            match rx.await {
                Ok(Ok((status, headers, body, latency))) => {
                    let primary = ShadowResponse::new(status, headers, body, latency);
                    recorder.observe(&shadow, &primary, candidate.as_ref().map_err(|f| *f), None);
                }
                Ok(Err(reason)) => recorder.skip(reason),
                Err(_) => recorder.skip(SkipReason::PrimaryIncomplete),
            }
        });
        Some(tx)
    }
}

/// The mirror's own copy of a request, sent after the client's request has moved on.
struct Copy {
    method: Method,
    target: String,
    headers: HeaderMap,
    client_ip: String,
    body: Bytes,
}

async fn send_copy(
    shared: &Shared,
    up: &Arc<Upstreams>,
    app: usize,
    copy: &Copy,
) -> Result<ShadowResponse, Failure> {
    let app = &shared.apps[app];
    let backend = app.pool.select(None).ok_or(Failure::Connect)?;
    let _in_flight = backend.begin();
    app.metrics.mirrored.fetch_add(1, Ordering::Relaxed);
    let req = Outgoing {
        method: &copy.method,
        target: &copy.target,
        headers: &copy.headers,
        client_ip: &copy.client_ip,
        body: &copy.body,
        upgrade: None,
    };
    let start = Instant::now();
    let max = shared.cfg.max_body_bytes as usize;
    let exchange = async {
        let mut answer = up
            .send(backend.addr(), &req)
            .await
            .map_err(|_| Failure::Connect)?;
        backend.answered();
        let body = answer
            .body
            .read_up_to(max)
            .await
            .map_err(|_| Failure::Connect)?
            .ok_or(Failure::TooLarge)?;
        Ok(ShadowResponse::new(
            answer.status,
            answer.headers,
            body,
            start.elapsed(),
        ))
    };
    tokio::time::timeout(shared.cfg.upstream_timeout, exchange)
        .await
        .unwrap_or(Err(Failure::Timeout))
}

/// Copies a served body as it streams, up to a limit, and hands it over when it ends.
#[derive(Debug)]
pub(crate) struct Tee {
    tx: Option<oneshot::Sender<Captured>>,
    status: StatusCode,
    headers: HeaderMap,
    buf: BytesMut,
    limit: usize,
    start: Instant,
}

impl Tee {
    pub(crate) fn new(
        tx: oneshot::Sender<Captured>,
        status: StatusCode,
        headers: HeaderMap,
        limit: usize,
        start: Instant,
    ) -> Self {
        Self {
            tx: Some(tx),
            status,
            headers,
            buf: BytesMut::new(),
            limit,
            start,
        }
    }

    pub(crate) fn data(&mut self, d: &Bytes) {
        if self.tx.is_none() {
            return;
        }
        if self.buf.len() + d.len() > self.limit {
            self.finish(Err(SkipReason::ResponseTooLarge));
        } else {
            self.buf.extend_from_slice(d);
        }
    }

    pub(crate) fn end(&mut self) {
        if self.tx.is_some() {
            let body = std::mem::take(&mut self.buf).freeze();
            let headers = std::mem::take(&mut self.headers);
            self.finish(Ok((self.status, headers, body, self.start.elapsed())));
        }
    }

    pub(crate) fn fail(&mut self) {
        self.finish(Err(SkipReason::PrimaryIncomplete));
    }

    fn finish(&mut self, c: Captured) {
        if let Some(tx) = self.tx.take() {
            let _ = tx.send(c);
        }
    }
}

impl Drop for Tee {
    fn drop(&mut self) {
        // The client went away or the body broke before its end.
        self.fail();
    }
}
