//! `plangate.toml`: plangate's own format, checked strictly — every unknown
//! key is an error, because a misspelt safety setting must never be ignored.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use plangate_core::{Effect, ModeSpec, Modes, OverAccess, PLAN_MODE, validate_mode_name};

use crate::check::{Checker, Node, child, index, list};
use crate::duration::{format_duration, parse_duration};
use crate::env::Env;
use crate::error::ConfigErrors;
use crate::model::{
    Anonymous, Audit, Auth, Config, ConfigSource, GatewaySettings, MAX_BODY_READ_TIMEOUT,
    MAX_CACHED_KEYS, MAX_CONCURRENT_CALLS_LIMIT, MAX_LEASE, MAX_PLAN_TTL, MAX_REQUEST_BYTES_LIMIT,
    MAX_SESSIONS_LIMIT, MAX_STEPS_LIMIT, Namespace, RateLimit, Redaction,
};

mod upstreams;
use upstreams::upstreams;

const TOP_KEYS: [&str; 8] = [
    "audit",
    "auth",
    "gateway",
    "modes",
    "profiles",
    "redaction",
    "rules",
    "upstreams",
];
const RULE_KEYS: [&str; 6] = ["name", "when", "modes", "outcome", "message", "effect"];
const AUDIT_KEYS: [&str; 1] = ["reads"];
const AUTH_KEYS: [&str; 1] = ["oauth"];
const OAUTH_KEYS: [&str; 6] = [
    "resource",
    "issuers",
    "identity_claim",
    "scopes",
    "clock_skew",
    "introspection",
];
const INTROSPECTION_KEYS: [&str; 4] = ["issuer", "client_id", "client_secret", "every"];
const REDACTION_KEYS: [&str; 2] = ["names", "patterns"];
const GATEWAY_KEYS: [&str; 21] = [
    "anonymous",
    "default_mode",
    "default_mode_locked",
    "allowed_hosts",
    "allowed_origins",
    "max_request_bytes",
    "max_preview_bytes",
    "max_plan_bytes",
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
];
const MODE_KEYS: [&str; 3] = ["instructions", "access", "over_access"];

/// Parses and validates the text of a `plangate.toml`. `origin` names the
/// file in messages and is where relative `cwd`s and `ca_file`s start.
pub fn parse_toml(text: &str, origin: &Path, env: &dyn Env) -> Result<Config, ConfigErrors> {
    let table: toml::Table = match text.parse() {
        Ok(t) => t,
        Err(e) => return Err(syntax_error(text, origin, &e)),
    };
    let mut c = Checker::new(origin, env);
    let entries: Vec<(&str, &toml::Value)> = table.iter().map(|(k, v)| (k.as_str(), v)).collect();
    for (k, v) in &entries {
        if !TOP_KEYS.contains(k) {
            let what = if v.is_table() { "table" } else { "key" };
            c.error(
                &child("", k),
                format!(
                    "unknown {what} {k:?}: allowed top-level tables are {}",
                    list(&TOP_KEYS)
                ),
            );
        }
    }
    let gateway = match table.get("gateway") {
        Some(node) => gateway(&mut c, node),
        None => Some(GatewaySettings::default()),
    };
    let modes = match table.get("modes") {
        Some(node) => modes(&mut c, node),
        None => Some(Vec::new()),
    };
    let upstreams = match table.get("upstreams") {
        Some(node) => upstreams(&mut c, node),
        None => {
            c.error(
                "upstreams",
                "no upstreams: add at least one [upstreams.NAME] table with a command or url",
            );
            None
        }
    };
    let profiles = match table.get("profiles") {
        Some(node) => profiles(&mut c, node),
        None => Some(BTreeMap::new()),
    };
    let audit = match table.get("audit") {
        Some(node) => audit(&mut c, node),
        None => Some(Audit::default()),
    };
    let auth = match table.get("auth") {
        Some(node) => auth(&mut c, node),
        None => Some(Auth::default()),
    };
    let default_mode = match (table.get("gateway"), &modes) {
        (Some(node), Some(defined)) => default_mode(&mut c, node, defined),
        _ => Some((plangate_core::DEFAULT_MODE.to_owned(), false)),
    };
    let redaction = match table.get("redaction") {
        Some(node) => redaction(&mut c, node),
        None => Some(Redaction::default()),
    };
    let rules = match (table.get("rules"), &modes) {
        (Some(node), Some(defined)) => rules(&mut c, node, defined, text),
        (Some(_), None) => None,
        (None, _) => Some(Vec::new()),
    };
    let config = gateway
        .zip(upstreams)
        .zip(modes)
        .zip(redaction)
        .zip(default_mode)
        .zip(audit)
        .zip(profiles)
        .zip(rules)
        .zip(auth)
        .map(
            |(
                (
                    (
                        (((((gateway, upstreams), modes), redaction), (default, locked)), audit),
                        profiles,
                    ),
                    rules,
                ),
                auth,
            )| {
                Config {
                    source: ConfigSource::Toml(origin.to_path_buf()),
                    gateway,
                    upstreams,
                    modes: Modes::new(modes).with_default(&default, locked),
                    redaction,
                    audit,
                    profiles,
                    rules,
                    auth,
                }
            },
        );
    c.finish(config)
}

