//! Binding a template to data, and rendering requests from the pair.

use bytes::{Bytes, BytesMut};
use http::{HeaderName, HeaderValue, Method};

use crate::RequestsError;
use crate::data::{DataKind, DataSet};
use crate::order::{Order, permutation};
use crate::template::{Part, RequestTemplate, Text};

/// One concrete request, ready to send.
#[derive(Debug, Clone, Default)]
pub struct RenderedRequest {
    /// The HTTP method.
    pub method: Method,
    /// The request target: path and query, values percent-encoded.
    pub path_and_query: String,
    /// Headers in template order.
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// The body; empty when the template has none.
    pub body: Bytes,
}

/// A template bound to its data: every request of a run, rendered on demand.
///
/// Validated once at [`RequestSet::new`] for every row, so [`RequestSet::render`] never
/// fails. Immutable after that, `Send + Sync`, and meant to be shared in an `Arc` between
/// worker threads; each worker renders with its own [`RenderedRequest`].
pub struct RequestSet {
    method: Method,
    path_template: String,
    path: Vec<Bound>,
    headers: Vec<HeaderSlot>,
    /// Values of the headers that hold placeholders, rendered for every row at bind time
    /// (cloning a `HeaderValue` is a reference-count bump): `row * templated + k`.
    header_values: Vec<HeaderValue>,
    templated_headers: usize,
    body: BodySlot,
    data: Option<DataSet>,
    /// `order[i]` is the row of the i-th request; `None` for sequential order.
    order: Option<Vec<u32>>,
    len: usize,
}

impl std::fmt::Debug for RequestSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestSet")
            .field("method", &self.method)
            .field("path", &self.path_template)
            .field("headers", &self.headers.len())
            .field("len", &self.len)
            .field("shuffled", &self.order.is_some())
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Clone)]
enum Bound {
    Literal(String),
    Value { column: usize, encode: bool },
}

#[derive(Debug, Clone)]
enum HeaderSlot {
    Fixed(HeaderName, HeaderValue),
    PerRow(HeaderName, usize),
}

#[derive(Debug, Clone)]
enum BodySlot {
    Fixed(Bytes),
    /// Every row's body rendered at bind time into one buffer; row `r` is
    /// `all[ends[r - 1]..ends[r]]`, handed out as a reference-counted slice.
    PerRow {
        all: Bytes,
        ends: Vec<usize>,
    },
    /// Rendered per call, when pre-rendering would exceed [`PRERENDERED_BODIES_MAX`].
    Template(Vec<Bound>),
}

/// Upper bound on the memory spent on pre-rendered bodies. Above it, bodies are rendered
/// per request at the cost of one small allocation each.
const PRERENDERED_BODIES_MAX: usize = 256 << 20;

