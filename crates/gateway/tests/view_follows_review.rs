//! The MCP Apps view while a review is asked elsewhere (docs/design.md §7), in
//! a real browser (headless Chromium over the DevTools protocol): a
//! `plan`-scope key's `exit_plan_mode` ends before the person answers, so
//! its answer says review was asked and the person has not answered. The
//! view then reads the plan (`get_plan`, the one tool it may call, through
//! the host) every 5 s and shows the person's answer when it comes — here
//! a yes given through `gateway::operator`, between the two reads. A host
//! that cannot call tools for a view is told nothing is read.
//!
//! The answers the host hands the view are the gateway's real ones; the
//! host page (a `file://` page framing the view's exact bytes) records
//! every request the view sends.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::browser::{Browser, js_literal as js};
use common::*;
use plangate_core::{Actor, Channel, Scope};
use plangate_gateway::apps::VIEW_HTML;
use plangate_gateway::operator::{self, factor};
use serde_json::{Value, json};

/// Real answers: `exit_plan_mode` that stopped waiting, `get_plan` before
/// the person answered, and after their yes.
async fn answers(dir: &std::path::Path) -> (Value, Value, Value) {
    let (store, token) = store_with_key(dir, Scope::Plan).await;
    let key = store.authenticate(&token).await.unwrap().unwrap();
    let (site, _) = in_process("site", demo(dir.join("site.json")));
    let mut config = demo_site_config();
    config.gateway.review_timeout = Duration::from_secs(1);
    let gw = start(config, store, vec![("site", site)]).await;
    let client = client_of(gw.clone(), Some(token), Seen::default()).await;
    call(&client, "plangate_begin_session", json!({"mode": "plan"})).await;
    let option = json!({"name": "tagline", "value": "Fresh bread daily"});
    call_ok(&client, "update_option", option).await;
    let asked = call(
        &client,
        "plangate_exit_plan_mode",
        json!({"plan": "Change the tagline."}),
    )
    .await;
    let asked = serde_json::to_value(&asked).unwrap();
    assert_eq!(
        asked["structuredContent"]["review_requested"], true,
        "{asked}"
    );
    assert!(
        asked["structuredContent"].get("outcome").is_none(),
        "{asked}"
    );
    let before = serde_json::to_value(call(&client, "plangate_get_plan", json!({})).await).unwrap();
    // The person's yes, from another surface.
    let yes = factor::confirm(
        gw.operators(),
        gw.material(),
        &factor::Act::Approve { key: &key.name },
        factor::Proof::default(),
        Channel::Console,
    )
    .await
    .unwrap();
    let actor = Actor::Operator { name: "ana".into() };
    operator::approve(gw.log(), &key, actor, &yes, Channel::Console, None, &[])
        .await
        .unwrap();
    let after = serde_json::to_value(call(&client, "plangate_get_plan", json!({})).await).unwrap();
    gw.shutdown().await;
    (asked, before, after)
}

