//! A preview is a read by the caller (docs/security.md, "Previews"), on
//! the official `server-filesystem` and `server-memory`: a key a rule
//! keeps from reading a file, or whose read tool is disabled, cannot read
//! it through the preview of a write it plans — not in the planned
//! answer, `get_plan` or an error — while the person still sees it in
//! `plans show`; a disabled read is never called at all (a tap on the
//! server's stdin shows it); and a target swapped for a link to another
//! file with the same content is `stale_target`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::PathBuf;

use common::*;
use serde_json::{Value, json};

const CANARY: &str = "CANARY bob salary 250000";

/// A filesystem root with `secrets/payroll.txt` holding the canary, the
/// real filesystem server and a memory server behind a tap (its traffic
/// logged to `tap.jsonl`), `extra` config after them, and a `plan` key.
struct World {
    scratch: Scratch,
    root: PathBuf,
    tap: PathBuf,
    config: String,
    token: String,
}

fn world(extra: &str) -> World {
    let scratch = Scratch::new();
    let root = std::fs::canonicalize(scratch.path()).unwrap().join("root");
    std::fs::create_dir_all(root.join("secrets")).unwrap();
    std::fs::write(root.join("secrets/payroll.txt"), format!("{CANARY}\n")).unwrap();
    let tap_js = repo_root().join("tests/interop/tap.mjs");
    let tap = scratch.path().join("tap.jsonl");
    let wrap = [
        tap_js.display().to_string(),
        tap.display().to_string(),
        "--".to_owned(),
        "node".to_owned(),
    ];
    let servers = fs_and_memory_toml(&root, None, &wrap, &scratch.path().join("memory.jsonl"));
    let config = scratch.write(
        "plangate.toml",
        &format!(
            "{servers}\n{}",
            extra.replace("{root}", &root.display().to_string())
        ),
    );
    let token = scratch.create_key("agent", "plan");
    World {
        scratch,
        root,
        tap,
        config: config.display().to_string(),
        token,
    }
}

/// Every tool the memory server was asked to call.
fn memory_calls(w: &World) -> Vec<String> {
    std::fs::read_to_string(&w.tap)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["dir"] == "to_server" && e["msg"]["method"] == "tools/call")
        .map(|e| e["msg"]["params"]["name"].as_str().unwrap_or("").to_owned())
        .collect()
}

/// The agent's client, once a person applied its plan to create `alice`,
/// whose observation is the canary.
async fn with_alice(w: &World) -> Client {
    let agent = config_client(&w.scratch, &w.config, &w.token).await;
    ok(
        &agent,
        "memory__create_entities",
        json!({"entities": [{"name": "alice", "entityType": "person", "observations": [CANARY]}]}),
    )
    .await;
    let digest = plan_digest(&agent).await;
    apply_as_person(w, &digest);
    agent
}

/// With `alice` created (see [`with_alice`]), the agent plans to delete
/// her: its client, and the planned answer, which never carries her
/// observation.
async fn planned_delete_of_alice(w: &World) -> (Client, Value) {
    let agent = with_alice(w).await;
    let deleted = ok(
        &agent,
        "memory__delete_entities",
        json!({"entityNames": ["alice"]}),
    )
    .await;
    assert!(!deleted.to_string().contains("CANARY"), "{deleted}");
    (agent, deleted)
}

/// Applies the key's plan as a person, at its current digest.
fn apply_as_person(w: &World, digest: &str) -> Value {
    let out = w.scratch.run(&[
        "plans", "apply", "--config", &w.config, "--key", "agent", "--digest", digest, "--json",
    ]);
    serde_json::from_str(&stdout(&out)).unwrap_or_else(|e| panic!("{e}: {}", stderr(&out)))
}

const NO_SECRET_READS: &str = r#"
[[rules]]
name = "no-secret-reads"
when = "effect == 'read' && paths.exists(p, glob(p, '{root}/secrets/**'))"
outcome = "refuse"
message = "secrets are not for agents"
"#;

