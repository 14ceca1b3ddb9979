//! Rules over tools and their arguments (`[[rules]]`), on the official
//! `server-filesystem` in plan mode: writes under `ROOT/scratch` run (and
//! are recorded with the rule's name), a write elsewhere is planned,
//! `scratch/../x` and a symlink out of scratch are planned rather than run,
//! anything named `*.env` is refused with the rule's message, `move_file`
//! asks; a `plan` key's scratch write runs on the rule's standing
//! approval; a refuse rule added after planning stops the step at apply.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};

use common::*;
use serde_json::{Value, json};

struct World {
    scratch: Scratch,
    root: PathBuf,
    config: String,
}

fn rules(root: &Path) -> String {
    let root = root.display();
    format!(
        r#"
[[rules]]
name = "no-env"
when = "has(arguments.path) && glob(arguments.path, '/**/*.env')"
outcome = "refuse"
message = "env files hold secrets; a person edits them by hand"

[[rules]]
name = "scratch-runs"
when = "effect != 'read' && has(arguments.path) && glob(arguments.path, '{root}/scratch/**')"
outcome = "run"
modes = ["plan"]

[[rules]]
name = "moves-ask"
when = "tool == 'move_file'"
outcome = "ask"
"#
    )
}

fn world(extra: &str) -> World {
    let scratch = Scratch::new();
    let root = std::fs::canonicalize(scratch.path()).unwrap().join("root");
    std::fs::create_dir_all(root.join("scratch")).unwrap();
    std::fs::create_dir_all(root.join("secrets")).unwrap();
    std::os::unix::fs::symlink(root.join("secrets"), root.join("scratch/link")).unwrap();
    let config = filesystem_config(&scratch, &root, &format!("{}{extra}", rules(&root)));
    World {
        scratch,
        root,
        config: config.display().to_string(),
    }
}

fn write(path: &Path, content: &str) -> Value {
    json!({"path": path, "content": content})
}

/// Writes `content` to `path` through `agent` and checks it ran at once
/// (no plan step) and is on disk.
async fn ran_directly(agent: &Client, path: &Path, content: &str) {
    let ran = call_body(agent, "write_file", write(path, content)).await;
    assert_ne!(ran["code"], "plan_step", "{ran}");
    assert_eq!(std::fs::read_to_string(path).unwrap(), content);
}

/// The `call_recorded` events of the audit export.
fn calls(scratch: &Scratch) -> Vec<Value> {
    let out = scratch.run(&["audit", "export"]);
    assert!(out.status.success(), "{}", stderr(&out));
    stdout(&out)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["type"] == "call_recorded")
        .map(|e| e["call"].clone())
        .collect()
}

/// A world with only the standard rules, and the client of a new key
/// `name` of `scope` in a session begun in plan mode.
async fn plan_agent(name: &str, scope: &str) -> (World, Client) {
    let w = world("");
    let token = w.scratch.create_key(name, scope);
    let agent = plan_client(&w.scratch, &w.config, &token).await;
    (w, agent)
}

/// Writes `content` to `path` through `agent`, which must be planned;
/// returns the step's answer.
async fn planned_write(agent: &Client, path: &Path, content: &str) -> Value {
    let planned = ok(agent, "write_file", write(path, content)).await;
    assert_eq!(planned["code"], "plan_step");
    planned
}

#[tokio::test]
async fn in_plan_mode_scratch_writes_run_others_are_planned_env_files_are_refused_and_moves_ask() {
    let (w, agent) = plan_agent("agent", "write").await;

    // Under scratch: runs at once, on the rule's word.
    ran_directly(&agent, &w.root.join("scratch/a.txt"), "a").await;

    // Elsewhere: planned by the mode; nothing written.
    let planned = planned_write(&agent, &w.root.join("b.txt"), "b").await;
    assert!(planned.get("rule").is_none(), "{planned}");
    assert!(!w.root.join("b.txt").exists());

    // Walking out of scratch, by `..` or by a symlink: planned, not run.
    for sneaky in [
        w.root.join("scratch/../c.txt"),
        w.root.join("scratch/link/d.txt"),
    ] {
        let planned = ok(&agent, "write_file", write(&sneaky, "x")).await;
        assert_eq!(planned["code"], "plan_step", "{sneaky:?}: {planned}");
    }
    assert!(!w.root.join("c.txt").exists());
    assert!(!w.root.join("secrets/d.txt").exists());

    env_files_are_refused(&agent, &w.root).await;

    // move_file asks the person first: this client cannot be asked, so it
    // is told so, and nothing moves.
    let asked = call(
        &agent,
        "move_file",
        json!({"source": w.root.join("scratch/a.txt"), "destination": w.root.join("moved.txt")}),
    )
    .await
    .unwrap();
    assert_eq!(body(&asked)["code"], "elicitation_unsupported", "{asked:?}");
    // The rule that asked is named, not the mode.
    assert!(
        mentions(
            &body(&asked)["message"],
            "the operator's rule \"moves-ask\" asks"
        ),
        "{asked:?}"
    );
    assert!(w.root.join("scratch/a.txt").exists());

    policy_test_says_the_same(&w);
    record_names_the_rules(&w.scratch);
    agent.cancel().await.unwrap();
}

