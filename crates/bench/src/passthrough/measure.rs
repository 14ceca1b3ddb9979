//! The measurement loop: a warm-up round, then interleaved rounds of
//! sequential and concurrent batches per configuration, combined into
//! the passthrough rows.

use std::collections::BTreeMap;

use std::time::Duration;

use anyhow::{Result, bail};
use serde_json::Value;

use super::{Cfg, Running, ours, relate, sdk, setup};
use crate::ctx::{Ctx, Sizes, batch, echo_args, rotated};
use crate::mcp::Target;
use crate::procs;
use crate::report::PassRow;
use crate::stats::{Batch, combine};

/// How often a server's RSS is read while many clients call it.
const RSS_SAMPLE: Duration = Duration::from_millis(20);

/// What the rounds gathered, per configuration id.
#[derive(Default)]
struct Tally {
    seq: BTreeMap<String, Vec<Batch>>,
    conc: BTreeMap<String, Vec<Batch>>,
    many: BTreeMap<String, Vec<Batch>>,
    many_rss: BTreeMap<String, u64>,
    broken: BTreeMap<String, String>,
    /// A bridge that falls over under many clients keeps its other rows.
    broken_many: BTreeMap<String, String>,
}

/// Sets the phase up, measures every configuration that answered, and
/// fills the report's passthrough rows (then the SDK figures); a failure
/// of ours fails the run, a peer's is recorded as not measured.
pub(super) async fn measure(ctx: &mut Ctx, running: &mut Running) -> Result<()> {
    let cfgs = setup::setup(ctx, running).await?;
    let s = ctx.sizes.clone();
    let args = echo_args();
    let mut tally = Tally::default();

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
            tally.broken.insert(c.id.clone(), format!("{e:#}"));
        }
    }
    for round in 0..s.rounds {
        eprintln!("bench: passthrough: round {}/{}", round + 1, s.rounds);
        let order = rotated(&cfgs, round);
        sequential_and_concurrent(&mut tally, &order, &s, &args).await;
        many_clients(&mut tally, &order, &s, &args, running).await;
    }
    let mut rows = rows(ctx, &cfgs, &tally, &s)?;
    relate(&mut rows);
    rows.sort_by_key(order_key);
    ctx.report.passthrough = rows;

    sdk::sdk(ctx, &cfgs).await;
    Ok(())
}

/// One round's batches of one client, then of `clients` clients, for
/// each configuration that still stands.
async fn sequential_and_concurrent(tally: &mut Tally, order: &[Cfg], s: &Sizes, args: &Value) {
    let todo: Vec<&Cfg> = order
        .iter()
        .filter(|c| !tally.broken.contains_key(&c.id))
        .collect();
    for c in todo {
        match batch(&c.target, &c.id, &c.tool, args, 1, s.seq_calls, s.warmup).await {
            Ok(b) => tally.seq.entry(c.id.clone()).or_default().push(b),
            Err(e) => {
                tally.broken.insert(c.id.clone(), format!("{e:#}"));
            }
        }
    }
    let todo: Vec<&Cfg> = order
        .iter()
        .filter(|c| c.conc && !tally.broken.contains_key(&c.id))
        .collect();
    for c in todo {
        let warm = (s.warmup / 4).max(2);
        match batch(
            &c.target,
            &c.id,
            &c.tool,
            args,
            s.clients,
            s.calls_per_client,
            warm,
        )
        .await
        {
            Ok(b) => tally.conc.entry(c.id.clone()).or_default().push(b),
            Err(e) => {
                tally.broken.insert(c.id.clone(), format!("{e:#}"));
            }
        }
    }
}

/// Many HTTP clients at once (each its own MCP session), for every
/// configuration served over HTTP that still stands, sampling the serving
/// process's RSS meanwhile.
async fn many_clients(
    tally: &mut Tally,
    order: &[Cfg],
    s: &Sizes,
    args: &Value,
    running: &Running,
) {
    let todo: Vec<&Cfg> = order
        .iter()
        .filter(|c| {
            c.client == "http"
                && c.conc
                && !tally.broken.contains_key(&c.id)
                && !tally.broken_many.contains_key(&c.id)
        })
        .collect();
    for c in todo {
        let pid = match &c.target {
            Target::Http { addr, .. } => running.pid_serving(addr),
            Target::Stdio { .. } => None,
        };
        let mut peak = 0;
        let result = {
            let sampler = async {
                loop {
                    if let Some(kib) = pid.and_then(procs::rss_kib) {
                        peak = peak.max(kib);
                    }
                    tokio::time::sleep(RSS_SAMPLE).await;
                }
            };
            tokio::select! {
                result = batch(
                    &c.target,
                    &c.id,
                    &c.tool,
                    args,
                    s.many_clients,
                    s.many_calls_per_client,
                    2,
                ) => result,
                never = sampler => never,
            }
        };
        if peak > 0 {
            let most = tally.many_rss.entry(c.id.clone()).or_default();
            *most = (*most).max(peak);
        }
        match result {
            Ok(b) => tally.many.entry(c.id.clone()).or_default().push(b),
            Err(e) => {
                tally.broken_many.insert(c.id.clone(), format!("{e:#}"));
            }
        }
    }
}

/// The rows of every configuration measured, one per concurrency; a
/// broken configuration of ours fails the run, a peer's is recorded.
fn rows(ctx: &mut Ctx, cfgs: &[Cfg], tally: &Tally, s: &Sizes) -> Result<Vec<PassRow>> {
    let mut rows = Vec::new();
    for c in cfgs {
        if let Some(why) = tally.broken.get(&c.id) {
            if ours(&c.via) {
                bail!("{} failed during the run: {why}", c.id);
            }
            ctx.not_measured(&format!("passthrough via {}", c.id), why);
            continue;
        }
        if let Some(why) = tally.broken_many.get(&c.id) {
            if ours(&c.via) {
                bail!("{} failed with {} clients: {why}", c.id, s.many_clients);
            }
            ctx.not_measured(
                &format!("passthrough via {} with {} clients", c.id, s.many_clients),
                why,
            );
        }
        for (clients, batches) in [
            (1, tally.seq.get(&c.id)),
            (s.clients, tally.conc.get(&c.id)),
            (
                s.many_clients,
                tally
                    .many
                    .get(&c.id)
                    .filter(|_| !tally.broken_many.contains_key(&c.id)),
            ),
        ] {
            let Some(batches) = batches else { continue };
            rows.push(PassRow {
                id: format!("{}-c{clients}", c.id),
                label: c.label.clone(),
                client: c.client.into(),
                upstream: c.upstream.into(),
                via: c.via.clone(),
                clients,
                m: combine(batches),
                peak_rss_kib: (clients == s.many_clients)
                    .then(|| tally.many_rss.get(&c.id).copied())
                    .flatten(),
                ..PassRow::default()
            });
        }
    }
    Ok(rows)
}

/// Orders rows for the report: by client transport, then direct,
/// plangate, peers; stdio upstream before HTTP upstream.
fn order_key(r: &PassRow) -> (u8, usize, u8, String, u8) {
    let via = match r.via.as_str() {
        "direct" => 0,
        "plangate" => 1,
        "candidate" => 2,
        "plangate-rules" => 1,
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
