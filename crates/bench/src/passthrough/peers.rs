//! The peer bridges measured beside plangate (Rust, npm and PyPI
//! mcp-proxy, supergateway): each is started if installed, probed, and
//! either joins the configurations or is recorded as not measured.

use anyhow::Result;
use tokio::process::Command;

use super::{Cfg, Running, http, start_server};
use crate::ctx::{Ctx, probe};
use crate::mcp::Target;
use crate::procs;
use crate::report::Peer;

/// Pinned peer versions (scripts/install-bench-peers installs these): the
/// PyPI mcp-proxy's, reported when no dist-info of it is found.
pub const PYPI_MCP_PROXY: &str = "0.13.0";
/// Pinned npm mcp-proxy version, reported when its package.json is unreadable.
pub const NPM_MCP_PROXY: &str = "6.7.19";
/// Pinned supergateway version, reported when its package.json is unreadable.
pub const SUPERGATEWAY: &str = "4.0.0";
/// Pinned Rust mcp-proxy version, reported as is (nothing installed is read).
pub const RUST_MCP_PROXY: &str = "0.6.0";

/// The timing upstream as the peers bridge to it: its stdio command, or
/// its own Streamable HTTP endpoint.
pub(super) struct Upstream {
    /// The stdio upstream's program.
    pub(super) prog: String,
    /// The stdio upstream's arguments.
    pub(super) args: Vec<String>,
    /// Program and arguments as one command line (supergateway takes one).
    pub(super) cmdline: String,
    /// The upstream's Streamable HTTP URL.
    pub(super) url: String,
}

/// Starts every peer bridge, in the report's order, adding the
/// configurations that answered a probe to `cfgs`; returns every peer,
/// ran or not (with why not).
pub(super) async fn start(
    ctx: &Ctx,
    up: &Upstream,
    running: &mut Running,
    cfgs: &mut Vec<Cfg>,
) -> Result<Vec<Peer>> {
    Ok(vec![
        rust_mcp_proxy(ctx, up, running, cfgs).await?,
        npm_mcp_proxy(ctx, up, running, cfgs).await?,
        supergateway(ctx, up, running, cfgs).await?,
        pypi_mcp_proxy(ctx, up, running, cfgs).await?,
    ])
}

/// Rust mcp-proxy (crates.io), stdio and HTTP backends.
async fn rust_mcp_proxy(
    ctx: &Ctx,
    up: &Upstream,
    running: &mut Running,
    cfgs: &mut Vec<Cfg>,
) -> Result<Peer> {
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
                    serde_json::to_string(&up.prog)?,
                    up.args
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
                    serde_json::to_string(&up.url)?
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
            cfgs.push(Cfg::new(
                &format!("http-rust-mcp-proxy{suffix}"),
                "mcp-proxy (Rust)",
                "http",
                upstream,
                "rust-mcp-proxy",
                target,
                "bench/echo",
            ));
        }
    } else {
        rust.note = "not installed (scripts/install-bench-peers)".into();
    }
    Ok(rust)
}

/// npm mcp-proxy (punkpeye): stdio server → HTTP.
async fn npm_mcp_proxy(
    ctx: &Ctx,
    up: &Upstream,
    running: &mut Running,
    cfgs: &mut Vec<Cfg>,
) -> Result<Peer> {
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
            .arg(&up.prog)
            .args(&up.args);
        let target = http(&addr, "/mcp", None);
        match start_server("npm-mcp-proxy", cmd, &addr, "/mcp", 0).await {
            Ok(p) => {
                running.procs.push(p);
                match probe(&target, "npm-mcp-proxy", "echo").await {
                    Ok(()) => {
                        npm.available = true;
                        cfgs.push(Cfg::new(
                            "http-npm-mcp-proxy",
                            "mcp-proxy (npm)",
                            "http",
                            "stdio",
                            "npm-mcp-proxy",
                            target,
                            "echo",
                        ));
                    }
                    Err(e) => npm.note = format!("{e:#}"),
                }
            }
            Err(e) => npm.note = format!("{e:#}"),
        }
    } else {
        npm.note = "not installed (scripts/install-bench-peers)".into();
    }
    Ok(npm)
}

/// supergateway: stdio → stateful Streamable HTTP (its stateless mode
/// starts a new server process per request), and HTTP → stdio.
async fn supergateway(
    ctx: &Ctx,
    up: &Upstream,
    running: &mut Running,
    cfgs: &mut Vec<Cfg>,
) -> Result<Peer> {
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
                &up.cmdline,
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
                        cfgs.push(Cfg::new(
                            "http-supergateway",
                            "supergateway",
                            "http",
                            "stdio",
                            "supergateway",
                            target,
                            "echo",
                        ));
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
                up.url.clone(),
                "--logLevel".into(),
                "none".into(),
            ],
            env: vec![],
        };
        match probe(&target, "supergateway-stdio", "echo").await {
            Ok(()) => {
                sg.available = true;
                cfgs.push(Cfg::new(
                    "stdio-supergateway-httpup",
                    "supergateway",
                    "stdio",
                    "http",
                    "supergateway",
                    target,
                    "echo",
                ));
            }
            Err(e) => sg.note = format!("{} stdio→HTTP: {e:#}", sg.note),
        }
    } else {
        sg.note = "not installed (scripts/install-bench-peers)".into();
    }
    Ok(sg)
}

/// PyPI mcp-proxy (sparfenyuk): stdio server → HTTP, and HTTP → stdio.
async fn pypi_mcp_proxy(
    ctx: &Ctx,
    up: &Upstream,
    running: &mut Running,
    cfgs: &mut Vec<Cfg>,
) -> Result<Peer> {
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
        .arg(&up.prog)
        .args(&up.args);
        let target = http(&addr, "/mcp", None);
        match start_server("pypi-mcp-proxy", cmd, &addr, "/mcp", 0).await {
            Ok(p) => {
                running.procs.push(p);
                match probe(&target, "pypi-mcp-proxy", "echo").await {
                    Ok(()) => {
                        py.available = true;
                        cfgs.push(Cfg::new(
                            "http-pypi-mcp-proxy",
                            "mcp-proxy (PyPI)",
                            "http",
                            "stdio",
                            "pypi-mcp-proxy",
                            target,
                            "echo",
                        ));
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
                up.url.clone(),
            ],
            env: vec![],
        };
        match probe(&target, "pypi-mcp-proxy-stdio", "echo").await {
            Ok(()) => {
                py.available = true;
                cfgs.push(Cfg::new(
                    "stdio-pypi-mcp-proxy-httpup",
                    "mcp-proxy (PyPI)",
                    "stdio",
                    "http",
                    "pypi-mcp-proxy",
                    target,
                    "echo",
                ));
            }
            Err(e) => py.note = format!("{} stdio→HTTP: {e:#}", py.note),
        }
    } else {
        py.note = "not installed (scripts/install-bench-peers)".into();
    }
    Ok(py)
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
