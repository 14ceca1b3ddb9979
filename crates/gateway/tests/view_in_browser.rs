//! The MCP Apps view in a real browser (headless Chromium, Debian's
//! `chromium`; `scripts/install-browser` installs it when missing).
//!
//! The gateway runs in process against the demo site, plans writes whose
//! arguments are hostile strings, and answers `get_plan`, a planned step, a
//! receipt and a refusal for real. A host page (written to a temporary
//! directory, opened over `file://`) frames the view's exact bytes, plays
//! the MCP Apps host: answers `ui/initialize`, sends each answer as
//! `ui/notifications/tool-input` + `tool-result`, drives the tabs with the
//! keyboard and the search box, lets a sibling frame post forged messages,
//! and probes the CSP from inside the view (an injected script, an injected
//! image with an inline handler, `fetch`, `eval`). It writes what it saw
//! into its own DOM; Chromium's `--dump-dom` hands that to the test, which
//! does every assertion here. A second run takes the screenshot
//! (`target/artifacts/plan-review.png`).
//!
//! The host frames the view with `sandbox="allow-scripts allow-same-origin"`
//! so it can look inside; a real host leaves out `allow-same-origin`, which
//! only takes away powers. Nothing the view does depends on its origin.
//!
//! Every Chromium runs in its own process group with a fresh profile, and
//! the whole group is killed when the run ends, however it ends.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::browser::{HEADLESS, artifacts_dir, chromium, js_literal as js, kill_group};
use common::*;
use plangate_core::Scope;
use plangate_gateway::apps::VIEW_HTML;
use rmcp::model::CallToolResult;
use serde_json::{Value, json};

// Hostile strings: none may become markup, run, or leave the page.
const IMG: &str = "<img src=x onerror=top.postMessage({pwned:'img'},'*')>";
const SCRIPT: &str = "</script><script>top.postMessage({pwned:'script'},'*')</script>";
const JS_LINK: &str = "javascript:top.postMessage({pwned:'link'},'*')";
const ANCHOR: &str = "<a href=javascript:top.postMessage({pwned:'anchor'},'*')>click me</a>";
const SVG: &str = "<svg onload=top.postMessage({pwned:'svg'},'*')></svg>";
const BOLD: &str = "<b>not bold</b> &amp; &lt;";
const SECRET: &str = "sk-never-shown-4242";

