//! `--mcp-config FILE`: the JSON other MCP clients write, accepted as-is.
//!
//! These files belong to other tools, so fields plangate does not know
//! (`autoApprove`, `timeout`, `description`, …) are ignored rather than
//! errors; fields it does know are checked as strictly as in
//! `plangate.toml`, and anything plangate cannot honour (legacy SSE, VS Code
//! input prompts, `envFile`) is an error rather than a silent surprise.

use std::collections::BTreeMap;
use std::path::Path;

use plangate_core::validate_upstream_name;

use crate::check::{Checker, Kind, TransportFields, child, transport};
use crate::env::Env;
use crate::error::ConfigErrors;
use crate::model::{Config, ConfigSource, UpstreamConfig};

/// The fields of a server entry plangate reads.
const KNOWN_FIELDS: [&str; 10] =
    crate::check::transport_keys_and(["type", "transport", "disabled", "envFile"]);

/// Other clients' fields that are near one plangate reads but mean
/// something else: never taken for a misspelling.
const IGNORED_FIELDS: [&str; 1] = ["enabled"];

const SSE_MESSAGE: &str = "legacy SSE-only upstreams are not supported: use the server's Streamable HTTP endpoint (often ending in /mcp) with \"type\": \"http\"";

/// Parses and validates the text of an MCP client's JSON config
/// (`{"mcpServers": {…}}` or VS Code's `{"servers": {…}}`, comments and
/// trailing commas allowed as VS Code allows them). `origin` names the file
/// in messages and is where relative `cwd`s start. `[gateway]` settings and
/// modes take their defaults.
pub fn parse_mcp_json(text: &str, origin: &Path, env: &dyn Env) -> Result<Config, ConfigErrors> {
    let root: serde_json::Value = match serde_json::from_str(&strip_jsonc(text)) {
        Ok(v) => v,
        Err(e) => {
            let full = e.to_string();
            let message = full
                .rfind(" at line ")
                .map_or(full.as_str(), |i| &full[..i]);
            return Err(ConfigErrors::single(
                origin.to_path_buf(),
                "",
                format!(
                    "json syntax error at line {}, column {}: {message}",
                    e.line(),
                    e.column()
                ),
            ));
        }
    };
    let mut c = Checker::new(origin, env);
    let Some(top) = c.table("", &root, "a json object") else {
        return c.finish(None);
    };
    // Every place a server list may live, with its key path.
    let mut lists: Vec<(String, &serde_json::Value)> = Vec::new();
    for (k, v) in &top {
        match *k {
            "mcpServers" | "servers" => lists.push((child("", k), v)),
            // VS Code's settings.json nests them under "mcp".
            "mcp" => {
                if let Some(servers) = v.get("servers") {
                    lists.push(("mcp.servers".to_owned(), servers));
                }
            }
            _ => {}
        }
    }
    if lists.is_empty() {
        c.error(
            "",
            "no \"mcpServers\" or \"servers\" object: expected {\"mcpServers\": {…}} (Claude Desktop, Cursor, Claude Code) or {\"servers\": {…}} (VS Code)",
        );
        return c.finish(None);
    }
    let mut upstreams = Some(BTreeMap::new());
    let mut seen_any = false;
    for (list_key, node) in lists {
        let Some(entries) = c.table(&list_key, node, "an object of servers by name") else {
            upstreams = None;
            continue;
        };
        for (name, value) in entries {
            seen_any = true;
            let key = child(&list_key, name);
            let up = c
                .upstream_or_down(name, |c| server(c, &key, name, value))
                .map(|u| u.ok_or(()));
            if upstreams
                .as_ref()
                .is_some_and(|m: &BTreeMap<_, _>| m.contains_key(name))
            {
                c.error(&key, format!("server {name:?} is defined twice"));
                upstreams = None;
            }
            upstreams = upstreams.zip(up).map(|(mut m, u)| {
                if let Ok(u) = u {
                    m.insert(name.to_owned(), u);
                }
                m
            });
        }
    }
    if !seen_any {
        c.error(
            "",
            "no servers: the file defines no MCP servers for plangate to front",
        );
    }
    let down = std::mem::take(&mut c.down);
    let config = upstreams.map(|upstreams| Config {
        down,
        ..Config::new(ConfigSource::McpJson(origin.to_path_buf()), upstreams)
    });
    c.finish(config)
}

fn server(
    c: &mut Checker<'_>,
    key: &str,
    name: &str,
    node: &serde_json::Value,
) -> Option<UpstreamConfig> {
    let name_ok = match validate_upstream_name(name) {
        Ok(()) => true,
        Err(e) => {
            c.error(
                key,
                format!("{e} (plangate does not rename servers; rename it in this file)"),
            );
            false
        }
    };
    let entries = c.table(key, node, "an object")?;
    let get = |k: &str| entries.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
    // Fields of other clients are ignored, but one that misspells a field
    // plangate reads (`"comand"`) would silently drop what it says.
    for (field, _) in &entries {
        if KNOWN_FIELDS.contains(field) || IGNORED_FIELDS.contains(field) {
            continue;
        }
        if let Some(meant) = crate::check::did_you_mean(field, &KNOWN_FIELDS)
            && get(meant).is_none()
        {
            c.error(
                &child(key, field),
                format!("unknown field {field:?}: did you mean {meant:?}?"),
            );
        }
    }
    if get("envFile").is_some() {
        c.error(
            &child(key, "envFile"),
            "envFile is not supported: put the variables in \"env\" or in plangate's environment",
        );
    }
    let fields = TransportFields {
        // plangate.toml only: no other client's format has it.
        ca_file: None,
        ..TransportFields::of(&entries)
    };
    let declared = match (get("type"), get("transport")) {
        (Some(t), _) => Some(("type", t)),
        (None, Some(t)) => Some(("transport", t)),
        (None, None) => None,
    };
    let kind = kind(c, key, &fields, declared);
    let enabled = get("disabled")
        .map(|n| c.bool(&child(key, "disabled"), n).map(|d| !d))
        .unwrap_or(Some(true));
    let transport = kind.and_then(|kind| transport(c, key, kind, &fields, false));
    let (transport, enabled) = (transport?, enabled?);
    name_ok.then(|| UpstreamConfig {
        enabled,
        ..UpstreamConfig::new(name, transport)
    })
}

