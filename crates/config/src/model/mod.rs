//! The validated configuration: what the gateway builds from. Every value
//! here has passed validation, every default is resolved and every variable
//! expanded, so the build stage never re-checks anything.
//!
//! This file holds the whole [`Config`] and its smaller tables; the
//! `[gateway]` settings, `[auth]`, the upstreams and their transports have
//! a file each beside it.

pub use crate::rate_limit::RateLimit;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use plangate_core::{Modes, REDACTED};
use serde::Serialize;

mod auth;
mod gateway;
mod transport;
mod upstream;

pub use auth::{
    Auth, DEFAULT_CLOCK_SKEW, DEFAULT_IDENTITY_CLAIM, DEFAULT_INTROSPECTION_EVERY, Introspection,
    OAuth,
};
pub use gateway::{
    Anonymous, DEFAULT_ALLOWED_HOSTS, DEFAULT_BODY_READ_TIMEOUT, DEFAULT_CACHED_KEYS,
    DEFAULT_HEADER_READ_TIMEOUT, DEFAULT_LEASE, DEFAULT_MAX_CONCURRENT_CALLS_PER_KEY,
    DEFAULT_MAX_REQUEST_BYTES, DEFAULT_MAX_SESSIONS, DEFAULT_MAX_SESSIONS_PER_KEY,
    DEFAULT_MAX_STEPS, DEFAULT_NOTIFY_DEBOUNCE, DEFAULT_PLAN_TTL, DEFAULT_TOOL_PREFIX,
    GatewaySettings, MAX_BODY_READ_TIMEOUT, MAX_CACHED_KEYS, MAX_CONCURRENT_CALLS_LIMIT, MAX_LEASE,
    MAX_PLAN_BYTES_LIMIT, MAX_PLAN_TTL, MAX_REQUEST_BYTES_LIMIT, MAX_SESSIONS_LIMIT,
    MAX_STEPS_LIMIT, MAX_UNDO_TTL, Namespace,
};
pub use transport::Transport;
pub use upstream::{
    DEFAULT_CALL_TIMEOUT, DEFAULT_STARTUP_TIMEOUT, LandsOnSetting, MAX_CALL_TIMEOUT, OAuthGrant,
    ToolOverride, UpstreamConfig, UpstreamOAuth, UpstreamProtocol,
};

// === impl Config ===

/// A validated plangate configuration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Config {
    /// Where it came from, for messages and `config check`.
    pub source: ConfigSource,
    /// The `[gateway]` settings, defaults filled in.
    pub gateway: GatewaySettings,
    /// Upstream servers by name; every name passed
    /// [`plangate_core::validate_upstream_name`]. Never empty when loaded
    /// from a file.
    pub upstreams: BTreeMap<String, UpstreamConfig>,
    /// The modes an agent may choose (docs/design.md §4): the built-in `plan`
    /// (unless `[modes.plan]` overrides it) plus every `[modes.NAME]`;
    /// `default` is always there too. The JSON formats get
    /// [`Modes::default`].
    pub modes: Modes,
    /// What counts as a secret beyond the built-in rules (`[redaction]`).
    pub redaction: Redaction,
    /// What the audit log records beyond every call that is not a read
    /// (`[audit]`).
    pub audit: Audit,
    /// The operator's own server profiles (`[profiles.NAME]`), matched
    /// before the built-in ones ([`crate::profiles`]).
    pub profiles: BTreeMap<String, crate::profiles::Profile>,
    /// Rules over tools and their arguments (`[[rules]]`), in order; every
    /// one compiled and checked when the file was loaded
    /// ([`plangate_policy::Policy::compile`]).
    pub rules: Vec<plangate_policy::RuleSpec>,
    /// Who may call besides API-key holders (`[auth]`).
    pub auth: Auth,
    /// Upstreams that are down before they start: configured with
    /// variables unset in plangate's environment (name → why). The others
    /// serve; `/readyz`, `config check` and a call to one of their tools
    /// name them and why.
    pub down: BTreeMap<String, String>,
    /// Where plangate sends notifications (`[[notify]]`), in order.
    pub notify: Vec<NotifyTarget>,
}

