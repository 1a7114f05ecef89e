//! A weighted mix of endpoints: a TOML file of `[[request]]` tables.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde::de::{MapAccess, Visitor};
use toml::Spanned;

use crate::order::{Order, splitmix_at};
use crate::set::{MAX_BODY, RenderedRequest, RequestSet, shared_order};
use crate::{DataSet, RequestTemplate, RequestsError};

/// Several request templates, each with a name and a weight, picked per request.
///
/// Request `i` goes to the endpoint chosen by the `(i + 1)`-th output of SplitMix64 seeded
/// with the mix's seed, weighted: a pure function of `(seed, i)`, so every worker, every
/// target and every machine picks the same endpoint for the same `i` — two targets of an
/// A/B run get the very same sequence. Placeholders draw from one data set, shared by all
/// endpoints: request `i` uses data row `i` in the chosen [`Order`] whichever endpoint it
/// goes to.
///
/// Immutable, `Send + Sync`, shared in an `Arc` between workers like a [`RequestSet`].
#[derive(Debug)]
pub struct Mix {
    entries: Vec<MixEntry>,
    /// Running sums of the weights: entry `k` owns `[cumulative[k-1], cumulative[k])`.
    cumulative: Vec<u64>,
    total: u64,
    seed: u64,
}

/// One endpoint of a [`Mix`].
#[derive(Debug)]
pub struct MixEntry {
    name: String,
    weight: u64,
    line: u64,
    set: RequestSet,
}

impl MixEntry {
    /// The endpoint's name, unique in the mix (letters, digits, `_`, `-`, `.`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its weight: it gets `weight / sum of weights` of the requests.
    pub fn weight(&self) -> u64 {
        self.weight
    }

    /// The 1-based line of its `[[request]]` table in the mix file.
    pub fn line(&self) -> u64 {
        self.line
    }

    /// Its template bound to the data.
    pub fn set(&self) -> &RequestSet {
        &self.set
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMix {
    #[serde(default)]
    request: Vec<Spanned<RawEntry>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEntry {
    name: Spanned<String>,
    #[serde(default)]
    method: Option<Spanned<String>>,
    path: Spanned<String>,
    #[serde(default)]
    headers: Option<Spanned<OrderedHeaders>>,
    #[serde(default)]
    body: Option<Spanned<String>>,
    #[serde(default)]
    body_file: Option<Spanned<String>>,
    #[serde(default)]
    weight: Option<Spanned<i64>>,
}

/// An inline table of headers, in the order written.
struct OrderedHeaders(Vec<(String, String)>);

impl<'de> Deserialize<'de> for OrderedHeaders {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Pairs;
        impl<'de> Visitor<'de> for Pairs {
            type Value = OrderedHeaders;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a table of header names to string values")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<OrderedHeaders, A::Error> {
                let mut pairs = Vec::new();
                while let Some((name, value)) = map.next_entry::<String, String>()? {
                    pairs.push((name, value));
                }
                Ok(OrderedHeaders(pairs))
            }
        }
        d.deserialize_map(Pairs)
    }
}

impl Mix {
    /// Reads a mix file. `body_file` paths are relative to the mix file's folder.
    ///
    /// # Errors
    ///
    /// An unreadable file, or anything [`Mix::parse`] refuses.
    pub fn from_path(
        path: &Path,
        data: Option<DataSet>,
        order: Order,
        seed: u64,
    ) -> Result<Mix, RequestsError> {
        let text = std::fs::read_to_string(path).map_err(|error| RequestsError::SourceIo {
            path: path.to_path_buf(),
            error,
        })?;
        Mix::parse(&text, path, data, order, seed)
    }

