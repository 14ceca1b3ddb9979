//! An upstream's own questions during a call (elicitation, sampling),
//! asked of a client that speaks MCP 2026-07-28 — which cannot be sent a
//! request. The gateway answers `input_required` with the upstream's
//! question and a signed state, keeps the upstream call open, and hands the
//! answer of the client's retry to that same call: one upstream call, never
//! two. Tampered, forged, replayed, altered, other-key and lapsed retries
//! answer nothing; a lapsed question is cancelled upstream.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// Sampling is deprecated by SEP-2577 but still part of 2025-11-25 upstreams.
#![allow(deprecated)]

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use plangate_core::Scope;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, ClientConfig,
    CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams, Implementation,
    ListToolsResult, PaginatedRequestParams, ProtocolVersion, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ClientHandler, ErrorData, RoleClient, RoleServer, ServerHandler};
use serde_json::{Value, json};

/// An upstream whose tools ask their caller something mid-call: `ask`
/// (a read) and `ask_write` (a write) elicit a colour, `sample` asks for a
/// completion. Every call and every answer the upstream got is counted.
#[derive(Clone, Default)]
struct Asker {
    calls: Arc<AtomicUsize>,
    answers: Arc<Mutex<Vec<Value>>>,
    cancelled: Arc<AtomicUsize>,
}

impl ServerHandler for Asker {
    fn get_info(&self) -> ServerConfig {
        tools_only()
    }
    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let numbered = schema(json!({"type": "object", "properties": {"n": {"type": "integer"}}}));
        let read = ToolAnnotations::default().read_only(true);
        let write = ToolAnnotations::default()
            .read_only(false)
            .destructive(false);
        Ok(ListToolsResult::with_all_items(vec![
            Tool::new("ask", "elicits a colour", numbered.clone()).with_annotations(read.clone()),
            Tool::new("sample", "asks for a completion", numbered.clone()).with_annotations(read),
            Tool::new("ask_write", "elicits, then writes", numbered).with_annotations(write),
        ]))
    }
    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let answer = if request.name == "sample" {
            let params: CreateMessageRequestParams = serde_json::from_value(json!({
                "messages": [{"role": "user", "content": {"type": "text", "text": "Name a colour."}}],
                "maxTokens": 10
            }))
            .unwrap();
            #[allow(deprecated)]
            let r = cx.peer.create_message(params).await;
            r.map(|a| serde_json::to_value(a).unwrap())
                .unwrap_or_else(|e| json!({"error": e.to_string()}))
        } else {
            let params: ElicitRequestParams = serde_json::from_value(json!({
                "mode": "form",
                "message": "What is your favourite colour?",
                "requestedSchema": {"type": "object", "properties": {"colour": {"type": "string"}}}
            }))
            .unwrap();
            tokio::select! {
                r = cx.peer.create_elicitation(params) => r
                    .map(|a| serde_json::to_value(a).unwrap())
                    .unwrap_or_else(|e| json!({"error": e.to_string()})),
                () = cx.ct.cancelled() => {
                    self.cancelled.fetch_add(1, Ordering::SeqCst);
                    return Err(ErrorData::internal_error("cancelled", None));
                }
            }
        };
        self.answers.lock().unwrap().push(answer.clone());
        Ok(CallToolResult::structured(json!({"answer": answer})).into())
    }
}

/// A 2026-07-28 client that declares sampling (and elicitation) and
/// answers a completion request with a fixed text.
#[derive(Clone, Default)]
struct Sampler;

impl ClientHandler for Sampler {
    fn get_info(&self) -> ClientConfig {
        let caps: ClientCapabilities =
            serde_json::from_value(json!({"sampling": {}, "elicitation": {"form": {}}})).unwrap();
        ClientConfig::new(caps, Implementation::new("sampler", "0"))
            .with_protocol_version(ProtocolVersion::V_2025_11_25)
    }
    #[allow(deprecated)]
    async fn create_message(
        &self,
        _: CreateMessageRequestParams,
        _: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        Ok(serde_json::from_value(json!({
            "role": "assistant",
            "content": {"type": "text", "text": "ultramarine"},
            "model": "test-model"
        }))
        .unwrap())
    }
}

/// A gateway on the asking upstream `up`, with an ask mode and questions
/// that lapse after `review_timeout`, and a write key.
async fn rig(review_timeout: Duration) -> Rig<Asker> {
    rig_on(Scope::Write, "up", Asker::default(), |c| {
        reviewing(c, review_timeout);
    })
    .await
}

