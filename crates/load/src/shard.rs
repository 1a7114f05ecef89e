//! One run split over several processes or machines (`scalpel load --shard I/N`).
//!
//! Every shard runs the same command line. The schedule of the whole run is one sequence of
//! requests `0, 1, 2, …` (request `i` due at `t0 + i / R` in the open models); shard `s` of
//! `N` takes every `N`-th of them: `s, s + N, s + 2N, …`, exactly as the threads of one
//! process share their process's part. So, with no coordinator:
//!
//! - the union of the shards' requests is the single run's schedule, each request once, at
//!   the same intended times: rates add up to the total, a ramp step of `R` is `R / N` per
//!   shard, and counts (`-n`, `-c`, the in-flight limit) split with the remainder going one
//!   each to the first shards ([`Shard::share`]);
//! - the data walk is disjoint and complete: request `i` renders row `i` of the data (in the
//!   run's order), so no record is sent twice and together the shards cover the data as one
//!   run would. Any request source that renders by the global index — templates over data
//!   today, mixes and recorded traffic later — is sharded the same way for free; a source
//!   that cannot render by index (a stream read once) must skip the requests
//!   [`Shard::owns`] says are not its own.
//!
//! The run id ([`run_id`]) and the settings fingerprint ([`Fingerprint`]) let `scalpel report
//! merge` check a set of shard results: all `N` of one run, none twice, same settings. They
//! use FNV-1a, written out here, so every machine and version derives the same id.

use std::fmt;

/// Which part of a run this process is: shard `index` (from 0) of `count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Shard {
    index: u32,
    count: u32,
}

/// The most shards a run may have: far above any fleet, low enough that a typo is caught.
pub const MAX_SHARDS: u32 = 10_000;

/// The environment variable Kubernetes sets on the pods of an Indexed Job: the pod's index,
/// from 0.
pub const JOB_INDEX_VAR: &str = "JOB_COMPLETION_INDEX";

/// A `--shard` value that makes no sense.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShardError {
    /// Not `I/N` or `auto/N`.
    #[error(
        "--shard takes I/N (from 1, e.g. 2/4) or auto/N (the index from {JOB_INDEX_VAR}), got `{0}`"
    )]
    Syntax(String),
    /// `N` is 0 or above [`MAX_SHARDS`].
    #[error("--shard `{0}`: the number of shards must be 1 to {MAX_SHARDS}")]
    Count(String),
    /// `I` is not in `1..=N`.
    #[error("--shard `{0}`: the shard number must be 1 to N")]
    Index(String),
    /// `auto/N` without the index variable.
    #[error(
        "--shard auto/{0} takes the index from {JOB_INDEX_VAR} (set by Kubernetes on Indexed Job pods), which is not set; give --shard I/N"
    )]
    NoJobIndex(u32),
    /// `auto/N` with an index variable that is not a number in `0..N`.
    #[error(
        "{JOB_INDEX_VAR}=`{value}` is not an index of auto/{count} (0 to {last}): do the Job's completions and the N of --shard agree?",
        last = count - 1
    )]
    BadJobIndex {
        /// The variable's value.
        value: String,
        /// `N`.
        count: u32,
    },
}

impl Shard {
    /// The whole run in one process.
    pub const WHOLE: Shard = Shard { index: 0, count: 1 };

    /// Shard `index` (from 0) of `count`; `None` when `index >= count` or `count` is 0 or above
    /// [`MAX_SHARDS`].
    pub fn new(index: u32, count: u32) -> Option<Shard> {
        ((1..=MAX_SHARDS).contains(&count) && index < count).then_some(Shard { index, count })
    }

    /// Parses `--shard`: `I/N` with `I` from 1, or `auto/N` with the index (from 0) taken from
    /// `job_index`, the value of [`JOB_INDEX_VAR`] (the caller reads the environment).
    pub fn parse(spec: &str, job_index: Option<&str>) -> Result<Shard, ShardError> {
        let (which, count) = spec
            .trim()
            .split_once('/')
            .ok_or_else(|| ShardError::Syntax(spec.to_owned()))?;
        let count: u32 = parse_number(count).ok_or_else(|| ShardError::Syntax(spec.to_owned()))?;
        if count == 0 || count > MAX_SHARDS {
            return Err(ShardError::Count(spec.to_owned()));
        }
        let index = if which.trim().eq_ignore_ascii_case("auto") {
            let value = job_index.ok_or(ShardError::NoJobIndex(count))?;
            parse_number(value)
                .filter(|&i| i < count)
                .ok_or_else(|| ShardError::BadJobIndex {
                    value: value.to_owned(),
                    count,
                })?
        } else {
            let number = parse_number(which).ok_or_else(|| ShardError::Syntax(spec.to_owned()))?;
            if number == 0 || number > count {
                return Err(ShardError::Index(spec.to_owned()));
            }
            number - 1
        };
        Ok(Shard { index, count })
    }

