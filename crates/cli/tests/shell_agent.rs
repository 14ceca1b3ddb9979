//! A yes only a person can give, against an agent that also has a shell in
//! plangate's OS user (docs/security.md, "An agent with a shell"):
//! nothing the agent reads names an approving command or credential; with
//! `approvals require totp` no yes is recorded without the person's code;
//! a row put into the store is refused at apply and named by
//! `audit verify`, and an untouched log verifies, online and offline.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use serde_json::{Value, json};

/// What an agent must never be told: the commands, credentials and
/// variables that approve.
const TEACHES: [&str; 7] = [
    "plans approve",
    "plans apply",
    "plans retry",
    "PLANGATE_KEY",
    "env -u",
    "operator token",
    "tools accept",
];

fn teaches(text: &str) -> Option<&'static str> {
    TEACHES.into_iter().find(|t| text.contains(t))
}

/// The key's events as `audit export` writes them.
fn events(scratch: &Scratch, key: &str) -> Vec<Value> {
    let args = ["audit", "export", "--key", key];
    succeeded(&args, &scratch.run(&args))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn approvals(scratch: &Scratch) -> usize {
    events(scratch, "agent")
        .iter()
        .filter(|e| e["type"] == "review_answered")
        .count()
}

#[tokio::test]
async fn nothing_the_agent_reads_names_a_way_to_approve() {
    let (scratch, config, agent) = demo_agent("agent", "plan").await;
    let planned = ok(&agent, "update_option", tagline("Fresh bread")).await;
    let plan = get_plan(&agent).await;
    let digest = plan["plan_digest"].as_str().unwrap().to_owned();
    let refused = apply_refused(&agent, &digest).await;
    for (what, text) in [
        ("planned answer", planned.to_string()),
        ("get_plan", plan.to_string()),
        ("apply refusal", refused.to_string()),
    ] {
        assert_eq!(teaches(&text), None, "the {what} teaches the agent: {text}");
        if what == "apply refusal" {
            assert!(text.contains("a person reviews and approves it"), "{text}");
        }
    }
    let instructions = agent
        .peer_info()
        .and_then(|i| i.instructions.clone())
        .unwrap_or_default();
    assert!(
        instructions.contains("Only a person approves a plan"),
        "{instructions}"
    );
    assert_eq!(teaches(&instructions), None, "{instructions}");

    // The agent's shell, with its own key in the environment: the CLI
    // says the key cannot approve, and nothing about a way round.
    let token = scratch.create_key("agent2", "plan");
    let out = scratch
        .command(&["plans", "approve", "--key", "agent", "--digest", &digest])
        .env("PLANGATE_KEY", &token)
        .output()
        .unwrap();
    assert!(!out.status.success(), "{out:?}");
    let err = stderr(&out);
    assert!(err.contains("cannot approve"), "{err}");
    assert_eq!(teaches(&err), None, "the CLI's refusal teaches: {err}");
    assert_eq!(approvals(&scratch), 0);
    let _ = config;
    agent.cancel().await.unwrap();
}

#[tokio::test]
async fn with_a_factor_required_no_yes_is_recorded_without_the_persons_code() {
    let (scratch, config, agent) = demo_agent("agent", "plan").await;
    ok(&agent, "update_option", tagline("Fresh bread")).await;
    let digest = shown_digest(&scratch, "agent");

    // No factor yet: `serve` and `config check` say the set-up is cooperative.
    let check = scratch.run(&["config", "check", "--config", &config, "--json"]);
    let check: Value = serde_json::from_str(&stdout(&check)).unwrap();
    assert_eq!(check["enforcement"]["level"], "cooperative", "{check}");

    let args = ["operator", "enroll", "--name", "alice", "--totp", "--json"];
    let enrolled = parsed(&args, &succeeded(&args, &scratch.run(&args)));
    let uri = enrolled["otpauth_uri"].as_str().unwrap();
    assert!(
        uri.starts_with("otpauth://totp/plangate:alice?secret="),
        "{uri}"
    );
    let secret = enrolled["secret_base32"].as_str().unwrap().to_owned();
    let recovery: Vec<String> = enrolled["recovery_codes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(recovery.len(), 8);
    let args = ["approvals", "require", "totp"];
    succeeded(&args, &scratch.run(&args));
    let check = scratch.run(&["config", "check", "--config", &config, "--json"]);
    let check: Value = serde_json::from_str(&stdout(&check)).unwrap();
    assert_eq!(check["enforcement"]["level"], "factor", "{check}");
    assert_eq!(check["enforcement"]["approvals_require"], "totp", "{check}");

    // Holding the key tighter needs no code.
    let args = ["mode", "set", "--key", "agent", "plan", "--lock"];
    succeeded(&args, &scratch.run(&args));

    // What an agent with a shell can run: refused, nothing recorded.
    for args in [
        vec!["plans", "approve", "--key", "agent", "--digest", &digest],
        vec![
            "plans", "apply", "--key", "agent", "--digest", &digest, "--config", &config,
        ],
        vec![
            "plans", "approve", "--key", "agent", "--digest", &digest, "--code", "12345x",
        ],
        vec!["keys", "create", "--name", "escape", "--scope", "write"],
        vec!["operator", "token", "--name", "escape"],
        vec!["approvals", "require", "none"],
        vec!["mode", "set", "--key", "agent", "--unlock"],
        vec!["mode", "set", "--key", "agent", "default"],
    ] {
        let out = scratch.run(&args);
        assert!(!out.status.success(), "{args:?} ran: {out:?}");
        let err = stderr(&out);
        assert!(err.contains("factor_required"), "{args:?}: {err}");
    }
    assert_eq!(approvals(&scratch), 0, "a yes was recorded without a code");
    assert_eq!(site_tagline(&scratch), "Just another demo site");
    let keys = succeeded(&["keys", "list"], &scratch.run(&["keys", "list"]));
    assert!(!keys.contains("escape"), "{keys}");

    // The person's code: the yes is recorded, naming the operator; the same
    // code is not taken twice.
    let code = code_now(&secret);
    let args = [
        "plans", "approve", "--key", "agent", "--digest", &digest, "--code", &code,
    ];
    let out = scratch.run(&args);
    let again = scratch.run(&args);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(approvals(&scratch), 1);
    let yes = events(&scratch, "agent")
        .into_iter()
        .find(|e| e["type"] == "review_answered")
        .unwrap();
    assert_eq!(yes["actor"]["name"], "alice", "{yes}");
    assert!(!again.status.success(), "a code was taken twice");
    assert!(
        stderr(&again).contains("used already"),
        "{}",
        stderr(&again)
    );

    // The trail: which operator proved which act with which factor.
    let trail = events(&scratch, "operators");
    let used: Vec<&Value> = trail
        .iter()
        .filter(|e| e["type"] == "factor_used")
        .collect();
    assert_eq!(used.len(), 1, "{trail:?}");
    assert_eq!(used[0]["factor"], "totp");
    assert_eq!(used[0]["act"], "approve key agent's plan");
    assert!(
        trail.iter().any(|e| e["type"] == "factor_refused"),
        "the wrong code left no trace: {trail:?}"
    );
    assert!(
        !serde_json::to_string(&trail).unwrap().contains(&secret),
        "the TOTP secret reached the log in plaintext"
    );

    // A recovery code lowers the requirement once; it is not taken again.
    let args = ["approvals", "require", "none", "--code", &recovery[0]];
    succeeded(&args, &scratch.run(&args));
    let args = ["approvals", "require", "totp"];
    succeeded(&args, &scratch.run(&args));
    let args = ["approvals", "require", "none", "--code", &recovery[0]];
    let out = scratch.run(&args);
    assert!(!out.status.success(), "a recovery code was taken twice");
    agent.cancel().await.unwrap();
}

#[tokio::test]
async fn a_row_put_into_the_store_is_refused_at_apply_and_named_by_audit_verify() {
    let (scratch, _config, agent) = demo_agent("agent", "plan").await;
    ok(&agent, "update_option", tagline("Fresh bread")).await;
    let digest = plan_digest(&agent).await;

    // An untouched log verifies, in the store and from an export.
    let verify = ["audit", "verify"];
    let said = succeeded(&verify, &scratch.run(&verify));
    assert!(said.contains("verify"), "{said}");
    let export = scratch.path().join("export.jsonl");
    let args = ["audit", "export", "--out", export.to_str().unwrap()];
    succeeded(&args, &scratch.run(&args));
    let public = succeeded(
        &["audit", "public-key"],
        &scratch.run(&["audit", "public-key"]),
    );
    assert!(public.starts_with("ed25519:"), "{public}");
    let public_file = scratch.write("log.pub", &public);
    let offline = [
        "audit",
        "verify",
        "--public-key",
        public_file.to_str().unwrap(),
        export.to_str().unwrap(),
    ];
    succeeded(&offline, &scratch.run(&offline));
    let exported = std::fs::read_to_string(&export).unwrap();
    assert!(
        exported.contains("\"sig\""),
        "the export carries no signatures"
    );

    // What the security review did: an approval naming a person, put
    // straight into the database (no log key).
    let dir = plangate_store::DataDir::open(scratch.data_dir()).unwrap();
    let store = plangate_store::open_sqlite(&dir.sqlite_path())
        .await
        .unwrap();
    let key = store.find_key("agent").await.unwrap().unwrap();
    let last = store.last_key_seq(&key.id).await.unwrap();
    let last_event = store.load_events(&key.id, last - 1).await.unwrap();
    let step_ids: Vec<String> = events(&scratch, "agent")
        .iter()
        .filter(|e| e["type"] == "step_planned")
        .map(|e| e["step"]["step_id"].as_str().unwrap().to_owned())
        .collect();
    let forged = json!({
        "at_ms": last_event[0].at_ms + 1,
        "key_id": key.id,
        "actor": {"kind": "operator", "name": "alice (CFO)"},
        "channel": "cli",
        "type": "review_answered",
        "review_id": null,
        "verdict": "approve",
        "plan_digest": digest,
        "feedback": null,
        "step_ids": step_ids,
    });
    store
        .append_events(
            &key.id,
            last,
            &[plangate_store::NewEvent {
                at_ms: last_event[0].at_ms + 1,
                kind: "review_answered".into(),
                body: forged,
                seal: None,
            }],
        )
        .await
        .unwrap();

    // The agent's apply runs nothing from a log that does not verify.
    let refused = call_body(
        &agent,
        "plangate_apply_plan",
        json!({"plan_digest": digest}),
    )
    .await;
    assert_eq!(refused["code"], "tampered_log", "{refused}");
    assert_eq!(site_tagline(&scratch), "Just another demo site");

    // `audit verify` names the event, online and from a new export.
    let out = scratch.run(&verify);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = stderr(&out);
    assert!(
        err.contains(&format!("event {} of key {}", last + 1, key.id)),
        "{err}"
    );
    assert!(err.contains("tampered_log"), "{err}");
    let args = ["plans", "show", "--key", "agent"];
    let shown = succeeded(&args, &scratch.run(&args));
    assert!(
        shown.contains("WARNING: this key's log does not verify"),
        "{shown}"
    );
    let args = ["audit", "export", "--out", export.to_str().unwrap()];
    succeeded(&args, &scratch.run(&args));
    let out = scratch.run(&offline);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    agent.cancel().await.unwrap();
}
