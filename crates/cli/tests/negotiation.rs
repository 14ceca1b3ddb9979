//! Which MCP revision plangate speaks to an upstream (`protocol`): `auto`
//! speaks 2026-07-28 to a server that serves it — its 2026-only tools are
//! offered — and falls back to 2025-11-25 at once for one that does not,
//! on real servers (the conformance suite's reference server over HTTP,
//! the official server-memory over stdio).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::json;

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

/// A 2026-07-28 client of `gw` (plain rmcp, no handler) holding `token`.
async fn modern_client(
    gw: &Proc,
    token: String,
) -> rmcp::service::RunningService<rmcp::RoleClient, rmcp::model::ClientConfig> {
    use rmcp::ClientLifecycleMode;
    use rmcp::service::ClientServiceExt as _;
    let transport = rmcp::transport::StreamableHttpClientTransport::with_client(
        reqwest::Client::new(),
        rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
            gw.url(),
        )
        .auth_header(token),
    );
    rmcp::model::ClientConfig::default()
        .serve_with_lifecycle(
            transport,
            ClientLifecycleMode::Discover {
                preferred_versions: vec![rmcp::model::ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .unwrap()
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

/// A stdio upstream that serves 2026-07-28 (the demo site, an rmcp server):
/// plangate speaks it there, and plan mode works as at 2025-11-25 — reads
/// run, a write becomes a step with its preview, the apply runs it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_upstream_at_2026_07_28_plans_and_applies_as_at_2025_11_25() {
    let (scratch, config, [token]) = demo_keys("", [("agent", "write")]);
    let text = std::fs::read_to_string(&config).unwrap();
    let text = text.replacen(
        "[upstreams.site]\n",
        "[upstreams.site]\nprotocol = \"2026-07-28\"\n",
        1,
    );
    std::fs::write(&config, text).unwrap();
    let out = scratch.run(&["config", "check", "--config", &config]);
    let checked = succeeded(&["config", "check"], &out);
    assert!(
        checked.contains(
            "upstream site (stdio, trust_annotations = true): connected (MCP 2026-07-28)"
        ),
        "{checked}"
    );

    let client = plan_client(&scratch, &config, &token).await;
    let page = ok(&client, "get_page", json!({"id": 2})).await;
    assert_eq!(page["title"], "About", "{page}");
    let step = ok(&client, "update_option", tagline("Fresh bread daily")).await;
    assert_eq!(step["code"], "plan_step", "{step}");
    assert!(
        step["predicted_effect"]
            .as_str()
            .unwrap()
            .contains("Fresh bread daily"),
        "{step}"
    );
    assert_ne!(site_tagline(&scratch), json!("Fresh bread daily"));
    let digest = get_plan(&client).await["plan_digest"].clone();
    let receipt = apply_plan(&client, json!({"plan_digest": digest})).await;
    assert_eq!(receipt["success"], true, "{receipt}");
    assert_eq!(site_tagline(&scratch), json!("Fresh bread daily"));
    client.cancel().await.unwrap();
}

/// A 2025-11-25 client that records the log lines and resource updates
/// plangate sends it.
#[derive(Clone, Default)]
struct Hearing {
    logs: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    updates: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl rmcp::ClientHandler for Hearing {
    fn get_info(&self) -> rmcp::model::ClientConfig {
        client_info()
    }

    #[allow(deprecated)]
    async fn on_logging_message(
        &self,
        params: rmcp::model::LoggingMessageNotificationParam,
        _: rmcp::service::NotificationContext<rmcp::RoleClient>,
    ) {
        self.logs.lock().unwrap().push(params.data.to_string());
    }

    async fn on_resource_updated(
        &self,
        params: rmcp::model::ResourceUpdatedNotificationParam,
        _: rmcp::service::NotificationContext<rmcp::RoleClient>,
    ) {
        self.updates.lock().unwrap().push(params.uri);
    }
}

/// Calls `tool` through `peer` and returns its structured answer (or its
/// text).
async fn said(
    peer: &rmcp::Peer<rmcp::RoleClient>,
    tool: &str,
    args: serde_json::Value,
) -> serde_json::Value {
    let r = peer
        .call_tool(
            rmcp::model::CallToolRequestParams::new(tool.to_owned())
                .with_arguments(args.as_object().cloned().unwrap()),
        )
        .await
        .unwrap();
    assert_ne!(r.is_error, Some(true), "{r:?}");
    body(&r)
}

/// `plangate serve --http` in front of the official Python SDK's server
/// speaking 2026-07-28 (tests/interop/modern_server.py) as upstream
/// `notes`: the scratch dir, the gateway and a `write` key's token.
fn gateway_on_modern_notes() -> (Scratch, Proc, String) {
    let python = peers().python.clone();
    let server = repo_root().join("tests/interop/modern_server.py");
    let scratch = Scratch::new();
    let config = scratch.write(
        "plangate.toml",
        &format!(
            "[upstreams.notes]\ncommand = \"{}\"\nargs = [\"{}\"]\nprotocol = \"2026-07-28\"\n",
            python.display(),
            server.display()
        ),
    );
    let token = scratch.create_key("agent", "write");
    let gw = serve_http(&scratch, &["--config", config.to_str().unwrap()]);
    (scratch, gw, token)
}

/// A 2025-11-25 client keeps logging levels and resource subscriptions
/// when plangate speaks 2026-07-28 to the upstream (the official Python
/// SDK's server over stdio), where neither `logging/setLevel` nor
/// `resources/subscribe` exists: the level travels with each request
/// (`_meta` `logLevel`), the subscription in the upstream's
/// `subscriptions/listen` filter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2025_client_keeps_log_levels_and_subscriptions_on_a_2026_upstream() {
    use rmcp::ServiceExt;
    let (_scratch, gw, token) = gateway_on_modern_notes();
    let hearing = Hearing::default();
    let transport = rmcp::transport::StreamableHttpClientTransport::with_client(
        reqwest::Client::new(),
        rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
            gw.url(),
        )
        .auth_header(token),
    );
    let client = hearing.clone().serve(transport).await.unwrap();
    wait_for_tool(client.peer(), "shout").await;

    // No level set: the upstream is asked for no log lines.
    let loud = said(client.peer(), "shout", json!({"text": "first"})).await;
    assert_eq!(loud["result"], "FIRST", "{}", gw.log());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(hearing.logs.lock().unwrap().is_empty());

    // Level info: the info line, not the debug one.
    #[allow(deprecated)]
    client
        .peer()
        .set_level(rmcp::model::SetLevelRequestParams::new(
            rmcp::model::LoggingLevel::Info,
        ))
        .await
        .unwrap();
    said(client.peer(), "shout", json!({"text": "second"})).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while hearing.logs.lock().unwrap().is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let logs = hearing.logs.lock().unwrap().clone();
    assert!(
        logs.iter().any(|l| l.contains("info: shouted second")),
        "{logs:?}\n{}",
        gw.log()
    );
    assert!(!logs.iter().any(|l| l.contains("debug:")), "{logs:?}");

    // A subscription: the upstream's update of the note reaches the
    // subscribed client.
    #[allow(deprecated)]
    client
        .peer()
        .subscribe(rmcp::model::SubscribeRequestParams::new("memo://note"))
        .await
        .unwrap();
    // The listen stream is opened again with the URI; give it a moment.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut round = 0;
    while hearing.updates.lock().unwrap().is_empty() && Instant::now() < deadline {
        round += 1;
        said(
            client.peer(),
            "set_note",
            json!({"text": format!("round {round}")}),
        )
        .await;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let updates = hearing.updates.lock().unwrap().clone();
    assert!(
        updates.iter().any(|u| u == "memo://note"),
        "{updates:?}\n{}",
        gw.log()
    );
    let _ = client.cancel().await;
}

/// A 2026-07-28 client names the resources it wants updates of in its
/// `subscriptions/listen` filter: plangate acknowledges those that route to
/// an upstream that takes subscriptions, and an update of one reaches that
/// stream (here through a 2026-07-28 upstream's own listen stream, the
/// official Python SDK's server); so does a change of the upstream's tool
/// list, which plangate re-reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_client_hears_updates_of_the_resources_in_its_listen_filter() {
    let (_scratch, gw, token) = gateway_on_modern_notes();
    let client = modern_client(&gw, token).await;
    wait_for_tool(client.peer(), "set_note").await;
    let mut filter = rmcp::model::SubscriptionFilter::builder()
        .tools_list_changed()
        .build();
    filter.resource_subscriptions = Some(vec!["memo://note".into()]);
    let mut listening = client.peer().listen(filter).await.unwrap();
    assert_eq!(
        listening.acknowledged().resource_subscriptions,
        Some(vec!["memo://note".to_owned()])
    );
    // plangate opens its upstream listen stream again with the URI; the
    // update may take a round or two to be heard.
    let mut heard = None;
    for round in 0..20 {
        said(
            client.peer(),
            "set_note",
            json!({"text": format!("round {round}")}),
        )
        .await;
        if let Ok(Ok(Some(n))) =
            tokio::time::timeout(Duration::from_millis(500), listening.next()).await
        {
            heard = Some(n);
            break;
        }
    }
    match heard {
        Some(rmcp::model::ServerNotification::ResourceUpdatedNotification(n)) => {
            assert_eq!(n.params.uri, "memo://note");
        }
        other => panic!("{other:?}\n{}", gw.log()),
    }

    // The upstream adds a tool and says so on its listen stream: plangate
    // re-reads its list and tells this client's stream.
    said(client.peer(), "add_echo", json!({})).await;
    let changed = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match listening.next().await {
                Ok(Some(rmcp::model::ServerNotification::ToolListChangedNotification(_))) => {
                    return true;
                }
                Ok(Some(_)) => {}
                _ => return false,
            }
        }
    })
    .await;
    assert_eq!(changed, Ok(true), "{}", gw.log());
    // plangate re-read the list: the new tool waits for an operator
    // (pinned definitions; `plangate tools`), as any new tool does.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !gw.log().contains("tools=echo (new)") {
        assert!(Instant::now() < deadline, "{}", gw.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(listening);
    let _ = client.cancel().await;
}

