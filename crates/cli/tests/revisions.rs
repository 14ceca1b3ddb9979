//! Plan revisions (DESIGN: revisions and per-step answers): every change to
//! a key's plan advances its `revision`, shown to the agent (`get_plan`,
//! the planned-write answer's `plan`) and to people (`plans show`); a
//! review records the revision it saw; `plans diff` prints what changed
//! since — from the data dir alone.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use serde_json::{Value, json};

fn op_ok(scratch: &Scratch, args: &[&str]) -> String {
    succeeded(args, &scratch.run(args))
}

fn op_json(scratch: &Scratch, args: &[&str]) -> Value {
    serde_json::from_str(&op_ok(scratch, args)).unwrap()
}

#[tokio::test]
async fn each_change_advances_the_revision_and_plans_diff_shows_what_changed_since_the_review() {
    let (scratch, _config, client) = demo_agent("agent", "write").await;
    begin(&client, "plan").await;
    let first = ok(&client, "update_page", our_story()).await;
    assert_eq!(first["plan"]["revision"], 1, "{first}");
    let second = ok(&client, "update_option", tagline("Fresh bread daily")).await;
    assert_eq!(second["plan"]["revision"], 2, "{second}");
    // The same write again: deduplicated, and the plan's answer moved on.
    let again = ok(&client, "update_option", tagline("Fresh bread daily")).await;
    assert_eq!(again["deduplicated"], true);
    assert_eq!(again["plan"]["revision"], 3);
    let plan = get_plan(&client).await;
    assert_eq!(plan["revision"], 3);
    // Reading changes nothing.
    assert_eq!(get_plan(&client).await["revision"], 3);

    // A person reviews and says yes at revision 3.
    let digest = plan["plan_digest"].as_str().unwrap().to_owned();
    op_ok(
        &scratch,
        &["plans", "approve", "--key", "agent", "--digest", &digest],
    );
    let shown = op_json(&scratch, &["plans", "show", "--key", "agent", "--json"]);
    assert_eq!(
        (
            shown["revision"].as_u64(),
            shown["reviewed_revision"].as_u64()
        ),
        (Some(3), Some(3))
    );
    assert!(
        op_ok(&scratch, &["plans", "show", "--key", "agent"])
            .contains("revision 3 (as last reviewed)")
    );
    assert!(
        get_plan(&client).await.get("since_review").is_none(),
        "nothing changed since the review"
    );
    let unchanged = op_ok(&scratch, &["plans", "diff", "--key", "agent"]);
    assert!(unchanged.contains("revision 3 → 3"), "{unchanged}");
    assert!(unchanged.contains("nothing changed"), "{unchanged}");

    // The agent plans a third step and drops the first.
    let third = ok(&client, "delete_page", json!({"id": 3})).await;
    let first_id = first["step_id"].as_str().unwrap();
    let discarded = call_body(
        &client,
        "plangate_discard_plan",
        json!({"step_ids": [first_id]}),
    )
    .await;
    assert_eq!(discarded["success"], true, "{discarded}");
    let plan = get_plan(&client).await;
    assert_eq!(plan["revision"], 5);
    // The agent sees what moved since the person looked.
    let since = &plan["since_review"];
    assert_eq!(
        (
            since["reviewed_revision"].as_u64(),
            since["revision"].as_u64()
        ),
        (Some(3), Some(5)),
        "{plan}"
    );
    assert_eq!(since["added"], json!([third["step_id"]]));
    assert_eq!(since["status_changed"][0]["step_id"], first_id);
    assert_eq!(since["status_changed"][0]["to"], "discarded");
    assert_eq!(since["digest_changed"], true);

    let text = op_ok(&scratch, &["plans", "show", "--key", "agent"]);
    assert!(text.contains("revision 5 (last reviewed at 3;"), "{text}");
    assert!(
        text.contains(
            "since the last review: 1 step(s) planned; step 1 planned → discarded; the digest moved"
        ),
        "{text}"
    );
    let diff = op_json(&scratch, &["plans", "diff", "--key", "agent", "--json"]);
    assert_eq!(
        (diff["since"].as_u64(), diff["revision"].as_u64()),
        (Some(3), Some(5))
    );
    let added: Vec<_> = diff["added"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["step_id"].clone())
        .collect();
    assert_eq!(added, [third["step_id"].clone()]);
    assert_eq!(diff["status_changed"][0]["step_id"], first_id);
    assert_eq!(diff["status_changed"][0]["from"], "planned");
    assert_eq!(diff["status_changed"][0]["to"], "discarded");
    assert_ne!(diff["digest_then"], diff["digest_now"]);
    let text = op_ok(&scratch, &["plans", "diff", "--key", "agent"]);
    assert!(text.contains("revision 3 → 5"), "{text}");
    assert!(
        text.contains(&format!("~ 1. {first_id} planned → discarded")),
        "{text}"
    );
    assert!(text.contains("does not cover this plan"), "{text}");

    // From the start: every step is new.
    let all = op_json(
        &scratch,
        &["plans", "diff", "--key", "agent", "--since", "0", "--json"],
    );
    assert_eq!(all["added"].as_array().unwrap().len(), 3);

    // A revision ahead of the plan is bad input, said so.
    let out = scratch.run(&["plans", "diff", "--key", "agent", "--since", "99"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let said = stderr(&out);
    assert!(said.contains("[invalid_arguments]"), "{said}");
    assert!(said.contains("is at revision 5"), "{said}");
    client.cancel().await.unwrap();
}
