//! The comparison engine shared by the proxy, replay and `scalpel serve`'s A/B mode:
//! responses in, counters, samples and store rows out.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use std::borrow::Cow;
use std::cell::OnceCell;

use bytes::Bytes;
use http::HeaderMap;
use http::header::CONTENT_ENCODING;
use scalpel_diff::{Comparer, DecodeError, Difference, NoiseRule, RouteNormalizer, decode_body};
use scalpel_http::ErrorKind;

use crate::ShadowError;
use crate::model::{ShadowRequest, ShadowResponse, SkipReason};
use crate::recent::{EndpointLatency, LatencyFigures, LiveTally, RecentDifference};
use crate::redact::{Redacted, Redactor};
use crate::store::Store;
use crate::tally::{Sample, SampleResponse, Summary, Tally, signature};

/// At most this many samples per distinct difference signature, so the sample budget
/// shows many kinds of difference rather than one kind many times.
const SAMPLES_PER_SIGNATURE: usize = 3;

/// The default cap on a body once its `Content-Encoding` is undone.
pub const DEFAULT_MAX_DECODED_BODY: usize = 16 << 20;

/// The comparison rules of a run.
#[derive(Debug, Clone)]
pub struct CompareSettings {
    comparer: Comparer,
    routes: RouteNormalizer,
    noise: NoiseRule,
    redactor: Redactor,
    max_samples: usize,
    secondary: bool,
    max_decoded_body: usize,
    method_routes: bool,
}

impl CompareSettings {
    /// Rules: how to compare, how to name endpoints, the noise thresholds, what to
    /// redact, how many samples to keep, and whether a secondary takes part.
    pub fn new(
        comparer: Comparer,
        routes: RouteNormalizer,
        noise: NoiseRule,
        redactor: Redactor,
        max_samples: usize,
        secondary: bool,
    ) -> Self {
        Self {
            comparer,
            routes,
            noise,
            redactor,
            max_samples,
            secondary,
            max_decoded_body: DEFAULT_MAX_DECODED_BODY,
            method_routes: false,
        }
    }

    /// Names routes with their method when it is not GET (`POST /v1/orders` apart from
    /// `/v1/orders`): for recorded traffic, where one path takes several methods.
    pub fn with_method_routes(mut self, on: bool) -> Self {
        self.method_routes = on;
        self
    }

    /// Caps a body once its `Content-Encoding` (gzip, deflate, br, zstd) is undone; a pair
    /// with a side over it is not compared (skipped as `decoded_too_large`). Default
    /// [`DEFAULT_MAX_DECODED_BODY`].
    pub fn with_max_decoded_body(mut self, bytes: usize) -> Self {
        self.max_decoded_body = bytes;
        self
    }

    /// The noise rule.
    pub fn noise(&self) -> &NoiseRule {
        &self.noise
    }

    /// The redaction rules (samples, the store, the proxy's capture file).
    pub fn redactor(&self) -> &Redactor {
        &self.redactor
    }
}

/// What [`Recorder::observe`] found for one exchange.
#[derive(Debug, Clone)]
pub struct Observation {
    /// The route pattern.
    pub endpoint: String,
    /// Primary vs candidate, empty when they match.
    pub differences: Vec<Difference>,
    /// Primary vs secondary.
    pub noise_differences: Vec<Difference>,
}

#[derive(Debug, Default)]
struct Inner {
    tally: Tally,
    samples: Vec<Sample>,
    per_signature: HashMap<String, usize>,
    dirty: bool,
    live: LiveTally,
}

/// Compares exchanges and keeps the results: counters in memory, samples (redacted) in
/// memory and, with a store, durably. Thread-safe; share it in an `Arc`.
///
/// ```no_run
/// # use scalpel_shadow::*;
/// # use scalpel_diff::*;
/// # fn demo(req: ShadowRequest, p: ShadowResponse, c: ShadowResponse) {
/// let settings = CompareSettings::new(Comparer::new(), RouteNormalizer::default(),
///     NoiseRule::default(), Redactor::default(), 50, false);
/// let recorder = Recorder::new(settings, None);
/// let seen = recorder.observe(&req, &p, Ok(&c), None);
/// println!("{} differences; consistency {}%", seen.unwrap().differences.len(),
///     recorder.summary().consistency_percent);
/// # }
/// ```
#[derive(Debug)]
pub struct Recorder {
    settings: CompareSettings,
    inner: Mutex<Inner>,
    store: Option<Store>,
    /// Skips counted without the lock (the proxy's request path must never wait on a
    /// mutex that a low-priority mirror thread may hold), folded into the tally whenever
    /// it is read or written. Indexed like [`SkipReason::ALL`].
    pending_skips: [AtomicU64; SkipReason::ALL.len()],
    final_commit_ok: AtomicBool,
}