/// The conformance suite's reference server answers `subscriptions/listen`
/// with an `application/json` body that goes on, one message per line;
/// plangate reads it line by line, so a change of the server's tool list
/// (made here by its hidden hook, called directly) reaches plangate's
/// 2026-07-28 clients.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listen_stream_sent_as_json_lines_is_heard() {
    let (_reference, url) = reference_server();
    let scratch = Scratch::new();
    let config = scratch.write(
        "plangate.toml",
        &format!("[upstreams.reference]\nurl = \"{url}\"\nprotocol = \"2026-07-28\"\n"),
    );
    let token = scratch.create_key("agent", "write");
    let gw = serve_http(&scratch, &["--config", config.to_str().unwrap()]);
    let client = modern_client(&gw, token).await;
    let filter = rmcp::model::SubscriptionFilter::builder()
        .tools_list_changed()
        .build();
    let mut listening = client.peer().listen(filter).await.unwrap();

    let trigger = || async {
        let meta = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}
        });
        reqwest::Client::new()
            .post(&url)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "tools/call")
            .header("mcp-name", "test_trigger_tool_change")
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "test_trigger_tool_change", "arguments": {}, "_meta": meta}}))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    };
    // plangate's own listen stream opens when the upstream connects; give
    // the change a few tries to find it open.
    let mut heard = false;
    for _ in 0..20 {
        let answer = trigger().await;
        assert!(answer.contains("Mutation triggered"), "{answer}");
        if let Ok(Ok(Some(rmcp::model::ServerNotification::ToolListChangedNotification(_)))) =
            tokio::time::timeout(Duration::from_millis(500), listening.next()).await
        {
            heard = true;
            break;
        }
    }
    assert!(heard, "{}", gw.log());
    drop(listening);
    let _ = client.cancel().await;
}
