//! The template language: `{name}`, `{name:raw}`, `{{` and `}}`.

use http::{HeaderName, HeaderValue, Method};

use crate::RequestsError;

/// One piece of a parsed template text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Part {
    Literal(String),
    Placeholder { name: String, raw: bool },
}

/// A template text split into literals and placeholders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Text {
    pub(crate) source: String,
    pub(crate) parts: Vec<Part>,
}

impl Text {
    pub(crate) fn has_placeholders(&self) -> bool {
        self.parts
            .iter()
            .any(|p| matches!(p, Part::Placeholder { .. }))
    }

    fn names(&self) -> impl Iterator<Item = &str> {
        self.parts.iter().filter_map(|p| match p {
            Part::Placeholder { name, .. } => Some(name.as_str()),
            Part::Literal(_) => None,
        })
    }
}

/// A header of a template: a fixed name and a value template.
#[derive(Debug, Clone)]
pub(crate) struct HeaderTemplate {
    pub(crate) source: String,
    pub(crate) name: HeaderName,
    pub(crate) value: Text,
}

/// A request with `{name}` placeholders in its path, query, header values and body.
///
/// See the crate documentation for the template language.
#[derive(Debug, Clone)]
pub struct RequestTemplate {
    pub(crate) method: Method,
    pub(crate) path: Text,
    pub(crate) headers: Vec<HeaderTemplate>,
    pub(crate) body: Option<Text>,
}

impl RequestTemplate {
    /// Parses a request template.
    ///
    /// `path_and_query` is a path template like `"/v1/users/{id}/stats?days=30"` and must
    /// start with `/`. `headers` are `"Name: value"` strings whose values may hold
    /// placeholders; `body` may hold placeholders too.
    ///
    /// # Errors
    ///
    /// An invalid method, a path that does not start with `/` or holds characters not
    /// allowed in a request target, an unclosed `{`, a stray `}`, a bad placeholder name,
    /// a header without `:` or with an invalid name or literal value.
    pub fn parse(
        method: &str,
        path_and_query: &str,
        headers: &[String],
        body: Option<&str>,
    ) -> Result<RequestTemplate, RequestsError> {
        let method = Method::from_bytes(method.as_bytes()).map_err(|_| RequestsError::Method {
            method: method.to_owned(),
        })?;
        let path = parse_text("path", path_and_query, LoneBrace::Refused)?;
        check_path_literals(&path)?;
        let headers = headers
            .iter()
            .map(|h| parse_header(h))
            .collect::<Result<Vec<_>, _>>()?;
        let body = body
            .map(|b| parse_text("body", b, LoneBrace::Literal))
            .transpose()?;
        Ok(RequestTemplate {
            method,
            path,
            headers,
            body,
        })
    }

    /// The source text (path, header or body) of the first placeholder, if any: where a
    /// user looks for it.
    pub(crate) fn first_placeholder_text(&self) -> Option<&str> {
        std::iter::once((&self.path, self.path.source.as_str()))
            .chain(self.headers.iter().map(|h| (&h.value, h.source.as_str())))
            .chain(self.body.iter().map(|b| (b, b.source.as_str())))
            .find(|(text, _)| text.has_placeholders())
            .map(|(_, source)| source)
    }

    /// The distinct placeholder names used, in order of first use (path, headers, body).
    pub fn placeholders(&self) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        let texts = std::iter::once(&self.path)
            .chain(self.headers.iter().map(|h| &h.value))
            .chain(self.body.iter());
        for text in texts {
            for name in text.names() {
                if !names.iter().any(|n| n == name) {
                    names.push(name.to_owned());
                }
            }
        }
        names
    }
}

/// How a brace that is neither part of a placeholder nor an escape is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LoneBrace {
    /// Sent as written: headers and bodies, where JSON's braces are data.
    Literal,
    /// Refused: the path, where a brace is no URL character and one that is not
    /// template syntax is a broken placeholder (`/v1/{id`).
    Refused,
}

/// A template text as characters, scanned left to right.
struct Scan<'a> {
    part: &'static str,
    source: &'a str,
    chars: Vec<char>,
    lone: LoneBrace,
    parts: Vec<Part>,
    literal: String,
    /// `{{` escapes not closed by a `}}` yet: while one is open, `}}` writes one `}`
    /// (a template written the old way, `{{"a": "{id}"}}`, keeps its meaning).
    open_escapes: usize,
}

