//! `plangate-bench`: plangate's benchmark, in one run.
//!
//! It measures (see docs/benchmarks.md): passthrough latency and throughput
//! of a read, direct vs through plangate vs through peer bridges, over
//! stdio and Streamable HTTP, one client and many (plus the same from the
//! official Python SDK, and a cross-check with `server-everything`);
//! durable planned writes on SQLite and PostgreSQL; plangate's overhead per
//! applied step; and `get_plan`, memory and start-up with many keys holding
//! open plans. It writes JSON, a Markdown section and an SVG chart.
//!
//! Why it is built this way: the timing client is hand-written JSON-RPC
//! (with a hand-written HTTP/1.1 connection), because an SDK's own per-call
//! cost would hide the differences measured; the timing upstream is a
//! hand-written server in this binary (`plangate-bench upstream`) for the
//! same reason. Everything compared is interleaved round by round on the
//! same machine at the same time, and reported as medians with spread.
//! It never runs under `cargo test`: only its small pure parts have tests.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};

mod ctx;
mod host;
mod http1;
mod load;
mod mcp;
mod passthrough;
mod planning;
mod procs;
mod report;
mod rules;
mod scale;
mod stats;
mod upstream;

use ctx::{Ctx, Sizes};
use host::{fsync_probe, git_commit, load_avg, machine, setup_postgres, sqlite_journal_mode};
use report::Report;

const RESULTS_BEGIN: &str = "<!-- bench:results:begin (written by plangate-bench) -->";
const RESULTS_END: &str = "<!-- bench:results:end -->";

