//! The cross-check with `server-everything` as the upstream.

use std::collections::BTreeMap;

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
    let loopback = ctx.repo.join("benches/node/loopback.cjs");
    let mut running = Running::default();
    let result = async {
        let port = procs::free_port()?;
        let addr = format!("127.0.0.1:{port}");
        let mut cmd = Command::new("node");
        cmd.env("NODE_OPTIONS", format!("--require {}", loopback.display()))
            .env("PORT", port.to_string())
            .arg(&script)
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
        let (mut g, _) =
            Gateway::start(&ctx.plangate, "plangate-everything", &config, &store).await?;
        let token = g.key().await?;
        let cfgs = vec![
            (
                "everything-http-direct",
                "direct",
                "http",
                "http",
                "direct",
                http(&addr, "/mcp", None),
            ),
            (
                "everything-http-plangate",
                "plangate",
                "http",
                "stdio",
                "plangate",
                g.target(&token),
            ),
            (
                "everything-stdio-direct",
                "direct",
                "stdio",
                "stdio",
                "direct",
                Target::Stdio {
                    program: "node".into(),
                    args: vec![script.display().to_string(), "stdio".into()],
                    env: vec![],
                },
            ),
            (
                "everything-stdio-plangate",
                "plangate",
                "stdio",
                "stdio",
                "plangate",
                ctx::plangate_stdio(&ctx.plangate, &config, &store, &token),
            ),
        ];
        running.gateways.push(g);
        let s = ctx.sizes.clone();
        let args = echo_args();
        let mut results: BTreeMap<&str, Vec<Batch>> = BTreeMap::new();
        eprintln!("bench: server-everything cross-check");
        for c in &cfgs {
            batch(&c.5, c.0, "echo", &args, 1, s.seq_calls / 4, s.warmup).await?;
        }
        for round in 0..s.rounds {
            for c in rotated(&cfgs, round) {
                let b = batch(&c.5, c.0, "echo", &args, 1, s.seq_calls / 2, s.warmup).await?;
                results.entry(c.0).or_default().push(b);
            }
        }
        let mut rows: Vec<PassRow> = cfgs
            .iter()
            .map(|c| PassRow {
                id: c.0.into(),
                label: format!("{} (server-everything)", c.1),
                client: c.2.into(),
                upstream: c.3.into(),
                via: c.4.into(),
                clients: 1,
                m: combine(results.get(c.0).map(Vec::as_slice).unwrap_or(&[])),
                ..PassRow::default()
            })
            .collect();
        relate(&mut rows);
        // What an agent feels: the same calls from the official Python SDK,
        // direct and through plangate, interleaved.
        let python = ctx.tool("venv/bin/python");
        let script = ctx.repo.join("benches/sdk_client.py");
        if s.sdk_calls > 0 && python.exists() {
            eprintln!("bench: server-everything through the Python SDK");
            let sdk_cfgs: Vec<Cfg> = cfgs
                .iter()
                .map(|c| Cfg::new(c.0, c.1, c.2, c.3, c.4, c.5.clone(), "echo"))
                .collect();
            let mut sdk_results: BTreeMap<String, Vec<Batch>> = BTreeMap::new();
            for round in 0..s.rounds {
                for c in rotated(&sdk_cfgs, round) {
                    let b = sdk::sdk_batch(&python, &script, &c, s.sdk_calls, 20).await?;
                    sdk_results.entry(c.id.clone()).or_default().push(b);
                }
            }
            let mut sdk_rows: Vec<PassRow> = sdk_cfgs
                .iter()
                .map(|c| PassRow {
                    id: format!("sdk-{}", c.id),
                    label: format!("{} (Python SDK, server-everything)", c.label),
                    client: c.client.into(),
                    upstream: c.upstream.into(),
                    via: c.via.clone(),
                    clients: 1,
                    m: combine(sdk_results.get(&c.id).map(Vec::as_slice).unwrap_or(&[])),
                    ..PassRow::default()
                })
                .collect();
            relate(&mut sdk_rows);
            rows.extend(sdk_rows);
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
