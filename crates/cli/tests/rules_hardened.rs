//! Rules an agent cannot walk around, on the official `server-filesystem`
//! and `server-memory` (docs/security.md, "Rules and paths"): a decoy
//! argument the tool does not take, a relative path, `~`, and another
//! Unicode spelling of a linked directory's name each fail to get past the
//! docs' own rule examples — at dispatch, at apply and in `plangate policy
//! test` alike.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::PathBuf;

use common::*;
use serde_json::{Value, json};

/// A filesystem root holding `scratch/`, `protected/important.txt` and a
/// `.git/` directory; the real filesystem server (its `HOME` the root, so
/// `~` lands there) and memory server behind plangate with `rules`.
struct World {
    scratch: Scratch,
    root: PathBuf,
    memory_file: PathBuf,
}

impl World {
    fn new() -> World {
        let scratch = Scratch::new();
        let root = std::fs::canonicalize(scratch.path()).unwrap().join("root");
        for dir in ["scratch", "protected", ".git"] {
            std::fs::create_dir_all(root.join(dir)).unwrap();
        }
        std::fs::write(root.join("protected/important.txt"), "keep me\n").unwrap();
        let memory_file = scratch.path().join("memory.jsonl");
        World {
            scratch,
            root,
            memory_file,
        }
    }

    /// A config of both servers with `rules` (`{root}` in them replaced).
    fn config(&self, name: &str, rules: &str) -> String {
        let servers = fs_and_memory_toml(&self.root, Some(&self.root), &[], &self.memory_file);
        let text = format!(
            "{servers}\n{}",
            rules.replace("{root}", &self.root.display().to_string()),
        );
        self.scratch.write(name, &text).display().to_string()
    }

