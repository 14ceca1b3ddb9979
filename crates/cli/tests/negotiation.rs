//! Which MCP revision plangate speaks to an upstream (`protocol`): `auto`
//! speaks 2026-07-28 to a server that serves it — its 2026-only tools are
//! offered — and falls back to 2025-11-25 at once for one that does not,
//! on real servers (the conformance suite's reference server over HTTP,
//! the official server-memory over stdio).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::*;

/// The tools a keyed client sees through `plangate serve --http` with
/// `config`, and how long serving took.
async fn tools_through(scratch: &Scratch, config: &str) -> (Vec<String>, Duration, Proc) {
    let path = scratch.write("plangate.toml", config);
    let token = scratch.create_key("agent", "write");
    let started = Instant::now();
    let gw = serve_http(scratch, &["--config", path.to_str().unwrap()]);
    let took = started.elapsed();
    let client = http_client(&gw.url(), Some(&token)).await.unwrap();
    let names = tool_names(&client).await;
    let _ = client.cancel().await;
    (names, took, gw)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_speaks_2026_07_28_to_a_server_that_serves_it() {
    let (_reference, url) = reference_server();
    let scratch = Scratch::new();
    let (names, _, gw) = tools_through(
        &scratch,
        &format!("[upstreams.reference]\nurl = \"{url}\"\nprotocol = \"auto\"\n"),
    )
    .await;
    // Offered by the reference server on its 2026-07-28 path only.
    assert!(
        names
            .iter()
            .any(|n| n == "test_input_required_result_elicitation"),
        "{names:?}\n{}",
        gw.log()
    );

    let scratch = Scratch::new();
    let (names, _, _) = tools_through(
        &scratch,
        &format!("[upstreams.reference]\nurl = \"{url}\"\n"),
    )
    .await;
    assert!(
        !names
            .iter()
            .any(|n| n == "test_input_required_result_elicitation"),
        "the default speaks 2025-11-25: {names:?}"
    );
    assert!(names.iter().any(|n| n == "test_simple_text"), "{names:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_falls_back_to_2025_11_25_at_once_for_a_server_that_does_not_serve_2026() {
    let peers = peers();
    let scratch = Scratch::new();
    let memory = scratch.path().join("memory.jsonl");
    let config = format!(
        "[upstreams.memory]\ncommand = \"node\"\nargs = [\"{}\"]\nenv = {{ MEMORY_FILE_PATH = \"{}\" }}\nprotocol = \"auto\"\n",
        peers
            .js("@modelcontextprotocol/server-memory/dist/index.js")
            .display(),
        memory.display()
    );
    let (names, took, gw) = tools_through(&scratch, &config).await;
    assert!(
        names.iter().any(|n| n == "create_entities"),
        "{names:?}\n{}",
        gw.log()
    );
    // The probe is answered method-not-found and plangate falls back; it
    // does not sit out rmcp's 10 s discover timeout.
    assert!(took < Duration::from_secs(8), "serving took {took:?}");
}

/// A 2025-11-25 client that answers every question with a context.
#[derive(Clone, Default)]
struct Answers(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

impl rmcp::ClientHandler for Answers {
    fn get_info(&self) -> rmcp::model::ClientConfig {
        let caps: rmcp::model::ClientCapabilities =
            serde_json::from_value(serde_json::json!({"elicitation": {"form": {}}})).unwrap();
        rmcp::model::ClientConfig::new(caps, rmcp::model::Implementation::new("t", "0"))
            .with_protocol_version(rmcp::model::ProtocolVersion::V_2025_11_25)
    }

    async fn create_elicitation(
        &self,
        request: rmcp::model::ElicitRequestParams,
        _: rmcp::service::RequestContext<rmcp::RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        let v = serde_json::to_value(&request).unwrap();
        self.0
            .lock()
            .unwrap()
            .push(v["message"].as_str().unwrap_or_default().to_owned());
        Ok(
            rmcp::model::ElicitResult::new(rmcp::model::ElicitationAction::Accept)
                .with_content(serde_json::json!({"context": "the harbour"})),
        )
    }
}

/// A prompt whose 2026-07-28 upstream answers `input_required`: a
/// 2025-11-25 client is asked inside its own `prompts/get` (the question
/// marked as the upstream's) and gets the prompt plangate fetched with its
/// answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2025_client_answers_a_2026_upstreams_prompt_question_inside_its_request() {
    use rmcp::ServiceExt;
    let (_reference, url) = reference_server();
    let scratch = Scratch::new();
    let path = scratch.write(
        "plangate.toml",
        &format!("[upstreams.reference]\nurl = \"{url}\"\nprotocol = \"2026-07-28\"\n"),
    );
    let token = scratch.create_key("agent", "write");
    let gw = serve_http(&scratch, &["--config", path.to_str().unwrap()]);
    let answers = Answers::default();
    let transport = rmcp::transport::StreamableHttpClientTransport::with_client(
        reqwest::Client::new(),
        rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
            gw.url(),
        )
        .auth_header(token),
    );
    let client = answers.clone().serve(transport).await.unwrap();
    let prompt = client
        .peer()
        .get_prompt(rmcp::model::GetPromptRequestParams::new(
            "test_input_required_result_prompt",
        ))
        .await
        .unwrap();
    let text = serde_json::to_string(&prompt.messages).unwrap();
    assert!(
        text.contains("Prompt with context: the harbour"),
        "{text}\n{}",
        gw.log()
    );
    assert_eq!(
        *answers.0.lock().unwrap(),
        [
            "[Asked by the upstream MCP server \"reference\", not by plangate] What context should the prompt use?"
        ]
    );
    let _ = client.cancel().await;
}
