//! Plans a person shapes (per-step answers and amended steps), on the
//! official `server-filesystem`: a person approves some steps, rejects one
//! with a reason and amends one; the agent sees each act; its apply runs
//! exactly the approved steps and reports the rest `not_approved`; an
//! amendment ends the approval that covered the step; two people amending
//! the same step from the same revision — one wins, the other is told
//! `plan_changed`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::PathBuf;

use common::*;
use serde_json::{Value, json};

/// A filesystem root, a config of the real filesystem server, and a
/// `plan` key `agent` (its plans run only on a person's yes).
fn world() -> FsWorld {
    FsWorld::new(|scratch, root| filesystem_config(scratch, root, ""))
}

fn op_ok(scratch: &Scratch, args: &[&str]) -> String {
    succeeded(args, &scratch.run(args))
}

fn op_json(scratch: &Scratch, args: &[&str]) -> Value {
    parsed(args, &op_ok(scratch, args))
}

fn id(step: &Value) -> String {
    step["step_id"].as_str().unwrap().to_owned()
}

/// The plan's steps by id.
fn step_of<'a>(plan: &'a Value, step_id: &str) -> &'a Value {
    plan["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["step_id"] == step_id)
        .unwrap_or_else(|| panic!("{step_id} not in {plan}"))
}

/// `root/N.txt`: the file of the first test's step `N`.
fn txt(w: &FsWorld, n: &str) -> PathBuf {
    w.root.join(format!("{n}.txt"))
}

