//! Keeping secrets out of what is stored (samples, the store, the capture file) and shown
//! (the live page): headers, JSON fields, query, path and form parameters.
//!
//! # What a name covers
//!
//! A name is secret wherever it names something — a header, a JSON key at any depth, a
//! query, form or `;path` parameter — in any case and in any spelling an application
//! reads as that name: the key is cut into words (at every character that is neither a
//! letter nor a digit, where the case turns from lower to upper, between letters and
//! digits), and it is secret when some words in a row spell the name. So `password`
//! covers `Password`, `user[password]`, `password[]`, `user.password`, `new_password`,
//! `passwordConfirm` and `pass_word`, but not `passwords` or `passwordhash`.
//!
//! # Failing closed
//!
//! With names of its own (`--redact`), the redactor stores nothing it could not read
//! whole: a body that is not one JSON document (deeper than 128 levels, a trailing comma,
//! a byte order mark, NDJSON, XML, multipart, binary, compressed bytes) and is not form
//! data (by its type; a parameter name that does not decode, or text that is no
//! parameter, like a document sent as a form) becomes `[REDACTED]`, and a query with such
//! a name is replaced whole; each is counted ([`Redacted::withheld`]). A value that mentions such a
//! name (a JSON string, a header, a query or form value: `/login?password=…` in a
//! `Referer` or a `next=` parameter, a JSON document inside a string) is replaced whole.
//! Without names of its own it keeps the defaults (`Authorization`, `Proxy-Authorization`,
//! `Cookie`, `Set-Cookie`) out of headers and of whatever bodies and queries it reads, and
//! stores other bodies as they came.

use bytes::Bytes;
use http::HeaderMap;
use http::header::{
    AUTHORIZATION, CONTENT_TYPE, COOKIE, HeaderValue, PROXY_AUTHORIZATION, SET_COOKIE,
};
use scalpel_diff::Difference;
use serde_json::Value;

/// The text that replaces a redacted value.
pub const REDACTED: &str = "[REDACTED]";

/// A stored copy after redaction, and whether it was withheld whole because it could not
/// be read (see the [module docs](self)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redacted<T> {
    /// What may be stored.
    pub value: T,
    /// The copy is `[REDACTED]` (a body) or lost its whole query because a rule applied
    /// and it could not be parsed: counted by the caller.
    pub withheld: bool,
}

/// One secret name: as given (lower case), and its letters and digits.
#[derive(Debug, Clone)]
struct Name {
    exact: String,
    letters: String,
    /// Given by the user (`--redact`), not one of the default headers.
    own: bool,
}

