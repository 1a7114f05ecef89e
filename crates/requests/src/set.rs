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
    Template(Vec<Bound>),
}

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
            Some(text) => BodySlot::Template(bind(text, false)),
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