/// A TOML syntax error stops parsing; it is reported with line and column.
fn syntax_error(text: &str, origin: &Path, e: &toml::de::Error) -> ConfigErrors {
    let message = e
        .message()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ");
    let message = match e.span() {
        Some(span) => {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let column = before
                .rsplit('\n')
                .next()
                .unwrap_or_default()
                .chars()
                .count()
                + 1;
            format!("toml syntax error at line {line}, column {column}: {message}")
        }
        None => format!("toml syntax error: {message}"),
    };
    // A client's JSON given where plangate.toml belongs.
    let message = if text.trim_start().starts_with('{') {
        format!(
            "{message} (this looks like JSON: an MCP client's config, {{\"mcpServers\": …}} or {{\"servers\": …}}, is given with --mcp-config FILE, not --config)"
        )
    } else {
        message
    };
    ConfigErrors::single(origin.to_path_buf(), "", message)
}

fn gateway(c: &mut Checker<'_>, node: &toml::Value) -> Option<GatewaySettings> {
    let entries = c.table("gateway", node, "a table")?;
    c.unknown_keys("gateway", &entries, &GATEWAY_KEYS);
    let mut settings = Some(GatewaySettings::default());
    for (k, v) in entries {
        let key = child("gateway", k);
        let ok = match k {
            "anonymous" => {
                let value = c.raw_str(&key, v).and_then(|s| match s {
                    "none" => Some(Anonymous::None),
                    "read" => Some(Anonymous::Read),
                    other => {
                        c.error(
                            &key,
                            format!("anonymous {other:?} is not allowed: use \"none\" or \"read\""),
                        );
                        None
                    }
                });
                value.map(|a| settings.as_mut().map(|s| s.anonymous = a))
            }
            "namespace" => {
                let value = c.raw_str(&key, v).and_then(|s| match s {
                    "auto" => Some(Namespace::Auto),
                    "always" => Some(Namespace::Always),
                    other => {
                        c.error(
                            &key,
                            format!(
                                "namespace {other:?} is not allowed: use \"auto\" or \"always\""
                            ),
                        );
                        None
                    }
                });
                value.map(|n| settings.as_mut().map(|s| s.namespace = n))
            }
            "tool_prefix" => {
                let value = c.raw_str(&key, v).and_then(|p| {
                    if tool_prefix_ok(p) {
                        Some(p.to_owned())
                    } else {
                        c.error(
                            &key,
                            format!(
                                "tool_prefix {p:?} is not allowed: use 2 to 17 lowercase letters, digits or '_', starting with a letter, ending with '_', without '__'"
                            ),
                        );
                        None
                    }
                });
                value.map(|p| settings.as_mut().map(|s| s.tool_prefix = p))
            }
            "allowed_hosts" => {
                let value = allowed_hosts(c, &key, v);
                value.map(|h| settings.as_mut().map(|s| s.allowed_hosts = h))
            }
            "allowed_origins" => {
                let value = allowed_origins(c, &key, v);
                value.map(|o| settings.as_mut().map(|s| s.allowed_origins = Some(o)))
            }
            "max_steps" => {
                let value = c
                    .integer_in(&key, v, "max_steps", 1..=i64::from(MAX_STEPS_LIMIT))
                    .and_then(|n| u32::try_from(n).ok());
                value.map(|n| settings.as_mut().map(|s| s.max_steps = n))
            }
            "max_request_bytes" => {
                let value = c
                    .integer_in(
                        &key,
                        v,
                        "max_request_bytes",
                        1024..=MAX_REQUEST_BYTES_LIMIT as i64,
                    )
                    .and_then(|n| usize::try_from(n).ok());
                value.map(|n| settings.as_mut().map(|s| s.max_request_bytes = n))
            }
            "max_preview_bytes" => {
                let value = c
                    .integer_in(&key, v, "max_preview_bytes", 1024..=16 * 1024 * 1024)
                    .and_then(|n| usize::try_from(n).ok());
                value.map(|n| settings.as_mut().map(|s| s.max_preview_bytes = n))
            }
            "max_plan_bytes" => {
                let value = c
                    .integer_in(
                        &key,
                        v,
                        "max_plan_bytes",
                        64 * 1024..=crate::model::MAX_PLAN_BYTES_LIMIT as i64,
                    )
                    .and_then(|n| usize::try_from(n).ok());
                value.map(|n| settings.as_mut().map(|s| s.max_plan_bytes = n))
            }
            "max_sessions" | "max_sessions_per_key" => {
                let name = key.rsplit('.').next().unwrap_or_default().to_owned();
                let value = c
                    .integer_in(&key, v, &name, 1..=i64::from(MAX_SESSIONS_LIMIT))
                    .and_then(|n| u32::try_from(n).ok());
                value.map(|n| {
                    settings.as_mut().map(|s| {
                        if name == "max_sessions" {
                            s.max_sessions = n;
                        } else {
                            s.max_sessions_per_key = n;
                        }
                    })
                })
            }
            "cached_keys" => {
                let value = c
                    .integer_in(&key, v, "cached_keys", 1..=i64::from(MAX_CACHED_KEYS))
                    .and_then(|n| u32::try_from(n).ok());
                value.map(|n| settings.as_mut().map(|s| s.cached_keys = n))
            }
            "plan_ttl" => {
                let value = duration_in(c, &key, v, "plan_ttl", MAX_PLAN_TTL);
                value.map(|d| settings.as_mut().map(|s| s.plan_ttl = d))
            }
            "lease" => {
                let value = duration_in(c, &key, v, "lease", MAX_LEASE);
                value.map(|d| settings.as_mut().map(|s| s.lease = d))
            }
            "rate_limit" => {
                let value = rate_limit(c, &key, v);
                value.map(|r| settings.as_mut().map(|s| s.rate_limit = Some(r)))
            }
            "header_read_timeout" => {
                let value = duration_in(c, &key, v, "header_read_timeout", MAX_LEASE);
                value.map(|d| settings.as_mut().map(|s| s.header_read_timeout = d))
            }
            "body_read_timeout" => {
                let value = duration_in(c, &key, v, "body_read_timeout", MAX_BODY_READ_TIMEOUT);
                value.map(|d| settings.as_mut().map(|s| s.body_read_timeout = d))
            }
            "max_concurrent_calls_per_key" => {
                let value = c
                    .integer_in(
                        &key,
                        v,
                        "max_concurrent_calls_per_key",
                        1..=i64::from(MAX_CONCURRENT_CALLS_LIMIT),
                    )
                    .and_then(|n| u32::try_from(n).ok());
                value.map(|n| {
                    settings
                        .as_mut()
                        .map(|s| s.max_concurrent_calls_per_key = n)
                })
            }
            "review_timeout" => {
                let value = duration_in(c, &key, v, "review_timeout", MAX_LEASE);
                value.map(|d| settings.as_mut().map(|s| s.review_timeout = d))
            }
            // Read beside the modes they name: [`default_mode`].
            "default_mode" | "default_mode_locked" => Some(None),
            _ => Some(None), // reported by unknown_keys
        };
        if ok.is_none() {
            settings = None;
        }
    }
    settings
}

