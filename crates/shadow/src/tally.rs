//! The counters of a shadow run and the summary (the report model) derived from them.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;
use scalpel_diff::{DiffKind, Difference, FieldCounts, NoiseRule, Verdict};
use scalpel_http::ErrorKind;
use serde::{Serialize, Serializer};

use crate::model::SkipReason;

/// Distinct difference signatures kept per endpoint; past that, a mismatching request is
/// counted as a real mismatch without its signature (conservative, bounded memory).
pub(crate) const MAX_SIGNATURES: usize = 4096;

/// Everything counted so far; small, and written to the store as rows.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Tally {
    pub(crate) skipped: BTreeMap<SkipReason, u64>,
    pub(crate) endpoints: BTreeMap<String, EndpointTally>,
    /// Parts of kept samples that redaction withheld whole because it could not read
    /// them (`request_body`, `response_body`, `query`).
    pub(crate) redaction_withheld: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct EndpointTally {
    pub(crate) compared: u64,
    /// Requests not compared because the primary or the candidate failed.
    pub(crate) failed: u64,
    /// Each side's failures by kind: `candidate:timeout`, `secondary:connect`,
    /// `primary:body_cut`… One failed request with two failed sides counts here twice.
    pub(crate) errors: BTreeMap<String, u64>,
    pub(crate) fields: BTreeMap<(String, DiffKind), FieldTally>,
    /// The set of raw (primary ≠ candidate) field keys of a request, as one string, and
    /// how many requests had exactly that set; the empty string is a full match.
    pub(crate) signatures: HashMap<String, u64>,
    pub(crate) signature_overflow: u64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct FieldTally {
    pub(crate) raw: u64,
    pub(crate) noise: u64,
}

/// The key of a difference in signatures: `kind path`.
pub(crate) fn field_key(d: &Difference) -> String {
    format!("{} {}", d.kind().as_str(), d.field())
}

fn parse_field_key(key: &str) -> Option<(DiffKind, &str)> {
    let (kind, path) = key.split_once(' ')?;
    Some((DiffKind::parse(kind)?, path))
}

/// A sorted, de-duplicated signature of a request's raw differences.
pub(crate) fn signature(diffs: &[Difference]) -> String {
    let mut keys: Vec<String> = diffs.iter().map(field_key).collect();
    keys.sort_unstable();
    keys.dedup();
    keys.join("\n")
}

impl Tally {
    pub(crate) fn endpoint(&mut self, endpoint: &str) -> &mut EndpointTally {
        if !self.endpoints.contains_key(endpoint) {
            self.endpoints
                .insert(endpoint.to_string(), EndpointTally::default());
        }
        self.endpoints.get_mut(endpoint).expect("just inserted")
    }

    pub(crate) fn record(&mut self, endpoint: &str, raw: &[Difference], noise: &[Difference]) {
        let ep = self.endpoint(endpoint);
        ep.compared += 1;
        let mut seen: Vec<(&str, DiffKind)> = Vec::new();
        for d in raw {
            if !seen.contains(&(d.field(), d.kind())) {
                seen.push((d.field(), d.kind()));
                ep.fields
                    .entry((d.field().to_string(), d.kind()))
                    .or_default()
                    .raw += 1;
            }
        }
        seen.clear();
        for d in noise {
            if !seen.contains(&(d.field(), d.kind())) {
                seen.push((d.field(), d.kind()));
                ep.fields
                    .entry((d.field().to_string(), d.kind()))
                    .or_default()
                    .noise += 1;
            }
        }
        let sig = signature(raw);
        if let Some(n) = ep.signatures.get_mut(&sig) {
            *n += 1;
        } else if ep.signatures.len() < MAX_SIGNATURES {
            ep.signatures.insert(sig, 1);
        } else {
            ep.signature_overflow += 1;
        }
    }

    pub(crate) fn error(&mut self, endpoint: &str, side: &str, failure: ErrorKind) {
        *self
            .endpoint(endpoint)
            .errors
            .entry(format!("{side}:{}", failure.name()))
            .or_default() += 1;
    }

    pub(crate) fn summarize(&self, rule: &NoiseRule, secondary: bool) -> Summary {
        let mut s = Summary {
            secondary,
            ..Summary::default()
        };
        for (reason, n) in &self.skipped {
            s.skipped += n;
            s.skipped_by_reason.insert(reason.as_str().to_string(), *n);
        }
        s.redaction_withheld = self.redaction_withheld.clone();
        for (name, ep) in &self.endpoints {
            let mut out = EndpointSummary {
                endpoint: name.clone(),
                compared: ep.compared,
                ..EndpointSummary::default()
            };
            let mut real: Vec<(&str, DiffKind)> = Vec::new();
            for ((path, kind), f) in &ep.fields {
                let verdict = if secondary {
                    rule.classify(FieldCounts {
                        raw: f.raw,
                        noise: f.noise,
                        total: ep.compared,
                    })
                } else if f.raw > 0 {
                    Verdict::Real
                } else {
                    Verdict::Noise
                };
                let row = FieldSummary {
                    path: path.clone(),
                    kind: *kind,
                    count: f.raw,
                    noise_count: secondary.then_some(f.noise),
                };
                match verdict {
                    Verdict::Real => {
                        real.push((path, *kind));
                        out.fields.push(row);
                    }
                    Verdict::Noise if f.raw > 0 || f.noise > 0 => {
                        s.noise.push(NoiseField {
                            endpoint: name.clone(),
                            path: path.clone(),
                            kind: *kind,
                            count: f.raw,
                            noise_count: f.noise,
                        });
                        out.noise.push(row);
                    }
                    Verdict::Noise => {}
                }
            }
            let mut mismatched = ep.signature_overflow;
            for (sig, n) in &ep.signatures {
                let is_real = !sig.is_empty()
                    && sig.split('\n').any(|key| {
                        parse_field_key(key).is_none_or(|(kind, path)| real.contains(&(path, kind)))
                    });
                if is_real {
                    mismatched += n;
                }
            }
            out.fields
                .sort_by(|a, b| b.count.cmp(&a.count).then(a.path.cmp(&b.path)));
            out.noise
                .sort_by(|a, b| b.count.cmp(&a.count).then(a.path.cmp(&b.path)));
            out.mismatched = mismatched.min(ep.compared);
            out.matched = ep.compared - out.mismatched;
            out.errors = ep.failed;
            out.errors_by_kind = ep.errors.clone();
            out.consistency_percent = percent(out.matched, out.compared);
            s.compared += out.compared;
            s.matched += out.matched;
            s.mismatched += out.mismatched;
            s.errors += out.errors;
            for (k, n) in &ep.errors {
                *s.errors_by_kind.entry(k.clone()).or_default() += n;
            }
            s.endpoints.push(out);
        }
        s.noise
            .sort_by(|a, b| b.count.cmp(&a.count).then(a.path.cmp(&b.path)));
        s.consistency_percent = percent(s.matched, s.compared);
        s.not_compared = s.errors + s.skipped;
        s.coverage_percent = percent(s.compared, s.compared + s.not_compared);
        s
    }
}

/// Consistency as a person should read it. When every chosen request was compared,
/// `matched / compared` ("100.00%"). When some were not, the figure is only known to lie
/// in a range — from "every request not compared would have differed" to "every one
/// would have matched" — and the range is shown ("61.98–100.00%"), so that a table never
/// reads 100 % over requests nobody compared. Floored to 2 decimals: 99.999 is never
/// shown as 100.00.
pub fn consistency_text(matched: u64, compared: u64, not_compared: u64) -> String {
    if not_compared == 0 {
        return format!("{}%", floor2(percent(matched, compared)));
    }
    let chosen = compared + not_compared;
    format!(
        "{}–{}%",
        floor2(percent(matched, chosen)),
        floor2(percent(matched + not_compared, chosen))
    )
}

impl Summary {
    /// [`consistency_text`] of the whole run.
    pub fn consistency_text(&self) -> String {
        consistency_text(self.matched, self.compared, self.not_compared)
    }
}

impl EndpointSummary {
    /// [`consistency_text`] of one endpoint (its failed requests are its un-compared
    /// ones; skips are counted for the whole run only).
    pub fn consistency_text(&self) -> String {
        consistency_text(self.matched, self.compared, self.errors)
    }
}

/// A percentage to 2 decimals, floored: 99.999 is never shown as 100.00.
pub(crate) fn floor2(v: f64) -> String {
    format!("{:.2}", (v * 100.0).floor() / 100.0)
}

fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

/// The result of a shadow run: what scripts read from `--json`.
///
/// Every request chosen for comparison ends in exactly one of `compared`, `errors` (the
/// primary or the candidate failed) and `skipped` (by reason, `abandoned_at_shutdown`
/// included). `mismatched` counts compared requests with at least one *real* difference;
/// requests whose only differences are noise count as matched, and the noisy fields are
/// listed apart in `noise`. `consistency_percent` is `matched / compared × 100` (0 when
/// nothing was compared): it says nothing about the `not_compared` requests, which is why
/// `coverage_percent` stands beside it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    /// Response pairs compared.
    pub compared: u64,
    /// Pairs without a real difference.
    pub matched: u64,
    /// Pairs with at least one real difference.
    pub mismatched: u64,
    /// Requests chosen for comparison but not compared (queue full, body too large,
    /// abandoned at shutdown…), by reason in `skipped_by_reason`.
    pub skipped: u64,
    /// Requests not compared because the primary or the candidate failed (time-out,
    /// connection error, body cut short). Each failed side is in `errors_by_kind`.
    pub errors: u64,
    /// `errors + skipped`: chosen requests that were not compared.
    pub not_compared: u64,
    /// `matched / compared × 100`.
    pub consistency_percent: f64,
    /// `compared / (compared + not_compared) × 100`: how much of what was chosen the
    /// consistency figure covers.
    pub coverage_percent: f64,
    /// Whether a secondary was configured (and noise classified).
    pub secondary: bool,
    /// `skipped` by reason.
    pub skipped_by_reason: BTreeMap<String, u64>,
    /// Failed sides by `side:kind` (`primary:timeout`, `candidate:body_cut`,
    /// `secondary:connect`…). When both sides of a request failed, both are here; a
    /// failed secondary does not stop the comparison, so it is here but not in `errors`.
    pub errors_by_kind: BTreeMap<String, u64>,
    /// Parts of the kept samples that `--redact` rules withheld whole (stored as
    /// `[REDACTED]`) because they could not be read: `request_body`, `response_body`
    /// (each side counts), `query`. Redaction fails closed: such a part is never stored
    /// in clear.
    pub redaction_withheld: BTreeMap<String, u64>,
    /// Per route pattern, sorted by name.
    pub endpoints: Vec<EndpointSummary>,
    /// Every noisy field of every endpoint.
    pub noise: Vec<NoiseField>,
}

