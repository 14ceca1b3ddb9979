//! What every phase shares: sizes, paths, the plangate gateways it starts
//! (config files, data dirs, keys) and the batch runner.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use plangate_core::Scope;
use plangate_store::{DataDir, Store, StoreConfig};
use serde_json::{Value, json};
use tokio::process::Command;

use crate::mcp::{Client, Target};
use crate::procs::{self, Proc};
use crate::report::{NotMeasured, Report};
use crate::stats::Batch;

/// How big a run is.
#[derive(Debug, Clone)]
pub struct Sizes {
    pub rounds: usize,
    pub seq_calls: usize,
    pub clients: usize,
    pub calls_per_client: usize,
    /// The many-clients row: this many HTTP clients at once …
    pub many_clients: usize,
    /// … each making this many timed calls.
    pub many_calls_per_client: usize,
    pub warmup: usize,
    pub plan_writes: usize,
    pub plan_keys: usize,
    pub apply_steps: usize,
    pub scale_keys: Vec<usize>,
    pub steps_per_plan: usize,
    pub get_plan_calls: usize,
    pub sdk_calls: usize,
    pub startup_trials: usize,
}

impl Sizes {
    /// The full run (a few minutes).
    pub fn full() -> Sizes {
        Sizes {
            rounds: 5,
            seq_calls: 400,
            clients: 16,
            calls_per_client: 100,
            many_clients: 256,
            many_calls_per_client: 20,
            warmup: 40,
            plan_writes: 30,
            plan_keys: 32,
            apply_steps: 50,
            scale_keys: vec![10, 1_000, 10_000],
            steps_per_plan: 10,
            get_plan_calls: 500,
            sdk_calls: 200,
            startup_trials: 5,
        }
    }

    /// A smoke run (well under a minute of measuring).
    pub fn quick() -> Sizes {
        Sizes {
            rounds: 2,
            seq_calls: 100,
            clients: 16,
            calls_per_client: 20,
            many_clients: 64,
            many_calls_per_client: 5,
            warmup: 10,
            plan_writes: 15,
            plan_keys: 32,
            apply_steps: 50,
            scale_keys: vec![10, 100, 1_000],
            steps_per_plan: 10,
            get_plan_calls: 100,
            sdk_calls: 50,
            startup_trials: 2,
        }
    }
}

/// The run's shared state.
pub struct Ctx {
    /// This benchmark binary (also the timing upstream).
    pub exe: PathBuf,
    pub plangate: PathBuf,
    pub repo: PathBuf,
    pub run_dir: PathBuf,
    pub sizes: Sizes,
    /// A second plangate build compared with `plangate` (e.g. a fix).
    pub candidate: Option<Build>,
    /// The PostgreSQL database plangate uses, once it was set up.
    pub postgres: Option<String>,
    pub report: Report,
}

impl Ctx {
    /// The command that runs the timing upstream over stdio.
    pub fn upstream_stdio(&self) -> (String, Vec<String>) {
        (
            self.exe.display().to_string(),
            vec!["upstream".into(), "--stdio".into()],
        )
    }

    /// Records something the run could not measure.
    pub fn not_measured(&mut self, what: &str, why: impl std::fmt::Display) {
        eprintln!("bench: not measured: {what}: {why}");
        self.report.not_measured.push(NotMeasured {
            what: what.to_owned(),
            why: why.to_string(),
        });
    }

    /// A file or dir of the repo's git-ignored tools dir.
    pub fn tool(&self, rel: &str) -> PathBuf {
        self.repo.join(".tools").join(rel)
    }

    /// Writes a plangate config with one upstream named `bench`.
    pub fn write_config(&self, name: &str, upstream: &UpstreamSpec) -> Result<PathBuf> {
        let q = |s: &str| serde_json::to_string(s).unwrap_or_default();
        let mut toml = String::from("# written by plangate-bench\n[upstreams.bench]\n");
        match upstream {
            UpstreamSpec::Stdio { program, args } => {
                toml.push_str(&format!("command = {}\n", q(program)));
                let args: Vec<String> = args.iter().map(|a| q(a)).collect();
                toml.push_str(&format!("args = [{}]\n", args.join(", ")));
            }
            UpstreamSpec::Http { url } => {
                toml.push_str(&format!("url = {}\n", q(url)));
                // The timing upstream is ours: its annotations are honest.
                toml.push_str("trust_annotations = true\n");
            }
        }
        // The many-clients row connects 256 clients with one key: past
        // the default 128 sessions per key plangate would close the least
        // recently used (as it should for one key), so it allows 1024.
        toml.push_str("[gateway]\nmax_sessions_per_key = 1024\n");
        let path = self.run_dir.join(format!("{name}.toml"));
        std::fs::write(&path, toml)?;
        Ok(path)
    }
}

/// A plangate binary and how the report names it.
#[derive(Clone, Debug)]
pub struct Build {
    pub label: String,
    pub path: PathBuf,
}

/// How plangate reaches its upstream.
pub enum UpstreamSpec {
    Stdio { program: String, args: Vec<String> },
    Http { url: String },
}

/// Where plangate keeps its state.
#[derive(Clone)]
pub struct StoreSpec {
    pub data_dir: PathBuf,
    /// `Some(url)`: PostgreSQL instead of the data dir's SQLite file.
    pub database: Option<String>,
}

impl StoreSpec {
    /// A SQLite store in a fresh data dir under the run dir.
    pub fn sqlite(ctx: &Ctx, name: &str) -> StoreSpec {
        StoreSpec {
            data_dir: ctx.run_dir.join(name),
            database: None,
        }
    }