/// The name under which the gateway asks the upstream's own question.
const UP: &str = "upstream";

fn red() -> Value {
    json!({"action": "accept", "content": {"colour": "red"}})
}

#[tokio::test]
async fn an_upstream_elicitation_reaches_a_modern_client_through_input_required() {
    let r = rig(Duration::from_secs(30)).await;
    let seen = Seen::eliciting();
    let client = r.modern_client(seen.clone()).await;
    // rmcp's client drives the round through its handler, which answers
    // the upstream's colour question "teal".
    let result = client
        .call_tool(params("ask", json!({"n": 1})))
        .await
        .unwrap();
    assert_eq!(body(&result)["answer"]["action"], "accept", "{result:?}");
    assert_eq!(body(&result)["answer"]["content"]["colour"], "teal");
    assert_eq!(
        r.upstream.calls.load(Ordering::SeqCst),
        1,
        "one upstream call"
    );
    assert_eq!(seen.questions.lock().unwrap().len(), 1);
    assert!(r.gw.parked().is_empty(), "nothing left waiting");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn an_upstream_sampling_request_reaches_a_modern_client_too() {
    let r = rig(Duration::from_secs(30)).await;
    let client = r.modern_client(Sampler).await;
    let result = client.call_tool(params("sample", json!({}))).await.unwrap();
    let answer = &body(&result)["answer"];
    assert_eq!(answer["content"]["text"], "ultramarine", "{result:?}");
    assert_eq!(answer["model"], "test-model");
    assert_eq!(r.upstream.calls.load(Ordering::SeqCst), 1);
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_modern_client_that_declared_no_elicitation_has_the_question_declined() {
    let r = rig(Duration::from_secs(30)).await;
    let client = r.modern_client(Seen::default()).await;
    let result = client
        .peer()
        .call_tool_once(params("ask", json!({})))
        .await
        .unwrap();
    let CallToolResponse::Complete(result) = result else {
        panic!("a client that cannot answer is not asked: {result:?}");
    };
    assert_eq!(body(&result)["answer"]["action"], "decline");
    assert!(r.gw.parked().is_empty());
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn tampered_forged_altered_other_key_and_replayed_retries_answer_nothing() {
    let r = rig(Duration::from_secs(30)).await;
    let seen = Seen::eliciting();
    let client = r.modern_client(seen.clone()).await;
    let args = json!({"n": 7});
    let (requests, state) = first_round(&client, "ask", args.clone()).await;
    assert_eq!(requests["upstream"]["method"], "elicitation/create");
    assert!(
        requests["upstream"]["params"]["message"]
            .as_str()
            .unwrap()
            .contains("favourite colour")
    );
    assert_eq!(r.gw.parked().len(), 1, "the upstream call waits");
    assert!(r.upstream.answers.lock().unwrap().is_empty());

    // Each bad retry is rejected as invalid params (SEP-2322: a state that
    // fails verification is rejected), data.code invalid_arguments.
    // Tampered: one character changed.
    let t = rejected(&client, "ask", args.clone(), &tampered(&state)).await;
    assert_eq!(t.code, rmcp::model::ErrorCode::INVALID_PARAMS, "{t:?}");
    assert_eq!(
        t.data.as_ref().unwrap()["code"],
        "invalid_arguments",
        "{t:?}"
    );

    // Forged: signed with another key.
    let f = rejected(&client, "ask", args.clone(), &forged()).await;
    assert_eq!(f.data.as_ref().unwrap()["code"], "invalid_arguments");

    // Altered: other arguments than the call the upstream asked about.
    let a = rejected(&client, "ask", json!({"n": 8}), &state).await;
    assert!(a.message.contains("arguments differ"), "{a:?}");

    // Another key presenting this key's state.
    let other = r.store.create_key("other", Scope::Write).await.unwrap();
    let thief = modern_client_of(r.gw.clone(), &other.token, Seen::default()).await;
    let o = rejected(&thief, "ask", args.clone(), &state).await;
    assert_eq!(o.data.as_ref().unwrap()["code"], "invalid_arguments");
    assert!(o.message.contains("not one plangate issued"), "{o:?}");

    assert!(
        r.upstream.answers.lock().unwrap().is_empty(),
        "no bad retry answered the upstream"
    );
    assert_eq!(r.gw.parked().len(), 1, "and the call still waits");

    // The genuine retry answers the same call…
    let ok = retry(&client, "ask", args.clone(), &state, UP, red()).await;
    assert_eq!(body(&ok)["answer"]["content"]["colour"], "red", "{ok:?}");
    assert_eq!(
        r.upstream.calls.load(Ordering::SeqCst),
        1,
        "one upstream call"
    );
    // …once: a replay finds nothing waiting.
    let replay = rejected(&client, "ask", args, &state).await;
    assert!(replay.message.contains("no call waits"), "{replay:?}");
    assert_eq!(r.upstream.calls.load(Ordering::SeqCst), 1);
    assert_eq!(r.upstream.answers.lock().unwrap().len(), 1);
    client.cancel().await.unwrap();
    thief.cancel().await.unwrap();
}

#[tokio::test]
async fn a_question_nobody_answers_lapses_and_the_upstream_call_is_cancelled() {
    let r = rig(Duration::from_millis(400)).await;
    let client = r.modern_client(Seen::eliciting()).await;
    let (_, state) = first_round(&client, "ask", json!({})).await;
    eventually("the parked question to lapse", || r.gw.parked().is_empty()).await;
    // The upstream heard "cancel" for its question (or the call's own
    // cancellation, whichever reached it first).
    eventually("the upstream to hear the lapse", || {
        r.upstream.cancelled.load(Ordering::SeqCst) == 1
            || r.upstream
                .answers
                .lock()
                .unwrap()
                .first()
                .map(|a| a["action"].clone())
                == Some(json!("cancel"))
    })
    .await;
    let late = rejected(&client, "ask", json!({}), &state).await;
    assert_eq!(late.data.as_ref().unwrap()["code"], "invalid_arguments");
    assert!(late.message.contains("expired"), "{late:?}");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn an_ask_mode_asks_first_then_the_upstream_question_follows_on_the_same_call() {
    let r = rig(Duration::from_secs(30)).await;
    let client = r.modern_client(Seen::eliciting()).await;
    call_ok(
        &client,
        "plangate_begin_session",
        json!({"mode": "careful"}),
    )
    .await;
    let args = json!({"n": 3});
    // Round one: the person is asked about the write (nothing called yet).
    let (requests, state) = first_round(&client, "ask_write", args.clone()).await;
    assert!(requests.get("review").is_some(), "{requests}");
    assert_eq!(r.upstream.calls.load(Ordering::SeqCst), 0);
    // Round two: yes — the call goes out and its upstream asks a colour.
    let mut p = params("ask_write", args.clone());
    p.request_state = Some(state);
    p.input_responses = Some(BTreeMap::from([(
        "review".to_owned(),
        json!({"action": "accept", "content": {"decision": "approve"}}),
    )]));
    let CallToolResponse::InputRequired(ir) = client.peer().call_tool_once(p).await.unwrap() else {
        panic!("expected the upstream's question");
    };
    let requests = serde_json::to_value(ir.input_requests.unwrap()).unwrap();
    assert_eq!(requests["upstream"]["method"], "elicitation/create");
    assert_eq!(r.upstream.calls.load(Ordering::SeqCst), 1);
    // Round three: the colour; the person is not asked again.
    let state = ir.request_state.unwrap();
    let done = retry(&client, "ask_write", args, &state, UP, red()).await;
    assert_eq!(
        body(&done)["answer"]["content"]["colour"],
        "red",
        "{done:?}"
    );
    assert_eq!(r.upstream.calls.load(Ordering::SeqCst), 1);
    client.cancel().await.unwrap();
}

/// A retry with `state` that plangate must reject: the JSON-RPC error.
async fn rejected<C: rmcp::ClientHandler>(
    client: &rmcp::service::RunningService<rmcp::RoleClient, C>,
    tool: &str,
    args: serde_json::Value,
    state: &str,
) -> rmcp::ErrorData {
    let mut p = rmcp::model::CallToolRequestParams::new(tool.to_owned())
        .with_arguments(args.as_object().cloned().unwrap_or_default());
    p.request_state = Some(state.to_owned());
    p.input_responses = Some(std::collections::BTreeMap::from([(UP.to_owned(), red())]));
    match client.peer().call_tool_once(p).await {
        Err(rmcp::service::ServiceError::McpError(e)) => e,
        other => panic!("expected the retry to be rejected, got {other:?}"),
    }
}