    /// The index, from 0.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// The shard's number as people count, from 1 (`2` in `2/4`).
    pub fn number(&self) -> u32 {
        self.index + 1
    }

    /// How many shards the run has.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// True for the whole run in one process.
    pub fn is_whole(&self) -> bool {
        self.count == 1
    }

    /// This shard's part of a total count (requests, connections, an in-flight limit):
    /// `total / N`, the first `total % N` shards one more. It is also how many of the whole
    /// run's first `total` requests are this shard's.
    pub fn share(&self, total: u64) -> u64 {
        let (n, i) = (u64::from(self.count), u64::from(self.index));
        total / n + u64::from(i < total % n)
    }

    /// This shard's part of a total rate in requests/s: `total / N` (every `N`-th request).
    pub fn rate(&self, total: f64) -> f64 {
        total / f64::from(self.count)
    }

    /// The whole run's index of this shard's `k`-th request.
    pub fn global(&self, k: u64) -> u64 {
        u64::from(self.index) + k * u64::from(self.count)
    }

    /// True when request `i` of the whole run is this shard's.
    pub fn owns(&self, i: u64) -> bool {
        i % u64::from(self.count) == u64::from(self.index)
    }
}

impl Default for Shard {
    fn default() -> Shard {
        Shard::WHOLE
    }
}

impl fmt::Display for Shard {
    /// `2/4`, as `--shard` takes it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.number(), self.count)
    }
}

