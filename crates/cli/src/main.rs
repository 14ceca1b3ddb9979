//! The `plangate` binary.
//!
//! It only parses flags, loads config, builds the gateway from the library
//! crates, serves, and turns outcomes into exit codes: 0 for success, 2 for
//! bad configuration or usage, 1 for anything else. All policy lives in the
//! libraries, so what the binary does is what the tests exercise.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand, ValueEnum};
use plangate_config::{Config, ConfigErrors, ProcessEnv};
use plangate_store::{DataDir, Store, StoreConfig};
use tokio_util::sync::CancellationToken;

mod commands;

/// Exit code for bad configuration or usage.
const EXIT_CONFIG: u8 = 2;

#[derive(Parser, Debug)]
#[command(
    name = "plangate",
    version,
    about = "An MCP gateway that gives any MCP server an enforced plan mode."
)]
struct Cli {
    /// Where plangate keeps its SQLite database and key files.
    #[arg(long, global = true, env = "PLANGATE_DATA_DIR", value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Log line format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Copy, Clone, Debug, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Serve MCP clients (stdio unless --http is given).
    Serve(ServeArgs),
    /// Create, list and revoke API keys.
    #[command(subcommand)]
    Keys(KeysCommand),
    /// Check configuration and show every tool's effect class.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Run the demo website as an MCP server (the embedded demo upstream).
    DemoSite(DemoSiteArgs),
    /// Set a key's mode from outside the agent.
    #[command(subcommand)]
    Mode(ModeCommand),
}

#[derive(Subcommand, Debug)]
enum ModeCommand {
    /// Set the mode of a key; in force at the key's next call, and told to
    /// its agent once.
    Set {
        #[command(flatten)]
        source: ConfigSourceArgs,
        /// The key's name or id.
        #[arg(long)]
        key: String,
        /// The mode: `default` or one defined in the config (e.g. `plan`).
        mode: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

/// Where the upstream configuration comes from.
#[derive(Args, Debug, Clone)]
pub struct ConfigSourceArgs {
    /// plangate.toml to load (default: ./plangate.toml if present, else the
    /// embedded demo site).
    #[arg(
        long,
        env = "PLANGATE_CONFIG",
        value_name = "FILE",
        conflicts_with = "mcp_config"
    )]
    config: Option<PathBuf>,
    /// A Claude Desktop / Cursor `mcpServers` or VS Code `servers` JSON file,
    /// used as-is.
    #[arg(long, value_name = "FILE")]
    mcp_config: Option<PathBuf>,
}

#[derive(Args, Debug)]
struct ServeArgs {
    #[command(flatten)]
    source: ConfigSourceArgs,
    /// Serve over stdin/stdout (the default).
    #[arg(long, conflicts_with = "http")]
    stdio: bool,
    /// Serve Streamable HTTP at http://ADDR/mcp, e.g. 127.0.0.1:7070.
    #[arg(long, value_name = "ADDR")]
    http: Option<String>,
}

