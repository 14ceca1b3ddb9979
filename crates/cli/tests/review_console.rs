//! `plangate console`: the web console for agents whose plangate runs
//! over stdio, served from the same data dir with no MCP endpoint and no
//! upstream started. The agent's answers name it; the person approves
//! there; Apply there says the agent's gateway runs approved steps; the
//! agent's own apply then runs them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use serde_json::{Value, json};

/// The agent key's plan as the console's operator API answers it.
async fn plan_review(http: &reqwest::Client, base: &str, token: &str) -> Value {
    http.get(format!("{base}/console/api/plan?key=agent"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_stdio_agents_plan_is_approved_in_the_console_and_run_by_its_own_gateway() {
    let (scratch, config, [agent_key]) = demo_keys("", [("agent", "plan")]);
    let args = ["operator", "token", "--name", "alice"];
    let token = succeeded(&args, &scratch.run(&args)).trim().to_owned();
    let console = Proc::start(
        scratch.command(&["console", "--http", "127.0.0.1:0", "--config", &config]),
        "plangate console serving ",
    );
    let base = format!("http://{}", console.addr);

    // The agent's stdio gateway names where the person reviews.
    let agent = config_client(&scratch, &config, &agent_key).await;
    let planned = call(&agent, "update_option", tagline("Reviewed in the console"))
        .await
        .unwrap();
    let text = planned.content[0].as_text().unwrap().text.clone();
    assert!(text.contains(&format!("{base}/console")), "{text}");
    let before = site_tagline(&scratch);

    let http = reqwest::Client::new();
    let review = plan_review(&http, &base, &token).await;
    let seen = json!({
        "key_id": review["plan"]["key_id"],
        "plan_digest": review["plan"]["plan_digest"],
    });
    // Apply here runs nothing: the servers are the agent's gateway's.
    let refused = http
        .post(format!("{base}/console/api/apply"))
        .bearer_auth(&token)
        .json(&seen)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 503);
    let said: Value = refused.json().await.unwrap();
    assert_eq!(said["error"], "upstream_down", "{said}");
    assert!(
        said["message"]
            .as_str()
            .unwrap()
            .contains("the agent's gateway runs the approved steps"),
        "{said}"
    );
    assert_eq!(site_tagline(&scratch), before);

    let approved = http
        .post(format!("{base}/console/api/approve"))
        .bearer_auth(&token)
        .json(&seen)
        .send()
        .await
        .unwrap();
    assert_eq!(approved.status(), 200, "{}", approved.text().await.unwrap());
    let receipt = apply_plan(&agent, json!({})).await;
    assert_eq!(receipt["applied"], 1, "{receipt}");
    assert_eq!(site_tagline(&scratch), "Reviewed in the console");

    // No MCP endpoint here: agents connect to their own gateway.
    let mcp = http.post(format!("{base}/mcp")).send().await.unwrap();
    assert_eq!(mcp.status(), 404);
    agent.cancel().await.unwrap();
}

#[tokio::test]
async fn with_apply_the_console_starts_the_servers_and_runs_steps_itself() {
    let (scratch, config, [agent_key]) = demo_keys("", [("agent", "plan")]);
    let args = ["operator", "token", "--name", "alice"];
    let token = succeeded(&args, &scratch.run(&args)).trim().to_owned();
    let agent = config_client(&scratch, &config, &agent_key).await;
    ok(&agent, "update_option", tagline("Applied in the console")).await;
    let console = Proc::start(
        scratch.command(&[
            "console",
            "--http",
            "127.0.0.1:0",
            "--config",
            &config,
            "--apply",
        ]),
        "plangate console serving ",
    );
    let base = format!("http://{}", console.addr);
    let http = reqwest::Client::new();
    let review = plan_review(&http, &base, &token).await;
    let applied = http
        .post(format!("{base}/console/api/apply"))
        .bearer_auth(&token)
        .json(&json!({
            "key_id": review["plan"]["key_id"],
            "plan_digest": review["plan"]["plan_digest"],
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(applied.status(), 200, "{}", applied.text().await.unwrap());
    assert_eq!(site_tagline(&scratch), "Applied in the console");
    agent.cancel().await.unwrap();
}