#[derive(Parser, Debug)]
#[command(
    name = "plangate-bench",
    about = "plangate's benchmark: passthrough vs direct and peer bridges, planning, apply, scale."
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Cmd>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(clap::Args, Debug)]
struct RunArgs {
    /// A short smoke run (small sizes; written to target/bench unless --out).
    #[arg(long)]
    quick: bool,
    /// Where benchmarks.json, benchmarks.svg and the results section of
    /// benchmarks.md go (default: docs/ of the repo; target/bench for --quick).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// The plangate binary (default: `cargo build --release -p plangate`,
    /// then target/release/plangate).
    #[arg(long, value_name = "PATH")]
    plangate: Option<PathBuf>,
    /// A second plangate binary to measure beside main's (e.g. a fix), as
    /// LABEL=PATH; scale then measures this build.
    #[arg(long, value_name = "LABEL=PATH")]
    candidate: Option<String>,
    /// PostgreSQL server to create the `plangate_bench` database on
    /// (dropped and created anew each run).
    #[arg(
        long,
        env = "PLANGATE_BENCH_POSTGRES_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/postgres",
        value_name = "URL"
    )]
    postgres: String,
    /// Do not use PostgreSQL.
    #[arg(long)]
    no_postgres: bool,
    /// Phases to skip: passthrough, sdk, everything, planning, scale, rules.
    #[arg(long, value_delimiter = ',', value_name = "PHASE")]
    skip: Vec<String>,
    /// Interleaved rounds per measurement (default 5, 2 with --quick):
    /// more rounds narrow a figure's spread on a noisy machine, for an A/B
    /// of a small change.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=100))]
    rounds: Option<u16>,
    /// The repository root (default: where this crate was built from).
    #[arg(long, value_name = "DIR")]
    repo: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Serve the timing upstream (tools `echo` and `put`).
    Upstream {
        /// Over stdin/stdout.
        #[arg(long, conflicts_with = "http")]
        stdio: bool,
        /// Over Streamable HTTP at http://ADDR/mcp (loopback only).
        #[arg(long, value_name = "ADDR")]
        http: Option<String>,
    },
    /// Call one tool of a server that is already running from many
    /// clients at once, for a while, and print p50, p99 and throughput:
    /// a benchmark row's traffic alone, to profile the server under it.
    Load {
        /// The server's MCP endpoint, http://127.0.0.1:PORT/mcp.
        #[arg(long, value_name = "URL", conflicts_with = "stdio")]
        url: Option<String>,
        /// A bearer token for it (plangate's key), or PLANGATE_KEY.
        #[arg(
            long,
            env = "PLANGATE_KEY",
            value_name = "TOKEN",
            hide_env_values = true
        )]
        bearer: Option<String>,
        /// Or a command speaking MCP over stdio, started once per client
        /// (`--stdio 'plangate serve --stdio --config F'`; split on spaces).
        #[arg(long, value_name = "COMMAND")]
        stdio: Option<String>,
        /// Clients at once, each with its own session.
        #[arg(long, default_value_t = 16)]
        clients: usize,
        /// Seconds of calling.
        #[arg(long, default_value_t = 10)]
        seconds: u64,
        /// At most this many calls per client (a plan holds at most 50
        /// steps by default: planned writes need a bound).
        #[arg(long)]
        calls: Option<usize>,
        /// The tool called.
        #[arg(long, default_value = "echo")]
        tool: String,
        /// Its arguments, as JSON.
        #[arg(long, default_value = r#"{"message":"hello"}"#)]
        arguments: String,
    },
    /// Rewrite the Markdown section and the SVG from a JSON report.
    Report {
        /// The JSON report (default: docs/benchmarks.json).
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
        /// Where benchmarks.md and benchmarks.svg go (default: docs/).
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    if let Some(Cmd::Upstream {
        stdio: true,
        http: None,
    }) = &cli.command
    {
        // No runtime: see `upstream::serve_stdio`.
        return match upstream::serve_stdio() {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("plangate-bench upstream: {e:#}");
                std::process::ExitCode::FAILURE
            }
        };
    }
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("plangate-bench: cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = rt.block_on(async {
        match cli.command {
            Some(Cmd::Upstream { stdio, http }) => match (stdio, http) {
                (_, Some(addr)) => upstream::serve_http(&addr).await,
                (_, None) => bail!("give --stdio or --http ADDR"),
            },
            Some(Cmd::Report { json, out }) => rewrite(json, out),
            Some(Cmd::Load {
                url,
                bearer,
                stdio,
                clients,
                seconds,
                calls,
                tool,
                arguments,
            }) => {
                let target = load::target(url, bearer, stdio)?;
                let arguments = serde_json::from_str(&arguments)
                    .context("--arguments must be JSON")?;
                load::run(load::Load {
                    target,
                    clients,
                    duration: Duration::from_secs(seconds),
                    calls: calls.unwrap_or(usize::MAX),
                    tool,
                    arguments,
                })
                .await
            }
            None => {
                // Dropping the run stops every process it started.
                let mut term =
                    tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
                tokio::select! {
                    r = run(cli.run) => r,
                    _ = tokio::signal::ctrl_c() => bail!("interrupted; stopped every process started"),
                    _ = term.recv() => bail!("terminated; stopped every process started"),
                }
            }
        }
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("plangate-bench: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn default_repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap_or_else(|_| PathBuf::from("."))
}

fn rewrite(json: Option<PathBuf>, out: Option<PathBuf>) -> Result<()> {
    let repo = default_repo();
    let json = json.unwrap_or_else(|| repo.join("docs/benchmarks.json"));
    let out = out.unwrap_or_else(|| repo.join("docs"));
    let mut report: Report = serde_json::from_slice(
        &std::fs::read(&json).with_context(|| format!("cannot read {}", json.display()))?,
    )?;
    report.targets = report::targets(&report);
    write_outputs(&report, &out, false)
}

async fn run(args: RunArgs) -> Result<()> {
    let started = Instant::now();
    let repo = args.repo.clone().unwrap_or_else(default_repo);
    let out = args.out.clone().unwrap_or_else(|| {
        if args.quick {
            repo.join("target/bench")
        } else {
            repo.join("docs")
        }
    });
    let stamp = plangate_store::now_ms();
    let run_dir = repo.join(format!("target/bench-runs/{stamp}"));
    std::fs::create_dir_all(&run_dir)?;
    procs::set_log_dir(&run_dir);
    eprintln!(
        "bench: run dir {} (process logs, data dirs)",
        run_dir.display()
    );

    let plangate = match &args.plangate {
        Some(p) => p.clone(),
        None => build_plangate(&repo)?,
    };
    let mut ctx = new_ctx(&args, repo, run_dir.clone(), plangate)?;
    record_meta(&mut ctx, &args, stamp);

    let mut durability = durability(&mut ctx, &args).await?;
    run_phases(&mut ctx, &args).await?;
    if let Some(mode) = sqlite_journal_mode(&run_dir).await {
        durability[0] = durability[0].replace("see below", &mode);
    }
    ctx.report.meta.durability = durability;
    ctx.report.meta.machine.load_avg_end = load_avg();
    ctx.report.meta.duration_s = started.elapsed().as_secs_f64();
    ctx.report.targets = report::targets(&ctx.report);
    write_outputs(&ctx.report, &out, true)?;
    eprintln!(
        "bench: done in {:.0} s; wrote {}",
        started.elapsed().as_secs_f64(),
        out.display()
    );
    for t in &ctx.report.targets {
        let met = match t.met {
            Some(true) => "met",
            Some(false) => "MISSED",
            None => "not measured",
        };
        eprintln!("  [{met}] {}: {}", t.target, t.measured);
    }
    Ok(())
}

/// The run's shared state: its sizes (quick or full, `--rounds`), the
/// builds measured and an empty report.
fn new_ctx(args: &RunArgs, repo: PathBuf, run_dir: PathBuf, plangate: PathBuf) -> Result<Ctx> {
    let mut sizes = if args.quick {
        Sizes::quick()
    } else {
        Sizes::full()
    };
    if let Some(rounds) = args.rounds {
        sizes.rounds = usize::from(rounds);
    }
    Ok(Ctx {
        exe: std::env::current_exe()?,
        plangate,
        repo,
        run_dir,
        sizes,
        candidate: match &args.candidate {
            Some(spec) => {
                let Some((label, path)) = spec.split_once('=') else {
                    bail!("--candidate takes LABEL=PATH");
                };
                Some(ctx::Build {
                    label: label.to_owned(),
                    path: PathBuf::from(path),
                })
            }
            None => None,
        },
        postgres: None,
        report: Report::default(),
    })
}

/// What the report says of the run before anything is measured: when,
/// which commit and binary, the machine, the sizes and how it measures.
fn record_meta(ctx: &mut Ctx, args: &RunArgs, stamp: i64) {
    let sizes = &ctx.sizes;
    let meta = &mut ctx.report.meta;
    meta.started = plangate_store::format_time_ms(stamp);
    meta.quick = args.quick;
    meta.git_commit = git_commit(&ctx.repo);
    meta.plangate_binary = ctx.plangate.display().to_string();
    meta.machine = machine();
    meta.settings = report::Settings {
        rounds: sizes.rounds,
        seq_calls: sizes.seq_calls,
        concurrent_clients: sizes.clients,
        calls_per_client: sizes.calls_per_client,
        many_clients: sizes.many_clients,
        many_calls_per_client: sizes.many_calls_per_client,
        warmup_calls: sizes.warmup,
        planned_writes_per_key: sizes.plan_writes,
        apply_steps: sizes.apply_steps,
        scale_keys: sizes.scale_keys.clone(),
        scale_steps_per_plan: sizes.steps_per_plan,
        get_plan_calls: sizes.get_plan_calls,
    };
    meta.notes.push(
        "timing client: hand-written JSON-RPC over stdio pipes and a hand-written HTTP/1.1 keep-alive connection, one tokio current-thread runtime for all clients; timing upstream: `plangate-bench upstream`, hand-written JSON-RPC (stdio) and axum (HTTP, JSON answers), not rmcp, so that it costs microseconds per call"
            .to_owned(),
    );
    meta.notes.push(
        "plangate runs with its default logging (an info line per tool call to stderr, here a file) and default settings; bridges run with their logging lowered where they have the option"
            .to_owned(),
    );
}

/// Whether a phase was skipped with `--skip`.
fn skipped(args: &RunArgs, phase: &str) -> bool {
    args.skip.iter().any(|s| s == phase)
}

/// Durability as configured for this run: SQLite's (its journal mode
/// filled in at the end), PostgreSQL's when it is used (set up here) and
/// the disk's fsync.
async fn durability(ctx: &mut Ctx, args: &RunArgs) -> Result<Vec<String>> {
    let mut durability = vec![format!(
        "SQLite: plangate's store opens every connection with `synchronous = FULL` in WAL mode (journal mode read back from the file: {})",
        "see below"
    )];
    if !args.no_postgres && !skipped(args, "planning") {
        match setup_postgres(&args.postgres).await {
            Ok((url, settings)) => {
                durability.push(settings);
                ctx.postgres = Some(url);
            }
            Err(e) => ctx.not_measured("PostgreSQL (planning and apply)", format!("{e:#}")),
        }
    }
    let fsync_ms = fsync_probe(&ctx.run_dir)?;
    ctx.report.meta.fsync_ms = Some(fsync_ms);
    durability.push(format!(
        "disk: fsync of a 4 KiB write takes {fsync_ms:.3} ms (p50 of 200) in the run dir"
    ));
    Ok(durability)
}

/// Every phase not skipped, in order.
async fn run_phases(ctx: &mut Ctx, args: &RunArgs) -> Result<()> {
    let skip = |p: &str| skipped(args, p);
    if !skip("passthrough") {
        if skip("sdk") {
            ctx.sizes.sdk_calls = 0;
        }
        passthrough::run(ctx).await?;
    }
    if !skip("everything") {
        passthrough::everything(ctx).await?;
    }
    if !skip("planning") {
        planning::run(ctx).await?;
    }
    if !skip("scale") {
        scale::run(ctx).await?;
    }
    if !skip("rules") {
        rules::run(ctx)?;
    }
    Ok(())
}

fn write_outputs(report: &Report, out: &Path, json: bool) -> Result<()> {
    std::fs::create_dir_all(out)?;
    if json {
        let mut text = serde_json::to_string_pretty(report)?;
        text.push('\n');
        std::fs::write(out.join("benchmarks.json"), text)?;
    }
    std::fs::write(out.join("benchmarks.svg"), report::svg(report))?;
    let md_path = out.join("benchmarks.md");
    let section = format!("{RESULTS_BEGIN}\n{}{RESULTS_END}", report::markdown(report));
    let md = match std::fs::read_to_string(&md_path) {
        Ok(existing) => match (existing.find(RESULTS_BEGIN), existing.find(RESULTS_END)) {
            (Some(a), Some(b)) if a < b => format!(
                "{}{section}{}",
                &existing[..a],
                &existing[b + RESULTS_END.len()..]
            ),
            _ => format!("{existing}\n## Latest results\n\n{section}\n"),
        },
        Err(_) => format!("# plangate benchmarks\n\n## Latest results\n\n{section}\n"),
    };
    std::fs::write(&md_path, md)?;
    Ok(())
}

fn build_plangate(repo: &Path) -> Result<PathBuf> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    eprintln!("bench: cargo build --release -p plangate");
    let status = std::process::Command::new(cargo)
        .args(["build", "--release", "-p", "plangate"])
        .current_dir(repo)
        .status()
        .context("cannot run cargo")?;
    if !status.success() {
        bail!("cargo build --release -p plangate failed");
    }
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| repo.join("target"));
    let bin = target.join("release/plangate");
    if !bin.exists() {
        bail!("{} not found after the build", bin.display());
    }
    Ok(bin)
}
