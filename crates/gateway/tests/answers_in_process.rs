//! The plan tools' answers fit the output schemas the gateway lists for
//! them (derived from the answers' types, docs/design.md §5): a plan with
//! waiting, failed and applied steps, receipts with failures and undo
//! states, one applied step shown whole with what reverted it, and
//! revert answers with planned and unreverted steps — each checked
//! against the listed `outputSchema` with a JSON Schema validator, as a
//! client that checks structured results does.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use plangate_core::Scope;
use serde_json::{Value, json};

#[tokio::test]
async fn every_plan_tool_answer_fits_the_output_schema_it_lists() {
    let (dir, store, token) = temp_store(Scope::Write).await;
    let (site, _) = in_process("site", demo(dir.path().join("site.json")));
    let gw = start(demo_site_config(), store, vec![("site", site)]).await;
    let client = client_of(gw.clone(), Some(token), Seen::default()).await;
    let tools = client.peer().list_all_tools().await.unwrap();
    let check = |tool: &str, answer: &rmcp::model::CallToolResult| {
        let listed = tools.iter().find(|t| t.name == tool).unwrap();
        let schema = Value::Object((*listed.output_schema.clone().unwrap()).clone());
        let validator = jsonschema::validator_for(&schema).unwrap();
        let body = body(answer);
        let errors: Vec<String> = validator
            .iter_errors(&body)
            .map(|e| e.to_string())
            .collect();
        assert!(errors.is_empty(), "{tool}: {errors:?}\n{body}");
    };

    let begun = call_ok(&client, "plangate_begin_session", json!({"mode": "plan"})).await;
    check("plangate_begin_session", &begun);
    call_ok(
        &client,
        "update_page",
        json!({"id": 2, "title": "Gone soon"}),
    )
    .await;
    let discarded = call_ok(&client, "plangate_discard_plan", json!({})).await;
    assert_eq!(body(&discarded)["discarded"].as_array().unwrap().len(), 1);
    check("plangate_discard_plan", &discarded);
    let delete = body(&call_ok(&client, "delete_page", json!({"id": 3})).await)["step_id"].clone();
    call_ok(
        &client,
        "update_option",
        json!({"name": "tagline", "value": "Fresh"}),
    )
    .await;
    call_ok(
        &client,
        "set_plugin_active",
        json!({"slug": "plug_nope", "active": true}),
    )
    .await;
    check(
        "plangate_get_plan",
        &call_ok(&client, "plangate_get_plan", json!({})).await,
    );

    // A receipt with applied steps (one undone by the site's snapshot,
    // one with no undo) and a failed one.
    let receipt = call(
        &client,
        "plangate_apply_plan",
        json!({"continue_on_error": true}),
    )
    .await;
    assert_eq!(body(&receipt)["applied"], 2, "{receipt:?}");
    assert_eq!(body(&receipt)["failed"], 1, "{receipt:?}");
    check("plangate_apply_plan", &receipt);
    check(
        "plangate_get_plan",
        &call_ok(&client, "plangate_get_plan", json!({})).await,
    );

    // The agent proposes the undo of the deletion; applied, the original
    // names its revert, shown whole.
    let revert = call_ok(&client, "plangate_revert", json!({"step_ids": [delete]})).await;
    assert_eq!(
        body(&revert)["planned"].as_array().unwrap().len(),
        1,
        "{revert:?}"
    );
    check("plangate_revert", &revert);
    let restore = body(&revert)["planned"][0]["step_id"].clone();
    let receipt = call_ok(
        &client,
        "plangate_apply_plan",
        json!({"step_ids": [restore]}),
    )
    .await;
    check("plangate_apply_plan", &receipt);
    let whole = call_ok(&client, "plangate_get_plan", json!({"step_id": delete})).await;
    assert_eq!(body(&whole)["steps"][0]["reverted_by"], json!([restore]));
    check("plangate_get_plan", &whole);

    // Reverting it again plans nothing and says why.
    let again = call_ok(&client, "plangate_revert", json!({"step_ids": [delete]})).await;
    assert_eq!(body(&again)["planned"], json!([]), "{again:?}");
    check("plangate_revert", &again);

    // A plan with nothing waiting still answers a receipt.
    let nothing = call(&client, "plangate_apply_plan", json!({})).await;
    if nothing.is_error != Some(true) {
        check("plangate_apply_plan", &nothing);
    }
    call_ok(
        &client,
        "update_option",
        json!({"name": "tagline", "value": "Later"}),
    )
    .await;
    let ended = call_ok(&client, "plangate_end_session", json!({})).await;
    // The waiting step and the failed one.
    assert_eq!(body(&ended)["discarded_steps"], 2, "{ended:?}");
    check("plangate_end_session", &ended);
    client.cancel().await.unwrap();

    a_plan_key_waits_for_the_person(&gw).await;
    gw.shutdown().await;
}

/// A `plan`-scope key's exit_plan_mode asks a person elsewhere, and waits
/// for their answer: the answer, with its outcome, fits the listed schema.
async fn a_plan_key_waits_for_the_person(gw: &std::sync::Arc<plangate_gateway::Gateway>) {
    let planner = gw.store().create_key("planner", Scope::Plan).await.unwrap();
    let client = client_of(gw.clone(), Some(planner.token), Seen::default()).await;
    call_ok(&client, "plangate_begin_session", json!({"mode": "plan"})).await;
    call_ok(
        &client,
        "update_option",
        json!({"name": "tagline", "value": "Asked"}),
    )
    .await;
    let digest = body(&call_ok(&client, "plangate_get_plan", json!({})).await)["plan_digest"]
        .as_str()
        .unwrap()
        .to_owned();
    let person = {
        let (gw, key_id) = (gw.clone(), planner.key.id.clone());
        tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            record(&gw, &key_id, person_approves(&digest)).await;
        })
    };
    let asked = call_ok(
        &client,
        "plangate_exit_plan_mode",
        json!({"plan": "retitle"}),
    )
    .await;
    person.await.unwrap();
    assert_eq!(body(&asked)["review_requested"], true, "{asked:?}");
    assert_eq!(
        body(&asked)["outcome"]["approved"].as_array().map(Vec::len),
        Some(1),
        "{asked:?}"
    );
    let tools = client.peer().list_all_tools().await.unwrap();
    let listed = tools
        .iter()
        .find(|t| t.name == "plangate_exit_plan_mode")
        .unwrap();
    let schema = Value::Object((*listed.output_schema.clone().unwrap()).clone());
    assert!(jsonschema::is_valid(&schema, &body(&asked)), "{schema}");
    client.cancel().await.unwrap();
}