#[tokio::test]
async fn a_file_the_key_may_not_read_never_comes_back_through_a_preview() {
    let w = world(NO_SECRET_READS);
    let agent = config_client(&w.scratch, &w.config, &w.token).await;
    let payroll = w.root.join("secrets/payroll.txt");

    // The rule holds for a direct read.
    let read = call(&agent, "fs__read_text_file", json!({"path": payroll}))
        .await
        .unwrap();
    assert_eq!(body(&read)["code"], "forbidden_by_rule");

    // A write over it, and an edit with the server's own dry run: planned,
    // and nothing the agent reads carries the file's content.
    let written = call(
        &agent,
        "fs__write_file",
        json!({"path": payroll, "content": "nothing\n"}),
    )
    .await
    .unwrap();
    let edited = call(
        &agent,
        "fs__edit_file",
        json!({"path": payroll, "edits": [{"oldText": "bob", "newText": "eve"}]}),
    )
    .await
    .unwrap();
    let plan = call(&agent, "plangate_get_plan", json!({})).await.unwrap();
    for answer in [&written, &edited, &plan] {
        let text = serde_json::to_string(answer).unwrap();
        assert!(!text.contains("CANARY"), "the preview leaked: {text}");
        assert!(!text.contains("250000"), "the preview leaked: {text}");
    }
    let shown = body(&written);
    assert_eq!(shown["code"], "plan_step", "{shown}");
    assert_eq!(
        shown["preview"]["reason"], "preview withheld: this key may not read the target",
        "{shown}"
    );
    assert!(shown["preview"].get("before_digest").is_none(), "{shown}");
    let steps = body(&plan)["steps"].clone();
    assert_eq!(steps.as_array().unwrap().len(), 2, "{steps}");
    for step in steps.as_array().unwrap() {
        assert_eq!(
            step["preview"]["reason"],
            "preview withheld: this key may not read the target"
        );
    }

    // The person sees what the write would change, and that the agent
    // did not.
    let person = succeeded(
        &["plans", "show"],
        &w.scratch
            .run(&["plans", "show", "--config", &w.config, "--key", "agent"]),
    );
    assert!(person.contains(&format!("-{CANARY}")), "{person}");
    let as_json = w.scratch.run(&[
        "plans", "show", "--config", &w.config, "--key", "agent", "--json",
    ]);
    let as_json: Value = serde_json::from_str(&stdout(&as_json)).unwrap();
    assert!(
        as_json["steps"][0]["preview_withheld"]
            .as_str()
            .unwrap()
            .contains("no-secret-reads"),
        "{as_json}"
    );

    // Applied by the person: the file is written, and the receipt the
    // agent reads says nothing of what was there.
    let digest = body(&plan)["plan_digest"].as_str().unwrap().to_owned();
    let receipt = apply_as_person(&w, &digest);
    assert!(!receipt.to_string().contains("CANARY"), "{receipt}");
    assert_eq!(std::fs::read_to_string(&payroll).unwrap(), "nothing\n");
    agent.cancel().await.unwrap();
}

#[tokio::test]
async fn a_disabled_read_is_never_called_for_a_preview_and_a_refused_one_is_withheld() {
    let w = world(
        r#"
[upstreams.memory.tools.open_nodes]
enabled = false
"#,
    );
    let (agent, deleted) = planned_delete_of_alice(&w).await;
    assert_eq!(deleted["preview"]["kind"], "unavailable", "{deleted}");
    assert!(
        mentions(&deleted["preview"]["reason"], "disabled"),
        "{deleted}"
    );
    assert!(
        memory_calls(&w).iter().any(|t| t == "create_entities"),
        "the tap sees the server's calls: {:?}",
        memory_calls(&w)
    );
    assert!(
        !memory_calls(&w).iter().any(|t| t == "open_nodes"),
        "a disabled read was called: {:?}",
        memory_calls(&w)
    );
    agent.cancel().await.unwrap();

    // Enabled, but a rule refuses this key the read: the preview is taken
    // for the person and withheld from the agent.
    let w = world(
        r#"
[[rules]]
name = "no-graph-reads"
when = "tool == 'open_nodes' && key.name == 'agent'"
outcome = "refuse"
message = "the graph is private"
"#,
    );
    let (agent, deleted) = planned_delete_of_alice(&w).await;
    assert!(
        !deleted["predicted_effect"]
            .as_str()
            .unwrap()
            .contains("exist"),
        "the count of what exists is the preview's too: {deleted}"
    );
    let person = succeeded(
        &["plans", "show"],
        &w.scratch
            .run(&["plans", "show", "--config", &w.config, "--key", "agent"]),
    );
    assert!(person.contains("CANARY"), "{person}");
    agent.cancel().await.unwrap();
}

