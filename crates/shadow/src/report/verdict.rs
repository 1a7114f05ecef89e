//! Pass or fail: the one judgement of a shadow run, for `scalpel shadow replay` and
//! `scalpel shadow report` (and any script that reads the same summary).

use std::fmt::{self, Write as _};

use crate::ShadowError;
use crate::tally::{Summary, floor2};

/// The consistency a run must reach to pass (`--min-consistency`), a percentage from 0 to
/// 100.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MinConsistency(f64);

impl MinConsistency {
    /// Every compared pair must match.
    pub const ALL: MinConsistency = MinConsistency(100.0);

    /// `percent` from 0 to 100; anything else is refused, naming `--min-consistency`.
    pub fn new(percent: f64) -> Result<MinConsistency, ShadowError> {
        if !(0.0..=100.0).contains(&percent) {
            return Err(ShadowError::Setting {
                flag: "--min-consistency",
                problem: format!("{percent}: expected a percentage from 0 to 100"),
            });
        }
        Ok(MinConsistency(percent))
    }

    /// The percentage.
    pub fn percent(&self) -> f64 {
        self.0
    }
}

/// Whether a run passed, and why in words. It fails closed: nothing compared is a
/// failure, and so is any failed side (a failed secondary included: the noise figures
/// would be missing).
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pass: bool,
    why: String,
}

impl Verdict {
    /// Judges `s`: a pass when pairs were compared, no side failed and at least `min`
    /// percent of them matched.
    pub fn judge(s: &Summary, min: MinConsistency) -> Verdict {
        let min = min.percent();
        let side_failures: u64 = s.errors_by_kind.values().sum();
        let pass = s.compared > 0 && side_failures == 0 && s.consistency_percent >= min;
        let why = if s.compared == 0 {
            "nothing was compared".to_string()
        } else if s.errors > 0 {
            format!("{} requests where a side failed", s.errors)
        } else if side_failures > 0 {
            format!("{side_failures} requests where the secondary failed")
        } else {
            let mut why = format!("{}% consistent, need {min}%", floor2(s.consistency_percent));
            if s.not_compared > 0 {
                let _ = write!(
                    why,
                    " (over the {} compared; {} chosen requests were not compared)",
                    s.compared, s.not_compared
                );
            }
            why
        };
        Verdict { pass, why }
    }

    /// Whether the run passed.
    pub fn passed(&self) -> bool {
        self.pass
    }

    /// Why, in words (`99.50% consistent, need 100%`).
    pub fn why(&self) -> &str {
        &self.why
    }
}

impl fmt::Display for Verdict {
    /// `PASS: why` or `FAIL: why`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let word = if self.pass { "PASS" } else { "FAIL" };
        write!(f, "{word}: {}", self.why)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(compared: u64, matched: u64) -> Summary {
        Summary {
            compared,
            matched,
            mismatched: compared - matched,
            consistency_percent: if compared == 0 {
                0.0
            } else {
                matched as f64 * 100.0 / compared as f64
            },
            ..Summary::default()
        }
    }

    #[test]
    fn nothing_compared_fails_and_a_failed_secondary_fails() {
        let v = Verdict::judge(&summary(0, 0), MinConsistency::new(0.0).unwrap());
        assert!(!v.passed());
        assert_eq!(v.to_string(), "FAIL: nothing was compared");
        let mut s = summary(10, 10);
        s.errors_by_kind.insert("secondary:timeout".into(), 1);
        let v = Verdict::judge(&s, MinConsistency::ALL);
        assert_eq!(v.to_string(), "FAIL: 1 requests where the secondary failed");
    }

    #[test]
    fn consistency_is_floored_before_it_is_shown_and_compared_to_the_bar() {
        let s = summary(100_000, 99_999);
        let v = Verdict::judge(&s, MinConsistency::ALL);
        assert_eq!(v.to_string(), "FAIL: 99.99% consistent, need 100%");
        let v = Verdict::judge(&s, MinConsistency::new(99.9).unwrap());
        assert!(v.passed(), "{v}");
    }

    #[test]
    fn a_bar_outside_0_to_100_names_the_flag() {
        for bad in [-1.0, 100.5, f64::NAN] {
            let e = MinConsistency::new(bad).unwrap_err().to_string();
            assert!(e.starts_with("--min-consistency "), "{e}");
        }
    }
}
