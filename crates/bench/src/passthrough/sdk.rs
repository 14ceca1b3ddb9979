//! The official Python SDK as the client (benches/sdk_client.py): the
//! same sequential reads, direct and via plangate, for "real agent" figures.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use tokio::process::Command;

use super::{Cfg, relate};
use crate::ctx::{Ctx, rotated};
use crate::mcp::Target;
use crate::procs::Proc;
use crate::report::PassRow;
use crate::stats::{Batch, combine};

/// The same sequential reads from the official Python SDK, direct and via
/// plangate, interleaved.
pub(super) async fn sdk(ctx: &mut Ctx, cfgs: &[Cfg]) {
    let (python, script) = client(ctx);
    if ctx.sizes.sdk_calls == 0 {
        return;
    }
    if !python.exists() {
        ctx.not_measured(
            "Python SDK figures",
            "no .tools/venv (run scripts/install-peers)",
        );
        return;
    }
    let chosen: Vec<&Cfg> = [
        "http-direct",
        "http-plangate",
        "http-candidate",
        "stdio-direct",
        "stdio-plangate",
        "stdio-candidate",
    ]
    .iter()
    .filter_map(|id| cfgs.iter().find(|c| c.id == *id))
    .collect();
    let mut results: BTreeMap<String, Vec<Batch>> = BTreeMap::new();
    let s = ctx.sizes.clone();
    eprintln!("bench: Python SDK figures");
    for round in 0..s.rounds {
        for c in rotated(&chosen, round) {
            match sdk_batch(&python, &script, c, s.sdk_calls, 20).await {
                Ok(b) => results.entry(c.id.clone()).or_default().push(b),
                Err(e) => {
                    ctx.not_measured("Python SDK figures", format!("{}: {e:#}", c.id));
                    return;
                }
            }
        }
    }
    let mut rows: Vec<PassRow> = chosen
        .iter()
        .filter_map(|c| results.get(&c.id).map(|b| sdk_row(c, "Python SDK", b)))
        .collect();
    relate(&mut rows);
    ctx.report.sdk = rows;
}

/// The Python interpreter of the tools' venv and the SDK client script
/// it runs.
pub(super) fn client(ctx: &Ctx) -> (PathBuf, PathBuf) {
    (
        ctx.tool("venv/bin/python"),
        ctx.repo.join("benches/sdk_client.py"),
    )
}

/// A configuration's row from the SDK client's batches, its label saying
/// `what` measured it.
pub(super) fn sdk_row(c: &Cfg, what: &str, batches: &[Batch]) -> PassRow {
    PassRow {
        id: format!("sdk-{}", c.id),
        label: format!("{} ({what})", c.label),
        client: c.client.into(),
        upstream: c.upstream.into(),
        via: c.via.clone(),
        clients: 1,
        m: combine(batches),
        ..PassRow::default()
    }
}

pub(super) async fn sdk_batch(
    python: &PathBuf,
    script: &PathBuf,
    c: &Cfg,
    calls: usize,
    warmup: usize,
) -> Result<Batch> {
    let mut cmd = Command::new(python);
    cmd.arg(script).args([
        "--tool",
        &c.tool,
        "--calls",
        &calls.to_string(),
        "--warmup",
        &warmup.to_string(),
    ]);
    match &c.target {
        Target::Http { addr, path, bearer } => {
            cmd.args([
                "--transport",
                "http",
                "--url",
                &format!("http://{addr}{path}"),
            ]);
            if let Some(b) = bearer {
                cmd.args(["--bearer", b]);
            }
        }
        Target::Stdio { program, args, env } => {
            cmd.args(["--transport", "stdio", "--"])
                .arg(program)
                .args(args);
            cmd.envs(env.iter().map(|(k, v)| (k, v)));
        }
    }
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped());
    let mut p = Proc::spawn(&format!("sdk-{}", c.id), cmd)?;
    let mut out = String::new();
    if let Some(mut stdout) = p.child.stdout.take() {
        use tokio::io::AsyncReadExt;
        tokio::time::timeout(Duration::from_secs(300), stdout.read_to_string(&mut out))
            .await
            .context("the SDK client timed out")??;
    }
    let status = p.child.wait().await?;
    p.stop().await;
    if !status.success() {
        bail!("the SDK client failed ({status}); see sdk-{}.log", c.id);
    }
    let v: serde_json::Value = serde_json::from_str(&out).context("SDK client output")?;
    let latencies_us: Vec<f64> = v["latencies_us"]
        .as_array()
        .map(|a| a.iter().filter_map(serde_json::Value::as_f64).collect())
        .unwrap_or_default();
    Ok(Batch {
        latencies_us,
        wall_s: v["wall_s"].as_f64().unwrap_or(f64::NAN),
    })
}
