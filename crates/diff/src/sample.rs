//! Consistent sampling: the same key is always in or always out.

use http::HeaderMap;

use crate::Error;

/// Where the sampling key of a request comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SampleKey {
    /// A header's value (`header:x-user-id`).
    Header(http::HeaderName),
    /// A query parameter's value (`query:user`).
    Query(String),
    /// The n-th path segment, from 0 (`path:2` of `/v1/users/42` is `42`).
    PathSegment(usize),
}

impl SampleKey {
    /// Parses `header:NAME`, `query:NAME` or `path:N`.
    pub fn parse(spec: &str) -> Result<Self, Error> {
        let bad = || Error::SampleKey(spec.to_string());
        let (kind, arg) = spec.split_once(':').ok_or_else(bad)?;
        match kind {
            "header" => http::HeaderName::from_bytes(arg.as_bytes())
                .map(Self::Header)
                .map_err(|_| bad()),
            "query" if !arg.is_empty() => Ok(Self::Query(arg.to_string())),
            "path" => arg.parse().map(Self::PathSegment).map_err(|_| bad()),
            _ => Err(bad()),
        }
    }

    /// The key's value in a request, if present.
    pub fn extract<'a>(&self, path_and_query: &'a str, headers: &'a HeaderMap) -> Option<&'a [u8]> {
        match self {
            Self::Header(name) => headers.get(name).map(|v| v.as_bytes()),
            Self::Query(name) => {
                let query = path_and_query.split_once('?')?.1;
                query.split('&').find_map(|pair| {
                    let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
                    (k == name).then_some(v.as_bytes())
                })
            }
            Self::PathSegment(n) => path_and_query
                .split(['?', '#'])
                .next()?
                .split('/')
                .filter(|s| !s.is_empty())
                .nth(*n)
                .map(str::as_bytes),
        }
    }
}

/// Keeps `percent` % of keys, and always the same ones: a key's fate is a fixed hash
/// (FNV-1a, stable across runs and machines), so one user's requests are all mirrored
/// or none are.
///
/// ```
/// use scalpel_diff::Sampler;
/// let s = Sampler::new(50.0).unwrap();
/// assert_eq!(s.keep(b"user-42"), s.keep(b"user-42"));
/// assert!(Sampler::new(100.0).unwrap().keep(b"anything"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sampler {
    /// Out of 1,000,000.
    threshold: u32,
}

impl Sampler {
    /// Keeps `percent` (0 to 100) of keys.
    pub fn new(percent: f64) -> Result<Self, Error> {
        if !(0.0..=100.0).contains(&percent) {
            return Err(Error::Percent(percent));
        }
        Ok(Self {
            threshold: (percent * 10_000.0).round() as u32,
        })
    }

    /// Whether the request with this key is kept.
    pub fn keep(&self, key: &[u8]) -> bool {
        (fnv1a(key) % 1_000_000) < u64::from(self.threshold)
    }

    /// Whether a request with no key, the n-th seen, is kept: spread evenly over n.
    pub fn keep_nth(&self, n: u64) -> bool {
        self.keep(&n.to_le_bytes())
    }

    /// Whether everything is kept.
    pub fn keeps_all(&self) -> bool {
        self.threshold >= 1_000_000
    }
}

fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    // FNV's low bits mix poorly for short keys; fold the high half in.
    h ^ (h >> 32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_extracted_from_each_place() {
        let mut h = HeaderMap::new();
        h.insert("x-user", "u7".parse().unwrap());
        let pq = "/v1/users/42/stats?days=30&user=abc";
        assert_eq!(
            SampleKey::parse("header:X-User").unwrap().extract(pq, &h),
            Some(&b"u7"[..])
        );
        assert_eq!(
            SampleKey::parse("query:user").unwrap().extract(pq, &h),
            Some(&b"abc"[..])
        );
        assert_eq!(
            SampleKey::parse("path:2").unwrap().extract(pq, &h),
            Some(&b"42"[..])
        );
        assert_eq!(SampleKey::parse("path:9").unwrap().extract(pq, &h), None);
        assert!(SampleKey::parse("cookie:x").is_err());
        assert!(SampleKey::parse("path:x").is_err());
    }

    #[test]
    fn sampled_share_is_close_to_the_percent_and_stable() {
        let s = Sampler::new(10.0).unwrap();
        let kept = (0..100_000u64)
            .filter(|i| s.keep(format!("user-{i}").as_bytes()))
            .count();
        assert!((9_000..11_000).contains(&kept), "kept {kept}");
        assert!(!Sampler::new(0.0).unwrap().keep(b"x"));
        assert!(Sampler::new(101.0).is_err());
    }
}