impl RequestSet {
    /// Binds `template` to `data` and fixes the order of the requests.
    ///
    /// A lines data set (one column) binds to the single placeholder name the template
    /// uses, whatever it is called; otherwise every placeholder must name a column.
    /// Every row is rendered once here to check that it makes a valid request.
    ///
    /// # Errors
    ///
    /// A placeholder with no column to bind to, placeholders but no data, empty data, or
    /// a row that renders an invalid request (a header value with a control character, a
    /// `{name:raw}` path value that is not allowed in a request target). Errors name the
    /// placeholder or the data line.
    pub fn new(
        template: RequestTemplate,
        data: Option<DataSet>,
        order: Order,
    ) -> Result<RequestSet, RequestsError> {
        let names = template.placeholders();
        let columns: Vec<(String, usize)> = match &data {
            None => {
                if let Some(first) = names.first() {
                    return Err(RequestsError::NoData {
                        placeholder: first.clone(),
                        template: template.path.source.clone(),
                    });
                }
                Vec::new()
            }
            Some(data) => {
                if data.is_empty() {
                    return Err(RequestsError::EmptyData {
                        path: data.origin().into(),
                    });
                }
                let single_lines = data.kind() == DataKind::Lines && names.len() == 1;
                names
                    .iter()
                    .map(|name| {
                        let column = data.columns().iter().position(|c| c == name);
                        match column {
                            Some(c) => Ok((name.clone(), c)),
                            None if single_lines => Ok((name.clone(), 0)),
                            None => Err(RequestsError::UnboundPlaceholder {
                                placeholder: name.clone(),
                                data: data.origin().to_owned(),
                                columns: data.columns().to_vec(),
                            }),
                        }
                    })
                    .collect::<Result<_, _>>()?
            }
        };
        // Only path values are percent-encoded; header and body values go in as they are.
        let bind = |text: &Text, in_path: bool| -> Vec<Bound> {
            text.parts
                .iter()
                .map(|part| match part {
                    Part::Literal(s) => Bound::Literal(s.clone()),
                    Part::Placeholder { name, raw } => Bound::Value {
                        column: columns
                            .iter()
                            .find(|(n, _)| n == name)
                            .map_or(0, |&(_, c)| c),
                        encode: in_path && !raw,
                    },
                })
                .collect()
        };

        let rows = data.as_ref().map_or(1, DataSet::len);
        let path = bind(&template.path, true);

        let mut headers = Vec::with_capacity(template.headers.len());
        let mut templated = Vec::new();
        for header in &template.headers {
            if header.value.has_placeholders() {
                headers.push(HeaderSlot::PerRow(header.name.clone(), templated.len()));
                templated.push((header, bind(&header.value, false)));
            } else {
                let text: String = header
                    .value
                    .parts
                    .iter()
                    .map(|p| match p {
                        Part::Literal(s) => s.as_str(),
                        Part::Placeholder { .. } => "",
                    })
                    .collect();
                let value = HeaderValue::from_str(&text).map_err(|_| RequestsError::Header {
                    header: header.source.clone(),
                    message: "invalid header value".to_owned(),
                })?;
                headers.push(HeaderSlot::Fixed(header.name.clone(), value));
            }
        }

        let body = match &template.body {
            None => BodySlot::Fixed(Bytes::new()),
            Some(text) if !text.has_placeholders() => {
                BodySlot::Fixed(Bytes::from(join_literals(&text.parts)))
            }
            Some(text) => prerender_bodies(
                bind(text, false),
                data.as_ref(),
                rows,
                PRERENDERED_BODIES_MAX,
            ),
        };

        // Render every row once: header values are kept, raw path values are checked.
        let mut header_values = Vec::with_capacity(rows * templated.len());
        let path_has_raw = path
            .iter()
            .any(|b| matches!(b, Bound::Value { encode: false, .. }));
        let mut scratch = String::new();
        for row in 0..rows {
            let invalid_row = |message: String| {
                let data = data.as_ref();
                RequestsError::InvalidRow {
                    data: data.map_or_else(String::new, |d| d.origin().to_owned()),
                    line: data.map_or(0, |d| d.line_of(row)),
                    message,
                }
            };
            if path_has_raw {
                scratch.clear();
                render_parts(&path, data.as_ref(), row, &mut scratch);
                if let Err(e) = http::uri::PathAndQuery::try_from(scratch.as_str()) {
                    return Err(invalid_row(format!(
                        "path {scratch:?} from template {:?} is not a valid request target ({e}); \
                         drop ':raw' to percent-encode the value",
                        template.path.source
                    )));
                }
            }
            for (header, bound) in &templated {
                scratch.clear();
                render_parts(bound, data.as_ref(), row, &mut scratch);
                let value = HeaderValue::from_bytes(scratch.as_bytes()).map_err(|_| {
                    invalid_row(format!(
                        "header {:?} renders the value {scratch:?}, which is not a valid \
                         header value (control characters are not allowed)",
                        header.source
                    ))
                })?;
                header_values.push(value);
            }
        }

        let order = match order {
            Order::Sequential => None,
            Order::Shuffled { seed } => Some(permutation(rows, seed)),
        };

        Ok(RequestSet {
            method: template.method,
            path_template: template.path.source,
            path,
            headers,
            header_values,
            templated_headers: templated.len(),
            body,
            data,
            order,
            len: rows,
        })
    }

    /// Number of distinct requests: the data rows, or 1 without data.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: a set holds at least one request. Here for API symmetry.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The `i`-th request in the chosen order, wrapping modulo [`RequestSet::len`].
    pub fn render(&self, i: u64) -> RenderedRequest {
        let mut out = RenderedRequest::default();
        self.render_into(i, &mut out);
        out
    }

