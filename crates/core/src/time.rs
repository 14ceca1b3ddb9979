//! Time as plangate shows it: milliseconds since the Unix epoch (the unit
//! of every `*_at_ms` field) formatted as RFC 3339 UTC, the same in every
//! answer, listing and export. Pure: reading the clock is the store's job.

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// Formats milliseconds since the epoch as RFC 3339 UTC with second
/// precision (`2025-01-31T12:00:00Z`), for answers and listings people
/// read. Sub-second parts are truncated toward the past; an instant
/// outside years 0–9999 (which RFC 3339 cannot write) is shown as its
/// milliseconds.
pub fn format_time_ms(ms: i64) -> String {
    OffsetDateTime::from_unix_timestamp(ms.div_euclid(1000))
        .ok()
        .and_then(|t| t.format(&Rfc3339).ok())
        .unwrap_or_else(|| format!("{ms} ms since 1970"))
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
    fn an_instant_rfc_3339_cannot_write_is_still_shown() {
        assert_eq!(
            format_time_ms(i64::MAX),
            format!("{} ms since 1970", i64::MAX)
        );
    }
}