    /// Parses the text of a mix file; `path` names it in errors and anchors `body_file`.
    ///
    /// # Errors
    ///
    /// A [`RequestsError::Mix`] naming the file and line: TOML syntax, an unknown key, a
    /// missing `name` or `path`, a repeated or invalid name, `body` and `body_file` both
    /// given, a negative weight or all weights zero, an unreadable or over-256-MiB body
    /// file, and any template or binding error of an entry (prefixed with its name).
    pub fn parse(
        text: &str,
        path: &Path,
        data: Option<DataSet>,
        order: Order,
        seed: u64,
    ) -> Result<Mix, RequestsError> {
        let error = |offset: usize, message: String| RequestsError::Mix {
            path: path.to_path_buf(),
            line: line_at(text, offset),
            message,
        };
        let raw: RawMix = toml::from_str(text).map_err(|e| {
            let offset = e.span().map_or(0, |s| s.start);
            error(offset, e.message().trim_end().to_owned())
        })?;
        if raw.request.is_empty() {
            return Err(RequestsError::Mix {
                path: path.to_path_buf(),
                line: 0,
                message: "no [[request]] tables".to_owned(),
            });
        }
        let rows = data.as_ref().map_or(1, DataSet::len);
        let origin = data.as_ref().map_or("", |d| d.origin()).to_owned();
        let order = shared_order(order, rows, &origin)?;
        let base = path.parent().unwrap_or(Path::new("."));

        let mut entries: Vec<MixEntry> = Vec::with_capacity(raw.request.len());
        for entry in raw.request {
            let table_at = entry.span().start;
            let entry = entry.into_inner();
            let name = entry.name.get_ref();
            let name_at = entry.name.span().start;
            if name.is_empty()
                || !name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
            {
                return Err(error(
                    name_at,
                    format!("request name {name:?}: use letters, digits, '_', '-' and '.'"),
                ));
            }
            if let Some(first) = entries.iter().find(|e| &e.name == name) {
                return Err(error(
                    name_at,
                    format!(
                        "request name {name:?} is used twice (first on line {})",
                        first.line
                    ),
                ));
            }
            let in_entry = |offset: usize, message: String| {
                error(offset, format!("request {name:?}: {message}"))
            };
            let weight = match &entry.weight {
                None => 1,
                Some(w) => u64::try_from(*w.get_ref())
                    .ok()
                    .filter(|&w| w <= u64::from(u32::MAX))
                    .ok_or_else(|| {
                        in_entry(
                            w.span().start,
                            format!("weight {} must be 0 to 4294967295", w.get_ref()),
                        )
                    })?,
            };
            let body = match (&entry.body, &entry.body_file) {
                (Some(_), Some(file)) => {
                    return Err(in_entry(
                        file.span().start,
                        "give body or body_file, not both".to_owned(),
                    ));
                }
                (Some(body), None) => Some(body.get_ref().clone()),
                (None, Some(file)) => Some(
                    read_body_file(&base.join(file.get_ref()))
                        .map_err(|message| in_entry(file.span().start, message))?,
                ),
                (None, None) => None,
            };
            let headers: Vec<String> = entry
                .headers
                .as_ref()
                .map(|h| {
                    h.get_ref()
                        .0
                        .iter()
                        .map(|(n, v)| format!("{n}: {v}"))
                        .collect()
                })
                .unwrap_or_default();
            let method = entry
                .method
                .as_ref()
                .map_or("GET", |m| m.get_ref().as_str());
            // Point template errors at the key they come from.
            let template =
                RequestTemplate::parse(method, entry.path.get_ref(), &headers, body.as_deref())
                    .map_err(|e| {
                        let at = match &e {
                            RequestsError::Method { .. } => {
                                entry.method.as_ref().map_or(table_at, |m| m.span().start)
                            }
                            RequestsError::Header { .. } => {
                                entry.headers.as_ref().map_or(table_at, |h| h.span().start)
                            }
                            RequestsError::Template { part: "body", .. } => entry
                                .body
                                .as_ref()
                                .or(entry.body_file.as_ref())
                                .map_or(table_at, |b| b.span().start),
                            RequestsError::Template { part: "header", .. } => {
                                entry.headers.as_ref().map_or(table_at, |h| h.span().start)
                            }
                            _ => entry.path.span().start,
                        };
                        in_entry(at, e.to_string())
                    })?;
            let set = RequestSet::bind(template, data.clone(), order.clone(), MAX_BODY)
                .map_err(|e| in_entry(table_at, e.to_string()))?;
            entries.push(MixEntry {
                name: name.clone(),
                weight,
                line: line_at(text, table_at),
                set,
            });
        }
        let mut cumulative = Vec::with_capacity(entries.len());
        let mut total = 0u64;
        for e in &entries {
            total += e.weight;
            cumulative.push(total);
        }
        if total == 0 {
            return Err(RequestsError::Mix {
                path: path.to_path_buf(),
                line: 0,
                message: "every weight is 0: no request could be picked".to_owned(),
            });
        }
        Ok(Mix {
            entries,
            cumulative,
            total,
            seed,
        })
    }