/// Splits `source` into literals and placeholders (the language is in docs/requests.md):
/// `{name}` and `{name:raw}` are placeholders, `{{` writes `{` and the `}}` that closes
/// it writes `}`; any other brace is read as `lone` says.
pub(crate) fn parse_text(
    part: &'static str,
    source: &str,
    lone: LoneBrace,
) -> Result<Text, RequestsError> {
    let mut scan = Scan {
        part,
        source,
        chars: source.chars().collect(),
        lone,
        parts: Vec::new(),
        literal: String::new(),
        open_escapes: 0,
    };
    let mut at = 0;
    while at < scan.chars.len() {
        at += match scan.chars[at] {
            '{' => scan.open(at)?,
            '}' => scan.close(at)?,
            c => {
                scan.literal.push(c);
                1
            }
        };
    }
    if !scan.literal.is_empty() {
        scan.parts.push(Part::Literal(scan.literal));
    }
    Ok(Text {
        source: source.to_owned(),
        parts: scan.parts,
    })
}

impl Scan<'_> {
    fn error(&self, at: usize, message: String) -> RequestsError {
        RequestsError::Template {
            part: self.part,
            template: self.source.to_owned(),
            column: at + 1,
            message,
        }
    }

    fn next_is(&self, at: usize, c: char) -> bool {
        self.chars.get(at + 1) == Some(&c)
    }

    /// The `{` at `at`: an escape, a placeholder or a lone brace; the characters taken.
    fn open(&mut self, at: usize) -> Result<usize, RequestsError> {
        if self.next_is(at, '{') {
            self.literal.push('{');
            self.open_escapes += 1;
            return Ok(2);
        }
        match placeholder_at(&self.chars[at..]) {
            Some(Ok((name, raw, len))) => {
                if !self.literal.is_empty() {
                    self.parts
                        .push(Part::Literal(std::mem::take(&mut self.literal)));
                }
                self.parts.push(Part::Placeholder { name, raw });
                Ok(len)
            }
            Some(Err(modifier)) => Err(self.error(
                at,
                format!("unknown modifier {modifier:?} (only ':raw' exists)"),
            )),
            None if self.lone == LoneBrace::Refused => Err(self.error(at, self.bad_open(at))),
            None => {
                self.literal.push('{');
                Ok(1)
            }
        }
    }

    /// The `}` at `at`: the end of an escape, or a lone brace; the characters taken.
    fn close(&mut self, at: usize) -> Result<usize, RequestsError> {
        let escapes = self.open_escapes > 0 || self.lone == LoneBrace::Refused;
        if escapes && self.next_is(at, '}') {
            self.literal.push('}');
            self.open_escapes = self.open_escapes.saturating_sub(1);
            return Ok(2);
        }
        if self.lone == LoneBrace::Refused {
            return Err(self.error(
                at,
                "'}' without a matching '{' (write '}}' for a literal brace)".to_owned(),
            ));
        }
        self.literal.push('}');
        Ok(1)
    }

    /// Why the `{` at `at` is no placeholder, in words.
    fn bad_open(&self, at: usize) -> String {
        let rest = &self.chars[at + 1..];
        let Some(end) = rest.iter().position(|&c| c == '}') else {
            return "unclosed '{' (write '{{' for a literal brace)".to_owned();
        };
        let inner: String = rest[..end].iter().collect();
        let name = inner
            .split_once(':')
            .map_or(inner.as_str(), |(name, _)| name);
        if !name.is_empty() && name.chars().all(is_name_char) {
            return format!("bad placeholder {{{inner}}}: write {{{name}}} or {{{name}:raw}}");
        }
        format!(
            "bad placeholder name {name:?}: use letters, digits and '_' (write '{{{{' for a \
             literal brace)"
        )
    }
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The placeholder at the start of `chars` (which starts with `{`): its name, whether it is
/// raw, and its length in characters. `None` when the brace opens no placeholder;
/// `Err(modifier)` for `{name:modifier}` with a modifier other than `raw`.
fn placeholder_at(chars: &[char]) -> Option<Result<(String, bool, usize), String>> {
    let word = |from: usize| {
        let len = chars[from..]
            .iter()
            .take_while(|&&c| is_name_char(c))
            .count();
        (len > 0).then(|| chars[from..from + len].iter().collect::<String>())
    };
    let name = word(1)?;
    let after = 1 + name.chars().count();
    match chars.get(after)? {
        '}' => Some(Ok((name, false, after + 1))),
        ':' => {
            let modifier = word(after + 1)?;
            let end = after + 1 + modifier.chars().count();
            if chars.get(end) != Some(&'}') {
                return None;
            }
            if modifier == "raw" {
                Some(Ok((name, true, end + 1)))
            } else {
                Some(Err(modifier))
            }
        }
        _ => None,
    }
}

