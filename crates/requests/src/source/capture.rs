//! Reading capture files (the format is written and described in `crate::capture`).

use std::borrow::Cow;
use std::io;
use std::sync::Arc;

use base64::Engine;
use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method};

use super::access_log::encode_target;
use super::filter::{drop_connection_listed, push_recorded};
use super::read::{Line, PosReader, ReadAt};
use super::{Event, Format, MAX_RECORD, SkipReason};
use crate::capture::{CAPTURE_VERSION, CaptureLine};
use crate::set::{MAX_BODY, RenderedRequest};

#[derive(Debug)]
pub(crate) struct CaptureReader {
    r: PosReader,
    line: Vec<u8>,
    line_no: u64,
    headers: Vec<(HeaderName, HeaderValue)>,
    body: Bytes,
}

type Bad = (SkipReason, Cow<'static, str>);

fn malformed(message: impl Into<Cow<'static, str>>) -> Bad {
    (SkipReason::Malformed, message.into())
}

impl CaptureReader {
    pub(crate) fn new(src: Arc<dyn ReadAt>, end: u64) -> CaptureReader {
        CaptureReader {
            r: PosReader::new(src, end),
            line: Vec::new(),
            line_no: 0,
            headers: Vec::new(),
            body: Bytes::new(),
        }
    }

    /// `Ok(None)` for the header line.
    fn parse(&mut self, out: &mut RenderedRequest) -> Result<Option<i64>, Bad> {
        let record: CaptureLine<'_> = serde_json::from_slice(&self.line).map_err(|e| {
            if e.is_eof() {
                malformed("incomplete record (cut off while it was written?)")
            } else {
                malformed(format!("invalid JSON: {e}"))
            }
        })?;
        if let Some(version) = record.scalpel_capture {
            if version != CAPTURE_VERSION {
                return Err(malformed(format!(
                    "capture format version {version} is not supported (this reads {CAPTURE_VERSION})"
                )));
            }
            return Ok(None);
        }
        let time_us = record.time_us.ok_or_else(|| malformed("no \"time_us\""))?;
        let method = record.method.ok_or_else(|| malformed("no \"method\""))?;
        let method = Method::from_bytes(method.as_bytes())
            .map_err(|_| malformed(format!("invalid method {method:?}")))?;
        if method == Method::CONNECT {
            return Err((SkipReason::NotReplayable, "CONNECT is not replayed".into()));
        }
        let path = record.path.ok_or_else(|| malformed("no \"path\""))?;
        if !path.starts_with('/') {
            return Err(malformed("\"path\" does not start with '/'"));
        }
        let b64 = base64::engine::general_purpose::STANDARD;
        self.headers.clear();
        let mut connection = None;
        for pair in record.headers.unwrap_or_default() {
            let value = match pair.as_slice() {
                [_, value] => Cow::Borrowed(value.as_bytes()),
                [_, value, enc] if enc == "base64" => Cow::Owned(
                    b64.decode(value.as_bytes())
                        .map_err(|e| malformed(format!("header: base64: {e}")))?,
                ),
                _ => {
                    return Err(malformed(
                        "a header is not [name, value] or [name, value, \"base64\"]",
                    ));
                }
            };
            if !push_recorded(&mut self.headers, pair[0].as_bytes(), &value) {
                return Err(malformed(format!(
                    "header {:?} is not a valid header",
                    pair[0]
                )));
            }
            if pair[0].eq_ignore_ascii_case("connection") {
                connection = Some(value.into_owned());
            }
        }
        if let Some(listed) = connection {
            drop_connection_listed(&mut self.headers, &listed);
        }
        let body = match (record.body, record.body_encoding.as_deref()) {
            (None, _) => Vec::new(),
            (Some(text), None) => text.into_owned().into_bytes(),
            (Some(text), Some("base64")) => b64
                .decode(text.as_bytes())
                .map_err(|e| malformed(format!("body: base64: {e}")))?,
            (Some(_), Some(other)) => {
                return Err(malformed(format!("unknown body_encoding {other:?}")));
            }
        };
        if body.len() > MAX_BODY {
            return Err(malformed("the body is over 256 MiB"));
        }
        self.body = Bytes::from(body);
        out.reset();
        encode_target(path.as_bytes(), &mut out.path_and_query);
        out.method = method;
        i64::try_from(time_us)
            .ok()
            .and_then(|us| us.checked_mul(1000))
            .map(Some)
            .ok_or_else(|| malformed("\"time_us\" is out of range"))
    }
}

impl Format for CaptureReader {
    fn next(&mut self, out: &mut RenderedRequest) -> io::Result<Event> {
        loop {
            let kind = self
                .r
                .read_record_line(&mut self.line, MAX_RECORD, &mut self.line_no)?;
            if kind == Line::Eof {
                return Ok(Event::Eof);
            }
            let line = self.line_no;
            if kind == Line::TooLong {
                return Ok(Event::Skip {
                    line,
                    reason: SkipReason::Malformed,
                    message: "record over 64 MiB".into(),
                });
            }
            match self.parse(out) {
                Ok(None) => continue,
                Ok(Some(time_ns)) => return Ok(Event::Record { line, time_ns }),
                Err((reason, message)) => {
                    return Ok(Event::Skip {
                        line,
                        reason,
                        message,
                    });
                }
            }
        }
    }

    fn complete(&mut self, out: &mut RenderedRequest) {
        out.headers.append(&mut self.headers);
        out.body = std::mem::take(&mut self.body);
    }

    fn rewind(&mut self) {
        self.r.seek(0);
        self.line_no = 0;
    }
}
