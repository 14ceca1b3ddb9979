//! An upstream that cannot start is *down*, never a gateway that exits: a
//! wrapped client's server whose variable is unset leaves the others
//! serving, and `config check`, the server's instructions and a call to
//! one of its tools name it and why. `wrap` says so before it writes, and
//! `unwrap` revokes the key `wrap` made.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use serde_json::json;

/// A config of the demo site and `docs`, whose command is a variable that
/// is not set.
fn with_a_down_upstream(scratch: &Scratch) -> String {
    let site = site(scratch);
    let config = scratch.write(
        "plangate.toml",
        &format!("{site}\n[upstreams.docs]\ncommand = \"${{DOCS_SERVER_NOT_SET}}\"\n"),
    );
    config.to_str().unwrap().to_owned()
}

/// The demo site as upstream `site`, its state in the scratch directory.
fn site(scratch: &Scratch) -> String {
    plangate_upstream(
        "site",
        &[
            "demo-site",
            "--state",
            scratch.path().join("site.json").to_str().unwrap(),
        ],
    )
}

#[tokio::test]
async fn an_upstream_whose_variable_is_unset_is_down_and_the_others_serve() {
    let scratch = Scratch::new();
    let config = with_a_down_upstream(&scratch);
    let args = ["config", "check", "--config", &config];
    let checked = succeeded(&args, &scratch.run(&args));
    assert!(
        checked.contains("upstream docs: DOWN") && checked.contains("DOCS_SERVER_NOT_SET"),
        "{checked}"
    );

    let token = scratch.create_key("agent", "write");
    let client = stdio_client(&scratch, &["--config", &config], Some(&token)).await;
    let tools = tool_names(&client).await;
    // Named as they will be once docs is up too: its being down does not
    // change the others' names.
    assert!(
        tools.contains(&"site__update_option".to_owned()),
        "{tools:?}"
    );
    let instructions = client
        .peer_info()
        .and_then(|i| i.instructions.clone())
        .unwrap_or_default();
    assert!(
        instructions.contains("docs (environment variable DOCS_SERVER_NOT_SET"),
        "{instructions}"
    );
    let refused = call_body(&client, "docs__search", json!({"q": "x"})).await;
    assert_eq!(refused["code"], "upstream_down", "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("DOCS_SERVER_NOT_SET"),
        "{refused}"
    );
    // The site serves.
    let done = call(&client, "site__update_option", tagline("Still here"))
        .await
        .unwrap();
    assert_ne!(done.is_error, Some(true), "{done:?}");
    client.cancel().await.unwrap();
}

#[test]
fn wrap_names_a_server_whose_variable_is_unset_and_unwrap_revokes_its_key() {
    let scratch = Scratch::new();
    let file = scratch.write(
        "claude_desktop_config.json",
        &json!({"mcpServers": {
            "docs": {"command": "node", "args": ["docs.js"], "env": {"TOKEN": "${DOCS_TOKEN_NOT_SET}"}},
            "notes": {"command": "node", "args": ["notes.js"]}
        }})
        .to_string(),
    );
    let from = file.to_str().unwrap();
    let out = scratch
        .command(&["wrap", "--from", from])
        .env_remove("DOCS_TOKEN_NOT_SET")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let said = stderr(&out);
    assert!(
        said.contains("server \"docs\" would start down") && said.contains("DOCS_TOKEN_NOT_SET"),
        "{said}"
    );
    assert!(!said.contains("\"notes\" would"), "{said}");

    let args = ["unwrap", "--from", from];
    let said = succeeded(&args, &scratch.run(&args));
    assert!(said.contains("wrap created is revoked"), "{said}");
    let args = ["keys", "list", "--json"];
    let keys: serde_json::Value = parsed(&args, &succeeded(&args, &scratch.run(&args)));
    assert!(!keys[0]["revoked_at"].is_null(), "{keys}");

    // --keep-key keeps it.
    succeeded(
        &["wrap", "--from", from],
        &scratch.run(&["wrap", "--from", from]),
    );
    let args = ["unwrap", "--from", from, "--keep-key"];
    let said = succeeded(&args, &scratch.run(&args));
    assert!(said.contains("stays (--keep-key)"), "{said}");
}

#[tokio::test]
async fn a_direct_write_whose_upstream_dies_mid_call_says_it_may_have_taken_effect() {
    let scratch = Scratch::new();
    let (config, log) = counting_config(&scratch, "");
    let token = scratch.create_key("agent", "write");
    let client = stdio_client(&scratch, &["--config", &config], Some(&token)).await;
    let log_path = log.to_str().unwrap().to_owned();
    // The upstream takes the call (and logs it), then dies before it
    // answers.
    let killer = tokio::spawn(async move {
        for _ in 0..200 {
            if std::fs::read_to_string(&log_path).is_ok_and(|t| !t.is_empty()) {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        }
        let _ = std::process::Command::new("pkill")
            .args(["-KILL", "-f", &log_path])
            .output();
    });
    let answer = call_body(&client, "bump", json!({"n": 1, "ms": 10_000})).await;
    killer.await.unwrap();
    assert_eq!(answer["code"], "upstream_unavailable", "{answer}");
    let message = answer["message"].as_str().unwrap();
    assert!(
        message.contains("may have taken effect: check before calling again"),
        "{message}"
    );
    assert!(!message.contains("try again"), "{message}");
    assert_eq!(
        deliveries(&log).get(&1),
        Some(&1),
        "it reached the upstream"
    );
    client.cancel().await.unwrap();
}

/// A command that does not exist is tried again with backoff, and the log
/// says so once — when, and how often at most — not at every attempt.
#[test]
fn a_missing_command_is_retried_with_backoff_said_once() {
    let scratch = Scratch::new();
    let site = site(&scratch);
    let config = scratch.write(
        "plangate.toml",
        &format!("{site}\n[upstreams.ghost]\ncommand = \"/nonexistent/plangate-ghost\"\n"),
    );
    let service = serve_http(&scratch, &["--config", config.to_str().unwrap()]);
    // 250 ms, 500 ms, 1 s, 2 s: four attempts or more in four seconds.
    std::thread::sleep(std::time::Duration::from_secs(4));
    let log = service.stderr.lock().unwrap().clone();
    assert_eq!(log.matches("trying again in about").count(), 1, "{log}");
    assert!(log.contains("then at most every 30 s"), "{log}");
    assert!(log.contains("plangate-ghost"), "{log}");
}
