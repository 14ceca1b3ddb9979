//! End to end, as people would use it: the official Python SDK is the
//! agent (a `plan`-scope key over Streamable HTTP), `plangate serve --http`
//! fronts the official `server-filesystem`, and a person works in the web
//! console in headless Chromium. The agent plans five file writes; the
//! person approves three, rejects one with a reason and amends one (then
//! approves it); the agent sees the reason and the amendment; its apply
//! writes exactly the approved files — the amended one with the person's
//! content — and the history names every act with its actor. Screenshots
//! of the diff and the history go to `target/artifacts/` (the README's come
//! from here).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

#[allow(dead_code)]
#[path = "../../gateway/tests/common/browser.rs"]
mod browser;

use std::io::{BufRead, BufReader, Lines, Write};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};

use browser::{Browser, artifacts_dir};
use common::*;
use serde_json::{Value, json};

const CANARY: &str = "shaping-e2e";

fn step_sel(id: &str) -> String {
    format!("section.key[data-key=\"agent\"] li.step[data-step-id=\"{id}\"]")
}

/// The agent: the official Python SDK's client (tests/interop/client.py)
/// planning five writes under `root` through `url` with `token`; its
/// first line lists the steps, then it waits for `go`.
struct Agent {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Agent {
    fn start(url: &str, token: &str, root: &Path) -> (Agent, Vec<String>) {
        let mut child = Command::new(&peers().python)
            .arg(repo_root().join("tests/interop/client.py"))
            .args(["shaping", "--transport", "http", "--url", url])
            .args(["--token", token, "--canary", CANARY])
            .arg("--root")
            .arg(root)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
        let steps: Vec<String> = serde_json::from_value(first["steps"].clone()).unwrap();
        assert_eq!(steps.len(), 5, "{first}");
        (Agent { child, lines }, steps)
    }

