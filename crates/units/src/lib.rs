//! The one grammar for durations and sizes, shared by every subcommand and config file.
//!
//! `scalpel load --timeout 300ms`, `scalpel shadow replay --timeout 5s`, a size such as
//! `--max-body 1MiB` and the same words in `scalpel serve`'s TOML all go through
//! [`parse_duration`] and [`parse_size`], so a value means the same everywhere and a
//! fix lands once. Nonsense and overflow are a [`UnitError`] whose text is one line a
//! person can act on; no input makes these functions panic (a property test feeds them
//! random strings).
//!
//! It must NOT know about flags, files or HTTP: callers add the flag or key name to the
//! error when they report it.
//!
//! # Grammar
//!
//! - duration: a decimal number and a unit, `us` (or `µs`), `ms`, `s`, `m` (or `min`),
//!   `h`: `250us`, `50ms`, `1.5s`, `2m`, `1h`. The unit is required (a bare `30` is
//!   ambiguous between seconds and milliseconds, and both conventions exist among the
//!   tools people come from). Zero is allowed; at most [`MAX_DURATION`].
//! - size: a decimal number and an optional unit, bytes when none: `65536`, `512B`,
//!   `64KB` / `64k` (×1000), `64KiB` (×1024), `MB`, `MiB`, `GB`, `GiB`, `TB`, `TiB`;
//!   units are case-insensitive. The result must be a whole number of bytes.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use scalpel_units::{format_duration, parse_duration, parse_size};
//!
//! assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
//! assert_eq!(parse_size("64KiB").unwrap(), 65_536);
//! assert!(parse_duration("99999999999999999999999s").is_err());
//! assert_eq!(format_duration(Duration::from_micros(250)), "250us");
//! ```

use std::time::Duration;

/// The longest duration accepted: 100 days. Longer values are almost always a typo
/// (a unit forgotten), and far below what `Duration` arithmetic could overflow on.
pub const MAX_DURATION: Duration = Duration::from_secs(100 * 24 * 3600);

/// A value that is not a duration or size in the grammar.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UnitError {
    /// Not a number followed by a known duration unit.
    #[error("bad duration `{0}`: expected a number and a unit (us, ms, s, m, h), e.g. 30s")]
    Duration(String),
    /// A duration above [`MAX_DURATION`].
    #[error("duration `{0}` is too long (at most 100 days)")]
    DurationTooLong(String),
    /// Not a number followed by an optional known size unit.
    #[error(
        "bad size `{0}`: expected bytes or a number and a unit (KB, KiB, MB, MiB, GB, GiB), e.g. 64KiB"
    )]
    Size(String),
    /// A size that does not fit in 64 bits or is not a whole number of bytes.
    #[error("size `{0}` is out of range (a whole number of bytes below 16 EiB)")]
    SizeOutOfRange(String),
}

/// Splits `12.5ms` into (`12.5`, `ms`); the number part must be plain decimal digits with at
/// most one dot (no sign, no exponent, no `inf`/`nan` that `f64::from_str` would accept).
fn split_number(text: &str) -> Option<(f64, &str)> {
    let t = text.trim();
    let end = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(end);
    let digits = number.bytes().filter(u8::is_ascii_digit).count();
    if digits == 0 || number.bytes().filter(|&b| b == b'.').count() > 1 {
        return None;
    }
    let value: f64 = number.parse().ok()?;
    value.is_finite().then_some((value, unit.trim()))
}

/// Parses a duration in the grammar above.
pub fn parse_duration(text: &str) -> Result<Duration, UnitError> {
    let bad = || UnitError::Duration(text.trim().to_string());
    let (value, unit) = split_number(text).ok_or_else(bad)?;
    let nanos_per_unit: f64 = match unit {
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        "m" | "min" => 60e9,
        "h" => 3600e9,
        _ => return Err(bad()),
    };
    let nanos = value * nanos_per_unit;
    if !nanos.is_finite() || nanos > MAX_DURATION.as_nanos() as f64 {
        return Err(UnitError::DurationTooLong(text.trim().to_string()));
    }
    Ok(Duration::from_nanos(nanos.round() as u64))
}

