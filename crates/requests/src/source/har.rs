//! HAR 1.2 (HTTP Archive, as browsers and proxies export it), read one entry at a time.
//!
//! A HAR file is one JSON document, often tens of megabytes of response bodies. Instead of
//! parsing it whole, a small scanner walks to `log.entries` and, for each entry, copies only
//! the `request` object and `startedDateTime` (a bounded buffer) and skips everything else
//! byte by byte — responses are never held. Each request is then parsed with `serde_json`.
//! The scanner counts nesting instead of recursing, so no input can exhaust the stack.

use std::borrow::Cow;
use std::io;
use std::sync::Arc;

use base64::Engine;
use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method};
use serde::Deserialize;

use super::access_log::{encode_target, path_of_target};
use super::filter::{drop_connection_listed, push_recorded};
use super::read::{PosReader, ReadAt};
use super::time::parse_rfc3339;
use super::{Event, Format, MAX_RECORD, SkipReason};
use crate::set::{MAX_BODY, RenderedRequest};

#[derive(Debug)]
enum ScanError {
    Io(io::Error),
    Syntax(&'static str),
}

impl From<io::Error> for ScanError {
    fn from(e: io::Error) -> ScanError {
        ScanError::Io(e)
    }
}

/// A pull scanner over JSON text that tracks line numbers.
#[derive(Debug)]
struct Scanner {
    r: PosReader,
    line: u64,
}

impl Scanner {
    /// The next non-whitespace byte, not consumed.
    fn peek(&mut self) -> Result<Option<u8>, ScanError> {
        loop {
            let avail = self.r.fill()?;
            let Some(&b) = avail.first() else {
                return Ok(None);
            };
            match b {
                b'\n' => self.line += 1,
                b' ' | b'\t' | b'\r' => {}
                _ => return Ok(Some(b)),
            }
            self.r.consume(1);
        }
    }

    fn expect(&mut self, want: u8, what: &'static str) -> Result<(), ScanError> {
        if self.peek()? == Some(want) {
            self.r.consume(1);
            Ok(())
        } else {
            Err(ScanError::Syntax(what))
        }
    }

