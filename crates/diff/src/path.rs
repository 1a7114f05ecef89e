//! JSON field paths (`$.items[3].ts`) and ignore patterns (`$.items[*].ts`, `$..ts`).

use std::fmt::Write as _;

use crate::Error;

/// One step of a concrete path while walking a JSON value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Seg<'a> {
    Key(&'a str),
    Index(usize),
}

/// Formats a concrete path, e.g. `$.items[3].ts`; with `generalize`, indices become `[*]`
/// so that one field of every array element is counted as one field.
pub(crate) fn format_path(segs: &[Seg<'_>], generalize: bool) -> String {
    let mut out = String::with_capacity(2 + segs.len() * 8);
    out.push('$');
    for seg in segs {
        match *seg {
            Seg::Key(k) => push_key(&mut out, k),
            Seg::Index(_) if generalize => out.push_str("[*]"),
            Seg::Index(i) => {
                let _ = write!(out, "[{i}]");
            }
        }
    }
    out
}

fn push_key(out: &mut String, key: &str) {
    let plain = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == '-');
    if plain {
        out.push('.');
        out.push_str(key);
    } else {
        // Quoted form keeps `.`/`[` inside keys unambiguous.
        out.push_str("[\"");
        for c in key.chars() {
            if c == '"' || c == '\\' {
                out.push('\\');
            }
            out.push(c);
        }
        out.push_str("\"]");
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum PatSeg {
    Key(String),
    AnyKey,
    Index(usize),
    AnyIndex,
    /// `..`: any number (zero or more) of segments.
    Descend,
}

/// A field path pattern for ignore rules and redaction: `$.a.b`, `$.items[*].ts`,
/// `$.*.id`, `$..ts` (any depth), `$["odd key"]`.
///
/// A pattern matches a path exactly; since the differ skips a matching node with
/// everything below it, `$.meta` ignores the whole `meta` object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldPattern {
    text: String,
    segs: Vec<PatSeg>,
}

impl FieldPattern {
    /// Parses a pattern; it must start with `$`.
    pub fn parse(text: &str) -> Result<Self, Error> {
        let bad = |reason: &str| Error::Pattern {
            pattern: text.to_string(),
            reason: reason.to_string(),
        };
        let rest = text
            .strip_prefix('$')
            .ok_or_else(|| bad("must start with `$`"))?;
        let b = rest.as_bytes();
        let mut i = 0;
        let mut segs = Vec::new();
        while i < b.len() {
            match b[i] {
                b'.' => {
                    if b.get(i + 1) == Some(&b'.') {
                        segs.push(PatSeg::Descend);
                        i += 2;
                        if i >= b.len() {
                            return Err(bad("`..` must be followed by a field"));
                        }
                        if b[i] == b'[' {
                            continue;
                        }
                    } else {
                        i += 1;
                    }
                    let start = i;
                    while i < b.len() && b[i] != b'.' && b[i] != b'[' {
                        i += 1;
                    }
                    let name = &rest[start..i];
                    if name.is_empty() {
                        return Err(bad("empty field name"));
                    }
                    segs.push(if name == "*" {
                        PatSeg::AnyKey
                    } else {
                        PatSeg::Key(name.to_string())
                    });
                }
                b'[' => {
                    let close = rest[i..]
                        .find(']')
                        .map(|p| p + i)
                        .ok_or_else(|| bad("unclosed `[`"))?;
                    let inner = &rest[i + 1..close];
                    if inner == "*" {
                        segs.push(PatSeg::AnyIndex);
                        i = close + 1;
                    } else if let Ok(n) = inner.parse::<usize>() {
                        segs.push(PatSeg::Index(n));
                        i = close + 1;
                    } else if inner.starts_with('"') || inner.starts_with('\'') {
                        let (key, end) =
                            parse_quoted(rest, i + 1).ok_or_else(|| bad("bad quoted key"))?;
                        if rest.as_bytes().get(end) != Some(&b']') {
                            return Err(bad("expected `]` after quoted key"));
                        }
                        segs.push(PatSeg::Key(key));
                        i = end + 1;
                    } else {
                        return Err(bad("`[...]` takes `*`, an index or a quoted key"));
                    }
                }
                _ => return Err(bad("expected `.` or `[`")),
            }
        }
        Ok(Self {
            text: text.to_string(),
            segs,
        })
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    pub(crate) fn matches(&self, path: &[Seg<'_>]) -> bool {
        match_from(&self.segs, path)
    }

    /// Whether the pattern matches a concrete path string such as `$.items[3].ts`.
    pub fn matches_path(&self, path: &str) -> bool {
        match parse_concrete(path) {
            Some(owned) => {
                let segs: Vec<Seg<'_>> = owned
                    .iter()
                    .map(|s| match s {
                        OwnedSeg::Key(k) => Seg::Key(k),
                        OwnedSeg::Index(i) => Seg::Index(*i),
                    })
                    .collect();
                self.matches(&segs)
            }
            None => false,
        }
    }
}

impl std::fmt::Display for FieldPattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

fn parse_quoted(s: &str, start: usize) -> Option<(String, usize)> {
    let quote = s.as_bytes()[start] as char;
    let mut out = String::new();
    let mut chars = s[start + 1..].char_indices();
    while let Some((off, c)) = chars.next() {
        match c {
            '\\' => out.push(chars.next()?.1),
            c if c == quote => return Some((out, start + 1 + off + 1)),
            c => out.push(c),
        }
    }
    None
}

enum OwnedSeg {
    Key(String),
    Index(usize),
}

/// Parses a concrete path as produced by [`format_path`] (no wildcards).
fn parse_concrete(path: &str) -> Option<Vec<OwnedSeg>> {
    let pat = FieldPattern::parse(path).ok()?;
    pat.segs
        .into_iter()
        .map(|s| match s {
            PatSeg::Key(k) => Some(OwnedSeg::Key(k)),
            PatSeg::Index(i) => Some(OwnedSeg::Index(i)),
            _ => None,
        })
        .collect()
}

fn match_from(pat: &[PatSeg], path: &[Seg<'_>]) -> bool {
    let Some((first, rest)) = pat.split_first() else {
        return path.is_empty();
    };
    if *first == PatSeg::Descend {
        return (0..=path.len()).any(|skip| match_from(rest, &path[skip..]));
    }
    let Some((seg, path_rest)) = path.split_first() else {
        return false;
    };
    let ok = match (first, seg) {
        (PatSeg::Key(k), Seg::Key(s)) => k == s,
        (PatSeg::AnyKey, Seg::Key(_)) => true,
        (PatSeg::Index(n), Seg::Index(i)) => n == i,
        (PatSeg::AnyIndex, Seg::Index(_)) => true,
        _ => false,
    };
    ok && match_from(rest, path_rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> FieldPattern {
        FieldPattern::parse(s).unwrap()
    }

    #[test]
    fn formats_plain_quoted_and_generalized_paths() {
        let segs = [Seg::Key("items"), Seg::Index(3), Seg::Key("a.b")];
        assert_eq!(format_path(&segs, false), r#"$.items[3]["a.b"]"#);
        assert_eq!(format_path(&segs, true), r#"$.items[*]["a.b"]"#);
        assert_eq!(format_path(&[], false), "$");
    }

    #[test]
    fn patterns_match_exact_wildcard_and_descendant_paths() {
        let path = [Seg::Key("items"), Seg::Index(2), Seg::Key("ts")];
        assert!(p("$.items[*].ts").matches(&path));
        assert!(p("$.items[2].ts").matches(&path));
        assert!(!p("$.items[1].ts").matches(&path));
        assert!(p("$..ts").matches(&path));
        assert!(p("$.*[*].ts").matches(&path));
        assert!(!p("$.items").matches(&path));
        assert!(p("$.items").matches(&path[..1]));
        assert!(p(r#"$["items"][*]['ts']"#).matches(&path));
        assert!(p("$..[*].ts").matches(&path));
    }

    #[test]
    fn bad_patterns_are_rejected_with_a_reason() {
        for bad in ["items", "$.", "$[", "$[x]", "$..", "$.a..", "$x"] {
            assert!(FieldPattern::parse(bad).is_err(), "{bad} should fail");
        }
    }

    #[test]
    fn concrete_path_strings_round_trip_through_matching() {
        assert!(p("$..password").matches_path(r#"$.user["password"]"#));
        assert!(!p("$..password").matches_path("$.user.name"));
    }
}
