//! The common start time of a run spread over machines (`--start-at`), and RFC 3339 times.
//!
//! Every shard of a run starts its clock at the same wall-clock instant, so the steps of a
//! ramp line up across machines. The time is given as RFC 3339 (`2030-01-01T12:00:00Z`,
//! `2030-01-01T14:00:00.5+02:00`) or as Unix seconds (`1893499200`, `1893499200.25`), the
//! form a shell gets from `date +%s`. Parsed and printed here, without a date crate: the
//! calendar arithmetic is Howard Hinnant's `days_from_civil` and its inverse.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A wall-clock instant at or after 1970, to the nanosecond.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StartAt {
    since_epoch: Duration,
}

/// A `--start-at` value that is not a time.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "--start-at `{text}`: {why} (give RFC 3339, e.g. 2030-01-01T12:00:00Z, or Unix seconds, e.g. 1893499200)"
)]
pub struct StartAtError {
    text: String,
    why: &'static str,
}

impl StartAt {
    /// Parses RFC 3339 or Unix seconds (digits, optionally a fraction).
    pub fn parse(text: &str) -> Result<StartAt, StartAtError> {
        let t = text.trim();
        let err = |why| StartAtError {
            text: text.to_owned(),
            why,
        };
        if t.is_empty() {
            return Err(err("empty"));
        }
        if t.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
            return parse_unix(t).ok_or_else(|| err("not a number of seconds"));
        }
        parse_rfc3339(t).map_err(err)
    }

    /// The instant `since_epoch` after 1970-01-01T00:00:00Z.
    pub fn from_unix(since_epoch: Duration) -> StartAt {
        StartAt { since_epoch }
    }

    /// The current time (the epoch itself if the clock is set before 1970).
    pub fn now() -> StartAt {
        StartAt::from_system_time(SystemTime::now())
    }

    /// From a `SystemTime` (the epoch itself for times before 1970).
    pub fn from_system_time(t: SystemTime) -> StartAt {
        StartAt {
            since_epoch: t.duration_since(UNIX_EPOCH).unwrap_or_default(),
        }
    }

    /// As a `SystemTime`.
    pub fn system_time(&self) -> SystemTime {
        UNIX_EPOCH + self.since_epoch
    }

    /// Time since 1970-01-01T00:00:00Z.
    pub fn since_epoch(&self) -> Duration {
        self.since_epoch
    }

    /// Seconds from `self` to `later`, negative when `later` is earlier.
    pub fn seconds_until(&self, later: StartAt) -> f64 {
        later.since_epoch.as_secs_f64() - self.since_epoch.as_secs_f64()
    }

    /// `self` plus `d`.
    pub fn plus(&self, d: Duration) -> StartAt {
        StartAt {
            since_epoch: self.since_epoch.saturating_add(d),
        }
    }
}

impl fmt::Display for StartAt {
    /// RFC 3339 in UTC: `2030-01-01T12:00:00Z`, with milliseconds when there are any
    /// (`…:00.250Z`; finer parts are cut, not rounded).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.since_epoch.as_secs();
        let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
        let (y, m, d) = civil_from_days(days);
        write!(
            f,
            "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}",
            rem / 3600,
            rem % 3600 / 60,
            rem % 60
        )?;
        let millis = self.since_epoch.subsec_millis();
        if millis > 0 {
            write!(f, ".{millis:03}")?;
        }
        f.write_str("Z")
    }
}

fn parse_unix(t: &str) -> Option<StartAt> {
    let (whole, frac) = match t.split_once('.') {
        Some((_, "")) => return None,
        Some(parts) => parts,
        None => (t, ""),
    };
    if whole.is_empty() || frac.contains('.') || frac.len() > 9 {
        return None;
    }
    let secs: u64 = whole.parse().ok()?;
    // Year 10000 and later: a typo (milliseconds given as seconds), not a start time.
    if secs >= MAX_SECS {
        return None;
    }
    Some(StartAt {
        since_epoch: Duration::new(secs, nanos(frac)?),
    })
}

/// 10000-01-01T00:00:00Z.
const MAX_SECS: u64 = 253_402_300_800;

/// The digits after the decimal point as nanoseconds (at most 9 digits).
fn nanos(frac: &str) -> Option<u32> {
    if frac.is_empty() {
        return Some(0);
    }
    if frac.len() > 9 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u32 = frac.parse().ok()?;
    Some(n * 10u32.pow(9 - frac.len() as u32))
}

