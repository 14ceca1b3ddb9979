//! Plan mode end to end: a real MCP client → a real `plangate` process →
//! the demo site. Writes in plan mode become durable plan steps and the
//! site does not change; every refusal code of the planning issue is
//! produced; mode and plan survive restarts and are shared by a key's
//! connections, never across keys.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use serde_json::{Value, json};

fn code(r: &rmcp::model::CallToolResult) -> String {
    assert_eq!(r.is_error, Some(true), "expected a refusal: {r:?}");
    body(r)["code"].as_str().unwrap_or_default().to_owned()
}

/// Calls `tool`, which must refuse; returns the refusal's code.
async fn refusal(client: &Client, tool: &str, args: Value) -> String {
    code(&call(client, tool, args).await.unwrap())
}

#[tokio::test]
async fn a_write_in_plan_mode_is_planned_not_run_and_reads_still_run() {
    let (scratch, _, client) = demo_agent("agent", "write").await;
    // Warm the site so its state file exists, then snapshot it.
    assert_eq!(
        call(&client, "list_pages", json!({}))
            .await
            .unwrap()
            .is_error,
        Some(false)
    );
    let before = site(&scratch);

    let names = tool_names(&client).await;
    assert!(
        !names.contains(&"plangate_exit_plan_mode".to_owned()),
        "only listed in plan mode"
    );
    let started = begin(&client, "plan").await;
    assert_eq!(started["plan_mode"], true);
    assert_eq!(started["mode"], "plan");
    assert!(
        started["modes"]
            .as_array()
            .unwrap()
            .contains(&json!("default"))
    );
    assert!(
        started["instructions"]
            .as_str()
            .unwrap()
            .contains("apply it only after they say yes")
    );
    assert!(
        tool_names(&client)
            .await
            .contains(&"plangate_exit_plan_mode".to_owned())
    );

    let step = ok(&client, "update_page", our_story()).await;
    assert_eq!(step["code"], "plan_step");
    assert_eq!(step["planned"], true);
    assert_eq!(step["mutation_performed"], false);
    assert_eq!(step["position"], 1);
    assert_eq!(step["server"], "site");
    assert_eq!(step["tool"], "update_page");
    assert_eq!(step["exposed_as"], "update_page");
    assert_eq!(step["effect"], "write");
    assert_eq!(step["lands_on"]["where"], "copy");
    assert_eq!(step["lands_on"]["target"], "2");
    assert!(
        step["predicted_effect"]
            .as_str()
            .unwrap()
            .contains("Our story"),
        "{step}"
    );
    assert_eq!(step["approval_required"], false);
    assert_eq!(step["deduplicated"], false);
    assert!(
        step["plan"]["plan_digest"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    assert_eq!(step["plan"]["pending_steps"], 1);
    assert!(step["plan"]["expires_in"].as_i64().unwrap() > 14000);

    let item = call_body(
        &client,
        "create_menu_item",
        menu_item("Services", "/services"),
    )
    .await;
    assert_eq!(item["position"], 2);
    assert_eq!(item["lands_on"]["where"], "live");
    let r = call(&client, "delete_page", json!({"id": 3}))
        .await
        .unwrap();
    let del = body(&r);
    assert_eq!(del["position"], 3);
    assert_eq!(del["effect"], "destructive");
    assert_eq!(del["approval_required"], true);
    assert!(
        del["approval_note"]
            .as_str()
            .unwrap()
            .contains("explicit yes")
    );

    // Reads still run in plan mode.
    let r = call(&client, "get_page", json!({"id": 2})).await.unwrap();
    assert_eq!(body(&r)["title"], "About");
    // Nothing was written.
    assert_eq!(site(&scratch)["pages"], before["pages"]);
    assert_eq!(site(&scratch)["menus"], before["menus"]);

    let plan = get_plan(&client).await;
    assert_eq!(plan["pending_steps"], 3);
    assert_eq!(plan["approved"], false);
    assert_eq!(each(&plan["steps"], "position"), [1, 2, 3]);
    assert!(
        each(&plan["steps"], "status")
            .iter()
            .all(|s| *s == "planned")
    );
    assert_eq!(plan["plan_digest"], del["plan"]["plan_digest"]);
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn the_same_write_twice_is_one_step_and_secrets_never_show() {
    let (scratch, _, client) = demo_agent("agent", "write").await;
    begin(&client, "plan").await;
    let args = tagline(json!({"host": "mail.example", "password": "hunter2-canary"}));
    let first = call_body(&client, "update_option", args.clone()).await;
    assert_eq!(first["code"], "plan_step", "{first}");
    let again = call_body(&client, "update_option", args).await;
    assert_eq!(first["step_id"], again["step_id"]);
    assert_eq!(again["deduplicated"], true);
    assert_eq!(again["plan"]["pending_steps"], 1);
    assert_eq!(first["arguments"]["value"]["password"], "[redacted]");
    assert_eq!(first["arguments"]["value"]["host"], "mail.example");
    // A different secret is a different write.
    let other = call_body(
        &client,
        "update_option",
        tagline(json!({"host": "mail.example", "password": "other"})),
    )
    .await;
    assert_ne!(other["step_id"], first["step_id"]);
    let plan = get_plan(&client).await;
    let text = plan.to_string();
    assert!(!text.contains("hunter2-canary"), "{text}");
    // Nor at rest: the database holds the secret only sealed.
    client.cancel().await.unwrap();
    let bytes = store_bytes(&scratch);
    assert!(!bytes.is_empty());
    assert!(
        !bytes.windows(14).any(|w| w == b"hunter2-canary"),
        "secret stored in plaintext"
    );
}

/// Every file of the data dir's SQLite store (database, WAL), as bytes.
fn store_bytes(scratch: &Scratch) -> Vec<u8> {
    let mut bytes = Vec::new();
    for entry in std::fs::read_dir(scratch.data_dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.to_string_lossy().contains("plangate.db") {
            bytes.extend(std::fs::read(&path).unwrap());
        }
    }
    bytes
}

#[tokio::test]
async fn a_secret_applied_earlier_never_comes_back_through_a_later_preview() {
    let (scratch, config, [token, other_token]) =
        demo_keys("", [("agent", "write"), ("other", "write")]);
    let canary = format!("canary-{}", std::process::id());
    let client = plan_client(&scratch, &config, &token).await;
    let first = call_body(
        &client,
        "update_option",
        tagline(json!({"host": "mail", "password": canary})),
    )
    .await;
    assert_eq!(first["code"], "plan_step", "{first}");
    let receipt = call(&client, "plangate_apply_plan", json!({}))
        .await
        .unwrap();
    assert_eq!(body(&receipt)["applied"], 1, "{receipt:?}");
    assert_eq!(site_tagline(&scratch)["password"], canary);

    // The demo's preview quotes the option's current value — the sealed
    // password — in its sentence: this key's next step must not carry it,
    // nor another key's (which never sealed it).
    let second = call_body(&client, "update_option", tagline("Plain again")).await;
    let effect = second["predicted_effect"].as_str().unwrap();
    assert!(effect.contains("[redacted]"), "{effect}");
    assert!(!second.to_string().contains(&canary), "{second}");
    assert!(!get_plan(&client).await.to_string().contains(&canary));
    client.cancel().await.unwrap();
    let other = plan_client(&scratch, &config, &other_token).await;
    let theirs = call_body(&other, "update_option", tagline("Theirs")).await;
    assert_eq!(theirs["code"], "plan_step", "{theirs}");
    assert!(!theirs.to_string().contains(&canary), "{theirs}");
    other.cancel().await.unwrap();

    // Nor in what an operator reads, nor at rest.
    for args in [
        vec!["plans", "show", "--key", "agent", "--json"],
        vec!["plans", "show", "--key", "other", "--json"],
        vec!["audit", "export"],
    ] {
        let out = scratch.run(&args);
        assert!(out.status.success(), "{args:?}: {out:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("tagline"), "{args:?}: {text}");
        assert!(!text.contains(&canary), "{args:?}: {text}");
    }
    let bytes = store_bytes(&scratch);
    assert!(
        !bytes.windows(canary.len()).any(|w| w == canary.as_bytes()),
        "the secret is in the store in plain text"
    );
}

#[tokio::test]
async fn every_planning_refusal_code_is_produced() {
    let (scratch, config, [reader, writer]) = demo_keys(
        "[gateway]\nanonymous = \"read\"\nmax_steps = 2\nplan_ttl = \"1s\"\n\n[modes.readonly]\naccess = \"read\"\nover_access = \"refuse\"\n",
        [("reader", "read"), ("writer", "write")],
    );

    // forbidden: a read key never writes.
    let client = config_client(&scratch, &config, &reader).await;
    assert_eq!(
        refusal(&client, "update_option", tagline("x")).await,
        "forbidden"
    );
    client.cancel().await.unwrap();

    // plan_needs_key: anonymous may read, never plan.
    let gw = serve_http(&scratch, &["--config", &config]);
    let anon = http_client(&gw.url(), None).await.unwrap();
    assert_eq!(
        call(&anon, "get_page", json!({"id": 1}))
            .await
            .unwrap()
            .is_error,
        Some(false)
    );
    for (tool, args) in [
        ("update_option", tagline("x")),
        ("plangate_begin_session", json!({"mode": "plan"})),
    ] {
        assert_eq!(refusal(&anon, tool, args).await, "plan_needs_key");
    }
    anon.cancel().await.unwrap();
    drop(gw);

    let client = config_client(&scratch, &config, &writer).await;
    // invalid_arguments: against the input schema, and integers beyond 2^53.
    let r = call(&client, "get_page", json!({"id": "two"}))
        .await
        .unwrap();
    assert_eq!(code(&r), "invalid_arguments");
    let r = call(
        &client,
        "update_page",
        json!({"id": 9007199254740993u64, "title": "x"}),
    )
    .await
    .unwrap();
    assert_eq!(code(&r), "invalid_arguments");
    assert!(!body(&r).to_string().contains("9007199254740993"));
    let begin_nonsense = json!({"mode": "nonsense"});
    let said = refusal(&client, "plangate_begin_session", begin_nonsense).await;
    assert_eq!(said, "invalid_arguments");

    // not_in_plan_mode: exit_plan_mode outside a plan mode.
    let said = refusal(&client, "plangate_exit_plan_mode", json!({"plan": "x"})).await;
    assert_eq!(said, "not_in_plan_mode");

    // forbidden_by_mode.
    begin(&client, "readonly").await;
    let said = refusal(&client, "update_option", tagline("x")).await;
    assert_eq!(said, "forbidden_by_mode");

    // plan_full: at most 2 steps here.
    begin(&client, "plan").await;
    for i in 0..2 {
        let r = call(&client, "update_option", tagline(format!("v{i}")))
            .await
            .unwrap();
        assert_eq!(r.is_error, Some(false));
    }
    let said = refusal(&client, "update_option", tagline("v2")).await;
    assert_eq!(said, "plan_full");

    // elicitation_unsupported: exit_plan_mode cannot ask yet, honestly.
    let exit = json!({"plan": "change the tagline"});
    let said = refusal(&client, "plangate_exit_plan_mode", exit).await;
    assert_eq!(said, "elicitation_unsupported");

    // plan_expired: the 1 s plan expires; its steps cannot be discarded.
    let step = get_plan(&client).await["steps"][0]["step_id"]
        .as_str()
        .unwrap()
        .to_owned();
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let plan = get_plan(&client).await;
    assert_eq!(plan["pending_steps"], 0);
    assert_eq!(
        plan["mode"], "plan",
        "expiry fails closed: the mode is kept"
    );
    assert!(plan["message"].as_str().unwrap().contains("expired"));
    let discard = json!({"step_ids": [step]});
    let said = refusal(&client, "plangate_discard_plan", discard).await;
    assert_eq!(said, "plan_expired");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn mode_and_plan_survive_a_restart_and_a_keys_connections_share_one_plan() {
    let (scratch, config, [alice, bob]) = demo_keys("", [("alice", "write"), ("bob", "write")]);

    let first = plan_client(&scratch, &config, &alice).await;
    let step = call_body(&first, "update_option", tagline("Plans first")).await;
    // A second connection of the same key (another process on the same
    // data dir) sees the same plan and adds to it.
    let second = config_client(&scratch, &config, &alice).await;
    let r = call(&second, "create_menu_item", menu_item("Blog", "/blog"))
        .await
        .unwrap();
    assert_eq!(body(&r)["position"], 2, "{r:?}");
    assert_eq!(get_plan(&first).await["pending_steps"], 2);
    first.cancel().await.unwrap();
    second.cancel().await.unwrap();

    // A restart keeps both mode and plan.
    let again = config_client(&scratch, &config, &alice).await;
    let plan = get_plan(&again).await;
    assert_eq!(plan["mode"], "plan");
    assert_eq!(plan["steps"][0]["step_id"], step["step_id"]);
    assert_eq!(plan["pending_steps"], 2);
    again.cancel().await.unwrap();

    // Another key sees none of it, and its writes are not planned.
    let other = config_client(&scratch, &config, &bob).await;
    let plan = get_plan(&other).await;
    assert_eq!(plan["mode"], "default");
    assert_eq!(plan["pending_steps"], 0);
    let r = call(&other, "update_option", tagline("Bob was here"))
        .await
        .unwrap();
    assert!(body(&r).get("planned").is_none(), "{r:?}");
    assert_eq!(site_tagline(&scratch), "Bob was here");
    other.cancel().await.unwrap();
}

#[tokio::test]
async fn a_mode_set_from_the_cli_is_told_to_the_agent_exactly_once() {
    let (scratch, config, client) = demo_agent("agent", "write").await;
    let one = call_body(&client, "update_option", tagline("one")).await;
    assert!(one.get("planned").is_none());

    let out = scratch.run(&["mode", "set", "--config", &config, "--key", "agent", "plan"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let told = call_body(&client, "update_option", tagline("two")).await;
    assert_eq!(
        told["planned"], true,
        "the new mode is in force at the next call"
    );
    assert!(told["notice"].as_str().unwrap().contains("plan"), "{told}");
    let r = call(&client, "update_option", tagline("three"))
        .await
        .unwrap();
    assert!(body(&r).get("notice").is_none(), "told only once: {r:?}");
    let texts = serde_json::to_string(&r.content).unwrap();
    assert!(!texts.contains("plangate notice"));
    client.cancel().await.unwrap();

    let out = scratch.run(&[
        "mode", "set", "--config", &config, "--key", "agent", "nonsense",
    ]);
    assert_eq!(out.status.code(), Some(2));
}

#[tokio::test]
async fn a_plan_scope_key_plans_every_write_and_explicit_planning_works_for_a_write_key() {
    let (scratch, config, [planner, writer]) =
        demo_keys("", [("planner", "plan"), ("writer", "write")]);
    let client = config_client(&scratch, &config, &planner).await;
    let r = call(&client, "update_option", tagline("x")).await.unwrap();
    assert_eq!(body(&r)["planned"], true, "{r:?}");
    assert!(
        body(&r)["message"]
            .as_str()
            .unwrap()
            .contains("key plans every write")
    );
    client.cancel().await.unwrap();

    let client = config_client(&scratch, &config, &writer).await;
    let step = call_body(
        &client,
        "update_option",
        json!({"name": "tagline", "value": "y", "_plangate_plan": true}),
    )
    .await;
    assert_eq!(step["planned"], true);
    assert!(step["arguments"].get("_plangate_plan").is_none());
    assert_ne!(site_tagline(&scratch), "y");
    // discard_plan drops it; end_session returns to default.
    let r = call(&client, "plangate_discard_plan", json!({}))
        .await
        .unwrap();
    assert_eq!(body(&r)["discarded"].as_array().unwrap().len(), 1);
    let r = call(&client, "plangate_end_session", json!({}))
        .await
        .unwrap();
    assert_eq!(body(&r)["success"], true);
    client.cancel().await.unwrap();
}

/// The same write sent again after its target changed is planned anew with
/// what the target is now, when the target's version comes from a
/// configured preview tool (the demo's `preview_update_option`) rather than
/// a built-in profile's preview: the waiting step would otherwise show the
/// person a "before" that is no longer true.
#[tokio::test]
async fn the_same_write_after_its_target_changed_is_planned_anew_with_the_new_before() {
    let (_scratch, _, client) = demo_agent("agent", "write").await;
    let planned = |value: &str| {
        let mut args = tagline(value);
        args["_plangate_plan"] = json!(true);
        args
    };
    let first = call_body(&client, "update_option", planned("x")).await;
    assert_eq!(first["code"], "plan_step", "{first}");
    // The option changes after the step was planned (this key's default
    // mode runs its writes).
    let ran = call_body(&client, "update_option", tagline("y")).await;
    assert_ne!(ran["code"], "plan_step", "{ran}");
    let again = call_body(&client, "update_option", planned("x")).await;
    assert_eq!(again["deduplicated"], false, "{again}");
    assert_ne!(again["step_id"], first["step_id"]);
    assert!(
        mentions(&again["predicted_effect"], "\"y\""),
        "{}",
        again["predicted_effect"]
    );
    let plan = get_plan(&client).await;
    assert_eq!(plan["pending_steps"], 1, "{plan}");
    client.cancel().await.unwrap();
}
