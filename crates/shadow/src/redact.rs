//! Keeping secrets out of the store: headers, JSON fields, query and form parameters.

use std::collections::HashSet;

use bytes::Bytes;
use http::HeaderMap;
use http::header::{
    AUTHORIZATION, CONTENT_TYPE, COOKIE, HeaderValue, PROXY_AUTHORIZATION, SET_COOKIE,
};
use scalpel_diff::Difference;
use serde_json::Value;

/// The text that replaces a redacted value.
pub const REDACTED: &str = "[REDACTED]";

/// Which names are secret. `Authorization`, `Proxy-Authorization`, `Cookie` and
/// `Set-Cookie` always are; each extra name (case-insensitive) is redacted as a header, a
/// JSON field at any depth, a query parameter and a form field.
#[derive(Debug, Clone)]
pub struct Redactor {
    names: HashSet<String>,
}

impl Default for Redactor {
    fn default() -> Self {
        Self::new(std::iter::empty::<&str>())
    }
}

impl Redactor {
    /// The default names plus `extra`.
    pub fn new<I, S>(extra: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut names: HashSet<String> = [AUTHORIZATION, PROXY_AUTHORIZATION, COOKIE, SET_COOKIE]
            .iter()
            .map(|h| h.as_str().to_string())
            .collect();
        names.extend(
            extra
                .into_iter()
                .map(|s| s.as_ref().trim().to_ascii_lowercase()),
        );
        Self { names }
    }

    fn is_secret(&self, name: &str) -> bool {
        self.names.contains(&name.to_ascii_lowercase())
    }

    /// A copy of `headers` with secret values replaced.
    pub fn headers(&self, headers: &HeaderMap) -> HeaderMap {
        let mut out = headers.clone();
        for (name, value) in out.iter_mut() {
            if self.is_secret(name.as_str()) {
                *value = HeaderValue::from_static(REDACTED);
            }
        }
        out
    }

    /// The request target with secret query parameter values replaced.
    pub fn target(&self, path_and_query: &str) -> String {
        match path_and_query.split_once('?') {
            Some((path, query)) => format!("{path}?{}", self.pairs(query)),
            None => path_and_query.to_string(),
        }
    }

    fn pairs(&self, query: &str) -> String {
        query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((k, _)) if self.is_secret(&percent_decode(k)) => format!("{k}={REDACTED}"),
                _ => pair.to_string(),
            })
            .collect::<Vec<_>>()
            .join("&")
    }

    /// A body with secret JSON fields or form fields replaced; other bodies unchanged.
    pub fn body(&self, headers: &HeaderMap, body: &Bytes) -> Bytes {
        let ct = headers
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if ct.contains("x-www-form-urlencoded") {
            if let Ok(text) = std::str::from_utf8(body) {
                return Bytes::from(self.pairs(text));
            }
            return body.clone();
        }
        if let Ok(mut value) = serde_json::from_slice::<Value>(body)
            && self.json(&mut value)
        {
            return Bytes::from(serde_json::to_vec(&value).unwrap_or_default());
        }
        body.clone()
    }

    /// Redacts in place; whether anything changed.
    fn json(&self, value: &mut Value) -> bool {
        match value {
            Value::Object(map) => {
                let mut changed = false;
                for (k, v) in map.iter_mut() {
                    if self.is_secret(k) {
                        *v = Value::String(REDACTED.to_string());
                        changed = true;
                    } else {
                        changed |= self.json(v);
                    }
                }
                changed
            }
            Value::Array(items) => items.iter_mut().fold(false, |c, v| self.json(v) | c),
            _ => false,
        }
    }

    /// Hides the shown values of a difference at a secret header or field, or inside one.
    pub fn difference(&self, diff: &mut Difference) {
        let path = diff.path();
        let secret = if let Some(name) = path.strip_prefix("header:") {
            self.is_secret(name)
        } else if path == "body" {
            // A raw body can hold anything: hide it when it mentions a secret name.
            let shown = format!("{:?}{:?}", diff.primary(), diff.candidate()).to_ascii_lowercase();
            self.names.iter().any(|n| shown.contains(n.as_str()))
        } else {
            path_keys(path).any(|k| self.is_secret(&k))
        };
        if secret {
            diff.redact_values(REDACTED);
        }
    }

    /// Redacted copies of `diffs` (see [`Redactor::difference`]), for what is shown or kept.
    pub fn differences(&self, diffs: &[Difference]) -> Vec<Difference> {
        diffs
            .iter()
            .cloned()
            .map(|mut d| {
                self.difference(&mut d);
                d
            })
            .collect()
    }
}

