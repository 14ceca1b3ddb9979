//! Crash safety: SIGKILL a gateway at a random moment during a 20-step
//! apply, restart, apply again — over and over, on SQLite (several
//! processes on one data dir) and on PostgreSQL. No step may reach the
//! upstream twice, no recorded step may be lost, and every step's state
//! must agree with the upstream's own count.
//!
//! CI runs `PLANGATE_CHAOS_TRIALS` trials per store (default 10); the full
//! run is `PLANGATE_CHAOS_TRIALS=100 cargo test -p plangate --test chaos
//! -- --nocapture`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use plangate_core::StepStatus;
use serde_json::json;

const STEPS: u64 = 20;

fn trials() -> u64 {
    env_count("PLANGATE_CHAOS_TRIALS", 10)
}

#[derive(Default, Debug)]
struct Tally {
    trials: u64,
    kills_mid_call: u64,
    in_doubt: u64,
    applied: u64,
    duplicates: u64,
    lost: u64,
}

/// A small deterministic generator, so a failing trial can be re-run.
fn jitter(trial: u64) -> u64 {
    let mut x = trial
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    x ^= x >> 33;
    x % 450
}

async fn run(store_label: &str, database: Option<String>) -> Tally {
    let scratch = Scratch::new();
    let (config, log) = counting_config(&scratch, "lease = \"1s\"\n");
    let mut extra = vec!["--config".to_owned(), config.clone()];
    if let Some(db) = &database {
        extra.push("--database".into());
        extra.push(db.clone());
    }
    let extra_refs: Vec<&str> = extra.iter().map(String::as_str).collect();
    let store = open_store(&scratch, database.as_deref()).await;
    let log_key = plangate_store::DataDir::open(scratch.data_dir())
        .expect("data dir")
        .key_material(&plangate_store::KeysFromEnv::default())
        .expect("keys")
        .log_key();
    let keylog = plangate_gateway::key_log::KeyLog::new(Arc::clone(&store), log_key);
    let mut tally = Tally::default();

    for trial in 0..trials() {
        let name = format!("trial{trial}");
        let token = create_key(&scratch, database.as_deref(), &name);
        let key = store.find_key(&name).await.unwrap().unwrap();

        // Plan 20 steps through gateway A, then apply and kill it mid-way.
        let a = serve_http(&scratch, &extra_refs);
        let client = http_client(&a.url(), Some(&token)).await.unwrap();
        plan_steps(&client, trial).await;
        let applying = {
            let url = a.url();
            let token = token.clone();
            // The kill may come before this client even connects: fine.
            tokio::spawn(async move {
                let c = http_client(&url, Some(&token)).await.ok()?;
                call(&c, "plangate_apply_plan", json!({})).await.ok()
            })
        };
        tokio::time::sleep(Duration::from_millis(jitter(trial))).await;
        let running_at_kill = keylog
            .state(&key.id)
            .await
            .unwrap()
            .steps
            .iter()
            .any(|s| s.status == StepStatus::Running);
        drop(a); // SIGKILL the gateway (and its upstream child).
        // The client of a killed gateway may wait for ever on its stream.
        applying.abort();
        drop(client);
        if running_at_kill {
            tally.kills_mid_call += 1;
        }

        // Restart (gateway B on the same store) after the dead claim's lease,
        // and apply what is left.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        apply_the_rest(&scratch, &extra_refs, &token).await;

        // Compare plangate's record with the upstream's own count.
        let state = keylog.state(&key.id).await.unwrap();
        count_trial(&mut tally, trial, &state.steps, &deliveries(&log));
    }
    eprintln!(
        "chaos [{store_label}]: trials {} | kills mid-call {} | in_doubt found {} | applied {} | duplicates {} | lost {}",
        tally.trials,
        tally.kills_mid_call,
        tally.in_doubt,
        tally.applied,
        tally.duplicates,
        tally.lost
    );
    tally
}

/// The store the gateways share, opened by the test to read keys' logs:
/// PostgreSQL at `database`, else the scratch data dir's SQLite file.
async fn open_store(scratch: &Scratch, database: Option<&str>) -> Arc<dyn plangate_store::Store> {
    match database {
        Some(db) => plangate_store::open_postgres(db).await.unwrap(),
        None => {
            std::fs::create_dir_all(scratch.data_dir()).unwrap();
            plangate_store::open_sqlite(&scratch.data_dir().join("plangate.db"))
                .await
                .unwrap()
        }
    }
}

