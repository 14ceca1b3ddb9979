//! Other MCP clients' config files, as `plangate wrap` edits them: which
//! client a file belongs to, where in it the servers live, the exact bytes
//! of that server map (so the rest of the file — comments, unknown fields,
//! formatting — is never touched), and the same servers as
//! `plangate.toml` tables.
//!
//! Pure: text in, text out. The CLI reads and writes the files.

use std::ops::Range;
use std::path::Path;

use plangate_core::redact::REDACTED;
use serde_json::Value;

use crate::env::Env;
use crate::mcp_json::strip_jsonc;

/// The MCP clients whose files `plangate wrap` knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Client {
    /// Claude Desktop: `claude_desktop_config.json`, `mcpServers`.
    ClaudeDesktop,
    /// Cursor: `~/.cursor/mcp.json` or a project's `.cursor/mcp.json`,
    /// `mcpServers`.
    Cursor,
    /// Claude Code: a project's `.mcp.json`, or `~/.claude.json` (user
    /// servers, or a project's under `projects`), `mcpServers`.
    ClaudeCode,
    /// VS Code: a workspace's `.vscode/mcp.json` or the user's
    /// `Code/User/mcp.json`, `servers`.
    VsCode,
    /// Any other file in the common `mcpServers` shape.
    Other,
}

impl Client {
    /// The name used on the command line and in records.
    pub fn as_str(self) -> &'static str {
        match self {
            Client::ClaudeDesktop => "claude-desktop",
            Client::Cursor => "cursor",
            Client::ClaudeCode => "claude-code",
            Client::VsCode => "vscode",
            Client::Other => "mcp-client",
        }
    }

    /// The client's name for people.
    pub fn label(self) -> &'static str {
        match self {
            Client::ClaudeDesktop => "Claude Desktop",
            Client::Cursor => "Cursor",
            Client::ClaudeCode => "Claude Code",
            Client::VsCode => "VS Code",
            Client::Other => "an MCP client",
        }
    }

    /// Parses [`Client::as_str`].
    pub fn parse(name: &str) -> Option<Client> {
        [
            Client::ClaudeDesktop,
            Client::Cursor,
            Client::ClaudeCode,
            Client::VsCode,
        ]
        .into_iter()
        .find(|c| c.as_str() == name)
    }

    /// Which client a file belongs to, by its documented name and place.
    pub fn of_path(path: &Path) -> Client {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let parent = path
            .parent()
            .and_then(|p| p.file_name())
            .and_then(|n| n.to_str())
            .unwrap_or("");
        match (parent, name) {
            (_, "claude_desktop_config.json") => Client::ClaudeDesktop,
            (_, ".claude.json" | ".mcp.json") => Client::ClaudeCode,
            (".cursor", "mcp.json") => Client::Cursor,
            // A workspace's, or the user's (`Code/User/mcp.json`).
            (".vscode" | "User", "mcp.json") => Client::VsCode,
            _ => Client::Other,
        }
    }

    /// Whether the client's entries say `"type": "stdio"` (VS Code and
    /// Claude Code write it; the others infer it from `command`).
    pub fn writes_type(self) -> bool {
        matches!(self, Client::VsCode | Client::ClaudeCode)
    }
}

/// A JSON value's place in the text, with its members' places.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    /// An object and its members, in order.
    Object {
        /// Its bytes, braces included.
        span: Range<usize>,
        /// Each member's (decoded) key and value.
        members: Vec<(String, Node)>,
    },
    /// An array or a scalar: only its bytes matter here.
    Other {
        /// Its bytes.
        span: Range<usize>,
    },
}

impl Node {
    /// Its bytes in the text.
    pub fn span(&self) -> Range<usize> {
        match self {
            Node::Object { span, .. } | Node::Other { span } => span.clone(),
        }
    }

    /// The value at `path` (object keys), if every step is an object
    /// member.
    pub fn find(&self, path: &[String]) -> Option<&Node> {
        let mut node = self;
        for key in path {
            let Node::Object { members, .. } = node else {
                return None;
            };
            node = &members.iter().rev().find(|(k, _)| k == key)?.1;
        }
        Some(node)
    }
}

/// `text` (JSON with comments and trailing commas) as a value, and the
/// places of its values.
pub fn parse(text: &str) -> Result<(Value, Node), String> {
    let plain = strip_jsonc(text);
    let value: Value = serde_json::from_str(&plain).map_err(|e| format!("not valid JSON: {e}"))?;
    let mut p = Scanner {
        b: plain.as_bytes(),
        text: &plain,
        i: 0,
    };
    Ok((value, p.value(0)?))
}