/// The object keys along a concrete path like `$.user["api key"][2].token`.
fn path_keys(path: &str) -> impl Iterator<Item = String> + '_ {
    let mut keys = Vec::new();
    let b = path.as_bytes();
    let mut i = 1;
    while i < b.len() {
        match b[i] {
            b'.' => {
                let start = i + 1;
                i = start;
                while i < b.len() && b[i] != b'.' && b[i] != b'[' {
                    i += 1;
                }
                keys.push(path[start..i].to_string());
            }
            b'[' if b.get(i + 1) == Some(&b'"') => {
                let mut key = String::new();
                let mut j = i + 2;
                while j < b.len() && b[j] != b'"' {
                    if b[j] == b'\\' {
                        j += 1;
                    }
                    if let Some(c) = path.get(j..).and_then(|s| s.chars().next()) {
                        key.push(c);
                        j += c.len_utf8();
                    } else {
                        break;
                    }
                }
                keys.push(key);
                i = j + 2;
            }
            _ => i += 1,
        }
    }
    keys.into_iter()
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let Some(v) = std::str::from_utf8(&b[i + 1..i + 3])
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(if b[i] == b'+' { b' ' } else { b[i] });
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use scalpel_diff::DiffKind;

    #[test]
    fn default_and_named_secrets_are_replaced_everywhere() {
        let r = Redactor::new(["X-Api-Key", "password", "token"]);
        let mut h = HeaderMap::new();
        h.insert(AUTHORIZATION, HeaderValue::from_static("Bearer s3cret"));
        h.insert("x-api-key", HeaderValue::from_static("k3y"));
        h.insert("accept", HeaderValue::from_static("*/*"));
        let red = r.headers(&h);
        assert_eq!(red[AUTHORIZATION], REDACTED);
        assert_eq!(red["x-api-key"], REDACTED);
        assert_eq!(red["accept"], "*/*");

        assert_eq!(r.target("/a?token=abc&x=1"), "/a?token=[REDACTED]&x=1");
        assert_eq!(r.target("/a?%74oken=abc"), "/a?%74oken=[REDACTED]");
        assert_eq!(r.target("/a?%é=1&%"), "/a?%é=1&%");

        let body = Bytes::from_static(
            br#"{"user":{"Password":"hunter2","name":"a"},"list":[{"token":"t"}]}"#,
        );
        let out = r.body(&HeaderMap::new(), &body);
        let text = std::str::from_utf8(&out).unwrap();
        assert!(
            !text.contains("hunter2") && !text.contains("\"t\""),
            "{text}"
        );
        assert!(text.contains("\"name\":\"a\""));

        let mut form = HeaderMap::new();
        form.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("application/x-www-form-urlencoded"),
        );
        let out = r.body(&form, &Bytes::from_static(b"user=a&password=hunter2"));
        assert_eq!(&out[..], b"user=a&password=[REDACTED]");

        let mut d = Difference::new(
            r#"$.user["password"]"#,
            DiffKind::ValueChanged,
            Some("\"a\"".into()),
            Some("\"b\"".into()),
        );
        r.difference(&mut d);
        assert_eq!(d.primary(), Some(REDACTED));
        let mut d = Difference::new(
            "header:authorization",
            DiffKind::Header,
            Some("x".into()),
            None,
        );
        r.difference(&mut d);
        assert_eq!(d.primary(), Some(REDACTED));
        let mut d = Difference::new(
            "$.user.name",
            DiffKind::ValueChanged,
            Some("1".into()),
            Some("2".into()),
        );
        r.difference(&mut d);
        assert_eq!(d.primary(), Some("1"));
    }
}