#[tokio::test]
async fn a_target_swapped_for_a_link_to_a_file_with_the_same_content_is_stale() {
    let w = world("");
    let agent = config_client(&w.scratch, &w.config, &w.token).await;
    std::fs::create_dir_all(w.root.join("notes")).unwrap();
    std::fs::create_dir_all(w.root.join("other")).unwrap();
    let target = w.root.join("notes/a.txt");
    let elsewhere = w.root.join("other/b.txt");
    std::fs::write(&target, "same\n").unwrap();
    std::fs::write(&elsewhere, "same\n").unwrap();
    let planned = ok(
        &agent,
        "fs__write_file",
        json!({"path": target, "content": "new\n"}),
    )
    .await;
    let digest = planned["plan"]["plan_digest"].as_str().unwrap().to_owned();
    // After review, the file is swapped for a link to another file that
    // reads the same.
    std::fs::remove_file(&target).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &target).unwrap();
    let receipt = apply_as_person(&w, &digest);
    assert_eq!(
        receipt["steps"][0]["error"]["code"], "stale_target",
        "{receipt}"
    );
    assert_eq!(std::fs::read_to_string(&elsewhere).unwrap(), "same\n");
    assert!(target.is_symlink());
    agent.cancel().await.unwrap();
}

#[tokio::test]
async fn a_failed_step_approved_by_a_person_does_not_run_twice_on_the_agents_word() {
    let peers = peers();
    let scratch = Scratch::new();
    let root = std::fs::canonicalize(scratch.path()).unwrap().join("root");
    std::fs::create_dir_all(&root).unwrap();
    let tap = scratch.path().join("fs-tap.jsonl");
    let config = scratch.write(
        "plangate.toml",
        &format!(
            "[upstreams.fs]\ncommand = \"node\"\nargs = [{:?}, {:?}, \"--\", \"node\", {:?}, {:?}]\n",
            repo_root().join("tests/interop/tap.mjs").display().to_string(),
            tap.display().to_string(),
            peers
                .js("@modelcontextprotocol/server-filesystem/dist/index.js")
                .display()
                .to_string(),
            root.display().to_string(),
        ),
    );
    let config = config.display().to_string();
    let token = scratch.create_key("agent", "plan");
    let agent = config_client(&scratch, &config, &token).await;
    let writes = || {
        std::fs::read_to_string(&tap)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|e| e["dir"] == "to_server" && e["msg"]["params"]["name"] == "write_file")
            .count()
    };
    // Its directory does not exist yet: the server will answer an error.
    let target = root.join("later/a.txt");
    let planned = ok(
        &agent,
        "write_file",
        json!({"path": target, "content": "once\n"}),
    )
    .await;
    let step = planned["step_id"].as_str().unwrap().to_owned();
    let digest = planned["plan"]["plan_digest"].as_str().unwrap().to_owned();
    succeeded(
        &["plans", "approve"],
        &scratch.run(&["plans", "approve", "--key", "agent", "--digest", &digest]),
    );
    let first = call_body(&agent, "plangate_apply_plan", json!({})).await;
    assert_eq!(first["failed"], 1, "{first}");
    assert_eq!(writes(), 1);

    // The directory appears; the agent names the failed step again. The
    // person's yes was spent on the first run: nothing is sent.
    std::fs::create_dir_all(root.join("later")).unwrap();
    let again = call_body(&agent, "plangate_apply_plan", json!({"step_ids": [step]})).await;
    assert_ne!(again["applied"], 1, "{again}");
    assert_eq!(writes(), 1, "the failed step ran again: {again}");
    assert!(!target.exists());

    // A person's new yes to that step lets it run once more.
    let digest = plan_digest(&agent).await;
    succeeded(
        &["plans", "approve"],
        &scratch.run(&[
            "plans", "approve", "--key", "agent", "--digest", &digest, &step,
        ]),
    );
    let third = call_body(&agent, "plangate_apply_plan", json!({"step_ids": [step]})).await;
    assert_eq!(third["applied"], 1, "{third}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "once\n");
    agent.cancel().await.unwrap();
}
