//! Review in the agent's own client over MCP 2025-11-25 elicitation: the
//! person's yes applies exactly the plan they saw; anything else writes
//! nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use plangate_core::{Channel, Scope};
use serde_json::json;

/// The agent's client, answering questions as its [`Seen`] says.
type Client = rmcp::service::RunningService<rmcp::RoleClient, Seen>;

/// A gateway on the recording upstream, with an ask mode and questions
/// that lapse after `review_timeout`, and a key of `scope`.
async fn rig(scope: Scope, review_timeout: Duration) -> Rig<Recorder> {
    rig_on(scope, "rec", Recorder::default(), |c| {
        reviewing(c, review_timeout);
    })
    .await
}

/// A client of the rig answering as `seen` says, in a session begun in
/// `mode`.
async fn client_in(r: &Rig<Recorder>, seen: Seen, mode: &str) -> Client {
    let client = r.client(seen).await;
    call(&client, "plangate_begin_session", json!({"mode": mode})).await;
    client
}

/// [`client_in`] plan mode, with two `record` steps planned.
async fn plan_two(r: &Rig<Recorder>, seen: Seen) -> Client {
    let client = client_in(r, seen, "plan").await;
    call(&client, "record", json!({"note": "one"})).await;
    call(&client, "record", json!({"note": "two"})).await;
    client
}