/// One endpoint (route pattern) of a [`Summary`].
#[derive(Debug, Clone, Default, Serialize)]
pub struct EndpointSummary {
    /// The route pattern, e.g. `/v1/users/{id}/stats`.
    pub endpoint: String,
    /// Pairs compared.
    pub compared: u64,
    /// Pairs without a real difference.
    pub matched: u64,
    /// Pairs with a real difference.
    pub mismatched: u64,
    /// Requests not compared because the primary or the candidate failed.
    pub errors: u64,
    /// Failed sides by `side:kind`.
    pub errors_by_kind: BTreeMap<String, u64>,
    /// `matched / compared × 100`.
    pub consistency_percent: f64,
    /// Fields with real differences, most frequent first.
    pub fields: Vec<FieldSummary>,
    /// Fields classified as noise.
    pub noise: Vec<FieldSummary>,
}

/// How often one field differed.
#[derive(Debug, Clone, Serialize)]
pub struct FieldSummary {
    /// The field path with `[*]` for indices (`$.items[*].ts`), or `status`,
    /// `header:NAME`, `body`.
    pub path: String,
    /// Requests where primary ≠ candidate here.
    pub count: u64,
    /// The kind of difference.
    pub kind: DiffKind,
    /// Requests where primary ≠ secondary here (with a secondary only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub noise_count: Option<u64>,
}

