//! `plangate.toml`: plangate's own format, checked strictly — every unknown
//! key is an error, because a misspelt safety setting must never be ignored.

use std::collections::BTreeMap;
use std::path::Path;

use plangate_core::{Effect, validate_upstream_name};

use crate::check::{Checker, Kind, TransportFields, child, index, list, transport};
use crate::env::Env;
use crate::error::ConfigErrors;
use crate::model::{
    Anonymous, Config, ConfigSource, GatewaySettings, Namespace, ToolOverride, UpstreamConfig,
};

const TOP_KEYS: [&str; 2] = ["gateway", "upstreams"];
const GATEWAY_KEYS: [&str; 4] = ["anonymous", "allowed_hosts", "namespace", "tool_prefix"];
const UPSTREAM_KEYS: [&str; 9] = [
    "command",
    "args",
    "env",
    "cwd",
    "url",
    "headers",
    "trust_annotations",
    "enabled",
    "tools",
];
const TOOL_KEYS: [&str; 2] = ["effect", "enabled"];

/// Parses and validates the text of a `plangate.toml`. `origin` names the
/// file in messages and is where relative `cwd`s start.
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
    let config = gateway.zip(upstreams).map(|(gateway, upstreams)| Config {
        source: ConfigSource::Toml(origin.to_path_buf()),
        gateway,
        upstreams,
    });
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
            _ => Some(None), // reported by unknown_keys
        };
        if ok.is_none() {
            settings = None;
        }
    }
    settings
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

fn upstreams(c: &mut Checker<'_>, node: &toml::Value) -> Option<BTreeMap<String, UpstreamConfig>> {
    let entries = c.table("upstreams", node, "a table of [upstreams.NAME] tables")?;
    if entries.is_empty() {
        c.error(
            "upstreams",
            "no upstreams: add at least one [upstreams.NAME] table with a command or url",
        );
        return None;
    }
    let mut out = Some(BTreeMap::new());
    for (name, value) in entries {
        let up = upstream(c, name, value);
        out = out.zip(up).map(|(mut m, u)| {
            m.insert(name.to_owned(), u);
            m
        });
    }
    out
}

fn upstream(c: &mut Checker<'_>, name: &str, node: &toml::Value) -> Option<UpstreamConfig> {
    let key = child("upstreams", name);
    let name_ok = match validate_upstream_name(name) {
        Ok(()) => true,
        Err(e) => {
            c.error(&key, e.to_string());
            false
        }
    };
    let entries = c.table(&key, node, "a table")?;
    c.unknown_keys(&key, &entries, &UPSTREAM_KEYS);
    let get = |k: &str| entries.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
    let fields = TransportFields {
        command: get("command"),
        args: get("args"),
        env: get("env"),
        cwd: get("cwd"),
        url: get("url"),
        headers: get("headers"),
    };
    let kind = match (fields.command, fields.url) {
        (Some(_), None) => Some(Kind::Stdio),
        (None, Some(_)) => Some(Kind::Http),
        (Some(_), Some(_)) => {
            c.error(
                &key,
                "has both command and url: give exactly one (command for a stdio server, url for Streamable HTTP)",
            );
            None
        }
        (None, None) => {
            c.error(
                &key,
                "has neither command nor url: give exactly one (command for a stdio server, url for Streamable HTTP)",
            );
            None
        }
    };
    let transport = kind.and_then(|kind| transport(c, &key, kind, &fields, true));
    let trust = get("trust_annotations")
        .map(|n| c.bool(&child(&key, "trust_annotations"), n).map(Some))
        .unwrap_or(Some(None));
    let enabled = get("enabled")
        .map(|n| c.bool(&child(&key, "enabled"), n))
        .unwrap_or(Some(true));
    let tools = get("tools")
        .map(|n| tools(c, &child(&key, "tools"), n))
        .unwrap_or_else(|| Some(BTreeMap::new()));
    let transport = transport?;
    let trust_annotations = trust?.unwrap_or_else(|| transport.default_trust_annotations());
    name_ok.then_some(UpstreamConfig {
        name: name.to_owned(),
        transport,
        trust_annotations,
        enabled: enabled?,
        tools: tools?,
    })
}

fn tools(
    c: &mut Checker<'_>,
    key: &str,
    node: &toml::Value,
) -> Option<BTreeMap<String, ToolOverride>> {
    let entries = c.table(key, node, "a table of [...tools.TOOL] tables")?;
    let mut out = Some(BTreeMap::new());
    for (tool, value) in entries {
        let tool_key = child(key, tool);
        let t = tool_override(c, &tool_key, tool, value);
        out = out.zip(t).map(|(mut m, t)| {
            m.insert(tool.to_owned(), t);
            m
        });
    }
    out
}

fn tool_override(
    c: &mut Checker<'_>,
    key: &str,
    tool: &str,
    node: &toml::Value,
) -> Option<ToolOverride> {
    if tool.is_empty() {
        c.error(key, "tool name must not be empty");
        return None;
    }
    let entries = c.table(key, node, "a table")?;
    c.unknown_keys(key, &entries, &TOOL_KEYS);
    let mut out = Some(ToolOverride::default());
    for (k, v) in entries {
        let item_key = child(key, k);
        let ok = match k {
            "effect" => c
                .raw_str(&item_key, v)
                .and_then(|s| match s.parse::<Effect>() {
                    Ok(e) => Some(e),
                    Err(_) => {
                        c.error(
                            &item_key,
                            format!("effect {s:?} is not allowed: use \"read\", \"write\" or \"destructive\""),
                        );
                        None
                    }
                })
                .map(|e| out.as_mut().map(|o| o.effect = Some(e))),
            "enabled" => c
                .bool(&item_key, v)
                .map(|b| out.as_mut().map(|o| o.enabled = b)),
            _ => Some(None),
        };
        if ok.is_none() {
            out = None;
        }
    }
    out
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