impl Recorder {
    /// A recorder writing to `store`, if given.
    pub fn new(settings: CompareSettings, store: Option<Store>) -> Self {
        Self {
            settings,
            inner: Mutex::new(Inner::default()),
            store,
            pending_skips: Default::default(),
            final_commit_ok: AtomicBool::new(true),
        }
    }

    /// Opens `path` as the store, resuming its counters and samples.
    pub fn with_store(
        settings: CompareSettings,
        path: &Path,
        meta: &[(&str, String)],
    ) -> Result<Self, ShadowError> {
        let mut meta: Vec<(&str, String)> = meta.to_vec();
        let noise = settings.noise;
        meta.push((
            "noise_relative_percent",
            noise.relative_percent().to_string(),
        ));
        meta.push((
            "noise_absolute_percent",
            noise.absolute_percent().to_string(),
        ));
        meta.push(("secondary", settings.secondary.to_string()));
        let (store, existing) = Store::open(path, &meta)?;
        let mut inner = Inner {
            tally: existing.tally,
            ..Inner::default()
        };
        for s in existing.samples {
            *inner
                .per_signature
                .entry(signature(&s.differences))
                .or_default() += 1;
            inner.samples.push(s);
        }
        Ok(Self {
            settings,
            inner: Mutex::new(inner),
            store: Some(store),
            pending_skips: Default::default(),
            final_commit_ok: AtomicBool::new(true),
        })
    }

    /// The rules in use.
    pub fn settings(&self) -> &CompareSettings {
        &self.settings
    }

    /// The route pattern of a request target.
    pub fn endpoint(&self, path_and_query: &str) -> String {
        self.settings.routes.normalize(path_and_query)
    }