/// Runs Chromium headless on `url` with `extra` flags, a fresh profile in
/// `profile`, and a deadline; returns stdout. The process group is killed
/// at the end either way.
fn run_chromium(profile: &Path, extra: &[String], url: &str) -> String {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(chromium());
    cmd.args(HEADLESS)
        .arg("--virtual-time-budget=15000")
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let child = cmd.spawn().expect("chromium starts");
    let pgid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let started = Instant::now();
    let output = rx.recv_timeout(Duration::from_secs(90));
    // Stop whatever is left of the group.
    assert!(pgid > 1, "refusing to signal process group {pgid}");
    kill_group(pgid);
    let output = match output {
        Ok(Ok(o)) => o,
        Ok(Err(e)) => panic!("chromium failed: {e}"),
        Err(_) => panic!("chromium did not finish within {:?}", started.elapsed()),
    };
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    if !output.status.success() && stdout.is_empty() {
        panic!(
            "chromium exited {}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    stdout
}

fn result_json(r: &CallToolResult) -> Value {
    serde_json::to_value(r).unwrap()
}

/// Real gateway answers, in the order the host sends them; the last stays
/// on screen for the screenshot.
async fn scenarios(dir: &Path) -> Vec<Value> {
    let (store, token) = store_with_key(dir, Scope::Write).await;
    let key = store.authenticate(&token).await.unwrap().unwrap();
    let (site, _) = in_process("site", demo(dir.join("site.json")));
    let gw = start(demo_site_config(), store, vec![("site", site)]).await;
    let client = client_of(gw.clone(), Some(token), Seen::default()).await;
    call(&client, "plangate_begin_session", json!({"mode": "plan"})).await;

    let update = json!({"id": 2, "title": IMG, "body": SCRIPT});
    let planned = call_ok(&client, "update_page", update.clone()).await;
    let menu = json!({"menu": "main", "label": "Hours", "url": "/hours"});
    let menu_step = call_ok(&client, "create_menu_item", menu).await;
    let option =
        json!({"name": "tagline", "value": {"html": SVG, "note": BOLD, "api_key": SECRET}});
    call_ok(&client, "update_option", option).await;
    let delete = call_ok(&client, "delete_page", json!({"id": 3})).await;
    // A person rejects the delete with a hostile reason and amends the menu
    // item with hostile strings: the view shows both as text.
    let person = plangate_gateway::operator::acting(&key, "ana", plangate_core::Channel::Console);
    let step_id = |r: &CallToolResult| {
        r.structured_content.as_ref().unwrap()["step_id"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    plangate_gateway::operator::reject(
        gw.log(),
        &person,
        &step_id(&delete),
        &format!("keep page 3: {BOLD}"),
    )
    .await
    .unwrap();
    let arguments = json!({"menu": "main", "label": ANCHOR, "url": JS_LINK});
    let change = plangate_gateway::operator::Amend {
        step_id: &step_id(&menu_step),
        arguments: &arguments,
        seen_revision: None,
    };
    plangate_gateway::operator::amend(gw.ops(), &person, change)
        .await
        .unwrap();

    let mut plan = result_json(&call(&client, "plangate_get_plan", json!({})).await);
    // A field a later plangate might add: the view must still show it.
    plan["structuredContent"]["x_future_field"] = json!({"note": IMG, "nested": [SCRIPT, JS_LINK]});
    let digest = plan["structuredContent"]["plan_digest"].clone();
    let apply_input = json!({"plan_digest": digest});
    let receipt = result_json(&call(&client, "plangate_apply_plan", apply_input.clone()).await);
    assert_eq!(
        receipt["structuredContent"]["code"], "plan_applied",
        "{receipt}"
    );
    let stale_input = json!({"plan_digest": format!("sha256:{}", "0".repeat(64))});
    let refusal = result_json(&call(&client, "plangate_apply_plan", stale_input.clone()).await);
    assert_eq!(refusal["isError"], true, "{refusal}");
    gw.shutdown().await;

    vec![
        json!({"name": "refusal", "tool": "plangate_apply_plan", "input": stale_input, "result": refusal}),
        json!({"name": "receipt", "tool": "plangate_apply_plan", "input": apply_input, "result": receipt}),
        json!({"name": "planned_step", "tool": "update_page", "input": update, "result": result_json(&planned)}),
        json!({"name": "get_plan", "tool": "plangate_get_plan", "input": {}, "result": plan}),
    ]
}

fn host_page(scenarios: &[Value]) -> String {
    HOST_PAGE
        .replace("/*VIEW*/", &js(&json!(VIEW_HTML)))
        .replace("/*SCENARIOS*/", &js(&json!(scenarios)))
}

/// Text as the view may show it: literally, or inside pretty JSON.
fn shows(text: &str, s: &str) -> bool {
    let escaped = serde_json::to_string(s).unwrap();
    text.contains(s) || text.contains(&escaped[1..escaped.len() - 1])
}

/// The strings in the array `v`, as the host page records names.
fn strings(v: &Value) -> Vec<&str> {
    v.as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect()
}

fn verdict_of(dom: &str) -> Value {
    let at = dom
        .find("<pre id=\"verdict\"")
        .unwrap_or_else(|| panic!("no verdict in the host page:\n{dom}"));
    let start = dom[at..].find('>').unwrap() + at + 1;
    let end = dom[start..].find("</pre>").unwrap() + start;
    let text = &dom[start..end];
    assert!(
        !text.is_empty(),
        "the host page never finished (title: {:?})",
        dom.split("<title>")
            .nth(1)
            .and_then(|t| t.split("</title>").next())
    );
    serde_json::from_str(text).unwrap_or_else(|e| panic!("verdict is not JSON ({e}): {text}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn hostile_tool_results_render_as_text_in_headless_chromium_and_the_csp_holds() {
    let dir = tempfile::tempdir().unwrap();
    let scenarios = scenarios(dir.path()).await;
    let host = dir.path().join("host.html");
    std::fs::write(&host, host_page(&scenarios)).unwrap();
    // Kept for anyone who wants to open the test host in a browser.
    std::fs::create_dir_all(artifacts_dir()).unwrap();
    std::fs::copy(&host, artifacts_dir().join("plan-review-host.html")).unwrap();
    let url = format!("file://{}", host.display());

    let dom = tokio::task::spawn_blocking({
        let profile = dir.path().join("profile-dom");
        let url = url.clone();
        move || run_chromium(&profile, &["--dump-dom".to_owned()], &url)
    })
    .await
    .unwrap();
    let v = verdict_of(&dom);
    let errors = v["errors"].as_array().unwrap();
    assert!(errors.is_empty(), "host page errors: {errors:?}");

    the_handshake_is_as_specified(&v);
    // Nothing hostile ever ran; no message but the host's was obeyed.
    assert_eq!(v["pwned"], json!([]), "hostile code ran");
    assert_eq!(
        v["early_rendered"], false,
        "a notification before the handshake was rendered"
    );
    every_scenario_shows_text_and_its_exact_input(&v, &scenarios);
    get_plan_shows_every_step_as_text(scenario(&v, "get_plan"), &scenarios);
    the_step_receipt_and_refusal_show_what_they_are(&v, &scenarios);
    the_tabs_follow_the_keyboard_and_search_filters(&v);

    // A sibling frame's forged messages are received and ignored.
    assert!(
        v["attacker"]["ignored_after"].as_u64().unwrap()
            >= v["attacker"]["ignored_before"].as_u64().unwrap() + 2,
        "{}",
        v["attacker"]
    );
    assert_eq!(
        v["attacker"]["rendered"], false,
        "a forged message was rendered"
    );

    // The CSP holds: injected script and inline handler blocked, no
    // network, no eval — while the view's own script and style run.
    let csp = &v["csp"];
    assert_eq!(csp["fetch"], "blocked", "{csp}");
    assert!(
        csp["eval"].as_str().unwrap().starts_with("blocked"),
        "{csp}"
    );
    let violated = strings(&csp["violations"]);
    for d in ["script-src-elem", "img-src", "connect-src"] {
        assert!(violated.contains(&d), "no {d} violation in {violated:?}");
    }
    assert_eq!(
        csp["own_style_applied"], true,
        "the view's style was blocked"
    );

    screenshot(dir.path(), &url).await;
}

/// What the host page recorded of the scenario `name`.
fn scenario<'a>(v: &'a Value, name: &str) -> &'a Value {
    v["scenarios"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no scenario {name}"))
}

/// The handshake: the view asks first, exactly as specified, and says
/// `initialized` only after the host answered; a display-only view sends
/// nothing else but its size.
fn the_handshake_is_as_specified(v: &Value) {
    assert_eq!(
        v["initialize"]["params"],
        json!({
            "appCapabilities": {},
            "appInfo": {"name": "plangate plan review", "version": "1.0.0"},
            "protocolVersion": "2026-01-26"
        })
    );
    assert_eq!(v["initialize"]["method"], "ui/initialize");
    assert_eq!(v["initialized_after_answer"], true);
    let methods = strings(&v["messages"]);
    assert_eq!(methods.first(), Some(&"ui/initialize"));
    assert_eq!(
        methods
            .iter()
            .filter(|m| **m == "ui/notifications/initialized")
            .count(),
        1,
        "{methods:?}"
    );
    for m in &methods {
        assert!(
            [
                "ui/initialize",
                "ui/notifications/initialized",
                "ui/notifications/size-changed"
            ]
            .contains(m),
            "a display-only view sent {m}"
        );
    }
}

/// In every scenario: no hostile text became markup, no secret is shown,
/// the host is named, and the input tab shows the exact input.
fn every_scenario_shows_text_and_its_exact_input(v: &Value, scenarios: &[Value]) {
    for s in v["scenarios"].as_array().unwrap() {
        let name = s["name"].as_str().unwrap();
        assert_eq!(
            s["elements"],
            json!({"img": 0, "a": 0, "script": 1, "iframe": 0, "object": 0, "svg": 0, "b": 0, "form": 0}),
            "{name}: hostile text became markup"
        );
        assert!(
            !s["body_text"].as_str().unwrap().contains(SECRET),
            "{name}: secret shown"
        );
        assert!(
            s["connection"]
                .as_str()
                .unwrap()
                .contains("plangate test host"),
            "{name}: {}",
            s["connection"]
        );
        let input = &scenarios.iter().find(|x| x["name"] == name).unwrap()["input"];
        assert_eq!(
            s["input"].as_str().unwrap(),
            serde_json::to_string_pretty(input).unwrap(),
            "{name}: the input tab shows the exact input"
        );
        assert_eq!(s["tool_name"], "plangate_get_plan", "{name}");
    }
}

/// get_plan: every step as a disclosure group, digest, warnings, and the
/// hostile strings shown as text; unknown fields in the full JSON.
fn get_plan_shows_every_step_as_text(plan: &Value, scenarios: &[Value]) {
    let digest = scenarios[3]["result"]["structuredContent"]["plan_digest"]
        .as_str()
        .unwrap();
    assert_eq!(plan["steps"], 4);
    assert!(plan["groups"].as_u64().unwrap() >= 8, "{plan}");
    let summary = plan["summary"].as_str().unwrap();
    assert!(summary.contains(digest), "{summary}");
    assert!(summary.contains("4 step(s), 3 waiting"), "{summary}");
    assert!(summary.contains("Revision"), "{summary}");
    assert!(
        summary.contains("rejected by ana: keep page 3: ") && shows(summary, BOLD),
        "the rejection and its reason: {summary}"
    );
    assert!(summary.contains("was amended by ana"), "{summary}");
    assert!(summary.contains("is destructive"), "{summary}");
    assert!(summary.contains("lands live"), "{summary}");
    let steps = plan["steps_text"].as_str().unwrap();
    for s in [IMG, SCRIPT, JS_LINK, ANCHOR, SVG, BOLD] {
        assert!(shows(steps, s), "get_plan: {s:?} not shown as text");
    }
    assert!(steps.contains("[redacted]"));
    assert!(steps.contains("Changed by the person"), "{steps}");
    assert!(steps.contains("- /label: \"Hours\""), "{steps}");
    assert!(steps.contains("copy"), "lands_on copy shown");
    assert!(steps.contains("Destructive:"), "approval note shown");
    let full = plan["json"].as_str().unwrap();
    assert!(full.contains("x_future_field"));
    assert!(shows(full, IMG) && shows(full, SCRIPT));
}

/// A planned step shows its exact hostile arguments; the receipt its
/// outcomes, copy id, links and snapshots as text; the refusal its code
/// and the isError warning.
fn the_step_receipt_and_refusal_show_what_they_are(v: &Value, scenarios: &[Value]) {
    // A planned step: one step, its exact hostile arguments.
    let step = scenario(v, "planned_step");
    assert_eq!(step["steps"], 1);
    assert!(
        step["summary"]
            .as_str()
            .unwrap()
            .contains("planned, not run")
    );
    assert!(shows(step["input"].as_str().unwrap(), IMG));

    // The receipt: outcomes, copy id, links and snapshots as text.
    let receipt = scenario(v, "receipt");
    let body = &scenarios[1]["result"]["structuredContent"];
    assert_eq!(receipt["steps"], 3);
    assert!(
        receipt["summary"]
            .as_str()
            .unwrap()
            .contains("applied 3, failed 0, in doubt 0, not run 0"),
        "{}",
        receipt["summary"]
    );
    let text = receipt["steps_text"].as_str().unwrap();
    for s in body["steps"].as_array().unwrap() {
        for link in s["links"].as_array().into_iter().flatten() {
            assert!(text.contains(link.as_str().unwrap()), "link {link} shown");
        }
        for snap in s["snapshots"].as_array().into_iter().flatten() {
            assert!(
                text.contains(snap.as_str().unwrap()),
                "snapshot {snap} shown"
            );
        }
        if let Some(copy) = s["copy_id"].as_str() {
            assert!(text.contains(copy), "copy id {copy} shown");
        }
    }

    // The refusal: its code and the isError warning.
    let refusal = scenario(v, "refusal");
    let code = scenarios[0]["result"]["structuredContent"]["code"]
        .as_str()
        .unwrap();
    let summary = refusal["summary"].as_str().unwrap();
    assert!(summary.contains(code), "{summary}");
    assert!(
        summary.contains("nothing in this answer was applied"),
        "{summary}"
    );
    assert_eq!(refusal["steps"], 0);
}

/// Keyboard: arrows move and wrap, Home/End jump; focus follows, one
/// panel is visible at a time. Search filters the steps.
fn the_tabs_follow_the_keyboard_and_search_filters(v: &Value) {
    let tabs: Vec<(String, String, String)> = v["tabs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["selected"].as_str().unwrap().to_owned(),
                t["focused"].as_str().unwrap().to_owned(),
                t["visible"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let expect = [
        ("tab-input", "panel-input"),
        ("tab-json", "panel-json"),
        ("tab-steps", "panel-steps"),
        ("tab-json", "panel-json"),
        ("tab-steps", "panel-steps"),
        ("tab-json", "panel-json"),
    ];
    assert_eq!(tabs.len(), expect.len(), "{tabs:?}");
    for ((selected, focused, visible), (tab, panel)) in tabs.iter().zip(expect) {
        assert_eq!(selected, tab, "{tabs:?}");
        assert_eq!(focused, tab, "{tabs:?}");
        assert_eq!(visible, panel, "{tabs:?}");
    }

    // Search filters the steps.
    assert_eq!(v["search"]["delete_page"], 1);
    assert_eq!(v["search"]["nothing"], 0);
    assert_eq!(v["search"]["no_match_shown"], true);
    assert_eq!(v["search"]["cleared"], 4);
}

/// The screenshot, for people: the host page at `url`, its final state on
/// screen, in `target/artifacts/plan-review.png`.
async fn screenshot(dir: &Path, url: &str) {
    let out = artifacts_dir();
    std::fs::create_dir_all(&out).unwrap();
    let png = out.join("plan-review.png");
    let _ = std::fs::remove_file(&png);
    tokio::task::spawn_blocking({
        let profile = dir.join("profile-shot");
        let png = png.clone();
        let url = format!("{url}#screenshot");
        move || {
            run_chromium(
                &profile,
                &[
                    format!("--screenshot={}", png.display()),
                    "--window-size=1200,1150".to_owned(),
                ],
                &url,
            )
        }
    })
    .await
    .unwrap();
    let bytes = std::fs::read(&png).expect("screenshot written");
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    assert!(bytes.len() > 20_000, "suspiciously small screenshot");
}

/// What an agent or an upstream wrote reaches the view screened: a plugin
/// slug that erases its own line (`\r\e[2K`) in a predicted effect, and
/// an option value with a right-to-left override and a zero-width space
/// (in the predicted effect the site's preview writes, in the arguments
/// and in the exact input) show as visible escapes, each such line marked
/// `contains hidden characters`.
#[tokio::test(flavor = "multi_thread")]
async fn hidden_characters_show_as_escapes_and_are_marked_in_the_view() {
    let dir = tempfile::tempdir().unwrap();
    let (store, token) = store_with_key(dir.path(), Scope::Write).await;
    let (site, _) = in_process("site", demo(dir.path().join("site.json")));
    let gw = start(demo_site_config(), store, vec![("site", site)]).await;
    let client = client_of(gw.clone(), Some(token), Seen::default()).await;
    call(&client, "plangate_begin_session", json!({"mode": "plan"})).await;
    let plugin = json!({"slug": "seo\r\u{1b}[2Kok", "active": true});
    call_ok(&client, "set_plugin_active", plugin).await;
    let option = json!({"name": "tagline", "value": "Fresh \u{202e}gnp.exe bread\u{200b}"});
    let planned = result_json(&call_ok(&client, "update_option", option.clone()).await);
    let plan = result_json(&call(&client, "plangate_get_plan", json!({})).await);
    gw.shutdown().await;
    let scenarios = vec![
        json!({"name": "planned_step", "tool": "update_option", "input": option, "result": planned}),
        json!({"name": "get_plan", "tool": "plangate_get_plan", "input": {}, "result": plan}),
    ];
    let host = dir.path().join("host.html");
    std::fs::write(&host, host_page(&scenarios)).unwrap();
    let url = format!("file://{}", host.display());
    let dom = tokio::task::spawn_blocking({
        let profile = dir.path().join("profile-dom");
        move || run_chromium(&profile, &["--dump-dom".to_owned()], &url)
    })
    .await
    .unwrap();
    let v = verdict_of(&dom);
    assert!(
        v["errors"].as_array().unwrap().is_empty(),
        "{}",
        v["errors"]
    );
    for s in v["scenarios"].as_array().unwrap() {
        let name = s["name"].as_str().unwrap();
        let text = s["body_text"].as_str().unwrap();
        for raw in ['\u{1b}', '\r', '\u{202e}', '\u{200b}'] {
            assert!(
                !text.contains(raw),
                "{name}: {raw:?} reached the view: {text:?}"
            );
        }
        let marked = s["marked"].as_array().unwrap();
        for m in marked {
            assert_eq!(m["mark"], "contains hidden characters", "{name}");
            let line = m["line"].as_str().unwrap();
            assert!(line.contains("\\u{") || line.contains("\\e"), "{name}: {m}");
        }
        let lines = |within: &str| -> Vec<&str> {
            marked
                .iter()
                .filter(|m| m["in"] == within)
                .map(|m| m["line"].as_str().unwrap())
                .collect()
        };
        // The exact input, line by line: the value's line is marked.
        assert_eq!(
            lines("input").len(),
            usize::from(name == "planned_step"),
            "{name}: {s}"
        );
        let steps = lines("steps");
        assert!(
            steps
                .iter()
                .any(|l| l.contains("\"Fresh \\u{202e}gnp.exe bread\\u{200b}\"")),
            "{name}: {steps:?}"
        );
        if name == "get_plan" {
            assert!(
                steps
                    .iter()
                    .any(|l| l.starts_with("Set plugin seo\\r\\e[2Kok active: true.")),
                "{name}: {steps:?}"
            );
        }
    }
}

/// The test host: frames the view like an MCP Apps host and records what
/// happens into `#verdict`.
const HOST_PAGE: &str = r#"<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>running</title>
<style>
body { margin: 0; font: 13px sans-serif; background: #e9ecef; }
#bar { padding: 6px 10px; color: #333; }
#view { display: block; width: 100%; height: 1110px; border: 0; border-top: 1px solid #adb5bd; background: #fff; }
</style>
</head>
<body>
<div id="bar">MCP Apps test host · plangate plan review · <span id="status">running</span></div>
<pre id="verdict" hidden></pre>
<script>
"use strict";
const VIEW = /*VIEW*/;
const SCENARIOS = /*SCENARIOS*/;
const out = { messages: [], initialize: null, initialized_after_answer: null, pwned: [], scenarios: [], tabs: [], search: {}, attacker: {}, csp: {}, early_rendered: null, errors: [] };
let answered = false;
let started = false;
const frame = document.createElement("iframe");
frame.id = "view";
frame.setAttribute("sandbox", "allow-scripts allow-same-origin");
frame.setAttribute("title", "plangate plan review");
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const post = (m) => frame.contentWindow.postMessage(m, "*");
const doc = () => frame.contentDocument;

window.addEventListener("error", (e) => out.errors.push("host: " + e.message));
window.addEventListener("message", (e) => {
  const m = e.data;
  if (m && typeof m === "object" && "pwned" in m) { out.pwned.push(String(m.pwned)); return; }
  if (e.source !== frame.contentWindow) { return; }
  out.messages.push(m && typeof m.method === "string" ? m.method : "response:" + (m && m.id));
  if (m.method === "ui/initialize") {
    out.initialize = m;
    // Sent before the handshake completes: a view must not render it.
    post({ jsonrpc: "2.0", method: "ui/notifications/tool-result", params: { content: [{ type: "text", text: "EARLY-MARKER" }], structuredContent: { message: "EARLY-MARKER" } } });
    setTimeout(() => {
      answered = true;
      post({ jsonrpc: "2.0", id: m.id, result: { protocolVersion: "2026-01-26", hostInfo: { name: "plangate test host", version: "1.0" }, hostCapabilities: {}, hostContext: { theme: "light", displayMode: "inline", toolInfo: { tool: { name: "plangate_get_plan" } } } } });
    }, 30);
  } else if (m.method === "ui/notifications/initialized" && !started) {
    started = true;
    out.initialized_after_answer = answered;
    run().catch((err) => { out.errors.push(String((err && err.stack) || err)); finish(); });
  }
});

function observe(name) {
  const d = doc();
  const q = (s) => d.querySelectorAll(s).length;
  return {
    name,
    elements: { img: q("img"), a: q("a"), script: q("script"), iframe: q("iframe"), object: q("object,embed"), svg: q("svg"), b: q("b"), form: q("form") },
    steps: q("details.step"),
    groups: q("details.group"),
    summary: d.getElementById("summary").textContent,
    steps_text: d.getElementById("steps").textContent,
    input: d.getElementById("input").textContent,
    json: d.getElementById("json").textContent,
    connection: d.getElementById("connection").textContent,
    tool_name: d.getElementById("tool-name").textContent,
    body_text: d.body.textContent,
    marked: Array.from(d.querySelectorAll("mark.hidden-chars")).map((m) => ({ line: m.previousSibling ? m.previousSibling.textContent : "", mark: m.textContent, in: m.closest("[id]").id })),
  };
}

function tabState() {
  const d = doc();
  const selected = d.querySelector('[role="tab"][aria-selected="true"]');
  const visible = Array.from(d.querySelectorAll('[role="tabpanel"]')).filter((p) => !p.hidden).map((p) => p.id).join(",");
  return { selected: selected ? selected.id : "", focused: d.activeElement ? d.activeElement.id : "", visible };
}

function press(key) {
  const d = doc();
  const KeyboardEvent = frame.contentWindow.KeyboardEvent;
  d.activeElement.dispatchEvent(new KeyboardEvent("keydown", { key, bubbles: true, cancelable: true }));
  out.tabs.push(tabState());
}

function visibleSteps() {
  return Array.from(doc().querySelectorAll("details.step")).filter((s) => !s.hidden).length;
}

function search(text) {
  const box = doc().getElementById("search");
  box.value = text;
  box.dispatchEvent(new frame.contentWindow.Event("input", { bubbles: true }));
  return visibleSteps();
}

async function run() {
  await sleep(50);
  for (const s of SCENARIOS) {
    post({ jsonrpc: "2.0", method: "ui/notifications/tool-input", params: { arguments: s.input } });
    post({ jsonrpc: "2.0", method: "ui/notifications/tool-result", params: s.result });
    await sleep(60);
    const o = observe(s.name);
    out.scenarios.push(o);
    if (o.body_text.includes("EARLY-MARKER")) { out.early_rendered = true; }
  }
  if (out.early_rendered === null) { out.early_rendered = false; }
  const d = doc();

  // Keyboard-accessible tabs.
  d.getElementById("tab-steps").focus();
  press("ArrowRight");
  press("ArrowRight");
  press("ArrowRight");
  press("End");
  press("Home");
  press("ArrowLeft");

  // Search.
  out.search.delete_page = search("delete_page");
  out.search.nothing = search("no such step anywhere");
  out.search.no_match_shown = !d.getElementById("no-match").hidden;
  out.search.cleared = search("");

  // A sibling frame forges host messages.
  out.attacker.ignored_before = Number(d.documentElement.getAttribute("data-ignored-messages") || 0);
  // Another window of the page (a sibling frame) forges host messages; its
  // own script posts them, so `event.source` is that frame.
  const evil = document.createElement("iframe");
  evil.hidden = true;
  document.body.appendChild(evil);
  evil.contentWindow.eval(
    "var v = parent.frames[0];" +
    "v.postMessage({jsonrpc:'2.0',method:'ui/notifications/tool-result',params:{content:[{type:'text',text:'ATTACKER-MARKER'}],structuredContent:{message:'ATTACKER-MARKER',steps:[{position:99,tool:'ATTACKER-MARKER'}]}}},'*');" +
    "v.postMessage({jsonrpc:'2.0',method:'ui/notifications/tool-input',params:{arguments:{x:'ATTACKER-MARKER'}}},'*');");
  await sleep(300);
  out.attacker.ignored_after = Number(d.documentElement.getAttribute("data-ignored-messages") || 0);
  out.attacker.rendered = d.body.textContent.includes("ATTACKER-MARKER");
  evil.remove();

  // Probe the CSP from inside the view.
  const violations = [];
  d.addEventListener("securitypolicyviolation", (e) => violations.push(e.effectiveDirective || e.violatedDirective));
  const injected = d.createElement("script");
  injected.textContent = "top.postMessage({pwned:'injected-script'},'*')";
  d.body.appendChild(injected);
  const box = d.createElement("div");
  box.innerHTML = "<img src='probe.png' onerror=\"top.postMessage({pwned:'injected-onerror'},'*')\">";
  d.body.appendChild(box);
  try { await frame.contentWindow.fetch("data:text/plain,hello"); out.csp.fetch = "allowed"; }
  catch (e) { out.csp.fetch = "blocked"; }
  try { frame.contentWindow.eval("1 + 1"); out.csp.eval = "allowed"; }
  catch (e) { out.csp.eval = "blocked: " + e.name; }
  await sleep(300);
  injected.remove();
  box.remove();
  out.csp.violations = violations;
  out.csp.own_style_applied = frame.contentWindow.getComputedStyle(d.getElementById("tab-steps")).cursor === "pointer";

  // Leave the plan on screen.
  d.getElementById("tab-steps").click();
  d.activeElement.blur();
  finish();
}

function finish() {
  // Markup characters as JSON escapes, so the DOM dump holds the JSON verbatim.
  document.getElementById("verdict").textContent = JSON.stringify(out).replace(/[<>&\u00a0]/g, (c) => "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0"));
  document.getElementById("status").textContent = out.errors.length ? "errors" : "done";
  document.title = "done";
}

frame.srcdoc = VIEW;
document.body.appendChild(frame);
</script>
</body>
</html>
"#;
