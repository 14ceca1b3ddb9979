//! `demo-site`: the demo website as an MCP server, over stdio (default) or
//! Streamable HTTP (`--http ADDR`). Logs go to stderr only, because over
//! stdio stdout is the protocol.

use std::path::PathBuf;

use clap::Parser;
use tokio_util::sync::CancellationToken;

/// A small website as an MCP server, with state kept in a JSON file.
#[derive(Debug, Parser)]
#[command(name = "demo-site", version)]
struct Args {
    /// State file; created with demo content if missing.
    #[arg(long, value_name = "FILE", default_value = "./demo-site.json")]
    state: PathBuf,
    /// Serve Streamable HTTP at http://ADDR/mcp instead of stdio
    /// (e.g. 127.0.0.1:0 for any free port).
    #[arg(long, value_name = "ADDR")]
    http: Option<String>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();

    match args.http {
        None => plangate_demo_site::serve_stdio(args.state).await,
        Some(addr) => {
            // Open (and seed) first, so a bad state file fails before we
            // announce a listening address.
            plangate_demo_site::DemoSite::open(args.state.clone())?;
            let listener = tokio::net::TcpListener::bind(&addr).await?;
            let local = listener.local_addr()?;
            let shutdown = CancellationToken::new();
            tokio::spawn(cancel_on_signal(shutdown.clone()));
            eprintln!("demo-site listening on http://{local}/mcp");
            plangate_demo_site::serve_http(listener, args.state, shutdown).await
        }
    }
}

/// Cancels `token` on ctrl-c or SIGTERM so the server stops cleanly.
async fn cancel_on_signal(token: CancellationToken) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
    token.cancel();
}
