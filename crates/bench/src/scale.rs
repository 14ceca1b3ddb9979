//! Scale: many keys with open plans (SQLite).
//!
//! One gateway per size (e.g. 10, 1,000 and 10,000 keys), each seeded
//! through its own HTTP face — per key: a session, `begin_session` in plan
//! mode, `steps_per_plan` planned `put`s, the session closed — so each
//! holds exactly what serving those keys leaves in memory. `get_plan` is
//! then timed on all of them in interleaved rounds. The largest is seeded
//! in stages so its RSS is read at every size in one process. Start-up is
//! timed last, interleaving a fresh data dir with the seeded one.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use tokio::process::Command;

use crate::ctx::{
    Ctx, Gateway, Sizes, StoreSpec, UpstreamSpec, echo_args, plangate_stdio, rotated,
};
use crate::mcp::Client;
use crate::procs::{self, Proc};
use crate::report::{Scale, ScalePoint};
use crate::stats::{Batch, combine};

const GET_PLAN: &str = "plangate_get_plan";

/// Sessions seeding at once (untimed; enough to keep the store busy).
const SEED_WORKERS: usize = 64;

/// A small deterministic generator, so every run samples the same way.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

struct Sized {
    keys: usize,
    gateway: Gateway,
    tokens: Vec<String>,
    spec: StoreSpec,
}

/// Creates keys and seeds their plans until the gateway holds `upto`.
async fn seed(s: &mut Sized, upto: usize, steps: usize) -> Result<Duration> {
    let start = Instant::now();
    let from = s.tokens.len();
    for _ in from..upto {
        let t = s.gateway.key().await?;
        s.tokens.push(t);
    }
    let todo: Vec<(usize, String)> = s.tokens[from..upto]
        .iter()
        .cloned()
        .enumerate()
        .map(|(i, t)| (from + i, t))
        .collect();
    let queue = std::sync::Mutex::new(todo.into_iter());
    let gateway = &s.gateway;
    let worker = || async {
        loop {
            let next = match queue.lock() {
                Ok(mut q) => q.next(),
                Err(p) => p.into_inner().next(),
            };
            let Some((i, token)) = next else { break };
            let mut c = Client::connect(&gateway.target(&token), "scale-seed").await?;
            c.call_ok("plangate_begin_session", &json!({"mode": "plan"}))
                .await?;
            for step in 0..steps {
                let r = c
                    .call_ok(
                        "put",
                        &json!({"key": format!("k{i}-s{step}"), "value": "v"}),
                    )
                    .await?;
                if r.get("planned").and_then(Value::as_bool) != Some(true) {
                    bail!("seeding: a write was not planned: {r}");
                }
            }
            c.close().await;
        }
        anyhow::Ok(())
    };
    futures::future::try_join_all((0..SEED_WORKERS).map(|_| worker())).await?;
    Ok(start.elapsed())
}

/// How many MCP sessions `get_plan` is timed through at each size.
const GET_PLAN_SESSIONS: usize = 64;