    /// Skips (`sink` = None) or copies one JSON value. A copy longer than `max` is cut and
    /// reported by the return value `false`; the value is still consumed whole.
    fn value(&mut self, mut sink: Option<&mut Vec<u8>>, max: usize) -> Result<bool, ScanError> {
        let first = self
            .peek()?
            .ok_or(ScanError::Syntax("the file ends inside a value"))?;
        let mut fits = true;
        let mut depth = 0u64;
        let mut in_string = false;
        let mut escaped = false;
        let scalar = !matches!(first, b'{' | b'[' | b'"');
        let mut started = false;
        loop {
            let avail = self.r.fill()?;
            if avail.is_empty() {
                if scalar && started {
                    return Ok(fits);
                }
                return Err(ScanError::Syntax("the file ends inside a value"));
            }
            let mut n = 0;
            let mut done = false;
            let mut lines = 0;
            for &b in avail {
                if scalar {
                    if matches!(b, b',' | b'}' | b']' | b' ' | b'\t' | b'\r' | b'\n') {
                        done = true;
                        break;
                    }
                    n += 1;
                    continue;
                }
                n += 1;
                if b == b'\n' {
                    lines += 1;
                }
                if in_string {
                    if escaped {
                        escaped = false;
                    } else if b == b'\\' {
                        escaped = true;
                    } else if b == b'"' {
                        in_string = false;
                        if depth == 0 {
                            done = true;
                            break;
                        }
                    }
                    continue;
                }
                match b {
                    b'"' => in_string = true,
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth = depth.saturating_sub(1);
                        if depth == 0 {
                            done = true;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            if let Some(sink) = sink.as_deref_mut() {
                if sink.len() + n > max {
                    fits = false;
                }
                if fits {
                    sink.extend_from_slice(&avail[..n]);
                }
            }
            self.line += lines;
            self.r.consume(n);
            started |= n > 0;
            if done {
                if scalar && !started {
                    return Err(ScanError::Syntax("expected a value"));
                }
                return Ok(fits);
            }
        }
    }

    /// An object key: a string, decoded; keys longer than 256 bytes are returned cut (no
    /// HAR key is that long, so it matches nothing).
    fn key(&mut self, out: &mut Vec<u8>) -> Result<(), ScanError> {
        if self.peek()? != Some(b'"') {
            return Err(ScanError::Syntax("expected an object key"));
        }
        out.clear();
        self.value(Some(out), 256)?;
        if out.contains(&b'\\') {
            let decoded: String = serde_json::from_slice(out).unwrap_or_default();
            out.clear();
            out.extend_from_slice(decoded.as_bytes());
        } else if out.len() >= 2 {
            out.pop();
            out.remove(0);
        }
        self.expect(b':', "expected ':' after an object key")
    }

    /// After a member: `,` (more follow, true) or the closing `close` (false).
    fn member_end(&mut self, close: u8) -> Result<bool, ScanError> {
        match self.peek()? {
            Some(b',') => {
                self.r.consume(1);
                Ok(true)
            }
            Some(b) if b == close => {
                self.r.consume(1);
                Ok(false)
            }
            _ => Err(ScanError::Syntax("expected ',' or the end of an object")),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Start,
    Entries,
    Done,
}

#[derive(Deserialize)]
struct HarRequest {
    method: String,
    url: String,
    #[serde(default)]
    headers: Vec<HarHeader>,
    #[serde(default, rename = "postData")]
    post_data: Option<HarPostData>,
}

#[derive(Deserialize)]
struct HarHeader {
    name: String,
    value: String,
}

#[derive(Deserialize)]
struct HarPostData {
    #[serde(default, rename = "mimeType")]
    mime_type: Option<String>,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    encoding: Option<String>,
    #[serde(default)]
    params: Vec<HarParam>,
}

#[derive(Deserialize)]
struct HarParam {
    name: String,
    #[serde(default)]
    value: Option<String>,
}

#[derive(Debug)]
pub(crate) struct Har {
    scan: Scanner,
    state: State,
    key: Vec<u8>,
    request: Vec<u8>,
    started: Vec<u8>,
    headers: Vec<(HeaderName, HeaderValue)>,
    body: Bytes,
}

type Bad = (SkipReason, Cow<'static, str>);

fn malformed(message: impl Into<Cow<'static, str>>) -> Bad {
    (SkipReason::Malformed, message.into())
}

impl Har {
    pub(crate) fn new(src: Arc<dyn ReadAt>, end: u64) -> Har {
        Har {
            scan: Scanner {
                r: PosReader::new(src, end),
                line: 1,
            },
            state: State::Start,
            key: Vec::new(),
            request: Vec::new(),
            started: Vec::new(),
            headers: Vec::new(),
            body: Bytes::new(),
        }
    }

    /// Walks from the start of the document to the first element of `log.entries`.
    fn find_entries(&mut self) -> Result<(), ScanError> {
        let s = &mut self.scan;
        // A UTF-8 byte order mark, as some Windows tools write.
        if s.r.fill()?.starts_with(b"\xEF\xBB\xBF") {
            s.r.consume(3);
        }
        s.expect(b'{', "a HAR file is a JSON object")?;
        if s.peek()? == Some(b'}') {
            return Err(ScanError::Syntax("no \"log\" object"));
        }
        loop {
            s.key(&mut self.key)?;
            if self.key == b"log" {
                s.expect(b'{', "\"log\" is not an object")?;
                if s.peek()? == Some(b'}') {
                    return Err(ScanError::Syntax("no \"entries\" in \"log\""));
                }
                loop {
                    s.key(&mut self.key)?;
                    if self.key == b"entries" {
                        return s.expect(b'[', "\"entries\" is not an array");
                    }
                    s.value(None, 0)?;
                    if !s.member_end(b'}')? {
                        return Err(ScanError::Syntax("no \"entries\" in \"log\""));
                    }
                }
            }
            s.value(None, 0)?;
            if !s.member_end(b'}')? {
                return Err(ScanError::Syntax("no \"log\" object"));
            }
        }
    }

    /// Reads the next entry's `request` and `startedDateTime`; `None` after the last.
    fn next_entry(&mut self) -> Result<Option<(u64, bool)>, ScanError> {
        let s = &mut self.scan;
        loop {
            match s.peek()? {
                Some(b']') => {
                    s.r.consume(1);
                    return Ok(None);
                }
                Some(b',') => s.r.consume(1),
                Some(b'{') => break,
                None => return Err(ScanError::Syntax("the file ends inside \"entries\"")),
                Some(_) => return Err(ScanError::Syntax("an entry is not an object")),
            }
        }
        let line = s.line;
        s.r.consume(1);
        self.request.clear();
        self.started.clear();
        let mut fits = true;
        if s.peek()? == Some(b'}') {
            s.r.consume(1);
            return Ok(Some((line, true)));
        }
        loop {
            s.key(&mut self.key)?;
            match self.key.as_slice() {
                b"request" => {
                    self.request.clear();
                    fits &= s.value(Some(&mut self.request), MAX_RECORD)?;
                }
                b"startedDateTime" => {
                    self.started.clear();
                    s.value(Some(&mut self.started), 256)?;
                }
                _ => {
                    s.value(None, 0)?;
                }
            }
            if !s.member_end(b'}')? {
                return Ok(Some((line, fits)));
            }
        }
    }

    /// Turns the copied entry into a request (kept until `complete`).
    fn parse_entry(&mut self, fits: bool, out: &mut RenderedRequest) -> Result<i64, Bad> {
        if !fits {
            return Err(malformed("the request is over 64 MiB"));
        }
        if self.request.is_empty() {
            return Err(malformed("the entry has no \"request\""));
        }
        let started: String = serde_json::from_slice(&self.started)
            .map_err(|_| malformed("the entry has no \"startedDateTime\" string"))?;
        let time_ns = parse_rfc3339(&started)
            .ok_or_else(|| malformed(format!("startedDateTime {started:?} is not RFC 3339")))?;
        let request: HarRequest = serde_json::from_slice(&self.request)
            .map_err(|e| malformed(format!("request: {e}")))?;
        let method = Method::from_bytes(request.method.as_bytes())
            .map_err(|_| malformed(format!("invalid method {:?}", request.method)))?;
        if method == Method::CONNECT {
            return Err((SkipReason::NotReplayable, "CONNECT is not replayed".into()));
        }
        let url = request.url.as_bytes();
        let url = url.split(|&b| b == b'#').next().unwrap_or(url);
        let scheme_end = url.iter().position(|&b| b == b':');
        let is_http = url.first() == Some(&b'/')
            || url.len() >= 7 && url[..7].eq_ignore_ascii_case(b"http://")
            || url.len() >= 8 && url[..8].eq_ignore_ascii_case(b"https://");
        if !is_http && scheme_end.is_some() {
            return Err((
                SkipReason::NotReplayable,
                format!("not an http(s) URL: {}", cut(&request.url)).into(),
            ));
        }
        let path = path_of_target(url).map_err(|(r, m)| (r, Cow::Borrowed(m)))?;
        out.reset();
        if path.first() != Some(&b'/') {
            out.path_and_query.push('/');
        }
        encode_target(path, &mut out.path_and_query);
        out.method = method;

        self.headers.clear();
        let mut connection: Option<String> = None;
        let mut has_type = false;
        for h in &request.headers {
            if !push_recorded(&mut self.headers, h.name.as_bytes(), h.value.as_bytes()) {
                return Err(malformed(format!(
                    "header {:?} is not a valid header",
                    cut(&h.name)
                )));
            }
            if h.name.eq_ignore_ascii_case("connection") {
                connection = Some(h.value.clone());
            }
            has_type |= h.name.eq_ignore_ascii_case("content-type");
        }
        if let Some(listed) = connection {
            drop_connection_listed(&mut self.headers, listed.as_bytes());
        }
        self.body = Bytes::new();
        if let Some(post) = request.post_data {
            let body = match (post.text, post.encoding.as_deref()) {
                (Some(text), Some(enc)) if enc.eq_ignore_ascii_case("base64") => {
                    base64::engine::general_purpose::STANDARD
                        .decode(text.trim())
                        .map_err(|e| malformed(format!("postData: base64: {e}")))?
                }
                (Some(_), Some(enc)) => {
                    return Err(malformed(format!(
                        "postData: unknown encoding {:?}",
                        cut(enc)
                    )));
                }
                (Some(text), None) => text.into_bytes(),
                (None, _) => form_urlencoded(&post.params),
            };
            if body.len() > MAX_BODY {
                return Err(malformed("postData is over 256 MiB"));
            }
            if !has_type
                && let Some(v) = post
                    .mime_type
                    .filter(|m| !m.is_empty())
                    .and_then(|m| HeaderValue::from_str(&m).ok())
            {
                self.headers.push((http::header::CONTENT_TYPE, v));
            }
            self.body = Bytes::from(body);
        }
        Ok(time_ns)
    }
}

/// `params` as `application/x-www-form-urlencoded`, for posts recorded without `text`.
fn form_urlencoded(params: &[HarParam]) -> Vec<u8> {
    let mut out = String::new();
    for (i, p) in params.iter().enumerate() {
        if i > 0 {
            out.push('&');
        }
        crate::set::percent_encode_into(p.name.as_bytes(), &mut out);
        out.push('=');
        crate::set::percent_encode_into(p.value.as_deref().unwrap_or("").as_bytes(), &mut out);
    }
    out.into_bytes()
}

fn cut(s: &str) -> String {
    s.chars().take(80).collect()
}

impl Format for Har {
    fn next(&mut self, out: &mut RenderedRequest) -> io::Result<Event> {
        let syntax = |line: u64, message: &'static str| Event::Skip {
            line,
            reason: SkipReason::Malformed,
            message: Cow::Owned(format!("invalid JSON, reading stops here: {message}")),
        };
        if self.state == State::Start {
            match self.find_entries() {
                Ok(()) => self.state = State::Entries,
                Err(ScanError::Io(e)) => return Err(e),
                Err(ScanError::Syntax(m)) => {
                    self.state = State::Done;
                    return Ok(syntax(self.scan.line, m));
                }
            }
        }
        if self.state == State::Done {
            return Ok(Event::Eof);
        }
        match self.next_entry() {
            Ok(None) => {
                self.state = State::Done;
                Ok(Event::Eof)
            }
            Ok(Some((line, fits))) => Ok(match self.parse_entry(fits, out) {
                Ok(time_ns) => Event::Record { line, time_ns },
                Err((reason, message)) => Event::Skip {
                    line,
                    reason,
                    message,
                },
            }),
            Err(ScanError::Io(e)) => Err(e),
            Err(ScanError::Syntax(m)) => {
                self.state = State::Done;
                Ok(syntax(self.scan.line, m))
            }
        }
    }

    fn complete(&mut self, out: &mut RenderedRequest) {
        out.headers.append(&mut self.headers);
        out.body = std::mem::take(&mut self.body);
    }

    fn rewind(&mut self) {
        self.scan.r.seek(0);
        self.scan.line = 1;
        self.state = State::Start;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(text: &str) -> Vec<Result<(String, String), (SkipReason, String)>> {
        let bytes = text.as_bytes().to_vec();
        let end = bytes.len() as u64;
        let mut har = Har::new(Arc::new(super::super::read::Memory(bytes)), end);
        let mut out = RenderedRequest::default();
        let mut got = Vec::new();
        loop {
            match har.next(&mut out).unwrap() {
                Event::Eof => return got,
                Event::Record { .. } => {
                    har.complete(&mut out);
                    got.push(Ok((out.method.to_string(), out.path_and_query.clone())));
                }
                Event::Skip {
                    reason, message, ..
                } => got.push(Err((reason, message.into_owned()))),
            }
        }
    }

    #[test]
    fn entries_found_wherever_they_are_and_responses_skipped() {
        let text = r#"{"log": {"version": "1.2", "pages": [{"x": "]}"}],
          "entries": [
            {"response": {"content": {"text": "}}]]{{\"\\"}}, "startedDateTime": "2024-01-01T00:00:00Z",
             "request": {"method": "GET", "url": "https://h/a?b=1#frag", "headers": []}},
            {"request": {"method": "GET", "url": "data:text/plain,hi"}, "startedDateTime": "2024-01-01T00:00:01Z"},
            {"request": {"method": "GET"}, "startedDateTime": "2024-01-01T00:00:01Z"},
            {}
          ], "creator": {}}}"#;
        let got = events(text);
        assert_eq!(got[0], Ok(("GET".to_owned(), "/a?b=1".to_owned())));
        assert!(
            matches!(&got[1], Err((SkipReason::NotReplayable, _))),
            "{:?}",
            got[1]
        );
        assert!(
            matches!(&got[2], Err((SkipReason::Malformed, m)) if m.contains("url")),
            "{:?}",
            got[2]
        );
        assert!(
            matches!(&got[3], Err((SkipReason::Malformed, _))),
            "{:?}",
            got[3]
        );
        assert_eq!(got.len(), 4);
    }

    #[test]
    fn broken_documents_stop_with_one_malformed_event() {
        for text in [
            "",
            "[]",
            "{\"log\": {}}",
            "{\"log\": {\"entries\": 5}}",
            "{\"log\": {\"entries\": [{\"request\": {\"method\": \"GET\"",
            "{\"log\": {\"entries\": [ {\"request\": {\"method\": \"GET\", \"url\": \"/\"}, \"startedDateTime\": \"2024-01-01T00:00:00Z\"} x",
        ] {
            let got = events(text);
            let last = got.last().unwrap_or_else(|| panic!("{text:?}: no event"));
            assert!(
                matches!(last, Err((SkipReason::Malformed, m)) if m.contains("invalid JSON")),
                "{text:?}: {got:?}"
            );
        }
    }

    #[test]
    fn deep_nesting_is_skipped_without_recursion() {
        let deep = "[".repeat(1_000_000) + &"]".repeat(1_000_000);
        let text = format!(
            "{{\"log\": {{\"x\": {deep}, \"entries\": [{{\"startedDateTime\": \"2024-01-01T00:00:00Z\", \"request\": {{\"method\": \"GET\", \"url\": \"/ok\"}}}}]}}}}"
        );
        assert_eq!(events(&text), [Ok(("GET".to_owned(), "/ok".to_owned()))]);
    }
}
