//! The two timestamp forms recorded traffic uses, parsed to Unix nanoseconds: the access
//! log's `10/Oct/2000:13:55:36 -0700` and RFC 3339 (HAR's `startedDateTime`).
//!
//! Hand-written rather than a date crate: two fixed formats, and the access-log one is on
//! the hot path of reading a million lines a second.

/// Days from 1970-01-01 to `y-m-d` in the proleptic Gregorian calendar (Howard Hinnant's
/// `days_from_civil`).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        _ => 28,
    }
}

fn digits(b: &[u8]) -> Option<u32> {
    if b.is_empty() || !b.iter().all(u8::is_ascii_digit) {
        return None;
    }
    b.iter().try_fold(0u32, |n, &d| {
        n.checked_mul(10)?.checked_add(u32::from(d - b'0'))
    })
}

/// Seconds since the epoch of a civil time with an offset east of UTC, after checking
/// every field's range.
fn to_unix(y: i64, mo: u32, d: u32, h: u32, mi: u32, s: u32, offset_s: i64) -> Option<i64> {
    if !(1..=12).contains(&mo) || d == 0 || d > days_in_month(y, mo) || h > 23 || mi > 59 || s > 60
    {
        return None;
    }
    let days = days_from_civil(y, mo, d);
    Some(days * 86_400 + i64::from(h * 3600 + mi * 60 + s) - offset_s)
}

fn offset(sign: u8, hh: &[u8], mm: &[u8]) -> Option<i64> {
    let (h, m) = (digits(hh)?, digits(mm)?);
    if h > 23 || m > 59 {
        return None;
    }
    let v = i64::from(h * 3600 + m * 60);
    match sign {
        b'+' => Some(v),
        b'-' => Some(-v),
        _ => None,
    }
}

/// `10/Oct/2000:13:55:36 -0700` → Unix seconds.
pub(crate) fn parse_clf(t: &[u8]) -> Option<i64> {
    if t.len() != 26 || t[2] != b'/' || t[6] != b'/' || t[11] != b':' || t[20] != b' ' {
        return None;
    }
    if t[14] != b':' || t[17] != b':' {
        return None;
    }
    let month = match &t[3..6] {
        b"Jan" => 1,
        b"Feb" => 2,
        b"Mar" => 3,
        b"Apr" => 4,
        b"May" => 5,
        b"Jun" => 6,
        b"Jul" => 7,
        b"Aug" => 8,
        b"Sep" => 9,
        b"Oct" => 10,
        b"Nov" => 11,
        b"Dec" => 12,
        _ => return None,
    };
    to_unix(
        i64::from(digits(&t[7..11])?),
        month,
        digits(&t[0..2])?,
        digits(&t[12..14])?,
        digits(&t[15..17])?,
        digits(&t[18..20])?,
        offset(t[21], &t[22..24], &t[24..26])?,
    )
}

/// RFC 3339, e.g. `2024-01-02T03:04:05.123+01:00` or `…Z` → Unix nanoseconds. A space
/// instead of `T` and any number of fraction digits are accepted.
pub(crate) fn parse_rfc3339(t: &str) -> Option<i64> {
    let b = t.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (y, mo, d) = (digits(&b[0..4])?, digits(&b[5..7])?, digits(&b[8..10])?);
    let (h, mi, s) = (
        digits(&b[11..13])?,
        digits(&b[14..16])?,
        digits(&b[17..19])?,
    );
    let mut i = 19;
    let mut nanos = 0i64;
    if b[i] == b'.' {
        i += 1;
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            if i - start < 9 {
                nanos = nanos * 10 + i64::from(b[i] - b'0');
            }
            i += 1;
        }
        let n = i - start;
        if n == 0 {
            return None;
        }
        for _ in n..9 {
            nanos *= 10;
        }
    }
    let rest = &b[i..];
    let offset_s = match rest {
        [b'Z' | b'z'] => 0,
        [sign, h1, h2, b':', m1, m2] => offset(*sign, &[*h1, *h2], &[*m1, *m2])?,
        _ => return None,
    };
    let secs = to_unix(i64::from(y), mo, d, h, mi, s, offset_s)?;
    secs.checked_mul(1_000_000_000)?.checked_add(nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clf_known_instants() {
        // 2000-10-10T20:55:36Z, the Apache documentation's example.
        assert_eq!(parse_clf(b"10/Oct/2000:13:55:36 -0700"), Some(971_211_336));
        assert_eq!(parse_clf(b"01/Jan/1970:00:00:00 +0000"), Some(0));
        assert_eq!(
            parse_clf(b"29/Feb/2024:23:59:59 +0000"),
            Some(1_709_251_199)
        );
        for bad in [
            &b"29/Feb/2023:00:00:00 +0000"[..],
            b"10/Foo/2000:13:55:36 -0700",
            b"10/Oct/2000:24:55:36 -0700",
            b"10/Oct/2000:13:55:36 ~0700",
            b"10/Oct/2000 13:55:36 -0700",
            b"",
        ] {
            assert_eq!(parse_clf(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn rfc3339_known_instants() {
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            parse_rfc3339("2000-10-10T13:55:36.5-07:00"),
            Some(971_211_336_500_000_000)
        );
        assert_eq!(
            parse_rfc3339("2000-10-10T20:55:36.123456789123Z"),
            Some(971_211_336_123_456_789)
        );
        for bad in [
            "2000-10-10T20:55:36",
            "2000-13-10T20:55:36Z",
            "2000-10-10T20:55:36.Z",
            "2000-10-10T20:55:36+0100",
            "x",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }
}
