//! `[gateway]` of a `plangate.toml`: the gateway's own limits, timeouts
//! and defaults, each checked against its range, and `default_mode`, read
//! against the modes the file defines.

use std::ops::RangeInclusive;
use std::time::Duration;

use plangate_core::{ModeSpec, PLAN_MODE};

use super::values::{duration_in, rate_limit};
use crate::check::{Checker, child, index};
use crate::model::{
    Anonymous, GatewaySettings, MAX_BODY_READ_TIMEOUT, MAX_CACHED_KEYS, MAX_CONCURRENT_CALLS_LIMIT,
    MAX_LEASE, MAX_PLAN_BYTES_LIMIT, MAX_PLAN_TTL, MAX_REQUEST_BYTES_LIMIT, MAX_SESSIONS_LIMIT,
    MAX_STEPS_LIMIT, MAX_UNDO_TTL, Namespace,
};

const GATEWAY_KEYS: [&str; 25] = [
    "anonymous",
    "default_mode",
    "default_mode_locked",
    "allowed_hosts",
    "allowed_origins",
    "max_request_bytes",
    "max_preview_bytes",
    "max_plan_bytes",
    "max_undo_bytes",
    "undo_ttl",
    "max_sessions",
    "max_sessions_per_key",
    "namespace",
    "tool_prefix",
    "max_steps",
    "plan_ttl",
    "lease",
    "review_timeout",
    "header_read_timeout",
    "body_read_timeout",
    "max_concurrent_calls_per_key",
    "rate_limit",
    "cached_keys",
    "public_url",
    "notify_debounce",
];

/// `[gateway]`: every key checked; defaults for what it leaves out.
pub(super) fn gateway(c: &mut Checker<'_>, node: &toml::Value) -> Option<GatewaySettings> {
    let entries = c.table("gateway", node, "a table")?;
    c.unknown_keys("gateway", &entries, &GATEWAY_KEYS);
    let mut settings = GatewaySettings::default();
    let mut ok = true;
    for (k, v) in entries {
        let key = &child("gateway", k);
        let s = &mut settings;
        let set = match k {
            "anonymous" => anonymous(c, key, v).map(|a| s.anonymous = a),
            "namespace" => namespace(c, key, v).map(|n| s.namespace = n),
            "tool_prefix" => tool_prefix(c, key, v).map(|p| s.tool_prefix = p),
            "allowed_hosts" => allowed_hosts(c, key, v).map(|h| s.allowed_hosts = h),
            "allowed_origins" => allowed_origins(c, key, v).map(|o| s.allowed_origins = Some(o)),
            "rate_limit" => rate_limit(c, key, v).map(|r| s.rate_limit = Some(r)),
            "max_request_bytes" => bytes(c, key, v, k, 1024..=MAX_REQUEST_BYTES_LIMIT as i64)
                .map(|n| s.max_request_bytes = n),
            "max_preview_bytes" => {
                bytes(c, key, v, k, 1024..=16 * 1024 * 1024).map(|n| s.max_preview_bytes = n)
            }
            "max_plan_bytes" => bytes(c, key, v, k, 64 * 1024..=MAX_PLAN_BYTES_LIMIT as i64)
                .map(|n| s.max_plan_bytes = n),
            "max_undo_bytes" => {
                bytes(c, key, v, k, 0..=64 * 1024 * 1024).map(|n| s.max_undo_bytes = n)
            }
            "undo_ttl" => duration_in(c, key, v, k, MAX_UNDO_TTL).map(|d| s.undo_ttl = d),
            "max_steps" => count(c, key, v, k, MAX_STEPS_LIMIT).map(|n| s.max_steps = n),
            "max_sessions" => count(c, key, v, k, MAX_SESSIONS_LIMIT).map(|n| s.max_sessions = n),
            "max_sessions_per_key" => {
                count(c, key, v, k, MAX_SESSIONS_LIMIT).map(|n| s.max_sessions_per_key = n)
            }
            "cached_keys" => count(c, key, v, k, MAX_CACHED_KEYS).map(|n| s.cached_keys = n),
            "max_concurrent_calls_per_key" => count(c, key, v, k, MAX_CONCURRENT_CALLS_LIMIT)
                .map(|n| s.max_concurrent_calls_per_key = n),
            "plan_ttl" => duration_in(c, key, v, k, MAX_PLAN_TTL).map(|d| s.plan_ttl = d),
            "lease" => duration_in(c, key, v, k, MAX_LEASE).map(|d| s.lease = d),
            "header_read_timeout" => {
                duration_in(c, key, v, k, MAX_LEASE).map(|d| s.header_read_timeout = d)
            }
            "body_read_timeout" => {
                duration_in(c, key, v, k, MAX_BODY_READ_TIMEOUT).map(|d| s.body_read_timeout = d)
            }
            "review_timeout" => duration_in(c, key, v, k, MAX_LEASE).map(|d| s.review_timeout = d),
            "notify_debounce" => {
                duration_in(c, key, v, k, Duration::from_secs(3600)).map(|d| s.notify_debounce = d)
            }
            "public_url" => public_url(c, key, v).map(|u| s.public_url = Some(u)),
            // Read beside the modes they name: [`default_mode`].
            "default_mode" | "default_mode_locked" => Some(()),
            _ => Some(()), // reported by unknown_keys
        };
        ok &= set.is_some();
    }
    ok.then_some(settings)
}