#[tokio::test]
async fn approve_applies_the_reviewed_plan_and_leaves_plan_mode() {
    let r = rig(Scope::Write, Duration::from_secs(30)).await;
    let seen = Seen::answering("accept", json!({"decision": "approve"}));
    let client = plan_two(&r, seen.clone()).await;
    assert!(
        all_names(&client)
            .await
            .contains(&"plangate_exit_plan_mode".to_owned())
    );
    let receipt = call(
        &client,
        "plangate_exit_plan_mode",
        json!({"plan": "Record two notes."}),
    )
    .await;
    let b = body(&receipt);
    assert_eq!(b["applied"], 2, "{b}");
    assert_eq!(b["mode"], "default");
    assert_eq!(r.calls_of("record").len(), 2);
    // The question showed who asks, the agent's words, every step and the digest.
    let question = seen.questions.lock().unwrap()[0].clone();
    for needle in [
        "\"agent\"",
        "Record two notes.",
        "1. [planned]",
        "2. [planned]",
        "sha256:",
    ] {
        assert!(
            question.contains(needle),
            "{needle} missing from:\n{question}"
        );
    }
    let plan = body(&call(&client, "plangate_get_plan", json!({})).await);
    assert_eq!(plan["mode"], "default");
    assert!(
        !all_names(&client)
            .await
            .contains(&"plangate_exit_plan_mode".to_owned())
    );
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn keep_planning_declining_or_dismissing_writes_nothing_and_keeps_the_mode() {
    for (action, content, feedback) in [
        (
            "accept",
            json!({"decision": "keep_planning", "feedback": "Not the second note — ask Sam first."}),
            Some("Not the second note — ask Sam first."),
        ),
        ("decline", json!({}), None),
        ("cancel", json!({}), None),
    ] {
        let r = rig(Scope::Write, Duration::from_secs(30)).await;
        let client = plan_two(&r, Seen::answering(action, content)).await;
        let answer = call(&client, "plangate_exit_plan_mode", json!({"plan": "x"})).await;
        assert_eq!(answer.is_error, Some(true), "{action}");
        let b = body(&answer);
        assert_eq!(b["code"], "review_declined", "{action}");
        if let Some(f) = feedback {
            assert_eq!(b["feedback"], f, "verbatim");
            assert!(
                serde_json::to_string(&answer.content)
                    .unwrap()
                    .contains("ask Sam first")
            );
        }
        assert!(r.calls_of("record").is_empty(), "{action}: nothing written");
        let plan = body(&call(&client, "plangate_get_plan", json!({})).await);
        assert_eq!(
            (plan["mode"].as_str(), plan["pending_steps"].as_i64()),
            (Some("plan"), Some(2))
        );
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn a_client_that_cannot_ask_gets_the_corrective_error_and_nothing_runs() {
    let r = rig(Scope::Write, Duration::from_secs(30)).await;
    let client = plan_two(&r, Seen::default()).await;
    let answer = call(&client, "plangate_exit_plan_mode", json!({"plan": "x"})).await;
    assert_eq!(body(&answer)["code"], "elicitation_unsupported");
    assert!(message(&answer).contains("only after they say yes"));
    assert!(r.calls_of("record").is_empty());
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_step_added_while_the_question_is_open_makes_the_yes_write_nothing() {
    let r = rig(Scope::Write, Duration::from_secs(30)).await;
    let gate = Arc::new(tokio::sync::Notify::new());
    let seen = Seen {
        gate: Some(gate.clone()),
        ..Seen::answering("accept", json!({"decision": "approve"}))
    };
    let client = plan_two(&r, seen.clone()).await;
    let asking = tokio::spawn({
        let peer = client.peer().clone();
        async move {
            let p = params("plangate_exit_plan_mode", json!({"plan": "x"}));
            peer.call_tool(p).await.unwrap()
        }
    });
    eventually("the question", || {
        !seen.questions.lock().unwrap().is_empty()
    })
    .await;
    // Meanwhile another connection of the key plans one more step.
    let other = r.client(Seen::default()).await;
    call(&other, "record", json!({"note": "sneaked in"})).await;
    gate.notify_one();
    let answer = asking.await.unwrap();
    assert_eq!(body(&answer)["code"], "plan_changed", "{answer:?}");
    assert!(
        r.calls_of("record").is_empty(),
        "the yes was for another plan"
    );
    client.cancel().await.unwrap();
    other.cancel().await.unwrap();
}

#[tokio::test]
async fn a_question_that_times_out_writes_nothing() {
    let r = rig(Scope::Write, Duration::from_secs(1)).await;
    let seen = Seen {
        delay: Some(Duration::from_secs(3)),
        ..Seen::answering("accept", json!({"decision": "approve"}))
    };
    let client = plan_two(&r, seen).await;
    let answer = call(&client, "plangate_exit_plan_mode", json!({"plan": "x"})).await;
    assert_eq!(body(&answer)["code"], "review_declined");
    assert!(message(&answer).contains("No answer"));
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(r.calls_of("record").is_empty());
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn an_ask_mode_asks_before_a_call_above_its_access() {
    let r = rig(Scope::Write, Duration::from_secs(30)).await;
    let yes = Seen::answering("accept", json!({"decision": "approve"}));
    let client = client_in(&r, yes.clone(), "careful").await;
    let ran = call(
        &client,
        "record",
        json!({"note": "asked", "api_key": "sk-ask"}),
    )
    .await;
    assert_eq!(body(&ran)["ok"], true, "{ran:?}");
    assert_eq!(r.calls_of("record").len(), 1);
    let question = yes.questions.lock().unwrap()[0].clone();
    assert!(
        question.contains("record") && !question.contains("sk-ask"),
        "{question}"
    );
    client.cancel().await.unwrap();

    let no = Seen::answering("decline", json!({}));
    let client = r.client(no).await;
    let refused = call(&client, "record", json!({"note": "declined"})).await;
    assert_eq!(body(&refused)["code"], "review_declined");
    assert_eq!(r.calls_of("record").len(), 1, "no yes, no call");
    client.cancel().await.unwrap();

    let mute = r.client(Seen::default()).await;
    let refused = call(&mute, "record", json!({"note": "mute"})).await;
    assert_eq!(body(&refused)["code"], "elicitation_unsupported");
    assert_eq!(r.calls_of("record").len(), 1);
    mute.cancel().await.unwrap();
}

/// An `ask` nobody answers is neither lost nor the agent's to approve:
/// the write waits in the plan for a person's yes, the agent's own
/// `apply_plan` does not run it, and the person's approval does.
#[tokio::test]
async fn an_unanswered_ask_waits_in_the_plan_for_a_persons_yes() {
    let r = rig(Scope::Write, Duration::from_secs(1)).await;
    let late = Seen {
        delay: Some(Duration::from_secs(3)),
        ..Seen::answering("accept", json!({"decision": "approve"}))
    };
    let client = client_in(&r, late.clone(), "careful").await;
    let planned = call(&client, "record", json!({"note": "unanswered"})).await;
    assert_eq!(planned.is_error, Some(false), "{planned:?}");
    assert_eq!(body(&planned)["planned"], true, "{planned:?}");
    assert!(
        message(&planned).contains("did not answer (no answer within 1 s)"),
        "{planned:?}"
    );
    // A write, not a destructive call: it is not called one.
    assert_eq!(body(&planned)["approval_required"], false, "{planned:?}");
    assert!(!message(&planned).contains("destructive"), "{planned:?}");
    assert_eq!(
        late.questions.lock().unwrap().len(),
        1,
        "the person was asked"
    );
    // The yes that comes after the question lapsed runs nothing.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(r.calls_of("record").is_empty());

    let plan = body(&call(&client, "plangate_get_plan", json!({})).await);
    let step = &plan["steps"][0];
    assert!(
        step["approval_note"]
            .as_str()
            .is_some_and(|n| n.contains("did not answer") && n.contains("a person")),
        "{plan}"
    );
    let digest = plan["plan_digest"].as_str().unwrap().to_owned();
    let own = call(
        &client,
        "plangate_apply_plan",
        json!({"plan_digest": digest}),
    )
    .await;
    assert_eq!(body(&own)["code"], "forbidden", "{own:?}");
    assert!(
        r.calls_of("record").is_empty(),
        "the agent's apply is no yes"
    );

    record(&r.gw, &r.key_id, person_approves(&digest)).await;
    let applied = call(
        &client,
        "plangate_apply_plan",
        json!({"plan_digest": digest}),
    )
    .await;
    assert_eq!(body(&applied)["applied"], 1, "{applied:?}");
    assert_eq!(r.calls_of("record").len(), 1);
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_plan_key_in_mode_default_still_puts_its_plan_up_for_review() {
    let r = rig(Scope::Plan, Duration::from_secs(1)).await;
    let seen = Seen::answering("accept", json!({"decision": "approve"}));
    let client = client_in(&r, seen.clone(), "default").await;
    let planned = call(&client, "record", json!({"note": "one"})).await;
    assert_eq!(body(&planned)["planned"], true, "{planned:?}");
    // Every write of a plan key is planned: it is offered the review.
    assert!(
        all_names(&client)
            .await
            .contains(&"plangate_exit_plan_mode".to_owned())
    );
    let answer = call(&client, "plangate_exit_plan_mode", json!({"plan": "x"})).await;
    assert_eq!(answer.is_error, Some(false), "{answer:?}");
    assert_eq!(body(&answer)["review_requested"], true, "{answer:?}");
    // Nobody answered within review_timeout: the review goes on.
    assert!(body(&answer).get("outcome").is_none(), "{answer:?}");
    assert!(
        message(&answer).contains("the review goes on"),
        "{answer:?}"
    );
    assert!(seen.questions.lock().unwrap().is_empty());
    assert!(r.calls_of("record").is_empty());
    // The plan is the handle: get_plan has no outcome until the person
    // answers, then the one exit_plan_mode would have returned.
    let before = call(&client, "plangate_get_plan", json!({})).await;
    assert!(body(&before).get("outcome").is_none(), "{before:?}");
    let digest = body(&before)["plan_digest"].as_str().unwrap().to_owned();
    record(&r.gw, &r.key_id, person_approves(&digest)).await;
    let after = call(&client, "plangate_get_plan", json!({})).await;
    let outcome = &body(&after)["outcome"];
    assert_eq!(
        outcome["approved"].as_array().unwrap().len(),
        1,
        "{after:?}"
    );
    assert_eq!(outcome["waiting"], 0);
    assert_eq!(outcome["plan_digest"], json!(digest));
    assert!(
        message(&after).contains(
            "A person's yes covers 1 waiting step(s): apply them with plangate_apply_plan"
        ),
        "{after:?}"
    );
    client.cancel().await.unwrap();
}

/// A `plan`-scope key's `exit_plan_mode` waits for the person's answer,
/// given wherever they review (here, another process's record), and
/// returns it: what they approved and what they rejected, with why.
#[tokio::test]
async fn a_plan_keys_exit_plan_mode_waits_for_the_persons_answer_and_returns_it() {
    let r = rig(Scope::Plan, Duration::from_secs(30)).await;
    let client = plan_two(&r, Seen::default()).await;
    let plan = body(&call(&client, "plangate_get_plan", json!({})).await);
    let first = plan["steps"][0]["step_id"].as_str().unwrap().to_owned();
    let person = {
        let (gw, key_id) = (r.gw.clone(), r.key_id.clone());
        let first = first.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(800)).await;
            let key = gw.store().find_key(&key_id).await.unwrap().unwrap();
            let person = plangate_gateway::operator::acting(&key, "ops", Channel::Cli);
            plangate_gateway::operator::reject(gw.log(), &person, &first, "not this one")
                .await
                .unwrap();
            let digest = gw.log().state(&key_id).await.unwrap().plan_digest();
            record(&gw, &key_id, person_approves(&digest)).await;
        })
    };
    let started = std::time::Instant::now();
    let answer = call(&client, "plangate_exit_plan_mode", json!({"plan": "x"})).await;
    person.await.unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(800),
        "it did not wait"
    );
    let outcome = &body(&answer)["outcome"];
    assert_eq!(
        outcome["rejected"][0]["step_id"],
        first.as_str(),
        "{answer:?}"
    );
    assert_eq!(
        outcome["rejected"][0]["reason"], "not this one",
        "{answer:?}"
    );
    // Whichever the person did first, the answer carries what stands:
    // one step rejected, and (once the yes came) the other approved.
    let approved = outcome["approved"].as_array().unwrap().len();
    assert!(approved <= 1, "{answer:?}");
    let said = message(&answer);
    assert!(said.contains("not this one"), "{said}");
    assert!(
        r.calls_of("record").is_empty(),
        "nothing ran before apply_plan"
    );
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_plan_keys_own_yes_does_not_apply_but_an_operators_approval_of_the_current_digest_does() {
    let r = rig(Scope::Plan, Duration::from_secs(1)).await;
    let seen = Seen::answering("accept", json!({"decision": "approve"}));
    let client = plan_two(&r, seen.clone()).await;
    // Its own client is not asked a question whose yes would not count:
    // the request for review is recorded, and the agent told to wait.
    let answer = call(&client, "plangate_exit_plan_mode", json!({"plan": "x"})).await;
    assert_eq!(answer.is_error, Some(false), "{answer:?}");
    assert_eq!(body(&answer)["review_requested"], true, "{answer:?}");
    assert!(
        seen.questions.lock().unwrap().is_empty(),
        "the client was asked"
    );
    assert!(r.calls_of("record").is_empty());
    let plan = body(&call(&client, "plangate_get_plan", json!({})).await);
    assert_eq!(
        plan["approved"], false,
        "its own client's yes does not count"
    );
    let digest = plan["plan_digest"].as_str().unwrap().to_owned();

    let approve = person_approves;
    // An approval of an older digest does not count.
    record(&r.gw, &r.key_id, approve("sha256:0000")).await;
    let refused = call(&client, "plangate_apply_plan", json!({})).await;
    assert_eq!(body(&refused)["code"], "forbidden");
    // The operator's approval of the current digest does.
    record(&r.gw, &r.key_id, approve(&digest)).await;
    assert_eq!(
        body(&call(&client, "plangate_get_plan", json!({})).await)["approved"],
        true
    );
    let receipt = body(
        &call(
            &client,
            "plangate_apply_plan",
            json!({"plan_digest": digest}),
        )
        .await,
    );
    assert_eq!(receipt["applied"], 2, "{receipt}");
    assert_eq!(r.calls_of("record").len(), 2);
    let _ = &r.store;
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn the_question_shows_hidden_characters_as_escapes_and_marks_their_lines() {
    let r = rig(Scope::Write, Duration::from_secs(30)).await;
    let seen = Seen::answering("accept", json!({"decision": "keep_planning"}));
    let client = client_in(&r, seen.clone(), "plan").await;
    call(&client, "record", json!({"note": "one"})).await;
    // The agent's words: a line that erases itself, one reversed by
    // U+202E, and a zero-width space.
    let plan = "Record one note.\nadmins: [root, mallory]\r\u{1b}[2K admins: [root]\nrun \u{202e}txt.exe\u{200b}";
    let answer = call(&client, "plangate_exit_plan_mode", json!({"plan": plan})).await;
    assert_eq!(body(&answer)["code"], "review_declined", "{answer:?}");
    let question = seen.questions.lock().unwrap()[0].clone();
    for raw in ['\u{1b}', '\r', '\u{202e}', '\u{200b}'] {
        assert!(!question.contains(raw), "{raw:?} in:\n{question}");
    }
    let lines: Vec<&str> = question.lines().collect();
    assert!(lines.contains(&"  Record one note."), "{question}");
    assert!(
        lines.contains(
            &"  admins: [root, mallory]\\r\\e[2K admins: [root]  [contains hidden characters]"
        ),
        "{question}"
    );
    assert!(
        lines.contains(&"  run \\u{202e}txt.exe\\u{200b}  [contains hidden characters]"),
        "{question}"
    );
    assert_eq!(
        question.matches("contains hidden characters").count(),
        2,
        "only the lines with hidden characters are marked:\n{question}"
    );
    client.cancel().await.unwrap();

    // An ask mode's question about one call: its arguments the same.
    let yes = Seen::answering("accept", json!({"decision": "approve"}));
    let client = client_in(&r, yes.clone(), "careful").await;
    call(
        &client,
        "record",
        json!({"note": "ok\u{1b}]52;c;eA==\u{7}\u{202e}"}),
    )
    .await;
    let question = yes.questions.lock().unwrap()[0].clone();
    let args = question
        .lines()
        .find(|l| l.starts_with("Arguments: "))
        .unwrap();
    assert!(
        args.contains("\\u001b]52;c;eA==\\u0007\\u{202e}"),
        "{question}"
    );
    assert!(args.ends_with("  [contains hidden characters]"), "{args}");
    client.cancel().await.unwrap();
}