/// `plangate keys create` of a `write` key `name` in the trials' store;
/// returns its token.
fn create_key(scratch: &Scratch, database: Option<&str>, name: &str) -> String {
    let mut args = vec!["keys", "create", "--scope", "write", "--name"];
    if let Some(db) = database {
        args = vec![
            "--database",
            db,
            "keys",
            "create",
            "--scope",
            "write",
            "--name",
        ];
    }
    args.push(name);
    let out = scratch.run(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// Plans the trial's [`STEPS`] `bump`s, each of which must be planned.
async fn plan_steps(client: &Client, trial: u64) {
    call(client, "plangate_begin_session", json!({"mode": "plan"}))
        .await
        .unwrap();
    for i in 0..STEPS {
        let r = call(client, "bump", json!({"n": trial * 100 + i, "ms": 15}))
            .await
            .unwrap();
        assert_eq!(r.structured_content.unwrap()["planned"], true);
    }
}

/// Starts gateway B on the same store and applies what is left; the dead
/// apply must not be found still in progress.
async fn apply_the_rest(scratch: &Scratch, extra: &[&str], token: &str) {
    let b = serve_http(scratch, extra);
    let client = http_client(&b.url(), Some(token)).await.unwrap();
    let receipt = call(&client, "plangate_apply_plan", json!({}))
        .await
        .unwrap();
    let receipt = receipt.structured_content.unwrap();
    assert_ne!(
        receipt["code"], "apply_in_progress",
        "the dead apply was found: {receipt}"
    );
    drop(client);
    drop(b);
}

/// Counts a trial's steps against the upstream's deliveries (`counted`:
/// n → how many times): none may be lost, duplicated, or delivered while
/// recorded as never run.
fn count_trial(
    tally: &mut Tally,
    trial: u64,
    steps: &[Arc<plangate_core::Step>],
    counted: &std::collections::BTreeMap<u64, u64>,
) {
    assert_eq!(
        steps.len() as u64,
        STEPS,
        "trial {trial}: a recorded step was lost"
    );
    for step in steps {
        let n = step.record.arguments.value()["n"].as_u64().unwrap();
        let count = counted.get(&n).copied().unwrap_or(0);
        if count > 1 {
            tally.duplicates += 1;
        }
        match step.status {
            StepStatus::Applied => {
                tally.applied += 1;
                if count != 1 {
                    tally.lost += 1;
                }
            }
            StepStatus::InDoubt => tally.in_doubt += 1,
            // Delivered yet recorded as never run would be run again.
            StepStatus::Planned | StepStatus::Failed => {
                if count != 0 {
                    tally.lost += 1;
                }
            }
            other => panic!("trial {trial}: step {n} ended {other}"),
        }
    }
    tally.trials += 1;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_during_apply_on_sqlite_never_duplicates_or_loses_a_step() {
    let t = run("sqlite", None).await;
    assert_eq!((t.duplicates, t.lost), (0, 0), "{t:?}");
    assert_eq!(t.applied + t.in_doubt, t.trials * STEPS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_during_apply_on_postgres_never_duplicates_or_loses_a_step() {
    let Ok(base) = std::env::var("PLANGATE_TEST_POSTGRES_URL") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must set PLANGATE_TEST_POSTGRES_URL"
        );
        eprintln!("chaos [postgres]: PLANGATE_TEST_POSTGRES_URL not set; not run");
        return;
    };
    // A fresh schema, so trials never see another run's keys.
    let schema = format!("chaos_{}", std::process::id());
    let status = std::process::Command::new("psql")
        .env("PGOPTIONS", "--client-min-messages=warning")
        .args([
            base.as_str(),
            "-q",
            "-c",
            &format!("DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}"),
        ])
        .status()
        .unwrap();
    assert!(status.success());
    let sep = if base.contains('?') { '&' } else { '?' };
    let url = format!("{base}{sep}options=-c%20search_path%3D{schema}");
    let t = run("postgres", Some(url)).await;
    let _ = std::process::Command::new("psql")
        .env("PGOPTIONS", "--client-min-messages=warning")
        .args([
            base.as_str(),
            "-q",
            "-c",
            &format!("DROP SCHEMA IF EXISTS {schema} CASCADE"),
        ])
        .status();
    assert_eq!((t.duplicates, t.lost), (0, 0), "{t:?}");
    assert_eq!(t.applied + t.in_doubt, t.trials * STEPS);
}