/// Parses a size in bytes in the grammar above.
pub fn parse_size(text: &str) -> Result<u64, UnitError> {
    let bad = || UnitError::Size(text.trim().to_string());
    let (value, unit) = split_number(text).ok_or_else(bad)?;
    let multiplier: f64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1e3,
        "kib" => 1024.0,
        "m" | "mb" => 1e6,
        "mib" => 1024.0 * 1024.0,
        "g" | "gb" => 1e9,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        "t" | "tb" => 1e12,
        "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return Err(bad()),
    };
    let bytes = value * multiplier;
    // 2^64 is exactly representable; anything at or above it does not fit.
    if !bytes.is_finite() || bytes >= 18_446_744_073_709_551_616.0 || bytes.fract() != 0.0 {
        return Err(UnitError::SizeOutOfRange(text.trim().to_string()));
    }
    Ok(bytes as u64)
}

/// Formats a duration in the grammar, in the largest unit that keeps it short and exact to
/// a microsecond: `250us`, `1.5ms`, `30s`, `2m`. [`parse_duration`] reads it back.
pub fn format_duration(d: Duration) -> String {
    let us = d.as_micros();
    let (value, unit) = if us < 1_000 {
        return format!("{us}us");
    } else if us < 1_000_000 {
        (us as f64 / 1e3, "ms")
    } else if us < 60_000_000 || !us.is_multiple_of(60_000_000) {
        (us as f64 / 1e6, "s")
    } else if !us.is_multiple_of(3_600_000_000) {
        (us as f64 / 60e6, "m")
    } else {
        (us as f64 / 3600e6, "h")
    };
    let text = format!("{value:.3}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    format!("{text}{unit}")
}

/// Formats a byte count with a binary unit when it is a whole multiple (`64KiB`, `8MiB`),
/// else as plain bytes. [`parse_size`] reads it back exactly.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [(u64, &str); 4] = [
        (1 << 40, "TiB"),
        (1 << 30, "GiB"),
        (1 << 20, "MiB"),
        (1 << 10, "KiB"),
    ];
    for (size, unit) in UNITS {
        if bytes >= size && bytes.is_multiple_of(size) {
            return format!("{}{unit}", bytes / size);
        }
    }
    bytes.to_string()
}

