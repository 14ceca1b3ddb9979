//! The operator's commands end to end: `plangate demo`, `audit export` and
//! `plans list|show|discard|retry|apply`, each as a real `plangate` process
//! against a data dir that a real agent (an rmcp client of `plangate serve
//! --stdio`) planned into, with the demo site as the upstream. The site's
//! own state file is the witness of what ran, and how often.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

#[allow(dead_code)]
#[path = "../../gateway/tests/common/console_http.rs"]
mod console_http;

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};

/// The operator's name for every command run here (`$USER`).
const OPERATOR: &str = "ops-alice";

/// Runs `plangate --data-dir DATA ARGS…` as the operator.
fn op(scratch: &Scratch, args: &[&str]) -> Output {
    scratch
        .command(args)
        .env("USER", OPERATOR)
        .output()
        .unwrap()
}

/// Runs an operator command that must succeed and returns its stdout.
fn op_ok(scratch: &Scratch, args: &[&str]) -> String {
    succeeded(args, &op(scratch, args))
}

/// Runs an operator command that must succeed and print JSON.
fn op_json(scratch: &Scratch, args: &[&str]) -> Value {
    parsed(args, &op_ok(scratch, args))
}

/// Starts `plangate ARGS…` with stdout and stderr piped, to watch how it ends.
fn spawn_piped(scratch: &Scratch, args: &[&str]) -> std::process::Child {
    scratch
        .command(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// Runs an operator command that must fail with `code`; returns stderr.
fn op_fails(scratch: &Scratch, args: &[&str], code: i32) -> String {
    let out = op(scratch, args);
    assert_eq!(
        out.status.code(),
        Some(code),
        "plangate {args:?}:\n{}\n{}",
        stdout(&out),
        stderr(&out)
    );
    stderr(&out)
}

/// Parses JSON Lines, each line an object.
fn lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
            assert!(v.is_object(), "{l}");
            v
        })
        .collect()
}

fn of_type<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == kind).collect()
}

/// Begins plan mode and plans the worked example's three steps.
async fn plan_three(client: &Client) -> Vec<Value> {
    begin(client, "plan").await;
    vec![
        ok(client, "update_page", our_story()).await,
        ok(
            client,
            "create_menu_item",
            menu_item("Services", "/services"),
        )
        .await,
        ok(client, "delete_page", json!({"id": 3})).await,
    ]
}

fn id(step: &Value) -> String {
    step["step_id"].as_str().unwrap().to_owned()
}

fn now_ms() -> i64 {
    plangate_store::now_ms()
}

// === plangate demo ===

#[test]
fn plangate_demo_tells_the_worked_example_offline_and_exits_zero() {
    let scratch = Scratch::new();
    let started = Instant::now();
    let out = op(&scratch, &["demo"]);
    let took = started.elapsed();
    let text = stdout(&out);
    assert!(out.status.success(), "{text}\n{}", stderr(&out));
    assert!(took < Duration::from_secs(5), "the demo took {took:?}");
    assert!(
        !scratch.data_dir().exists(),
        "the demo never touches the user's data dir"
    );

    let section = |from: &str, to: &str| -> String {
        let start = text
            .find(from)
            .unwrap_or_else(|| panic!("no {from:?}:\n{text}"));
        let rest = &text[start..];
        rest[..rest.find(to).unwrap_or(rest.len())].to_owned()
    };
    let has_line =
        |block: &str, parts: &[&str]| block.lines().any(|l| parts.iter().all(|p| l.contains(p)));
    // The site before: the Team draft, a three-item menu.
    let before = section("The site before", "begin");
    assert!(has_line(&before, &["page 3", "Team", "draft"]), "{before}");
    assert!(has_line(
        &before,
        &["Main menu", "Home", "About", "Contact"]
    ));
    assert!(!before.contains("Services"));
    // The three planned steps, each with its answer.
    let planned = section("three writes", "The site is unchanged");
    for (n, what) in [
        (1, "Update page 2 (About)"),
        (2, "Add item \"Services\""),
        (3, "Move page 3 (Team, draft) to the trash"),
    ] {
        assert!(
            has_line(&planned, &[&format!("planned as step {n} (step_")]),
            "{planned}"
        );
        assert!(has_line(&planned, &["predicted effect", what]), "{planned}");
    }
    assert!(has_line(&planned, &["lands on", "a copy"]));
    assert!(has_line(&planned, &["approval: REQUIRED", "Destructive"]));
    assert!(text.contains("none written"), "the site is shown unchanged");
    assert!(has_line(&text, &["Plan digest", "sha256:"]));
    // The agent's own apply is refused (a plan key); the person's yes is
    // labelled simulated.
    assert!(
        has_line(
            &text,
            &["Refused (forbidden)", "nothing it can call approves"]
        ),
        "{text}"
    );
    assert!(has_line(&text, &["says yes", "SIMULATED"]), "{text}");
    assert!(text.contains("SIMULATED: in real use"));
    // The receipt: copy and preview link, menu item, snapshot, approval.
    let receipt = section("Receipt:", "The site after");
    assert!(has_line(
        &receipt,
        &["applied 3, failed 0, in doubt 0, not run 0"]
    ));
    assert!(
        has_line(
            &receipt,
            &["step 1: applied", "landed on copy 5", "?preview=5"]
        ),
        "{receipt}"
    );
    assert!(has_line(&receipt, &["step 2: applied", "menu item id 4"]));
    assert!(has_line(
        &receipt,
        &["step 3: applied", "snapshot id snap_"]
    ));
    assert!(has_line(&receipt, &["on the person's yes"]), "{receipt}");
    // The site after: the title on the copy, Services live, page 3 in trash.
    let after = section("The site after", "ends the session");
    assert!(
        has_line(&after, &["page 2", "About", "published"]),
        "{after}"
    );
    assert!(has_line(
        &after,
        &["page 5", "Our story", "draft", "copy of page 2"]
    ));
    assert!(has_line(&after, &["page 3", "Team", "trash"]));
    assert!(has_line(&after, &["Main menu", "Services (/services)"]));
    assert!(has_line(&text, &["Mode is back to default"]));
}