struct Scanner<'a> {
    b: &'a [u8],
    text: &'a str,
    i: usize,
}

/// Deeper than any client's file; a guard against stack exhaustion.
const MAX_DEPTH: usize = 128;

impl Scanner<'_> {
    fn ws(&mut self) {
        while self.b.get(self.i).is_some_and(u8::is_ascii_whitespace) {
            self.i += 1;
        }
    }

    fn peek(&self) -> Result<u8, String> {
        self.b
            .get(self.i)
            .copied()
            .ok_or_else(|| "unexpected end of the file".to_owned())
    }

    fn expect(&mut self, c: u8) -> Result<(), String> {
        self.ws();
        if self.peek()? == c {
            self.i += 1;
            Ok(())
        } else {
            Err(format!("expected {:?} at byte {}", c as char, self.i))
        }
    }

    fn string(&mut self) -> Result<Range<usize>, String> {
        self.ws();
        let start = self.i;
        self.expect(b'"')?;
        loop {
            match self.peek()? {
                b'\\' => self.i += 2,
                b'"' => {
                    self.i += 1;
                    return Ok(start..self.i);
                }
                _ => self.i += 1,
            }
        }
    }

    fn value(&mut self, depth: usize) -> Result<Node, String> {
        if depth > MAX_DEPTH {
            return Err("nested too deeply".to_owned());
        }
        self.ws();
        let start = self.i;
        match self.peek()? {
            b'{' => {
                self.i += 1;
                let mut members = Vec::new();
                loop {
                    self.ws();
                    if self.peek()? == b'}' {
                        self.i += 1;
                        break;
                    }
                    let key = self.string()?;
                    let key: String = serde_json::from_str(&self.text[key])
                        .map_err(|e| format!("a key that does not decode: {e}"))?;
                    self.expect(b':')?;
                    let value = self.value(depth + 1)?;
                    members.push((key, value));
                    self.ws();
                    match self.peek()? {
                        b',' => self.i += 1,
                        b'}' => {}
                        _ => return Err(format!("expected ',' or '}}' at byte {}", self.i)),
                    }
                }
                Ok(Node::Object {
                    span: start..self.i,
                    members,
                })
            }
            b'[' => {
                self.i += 1;
                loop {
                    self.ws();
                    if self.peek()? == b']' {
                        self.i += 1;
                        break;
                    }
                    self.value(depth + 1)?;
                    self.ws();
                    match self.peek()? {
                        b',' => self.i += 1,
                        b']' => {}
                        _ => return Err(format!("expected ',' or ']' at byte {}", self.i)),
                    }
                }
                Ok(Node::Other {
                    span: start..self.i,
                })
            }
            b'"' => {
                let span = self.string()?;
                Ok(Node::Other { span })
            }
            _ => {
                while self
                    .b
                    .get(self.i)
                    .is_some_and(|c| !matches!(c, b',' | b'}' | b']') && !c.is_ascii_whitespace())
                {
                    self.i += 1;
                }
                if self.i == start {
                    return Err(format!("expected a value at byte {start}"));
                }
                Ok(Node::Other {
                    span: start..self.i,
                })
            }
        }
    }
}