    fn at(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    /// `plangate policy test` of one call: its decision word and the JSON.
    fn policy_test(&self, config: &str, key: &str, tool: &str, args: &Value) -> (String, Value) {
        let out = self.scratch.run(&[
            "policy",
            "test",
            "--config",
            config,
            "--key",
            key,
            "--tool",
            tool,
            "--arguments",
            &args.to_string(),
            "--json",
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
        let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
        (v["decision"].as_str().unwrap().to_owned(), v)
    }
}

/// The run rule the docs showed before: writes under scratch run.
const SCRATCH_RUNS: &str = r#"
[[rules]]
name = "scratch-runs"
when = "effect != 'read' && has(arguments.path) && glob(arguments.path, '{root}/scratch/**')"
outcome = "run"
"#;

fn refused_with(result: &rmcp::model::CallToolResult, code: &str) -> String {
    assert_eq!(result.is_error, Some(true), "{result:?}");
    let b = body(result);
    assert_eq!(b["code"], code, "{b}");
    b["message"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_decoy_argument_the_tool_does_not_take_is_refused_and_moves_nothing() {
    let w = World::new();
    let config = w.config("plangate.toml", SCRATCH_RUNS);
    let token = w.scratch.create_key("agent", "plan");
    let agent = config_client(&w.scratch, &config, &token).await;
    ok(
        &agent,
        "memory__create_entities",
        json!({"entities": [{"name": "alice", "entityType": "person", "observations": ["cfo"]}]}),
    )
    .await;
    // The first write of the plan key is planned; apply it as a person.
    let digest = plan_digest(&agent).await;
    succeeded(
        &["plans", "apply"],
        &w.scratch.run(&[
            "plans", "apply", "--config", &config, "--key", "agent", "--digest", &digest,
        ]),
    );

    let decoy = w.at("scratch/decoy").display().to_string();
    let moved = call(
        &agent,
        "fs__move_file",
        json!({
            "source": w.at("protected/important.txt"),
            "destination": w.at("scratch/stolen.txt"),
            "path": decoy,
        }),
    )
    .await
    .unwrap();
    let message = refused_with(&moved, "invalid_arguments");
    assert!(message.contains("/path"), "{message}");
    assert!(w.at("protected/important.txt").exists());
    assert!(!w.at("scratch/stolen.txt").exists());

    let deleted = call(
        &agent,
        "memory__delete_entities",
        json!({"entityNames": ["alice"], "path": decoy}),
    )
    .await
    .unwrap();
    refused_with(&deleted, "invalid_arguments");
    let graph = call_body(&agent, "memory__read_graph", json!({})).await;
    assert!(graph.to_string().contains("alice"), "{graph}");

    // Nothing was planned either.
    assert_eq!(get_plan(&agent).await["steps"], json!([]));
    // `policy test` refuses the call the same way, before any rule.
    let out = w.scratch.run(&[
        "policy",
        "test",
        "--config",
        &config,
        "--key",
        "agent",
        "--tool",
        "fs__move_file",
        "--arguments",
        &json!({"source": "/a", "destination": "/b", "path": decoy}).to_string(),
    ]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("invalid_arguments"),
        "{}",
        stderr(&out)
    );
    agent.cancel().await.unwrap();
}

/// A refuse rule about `{root}/.git`, written both ways the docs show.
const NO_GIT: &str = r#"
[[rules]]
name = "no-git"
when = "tool == 'write_file' && glob(arguments.path, '{root}/.git/**')"
outcome = "refuse"
message = "the repository's own files are not for agents"

[[rules]]
name = "no-git-paths"
when = "paths.exists(p, glob(p, '{root}/.git/**'))"
outcome = "refuse"
message = "the repository's own files are not for agents"
"#;

#[tokio::test]
async fn relative_and_home_paths_are_judged_where_the_server_writes_them() {
    let w = World::new();
    let config = w.config("plangate.toml", NO_GIT);
    let token = w.scratch.create_key("agent", "write");
    // The default mode: a write key's writes run, unless a rule says no.
    let agent = config_client(&w.scratch, &config, &token).await;
    for path in [".git/config", "~/.git/hooks-x", "scratch/../.git/x"] {
        let result = call(
            &agent,
            "fs__write_file",
            json!({"path": path, "content": "[core]\n"}),
        )
        .await
        .unwrap();
        let message = refused_with(&result, "forbidden_by_rule");
        assert!(message.contains("\"no-git"), "{path}: {message}");
        let (decision, tested) = w.policy_test(
            &config,
            "agent",
            "fs__write_file",
            &json!({"path": path, "content": "x"}),
        );
        assert_eq!(decision, "refuse", "{path}: {tested}");
        assert!(
            tested["paths"][0]["placed"]
                .as_str()
                .unwrap()
                .starts_with(&format!("{}/.git/", w.root.display())),
            "{tested}"
        );
    }
    assert_eq!(std::fs::read_dir(w.at(".git")).unwrap().count(), 0);
    // A relative path elsewhere is placed too, and runs where it lands.
    let ran = call_body(
        &agent,
        "fs__write_file",
        json!({"path": "scratch/notes.txt", "content": "n"}),
    )
    .await;
    assert_ne!(ran["code"], "forbidden_by_rule", "{ran}");
    assert_eq!(
        std::fs::read_to_string(w.at("scratch/notes.txt")).unwrap(),
        "n"
    );
    agent.cancel().await.unwrap();

    // Planned before the rule existed, then applied under it: the check
    // at apply places the path the same way and refuses it.
    let open = w.config("open.toml", "");
    let planner = w.scratch.create_key("planner", "plan");
    let agent = config_client(&w.scratch, &open, &planner).await;
    let planned = ok(
        &agent,
        "fs__write_file",
        json!({"path": ".git/config", "content": "[core]\n"}),
    )
    .await;
    assert_eq!(planned["code"], "plan_step", "{planned}");
    let digest = planned["plan"]["plan_digest"].as_str().unwrap().to_owned();
    agent.cancel().await.unwrap();
    let out = w.scratch.run(&[
        "plans", "apply", "--config", &config, "--key", "planner", "--digest", &digest, "--json",
    ]);
    let receipt: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(
        receipt["steps"][0]["error"]["code"], "forbidden_by_rule",
        "{receipt}"
    );
    assert!(!w.at(".git/config").exists());
}

/// `name` spelled decomposed (NFD): `e` and a combining acute accent.
fn nfd(name: &str) -> String {
    name.replace('\u{e9}', "e\u{301}")
}

#[tokio::test]
async fn another_unicode_spelling_of_a_linked_directory_is_judged_where_it_leads() {
    let w = World::new();
    // scratch/café (NFC on disk) is a link to protected/.
    std::os::unix::fs::symlink(w.at("protected"), w.at("scratch/caf\u{e9}")).unwrap();
    std::fs::create_dir_all(w.at("priv\u{e9}")).unwrap();
    let rules = format!(
        "{SCRATCH_RUNS}\n[[rules]]\nname = \"no-prive\"\nwhen = \"paths.exists(p, glob(p, '{{root}}/priv\u{e9}/**'))\"\noutcome = \"refuse\"\nmessage = \"private\"\n"
    );
    let config = w.config("plangate.toml", &rules);
    let token = w.scratch.create_key("agent", "write");
    let agent = plan_client(&w.scratch, &config, &token).await;

    // The NFD spelling the server maps onto the link: not under scratch,
    // so the run rule does not match and plan mode plans it.
    let sneaky = format!(
        "{}/{}",
        w.root.display(),
        nfd("scratch/caf\u{e9}/pwned.txt")
    );
    let planned = ok(
        &agent,
        "fs__write_file",
        json!({"path": sneaky, "content": "pwned"}),
    )
    .await;
    assert_eq!(planned["code"], "plan_step", "{planned}");
    assert!(!w.at("protected/pwned.txt").exists());
    let (decision, tested) = w.policy_test(
        &config,
        "agent",
        "fs__write_file",
        &json!({"path": sneaky, "content": "x"}),
    );
    assert_eq!(decision, "plan", "{tested}");
    assert_eq!(
        tested["paths"][0]["placed"],
        format!("{}/protected/pwned.txt", w.root.display()),
        "{tested}"
    );

    // A refuse rule written in NFC holds against an NFD path.
    let private = format!("{}/{}", w.root.display(), nfd("priv\u{e9}/x.txt"));
    let result = call(
        &agent,
        "fs__write_file",
        json!({"path": private, "content": "x"}),
    )
    .await
    .unwrap();
    assert!(refused_with(&result, "forbidden_by_rule").contains("no-prive"));
    assert_eq!(std::fs::read_dir(w.at("priv\u{e9}")).unwrap().count(), 0);
    agent.cancel().await.unwrap();
}