/// A host that frames the view, answers `ui/initialize` with `caps`, hands
/// it `asked`, and answers the view's `tools/call` requests with `reads`
/// in turn (the last one again after that), recording each request.
fn host_page(caps: &Value, asked: &Value, reads: &[Value]) -> String {
    HOST_PAGE
        .replace("/*VIEW*/", &js(&json!(VIEW_HTML)))
        .replace("/*CAPS*/", &js(caps))
        .replace("/*ASKED*/", &js(asked))
        .replace("/*READS*/", &js(&json!(reads)))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_view_shows_the_persons_answer_to_a_review_asked_elsewhere_when_it_comes() {
    let dir = tempfile::tempdir().unwrap();
    let (asked, before, after) = answers(dir.path()).await;
    let following = dir.path().join("following.html");
    std::fs::write(
        &following,
        host_page(&json!({"serverTools": {}}), &asked, &[before, after]),
    )
    .unwrap();
    let blind = dir.path().join("blind.html");
    std::fs::write(&blind, host_page(&json!({}), &asked, &[])).unwrap();

    let (calls, connection, summary, blind_calls, blind_connection) =
        tokio::task::spawn_blocking(move || {
            let mut browser = Browser::start();
            let page = browser.open(&format!("file://{}", following.display()));
            browser.wait_for(
                &page,
                "the person's answer in the view",
                "window.viewText && window.viewText('connection').includes('The person answered')",
            );
            let calls = browser.eval(&page, "JSON.stringify(window.calls)");
            let connection = browser.eval(&page, "window.viewText('connection')");
            let summary = browser.eval(&page, "window.viewText('summary')");
            let blind_page = browser.open(&format!("file://{}", blind.display()));
            browser.wait_for(
                &blind_page,
                "the review asked",
                "window.viewText && window.viewText('summary').includes('review asked')",
            );
            std::thread::sleep(Duration::from_secs(6));
            let blind_calls = browser.eval(&blind_page, "JSON.stringify(window.calls)");
            let blind_connection = browser.eval(&blind_page, "window.viewText('connection')");
            (calls, connection, summary, blind_calls, blind_connection)
        })
        .await
        .unwrap();

    // It read the plan twice — get_plan, nothing else, no arguments — and
    // stopped once the answer showed.
    let calls: Value = serde_json::from_str(calls.as_str().unwrap()).unwrap();
    assert_eq!(
        calls,
        json!([
            {"method": "tools/call", "params": {"name": "plangate_get_plan", "arguments": {}}},
            {"method": "tools/call", "params": {"name": "plangate_get_plan", "arguments": {}}}
        ])
    );
    let connection = connection.as_str().unwrap();
    assert!(
        connection.starts_with(
            "The person answered the review: 1 step(s) approved, 0 rejected, 0 still waiting for a yes"
        ),
        "{connection}"
    );
    let summary = summary.as_str().unwrap();
    assert!(summary.contains("1 step(s), 1 waiting"), "{summary}");

    // A host that does not call tools for its views: nothing is read, and
    // the view says where the answer will show.
    assert_eq!(blind_calls.as_str().unwrap(), "[]");
    assert!(
        blind_connection
            .as_str()
            .unwrap()
            .contains("Ask the agent to read the plan again (get_plan)"),
        "{blind_connection}"
    );
}

/// The test host.
const HOST_PAGE: &str = r#"<!DOCTYPE html>
<html lang="en">
<head><meta charset="utf-8"><title>host</title></head>
<body>
<script>
"use strict";
const VIEW = /*VIEW*/;
const CAPS = /*CAPS*/;
const ASKED = /*ASKED*/;
const READS = /*READS*/;
window.calls = [];
let reads = 0;
const frame = document.createElement("iframe");
frame.setAttribute("sandbox", "allow-scripts allow-same-origin");
const post = (m) => frame.contentWindow.postMessage(m, "*");
window.viewText = (id) => {
  const d = frame.contentDocument;
  const e = d && d.getElementById(id);
  return e ? e.textContent : "";
};
window.addEventListener("message", (e) => {
  if (e.source !== frame.contentWindow) { return; }
  const m = e.data;
  if (m.method === "ui/initialize") {
    post({ jsonrpc: "2.0", id: m.id, result: { protocolVersion: "2026-01-26", hostInfo: { name: "test host", version: "1" }, hostCapabilities: CAPS, hostContext: { theme: "light", displayMode: "inline", toolInfo: { tool: { name: "plangate_exit_plan_mode" } } } } });
  } else if (m.method === "ui/notifications/initialized") {
    post({ jsonrpc: "2.0", method: "ui/notifications/tool-input", params: { arguments: { plan: "Change the tagline." } } });
    post({ jsonrpc: "2.0", method: "ui/notifications/tool-result", params: ASKED });
  } else if (m.method === "tools/call") {
    window.calls.push({ method: m.method, params: m.params });
    const answer = READS[Math.min(reads, READS.length - 1)];
    reads++;
    post({ jsonrpc: "2.0", id: m.id, result: answer });
  } else if (typeof m.method === "string" && m.id !== undefined) {
    window.calls.push({ method: m.method, params: m.params });
  }
});
frame.srcdoc = VIEW;
document.body.appendChild(frame);
</script>
</body>
</html>
"#;
