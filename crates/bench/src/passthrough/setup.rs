//! The phase's set-up: the timing upstream's HTTP, plangate (and the
//! candidate) over stdio and HTTP, then the peer bridges; every
//! configuration measured comes from here, probed.

use std::path::Path;

use anyhow::{Context, Result};
use tokio::process::Command;

use super::peers::{self, Upstream};
use super::{Cfg, Running, http, ours as ours_via, start_server};
use crate::ctx::{self, Ctx, Gateway, StoreSpec, UpstreamSpec, probe};
use crate::mcp::Target;
use crate::procs;

/// Starts every server of the phase and lists the configurations that
/// answered a probe call; peers that are missing or fail are recorded as
/// not measured.
pub(super) async fn setup(ctx: &mut Ctx, running: &mut Running) -> Result<Vec<Cfg>> {
    let (up_prog, up_args) = ctx.upstream_stdio();

    // The timing upstream's own HTTP.
    let up_port = procs::free_port()?;
    let up_addr = format!("127.0.0.1:{up_port}");
    let up_url = format!("http://{up_addr}/mcp");
    let mut cmd = Command::new(&ctx.exe);
    cmd.args(["upstream", "--http", &up_addr]);
    running
        .procs
        .push(start_server("upstream-http", cmd, &up_addr, "/healthz", 200).await?);

    let mut cfgs = ours(ctx, running, &up_addr, &up_url).await?;

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
    for c in cfgs.iter().filter(|c| ours_via(&c.via)) {
        probe(&c.target, &c.id, &c.tool)
            .await
            .with_context(|| format!("probe of {}", c.id))?;
    }
    Ok(cfgs)
}

/// The timing upstream reached directly, and plangate (with rules too,
/// and the candidate build) in front of it over stdio and HTTP: the
/// gateways it needs are started into `running`.
async fn ours(ctx: &Ctx, running: &mut Running, up_addr: &str, up_url: &str) -> Result<Vec<Cfg>> {
    let (up_prog, up_args) = ctx.upstream_stdio();
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
            url: up_url.to_owned(),
        },
    )?;
    let (mut g1, _) =
        Gateway::start(&ctx.plangate, "plangate-http-stdio-up", &cfg_stdio, &store).await?;
    let token = g1.key().await?;
    let (g2, _) = Gateway::start(&ctx.plangate, "plangate-http-http-up", &cfg_http, &store).await?;
    let g_rules = rules_gateway(ctx, &cfg_stdio, &store).await?;

    // A build reached over HTTP through its gateway, or over stdio as a
    // client starts it.
    let over_http = |id: &str, label: &str, upstream, via: &str, g: &Gateway| {
        Cfg::new(id, label, "http", upstream, via, g.target(&token), "echo")
    };
    let over_stdio = |id: &str, label: &str, upstream, via: &str, bin: &Path, config: &Path| {
        let target = ctx::plangate_stdio(bin, config, &store, &token);
        Cfg::new(id, label, "stdio", upstream, via, target, "echo")
    };
    let direct_http = http(up_addr, "/mcp", None);
    let direct_stdio = Target::Stdio {
        program: up_prog,
        args: up_args,
        env: vec![],
    };
    let plangate = ctx.plangate.as_path();
    let mut cfgs = vec![
        Cfg::new(
            "http-direct",
            "direct",
            "http",
            "http",
            "direct",
            direct_http,
            "echo",
        ),
        over_http("http-plangate", "plangate", "stdio", "plangate", &g1),
        over_http("http-plangate-httpup", "plangate", "http", "plangate", &g2),
        Cfg::new(
            "stdio-direct",
            "direct",
            "stdio",
            "stdio",
            "direct",
            direct_stdio,
            "echo",
        ),
        over_stdio(
            "stdio-plangate",
            "plangate",
            "stdio",
            "plangate",
            plangate,
            &cfg_stdio,
        ),
        over_stdio(
            "stdio-plangate-httpup",
            "plangate",
            "http",
            "plangate",
            plangate,
            &cfg_http,
        ),
        over_http(
            "http-plangate-rules",
            "plangate, 100 rules",
            "stdio",
            "plangate-rules",
            &g_rules,
        ),
    ];
    running.gateways.push(g1);
    running.gateways.push(g2);
    running.gateways.push(g_rules);
    if let Some(cand) = ctx.candidate.clone() {
        let (g3, _) =
            Gateway::start(&cand.path, "candidate-http-stdio-up", &cfg_stdio, &store).await?;
        let label = cand.label.as_str();
        cfgs.push(over_http(
            "http-candidate",
            label,
            "stdio",
            "candidate",
            &g3,
        ));
        cfgs.push(over_stdio(
            "stdio-candidate",
            label,
            "stdio",
            "candidate",
            &cand.path,
            &cfg_stdio,
        ));
        running.gateways.push(g3);
    }
    Ok(cfgs)
}

/// The same gateway with 100 rules, none matching `echo`: what rules add
/// to a passthrough call.
async fn rules_gateway(ctx: &Ctx, cfg_stdio: &Path, store: &StoreSpec) -> Result<Gateway> {
    let cfg_rules = ctx.run_dir.join("passthrough-stdio-upstream-rules.toml");
    std::fs::write(
        &cfg_rules,
        std::fs::read_to_string(cfg_stdio)?
            + &crate::rules::toml(&crate::rules::named_rules(crate::rules::RULES)),
    )?;
    let (g_rules, _) =
        Gateway::start(&ctx.plangate, "plangate-http-rules", &cfg_rules, store).await?;
    Ok(g_rules)
}
