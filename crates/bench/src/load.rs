//! `plangate-bench load`: a steady load of one tool call against an MCP
//! server that is already running, for profiling it (`perf record -p`,
//! `strace -c -p`, `heaptrack -p`) under the same traffic a benchmark
//! row makes — without the run's other configurations in the profile.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::mcp::{Client, Target};
use crate::stats::quantile;

/// What to send, to whom, and for how long.
pub struct Load {
    /// The server.
    pub target: Target,
    /// Clients at once, each its own session.
    pub clients: usize,
    /// How long to keep calling.
    pub duration: Duration,
    /// At most this many calls per client.
    pub calls: usize,
    /// The tool called.
    pub tool: String,
    /// Its arguments; every `{n}` in a string becomes a value unique to
    /// the call (so that planned writes are not deduplicated).
    pub arguments: Value,
}

/// The server `load` calls: `--url http://HOST:PORT/PATH` (path `/mcp` when
/// none is given) with `bearer` as its token, or a `--stdio` command split
/// on spaces, started once per client with `bearer` as `PLANGATE_KEY`.
pub fn target(
    url: Option<String>,
    bearer: Option<String>,
    stdio: Option<String>,
) -> Result<Target> {
    match (url, stdio) {
        (Some(url), None) => {
            let rest = url
                .strip_prefix("http://")
                .context("--url must be http://HOST:PORT/PATH")?;
            let (addr, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
            Ok(Target::Http {
                addr: addr.to_owned(),
                path: if path.is_empty() {
                    "/mcp".to_owned()
                } else {
                    path.to_owned()
                },
                bearer,
            })
        }
        (None, Some(command)) => {
            let mut words = command.split_whitespace().map(str::to_owned);
            let program = words.next().context("--stdio needs a command")?;
            let env = bearer
                .map(|key| ("PLANGATE_KEY".to_owned(), key))
                .into_iter()
                .collect();
            Ok(Target::Stdio {
                program,
                args: words.collect(),
                env,
            })
        }
        _ => bail!("give --url URL or --stdio COMMAND"),
    }
}

/// Runs the load and prints p50, p99 and throughput.
pub async fn run(load: Load) -> Result<()> {
    if load.clients == 0 {
        bail!("--clients must be at least 1");
    }
    let mut clients = Vec::with_capacity(load.clients);
    for i in 0..load.clients {
        clients.push(Client::connect(&load.target, &format!("load-{i}")).await?);
    }
    let started = Instant::now();
    let until = started + load.duration;
    let tool = load.tool.as_str();
    let arguments = &load.arguments;
    let calls = load.calls;
    let template = arguments.to_string();
    let numbered = template.contains("{n}");
    let template = &template;
    let runs = clients
        .into_iter()
        .enumerate()
        .map(|(k, mut c)| async move {
            let mut took = Vec::new();
            while Instant::now() < until && took.len() < calls {
                let fresh;
                let arguments = if numbered {
                    let n = format!("c{k}-{}", took.len());
                    fresh = serde_json::from_str::<Value>(&template.replace("{n}", &n))?;
                    &fresh
                } else {
                    arguments
                };
                let t = Instant::now();
                c.call_ok(tool, arguments).await?;
                took.push(t.elapsed().as_secs_f64() * 1e3);
            }
            c.close().await;
            Ok::<_, anyhow::Error>(took)
        });
    let mut all = Vec::new();
    for took in futures::future::join_all(runs).await {
        all.extend(took?);
    }
    let wall = started.elapsed().as_secs_f64();
    all.sort_by(f64::total_cmp);
    println!(
        "{} calls by {} clients in {wall:.1}s: p50 {:.3} ms, p99 {:.3} ms, {:.0} calls/s",
        all.len(),
        load.clients,
        quantile(&all, 0.5),
        quantile(&all, 0.99),
        all.len() as f64 / wall
    );
    Ok(())
}