    /// Like [`RequestSet::render`], reusing the buffers of `out`.
    ///
    /// No allocation once `out` has rendered a few requests of this set (its strings have
    /// grown to size and its body buffer is not shared any more), no lock, no I/O.
    pub fn render_into(&self, i: u64, out: &mut RenderedRequest) {
        let index = (i % self.len as u64) as usize;
        let row = self
            .order
            .as_ref()
            .map_or(index, |order| order[index] as usize);

        if out.method != self.method {
            out.method = self.method.clone();
        }

        out.path_and_query.clear();
        render_parts(&self.path, self.data.as_ref(), row, &mut out.path_and_query);

        out.headers.clear();
        for slot in &self.headers {
            match slot {
                HeaderSlot::Fixed(name, value) => out.headers.push((name.clone(), value.clone())),
                HeaderSlot::PerRow(name, k) => out.headers.push((
                    name.clone(),
                    self.header_values[row * self.templated_headers + k].clone(),
                )),
            }
        }

        match &self.body {
            BodySlot::Fixed(bytes) => out.body = bytes.clone(),
            BodySlot::PerRow { all, ends } => {
                let start = row.checked_sub(1).map_or(0, |previous| ends[previous]);
                out.body = all.slice(start..ends[row]);
            }
            BodySlot::Template(parts) => {
                // Take the previous body back if nobody else holds it, else start anew.
                let mut buf = match std::mem::take(&mut out.body).try_into_mut() {
                    Ok(mut buf) => {
                        buf.clear();
                        buf
                    }
                    Err(_) => BytesMut::new(),
                };
                render_body(parts, self.data.as_ref(), row, &mut buf);
                out.body = buf.freeze();
            }
        }
    }
}

/// Renders the body of every row into one buffer, or keeps the template when that would
/// take more than `max` bytes.
fn prerender_bodies(
    parts: Vec<Bound>,
    data: Option<&DataSet>,
    rows: usize,
    max: usize,
) -> BodySlot {
    let mut all = BytesMut::new();
    let mut ends = Vec::with_capacity(rows);
    for row in 0..rows {
        render_body(&parts, data, row, &mut all);
        if all.len() > max {
            return BodySlot::Template(parts);
        }
        ends.push(all.len());
    }
    let all = all.freeze();
    // The first clone of a `Bytes` made from a vector allocates its shared header; do it
    // now rather than on the first request.
    drop(all.clone());
    BodySlot::PerRow { all, ends }
}

fn join_literals(parts: &[Part]) -> String {
    parts
        .iter()
        .map(|p| match p {
            Part::Literal(s) => s.as_str(),
            Part::Placeholder { .. } => "",
        })
        .collect()
}

fn cell(data: Option<&DataSet>, row: usize, column: usize) -> &str {
    // A bound value always has data (checked in `new`); "" keeps this total.
    data.map_or("", |d| d.cell(row, column))
}

fn render_parts(parts: &[Bound], data: Option<&DataSet>, row: usize, out: &mut String) {
    for part in parts {
        match part {
            Bound::Literal(s) => out.push_str(s),
            Bound::Value { column, encode } => {
                let value = cell(data, row, *column);
                if *encode {
                    percent_encode_into(value, out);
                } else {
                    out.push_str(value);
                }
            }
        }
    }
}

fn render_body(parts: &[Bound], data: Option<&DataSet>, row: usize, out: &mut BytesMut) {
    for part in parts {
        match part {
            Bound::Literal(s) => out.extend_from_slice(s.as_bytes()),
            // Body values go in as they are; encoding is the template author's business.
            Bound::Value { column, .. } => {
                out.extend_from_slice(cell(data, row, *column).as_bytes());
            }
        }
    }
}

