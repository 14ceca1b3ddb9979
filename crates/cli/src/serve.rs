//! Long-running processes: `plangate serve` (stdio or HTTP, with the
//! config reloaded on SIGHUP or a file change) and `plangate demo-site`.
//! Apart from the one-shot commands, as only these bind a port, wait for
//! signals and shut down in order.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Result;
use plangate_config::ConfigErrors;
use tokio_util::sync::CancellationToken;

use crate::args::{ConfigSourceArgs, ConsoleArgs, DemoSiteArgs, ServeArgs};
use crate::chain_text;
use crate::commands;
use crate::setup::{key_material, load_config, open_store};

/// `plangate serve`: the gateway over stdio, or over HTTP with the web
/// console, until a signal ends it.
pub(crate) async fn serve(args: ServeArgs, data_dir: &Path) -> Result<()> {
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
    if let Some(enforcement) = crate::enforcement::read(data_dir).await {
        eprintln!("plangate: {}", enforcement.text);
    }
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
            eprintln!(
                "operator endpoint for a person's own MCP client at http://{local}/mcp/operator (the same token as its bearer)"
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
        None if args.operator_stdio => {
            let token = std::env::var("PLANGATE_OPERATOR_TOKEN").ok();
            tokio::select! {
                r = plangate_gateway::operator_mcp::serve_stdio(gw.clone(), token) => r.map_err(|e| match e {
                    plangate_gateway::operator_mcp::StdioRefused::Io(_) => anyhow::Error::from(e),
                    refused => commands::UsageError(refused.to_string()).into(),
                }),
                () = wait_for_signal() => Ok(()),
            }
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
            // Where the person reviews: the console `plangate console`
            // serves from this data dir, when one runs.
            let follow = tokio::spawn(follow_console(gw.clone(), data_dir.to_owned()));
            let served = tokio::select! {
                r = plangate_gateway::serve_stdio(gw.clone(), token) => r.map_err(anyhow::Error::from),
                () = wait_for_signal() => Ok(()),
            };
            follow.abort();
            served
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

/// The file in the data dir where `plangate console` says where it serves
/// the console, for the stdio gateways of the same data dir to name.
const CONSOLE_FILE: &str = "console.url";

/// A reason an upstream of `plangate console` (without `--apply`) is down:
/// what the person reads when Apply is refused.
const NOT_STARTED: &str = "not started by `plangate console`: your approval stands, and the agent's gateway runs the approved steps at its next apply_plan (or run `plangate console --apply` to start the servers and apply here)";

/// `plangate console`: the web console from the data dir or database,
/// with no MCP endpoint; no upstream is started unless `--apply`.
pub(crate) async fn console(args: ConsoleArgs, data_dir: &Path) -> Result<()> {
    let listener = listen(&args.http).await?;
    let mut config = load_config(&args.source, data_dir)?;
    let store = open_store(data_dir).await?;
    let material = key_material(data_dir)?;
    let gw = if args.apply {
        plangate_gateway::Gateway::build(config, store, material).await
    } else {
        let names: Vec<String> = config.enabled_upstreams().map(|u| u.name.clone()).collect();
        for name in names {
            config
                .down
                .entry(name)
                .or_insert_with(|| NOT_STARTED.to_owned());
        }
        plangate_gateway::Gateway::start(config, store, material, Default::default()).await
    };
    let local = listener.local_addr()?;
    let url = format!("http://{local}/console");
    let file = data_dir.join(CONSOLE_FILE);
    if let Err(e) = std::fs::write(&file, &url) {
        tracing::warn!(
            "cannot write {}: {e}; stdio gateways will not name this console",
            file.display()
        );
    }
    eprintln!("plangate console serving http://{local}");
    eprintln!(
        "review plans at {url} (log in with a token from `plangate operator token --name NAME`); {}",
        if args.apply {
            "Apply runs steps here"
        } else {
            "no server is started here: the agent's gateway runs what you approve"
        }
    );
    eprintln!(
        "operator endpoint for a person's own MCP client at http://{local}/mcp/operator (the same token as its bearer)"
    );
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    tokio::spawn(async move {
        wait_for_signal().await;
        stop.cancel();
    });
    let result = plangate_gateway::http::serve_console(gw.clone(), listener, shutdown).await;
    if std::fs::read_to_string(&file).is_ok_and(|at| at == url) {
        let _ = std::fs::remove_file(&file);
    }
    gw.shutdown().await;
    result.map_err(anyhow::Error::from)
}

/// Keeps a stdio gateway's answers naming the console `plangate console`
/// serves from `data_dir` (read every two seconds: it may start later, or
/// stop).
async fn follow_console(gw: Arc<plangate_gateway::Gateway>, data_dir: PathBuf) {
    let file = data_dir.join(CONSOLE_FILE);
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(2));
    loop {
        tick.tick().await;
        let url = std::fs::read_to_string(&file)
            .ok()
            .map(|u| u.trim().to_owned())
            .filter(|u| u.starts_with("http://") || u.starts_with("https://"));
        gw.set_console_url(url);
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

/// `plangate demo-site`: the embedded demo upstream, over stdio or HTTP.
pub(crate) async fn demo_site(args: DemoSiteArgs) -> Result<()> {
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
