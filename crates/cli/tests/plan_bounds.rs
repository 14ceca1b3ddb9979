//! A plan is bounded (docs/config.md, `max_plan_bytes`), on the official
//! `server-filesystem`: a write that would take the plan past its cap is
//! refused `too_large` and nothing is planned; an argument value over
//! 64 KiB is shown in the agent's answers by its size and digest, and
//! `get_plan {"step_id"}` shows that step whole.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use serde_json::json;

#[tokio::test]
async fn a_plan_past_its_byte_cap_is_refused_and_large_values_are_shown_by_digest() {
    let scratch = Scratch::new();
    let root = std::fs::canonicalize(scratch.path()).unwrap().join("root");
    std::fs::create_dir_all(&root).unwrap();
    let config = filesystem_config(&scratch, &root, "\n[gateway]\nmax_plan_bytes = 300000\n");
    let config = config.display().to_string();
    let token = scratch.create_key("agent", "plan");
    let agent = config_client(&scratch, &config, &token).await;
    let content = "line of text\n".repeat(8_000); // 112 002 bytes as JSON
    let first = ok(
        &agent,
        "write_file",
        json!({"path": root.join("a.txt"), "content": content}),
    )
    .await;
    assert_eq!(first["code"], "plan_step", "{first}");
    let shown = first["arguments"]["content"].as_str().unwrap();
    assert!(
        shown.starts_with("[112002 bytes, sha256:") && shown.len() < 300,
        "{shown}"
    );
    assert_eq!(first["arguments"]["path"], json!(root.join("a.txt")));

    // The listing shows it by digest too; the step alone shows it whole.
    let plan = get_plan(&agent).await;
    assert!(plan.to_string().len() < 100_000, "get_plan carried it all");
    let step = first["step_id"].as_str().unwrap();
    let whole = ok(&agent, "plangate_get_plan", json!({"step_id": step})).await;
    assert_eq!(whole["steps"][0]["arguments"]["content"], json!(content));
    let none = call_body(&agent, "plangate_get_plan", json!({"step_id": "step_nope"})).await;
    assert_eq!(none["code"], "invalid_arguments", "{none}");

    // The second such write would take the plan past 300 000 bytes.
    let second = call_body(
        &agent,
        "write_file",
        json!({"path": root.join("b.txt"), "content": content}),
    )
    .await;
    assert_eq!(second["code"], "too_large", "{second}");
    assert!(
        second["message"]
            .as_str()
            .unwrap()
            .contains("max_plan_bytes"),
        "{second}"
    );
    assert_eq!(get_plan(&agent).await["steps"].as_array().unwrap().len(), 1);
    agent.cancel().await.unwrap();
}
