//! `plangate.toml`: plangate's own format, checked strictly — every unknown
//! key is an error, because a misspelt safety setting must never be ignored.
//!
//! This file reads the document and its small tables (`[audit]`,
//! `[redaction]`, `[profiles]`); each larger table has a file beside it,
//! and [`values`] the values several of them share.

use std::collections::BTreeMap;
use std::path::Path;

use plangate_core::Modes;

use crate::check::{Checker, child, index, list};
use crate::env::Env;
use crate::error::ConfigErrors;
use crate::model::{Audit, Auth, Config, ConfigSource, GatewaySettings, Redaction};

mod auth;
mod gateway;
mod modes;
mod notify;
mod rules;
mod upstreams;
mod values;

use auth::auth;
use gateway::{default_mode, gateway};
use modes::modes;
use notify::notify;
use rules::rules;
use upstreams::upstreams;

const TOP_KEYS: [&str; 9] = [
    "audit",
    "auth",
    "gateway",
    "modes",
    "notify",
    "profiles",
    "redaction",
    "rules",
    "upstreams",
];
const AUDIT_KEYS: [&str; 1] = ["reads"];
const REDACTION_KEYS: [&str; 2] = ["names", "patterns"];

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
                "no upstreams: add at least one [upstreams.NAME] table with a command or url (or an empty [upstreams] table to start with none)",
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
    let receivers = match table.get("notify") {
        Some(node) => notify(&mut c, node),
        None => Some(Vec::new()),
    };
    let down = std::mem::take(&mut c.down);
    let config = gateway
        .zip(upstreams)
        .zip(modes)
        .zip(redaction)
        .zip(default_mode)
        .zip(audit)
        .zip(profiles)
        .zip(rules)
        .zip(auth.zip(receivers))
        .map(
            |(
                (
                    (
                        (((((gateway, upstreams), modes), redaction), (default, locked)), audit),
                        profiles,
                    ),
                    rules,
                ),
                (auth, notify),
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
                    down,
                    notify,
                }
            },
        );
    c.with_lines(|key| line_of(text, key));
    c.finish(config)
}

/// The line of `text` that holds `key` (`gateway.bogus`,
/// `upstreams.site.comand`): the key's own line under its table's header,
/// else the header of the table it names. `None` for keys inside arrays of
/// tables (`rules[2]…`, which say their line themselves) or not found.
fn line_of(text: &str, key: &str) -> Option<usize> {
    if key.is_empty() || key.contains('[') {
        return None;
    }
    let (table, last) = match key.rsplit_once('.') {
        Some((table, last)) => (table, last),
        None => ("", key),
    };
    let mut current = String::new();
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if let Some(header) = trimmed.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            current = header.trim().trim_matches(['[', ']']).replace(' ', "");
            if current == key || current.starts_with(&format!("{key}.")) {
                return Some(i + 1);
            }
            continue;
        }
        let named = trimmed
            .split_once('=')
            .map(|(k, _)| k.trim().trim_matches('"'));
        if current == table && named == Some(last) {
            return Some(i + 1);
        }
    }
    None
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
