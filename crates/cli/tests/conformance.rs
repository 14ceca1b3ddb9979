//! What works directly works through plangate: the official MCP
//! conformance suite, run against its reference server directly and
//! through plangate (`scripts/conformance`, docs/conformance.md), and an
//! upstream's question routed to the client whose call caused it when
//! several clients have calls in flight on that upstream.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Proc, Scratch, peers, plangate, reference_server, repo_root, serve_http};
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult,
    ElicitationAction, Implementation, ProtocolVersion,
};
use rmcp::service::RequestContext;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ClientHandler, ErrorData, RoleClient, ServiceExt};
use serde_json::json;
use tokio::sync::Notify;

/// The suite's server scenarios at 2025-11-25 and 2026-07-28, directly and
/// through plangate (HTTP front; the reference server as an HTTP and as a
/// stdio upstream): every check that passes directly passes through
/// plangate, except the known gaps listed with their reasons.
#[test]
fn conformance_suite_passes_through_plangate_as_it_does_directly() {
    peers();
    let out = Command::new("python3")
        .arg(repo_root().join("scripts/conformance"))
        .arg("--plangate")
        .arg(plangate())
        .stdin(Stdio::null())
        .output()
        .expect("cannot run python3 scripts/conformance");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "scripts/conformance failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    assert!(stdout.contains("conformance: no regression"), "{stdout}");
}

/// A client that declares elicitation and answers each question with
/// `reply`, or never answers while `hold` is set (a call someone walked
/// away from).
#[derive(Clone)]
struct Asked {
    reply: &'static str,
    hold: bool,
    questions: Arc<Mutex<Vec<String>>>,
    asked: Arc<Notify>,
}

impl Asked {
    fn new(reply: &'static str, hold: bool) -> Asked {
        Asked {
            reply,
            hold,
            questions: Arc::default(),
            asked: Arc::new(Notify::new()),
        }
    }
}

impl ClientHandler for Asked {
    fn get_info(&self) -> ClientConfig {
        let caps: ClientCapabilities =
            serde_json::from_value(json!({"elicitation": {"form": {}}})).unwrap();
        ClientConfig::new(caps, Implementation::new("plangate-tests", "0"))
            .with_protocol_version(ProtocolVersion::V_2025_11_25)
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let v = serde_json::to_value(&request).unwrap();
        self.questions
            .lock()
            .unwrap()
            .push(v["message"].as_str().unwrap_or_default().to_owned());
        self.asked.notify_one();
        if self.hold {
            std::future::pending::<()>().await;
        }
        Ok(ElicitResult::new(ElicitationAction::Accept)
            .with_content(json!({"response": self.reply})))
    }
}

async fn connect(url: &str, handler: Asked) -> rmcp::service::RunningService<RoleClient, Asked> {
    let transport = StreamableHttpClientTransport::from_uri(url);
    handler.serve(transport).await.expect("connect to plangate")
}

fn elicit(message: &str) -> CallToolRequestParams {
    CallToolRequestParams::new("test_elicitation")
        .with_arguments(json!({"message": message}).as_object().unwrap().clone())
}

/// Two clients of plangate: A, whose call waits on a question A never
/// answers (an abandoned call), and B, who then makes the same call.
struct Two {
    a: Asked,
    a_client: rmcp::service::RunningService<RoleClient, Asked>,
    abandoned:
        tokio::task::JoinHandle<Result<rmcp::model::CallToolResult, rmcp::service::ServiceError>>,
    b: Asked,
    b_client: rmcp::service::RunningService<RoleClient, Asked>,
    /// What B's call answered (its content, as JSON).
    text: String,
}

async fn two_clients(gw: &Proc) -> Two {
    let a = Asked::new("from A", true);
    let a_client = connect(&gw.url(), a.clone()).await;
    let a_peer = a_client.peer().clone();
    let abandoned = tokio::spawn(async move { a_peer.call_tool(elicit("question for A")).await });
    tokio::time::timeout(Duration::from_secs(20), a.asked.notified())
        .await
        .expect("client A was never asked");

    let b = Asked::new("from B", false);
    let b_client = connect(&gw.url(), b.clone()).await;
    let text = call_text(&b_client, "question for B").await;
    Two {
        a,
        a_client,
        abandoned,
        b,
        b_client,
        text,
    }
}

/// Client A was asked once: its own question, never B's.
fn asked_only_its_own(a: &Asked) {
    assert_eq!(
        a.questions.lock().unwrap().len(),
        1,
        "A was asked B's question"
    );
}

/// B's call of `test_elicitation` with `message`: its content, as JSON.
async fn call_text(
    client: &rmcp::service::RunningService<RoleClient, Asked>,
    message: &str,
) -> String {
    let result = tokio::time::timeout(
        Duration::from_secs(30),
        client.peer().call_tool(elicit(message)),
    )
    .await
    .expect("B's call never finished")
    .expect("B's call failed");
    serde_json::to_string(&result.content).unwrap()
}

/// Serves plangate over HTTP with the conformance config and `upstream`
/// (a TOML `[upstreams.reference]` body).
fn plangate_in_front(scratch: &Scratch, upstream: &str) -> Proc {
    let config = std::fs::read_to_string(repo_root().join("tests/conformance/plangate.toml"))
        .unwrap()
        + "\n[upstreams.reference]\n"
        + upstream;
    let path = scratch.write("plangate.toml", &config);
    serve_http(scratch, &["--config", path.to_str().unwrap()])
}

