//! The client's file: where it is (a documented place of a known client,
//! or `--from`), what its server map holds, and the text with that map
//! replaced by plangate's entry. Apart from the wrap flow, which decides
//! what to write and in which order; this knows only the file.

use std::ops::Range;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow};
use plangate_config::clients::{self, Client, Node};
use serde_json::{Map, Value};

use super::Target;
use crate::commands::UsageError;

/// The user's home directory.
pub(super) fn home() -> Result<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .ok_or_else(|| anyhow!("HOME is not set: give the client's file with --from FILE"))
}

/// `path` made absolute, and the file it links to when it is a link.
pub(super) fn absolute(path: &Path) -> Result<PathBuf> {
    let path = if path.is_absolute() {
        path.to_owned()
    } else {
        std::env::current_dir()?.join(path)
    };
    // The file itself may be a link (dotfile managers): work on what it
    // points at, so the record names one file whichever way it is named.
    Ok(std::fs::canonicalize(&path).unwrap_or(path))
}

/// Where desktop applications keep their per-user config on this system
/// (Claude Desktop's `Claude/`, VS Code's `Code/User/`): Application
/// Support on macOS, `%APPDATA%` on Windows, `$XDG_CONFIG_HOME` (else
/// `~/.config`) elsewhere.
fn app_config_dir(home: &Path) -> PathBuf {
    if cfg!(target_os = "macos") {
        home.join("Library/Application Support")
    } else if cfg!(windows) {
        std::env::var_os("APPDATA")
            .map(PathBuf::from)
            .unwrap_or_else(|| home.join("AppData/Roaming"))
    } else {
        std::env::var_os("XDG_CONFIG_HOME")
            .filter(|d| !d.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| home.join(".config"))
    }
}

/// The documented files of `client`, most specific first: a project's
/// before the user's.
fn documented(client: Client, project: &Path, home: &Path) -> Vec<PathBuf> {
    match client {
        Client::ClaudeDesktop => {
            vec![app_config_dir(home).join("Claude/claude_desktop_config.json")]
        }
        Client::Cursor => vec![
            project.join(".cursor/mcp.json"),
            home.join(".cursor/mcp.json"),
        ],
        Client::ClaudeCode => vec![project.join(".mcp.json"), home.join(".claude.json")],
        Client::VsCode => vec![
            project.join(".vscode/mcp.json"),
            app_config_dir(home).join("Code/User/mcp.json"),
        ],
        Client::Other => Vec::new(),
    }
}

const CLIENTS: [Client; 4] = [
    Client::ClaudeCode,
    Client::Cursor,
    Client::VsCode,
    Client::ClaudeDesktop,
];

/// The client file to work on, and its project directory (for
/// `~/.claude.json`'s per-project servers).
pub(super) fn resolve(
    target: &Target,
    what: &str,
    wanted: impl Fn(&Path) -> bool,
) -> Result<(PathBuf, String)> {
    let project = absolute(&match &target.project {
        Some(p) => p.clone(),
        None => std::env::current_dir()?,
    })?;
    let project_key = project.display().to_string();
    if let Some(from) = &target.from {
        if !from.exists() {
            return Err(UsageError(format!("{} does not exist", from.display())).into());
        }
        return Ok((absolute(from)?, project_key));
    }
    let home = home()?;
    let clients: Vec<Client> = match &target.client {
        Some(name) => vec![Client::parse(name).ok_or_else(|| {
            UsageError(format!(
                "unknown client {name:?}: use claude-desktop, cursor, claude-code or vscode, or give the file with --from FILE"
            ))
        })?],
        None => CLIENTS.to_vec(),
    };
    let found: Vec<PathBuf> = clients
        .iter()
        .flat_map(|c| documented(*c, &project, &home))
        .filter(|p| p.is_file() && wanted(p))
        .collect();
    match found.as_slice() {
        [one] => Ok((absolute(one)?, project_key)),
        [] => Err(UsageError(format!(
            "no {} config {what} found (looked in {}): give the file with --from FILE",
            target
                .client
                .as_deref()
                .and_then(Client::parse)
                .map_or("client", Client::label),
            clients
                .iter()
                .flat_map(|c| documented(*c, &project, &home))
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ))
        .into()),
        many => Err(UsageError(format!(
            "several client configs found: {}; say which with --from FILE",
            many.iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ))
        .into()),
    }
}

/// Whether a server entry starts plangate itself.
pub(super) fn runs_plangate(entry: &Value, exe: &Path) -> bool {
    let Some(command) = entry.get("command").and_then(Value::as_str) else {
        return false;
    };
    let path = Path::new(command);
    let name = path.file_stem().and_then(|n| n.to_str()).unwrap_or("");
    name == "plangate" || std::fs::canonicalize(path).is_ok_and(|p| p == exe)
}

/// Whether the file at `path` has a server map with a server in it.
pub(super) fn has_servers(path: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string(path) else {
        return false;
    };
    clients::parse(&text).is_ok_and(|(v, _)| {
        ["mcpServers", "servers"].iter().any(|k| {
            v.get(k)
                .and_then(|s| s.as_object())
                .is_some_and(|s| !s.is_empty())
        }) || v
            .get("projects")
            .and_then(|p| p.as_object())
            .is_some_and(|p| {
                p.values().any(|p| {
                    p.get("mcpServers")
                        .and_then(|s| s.as_object())
                        .is_some_and(|s| !s.is_empty())
                })
            })
    })
}

