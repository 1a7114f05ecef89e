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
        let path = parse_text("path", path_and_query)?;
        check_path_literals(&path)?;
        let headers = headers
            .iter()
            .map(|h| parse_header(h))
            .collect::<Result<Vec<_>, _>>()?;
        let body = body.map(|b| parse_text("body", b)).transpose()?;
        Ok(RequestTemplate {
            method,
            path,
            headers,
            body,
        })
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

/// Splits `source` into literals and placeholders.
pub(crate) fn parse_text(part: &'static str, source: &str) -> Result<Text, RequestsError> {
    let error = |column: usize, message: String| RequestsError::Template {
        part,
        template: source.to_owned(),
        column,
        message,
    };
    let mut parts = Vec::new();
    let mut literal = String::new();
    // (1-based column, char)
    let mut chars = source
        .chars()
        .enumerate()
        .map(|(i, c)| (i + 1, c))
        .peekable();
    while let Some((column, c)) = chars.next() {
        match c {
            '{' if chars.peek().is_some_and(|&(_, n)| n == '{') => {
                chars.next();
                literal.push('{');
            }
            '}' if chars.peek().is_some_and(|&(_, n)| n == '}') => {
                chars.next();
                literal.push('}');
            }
            '}' => {
                return Err(error(
                    column,
                    "'}' without a matching '{' (write '}}' for a literal brace)".to_owned(),
                ));
            }
            '{' => {
                let mut inner = String::new();
                let mut closed = false;
                for (_, n) in chars.by_ref() {
                    if n == '}' {
                        closed = true;
                        break;
                    }
                    inner.push(n);
                }
                if !closed {
                    return Err(error(
                        column,
                        "unclosed '{' (write '{{' for a literal brace)".to_owned(),
                    ));
                }
                let (name, raw) = match inner.split_once(':') {
                    None => (inner.as_str(), false),
                    Some((name, "raw")) => (name, true),
                    Some((_, modifier)) => {
                        return Err(error(
                            column,
                            format!("unknown modifier {modifier:?} (only ':raw' exists)"),
                        ));
                    }
                };
                if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                {
                    return Err(error(
                        column,
                        format!(
                            "bad placeholder name {name:?}: use letters, digits and '_' \
                             (write '{{{{' for a literal brace)"
                        ),
                    ));
                }
                if !literal.is_empty() {
                    parts.push(Part::Literal(std::mem::take(&mut literal)));
                }
                parts.push(Part::Placeholder {
                    name: name.to_owned(),
                    raw,
                });
            }
            c => literal.push(c),
        }
    }
    if !literal.is_empty() {
        parts.push(Part::Literal(literal));
    }
    Ok(Text {
        source: source.to_owned(),
        parts,
    })
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
    let value = parse_text("header", value.trim())?;
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
        let text = parse_text("path", "/u/{id}/x?{{a}}={q:raw}&z").unwrap();
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
        assert_eq!(parse_text("body", "").unwrap().parts, []);
        assert_eq!(
            parse_text("body", "{a}{b_2}").unwrap().parts,
            [ph("a", false), ph("b_2", false)]
        );
    }

    #[test]
    fn errors_point_at_the_column() {
        let (column, message) = column_of(parse_text("path", "/v1/{id"));
        assert_eq!(column, 5);
        assert!(message.contains("unclosed"), "{message}");

        let (column, message) = column_of(parse_text("path", "/v1/{user id}"));
        assert_eq!(column, 5);
        assert!(message.contains("bad placeholder name"), "{message}");

        let (column, _) = column_of(parse_text("path", "/é/{}"));
        assert_eq!(column, 4, "columns count characters, not bytes");

        let (column, message) = column_of(parse_text("body", "a}b"));
        assert_eq!(column, 2);
        assert!(message.contains("'}}'"), "{message}");

        let (_, message) = column_of(parse_text("body", "{id:upper}"));
        assert!(message.contains("upper"), "{message}");
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