#[test]
fn plangate_demo_json_prints_every_answer_as_a_json_line() {
    let scratch = Scratch::new();
    let out = op(&scratch, &["demo", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let answers = lines(&stdout(&out));
    let phase = |p: &str| -> Vec<&Value> { answers.iter().filter(|a| a["phase"] == p).collect() };
    let planned = phase("plan");
    assert_eq!(planned.len(), 3);
    for (i, step) in planned.iter().enumerate() {
        assert_eq!(step["answer"]["code"], "plan_step");
        assert_eq!(step["answer"]["position"], i + 1);
        assert_eq!(step["answer"]["mutation_performed"], false);
    }
    assert_eq!(planned[0]["answer"]["lands_on"]["where"], "copy");
    assert_eq!(planned[2]["answer"]["approval_required"], true);
    let yes = phase("person_says_yes");
    assert_eq!(yes.len(), 1);
    assert_eq!(yes[0]["simulated"], true);
    let receipt = &phase("apply")[0]["answer"];
    assert_eq!(receipt["applied"], 3, "{receipt}");
    assert_eq!(receipt["plan_digest"], yes[0]["plan_digest"]);
    assert_eq!(receipt["steps"][0]["copy_id"], "5");
    assert!(receipt["steps"][1]["result"]["menu_item_id"].is_u64());
    assert!(receipt["steps"][2]["snapshots"][0].is_string());
    // The person's yes covered every step, the destructive one too: the
    // apply was not its yes. The agent's own apply was refused before it.
    assert_eq!(
        receipt["approved_by_apply"],
        serde_json::json!([]),
        "{receipt}"
    );
    assert_eq!(receipt["steps"][2]["approved_by_apply"], false, "{receipt}");
    let refused = phase("agent_apply_refused");
    assert_eq!(refused[0]["code"], "forbidden", "{:?}", refused);
    let after = phase("site_after");
    let pages = after[0]["answer"]["pages"].as_array().unwrap();
    assert!(
        pages
            .iter()
            .any(|p| p["title"] == "Our story" && p["copy_of"] == 2)
    );
    assert!(pages.iter().any(|p| p["id"] == 3 && p["status"] == "trash"));
    assert!(
        after[1]["answer"]["menus"][0]["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["label"] == "Services")
    );
    assert_eq!(phase("end_session").len(), 1);
    let calls: Vec<&Value> = answers.iter().filter(|a| a["tool"].is_string()).collect();
    assert_eq!(
        calls.len(),
        answers.len() - 1,
        "every line but the yes is a call"
    );
    // Only the agent's own apply, before the person's yes, was refused.
    assert!(
        calls
            .iter()
            .all(|a| (a["is_error"] == true) == (a["phase"] == "agent_apply_refused"))
    );
}

// === audit export ===

/// `audit export --out FILE`: every event, in global order and each key's
/// own, with every field, the secret (`canary`) sealed; the key `agent_id`
/// planned and applied. Returns the events.
fn everything_to_a_file(scratch: &Scratch, canary: &str, agent_id: &Value) -> Vec<Value> {
    let file = scratch.path().join("audit.jsonl");
    let said = op_ok(
        scratch,
        &["audit", "export", "--out", file.to_str().unwrap()],
    );
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(!text.contains(canary), "the export leaks the secret");
    let all = lines(&text);
    assert!(
        said.contains(&format!("wrote {} event(s)", all.len())),
        "{said}"
    );
    for kind in [
        "mode_set",
        "session_begun",
        "step_planned",
        "apply_started",
        "step_started",
        "step_applied",
        "apply_finished",
    ] {
        assert!(!of_type(&all, kind).is_empty(), "no {kind} in\n{text}");
    }
    for e in &all {
        for field in [
            "seq", "key_seq", "at_ms", "key_id", "actor", "channel", "type",
        ] {
            assert!(!e[field].is_null(), "{field} missing in {e}");
        }
    }
    let seqs: Vec<i64> = all.iter().map(|e| e["seq"].as_i64().unwrap()).collect();
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "global order: {seqs:?}"
    );
    let agent_seqs: Vec<i64> = all
        .iter()
        .filter(|e| e["key_id"] == *agent_id)
        .map(|e| e["key_seq"].as_i64().unwrap())
        .collect();
    assert_eq!(
        agent_seqs,
        (1..=agent_seqs.len() as i64).collect::<Vec<_>>()
    );
    let planned = of_type(&all, "step_planned");
    let sealed = planned
        .iter()
        .find(|e| e["step"]["tool"] == "update_option")
        .unwrap();
    assert_eq!(
        sealed["step"]["arguments"]["value"]["password"],
        "[redacted]"
    );
    assert!(sealed["step"]["sealed_secrets"].is_string());
    all
}

/// `audit export --since` a time, in each accepted form: after `mid` only
/// the key `other_id` acted; `all` is every event.
fn since_a_time_in_each_accepted_form(
    scratch: &Scratch,
    all: &[Value],
    mid: i64,
    other_id: &Value,
) {
    let later = lines(&op_ok(
        scratch,
        &["audit", "export", "--since", &mid.to_string()],
    ));
    assert!(later.iter().all(|e| e["at_ms"].as_i64().unwrap() >= mid));
    assert!(later.iter().all(|e| e["key_id"] == *other_id), "{later:?}");
    assert_eq!(of_type(&later, "step_planned").len(), 1);
    let rfc3339 = plangate_store::format_time_ms(mid);
    let since_second = lines(&op_ok(scratch, &["audit", "export", "--since", &rfc3339]));
    assert!(since_second.len() >= later.len() && since_second.len() <= all.len());
    assert!(
        since_second
            .iter()
            .all(|e| e["at_ms"].as_i64().unwrap() >= mid - 1000)
    );
    assert_eq!(
        lines(&op_ok(
            scratch,
            &["audit", "export", "--since", "2000-01-01"]
        ))
        .len(),
        all.len()
    );
    assert!(op_ok(scratch, &["audit", "export", "--since", "2999-12-31"]).is_empty());
}

#[tokio::test]
async fn audit_export_writes_json_lines_filters_by_key_and_time_and_never_leaks_a_secret() {
    let (scratch, config, [agent_token, other_token]) =
        demo_keys("", [("agent", "write"), ("other", "write")]);
    let canary = format!("canary-{}", now_ms());

    let agent = plan_client(&scratch, &config, &agent_token).await;
    let secret = tagline(json!({"user": "ops", "password": canary}));
    let secret_step = ok(&agent, "update_option", secret).await;
    assert_eq!(secret_step["arguments"]["value"]["password"], "[redacted]");
    ok(&agent, "update_page", our_story()).await;
    let digest = get_plan(&agent).await["plan_digest"].clone();
    let receipt = apply_plan(&agent, json!({"plan_digest": digest})).await;
    assert_eq!(receipt["applied"], 2, "{receipt}");
    // The site got the real value: the secret was sealed, not lost.
    assert_eq!(site_tagline(&scratch)["password"], canary);
    agent.cancel().await.unwrap();

    tokio::time::sleep(Duration::from_millis(30)).await;
    let mid = now_ms();
    tokio::time::sleep(Duration::from_millis(30)).await;
    let other = plan_client(&scratch, &config, &other_token).await;
    ok(&other, "create_menu_item", menu_item("Later", "/later")).await;
    other.cancel().await.unwrap();

    let keys = op_json(&scratch, &["keys", "list", "--json"]);
    let key_id = |name: &str| {
        keys.as_array()
            .unwrap()
            .iter()
            .find(|k| k["name"] == name)
            .unwrap()["id"]
            .clone()
    };
    let all = everything_to_a_file(&scratch, &canary, &key_id("agent"));

    // One key, to stdout.
    let mine = lines(&op_ok(&scratch, &["audit", "export", "--key", "agent"]));
    assert!(!mine.is_empty());
    assert!(mine.iter().all(|e| e["key_id"] == key_id("agent")));
    assert_eq!(of_type(&mine, "apply_finished").len(), 1);
    assert_eq!(
        mine.len(),
        all.iter()
            .filter(|e| e["key_id"] == key_id("agent"))
            .count()
    );

    since_a_time_in_each_accepted_form(&scratch, &all, mid, &key_id("other"));

    // Bad usage names the value at fault and exits 2.
    let err = op_fails(&scratch, &["audit", "export", "--since", "yesterday"], 2);
    assert!(err.contains("yesterday"), "{err}");
    let err = op_fails(&scratch, &["audit", "export", "--key", "nobody"], 2);
    assert!(err.contains("\"nobody\""), "{err}");
}

// === plans list / show / discard ===

#[tokio::test]
async fn plans_list_show_and_discard_act_as_the_operator_and_the_agent_sees_it() {
    let (scratch, _, client) = demo_agent("agent", "write").await;
    assert!(op_ok(&scratch, &["plans", "list"]).contains("no plans"));
    let steps = plan_three(&client).await;
    let site_before = site(&scratch);
    let digest = get_plan(&client).await["plan_digest"].clone();

    let table = op_ok(&scratch, &["plans", "list"]);
    assert!(
        table.contains("IN DOUBT") && table.contains("DIGEST"),
        "{table}"
    );
    let row = table.lines().find(|l| l.starts_with("agent")).unwrap();
    assert!(
        row.contains("plan") && row.contains(digest.as_str().unwrap()),
        "{row}"
    );
    let listed = op_json(&scratch, &["plans", "list", "--json"]);
    let entry = &listed[0];
    assert_eq!(
        (
            entry["key"].as_str(),
            entry["mode"].as_str(),
            entry["waiting"].as_i64(),
            entry["failed"].as_i64(),
            entry["in_doubt"].as_i64()
        ),
        (Some("agent"), Some("plan"), Some(3), Some(0), Some(0))
    );
    assert_eq!(entry["plan_digest"], digest);
    assert!(entry["expires_in"].as_i64().unwrap() > 3600);

    let shown = op_json(&scratch, &["plans", "show", "--key", "agent", "--json"]);
    assert_eq!(shown["plan_digest"], digest);
    assert_eq!(shown["pending_steps"], 3);
    let listed_steps = shown["steps"].as_array().unwrap();
    assert_eq!(
        listed_steps
            .iter()
            .map(|s| (
                s["position"].as_i64().unwrap(),
                s["status"].as_str().unwrap()
            ))
            .collect::<Vec<_>>(),
        [(1, "planned"), (2, "planned"), (3, "planned")]
    );
    assert_eq!(listed_steps[0]["lands_on"]["where"], "copy");
    assert_eq!(
        listed_steps[0]["predicted_effect"],
        steps[0]["predicted_effect"]
    );
    assert_eq!(listed_steps[2]["approval_required"], true);
    let text = op_ok(&scratch, &["plans", "show", "--key", "agent"]);
    assert!(text.contains(&id(&steps[1])), "{text}");
    assert!(text.contains("required (destructive)"), "{text}");
    assert!(text.contains("a copy of 2"), "{text}");

    // The operator discards step 2; the agent's own view agrees.
    let said = op_ok(
        &scratch,
        &["plans", "discard", "--key", "agent", &id(&steps[1])],
    );
    assert!(
        said.contains(&id(&steps[1])) && said.contains("2 waiting"),
        "{said}"
    );
    let plan = get_plan(&client).await;
    assert_eq!(each(&plan["steps"], "position"), [1, 3]);
    assert_ne!(plan["plan_digest"], digest);
    let discards = of_type(
        &lines(&op_ok(&scratch, &["audit", "export", "--key", "agent"])),
        "steps_discarded",
    )
    .into_iter()
    .cloned()
    .collect::<Vec<_>>();
    assert_eq!(discards.len(), 1);
    assert_eq!(
        discards[0]["actor"],
        json!({"kind": "operator", "name": OPERATOR})
    );
    assert_eq!(discards[0]["channel"], "cli");
    assert_eq!(discards[0]["step_ids"], json!([id(&steps[1])]));

    // Mistakes name the value and exit 2; nothing changes.
    let err = op_fails(
        &scratch,
        &["plans", "discard", "--key", "agent", "step_nope"],
        2,
    );
    assert!(err.contains("step_nope"), "{err}");
    let err = op_fails(
        &scratch,
        &["plans", "discard", "--key", "agent", &id(&steps[1])],
        2,
    );
    assert!(err.contains("discarded"), "{err}");
    let err = op_fails(&scratch, &["plans", "show", "--key", "nobody"], 2);
    assert!(err.contains("\"nobody\""), "{err}");

    // No step named: every waiting step goes.
    let all = op_json(&scratch, &["plans", "discard", "--key", "agent", "--json"]);
    assert_eq!(all["discarded"], json!([id(&steps[0]), id(&steps[2])]));
    assert_eq!(all["pending_steps"], 0);
    assert_eq!(get_plan(&client).await["steps"], json!([]));
    assert_eq!(
        site(&scratch),
        site_before,
        "discarding writes nothing upstream"
    );
    client.cancel().await.unwrap();
}

// === plans apply ===

#[tokio::test]
async fn plans_apply_is_the_operators_yes_for_a_plan_scope_keys_plan() {
    let (scratch, config, client) = demo_agent("planner", "plan").await;
    let step = ok(&client, "update_page", our_story()).await;
    assert_eq!(step["code"], "plan_step");
    // The key cannot approve its own plan.
    let r = call(&client, "plangate_apply_plan", json!({}))
        .await
        .unwrap();
    assert_eq!(r.is_error, Some(true));
    assert_eq!(r.structured_content.unwrap()["code"], "forbidden");

    // A malformed digest is bad usage; a stale one runs nothing.
    let err = op_fails(
        &scratch,
        &["plans", "apply", "--key", "planner", "--digest", "abc"],
        2,
    );
    assert!(err.contains("\"abc\""), "{err}");
    let stale = format!("sha256:{}", "0".repeat(64));
    let err = op_fails(
        &scratch,
        &["plans", "apply", "--key", "planner", "--digest", &stale],
        1,
    );
    assert!(err.contains("plan_changed"), "{err}");
    assert_eq!(site(&scratch)["calls"]["update_page"], Value::Null);

    let digest = op_json(&scratch, &["plans", "show", "--key", "planner", "--json"])["plan_digest"]
        .as_str()
        .unwrap()
        .to_owned();
    let receipt = op_json(
        &scratch,
        &[
            "plans", "apply", "--key", "planner", "--digest", &digest, "--config", &config,
            "--json",
        ],
    );
    assert_eq!(receipt["applied"], 1, "{receipt}");
    assert_eq!(receipt["steps"][0]["step_id"], step["step_id"]);
    let copy = receipt["steps"][0]["copy_id"].as_str().unwrap();
    let after = site(&scratch);
    assert_eq!(after["calls"]["update_page"], 1);
    assert_eq!(page(&after, copy.parse().unwrap())["title"], "Our story");
    let events = lines(&op_ok(&scratch, &["audit", "export", "--key", "planner"]));
    let yes = of_type(&events, "review_answered");
    assert_eq!(yes.len(), 1);
    assert_eq!(yes[0]["verdict"], "approve");
    assert_eq!(yes[0]["plan_digest"], digest);
    assert_eq!(
        yes[0]["actor"],
        json!({"kind": "operator", "name": OPERATOR})
    );
    // Nothing is left to apply.
    assert!(op_ok(&scratch, &["plans", "apply", "--key", "planner"]).contains("nothing to apply"));
    client.cancel().await.unwrap();
}

// === plans retry ===

/// Records that a process `owner` claimed `step_id` with a lease until
/// `lease_until_ms`, then (as far as the log knows) died: exactly what a
/// gateway killed mid-call leaves behind. Appended directly through the
/// gateway's own `KeyLog` on the same data dir.
async fn fake_dead_claim(scratch: &Scratch, key: &str, step_id: &str, lease_until_ms: i64) {
    let dir = plangate_store::DataDir::open(scratch.data_dir()).unwrap();
    let store = plangate_store::open_sqlite(&dir.sqlite_path())
        .await
        .unwrap();
    let api_key = store.find_key(key).await.unwrap().unwrap();
    let log_key = dir
        .key_material(&plangate_store::KeysFromEnv::default())
        .unwrap()
        .log_key();
    let log = plangate_gateway::key_log::KeyLog::new(store, log_key);
    let event = plangate_core::Event {
        at_ms: now_ms(),
        key_id: api_key.id.clone(),
        actor: plangate_core::Actor::Agent {
            key_id: api_key.id.clone(),
            key_name: api_key.name.clone(),
            scope: None,
        },
        channel: plangate_core::Channel::Stdio,
        kind: plangate_core::EventKind::StepStarted {
            step_id: step_id.to_owned(),
            apply_id: "apply_fake".to_owned(),
            owner: "fake-owner@crashed".to_owned(),
            lease_until_ms,
        },
    };
    let (state, ()) = log
        .transact(&api_key.id, |_| {
            Ok::<_, std::convert::Infallible>((vec![event.clone()], ()))
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        state.step(step_id).unwrap().status,
        plangate_core::StepStatus::Running
    );
}

/// The in-doubt step is made by a fake claim whose lease passes; `plans
/// list` (like every process sharing the store) then finds the dead claim
/// and marks it in doubt, and only `plans retry` runs it again.
#[tokio::test]
async fn plans_retry_refuses_a_step_not_in_doubt_and_runs_an_in_doubt_one_exactly_once() {
    let (scratch, config, client) = demo_agent("agent", "write").await;
    begin(&client, "plan").await;
    let step = id(&ok(&client, "update_page", our_story()).await);
    // The agent goes away: no gateway of its own sweeps the claim below.
    client.cancel().await.unwrap();

    // A waiting step is not in doubt: refused, nothing runs.
    let err = op_fails(
        &scratch,
        &[
            "plans", "retry", "--key", "agent", &step, "--config", &config,
        ],
        2,
    );
    assert!(
        err.contains("not in doubt") && err.contains("planned"),
        "{err}"
    );
    assert_eq!(site(&scratch)["calls"]["update_page"], Value::Null);
    let err = op_fails(
        &scratch,
        &["plans", "retry", "--key", "agent", "step_nope"],
        2,
    );
    assert!(err.contains("step_nope"), "{err}");

    // A claim from a process that then died; its lease runs out.
    let lease_until = now_ms() + 1_000;
    fake_dead_claim(&scratch, "agent", &step, lease_until).await;
    let shown = op_json(&scratch, &["plans", "show", "--key", "agent", "--json"]);
    if now_ms() < lease_until {
        assert_eq!(shown["steps"][0]["status"], "running", "{shown}");
    }
    while now_ms() <= lease_until + 50 {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let listed = op_json(&scratch, &["plans", "list", "--json"]);
    assert_eq!(
        (
            listed[0]["in_doubt"].as_i64(),
            listed[0]["waiting"].as_i64()
        ),
        (Some(1), Some(0)),
        "{listed}"
    );
    let shown = op_json(&scratch, &["plans", "show", "--key", "agent", "--json"]);
    assert_eq!(shown["steps"][0]["status"], "in_doubt");
    assert_eq!(shown["steps"][0]["error"]["code"], "in_doubt");
    assert_eq!(site(&scratch)["calls"]["update_page"], Value::Null);
    // Neither the agent's apply nor an operator's ordinary apply runs it.
    let err = op_fails(&scratch, &["plans", "apply", "--key", "agent", &step], 2);
    assert!(
        err.contains("in_doubt") && err.contains("plans retry"),
        "{err}"
    );
    assert!(op_ok(&scratch, &["plans", "apply", "--key", "agent"]).contains("nothing to apply"));
    assert_eq!(site(&scratch)["calls"]["update_page"], Value::Null);

    // The person's explicit retry runs exactly that step, now.
    let receipt = op_json(
        &scratch,
        &[
            "plans", "retry", "--key", "agent", &step, "--config", &config, "--json",
        ],
    );
    assert_eq!(receipt["applied"], 1, "{receipt}");
    assert_eq!(receipt["steps"][0]["step_id"], step.as_str());
    assert_eq!(receipt["steps"][0]["outcome"], "applied");
    let after = site(&scratch);
    assert_eq!(after["calls"]["update_page"], 1);
    let copy = receipt["steps"][0]["copy_id"].as_str().unwrap();
    assert_eq!(page(&after, copy.parse().unwrap())["title"], "Our story");

    // Retrying again is refused: it is applied, not in doubt.
    let err = op_fails(
        &scratch,
        &[
            "plans", "retry", "--key", "agent", &step, "--config", &config,
        ],
        2,
    );
    assert!(err.contains("applied, not in doubt"), "{err}");
    assert_eq!(site(&scratch)["calls"]["update_page"], 1);

    // The log tells the story: dead claim, in doubt, the operator's retry,
    // one real claim, one result.
    let events = lines(&op_ok(&scratch, &["audit", "export", "--key", "agent"]));
    let about = |kind: &str| -> Vec<Value> {
        of_type(&events, kind)
            .into_iter()
            .filter(|e| e["step_id"] == step.as_str())
            .cloned()
            .collect()
    };
    let doubt = about("step_in_doubt");
    assert_eq!(doubt.len(), 1);
    assert_eq!(doubt[0]["actor"], json!({"kind": "system"}));
    let retried = about("step_retried");
    assert_eq!(retried.len(), 1);
    assert_eq!(
        retried[0]["actor"],
        json!({"kind": "operator", "name": OPERATOR})
    );
    let mut applies: Vec<String> = about("step_started")
        .iter()
        .map(|e| e["apply_id"].as_str().unwrap().to_owned())
        .collect();
    applies.dedup();
    assert_eq!(
        applies.len(),
        2,
        "the dead claim and the retry: {applies:?}"
    );
    assert_eq!(about("step_applied").len(), 1);
}

#[tokio::test]
async fn plans_approve_counts_for_the_current_digest_only_and_only_from_outside_the_key() {
    let (scratch, config, [planner, writer, other_planner]) = demo_keys(
        "",
        [("planner", "plan"), ("writer", "write"), ("other", "plan")],
    );
    let client = config_client(&scratch, &config, &planner).await;
    ok(&client, "update_option", tagline("approved")).await;
    let digest = plan_digest(&client).await;

    // An approval of a digest the plan has moved on from is refused, and
    // nothing is recorded.
    let stale = format!("sha256:{}", "1".repeat(64));
    let out = scratch.run(&["plans", "approve", "--key", "planner", "--digest", &stale]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("[plan_changed]"), "{}", stderr(&out));
    assert_eq!(get_plan(&client).await["approved"], false);
    let r = call(&client, "plangate_apply_plan", json!({}))
        .await
        .unwrap();
    assert_eq!(r.structured_content.unwrap()["code"], "forbidden");

    // Another plan-scope key cannot approve.
    let out = Command::new(plangate())
        .arg("--data-dir")
        .arg(scratch.data_dir())
        .args(["plans", "approve", "--key", "planner", "--digest", &digest])
        .env("PLANGATE_KEY", &other_planner)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));

    // A write key's approval of the current digest counts.
    let out = Command::new(plangate())
        .arg("--data-dir")
        .arg(scratch.data_dir())
        .args([
            "plans", "approve", "--key", "planner", "--digest", &digest, "--json",
        ])
        .env("PLANGATE_KEY", &writer)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["approved_by"]["key_name"], "writer");
    assert_eq!(v["not_approved"], json!([]));
    assert_eq!(get_plan(&client).await["approved"], true);
    let receipt = apply_plan(&client, json!({"plan_digest": digest})).await;
    assert_eq!(receipt["applied"], 1, "{receipt}");
    assert_eq!(site_tagline(&scratch), "approved");
    client.cancel().await.unwrap();
}

#[cfg(unix)]
#[test]
fn a_signing_key_other_users_can_read_is_refused_and_nothing_is_served() {
    use std::os::unix::fs::PermissionsExt;
    let scratch = Scratch::new();
    let data = scratch.data_dir();
    std::fs::create_dir_all(&data).unwrap();
    // Planted (or exposed): whoever can read it can sign console cookies.
    let planted = data.join("signing.key");
    std::fs::write(&planted, format!("{}\n", "ab".repeat(32))).unwrap();
    std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut child = spawn_piped(&scratch, &["serve", "--http", "127.0.0.1:0"]);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            kill_tree(&mut child);
            panic!("plangate served with a key file other users can read");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("signing.key cannot be trusted"), "{err}");
    assert!(
        err.contains("mode 644") && err.contains("chmod 600"),
        "{err}"
    );
    assert!(!stdout(&out).contains("plangate serving"), "{out:?}");
    assert_eq!(
        std::fs::read_to_string(&planted).unwrap().trim(),
        "ab".repeat(32),
        "the file is left for the person to look at"
    );
}

