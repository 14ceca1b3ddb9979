//! A bounded protocol fuzz run of plangate's HTTP front with a third-party
//! MCP fuzzer (PyPI `mcp-fuzzer`, pinned, installed by
//! `scripts/install-peers`): malformed and hostile requests of every MCP
//! method, with no key and with a `plan`-scope key. Afterwards plangate
//! still serves, logged no panic, its memory grew boundedly, and what was
//! recorded before — another key's plan — is exactly as it was, and the
//! site behind it unchanged (neither caller may write).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Command;

use common::*;
use serde_json::{Value, json};

/// Resident memory of a process, in KiB.
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

fn fuzz(peers: &Peers, url: &str, out: &std::path::Path, key: Option<&str>, args: &[&str]) {
    let mut cmd = Command::new(&peers.fuzzer);
    cmd.args(["--protocol", "streamablehttp", "--endpoint", url])
        .args([
            "--allow-host",
            "127.0.0.1",
            "--seed",
            "7",
            "--timeout",
            "10",
        ])
        .arg("--output-dir")
        .arg(out)
        .args(args)
        .env_remove("MCP_API_KEY");
    if let Some(key) = key {
        cmd.arg("--auth-env").env("MCP_API_KEY", key);
    }
    let run = cmd.output().expect("cannot run mcp-fuzzer");
    // The fuzzer's exit status reports its findings (a gateway accepting
    // a malformed request it could refuse counts as one); what matters
    // here is what happened to plangate, checked by the caller.
    assert!(
        String::from_utf8_lossy(&run.stdout).contains("MCP Fuzzer Summary"),
        "mcp-fuzzer did not run: {}\n{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
}

#[tokio::test]
async fn a_protocol_fuzz_run_finds_no_panic_bounded_memory_and_every_recorded_step_intact() {
    let peers = peers();
    let scratch = Scratch::new();
    let config = demo_config(&scratch, "[gateway]\nanonymous = \"read\"\n");
    let owner = scratch.create_key("owner", "write");
    let planner = scratch.create_key("fuzz", "plan");
    let gw = serve_http(&scratch, &["--config", &config]);

    // What is on the record before: the owner's two-step plan.
    let client = http_client(&gw.url(), Some(&owner)).await.unwrap();
    call(&client, "plangate_begin_session", json!({"mode": "plan"}))
        .await
        .unwrap();
    for args in [
        json!({"menu": "main", "label": "Team", "url": "/team"}),
        json!({"menu": "main", "label": "Jobs", "url": "/jobs"}),
    ] {
        let r = call(&client, "create_menu_item", args).await.unwrap();
        assert_eq!(r.structured_content.unwrap()["code"], "plan_step");
    }
    let plan_before = call(&client, "plangate_get_plan", json!({}))
        .await
        .unwrap()
        .structured_content
        .unwrap();
    client.cancel().await.unwrap();
    let site_before = site_state(&scratch.path().join("site.json"));
    let pid = gw.child.id();
    let rss_before = rss_kib(pid);

    let out = scratch.path().join("fuzz-out");
    let protocol = ["--mode", "protocol", "--runs-per-type", "8"].as_slice();
    let tools = ["--mode", "tools", "--runs", "4", "--phase", "both"].as_slice();
    for (run, key, args) in [
        ("anonymous", None, protocol),
        ("protocol", Some(planner.as_str()), protocol),
        ("tools", Some(planner.as_str()), tools),
    ] {
        fuzz(peers, &gw.url(), &out.join(run), key, args);
    }

    // Still serving, nothing panicked.
    let health = reqwest::get(gw.url().replace("/mcp", "/healthz"))
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    let log = gw.log();
    assert!(!log.contains("panicked"), "plangate panicked:\n{log}");
    // Memory: sessions and plans the fuzzer left are bounded by the caps.
    let rss_after = rss_kib(pid);
    assert!(
        rss_after < rss_before + 150 * 1024,
        "RSS grew from {rss_before} KiB to {rss_after} KiB"
    );

    // The owner's plan is exactly as recorded; the site is untouched.
    let client = http_client(&gw.url(), Some(&owner)).await.unwrap();
    let plan_after = call(&client, "plangate_get_plan", json!({}))
        .await
        .unwrap()
        .structured_content
        .unwrap();
    for field in ["plan_digest", "pending_steps", "steps"] {
        assert_eq!(plan_after[field], plan_before[field], "{field}");
    }
    client.cancel().await.unwrap();
    assert_eq!(site_state(&scratch.path().join("site.json")), site_before);
    // Whatever the plan key's fuzzing planned stays a plan: nothing applied.
    let export = scratch.run(&["audit", "export", "--key", "fuzz"]);
    let events: Vec<Value> = String::from_utf8_lossy(&export.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .collect();
    let applied = events
        .iter()
        .filter(|e| e["type"] == "step_applied")
        .count();
    assert_eq!(applied, 0);
    eprintln!(
        "fuzzed: RSS {rss_before} -> {rss_after} KiB; the plan key's fuzzing left {} events ({} steps planned)",
        events.len(),
        events
            .iter()
            .filter(|e| e["type"] == "step_planned")
            .count()
    );
}
