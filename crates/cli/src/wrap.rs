//! `plangate wrap` and `plangate unwrap`: put plangate in front of the MCP
//! servers an existing client (Claude Desktop, Cursor, Claude Code, VS
//! Code) already has, and take it out again.
//!
//! `wrap` moves the client's servers into a `plangate.toml` of their own
//! (`${VAR}` references kept as written), creates a key, and replaces the
//! client's server map — only those bytes; comments, unknown fields and
//! formatting elsewhere stay — with one entry that starts plangate. It
//! records the file's original bytes in the data dir (and leaves a copy
//! beside the file), so `unwrap` can put back exactly what was there.
//!
//! Secrets (README, "Already have servers…"): every file wrap or unwrap
//! writes that holds a key or someone's former file is owner-only; a dry
//! run prints `env` and `headers` by name only; a wrap that fails once
//! its key exists revokes the key and removes what it wrote, leaving the
//! client's file untouched.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, anyhow};
use base64::Engine as _;
use plangate_config::clients::{self, Client, EveryVariable, Node};
use plangate_core::Scope;
use plangate_store::Store;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::commands::UsageError;
use crate::output::outln;

/// Which client file to work on, as the person said it.
pub struct Target {
    /// `--from FILE`.
    pub from: Option<PathBuf>,
    /// `--client NAME`.
    pub client: Option<String>,
    /// `--project DIR` (default: the current directory).
    pub project: Option<PathBuf>,
}

/// What `plangate wrap` was asked.
pub struct Wrap {
    /// The client file.
    pub target: Target,
    /// The scope of the key it creates.
    pub scope: Scope,
    /// The key's name (default: the client's name).
    pub key_name: Option<String>,
    /// Where the plangate config goes (default: in the data dir).
    pub to: Option<PathBuf>,
    /// Print both diffs, change nothing.
    pub dry_run: bool,
}

/// The record of one wrapped file, kept in `DATA_DIR/wrapped/`.
#[derive(Debug, Serialize, Deserialize)]
struct Record {
    format: u32,
    client: String,
    file: PathBuf,
    /// Keys from the top of the file to its server map.
    servers_path: Vec<String>,
    /// The file's bytes before wrap (base64).
    original: String,
    /// Where the server map was in them.
    original_servers: (usize, usize),
    /// The file's unix permission bits before wrap made it owner-only
    /// (absent in records of earlier versions, and off unix).
    #[serde(default)]
    original_mode: Option<u32>,
    /// SHA-256 of the bytes wrap wrote.
    written_sha256: String,
    /// The server map's text wrap wrote.
    written_servers: String,
    /// The copy beside the file.
    backup: PathBuf,
    /// The plangate config the servers went to.
    config: PathBuf,
    key_name: String,
    key_id: String,
    wrapped_at_ms: i64,
}

const RECORD_FORMAT: u32 = 1;

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn home() -> Result<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .ok_or_else(|| anyhow!("HOME is not set: give the client's file with --from FILE"))
}