/// The literal parts of a path must be valid in a request target on their own, so that
/// only values written `{name:raw}` need checking per row.
fn check_path_literals(path: &Text) -> Result<(), RequestsError> {
    let error = |column: usize, message: String| RequestsError::Template {
        part: "path",
        template: path.source.clone(),
        column,
        message,
    };
    if !path.source.starts_with('/') {
        return Err(error(1, "a path must start with '/'".to_owned()));
    }
    // Stand a harmless character in for every placeholder and let `http` judge the rest.
    let mut probe = String::with_capacity(path.source.len());
    for part in &path.parts {
        match part {
            Part::Literal(text) => probe.push_str(text),
            Part::Placeholder { .. } => probe.push('x'),
        }
    }
    if let Some((index, c)) = path
        .source
        .chars()
        .enumerate()
        .find(|&(_, c)| !is_request_target_char(c))
    {
        return Err(error(
            index + 1,
            format!("{c:?} is not allowed in a path; percent-encode it"),
        ));
    }
    if probe.contains('#') {
        let column = path.source.chars().position(|c| c == '#').unwrap_or(0) + 1;
        return Err(error(
            column,
            "'#' (a fragment) is not sent in a request; write %23".to_owned(),
        ));
    }
    http::uri::PathAndQuery::try_from(probe.as_str())
        .map_err(|e| error(1, format!("not a valid path and query: {e}")))?;
    Ok(())
}

/// Characters `http` accepts in a path and query (visible ASCII except a few), plus the
/// braces of the template syntax itself.
pub(crate) const fn is_request_target_char(c: char) -> bool {
    c.is_ascii_graphic() && !matches!(c, '"' | '<' | '>' | '\\' | '^' | '`' | '|')
}