/// Which names are secret. `Authorization`, `Proxy-Authorization`, `Cookie` and
/// `Set-Cookie` always are; each extra name (case-insensitive) is redacted as a header, a
/// JSON field at any depth, a query, path or form parameter, and makes the redactor fail
/// closed (see the [module docs](self)).
#[derive(Debug, Clone)]
pub struct Redactor {
    names: Vec<Name>,
    /// Some names are the user's own: unreadable bodies and queries are withheld and
    /// values that mention a name replaced.
    fail_closed: bool,
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
        let name = |text: &str, own| Name {
            exact: text.trim().to_lowercase(),
            letters: letters(text),
            own,
        };
        let mut names: Vec<Name> = [AUTHORIZATION, PROXY_AUTHORIZATION, COOKIE, SET_COOKIE]
            .iter()
            .map(|h| name(h.as_str(), false))
            .collect();
        names.extend(extra.into_iter().map(|s| name(s.as_ref(), true)));
        names.retain(|n| !n.exact.is_empty());
        let fail_closed = names.iter().any(|n| n.own);
        Self { names, fail_closed }
    }

    /// Does this key (a header, field or parameter name) name a secret?
    fn is_secret(&self, key: &str) -> bool {
        let key_words = words(key);
        self.names
            .iter()
            .any(|n| n.exact == key.to_lowercase() || spells(&key_words, n))
    }

    /// Does this value mention one of the user's names (then it may be a document or a
    /// URL that carries the secret: replaced whole)? Read through `%` escapes (up to three
    /// layers: a URL inside a parameter inside a URL) and JSON `\uXXXX` escapes.
    fn mentions(&self, value: &str) -> bool {
        if !self.fail_closed {
            return false;
        }
        let mut text = value.to_string();
        for _ in 0..3 {
            let decoded = percent_decode_lossy(&text);
            if decoded == text {
                break;
            }
            text = decoded;
        }
        let text = json_unescape_lossy(&text);
        spells_any(&words(&text), self.names.iter().filter(|n| n.own))
    }

    /// A copy of `headers` with secret values replaced: a secret header's, and a value
    /// that mentions one of the user's names.
    pub fn headers(&self, headers: &HeaderMap) -> HeaderMap {
        let mut out = headers.clone();
        for (name, value) in out.iter_mut() {
            if self.is_secret(name.as_str())
                || self.mentions(&String::from_utf8_lossy(value.as_bytes()))
            {
                *value = HeaderValue::from_static(REDACTED);
            }
        }
        out
    }

    /// The request target with secret query and `;path` parameter values replaced.
    pub fn target(&self, path_and_query: &str) -> String {
        self.redact_target(path_and_query).value
    }

    /// [`Redactor::target`], and whether the query was withheld whole (a parameter name
    /// whose `%` escapes do not decode, while the user's names apply).
    pub fn redact_target(&self, path_and_query: &str) -> Redacted<String> {
        let (path, query) = match path_and_query.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (path_and_query, None),
        };
        let path = path
            .split('/')
            .map(|segment| match segment.split_once(';') {
                // `;name=value` path parameters (servlet containers read them).
                Some((head, params)) => match self.pairs(params) {
                    Some(p) => format!("{head};{p}"),
                    None => format!("{head};{REDACTED}"),
                },
                None => segment.to_string(),
            })
            .collect::<Vec<_>>()
            .join("/");
        let Some(query) = query else {
            return Redacted {
                value: path,
                withheld: false,
            };
        };
        match self.pairs(query) {
            Some(q) => Redacted {
                value: format!("{path}?{q}"),
                withheld: false,
            },
            None => Redacted {
                value: format!("{path}?{REDACTED}"),
                withheld: true,
            },
        }
    }

    /// `name=value` pairs cut at `&` and `;` (both separate parameters somewhere: old CGI,
    /// Perl, Python's `parse_qsl` before 3.10), secret values replaced; `None` when a
    /// name does not decode and the user's names apply (the whole text is withheld).
    fn pairs(&self, text: &str) -> Option<String> {
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        loop {
            let end = rest.find(['&', ';']).unwrap_or(rest.len());
            let (pair, tail) = rest.split_at(end);
            let (key, value) = match pair.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (pair, None),
            };
            let decoded = percent_decode(key);
            // A name that does not decode, or one written with what no URL holds (a JSON
            // document sent as a form), cannot be read as the application reads it.
            if self.fail_closed && (decoded.is_none() || !plain(key)) {
                return None;
            }
            let key_text = decoded.unwrap_or_else(|| key.to_string());
            match value {
                _ if !self.is_secret(&key_text) => match value {
                    Some(v) if self.mentions(&percent_decode_lossy(v)) => {
                        out.push_str(key);
                        out.push('=');
                        out.push_str(REDACTED);
                    }
                    _ => out.push_str(pair),
                },
                Some(_) => {
                    out.push_str(key);
                    out.push('=');
                    out.push_str(REDACTED);
                }
                // A secret name alone may be a whole document in a key (`{"password":…}`
                // sent as a form).
                None => out.push_str(REDACTED),
            }
            let Some(sep) = tail.chars().next() else {
                return Some(out);
            };
            out.push(sep);
            rest = &tail[1..];
        }
    }

    /// A body with secret JSON fields or form fields replaced (see
    /// [`Redactor::redact_body`]).
    pub fn body(&self, headers: &HeaderMap, body: &Bytes) -> Bytes {
        self.redact_body(headers, body).value
    }

    /// A body with secret JSON fields or form fields replaced. With the user's names, a
    /// body that is neither one whole JSON document nor (as its `Content-Type` says) form
    /// data in UTF-8 is withheld: `[REDACTED]`. Without them it is kept as it came.
    pub fn redact_body(&self, headers: &HeaderMap, body: &Bytes) -> Redacted<Bytes> {
        let kept = |value: Bytes| Redacted {
            value,
            withheld: false,
        };
        if body.is_empty() {
            return kept(body.clone());
        }
        let withheld = || {
            if self.fail_closed {
                Redacted {
                    value: Bytes::from_static(REDACTED.as_bytes()),
                    withheld: true,
                }
            } else {
                kept(body.clone())
            }
        };
        // JSON whatever the type says (`curl -d '{…}'` sends JSON as a form), then form
        // data when the type says so.
        if let Ok(mut value) = serde_json::from_slice::<Value>(body) {
            return if self.json(&mut value) {
                kept(Bytes::from(serde_json::to_vec(&value).unwrap_or_default()))
            } else {
                kept(body.clone())
            };
        }
        let form = headers
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|ct| ct.to_ascii_lowercase().contains("x-www-form-urlencoded"));
        if !form {
            return withheld();
        }
        match std::str::from_utf8(body).ok().and_then(|t| self.pairs(t)) {
            Some(text) if text.as_bytes() == &body[..] => kept(body.clone()),
            Some(text) => kept(Bytes::from(text)),
            None => withheld(),
        }
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
            Value::String(s) if self.mentions(s) => {
                *s = REDACTED.to_string();
                true
            }
            _ => false,
        }
    }

    /// Hides the shown values of a difference at a secret header or field, inside one,
    /// or holding one; with the user's names, also a raw-body difference and a shown
    /// value that cannot be read back (cut short).
    pub fn difference(&self, diff: &mut Difference) {
        let path = diff.path();
        let shown = [diff.primary(), diff.candidate()];
        let secret = if let Some(name) = path.strip_prefix("header:") {
            self.is_secret(name) || shown.iter().flatten().any(|v| self.mentions(v))
        } else if path == "body" {
            // A raw body can hold anything: hide it when it mentions a secret name (and
            // always when the user's names apply: it was not read as JSON).
            self.fail_closed
                || shown
                    .iter()
                    .flatten()
                    .any(|v| spells_any(&words(v), self.names.iter()))
        } else if path == "status" {
            false
        } else {
            path_keys(path).any(|k| self.is_secret(&k))
                || shown.iter().flatten().any(|v| self.holds_secret(v))
        };
        if secret {
            diff.redact_values(REDACTED);
        }
    }

    /// Does a difference's shown JSON value hold a secret (a secret key, a mentioning
    /// string), or — cut short, so unreadable — might it?
    fn holds_secret(&self, shown: &str) -> bool {
        match serde_json::from_str::<Value>(shown) {
            Ok(mut v) => self.json(&mut v),
            Err(_) => self.fail_closed || spells_any(&words(shown), self.names.iter()),
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

/// Is a parameter name written only with characters a URL's query holds (RFC 3986:
/// letters, digits, `%` escapes, `-._~!$'()*+,:@/?`, and the `[]` every framework uses)?
/// Quotes, braces, backslashes, spaces and bytes past ASCII are not: such a "name" is a
/// document sent as a form, not a parameter.
fn plain(key: &str) -> bool {
    key.bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"%-._~!$'()*+,:@/?[]".contains(&b))
}

/// `\uXXXX` escapes decoded (a surrogate or a bad escape kept as it is): for looking for
/// a name inside a JSON document held in a string.
fn json_unescape_lossy(s: &str) -> String {
    if !s.contains("\\u") {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find("\\u") {
        out.push_str(&rest[..i]);
        let ch = rest
            .get(i + 2..i + 6)
            .and_then(|h| u32::from_str_radix(h, 16).ok())
            .and_then(char::from_u32);
        match ch {
            Some(c) if rest[i + 2..i + 6].bytes().all(|b| b.is_ascii_hexdigit()) => {
                out.push(c);
                rest = &rest[i + 6..];
            }
            _ => {
                out.push_str("\\u");
                rest = &rest[i + 2..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// A name's letters and digits, lower case: what a run of words must spell.
fn letters(text: &str) -> String {
    text.chars()
        .filter(|c| c.is_alphanumeric())
        .flat_map(char::to_lowercase)
        .collect()
}

/// The words of a key or a value, lower case: runs of letters and digits, cut where the
/// case turns from lower to upper (`apiKey`), before the last capital of a capital run
/// followed by a lower (`APIKey`), and between letters and digits (`token2`).
fn words(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut word = String::new();
    for (i, &c) in chars.iter().enumerate() {
        if !c.is_alphanumeric() {
            if !word.is_empty() {
                out.push(std::mem::take(&mut word));
            }
            continue;
        }
        if let Some(&prev) = i.checked_sub(1).and_then(|p| chars.get(p))
            && prev.is_alphanumeric()
        {
            let next_lower = chars.get(i + 1).is_some_and(|n| n.is_lowercase());
            let cut = (prev.is_lowercase() && c.is_uppercase())
                || (prev.is_uppercase() && c.is_uppercase() && next_lower)
                || (prev.is_numeric() != c.is_numeric());
            if cut && !word.is_empty() {
                out.push(std::mem::take(&mut word));
            }
        }
        word.extend(c.to_lowercase());
    }
    if !word.is_empty() {
        out.push(word);
    }
    out
}

/// Do some of `words` in a row spell one of `names`?
fn spells_any<'a>(words: &[String], mut names: impl Iterator<Item = &'a Name>) -> bool {
    names.any(|n| spells(words, n))
}

/// Do some of `words` in a row spell `name` (a name without letters or digits spells
/// nothing: it matches only a key written exactly so)?
fn spells(words: &[String], name: &Name) -> bool {
    let target = name.letters.as_str();
    !target.is_empty()
        && (0..words.len()).any(|start| {
            let mut run = String::new();
            for w in &words[start..] {
                run.push_str(w);
                if run.len() >= target.len() {
                    return run == target;
                }
                if !target.starts_with(run.as_str()) {
                    return false;
                }
            }
            false
        })
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

/// `application/x-www-form-urlencoded` decoding of a name: `+` is a space, `%XX` a byte;
/// `None` when a `%` is not followed by two hex digits or the bytes are not UTF-8 (the
/// name cannot be read as the application reads it).
fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                out.push(hex_byte(b.get(i + 1..i + 3)?)?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// Two hex digits as a byte (`from_str_radix` alone would take `+1`).
fn hex_byte(two: &[u8]) -> Option<u8> {
    let digit = |c: &u8| char::from(*c).to_digit(16);
    Some((digit(two.first()?)? * 16 + digit(two.get(1)?)?) as u8)
}

/// [`percent_decode`] that keeps what does not decode as it is: for looking into values.
fn percent_decode_lossy(s: &str) -> String {
    percent_decode(s).unwrap_or_else(|| {
        let mut out = String::with_capacity(s.len());
        let mut rest = s;
        while let Some(i) = rest.find('%') {
            out.push_str(&rest[..i]);
            match rest.as_bytes().get(i + 1..i + 3).and_then(hex_byte) {
                Some(v) if v.is_ascii() => {
                    out.push(v as char);
                    rest = &rest[i + 3..];
                }
                _ => {
                    out.push('%');
                    rest = &rest[i + 1..];
                }
            }
        }
        out.push_str(rest);
        out.replace('+', " ")
    })
}

#[cfg(test)]
mod tests;
