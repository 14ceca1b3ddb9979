//! Locked modes end to end (docs/design.md §9): an operator's `mode set --lock`
//! and the config's `default_mode_locked` hold a `write` key's agent in
//! plan mode — it cannot choose another mode, end its session, leave plan
//! mode or apply its own plan — until a person outside the key approves,
//! or an operator unlocks. Each as a real `plangate` process with the demo
//! site as the upstream; the site's state file is the witness of what ran.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use serde_json::{Value, json};

/// Calls `tool`, which must be refused with `code`; returns the refusal.
async fn refused(client: &Client, tool: &str, args: Value, code: &str) -> Value {
    let r = call(client, tool, args).await.unwrap();
    assert_eq!(r.is_error, Some(true), "{tool}: {r:?}");
    let b = body(&r);
    assert_eq!(b["code"], code, "{tool}: {b}");
    b
}

/// Asking to leave plan mode for the default one, refused `mode_locked`:
/// the refusal.
async fn leaving_plan_mode_is_refused(client: &Client) -> Value {
    refused(
        client,
        "plangate_begin_session",
        json!({"mode": "default"}),
        "mode_locked",
    )
    .await
}

/// Runs an operator command that must succeed; returns stdout.
fn op_ok(scratch: &Scratch, args: &[&str]) -> String {
    succeeded(args, &scratch.run(args))
}

#[tokio::test]
async fn an_operator_lock_holds_a_write_key_in_plan_mode_until_a_person_approves() {
    let (scratch, config, [token]) = demo_keys("", [("agent", "write")]);
    // `plan` needs no upstream config: no --config here, none in the cwd.
    let said = op_ok(
        &scratch,
        &["mode", "set", "--key", "agent", "plan", "--lock"],
    );
    assert!(said.contains("now in mode plan, locked"), "{said}");
    assert!(said.contains("--unlock"), "{said}");
    let listed = op_ok(&scratch, &["plans", "list"]);
    assert!(listed.contains("plan (locked by operator)"), "{listed}");

    let client = config_client(&scratch, &config, &token).await;
    // The agent hears of the lock with its first answer, and cannot leave.
    let first = call(&client, "plangate_get_plan", json!({})).await.unwrap();
    let said: Vec<String> = first
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect();
    assert!(
        said.iter()
            .any(|t| t.contains("plangate notice") && t.contains("It is locked")),
        "{said:?}"
    );
    let plan = body(&first);
    assert_eq!(plan["mode"], "plan");
    assert_eq!(plan["mode_locked"], "operator");
    let no = leaving_plan_mode_is_refused(&client).await;
    assert!(
        mentions(&no["message"], "only an operator can unlock"),
        "{no}"
    );
    assert!(
        mentions(&no["message"], "plangate mode set --key agent --unlock"),
        "{no}"
    );
    // The locked mode itself may begin (a fresh plan life).
    assert_eq!(begin(&client, "plan").await["mode"], "plan");

    // A write is planned, and says who approves it: not the agent's apply.
    let step = ok(&client, "update_option", tagline("locked")).await;
    assert_eq!(step["code"], "plan_step");
    assert!(
        mentions(&step["message"], "a person reviews and approves it"),
        "{step}"
    );
    assert!(!mentions(&step["message"], "plangate plans"), "{step}");
    refused(&client, "plangate_end_session", json!({}), "mode_locked").await;
    refused(
        &client,
        "plangate_exit_plan_mode",
        json!({"plan": "set the tagline"}),
        "mode_locked",
    )
    .await;
    let no = refused(&client, "plangate_apply_plan", json!({}), "forbidden").await;
    assert!(
        mentions(&no["message"], "a person reviews and approves it"),
        "{no}"
    );
    assert!(!mentions(&no["message"], "plangate plans"), "{no}");
    assert_ne!(site_tagline(&scratch), "locked");
    // Nothing the agent did dropped its step.
    let plan = get_plan(&client).await;
    assert_eq!(plan["pending_steps"], 1, "{plan}");
    assert_eq!(plan["approved"], false);

    // A person approves exactly that digest; now the agent's apply runs.
    let digest = plan["plan_digest"].as_str().unwrap().to_owned();
    op_ok(
        &scratch,
        &["plans", "approve", "--key", "agent", "--digest", &digest],
    );
    let receipt = apply_plan(&client, json!({"plan_digest": digest})).await;
    assert_eq!(receipt["applied"], 1, "{receipt}");
    assert_eq!(site_tagline(&scratch), "locked");

    // Unlocked, the agent chooses its mode again, and is told so.
    let said = op_ok(&scratch, &["mode", "set", "--key", "agent", "--unlock"]);
    assert!(said.contains("unlocked, in mode plan"), "{said}");
    let back = begin(&client, "default").await;
    assert_eq!(back["mode"], "default");
    let r = call(&client, "update_option", tagline("direct"))
        .await
        .unwrap();
    assert_eq!(r.is_error, Some(false), "{r:?}");
    assert_eq!(site_tagline(&scratch), "direct");
    let ended = ok(&client, "plangate_end_session", json!({})).await;
    assert_eq!(ended["discarded_steps"], 0);
    client.cancel().await.unwrap();

    // The lock and unlock are events of the key's log, by the operator.
    let events: Vec<Value> = op_ok(&scratch, &["audit", "export", "--key", "agent"])
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let types: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    assert!(types.contains(&"mode_locked"), "{types:?}");
    assert!(types.contains(&"mode_unlocked"), "{types:?}");
    let locked = events.iter().find(|e| e["type"] == "mode_locked").unwrap();
    assert_eq!(locked["actor"]["kind"], "operator");
    assert_eq!(locked["mode"], "plan");
}