/// One `[[notify]]` receiver: a URL that gets a signed POST (Standard
/// Webhooks) for each event it subscribes to, through the store's outbox
/// (docs/config.md, "Notifications").
#[derive(Clone, PartialEq, Eq, Serialize)]
pub struct NotifyTarget {
    /// Its name, unique, as `plangate notify test NAME` and the outbox
    /// name it.
    pub name: String,
    /// Where the POST goes (`http://` or `https://`). Its path may be a
    /// secret (a Slack webhook's is), so it is shown as
    /// [`NotifyTarget::shown_url`].
    #[serde(serialize_with = "serialize_shown_url")]
    pub url: String,
    /// The `whsec_…` secret the receiver verifies signatures with; its key
    /// bytes checked when the config was loaded. Never shown.
    #[serde(serialize_with = "serialize_redacted")]
    pub secret: String,
    /// The events it gets; every one by default.
    pub events: Vec<plangate_core::notify::NotifyEvent>,
    /// How its bodies look.
    pub format: plangate_core::notify::NotifyFormat,
}

impl std::fmt::Debug for NotifyTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NotifyTarget")
            .field("name", &self.name)
            .field("url", &self.shown_url())
            .field("secret", &REDACTED)
            .field("events", &self.events)
            .field("format", &self.format)
            .finish()
    }
}

impl NotifyTarget {
    /// The URL as shown: its scheme and host, the rest (which may carry a
    /// token) as `/…`.
    pub fn shown_url(&self) -> String {
        shown_url(&self.url)
    }

    /// Whether it gets `event`.
    pub fn wants(&self, event: plangate_core::notify::NotifyEvent) -> bool {
        self.events.contains(&event)
    }

    /// The secret's key bytes (checked at load, so present).
    pub fn key(&self) -> Vec<u8> {
        plangate_core::notify::webhook_key(&self.secret).unwrap_or_default()
    }
}

/// `[audit]`: every call that is not a read is always on the record
/// (`call_recorded`); reads too with `reads = true`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Audit {
    /// Record reads as well (one durable write per read: it costs the
    /// passthrough path, so it is off by default).
    pub reads: bool,
}

/// An operator's own secret names and credential shapes (`[redaction]`),
/// added to the built-in ones ([`plangate_core::Redactor`]). Every entry was
/// checked when the config was loaded, so [`Redaction::redactor`] cannot
/// fail for a loaded config.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Redaction {
    /// Key names that are secrets wherever they appear in a key (case and
    /// `-`/`_` folded), like the built-in `password`.
    pub names: Vec<String>,
    /// Regular expressions matched inside every string value.
    pub patterns: Vec<String>,
}

impl Redaction {
    /// The rules: built in plus these.
    pub fn redactor(&self) -> Result<plangate_core::Redactor, plangate_core::RedactionError> {
        plangate_core::Redactor::new(&self.names, &self.patterns)
    }
}

impl Config {
    /// The operator's settings for tool `tool` of upstream `server`
    /// (`[upstreams.NAME.tools.TOOL]`), if any: the one lookup planning,
    /// apply and the tool pins share.
    pub fn tool_settings(&self, server: &str, tool: &str) -> Option<&ToolOverride> {
        self.upstreams.get(server)?.tools.get(tool)
    }

    /// A configuration with every setting at its default: `[gateway]`
    /// defaults and the built-in modes. For configs built in code, such as
    /// the CLI's zero-config demo.
    pub fn new(source: ConfigSource, upstreams: BTreeMap<String, UpstreamConfig>) -> Config {
        Config {
            source,
            gateway: GatewaySettings::default(),
            upstreams,
            modes: Modes::default(),
            redaction: Redaction::default(),
            audit: Audit::default(),
            profiles: BTreeMap::new(),
            rules: Vec::new(),
            auth: Auth::default(),
            down: BTreeMap::new(),
            notify: Vec::new(),
        }
    }