/// `YYYY-MM-DD(T|t| )HH:MM:SS[.frac](Z|z|±HH:MM)`.
fn parse_rfc3339(t: &str) -> Result<StartAt, &'static str> {
    let b = t.as_bytes();
    let digits = |from: usize, len: usize| -> Option<u32> {
        let s = b.get(from..from + len)?;
        s.iter()
            .all(u8::is_ascii_digit)
            .then(|| s.iter().fold(0u32, |n, d| n * 10 + u32::from(d - b'0')))
    };
    let at = |i: usize, c: &[u8]| b.get(i).is_some_and(|x| c.contains(x));
    let shape = "not RFC 3339 (YYYY-MM-DDTHH:MM:SSZ)";
    if !(at(4, b"-") && at(7, b"-") && at(10, b"Tt ") && at(13, b":") && at(16, b":")) {
        return Err(shape);
    }
    let (Some(year), Some(month), Some(day), Some(hour), Some(minute), Some(second)) = (
        digits(0, 4),
        digits(5, 2),
        digits(8, 2),
        digits(11, 2),
        digits(14, 2),
        digits(17, 2),
    ) else {
        return Err(shape);
    };
    let mut i = 19;
    let mut frac_nanos = 0;
    if at(i, b".") {
        let end = b[i + 1..]
            .iter()
            .position(|c| !c.is_ascii_digit())
            .map_or(b.len(), |p| i + 1 + p);
        if end == i + 1 {
            return Err("a decimal point without digits");
        }
        // Digits past nanoseconds are cut.
        let cut = end.min(i + 10);
        frac_nanos = nanos(&t[i + 1..cut]).ok_or(shape)?;
        i = end;
    }
    let offset_secs: i64 = match b.get(i) {
        Some(b'Z' | b'z') if b.len() == i + 1 => 0,
        Some(&sign @ (b'+' | b'-')) if b.len() == i + 6 && at(i + 3, b":") => {
            let (Some(oh), Some(om)) = (digits(i + 1, 2), digits(i + 4, 2)) else {
                return Err(shape);
            };
            if oh > 23 || om > 59 {
                return Err("the offset is out of range");
            }
            let s = i64::from(oh * 3600 + om * 60);
            if sign == b'+' { s } else { -s }
        }
        None => return Err("no time zone (end with Z or an offset such as +02:00)"),
        _ => return Err(shape),
    };
    if !(1..=12).contains(&month) || day == 0 || day > days_in_month(year, month) {
        return Err("no such date");
    }
    // Second 60 is a leap second; it is taken as the first second of the next minute.
    if hour > 23 || minute > 59 || second > 60 {
        return Err("no such time of day");
    }
    let days = days_from_civil(i64::from(year), month, day);
    let secs = days * 86_400 + i64::from(hour * 3600 + minute * 60 + second) - offset_secs;
    if secs < 0 {
        return Err("before 1970");
    }
    Ok(StartAt {
        since_epoch: Duration::new(secs as u64, frac_nanos),
    })
}

fn days_in_month(year: u32, month: u32) -> u32 {
    match month {
        2 if year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400)) => {
            29
        }
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Hinnant's `days_from_civil`).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day count since 1970-01-01 (Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unix(t: &str) -> f64 {
        StartAt::parse(t).unwrap().since_epoch().as_secs_f64()
    }

    #[test]
    fn unix_seconds_and_rfc3339_name_the_same_instant() {
        assert_eq!(unix("1893499200"), 1_893_499_200.0);
        assert_eq!(unix("2030-01-01T12:00:00Z"), 1_893_499_200.0);
        assert_eq!(unix("2030-01-01t12:00:00z"), 1_893_499_200.0);
        assert_eq!(unix("2030-01-01 12:00:00Z"), 1_893_499_200.0);
        assert_eq!(unix("2030-01-01T14:00:00+02:00"), 1_893_499_200.0);
        assert_eq!(unix("2030-01-01T07:30:00-04:30"), 1_893_499_200.0);
        assert_eq!(unix("1893499200.25"), 1_893_499_200.25);
        assert_eq!(unix("2030-01-01T12:00:00.25Z"), 1_893_499_200.25);
        assert_eq!(unix("1970-01-01T00:00:00Z"), 0.0);
        assert_eq!(unix("2024-02-29T00:00:00Z"), 1_709_164_800.0);
    }

    #[test]
    fn digits_past_nanoseconds_are_cut() {
        let t = StartAt::parse("2030-01-01T12:00:00.1234567891Z").unwrap();
        assert_eq!(t.since_epoch().subsec_nanos(), 123_456_789);
    }

    #[test]
    fn prints_rfc3339_utc_and_reads_it_back() {
        for text in [
            "2030-01-01T12:00:00Z",
            "2030-01-01T12:00:00.250Z",
            "2000-02-29T23:59:59Z",
            "1970-01-01T00:00:00Z",
            "9999-12-31T23:59:59.999Z",
        ] {
            let t = StartAt::parse(text).unwrap();
            assert_eq!(t.to_string(), text);
        }
        let t = StartAt::parse("1893499200").unwrap();
        assert_eq!(t.to_string(), "2030-01-01T12:00:00Z");
        // Every day of four centuries round-trips.
        for day in (0..146_097i64).step_by(7) {
            let (y, m, d) = civil_from_days(day);
            assert_eq!(days_from_civil(y, m, d), day);
        }
    }

    #[test]
    fn nonsense_is_an_error_naming_the_value() {
        for text in [
            "",
            "now",
            "2030-01-01",
            "2030-01-01T12:00:00",
            "2030-13-01T12:00:00Z",
            "2030-02-29T12:00:00Z",
            "2030-01-01T24:00:00Z",
            "2030-01-01T12:60:00Z",
            "2030-01-01T12:00:00+24:00",
            "2030-01-01T12:00:00.Z",
            "2030-01-01T12:00:00Zjunk",
            "1969-12-31T23:59:59Z",
            "12.34.56",
            "1.",
            ".5",
            "1893499200.1234567891",
            "99999999999999999999",
            "1893499200000",
            "-5",
            "٣٣٣",
        ] {
            let err = StartAt::parse(text).expect_err(text);
            assert!(err.to_string().contains("--start-at"), "{err}");
        }
    }

    #[test]
    fn seconds_until_is_signed() {
        let a = StartAt::parse("100").unwrap();
        let b = StartAt::parse("102.5").unwrap();
        assert_eq!(a.seconds_until(b), 2.5);
        assert_eq!(b.seconds_until(a), -2.5);
    }
}
