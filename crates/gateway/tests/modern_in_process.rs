//! Review over MCP 2026-07-28: the question travels as `input_required`
//! with a signed, expiring, single-use request state. Only the untampered
//! retry of the same request, for the same plan, writes anything.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use plangate_core::Scope;
use rmcp::RoleClient;
use rmcp::model::CallToolResult;
use rmcp::service::RunningService;
use serde_json::{Value, json};

/// The gateway tool whose call asks the person to review the plan.
const EXIT: &str = "plangate_exit_plan_mode";

/// A gateway on the recording upstream, with an ask mode and questions
/// that lapse after `review_timeout`, and a write key.
async fn rig(review_timeout: Duration) -> Rig<Recorder> {
    rig_on(Scope::Write, "rec", Recorder::default(), |c| {
        reviewing(c, review_timeout);
    })
    .await
}

/// Begins plan mode and plans two notes, every call answered at once.
async fn plan_two(client: &RunningService<RoleClient, Seen>) {
    call_ok(client, "plangate_begin_session", json!({"mode": "plan"})).await;
    call_ok(client, "record", json!({"note": "one"})).await;
    call_ok(client, "record", json!({"note": "two"})).await;
}

/// A client that can be asked (the test answers for it), with two notes
/// planned and leaving plan mode with `{"plan": "x"}` asked about: the
/// client, those arguments and the review's signed state.
async fn asked_to_exit(r: &Rig<Recorder>) -> (RunningService<RoleClient, Seen>, Value, String) {
    let client = r.modern_client(Seen::eliciting()).await;
    plan_two(&client).await;
    let args = json!({"plan": "x"});
    let state = ask_review(&client, EXIT, args.clone()).await;
    (client, args, state)
}