    /// Whether tools, prompts and resources are exposed as `NAME__…`:
    /// always with `namespace = "always"`, and with `"auto"` once more than
    /// one upstream is enabled (docs/design.md §1).
    pub fn namespaced(&self) -> bool {
        match self.gateway.namespace {
            Namespace::Always => true,
            // An upstream that is down (its variables unset) counts: its
            // tools come when it does, and the others' names must not
            // change then.
            Namespace::Auto => {
                let mut names: std::collections::BTreeSet<&str> =
                    self.enabled_upstreams().map(|u| u.name.as_str()).collect();
                names.extend(self.down.keys().map(String::as_str));
                names.len() > 1
            }
        }
    }

    /// The upstreams the gateway connects to: those not disabled.
    pub fn enabled_upstreams(&self) -> impl Iterator<Item = &UpstreamConfig> {
        self.upstreams.values().filter(|u| u.enabled)
    }
}

/// Where a configuration came from. Kept so that `config check` and start-up
/// logs can say which file is in force.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "origin", rename_all = "snake_case")]
pub enum ConfigSource {
    /// A `plangate.toml`.
    Toml(PathBuf),
    /// An `mcpServers` (Claude Desktop, Cursor, Claude Code) or `servers`
    /// (VS Code) JSON file given with `--mcp-config`.
    McpJson(PathBuf),
    /// Built by the CLI itself, e.g. the zero-config demo; the string names
    /// it.
    Builtin(&'static str),
}

/// The file's path, or what the built-in config is: how answers and logs
/// name the config in force.
impl std::fmt::Display for ConfigSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConfigSource::Toml(p) | ConfigSource::McpJson(p) => write!(f, "{}", p.display()),
            ConfigSource::Builtin(what) => f.write_str(what),
        }
    }
}

/// `Duration` as the string a config would use (`"4h"`, `"1h30m"`), so
/// `config check --json` shows what the operator wrote.
fn serialize_duration<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&crate::duration::format_duration(*d))
}

/// A secret, serialized as `"[redacted]"` so `config check --json` never
/// shows it.
fn serialize_redacted<S: serde::Serializer>(_: &str, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(REDACTED)
}

/// `url`'s scheme and host; anything after them as `/…`.
fn shown_url(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = host.rsplit_once('@').map_or(host, |(_, h)| h);
    if host.len() < rest.len() {
        format!("{scheme}://{host}/…")
    } else {
        format!("{scheme}://{host}")
    }
}

fn serialize_shown_url<S: serde::Serializer>(url: &str, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&shown_url(url))
}

fn serialize_redacted_option<S: serde::Serializer>(
    v: &Option<String>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match v {
        Some(_) => s.serialize_str(REDACTED),
        None => s.serialize_none(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespacing_follows_enabled_upstreams_in_auto_mode() {
        let up = |name: &str, enabled| UpstreamConfig {
            enabled,
            ..UpstreamConfig::new(
                name,
                Transport::Stdio {
                    command: "node".into(),
                    args: Vec::new(),
                    env: BTreeMap::new(),
                    cwd: None,
                },
            )
        };
        let mut config = Config::new(
            ConfigSource::Builtin("test"),
            BTreeMap::from([("a".into(), up("a", true)), ("b".into(), up("b", false))]),
        );
        assert!(!config.namespaced());
        config.upstreams.get_mut("b").unwrap().enabled = true;
        assert!(config.namespaced());
        config.upstreams.remove("b");
        assert!(!config.namespaced());
        // Down (its variables unset): it still counts, so the names do
        // not change when it comes up; `plangate console` marks a
        // configured upstream down too, which is not a second one.
        config.down.insert("b".into(), "unset".into());
        assert!(config.namespaced());
        config.down.clear();
        config.down.insert("a".into(), "not started".into());
        assert!(!config.namespaced());
        config.gateway.namespace = Namespace::Always;
        assert!(config.namespaced());
    }
}
