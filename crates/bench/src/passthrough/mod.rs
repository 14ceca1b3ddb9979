//! Passthrough: a read (`echo`) straight to the upstream, through plangate
//! and through peer bridges, over stdio and Streamable HTTP, one client and
//! many; then the same through the official Python SDK, and a cross-check
//! with `server-everything` as the upstream.
//!
//! Here: the configurations and what runs while they are measured; the
//! set-up, the peer bridges, the measurement loop, the Python SDK client
//! and the `server-everything` check are each a submodule.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Result;
use tokio::process::Command;

use crate::ctx::{Ctx, Gateway};
use crate::mcp::Target;
use crate::procs::{self, Proc};
use crate::report::PassRow;

mod everything;
mod measure;
mod peers;
mod sdk;
mod setup;

pub use everything::everything;

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

impl Cfg {
    /// A configuration; `conc` follows from how it is reached (see the
    /// field).
    fn new(
        id: &str,
        label: &str,
        client: &'static str,
        upstream: &'static str,
        via: &str,
        target: Target,
        tool: &str,
    ) -> Cfg {
        let conc = client != "stdio" || matches!(via, "direct" | "plangate" | "candidate");
        Cfg {
            id: id.into(),
            label: label.into(),
            client,
            upstream,
            via: via.into(),
            target,
            tool: tool.into(),
            conc,
        }
    }
}

/// What runs while the phase measures, stopped when it ends.
#[derive(Default)]
struct Running {
    procs: Vec<Proc>,
    gateways: Vec<Gateway>,
}

impl Running {
    /// The process serving HTTP at `addr`, if one of these does.
    fn pid_serving(&self, addr: &str) -> Option<u32> {
        self.gateways
            .iter()
            .find(|g| g.addr == addr)
            .map(|g| g.proc.pid())
            .or_else(|| {
                self.procs
                    .iter()
                    .find(|p| p.serves.as_deref() == Some(addr))
                    .map(Proc::pid)
            })
    }

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
    p.serves = Some(addr.to_owned());
    Ok(p)
}

/// Direct and plangate builds (with rules too): their failure fails the
/// run.
fn ours(via: &str) -> bool {
    matches!(via, "direct" | "plangate" | "candidate" | "plangate-rules")
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
    let result = measure::measure(ctx, &mut running).await;
    running.stop().await;
    result
}
