//! Passthrough: a read (`echo`) straight to the upstream, through plangate
//! and through peer bridges, over stdio and Streamable HTTP, one client and
//! many; then the same through the official Python SDK, and a cross-check
//! with `server-everything` as the upstream.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use tokio::process::Command;

use crate::ctx::{self, Ctx, Gateway, StoreSpec, UpstreamSpec, batch, echo_args, probe, rotated};
use crate::mcp::Target;
use crate::procs::{self, Proc};
use crate::report::{PassRow, Peer};
use crate::stats::{Batch, combine};

/// Pinned peer versions (scripts/install-bench-peers installs these).
pub const PYPI_MCP_PROXY: &str = "0.13.0";
pub const NPM_MCP_PROXY: &str = "6.7.19";
pub const SUPERGATEWAY: &str = "4.0.0";
pub const RUST_MCP_PROXY: &str = "0.6.0";

/// One configuration measured.
#[derive(Clone)]
struct Cfg {
    id: String,
    label: String,
    client: &'static str,
    upstream: &'static str,
    via: String,
    target: Target,
    tool: String,
    /// Also measured with many clients (each stdio client starts its own
    /// process; for the Python and Node stdio bridges that alone would
    /// take most of the run, so they are measured with one client).
    conc: bool,
}

/// What runs while the phase measures, stopped when it ends.
#[derive(Default)]
struct Running {
    procs: Vec<Proc>,
    gateways: Vec<Gateway>,
}

impl Running {
    async fn stop(mut self) {
        for g in &mut self.gateways {
            g.proc.stop().await;
        }
        for p in &mut self.procs {
            p.stop().await;
        }
    }
}

fn http(addr: &str, path: &str, bearer: Option<&str>) -> Target {
    Target::Http {
        addr: addr.to_owned(),
        path: path.to_owned(),
        bearer: bearer.map(str::to_owned),
    }
}

async fn start_server(
    label: &str,
    cmd: Command,
    addr: &str,
    ready_path: &str,
    want: u16,
) -> Result<Proc> {
    let mut p = Proc::spawn_server(label, cmd)?;
    procs::wait_http(&mut p, addr, ready_path, want, Duration::from_secs(90)).await?;
    Ok(p)
}

fn node_version(ctx: &Ctx, package: &str) -> Option<String> {
    let path = ctx
        .tool("bench-node/node_modules")
        .join(package)
        .join("package.json");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
    v.get("version").and_then(|v| v.as_str()).map(str::to_owned)
}

fn pypi_version(ctx: &Ctx) -> Option<String> {
    let site = ctx.tool("bench-venv/lib");
    for py in std::fs::read_dir(site).ok()?.flatten() {
        let dir = py.path().join("site-packages");
        for e in std::fs::read_dir(dir).ok()?.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(rest) = name.strip_prefix("mcp_proxy-")
                && let Some(v) = rest.strip_suffix(".dist-info")
            {
                return Some(v.to_owned());
            }
        }
    }
    None
}

