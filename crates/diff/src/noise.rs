//! Telling real differences from noise with a secondary copy of the old service.

use serde::{Deserialize, Serialize};

/// How often one field differed, over one endpoint's compared requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct FieldCounts {
    /// Requests where primary ≠ candidate at this field.
    pub raw: u64,
    /// Requests where primary ≠ secondary at this field (two copies of the same code).
    pub noise: u64,
    /// Requests compared on the endpoint.
    pub total: u64,
}

/// The verdict on one field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The candidate differs more than the old code differs from itself: a regression.
    Real,
    /// The old code differs from itself about as much: timestamps, random ids, ordering.
    Noise,
}

/// Diffy's rule: a field is real only when primary ≠ candidate clearly more often than
/// primary ≠ secondary.
///
/// With `d = |raw − noise|`, a field is real when `raw > noise`, `d / (raw + noise)` is
/// above `relative_percent` (default 20 %) and `d / total` is above `absolute_percent`
/// (default 0.03 %), Diffy's defaults. One deliberate change: a field that never differed
/// between primary and secondary (`noise == 0`) is real however rare, because nothing
/// explains it and a cut-over gate must not hide a single regression.
///
/// ```
/// use scalpel_diff::{FieldCounts, NoiseRule, Verdict};
/// let rule = NoiseRule::default();
/// assert_eq!(rule.classify(FieldCounts { raw: 95, noise: 90, total: 100 }), Verdict::Noise);
/// assert_eq!(rule.classify(FieldCounts { raw: 60, noise: 2, total: 100 }), Verdict::Real);
/// assert_eq!(rule.classify(FieldCounts { raw: 1, noise: 0, total: 100_000 }), Verdict::Real);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct NoiseRule {
    relative_percent: f64,
    absolute_percent: f64,
}

impl Default for NoiseRule {
    fn default() -> Self {
        Self {
            relative_percent: 20.0,
            absolute_percent: 0.03,
        }
    }
}

impl NoiseRule {
    /// A rule with explicit thresholds, in percent.
    pub fn new(relative_percent: f64, absolute_percent: f64) -> Self {
        Self {
            relative_percent,
            absolute_percent,
        }
    }

    /// The relative threshold, in percent.
    pub fn relative_percent(&self) -> f64 {
        self.relative_percent
    }

    /// The absolute threshold, in percent.
    pub fn absolute_percent(&self) -> f64 {
        self.absolute_percent
    }

    /// Classifies one field.
    pub fn classify(&self, c: FieldCounts) -> Verdict {
        if c.raw == 0 {
            return Verdict::Noise;
        }
        if c.noise == 0 {
            return Verdict::Real;
        }
        if c.raw <= c.noise {
            return Verdict::Noise;
        }
        let d = (c.raw - c.noise) as f64;
        let relative = d / (c.raw + c.noise) as f64 * 100.0;
        let absolute = d / c.total.max(1) as f64 * 100.0;
        if relative > self.relative_percent && absolute > self.absolute_percent {
            Verdict::Real
        } else {
            Verdict::Noise
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_are_strict_and_both_needed() {
        let rule = NoiseRule::new(20.0, 1.0);
        let c = |raw, noise, total| FieldCounts { raw, noise, total };
        // d/(raw+noise) = 20/100 = 20 %: not above 20 %.
        assert_eq!(rule.classify(c(60, 40, 100)), Verdict::Noise);
        assert_eq!(rule.classify(c(61, 39, 100)), Verdict::Real);
        // Relative 100 % but absolute 0.5 % < 1 %.
        assert_eq!(rule.classify(c(6, 1, 1000)), Verdict::Noise);
        assert_eq!(rule.classify(c(0, 5, 10)), Verdict::Noise);
        assert_eq!(rule.classify(c(3, 3, 10)), Verdict::Noise);
    }
}
