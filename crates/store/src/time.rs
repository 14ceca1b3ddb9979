//! Wall-clock time as the store records it: integer milliseconds since the
//! Unix epoch, shown as RFC 3339 UTC.
//!
//! Milliseconds in an `i64` compare and sort the same in SQLite and
//! PostgreSQL and need no time-zone handling; formatting is done here once
//! so every listing shows time the same way.

use std::time::{SystemTime, UNIX_EPOCH};

/// The current time in milliseconds since the Unix epoch, the unit every
/// `*_at_ms` field uses. A clock before 1970 reads as negative.
pub fn now_ms() -> i64 {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
        Err(e) => i64::try_from(e.duration().as_millis()).map_or(i64::MIN, |ms| -ms),
    }
}

/// Formats milliseconds since the epoch as RFC 3339 UTC with second
/// precision (`2025-01-31T12:00:00Z`), for listings and exports that people
/// read. Sub-second parts are truncated toward the past.
pub fn format_time_ms(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let secs_of_day = secs.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        secs_of_day / 3600,
        secs_of_day % 3600 / 60,
        secs_of_day % 60
    )
}

/// Days since 1970-01-01 to a proleptic Gregorian (year, month, day);
/// Howard Hinnant's `civil_from_days`.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // [0, 146096]
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // [0, 399]
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // [0, 365]
    let mp = (5 * doy + 2) / 153; // [0, 11]
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32; // [1, 31]
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32; // [1, 12]
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_known_instants_in_utc() {
        assert_eq!(format_time_ms(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_time_ms(999), "1970-01-01T00:00:00Z");
        assert_eq!(format_time_ms(-1), "1969-12-31T23:59:59Z");
        assert_eq!(format_time_ms(951_782_400_000), "2000-02-29T00:00:00Z");
        assert_eq!(format_time_ms(1_700_000_000_123), "2023-11-14T22:13:20Z");
        assert_eq!(format_time_ms(4_102_444_799_000), "2099-12-31T23:59:59Z");
    }

    #[test]
    fn now_is_after_2020() {
        assert!(now_ms() > 1_577_836_800_000);
    }
}
