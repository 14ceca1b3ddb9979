//! Planning and apply, on SQLite and (when reachable) PostgreSQL.
//!
//! Planning: keys in plan mode send `put`s, each answered with a durable
//! plan step; one key alone, then many keys at once. Each round uses fresh
//! keys (plans stay under the 50-step cap and no key carries history from
//! an earlier round) and measures passthrough reads on the same gateway
//! and sessions right before, so the ratio compares like with like.
//!
//! Apply: a fresh key plans `apply_steps` `put`s, then one `apply_plan`
//! runs them; interleaved with the same `put` sent straight to the
//! upstream over stdio and sent through plangate without planning.

use std::collections::BTreeMap;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::ctx::{Build, Ctx, Gateway, StoreSpec, UpstreamSpec, echo_args, rotated};
use crate::mcp::{Client, Target};
use crate::report::{ApplyRow, PlanRow};
use crate::stats::{Batch, combine};

/// The tool prefix's plan tools.
const BEGIN: &str = "plangate_begin_session";
const APPLY: &str = "plangate_apply_plan";
const END: &str = "plangate_end_session";

/// A client of a fresh key in plan mode.
async fn planning_client(g: &mut Gateway, label: &str) -> Result<Client> {
    let token = g.key().await?;
    planning_client_at(&g.target(&token), label).await
}

/// A client of `target`'s key, in plan mode.
async fn planning_client_at(target: &Target, label: &str) -> Result<Client> {
    let mut c = Client::connect(target, label).await?;
    let r = c.call_ok(BEGIN, &json!({"mode": "plan"})).await?;
    if r.get("plan_mode").and_then(Value::as_bool) != Some(true) {
        bail!("begin_session did not enter plan mode: {r}");
    }
    Ok(c)
}

fn put_args(tag: &str, i: usize) -> Value {
    json!({"key": format!("{tag}-{i}"), "value": "v"})
}

/// A planned write, checked to be a plan step.
async fn planned_put(c: &mut Client, args: &Value) -> Result<()> {
    let r = c.call_ok("put", args).await?;
    if r.get("planned").and_then(Value::as_bool) != Some(true) {
        bail!("a write in plan mode was not planned: {r}");
    }
    Ok(())
}

/// Reads then planned writes, each phase timed over all clients at once.
async fn round(
    g: &mut Gateway,
    label: &str,
    keys: usize,
    writes: usize,
    tag: &str,
) -> Result<(Batch, Batch)> {
    let mut targets = Vec::with_capacity(keys);
    for _ in 0..keys {
        let token = g.key().await?;
        targets.push(g.target(&token));
    }
    let mut clients =
        futures::future::try_join_all(targets.iter().map(|t| planning_client_at(t, label))).await?;
    let args = echo_args();
    // Warm-up: a few reads per session.
    futures::future::try_join_all(clients.iter_mut().map(|c| async {
        for _ in 0..3 {
            c.call_ok("echo", &args).await?;
        }
        anyhow::Ok(())
    }))
    .await?;

    let reads = timed(&mut clients, None, writes).await?;
    let writes_b = timed(&mut clients, Some(tag), writes).await?;
    futures::future::join_all(clients.into_iter().map(|mut c| async move {
        let _ = c.call_ok(END, &json!({})).await;
        c.close().await;
    }))
    .await;
    Ok((reads, writes_b))
}

/// Every client makes `calls` calls at once: reads (`tag` None) or
/// planned writes; per-call latencies and the phase's wall time.
async fn timed(clients: &mut [Client], tag: Option<&str>, calls: usize) -> Result<Batch> {
    let args = echo_args();
    let start = Instant::now();
    let per_client = futures::future::try_join_all(clients.iter_mut().enumerate().map(|(k, c)| {
        let args = &args;
        async move {
            let mut v = Vec::with_capacity(calls);
            for i in 0..calls {
                let t = Instant::now();
                match tag {
                    Some(tag) => planned_put(c, &put_args(&format!("{tag}-k{k}"), i)).await?,
                    None => {
                        c.call_ok("echo", args).await?;
                    }
                }
                v.push(t.elapsed().as_secs_f64() * 1e6);
            }
            anyhow::Ok(v)
        }
    }))
    .await?;
    Ok(Batch {
        latencies_us: per_client.into_iter().flatten().collect(),
        wall_s: start.elapsed().as_secs_f64(),
    })
}

