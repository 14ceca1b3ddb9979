//! Every call on the record (docs/design.md §9), end to end: a `write` key's
//! direct write, a planned write (in the same append as its step) and a
//! refused write each leave a `call_recorded` event in the key's log,
//! secrets redacted, before the agent gets its answer; repeated refusals
//! are coalesced; reads are recorded only with `[audit] reads = true`.
//! Real `plangate` processes, the demo site upstream; `audit export` reads
//! the log as an operator would.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use serde_json::{Value, json};

/// The key's events as `audit export --key NAME` prints them.
fn exported(scratch: &Scratch, key: &str) -> Vec<Value> {
    let args = ["audit", "export", "--key", key];
    succeeded(&args, &scratch.run(&args))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The `call_recorded` events among `events`.
fn records(events: &[Value]) -> Vec<&Value> {
    events
        .iter()
        .filter(|e| e["type"] == "call_recorded")
        .collect()
}

#[tokio::test]
async fn direct_planned_and_refused_writes_are_on_the_record_and_reads_are_not() {
    let (scratch, config, [writer, reader]) =
        demo_keys("", [("writer", "write"), ("reader", "read")]);
    let canary = "canary-do-not-log-7f3a";

    // A direct write in default mode: run, recorded with its outcome.
    let agent = config_client(&scratch, &config, &writer).await;
    let secret = tagline(json!({"user": "ops", "password": canary}));
    let r = call(&agent, "update_option", secret).await.unwrap();
    assert_eq!(r.is_error, Some(false), "{r:?}");
    assert_eq!(site_tagline(&scratch)["password"], canary);
    // A read: not recorded by default.
    ok(&agent, "list_pages", json!({})).await;
    let events = exported(&scratch, "writer");
    let calls = records(&events);
    assert_eq!(calls.len(), 1, "{calls:?}");
    let run = &calls[0]["call"];
    assert_eq!(run["tool"], "update_option");
    assert_eq!(run["server"], "site");
    assert_eq!(run["decision"], "run");
    assert_eq!(run["outcome"], "ok");
    assert_eq!(run["effect"], "write");
    assert_eq!(run["arguments"]["value"]["user"], "ops");
    assert_eq!(run["arguments"]["value"]["password"], "[redacted]");
    assert!(run["duration_ms"].is_u64());
    assert_eq!(calls[0]["actor"]["key_name"], "writer");
    assert_eq!(calls[0]["channel"], "stdio");
    let text = succeeded(&["audit", "export"], &scratch.run(&["audit", "export"]));
    assert!(!text.contains(canary), "the audit log leaks the secret");

    // A planned write: recorded in the same append as its step.
    begin(&agent, "plan").await;
    let step = ok(&agent, "update_option", tagline("planned")).await;
    let events = exported(&scratch, "writer");
    let planned = events
        .iter()
        .position(|e| e["type"] == "step_planned")
        .unwrap();
    let next = &events[planned + 1];
    assert_eq!(next["type"], "call_recorded", "{next}");
    assert_eq!(next["call"]["decision"], "plan");
    assert_eq!(next["call"]["outcome"], "planned");
    assert_eq!(next["call"]["step_id"], step["step_id"]);
    assert_eq!(next["call"]["arguments"], Value::Null);
    assert_eq!(
        next["key_seq"].as_i64().unwrap(),
        events[planned]["key_seq"].as_i64().unwrap() + 1
    );
    agent.cancel().await.unwrap();

    // A read key's writes are refused: the first is recorded, the rest of
    // the minute's are counted, not written one by one.
    let reading = config_client(&scratch, &config, &reader).await;
    for _ in 0..5 {
        let r = call(&reading, "update_option", tagline("no"))
            .await
            .unwrap();
        assert_eq!(body(&r)["code"], "forbidden");
    }
    reading.cancel().await.unwrap();
    let calls = exported(&scratch, "reader");
    let calls = records(&calls);
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0]["call"]["decision"], "refuse");
    assert_eq!(calls[0]["call"]["outcome"], "refused");
    assert_eq!(calls[0]["call"]["code"], "forbidden");
    assert_eq!(calls[0]["call"]["arguments"]["name"], "tagline");
}

#[tokio::test]
async fn audit_reads_puts_reads_on_the_record_too() {
    let (scratch, config, [token]) = demo_keys("[audit]\nreads = true\n", [("agent", "read")]);
    let agent = config_client(&scratch, &config, &token).await;
    ok(&agent, "get_page", json!({"id": 2})).await;
    agent.cancel().await.unwrap();
    let events = exported(&scratch, "agent");
    let calls = records(&events);
    assert_eq!(calls.len(), 1, "{events:?}");
    assert_eq!(calls[0]["call"]["tool"], "get_page");
    assert_eq!(calls[0]["call"]["effect"], "read");
    assert_eq!(calls[0]["call"]["outcome"], "ok");
    assert_eq!(calls[0]["call"]["arguments"], json!({"id": 2}));
}

#[tokio::test]
async fn messages_over_the_size_cap_are_on_the_record_once_a_minute_per_key() {
    let (scratch, config, [token]) = demo_keys(
        "[gateway]\nmax_request_bytes = 1024\n",
        [("agent", "write")],
    );
    let agent = config_client(&scratch, &config, &token).await;
    for _ in 0..3 {
        let err = call(&agent, "update_option", tagline("x".repeat(4096)))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("too large"), "{err}");
    }
    // The session goes on.
    ok(&agent, "list_pages", json!({})).await;
    agent.cancel().await.unwrap();
    let events = exported(&scratch, "agent");
    let calls = records(&events);
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0]["call"]["code"], "too_large");
    assert_eq!(calls[0]["call"]["outcome"], "refused");
    assert_eq!(calls[0]["call"]["tool"], "");
    assert_ne!(site_tagline(&scratch), "x".repeat(4096));
}