    /// The route of a request: its pattern, with the method when the settings ask for
    /// it and it is not GET.
    fn endpoint_of(&self, req: &ShadowRequest) -> String {
        let route = self.endpoint(&req.path_and_query);
        if self.settings.method_routes && req.method != http::Method::GET {
            format!("{} {route}", req.method)
        } else {
            route
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic elsewhere must not stop the counting.
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        for (reason, pending) in SkipReason::ALL.iter().zip(&self.pending_skips) {
            let n = pending.swap(0, Ordering::Relaxed);
            if n > 0 {
                *inner.tally.skipped.entry(*reason).or_default() += n;
                inner.dirty = true;
            }
        }
        inner
    }

    /// Compares one exchange and records it. `candidate` (or the secondary) may have
    /// failed; a failed candidate is counted as an error and nothing is compared. Returns
    /// `None` in that case.
    pub fn observe(
        &self,
        req: &ShadowRequest,
        primary: &ShadowResponse,
        candidate: Result<&ShadowResponse, ErrorKind>,
        secondary: Option<Result<&ShadowResponse, ErrorKind>>,
    ) -> Option<Observation> {
        self.record(req, Ok(primary), candidate, secondary)
    }

    /// Records one exchange in which any side may have failed. When the primary or the
    /// candidate failed, the request counts once as failed (`errors`) and each side's
    /// failure is counted by kind (`primary:timeout`, `candidate:body_cut`…) — all of them,
    /// not only the first. Otherwise the pair is compared, bodies decoded per
    /// `Content-Encoding` first; a secondary that failed is counted by kind and the pair
    /// is compared without noise figures. Returns what was found, or `None` when nothing
    /// was compared.
    pub fn record(
        &self,
        req: &ShadowRequest,
        primary: Result<&ShadowResponse, ErrorKind>,
        candidate: Result<&ShadowResponse, ErrorKind>,
        secondary: Option<Result<&ShadowResponse, ErrorKind>>,
    ) -> Option<Observation> {
        let endpoint = self.endpoint_of(req);
        let (primary, candidate) = match (primary, candidate) {
            (Ok(p), Ok(c)) => (p, c),
            (p, c) => {
                self.record_failed(&endpoint, p.err(), c.err(), secondary);
                return None;
            }
        };
        let max = self.settings.max_decoded_body;
        let (p, c) = (Side::new(primary, max), Side::new(candidate, max));
        let Some(differences) = compare_sides(&self.settings.comparer, &p, &c) else {
            self.skip(SkipReason::DecodedTooLarge);
            return None;
        };
        let (s, noise_differences) = self.noise(&endpoint, &p, secondary);
        let mut inner = self.lock();
        inner
            .tally
            .record(&endpoint, &differences, &noise_differences);
        inner.dirty = true;
        inner.live.latency(
            &endpoint,
            primary.latency.as_micros() as u64,
            candidate.latency.as_micros() as u64,
        );
        if !differences.is_empty() {
            let recent = self.recent(&endpoint, req, &differences);
            inner.live.difference(recent);
        }
        let found = Observation {
            endpoint,
            differences,
            noise_differences,
        };
        let sample = self.keep_sample(&mut inner, &found, req, [&p, &c], s.as_ref());
        if let (Some(store), Some(s)) = (&self.store, sample) {
            // The sample and the counters that include it commit together.
            let tally = inner.tally.clone();
            inner.dirty = false;
            drop(inner);
            store.write(Some(tally), Some(s));
        }
        Some(found)
    }

    /// A request the primary or the candidate failed: counted once as failed, and each
    /// failed side (the secondary's too) by kind.
    fn record_failed(
        &self,
        endpoint: &str,
        primary: Option<ErrorKind>,
        candidate: Option<ErrorKind>,
        secondary: Option<Result<&ShadowResponse, ErrorKind>>,
    ) {
        let mut inner = self.lock();
        let ep = inner.tally.endpoint(endpoint);
        ep.failed += 1;
        for (side, r) in [("primary", primary), ("candidate", candidate)] {
            if let Some(f) = r {
                inner.tally.error(endpoint, side, f);
            }
        }
        if let Some(Err(f)) = secondary {
            inner.tally.error(endpoint, "secondary", f);
        }
        inner.dirty = true;
    }

    /// The secondary's side and how it differs from the primary (the noise); none when
    /// there is no secondary, it failed, or its body was too large to decode (both counted
    /// as the secondary's failure).
    fn noise<'a>(
        &self,
        endpoint: &str,
        primary: &Side<'_>,
        secondary: Option<Result<&'a ShadowResponse, ErrorKind>>,
    ) -> (Option<Side<'a>>, Vec<Difference>) {
        let s = match secondary {
            Some(Ok(s)) => Side::new(s, self.settings.max_decoded_body),
            Some(Err(f)) => {
                self.lock().tally.error(endpoint, "secondary", f);
                return (None, Vec::new());
            }
            None => return (None, Vec::new()),
        };
        match compare_sides(&self.settings.comparer, primary, &s) {
            Some(d) => (Some(s), d),
            None => {
                self.lock()
                    .tally
                    .error(endpoint, "secondary", ErrorKind::TooLarge);
                (Some(s), Vec::new())
            }
        }
    }