/// Which transport a server entry asks for: its `type` (or Cursor's
/// `transport`) when given, else `command` ⇒ stdio, `url` ⇒ Streamable HTTP
/// — unless the url ends in `/sse`, the legacy transport's usual endpoint.
fn kind(
    c: &mut Checker<'_>,
    key: &str,
    f: &TransportFields<'_, serde_json::Value>,
    declared: Option<(&str, &serde_json::Value)>,
) -> Option<Kind> {
    if f.command.is_some() && f.url.is_some() {
        c.error(
            key,
            "has both command and url: give exactly one (command for a stdio server, url for Streamable HTTP)",
        );
        return None;
    }
    if let Some((field, node)) = declared {
        let type_key = child(key, field);
        let t = c.raw_str(&type_key, node)?;
        return match t.to_ascii_lowercase().as_str() {
            "stdio" => Some(Kind::Stdio),
            "http" | "streamable-http" | "streamablehttp" | "streamable_http" => Some(Kind::Http),
            "sse" => {
                c.error(&type_key, SSE_MESSAGE);
                None
            }
            _ => {
                c.error(
                    &type_key,
                    format!("{field} {t:?} is not supported: use \"stdio\", \"http\" or \"streamable-http\""),
                );
                None
            }
        };
    }
    match (f.command, f.url) {
        (Some(_), _) => Some(Kind::Stdio),
        (None, Some(url)) => {
            let looks_sse = url.as_str().is_some_and(|u| {
                let path = u.split(['?', '#']).next().unwrap_or_default();
                path.trim_end_matches('/')
                    .to_ascii_lowercase()
                    .ends_with("/sse")
            });
            if looks_sse {
                c.error(
                    &child(key, "url"),
                    format!("{SSE_MESSAGE} (a url ending in /sse with no \"type\" is taken as legacy SSE)"),
                );
                None
            } else {
                Some(Kind::Http)
            }
        }
        (None, None) => {
            c.error(
                key,
                "has neither command nor url: give a command for a stdio server or a url for Streamable HTTP",
            );
            None
        }
    }
}

/// JSON with comments (`//`, `/* */`) and trailing commas, as VS Code
/// accepts, turned into plain JSON. Removed characters become spaces and
/// newlines stay, so syntax errors keep their line and column.
pub(crate) fn strip_jsonc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    let mut in_string = false;
    let blank = |out: &mut String, c: char| {
        if c == '\n' {
            out.push('\n');
        } else {
            out.extend(std::iter::repeat_n(' ', c.len_utf8()));
        }
    };
    while let Some(ch) = chars.next() {
        if in_string {
            out.push(ch);
            match ch {
                '\\' => {
                    if let Some(next) = chars.next() {
                        out.push(next);
                    }
                }
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match (ch, chars.peek()) {
            ('"', _) => {
                in_string = true;
                out.push(ch);
            }
            ('/', Some('/')) => {
                blank(&mut out, ch);
                while let Some(&next) = chars.peek() {
                    if next == '\n' {
                        break;
                    }
                    blank(&mut out, next);
                    chars.next();
                }
            }
            ('/', Some('*')) => {
                blank(&mut out, ch);
                if let Some(star) = chars.next() {
                    blank(&mut out, star);
                }
                let mut prev = '\0';
                for next in chars.by_ref() {
                    blank(&mut out, next);
                    if prev == '*' && next == '/' {
                        break;
                    }
                    prev = next;
                }
            }
            _ => out.push(ch),
        }
    }
    remove_trailing_commas(&out)
}

/// `,` followed only by whitespace before `}` or `]`, outside strings,
/// becomes a space.
fn remove_trailing_commas(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = bytes.to_vec();
    let mut in_string = false;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if in_string {
            match b {
                b'\\' => i += 1,
                b'"' => in_string = false,
                _ => {}
            }
        } else if b == b'"' {
            in_string = true;
        } else if b == b',' {
            let next = bytes[i + 1..].iter().find(|c| !c.is_ascii_whitespace());
            if matches!(next, Some(b'}' | b']')) {
                out[i] = b' ';
            }
        }
        i += 1;
    }
    // Only ASCII ',' bytes were replaced by ASCII ' ', so this stays UTF-8.
    String::from_utf8(out).unwrap_or_else(|_| text.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_and_trailing_commas_are_accepted_like_vs_code() {
        let text =
            "{\n  // servers\n  \"a\": \"x // not a comment\", /* block\n */ \"b\": [1, 2,],\n}";
        let v: serde_json::Value = serde_json::from_str(&strip_jsonc(text)).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"a": "x // not a comment", "b": [1, 2]})
        );
        assert_eq!(strip_jsonc(text).lines().count(), text.lines().count());
        let tricky = r#"{"a": "quote \" , ]", "b": "/*"}"#;
        let v: serde_json::Value = serde_json::from_str(&strip_jsonc(tricky)).unwrap();
        assert_eq!(v["a"], "quote \" , ]");
        assert_eq!(v["b"], "/*");
    }
}
