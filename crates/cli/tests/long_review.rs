//! A review longer than the client's patience (docs/design.md §7): a
//! client built on the official TypeScript SDK calls `exit_plan_mode`
//! with a 15 s request timeout that the SDK restarts on progress, and the
//! person (its elicitation handler) answers only after 23 s. plangate
//! tells the waiting call every 10 s that it is still waiting for the
//! person, so the call lives to get the receipt. The same client without
//! a progress token gives up at 15 s: the heartbeat is what kept it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Command;

use common::*;
use serde_json::{Value, json};

/// Runs `tests/interop/long_review.mjs` against `url` and reads its line.
fn long_review(url: &str, token: &str, args: &Value, no_progress: bool) -> Value {
    let flags: &[&str] = if no_progress { &["--no-progress"] } else { &[] };
    long_review_with(url, token, args, flags)
}

/// [`long_review`] with the script's own flags.
fn long_review_with(url: &str, token: &str, args: &Value, flags: &[&str]) -> Value {
    let peers = peers();
    let mut cmd = Command::new("node");
    cmd.arg(peers.interop.join("long_review.mjs"))
        .arg(&peers.node_modules)
        .args([
            url,
            token,
            "update_page",
            &args.to_string(),
            "23000",
            "15000",
        ]);
    cmd.args(flags);
    let out = cmd.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "long_review.mjs: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(text.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// Each progress value heard is above the last, as MCP requires.
fn each_above_the_last(heard: &[Value]) {
    let values: Vec<f64> = heard
        .iter()
        .map(|p| p["progress"].as_f64().unwrap())
        .collect();
    assert!(values.windows(2).all(|w| w[1] > w[0]), "{values:?}");
}

#[test]
fn a_review_longer_than_the_clients_timeout_keeps_the_call_alive_with_progress() {
    let scratch = Scratch::new();
    let token = scratch.create_key("agent", "write");
    let gw = serve_http(&scratch, &[]);

    let out = long_review(&gw.url(), &token, &our_story(), false);
    let result = &out["result"];
    assert_eq!(result["isError"], false, "{out}");
    assert_eq!(result["structuredContent"]["applied"], 1, "{out}");
    assert!(out["seconds"].as_f64().unwrap() >= 23.0, "{out}");
    // Two heartbeats while the person thought (at 10 s and 20 s), then the
    // apply's own progress, each value above the last as MCP requires.
    let heard = out["progress"].as_array().unwrap();
    let said = |i: usize| heard[i]["message"].as_str().unwrap().to_owned();
    assert!(heard.len() >= 4, "{out}");
    assert!(
        said(0).starts_with("waiting for the person's review")
            && said(1).starts_with("waiting for the person's review"),
        "{out}"
    );
    assert!(said(2).starts_with("step 1 of 1: Update page 2"), "{out}");
    each_above_the_last(heard);
    assert_eq!(
        result["structuredContent"]["steps"][0]["outcome"], "applied",
        "{out}"
    );

    // Without a progress token nothing restarts the client's timeout.
    let out = long_review(
        &gw.url(),
        &token,
        &json!({"id": 2, "title": "Our history"}),
        true,
    );
    assert!(
        out["error"]
            .as_str()
            .unwrap_or_default()
            .contains("timed out"),
        "{out}"
    );
    assert!(out["seconds"].as_f64().unwrap() < 23.0, "{out}");
}

/// The same for a mode that asks before each write: the person takes 23 s
/// over one call, the client's 15 s timeout restarts on the question's
/// heartbeat, and the write runs on their yes. Whatever the call reports
/// after it is counted above the heartbeat.
#[test]
fn an_ask_longer_than_the_clients_timeout_keeps_the_call_alive_with_progress() {
    let scratch = Scratch::new();
    let token = scratch.create_key("agent", "write");
    let config = demo_config(
        &scratch,
        "[modes.careful]\naccess = \"read\"\nover_access = \"ask\"\n",
    );
    let gw = serve_http(&scratch, &["--config", &config]);

    let out = long_review_with(&gw.url(), &token, &our_story(), &["--ask", "careful"]);
    let result = &out["result"];
    assert_eq!(result["isError"], false, "{out}");
    assert!(out["seconds"].as_f64().unwrap() >= 23.0, "{out}");
    let heard = out["progress"].as_array().unwrap();
    assert!(heard.len() >= 2, "{out}");
    assert!(
        heard[..2].iter().all(|p| p["message"]
            .as_str()
            .unwrap()
            .starts_with("waiting for the person's review")),
        "{out}"
    );
    each_above_the_last(heard);
    // The write ran on the yes: the demo site made its draft of page 2.
    assert_eq!(
        result["structuredContent"]["changed"],
        json!(["title"]),
        "{out}"
    );
}
