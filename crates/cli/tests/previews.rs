//! Plans a person can read, on the servers people use (issue: enforcement
//! and readable plans): the official `server-filesystem` and
//! `server-memory` behind plangate, matched to their built-in profiles by
//! what they say they are. A planned `write_file` names its path and
//! carries a diff of exactly the lines it changes (a new file: that it
//! creates it); `plans show` prints the diff; a file changed between
//! approval and apply makes its step `stale_target` and stays as the person
//! last saw it; `create_entities` previews which entities exist already.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use serde_json::json;

/// A scratch dir with a filesystem root holding `existing.txt`, a config
/// of the real filesystem and memory servers, and a `plan` key `agent`.
fn world() -> FsWorld {
    FsWorld::new(|scratch, root| {
        std::fs::write(
            root.join("existing.txt"),
            "line one\nline two\nline three\n",
        )
        .unwrap();
        let memory_file = scratch.path().join("memory.jsonl");
        scratch.write(
            "plangate.toml",
            &fs_and_memory_toml(root, None, &[], &memory_file),
        )
    })
}

/// Runs an operator command that must succeed; returns stdout.
fn op_ok(scratch: &Scratch, args: &[&str]) -> String {
    succeeded(args, &scratch.run(args))
}

#[tokio::test]
async fn a_file_write_shows_its_diff_and_a_file_changed_after_approval_is_not_overwritten() {
    let w = world();
    let agent = config_client(&w.scratch, &w.config, &w.token).await;
    let existing = w.root.join("existing.txt");
    let new = w.root.join("notes.md");

    // A new file: the step names it and says it creates it.
    let created = ok(
        &agent,
        "fs__write_file",
        json!({"path": new, "content": "hello\nworld\n"}),
    )
    .await;
    assert_eq!(created["code"], "plan_step");
    let sentence = created["predicted_effect"].as_str().unwrap();
    assert!(sentence.contains("notes.md"), "{sentence}");
    assert!(sentence.contains("creates it (2 lines)"), "{sentence}");
    let p = &created["preview"];
    assert_eq!(p["kind"], "diff", "{created}");
    assert_eq!(p["creates"], true);
    assert!(
        p["diff"].as_str().unwrap().starts_with("--- /dev/null\n"),
        "{p}"
    );
    assert!(p["before_digest"].as_str().unwrap().starts_with("sha256:"));

    // An overwrite: a diff of exactly the line that changes.
    let changed = ok(
        &agent,
        "fs__write_file",
        json!({"path": existing, "content": "line one\nline 2\nline three\n"}),
    )
    .await;
    let p = &changed["preview"];
    assert_eq!(p["creates"], false, "{changed}");
    assert_eq!(
        (p["added"].as_u64(), p["removed"].as_u64()),
        (Some(1), Some(1))
    );
    let diff = p["diff"].as_str().unwrap();
    assert!(diff.contains("\n-line two\n+line 2\n"), "{diff}");
    assert_ne!(created["predicted_effect"], changed["predicted_effect"]);
    assert!(
        !existing.with_file_name("notes.md").exists(),
        "planning wrote"
    );

    // The person reads the same in `plans show` (plain: not a terminal).
    let shown = op_ok(&w.scratch, &["plans", "show", "--key", "agent"]);
    assert!(shown.contains("-line two\n+line 2\n"), "{shown}");
    assert!(
        shown.contains("+++ ") && shown.contains("notes.md"),
        "{shown}"
    );
    assert!(!shown.contains('\u{1b}'), "colour when piped:\n{shown}");

    // The agent cannot run or apply it itself, nor leave: a plan key's
    // writes are planned in every mode, and its apply waits for a person.
    let no = call_body(&agent, "plangate_apply_plan", json!({})).await;
    assert_eq!(no["code"], "forbidden", "{no}");
    begin(&agent, "default").await;
    let still = ok(
        &agent,
        "fs__write_file",
        json!({"path": w.root.join("sneaky.txt"), "content": "x"}),
    )
    .await;
    assert_eq!(still["code"], "plan_step", "{still}");
    assert!(!w.root.join("sneaky.txt").exists());
    call_body(
        &agent,
        "plangate_discard_plan",
        json!({"step_ids": [still["step_id"]]}),
    )
    .await;

    // The person approves; then someone changes the file; then the agent
    // applies. The new file is written; the changed one is not touched.
    let digest = plan_digest(&agent).await;
    op_ok(
        &w.scratch,
        &["plans", "approve", "--key", "agent", "--digest", &digest],
    );
    std::fs::write(&existing, "line one\nsomeone else's line\nline three\n").unwrap();
    let receipt = call_body(
        &agent,
        "plangate_apply_plan",
        json!({"plan_digest": digest, "continue_on_error": true}),
    )
    .await;
    assert_eq!(receipt["applied"], 1, "{receipt}");
    assert_eq!(receipt["failed"], 1, "{receipt}");
    let stale = receipt["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["step_id"] == changed["step_id"])
        .unwrap();
    assert_eq!(stale["outcome"], "failed", "{stale}");
    assert_eq!(stale["error"]["code"], "stale_target", "{stale}");
    assert!(
        stale["error"]["message"]
            .as_str()
            .unwrap()
            .contains("changed since the plan was reviewed"),
        "{stale}"
    );
    assert_eq!(
        std::fs::read_to_string(&existing).unwrap(),
        "line one\nsomeone else's line\nline three\n",
        "the file the person never saw was overwritten"
    );
    assert_eq!(std::fs::read_to_string(&new).unwrap(), "hello\nworld\n");
    // Naming the stale step again never runs it against the new content.
    let again = call_body(
        &agent,
        "plangate_apply_plan",
        json!({"step_ids": [changed["step_id"]]}),
    )
    .await;
    assert_ne!(again["applied"], 1, "{again}");
    assert_eq!(
        std::fs::read_to_string(&existing).unwrap(),
        "line one\nsomeone else's line\nline three\n"
    );
    agent.cancel().await.unwrap();
}

#[tokio::test]
async fn memory_writes_preview_which_entities_exist_and_edit_file_uses_the_servers_dry_run() {
    let w = world();
    let agent = config_client(&w.scratch, &w.config, &w.token).await;
    let entity = |name: &str| json!({"name": name, "entityType": "person", "observations": []});
    // Alice exists once an operator applied her creation.
    ok(
        &agent,
        "memory__create_entities",
        json!({"entities": [entity("Alice")]}),
    )
    .await;
    let config = w.config.clone();
    let digest = shown_digest(&w.scratch, "agent");
    op_ok(
        &w.scratch,
        &[
            "plans", "apply", "--key", "agent", "--digest", &digest, "--config", &config,
        ],
    );
    let both = ok(
        &agent,
        "memory__create_entities",
        json!({"entities": [entity("Alice"), entity("Bob")]}),
    )
    .await;
    let sentence = both["predicted_effect"].as_str().unwrap();
    assert!(sentence.contains("Alice, Bob"), "{sentence}");
    assert!(sentence.contains("1 of them exist already"), "{sentence}");
    let p = &both["preview"];
    assert_eq!(p["kind"], "state", "{both}");
    assert_eq!(p["state"]["entities"][0]["name"], "Alice", "{p}");

    // edit_file: the server's own dry run is the diff; nothing is written.
    let existing = w.root.join("existing.txt");
    let edit = ok(
        &agent,
        "fs__edit_file",
        json!({"path": existing, "edits": [{"oldText": "line three", "newText": "line 3"}]}),
    )
    .await;
    let diff = edit["preview"]["diff"].as_str().unwrap();
    assert!(
        diff.contains("-line three") && diff.contains("+line 3"),
        "{diff}"
    );
    assert!(!diff.contains("```"), "{diff}");
    assert_eq!(
        std::fs::read_to_string(&existing).unwrap(),
        "line one\nline two\nline three\n",
        "the dry run wrote"
    );
    // An edit the server cannot make is not planned: a step that cannot
    // succeed is no question for a person. The agent reads the server's
    // own words.
    let impossible = call_body(
        &agent,
        "fs__edit_file",
        json!({"path": existing, "edits": [{"oldText": "no such line", "newText": "x"}]}),
    )
    .await;
    assert_eq!(impossible["code"], "invalid_arguments", "{impossible}");
    let said = impossible["message"].as_str().unwrap();
    assert!(
        said.contains("was not planned") && said.contains("no such line"),
        "{said}"
    );
    // A secret in the new text is redacted in the diff as everywhere.
    let secret = format!("sk-{}", "A1b2C3d4E5f6G7h8I9j0K1l2");
    let leaky = ok(
        &agent,
        "fs__write_file",
        json!({"path": w.root.join("env.txt"), "content": format!("KEY={secret}\n")}),
    )
    .await;
    let diff = leaky["preview"]["diff"].as_str().unwrap();
    assert!(!diff.contains(&secret), "{diff}");
    assert!(diff.contains("[redacted]"), "{diff}");
    // A write key's direct write to the real server is on the record.
    let writer = w.scratch.create_key("writer", "write");
    let direct = config_client(&w.scratch, &config, &writer).await;
    let r = call(
        &direct,
        "fs__write_file",
        json!({"path": w.root.join("direct.txt"), "content": "now\n"}),
    )
    .await
    .unwrap();
    assert_ne!(r.is_error, Some(true), "{r:?}");
    assert_eq!(
        std::fs::read_to_string(w.root.join("direct.txt")).unwrap(),
        "now\n"
    );
    direct.cancel().await.unwrap();
    let audit = op_ok(&w.scratch, &["audit", "export", "--key", "writer"]);
    let run = audit
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|e| e["type"] == "call_recorded")
        .unwrap();
    assert_eq!(run["call"]["exposed_as"], "fs__write_file", "{run}");
    assert_eq!(run["call"]["decision"], "run");
    assert_eq!(run["call"]["outcome"], "ok");
    assert_eq!(run["call"]["effect"], "destructive");
    // `config check` names the profile that matched.
    let checked = op_ok(&w.scratch, &["config", "check", "--config", &config]);
    assert!(checked.contains("server-filesystem"), "{checked}");
    agent.cancel().await.unwrap();
}

