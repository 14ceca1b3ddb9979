//! A yes covers what the person saw. `plans approve` and `plans apply`
//! without `--digest` show the steps the yes covers, with the plan's digest
//! and revision, and ask on the terminal: a "n" records nothing, a "y"
//! records exactly the plan shown, and a plan that moved while the question
//! was open records nothing. Off a terminal (a script, a pipe, an agent's
//! shell) they refuse before anything is recorded and say how to pass the
//! digest.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use serde_json::{Value, json};

/// The key's events as `audit export` writes them.
fn events(scratch: &Scratch) -> Vec<Value> {
    let args = ["audit", "export", "--key", "agent"];
    succeeded(&args, &scratch.run(&args))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The approvals recorded for the key.
fn approvals(scratch: &Scratch) -> Vec<Value> {
    events(scratch)
        .into_iter()
        .filter(|e| e["type"] == "review_answered")
        .collect()
}

/// A `plan`-scope agent on the demo site with two waiting steps.
async fn two_waiting() -> (Scratch, String, Client, [String; 2]) {
    let (scratch, config, agent) = demo_agent("agent", "plan").await;
    let mut ids = Vec::new();
    for (tool, args) in [
        (
            "update_option",
            json!({"name": "tagline", "value": "Fresh bread"}),
        ),
        ("create_menu_item", menu_item("Hours", "/hours")),
    ] {
        let planned = ok(&agent, tool, args).await;
        ids.push(planned["step_id"].as_str().unwrap().to_owned());
    }
    let [a, b] = <[String; 2]>::try_from(ids).unwrap();
    (scratch, config, agent, [a, b])
}

/// The digest a confirmation showed (`key K: plan digest D, revision R`).
fn digest_shown(screen: &str) -> String {
    let at = screen.find("plan digest ").expect("a digest on screen") + "plan digest ".len();
    screen[at..]
        .split(|c: char| c == ',' || c.is_whitespace())
        .next()
        .unwrap()
        .to_owned()
}

#[tokio::test]
async fn off_a_terminal_approve_and_apply_without_a_digest_refuse_and_record_nothing() {
    let (scratch, config, agent, _) = two_waiting().await;
    let before = events(&scratch).len();
    for args in [
        vec!["plans", "approve", "--key", "agent"],
        vec!["plans", "apply", "--key", "agent", "--config", &config],
    ] {
        let out = scratch.run(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        let err = stderr(&out);
        assert!(err.contains("stdin is not one"), "{args:?}: {err}");
        assert!(err.contains("--digest"), "{args:?}: {err}");
        assert!(
            err.contains("`plangate plans show --key agent`"),
            "{args:?}: {err}"
        );
        assert!(stdout(&out).is_empty(), "{args:?}: {out:?}");
    }
    assert_eq!(events(&scratch).len(), before, "something was recorded");
    assert!(approvals(&scratch).is_empty());
    let plan = get_plan(&agent).await;
    assert_eq!(plan["pending_steps"], 2, "{plan}");
    assert_eq!(plan["approved"], false, "{plan}");
    assert_eq!(site_tagline(&scratch), "Just another demo site");
    agent.cancel().await.unwrap();
}

#[tokio::test]
async fn on_a_terminal_a_no_approves_nothing_and_a_yes_approves_exactly_the_plan_shown() {
    let (scratch, _config, agent, [a, b]) = two_waiting().await;
    let digest = shown_digest(&scratch, "agent");
    let args = ["plans", "approve", "--key", "agent"];

    // The question shows every step the yes covers, and the digest.
    let (status, screen) = in_terminal(&scratch, &args, "n\n");
    assert_eq!(status.code(), Some(1), "{screen}");
    for shown in [
        a.as_str(),
        b.as_str(),
        digest.as_str(),
        "Set option tagline",
        "Approve these 2 step(s) of agent's plan? [y/N]",
        "not approved: the answer was not yes; nothing was recorded",
    ] {
        assert!(screen.contains(shown), "{shown} not shown:\n{screen}");
    }
    assert!(approvals(&scratch).is_empty(), "a no recorded a yes");

    // Anything but y or yes is a no.
    let (status, _) = in_terminal(&scratch, &args, "ok\n");
    assert_eq!(status.code(), Some(1));
    assert!(approvals(&scratch).is_empty());

    let (status, screen) = in_terminal(&scratch, &args, "y\n");
    assert!(status.success(), "{screen}");
    assert!(screen.contains("approved 2 step(s)"), "{screen}");
    assert_eq!(digest_shown(&screen), digest);
    let yes = approvals(&scratch);
    assert_eq!(yes.len(), 1, "{yes:?}");
    assert_eq!(yes[0]["verdict"], "approve");
    assert_eq!(yes[0]["plan_digest"], json!(digest), "{yes:?}");
    assert_eq!(yes[0]["step_ids"], json!([a, b]), "{yes:?}");
    assert_eq!(get_plan(&agent).await["approved"], true);
    agent.cancel().await.unwrap();
}

#[tokio::test]
async fn a_step_planned_while_the_question_is_open_makes_the_yes_record_and_run_nothing() {
    let (scratch, config, agent, _) = two_waiting().await;
    for (args, added) in [
        (
            vec!["plans", "approve", "--key", "agent"],
            json!({"name": "site_title", "value": "Bakery"}),
        ),
        (
            vec!["plans", "apply", "--key", "agent", "--config", &config],
            json!({"name": "posts_per_page", "value": 5}),
        ),
    ] {
        let before = events(&scratch).len();
        let mut t = Terminal::start(&scratch, &args);
        let screen = t.wait_for("[y/N]");
        let shown = digest_shown(&screen);
        // The agent adds a step while the person reads.
        ok(&agent, "update_option", added).await;
        assert_ne!(shown_digest(&scratch, "agent"), shown);
        t.type_text("y\n");
        let (status, screen) = t.finish();
        assert_eq!(status.code(), Some(1), "{args:?}:\n{screen}");
        assert!(screen.contains("plan_changed"), "{args:?}:\n{screen}");
        let recorded: Vec<Value> = events(&scratch).into_iter().skip(before).collect();
        assert!(
            recorded
                .iter()
                .all(|e| e["type"] == "step_planned" || e["type"] == "call_recorded"),
            "{args:?}: the yes recorded {recorded:?}"
        );
    }
    assert!(approvals(&scratch).is_empty());
    assert_eq!(site_tagline(&scratch), "Just another demo site");

    // A yes to the plan as it is now applies exactly that.
    let (status, screen) = in_terminal(
        &scratch,
        &["plans", "apply", "--key", "agent", "--config", &config],
        "yes\n",
    );
    assert!(status.success(), "{screen}");
    assert!(
        screen.contains("Apply these 4 step(s) of agent's plan now? [y/N]"),
        "{screen}"
    );
    assert!(screen.contains("applied 4, failed 0"), "{screen}");
    assert_eq!(site_tagline(&scratch), "Fresh bread");
    agent.cancel().await.unwrap();
}