/// Anything named *.env: refused with the rule's message — a read too.
async fn env_files_are_refused(agent: &Client, root: &Path) {
    for (tool, args) in [
        ("write_file", write(&root.join("scratch/prod.env"), "K=V")),
        (
            "read_text_file",
            json!({"path": root.join("scratch/prod.env")}),
        ),
    ] {
        let refused = call(agent, tool, args).await.unwrap();
        assert_eq!(refused.is_error, Some(true), "{refused:?}");
        let body = body(&refused);
        assert_eq!(body["code"], "forbidden_by_rule", "{body}");
        let message = body["message"].as_str().unwrap();
        assert!(message.contains("\"no-env\""), "{message}");
        assert!(message.contains("a person edits them by hand"), "{message}");
    }
    assert!(!root.join("scratch/prod.env").exists());
}

/// `policy test` of a call of `tool` with `args` by the key `agent`, then
/// `extra` (e.g. `--json`).
fn run_policy_test(w: &World, tool: &str, args: &Value, extra: &[&str]) -> std::process::Output {
    let text = args.to_string();
    let mut argv = vec![
        "policy",
        "test",
        "--config",
        &w.config,
        "--key",
        "agent",
        "--tool",
        tool,
        "--arguments",
        &text,
    ];
    argv.extend_from_slice(extra);
    w.scratch.run(&argv)
}

