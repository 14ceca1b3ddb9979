//! `plangate wrap --service URL`: moves a client's MCP servers into the
//! config of the plangate service (`plangate service install`) and leaves
//! the client one entry that runs `plangate connect --url URL/mcp` with a
//! new `plan` key (docs/security.md, "An agent with a shell").
//!
//! Why it works this way: the servers' secrets (their `env` and
//! `headers`) move to where only the service's user can read them, so the
//! client's file — which the agent's OS user can read — holds a `plan` key
//! and nothing else. Writing the service's config is root's (it is
//! `root:SERVICE 0640`), so this runs with `sudo`; the key is made by the
//! service itself, through its operator API with an operator token, so
//! nothing here opens the service's data dir (its files stay the
//! service user's). The service watches its config and takes the new
//! servers within a second. The client's file keeps its owner; the record
//! `plangate unwrap` reads, and the copy of the original beside the file,
//! are owner-only files of the user running this (root), since both hold
//! the secrets that just moved.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow};
use plangate_config::clients::{self, EveryVariable};
use serde_json::json;

use super::client_file::ClientFile;
use super::files::{Access, diff, write_atomically};
use super::{Record, Wrap, backup_path};
use crate::commands::UsageError;
use crate::output::outln;
use crate::remote::Remote;

/// A key the service made (`POST /console/api/keys`).
#[derive(serde::Deserialize)]
struct KeyMade {
    key: String,
    key_id: String,
    scope: plangate_core::Scope,
    token: String,
}

/// The service config `plangate service install` writes for the default
/// user, where `--service-config` is not given.
pub(super) fn default_service_config() -> PathBuf {
    crate::service::config_path("plangate")
}

/// `plangate wrap --service URL`.
pub(super) async fn wrap_into_service(
    args: &Wrap,
    url: &str,
    service_config: &Path,
    data_dir: &Path,
) -> Result<()> {
    let super::Read {
        found,
        exe,
        record_file,
        from_client,
    } = super::read_client(&args.target, data_dir)?;
    let before = std::fs::read_to_string(service_config).map_err(|e| {
        UsageError(format!(
            "cannot read the service's config {} ({e}): `sudo plangate service install` writes it; or name it with --service-config FILE",
            service_config.display()
        ))
    })?;
    let after = merged(&before, &found, service_config, &from_client)?;
    let mcp_url = format!("{}/mcp", url.trim_end_matches('/').trim_end_matches("/mcp"));
    let entry_args = vec!["connect".to_owned(), "--url".to_owned(), mcp_url.clone()];
    let command = exe.display().to_string();
    if args.dry_run {
        let placeholder = format!("<a new {} key, made by the service>", args.scope);
        let (new_text, _) = found.splice(&command, &entry_args, &placeholder);
        print_dry_run(
            &found,
            &new_text,
            (service_config, &before),
            url,
            args.scope,
        );
        return Ok(());
    }
    writable(service_config)?;
    let remote = Remote::new(url)?;
    let key_base = args
        .key_name
        .clone()
        .unwrap_or_else(|| found.client.as_str().to_owned());
    let made: KeyMade = remote
        .post(
            "/console/api/keys",
            json!({"name": key_base, "scope": args.scope, "unique": true}),
            &crate::args::FactorArgs::default(),
        )
        .await
        .context("the service did not make a key, so nothing was changed")?;
    let (new_text, servers_text) = found.splice(&command, &entry_args, &made.token);
    let backup = backup_path(&found.file)?;
    let record = Record::of(
        &found,
        (&new_text, servers_text),
        (backup.clone(), service_config.to_owned()),
        (made.key.clone(), made.key_id.clone()),
        Some(url.to_owned()),
    );
    let record_bytes = serde_json::to_vec_pretty(&record)?;
    // The record and the copy first (nothing refers to them yet), then the
    // service's config (the servers now run there too), then the client's
    // file, its rename the commit.
    let mut written: Vec<&Path> = Vec::new();
    let (config_owner, client_owner) = (owner_of(service_config), owner_of(&found.file));
    let outcome = (|| -> Result<()> {
        super::files::write_private(&record_file, &record_bytes)?;
        written.push(&record_file);
        super::files::write_private(&backup, &found.bytes)?;
        written.push(&backup);
        write_atomically(
            service_config,
            after.as_bytes(),
            Access::Like(service_config),
        )?;
        keep_owner(service_config, config_owner)?;
        write_atomically(&found.file, new_text.as_bytes(), Access::Owner)?;
        keep_owner(&found.file, client_owner)
    })();
    if let Err(e) = outcome {
        for path in written.iter().rev() {
            let _ = std::fs::remove_file(path);
        }
        if std::fs::read_to_string(service_config).is_ok_and(|now| now == after) {
            let _ = write_atomically(
                service_config,
                before.as_bytes(),
                Access::Like(service_config),
            );
        }
        return Err(e.context(format!(
            "wrap --service failed and was undone: {} and {} are as they were; the service's key {:?} was made, revoke it at the service (`plangate keys revoke {}` as its user)",
            found.file.display(),
            service_config.display(),
            made.key,
            made.key_id
        )));
    }
    print_wrapped(
        &found,
        (service_config, &mcp_url),
        &made,
        (&backup, &record_file),
    );
    outln!(
        "Restart {} to use it. Review what it plans: plangate plans show --key {} --server {}",
        found.client.label(),
        plangate_core::shell_word(&made.key),
        remote.base()
    );
    Ok(())
}