#[test]
fn output_into_a_closed_pipe_ends_quietly_with_success_never_a_panic() {
    let scratch = Scratch::new();
    scratch.create_key("agent", "write");
    // Something in the log for the export to print.
    let set = scratch.run(&["mode", "set", "--key", "agent", "plan"]);
    assert!(set.status.success(), "{set:?}");
    for args in [
        vec!["keys", "list"],
        vec!["tools", "list"],
        vec!["catalog"],
        vec!["catalog", "--html"],
        vec!["config", "check", "--json"],
        vec!["audit", "export"],
    ] {
        let mut child = spawn_piped(&scratch, &args);
        // The reader goes away before a byte is written.
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
        assert!(err.is_empty(), "{args:?}: {err}");
    }
}

/// What discard answers for a step of each kind, on one channel: the code
/// (`ok` when it was discarded).
type Answers = Vec<(&'static str, String)>;

#[tokio::test]
async fn discard_answers_the_same_through_the_agents_tool_the_cli_and_the_console() {
    let scratch = Scratch::new();
    let token = scratch.create_key("agent", "write");
    let operator = {
        let out = scratch.run(&["operator", "token", "--name", "ana"]);
        assert!(out.status.success(), "{out:?}");
        stdout(&out)
            .lines()
            .find_map(|l| l.split_whitespace().find(|w| w.starts_with("pgo_")))
            .unwrap()
            .to_owned()
    };
    let config = demo_config(&scratch, "[gateway]\nplan_ttl = \"2s\"\n");
    let gw = serve_http(&scratch, &["--config", &config]);
    let client = http_client(&gw.url(), Some(&token)).await.unwrap();
    begin(&client, "plan").await;
    // Five steps: one to apply, four to expire.
    let mut ids = Vec::new();
    for label in ["Applied", "A", "B", "C", "D"] {
        let item = menu_item(label, &format!("/{label}"));
        ids.push(id(&ok(&client, "create_menu_item", item).await));
    }
    let receipt = apply_plan(&client, json!({"step_ids": [ids[0]]})).await;
    assert_eq!(receipt["applied"], 1, "{receipt}");
    tokio::time::sleep(Duration::from_millis(2200)).await;

    // The same three questions on each channel: an applied step, an
    // expired one, and one that does not exist.
    let asks = |expired: &str| {
        vec![
            ("applied", ids[0].clone()),
            ("expired", expired.to_owned()),
            ("unknown", "step_0000000000000000".to_owned()),
        ]
    };

    let mut tool: Answers = Vec::new();
    for (what, step) in asks(&ids[1]) {
        let answer = call_body(
            &client,
            "plangate_discard_plan",
            json!({"step_ids": [step]}),
        )
        .await;
        tool.push((what, answer["code"].as_str().unwrap_or("ok").to_owned()));
    }

    let mut cli: Answers = Vec::new();
    for (what, step) in asks(&ids[2]) {
        let out = op(&scratch, &["plans", "discard", "--key", "agent", &step]);
        let err = stderr(&out);
        let code = ["invalid_arguments", "plan_expired"]
            .into_iter()
            .find(|c| err.contains(&format!("[{c}]")))
            .unwrap_or(if out.status.success() { "ok" } else { "?" });
        cli.push((what, code.to_owned()));
    }

    let http = console_http::http_client();
    let base = gw.url().replace("/mcp", "");
    let (cookie, csrf) = console_http::login(&http, &base, &operator).await.unwrap();
    let keys = op_json(&scratch, &["keys", "list", "--json"]);
    let key_id = keys
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["name"] == "agent")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut console: Answers = Vec::new();
    for (what, step) in asks(&ids[3]) {
        let r = http
            .post(format!("{base}/console/api/discard"))
            .header("cookie", &cookie)
            .header("x-plangate-csrf", &csrf)
            .json(&json!({"key_id": key_id, "step_ids": [step]}))
            .send()
            .await
            .unwrap();
        let ok = r.status().is_success();
        let body: Value = r.json().await.unwrap_or_default();
        console.push((
            what,
            if ok {
                "ok".to_owned()
            } else {
                body["error"].as_str().unwrap_or("?").to_owned()
            },
        ));
    }

    let expected: Answers = vec![
        ("applied", "invalid_arguments".to_owned()),
        ("expired", "plan_expired".to_owned()),
        ("unknown", "invalid_arguments".to_owned()),
    ];
    assert_eq!(tool, expected, "the agent's tool");
    assert_eq!(cli, expected, "the CLI");
    assert_eq!(console, expected, "the console");
    client.cancel().await.unwrap();
}
