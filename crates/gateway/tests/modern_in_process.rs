//! Review over MCP 2026-07-28: the question travels as `input_required`
//! with a signed, expiring, single-use request state. Only the untampered
//! retry of the same request, for the same plan, writes anything.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use plangate_config::Namespace;
use plangate_core::{Effect, ModeSpec, OverAccess, Scope};
use plangate_gateway::Gateway;
use rmcp::RoleClient;
use rmcp::model::{CallToolRequestParams, CallToolResponse, CallToolResult};
use rmcp::service::RunningService;
use serde_json::{Value, json};

struct Rig {
    gw: Arc<Gateway>,
    token: String,
    calls: Calls,
    _dir: tempfile::TempDir,
}

async fn rig(review_timeout: Duration) -> Rig {
    let dir = tempfile::tempdir().unwrap();
    let store = plangate_store::open_sqlite(&dir.path().join("plangate.db"))
        .await
        .unwrap();
    let key = store.create_key("agent", Scope::Write).await.unwrap();
    let recorder = Recorder::default();
    let calls = recorder.calls.clone();
    let (connector, _) = in_process("rec", move || recorder.clone());
    let mut config = config(&["rec"], Namespace::Auto);
    config.gateway.review_timeout = review_timeout;
    config.modes = plangate_core::Modes::new(vec![ModeSpec {
        name: "careful".into(),
        instructions: None,
        access: Effect::Read,
        over_access: OverAccess::Ask,
    }]);
    let gw = Gateway::start(
        config,
        store,
        material(),
        BTreeMap::from([("rec".into(), connector)]),
    )
    .await;
    Rig {
        gw,
        token: key.token,
        calls,
        _dir: dir,
    }
}

/// A client that speaks 2026-07-28 (discovery, no initialize).
async fn modern_client(
    gw: Arc<Gateway>,
    token: &str,
    seen: Seen,
) -> RunningService<RoleClient, Seen> {
    modern_client_of(gw, token, seen).await
}

fn params(tool: &str, args: Value) -> CallToolRequestParams {
    let mut p = CallToolRequestParams::new(tool.to_owned());
    p.arguments = args.as_object().cloned();
    p
}

fn body(r: &CallToolResult) -> Value {
    r.structured_content.clone().unwrap_or(Value::Null)
}

async fn plan_two(client: &RunningService<RoleClient, Seen>) {
    for (tool, args) in [
        ("plangate_begin_session", json!({"mode": "plan"})),
        ("record", json!({"note": "one"})),
        ("record", json!({"note": "two"})),
    ] {
        let r = client.peer().call_tool(params(tool, args)).await.unwrap();
        assert_eq!(r.is_error, Some(false), "{r:?}");
    }
}