/// `policy test --json` of a call by the key `agent`: its decision and the
/// name of the rule that made it (`null` for none).
fn policy_test(w: &World, tool: &str, args: &Value) -> (String, Value) {
    let out = run_policy_test(w, tool, args, &["--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
    (
        v["decision"].as_str().unwrap().to_owned(),
        v["rule"]["name"].clone(),
    )
}

/// `policy test` says of each call what the gateway did, without making it.
fn policy_test_says_the_same(w: &World) {
    // Writes: (path under the root, content, decision, rule).
    let writes = [
        ("scratch/a2.txt", "a", "run", json!("scratch-runs")),
        ("b2.txt", "b", "plan", Value::Null),
        ("scratch/../c.txt", "c", "plan", Value::Null),
        ("scratch/link/d.txt", "d", "plan", Value::Null),
        ("scratch/prod.env", "K", "refuse", json!("no-env")),
    ]
    .map(|(rel, content, decision, rule)| {
        let args = write(&w.root.join(rel), content);
        ("write_file", args, decision, rule)
    });
    // Reads: (path under the root, decision, rule).
    let reads = [
        ("scratch/prod.env", "refuse", json!("no-env")),
        ("scratch/a.txt", "run", Value::Null),
    ]
    .map(|(rel, decision, rule)| {
        let args = json!({"path": w.root.join(rel)});
        ("read_text_file", args, decision, rule)
    });
    let moves = [(
        "move_file",
        json!({"source": "/x", "destination": "/y"}),
        "ask",
        json!("moves-ask"),
    )];
    for (tool, args, decision, rule) in writes.into_iter().chain(reads).chain(moves) {
        assert_eq!(
            policy_test(w, tool, &args),
            (decision.to_owned(), rule),
            "{tool} {args}"
        );
    }
    let text = succeeded(
        &["policy", "test"],
        &run_policy_test(
            w,
            "write_file",
            &write(&w.root.join("scratch/x.env"), "K"),
            &[],
        ),
    );
    assert!(text.contains("rule \"no-env\" decides: refuse"), "{text}");
    assert!(
        text.starts_with("rules of ") && text.contains("plangate.toml (as the file says now"),
        "{text}"
    );
    assert!(
        text.contains("the agent would be told: env files hold secrets"),
        "{text}"
    );
}

/// The record names the rule that decided each call.
fn record_names_the_rules(scratch: &Scratch) {
    let recorded = calls(scratch);
    let by_rule =
        |rule: &str| -> Vec<&Value> { recorded.iter().filter(|c| c["rule"] == rule).collect() };
    let ran = by_rule("scratch-runs");
    assert_eq!(ran.len(), 1, "{recorded:#?}");
    assert_eq!(
        (ran[0]["decision"].as_str(), ran[0]["outcome"].as_str()),
        (Some("run"), Some("ok"))
    );
    // The refused write (reads are on the record only with [audit] reads).
    let refused = by_rule("no-env");
    assert_eq!(refused.len(), 1, "{recorded:#?}");
    assert!(refused.iter().all(|c| c["code"] == "forbidden_by_rule"));
    assert!(!by_rule("moves-ask").is_empty(), "{recorded:#?}");
}

#[tokio::test]
async fn a_run_rule_is_a_standing_approval_for_a_plan_key_and_a_refuse_rule_holds_at_apply() {
    let (w, agent) = plan_agent("planner", "plan").await;
    // The rule lets it run.
    ran_directly(&agent, &w.root.join("scratch/p.txt"), "p").await;
    planned_write(&agent, &w.root.join("later.txt"), "l").await;
    agent.cancel().await.unwrap();

    // The operator adds a rule refusing it, then applies: the step fails
    // forbidden_by_rule and nothing is written.
    let stricter = w.scratch.write(
        "stricter.toml",
        &std::fs::read_to_string(&w.config).unwrap().replace(
            "[[rules]]\nname = \"no-env\"",
            "[[rules]]\nname = \"no-later\"\nwhen = \"has(arguments.path) && arguments.path.endsWith('later.txt')\"\noutcome = \"refuse\"\nmessage = \"not that one\"\n\n[[rules]]\nname = \"no-env\"",
        ),
    );
    let digest = shown_digest(&w.scratch, "planner");
    let out = w.scratch.run(&[
        "plans",
        "apply",
        "--digest",
        &digest,
        "--config",
        stricter.to_str().unwrap(),
        "--key",
        "planner",
        "--json",
    ]);
    let receipt: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(receipt["failed"], 1, "{receipt}");
    assert_eq!(
        receipt["steps"][0]["error"]["code"], "forbidden_by_rule",
        "{receipt}"
    );
    assert!(
        receipt["steps"][0]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("\"no-later\""),
        "{receipt}"
    );
    assert!(!w.root.join("later.txt").exists());
}

#[tokio::test]
async fn a_plan_rule_plans_a_write_in_the_default_mode_and_the_step_names_it() {
    let w = world(
        "\n[[rules]]\nname = \"dirs-plan\"\nwhen = \"tool == 'create_directory'\"\noutcome = \"plan\"\n",
    );
    let token = w.scratch.create_key("agent", "write");
    // No session: the default mode, where writes run.
    let agent = config_client(&w.scratch, &w.config, &token).await;
    let dir = w.root.join("newdir");
    let planned = ok(&agent, "create_directory", json!({"path": dir})).await;
    assert_eq!(planned["code"], "plan_step", "{planned}");
    assert_eq!(planned["rule"], "dirs-plan");
    assert!(
        planned["message"]
            .as_str()
            .unwrap()
            .contains("rule \"dirs-plan\""),
        "{planned}"
    );
    assert!(!dir.exists());
    let plan = get_plan(&agent).await;
    assert_eq!(plan["steps"][0]["rule"], "dirs-plan");
    let shown = succeeded(
        &["plans", "show"],
        &w.scratch.run(&["plans", "show", "--key", "agent"]),
    );
    assert!(
        shown.contains("planned by the operator's rule \"dirs-plan\""),
        "{shown}"
    );
    // Another write still runs in the default mode.
    ran_directly(&agent, &w.root.join("free.txt"), "f").await;
    agent.cancel().await.unwrap();
}

/// `policy test --server` asks the running gateway: the same answer as at
/// the data dir while the file is unchanged; once the file changes (and
/// the gateway has not reloaded) the service answers with the rules it
/// runs, the file with what it says now — each saying which it read.
#[tokio::test]
async fn policy_test_with_server_asks_the_running_gateway() {
    let w = world("");
    w.scratch.create_key("agent", "write");
    let args = ["operator", "token", "--name", "ana"];
    let token = succeeded(&args, &w.scratch.run(&args)).trim().to_owned();
    let service = serve_http(&w.scratch, &["--config", &w.config]);
    let server = format!("http://{}", service.addr);
    let env_write = write(&w.root.join("scratch/prod.env"), "K=V");
    let text = env_write.to_string();
    let ask = |token: &str, extra: &[&str]| {
        let mut argv = vec![
            "policy",
            "test",
            "--key",
            "agent",
            "--tool",
            "write_file",
            "--arguments",
            &text,
            "--server",
            &server,
        ];
        argv.extend_from_slice(extra);
        let out = w
            .scratch
            .command(&argv)
            .env("PLANGATE_OPERATOR_TOKEN", token)
            .output()
            .unwrap();
        (argv.join(" "), out)
    };
    let asked = |extra: &[&str]| {
        let (argv, out) = ask(&token, extra);
        succeeded(&[argv.as_str()], &out)
    };
    let remote: Value = serde_json::from_str(&asked(&["--json"])).unwrap();
    assert_eq!(remote["decision"], "refuse", "{remote}");
    assert_eq!(remote["rule"]["name"], "no-env", "{remote}");
    assert_eq!(remote["running"], true, "{remote}");
    assert_eq!(
        policy_test(&w, "write_file", &env_write),
        ("refuse".to_owned(), json!("no-env"))
    );
    let text = asked(&[]);
    assert!(text.starts_with("rules of the running gateway"), "{text}");

    // The file drops the rule; the service has not reloaded.
    let changed = std::fs::read_to_string(&w.config)
        .unwrap()
        .replace("outcome = \"refuse\"", "outcome = \"plan\"");
    std::fs::write(&w.config, changed).unwrap();
    assert_eq!(policy_test(&w, "write_file", &env_write).0, "plan");
    let remote: Value = serde_json::from_str(&asked(&["--json"])).unwrap();
    assert_eq!(remote["decision"], "refuse", "{remote}");

    // A wrong token: refused.
    let (_, out) = ask("pgo_wrong", &[]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("unauthorized"), "{}", stderr(&out));
}
