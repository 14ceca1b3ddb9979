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
use args::{
    AuditCommand, Cli, Command, ConfigCommand, ConfigSourceArgs, DemoSiteArgs, KeysCommand,
    LogFormat, ModeCommand, OperatorCommand, PlansCommand, PolicyCommand, ServeArgs, ToolsCommand,
    UpstreamCommand,
};
use clap::Parser;
use plangate_config::{Config, ConfigErrors, ProcessEnv};
use plangate_store::{DataDir, Store, StoreConfig};
use tokio_util::sync::CancellationToken;

#[cfg(not(target_env = "msvc"))]
mod alloc;
mod args;
mod audit;
mod catalog;
mod commands;
mod demo;
mod otel;
mod output;
mod plans;
mod policy;
mod preview_text;
mod tools;
mod upstream;
mod wrap;

/// Exit code for bad configuration or usage.
const EXIT_CONFIG: u8 = 2;

fn main() -> ExitCode {
    let cli = Cli::parse();
    // PostgreSQL's notices (e.g. "relation … already exists, skipping" from
    // the idempotent migrations at every start) are not news to an operator.
    let default_filter = match cli.command {
        Command::Serve(_) => "info,rmcp=warn,sqlx::postgres::notice=warn",
        _ => "warn",
    };
    // A stdio server has one client: one worker thread serves it without
    // handing each message between threads (every hand-off is a thread
    // wake-up, and sixteen agents each running plangate on two cores pay
    // for all of them). Everything else gets a worker per core.
    let one_client = match &cli.command {
        Command::Serve(args) => args.http.is_none(),
        Command::DemoSite(args) => args.http.is_none(),
        _ => false,
    };
    let runtime = if one_client {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
    } else {
        tokio::runtime::Runtime::new()
    };
    let runtime = match runtime {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("plangate: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Traces from what serves or calls upstreams; not from the demo site
    // or the counting upstream a plangate starts (same binary, same
    // environment), which make no spans of their own.
    let traced = !matches!(
        cli.command,
        Command::DemoSite(_)
            | Command::CountingUpstream { .. }
            | Command::Completions { .. }
            | Command::Man { .. }
    );
    let traces = init_tracing(
        cli.log_format,
        default_filter,
        traced.then(|| runtime.handle()),
    );
    let outcome = runtime.block_on(run(cli));
    // The last spans go out before the process ends.
    if let Some(provider) = traces {
        let _ = provider.shutdown();
    }
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if let Some(errors) = e.downcast_ref::<ConfigErrors>() {
                output::error(&format!("the configuration has errors:\n{errors}"));
                return ExitCode::from(EXIT_CONFIG);
            }
            if let Some(usage) = e.downcast_ref::<commands::UsageError>() {
                output::error(&usage.to_string());
                return ExitCode::from(EXIT_CONFIG);
            }
            // The reader of stdout went away (`| head`): end quietly, with
            // success (see `output`).
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) {
                return ExitCode::from(output::BROKEN_PIPE_STATUS);
            }
            output::error(&chain_text(&e));
            ExitCode::FAILURE
        }
    }
}

