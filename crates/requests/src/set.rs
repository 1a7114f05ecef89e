//! Binding a template to data, and rendering requests from the pair.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use http::{HeaderName, HeaderValue, Method};

use crate::RequestsError;
use crate::data::{DataKind, DataSet, Row};
use crate::order::{Order, permutation};
use crate::template::{Part, RequestTemplate, Text, is_request_target_char};

/// The largest body one request may have: 256 MiB, checked for every row at bind time.
///
/// Every worker holds the body it is sending; a cap keeps a runaway data value or body
/// file from multiplying into gigabytes.
pub const MAX_BODY: usize = 256 << 20;

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
    /// Where templated header values and bodies are rendered; reclaimed on the next render
    /// once nobody holds the previous request's parts, so rendering does not allocate.
    arena: BytesMut,
}

impl RenderedRequest {
    /// Clears the request for reuse, keeping its buffers.
    pub(crate) fn reset(&mut self) {
        self.path_and_query.clear();
        self.headers.clear();
        self.body = Bytes::new();
        self.arena.clear();
    }

    /// Makes room for `bytes` of header values in the arena at once (see `render_into`).
    pub(crate) fn reserve_values(&mut self, bytes: usize) {
        self.arena.reserve(bytes);
    }

    /// A header value copied into the arena (no allocation once it is warm); `None` when
    /// the bytes are not a valid header value.
    pub(crate) fn arena_value(&mut self, bytes: &[u8]) -> Option<HeaderValue> {
        // `from_maybe_shared` checks the bytes; a refused value leaves unused arena bytes
        // behind until the next reset, nothing worse.
        self.arena.extend_from_slice(bytes);
        HeaderValue::from_maybe_shared(self.arena.split().freeze()).ok()
    }
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
    body: BodySlot,
    data: Option<DataSet>,
    /// `order[i]` is the row of the i-th request; `None` for sequential order.
    order: SharedOrder,
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
    /// Rendered per request into the caller's arena (values are validated at bind time).
    PerRow(HeaderName, Vec<Bound>),
}

#[derive(Debug, Clone)]
enum BodySlot {
    Fixed(Bytes),
    /// Rendered per request into the caller's arena.
    PerRow(Vec<Bound>),
}

/// The rows' order, shared between the sets of a mix so it is computed and held once.
pub(crate) type SharedOrder = Option<Arc<Vec<u32>>>;

/// Fixes the order of `rows` rows.
pub(crate) fn shared_order(
    order: Order,
    rows: usize,
    origin: &str,
) -> Result<SharedOrder, RequestsError> {
    match order {
        Order::Sequential => Ok(None),
        Order::Shuffled { seed } => {
            if u32::try_from(rows).is_err() {
                return Err(RequestsError::TooManyRows {
                    data: origin.to_owned(),
                    rows: rows as u64,
                });
            }
            // An `Arc<Vec>` rather than `Arc<[u32]>`: converting would copy 4 bytes a row.
            Ok(Some(Arc::new(permutation(rows, seed))))
        }
    }
}

impl RequestSet {
    /// Binds `template` to `data` and fixes the order of the requests.
    ///
    /// A lines data set (one column) binds to the single placeholder name the template
    /// uses, whatever it is called; otherwise every placeholder must name a column.
    /// Every row is checked once here: that it makes a valid request and that its body
    /// stays within [`MAX_BODY`]. Nothing is rendered ahead: the set holds the template
    /// and shares the data set's values.
    ///
    /// # Errors
    ///
    /// A placeholder with no column to bind to, placeholders but no data, empty data, a
    /// row that renders an invalid request (a header value with a control character, a
    /// `{name:raw}` path value that is not allowed in a request target) or a body over
    /// [`MAX_BODY`], or a shuffle of more than 2³² rows. Errors name the placeholder or
    /// the data line.
    pub fn new(
        template: RequestTemplate,
        data: Option<DataSet>,
        order: Order,
    ) -> Result<RequestSet, RequestsError> {
        let rows = data.as_ref().map_or(1, DataSet::len);
        let origin = data.as_ref().map_or("", DataSet::origin);
        let order = shared_order(order, rows, origin)?;
        RequestSet::bind(template, data, order, MAX_BODY)
    }