/// `public_url`: an `http://` or `https://` origin, with a path prefix if
/// the gateway is served under one, without a query or fragment; kept
/// without its trailing `/`.
fn public_url(c: &mut Checker<'_>, key: &str, v: &toml::Value) -> Option<String> {
    let url = c.url(key, v)?;
    if url.contains(['?', '#']) {
        c.error(
            key,
            format!("public_url {url:?} has a query or fragment: give the address the gateway is reached at, like \"https://gw.example.com\""),
        );
        return None;
    }
    Some(url.trim_end_matches('/').to_owned())
}

/// `anonymous`: `"none"` or `"read"`.
fn anonymous(c: &mut Checker<'_>, key: &str, v: &toml::Value) -> Option<Anonymous> {
    match c.raw_str(key, v)? {
        "none" => Some(Anonymous::None),
        "read" => Some(Anonymous::Read),
        other => {
            c.error(
                key,
                format!("anonymous {other:?} is not allowed: use \"none\" or \"read\""),
            );
            None
        }
    }
}

/// `namespace`: `"auto"` or `"always"`.
fn namespace(c: &mut Checker<'_>, key: &str, v: &toml::Value) -> Option<Namespace> {
    match c.raw_str(key, v)? {
        "auto" => Some(Namespace::Auto),
        "always" => Some(Namespace::Always),
        other => {
            c.error(
                key,
                format!("namespace {other:?} is not allowed: use \"auto\" or \"always\""),
            );
            None
        }
    }
}

/// `tool_prefix`, as [`tool_prefix_ok`] allows.
fn tool_prefix(c: &mut Checker<'_>, key: &str, v: &toml::Value) -> Option<String> {
    let p = c.raw_str(key, v)?;
    if tool_prefix_ok(p) {
        Some(p.to_owned())
    } else {
        c.error(
            key,
            format!(
                "tool_prefix {p:?} is not allowed: use 2 to 17 lowercase letters, digits or '_', starting with a letter, ending with '_', without '__'"
            ),
        );
        None
    }
}

/// A size in bytes in `range`; `name` is the setting, for messages.
fn bytes(
    c: &mut Checker<'_>,
    key: &str,
    v: &toml::Value,
    name: &str,
    range: RangeInclusive<i64>,
) -> Option<usize> {
    c.integer_in(key, v, name, range)
        .and_then(|n| usize::try_from(n).ok())
}

/// A count from 1 to `max`; `name` is the setting, for messages.
fn count(c: &mut Checker<'_>, key: &str, v: &toml::Value, name: &str, max: u32) -> Option<u32> {
    c.integer_in(key, v, name, 1..=i64::from(max))
        .and_then(|n| u32::try_from(n).ok())
}

