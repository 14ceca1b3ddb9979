//! The measurement loop: a warm-up round, then interleaved rounds of
//! sequential and concurrent batches per configuration, combined into
//! the passthrough rows.

use std::collections::BTreeMap;

use std::time::Duration;

use anyhow::{Result, bail};

use super::{Cfg, Running, ours, relate, sdk, setup};
use crate::ctx::{Ctx, batch, echo_args, rotated};
use crate::mcp::Target;
use crate::procs;
use crate::report::PassRow;
use crate::stats::{Batch, combine};

/// How often a server's RSS is read while many clients call it.
const RSS_SAMPLE: Duration = Duration::from_millis(20);

/// Sets the phase up, measures every configuration that answered, and
/// fills the report's passthrough rows (then the SDK figures); a failure
/// of ours fails the run, a peer's is recorded as not measured.
pub(super) async fn measure(ctx: &mut Ctx, running: &mut Running) -> Result<()> {
    let cfgs = setup::setup(ctx, running).await?;
    let s = ctx.sizes.clone();
    let args = echo_args();
    let mut seq: BTreeMap<String, Vec<Batch>> = BTreeMap::new();
    let mut conc: BTreeMap<String, Vec<Batch>> = BTreeMap::new();
    let mut many: BTreeMap<String, Vec<Batch>> = BTreeMap::new();
    let mut many_rss: BTreeMap<String, u64> = BTreeMap::new();
    let mut broken: BTreeMap<String, String> = BTreeMap::new();
    // A bridge that falls over under many clients keeps its other rows.
    let mut broken_many: BTreeMap<String, String> = BTreeMap::new();

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
        // Many HTTP clients at once (each its own MCP session), for every
        // configuration served over HTTP that still stands.
        let todo: Vec<&Cfg> = order
            .iter()
            .filter(|c| {
                c.client == "http"
                    && c.conc
                    && !broken.contains_key(&c.id)
                    && !broken_many.contains_key(&c.id)
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
                        &args,
                        s.many_clients,
                        s.many_calls_per_client,
                        2,
                    ) => result,
                    never = sampler => never,
                }
            };
            if peak > 0 {
                let most = many_rss.entry(c.id.clone()).or_default();
                *most = (*most).max(peak);
            }
            match result {
                Ok(b) => many.entry(c.id.clone()).or_default().push(b),
                Err(e) => {
                    broken_many.insert(c.id.clone(), format!("{e:#}"));
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
        if let Some(why) = broken_many.get(&c.id) {
            if ours(&c.via) {
                bail!("{} failed with {} clients: {why}", c.id, s.many_clients);
            }
            ctx.not_measured(
                &format!("passthrough via {} with {} clients", c.id, s.many_clients),
                why,
            );
        }
        for (clients, batches) in [
            (1, seq.get(&c.id)),
            (s.clients, conc.get(&c.id)),
            (
                s.many_clients,
                many.get(&c.id).filter(|_| !broken_many.contains_key(&c.id)),
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
                    .then(|| many_rss.get(&c.id).copied())
                    .flatten(),
                ..PassRow::default()
            });
        }
    }
    relate(&mut rows);
    rows.sort_by_key(order_key);
    ctx.report.passthrough = rows;

    sdk::sdk(ctx, &cfgs).await;
    Ok(())
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
