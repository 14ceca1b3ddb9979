//! The phase's set-up: the timing upstream's HTTP, plangate (and the
//! candidate) over stdio and HTTP, then the peer bridges; every
//! configuration measured comes from here, probed.

use anyhow::{Context, Result};
use tokio::process::Command;

use super::peers::{self, Upstream};
use super::{Cfg, Running, http, ours, start_server};
use crate::ctx::{self, Ctx, Gateway, StoreSpec, UpstreamSpec, probe};
use crate::mcp::Target;
use crate::procs;

/// Starts every server of the phase and lists the configurations that
/// answered a probe call; peers that are missing or fail are recorded as
/// not measured.
pub(super) async fn setup(ctx: &mut Ctx, running: &mut Running) -> Result<Vec<Cfg>> {
    let (up_prog, up_args) = ctx.upstream_stdio();
    let mut cfgs = Vec::new();

    // The timing upstream's own HTTP.
    let up_port = procs::free_port()?;
    let up_addr = format!("127.0.0.1:{up_port}");
    let up_url = format!("http://{up_addr}/mcp");
    let mut cmd = Command::new(&ctx.exe);
    cmd.args(["upstream", "--http", &up_addr]);
    running
        .procs
        .push(start_server("upstream-http", cmd, &up_addr, "/healthz", 200).await?);

    // plangate: one data dir, one key for every session.
    let store = StoreSpec::sqlite(ctx, "passthrough-data");
    let cfg_stdio = ctx.write_config(
        "passthrough-stdio-upstream",
        &UpstreamSpec::Stdio {
            program: up_prog.clone(),
            args: up_args.clone(),
        },
    )?;
    let cfg_http = ctx.write_config(
        "passthrough-http-upstream",
        &UpstreamSpec::Http {
            url: up_url.clone(),
        },
    )?;
    let (mut g1, _) =
        Gateway::start(&ctx.plangate, "plangate-http-stdio-up", &cfg_stdio, &store).await?;
    let token = g1.key().await?;
    let (g2, _) = Gateway::start(&ctx.plangate, "plangate-http-http-up", &cfg_http, &store).await?;
    // The same gateway with 100 rules, none matching `echo`: what rules
    // add to a passthrough call.
    let cfg_rules = ctx.run_dir.join("passthrough-stdio-upstream-rules.toml");
    std::fs::write(
        &cfg_rules,
        std::fs::read_to_string(&cfg_stdio)?
            + &crate::rules::toml(&crate::rules::named_rules(crate::rules::RULES)),
    )?;
    let (g_rules, _) =
        Gateway::start(&ctx.plangate, "plangate-http-rules", &cfg_rules, &store).await?;

    cfgs.push(Cfg::new(
        "http-direct",
        "direct",
        "http",
        "http",
        "direct",
        http(&up_addr, "/mcp", None),
        "echo",
    ));
    cfgs.push(Cfg::new(
        "http-plangate",
        "plangate",
        "http",
        "stdio",
        "plangate",
        g1.target(&token),
        "echo",
    ));
    cfgs.push(Cfg::new(
        "http-plangate-httpup",
        "plangate",
        "http",
        "http",
        "plangate",
        g2.target(&token),
        "echo",
    ));
    cfgs.push(Cfg::new(
        "stdio-direct",
        "direct",
        "stdio",
        "stdio",
        "direct",
        Target::Stdio {
            program: up_prog.clone(),
            args: up_args.clone(),
            env: vec![],
        },
        "echo",
    ));
    cfgs.push(Cfg::new(
        "stdio-plangate",
        "plangate",
        "stdio",
        "stdio",
        "plangate",
        ctx::plangate_stdio(&ctx.plangate, &cfg_stdio, &store, &token),
        "echo",
    ));
    cfgs.push(Cfg::new(
        "stdio-plangate-httpup",
        "plangate",
        "stdio",
        "http",
        "plangate",
        ctx::plangate_stdio(&ctx.plangate, &cfg_http, &store, &token),
        "echo",
    ));
    cfgs.push(Cfg::new(
        "http-plangate-rules",
        "plangate, 100 rules",
        "http",
        "stdio",
        "plangate-rules",
        g_rules.target(&token),
        "echo",
    ));
    running.gateways.push(g1);
    running.gateways.push(g2);
    running.gateways.push(g_rules);
    if let Some(cand) = ctx.candidate.clone() {
        let (g3, _) =
            Gateway::start(&cand.path, "candidate-http-stdio-up", &cfg_stdio, &store).await?;
        let label = cand.label.as_str();
        cfgs.push(Cfg::new(
            "http-candidate",
            label,
            "http",
            "stdio",
            "candidate",
            g3.target(&token),
            "echo",
        ));
        cfgs.push(Cfg::new(
            "stdio-candidate",
            label,
            "stdio",
            "stdio",
            "candidate",
            ctx::plangate_stdio(&cand.path, &cfg_stdio, &store, &token),
            "echo",
        ));
        running.gateways.push(g3);
    }

    // Peers. Each either joins the list or is recorded as not measured.
    let up = Upstream {
        cmdline: format!("{} {}", up_prog, up_args.join(" ")),
        prog: up_prog,
        args: up_args,
        url: up_url,
    };
    let peers = peers::start(ctx, &up, running, &mut cfgs).await?;
    for p in &peers {
        if !p.available {
            ctx.not_measured(&p.name, &p.note);
        }
    }
    ctx.report.meta.peers = peers;

    // Probe ours too: a failure here is a broken run, not a missing peer.
    for c in cfgs.iter().filter(|c| ours(&c.via)) {
        probe(&c.target, &c.id, &c.tool)
            .await
            .with_context(|| format!("probe of {}", c.id))?;
    }
    Ok(cfgs)
}
