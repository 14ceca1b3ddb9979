//! Which HTTP session a new one closes past `[gateway] max_sessions` and
//! `max_sessions_per_key`, end to end against `plangate serve --http`: a
//! session a question to the person is waiting on, or an apply runs in,
//! survives a flood of new sessions and gets its answer; one key's flood
//! closes its own sessions, never another key's below the floor.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use rmcp::model::{
    ClientCapabilities, ElicitRequestParams, ElicitResult, ElicitationAction, Implementation,
    ProtocolVersion,
};
use rmcp::service::RequestContext;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ClientHandler, ErrorData, RoleClient, ServiceExt};
use serde_json::json;
use tokio::sync::Notify;

/// A person who approves, but only once `gate` opens; `asked` says a
/// question came.
#[derive(Clone, Default)]
struct Person {
    asked: Arc<Notify>,
    gate: Arc<Notify>,
}

impl ClientHandler for Person {
    fn get_info(&self) -> rmcp::model::ClientConfig {
        let caps: ClientCapabilities =
            serde_json::from_value(json!({"elicitation": {"form": {}}})).unwrap();
        rmcp::model::ClientConfig::new(caps, Implementation::new("plangate-tests", "0"))
            .with_protocol_version(ProtocolVersion::V_2025_11_25)
    }

    async fn create_elicitation(
        &self,
        _: ElicitRequestParams,
        _: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        self.asked.notify_one();
        self.gate.notified().await;
        Ok(ElicitResult::new(ElicitationAction::Accept)
            .with_content(json!({"decision": "approve"})))
    }
}

/// The `initialize` request of a client without capabilities.
const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#;

/// Raw sessions of `serve --http`, opened and pinged by key.
struct Raw {
    http: reqwest::Client,
    url: String,
}

impl Raw {
    fn new(gw: &Proc) -> Raw {
        Raw {
            http: reqwest::Client::new(),
            url: gw.url(),
        }
    }

    fn post(
        &self,
        token: &str,
        session: Option<&str>,
        body: &'static str,
    ) -> reqwest::RequestBuilder {
        let request = self
            .http
            .post(&self.url)
            .bearer_auth(token)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body);
        match session {
            Some(s) => request
                .header("mcp-session-id", s)
                .header("mcp-protocol-version", "2025-11-25"),
            None => request,
        }
    }

    /// Opens a session of `token`; its id.
    async fn open(&self, token: &str) -> String {
        let r = self.post(token, None, INITIALIZE).send().await.unwrap();
        assert_eq!(r.status(), 200);
        let id = r.headers()["mcp-session-id"].to_str().unwrap().to_owned();
        let _ = r.text().await;
        id
    }

    /// Whether `session` of `token` is still open (a ping answered `200`,
    /// not `404`).
    async fn alive(&self, token: &str, session: &str) -> bool {
        let r = self
            .post(
                token,
                Some(session),
                r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#,
            )
            .send()
            .await
            .unwrap();
        match r.status().as_u16() {
            200 => true,
            404 => false,
            other => panic!("ping answered {other}"),
        }
    }
}

async fn connect(
    url: &str,
    token: &str,
    person: Person,
) -> rmcp::service::RunningService<RoleClient, Person> {
    // A closed session is an error here, not re-opened behind the test's
    // back (rmcp's default).
    let config =
        rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(url)
            .auth_header(token)
            .reinit_on_expired_session(false);
    let transport = StreamableHttpClientTransport::with_client(reqwest::Client::new(), config);
    person.serve(transport).await.unwrap()
}