/// The first round: the question and the signed state, not yet answered.
async fn first_round(
    client: &RunningService<RoleClient, Seen>,
    tool: &str,
    args: Value,
) -> (BTreeMap<String, Value>, String) {
    match client
        .peer()
        .call_tool_once(params(tool, args))
        .await
        .unwrap()
    {
        CallToolResponse::InputRequired(ir) => {
            let requests = serde_json::to_value(ir.input_requests.unwrap()).unwrap();
            let question = requests["review"]["params"]["message"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            assert!(question.contains("sha256:"), "{question}");
            (BTreeMap::new(), ir.request_state.unwrap())
        }
        other => panic!("expected input_required, got {other:?}"),
    }
}

/// Retries with an answer and a state; returns the final result.
async fn retry(
    client: &RunningService<RoleClient, Seen>,
    tool: &str,
    args: Value,
    state: &str,
    answer: Value,
) -> CallToolResult {
    let mut p = params(tool, args);
    p.request_state = Some(state.to_owned());
    p.input_responses = Some(BTreeMap::from([("review".to_owned(), answer)]));
    match client.peer().call_tool_once(p).await.unwrap() {
        CallToolResponse::Complete(r) => r,
        other => panic!("expected a final result, got {other:?}"),
    }
}

fn approve() -> Value {
    json!({"action": "accept", "content": {"decision": "approve"}})
}

#[tokio::test]
async fn the_input_required_path_applies_on_a_yes_driven_by_the_sdk() {
    let r = rig(Duration::from_secs(30)).await;
    let seen = Seen::answering("accept", json!({"decision": "approve"}));
    let client = modern_client(r.gw.clone(), &r.token, seen.clone()).await;
    plan_two(&client).await;
    // rmcp's client drives the input_required round through the handler.
    let receipt = client
        .call_tool(params(
            "plangate_exit_plan_mode",
            json!({"plan": "two notes"}),
        ))
        .await
        .unwrap();
    assert_eq!(body(&receipt)["applied"], 2, "{receipt:?}");
    assert_eq!(body(&receipt)["mode"], "default");
    assert_eq!(calls_of(&r.calls, "record").len(), 2);
    assert!(seen.questions.lock().unwrap()[0].contains("two notes"));
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn keep_planning_over_input_required_writes_nothing() {
    let r = rig(Duration::from_secs(30)).await;
    let client = modern_client(
        r.gw.clone(),
        &r.token,
        Seen {
            elicit: true,
            ..Seen::default()
        },
    )
    .await;
    plan_two(&client).await;
    let (_, state) = first_round(&client, "plangate_exit_plan_mode", json!({"plan": "x"})).await;
    let answer = json!({"action": "accept", "content": {"decision": "keep_planning", "feedback": "Wait for Monday."}});
    let r2 = retry(
        &client,
        "plangate_exit_plan_mode",
        json!({"plan": "x"}),
        &state,
        answer,
    )
    .await;
    assert_eq!(body(&r2)["code"], "review_declined");
    assert_eq!(body(&r2)["feedback"], "Wait for Monday.");
    assert!(calls_of(&r.calls, "record").is_empty());
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn tampered_forged_replayed_expired_and_altered_retries_write_nothing() {
    let r = rig(Duration::from_secs(2)).await;
    let client = modern_client(
        r.gw.clone(),
        &r.token,
        Seen {
            elicit: true,
            ..Seen::default()
        },
    )
    .await;
    plan_two(&client).await;
    let args = json!({"plan": "x"});

    // Tampered: one character of the state changed.
    let (_, state) = first_round(&client, "plangate_exit_plan_mode", args.clone()).await;
    let mut bytes = state.clone().into_bytes();
    let i = bytes.len() / 2;
    bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(bytes).unwrap();
    let t = retry(
        &client,
        "plangate_exit_plan_mode",
        args.clone(),
        &tampered,
        approve(),
    )
    .await;
    assert_eq!(body(&t)["code"], "review_declined", "{t:?}");

    // Forged: a state signed with another key.
    let forged = rmcp::model::RequestStateCodec::try_new(vec![3u8; 32])
        .unwrap()
        .seal(b"{}");
    let f = retry(
        &client,
        "plangate_exit_plan_mode",
        args.clone(),
        &forged,
        approve(),
    )
    .await;
    assert_eq!(body(&f)["code"], "review_declined");

    // Altered: the retry's arguments are not the ones asked about.
    let a = retry(
        &client,
        "plangate_exit_plan_mode",
        json!({"plan": "something else"}),
        &state,
        approve(),
    )
    .await;
    assert_eq!(body(&a)["code"], "review_declined");
    assert!(
        body(&a)["message"]
            .as_str()
            .unwrap()
            .contains("arguments differ")
    );
    assert!(
        calls_of(&r.calls, "record").is_empty(),
        "nothing written so far"
    );

    // The genuine retry works once…
    let ok = retry(
        &client,
        "plangate_exit_plan_mode",
        args.clone(),
        &state,
        approve(),
    )
    .await;
    assert_eq!(body(&ok)["applied"], 2, "{ok:?}");
    // …and replaying it is refused.
    call_again_in_plan_mode(&client).await;
    let replay = retry(
        &client,
        "plangate_exit_plan_mode",
        args.clone(),
        &state,
        approve(),
    )
    .await;
    assert_eq!(body(&replay)["code"], "review_declined");
    assert!(
        body(&replay)["message"]
            .as_str()
            .unwrap()
            .contains("already answered")
    );
    assert_eq!(
        calls_of(&r.calls, "record").len(),
        2,
        "the replay wrote nothing"
    );

    // Expired: the question lapses after review_timeout (2 s here).
    let (_, late) = first_round(&client, "plangate_exit_plan_mode", args.clone()).await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let e = retry(&client, "plangate_exit_plan_mode", args, &late, approve()).await;
    assert_eq!(body(&e)["code"], "review_declined");
    assert!(body(&e)["message"].as_str().unwrap().contains("expired"));
    assert_eq!(calls_of(&r.calls, "record").len(), 2);
    client.cancel().await.unwrap();
}

async fn call_again_in_plan_mode(client: &RunningService<RoleClient, Seen>) {
    client
        .peer()
        .call_tool(params("plangate_begin_session", json!({"mode": "plan"})))
        .await
        .unwrap();
    client
        .peer()
        .call_tool(params("record", json!({"note": "three"})))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_plan_changed_since_the_question_makes_the_yes_write_nothing() {
    let r = rig(Duration::from_secs(30)).await;
    let client = modern_client(
        r.gw.clone(),
        &r.token,
        Seen {
            elicit: true,
            ..Seen::default()
        },
    )
    .await;
    plan_two(&client).await;
    let (_, state) = first_round(&client, "plangate_exit_plan_mode", json!({"plan": "x"})).await;
    client
        .peer()
        .call_tool(params("record", json!({"note": "added meanwhile"})))
        .await
        .unwrap();
    let answer = retry(
        &client,
        "plangate_exit_plan_mode",
        json!({"plan": "x"}),
        &state,
        approve(),
    )
    .await;
    assert_eq!(body(&answer)["code"], "plan_changed", "{answer:?}");
    assert!(calls_of(&r.calls, "record").is_empty());
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn an_ask_mode_asks_over_input_required_too() {
    let r = rig(Duration::from_secs(30)).await;
    let seen = Seen::answering("accept", json!({"decision": "approve"}));
    let client = modern_client(r.gw.clone(), &r.token, seen).await;
    client
        .peer()
        .call_tool(params("plangate_begin_session", json!({"mode": "careful"})))
        .await
        .unwrap();
    let ran = client
        .call_tool(params("record", json!({"note": "asked first"})))
        .await
        .unwrap();
    assert_eq!(body(&ran)["ok"], true, "{ran:?}");
    assert_eq!(calls_of(&r.calls, "record").len(), 1);
    // A declined question runs nothing.
    let (_, state) = first_round(&client, "record", json!({"note": "no"})).await;
    let no = retry(
        &client,
        "record",
        json!({"note": "no"}),
        &state,
        json!({"action": "decline"}),
    )
    .await;
    assert_eq!(body(&no)["code"], "review_declined");
    assert_eq!(calls_of(&r.calls, "record").len(), 1);
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
        let r = recorder.clone();
        let (connector, _) = in_process("rec", move || r.clone());
        replicas.push(
            Gateway::start(
                config(&["rec"], Namespace::Auto),
                store.clone(),
                material(),
                BTreeMap::from([("rec".into(), connector)]),
            )
            .await,
        );
    }
    let seen = || Seen {
        elicit: true,
        ..Seen::default()
    };
    let a = modern_client(replicas[0].clone(), &key.token, seen()).await;
    let b = modern_client(replicas[1].clone(), &key.token, seen()).await;
    plan_two(&a).await;
    let (_, state) = first_round(&a, "plangate_exit_plan_mode", json!({"plan": "x"})).await;
    let args = json!({"plan": "x"});
    let (ra, rb) = tokio::join!(
        retry(
            &a,
            "plangate_exit_plan_mode",
            args.clone(),
            &state,
            approve()
        ),
        retry(
            &b,
            "plangate_exit_plan_mode",
            args.clone(),
            &state,
            approve()
        )
    );
    let applied: Vec<i64> = [&ra, &rb]
        .iter()
        .filter_map(|r| body(r)["applied"].as_i64())
        .collect();
    let declined = [&ra, &rb]
        .iter()
        .filter(|r| body(r)["code"] == "review_declined")
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
    let Ok(base) = std::env::var("PLANGATE_TEST_POSTGRES_URL") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must set PLANGATE_TEST_POSTGRES_URL"
        );
        return;
    };
    let schema = format!("single_use_{}", std::process::id());
    let status = std::process::Command::new("psql")
        .env("PGOPTIONS", "--client-min-messages=warning")
        .args([
            base.as_str(),
            "-q",
            "-c",
            &format!("DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}"),
        ])
        .status()
        .unwrap();
    assert!(status.success());
    let sep = if base.contains('?') { '&' } else { '?' };
    let store =
        plangate_store::open_postgres(&format!("{base}{sep}options=-c%20search_path%3D{schema}"))
            .await
            .unwrap();
    one_state_two_replicas(store).await;
    let _ = std::process::Command::new("psql")
        .env("PGOPTIONS", "--client-min-messages=warning")
        .args([
            base.as_str(),
            "-q",
            "-c",
            &format!("DROP SCHEMA IF EXISTS {schema} CASCADE"),
        ])
        .status();
}