/// `git -C dir ARGS…`, which must succeed.
fn git(dir: &std::path::Path, args: &[&str]) {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
}

#[tokio::test]
async fn a_commit_through_the_reference_git_server_shows_the_staged_diff_and_goes_stale_when_staging_changes()
 {
    let peers = peers();
    let scratch = Scratch::new();
    let repo = scratch.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    git(&repo, &["config", "user.email", "t@example.com"]);
    git(&repo, &["config", "user.name", "T"]);
    std::fs::write(repo.join("a.txt"), "one\ntwo\n").unwrap();
    git(&repo, &["add", "a.txt"]);
    git(&repo, &["commit", "-q", "-m", "first"]);
    std::fs::write(repo.join("a.txt"), "one\nTWO\n").unwrap();
    git(&repo, &["add", "a.txt"]);
    let config = scratch.write(
        "plangate.toml",
        &format!(
            "[upstreams.git]\ncommand = {:?}\nargs = [\"-m\", \"mcp_server_git\", \"--repository\", {:?}]\n",
            peers.python.display().to_string(),
            repo.display().to_string()
        ),
    );
    let config = config.display().to_string();
    let token = scratch.create_key("agent", "plan");
    let agent = config_client(&scratch, &config, &token).await;
    wait_for_tool(agent.peer(), "git_commit").await;
    let step = ok(
        &agent,
        "git_commit",
        json!({"repo_path": repo, "message": "second"}),
    )
    .await;
    let sentence = step["predicted_effect"].as_str().unwrap();
    assert!(sentence.contains("second"), "{sentence}");
    let diff = step["preview"]["diff"].as_str().unwrap();
    assert!(diff.contains("-two") && diff.contains("+TWO"), "{diff}");
    // Staging changes after approval: the commit would record what the
    // person never saw, so it does not run.
    let digest = plan_digest(&agent).await;
    succeeded(
        &["plans", "approve"],
        &scratch.run(&["plans", "approve", "--key", "agent", "--digest", &digest]),
    );
    std::fs::write(repo.join("b.txt"), "sneaked in\n").unwrap();
    git(&repo, &["add", "b.txt"]);
    let receipt = call_body(
        &agent,
        "plangate_apply_plan",
        json!({"plan_digest": digest}),
    )
    .await;
    assert_eq!(
        receipt["steps"][0]["error"]["code"], "stale_target",
        "{receipt}"
    );
    let log = std::process::Command::new("git")
        .arg("-C")
        .arg(&repo)
        .args(["log", "--oneline"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&log.stdout).lines().count(),
        1,
        "a commit ran"
    );
    agent.cancel().await.unwrap();
}