fn absolute(path: &Path) -> Result<PathBuf> {
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
fn resolve(
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

fn record_path(data_dir: &Path, file: &Path) -> PathBuf {
    let id = &sha256_hex(file.display().to_string().as_bytes())[..16];
    data_dir.join("wrapped").join(format!("{id}.json"))
}

/// Whether a server entry starts plangate itself.
fn runs_plangate(entry: &serde_json::Value, exe: &Path) -> bool {
    let Some(command) = entry.get("command").and_then(serde_json::Value::as_str) else {
        return false;
    };
    let path = Path::new(command);
    let name = path.file_stem().and_then(|n| n.to_str()).unwrap_or("");
    name == "plangate" || std::fs::canonicalize(path).is_ok_and(|p| p == exe)
}

fn has_servers(path: &Path) -> bool {
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
fn vscode_variables(value: &mut serde_json::Value, workspace: &Path, home: &Path) {
    match value {
        serde_json::Value::String(s)
            if s.contains("${workspaceFolder}") || s.contains("${userHome}") =>
        {
            *s = s
                .replace("${workspaceFolder}", &workspace.display().to_string())
                .replace("${userHome}", &home.display().to_string());
        }
        serde_json::Value::Array(items) => {
            for v in items {
                vscode_variables(v, workspace, home);
            }
        }
        serde_json::Value::Object(map) => {
            for v in map.values_mut() {
                vscode_variables(v, workspace, home);
            }
        }
        _ => {}
    }
}

/// Who may read a file [`write_atomically`] writes.
#[derive(Clone, Copy)]
enum Access<'a> {
    /// Its owner only (0600): the file holds a key, or what someone's
    /// file held.
    Owner,
    /// As `path` is now (the file it replaces; owner-only when it is gone).
    Like(&'a Path),
    /// These unix permission bits (a file put back as it was).
    Mode(u32),
}

/// A file's unix permission bits, when the system has them.
fn mode_of(path: &Path) -> Option<u32> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(path)
            .ok()
            .map(|m| m.permissions().mode() & 0o7777)
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        None
    }
}

/// Writes `bytes` to `path` through a temporary file and a rename, the
/// new file readable as `access` says from its first byte (the temporary
/// file is created owner-only and widened, if at all, before the rename).
fn write_atomically(path: &Path, bytes: &[u8], access: Access<'_>) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)
        .with_context(|| format!("cannot write in {}", dir.display()))?;
    std::io::Write::write_all(&mut tmp, bytes)?;
    tmp.as_file().sync_all()?;
    let permissions = match access {
        Access::Owner => private_permissions(),
        Access::Like(like) => std::fs::metadata(like)
            .map(|m| m.permissions())
            .ok()
            .or_else(private_permissions),
        Access::Mode(mode) => mode_permissions(mode),
    };
    if let Some(permissions) = permissions {
        std::fs::set_permissions(tmp.path(), permissions)?;
    }
    tmp.persist(path)
        .map_err(|e| anyhow!("cannot write {}: {}", path.display(), e.error))?;
    Ok(())
}

/// Owner-only permissions (0600), where the system has them.
fn private_permissions() -> Option<std::fs::Permissions> {
    mode_permissions(0o600)
}

fn mode_permissions(mode: u32) -> Option<std::fs::Permissions> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        Some(std::fs::Permissions::from_mode(mode))
    }
    #[cfg(not(unix))]
    {
        let _ = mode;
        None
    }
}

