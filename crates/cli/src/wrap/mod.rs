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

mod client_file;
mod files;
mod service;
mod unwrap;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, anyhow};
use base64::Engine as _;
use plangate_config::Config;
use plangate_config::clients::{self, EveryVariable};
use plangate_core::Scope;
use plangate_store::{ApiKey, Store};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::commands::UsageError;
use crate::output::outln;
use client_file::{ClientFile, absolute, runs_plangate};
use files::{Access, diff, mode_of, write_atomically, write_private};

pub use unwrap::unwrap;

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
    /// `--service URL`: move the servers into that plangate service's
    /// config instead, and point the client at it through `connect`.
    pub service: Option<String>,
    /// `--service-config FILE`: the service's config (default: the one
    /// `plangate service install` writes).
    pub service_config: Option<PathBuf>,
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
    /// The plangate service the servers moved into (`wrap --service`):
    /// the key is the service's, and `config` is the service's config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    service: Option<String>,
}

impl Record {
    /// The record of wrapping `found` (read before it is written): the
    /// new text and its server map, the backup and config written, the
    /// key made (name, id), and the service the servers moved into.
    fn of(
        found: &ClientFile,
        (new_text, written_servers): (&str, String),
        (backup, config): (PathBuf, PathBuf),
        (key_name, key_id): (String, String),
        service: Option<String>,
    ) -> Record {
        Record {
            format: RECORD_FORMAT,
            client: found.client.as_str().to_owned(),
            file: found.file.clone(),
            servers_path: found.servers_path.clone(),
            original: base64::engine::general_purpose::STANDARD.encode(&found.bytes),
            original_servers: (found.servers_span.start, found.servers_span.end),
            original_mode: mode_of(&found.file),
            written_sha256: sha256_hex(new_text.as_bytes()),
            written_servers,
            backup,
            config,
            key_name,
            key_id,
            wrapped_at_ms: now_ms(),
            service,
        }
    }
}