/// `[gateway] default_mode` (the mode of every key that sets none:
/// `default`, `plan` or a defined mode) and `default_mode_locked` (every key
/// without an operator's lock or unlock is held in it). Locking keys in
/// `default` would hold agents out of plan mode while looking like
/// enforcement, so it is refused.
fn default_mode(
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

/// A rate like `"120/min"` ([`RateLimit::parse`]).
fn rate_limit(c: &mut Checker<'_>, key: &str, node: &toml::Value) -> Option<RateLimit> {
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
fn duration_in(
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

// === redaction ===

/// `[redaction]`: names and patterns, each one checked as the redactor
/// will use it, so a loaded config always builds one.
fn redaction(c: &mut Checker<'_>, node: &toml::Value) -> Option<Redaction> {
    let entries = c.table("redaction", node, "a table with names and patterns")?;
    c.unknown_keys("redaction", &entries, &REDACTION_KEYS);
    let get = |k: &str| entries.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
    let names = get("names")
        .map(|n| c.string_list("redaction.names", n))
        .unwrap_or_else(|| Some(Vec::new()));
    let patterns = get("patterns")
        .map(|n| c.string_list("redaction.patterns", n))
        .unwrap_or_else(|| Some(Vec::new()));
    let mut ok = true;
    for (i, name) in names.iter().flatten().enumerate() {
        if let Err(e) = plangate_core::Redactor::new(std::slice::from_ref(name), &[]) {
            c.error(&index("redaction.names", i), e.to_string());
            ok = false;
        }
    }
    for (i, pattern) in patterns.iter().flatten().enumerate() {
        if let Err(e) = plangate_core::Redactor::new(&[], std::slice::from_ref(pattern)) {
            c.error(&index("redaction.patterns", i), e.to_string());
            ok = false;
        }
    }
    let (names, patterns) = (names?, patterns?);
    ok.then_some(Redaction { names, patterns })
}

/// `[profiles.NAME]`: the operator's own server profiles, in the shape of
/// the built-in ones (`crates/config/src/profiles.toml`).
fn profiles(
    c: &mut Checker<'_>,
    node: &toml::Value,
) -> Option<BTreeMap<String, crate::profiles::Profile>> {
    let entries = c.table("profiles", node, "a table of [profiles.NAME] tables")?;
    let mut out = Some(BTreeMap::new());
    for (name, value) in entries {
        let key = child("profiles", name);
        let parsed = value.clone().try_into::<crate::profiles::Profile>();
        match parsed {
            Ok(profile) => {
                let errors = crate::profiles::check_profile(&profile);
                if errors.is_empty() {
                    if let Some(m) = out.as_mut() {
                        m.insert(name.to_owned(), profile);
                    }
                } else {
                    for (at, e) in errors {
                        c.error(&format!("{key}.{at}"), e);
                    }
                    out = None;
                }
            }
            Err(e) => {
                c.error(
                    &key,
                    format!(
                        "{}: a profile has server_info = [\"…\"] and [profiles.{name}.tools.TOOL] tables with schema, predicted_effect, target, lands_on and preview (see the built-in profiles in docs/config.md)",
                        e.message().trim()
                    ),
                );
                out = None;
            }
        }
    }
    out
}

/// `[audit]`.
fn audit(c: &mut Checker<'_>, node: &toml::Value) -> Option<Audit> {
    let entries = c.table("audit", node, "a table")?;
    c.unknown_keys("audit", &entries, &AUDIT_KEYS);
    let mut audit = Audit::default();
    for (k, v) in entries {
        if k == "reads" {
            audit.reads = c.bool("audit.reads", v)?;
        }
    }
    Some(audit)
}

// === auth ===

/// `[auth]`.
fn auth(c: &mut Checker<'_>, node: &toml::Value) -> Option<Auth> {
    let entries = c.table("auth", node, "a table")?;
    c.unknown_keys("auth", &entries, &AUTH_KEYS);
    let mut auth = Auth::default();
    for (k, v) in entries {
        if k == "oauth" {
            auth.oauth = Some(oauth(c, v)?);
        }
    }
    Some(auth)
}

/// `[auth.oauth]`: every field checked, so a token can never be judged
/// against a resource or issuer that is not what the operator meant.
fn oauth(c: &mut Checker<'_>, node: &toml::Value) -> Option<crate::model::OAuth> {
    let entries = c.table("auth.oauth", node, "a table")?;
    c.unknown_keys("auth.oauth", &entries, &OAUTH_KEYS);
    let get = |k: &str| entries.iter().find(|(key, _)| *key == k).map(|(_, v)| *v);
    let mut ok = true;
    let resource = match get("resource") {
        Some(v) => oauth_url(c, "auth.oauth.resource", v, "resource"),
        None => {
            c.error(
                "auth.oauth.resource",
                "missing: the URL clients reach this server at, e.g. resource = \"https://plangate.example.com/mcp\" (every token must be issued for it)",
            );
            None
        }
    };
    let issuers = match get("issuers") {
        Some(v) => match c.string_list("auth.oauth.issuers", v) {
            Some(list) if list.is_empty() => {
                c.error(
                    "auth.oauth.issuers",
                    "empty: name at least one authorization server, e.g. issuers = [\"https://id.example.com\"]",
                );
                None
            }
            Some(list) => {
                let mut checked = Vec::new();
                for (i, issuer) in list.iter().enumerate() {
                    let key = index("auth.oauth.issuers", i);
                    match oauth_url(c, &key, &toml::Value::String(issuer.clone()), "issuer") {
                        Some(u) => checked.push(u),
                        None => ok = false,
                    }
                }
                Some(checked)
            }
            None => None,
        },
        None => {
            c.error(
                "auth.oauth.issuers",
                "missing: the authorization servers whose tokens are accepted, e.g. issuers = [\"https://id.example.com\"]",
            );
            None
        }
    };
    let identity_claim = match get("identity_claim") {
        Some(v) => c.non_empty_string("auth.oauth.identity_claim", v),
        None => Some(crate::model::DEFAULT_IDENTITY_CLAIM.to_owned()),
    };
    let scopes = match get("scopes") {
        Some(v) => oauth_scopes(c, v),
        None => {
            c.error(
                "auth.oauth.scopes",
                "missing: map token scopes to plangate scopes, e.g. [auth.oauth.scopes] \"mcp:plan\" = \"plan\" (a token with none of them is refused)",
            );
            None
        }
    };
    let clock_skew = match get("clock_skew") {
        Some(v) => c
            .integer_in("auth.oauth.clock_skew", v, "clock_skew (seconds)", 0..=300)
            .and_then(|n| u64::try_from(n).ok())
            .map(Duration::from_secs),
        None => Some(crate::model::DEFAULT_CLOCK_SKEW),
    };
    let introspection = match (get("introspection"), &issuers) {
        (Some(v), Some(issuers)) => introspection(c, v, issuers).map(Some),
        (Some(_), None) => None,
        (None, _) => Some(None),
    };
    let (resource, issuers, identity_claim, scopes, clock_skew, introspection) = (
        resource?,
        issuers?,
        identity_claim?,
        scopes?,
        clock_skew?,
        introspection?,
    );
    ok.then_some(crate::model::OAuth {
        resource,
        issuers,
        identity_claim,
        scopes,
        clock_skew,
        introspection,
    })
}

/// `[auth.oauth.introspection]`: plangate's client at one of `issuers`.
fn introspection(
    c: &mut Checker<'_>,
    node: &toml::Value,
    issuers: &[String],
) -> Option<crate::model::Introspection> {
    const KEY: &str = "auth.oauth.introspection";
    let entries = c.table(KEY, node, "a table")?;
    c.unknown_keys(KEY, &entries, &INTROSPECTION_KEYS);
    let get = |k: &str| entries.iter().find(|(key, _)| *key == k).map(|(_, v)| *v);
    let issuer = match get("issuer") {
        Some(v) => c
            .non_empty_string(&child(KEY, "issuer"), v)
            .and_then(|issuer| {
                if issuers.contains(&issuer) {
                    Some(issuer)
                } else {
                    c.error(
                        &child(KEY, "issuer"),
                        format!(
                            "{issuer:?} is not one of auth.oauth.issuers ({})",
                            issuers.join(", ")
                        ),
                    );
                    None
                }
            }),
        None if issuers.len() == 1 => issuers.first().cloned(),
        None => {
            c.error(
                &child(KEY, "issuer"),
                format!("missing: with several issuers, name the one whose introspection endpoint plangate asks, e.g. issuer = {:?}", issuers.first().map(String::as_str).unwrap_or_default()),
            );
            None
        }
    };
    let mut required = |name: &str, what: &str| match get(name) {
        Some(v) => c.non_empty_string(&child(KEY, name), v),
        None => {
            c.error(
                &child(KEY, name),
                format!(
                    "missing: {what} (introspection needs a client of the authorization server)"
                ),
            );
            None
        }
    };
    let client_id = required(
        "client_id",
        "plangate's client id at the authorization server",
    );
    let client_secret = required(
        "client_secret",
        "that client's secret, e.g. client_secret = \"${PLANGATE_INTROSPECTION_SECRET}\"",
    );
    let every = match get("every") {
        Some(v) => duration_in(
            c,
            &child(KEY, "every"),
            v,
            "every",
            Duration::from_secs(3600),
        ),
        None => Some(crate::model::DEFAULT_INTROSPECTION_EVERY),
    };
    Some(crate::model::Introspection {
        issuer: issuer?,
        client_id: client_id?,
        client_secret: client_secret?,
        every: every?,
    })
}

/// `[auth.oauth.scopes]`: token scope → `read`, `plan` or `write`.
fn oauth_scopes(
    c: &mut Checker<'_>,
    node: &toml::Value,
) -> Option<BTreeMap<String, plangate_core::Scope>> {
    let entries = c.table(
        "auth.oauth.scopes",
        node,
        "a table of token scope = \"read\" | \"plan\" | \"write\"",
    )?;
    if entries.is_empty() {
        c.error(
            "auth.oauth.scopes",
            "empty: map at least one token scope, e.g. \"mcp:plan\" = \"plan\"",
        );
        return None;
    }
    let mut out = BTreeMap::new();
    let mut ok = true;
    for (token_scope, v) in entries {
        let key = child("auth.oauth.scopes", token_scope);
        if token_scope.is_empty() || token_scope.contains(char::is_whitespace) {
            c.error(
                &key,
                "a token scope is one word without spaces (RFC 6749 §3.3)",
            );
            ok = false;
            continue;
        }
        let Some(text) = c.string(&key, v) else {
            ok = false;
            continue;
        };
        match text.parse::<plangate_core::Scope>() {
            Ok(scope) => {
                out.insert(token_scope.to_owned(), scope);
            }
            Err(e) => {
                c.error(&key, e.to_string());
                ok = false;
            }
        }
    }
    ok.then_some(out)
}

/// A URL of `[auth.oauth]`: `https://`, or `http://` on a loopback host
/// only (a token or key set fetched in the clear could be swapped on the
/// way); no query or fragment.
fn oauth_url(c: &mut Checker<'_>, key: &str, node: &toml::Value, what: &str) -> Option<String> {
    let url = c.url(key, node)?;
    let lower = url.to_ascii_lowercase();
    if url.contains(['?', '#']) {
        c.error(
            key,
            format!("{what} {url:?} must not have a query or fragment"),
        );
        return None;
    }
    if let Some(rest) = lower.strip_prefix("http://") {
        let authority = rest.split('/').next().unwrap_or_default();
        let host = match authority.strip_prefix('[') {
            Some(v6) => v6.split(']').next().unwrap_or_default(),
            None => authority.split(':').next().unwrap_or_default(),
        };
        let loopback = host == "localhost"
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback());
        if !loopback {
            c.error(
                key,
                format!("{what} {url:?} uses http:// on a host that is not loopback: use https:// (http:// is allowed for 127.0.0.1, ::1 and localhost only)"),
            );
            return None;
        }
    }
    Some(url)
}

// === rules ===

/// `[[rules]]`: each table's fields read strictly, then all of them
/// compiled together ([`plangate_policy::Policy::compile`]) against the
/// modes the file defines, so a condition that is not CEL, names an
/// unknown variable or function, or can never match is an error at load —
/// named by its place (`rules[2].when`) and the line its table starts on.
fn rules(
    c: &mut Checker<'_>,
    node: &toml::Value,
    defined: &[ModeSpec],
    text: &str,
) -> Option<Vec<plangate_policy::RuleSpec>> {
    let Some(items) = node.as_array() else {
        c.error(
            "rules",
            "rules must be [[rules]] tables, each with name, when and outcome",
        );
        return None;
    };
    // The line each `[[rules]]` table starts on, in order.
    let lines: Vec<usize> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| l.trim_start().starts_with("[[rules]]"))
        .map(|(i, _)| i + 1)
        .collect();
    let at = |i: usize| {
        lines
            .get(i)
            .map(|l| format!(" (line {l})"))
            .unwrap_or_default()
    };
    // The rules that read well, with their place; all are compiled even
    // when another is broken, so every mistake shows in one pass.
    let mut parsed: Vec<(usize, plangate_policy::RuleSpec)> = Vec::with_capacity(items.len());
    let mut all_read = true;
    for (i, item) in items.iter().enumerate() {
        let key = index("rules", i);
        let Some(entries) = c.table(&key, item, "a table with name, when and outcome") else {
            all_read = false;
            continue;
        };
        c.unknown_keys(&key, &entries, &RULE_KEYS);
        let get = |k: &str| entries.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
        let field = |c: &mut Checker<'_>, k: &str, required: bool| match get(k) {
            Some(v) => c.string(&child(&key, k), v),
            None if required => {
                c.error(
                    &child(&key, k),
                    format!("rule {} has no {k}{}", i + 1, at(i)),
                );
                None
            }
            None => Some(String::new()),
        };
        let name = field(c, "name", true);
        let when = field(c, "when", true);
        let outcome = field(c, "outcome", true);
        let message = field(c, "message", false);
        let effect = field(c, "effect", false);
        let modes = match get("modes") {
            Some(v) => c.string_list(&child(&key, "modes"), v).map(Some),
            None => Some(None),
        };
        let spec = (|| {
            Some(plangate_policy::RuleSpec {
                name: name?,
                when: when?,
                modes: modes?,
                outcome: outcome?,
                message: message.filter(|m| !m.is_empty()),
                effect: effect.filter(|e| !e.is_empty()),
            })
        })();
        match spec {
            Some(spec) => parsed.push((i, spec)),
            None => all_read = false,
        }
    }
    let mut mode_names: Vec<String> =
        vec![plangate_core::DEFAULT_MODE.to_owned(), PLAN_MODE.to_owned()];
    for m in defined {
        if !mode_names.contains(&m.name) {
            mode_names.push(m.name.clone());
        }
    }
    let specs: Vec<plangate_policy::RuleSpec> = parsed.iter().map(|(_, s)| s.clone()).collect();
    match plangate_policy::Policy::compile(&specs, &mode_names) {
        Ok(_) => all_read.then_some(specs),
        Err(errors) => {
            for e in errors {
                let i = parsed.get(e.index).map_or(e.index, |(i, _)| *i);
                c.error(
                    &child(&index("rules", i), e.field),
                    format!("{}{}", e.message, at(i)),
                );
            }
            None
        }
    }
}