/// `wrap --service --dry-run`: the client's file and the service's config
/// as they would be, secrets shown as `[redacted]`.
fn print_dry_run(
    found: &ClientFile,
    new_text: &str,
    (service_config, before): (&Path, &str),
    url: &str,
    scope: plangate_core::Scope,
) {
    let file = found.file.display().to_string();
    let shown_before = clients::redact_secret_fields(&found.text, &found.spans);
    crate::output::lines(&diff(&shown_before, new_text, &file, &file));
    let shown_after = merged_text(
        before,
        found,
        &clients::redact_server_secrets(&found.servers),
    );
    let config = service_config.display().to_string();
    crate::output::lines(&diff(before, &shown_after, &config, &config));
    eprintln!(
        "dry run: nothing was changed. `sudo plangate wrap --service {url}` moves the servers into {config} (env and headers values shown as \"{}\" here, written as they are), asks the service for a {scope} key, and points the client at it through `plangate connect`",
        plangate_core::redact::REDACTED,
    );
}

/// What `wrap --service` did.
fn print_wrapped(
    found: &ClientFile,
    (service_config, mcp_url): (&Path, &str),
    made: &KeyMade,
    (backup, record_file): (&Path, &Path),
) {
    let names: Vec<&str> = found.servers.keys().map(String::as_str).collect();
    outln!(
        "wrapped {} ({}): {} server(s) ({}) moved into the service's config {}; the service takes them within a second",
        found.file.display(),
        found.client.label(),
        names.len(),
        names.join(", "),
        service_config.display()
    );
    outln!(
        "  the client runs `plangate connect --url {mcp_url}` with the service's {} key {:?} (PLANGATE_KEY); the servers' env and headers are no longer in its file",
        made.scope,
        made.key
    );
    outln!(
        "  the original, secrets and all, is kept owner-only at {} (and in the record {})",
        backup.display(),
        record_file.display()
    );
}

/// The service's config with the client's servers added after what it
/// holds, checked to load and to run every server it ran plus the
/// client's — refused when a name is taken.
fn merged(
    before: &str,
    found: &ClientFile,
    path: &Path,
    from_client: &plangate_config::Config,
) -> Result<String> {
    let loads = |text: &str| plangate_config::parse_toml(text, path, &EveryVariable);
    let existing = loads(before).map_err(|errors| {
        anyhow::Error::from(errors).context(format!(
            "the service's config {} does not load as it is; fix it first",
            path.display()
        ))
    })?;
    if let Some(taken) = from_client
        .upstreams
        .keys()
        .find(|name| existing.upstreams.contains_key(*name))
    {
        return Err(UsageError(format!(
            "the service already has an upstream named {:?} ({}); rename it there, or in {}, first",
            taken,
            path.display(),
            found.file.display()
        ))
        .into());
    }
    let after = merged_text(before, found, &found.servers);
    let loaded = loads(&after).map_err(|errors| {
        anyhow::Error::from(errors)
            .context("the service's config with the client's servers does not load (a bug in plangate); nothing was changed")
    })?;
    let expected = existing.upstreams.len() + from_client.upstreams.len();
    if loaded.upstreams.len() != expected
        || from_client
            .upstreams
            .iter()
            .any(|(name, u)| loaded.upstreams.get(name) != Some(u))
    {
        return Err(anyhow!(
            "the service's config with the client's servers would not run the same servers as {} (a bug in plangate); nothing was changed",
            found.file.display()
        ));
    }
    Ok(after)
}

/// `before` with `servers` appended as `[upstreams.NAME]` tables.
fn merged_text(
    before: &str,
    found: &ClientFile,
    servers: &serde_json::Map<String, serde_json::Value>,
) -> String {
    format!(
        "{}\n\n# Moved here from {} ({}) by `plangate wrap --service`.\n{}",
        before.trim_end(),
        found.file.display(),
        found.client.label(),
        clients::upstreams_toml(servers, &found.origin_dir())
    )
}

/// Refuses, before anything is made, when this user cannot write the
/// service's config.
fn writable(path: &Path) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let probe = tempfile::NamedTempFile::new_in(dir);
    if probe.is_err() || std::fs::OpenOptions::new().append(true).open(path).is_err() {
        return Err(UsageError(format!(
            "this user cannot write the service's config {}: run `sudo plangate wrap --service …` (the servers' secrets move where only the service can read them); nothing was changed",
            path.display()
        ))
        .into());
    }
    Ok(())
}

/// A file's owner and group, where the system has them.
fn owner_of(path: &Path) -> Option<(u32, u32)> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt as _;
        std::fs::metadata(path).ok().map(|m| (m.uid(), m.gid()))
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        None
    }
}

/// Gives `path` back the owner it had before it was replaced.
fn keep_owner(path: &Path, owner: Option<(u32, u32)>) -> Result<()> {
    #[cfg(unix)]
    if let Some((uid, gid)) = owner
        && owner_of(path) != Some((uid, gid))
    {
        std::os::unix::fs::chown(path, Some(uid), Some(gid))
            .with_context(|| format!("cannot give {} back its owner", path.display()))?;
    }
    #[cfg(not(unix))]
    let _ = (path, owner);
    Ok(())
}