const RECORD_FORMAT: u32 = 1;

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Where wrap keeps the record of `file`.
fn record_path(data_dir: &Path, file: &Path) -> PathBuf {
    let id = &sha256_hex(file.display().to_string().as_bytes())[..16];
    data_dir.join("wrapped").join(format!("{id}.json"))
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

/// A client's file as both kinds of wrap start from it.
struct Read {
    found: ClientFile,
    /// plangate's own executable, which the new entries run.
    exe: PathBuf,
    /// Where the record of this wrap goes (`refuse_rewrap`).
    record_file: PathBuf,
    /// What the servers are, checked as `--mcp-config` would check them:
    /// nothing changes when plangate could not run them.
    from_client: Config,
}

/// Reads the client's file, refuses one wrapped already, and checks its
/// servers.
fn read_client(target: &Target, data_dir: &Path) -> Result<Read> {
    let mut found = ClientFile::read(target)?;
    let exe = std::env::current_exe()
        .and_then(std::fs::canonicalize)
        .context("cannot find plangate's own executable")?;
    let record_file = refuse_rewrap(&found, &exe, data_dir)?;
    found.resolve_vscode_variables();
    let from_client = found.as_config()?;
    Ok(Read {
        found,
        exe,
        record_file,
        from_client,
    })
}

/// `plangate wrap`.
pub async fn wrap(
    args: Wrap,
    data_dir: &Path,
    open_store: impl AsyncFnOnce() -> Result<Arc<dyn Store>>,
) -> Result<()> {
    if let Some(url) = &args.service {
        let config = args
            .service_config
            .clone()
            .unwrap_or_else(service::default_service_config);
        return service::wrap_into_service(&args, url, &config, data_dir).await;
    }
    let Read {
        found,
        exe,
        record_file,
        from_client,
    } = read_client(&args.target, data_dir)?;
    let config_path = config_path(args.to.as_deref(), data_dir, &found)?;
    let toml = found.config_toml(&found.servers);
    check_made_config(&toml, &config_path, &from_client, &found.file)?;
    say_unset_variables(&toml, &config_path);

    let data_dir_abs = absolute(data_dir)?;
    let entry_args = vec![
        "--data-dir".to_owned(),
        data_dir_abs.display().to_string(),
        "serve".to_owned(),
        "--config".to_owned(),
        config_path.display().to_string(),
    ];
    let command = exe.display().to_string();
    if args.dry_run {
        let placeholder = format!("<a new {} key, made by wrap>", args.scope);
        let (new_text, _) = found.splice(&command, &entry_args, &placeholder);
        print_dry_run(&found, &new_text, &config_path, args.scope);
        return Ok(());
    }

    let backup = backup_path(&found.file)?;
    // A write key's writes run at once: creating one widens what runs, so
    // it needs the person's code when approvals require one.
    if args.scope == plangate_core::Scope::Write {
        let act = plangate_gateway::operator::factor::Act::CreateWriteKey {
            name: args.key_name.as_deref().unwrap_or(found.client.as_str()),
        };
        crate::factor::confirm(data_dir, &act, &crate::args::FactorArgs::default()).await?;
    }
    let store = open_store().await?;
    let key_base = args
        .key_name
        .clone()
        .unwrap_or_else(|| found.client.as_str().to_owned());
    let key_name = free_key_name(&*store, &key_base).await?;
    let created = store
        .create_key(&key_name, args.scope)
        .await
        .map_err(|e| UsageError(e.to_string()))?;
    let (new_text, servers_text) = found.splice(&command, &entry_args, &created.token);
    let record = Record::of(
        &found,
        (&new_text, servers_text),
        (backup.clone(), config_path.clone()),
        (created.key.name.clone(), created.key.id.clone()),
        None,
    );

    // From here on a key exists: every file is written in an order where
    // the client's file comes last (its rename is the commit), and a
    // failure before it takes back all the others and the key, so a
    // failed wrap leaves the client's file as it was, no file of its own
    // behind and no key that works.
    let mut made: Vec<&Path> = Vec::new();
    let written = serde_json::to_vec_pretty(&record)
        .map_err(anyhow::Error::from)
        .and_then(|record_bytes| {
            let new_files = [
                (config_path.as_path(), toml.as_bytes()),
                (record_file.as_path(), record_bytes.as_slice()),
                (backup.as_path(), found.bytes.as_slice()),
            ];
            write_in_order(&new_files, &found.file, new_text.as_bytes(), &mut made)
        });
    if let Err(error) = written {
        let undone = undo(&made, &*store, &created.key, data_dir).await;
        return Err(error.context(format!(
            "wrap failed, so it was undone: {} untouched; {}",
            found.file.display(),
            undone.join("; ")
        )));
    }
    print_wrapped(&found, &record, &created.key, &data_dir_abs);
    Ok(())
}

/// Refuses a file whose servers start plangate itself, or that was
/// wrapped already; else where the record of its wrap goes.
fn refuse_rewrap(found: &ClientFile, exe: &Path, data_dir: &Path) -> Result<PathBuf> {
    let file = &found.file;
    let record_file = record_path(data_dir, file);
    if let Some((name, _)) = found.servers.iter().find(|(_, e)| runs_plangate(e, exe)) {
        return Err(UsageError(format!(
            "{} already starts plangate (server {name:?}): plangate does not wrap itself.{}",
            file.display(),
            if record_file.exists() {
                format!(" To take it out: plangate unwrap --from {}", file.display())
            } else {
                " Remove that entry, or wrap the file it came from".to_owned()
            }
        ))
        .into());
    }
    if record_file.exists() {
        return Err(UsageError(format!(
            "{} was wrapped already (record {}); `plangate unwrap --from {}` first",
            file.display(),
            record_file.display(),
            file.display()
        ))
        .into());
    }
    Ok(record_file)
}

/// Where the plangate config goes: `--to`, else the next free name in the
/// data dir. It is never written over: an earlier wrap's config (kept by
/// unwrap, perhaps edited) stays.
fn config_path(to: Option<&Path>, data_dir: &Path, found: &ClientFile) -> Result<PathBuf> {
    let config_path = match to {
        Some(p) => absolute(p)?,
        None => {
            let stem = format!(
                "{}-{}",
                found.client.as_str(),
                &sha256_hex(found.file.display().to_string().as_bytes())[..8]
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
    Ok(config_path)
}

/// The config wrap made must load and run exactly the servers the
/// client's file ran (`from_client`); otherwise (a bug in plangate)
/// nothing is changed.
fn check_made_config(
    toml: &str,
    config_path: &Path,
    from_client: &Config,
    file: &Path,
) -> Result<()> {
    let from_toml =
        plangate_config::parse_toml(toml, config_path, &EveryVariable).map_err(|errors| {
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
    Ok(())
}

/// Before anything is written: the servers whose variables are unset in
/// this shell, which plangate will start as *down* (naming the variable)
/// while the others serve — unless the client sets them where it starts
/// plangate.
fn say_unset_variables(toml: &str, config_path: &Path) {
    let Ok(here) = plangate_config::parse_toml(toml, config_path, &plangate_config::ProcessEnv)
    else {
        return;
    };
    for (name, why) in &here.down {
        eprintln!(
            "note: in this shell, server {name:?} would start down: {why}. Unless the client sets it where it starts plangate, plangate serves the others and names {name} as down (config check, /readyz, its tools' errors)"
        );
    }
}

/// `wrap --dry-run`: both diffs, the client's file (as `new_text`) and the
/// config, and what a wrap would do.
fn print_dry_run(found: &ClientFile, new_text: &str, config_path: &Path, scope: Scope) {
    // What is printed may be pasted into a chat or a ticket: the servers'
    // `env` and `headers` values, the usual home of their tokens, show as
    // "[redacted]" on both sides (the file as it is, and the config as it
    // would be written — that one with the values as they are).
    let file = found.file.display().to_string();
    let shown_before = clients::redact_secret_fields(&found.text, &found.spans);
    let shown_toml = found.config_toml(&clients::redact_server_secrets(&found.servers));
    crate::output::lines(&diff(&shown_before, new_text, &file, &file));
    crate::output::lines(&diff(
        "",
        &shown_toml,
        "/dev/null",
        &config_path.display().to_string(),
    ));
    let names: Vec<&str> = found.servers.keys().map(String::as_str).collect();
    eprintln!(
        "dry run: nothing was changed. `plangate wrap` without --dry-run moves {} server(s) ({}) of {} into {} and creates a {} key; env and headers values are shown as \"{}\" here and written as they are",
        names.len(),
        names.join(", "),
        file,
        config_path.display(),
        scope,
        plangate_core::redact::REDACTED,
    );
}

/// A free name beside `file` for the copy of its original.
fn backup_path(file: &Path) -> Result<PathBuf> {
    (0..100)
        .map(|i| {
            let suffix = if i == 0 {
                ".before-plangate".to_owned()
            } else {
                format!(".before-plangate.{i}")
            };
            PathBuf::from(format!("{}{suffix}", file.display()))
        })
        .find(|p| !p.exists())
        .ok_or_else(|| anyhow!("no free name for a backup beside {}", file.display()))
}

/// Writes each of `new_files` (owner-only, noted in `made` once written),
/// then the client's `file` as `text` — last, its rename the commit, and
/// owner-only whatever it was before: it now holds a key (`unwrap` puts
/// its permissions back).
fn write_in_order<'p>(
    new_files: &[(&'p Path, &[u8])],
    file: &Path,
    text: &[u8],
    made: &mut Vec<&'p Path>,
) -> Result<()> {
    for (path, bytes) in new_files {
        write_private(path, bytes)?;
        made.push(path);
    }
    write_atomically(file, text, Access::Owner)
}

/// Takes back a wrap that failed once its key existed: removes the files
/// it `made` (newest first) and revokes `key`. Says what was undone, and
/// what to do by hand where it could not be.
async fn undo(made: &[&Path], store: &dyn Store, key: &ApiKey, data_dir: &Path) -> Vec<String> {
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
    match store.revoke_key(&key.id).await {
        Ok(_) => undone.push(format!("the key {:?} revoked", key.name)),
        Err(e) => undone.push(format!(
            "the key {:?} NOT revoked ({e}): plangate --data-dir {} keys revoke {}",
            key.name,
            data_dir.display(),
            key.id
        )),
    }
    undone
}

/// What a wrap did, and what to do next.
fn print_wrapped(found: &ClientFile, record: &Record, key: &ApiKey, data_dir_abs: &Path) {
    let (file, client) = (&found.file, found.client);
    let names: Vec<&str> = found.servers.keys().map(String::as_str).collect();
    outln!(
        "wrapped {} ({}): {} server(s) ({}) now run behind plangate",
        file.display(),
        client.label(),
        names.len(),
        names.join(", ")
    );
    outln!("  plangate config: {}", record.config.display());
    outln!(
        "  key: {:?} (scope {}{}), in the client's entry as PLANGATE_KEY",
        key.name,
        key.scope,
        if key.scope == Scope::Plan {
            ": writes become plan steps that wait for your approval"
        } else {
            ""
        }
    );
    if let Some(mode) = record.original_mode {
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
    outln!("  backup of the original: {}", record.backup.display());
    outln!(
        "Restart {} to use it. To undo: plangate unwrap --from {}",
        client.label(),
        file.display()
    );
    if key.scope == Scope::Plan {
        outln!(
            "Review what it plans in the web console: plangate console --config {} (then http://127.0.0.1:7071/console; the agent's answers name it), or at the CLI: plangate plans show --key {name}, then plangate plans apply --key {name} --config {}",
            record.config.display(),
            record.config.display(),
            name = key.name,
        );
    }
}
