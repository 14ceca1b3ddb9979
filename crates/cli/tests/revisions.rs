//! Plan revisions (docs/design.md §9: revisions and per-step answers): every change to
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

/// A person rejects one waiting step with a reason (`plans reject`, data
/// dir only): it leaves the digest and never runs; the agent reads the
/// reason verbatim in `get_plan` and in the apply's receipt; the rest of
/// the plan applies.
#[tokio::test]
async fn a_rejected_step_never_runs_and_its_agent_reads_why() {
    let (scratch, _config, client) = demo_agent("agent", "write").await;
    begin(&client, "plan").await;
    let keep = ok(&client, "update_option", tagline("Fresh bread daily")).await;
    let drop = ok(&client, "update_page", our_story()).await;
    let before = get_plan(&client).await;
    let drop_id = drop["step_id"].as_str().unwrap().to_owned();
    let reason = "Keep the About title; \"Our story\" is for the blog <b>only</b>";

    let said = op_json(
        &scratch,
        &[
            "plans", "reject", "--key", "agent", &drop_id, "--reason", reason, "--json",
        ],
    );
    assert_eq!(said["success"], true, "{said}");
    assert_eq!(said["pending_steps"], 1);

    let plan = get_plan(&client).await;
    assert_ne!(
        plan["plan_digest"], before["plan_digest"],
        "the digest leaves it out"
    );
    assert_eq!(plan["pending_steps"], 1);
    let rejected = plan["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["step_id"] == drop_id.as_str())
        .unwrap()
        .clone();
    assert_eq!(rejected["status"], "rejected");
    assert_eq!(rejected["rejection"]["reason"], reason, "verbatim");
    assert!(
        rejected["rejection"]["by"]
            .as_str()
            .is_some_and(|b| !b.is_empty())
    );
    let shown = op_ok(&scratch, &["plans", "show", "--key", "agent"]);
    assert!(shown.contains("rejected by "), "{shown}");

    // Naming it to apply is refused; the rest applies, and the receipt
    // repeats the reason.
    let named = call(
        &client,
        "plangate_apply_plan",
        json!({"step_ids": [drop_id]}),
    )
    .await
    .unwrap();
    assert_eq!(named.is_error, Some(true));
    assert_eq!(body(&named)["code"], "invalid_arguments");
    let pages_before = site(&scratch)["pages"].as_array().map(Vec::len);
    let receipt = apply_plan(&client, json!({"plan_digest": plan["plan_digest"]})).await;
    assert_eq!(receipt["applied"], 1, "{receipt}");
    assert_eq!(receipt["steps"][0]["step_id"], keep["step_id"]);
    assert_eq!(receipt["rejected"][0]["step_id"], drop_id.as_str());
    assert_eq!(receipt["rejected"][0]["reason"], reason);
    assert_eq!(site_tagline(&scratch), json!("Fresh bread daily"));
    // update_page would have made a draft copy of page 2: none was made.
    assert_eq!(
        site(&scratch)["pages"].as_array().map(Vec::len),
        pages_before,
        "never ran"
    );
    let after = get_plan(&client).await;
    assert!(
        after["steps"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["step_id"] == drop_id.as_str() && s["status"] == "rejected"),
        "{after}"
    );

    // Rejecting again, without a reason, or a step that is not there: bad
    // input, said with its code; nothing recorded.
    for (args, says) in [
        (vec![drop_id.as_str(), "--reason", "again"], "is rejected"),
        (vec![drop_id.as_str(), "--reason", "  "], "needs a reason"),
        (vec!["step_nope", "--reason", "x"], "no step"),
    ] {
        let mut all = vec!["plans", "reject", "--key", "agent"];
        all.extend(args);
        let out = scratch.run(&all);
        assert_eq!(out.status.code(), Some(2), "{all:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(
            err.contains("[invalid_arguments]") && err.contains(says),
            "{err}"
        );
    }

    // The agent may drop it from the plan.
    let dropped = call_body(
        &client,
        "plangate_discard_plan",
        json!({"step_ids": [drop_id]}),
    )
    .await;
    assert_eq!(dropped["discarded"], json!([drop_id]), "{dropped}");
    client.cancel().await.unwrap();
}