/// One apply round: plan `steps` puts, apply them, time the apply.
async fn apply_round(g: &mut Gateway, label: &str, steps: usize, tag: &str) -> Result<f64> {
    let mut c = planning_client(g, label).await?;
    for i in 0..steps {
        planned_put(&mut c, &put_args(tag, i)).await?;
    }
    let t = Instant::now();
    let receipt = c.call_ok(APPLY, &json!({})).await?;
    let us = t.elapsed().as_secs_f64() * 1e6;
    let applied = receipt.get("applied").and_then(Value::as_u64);
    if applied != Some(steps as u64) {
        bail!("apply_plan applied {applied:?} of {steps} steps: {receipt}");
    }
    let _ = c.call_ok(END, &json!({})).await;
    c.close().await;
    Ok(us)
}

/// `calls` unplanned `put`s on one client; per-call µs.
async fn puts(target: &Target, label: &str, calls: usize, tag: &str) -> Result<Vec<f64>> {
    let mut c = Client::connect(target, label).await?;
    for i in 0..5 {
        c.call_ok("put", &put_args(&format!("{tag}-warm"), i))
            .await?;
    }
    let mut v = Vec::with_capacity(calls);
    for i in 0..calls {
        let t = Instant::now();
        let r = c.call_ok("put", &put_args(tag, i)).await?;
        v.push(t.elapsed().as_secs_f64() * 1e6);
        if r.get("planned").and_then(Value::as_bool) == Some(true) {
            bail!("{label}: an unplanned write was planned");
        }
    }
    c.close().await;
    Ok(v)
}

struct Backend {
    name: &'static str,
    build: String,
    gateway: Gateway,
}

/// The planning and apply phases.
pub async fn run(ctx: &mut Ctx) -> Result<()> {
    let (prog, args) = ctx.upstream_stdio();
    let config = ctx.write_config(
        "planning",
        &UpstreamSpec::Stdio {
            program: prog.clone(),
            args: args.clone(),
        },
    )?;
    let mut backends = Vec::new();
    let mut builds = vec![Build {
        label: "main".into(),
        path: ctx.plangate.clone(),
    }];
    builds.extend(ctx.candidate.clone());
    for (i, build) in builds.iter().enumerate() {
        let sqlite = StoreSpec::sqlite(ctx, &format!("planning-sqlite-{i}"));
        let (g, _) = Gateway::start(
            &build.path,
            &format!("plangate-planning-sqlite-{i}"),
            &config,
            &sqlite,
        )
        .await?;
        backends.push(Backend {
            name: "sqlite",
            build: build.label.clone(),
            gateway: g,
        });
        if let Some(url) = ctx.postgres.clone() {
            // One database, one schema: each build gets its own keys.
            let spec = StoreSpec {
                data_dir: ctx.run_dir.join(format!("planning-postgres-{i}")),
                database: Some(url),
            };
            match Gateway::start(
                &build.path,
                &format!("plangate-planning-postgres-{i}"),
                &config,
                &spec,
            )
            .await
            {
                Ok((g, _)) => backends.push(Backend {
                    name: "postgres",
                    build: build.label.clone(),
                    gateway: g,
                }),
                Err(e) => ctx.not_measured("planning and apply on PostgreSQL", format!("{e:#}")),
            }
        }
    }
    let direct = Target::Stdio {
        program: prog,
        args,
        env: vec![],
    };
    let result = measure(ctx, &mut backends, &direct).await;
    for b in &mut backends {
        b.gateway.proc.stop().await;
    }
    result
}