// === modes ===

fn modes(c: &mut Checker<'_>, node: &toml::Value) -> Option<Vec<ModeSpec>> {
    let entries = c.table("modes", node, "a table of [modes.NAME] tables")?;
    let mut out = Some(Vec::with_capacity(entries.len()));
    for (name, value) in entries {
        let m = mode(c, name, value);
        out = out.zip(m).map(|(mut v, m)| {
            v.push(m);
            v
        });
    }
    out
}

/// One `[modes.NAME]`. `access` defaults to read and `over_access` to plan;
/// `[modes.plan]` starts from the built-in plan mode, so what it leaves out
/// (its instructions, say) stays as built in.
fn mode(c: &mut Checker<'_>, name: &str, node: &toml::Value) -> Option<ModeSpec> {
    let key = child("modes", name);
    let name_ok = match validate_mode_name(name) {
        Ok(()) => true,
        Err(e) => {
            c.error(&key, e.to_string());
            false
        }
    };
    let entries = c.table(&key, node, "a table")?;
    c.unknown_keys(&key, &entries, &MODE_KEYS);
    let mut spec = if name == PLAN_MODE {
        Some(ModeSpec::builtin_plan())
    } else {
        Some(ModeSpec {
            name: name.to_owned(),
            instructions: None,
            access: Effect::Read,
            over_access: OverAccess::Plan,
        })
    };
    for (k, v) in entries {
        let item_key = child(&key, k);
        let ok =
            match k {
                "instructions" => non_empty_text(c, &item_key, v)
                    .map(|t| spec.as_mut().map(|s| s.instructions = Some(t))),
                "access" => effect_value(c, &item_key, "access", v)
                    .map(|e| spec.as_mut().map(|s| s.access = e)),
                "over_access" => over_access(c, &item_key, name, v)
                    .map(|o| spec.as_mut().map(|s| s.over_access = o)),
                _ => Some(None), // reported by unknown_keys
            };
        if ok.is_none() {
            spec = None;
        }
    }
    spec.filter(|_| name_ok)
}

fn over_access(
    c: &mut Checker<'_>,
    key: &str,
    mode: &str,
    node: &toml::Value,
) -> Option<OverAccess> {
    let s = c.raw_str(key, node)?;
    let Ok(value) = s.parse::<OverAccess>() else {
        c.error(
            key,
            format!("over_access {s:?} is not allowed: use \"plan\", \"refuse\" or \"ask\""),
        );
        return None;
    };
    if mode == PLAN_MODE && value != OverAccess::Plan {
        c.error(
            key,
            format!(
                "over_access {s:?} is not allowed for the plan mode: it plans what is above its access (that is what agents and people expect of \"plan\"); define a mode with another name for \"refuse\" or \"ask\""
            ),
        );
        return None;
    }
    Some(value)
}

/// `read`, `write` or `destructive`; `what` names the key in the message.
fn effect_value(c: &mut Checker<'_>, key: &str, what: &str, node: &toml::Value) -> Option<Effect> {
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
fn non_empty_text(c: &mut Checker<'_>, key: &str, node: &toml::Value) -> Option<String> {
    let s = c.raw_str(key, node)?;
    if s.trim().is_empty() {
        c.error(key, "must not be empty");
        return None;
    }
    Some(s.to_owned())
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