/// Starts every server of the phase and lists the configurations that
/// answered a probe call; peers that are missing or fail are recorded as
/// not measured.
async fn setup(ctx: &mut Ctx, running: &mut Running) -> Result<Vec<Cfg>> {
    let (up_prog, up_args) = ctx.upstream_stdio();
    let up_cmdline = format!("{} {}", up_prog, up_args.join(" "));
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

    let mut push =
        |id: &str, label: &str, client, upstream, via: &str, target: Target, tool: &str| {
            let conc = client != "stdio" || matches!(via, "direct" | "plangate" | "candidate");
            cfgs.push(Cfg {
                id: id.into(),
                label: label.into(),
                client,
                upstream,
                via: via.into(),
                target,
                tool: tool.into(),
                conc,
            });
        };
    push(
        "http-direct",
        "direct",
        "http",
        "http",
        "direct",
        http(&up_addr, "/mcp", None),
        "echo",
    );
    push(
        "http-plangate",
        "plangate",
        "http",
        "stdio",
        "plangate",
        g1.target(&token),
        "echo",
    );
    push(
        "http-plangate-httpup",
        "plangate",
        "http",
        "http",
        "plangate",
        g2.target(&token),
        "echo",
    );
    push(
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
    );
    push(
        "stdio-plangate",
        "plangate",
        "stdio",
        "stdio",
        "plangate",
        ctx::plangate_stdio(&ctx.plangate, &cfg_stdio, &store, &token),
        "echo",
    );
    push(
        "stdio-plangate-httpup",
        "plangate",
        "stdio",
        "http",
        "plangate",
        ctx::plangate_stdio(&ctx.plangate, &cfg_http, &store, &token),
        "echo",
    );
    running.gateways.push(g1);
    running.gateways.push(g2);
    if let Some(cand) = ctx.candidate.clone() {
        let (g3, _) =
            Gateway::start(&cand.path, "candidate-http-stdio-up", &cfg_stdio, &store).await?;
        let label = cand.label.as_str();
        push(
            "http-candidate",
            label,
            "http",
            "stdio",
            "candidate",
            g3.target(&token),
            "echo",
        );
        push(
            "stdio-candidate",
            label,
            "stdio",
            "stdio",
            "candidate",
            ctx::plangate_stdio(&cand.path, &cfg_stdio, &store, &token),
            "echo",
        );
        running.gateways.push(g3);
    }

    // Peers. Each either joins the list or is recorded as not measured.
    let mut peers: Vec<Peer> = Vec::new();

    // Rust mcp-proxy (crates.io), stdio and HTTP backends.
    let rust_bin = ctx.tool("cargo/bin/mcp-proxy");
    let mut rust = Peer {
        id: "rust-mcp-proxy".into(),
        name: "mcp-proxy (crates.io, Rust)".into(),
        version: RUST_MCP_PROXY.into(),
        ..Peer::default()
    };
    if rust_bin.exists() {
        let mut ok = Vec::new();
        for (suffix, upstream, backend) in [
            (
                "",
                "stdio",
                format!(
                    "transport = \"stdio\"\ncommand = {}\nargs = [{}]\n",
                    serde_json::to_string(&up_prog)?,
                    up_args
                        .iter()
                        .map(|a| serde_json::to_string(a).unwrap_or_default())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ),
            (
                "-httpup",
                "http",
                format!(
                    "transport = \"http\"\nurl = {}\n",
                    serde_json::to_string(&up_url)?
                ),
            ),
        ] {
            let port = procs::free_port()?;
            let addr = format!("127.0.0.1:{port}");
            let conf = ctx.run_dir.join(format!("rust-mcp-proxy{suffix}.toml"));
            std::fs::write(
                &conf,
                format!(
                    "[proxy]\nname = \"bench\"\n[proxy.listen]\nhost = \"127.0.0.1\"\nport = {port}\n[[backends]]\nname = \"bench\"\n{backend}"
                ),
            )?;
            let mut cmd = Command::new(&rust_bin);
            cmd.arg("--config").arg(&conf).env("RUST_LOG", "warn");
            let label = format!("rust-mcp-proxy{suffix}");
            let started = start_server(&label, cmd, &addr, "/readyz", 200).await;
            let target = http(&addr, "/", None);
            match started {
                Ok(p) => {
                    running.procs.push(p);
                    match probe(&target, &label, "bench/echo").await {
                        Ok(()) => ok.push((suffix, upstream, target)),
                        Err(e) => rust.note = format!("{label}: {e:#}"),
                    }
                }
                Err(e) => rust.note = format!("{label}: {e:#}"),
            }
        }
        rust.available = !ok.is_empty();
        for (suffix, upstream, target) in ok {
            push(
                &format!("http-rust-mcp-proxy{suffix}"),
                "mcp-proxy (Rust)",
                "http",
                upstream,
                "rust-mcp-proxy",
                target,
                "bench/echo",
            );
        }
    } else {
        rust.note = "not installed (scripts/install-bench-peers)".into();
    }
    peers.push(rust);

    // npm mcp-proxy (punkpeye): stdio server → HTTP.
    let npm_bin = ctx.tool("bench-node/node_modules/mcp-proxy/dist/bin/mcp-proxy.mjs");
    let mut npm = Peer {
        id: "npm-mcp-proxy".into(),
        name: "mcp-proxy (npm)".into(),
        version: node_version(ctx, "mcp-proxy").unwrap_or_else(|| NPM_MCP_PROXY.into()),
        ..Peer::default()
    };
    if npm_bin.exists() {
        let port = procs::free_port()?;
        let addr = format!("127.0.0.1:{port}");
        let mut cmd = Command::new("node");
        cmd.arg(&npm_bin)
            .args([
                "--server",
                "stream",
                "--host",
                "127.0.0.1",
                "--port",
                &port.to_string(),
                "--",
            ])
            .arg(&up_prog)
            .args(&up_args);
        let target = http(&addr, "/mcp", None);
        match start_server("npm-mcp-proxy", cmd, &addr, "/mcp", 0).await {
            Ok(p) => {
                running.procs.push(p);
                match probe(&target, "npm-mcp-proxy", "echo").await {
                    Ok(()) => {
                        npm.available = true;
                        push(
                            "http-npm-mcp-proxy",
                            "mcp-proxy (npm)",
                            "http",
                            "stdio",
                            "npm-mcp-proxy",
                            target,
                            "echo",
                        );
                    }
                    Err(e) => npm.note = format!("{e:#}"),
                }
            }
            Err(e) => npm.note = format!("{e:#}"),
        }
    } else {
        npm.note = "not installed (scripts/install-bench-peers)".into();
    }
    peers.push(npm);

    // supergateway: stdio → stateful Streamable HTTP (its stateless mode
    // starts a new server process per request), and HTTP → stdio.
    let sg_bin = ctx.tool("bench-node/node_modules/supergateway/dist/index.js");
    let loopback = ctx.repo.join("benches/node/loopback.cjs");
    let mut sg = Peer {
        id: "supergateway".into(),
        name: "supergateway (npm)".into(),
        version: node_version(ctx, "supergateway").unwrap_or_else(|| SUPERGATEWAY.into()),
        ..Peer::default()
    };
    if sg_bin.exists() {
        let port = procs::free_port()?;
        let addr = format!("127.0.0.1:{port}");
        let mut cmd = Command::new("node");
        cmd.env("NODE_OPTIONS", format!("--require {}", loopback.display()))
            .arg(&sg_bin)
            .args([
                "--stdio",
                &up_cmdline,
                "--outputTransport",
                "streamableHttp",
                "--stateful",
            ])
            .args([
                "--port",
                &port.to_string(),
                "--logLevel",
                "none",
                "--healthEndpoint",
                "/healthz",
            ]);
        let target = http(&addr, "/mcp", None);
        match start_server("supergateway", cmd, &addr, "/healthz", 200).await {
            Ok(p) => {
                running.procs.push(p);
                match probe(&target, "supergateway", "echo").await {
                    Ok(()) => {
                        sg.available = true;
                        push(
                            "http-supergateway",
                            "supergateway",
                            "http",
                            "stdio",
                            "supergateway",
                            target,
                            "echo",
                        );
                    }
                    Err(e) => sg.note = format!("{e:#}"),
                }
            }
            Err(e) => sg.note = format!("{e:#}"),
        }
        let target = Target::Stdio {
            program: "node".into(),
            args: vec![
                sg_bin.display().to_string(),
                "--streamableHttp".into(),
                up_url.clone(),
                "--logLevel".into(),
                "none".into(),
            ],
            env: vec![],
        };
        match probe(&target, "supergateway-stdio", "echo").await {
            Ok(()) => {
                sg.available = true;
                push(
                    "stdio-supergateway-httpup",
                    "supergateway",
                    "stdio",
                    "http",
                    "supergateway",
                    target,
                    "echo",
                );
            }
            Err(e) => sg.note = format!("{} stdio→HTTP: {e:#}", sg.note),
        }
    } else {
        sg.note = "not installed (scripts/install-bench-peers)".into();
    }
    peers.push(sg);

    // PyPI mcp-proxy (sparfenyuk): stdio server → HTTP, and HTTP → stdio.
    let py_bin = ctx.tool("bench-venv/bin/mcp-proxy");
    let mut py = Peer {
        id: "pypi-mcp-proxy".into(),
        name: "mcp-proxy (PyPI)".into(),
        version: pypi_version(ctx).unwrap_or_else(|| PYPI_MCP_PROXY.into()),
        ..Peer::default()
    };
    if py_bin.exists() {
        let port = procs::free_port()?;
        let addr = format!("127.0.0.1:{port}");
        let mut cmd = Command::new(&py_bin);
        cmd.args([
            "--host",
            "127.0.0.1",
            "--port",
            &port.to_string(),
            "--log-level",
            "WARNING",
            "--",
        ])
        .arg(&up_prog)
        .args(&up_args);
        let target = http(&addr, "/mcp", None);
        match start_server("pypi-mcp-proxy", cmd, &addr, "/mcp", 0).await {
            Ok(p) => {
                running.procs.push(p);
                match probe(&target, "pypi-mcp-proxy", "echo").await {
                    Ok(()) => {
                        py.available = true;
                        push(
                            "http-pypi-mcp-proxy",
                            "mcp-proxy (PyPI)",
                            "http",
                            "stdio",
                            "pypi-mcp-proxy",
                            target,
                            "echo",
                        );
                    }
                    Err(e) => py.note = format!("{e:#}"),
                }
            }
            Err(e) => py.note = format!("{e:#}"),
        }
        let target = Target::Stdio {
            program: py_bin.display().to_string(),
            args: vec![
                "--transport".into(),
                "streamablehttp".into(),
                "--log-level".into(),
                "WARNING".into(),
                up_url.clone(),
            ],
            env: vec![],
        };
        match probe(&target, "pypi-mcp-proxy-stdio", "echo").await {
            Ok(()) => {
                py.available = true;
                push(
                    "stdio-pypi-mcp-proxy-httpup",
                    "mcp-proxy (PyPI)",
                    "stdio",
                    "http",
                    "pypi-mcp-proxy",
                    target,
                    "echo",
                );
            }
            Err(e) => py.note = format!("{} stdio→HTTP: {e:#}", py.note),
        }
    } else {
        py.note = "not installed (scripts/install-bench-peers)".into();
    }
    peers.push(py);
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

/// Direct and plangate builds: their failure fails the run.
fn ours(via: &str) -> bool {
    matches!(via, "direct" | "plangate" | "candidate")
}

/// Orders rows for the report: by client transport, then direct,
/// plangate, peers; stdio upstream before HTTP upstream.
fn order_key(r: &PassRow) -> (u8, usize, u8, String, u8) {
    let via = match r.via.as_str() {
        "direct" => 0,
        "plangate" => 1,
        "candidate" => 2,
        _ => 3,
    };
    (
        u8::from(r.client == "stdio"),
        r.clients,
        via,
        r.via.clone(),
        u8::from(r.upstream == "http"),
    )
}

/// Adds `added` and the ratios against the direct row of the same client
/// transport and concurrency.
pub fn relate(rows: &mut [PassRow]) {
    let direct: BTreeMap<(String, usize), (f64, f64, f64)> = rows
        .iter()
        .filter(|r| r.via == "direct")
        .map(|r| {
            (
                (r.client.clone(), r.clients),
                (r.m.p50_ms, r.m.p99_ms, r.m.throughput_rps),
            )
        })
        .collect();
    for r in rows.iter_mut() {
        if let Some((p50, p99, rps)) = direct.get(&(r.client.clone(), r.clients)) {
            r.added_p50_ms = Some(r.m.p50_ms - p50);
            r.ratio_p50 = Some(r.m.p50_ms / p50);
            r.ratio_p99 = Some(r.m.p99_ms / p99);
            r.ratio_throughput = Some(r.m.throughput_rps / rps);
        }
    }
}

/// The passthrough phase, the SDK figures and the server-everything check.
pub async fn run(ctx: &mut Ctx) -> Result<()> {
    let mut running = Running::default();
    let result = measure(ctx, &mut running).await;
    running.stop().await;
    result
}

async fn measure(ctx: &mut Ctx, running: &mut Running) -> Result<()> {
    let cfgs = setup(ctx, running).await?;
    let s = ctx.sizes.clone();
    let args = echo_args();
    let mut seq: BTreeMap<String, Vec<Batch>> = BTreeMap::new();
    let mut conc: BTreeMap<String, Vec<Batch>> = BTreeMap::new();
    let mut broken: BTreeMap<String, String> = BTreeMap::new();

    eprintln!(
        "bench: passthrough: {} configurations, warm-up round",
        cfgs.len()
    );
    for c in &cfgs {
        if let Err(e) = batch(
            &c.target,
            &c.id,
            &c.tool,
            &args,
            1,
            s.seq_calls / 2,
            s.warmup,
        )
        .await
        {
            broken.insert(c.id.clone(), format!("{e:#}"));
        }
    }
    for round in 0..s.rounds {
        eprintln!("bench: passthrough: round {}/{}", round + 1, s.rounds);
        let order = rotated(&cfgs, round);
        let todo: Vec<&Cfg> = order
            .iter()
            .filter(|c| !broken.contains_key(&c.id))
            .collect();
        for c in todo {
            match batch(&c.target, &c.id, &c.tool, &args, 1, s.seq_calls, s.warmup).await {
                Ok(b) => seq.entry(c.id.clone()).or_default().push(b),
                Err(e) => {
                    broken.insert(c.id.clone(), format!("{e:#}"));
                }
            }
        }
        let todo: Vec<&Cfg> = order
            .iter()
            .filter(|c| c.conc && !broken.contains_key(&c.id))
            .collect();
        for c in todo {
            let warm = (s.warmup / 4).max(2);
            match batch(
                &c.target,
                &c.id,
                &c.tool,
                &args,
                s.clients,
                s.calls_per_client,
                warm,
            )
            .await
            {
                Ok(b) => conc.entry(c.id.clone()).or_default().push(b),
                Err(e) => {
                    broken.insert(c.id.clone(), format!("{e:#}"));
                }
            }
        }
    }
    let mut rows = Vec::new();
    for c in &cfgs {
        if let Some(why) = broken.get(&c.id) {
            if ours(&c.via) {
                bail!("{} failed during the run: {why}", c.id);
            }
            ctx.not_measured(&format!("passthrough via {}", c.id), why);
            continue;
        }
        for (clients, batches) in [(1, seq.get(&c.id)), (s.clients, conc.get(&c.id))] {
            let Some(batches) = batches else { continue };
            rows.push(PassRow {
                id: format!("{}-c{clients}", c.id),
                label: c.label.clone(),
                client: c.client.into(),
                upstream: c.upstream.into(),
                via: c.via.clone(),
                clients,
                m: combine(batches),
                ..PassRow::default()
            });
        }
    }
    relate(&mut rows);
    rows.sort_by_key(order_key);
    ctx.report.passthrough = rows;

    sdk(ctx, &cfgs).await;
    Ok(())
}

/// The same sequential reads from the official Python SDK, direct and via
/// plangate, interleaved.
async fn sdk(ctx: &mut Ctx, cfgs: &[Cfg]) {
    let python = ctx.tool("venv/bin/python");
    let script = ctx.repo.join("benches/sdk_client.py");
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
        .filter_map(|c| {
            results.get(&c.id).map(|b| PassRow {
                id: format!("sdk-{}", c.id),
                label: format!("{} (Python SDK)", c.label),
                client: c.client.into(),
                upstream: c.upstream.into(),
                via: c.via.clone(),
                clients: 1,
                m: combine(b),
                ..PassRow::default()
            })
        })
        .collect();
    relate(&mut rows);
    ctx.report.sdk = rows;
}

async fn sdk_batch(
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