/// Two clients, one call abandoned while its upstream waits for that
/// client's answer, then an elicitation caused by the other client's call:
/// over an HTTP upstream plangate knows which call each question belongs
/// to (the stream it came on), so the second client is asked and its call
/// completes; the first client is never asked the second one's question.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elicitation_reaches_the_client_whose_call_caused_it() {
    let (_reference, url) = reference_server();
    let scratch = Scratch::new();
    let gw = plangate_in_front(&scratch, &format!("url = \"{url}\"\n"));

    let two = two_clients(&gw).await;
    let text = &two.text;
    assert!(
        text.contains("action=accept") && text.contains("from B"),
        "B's call did not get B's answer: {text}\nplangate log:\n{}",
        gw.log()
    );
    assert_eq!(
        *two.b.questions.lock().unwrap(),
        ["[Asked by the upstream MCP server \"reference\", not by plangate] question for B"]
    );
    asked_only_its_own(&two.a);
    two.abandoned.abort();
    let _ = two.a_client.cancel().await;
    let _ = two.b_client.cancel().await;
}

/// Over a stdio upstream nothing on the wire says which call a question
/// belongs to. With another client's call still waiting, plangate cannot
/// tell whose question it is: it declines it (logging why) rather than ask
/// the wrong person. Once that other client has gone, the question goes to
/// the one client left with a call in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_stdio_an_ambiguous_question_is_declined_and_a_gone_client_does_not_count() {
    peers();
    let root = repo_root();
    let dir = root.join(".tools/conformance/server");
    let node = root.join(".tools/conformance/suite/node_modules/.bin/node");
    let scratch = Scratch::new();
    let upstream = format!(
        "command = \"{}\"\nargs = [\"node_modules/tsx/dist/cli.mjs\", \"stdio.ts\"]\ncwd = \"{}\"\nenv = {{ NODE_OPTIONS = \"--require {}\" }}\n",
        node.display(),
        dir.display(),
        dir.join("loopback.cjs").display()
    );
    let gw = plangate_in_front(&scratch, &upstream);

    let two = two_clients(&gw).await;
    assert!(two.text.contains("action=decline"), "{}", two.text);
    assert!(two.b.questions.lock().unwrap().is_empty());
    asked_only_its_own(&two.a);
    assert!(
        gw.log()
            .contains("elicitation from the upstream declined: calls of several clients"),
        "{}",
        gw.log()
    );

    // A goes away (its session ends): its call is cancelled and no longer
    // counts. Ending a session is asynchronous on plangate's side, so B asks
    // until it is (a declined question changes nothing).
    two.abandoned.abort();
    let _ = two.a_client.cancel().await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let text = call_text(&two.b_client, "again for B").await;
        if text.contains("action=accept") && text.contains("from B") {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "B was still not asked after A left: {text}\nplangate log:\n{}",
            gw.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    asked_only_its_own(&two.a);
    let _ = two.b_client.cancel().await;
}

/// A client that records the log messages it is sent.
#[derive(Clone, Default)]
struct Listening(Arc<Mutex<Vec<String>>>);

impl ClientHandler for Listening {
    fn get_info(&self) -> ClientConfig {
        common::client_info()
    }

    #[allow(deprecated)]
    async fn on_logging_message(
        &self,
        params: rmcp::model::LoggingMessageNotificationParam,
        _: rmcp::service::NotificationContext<RoleClient>,
    ) {
        self.0.lock().unwrap().push(params.data.to_string());
    }
}

/// Attack: a second client (another key) connected to the same upstream
/// listens for log lines while the first client's call runs. The lines the
/// upstream writes during that call reach the caller only — and not the
/// other client, which set no level; once it sets one, it hears only lines
/// that concern no call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstreams_log_lines_about_a_call_reach_that_caller_only() {
    let (_reference, url) = reference_server();
    let scratch = Scratch::new();
    let gw = plangate_in_front(&scratch, &format!("url = \"{url}\"\n"));
    let caller = Listening::default();
    let caller_client = caller
        .clone()
        .serve(StreamableHttpClientTransport::from_uri(gw.url()))
        .await
        .unwrap();
    let eavesdropper = Listening::default();
    let eavesdropper_client = eavesdropper
        .clone()
        .serve(StreamableHttpClientTransport::from_uri(gw.url()))
        .await
        .unwrap();
    #[allow(deprecated)]
    eavesdropper_client
        .peer()
        .set_level(rmcp::model::SetLevelRequestParams::new(
            rmcp::model::LoggingLevel::Debug,
        ))
        .await
        .unwrap();

    caller_client
        .peer()
        .call_tool(
            CallToolRequestParams::new("test_tool_with_logging")
                .with_arguments(serde_json::Map::new()),
        )
        .await
        .unwrap();
    // Notifications may trail the result by a moment.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while caller.0.lock().unwrap().len() < 3 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let heard = caller.0.lock().unwrap().clone();
    assert!(
        heard.iter().any(|l| l.contains("Tool execution started")),
        "the caller heard {heard:?}\nplangate log:\n{}",
        gw.log()
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    // It may hear the upstream's lines that concern no call (here, the
    // upstream acknowledging the level it was set to), never the call's.
    let overheard = eavesdropper.0.lock().unwrap().clone();
    assert!(
        !overheard.iter().any(|l| heard.contains(l)),
        "another client heard the caller's log lines: {overheard:?}"
    );
    let _ = caller_client.cancel().await;
    let _ = eavesdropper_client.cancel().await;
}
