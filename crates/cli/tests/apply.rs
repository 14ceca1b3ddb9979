//! Apply end to end: the worked example of the apply issue through a real
//! MCP client, a real `plangate` process and the demo site, asserting the
//! site's own state after every phase.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use serde_json::{Value, json};

/// Plans the three steps of the worked example and checks nothing moved.
async fn plan_three(client: &Client, scratch: &Scratch) -> [Value; 3] {
    ok(client, "list_pages", json!({})).await;
    let before = site(scratch);
    begin(client, "plan").await;
    let s1 = ok(client, "update_page", our_story()).await;
    assert_eq!(
        (s1["position"].as_i64(), s1["lands_on"]["where"].as_str()),
        (Some(1), Some("copy"))
    );
    let s2 = ok(
        client,
        "create_menu_item",
        menu_item("Services", "/services"),
    )
    .await;
    assert_eq!(
        (s2["position"].as_i64(), s2["lands_on"]["where"].as_str()),
        (Some(2), Some("live"))
    );
    let s3 = ok(client, "delete_page", json!({"id": 3})).await;
    assert_eq!(
        (s3["position"].as_i64(), s3["approval_required"].as_bool()),
        (Some(3), Some(true))
    );
    assert_eq!(site(scratch), before, "nothing changes before apply");
    [s1, s2, s3]
}

