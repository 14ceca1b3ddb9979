//! `--since TIME` (`plangate audit export`): RFC 3339, a date or Unix
//! milliseconds, read without a date-time crate. Here, beside the flags,
//! so the flags depend on nothing of the commands.

/// What the `--since` flag accepts, for messages.
const SINCE_FORMS: &str = "use RFC 3339 (2026-11-30T10:00:00Z), a date (2026-11-30, midnight UTC) or Unix milliseconds (1795953600000)";

/// Parses `--since`: RFC 3339 (`2026-11-30T10:00:00Z`, any offset,
/// optional fraction), a date (`2026-11-30`, midnight UTC) or Unix
/// milliseconds. Returns milliseconds since the epoch.
pub fn parse_since(text: &str) -> Result<i64, String> {
    let t = text.trim();
    let bad = || format!("{text:?} is not a time: {SINCE_FORMS}");
    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        return t.parse::<i64>().map_err(|_| bad());
    }
    let (date, time) = match t.find(['T', 't', ' ']) {
        Some(i) => (&t[..i], Some(&t[i + 1..])),
        None => (t, None),
    };
    let days = parse_date(date).ok_or_else(bad)?;
    let ms_of_day = match time {
        None => 0,
        Some(time) => parse_time(time).ok_or_else(bad)?,
    };
    Ok(days * 86_400_000 + ms_of_day)
}

/// `YYYY-MM-DD` to days since 1970-01-01.
fn parse_date(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return None;
    }
    let year: i64 = digits(&s[0..4])?;
    let month: i64 = digits(&s[5..7])?;
    let day: i64 = digits(&s[8..10])?;
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return None;
    }
    Some(days_from_civil(year, month, day))
}

/// `HH:MM:SS[.fff…](Z|±HH:MM)` to milliseconds since midnight UTC (may be
/// negative or past a day after the offset; the caller adds the days).
fn parse_time(s: &str) -> Option<i64> {
    let (clock, offset_ms) = if let Some(c) = s.strip_suffix(['Z', 'z']) {
        (c, 0)
    } else {
        let i = s.rfind(['+', '-'])?;
        let (c, off) = (&s[..i], &s[i..]);
        let sign = if off.starts_with('-') { -1 } else { 1 };
        let off = &off[1..];
        if off.len() != 5 || off.as_bytes()[2] != b':' {
            return None;
        }
        let (h, m): (i64, i64) = (digits(&off[0..2])?, digits(&off[3..5])?);
        if h > 23 || m > 59 {
            return None;
        }
        (c, sign * (h * 60 + m) * 60_000)
    };
    let (hms, fraction) = match clock.split_once('.') {
        Some((hms, f)) => (hms, Some(f)),
        None => (clock, None),
    };
    let b = hms.as_bytes();
    if b.len() != 8 || b[2] != b':' || b[5] != b':' {
        return None;
    }
    let (h, m, sec): (i64, i64, i64) = (
        digits(&hms[0..2])?,
        digits(&hms[3..5])?,
        digits(&hms[6..8])?,
    );
    // RFC 3339 allows a leap second (60); it reads as the last second.
    if h > 23 || m > 59 || sec > 60 {
        return None;
    }
    let millis = match fraction {
        None => 0,
        Some(f) if !f.is_empty() && f.bytes().all(|c| c.is_ascii_digit()) => {
            let first3 = format!("{f:0<3}");
            digits::<i64>(&first3[..3])?
        }
        Some(_) => return None,
    };
    Some(((h * 60 + m) * 60 + sec.min(59)) * 1000 + millis - offset_ms)
}

fn digits<T: std::str::FromStr>(s: &str) -> Option<T> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date; Howard Hinnant's
/// `days_from_civil` (the inverse of the store's `civil_from_days`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_takes_rfc3339_dates_and_unix_milliseconds() {
        assert_eq!(parse_since("1970-01-01"), Ok(0));
        assert_eq!(parse_since("2023-11-14T22:13:20Z"), Ok(1_700_000_000_000));
        assert_eq!(
            parse_since("2023-11-14T22:13:20.123Z"),
            Ok(1_700_000_000_123)
        );
        assert_eq!(
            parse_since("2023-11-15T00:13:20+02:00"),
            Ok(1_700_000_000_000)
        );
        assert_eq!(
            parse_since("2023-11-14T20:13:20-02:00"),
            Ok(1_700_000_000_000)
        );
        assert_eq!(parse_since("2000-02-29"), Ok(951_782_400_000));
        assert_eq!(parse_since("1700000000123"), Ok(1_700_000_000_123));
        assert_eq!(
            parse_since("2026-11-30"),
            parse_since("2026-11-30T00:00:00Z")
        );
    }

    #[test]
    fn since_refuses_anything_else_naming_the_value() {
        for bad in [
            "",
            "yesterday",
            "2026-13-01",
            "2026-02-29",
            "2026-11-30T25:00:00Z",
            "2026-11-30T10:00Z",
            "2026-11-30T10:00:00",
            "2026-11-30T10:00:00+2",
            "2026-11-30T10:00:00.Z",
            "-5",
        ] {
            let err = parse_since(bad).unwrap_err();
            assert!(err.contains(&format!("{bad:?}")), "{err}");
        }
    }
}