    /// The store as plangate's own library opens it, to make keys.
    pub async fn open(&self) -> Result<Arc<dyn Store>> {
        let config = match &self.database {
            Some(url) => StoreConfig::Postgres(url.clone()),
            None => StoreConfig::Sqlite(DataDir::open(&self.data_dir)?.sqlite_path()),
        };
        Ok(config.open().await?)
    }

    fn args(&self) -> Vec<String> {
        let mut a = vec!["--data-dir".into(), self.data_dir.display().to_string()];
        if let Some(db) = &self.database {
            a.push("--database".into());
            a.push(db.clone());
        }
        a
    }
}

/// A running `plangate serve --http`.
pub struct Gateway {
    pub proc: Proc,
    pub addr: String,
    pub store: Arc<dyn Store>,
    next_key: usize,
    label: String,
}

impl Gateway {
    /// Starts plangate over HTTP and waits for `/readyz` (every upstream
    /// connected); returns it with the time from spawn to ready.
    pub async fn start(
        bin: &Path,
        label: &str,
        config: &Path,
        store: &StoreSpec,
    ) -> Result<(Gateway, Duration)> {
        let handle = store.open().await?;
        let port = procs::free_port()?;
        let addr = format!("127.0.0.1:{port}");
        let mut cmd = Command::new(bin);
        cmd.args(store.args())
            .arg("serve")
            .arg("--http")
            .arg(&addr)
            .arg("--config")
            .arg(config);
        let started = Instant::now();
        let mut proc = Proc::spawn_server(label, cmd)?;
        procs::wait_http(&mut proc, &addr, "/readyz", 200, Duration::from_secs(60)).await?;
        let ready = started.elapsed();
        Ok((
            Gateway {
                proc,
                addr,
                store: handle,
                next_key: 0,
                label: label.to_owned(),
            },
            ready,
        ))
    }

    /// A new `write` key's token.
    pub async fn key(&mut self) -> Result<String> {
        self.next_key += 1;
        let name = format!("{}-{}", self.label, self.next_key)
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '-'
                }
            })
            .take(60)
            .collect::<String>();
        Ok(self.store.create_key(&name, Scope::Write).await?.token)
    }

    /// Where an HTTP client holding `token` connects.
    pub fn target(&self, token: &str) -> Target {
        Target::Http {
            addr: self.addr.clone(),
            path: "/mcp".into(),
            bearer: Some(token.to_owned()),
        }
    }
}

/// `plangate serve --stdio` as a client starts it, holding `token`.
pub fn plangate_stdio(bin: &Path, config: &Path, store: &StoreSpec, token: &str) -> Target {
    let mut args = store.args();
    args.extend([
        "serve".into(),
        "--stdio".into(),
        "--config".into(),
        config.display().to_string(),
    ]);
    Target::Stdio {
        program: bin.display().to_string(),
        args,
        env: vec![("PLANGATE_KEY".into(), token.to_owned())],
    }
}

/// The arguments of every timed `echo`.
pub fn echo_args() -> Value {
    json!({"message": "hello"})
}

/// A batch stops early once it has run this long, so a configuration
/// that is very slow still gets a fair number of samples without
/// stretching the run (the samples taken are reported).
pub const BATCH_BUDGET: Duration = Duration::from_millis(2500);

/// One round of `clients` clients each making `calls` calls of `tool`
/// after `warmup` untimed ones (at most [`BATCH_BUDGET`] long, at least 10
/// calls each); connecting and closing are not timed.
pub async fn batch(
    target: &Target,
    label: &str,
    tool: &str,
    args: &Value,
    clients: usize,
    calls: usize,
    warmup: usize,
) -> Result<Batch> {
    let connected =
        futures::future::try_join_all((0..clients).map(|_| Client::connect(target, label))).await;
    let mut cs = connected?;
    let warm_start = Instant::now();
    futures::future::try_join_all(cs.iter_mut().map(|c| async move {
        for i in 0..warmup {
            if i >= 3 && warm_start.elapsed() > BATCH_BUDGET / 2 {
                break;
            }
            c.call_ok(tool, args).await?;
        }
        anyhow::Ok(())
    }))
    .await
    .with_context(|| format!("{label}: warm-up"))?;
    let start = Instant::now();
    let per_client = futures::future::try_join_all(cs.iter_mut().map(|c| async move {
        let mut v = Vec::with_capacity(calls);
        for i in 0..calls {
            if i >= 10 && start.elapsed() > BATCH_BUDGET {
                break;
            }
            let t = Instant::now();
            c.call_ok(tool, args).await?;
            v.push(t.elapsed().as_secs_f64() * 1e6);
        }
        anyhow::Ok(v)
    }))
    .await
    .with_context(|| format!("{label}: timed calls"))?;
    let wall_s = start.elapsed().as_secs_f64();
    futures::future::join_all(cs.into_iter().map(Client::close)).await;
    Ok(Batch {
        latencies_us: per_client.into_iter().flatten().collect(),
        wall_s,
    })
}

/// Checks that a target answers `tool` with a success at all.
pub async fn probe(target: &Target, label: &str, tool: &str) -> Result<()> {
    let mut c = Client::connect(target, label).await?;
    let r = c.call_ok(tool, &echo_args()).await;
    c.close().await;
    let v = r?;
    if !v.to_string().contains("hello") {
        bail!("{label}: {tool} answered without the message: {v}");
    }
    Ok(())
}

/// Rotates `items` by `round` so no configuration always runs first.
pub fn rotated<T: Clone>(items: &[T], round: usize) -> Vec<T> {
    if items.is_empty() {
        return Vec::new();
    }
    let k = round % items.len();
    items[k..]
        .iter()
        .chain(items[..k].iter())
        .cloned()
        .collect()
}