/// A field classified as noise.
#[derive(Debug, Clone, Serialize)]
pub struct NoiseField {
    /// The endpoint.
    pub endpoint: String,
    /// The field path.
    pub path: String,
    /// The kind of difference.
    pub kind: DiffKind,
    /// Requests where primary ≠ candidate here.
    pub count: u64,
    /// Requests where primary ≠ secondary here.
    pub noise_count: u64,
}

/// One side's response in a [`Sample`].
///
/// In JSON the body is text when it is UTF-8, else base64, and `body_encoding` says
/// which (`"text"` or `"base64"`): never replacement characters.
#[derive(Debug, Clone)]
pub struct SampleResponse {
    /// The status code.
    pub status: u16,
    /// Headers as received (secrets redacted), `content-encoding` included.
    pub headers: Vec<(String, String)>,
    /// The body as compared: its `Content-Encoding` undone (secrets redacted).
    pub body: Bytes,
}

impl Serialize for SampleResponse {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct as _;
        let (body, encoding) = body_text(&self.body);
        let mut st = s.serialize_struct("SampleResponse", 4)?;
        st.serialize_field("status", &self.status)?;
        st.serialize_field("headers", &self.headers)?;
        st.serialize_field("body", &body)?;
        st.serialize_field("body_encoding", encoding)?;
        st.end()
    }
}