/// Where the servers of a client's file live, as object keys from the
/// top: `mcpServers` or VS Code's `servers`; in `~/.claude.json`, the user
/// servers (`mcpServers`) or, given `project` (an absolute directory), that
/// project's (`projects.DIR.mcpServers`).
pub fn servers_path(root: &Value, project: Option<&str>) -> Result<Vec<String>, String> {
    let has_servers = |v: Option<&Value>| {
        v.and_then(Value::as_object)
            .is_some_and(|servers| !servers.is_empty())
    };
    if let Some(projects) = root.get("projects").and_then(Value::as_object) {
        // Claude Code's own file: a project's servers when asked for.
        if let Some(dir) = project {
            let servers = projects.get(dir).and_then(|p| p.get("mcpServers"));
            if has_servers(servers) {
                return Ok(vec!["projects".into(), dir.into(), "mcpServers".into()]);
            }
            if !has_servers(root.get("mcpServers")) {
                let with: Vec<&String> = projects
                    .iter()
                    .filter(|(_, p)| has_servers(p.get("mcpServers")))
                    .map(|(d, _)| d)
                    .collect();
                return Err(format!(
                    "no servers for project {dir:?} and no user servers; projects with servers: {}",
                    if with.is_empty() {
                        "none".to_owned()
                    } else {
                        with.iter()
                            .map(|d| format!("{d:?}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    }
                ));
            }
        }
    }
    for key in ["mcpServers", "servers"] {
        if has_servers(root.get(key)) {
            return Ok(vec![key.to_owned()]);
        }
    }
    Err(
        "no servers: the file has no non-empty \"mcpServers\" (Claude Desktop, Cursor, Claude Code) or \"servers\" (VS Code) object"
            .to_owned(),
    )
}

/// The whitespace that starts the line holding byte `at`.
pub fn line_indent(text: &str, at: usize) -> &str {
    let line_start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    let rest = &text[line_start..];
    &rest[..rest.len() - rest.trim_start_matches([' ', '\t']).len()]
}

/// One level of indentation as `text` uses it inside the object at
/// `object`: its first member's line indent beyond the object's own line;
/// two spaces when that cannot be told (an empty or one-line object).
pub fn indent_unit(text: &str, object: &Node) -> String {
    let base = line_indent(text, object.span().start);
    if let Node::Object { members, .. } = object
        && let Some((_, first)) = members.first()
    {
        // The member's key sits before its value on the same line.
        let inner = line_indent(text, first.span().start);
        if inner.len() > base.len() && inner.starts_with(base) {
            return inner[base.len()..].to_owned();
        }
    }
    "  ".to_owned()
}

/// A JSON string literal (also a valid TOML basic string: serde_json
/// escapes only what TOML accepts escaped).
pub fn quoted(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_owned())
}

/// The entry that starts plangate, as a server object's text at the
/// object's place in the file: `base` is the indent of the line the object
/// starts on, `unit` one level.
pub fn plangate_servers_text(
    name: &str,
    command: &str,
    args: &[String],
    env: &[(&str, &str)],
    with_type: bool,
    base: &str,
    unit: &str,
) -> String {
    let one = format!("{base}{unit}");
    let two = format!("{one}{unit}");
    let mut fields = Vec::new();
    if with_type {
        fields.push(format!("{two}\"type\": \"stdio\""));
    }
    fields.push(format!("{two}\"command\": {}", quoted(command)));
    let args: Vec<String> = args.iter().map(|a| quoted(a)).collect();
    fields.push(format!("{two}\"args\": [{}]", args.join(", ")));
    if !env.is_empty() {
        let vars: Vec<String> = env
            .iter()
            .map(|(k, v)| format!("{}: {}", quoted(k), quoted(v)))
            .collect();
        fields.push(format!("{two}\"env\": {{{}}}", vars.join(", ")));
    }
    format!(
        "{{\n{one}{}: {{\n{}\n{one}}}\n{base}}}",
        quoted(name),
        fields.join(",\n")
    )
}

/// A TOML key: bare when it can be, quoted otherwise.
fn toml_key(k: &str) -> String {
    if !k.is_empty()
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        k.to_owned()
    } else {
        quoted(k)
    }
}

/// Fields of a server entry carried into `plangate.toml`.
const CARRIED: [&str; 7] = [
    "command", "args", "env", "cwd", "url", "headers", "disabled",
];

/// Fields that say only what `plangate.toml` infers (the transport).
const INFERRED: [&str; 2] = ["type", "transport"];

/// `servers` (a client file's server map, already checked) as
/// `[upstreams.NAME]` tables, `${…}` references kept as written. A
/// relative `cwd` is made absolute against `origin_dir` (where the client
/// file's own relative paths start), so the tables mean the same wherever
/// the TOML file lives; fields plangate does not use are named in a
/// comment.
pub fn upstreams_toml(servers: &serde_json::Map<String, Value>, origin_dir: &Path) -> String {
    let mut out = String::new();
    for (name, entry) in servers {
        let Some(entry) = entry.as_object() else {
            continue;
        };
        out.push_str(&format!("\n[upstreams.{}]\n", toml_key(name)));
        let string = |v: &Value| v.as_str().map(quoted);
        if let Some(command) = entry.get("command").and_then(string) {
            out.push_str(&format!("command = {command}\n"));
        }
        if let Some(args) = entry.get("args").and_then(Value::as_array) {
            let args: Vec<String> = args.iter().filter_map(string).collect();
            out.push_str(&format!("args = [{}]\n", args.join(", ")));
        }
        if let Some(cwd) = entry.get("cwd").and_then(Value::as_str) {
            let absolute = if Path::new(cwd).is_absolute() || cwd.contains('$') {
                cwd.to_owned()
            } else {
                origin_dir.join(cwd).display().to_string()
            };
            out.push_str(&format!("cwd = {}\n", quoted(&absolute)));
        }
        if let Some(url) = entry.get("url").and_then(string) {
            out.push_str(&format!("url = {url}\n"));
        }
        if entry.get("disabled").and_then(Value::as_bool) == Some(true) {
            out.push_str("enabled = false\n");
        }
        let unused: Vec<&str> = entry
            .keys()
            .map(String::as_str)
            .filter(|k| !CARRIED.contains(k) && !INFERRED.contains(k))
            .collect();
        if !unused.is_empty() {
            out.push_str(&format!(
                "# In the client's file but not used by plangate: {}\n",
                unused.join(", ")
            ));
        }
        for table in ["env", "headers"] {
            if let Some(vars) = entry.get(table).and_then(Value::as_object)
                && !vars.is_empty()
            {
                out.push_str(&format!("\n[upstreams.{}.{table}]\n", toml_key(name)));
                for (k, v) in vars {
                    if let Some(v) = v.as_str() {
                        out.push_str(&format!("{} = {}\n", toml_key(k), quoted(v)));
                    }
                }
            }
        }
    }
    out
}

/// The fields of a server entry whose values are secrets as often as not
/// (`GITHUB_TOKEN`, `Authorization`): what is shown of a file before it is
/// changed (`plangate wrap --dry-run`) names them, never their values.
const SECRET_FIELDS: [&str; 2] = ["env", "headers"];

/// `text` (a client's file, parsed into `root`) with every value of every
/// `env` and `headers` object in it replaced by `"[redacted]"` — the
/// servers being moved and any others the file holds (a diff's context
/// lines may show those too). Spans keep their places in the comments and
/// the formatting around them; only those values change.
pub fn redact_secret_fields(text: &str, root: &Node) -> String {
    fn collect(node: &Node, out: &mut Vec<Range<usize>>) {
        let Node::Object { members, .. } = node else {
            return;
        };
        for (key, value) in members {
            match value {
                Node::Object { members: vars, .. } if SECRET_FIELDS.contains(&key.as_str()) => {
                    out.extend(vars.iter().map(|(_, v)| v.span()));
                }
                Node::Other { span } if SECRET_FIELDS.contains(&key.as_str()) => {
                    out.push(span.clone());
                }
                _ => collect(value, out),
            }
        }
    }
    let mut spans = Vec::new();
    collect(root, &mut spans);
    spans.sort_by_key(|s| s.start);
    let redacted = quoted(REDACTED);
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for span in spans {
        if span.start < at || span.end > text.len() {
            continue;
        }
        out.push_str(&text[at..span.start]);
        out.push_str(&redacted);
        at = span.end;
    }
    out.push_str(&text[at..]);
    out
}

/// `servers` with every value of each entry's `env` and `headers` replaced
/// by `"[redacted]"` (their names kept), for showing the TOML
/// [`upstreams_toml`] would write without the secrets it would carry.
pub fn redact_server_secrets(
    servers: &serde_json::Map<String, Value>,
) -> serde_json::Map<String, Value> {
    let mut servers = servers.clone();
    for entry in servers.values_mut().filter_map(Value::as_object_mut) {
        for field in SECRET_FIELDS {
            match entry.get_mut(field) {
                Some(Value::Object(vars)) => {
                    for v in vars.values_mut() {
                        *v = Value::String(REDACTED.to_owned());
                    }
                }
                Some(other) => *other = Value::String(REDACTED.to_owned()),
                None => {}
            }
        }
    }
    servers
}

/// An environment in which every variable is set (to its own name), for
/// checking what a file says without the values it will run with.
pub struct EveryVariable;

impl Env for EveryVariable {
    fn var(&self, name: &str) -> Option<String> {
        Some(format!("<{name}>"))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    const VSCODE: &str = r#"{
	// servers for this workspace
	"inputs": [{"id": "x", "type": "promptString"}],
	"servers": {
		"fs": {"type": "stdio", "command": "npx", "args": ["-y", "x"],}, /* trailing */
	},
	"unknown": {"kept": true}
}
"#;

    #[test]
    fn the_server_map_is_found_to_the_byte_with_comments_and_trailing_commas() {
        let (_, root) = parse(VSCODE).unwrap();
        let servers = root.find(&["servers".to_owned()]).unwrap();
        let text = &VSCODE[servers.span()];
        assert!(text.starts_with("{\n\t\t\"fs\""), "{text}");
        assert!(text.ends_with("\t}"), "{text}");
        assert_eq!(indent_unit(VSCODE, servers), "\t");
        assert_eq!(line_indent(VSCODE, servers.span().start), "\t");
        let fs = servers.find(&["fs".to_owned()]).unwrap();
        assert!(VSCODE[fs.span()].ends_with(",}"));
    }

    #[test]
    fn claude_code_project_servers_are_chosen_by_directory() {
        let root: Value = serde_json::from_str(
            r#"{"numStartups": 3, "mcpServers": {}, "projects": {"/p": {"mcpServers": {"a": {"command": "x"}}}}}"#,
        )
        .unwrap();
        assert_eq!(
            servers_path(&root, Some("/p")).unwrap(),
            ["projects", "/p", "mcpServers"]
        );
        let err = servers_path(&root, Some("/q")).unwrap_err();
        assert!(err.contains("projects with servers: \"/p\""), "{err}");
        assert!(servers_path(&root, None).is_err());
    }

    #[test]
    fn the_toml_keeps_references_and_names_what_plangate_does_not_use() {
        let servers: serde_json::Map<String, Value> = serde_json::from_str(
            r#"{"gh": {"command": "npx", "args": ["-y", "gh"], "env": {"GITHUB_TOKEN": "${GITHUB_TOKEN}", "odd key": "v"}, "cwd": "sub", "autoApprove": ["x"]},
                "docs": {"type": "http", "url": "https://d.example/mcp", "headers": {"Authorization": "Bearer ${env:T}"}, "disabled": true}}"#,
        )
        .unwrap();
        let toml = upstreams_toml(&servers, Path::new("/home/me/proj"));
        assert!(
            toml.contains("GITHUB_TOKEN = \"${GITHUB_TOKEN}\""),
            "{toml}"
        );
        assert!(toml.contains("\"odd key\" = \"v\""), "{toml}");
        assert!(toml.contains("cwd = \"/home/me/proj/sub\""), "{toml}");
        assert!(
            toml.contains("# In the client's file but not used by plangate: autoApprove"),
            "{toml}"
        );
        assert!(toml.contains("enabled = false"), "{toml}");
        assert!(
            toml.contains("Authorization = \"Bearer ${env:T}\""),
            "{toml}"
        );
        let parsed: toml::Table = toml.parse().unwrap();
        assert!(parsed["upstreams"]["gh"]["env"].is_table());
    }

    #[test]
    fn env_and_headers_values_are_redacted_in_the_text_and_the_toml_their_names_kept() {
        let text = r#"{
  // the servers
  "mcpServers": {
    "gh": {"command": "npx", "env": {"GITHUB_TOKEN": "ghp_literal", "LEVEL": "${LEVEL}"}},
    "docs": {"url": "https://d.example/mcp", "headers": {"Authorization": "Bearer lit\"eral"}}
  },
  "projects": {"/p": {"mcpServers": {"x": {"command": "y", "env": {"K": "other-project-secret"}}}}},
  "theme": "dark"
}
"#;
        let (root, nodes) = parse(text).unwrap();
        let shown = redact_secret_fields(text, &nodes);
        for secret in [
            "ghp_literal",
            "${LEVEL}",
            "lit\\\"eral",
            "other-project-secret",
        ] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        assert!(
            shown.contains("\"GITHUB_TOKEN\": \"[redacted]\""),
            "{shown}"
        );
        assert!(
            shown.contains("\"Authorization\": \"[redacted]\""),
            "{shown}"
        );
        assert!(shown.contains("// the servers") && shown.contains("\"theme\": \"dark\""));
        let (again, _) = parse(&shown).unwrap();
        assert_eq!(
            again["mcpServers"]["gh"]["command"],
            root["mcpServers"]["gh"]["command"]
        );

        let servers = root["mcpServers"].as_object().unwrap();
        let toml = upstreams_toml(&redact_server_secrets(servers), Path::new("/"));
        assert!(
            !toml.contains("ghp_literal") && !toml.contains("Bearer"),
            "{toml}"
        );
        assert!(toml.contains("GITHUB_TOKEN = \"[redacted]\""), "{toml}");
        assert!(toml.contains("Authorization = \"[redacted]\""), "{toml}");
        assert!(toml.contains("command = \"npx\""), "{toml}");
    }

    #[test]
    fn the_plangate_entry_is_indented_like_its_file() {
        let text = plangate_servers_text(
            "plangate",
            "/usr/bin/plangate",
            &["serve".to_owned()],
            &[("PLANGATE_KEY", "pgk_x")],
            true,
            "\t",
            "\t",
        );
        let value: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(value["plangate"]["type"], "stdio");
        assert_eq!(value["plangate"]["env"]["PLANGATE_KEY"], "pgk_x");
        assert!(text.ends_with("\n\t}"), "{text}");
        assert!(
            text.contains("\n\t\t\"plangate\": {\n\t\t\t\"type\""),
            "{text}"
        );
    }
}