/// The first round of a review: its question names the plan's digest; the
/// signed state.
async fn ask_review(client: &RunningService<RoleClient, Seen>, tool: &str, args: Value) -> String {
    let (requests, state) = first_round(client, tool, args).await;
    let question = requests["review"]["params"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(question.contains("sha256:"), "{question}");
    state
}

fn approve() -> Value {
    json!({"action": "accept", "content": {"decision": "approve"}})
}

/// Retries leaving plan mode with `args`, `state` and the person's yes.
async fn approve_exit(
    client: &RunningService<RoleClient, Seen>,
    args: Value,
    state: &str,
) -> CallToolResult {
    retry(client, EXIT, args, state, "review", approve()).await
}

#[tokio::test]
async fn the_input_required_path_applies_on_a_yes_driven_by_the_sdk() {
    let r = rig(Duration::from_secs(30)).await;
    let seen = Seen::answering("accept", json!({"decision": "approve"}));
    let client = r.modern_client(seen.clone()).await;
    plan_two(&client).await;
    // rmcp's client drives the input_required round through the handler.
    let plan = json!({"plan": "two notes"});
    let receipt = client.call_tool(params(EXIT, plan)).await.unwrap();
    assert_eq!(body(&receipt)["applied"], 2, "{receipt:?}");
    assert_eq!(body(&receipt)["mode"], "default");
    assert_eq!(r.calls_of("record").len(), 2);
    assert!(seen.questions.lock().unwrap()[0].contains("two notes"));
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn keep_planning_over_input_required_writes_nothing() {
    let r = rig(Duration::from_secs(30)).await;
    let (client, plan, state) = asked_to_exit(&r).await;
    let answer = json!({"action": "accept", "content": {"decision": "keep_planning", "feedback": "Wait for Monday."}});
    let r2 = retry(&client, EXIT, plan, &state, "review", answer).await;
    assert_eq!(body(&r2)["code"], "review_declined");
    assert_eq!(body(&r2)["feedback"], "Wait for Monday.");
    assert!(r.calls_of("record").is_empty());
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn tampered_forged_replayed_expired_and_altered_retries_write_nothing() {
    let r = rig(Duration::from_secs(2)).await;
    let (client, args, state) = asked_to_exit(&r).await;

    // Tampered: one character of the state changed.
    let t = approve_exit(&client, args.clone(), &tampered(&state)).await;
    assert_eq!(body(&t)["code"], "review_declined", "{t:?}");

    // Forged: a state signed with another key.
    let f = approve_exit(&client, args.clone(), &forged()).await;
    assert_eq!(body(&f)["code"], "review_declined");

    // Altered: the retry's arguments are not the ones asked about.
    let a = approve_exit(&client, json!({"plan": "something else"}), &state).await;
    assert_eq!(body(&a)["code"], "review_declined");
    assert!(message(&a).contains("arguments differ"));
    assert!(r.calls_of("record").is_empty(), "nothing written so far");

    // The genuine retry works once…
    let ok = approve_exit(&client, args.clone(), &state).await;
    assert_eq!(body(&ok)["applied"], 2, "{ok:?}");
    // …and replaying it is refused.
    call_again_in_plan_mode(&client).await;
    let replay = approve_exit(&client, args.clone(), &state).await;
    assert_eq!(body(&replay)["code"], "review_declined");
    assert!(message(&replay).contains("already answered"));
    assert_eq!(r.calls_of("record").len(), 2, "the replay wrote nothing");

    // Expired: the question lapses after review_timeout (2 s here).
    let late = ask_review(&client, EXIT, args.clone()).await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let e = approve_exit(&client, args, &late).await;
    assert_eq!(body(&e)["code"], "review_declined");
    assert!(message(&e).contains("expired"));
    assert_eq!(r.calls_of("record").len(), 2);
    client.cancel().await.unwrap();
}

async fn call_again_in_plan_mode(client: &RunningService<RoleClient, Seen>) {
    call(client, "plangate_begin_session", json!({"mode": "plan"})).await;
    call(client, "record", json!({"note": "three"})).await;
}

#[tokio::test]
async fn a_plan_changed_since_the_question_makes_the_yes_write_nothing() {
    let r = rig(Duration::from_secs(30)).await;
    let (client, plan, state) = asked_to_exit(&r).await;
    call(&client, "record", json!({"note": "added meanwhile"})).await;
    let answer = approve_exit(&client, plan, &state).await;
    assert_eq!(body(&answer)["code"], "plan_changed", "{answer:?}");
    assert!(r.calls_of("record").is_empty());
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn an_ask_mode_asks_over_input_required_too() {
    let r = rig(Duration::from_secs(30)).await;
    let seen = Seen::answering("accept", json!({"decision": "approve"}));
    let client = r.modern_client(seen).await;
    call(
        &client,
        "plangate_begin_session",
        json!({"mode": "careful"}),
    )
    .await;
    let ran = client
        .call_tool(params("record", json!({"note": "asked first"})))
        .await
        .unwrap();
    assert_eq!(body(&ran)["ok"], true, "{ran:?}");
    assert_eq!(r.calls_of("record").len(), 1);
    // A declined question runs nothing.
    let note = json!({"note": "no"});
    let state = ask_review(&client, "record", note.clone()).await;
    let decline = json!({"action": "decline"});
    let no = retry(&client, "record", note, &state, "review", decline).await;
    assert_eq!(body(&no)["code"], "review_declined");
    assert_eq!(r.calls_of("record").len(), 1);
    client.cancel().await.unwrap();
}

/// Two replicas on one store, one request state retried on both at once:
/// exactly one yes is taken, and the plan runs once.
async fn one_state_two_replicas(store: Arc<dyn plangate_store::Store>) {
    let key = store.create_key("agent", Scope::Write).await.unwrap();
    let recorder = Recorder::default();
    let calls = recorder.calls.clone();
    let mut replicas = Vec::new();
    for _ in 0..2 {
        let (connector, _) = shared("rec", &recorder);
        replicas.push(start_on(store.clone(), vec![("rec", connector)]).await);
    }
    let a = modern_client_of(replicas[0].clone(), &key.token, Seen::eliciting()).await;
    let b = modern_client_of(replicas[1].clone(), &key.token, Seen::eliciting()).await;
    plan_two(&a).await;
    let state = ask_review(&a, EXIT, json!({"plan": "x"})).await;
    let args = json!({"plan": "x"});
    let (ra, rb) = tokio::join!(
        approve_exit(&a, args.clone(), &state),
        approve_exit(&b, args.clone(), &state)
    );
    let applied: Vec<i64> = [&ra, &rb]
        .iter()
        .filter_map(|r| body(r)["applied"].as_i64())
        .collect();
    // The other is refused: the state was taken (`review_declined`), or,
    // when it comes after the first finished, there is no plan review to
    // leave any more (`not_in_plan_mode`).
    let declined = [&ra, &rb]
        .iter()
        .filter(|r| {
            ["review_declined", "not_in_plan_mode"]
                .contains(&body(r)["code"].as_str().unwrap_or(""))
        })
        .count();
    assert_eq!((applied, declined), (vec![2], 1), "{ra:?} {rb:?}");
    assert_eq!(calls_of(&calls, "record").len(), 2, "the plan ran once");
    a.cancel().await.unwrap();
    b.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_request_state_is_single_use_across_replicas_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let store = plangate_store::open_sqlite(&dir.path().join("plangate.db"))
        .await
        .unwrap();
    one_state_two_replicas(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_request_state_is_single_use_across_replicas_on_postgres() {
    let Some(schema) = PgSchema::fresh("single_use") else {
        return;
    };
    one_state_two_replicas(schema.open().await).await;
}