/// A decimal number without sign, spaces inside or leading `+`.
fn parse_number(text: &str) -> Option<u32> {
    let t = text.trim();
    (!t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
        .then(|| t.parse().ok())
        .flatten()
}

/// FNV-1a, 64 bits: a stable hash for ids and fingerprints (not for security: a fingerprint
/// tells runs apart by accident, not by intent).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fingerprint(u64);

impl Fingerprint {
    /// An empty fingerprint.
    pub fn new() -> Fingerprint {
        Fingerprint(0xcbf2_9ce4_8422_2325)
    }

    /// Adds bytes.
    pub fn bytes(&mut self, bytes: &[u8]) -> &mut Fingerprint {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
        self
    }

    /// Adds a named field: `name=value` and a separator that cannot occur in either by
    /// accident, so `a=bc` and `ab=c` differ.
    pub fn field(&mut self, name: &str, value: &str) -> &mut Fingerprint {
        self.bytes(&(name.len() as u64).to_le_bytes())
            .bytes(name.as_bytes())
            .bytes(&(value.len() as u64).to_le_bytes())
            .bytes(value.as_bytes())
    }

    /// The hash so far.
    pub fn value(&self) -> u64 {
        self.0
    }

    /// The hash as 16 lowercase hex digits.
    pub fn hex(&self) -> String {
        format!("{:016x}", self.0)
    }
}

impl Default for Fingerprint {
    fn default() -> Fingerprint {
        Fingerprint::new()
    }
}

/// The id of a run derived from its settings' fingerprint and its common start time, the
/// same on every shard: `run-` and 16 hex digits.
pub fn run_id(settings: &str, start_at: &str) -> String {
    let mut f = Fingerprint::new();
    f.field("settings", settings).field("start_at", start_at);
    format!("run-{}", f.hex())
}

/// A `--run-id` given by the user: 1 to 128 characters of letters, digits and `._:-`, so
/// it can name files and Kubernetes labels. Returns why not.
pub fn check_run_id(id: &str) -> Result<(), String> {
    if id.is_empty() || id.len() > 128 {
        return Err(format!(
            "--run-id must be 1 to 128 characters, got {}",
            id.len()
        ));
    }
    match id
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-')))
    {
        Some(c) => Err(format!(
            "--run-id `{id}`: `{c}` is not allowed (letters, digits and . _ : - only)"
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_one_based_and_auto_zero_based() {
        assert_eq!(Shard::parse("2/4", None), Ok(Shard { index: 1, count: 4 }));
        assert_eq!(
            Shard::parse(" 4/4 ", None),
            Ok(Shard { index: 3, count: 4 })
        );
        assert_eq!(
            Shard::parse("auto/4", Some("0")),
            Ok(Shard { index: 0, count: 4 })
        );
        assert_eq!(
            Shard::parse("AUTO/4", Some("3")),
            Ok(Shard { index: 3, count: 4 })
        );
        assert_eq!(Shard::parse("1/1", None), Ok(Shard::WHOLE));
        assert_eq!(Shard::parse("2/4", None).unwrap().to_string(), "2/4");
    }

    #[test]
    fn bad_shard_specs_are_errors_that_say_why() {
        for (spec, env) in [
            ("0/4", None),
            ("5/4", None),
            ("1/0", None),
            ("2", None),
            ("-1/4", None),
            ("+1/4", None),
            ("1/4/2", None),
            ("a/4", None),
            ("1/99999999999", None),
            ("auto/4", None),
            ("auto/4", Some("4")),
            ("auto/4", Some("-1")),
            ("auto/4", Some("")),
            ("auto/4", Some("one")),
            ("1/10001", None),
        ] {
            let err = Shard::parse(spec, env).expect_err(spec);
            let text = err.to_string();
            assert!(!text.contains('\n'), "{text}");
        }
        assert!(
            Shard::parse("auto/4", None)
                .unwrap_err()
                .to_string()
                .contains(JOB_INDEX_VAR)
        );
        assert!(
            Shard::parse("auto/4", Some("7"))
                .unwrap_err()
                .to_string()
                .contains("0 to 3")
        );
    }

    #[test]
    fn shares_add_up_to_the_total_with_remainders_spread_one_each() {
        for total in [0u64, 1, 2, 3, 7, 50, 1001, 65_537] {
            for count in [1u32, 2, 3, 4, 7, 10] {
                let shares: Vec<u64> = (0..count)
                    .map(|i| Shard::new(i, count).unwrap().share(total))
                    .collect();
                assert_eq!(shares.iter().sum::<u64>(), total, "{total} over {count}");
                let (lo, hi) = (shares.iter().min().unwrap(), shares.iter().max().unwrap());
                assert!(hi - lo <= 1, "{shares:?}");
                // The larger shares come first.
                assert!(shares.windows(2).all(|w| w[0] >= w[1]), "{shares:?}");
            }
        }
        assert_eq!(Shard::new(0, 4).unwrap().share(50), 13);
        assert_eq!(Shard::new(3, 4).unwrap().share(50), 12);
    }

    #[test]
    fn the_shards_walk_disjoint_parts_that_cover_the_whole_run() {
        let total = 1003u64;
        let count = 4u32;
        let mut seen = vec![0u32; total as usize];
        for index in 0..count {
            let shard = Shard::new(index, count).unwrap();
            let mine = shard.share(total);
            for k in 0..mine {
                let i = shard.global(k);
                assert!(shard.owns(i));
                seen[i as usize] += 1;
            }
            // The share is exactly the requests below `total` the shard owns.
            assert_eq!(mine, (0..total).filter(|&i| shard.owns(i)).count() as u64);
        }
        assert!(seen.iter().all(|&n| n == 1), "every request exactly once");
    }

    #[test]
    fn rates_are_parts_of_the_total() {
        let parts: f64 = (0..3).map(|i| Shard::new(i, 3).unwrap().rate(1000.0)).sum();
        assert!((parts - 1000.0).abs() < 1e-9);
    }

    #[test]
    fn fingerprint_is_fnv1a_and_fields_do_not_run_together() {
        // FNV-1a 64 reference values.
        assert_eq!(Fingerprint::new().value(), 0xcbf2_9ce4_8422_2325);
        assert_eq!(
            Fingerprint::new().bytes(b"a").value(),
            0xaf63_dc4c_8601_ec8c
        );
        assert_eq!(
            Fingerprint::new().bytes(b"foobar").value(),
            0x8594_4171_f739_67e8
        );
        let mut a = Fingerprint::new();
        a.field("a", "bc");
        let mut b = Fingerprint::new();
        b.field("ab", "c");
        assert_ne!(a, b);
    }

    #[test]
    fn run_id_depends_on_settings_and_start_and_nothing_else() {
        let id = run_id("abc", "2030-01-01T00:00:00Z");
        assert_eq!(id, run_id("abc", "2030-01-01T00:00:00Z"));
        assert_ne!(id, run_id("abd", "2030-01-01T00:00:00Z"));
        assert_ne!(id, run_id("abc", "2030-01-01T00:00:01Z"));
        assert!(id.starts_with("run-") && id.len() == 20, "{id}");
        assert!(check_run_id(&id).is_ok());
    }

    #[test]
    fn user_run_ids_are_checked() {
        assert!(check_run_id("k8s-1767225600").is_ok());
        assert!(check_run_id("").is_err());
        assert!(check_run_id("a b").is_err());
        assert!(check_run_id("a/b").is_err());
        assert!(check_run_id(&"x".repeat(129)).is_err());
    }
}