#[tokio::test]
async fn the_same_write_sent_again_after_its_target_changed_replaces_its_step() {
    let w = world();
    let agent = config_client(&w.scratch, &w.config, &w.token).await;
    let existing = w.root.join("existing.txt");
    let write = json!({"path": existing, "content": "line one\nline 2\nline three\n"});
    let first = ok(&agent, "fs__write_file", write.clone()).await;
    // Unchanged target: the same step answers.
    let again = ok(&agent, "fs__write_file", write.clone()).await;
    assert_eq!(again["step_id"], first["step_id"]);
    assert_eq!(again["deduplicated"], true);
    // Changed target: a new step with the new preview; the old one goes,
    // and so does any approval of the plan it was in.
    let digest = get_plan(&agent).await["plan_digest"].clone();
    std::fs::write(&existing, "line one\nline two, edited\nline three\n").unwrap();
    let third = ok(&agent, "fs__write_file", write).await;
    assert_ne!(third["step_id"], first["step_id"]);
    assert_eq!(third["deduplicated"], false);
    let diff = third["preview"]["diff"].as_str().unwrap();
    assert!(diff.contains("-line two, edited\n+line 2"), "{diff}");
    let plan = get_plan(&agent).await;
    assert_eq!(plan["pending_steps"], 1, "{plan}");
    assert_eq!(plan["steps"][0]["step_id"], third["step_id"]);
    assert_ne!(plan["plan_digest"], digest);
    agent.cancel().await.unwrap();
}