    /// Keeps a sample of a pair that differs (really, or only as noise) while there is
    /// room: at most `max_samples` in all, and a few per difference signature so that one
    /// frequent difference does not crowd out the rare ones.
    fn keep_sample(
        &self,
        inner: &mut Inner,
        found: &Observation,
        req: &ShadowRequest,
        [p, c]: [&Side<'_>; 2],
        s: Option<&Side<'_>>,
    ) -> Option<Sample> {
        let (differences, noise) = (&found.differences, &found.noise_differences);
        if differences.is_empty() && noise.is_empty() {
            return None;
        }
        let sig = if differences.is_empty() {
            format!("noise\n{}", signature(noise))
        } else {
            signature(differences)
        };
        let taken = inner.per_signature.get(&sig).copied().unwrap_or(0);
        if inner.samples.len() >= self.settings.max_samples || taken >= SAMPLES_PER_SIGNATURE {
            return None;
        }
        *inner.per_signature.entry(sig).or_default() += 1;
        let (sample, withheld) =
            self.build_sample(&found.endpoint, req, p, c, s, differences, noise);
        for part in withheld {
            *inner
                .tally
                .redaction_withheld
                .entry(part.to_string())
                .or_default() += 1;
        }
        inner.samples.push(sample.clone());
        Some(sample)
    }

    /// Counts a request that was chosen for comparison but could not be compared.
    /// Lock-free: safe to call on a latency-critical path.
    pub fn skip(&self, reason: SkipReason) {
        let i = SkipReason::ALL
            .iter()
            .position(|r| *r == reason)
            .unwrap_or(0);
        self.pending_skips[i].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a failed primary whose other sides were not asked (the pair cannot be
    /// compared). When they were, use [`Recorder::record`], which counts every side.
    pub fn primary_failed(&self, path_and_query: &str, failure: ErrorKind) {
        let endpoint = self.endpoint(path_and_query);
        let mut inner = self.lock();
        inner.tally.endpoint(&endpoint).failed += 1;
        inner.tally.error(&endpoint, "primary", failure);
        inner.dirty = true;
    }

    /// The report model, with noise classified now.
    pub fn summary(&self) -> Summary {
        let inner = self.lock();
        inner
            .tally
            .summarize(&self.settings.noise, self.settings.secondary)
    }

    /// The newest exchanges (at most 50) whose primary and candidate differed, newest
    /// first, secrets redacted: the live pages' "newest differences".
    pub fn recent_differences(&self) -> Vec<RecentDifference> {
        self.lock().live.recent()
    }

    /// Primary and candidate latency per endpoint over the compared pairs so far.
    pub fn latencies(&self) -> Vec<EndpointLatency> {
        self.lock().live.latencies()
    }

    /// Primary and candidate latency over the pairs compared since the previous call
    /// (one caller: the live page's ticker).
    pub fn take_interval_latency(&self) -> (LatencyFigures, LatencyFigures) {
        self.lock().live.take_interval()
    }

    /// The samples kept so far.
    pub fn samples(&self) -> Vec<Sample> {
        self.lock().samples.clone()
    }

    /// Queues the counters for the store if they changed since the last write. Cheap when
    /// nothing changed; never blocks on SQLite.
    pub fn flush(&self) {
        let Some(store) = &self.store else { return };
        let mut inner = self.lock();
        if !inner.dirty {
            return;
        }
        let tally = inner.tally.clone();
        inner.dirty = false;
        drop(inner);
        if !store.write(Some(tally), None) {
            self.lock().dirty = true;
        }
    }

    /// Flushes and waits until the store committed everything (shutdown). Blocking.
    pub fn flush_and_sync(&self) {
        let Some(store) = &self.store else { return };
        store.sync();
        let failed_before = store.failed();
        // Always the whole counters, waited for: an earlier write may have been dropped
        // or refused by SQLite although nothing changed since.
        let tally = {
            let mut inner = self.lock();
            inner.dirty = false;
            inner.tally.clone()
        };
        let queued = store.write_waiting(tally);
        store.sync();
        self.final_commit_ok
            .store(queued && store.failed() == failed_before, Ordering::Relaxed);
    }

    /// Store messages dropped because the writer was behind.
    pub fn store_dropped(&self) -> u64 {
        self.store.as_ref().map_or(0, Store::dropped)
    }

    /// Store transactions SQLite refused (disk full, file locked past the busy time-out):
    /// what they held is not on disk unless a later write carried it.
    pub fn store_failed(&self) -> u64 {
        self.store.as_ref().map_or(0, Store::failed)
    }

    /// After [`Recorder::flush_and_sync`]: whether its final commit of the counters
    /// reached the disk (always `true` without a store).
    pub fn store_complete(&self) -> bool {
        self.final_commit_ok.load(Ordering::Relaxed)
    }

    fn recent(
        &self,
        endpoint: &str,
        req: &ShadowRequest,
        differences: &[Difference],
    ) -> RecentDifference {
        let r = &self.settings.redactor;
        RecentDifference {
            at_ms: now_ms(),
            endpoint: endpoint.to_string(),
            method: req.method.to_string(),
            target: r.target(&req.path_and_query),
            fields: r.differences(differences),
        }
    }

    /// A sample, secrets redacted, and the parts redaction withheld whole (`query`,
    /// `request_body`, `response_body` once per side), to be counted.
    #[allow(clippy::too_many_arguments)]
    fn build_sample(
        &self,
        endpoint: &str,
        req: &ShadowRequest,
        primary: &Side<'_>,
        candidate: &Side<'_>,
        secondary: Option<&Side<'_>>,
        differences: &[Difference],
        noise_differences: &[Difference],
    ) -> (Sample, Vec<&'static str>) {
        let r = &self.settings.redactor;
        let withheld = std::cell::RefCell::new(Vec::new());
        let count = |part: &'static str, out: Redacted<Bytes>| {
            if out.withheld {
                withheld.borrow_mut().push(part);
            }
            out.value
        };
        // Samples show bodies as compared: decoded (as they came when that failed).
        let resp = |x: &Side<'_>| SampleResponse {
            status: x.raw.status.as_u16(),
            headers: header_pairs(&r.headers(&x.raw.headers)),
            body: count(
                "response_body",
                r.redact_body(
                    &x.raw.headers,
                    &match x.decoded() {
                        Some(Cow::Owned(b)) => Bytes::copy_from_slice(b),
                        _ => x.raw.body.clone(),
                    },
                ),
            ),
        };
        // A compressed request body is decoded too, so that redaction can see into it.
        let request_body =
            match decode_body(&req.headers, &req.body, self.settings.max_decoded_body) {
                Ok(b) => Bytes::copy_from_slice(&b),
                Err(_) => req.body.clone(),
            };
        let target = r.redact_target(&req.path_and_query);
        if target.withheld {
            withheld.borrow_mut().push("query");
        }
        let sample = Sample {
            recorded_at_ms: now_ms(),
            endpoint: endpoint.to_string(),
            method: req.method.to_string(),
            target: target.value,
            request_headers: header_pairs(&r.headers(&req.headers)),
            request_body: count("request_body", r.redact_body(&req.headers, &request_body)),
            primary: resp(primary),
            candidate: resp(candidate),
            secondary: secondary.map(resp),
            differences: r.differences(differences),
            noise_differences: r.differences(noise_differences),
        };
        (sample, withheld.into_inner())
    }
}

/// One side's response, its body decoded per `Content-Encoding` only when needed (once).
struct Side<'a> {
    raw: &'a ShadowResponse,
    max: usize,
    decoded: OnceCell<Option<Cow<'a, [u8]>>>,
}