#[derive(Subcommand, Debug)]
enum KeysCommand {
    /// Create a key and print it once.
    Create {
        /// A name for the key (who or what uses it).
        #[arg(long)]
        name: String,
        /// What the key may do.
        #[arg(long, value_enum)]
        scope: ScopeArg,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// List keys (never their tokens).
    List {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Revoke a key by name or id.
    Revoke {
        /// The key's name or id.
        key: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Copy, Clone, Debug, ValueEnum)]
enum ScopeArg {
    Read,
    Plan,
    Write,
}

impl From<ScopeArg> for plangate_core::Scope {
    fn from(s: ScopeArg) -> Self {
        match s {
            ScopeArg::Read => plangate_core::Scope::Read,
            ScopeArg::Plan => plangate_core::Scope::Plan,
            ScopeArg::Write => plangate_core::Scope::Write,
        }
    }
}

#[derive(Subcommand, Debug)]
enum ConfigCommand {
    /// Load the config, connect to every upstream and print each tool's
    /// effect class and where it came from.
    Check {
        #[command(flatten)]
        source: ConfigSourceArgs,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Args, Debug)]
struct DemoSiteArgs {
    /// The site's state file (created with demo content if missing).
    #[arg(long, value_name = "FILE")]
    state: Option<PathBuf>,
    /// Serve Streamable HTTP at http://ADDR/mcp instead of stdio.
    #[arg(long, value_name = "ADDR")]
    http: Option<String>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let default_filter = match cli.command {
        Command::Serve(_) => "info,rmcp=warn",
        _ => "warn",
    };
    init_tracing(cli.log_format, default_filter);
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("plangate: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if let Some(errors) = e.downcast_ref::<ConfigErrors>() {
                eprintln!("plangate: the configuration has errors:\n{errors}");
                return ExitCode::from(EXIT_CONFIG);
            }
            if let Some(usage) = e.downcast_ref::<commands::UsageError>() {
                eprintln!("plangate: {usage}");
                return ExitCode::from(EXIT_CONFIG);
            }
            eprintln!("plangate: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Logs go to stderr only: over stdio, stdout is the MCP protocol.
/// `PLANGATE_LOG` takes an `EnvFilter` directive (e.g. `debug`).
fn init_tracing(format: LogFormat, default_filter: &str) {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_env("PLANGATE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

async fn run(cli: Cli) -> Result<()> {
    let data_dir = cli
        .data_dir
        .clone()
        .unwrap_or_else(plangate_store::default_data_dir);
    match cli.command {
        Command::Serve(args) => serve(args, &data_dir).await,
        Command::Keys(cmd) => {
            let store = open_store(&data_dir).await?;
            match cmd {
                KeysCommand::Create { name, scope, json } => {
                    commands::keys_create(&*store, &name, scope.into(), json).await
                }
                KeysCommand::List { json } => commands::keys_list(&*store, json).await,
                KeysCommand::Revoke { key, json } => {
                    commands::keys_revoke(&*store, &key, json).await
                }
            }
        }
        Command::Config(ConfigCommand::Check { source, json }) => {
            let config = load_config(&source, &data_dir)?;
            commands::config_check(config, json).await
        }
        Command::DemoSite(args) => demo_site(args).await,
        Command::Mode(ModeCommand::Set {
            source,
            key,
            mode,
            json,
        }) => {
            let config = load_config(&source, &data_dir)?;
            let store = open_store(&data_dir).await?;
            commands::mode_set(&config, store, &key, &mode, json).await
        }
    }
}

async fn open_store(data_dir: &Path) -> Result<Arc<dyn Store>> {
    let dir = DataDir::open(data_dir)
        .with_context(|| format!("cannot use data dir {}", data_dir.display()))?;
    StoreConfig::Sqlite(dir.sqlite_path())
        .open()
        .await
        .with_context(|| format!("cannot open the database in {}", data_dir.display()))
}

/// The seal and signing keys: from `PLANGATE_SEAL_KEY` /
/// `PLANGATE_SIGNING_KEY` when set (replicas share them), else generated
/// into the data dir on first start.
fn key_material(data_dir: &Path) -> Result<plangate_store::KeyMaterial> {
    let dir = DataDir::open(data_dir)
        .with_context(|| format!("cannot use data dir {}", data_dir.display()))?;
    let seal = std::env::var(plangate_store::SEAL_KEY_VAR).ok();
    let signing = std::env::var(plangate_store::SIGNING_KEY_VAR).ok();
    Ok(dir.key_material(seal.as_deref(), signing.as_deref())?)
}

/// Loads the config named by flags or environment; else `./plangate.toml`;
/// else the embedded demo site (zero set-up).
fn load_config(source: &ConfigSourceArgs, data_dir: &Path) -> Result<Config> {
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

async fn serve(args: ServeArgs, data_dir: &Path) -> Result<()> {
    let config = load_config(&args.source, data_dir)?;
    let store = open_store(data_dir).await?;
    let material = key_material(data_dir)?;
    let source = config.source.clone();
    let gw = plangate_gateway::Gateway::build(config, store.clone(), material).await;
    let catalog = gw.catalog();
    tracing::info!(
        config = %commands::describe_source(&source),
        data_dir = %data_dir.display(),
        upstreams = ?catalog.upstream_names,
        tools = catalog.tools.len(),
        "plangate ready"
    );
    let result = match args.http {
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(&addr)
                .await
                .map_err(|e| commands::UsageError(format!("cannot listen on {addr}: {e}")))?;
            let local = listener.local_addr()?;
            eprintln!("plangate serving http://{local}/mcp");
            if store.list_keys().await?.iter().all(|k| !k.is_active()) {
                eprintln!(
                    "no API keys yet: create one with `plangate --data-dir {} keys create --name NAME --scope write`",
                    data_dir.display()
                );
            }
            let shutdown = CancellationToken::new();
            let stop = shutdown.clone();
            tokio::spawn(async move {
                wait_for_signal().await;
                stop.cancel();
            });
            plangate_gateway::http::serve(gw.clone(), listener, shutdown)
                .await
                .map_err(anyhow::Error::from)
        }
        None => {
            let token = std::env::var("PLANGATE_KEY").ok().filter(|t| !t.is_empty());
            tokio::select! {
                r = plangate_gateway::serve_stdio(gw.clone(), token) => r.map_err(anyhow::Error::from),
                () = wait_for_signal() => Ok(()),
            }
        }
    };
    gw.shutdown().await;
    result
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

async fn demo_site(args: DemoSiteArgs) -> Result<()> {
    let state = args
        .state
        .unwrap_or_else(|| PathBuf::from("demo-site.json"));
    match args.http {
        None => plangate_demo_site::serve_stdio(state).await,
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(&addr)
                .await
                .map_err(|e| commands::UsageError(format!("cannot listen on {addr}: {e}")))?;
            eprintln!(
                "demo-site listening on http://{}/mcp",
                listener.local_addr()?
            );
            let shutdown = CancellationToken::new();
            let stop = shutdown.clone();
            tokio::spawn(async move {
                wait_for_signal().await;
                stop.cancel();
            });
            plangate_demo_site::serve_http(listener, state, shutdown).await
        }
    }
}