#[tokio::test]
async fn a_person_approves_some_steps_rejects_one_amends_one_and_apply_runs_exactly_the_approved() {
    let w = world();
    let agent = plan_client(&w.scratch, &w.config, &w.token).await;
    let file = |n: &str| txt(&w, n);
    let mut steps = Vec::new();
    for n in ["a", "b", "c", "d", "e"] {
        let planned = ok(
            &agent,
            "write_file",
            json!({"path": file(n), "content": format!("{n}\n")}),
        )
        .await;
        assert_eq!(planned["code"], "plan_step", "{planned}");
        steps.push(id(&planned));
    }
    let [a, b, c, d, e] = <[String; 5]>::try_from(steps).unwrap();
    let digest = approve_all_but_d(&w, &agent, [&a, &b, &c, &d, &e]).await;

    reject_d_and_amend_e(&w, &d, &e, &digest);
    agent_sees_the_reason_and_the_amendment(&w, &agent, &d, &e).await;

    // The agent's apply runs a–c, reports e not approved, lists d's reason.
    let receipt = apply_plan(&agent, json!({})).await;
    assert_eq!(
        (
            receipt["applied"].as_u64(),
            receipt["not_approved"].as_u64()
        ),
        (Some(3), Some(1)),
        "{receipt}"
    );
    let outcomes: Vec<(String, String)> = receipt["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (id(s), s["outcome"].as_str().unwrap().to_owned()))
        .collect();
    assert_eq!(
        outcomes,
        [
            (a.clone(), "applied".to_owned()),
            (b.clone(), "applied".to_owned()),
            (c.clone(), "applied".to_owned()),
            (e.clone(), "not_approved".to_owned()),
        ]
    );
    assert_eq!(
        receipt["rejected"][0]["reason"],
        "not d: <b>keep</b> d as it is"
    );
    assert!(
        receipt["message"]
            .as_str()
            .unwrap()
            .contains("still waiting until a person reviews and approves it"),
        "{receipt}"
    );
    for n in ["a", "b", "c"] {
        assert_eq!(std::fs::read_to_string(file(n)).unwrap(), format!("{n}\n"));
    }
    assert!(!file("d").exists() && !file("e").exists());

    // A yes to the amended step: the next apply writes what the person wrote.
    let digest = shown_digest(&w.scratch, "agent");
    op_ok(
        &w.scratch,
        &[
            "plans", "approve", "--key", "agent", "--digest", &digest, &e,
        ],
    );
    let receipt = apply_plan(&agent, json!({})).await;
    assert_eq!(receipt["applied"], 1, "{receipt}");
    assert_eq!(std::fs::read_to_string(file("e")).unwrap(), "amended e\n");
    assert!(!file("d").exists(), "a rejected step never runs");

    every_act_is_logged_with_its_actor(&w.scratch);
    agent.cancel().await.unwrap();
}

/// Steps a–c approved together, e alone (d is left out); the plan and
/// `plans list` say how far the approvals go. Returns the digest the
/// person last saw.
async fn approve_all_but_d(w: &FsWorld, agent: &Client, steps: [&String; 5]) -> String {
    let [a, b, c, d, e] = steps;
    let plan = get_plan(agent).await;
    let digest = plan["plan_digest"].as_str().unwrap().to_owned();
    let yes = op_json(
        &w.scratch,
        &[
            "plans", "approve", "--key", "agent", "--digest", &digest, c, a, b, "--json",
        ],
    );
    assert_eq!(yes["approved_steps"], json!([a, b, c]), "in plan order");
    assert_eq!(yes["not_approved"], json!([d, e]));
    let digest = shown_digest(&w.scratch, "agent");
    let said = op_ok(
        &w.scratch,
        &["plans", "approve", "--key", "agent", "--digest", &digest, e],
    );
    assert!(said.contains("approved 1 step(s)"), "{said}");
    assert!(said.contains(&format!("4. {d}")), "{said}");
    let plan = get_plan(agent).await;
    assert_eq!(plan["approved"], false, "d is not approved");
    for (s, approved) in [(a, true), (b, true), (c, true), (d, false), (e, true)] {
        assert_eq!(
            step_of(&plan, s).get("approved").is_some(),
            approved,
            "{s}: {plan}"
        );
    }
    // `plans list` says how far the approvals go.
    let listed = op_json(&w.scratch, &["plans", "list", "--json"]);
    assert_eq!(listed[0]["waiting"], 5, "{listed}");
    assert_eq!(listed[0]["approved"], 4, "{listed}");
    let table = op_ok(&w.scratch, &["plans", "list"]);
    assert!(
        table.contains("APPROVED") && table.contains("4 of 5"),
        "{table}"
    );
    digest
}

/// d rejected with a reason; e amended, which ends its approval and
/// changes the plan's digest (`digest`, the one approved).
fn reject_d_and_amend_e(w: &FsWorld, d: &str, e: &str, digest: &str) {
    op_ok(
        &w.scratch,
        &[
            "plans",
            "reject",
            "--key",
            "agent",
            d,
            "--reason",
            "not d: <b>keep</b> d as it is",
        ],
    );
    let arguments = json!({"path": txt(w, "e"), "content": "amended e\n"}).to_string();
    let args = ["plans", "amend", e, "--json"];
    let amended = parsed(
        &args,
        &succeeded(&args, &amend_step(w, e, &arguments, &["--json"])),
    );
    assert_eq!(
        amended["arguments_changed"],
        json!([{"path": "/content", "before": "e\n", "after": "amended e\n"}])
    );
    assert_eq!(amended["step"]["position"], 5, "it keeps its place");
    assert_ne!(amended["plan_digest"], json!(digest));
}

/// The agent sees d's reason and e's amendment; so does `plans diff`.
async fn agent_sees_the_reason_and_the_amendment(w: &FsWorld, agent: &Client, d: &str, e: &str) {
    let plan = get_plan(agent).await;
    let rejected = step_of(&plan, d);
    assert_eq!(rejected["status"], "rejected");
    assert_eq!(
        rejected["rejection"]["reason"],
        "not d: <b>keep</b> d as it is"
    );
    let changed = step_of(&plan, e);
    assert_eq!(changed["arguments"]["content"], "amended e\n");
    assert_eq!(changed["amendment"]["previous_arguments"]["content"], "e\n");
    assert_eq!(changed["amendment"]["count"], 1);
    assert!(changed.get("approved").is_none(), "{changed}");
    // What moved since the last review, with the argument change.
    let amended_since = &plan["since_review"]["amended"][0];
    assert_eq!(amended_since["step_id"], json!(e), "{plan}");
    assert_eq!(
        amended_since["arguments"],
        json!([{"path": "/content", "before": "e\n", "after": "amended e\n"}])
    );
    let diff = op_ok(&w.scratch, &["plans", "diff", "--key", "agent"]);
    assert!(diff.contains(&format!("5. {e} amended by")), "{diff}");
    assert!(
        diff.contains("/content: \"e\\n\" → \"amended e\\n\""),
        "{diff}"
    );
}

/// The log names every act and its actor.
fn every_act_is_logged_with_its_actor(scratch: &Scratch) {
    let audit = op_ok(scratch, &["audit", "export"]);
    let events: Vec<Value> = audit
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let by_operator = |kind: &str| {
        events
            .iter()
            .filter(|e| e["type"] == kind && e["actor"]["kind"] == "operator")
            .count()
    };
    assert_eq!(by_operator("review_answered"), 3, "three approvals");
    assert_eq!(by_operator("step_rejected"), 1);
    assert_eq!(by_operator("step_amended"), 1);
}

/// `plans amend --config CONFIG --key agent STEP --arguments ARGUMENTS`,
/// then `extra`.
fn amend_step(w: &FsWorld, step: &str, arguments: &str, extra: &[&str]) -> std::process::Output {
    let mut argv = vec![
        "plans",
        "amend",
        "--config",
        &w.config,
        "--key",
        "agent",
        step,
        "--arguments",
        arguments,
    ];
    argv.extend_from_slice(extra);
    w.scratch.run(&argv)
}

#[tokio::test]
async fn an_amendment_is_checked_like_a_planned_write_and_two_amending_at_once_one_is_told() {
    let w = world();
    let agent = plan_client(&w.scratch, &w.config, &w.token).await;
    let path = w.root.join("x.txt");
    let planned = ok(
        &agent,
        "write_file",
        json!({"path": path, "content": "one\n"}),
    )
    .await;
    let step = id(&planned);
    let amend = |args: Value, extra: &[&str]| amend_step(&w, &step, &args.to_string(), extra);

    // Against the tool's schema: content is required.
    let out = amend(json!({"path": path}), &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("[invalid_arguments]"),
        "{}",
        stderr(&out)
    );
    assert!(stderr(&out).contains("input schema"), "{}", stderr(&out));
    // Not JSON; "[redacted]" where nothing is sealed; no change at all.
    let out = amend(json!("x"), &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let out = amend_step(&w, &step, "{", &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("not JSON"), "{}", stderr(&out));
    let out = amend(json!({"path": path, "content": "[redacted]"}), &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("/content"), "{}", stderr(&out));
    let out = amend(json!({"path": path, "content": "one\n"}), &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("nothing changed"), "{}", stderr(&out));
    // An unknown step.
    let out = amend_step(&w, "step_nope", "{}", &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_eq!(
        get_plan(&agent).await["revision"],
        1,
        "nothing was recorded"
    );

    // Two people looked at revision 1 and amend the step at once: one
    // wins, the other is told plan_changed and nothing of theirs is kept.
    let (first, second) = std::thread::scope(|s| {
        let one = s.spawn(|| {
            amend(
                json!({"path": path, "content": "first\n"}),
                &["--revision", "1"],
            )
        });
        let two = s.spawn(|| {
            amend(
                json!({"path": path, "content": "second\n"}),
                &["--revision", "1"],
            )
        });
        (one.join().unwrap(), two.join().unwrap())
    });
    let outs = [&first, &second];
    let won: Vec<_> = outs.iter().filter(|o| o.status.success()).collect();
    let lost: Vec<_> = outs.iter().filter(|o| !o.status.success()).collect();
    assert_eq!((won.len(), lost.len()), (1, 1), "{first:?}\n{second:?}");
    assert!(
        stderr(lost[0]).contains("[plan_changed]"),
        "{}",
        stderr(lost[0])
    );
    let plan = get_plan(&agent).await;
    let content = plan["steps"][0]["arguments"]["content"].as_str().unwrap();
    assert!(
        stdout(won[0]).contains(&format!("{content:?}").replace('\n', "\\n")),
        "the winner's content is the step's: {content:?}\n{}",
        stdout(won[0])
    );
    assert_eq!(plan["steps"][0]["amendment"]["count"], 1);
    assert_eq!(plan["revision"], 2);
    // The agent reads the amendment in words too, not only in the JSON.
    let answer = call(&agent, "plangate_get_plan", json!({})).await.unwrap();
    let text = answer.content[0].as_text().unwrap().text.clone();
    let change = format!("/content: \"one\\n\" → {:?}", content);
    assert!(
        text.contains("amended by ") && text.contains(&change),
        "{text}\n(expected {change})"
    );
    agent.cancel().await.unwrap();
}