fn parse_header(header: &str) -> Result<HeaderTemplate, RequestsError> {
    let error = |message: String| RequestsError::Header {
        header: header.to_owned(),
        message,
    };
    let (name, value) = header
        .split_once(':')
        .ok_or_else(|| error("expected 'Name: value'".to_owned()))?;
    let name = HeaderName::from_bytes(name.trim().as_bytes())
        .map_err(|_| error(format!("invalid header name {:?}", name.trim())))?;
    let value = parse_text("header", value.trim(), LoneBrace::Literal)?;
    for part in &value.parts {
        if let Part::Literal(text) = part {
            HeaderValue::from_str(text).map_err(|_| {
                error("the value holds a character not allowed in a header".to_owned())
            })?;
        }
    }
    Ok(HeaderTemplate {
        source: header.to_owned(),
        name,
        value,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lit(s: &str) -> Part {
        Part::Literal(s.to_owned())
    }

    fn ph(name: &str, raw: bool) -> Part {
        Part::Placeholder {
            name: name.to_owned(),
            raw,
        }
    }

    fn column_of(result: Result<Text, RequestsError>) -> (usize, String) {
        match result {
            Err(RequestsError::Template {
                column, message, ..
            }) => (column, message),
            other => panic!("expected a template error, got {other:?}"),
        }
    }

    #[test]
    fn splits_literals_placeholders_and_escapes() {
        let text = parse_text("path", "/u/{id}/x?{{a}}={q:raw}&z", LoneBrace::Refused).unwrap();
        assert_eq!(
            text.parts,
            [
                lit("/u/"),
                ph("id", false),
                lit("/x?{a}="),
                ph("q", true),
                lit("&z")
            ]
        );
        assert_eq!(
            parse_text("body", "", LoneBrace::Literal).unwrap().parts,
            []
        );
        assert_eq!(
            parse_text("body", "{a}{b_2}", LoneBrace::Literal)
                .unwrap()
                .parts,
            [ph("a", false), ph("b_2", false)]
        );
    }

    #[test]
    fn errors_point_at_the_column() {
        let path = |t| parse_text("path", t, LoneBrace::Refused);
        let (column, message) = column_of(path("/v1/{id"));
        assert_eq!(column, 5);
        assert!(message.contains("unclosed"), "{message}");

        let (column, message) = column_of(path("/v1/{user id}"));
        assert_eq!(column, 5);
        assert!(message.contains("bad placeholder name"), "{message}");

        let (column, _) = column_of(path("/é/{}"));
        assert_eq!(column, 4, "columns count characters, not bytes");

        let (column, message) = column_of(path("/a}b"));
        assert_eq!(column, 3);
        assert!(message.contains("'}}'"), "{message}");

        let (_, message) = column_of(path("/{id:}"));
        assert!(message.contains("{id} or {id:raw}"), "{message}");

        let (column, message) = column_of(parse_text("body", "x{id:upper}", LoneBrace::Literal));
        assert_eq!(column, 2);
        assert!(message.contains("\"upper\""), "{message}");
    }

    /// #26.2: `{"to":"{id}","amount":5}` was refused with `unknown modifier "\"{id"`: the
    /// first brace opened a placeholder that ran to the first `}`.
    #[test]
    fn json_bodies_are_read_as_written() {
        let body = |t| parse_text("body", t, LoneBrace::Literal).map(|t| t.parts);
        assert_eq!(
            body(r#"{"to":"{id}","amount":5}"#).unwrap(),
            [lit(r#"{"to":""#), ph("id", false), lit(r#"","amount":5}"#)]
        );
        // Nested objects end in `}}`: two braces, not an escape.
        assert_eq!(
            body(r#"{"a":{"b":{n:raw}}}"#).unwrap(),
            [lit(r#"{"a":{"b":"#), ph("n", true), lit("}}")]
        );
        // Braces that open no placeholder, anywhere: `{}`, `{ `, `{"`, `{a-b}`, `{x`, `}`.
        for text in [
            "{}",
            "{ \"a\": 1 }",
            "[{},{}]",
            "{a-b}",
            "{x",
            "}{",
            "a}}b",
            "{id:}",
        ] {
            assert_eq!(body(text).unwrap(), [lit(text)], "{text}");
        }
        // Written the old way, doubled braces keep their meaning: a `}}` that closes a `{{`
        // is one brace.
        assert_eq!(
            body(r#"{{"a":{{"b":"{id}"}},"c":{n}}}"#).unwrap(),
            [
                lit(r#"{"a":{"b":""#),
                ph("id", false),
                lit(r#""},"c":"#),
                ph("n", false),
                lit("}")
            ]
        );
        assert_eq!(body("{{id}}").unwrap(), [lit("{id}")]);
        assert_eq!(
            body("{{{id}}}").unwrap(),
            [lit("{"), ph("id", false), lit("}")]
        );
        // A single `}` after a `{{` is itself; the escape stays open until a `}}`.
        assert_eq!(body("{{id}:{}}").unwrap(), [lit("{id}:{}")]);
        // Headers read braces the same way.
        let t = RequestTemplate::parse(
            "GET",
            "/",
            &["X-Filter: {\"id\":\"{id}\"}".to_owned()],
            None,
        )
        .unwrap();
        assert_eq!(
            t.headers[0].value.parts,
            [lit("{\"id\":\""), ph("id", false), lit("\"}")]
        );
    }

    #[test]
    fn error_message_shows_the_template() {
        let err = RequestTemplate::parse("GET", "/v1/{id", &[], None).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("\"/v1/{id\""), "{text}");
        assert!(text.contains("column 5"), "{text}");
    }

    #[test]
    fn path_must_be_a_valid_origin_form() {
        for bad in ["v1/x", "", "/a b", "/a\"b", "/caf\u{e9}", "/a#frag"] {
            let err = RequestTemplate::parse("GET", bad, &[], None);
            assert!(
                matches!(err, Err(RequestsError::Template { part: "path", .. })),
                "{bad:?} -> {err:?}"
            );
        }
        for good in [
            "/",
            "/a/{x}?q={y}&r=%20",
            "/{{literal}}",
            "/a;b=c,d@e:f!$'()*+",
        ] {
            RequestTemplate::parse("GET", good, &[], None)
                .unwrap_or_else(|e| panic!("{good:?}: {e}"));
        }
    }

    #[test]
    fn headers_and_methods() {
        let t = RequestTemplate::parse(
            "POST",
            "/x",
            &[
                "X-Id:{id}".to_owned(),
                "  Accept :  text/plain  ".to_owned(),
            ],
            Some(
                "{\"a\": \"{name}\"}"
                    .replace('{', "{{")
                    .replace('}', "}}")
                    .as_str(),
            ),
        )
        .unwrap();
        assert_eq!(t.headers[0].name, "x-id");
        assert_eq!(t.headers[1].name, "accept");
        assert_eq!(t.headers[1].value.parts, [lit("text/plain")]);
        assert_eq!(t.placeholders(), ["id"]);

        for bad in ["no colon", "Bad Name: x", ": empty name", "X: a\u{7}b"] {
            let err = RequestTemplate::parse("GET", "/", &[bad.to_owned()], None);
            assert!(
                matches!(err, Err(RequestsError::Header { .. })),
                "{bad:?} -> {err:?}"
            );
        }
        assert!(matches!(
            RequestTemplate::parse("GE T", "/", &[], None),
            Err(RequestsError::Method { .. })
        ));
        assert!(RequestTemplate::parse("PURGE", "/", &[], None).is_ok());
    }

    #[test]
    fn placeholders_are_distinct_in_first_use_order() {
        let t = RequestTemplate::parse(
            "GET",
            "/{b}/{a}/{b:raw}",
            &["X: {c}{a}".to_owned()],
            Some("{d}{b}"),
        )
        .unwrap();
        assert_eq!(t.placeholders(), ["b", "a", "c", "d"]);
    }
}
