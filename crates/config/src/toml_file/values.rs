//! Values several tables share — durations, rates, effect classes,
//! free text — each read and checked one way wherever it appears.

use std::time::Duration;

use plangate_core::Effect;

use crate::check::{Checker, Node};
use crate::duration::{format_duration, parse_duration};
use crate::model::RateLimit;

/// A rate like `"120/min"` ([`RateLimit::parse`]).
pub(super) fn rate_limit(c: &mut Checker<'_>, key: &str, node: &toml::Value) -> Option<RateLimit> {
    let text = c.string(key, node)?;
    let parsed = RateLimit::parse(&text);
    if parsed.is_none() {
        c.error(
            key,
            format!("rate {text:?} is not a rate: write calls per unit, like \"120/min\", \"10/s\", \"1000/h\" or \"5000/d\", with at least 1 call"),
        );
    }
    parsed
}

/// A duration string (`"4h"`, `"1h30m"`) or an integer number of seconds,
/// from 1 s to `max`; `name` is the setting, for messages.
pub(super) fn duration_in(
    c: &mut Checker<'_>,
    key: &str,
    node: &toml::Value,
    name: &str,
    max: Duration,
) -> Option<Duration> {
    let (ttl, written) = if let Some(secs) = node.as_integer() {
        (
            u64::try_from(secs).ok().map(Duration::from_secs),
            secs.to_string(),
        )
    } else if let Some(text) = node.as_str() {
        let Some(d) = parse_duration(text) else {
            c.error(
                key,
                format!(
                    "{name} {text:?} is not a duration: write whole numbers with units d, h, m, s, largest first, like \"4h\", \"90m\" or \"1h30m\", or an integer number of seconds"
                ),
            );
            return None;
        };
        (Some(d), format!("{text:?}"))
    } else {
        c.error(
            key,
            format!(
                "must be a duration string like \"4h\" or an integer number of seconds, not {}",
                node.kind()
            ),
        );
        return None;
    };
    match ttl {
        Some(d) if d >= Duration::from_secs(1) && d <= max => Some(d),
        _ => {
            c.error(
                key,
                format!(
                    "{name} {written} is out of range: use 1s to {}",
                    format_duration(max)
                ),
            );
            None
        }
    }
}

/// `read`, `write` or `destructive`; `what` names the key in the message.
pub(super) fn effect_value(
    c: &mut Checker<'_>,
    key: &str,
    what: &str,
    node: &toml::Value,
) -> Option<Effect> {
    let s = c.raw_str(key, node)?;
    match s.parse::<Effect>() {
        Ok(e) => Some(e),
        Err(_) => {
            c.error(
                key,
                format!("{what} {s:?} is not allowed: use \"read\", \"write\" or \"destructive\""),
            );
            None
        }
    }
}

/// Text taken as written (no `${…}` expansion: it is shown, not run), not
/// blank.
pub(super) fn non_empty_text(c: &mut Checker<'_>, key: &str, node: &toml::Value) -> Option<String> {
    let s = c.raw_str(key, node)?;
    if s.trim().is_empty() {
        c.error(key, "must not be empty");
        return None;
    }
    Some(s.to_owned())
}
