//! The cross-check with `server-everything` as the upstream.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Result;
use tokio::process::Command;

use super::{Cfg, Running, http, relate, sdk, start_server};
use crate::ctx::{self, Ctx, Gateway, StoreSpec, UpstreamSpec, batch, echo_args, rotated};
use crate::mcp::Target;
use crate::procs;
use crate::report::PassRow;
use crate::stats::{Batch, combine};

/// `server-everything` as the upstream: direct, through plangate over
/// stdio and HTTP, one client, interleaved — a check that the timing
/// upstream's ratios hold with a real server.
pub async fn everything(ctx: &mut Ctx) -> Result<()> {
    let script =
        ctx.tool("node/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    if !script.exists() {
        ctx.not_measured(
            "server-everything cross-check",
            "not installed (scripts/install-peers)",
        );
        return Ok(());
    }
    let mut running = Running::default();
    let result = async {
        let cfgs = start(ctx, &script, &mut running).await?;
        let mut rows = timed_rows(ctx, &cfgs).await?;
        // What an agent feels: the same calls from the official Python SDK,
        // direct and through plangate, interleaved.
        let (python, client) = sdk::client(ctx);
        if ctx.sizes.sdk_calls > 0 && python.exists() {
            eprintln!("bench: server-everything through the Python SDK");
            rows.extend(sdk_rows(ctx, &python, &client, &cfgs).await?);
        }
        anyhow::Ok(rows)
    }
    .await;
    running.stop().await;
    match result {
        Ok(rows) => ctx.report.everything = rows,
        Err(e) => ctx.not_measured("server-everything cross-check", format!("{e:#}")),
    }
    Ok(())
}

/// Starts `server-everything` over HTTP and plangate in front of it over
/// stdio (into `running`); returns the four configurations: each client
/// transport, direct and through plangate.
async fn start(ctx: &Ctx, script: &Path, running: &mut Running) -> Result<Vec<Cfg>> {
    let loopback = ctx.repo.join("benches/node/loopback.cjs");
    let port = procs::free_port()?;
    let addr = format!("127.0.0.1:{port}");
    let mut cmd = Command::new("node");
    cmd.env("NODE_OPTIONS", format!("--require {}", loopback.display()))
        .env("PORT", port.to_string())
        .arg(script)
        .arg("streamableHttp");
    running
        .procs
        .push(start_server("everything-http", cmd, &addr, "/mcp", 0).await?);
    let spec = UpstreamSpec::Stdio {
        program: "node".into(),
        args: vec![script.display().to_string(), "stdio".into()],
    };
    let config = ctx.write_config("everything", &spec)?;
    let store = StoreSpec::sqlite(ctx, "everything-data");
    let (mut g, _) = Gateway::start(&ctx.plangate, "plangate-everything", &config, &store).await?;
    let token = g.key().await?;
    let direct_stdio = Target::Stdio {
        program: "node".into(),
        args: vec![script.display().to_string(), "stdio".into()],
        env: vec![],
    };
    let direct_http = http(&addr, "/mcp", None);
    let through_http = g.target(&token);
    let through_stdio = ctx::plangate_stdio(&ctx.plangate, &config, &store, &token);
    let cfgs = vec![
        everything_cfg(
            "everything-http-direct",
            "http",
            "http",
            "direct",
            direct_http,
        ),
        everything_cfg(
            "everything-http-plangate",
            "http",
            "stdio",
            "plangate",
            through_http,
        ),
        everything_cfg(
            "everything-stdio-direct",
            "stdio",
            "stdio",
            "direct",
            direct_stdio,
        ),
        everything_cfg(
            "everything-stdio-plangate",
            "stdio",
            "stdio",
            "plangate",
            through_stdio,
        ),
    ];
    running.gateways.push(g);
    Ok(cfgs)
}

/// A configuration of the cross-check, labelled by what it goes through.
fn everything_cfg(
    id: &str,
    client: &'static str,
    upstream: &'static str,
    via: &str,
    target: Target,
) -> Cfg {
    Cfg::new(id, via, client, upstream, via, target, "echo")
}

/// The timing client's `echo`s against every configuration: a warm-up
/// batch each, then interleaved rounds, combined into rows.
async fn timed_rows(ctx: &Ctx, cfgs: &[Cfg]) -> Result<Vec<PassRow>> {
    let s = ctx.sizes.clone();
    let args = echo_args();
    let mut results: BTreeMap<String, Vec<Batch>> = BTreeMap::new();
    eprintln!("bench: server-everything cross-check");
    for c in cfgs {
        batch(
            &c.target,
            &c.id,
            "echo",
            &args,
            1,
            s.seq_calls / 4,
            s.warmup,
        )
        .await?;
    }
    for round in 0..s.rounds {
        for c in rotated(cfgs, round) {
            let b = batch(
                &c.target,
                &c.id,
                "echo",
                &args,
                1,
                s.seq_calls / 2,
                s.warmup,
            )
            .await?;
            results.entry(c.id.clone()).or_default().push(b);
        }
    }
    let mut rows: Vec<PassRow> = cfgs
        .iter()
        .map(|c| PassRow {
            id: c.id.clone(),
            label: format!("{} (server-everything)", c.label),
            client: c.client.into(),
            upstream: c.upstream.into(),
            via: c.via.clone(),
            clients: 1,
            m: combine(results.get(&c.id).map(Vec::as_slice).unwrap_or(&[])),
            ..PassRow::default()
        })
        .collect();
    relate(&mut rows);
    Ok(rows)
}

/// The same calls from the official Python SDK, interleaved.
async fn sdk_rows(
    ctx: &Ctx,
    python: &PathBuf,
    client: &PathBuf,
    cfgs: &[Cfg],
) -> Result<Vec<PassRow>> {
    let s = &ctx.sizes;
    let mut sdk_results: BTreeMap<String, Vec<Batch>> = BTreeMap::new();
    for round in 0..s.rounds {
        for c in rotated(cfgs, round) {
            let b = sdk::sdk_batch(python, client, &c, s.sdk_calls, 20).await?;
            sdk_results.entry(c.id.clone()).or_default().push(b);
        }
    }
    let mut sdk_rows: Vec<PassRow> = cfgs
        .iter()
        .map(|c| {
            let batches = sdk_results.get(&c.id).map(Vec::as_slice).unwrap_or(&[]);
            sdk::sdk_row(c, "Python SDK, server-everything", batches)
        })
        .collect();
    relate(&mut sdk_rows);
    Ok(sdk_rows)
}