    /// The endpoints, in file order; [`Mix::pick`] returns an index into this.
    pub fn entries(&self) -> &[MixEntry] {
        &self.entries
    }

    /// The index of the endpoint of request `i`.
    pub fn pick(&self, i: u64) -> usize {
        let draw = splitmix_at(self.seed, i);
        // Lemire's multiply-shift: uniform enough for weights below 2³² each.
        let slot = ((u128::from(draw) * u128::from(self.total)) >> 64) as u64;
        self.cumulative
            .partition_point(|&end| end <= slot)
            .min(self.entries.len() - 1)
    }

    /// Renders request `i` into `out` and returns the index of its endpoint. Never fails,
    /// no lock, no allocation once `out` is warm (as [`RequestSet::render_into`]).
    pub fn render_into(&self, i: u64, out: &mut RenderedRequest) -> usize {
        let k = self.pick(i);
        self.entries[k].set.render_into(i, out);
        k
    }

    /// Request `i` and the index of its endpoint.
    pub fn render(&self, i: u64) -> (usize, RenderedRequest) {
        let mut out = RenderedRequest::default();
        let k = self.render_into(i, &mut out);
        (k, out)
    }
}

/// 1-based line of byte `offset` in `text`.
fn line_at(text: &str, offset: usize) -> u64 {
    let end = offset.min(text.len());
    text.as_bytes()[..end]
        .iter()
        .filter(|&&b| b == b'\n')
        .count() as u64
        + 1
}

fn read_body_file(path: &PathBuf) -> Result<String, String> {
    let shown = path.display();
    let size = std::fs::metadata(path)
        .map_err(|e| format!("cannot read body_file {shown}: {e}"))?
        .len();
    if size > MAX_BODY as u64 {
        return Err(format!(
            "body_file {shown} is {size} bytes, over the limit of {MAX_BODY}"
        ));
    }
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read body_file {shown}: {e}"))?;
    if bytes.len() > MAX_BODY {
        return Err(format!(
            "body_file {shown} is {} bytes, over the limit of {MAX_BODY}",
            bytes.len()
        ));
    }
    String::from_utf8(bytes).map_err(|_| {
        format!(
            "body_file {shown} is not UTF-8 (a body is a template; binary bodies are not supported)"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Mix, RequestsError> {
        Mix::parse(text, Path::new("mix.toml"), None, Order::Sequential, 1)
    }

    fn err_line(text: &str) -> (u64, String) {
        match parse(text) {
            Err(RequestsError::Mix { line, message, .. }) => (line, message),
            other => panic!("expected a mix error, got {other:?}"),
        }
    }

    #[test]
    fn defaults_and_header_order() {
        let mix = parse(
            r#"
[[request]]
name = "home"
path = "/"

[[request]]
name = "post"
method = "POST"
path = "/p"
headers = { "Z-Last" = "1", "A-First" = "2", Accept = "*/*" }
body = '{{"a": 1}}'
weight = 3
"#,
        )
        .unwrap();
        let e = mix.entries();
        assert_eq!((e[0].name(), e[0].weight(), e[0].line()), ("home", 1, 2));
        assert_eq!(e[1].weight(), 3);
        let r = e[1].set().render(0);
        assert_eq!(r.method, http::Method::POST);
        assert_eq!(r.body, "{\"a\": 1}");
        let names: Vec<&str> = r.headers.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["z-last", "a-first", "accept"], "order as written");
        assert_eq!(e[0].set().render(0).method, http::Method::GET);
    }

    #[test]
    fn errors_name_the_line() {
        let (line, message) = err_line("[[request]]\nname = \"a\"\npath = \"/\"\nwieght = 2\n");
        assert_eq!(line, 4, "{message}");
        assert!(message.contains("wieght"), "{message}");

        let (line, message) = err_line("[[request]]\nname = \"a\"\n\npath = \"/{id\"\n");
        assert_eq!(line, 4, "{message}");
        assert!(
            message.contains("request \"a\"") && message.contains("unclosed"),
            "{message}"
        );

        let (line, message) = err_line(
            "[[request]]\nname = \"a\"\npath = \"/\"\n[[request]]\nname = \"a\"\npath = \"/b\"\n",
        );
        assert_eq!(line, 5, "{message}");
        assert!(message.contains("first on line 1"), "{message}");

        let (line, message) = err_line("[[request]]\nname = \"a\"\npath = \"/\"\nweight = -1\n");
        assert_eq!(line, 4, "{message}");

        let (_, message) = err_line("[[request]]\nname = \"a\"\npath = \"/\"\nweight = 0\n");
        assert!(message.contains("every weight is 0"), "{message}");

        let (line, message) = err_line("[[request]]\nname = \"a b\"\npath = \"/\"\n");
        assert_eq!(line, 2, "{message}");

        let (line, message) =
            err_line("[[request]]\nname = \"a\"\npath = \"/\"\nbody = \"x\"\nbody_file = \"f\"\n");
        assert_eq!(line, 5, "{message}");

        let (_, message) = err_line("[[request]]\nname = \"a\"\n");
        assert!(message.contains("path"), "{message}");

        let (line, message) = err_line("[[request]\nname = \"a\"\n");
        assert_eq!(line, 1, "{message}");

        let (line, message) =
            err_line("[[request]]\nname = \"a\"\npath = \"/\"\nmethod = \"G T\"\n");
        assert_eq!(line, 4, "{message}");

        let (_, message) = err_line("");
        assert!(message.contains("no [[request]]"), "{message}");

        let (line, message) = err_line("[[request]]\nname = \"a\"\npath = \"/{id}\"\n");
        assert_eq!(line, 1, "{message}");
        assert!(message.contains("needs a data file"), "{message}");
    }

    #[test]
    fn picks_follow_the_weights_and_the_seed() {
        let text = "[[request]]\nname = \"a\"\npath = \"/a\"\nweight = 1\n\
                    [[request]]\nname = \"b\"\npath = \"/b\"\nweight = 3\n\
                    [[request]]\nname = \"off\"\npath = \"/off\"\nweight = 0\n";
        let mix =
            |seed| Mix::parse(text, Path::new("m.toml"), None, Order::Sequential, seed).unwrap();
        let (m1, m1b, m2) = (mix(1), mix(1), mix(2));
        let seq = |m: &Mix| (0..40_000).map(|i| m.pick(i)).collect::<Vec<_>>();
        let s1 = seq(&m1);
        assert_eq!(s1, seq(&m1b), "same seed, same sequence");
        assert_ne!(s1, seq(&m2), "another seed, another sequence");
        let count = |k| s1.iter().filter(|&&p| p == k).count() as f64;
        assert_eq!(count(2), 0.0, "weight 0 is never picked");
        let share_b = count(1) / 40_000.0;
        assert!((share_b - 0.75).abs() < 0.02, "b got {share_b}");
    }
}
