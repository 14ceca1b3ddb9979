//! `rate_limit` values (`[gateway] rate_limit`, per tool): `"120/min"`.

use std::time::Duration;

use serde::Serialize;

/// A rate: at most `calls` in every `per` (written `"120/min"`, `"10/s"`,
/// `"1000/h"`, `"5000/d"`), enforced as a smooth rate that allows a burst
/// of `calls` at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RateLimit {
    /// How many calls.
    pub calls: u32,
    /// In how long.
    pub per: Duration,
}

impl RateLimit {
    /// Parses `"N/s"`, `"N/min"`, `"N/h"` or `"N/d"` with N ≥ 1.
    pub fn parse(text: &str) -> Option<RateLimit> {
        let (calls, unit) = text.split_once('/')?;
        let calls: u32 = calls.trim().parse().ok().filter(|&n| n >= 1)?;
        let per = match unit.trim() {
            "s" => Duration::from_secs(1),
            "min" => Duration::from_secs(60),
            "h" => Duration::from_secs(3600),
            "d" => Duration::from_secs(86_400),
            _ => return None,
        };
        Some(RateLimit { calls, per })
    }
}

impl std::fmt::Display for RateLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let unit = match self.per.as_secs() {
            1 => "s",
            60 => "min",
            3600 => "h",
            _ => "d",
        };
        write!(f, "{}/{unit}", self.calls)
    }
}

impl Serialize for RateLimit {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}
