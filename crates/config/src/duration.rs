//! Durations as operators write them: `"4h"`, `"90m"`, `"30s"`, `"1h30m"`,
//! `"2d"`, or a plain integer number of seconds.
//!
//! Small on purpose: whole units only (no fractions, no spaces), each unit
//! at most once and from largest to smallest, so that every accepted string
//! means exactly one thing and `format_duration` writes it back.

use std::time::Duration;

/// The units, largest first, with their length in seconds.
const UNITS: [(char, u64); 4] = [('d', 86_400), ('h', 3_600), ('m', 60), ('s', 1)];

/// Parses `"1h30m"`-style text. `None` when it is not such a duration (or
/// does not fit in a `u64` of seconds).
pub fn parse_duration(text: &str) -> Option<Duration> {
    if text.is_empty() {
        return None;
    }
    let mut total: u64 = 0;
    let mut rest = text;
    // Index into UNITS of the next unit allowed: each unit once, in order.
    let mut next_unit = 0;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit())?;
        if digits == 0 {
            return None;
        }
        let number: u64 = rest[..digits].parse().ok()?;
        let unit = rest[digits..].chars().next()?;
        let position = UNITS[next_unit..].iter().position(|(u, _)| *u == unit)?;
        let seconds = UNITS[next_unit + position].1;
        total = total.checked_add(number.checked_mul(seconds)?)?;
        next_unit += position + 1;
        rest = &rest[digits + unit.len_utf8()..];
    }
    Some(Duration::from_secs(total))
}

/// Writes whole seconds back as the shortest `"1h30m"`-style string (`"0s"`
/// for zero); sub-second parts are dropped.
pub fn format_duration(d: Duration) -> String {
    let mut secs = d.as_secs();
    if secs == 0 {
        return "0s".to_owned();
    }
    let mut out = String::new();
    for (unit, size) in UNITS {
        if secs >= size {
            out.push_str(&format!("{}{unit}", secs / size));
            secs %= size;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Option<Duration> {
        Some(Duration::from_secs(s))
    }

    #[test]
    fn whole_units_parse_alone_and_combined() {
        assert_eq!(parse_duration("4h"), secs(4 * 3600));
        assert_eq!(parse_duration("90m"), secs(90 * 60));
        assert_eq!(parse_duration("30s"), secs(30));
        assert_eq!(parse_duration("1h30m"), secs(5400));
        assert_eq!(parse_duration("2d12h"), secs(2 * 86_400 + 12 * 3600));
        assert_eq!(parse_duration("1d1h1m1s"), secs(90_061));
    }

    #[test]
    fn anything_else_is_not_a_duration() {
        for bad in [
            "",
            "soon",
            "4",
            "h",
            "4 h",
            "4H",
            "1.5h",
            "-1h",
            "1m1h",
            "1h1h",
            "4hours",
            "1h30",
            "99999999999999999999s",
        ] {
            assert_eq!(parse_duration(bad), None, "{bad:?}");
        }
        assert_eq!(parse_duration(&format!("{}d", u64::MAX / 86_400 + 1)), None);
    }

    #[test]
    fn formatting_writes_back_what_parses() {
        for (s, text) in [
            (0, "0s"),
            (30, "30s"),
            (5400, "1h30m"),
            (4 * 3600, "4h"),
            (30 * 86_400, "30d"),
            (90_061, "1d1h1m1s"),
        ] {
            assert_eq!(format_duration(Duration::from_secs(s)), text);
            if s > 0 {
                assert_eq!(parse_duration(text), secs(s));
            }
        }
    }
}
