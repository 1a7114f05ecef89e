//! Identifiers and small closed vocabularies: user ids, categories, dates.

/// A user id `u` + 12 lowercase hex digits, packed into the low 48 bits of a `u64`.
///
/// Packing makes the hot-path lookup a `u64` hash instead of a string hash, and the
/// numeric order equals the string order (fixed width, lowercase hex).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct UserId(u64);

impl UserId {
    /// Parses `^u[0-9a-f]{12}$`; anything else (uppercase hex included) is `None`.
    pub fn parse(s: &str) -> Option<UserId> {
        let b = s.as_bytes();
        if b.len() != 13 || b[0] != b'u' {
            return None;
        }
        let mut v = 0u64;
        for &c in &b[1..] {
            let d = match c {
                b'0'..=b'9' => c - b'0',
                b'a'..=b'f' => c - b'a' + 10,
                _ => return None,
            };
            v = (v << 4) | u64::from(d);
        }
        Some(UserId(v))
    }

    /// The id whose 12 hex digits are the low 48 bits of `bits`.
    pub fn from_bits(bits: u64) -> UserId {
        UserId(bits & 0xffff_ffff_ffff)
    }

    /// The packed value.
    pub fn bits(self) -> u64 {
        self.0
    }

    /// Writes the 13-byte text form.
    pub fn write_to(self, out: &mut Vec<u8>) {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        out.push(b'u');
        for i in (0..12).rev() {
            out.push(HEX[((self.0 >> (i * 4)) & 0xf) as usize]);
        }
    }
}

impl std::fmt::Display for UserId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "u{:012x}", self.0)
    }
}

/// Transaction categories, declared in name order so that index order is the JSON order.
pub(crate) const CATEGORIES: [&str; 6] = ["fee", "gift", "payout", "refund", "topup", "transfer"];

/// The index of a category name in [`CATEGORIES`].
pub(crate) fn category_index(name: &str) -> Option<u8> {
    CATEGORIES.iter().position(|c| *c == name).map(|i| i as u8)
}

/// Seconds in a UTC day (the ledger has no leap seconds).
pub const SECONDS_PER_DAY: i64 = 86_400;

/// The UTC day number (days since 1970-01-01) of a unix time in seconds.
pub(crate) fn day_of(ts: i64) -> i64 {
    ts.div_euclid(SECONDS_PER_DAY)
}

/// Civil date of a day number (Howard Hinnant's `civil_from_days`).
pub(crate) fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// Writes `YYYY-MM-DD` for a day number (years 0..=9999, which is all a ledger can hold).
pub(crate) fn write_date(out: &mut Vec<u8>, day: i64) {
    let (y, m, d) = civil_from_days(day);
    let y = y.clamp(0, 9999) as u32;
    let digits = [
        b'0' + (y / 1000) as u8,
        b'0' + (y / 100 % 10) as u8,
        b'0' + (y / 10 % 10) as u8,
        b'0' + (y % 10) as u8,
        b'-',
        b'0' + (m / 10) as u8,
        b'0' + (m % 10) as u8,
        b'-',
        b'0' + (d / 10) as u8,
        b'0' + (d % 10) as u8,
    ];
    out.extend_from_slice(&digits);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_id_round_trips_and_rejects_near_misses() {
        let id = UserId::parse("u0123456789ab").unwrap();
        assert_eq!(id.to_string(), "u0123456789ab");
        let mut out = Vec::new();
        id.write_to(&mut out);
        assert_eq!(out, b"u0123456789ab");
        for bad in [
            "",
            "u",
            "u0123456789a",
            "u0123456789abc",
            "U0123456789ab",
            "u0123456789AB",
            "x0123456789ab",
            "u0123456789ag",
            "u01234567 9ab",
            "u%30123456789a",
        ] {
            assert_eq!(UserId::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn dates_match_known_calendar_days() {
        let mut out = Vec::new();
        for (day, want) in [
            (0, "1970-01-01"),
            (-1, "1969-12-31"),
            (20_635, "2026-07-01"),
            (20_634, "2026-06-30"),
            (19_782, "2024-02-29"),
            (11_016, "2000-02-29"),
        ] {
            out.clear();
            write_date(&mut out, day);
            assert_eq!(std::str::from_utf8(&out).unwrap(), want, "day {day}");
        }
        assert_eq!(day_of(-1), -1);
        assert_eq!(day_of(86_399), 0);
        assert_eq!(day_of(86_400), 1);
    }

    #[test]
    fn categories_are_in_name_order() {
        let mut sorted = CATEGORIES;
        sorted.sort_unstable();
        assert_eq!(sorted, CATEGORIES);
        assert_eq!(category_index("gift"), Some(1));
        assert_eq!(category_index("bogus"), None);
    }
}