/// An error and its causes as one line, `context: cause: cause`, leaving
/// out a cause whose text the line already ends with (an error that
/// prints its source, as the store's i/o errors do, would otherwise say
/// the operating system's message twice).
fn chain_text(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if line.ends_with(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

/// Logs go to stderr only: over stdio, stdout is the MCP protocol.
/// `PLANGATE_LOG` takes an `EnvFilter` directive (e.g. `debug`). When the
/// environment names an OTLP collector, the gateway's spans go there too
/// ([`otel`]); the provider returned is shut down at exit.
fn init_tracing(
    format: LogFormat,
    default_filter: &str,
    runtime: Option<&tokio::runtime::Handle>,
) -> Option<opentelemetry_sdk::trace::SdkTracerProvider> {
    use std::io::IsTerminal;
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let filter = tracing_subscriber::EnvFilter::try_from_env("PLANGATE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    // rmcp logs whole JSON-RPC messages (tool arguments, results,
    // elicitation answers) at DEBUG and upstream error messages at WARN in
    // `rmcp::service`, and raw unparsable lines at DEBUG elsewhere: argument
    // values must never reach a log line, whatever PLANGATE_LOG says.
    let no_payloads = tracing_subscriber::filter::filter_fn(|meta| {
        let target = meta.target();
        if target == plangate_gateway::telemetry::TARGET {
            // Spans for OpenTelemetry only: log lines stay as they are.
            false
        } else if target == "rmcp::service" || target.starts_with("rmcp::service::") {
            *meta.level() <= tracing::Level::ERROR
        } else if target == "rmcp" || target.starts_with("rmcp::") {
            *meta.level() <= tracing::Level::WARN
        } else {
            true
        }
    });
    let ansi = std::io::stderr().is_terminal();
    let layer = tracing_subscriber::fmt::layer()
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    let layer = match format {
        LogFormat::Text => layer.boxed(),
        LogFormat::Json => layer.json().boxed(),
    };
    let provider = match runtime.filter(|_| otel::wanted()) {
        Some(runtime) => match otel::provider(runtime.clone()) {
            Ok(provider) => Some(provider),
            Err(e) => {
                eprintln!("plangate: traces are not exported: {e:#}");
                None
            }
        },
        None => None,
    };
    let traces = provider.as_ref().map(|provider| {
        use opentelemetry::trace::TracerProvider as _;
        plangate_gateway::telemetry::enable();
        tracing_opentelemetry::layer()
            .with_tracer(provider.tracer("plangate"))
            .with_filter(tracing_subscriber::filter::filter_fn(|meta| {
                meta.target() == plangate_gateway::telemetry::TARGET
            }))
    });
    tracing_subscriber::registry()
        .with(layer.with_filter(no_payloads).with_filter(filter))
        .with(traces)
        .init();
    provider
}

async fn run(cli: Cli) -> Result<()> {
    DATABASE_URL.get_or_init(|| cli.database.clone());
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
        Command::Operator(cmd) => {
            let store = open_store(&data_dir).await?;
            match cmd {
                OperatorCommand::Token { name, json } => {
                    commands::operator_token(&*store, &name, json).await
                }
                OperatorCommand::List { json } => commands::operator_list(&*store, json).await,
                OperatorCommand::Revoke { operator, json } => {
                    commands::operator_revoke(&*store, &operator, json).await
                }
            }
        }
        Command::Config(ConfigCommand::Check { source, json }) => {
            let config = config_to_call(&source, &data_dir).await?;
            // The pins, when the store can be read, so changed definitions
            // are flagged; config check works without a store too.
            let (pins, vault) = match open_store(&data_dir).await {
                Ok(store) => {
                    let pins =
                        plangate_gateway::key_log::KeyLog::<plangate_core::ToolPins>::with_capacity(
                            store.clone(),
                            1,
                        )
                        .state(plangate_core::TOOLS_LOG)
                        .await
                        .ok();
                    let vault = key_material(&data_dir).ok().map(|material| {
                        plangate_gateway::upstream::oauth::Vault { store, material }
                    });
                    (pins, vault)
                }
                Err(_) => (None, None),
            };
            commands::config_check(config, pins, vault, json).await
        }
        Command::Tools(cmd) => tools_command(cmd, &data_dir).await,
        Command::Upstream(UpstreamCommand::ClientMetadata { url }) => {
            upstream::client_metadata(&url)
        }
        Command::Upstream(UpstreamCommand::Login {
            source,
            name,
            timeout,
            scopes,
        }) => {
            let config = load_config(&source, &data_dir)?;
            let vault = vault_of(&data_dir).await?;
            upstream::login(&config, &name, vault, timeout, &scopes).await
        }
        Command::Upstream(UpstreamCommand::Logout { source, name }) => {
            let config = load_config(&source, &data_dir)?;
            let vault = vault_of(&data_dir).await?;
            upstream::logout(&config, &name, vault).await
        }
        Command::Policy(PolicyCommand::Test {
            source,
            key,
            tool,
            arguments,
            effect,
            json,
        }) => {
            let config = config_to_call(&source, &data_dir).await?;
            let test = policy::Test {
                key: &key,
                tool: &tool,
                arguments: &arguments,
                effect: effect.as_deref(),
            };
            let store = open_store(&data_dir).await?;
            policy::test(config, store, key_material(&data_dir)?, test, json).await
        }
        Command::DemoSite(args) => demo_site(args).await,
        Command::Wrap {
            target,
            scope,
            key_name,
            to,
            dry_run,
        } => {
            let args = wrap::Wrap {
                target: wrap::Target {
                    from: target.from,
                    client: target.client,
                    project: target.project,
                },
                scope: scope.into(),
                key_name,
                to,
                dry_run,
            };
            wrap::wrap(args, &data_dir, async || open_store(&data_dir).await).await
        }
        Command::Unwrap { target, force } => {
            let target = wrap::Target {
                from: target.from,
                client: target.client,
                project: target.project,
            };
            wrap::unwrap(target, force, &data_dir).await
        }
        Command::Completions { shell } => {
            use clap::CommandFactory as _;
            let mut out = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "plangate", &mut out);
            output::write_all(&out)
        }
        Command::Man { dir } => {
            use clap::CommandFactory as _;
            let command = Cli::command();
            match dir {
                Some(dir) => {
                    std::fs::create_dir_all(&dir)
                        .with_context(|| format!("cannot create {}", dir.display()))?;
                    clap_mangen::generate_to(command, &dir)
                        .with_context(|| format!("cannot write pages into {}", dir.display()))?;
                    eprintln!("wrote the manual pages into {}", dir.display());
                    Ok(())
                }
                None => {
                    let mut out = Vec::new();
                    clap_mangen::Man::new(command).render(&mut out)?;
                    output::write_all(&out)
                }
            }
        }
        Command::CountingUpstream { log } => plangate_demo_site::counting::serve_stdio(log).await,
        Command::Mode(ModeCommand::Set {
            source,
            key,
            mode,
            lock,
            unlock,
            json,
        }) => {
            // `plan` and `default` are always defined: setting them needs
            // no upstream config, so a broken or absent one cannot keep an
            // operator from locking an agent down.
            let config = match load_config(&source, &data_dir) {
                Ok(config) => config,
                Err(e)
                    if mode.as_deref().is_none_or(|m| {
                        m == plangate_core::PLAN_MODE || m == plangate_core::DEFAULT_MODE
                    }) =>
                {
                    eprintln!(
                        "note: the config was not loaded ({}); `plan` and `default` need none",
                        chain_text(&e)
                    );
                    plangate_config::Config::new(
                        plangate_config::ConfigSource::Builtin("built-in modes only"),
                        Default::default(),
                    )
                }
                Err(e) => return Err(e),
            };
            let store = open_store(&data_dir).await?;
            let change = match (lock, unlock) {
                (true, _) => plangate_gateway::operator::LockChange::Lock,
                (_, true) => plangate_gateway::operator::LockChange::Unlock,
                _ => plangate_gateway::operator::LockChange::Keep,
            };
            commands::mode_set(&config, store, &key, mode.as_deref(), change, json).await
        }
        Command::Plans(cmd) => plans_command(cmd, &data_dir).await,
        Command::Audit(AuditCommand::Export {
            key,
            since,
            out,
            json,
        }) => {
            let store = open_store(&data_dir).await?;
            audit::export(&*store, key.as_deref(), since, out.as_deref(), json).await
        }
        Command::Demo { json } => demo::run(json).await,
        Command::Catalog { source, json, html } => {
            let config = load_config(&source, &data_dir)?;
            let format = match (json, html) {
                (true, _) => catalog::Format::Json,
                (_, true) => catalog::Format::Html,
                _ => catalog::Format::Table,
            };
            catalog::run(&config, format)
        }
    }
}

async fn tools_command(cmd: ToolsCommand, data_dir: &Path) -> Result<()> {
    use plangate_gateway::tool_pins::Decision;
    let (source, upstream, tool, hash, decision, json) = match cmd {
        ToolsCommand::List { source, json } => {
            let config = load_config(&source, data_dir)?;
            return tools::list(&config, open_store(data_dir).await?, json).await;
        }
        ToolsCommand::Accept {
            source,
            upstream,
            tool,
            hash,
            allow_downgrade,
            json,
        } => (
            source,
            upstream,
            tool,
            hash,
            Decision::Accept { allow_downgrade },
            json,
        ),
        ToolsCommand::Reject {
            source,
            upstream,
            tool,
            hash,
            json,
        } => (source, upstream, tool, hash, Decision::Reject, json),
    };
    let config = load_config(&source, data_dir)?;
    let store = open_store(data_dir).await?;
    tools::decide(
        &config,
        store,
        &upstream,
        &tool,
        hash.as_deref(),
        decision,
        json,
    )
    .await
}

async fn plans_command(cmd: PlansCommand, data_dir: &Path) -> Result<()> {
    match cmd {
        PlansCommand::List { source, json } => {
            let config = load_config(&source, data_dir)?;
            plans::list(&config, open_store(data_dir).await?, json).await
        }
        PlansCommand::Show { source, key, json } => {
            let config = load_config(&source, data_dir)?;
            plans::show(&config, open_store(data_dir).await?, &key, json).await
        }
        PlansCommand::Reject {
            key,
            step,
            reason,
            json,
        } => plans::reject(open_store(data_dir).await?, &key, &step, &reason, json).await,
        PlansCommand::Amend {
            source,
            key,
            step,
            arguments,
            revision,
            json,
        } => {
            let config = config_to_call(&source, data_dir).await?;
            let store = open_store(data_dir).await?;
            let material = key_material(data_dir)?;
            let change = plans::Amendment {
                step: &step,
                arguments: &arguments,
                seen_revision: revision,
            };
            plans::amend(config, store, material, &key, change, json).await
        }
        PlansCommand::Diff { key, since, json } => {
            plans::diff(open_store(data_dir).await?, &key, since, json).await
        }
        PlansCommand::Discard {
            source,
            key,
            steps,
            json,
        } => {
            let config = load_config(&source, data_dir)?;
            plans::discard(&config, open_store(data_dir).await?, &key, &steps, json).await
        }
        PlansCommand::Retry {
            source,
            key,
            step,
            json,
        } => {
            let config = config_to_call(&source, data_dir).await?;
            let store = open_store(data_dir).await?;
            let material = key_material(data_dir)?;
            plans::retry(config, store, material, &key, &step, json).await
        }
        PlansCommand::Approve {
            key,
            digest,
            steps,
            json,
        } => {
            let store = open_store(data_dir).await?;
            let approver = std::env::var("PLANGATE_KEY").ok().filter(|t| !t.is_empty());
            plans::approve(
                store,
                &key,
                digest.as_deref(),
                &steps,
                approver.as_deref(),
                json,
            )
            .await
        }
        PlansCommand::Apply {
            source,
            key,
            digest,
            steps,
            json,
        } => {
            let config = config_to_call(&source, data_dir).await?;
            let store = open_store(data_dir).await?;
            let material = key_material(data_dir)?;
            plans::apply_cmd(
                config,
                store,
                material,
                &key,
                digest.as_deref(),
                &steps,
                json,
            )
            .await
        }
    }
}

/// `--database` / `PLANGATE_DATABASE_URL`, recorded once by `run` so that
/// every command's [`open_store`] honours it.
static DATABASE_URL: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();

/// The store: the database named by `--database` if given, else the data
/// dir's SQLite file. Messages show a URL with its password redacted.
async fn open_store(data_dir: &Path) -> Result<Arc<dyn Store>> {
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
async fn vault_of(data_dir: &std::path::Path) -> Result<plangate_gateway::upstream::oauth::Vault> {
    Ok(plangate_gateway::upstream::oauth::Vault {
        store: open_store(data_dir).await?,
        material: key_material(data_dir)?,
    })
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

/// The config for a command that calls upstreams (`plans apply|retry`,
/// `config check`). When none was found and the data dir's plans name
/// upstreams the embedded demo site does not have, starting the demo would
/// answer for the wrong servers (and leave its state file in the data
/// dir): the command refuses and says which config to pass.
async fn config_to_call(source: &ConfigSourceArgs, data_dir: &Path) -> Result<Config> {
    let config = load_config(source, data_dir)?;
    if !matches!(config.source, plangate_config::ConfigSource::Builtin(_)) {
        return Ok(config);
    }
    // Nothing to compare with when there is no store yet.
    let Ok(store) = open_store(data_dir).await else {
        return Ok(config);
    };
    let log = plangate_gateway::key_log::KeyLog::new(store.clone());
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

async fn serve(args: ServeArgs, data_dir: &Path) -> Result<()> {
    // Listed as an upstream of a plangate (the marker it sets on what it
    // starts): serving would start the same config again, and again.
    if let Ok(name) = std::env::var(plangate_gateway::upstream::UPSTREAM_MARKER) {
        return Err(commands::UsageError(format!(
            "this plangate was started as upstream {name:?} of another plangate, which would start itself again and again: remove the {name:?} entry (the one that runs plangate) from the config or --mcp-config file that plangate serves"
        ))
        .into());
    }
    // Bind before anything starts: a port in use is the first thing said,
    // not the last after every upstream came up.
    let listener = match &args.http {
        Some(addr) => Some(listen(addr).await?),
        None => None,
    };
    let config = load_config(&args.source, data_dir)?;
    let watched = match (&config.source, args.watch_config) {
        (_, false) => None,
        (
            plangate_config::ConfigSource::Toml(path)
            | plangate_config::ConfigSource::McpJson(path),
            true,
        ) => Some(path.clone()),
        (plangate_config::ConfigSource::Builtin(what), true) => {
            return Err(commands::UsageError(format!(
                "--watch-config: there is no config file to watch (plangate serves {what}); give one with --config FILE or --mcp-config FILE"
            ))
            .into());
        }
    };
    let store = open_store(data_dir).await?;
    let material = key_material(data_dir)?;
    let source = config.source.clone();
    let gw = plangate_gateway::Gateway::build(config, store.clone(), material).await;
    let reloader = tokio::spawn(reload_when_asked(
        gw.clone(),
        args.source.clone(),
        data_dir.to_owned(),
        watched,
    ));
    let catalog = gw.catalog();
    tracing::info!(
        config = %commands::describe_source(&source),
        data_dir = %data_dir.display(),
        upstreams = ?catalog.upstream_names,
        tools = catalog.tools.len(),
        "plangate ready"
    );
    let result = match listener {
        Some(listener) => {
            let local = listener.local_addr()?;
            eprintln!("plangate serving http://{local}/mcp");
            eprintln!(
                "web console at http://{local}/console (log in with a token from `plangate operator token --name NAME`)"
            );
            if store.list_keys().await?.iter().all(|k| !k.is_active()) {
                eprintln!(
                    "no API keys yet: create the agent's with `plangate --data-dir {} keys create --name agent --scope plan` (its writes become plan steps that wait for your approval)",
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
            // A key made with another data dir is the usual reason a
            // stdio agent is refused: say so where the client logs stderr.
            if let Some(token) = &token
                && let Ok(None) = store.authenticate(token).await
            {
                let active = store
                    .list_keys()
                    .await
                    .map(|keys| keys.iter().filter(|k| k.is_active()).count())
                    .unwrap_or(0);
                eprintln!(
                    "plangate: PLANGATE_KEY is not an active key of data dir {} ({active} active key(s) there); every call will be refused. If the key was made with another --data-dir or PLANGATE_DATA_DIR (or --database), give the same one here; `plangate keys list` shows a data dir's keys",
                    data_dir.display()
                );
            }
            tokio::select! {
                r = plangate_gateway::serve_stdio(gw.clone(), token) => r.map_err(anyhow::Error::from),
                () = wait_for_signal() => Ok(()),
            }
        }
    };
    reloader.abort();
    gw.shutdown().await;
    result
}

/// Reloads the config on `SIGHUP` and, with `--watch-config`, when the
/// file's content changes (checked every second; a change is read again
/// after a moment, so an editor's half-written file is not taken). A file
/// with mistakes is refused with every one of them in the log, and the
/// running config stays.
async fn reload_when_asked(
    gw: Arc<plangate_gateway::Gateway>,
    source: ConfigSourceArgs,
    data_dir: PathBuf,
    watched: Option<PathBuf>,
) {
    #[cfg(unix)]
    let mut hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
    let fingerprint = |path: &Path| std::fs::read(path).ok();
    let mut seen = watched.as_deref().and_then(fingerprint);
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let hup = async {
            #[cfg(unix)]
            if let Some(h) = hangup.as_mut() {
                return h.recv().await;
            }
            std::future::pending::<Option<()>>().await
        };
        let why = tokio::select! {
            Some(()) = hup => "SIGHUP".to_owned(),
            _ = tick.tick(), if watched.is_some() => {
                let Some(path) = watched.as_deref() else { continue };
                let now = fingerprint(path);
                if now == seen {
                    continue;
                }
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                seen = fingerprint(path);
                format!("{} changed", path.display())
            }
        };
        match load_config(&source, &data_dir) {
            Err(e) => {
                let what = match e.downcast_ref::<ConfigErrors>() {
                    Some(errors) => format!("the configuration has errors:\n{errors}"),
                    None => chain_text(&e),
                };
                tracing::error!("config not reloaded ({why}); the running config stays: {what}");
            }
            Ok(config) => {
                let from = commands::describe_source(&config.source);
                let done = gw.reload(config).await;
                tracing::info!(config = %from, "config reloaded ({why}): {done}");
            }
        }
    }
}

/// Binds `--http ADDR`, with errors that say what to give instead: a bare
/// port gets the address forms it could mean, a port in use says so.
async fn listen(addr: &str) -> Result<tokio::net::TcpListener> {
    if !addr.is_empty() && addr.bytes().all(|b| b.is_ascii_digit()) {
        return Err(commands::UsageError(format!(
            "--http {addr}: give an address with the port, e.g. 127.0.0.1:{addr} (this machine only) or 0.0.0.0:{addr} (every interface)"
        ))
        .into());
    }
    tokio::net::TcpListener::bind(addr).await.map_err(|e| {
        let why = match e.kind() {
            std::io::ErrorKind::AddrInUse => format!(
                "another process is already listening there: stop it, or choose another port (e.g. {})",
                addr.rsplit_once(':')
                    .map_or_else(|| "127.0.0.1:0".to_owned(), |(host, _)| format!("{host}:0 for any free one"))
            ),
            std::io::ErrorKind::InvalidInput => {
                "not an address: use HOST:PORT, e.g. 127.0.0.1:7070".to_owned()
            }
            _ => e.to_string(),
        };
        commands::UsageError(format!("cannot listen on {addr}: {why}")).into()
    })
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
            let listener = listen(&addr).await?;
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