/// `[gateway] default_mode` (the mode of every key that sets none:
/// `default`, `plan` or a defined mode) and `default_mode_locked` (every key
/// without an operator's lock or unlock is held in it). Locking keys in
/// `default` would hold agents out of plan mode while looking like
/// enforcement, so it is refused.
pub(super) fn default_mode(
    c: &mut Checker<'_>,
    gateway: &toml::Value,
    defined: &[ModeSpec],
) -> Option<(String, bool)> {
    let Some(table) = gateway.as_table() else {
        return Some((plangate_core::DEFAULT_MODE.to_owned(), false));
    };
    let mut ok = true;
    let mut name = plangate_core::DEFAULT_MODE.to_owned();
    if let Some(v) = table.get("default_mode") {
        match c.raw_str("gateway.default_mode", v) {
            Some(n)
                if n == plangate_core::DEFAULT_MODE
                    || n == PLAN_MODE
                    || defined.iter().any(|m| m.name == n) =>
            {
                name = n.to_owned();
            }
            Some(n) => {
                let mut names: Vec<&str> = vec![plangate_core::DEFAULT_MODE, PLAN_MODE];
                names.extend(
                    defined
                        .iter()
                        .map(|m| m.name.as_str())
                        .filter(|m| *m != PLAN_MODE),
                );
                c.error(
                    "gateway.default_mode",
                    format!(
                        "default_mode {n:?} is not a mode: use one of {} (or define [modes.{n}])",
                        names.join(", ")
                    ),
                );
                ok = false;
            }
            None => ok = false,
        }
    }
    let mut locked = false;
    if let Some(v) = table.get("default_mode_locked") {
        match c.bool("gateway.default_mode_locked", v) {
            Some(b) => locked = b,
            None => ok = false,
        }
    }
    if ok && locked && name == plangate_core::DEFAULT_MODE {
        c.error(
            "gateway.default_mode_locked",
            "default_mode_locked = true would hold every key in mode \"default\" (no cap) and out of plan mode: set default_mode = \"plan\" (or another mode) beside it",
        );
        ok = false;
    }
    ok.then_some((name, locked))
}

/// `^[a-z][a-z0-9_]{0,15}_$` without `__`: short, valid in every MCP tool
/// name, and never mistaken for an upstream's `NAME__` namespace.
fn tool_prefix_ok(p: &str) -> bool {
    let len_ok = (2..=17).contains(&p.len());
    let first_ok = p.chars().next().is_some_and(|c| c.is_ascii_lowercase());
    let chars_ok = p
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    len_ok && first_ok && chars_ok && p.ends_with('_') && !p.contains("__")
}

fn allowed_hosts(c: &mut Checker<'_>, key: &str, node: &toml::Value) -> Option<Vec<String>> {
    let hosts = c.string_list(key, node)?;
    if hosts.is_empty() {
        c.error(
            key,
            "allowed_hosts is empty, so serve --http would refuse every request: list at least one host name",
        );
        return None;
    }
    let mut ok = true;
    for (i, h) in hosts.iter().enumerate() {
        if h.is_empty() || h.contains(['/', ' ', '\t', '@']) {
            c.error(
                &index(key, i),
                format!("host {h:?} is not valid: write a bare host name such as \"localhost\" or \"example.com\", without scheme or path"),
            );
            ok = false;
        }
    }
    ok.then(|| hosts.into_iter().map(|h| h.to_ascii_lowercase()).collect())
}

fn allowed_origins(c: &mut Checker<'_>, key: &str, node: &toml::Value) -> Option<Vec<String>> {
    let origins = c.string_list(key, node)?;
    let mut ok = true;
    for (i, o) in origins.iter().enumerate() {
        let rest = o
            .strip_prefix("http://")
            .or_else(|| o.strip_prefix("https://"));
        let valid = o == "null"
            || rest.is_some_and(|r| !r.is_empty() && !r.contains(['/', ' ', '\t', '@', '?', '#']));
        if !valid {
            c.error(
                &index(key, i),
                format!("origin {o:?} is not valid: write scheme://host with an optional :port (\":*\" for any port), such as \"https://app.example.com\" or \"http://localhost:*\", or \"null\""),
            );
            ok = false;
        }
    }
    ok.then_some(origins)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_prefixes_follow_the_rule() {
        for ok in ["plangate_", "pg_", "a_", "x1_y_"] {
            assert!(tool_prefix_ok(ok), "{ok}");
        }
        for bad in [
            "",
            "_",
            "plangate",
            "Plangate_",
            "1x_",
            "a__",
            "pg-",
            "abcdefghijklmnopq_",
        ] {
            assert!(!tool_prefix_ok(bad), "{bad}");
        }
    }
}