    /// Tells the agent to read its plan and apply it; what it saw (the
    /// plan and the receipt). It must succeed.
    fn go(mut self) -> Value {
        self.child.stdin.take().unwrap().write_all(b"go\n").unwrap();
        let last = self.lines.next().unwrap().unwrap();
        let status = self.child.wait().unwrap();
        let mut err = String::new();
        std::io::Read::read_to_string(&mut self.child.stderr.take().unwrap(), &mut err).unwrap();
        assert!(status.success(), "the agent failed: {err}");
        serde_json::from_str(&last).unwrap()
    }
}

#[test]
fn a_person_shapes_the_agents_plan_in_the_console_and_apply_runs_exactly_what_they_approved() {
    let scratch = Scratch::new();
    let root = scratch.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    let config = filesystem_config(&scratch, &root, "");
    let token = scratch.create_key("agent", "plan");
    let out = scratch.run(&["operator", "token", "--name", "ana"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let operator = stdout(&out).trim().to_owned();
    let gw = serve_http(&scratch, &["--config", config.to_str().unwrap()]);
    let console = gw.url().replace("/mcp", "/console");

    // The agent plans five writes and waits.
    let (agent, steps) = Agent::start(&gw.url(), &token, &root);

    // The person, in the console.
    let mut b = Browser::start();
    let page = b.open(&console);
    b.wait_for(&page, "the login form", "document.getElementById('token')");
    b.log_in(&page, &operator);
    let reason = "not step 4: that file stays as it is";
    shape_in_the_console(&mut b, &page, &steps, reason);

    // The agent reads its plan and applies it.
    let seen = agent.go();
    the_agent_saw_each_act(&seen, &steps, reason);
    // The world: exactly the approved writes, the amended one as amended.
    for i in 1..=3 {
        let text = std::fs::read_to_string(root.join(format!("step-{i}.txt"))).unwrap();
        assert_eq!(text, format!("step {i} {CANARY}\n"));
    }
    assert!(
        !root.join("step-4.txt").exists(),
        "a rejected step never runs"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("step-5.txt")).unwrap(),
        "step 5, as the person wrote it"
    );

    the_history_names_every_act(&mut b, &page);
    assert_eq!(b.eval(&page, "window.__pwned === undefined"), json!(true));
    drop(b);
    drop(gw);
}

/// The person approves steps 1–3, rejects step 4 with `reason`, amends
/// step 5 (the diff shows it; a screenshot), then approves it too.
fn shape_in_the_console(b: &mut Browser, page: &str, steps: &[String], reason: &str) {
    b.wait_for(
        page,
        "five steps",
        "document.querySelectorAll('section.key[data-key=\"agent\"] li.step').length === 5",
    );
    for id in &steps[..3] {
        b.click(page, &format!("{} input.pick", step_sel(id)));
    }
    b.click_then(
        page,
        "button.approve-picked",
        "three approved steps",
        "document.querySelectorAll('section.key[data-key=\"agent\"] .step-approved').length === 3",
    );
    console_reads_cleanly(b, page, &step_sel(&steps[3]));
    b.reject_step(page, &step_sel(&steps[3]), reason);
    b.click_then(
        page,
        &format!("{} button.amend-step", step_sel(&steps[4])),
        "the amend form",
        "document.querySelector('.amend-form [name=\"content\"]')",
    );
    b.type_into(
        page,
        ".amend-form [name=\"content\"]",
        "step 5, as the person wrote it",
    );
    b.click_then(
        page,
        "button.confirm-amend",
        "the amendment",
        &format!(
            "document.querySelector('{} .step-amended')",
            step_sel(&steps[4])
        ),
    );
    // What changed since the yes to steps 1–3.
    b.click_then(
        page,
        "section.key[data-key=\"agent\"] button.show-diff",
        "the diff",
        "document.querySelector('pre.diff') && document.querySelector('pre.diff').textContent.includes('amended by')",
    );
    let diff = b.eval(page, "document.querySelector('pre.diff').textContent");
    let diff = diff.as_str().unwrap();
    assert!(diff.contains("amended by ana"), "{diff}");
    assert!(
        diff.contains("+ /content: \"step 5, as the person wrote it\""),
        "{diff}"
    );
    b.screenshot_top(page, 700, &artifacts_dir().join("e2e-console-diff.png"));
    // The amended step needs a yes of its own.
    b.click(page, &format!("{} input.pick", step_sel(&steps[4])));
    b.click_then(
        page,
        "button.approve-picked",
        "four approved steps",
        "document.querySelectorAll('section.key[data-key=\"agent\"] .step-approved').length === 4",
    );
}

/// Each step has one approval state (a badge, no second "approval" line)
/// and no note meant for the agent; the long diff of `step` (step 4, 70
/// lines and more) shows its first 40 lines and a button for the rest.
fn console_reads_cleanly(b: &mut Browser, page: &str, step: &str) {
    let facts = b.eval(
        page,
        "Array.from(document.querySelectorAll('li.step dl.facts dt')).map(function (d) { return d.textContent; }).join('|')",
    );
    let facts = facts.as_str().unwrap();
    assert!(
        !facts.split('|').any(|f| f == "note" || f == "approval"),
        "{facts}"
    );
    let lines = |b: &mut Browser| {
        b.eval(
            page,
            &format!("document.querySelectorAll('{step} pre.preview span').length"),
        )
        .as_u64()
        .unwrap()
    };
    assert_eq!(lines(b), 40);
    b.click_then(
        page,
        &format!("{step} button.unfold"),
        "the whole diff",
        &format!("!document.querySelector('{step} button.unfold')"),
    );
    assert!(lines(b) > 70, "{}", lines(b));
}

/// The agent's plan shows the person's reason and amendment, each by
/// `ana`; its apply ran the four approved steps.
fn the_agent_saw_each_act(seen: &Value, steps: &[String], reason: &str) {
    let plan = &seen["plan"]["structuredContent"];
    let step = |id: &str| {
        plan["steps"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["step_id"] == id)
            .cloned()
            .unwrap()
    };
    assert_eq!(step(&steps[3])["rejection"]["reason"], reason);
    assert_eq!(step(&steps[3])["rejection"]["by"], "ana");
    let amended = step(&steps[4]);
    assert_eq!(
        amended["arguments"]["content"],
        "step 5, as the person wrote it"
    );
    assert_eq!(amended["amendment"]["by"], "ana");
    assert_eq!(amended["approved"], true);
    let receipt = &seen["receipt"]["structuredContent"];
    assert_eq!(
        (
            receipt["applied"].as_u64(),
            receipt["not_approved"].as_u64(),
            receipt["failed"].as_u64()
        ),
        (Some(4), Some(0), Some(0)),
        "{receipt}"
    );
    assert_eq!(receipt["rejected"][0]["reason"], reason);
}

/// The history names every act with its actor (a screenshot); the page
/// shows the plan after the apply: only the rejected step is left.
fn the_history_names_every_act(b: &mut Browser, page: &str) {
    b.wait_for(
        page,
        "the plan after the apply",
        "document.querySelectorAll('section.key[data-key=\"agent\"] li.step').length === 1",
    );
    b.click_then(
        page,
        "section.key[data-key=\"agent\"] button.show-diff",
        "the diff closed",
        "!document.querySelector('pre.diff')",
    );
    b.click_then(
        page,
        "section.key[data-key=\"agent\"] button.show-history",
        "the history with the apply",
        "document.querySelector('ol.history li.event[data-type=\"apply_finished\"]')",
    );
    let acts = b.history_acts(page);
    let count = |act: &str| acts.iter().filter(|a| a.as_str() == act).count();
    assert_eq!(
        count("step_planned | agent (agent) over http"),
        5,
        "{acts:?}"
    );
    assert_eq!(
        count("review_answered | ana (operator) over console"),
        2,
        "{acts:?}"
    );
    assert_eq!(
        count("step_rejected | ana (operator) over console"),
        1,
        "{acts:?}"
    );
    assert_eq!(
        count("step_amended | ana (operator) over console"),
        1,
        "{acts:?}"
    );
    assert_eq!(
        count("step_applied | agent (agent) over http"),
        4,
        "{acts:?}"
    );
    b.screenshot_top(page, 900, &artifacts_dir().join("e2e-console-history.png"));
}