#[tokio::test]
async fn the_configured_lock_holds_every_key_that_no_operator_unlocked() {
    let (scratch, config, [token]) = demo_keys(
        "[gateway]\ndefault_mode = \"plan\"\ndefault_mode_locked = true\n",
        [("agent", "write")],
    );
    let client = config_client(&scratch, &config, &token).await;
    // A fresh write key is in plan mode, held there by config.
    let plan = get_plan(&client).await;
    assert_eq!(plan["mode"], "plan");
    assert_eq!(plan["mode_locked"], "config");
    let step = ok(&client, "update_option", tagline("held")).await;
    assert_eq!(step["planned"], true);
    let no = leaving_plan_mode_is_refused(&client).await;
    assert!(mentions(&no["message"], "default_mode_locked"), "{no}");
    refused(&client, "plangate_apply_plan", json!({}), "forbidden").await;
    assert_ne!(site_tagline(&scratch), "held");

    // An operator's apply is the yes, recorded for exactly what it runs.
    let shown = op_ok(&scratch, &["plans", "show", "--key", "agent"]);
    assert!(
        shown.contains("locked by [gateway] default_mode_locked"),
        "{shown}"
    );
    let digest = shown_digest(&scratch, "agent");
    let receipt = parsed(
        &["plans", "apply"],
        &op_ok(
            &scratch,
            &[
                "plans", "apply", "--key", "agent", "--digest", &digest, "--config", &config,
                "--json",
            ],
        ),
    );
    assert_eq!(receipt["applied"], 1, "{receipt}");
    assert_eq!(site_tagline(&scratch), "held");

    // The operator unlocks this key only: its agent may leave plan mode.
    op_ok(
        &scratch,
        &[
            "mode", "set", "--key", "agent", "--unlock", "--config", &config,
        ],
    );
    assert_eq!(begin(&client, "default").await["mode"], "default");
    let r = call(&client, "update_option", tagline("free"))
        .await
        .unwrap();
    assert_eq!(r.is_error, Some(false), "{r:?}");
    assert_eq!(site_tagline(&scratch), "free");
    client.cancel().await.unwrap();
}