#[tokio::test]
async fn a_session_with_a_question_pending_survives_a_flood_of_new_sessions() {
    let (scratch, config, [a, b]) = demo_keys(
        "[gateway]\nmax_sessions = 4\nmax_sessions_per_key = 3\n",
        [("a", "write"), ("b", "write")],
    );
    let gw = serve_http(&scratch, &["--config", &config]);
    let person = Person::default();
    let agent = connect(&gw.url(), &a, person.clone()).await;
    let peer = agent.peer().clone();
    let mut begin = rmcp::model::CallToolRequestParams::new("plangate_begin_session");
    begin.arguments = json!({"mode": "plan"}).as_object().cloned();
    peer.call_tool(begin).await.unwrap();
    let mut write = rmcp::model::CallToolRequestParams::new("update_option");
    write.arguments = tagline("approved while flooded").as_object().cloned();
    let planned = peer.call_tool(write).await.unwrap();
    assert_eq!(body(&planned)["planned"], true, "{planned:?}");

    let exit = tokio::spawn(async move {
        let mut params = rmcp::model::CallToolRequestParams::new("plangate_exit_plan_mode");
        params.arguments = json!({"plan": "Set the tagline."}).as_object().cloned();
        peer.call_tool(params).await
    });
    tokio::time::timeout(Duration::from_secs(20), person.asked.notified())
        .await
        .expect("the person was never asked");

    // Both keys flood new sessions, far past both caps.
    let raw = Raw::new(&gw);
    for _ in 0..6 {
        raw.open(&a).await;
        raw.open(&b).await;
    }
    // The person answers on the session that was asked: it is still there.
    person.gate.notify_one();
    let receipt = tokio::time::timeout(Duration::from_secs(20), exit)
        .await
        .expect("no receipt")
        .unwrap()
        .expect("the question's session was closed");
    let receipt = body(&receipt);
    assert_eq!(receipt["code"], "plan_applied", "{receipt}");
    assert_eq!(receipt["applied"], 1, "{receipt}");
    assert_eq!(site_tagline(&scratch), "approved while flooded");

    // The question answered, the session is an ordinary one again: the
    // next flood may close it.
    for _ in 0..4 {
        raw.open(&a).await;
    }
    assert!(
        agent.peer().list_all_tools().await.is_err(),
        "a session no longer held is closed like any other"
    );
}

#[tokio::test]
async fn a_session_running_an_apply_survives_a_flood_of_new_sessions() {
    let scratch = Scratch::new();
    let a = scratch.create_key("a", "write");
    let (config, log) = counting_config(&scratch, "max_sessions = 4\nmax_sessions_per_key = 3");
    let gw = serve_http(&scratch, &["--config", &config]);
    let agent = connect(&gw.url(), &a, Person::default()).await;
    wait_for_tool(agent.peer(), "bump").await;
    let mut params = rmcp::model::CallToolRequestParams::new("plangate_begin_session");
    params.arguments = json!({"mode": "plan"}).as_object().cloned();
    agent.peer().call_tool(params).await.unwrap();
    let mut params = rmcp::model::CallToolRequestParams::new("bump");
    params.arguments = json!({"n": 1, "ms": 3000}).as_object().cloned();
    let planned = body(&agent.peer().call_tool(params).await.unwrap());
    assert_eq!(planned["planned"], true, "{planned}");

    let peer = agent.peer().clone();
    let apply = tokio::spawn(async move {
        peer.call_tool(rmcp::model::CallToolRequestParams::new(
            "plangate_apply_plan",
        ))
        .await
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    while deliveries(&log).is_empty() {
        assert!(
            Instant::now() < deadline,
            "the step never reached the upstream"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let raw = Raw::new(&gw);
    for _ in 0..8 {
        raw.open(&a).await;
    }
    let receipt = tokio::time::timeout(Duration::from_secs(20), apply)
        .await
        .expect("no receipt")
        .unwrap()
        .expect("the apply's session was closed");
    let receipt = body(&receipt);
    assert_eq!(receipt["code"], "plan_applied", "{receipt}");
    assert_eq!(receipt["applied"], 1, "{receipt}");
}

#[tokio::test]
async fn one_key_s_flood_never_closes_another_key_s_sessions_below_the_floor() {
    let (scratch, config, [a, b]) = demo_keys(
        "[gateway]\nmax_sessions = 6\nmax_sessions_per_key = 100\n",
        [("a", "write"), ("b", "write")],
    );
    let gw = serve_http(&scratch, &["--config", &config]);
    let raw = Raw::new(&gw);
    // b's two sessions are the oldest of all, and idle.
    let b1 = raw.open(&b).await;
    let b2 = raw.open(&b).await;
    let mut flood = Vec::new();
    for _ in 0..12 {
        flood.push(raw.open(&a).await);
    }
    assert!(raw.alive(&b, &b1).await, "b's first session was closed");
    assert!(raw.alive(&b, &b2).await, "b's second session was closed");
    let mut alive = Vec::new();
    for s in &flood {
        alive.push(raw.alive(&a, s).await);
    }
    assert_eq!(
        alive,
        [
            false, false, false, false, false, false, false, false, true, true, true, true
        ],
        "a's own oldest sessions made the room"
    );
}