/// Writes a new file readable by its owner only.
fn write_private(path: &Path, bytes: &[u8]) -> Result<()> {
    if let Some(dir) = path.parent()
        && !dir.is_dir()
    {
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::DirBuilderExt;
            builder.mode(0o700);
        }
        builder
            .create(dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options
        .open(path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    std::io::Write::write_all(&mut file, bytes)?;
    file.sync_all()?;
    Ok(())
}

fn diff(old: &str, new: &str, from: &str, to: &str) -> String {
    similar::TextDiff::from_lines(old, new)
        .unified_diff()
        .context_radius(3)
        .header(from, to)
        .to_string()
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// A key name not taken by an active key: `base`, else `base-2`, `base-3`…
async fn free_key_name(store: &dyn Store, base: &str) -> Result<String> {
    let keys = store.list_keys().await?;
    let taken = |n: &str| keys.iter().any(|k| k.is_active() && k.name == n);
    if !taken(base) {
        return Ok(base.to_owned());
    }
    (2..1000)
        .map(|i| format!("{base}-{i}"))
        .find(|n| !taken(n))
        .ok_or_else(|| anyhow!("no free key name like {base:?}: give one with --key-name"))
}

/// `plangate wrap`.
pub async fn wrap(
    args: Wrap,
    data_dir: &Path,
    open_store: impl AsyncFnOnce() -> Result<Arc<dyn Store>>,
) -> Result<()> {
    let (file, project) = resolve(&args.target, "with MCP servers", has_servers)?;
    let client = Client::of_path(&file);
    let bytes = std::fs::read(&file).with_context(|| format!("cannot read {}", file.display()))?;
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
    let mut servers = path
        .iter()
        .try_fold(&root, |v, k| v.get(k))
        .and_then(|v| v.as_object())
        .cloned()
        .ok_or_else(|| anyhow!("{}: no server map", file.display()))?;

    let exe = std::env::current_exe()
        .and_then(std::fs::canonicalize)
        .context("cannot find plangate's own executable")?;
    if let Some((name, _)) = servers.iter().find(|(_, e)| runs_plangate(e, &exe)) {
        let record = record_path(data_dir, &file);
        return Err(UsageError(format!(
            "{} already starts plangate (server {name:?}): plangate does not wrap itself.{}",
            file.display(),
            if record.exists() {
                format!(" To take it out: plangate unwrap --from {}", file.display())
            } else {
                " Remove that entry, or wrap the file it came from".to_owned()
            }
        ))
        .into());
    }
    let record_file = record_path(data_dir, &file);
    if record_file.exists() {
        return Err(UsageError(format!(
            "{} was wrapped already (record {}); `plangate unwrap --from {}` first",
            file.display(),
            record_file.display(),
            file.display()
        ))
        .into());
    }

    let origin_dir = file.parent().unwrap_or(Path::new("/")).to_owned();
    // A workspace's file: `${workspaceFolder}` is the folder holding its
    // `.vscode` (in the user's file it could be any workspace, so it stays
    // and is named as an error below).
    if client == Client::VsCode && origin_dir.file_name().is_some_and(|n| n == ".vscode") {
        let workspace = origin_dir.parent().unwrap_or(&origin_dir).to_owned();
        let home = home().unwrap_or_default();
        for entry in servers.values_mut() {
            vscode_variables(entry, &workspace, &home);
        }
    }

    // What the servers are, checked as `--mcp-config` would check them:
    // nothing changes when plangate could not run them.
    // Under the map's own key, so messages name it as the file does.
    let map_key = path.last().map_or("mcpServers", String::as_str);
    let as_json = serde_json::json!({ map_key: servers }).to_string();
    let from_client =
        plangate_config::parse_mcp_json(&as_json, &file, &EveryVariable).map_err(|errors| {
            UsageError(format!(
                "{}: these servers cannot run behind plangate as they are, so nothing was changed:\n{errors}",
                file.display()
            ))
        })?;

    let config_path = match &args.to {
        Some(p) => absolute(p)?,
        // An earlier wrap's config (kept by unwrap, perhaps edited) is
        // never overwritten: the next free name.
        None => {
            let stem = format!(
                "{}-{}",
                client.as_str(),
                &sha256_hex(file.display().to_string().as_bytes())[..8]
            );
            (1..1000)
                .map(|i| match i {
                    1 => data_dir.join("wrapped").join(format!("{stem}.toml")),
                    i => data_dir.join("wrapped").join(format!("{stem}-{i}.toml")),
                })
                .find(|p| !p.exists())
                .ok_or_else(|| anyhow!("no free name for the config in {}", data_dir.display()))?
        }
    };
    if config_path.exists() {
        return Err(UsageError(format!(
            "{} exists: give another place with --to FILE, or remove it",
            config_path.display()
        ))
        .into());
    }
    let config_text = |servers: &serde_json::Map<String, serde_json::Value>| {
        format!(
            "# plangate's config for the MCP servers that were in\n#   {}\n# ({}), moved here by `plangate wrap`. This puts the file back as it was:\n#   plangate unwrap --from {}\n# Edit freely: modes, [[rules]] and per-tool settings are in plangate's\n# docs/config.md.\n{}",
            file.display(),
            client.label(),
            file.display(),
            clients::upstreams_toml(servers, &origin_dir)
        )
    };
    let toml = config_text(&servers);
    let from_toml =
        plangate_config::parse_toml(&toml, &config_path, &EveryVariable).map_err(|errors| {
            anyhow::Error::from(errors).context(
                "the config wrap made does not load (a bug in plangate); nothing was changed",
            )
        })?;
    if from_toml.upstreams != from_client.upstreams {
        return Err(anyhow!(
            "the config wrap made would not run the same servers as {} (a bug in plangate); nothing was changed",
            file.display()
        ));
    }

    let data_dir_abs = absolute(data_dir)?;
    let key_base = args
        .key_name
        .clone()
        .unwrap_or_else(|| client.as_str().to_owned());
    let entry_args = vec![
        "--data-dir".to_owned(),
        data_dir_abs.display().to_string(),
        "serve".to_owned(),
        "--config".to_owned(),
        config_path.display().to_string(),
    ];
    let span = servers_node.span();
    let base = clients::line_indent(&text, span.start);
    let unit = clients::indent_unit(&text, servers_node);
    let splice = |token: &str| {
        let servers_text = clients::plangate_servers_text(
            "plangate",
            &exe.display().to_string(),
            &entry_args,
            &[("PLANGATE_KEY", token)],
            client.writes_type(),
            base,
            &unit,
        );
        let new_text = format!(
            "{}{}{}",
            &text[..span.start],
            servers_text,
            &text[span.end..]
        );
        (new_text, servers_text)
    };

    let names: Vec<&str> = servers.keys().map(String::as_str).collect();
    if args.dry_run {
        // What is printed may be pasted into a chat or a ticket: the
        // servers' `env` and `headers` values, the usual home of their
        // tokens, show as "[redacted]" on both sides (the file as it is,
        // and the config as it would be written — that one with the values
        // as they are).
        let placeholder = format!("<a new {} key, made by wrap>", args.scope);
        let (new_text, _) = splice(&placeholder);
        let shown_before = clients::redact_secret_fields(&text, &spans);
        let shown_toml = config_text(&clients::redact_server_secrets(&servers));
        outln!(
            "{}",
            diff(
                &shown_before,
                &new_text,
                &file.display().to_string(),
                &file.display().to_string()
            )
        );
        outln!(
            "{}",
            diff(
                "",
                &shown_toml,
                "/dev/null",
                &config_path.display().to_string()
            )
        );
        eprintln!(
            "dry run: nothing was changed. `plangate wrap` without --dry-run moves {} server(s) ({}) of {} into {} and creates a {} key; env and headers values are shown as \"{}\" here and written as they are",
            names.len(),
            names.join(", "),
            file.display(),
            config_path.display(),
            args.scope,
            plangate_core::redact::REDACTED,
        );
        return Ok(());
    }

    let backup = (0..100)
        .map(|i| {
            let suffix = if i == 0 {
                ".before-plangate".to_owned()
            } else {
                format!(".before-plangate.{i}")
            };
            PathBuf::from(format!("{}{suffix}", file.display()))
        })
        .find(|p| !p.exists())
        .ok_or_else(|| anyhow!("no free name for a backup beside {}", file.display()))?;
    let original_mode = mode_of(&file);

    let store = open_store().await?;
    let key_name = free_key_name(&*store, &key_base).await?;
    let created = store
        .create_key(&key_name, args.scope)
        .await
        .map_err(|e| UsageError(e.to_string()))?;
    let (new_text, servers_text) = splice(&created.token);
    let record = Record {
        format: RECORD_FORMAT,
        client: client.as_str().to_owned(),
        file: file.clone(),
        servers_path: path,
        original: base64::engine::general_purpose::STANDARD.encode(&bytes),
        original_servers: (span.start, span.end),
        original_mode,
        written_sha256: sha256_hex(new_text.as_bytes()),
        written_servers: servers_text,
        backup: backup.clone(),
        config: config_path.clone(),
        key_name: created.key.name.clone(),
        key_id: created.key.id.clone(),
        wrapped_at_ms: now_ms(),
    };

    // From here on a key exists: every file is written in an order where
    // the client's file comes last (its rename is the commit), and a
    // failure before it takes back all the others and the key, so a
    // failed wrap leaves the client's file as it was, no file of its own
    // behind and no key that works.
    let mut made: Vec<&Path> = Vec::new();
    let written = (|| -> Result<()> {
        write_private(&config_path, toml.as_bytes())?;
        made.push(&config_path);
        write_private(&record_file, &serde_json::to_vec_pretty(&record)?)?;
        made.push(&record_file);
        write_private(&backup, &bytes)?;
        made.push(&backup);
        // The file now holds a key: owner-only, whatever it was before
        // (`unwrap` puts its permissions back).
        write_atomically(&file, new_text.as_bytes(), Access::Owner)
    })();
    if let Err(error) = written {
        let mut undone = Vec::new();
        for path in made.iter().rev() {
            match std::fs::remove_file(path) {
                Ok(()) => undone.push(format!("{} removed", path.display())),
                Err(e) => undone.push(format!(
                    "{} NOT removed ({e}): remove it by hand",
                    path.display()
                )),
            }
        }
        match store.revoke_key(&created.key.id).await {
            Ok(_) => undone.push(format!("the key {:?} revoked", created.key.name)),
            Err(e) => undone.push(format!(
                "the key {:?} NOT revoked ({e}): plangate --data-dir {} keys revoke {}",
                created.key.name,
                data_dir.display(),
                created.key.id
            )),
        }
        return Err(error.context(format!(
            "wrap failed, so it was undone: {} untouched; {}",
            file.display(),
            undone.join("; ")
        )));
    }

    outln!(
        "wrapped {} ({}): {} server(s) ({}) now run behind plangate",
        file.display(),
        client.label(),
        names.len(),
        names.join(", ")
    );
    outln!("  plangate config: {}", config_path.display());
    outln!(
        "  key: {:?} (scope {}{}), in the client's entry as PLANGATE_KEY",
        created.key.name,
        created.key.scope,
        if args.scope == Scope::Plan {
            ": writes become plan steps that wait for your approval"
        } else {
            ""
        }
    );
    if let Some(mode) = original_mode {
        outln!(
            "  {} holds the key now, so only its owner may read it (0600{})",
            file.display(),
            if mode == 0o600 {
                String::new()
            } else {
                format!("; it was {mode:04o}, and unwrap puts that back")
            }
        );
    }
    outln!("  data dir: {}", data_dir_abs.display());
    outln!("  backup of the original: {}", backup.display());
    outln!(
        "Restart {} to use it. To undo: plangate unwrap --from {}",
        client.label(),
        file.display()
    );
    if args.scope == Scope::Plan {
        outln!(
            "Review and run what it plans: plangate plans show --key {name}, then plangate plans apply --key {name} --config {}",
            config_path.display(),
            name = created.key.name,
        );
    }
    Ok(())
}

/// `plangate unwrap`.
pub async fn unwrap(target: Target, force: bool, data_dir: &Path) -> Result<()> {
    let (file, _) = resolve(&target, "wrapped with this data dir", |p| {
        record_path(data_dir, &absolute(p).unwrap_or_default()).exists()
    })?;
    let record_file = record_path(data_dir, &file);
    let record: Record = match std::fs::read(&record_file) {
        Ok(bytes) => serde_json::from_slice(&bytes).with_context(|| {
            format!("the wrap record {} is not readable", record_file.display())
        })?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(UsageError(format!(
                "{} was not wrapped with data dir {} (no record at {}): if it was wrapped with another --data-dir or PLANGATE_DATA_DIR, give that one",
                file.display(),
                data_dir.display(),
                record_file.display()
            ))
            .into());
        }
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", record_file.display())),
    };
    let original = base64::engine::general_purpose::STANDARD
        .decode(&record.original)
        .context("the wrap record's copy of the file is damaged")?;
    let current =
        std::fs::read(&file).with_context(|| format!("cannot read {}", file.display()))?;

    let restored: Vec<u8>;
    let how: &str;
    if sha256_hex(&current) == record.written_sha256 {
        restored = original.clone();
        how = "as it was before wrap, byte for byte";
    } else if current == original {
        restored = original.clone();
        how = "unchanged: it already held what was there before wrap";
    } else {
        // Changed since wrap. When the server map is still the one wrap
        // wrote, put the original map back and keep the rest (clients such
        // as Claude Code rewrite their own file all the time).
        let text = String::from_utf8(current.clone()).unwrap_or_default();
        let original_text = String::from_utf8(original.clone()).unwrap_or_default();
        let (start, end) = record.original_servers;
        let servers_now = clients::parse(&text)
            .ok()
            .and_then(|(_, spans)| spans.find(&record.servers_path).map(Node::span));
        match servers_now {
            Some(span)
                if text[span.clone()] == record.written_servers && end <= original_text.len() =>
            {
                restored = format!(
                    "{}{}{}",
                    &text[..span.start],
                    &original_text[start..end],
                    &text[span.end..]
                )
                .into_bytes();
                how = "with its servers as they were before wrap; the file's other changes since are kept";
            }
            _ if force => {
                let saved = PathBuf::from(format!("{}.plangate-unwrap-saved", file.display()));
                // It holds the key wrap wrote, and whatever else you put
                // there: owner-only.
                write_atomically(&saved, &current, Access::Owner)?;
                eprintln!("your changes since wrap are saved as {}", saved.display());
                restored = original.clone();
                how = "as it was before wrap, byte for byte (--force)";
            }
            _ => {
                return Err(UsageError(format!(
                    "{} changed since wrap, its server map too, so unwrap would lose what you changed. To put back the original anyway (your current file saved as {}.plangate-unwrap-saved): plangate unwrap --from {} --force. Or restore it by hand from {}",
                    file.display(),
                    file.display(),
                    file.display(),
                    record.backup.display()
                ))
                .into());
            }
        }
    }
    // The file as it was, with the permissions it had (wrap made it
    // owner-only while it held the key).
    let access = record
        .original_mode
        .map_or(Access::Like(&file), Access::Mode);
    if restored != current {
        write_atomically(&file, &restored, access)?;
    } else if let Some(mode) = record.original_mode
        && mode_of(&file) != Some(mode)
        && let Some(permissions) = mode_permissions(mode)
    {
        std::fs::set_permissions(&file, permissions)
            .with_context(|| format!("cannot put back the permissions of {}", file.display()))?;
    }
    // The copy beside the file, when it is still the original.
    if std::fs::read(&record.backup).is_ok_and(|b| b == original) {
        let _ = std::fs::remove_file(&record.backup);
    }
    std::fs::remove_file(&record_file)
        .with_context(|| format!("cannot remove the wrap record {}", record_file.display()))?;
    outln!("restored {} {how}", file.display());
    outln!(
        "  the key {:?} stays; revoke it with: plangate --data-dir {} keys revoke {}",
        record.key_name,
        data_dir.display(),
        record.key_id
    );
    outln!(
        "  the plangate config stays at {} (remove it when you no longer need it)",
        record.config.display()
    );
    Ok(())
}
