//! Wall-clock time as the store records it: integer milliseconds since the
//! Unix epoch, shown as RFC 3339 UTC.
//!
//! Milliseconds in an `i64` compare and sort the same in SQLite and
//! PostgreSQL and need no time-zone handling; formatting is done once, in
//! the core, so every listing shows time the same way.

use std::time::{SystemTime, UNIX_EPOCH};

/// The current time in milliseconds since the Unix epoch, the unit every
/// `*_at_ms` field uses. A clock before 1970 reads as negative.
pub fn now_ms() -> i64 {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
        Err(e) => i64::try_from(e.duration().as_millis()).map_or(i64::MIN, |ms| -ms),
    }
}

/// RFC 3339 formatting lives in the pure core, with every answer that
/// shows a time.
pub use plangate_core::format_time_ms;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn now_is_after_2020() {
        assert!(now_ms() > 1_577_836_800_000);
    }
}
