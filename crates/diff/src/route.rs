//! Request paths to route patterns, so counts group by endpoint, not by id.

use crate::Error;

/// Turns request paths into route patterns: `/v1/users/42/stats?days=30` →
/// `/v1/users/{id}/stats`.
///
/// User patterns (`/v1/users/{id}/stats`, each `{name}` one segment) win when one matches;
/// otherwise every segment that looks like an id becomes `{id}`: a number, a UUID, a hex
/// string of 8+ characters with a digit, a mixed letters-and-digits token of 8+ characters
/// with 2+ digits (`u3f9a0c1e2b4d`), or any 20+ character token of `[A-Za-z0-9_-]` with a
/// digit. The query string is dropped.
///
/// ```
/// use scalpel_diff::RouteNormalizer;
/// let routes = RouteNormalizer::new(&["/v1/orders/{order}/lines"]).unwrap();
/// assert_eq!(routes.normalize("/v1/users/u3f9a0c1e2b4d/stats?days=30"), "/v1/users/{id}/stats");
/// assert_eq!(routes.normalize("/v1/orders/A-17/lines"), "/v1/orders/{order}/lines");
/// assert_eq!(routes.normalize("/v2/health"), "/v2/health");
/// ```
#[derive(Debug, Clone, Default)]
pub struct RouteNormalizer {
    patterns: Vec<RoutePattern>,
}

#[derive(Debug, Clone)]
struct RoutePattern {
    text: String,
    /// `None` is a `{placeholder}` segment.
    segments: Vec<Option<String>>,
}

impl RouteNormalizer {
    /// A normalizer with user route patterns, tried in order before the heuristics.
    pub fn new<S: AsRef<str>>(patterns: &[S]) -> Result<Self, Error> {
        let patterns = patterns
            .iter()
            .map(|p| {
                let text = p.as_ref();
                if !text.starts_with('/') {
                    return Err(Error::Route(text.to_string()));
                }
                let segments = split(text)
                    .map(|s| {
                        (!(s.starts_with('{') && s.ends_with('}') && s.len() > 2))
                            .then(|| s.to_string())
                    })
                    .collect();
                Ok(RoutePattern {
                    text: text.to_string(),
                    segments,
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Self { patterns })
    }

    /// The route pattern of `path_and_query`.
    pub fn normalize(&self, path_and_query: &str) -> String {
        let path = path_and_query
            .split(['?', '#'])
            .next()
            .unwrap_or(path_and_query);
        for pat in &self.patterns {
            let mut segs = split(path);
            let mut ok = true;
            for want in &pat.segments {
                match (segs.next(), want) {
                    (Some(got), Some(lit)) if got == lit => {}
                    (Some(_), None) => {}
                    _ => {
                        ok = false;
                        break;
                    }
                }
            }
            if ok && segs.next().is_none() {
                return pat.text.clone();
            }
        }
        let mut out = String::with_capacity(path.len());
        for seg in split(path) {
            out.push('/');
            out.push_str(if looks_like_id(seg) { "{id}" } else { seg });
        }
        if out.is_empty() || path.ends_with('/') && path.len() > 1 {
            out.push('/');
        }
        out
    }
}

fn split(path: &str) -> impl Iterator<Item = &str> {
    path.split('/').filter(|s| !s.is_empty())
}

fn looks_like_id(seg: &str) -> bool {
    let b = seg.as_bytes();
    if b.is_empty() {
        return false;
    }
    let digits = b.iter().filter(|c| c.is_ascii_digit()).count();
    if digits == b.len() {
        return true;
    }
    if is_uuid(b) {
        return true;
    }
    let alnum = b.iter().all(u8::is_ascii_alphanumeric);
    if alnum && b.len() >= 8 && digits >= 1 && b.iter().all(u8::is_ascii_hexdigit) {
        return true;
    }
    if alnum && b.len() >= 8 && digits >= 2 {
        return true;
    }
    b.len() >= 20
        && digits >= 1
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || *c == b'-' || *c == b'_')
}

fn is_uuid(b: &[u8]) -> bool {
    b.len() == 36
        && b.iter().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => *c == b'-',
            _ => c.is_ascii_hexdigit(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_of_every_shape_collapse_and_words_stay() {
        let r = RouteNormalizer::default();
        let cases = [
            ("/v1/users/42/stats?days=30", "/v1/users/{id}/stats"),
            (
                "/v1/users/123e4567-e89b-12d3-a456-426614174000",
                "/v1/users/{id}",
            ),
            ("/blobs/deadbeef01", "/blobs/{id}"),
            ("/v1/users/u3f9a0c1e2b4d/stats", "/v1/users/{id}/stats"),
            ("/t/abcdefghijklmnopqrs1_-", "/t/{id}"),
            ("/v2beta1/oauth2callback", "/v2beta1/oauth2callback"),
            ("/api/v1/health", "/api/v1/health"),
            ("/", "/"),
            ("", "/"),
            ("/users/", "/users/"),
        ];
        for (path, want) in cases {
            assert_eq!(r.normalize(path), want, "{path}");
        }
    }

    #[test]
    fn user_patterns_win_and_must_match_every_segment() {
        let r = RouteNormalizer::new(&["/v1/users/{user}/stats"]).unwrap();
        assert_eq!(
            r.normalize("/v1/users/alice/stats"),
            "/v1/users/{user}/stats"
        );
        assert_eq!(
            r.normalize("/v1/users/alice/stats/x"),
            "/v1/users/alice/stats/x"
        );
        assert_eq!(r.normalize("/v1/users/7"), "/v1/users/{id}");
        assert!(RouteNormalizer::new(&["no-slash"]).is_err());
    }
}