async fn measure(ctx: &mut Ctx, backends: &mut [Backend], direct: &Target) -> Result<()> {
    let s = ctx.sizes.clone();
    let names: Vec<usize> = (0..backends.len()).collect();
    let mut reads: BTreeMap<(usize, usize), Vec<Batch>> = BTreeMap::new();
    let mut writes: BTreeMap<(usize, usize), Vec<Batch>> = BTreeMap::new();
    let mut applies: BTreeMap<usize, Vec<Batch>> = BTreeMap::new();
    let mut upstream_puts: Vec<Batch> = Vec::new();
    let mut through_puts: BTreeMap<usize, Vec<Batch>> = BTreeMap::new();

    // Warm-up round (discarded).
    for &b in &names {
        let g = &mut backends[b].gateway;
        round(g, "warm", 1, 5, "warm").await?;
    }
    let rounds = s.rounds.min(4);
    for r in 0..rounds {
        eprintln!("bench: planning and apply: round {}/{rounds}", r + 1);
        for b in rotated(&names, r) {
            let name = format!("{}-{}", backends[b].name, b);
            let g = &mut backends[b].gateway;
            for keys in [1, s.plan_keys] {
                let tag = format!("r{r}-{name}-{keys}");
                let (rd, wr) = round(g, &format!("planning-{name}"), keys, s.plan_writes, &tag)
                    .await
                    .with_context(|| format!("planning on {name} with {keys} keys"))?;
                reads.entry((b, keys)).or_default().push(rd);
                writes.entry((b, keys)).or_default().push(wr);
            }
            let us = apply_round(
                g,
                &format!("apply-{name}"),
                s.apply_steps,
                &format!("r{r}-{name}-apply"),
            )
            .await
            .with_context(|| format!("apply on {name}"))?;
            applies.entry(b).or_default().push(Batch {
                latencies_us: vec![us],
                wall_s: us / 1e6,
            });
            let token = g.key().await?;
            let v = puts(
                &g.target(&token),
                &format!("put-through-{name}"),
                s.apply_steps,
                &format!("r{r}-{name}-pt"),
            )
            .await?;
            through_puts.entry(b).or_default().push(Batch {
                latencies_us: v,
                wall_s: 0.0,
            });
        }
        let v = puts(direct, "put-direct", s.apply_steps, &format!("r{r}-direct")).await?;
        upstream_puts.push(Batch {
            latencies_us: v,
            wall_s: 0.0,
        });
    }

    let upstream_put = combine(&upstream_puts).p50_ms;
    for (b, backend) in backends.iter().enumerate() {
        for keys in [1, s.plan_keys] {
            let (Some(rd), Some(wr)) = (reads.get(&(b, keys)), writes.get(&(b, keys))) else {
                continue;
            };
            let read = combine(rd);
            let write = combine(wr);
            ctx.report.planning.push(PlanRow {
                store: backend.name.into(),
                build: backend.build.clone(),
                keys,
                ratio_p50: write.p50_ms / read.p50_ms,
                write,
                read,
            });
        }
        if let Some(a) = applies.get(&b) {
            let apply = combine(a);
            let per_step = apply.p50_ms / s.apply_steps as f64;
            let through = through_puts.get(&b).map_or(f64::NAN, |t| combine(t).p50_ms);
            ctx.report.apply.push(ApplyRow {
                store: backend.name.into(),
                build: backend.build.clone(),
                steps: s.apply_steps,
                per_step_ms: per_step,
                upstream_put_ms: upstream_put,
                passthrough_put_ms: through,
                overhead_per_step_ms: per_step - upstream_put,
                overhead_vs_passthrough_ms: per_step - through,
                apply,
            });
        }
    }
    Ok(())
}