    /// [`RequestSet::new`] with the order given (a mix computes it once for all its sets)
    /// and the body cap as a parameter (tests use a small one).
    pub(crate) fn bind(
        template: RequestTemplate,
        data: Option<DataSet>,
        order: SharedOrder,
        max_body: usize,
    ) -> Result<RequestSet, RequestsError> {
        let names = template.placeholders();
        let columns: Vec<(String, usize)> = match &data {
            None => {
                if let Some(first) = names.first() {
                    return Err(RequestsError::NoData {
                        placeholder: first.clone(),
                        template: template
                            .first_placeholder_text()
                            .unwrap_or_default()
                            .to_owned(),
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
        for header in &template.headers {
            if header.value.has_placeholders() {
                headers.push(HeaderSlot::PerRow(
                    header.name.clone(),
                    bind(&header.value, false),
                ));
            } else {
                let value =
                    HeaderValue::from_str(&join_literals(&header.value.parts)).map_err(|_| {
                        RequestsError::Header {
                            header: header.source.clone(),
                            message: "invalid header value".to_owned(),
                        }
                    })?;
                headers.push(HeaderSlot::Fixed(header.name.clone(), value));
            }
        }

        let body = match &template.body {
            None => BodySlot::Fixed(Bytes::new()),
            Some(text) if !text.has_placeholders() => {
                let body = join_literals(&text.parts);
                if body.len() > max_body {
                    return Err(RequestsError::BodyTooLarge {
                        data: String::new(),
                        line: 0,
                        size: body.len() as u64,
                        max: max_body as u64,
                    });
                }
                BodySlot::Fixed(Bytes::from(body))
            }
            Some(text) => BodySlot::PerRow(bind(text, false)),
        };

        let set = RequestSet {
            method: template.method,
            path_template: template.path.source,
            path,
            headers,
            body,
            data,
            order,
            len: rows,
        };
        set.check_rows(&template.headers, max_body)?;
        Ok(set)
    }

    /// Checks every row once, without rendering it: raw path values, header values, body
    /// sizes. Only the values are checked, the literals were checked at parse time.
    fn check_rows(
        &self,
        header_templates: &[crate::template::HeaderTemplate],
        max_body: usize,
    ) -> Result<(), RequestsError> {
        let Some(data) = &self.data else {
            return Ok(());
        };
        let raw_path: Vec<usize> = self
            .path
            .iter()
            .filter_map(|b| match b {
                Bound::Value {
                    column,
                    encode: false,
                } => Some(*column),
                _ => None,
            })
            .collect();
        let templated: Vec<(&str, &[Bound])> = self
            .headers
            .iter()
            .zip(header_templates)
            .filter_map(|(slot, t)| match slot {
                HeaderSlot::PerRow(_, parts) => Some((t.source.as_str(), parts.as_slice())),
                HeaderSlot::Fixed(..) => None,
            })
            .collect();
        let body = match &self.body {
            BodySlot::PerRow(parts) => Some(parts.as_slice()),
            BodySlot::Fixed(_) => None,
        };
        if raw_path.is_empty() && templated.is_empty() && body.is_none() {
            return Ok(());
        }
        for (line, row) in data.rows() {
            let invalid_row = |message: String| RequestsError::InvalidRow {
                data: data.origin().to_owned(),
                line,
                message,
            };
            for &column in &raw_path {
                let value = row.cell(column);
                if let Some(&b) = value.iter().find(|&&b| !is_raw_path_byte(b)) {
                    let mut path = String::new();
                    render_parts(&self.path, Some(row), &mut path);
                    return Err(invalid_row(format!(
                        "path {path:?} from template {:?} is not a valid request target \
                         ({:?} is not allowed); drop ':raw' to percent-encode the value",
                        self.path_template,
                        char::from(b)
                    )));
                }
            }
            for &(source, parts) in &templated {
                let bad = parts.iter().any(|p| match p {
                    Bound::Value { column, .. } => {
                        !row.cell(*column).iter().all(|&b| is_header_value_byte(b))
                    }
                    Bound::Literal(_) => false,
                });
                if bad {
                    let mut value = Vec::new();
                    render_bytes(parts, Some(row), &mut value);
                    return Err(invalid_row(format!(
                        "header {source:?} renders the value {:?}, which is not a valid \
                         header value (control characters are not allowed)",
                        String::from_utf8_lossy(&value)
                    )));
                }
            }
            if let Some(parts) = body {
                let size = rendered_len(parts, row);
                if size > max_body {
                    return Err(RequestsError::BodyTooLarge {
                        data: data.origin().to_owned(),
                        line,
                        size: size as u64,
                        max: max_body as u64,
                    });
                }
            }
        }
        Ok(())
    }

    /// Number of distinct requests: the data rows, or 1 without data.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: a set holds at least one request. Here for API symmetry.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// True when every index renders the same request (no placeholders): a sender may
    /// encode it once.
    pub fn is_fixed(&self) -> bool {
        self.data.is_none()
    }

    /// The method of every request of this set.
    pub fn method(&self) -> &Method {
        &self.method
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
    /// grown to size and nobody else holds its previous headers or body), no lock, no I/O.
    pub fn render_into(&self, i: u64, out: &mut RenderedRequest) {
        let index = (i % self.len as u64) as usize;
        let row_index = self
            .order
            .as_ref()
            .map_or(index, |order| order.get(index).map_or(0, |&r| r as usize));
        let row = self.data.as_ref().map(|d| d.row(row_index));

        out.reset();
        if out.method != self.method {
            out.method = self.method.clone();
        }
        render_parts(&self.path, row, &mut out.path_and_query);

        // Reserve the arena for every templated part at once: it is reclaimed whole when
        // nobody holds the previous request, whereas growing it while an earlier part of
        // this request is held would allocate anew.
        if let Some(row) = row {
            let headers = self.headers.iter().map(|slot| match slot {
                HeaderSlot::PerRow(_, parts) => rendered_len(parts, row),
                HeaderSlot::Fixed(..) => 0,
            });
            let body = match &self.body {
                BodySlot::PerRow(parts) => rendered_len(parts, row),
                BodySlot::Fixed(_) => 0,
            };
            out.arena.reserve(headers.sum::<usize>() + body);
        }

        for slot in &self.headers {
            match slot {
                HeaderSlot::Fixed(name, value) => out.headers.push((name.clone(), value.clone())),
                HeaderSlot::PerRow(name, parts) => {
                    for part in parts {
                        match part {
                            Bound::Literal(s) => out.arena.extend_from_slice(s.as_bytes()),
                            Bound::Value { column, .. } => {
                                out.arena
                                    .extend_from_slice(row.map_or(&[][..], |r| r.cell(*column)));
                            }
                        }
                    }
                    let bytes = out.arena.split().freeze();
                    // Checked for every row at bind time; an empty value keeps this total.
                    let value = HeaderValue::from_maybe_shared(bytes)
                        .unwrap_or_else(|_| HeaderValue::from_static(""));
                    out.headers.push((name.clone(), value));
                }
            }
        }

        match &self.body {
            BodySlot::Fixed(bytes) => out.body = bytes.clone(),
            BodySlot::PerRow(parts) => {
                for part in parts {
                    match part {
                        Bound::Literal(s) => out.arena.extend_from_slice(s.as_bytes()),
                        // Body values go in as they are; encoding is the template author's.
                        Bound::Value { column, .. } => {
                            out.arena
                                .extend_from_slice(row.map_or(&[][..], |r| r.cell(*column)));
                        }
                    }
                }
                out.body = out.arena.split().freeze();
            }
        }
    }
}

/// Bytes a `{name:raw}` path value may hold: those of a request target without `#` (which
/// would silently cut the rest off as a fragment), and the bytes of non-ASCII UTF-8
/// characters (values are UTF-8), which `http` accepts too.
fn is_raw_path_byte(b: u8) -> bool {
    b >= 0x80 || (b != b'#' && is_request_target_char(char::from(b)))
}

/// Bytes `http` accepts in a header value: visible ASCII, space, tab and obs-text.
pub(crate) fn is_header_value_byte(b: u8) -> bool {
    (b >= 0x20 && b != 0x7F) || b == b'\t'
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

fn rendered_len(parts: &[Bound], row: Row<'_>) -> usize {
    parts
        .iter()
        .map(|p| match p {
            Bound::Literal(s) => s.len(),
            Bound::Value { column, .. } => row.cell(*column).len(),
        })
        .sum()
}

fn render_parts(parts: &[Bound], row: Option<Row<'_>>, out: &mut String) {
    for part in parts {
        match part {
            Bound::Literal(s) => out.push_str(s),
            Bound::Value { column, encode } => {
                // A bound value always has data (checked in `bind`); "" keeps this total.
                let value = row.map_or(&[][..], |r| r.cell(*column));
                if *encode {
                    percent_encode_into(value, out);
                } else {
                    // Values are UTF-8, checked when the data was read.
                    out.push_str(std::str::from_utf8(value).unwrap_or(""));
                }
            }
        }
    }
}

fn render_bytes(parts: &[Bound], row: Option<Row<'_>>, out: &mut Vec<u8>) {
    for part in parts {
        match part {
            Bound::Literal(s) => out.extend_from_slice(s.as_bytes()),
            Bound::Value { column, .. } => {
                out.extend_from_slice(row.map_or(&[][..], |r| r.cell(*column)));
            }
        }
    }
}

/// Percent-encodes every byte outside the RFC 3986 unreserved set
/// (`A-Z a-z 0-9 - . _ ~`), as `%XX` with upper-case hex.
pub(crate) fn percent_encode_into(value: &[u8], out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in value {
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
            percent_encode_into(value.as_bytes(), &mut out);
            assert_eq!(percent_decode(&out), value.as_bytes(), "{value:?} -> {out}");
            assert!(
                out.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-._~%".contains(&b)),
                "{out}"
            );
            http::uri::PathAndQuery::try_from(format!("/{out}")).unwrap();
        }
        let mut out = String::new();
        percent_encode_into(b"plain-._~09AZaz", &mut out);
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
        // Named where it is: a JSON body's placeholder, not the path.
        let err = RequestSet::new(
            template("/p", &[], Some(r#"{"to":"{to}"}"#)),
            None,
            Order::Sequential,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains(r#"{to} in "{\"to\":\"{to}\"}""#), "{err}");

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
    fn a_body_over_the_cap_names_its_line_and_the_cap() {
        let t = template("/x", &[], Some("id={id};"));
        let data = lines(&["1", "22", "4444", "1"]);
        // "id=4444;" is 8 bytes: over a cap of 7, on line 3.
        let err = RequestSet::bind(t.clone(), Some(data.clone()), None, 7).unwrap_err();
        assert!(
            matches!(
                err,
                RequestsError::BodyTooLarge {
                    line: 3,
                    size: 8,
                    max: 7,
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("line 3"), "{err}");
        let set = RequestSet::bind(t, Some(data), None, 8).unwrap();
        assert_eq!(set.render(2).body, "id=4444;");
        // A fixed body is held to the same cap.
        let fixed = template("/x", &[], Some("12345678"));
        assert!(matches!(
            RequestSet::bind(fixed, None, None, 7),
            Err(RequestsError::BodyTooLarge { .. })
        ));
    }

    #[test]
    fn raw_path_bytes_accepted_here_are_accepted_by_http() {
        // The per-row check is a byte test; it must never let through a path that `http`
        // refuses, whatever literal surrounds the value.
        for b in 0u8..=0x7F {
            if !is_raw_path_byte(b) {
                continue;
            }
            let value = char::from(b).to_string();
            for path in [
                format!("/a{value}b"),
                format!("/a?q={value}"),
                format!("/{value}"),
            ] {
                http::uri::PathAndQuery::try_from(path.as_str())
                    .unwrap_or_else(|e| panic!("{path:?}: {e}"));
            }
        }
        for value in ["é", "☃", "𝄞"] {
            assert!(value.bytes().all(is_raw_path_byte));
            http::uri::PathAndQuery::try_from(format!("/{value}?q={value}").as_str()).unwrap();
        }
        assert!(!is_raw_path_byte(b'#') && !is_raw_path_byte(b' '));
    }

    #[test]
    fn header_bytes_accepted_here_are_accepted_by_http() {
        for b in 0u8..=255 {
            assert_eq!(
                is_header_value_byte(b),
                HeaderValue::from_bytes(&[b'a', b, b'a']).is_ok(),
                "byte {b:#x}"
            );
        }
    }

    #[test]
    fn request_set_is_send_and_sync() {
        fn shareable<T: Send + Sync>() {}
        shareable::<RequestSet>();
        shareable::<std::sync::Arc<RequestSet>>();
    }
}