/// `${workspaceFolder}` and `${userHome}` in a VS Code file's strings, made
/// the paths they stand for (plangate does not know VS Code's variables).
fn vscode_variables(value: &mut Value, workspace: &Path, home: &Path) {
    match value {
        Value::String(s) if s.contains("${workspaceFolder}") || s.contains("${userHome}") => {
            *s = s
                .replace("${workspaceFolder}", &workspace.display().to_string())
                .replace("${userHome}", &home.display().to_string());
        }
        Value::Array(items) => {
            for v in items {
                vscode_variables(v, workspace, home);
            }
        }
        Value::Object(map) => {
            for v in map.values_mut() {
                vscode_variables(v, workspace, home);
            }
        }
        _ => {}
    }
}

/// The client's file as wrap read it, and the server map that moves.
pub(super) struct ClientFile {
    /// The file (absolute, a link followed).
    pub(super) file: PathBuf,
    /// Whose file it is.
    pub(super) client: Client,
    /// Its bytes as they were.
    pub(super) bytes: Vec<u8>,
    /// The same bytes as text.
    pub(super) text: String,
    /// Where each of its values is in `text`.
    pub(super) spans: Node,
    /// Keys from the top of the file to its server map.
    pub(super) servers_path: Vec<String>,
    /// The server map's bytes in `text`.
    pub(super) servers_span: Range<usize>,
    /// One level of indentation inside the server map.
    unit: String,
    /// The server map.
    pub(super) servers: Map<String, Value>,
}

impl ClientFile {
    /// The file `target` names (one with servers), and its server map (the
    /// project's, in `~/.claude.json`).
    pub(super) fn read(target: &Target) -> Result<ClientFile> {
        let (file, project) = resolve(target, "with MCP servers", has_servers)?;
        let client = Client::of_path(&file);
        let bytes =
            std::fs::read(&file).with_context(|| format!("cannot read {}", file.display()))?;
        let text = String::from_utf8(bytes.clone())
            .map_err(|_| UsageError(format!("{} is not UTF-8 text", file.display())))?;
        let (root, spans) =
            clients::parse(&text).map_err(|e| UsageError(format!("{}: {e}", file.display())))?;
        let path = clients::servers_path(&root, Some(&project))
            .map_err(|e| UsageError(format!("{}: {e}", file.display())))?;
        let servers_node = spans
            .find(&path)
            .ok_or_else(|| anyhow!("{}: the server map was not found", file.display()))?;
        let Node::Object { .. } = servers_node else {
            return Err(UsageError(format!(
                "{}: {} is not an object",
                file.display(),
                path.join(".")
            ))
            .into());
        };
        let servers = path
            .iter()
            .try_fold(&root, |v, k| v.get(k))
            .and_then(|v| v.as_object())
            .cloned()
            .ok_or_else(|| anyhow!("{}: no server map", file.display()))?;
        let servers_span = servers_node.span();
        let unit = clients::indent_unit(&text, servers_node);
        Ok(ClientFile {
            file,
            client,
            bytes,
            text,
            spans,
            servers_path: path,
            servers_span,
            unit,
            servers,
        })
    }

    /// The folder the file's relative paths start from.
    pub(super) fn origin_dir(&self) -> PathBuf {
        self.file.parent().unwrap_or(Path::new("/")).to_owned()
    }

    /// In a workspace's file, `${workspaceFolder}` is the folder holding its
    /// `.vscode`: made the path it stands for in every server (in the
    /// user's file it could be any workspace, so it stays, and checking the
    /// servers names it as an error).
    pub(super) fn resolve_vscode_variables(&mut self) {
        let origin_dir = self.origin_dir();
        if self.client == Client::VsCode && origin_dir.file_name().is_some_and(|n| n == ".vscode") {
            let workspace = origin_dir.parent().unwrap_or(&origin_dir).to_owned();
            let home = home().unwrap_or_default();
            for entry in self.servers.values_mut() {
                vscode_variables(entry, &workspace, &home);
            }
        }
    }

    /// The servers as `--mcp-config` would read them: an error (and
    /// nothing changed) when plangate could not run them as they are.
    pub(super) fn as_config(&self) -> Result<plangate_config::Config> {
        // Under the map's own key, so messages name it as the file does.
        let map_key = self
            .servers_path
            .last()
            .map_or("mcpServers", String::as_str);
        let as_json = serde_json::json!({ map_key: self.servers }).to_string();
        plangate_config::parse_mcp_json(&as_json, &self.file, &clients::EveryVariable).map_err(
            |errors| {
                UsageError(format!(
                    "{}: these servers cannot run behind plangate as they are, so nothing was changed:\n{errors}",
                    self.file.display()
                ))
                .into()
            },
        )
    }

    /// The plangate config for `servers`, headed by where they came from
    /// and how to put them back.
    pub(super) fn config_toml(&self, servers: &Map<String, Value>) -> String {
        format!(
            "# plangate's config for the MCP servers that were in\n#   {}\n# ({}), moved here by `plangate wrap`. This puts the file back as it was:\n#   plangate unwrap --from {}\n# Edit freely: modes, [[rules]] and per-tool settings are in plangate's\n# docs/config.md.\n{}",
            self.file.display(),
            self.client.label(),
            self.file.display(),
            clients::upstreams_toml(servers, &self.origin_dir())
        )
    }

    /// The file's text with its server map replaced by one entry that runs
    /// `command args` with `PLANGATE_KEY` set to `token` — only those bytes
    /// change — and that entry's text.
    pub(super) fn splice(&self, command: &str, args: &[String], token: &str) -> (String, String) {
        let span = &self.servers_span;
        let base = clients::line_indent(&self.text, span.start);
        let servers_text = clients::plangate_servers_text(
            "plangate",
            command,
            args,
            &[("PLANGATE_KEY", token)],
            self.client.writes_type(),
            base,
            &self.unit,
        );
        let new_text = format!(
            "{}{}{}",
            &self.text[..span.start],
            servers_text,
            &self.text[span.end..]
        );
        (new_text, servers_text)
    }
}