/// Serde helpers for config files: a duration or size given as a string in the grammar.
///
/// ```
/// #[derive(serde::Deserialize)]
/// struct Limits {
///     #[serde(deserialize_with = "scalpel_units::serde::duration")]
///     timeout: std::time::Duration,
///     #[serde(deserialize_with = "scalpel_units::serde::size")]
///     max_body: u64,
/// }
/// let l: Limits = toml::from_str("timeout = \"5s\"\nmax_body = \"1MiB\"").unwrap();
/// assert_eq!(l.max_body, 1 << 20);
/// ```
pub mod serde {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, de::Error};

    /// Deserializes a duration string such as `"500ms"`.
    pub fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(d)?;
        super::parse_duration(&text).map_err(D::Error::custom)
    }

    /// Deserializes a size: a string such as `"64KiB"`, or a plain integer of bytes.
    pub fn size<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Bytes(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Bytes(n) => Ok(n),
            Raw::Text(t) => super::parse_size(&t).map_err(D::Error::custom),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn durations_in_every_unit() {
        assert_eq!(parse_duration("250us").unwrap(), Duration::from_micros(250));
        assert_eq!(parse_duration("250µs").unwrap(), Duration::from_micros(250));
        assert_eq!(parse_duration("50ms").unwrap(), Duration::from_millis(50));
        assert_eq!(
            parse_duration(" 1.5s ").unwrap(),
            Duration::from_millis(1500)
        );
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("2min").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1h").unwrap(), Duration::from_secs(3600));
        assert_eq!(parse_duration("0s").unwrap(), Duration::ZERO);
        assert_eq!(parse_duration(".5s").unwrap(), Duration::from_millis(500));
    }

    #[test]
    fn nonsense_and_overflow_are_errors_not_panics() {
        for bad in [
            "", "30", "s", "-1s", "+1s", "1.2.3s", "10x", "1e3s", "infs", "nans", "NaNs", ".s",
            "1 0s", "5 s s",
        ] {
            assert!(
                matches!(parse_duration(bad), Err(UnitError::Duration(_))),
                "{bad:?}"
            );
        }
        for long in ["99999999999999999999999s", "101d", "2401h"] {
            assert!(parse_duration(long).is_err(), "{long:?}");
        }
        assert_eq!(
            parse_duration("99999999999999999999999s"),
            Err(UnitError::DurationTooLong(
                "99999999999999999999999s".into()
            ))
        );
    }

    #[test]
    fn sizes_in_every_unit() {
        assert_eq!(parse_size("65536").unwrap(), 65_536);
        assert_eq!(parse_size("512B").unwrap(), 512);
        assert_eq!(parse_size("64k").unwrap(), 64_000);
        assert_eq!(parse_size("64KB").unwrap(), 64_000);
        assert_eq!(parse_size("64KiB").unwrap(), 65_536);
        assert_eq!(parse_size("1mib").unwrap(), 1 << 20);
        assert_eq!(parse_size("1.5MiB").unwrap(), 3 << 19);
        assert_eq!(parse_size("2GiB").unwrap(), 2 << 30);
        assert_eq!(parse_size("1TB").unwrap(), 1_000_000_000_000);
        for bad in ["", "MiB", "-1", "1.2.3", "12 apples", "1e6"] {
            assert!(
                matches!(parse_size(bad), Err(UnitError::Size(_))),
                "{bad:?}"
            );
        }
        for out in ["0.5B", "99999999999999999999999", "20000000TiB"] {
            assert!(
                matches!(parse_size(out), Err(UnitError::SizeOutOfRange(_))),
                "{out:?}"
            );
        }
    }

    #[test]
    fn formatting_reads_back() {
        for (d, text) in [
            (Duration::from_micros(250), "250us"),
            (Duration::from_micros(1500), "1.5ms"),
            (Duration::from_millis(300), "300ms"),
            (Duration::from_secs(30), "30s"),
            (Duration::from_millis(90_500), "90.5s"),
            (Duration::from_secs(120), "2m"),
            (Duration::from_secs(7200), "2h"),
        ] {
            assert_eq!(format_duration(d), text);
            assert_eq!(parse_duration(text).unwrap(), d);
        }
        for (n, text) in [
            (65_536, "64KiB"),
            (1 << 20, "1MiB"),
            (1000, "1000"),
            (3, "3"),
        ] {
            assert_eq!(format_size(n), text);
            assert_eq!(parse_size(text).unwrap(), n);
        }
    }

    #[test]
    fn serde_helpers_name_the_problem() {
        #[derive(::serde::Deserialize, Debug)]
        struct Cfg {
            #[serde(deserialize_with = "crate::serde::duration")]
            #[allow(dead_code)]
            timeout: Duration,
        }
        let err = toml::from_str::<Cfg>("timeout = \"5 parsecs\"").unwrap_err();
        assert!(
            err.to_string().contains("bad duration `5 parsecs`"),
            "{err}"
        );
    }

    proptest! {
        #[test]
        fn random_text_never_panics(s in "\\PC{0,40}") {
            let _ = parse_duration(&s);
            let _ = parse_size(&s);
        }

        #[test]
        fn number_like_text_never_panics(s in "[0-9.]{0,30}(us|ms|s|m|h|KiB|MB|GiB|TiB|x)?") {
            let _ = parse_duration(&s);
            let _ = parse_size(&s);
        }

        #[test]
        fn every_duration_formats_and_reads_back(us in 0u64..MAX_DURATION.as_micros() as u64) {
            let d = Duration::from_micros(us);
            let back = parse_duration(&format_duration(d)).unwrap();
            // format keeps 3 decimals of the chosen unit: exact to 1 µs below 1 s, else 1 ms.
            let tolerance = if us < 1_000_000 { 1 } else { 1_000 * 60 * 60 };
            prop_assert!(back.as_micros().abs_diff(d.as_micros()) <= tolerance);
        }
    }
}