/// `calls` sequential `get_plan`s, round-robin over [`GET_PLAN_SESSIONS`]
/// sessions, each of a key of the gateway drawn at random.
async fn get_plans(s: &Sized, calls: usize, seed: u64, steps: usize) -> Result<Batch> {
    let mut rng = Rng(seed | 1);
    // The same number of sessions at every size, keys drawn with
    // repetition: the sizes then differ only in how many keys the store
    // holds. (Runs before 2026-11-30 13:00 used one session per key at 10
    // keys, so the 10-key figure also had fewer live sessions.)
    let sessions = GET_PLAN_SESSIONS;
    let mut clients = Vec::with_capacity(sessions);
    for _ in 0..sessions {
        let token = &s.tokens[rng.below(s.tokens.len())];
        let mut c = Client::connect(&s.gateway.target(token), "scale-get-plan").await?;
        let plan = c.call_ok(GET_PLAN, &json!({})).await?;
        let n = plan
            .get("steps")
            .and_then(Value::as_array)
            .map_or(0, Vec::len);
        if n != steps {
            bail!("get_plan shows {n} steps, expected {steps}: {plan}");
        }
        clients.push(c);
    }
    let args = json!({});
    let mut v = Vec::with_capacity(calls);
    let start = Instant::now();
    for i in 0..calls {
        let c = &mut clients[i % sessions];
        let t = Instant::now();
        c.call_ok(GET_PLAN, &args).await?;
        v.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let wall_s = start.elapsed().as_secs_f64();
    futures::future::join_all(clients.into_iter().map(Client::close)).await;
    Ok(Batch {
        latencies_us: v,
        wall_s,
    })
}

async fn settled_rss(p: &Proc) -> u64 {
    tokio::time::sleep(Duration::from_millis(1500)).await;
    p.rss_kib().unwrap_or(0)
}

/// The scale phase.
pub async fn run(ctx: &mut Ctx) -> Result<()> {
    let (prog, args) = ctx.upstream_stdio();
    let config = ctx.write_config(
        "scale",
        &UpstreamSpec::Stdio {
            program: prog,
            args,
        },
    )?;
    let sizes = ctx.sizes.clone();
    let steps = sizes.steps_per_plan;
    // The candidate build when there is one: main's HTTP stalls would
    // swamp get_plan; what is stored and held per plan is the same code.
    let build = ctx.candidate.clone().unwrap_or(crate::ctx::Build {
        label: "main".into(),
        path: ctx.plangate.clone(),
    });
    let mut gateways: Vec<Sized> = Vec::new();
    let result = async {
        for &keys in &sizes.scale_keys {
            let spec = StoreSpec::sqlite(ctx, &format!("scale-{keys}"));
            let (g, _) = Gateway::start(
                &build.path,
                &format!("plangate-scale-{keys}"),
                &config,
                &spec,
            )
            .await?;
            gateways.push(Sized {
                keys,
                gateway: g,
                tokens: Vec::new(),
                spec,
            });
        }
        let mut scale = Scale {
            build: build.label.clone(),
            steps_per_plan: steps,
            ..Scale::default()
        };
        let largest = gateways.len() - 1;
        idle(&mut scale, &mut gateways[largest]).await?;
        let rss_at = seed_all(&mut scale, &mut gateways, &sizes).await?;
        let batches = time_get_plans(&gateways, &sizes).await?;
        for (i, g) in gateways.iter().enumerate() {
            scale.points.push(ScalePoint {
                keys: g.keys,
                get_plan: combine(&batches[i]),
                rss_kib: rss_at.get(i).copied().unwrap_or(0),
            });
        }
        memory_per_plan(&mut scale, &rss_at, &sizes.scale_keys);

        // Start-up, interleaved: fresh data dir vs the largest's store.
        let full_spec = gateways[largest].spec.clone();
        for g in &mut gateways {
            g.gateway.proc.stop().await;
        }
        startup(&mut scale, ctx, &build.path, &config, &full_spec).await?;
        anyhow::Ok(scale)
    }
    .await;
    for g in &mut gateways {
        g.gateway.proc.stop().await;
    }
    ctx.report.scale = Some(result?);
    Ok(())
}

/// Idle RSS of a gateway: at ready, then after one session's calls.
async fn idle(scale: &mut Scale, largest: &mut Sized) -> Result<()> {
    scale.idle_rss_kib = settled_rss(&largest.gateway.proc).await;
    {
        let g = &mut largest.gateway;
        let token = g.key().await?;
        let mut c = Client::connect(&g.target(&token), "scale-idle").await?;
        c.request("tools/list", &json!({})).await?;
        c.call_ok("echo", &echo_args()).await?;
        c.call_ok(GET_PLAN, &json!({})).await?;
        c.close().await;
    }
    scale.idle_after_calls_rss_kib = settled_rss(&largest.gateway.proc).await;
    Ok(())
}

/// Seeds the smaller gateways, then the largest in stages (one per size);
/// returns the largest's RSS at each stage and records the seeding rate.
async fn seed_all(scale: &mut Scale, gateways: &mut [Sized], sizes: &Sizes) -> Result<Vec<u64>> {
    let steps = sizes.steps_per_plan;
    let largest = gateways.len() - 1;
    for g in gateways.iter_mut().take(largest) {
        eprintln!("bench: scale: seeding {} keys", g.keys);
        let n = g.keys;
        seed(g, n, steps).await?;
    }
    let mut rss_at = Vec::new();
    let mut seeded_s = 0.0;
    for &stage in &sizes.scale_keys {
        eprintln!("bench: scale: seeding the largest gateway up to {stage} keys");
        let big = &mut gateways[largest];
        let took = seed(big, stage, steps).await?;
        seeded_s += took.as_secs_f64();
        rss_at.push(settled_rss(&big.gateway.proc).await);
    }
    let most = *sizes.scale_keys.last().unwrap_or(&0);
    scale.seed_keys_per_s = most as f64 / seeded_s;
    Ok(rss_at)
}

/// `get_plan`, interleaved across the gateways after a warm-up each:
/// every gateway's batches, in the gateways' order.
async fn time_get_plans(gateways: &[Sized], sizes: &Sizes) -> Result<Vec<Vec<Batch>>> {
    let steps = sizes.steps_per_plan;
    let order: Vec<usize> = (0..gateways.len()).collect();
    let mut batches: Vec<Vec<Batch>> = vec![Vec::new(); gateways.len()];
    for &i in &order {
        get_plans(&gateways[i], sizes.get_plan_calls / 5, 7, steps).await?;
    }
    for r in 0..sizes.rounds {
        eprintln!("bench: scale: get_plan round {}/{}", r + 1, sizes.rounds);
        for i in rotated(&order, r) {
            let b = get_plans(&gateways[i], sizes.get_plan_calls, 1000 + r as u64, steps)
                .await
                .with_context(|| format!("get_plan at {} keys", gateways[i].keys))?;
            batches[i].push(b);
        }
    }
    Ok(batches)
}

/// Memory per open plan from the largest gateway's RSS at each stage:
/// overall (against idle after calls) and between the two largest.
fn memory_per_plan(scale: &mut Scale, rss_at: &[u64], scale_keys: &[usize]) {
    let most = *scale_keys.last().unwrap_or(&0);
    let n = rss_at.len();
    if n >= 2 {
        let (a, b) = (scale_keys[n - 2], scale_keys[n - 1]);
        scale.bytes_per_plan_marginal =
            (rss_at[n - 1] as f64 - rss_at[n - 2] as f64) * 1024.0 / (b - a) as f64;
    }
    scale.bytes_per_plan = (rss_at.last().copied().unwrap_or(0) as f64
        - scale.idle_after_calls_rss_kib as f64)
        * 1024.0
        / most as f64;
}

/// Start-up trials, interleaved: over HTTP with a fresh data dir and with
/// `full_spec`'s seeded store, and over stdio with a fresh one.
async fn startup(
    scale: &mut Scale,
    ctx: &Ctx,
    bin: &Path,
    config: &Path,
    full_spec: &StoreSpec,
) -> Result<()> {
    let (mut empty, mut full, mut stdio) = (Vec::new(), Vec::new(), Vec::new());
    eprintln!("bench: scale: start-up trials");
    for t in 0..ctx.sizes.startup_trials {
        let fresh = StoreSpec::sqlite(ctx, &format!("startup-fresh-{t}"));
        // Fresh: open nothing beforehand, so plangate creates it all.
        empty.push(startup_http(bin, config, &fresh).await?);
        full.push(startup_http(bin, config, full_spec).await?);
        let fresh_stdio = StoreSpec::sqlite(ctx, &format!("startup-stdio-{t}"));
        let token = {
            let store = fresh_stdio.open().await?;
            store
                .create_key("startup", plangate_core::Scope::Write)
                .await?
                .token
        };
        let target = plangate_stdio(bin, config, &fresh_stdio, &token);
        let t0 = Instant::now();
        let c = Client::connect(&target, "startup-stdio").await?;
        stdio.push(t0.elapsed().as_secs_f64() * 1e6);
        c.close().await;
    }
    let one = |v: Vec<f64>| {
        let batches: Vec<Batch> = v
            .into_iter()
            .map(|us| Batch {
                latencies_us: vec![us],
                wall_s: 0.0,
            })
            .collect();
        combine(&batches)
    };
    scale.startup_empty = one(empty);
    scale.startup_full = one(full);
    scale.startup_stdio = one(stdio);
    Ok(())
}

/// Spawn → `/readyz` 200, µs; the gateway is stopped again.
async fn startup_http(bin: &Path, config: &Path, spec: &StoreSpec) -> Result<f64> {
    let port = procs::free_port()?;
    let addr = format!("127.0.0.1:{port}");
    let mut cmd = Command::new(bin);
    cmd.arg("--data-dir")
        .arg(&spec.data_dir)
        .args(["serve", "--http", &addr, "--config"])
        .arg(config);
    let t0 = Instant::now();
    let mut p = Proc::spawn_server("startup", cmd)?;
    let ready = procs::wait_http(&mut p, &addr, "/readyz", 200, Duration::from_secs(60)).await;
    let us = t0.elapsed().as_secs_f64() * 1e6;
    p.stop().await;
    ready?;
    Ok(us)
}