#[tokio::test]
async fn the_worked_example_plans_three_steps_applies_them_and_the_receipt_tells_all() {
    let (scratch, _, client) = demo_agent("agent", "write").await;
    let [s1, s2, s3] = plan_three(&client, &scratch).await;

    let plan = get_plan(&client).await;
    assert_eq!(plan["pending_steps"], 3);
    let digest = plan["plan_digest"].as_str().unwrap().to_owned();
    let before = site(&scratch);

    let receipt = apply_plan(&client, json!({"plan_digest": digest})).await;
    assert_eq!(receipt["success"], true, "{receipt}");
    assert_eq!(receipt["code"], "plan_applied");
    assert_eq!(
        (
            receipt["applied"].as_i64(),
            receipt["failed"].as_i64(),
            receipt["in_doubt"].as_i64(),
            receipt["not_run"].as_i64()
        ),
        (Some(3), Some(0), Some(0), Some(0))
    );
    assert_eq!(receipt["approved_by_apply"], json!([s3["step_id"]]));
    assert_eq!(each(&receipt["steps"], "outcome"), ["applied"; 3]);
    let steps = receipt["steps"].as_array().unwrap();
    // Step 1 landed on a copy: its id and preview link.
    let copy_id = steps[0]["copy_id"].as_str().unwrap().to_owned();
    assert!(
        steps[0]["links"][0]
            .as_str()
            .unwrap()
            .contains(&format!("preview={copy_id}"))
    );
    assert_eq!(steps[0]["step_id"], s1["step_id"]);
    // Step 2: the menu item's id.
    let item_id = steps[1]["result"]["menu_item_id"].as_u64().unwrap();
    assert_eq!(steps[1]["step_id"], s2["step_id"]);
    // Step 3: the trashed draft and its snapshot.
    let snapshot = steps[2]["snapshots"][0].as_str().unwrap().to_owned();
    assert_eq!(steps[2]["approved_by_apply"], true);

    // The site, after.
    let after = site(&scratch);
    assert_eq!(
        page(&after, 2)["title"],
        "About",
        "the live page is untouched"
    );
    let copy = page(&after, copy_id.parse().unwrap());
    assert_eq!(
        (
            copy["title"].as_str(),
            copy["status"].as_str(),
            copy["copy_of"].as_u64()
        ),
        (Some("Our story"), Some("draft"), Some(2))
    );
    assert!(
        after["menus"]["main"]["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["id"] == item_id && i["label"] == "Services")
    );
    assert_eq!(page(&after, 3)["status"], "trash");
    assert!(after["snapshots"].get(&snapshot).is_some());
    assert_ne!(before, after);
    // Each write reached the site exactly once, carrying its step id.
    for (tool, n) in [
        ("update_page", 1),
        ("create_menu_item", 1),
        ("delete_page", 1),
    ] {
        assert_eq!(after["calls"][tool], n, "{tool}");
    }
    assert!(
        after["operations"]
            .get(s1["step_id"].as_str().unwrap())
            .is_some()
    );

    // Applying again runs nothing; the plan is empty.
    let again = apply_plan(&client, json!({})).await;
    assert_eq!(again["applied"], 0);
    assert_eq!(site(&scratch), after);
    let ended = ok(&client, "plangate_end_session", json!({})).await;
    assert_eq!(ended["discarded_steps"], 0);
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn not_the_menu_discarding_step_two_leaves_the_menu_untouched() {
    let (scratch, _, client) = demo_agent("agent", "write").await;
    let [_, s2, _] = plan_three(&client, &scratch).await;
    let menu_before = menu_labels(&site(&scratch));
    let stale = get_plan(&client).await["plan_digest"].clone();
    let discarded = ok(
        &client,
        "plangate_discard_plan",
        json!({"step_ids": [s2["step_id"]]}),
    )
    .await;
    assert_eq!(discarded["discarded"], json!([s2["step_id"]]));
    assert_eq!(discarded["pending_steps"], 2);
    // The digest the person saw before is no longer the plan's.
    let r = call(
        &client,
        "plangate_apply_plan",
        json!({"plan_digest": stale}),
    )
    .await
    .unwrap();
    assert_eq!(body(&r)["code"], "plan_changed");
    assert_eq!(menu_labels(&site(&scratch)), menu_before);
    let digest = discarded["plan_digest"].clone();
    let receipt = apply_plan(&client, json!({"plan_digest": digest})).await;
    assert_eq!(receipt["applied"], 2, "{receipt}");
    let after = site(&scratch);
    assert_eq!(menu_labels(&after), menu_before, "the menu is untouched");
    assert_eq!(page(&after, 3)["status"], "trash");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_failing_step_stops_the_run_and_can_be_applied_again_by_naming_it() {
    let (scratch, _, client) = demo_agent("agent", "write").await;
    begin(&client, "plan").await;
    // No preview checks this plugin's name, so it is planned and the site
    // refuses it when it runs.
    let bad = ok(
        &client,
        "set_plugin_active",
        json!({"slug": "plug_nope", "active": true}),
    )
    .await;
    let good = ok(&client, "update_option", tagline("after")).await;

    let receipt = apply_plan(&client, json!({})).await;
    assert_eq!(receipt["success"], false);
    assert_eq!(
        (
            receipt["applied"].as_i64(),
            receipt["failed"].as_i64(),
            receipt["not_run"].as_i64()
        ),
        (Some(0), Some(1), Some(1))
    );
    let failed = &receipt["steps"][0];
    assert_eq!(failed["outcome"], "failed");
    assert_eq!(failed["error"]["code"], "upstream_error");
    assert!(
        failed["error"]["message"]
            .as_str()
            .unwrap()
            .contains("plug_nope")
    );
    assert_ne!(site_tagline(&scratch), "after");
    let plan = get_plan(&client).await;
    assert_eq!(
        each(&plan["steps"], "status"),
        ["failed", "planned"],
        "the rest stays waiting"
    );

    // With continue_on_error the waiting steps run past a failure.
    let receipt = apply_plan(&client, json!({"continue_on_error": true})).await;
    assert_eq!(receipt["applied"], 1, "{receipt}");
    assert_eq!(receipt["steps"][0]["step_id"], good["step_id"]);
    assert_eq!(site_tagline(&scratch), "after");

    // A failed step runs again when named (and fails again, truthfully).
    let receipt = apply_plan(&client, json!({"step_ids": [bad["step_id"]]})).await;
    assert_eq!(receipt["failed"], 1);
    assert_eq!(
        site(&scratch)["calls"]["set_plugin_active"],
        Value::Null,
        "a failing call changes nothing"
    );
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_target_changed_since_planning_is_stale_and_nothing_is_sent() {
    let (scratch, config, [agent, other]) = demo_keys("", [("agent", "write"), ("other", "write")]);
    let client = plan_client(&scratch, &config, &agent).await;
    ok(&client, "update_option", tagline("planned")).await;
    // Someone else changes the option directly meanwhile.
    let direct = config_client(&scratch, &config, &other).await;
    ok(&direct, "update_option", tagline("changed meanwhile")).await;
    direct.cancel().await.unwrap();
    let receipt = apply_plan(&client, json!({})).await;
    assert_eq!(receipt["failed"], 1, "{receipt}");
    assert_eq!(receipt["steps"][0]["error"]["code"], "stale_target");
    assert_eq!(site_tagline(&scratch), "changed meanwhile");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_read_key_cannot_apply_and_a_plan_key_needs_an_approval() {
    let (scratch, _, client) = demo_agent("planner", "plan").await;
    ok(&client, "update_option", tagline("x")).await;
    let r = call(&client, "plangate_apply_plan", json!({}))
        .await
        .unwrap();
    assert_eq!(body(&r)["code"], "forbidden");
    assert!(body(&r)["message"].as_str().unwrap().contains("approves"));
    assert_ne!(site_tagline(&scratch), "x");
    client.cancel().await.unwrap();
}