impl<'a> Side<'a> {
    fn new(raw: &'a ShadowResponse, max: usize) -> Self {
        Self {
            raw,
            max,
            decoded: OnceCell::new(),
        }
    }

    /// The body with its coding undone; as it came when the coding is unknown or the
    /// bytes are corrupt (so that it differs from a good body); `None` when the decoded
    /// body is over the cap.
    fn decoded(&self) -> Option<&Cow<'a, [u8]>> {
        self.decoded
            .get_or_init(
                || match decode_body(&self.raw.headers, &self.raw.body, self.max) {
                    Ok(b) => Some(b),
                    Err(DecodeError::TooLarge { .. }) => None,
                    Err(_) => Some(Cow::Borrowed(&self.raw.body[..])),
                },
            )
            .as_ref()
    }

    fn encoding_and_body_equal(&self, other: &Side<'_>) -> bool {
        self.raw.body == other.raw.body
            && self.raw.headers.get_all(CONTENT_ENCODING).iter().eq(other
                .raw
                .headers
                .get_all(CONTENT_ENCODING)
                .iter())
    }
}

/// Compares two sides; `None` when a body is over the decoded-size cap. Identical bytes
/// in the same coding are the same document and are not decoded (the common case of a
/// healthy run); otherwise both bodies are decoded first.
fn compare_sides(cmp: &Comparer, a: &Side<'_>, b: &Side<'_>) -> Option<Vec<Difference>> {
    let (ab, bb): (&[u8], &[u8]) = if a.encoding_and_body_equal(b) {
        (&a.raw.body, &b.raw.body)
    } else {
        (a.decoded()?, b.decoded()?)
    };
    Some(cmp.compare(
        &scalpel_diff::Response::new(a.raw.status.as_u16(), &a.raw.headers, ab),
        &scalpel_diff::Response::new(b.raw.status.as_u16(), &b.raw.headers, bb),
    ))
}

/// The wall-clock time in milliseconds since the Unix epoch, as samples and recent
/// differences carry it (0 on a clock before 1970).
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Headers for a sample: each value as text, or `base64:…` when it is not UTF-8 (never
/// replacement characters).
fn header_pairs(h: &HeaderMap) -> Vec<(String, String)> {
    h.iter()
        .map(|(k, v)| {
            let value = match std::str::from_utf8(v.as_bytes()) {
                Ok(t) => t.to_string(),
                Err(_) => {
                    use base64::Engine as _;
                    format!(
                        "base64:{}",
                        base64::engine::general_purpose::STANDARD.encode(v.as_bytes())
                    )
                }
            };
            (k.to_string(), value)
        })
        .collect()
}
