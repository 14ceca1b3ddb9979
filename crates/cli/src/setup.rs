//! What a command opens before it runs: the store (the data dir's SQLite
//! file or `--database`), the key material, and the config (flags,
//! environment, `./plangate.toml`, else the embedded demo site). Apart
//! from dispatch so every command finds them the same way.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use plangate_config::{Config, ProcessEnv};
use plangate_store::{DataDir, KeyMaterial, Store, StoreConfig};

use crate::args::ConfigSourceArgs;
use crate::commands;

/// `--database` / `PLANGATE_DATABASE_URL`, recorded once by
/// [`use_database`] so that every command's [`open_store`] honours it.
static DATABASE_URL: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();

/// Whether a store is there to read without making one: `--database`
/// names one, or the data dir exists (a command that only looks, such as
/// `config check`, does not create it).
pub(crate) fn store_exists(data_dir: &Path) -> bool {
    DATABASE_URL.get().and_then(Option::as_deref).is_some() || data_dir.exists()
}

/// Records `--database` (or `PLANGATE_DATABASE_URL`) for every
/// [`open_store`] of this process; the first call holds.
pub(crate) fn use_database(url: Option<String>) {
    DATABASE_URL.get_or_init(|| url);
}

/// The store: the database named by `--database` if given, else the data
/// dir's SQLite file. Messages show a URL with its password redacted.
pub(crate) async fn open_store(data_dir: &Path) -> Result<Arc<dyn Store>> {
    if let Some(url) = DATABASE_URL.get().and_then(Option::as_deref) {
        let config = StoreConfig::from_url(url)
            .map_err(|e| commands::UsageError(format!("--database: {e}")))?;
        return config
            .open()
            .await
            .with_context(|| format!("cannot open the database ({config})"));
    }
    let dir = DataDir::open(data_dir)
        .with_context(|| format!("cannot use data dir {}", data_dir.display()))?;
    StoreConfig::Sqlite(dir.sqlite_path())
        .open()
        .await
        .with_context(|| format!("cannot open the database in {}", data_dir.display()))
}

/// The store and seal key of `data_dir`: where upstreams' OAuth
/// credentials are kept, sealed.
pub(crate) async fn vault_of(
    data_dir: &std::path::Path,
) -> Result<plangate_gateway::upstream::oauth::Vault> {
    Ok(plangate_gateway::upstream::oauth::Vault {
        store: open_store(data_dir).await?,
        material: key_material(data_dir)?,
    })
}

/// The seal, signing and log keys: from `PLANGATE_SEAL_KEY` /
/// `PLANGATE_SIGNING_KEY` / `PLANGATE_LOG_KEY` when set (replicas share
/// them), else generated into the data dir on first start.
pub(crate) fn key_material(data_dir: &Path) -> Result<plangate_store::KeyMaterial> {
    let dir = DataDir::open(data_dir)
        .with_context(|| format!("cannot use data dir {}", data_dir.display()))?;
    let seal = std::env::var(plangate_store::SEAL_KEY_VAR).ok();
    let signing = std::env::var(plangate_store::SIGNING_KEY_VAR).ok();
    let log = std::env::var(plangate_store::LOG_KEY_VAR).ok();
    Ok(dir.key_material(&plangate_store::KeysFromEnv {
        seal: seal.as_deref(),
        signing: signing.as_deref(),
        log: log.as_deref(),
    })?)
}

/// The key that signs and checks the event log (one of
/// [`key_material`]'s), for commands that read or write a key's log.
pub(crate) fn log_key(data_dir: &Path) -> Result<std::sync::Arc<plangate_store::LogKey>> {
    Ok(key_material(data_dir)?.log_key())
}

/// Loads the config named by flags or environment; else `./plangate.toml`;
/// else the embedded demo site (zero set-up).
pub(crate) fn load_config(source: &ConfigSourceArgs, data_dir: &Path) -> Result<Config> {
    if let Some(path) = &source.mcp_config {
        return Ok(plangate_config::load_mcp_json(path, &ProcessEnv)?);
    }
    if let Some(path) = &source.config {
        return Ok(plangate_config::load_toml(path, &ProcessEnv)?);
    }
    let local = Path::new("plangate.toml");
    if local.exists() {
        return Ok(plangate_config::load_toml(local, &ProcessEnv)?);
    }
    let exe = std::env::current_exe().context("cannot find plangate's own executable")?;
    Ok(commands::demo_config(
        &exe,
        &data_dir.join("demo-site.json"),
    ))
}

/// The config with the built-in modes (`plan` and `default`) and nothing
/// else: for a command that can do its work without the configured one
/// when that does not load.
pub(crate) fn builtin_modes() -> Config {
    Config::new(
        plangate_config::ConfigSource::Builtin("built-in modes only"),
        Default::default(),
    )
}

/// What a command that calls upstreams opens: the config
/// ([`config_to_call`]), the store and the key material.
pub(crate) async fn to_call(
    source: &ConfigSourceArgs,
    data_dir: &Path,
) -> Result<(Config, Arc<dyn Store>, KeyMaterial)> {
    let config = config_to_call(source, data_dir).await?;
    Ok((config, open_store(data_dir).await?, key_material(data_dir)?))
}

/// The config for a command that calls upstreams (`plans apply|retry`,
/// `config check`). When none was found and the data dir's plans name
/// upstreams the embedded demo site does not have, starting the demo would
/// answer for the wrong servers (and leave its state file in the data
/// dir): the command refuses and says which config to pass.
pub(crate) async fn config_to_call(source: &ConfigSourceArgs, data_dir: &Path) -> Result<Config> {
    let config = load_config(source, data_dir)?;
    if !matches!(config.source, plangate_config::ConfigSource::Builtin(_)) {
        return Ok(config);
    }
    // Nothing to compare with when there is no store yet.
    let Ok(store) = open_store(data_dir).await else {
        return Ok(config);
    };
    let Ok(log_key) = log_key(data_dir) else {
        return Ok(config);
    };
    let log = plangate_gateway::key_log::KeyLog::new(store.clone(), log_key);
    let mut named = std::collections::BTreeSet::new();
    for key_id in store.keys_with_events().await? {
        let Ok(state) = log.state(&key_id).await else {
            continue;
        };
        named.extend(
            state
                .steps
                .iter()
                .map(|s| s.record.server.clone())
                .filter(|u| !config.upstreams.contains_key(u)),
        );
    }
    if named.is_empty() {
        return Ok(config);
    }
    let named: Vec<String> = named.into_iter().map(|u| format!("{u:?}")).collect();
    Err(commands::UsageError(format!(
        "no config was found (no --config, --mcp-config, PLANGATE_CONFIG or ./plangate.toml here), and the plans in data dir {} name upstream(s) {} that the embedded demo site does not have: pass the config `plangate serve` was given, e.g. --config /path/to/plangate.toml or --mcp-config /path/to/mcp.json",
        data_dir.display(),
        named.join(", ")
    ))
    .into())
}