/// A body for a person or a JSON file: the text when it is UTF-8, else base64; and which
/// of the two (`"text"`, `"base64"`).
pub(crate) fn body_text(b: &[u8]) -> (Cow<'_, str>, &'static str) {
    match std::str::from_utf8(b) {
        Ok(t) => (Cow::Borrowed(t), "text"),
        Err(_) => {
            use base64::Engine as _;
            (
                Cow::Owned(base64::engine::general_purpose::STANDARD.encode(b)),
                "base64",
            )
        }
    }
}

/// A full example of a differing exchange, kept durably: the request, every response and
/// the differences. Secrets are redacted before a sample is built.
#[derive(Debug, Clone)]
pub struct Sample {
    /// Milliseconds since the Unix epoch.
    pub recorded_at_ms: u64,
    /// The route pattern.
    pub endpoint: String,
    /// The method.
    pub method: String,
    /// The request target, secret query values redacted.
    pub target: String,
    /// Request headers, secrets redacted.
    pub request_headers: Vec<(String, String)>,
    /// The request body (its `Content-Encoding` undone), secrets redacted; in JSON text
    /// or base64, as `request_body_encoding` says.
    pub request_body: Bytes,
    /// The primary's response.
    pub primary: SampleResponse,
    /// The candidate's response.
    pub candidate: SampleResponse,
    /// The secondary's response, when there is one.
    pub secondary: Option<SampleResponse>,
    /// Primary vs candidate.
    pub differences: Vec<Difference>,
    /// Primary vs secondary.
    pub noise_differences: Vec<Difference>,
}

impl Serialize for Sample {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct as _;
        let (body, encoding) = body_text(&self.request_body);
        let mut st = s.serialize_struct("Sample", 12)?;
        st.serialize_field("recorded_at_ms", &self.recorded_at_ms)?;
        st.serialize_field("endpoint", &self.endpoint)?;
        st.serialize_field("method", &self.method)?;
        st.serialize_field("target", &self.target)?;
        st.serialize_field("request_headers", &self.request_headers)?;
        st.serialize_field("request_body", &body)?;
        st.serialize_field("request_body_encoding", encoding)?;
        st.serialize_field("primary", &self.primary)?;
        st.serialize_field("candidate", &self.candidate)?;
        st.serialize_field("secondary", &self.secondary)?;
        st.serialize_field("differences", &self.differences)?;
        st.serialize_field("noise_differences", &self.noise_differences)?;
        st.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(path: &str, kind: DiffKind) -> Difference {
        Difference::new(path, kind, None, None)
    }

    #[test]
    fn noise_only_requests_count_as_matched_and_real_ones_as_mismatched() {
        let mut t = Tally::default();
        let ts = d("$.ts", DiffKind::ValueChanged);
        let bal = d("$.balance", DiffKind::ValueChanged);
        // 100 requests: ts differs everywhere on both pairs; balance differs on 10 vs candidate only.
        for i in 0..100 {
            let mut raw = vec![ts.clone()];
            if i < 10 {
                raw.push(bal.clone());
            }
            t.record("/u/{id}", &raw, std::slice::from_ref(&ts));
        }
        let s = t.summarize(&NoiseRule::default(), true);
        assert_eq!((s.compared, s.matched, s.mismatched), (100, 90, 10));
        let ep = &s.endpoints[0];
        assert_eq!(ep.fields.len(), 1);
        assert_eq!(
            (ep.fields[0].path.as_str(), ep.fields[0].count),
            ("$.balance", 10)
        );
        assert_eq!(s.noise.len(), 1);
        assert_eq!(
            (s.noise[0].path.as_str(), s.noise[0].noise_count),
            ("$.ts", 100)
        );

        // Without a secondary every difference is real.
        let s = t.summarize(&NoiseRule::default(), false);
        assert_eq!((s.matched, s.mismatched), (0, 100));
        assert!(s.noise.is_empty());
    }

    #[test]
    fn one_field_differing_at_many_indices_counts_once_per_request() {
        let mut t = Tally::default();
        let raw = [
            d("$.a[0].x", DiffKind::ValueChanged),
            d("$.a[1].x", DiffKind::ValueChanged),
        ];
        t.record("/e", &raw, &[]);
        let s = t.summarize(&NoiseRule::default(), false);
        assert_eq!(s.endpoints[0].fields[0].path, "$.a[*].x");
        assert_eq!(s.endpoints[0].fields[0].count, 1);
    }
}