/// Percent-encodes every byte outside the RFC 3986 unreserved set
/// (`A-Z a-z 0-9 - . _ ~`), as `%XX` with upper-case hex.
pub(crate) fn percent_encode_into(value: &str, out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in value.as_bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push('%');
            out.push(HEX[usize::from(b >> 4)] as char);
            out.push(HEX[usize::from(b & 0x0F)] as char);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template(path: &str, headers: &[&str], body: Option<&str>) -> RequestTemplate {
        let headers: Vec<String> = headers.iter().map(|h| (*h).to_owned()).collect();
        RequestTemplate::parse("GET", path, &headers, body).unwrap()
    }

    fn lines(values: &[&str]) -> DataSet {
        DataSet::from_lines("ids", values.iter().map(|v| (*v).to_owned()).collect())
    }

    /// An independent decoder: RFC 3986 percent-decoding.
    fn percent_decode(s: &str) -> Vec<u8> {
        let bytes = s.as_bytes();
        let mut out = Vec::new();
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] == b'%' {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap();
                out.push(u8::from_str_radix(hex, 16).unwrap());
                i += 3;
            } else {
                out.push(bytes[i]);
                i += 1;
            }
        }
        out
    }

    #[test]
    fn percent_encoding_round_trips_and_keeps_unreserved() {
        let values = [
            "plain-._~09AZaz",
            "a b/c?d&e=f#g%h+i",
            "naïve ☃",
            "\u{0}\u{7f}",
        ];
        for value in values {
            let mut out = String::new();
            percent_encode_into(value, &mut out);
            assert_eq!(percent_decode(&out), value.as_bytes(), "{value:?} -> {out}");
            assert!(
                out.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-._~%".contains(&b)),
                "{out}"
            );
            http::uri::PathAndQuery::try_from(format!("/{out}")).unwrap();
        }
        let mut out = String::new();
        percent_encode_into("plain-._~09AZaz", &mut out);
        assert_eq!(out, "plain-._~09AZaz");
    }

    #[test]
    fn lines_bind_to_the_single_placeholder_whatever_its_name() {
        let set = RequestSet::new(
            template("/u/{user}?x={user:raw}", &[], None),
            Some(lines(&["1", "a/b"])),
            Order::Sequential,
        )
        .unwrap();
        assert_eq!(set.render(0).path_and_query, "/u/1?x=1");
        assert_eq!(set.render(1).path_and_query, "/u/a%2Fb?x=a/b");
    }

    #[test]
    fn lines_with_two_placeholder_names_name_the_unbound_one() {
        let err = RequestSet::new(
            template("/u/{ids}/{other}", &[], None),
            Some(lines(&["1"])),
            Order::Sequential,
        )
        .unwrap_err();
        match err {
            RequestsError::UnboundPlaceholder {
                placeholder,
                columns,
                ..
            } => {
                assert_eq!(placeholder, "other");
                assert_eq!(columns, ["ids"]);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn placeholders_without_data_are_an_error_and_no_placeholders_need_none() {
        let err =
            RequestSet::new(template("/u/{id}", &[], None), None, Order::Sequential).unwrap_err();
        assert!(
            matches!(&err, RequestsError::NoData { placeholder, .. } if placeholder == "id"),
            "{err:?}"
        );
        assert!(err.to_string().contains("{id}"), "{err}");

        let set = RequestSet::new(
            template("/health", &["A: b"], Some("hi")),
            None,
            Order::Sequential,
        )
        .unwrap();
        assert_eq!(set.len(), 1);
        let r = set.render(12345);
        assert_eq!(r.path_and_query, "/health");
        assert_eq!(r.body, "hi");
        assert_eq!(
            r.headers,
            [(HeaderName::from_static("a"), HeaderValue::from_static("b"))]
        );
    }

    #[test]
    fn empty_in_memory_data_is_an_error() {
        let err = RequestSet::new(
            template("/{x}", &[], None),
            Some(lines(&[])),
            Order::Sequential,
        )
        .unwrap_err();
        assert!(matches!(err, RequestsError::EmptyData { .. }), "{err:?}");
    }

    #[test]
    fn headers_and_body_take_values_as_they_are() {
        let set = RequestSet::new(
            template(
                "/x",
                &["X-Id: <{id}>", "Accept: */*"],
                Some("{{\"id\": \"{id}\"}}"),
            ),
            Some(lines(&["a b/ü"])),
            Order::Sequential,
        )
        .unwrap();
        let r = set.render(0);
        assert_eq!(r.headers[0].0, "x-id");
        assert_eq!(r.headers[0].1.as_bytes(), "<a b/ü>".as_bytes());
        assert_eq!(r.headers[1].1, "*/*");
        assert_eq!(r.body, "{\"id\": \"a b/ü\"}".as_bytes());
    }

    #[test]
    fn a_row_that_breaks_a_header_fails_at_new_naming_its_line() {
        let err = RequestSet::new(
            template("/x", &["X-Id: {id}"], None),
            Some(lines(&["ok", "ok", "bad\r\ninjected: 1"])),
            Order::Sequential,
        )
        .unwrap_err();
        match &err {
            RequestsError::InvalidRow { line, message, .. } => {
                assert_eq!(*line, 3);
                assert!(message.contains("X-Id"), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_raw_value_that_breaks_the_path_fails_at_new() {
        let err = RequestSet::new(
            template("/x/{id:raw}", &[], None),
            Some(lines(&["fine", "not fine"])),
            Order::Sequential,
        )
        .unwrap_err();
        assert!(
            matches!(err, RequestsError::InvalidRow { line: 2, .. }),
            "{err:?}"
        );
        // Encoded, the same value is fine.
        RequestSet::new(
            template("/x/{id}", &[], None),
            Some(lines(&["fine", "not fine"])),
            Order::Sequential,
        )
        .unwrap();
    }

    #[test]
    fn order_wraps_and_shuffle_is_a_seeded_permutation() {
        let values: Vec<String> = (0..100).map(|i| i.to_string()).collect();
        let data = DataSet::from_lines("n", values);
        let seq = RequestSet::new(
            template("/{n}", &[], None),
            Some(data.clone()),
            Order::Sequential,
        )
        .unwrap();
        assert_eq!(seq.render(7).path_and_query, "/7");
        assert_eq!(seq.render(107).path_and_query, "/7");
        assert_eq!(
            seq.render(u64::MAX).path_and_query,
            format!("/{}", u64::MAX % 100)
        );

        let shuffled = |seed| {
            let set = RequestSet::new(
                template("/{n}", &[], None),
                Some(data.clone()),
                Order::Shuffled { seed },
            )
            .unwrap();
            (0..100)
                .map(|i| set.render(i).path_and_query)
                .collect::<Vec<_>>()
        };
        let a = shuffled(9);
        assert_eq!(a, shuffled(9));
        assert_ne!(a, shuffled(10));
        let mut sorted = a.clone();
        sorted.sort();
        let mut expected: Vec<String> = (0..100).map(|i| format!("/{i}")).collect();
        expected.sort();
        assert_eq!(sorted, expected, "every row once per round");
    }

    #[test]
    fn render_into_matches_render_and_reuses_buffers() {
        let set = RequestSet::new(
            template("/u/{id}", &["X-Id: {id}", "A: b"], Some("id={id}")),
            Some(lines(&["1", "22", "333"])),
            Order::Shuffled { seed: 1 },
        )
        .unwrap();
        let mut out = RenderedRequest::default();
        for i in 0..10 {
            set.render_into(i, &mut out);
            let fresh = set.render(i);
            assert_eq!(out.path_and_query, fresh.path_and_query);
            assert_eq!(out.headers, fresh.headers);
            assert_eq!(out.body, fresh.body);
            assert_eq!(out.method, fresh.method);
        }
    }

    #[test]
    fn bodies_over_the_prerender_budget_are_rendered_per_call_alike() {
        let set = RequestSet::new(
            template("/x", &[], Some("id={id};")),
            Some(lines(&["1", "22", "333"])),
            Order::Sequential,
        )
        .unwrap();
        assert!(matches!(set.body, BodySlot::PerRow { .. }));
        let bound = match set.body.clone() {
            BodySlot::PerRow { .. } => vec![
                Bound::Literal("id=".to_owned()),
                Bound::Value {
                    column: 0,
                    encode: false,
                },
                Bound::Literal(";".to_owned()),
            ],
            _ => unreachable!(),
        };
        let slot = prerender_bodies(bound, set.data.as_ref(), 3, 10);
        assert!(matches!(slot, BodySlot::Template(_)), "{slot:?}");
        let per_call = RequestSet { body: slot, ..set };
        let mut out = RenderedRequest::default();
        for (i, want) in ["id=1;", "id=22;", "id=333;", "id=1;"].iter().enumerate() {
            per_call.render_into(i as u64, &mut out);
            assert_eq!(out.body, want.as_bytes());
        }
    }

    #[test]
    fn request_set_is_send_and_sync() {
        fn shareable<T: Send + Sync>() {}
        shareable::<RequestSet>();
        shareable::<std::sync::Arc<RequestSet>>();
    }
}
