//! At most once across processes: two gateway processes on one data dir,
//! one counting upstream, a 50-step plan applied from both at once, again
//! and again. Every step reaches the upstream exactly once, and the two
//! receipts together tell exactly what ran.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use serde_json::json;

const STEPS: u64 = 50;

fn reps() -> u64 {
    env_count("PLANGATE_RACE_REPS", 20)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_gateways_applying_one_plan_at_once_run_every_step_exactly_once() {
    let scratch = Scratch::new();
    let token = scratch.create_key("agent", "write");
    let (config, log) = counting_config(&scratch, "max_steps = 100\nlease = \"5s\"\n");
    let a = serve_http(&scratch, &["--config", &config]);
    let b = serve_http(&scratch, &["--config", &config]);
    let planner = http_client(&a.url(), Some(&token)).await.unwrap();
    let on_a = http_client(&a.url(), Some(&token)).await.unwrap();
    let on_b = http_client(&b.url(), Some(&token)).await.unwrap();

    let mut busy = 0;
    for rep in 0..reps() {
        call(&planner, "plangate_begin_session", json!({"mode": "plan"}))
            .await
            .unwrap();
        for i in 0..STEPS {
            let r = call(&planner, "bump", json!({"n": rep * 1000 + i}))
                .await
                .unwrap();
            assert_eq!(body(&r)["planned"], true, "{r:?}");
        }
        let (ra, rb) = tokio::join!(
            call(&on_a, "plangate_apply_plan", json!({})),
            call(&on_b, "plangate_apply_plan", json!({}))
        );
        let (ra, rb) = (body(&ra.unwrap()), body(&rb.unwrap()));
        let mut ran = Vec::new();
        for receipt in [&ra, &rb] {
            if receipt["code"] == "apply_in_progress" {
                busy += 1;
                continue;
            }
            assert_eq!(receipt["failed"], 0, "{receipt}");
            assert_eq!(receipt["in_doubt"], 0, "{receipt}");
            for s in receipt["steps"].as_array().unwrap() {
                if s["outcome"] == "applied" {
                    ran.push(s["result"]["n"].as_u64().unwrap());
                }
            }
        }
        ran.sort_unstable();
        let expected: Vec<u64> = (0..STEPS).map(|i| rep * 1000 + i).collect();
        assert_eq!(
            ran, expected,
            "rep {rep}: the receipts tell exactly what ran"
        );
        let counted = deliveries(&log);
        for n in &expected {
            assert_eq!(
                counted.get(n),
                Some(&1),
                "rep {rep}: step {n} reached the upstream once"
            );
        }
    }
    let total: u64 = deliveries(&log).values().sum();
    assert_eq!(total, reps() * STEPS, "no delivery beyond the plan");
    eprintln!(
        "race: {} reps × {STEPS} steps, two gateways; the other apply was told apply_in_progress {busy} time(s); duplicates 0",
        reps()
    );
    for c in [planner, on_a, on_b] {
        c.cancel().await.unwrap();
    }
}
