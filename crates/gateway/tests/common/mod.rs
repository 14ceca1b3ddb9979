//! In-process harness: rmcp client ⇄ gateway ⇄ upstreams over
//! `tokio::io::duplex`, shared by the gateway's integration tests.
#![allow(dead_code, unused_imports, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use plangate_config::{
    Config, ConfigSource, GatewaySettings, Namespace, Transport, UpstreamConfig,
};
use plangate_core::Scope;
use plangate_gateway::upstream::connector_from;
use plangate_gateway::{Connector, Gateway, GatewayHandler, UpstreamError};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, ClientConfig,
    ElicitRequestParams, ElicitResult, ElicitationAction, Implementation, ListToolsResult,
    PaginatedRequestParams, ProgressNotificationParam, ProtocolVersion, ServerCapabilities,
    ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::{NotificationContext, RequestContext, RunningService};
use rmcp::{ClientHandler, ErrorData, RoleClient, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

pub fn upstream_config(name: &str) -> UpstreamConfig {
    UpstreamConfig {
        name: name.into(),
        transport: Transport::Stdio {
            command: "in-process".into(),
            args: vec![],
            env: BTreeMap::new(),
            cwd: None,
        },
        trust_annotations: true,
        enabled: true,
        call_timeout: plangate_config::DEFAULT_CALL_TIMEOUT,
        tools: BTreeMap::new(),
    }
}

pub fn config(names: &[&str], namespace: Namespace) -> Config {
    Config {
        source: ConfigSource::Builtin("test"),
        gateway: GatewaySettings {
            namespace,
            ..GatewaySettings::default()
        },
        modes: plangate_core::Modes::default(),
        upstreams: names
            .iter()
            .map(|n| ((*n).to_owned(), upstream_config(n)))
            .collect(),
        redaction: plangate_config::Redaction::default(),
    }
}

/// A connector that serves a fresh `make()` server over a duplex on every
/// connection, and keeps each server's cancellation token so a test can
/// "crash" it.
pub fn in_process<S, F>(name: &str, make: F) -> (Connector, Arc<Mutex<Vec<CancellationToken>>>)
where
    S: ServerHandler,
    F: Fn() -> S + Send + Sync + 'static,
{
    let sessions: Arc<Mutex<Vec<CancellationToken>>> = Arc::default();
    let kept = sessions.clone();
    let make = Arc::new(make);
    let connector = connector_from(name, move || {
        let make = make.clone();
        let sessions = kept.clone();
        async move {
            let (up_io, server_io) = tokio::io::duplex(64 * 1024);
            let server = make();
            let ct = CancellationToken::new();
            sessions.lock().unwrap().push(ct.clone());
            tokio::spawn(async move {
                if let Ok(running) = server.serve(server_io).await {
                    let stop = running.cancellation_token();
                    tokio::select! {
                        _ = running.waiting() => {}
                        () = ct.cancelled() => stop.cancel(),
                    }
                }
            });
            up_io
        }
    });
    (connector, sessions)
}

pub fn material() -> plangate_store::KeyMaterial {
    plangate_store::KeyMaterial::new([7; 32], [9; 32])
}

pub fn failing(name: &str) -> Connector {
    let name = name.to_owned();
    Arc::new(move |_client| {
        let name = name.clone();
        Box::pin(async move { Err(UpstreamError::Timeout { name }) })
    })
}

/// What the test client saw from the gateway.
#[derive(Clone, Default)]
pub struct Seen {
    pub list_changed: Arc<AtomicUsize>,
    pub progress: Arc<Mutex<Vec<ProgressNotificationParam>>>,
    /// Declares form elicitation.
    pub elicit: bool,
    /// How to answer a question: `(action, content)`; `None` answers the
    /// upstream colour question of the `Lively` server.
    pub reply: Arc<Mutex<Option<(String, Value)>>>,
    /// Every question asked, in order.
    pub questions: Arc<Mutex<Vec<String>>>,
    /// When set, a question waits for this before it is answered.
    pub gate: Option<Arc<tokio::sync::Notify>>,
    /// When set, a question is answered only after this long.
    pub delay: Option<Duration>,
}

impl Seen {
    /// A client that declares elicitation and answers every question with
    /// `action` and `content`.
    pub fn answering(action: &str, content: Value) -> Seen {
        Seen {
            elicit: true,
            reply: Arc::new(Mutex::new(Some((action.to_owned(), content)))),
            ..Seen::default()
        }
    }
}

impl ClientHandler for Seen {
    fn get_info(&self) -> ClientConfig {
        let caps = if self.elicit {
            serde_json::from_value(json!({"elicitation": {"form": {}}})).unwrap()
        } else {
            ClientCapabilities::default()
        };
        ClientConfig::new(caps, Implementation::new("t", "0"))
            .with_protocol_version(ProtocolVersion::V_2025_11_25)
    }
    async fn on_tool_list_changed(&self, _: NotificationContext<RoleClient>) {
        self.list_changed.fetch_add(1, Ordering::SeqCst);
    }
    async fn on_progress(&self, p: ProgressNotificationParam, _: NotificationContext<RoleClient>) {
        self.progress.lock().unwrap().push(p);
    }
    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let text = serde_json::to_value(&request).unwrap();
        let message = text["message"].as_str().unwrap_or_default().to_owned();
        self.questions.lock().unwrap().push(message.clone());
        if let Some(gate) = &self.gate {
            gate.notified().await;
        }
        if let Some(delay) = self.delay {
            tokio::time::sleep(delay).await;
        }
        let reply = self.reply.lock().unwrap().clone();
        match reply {
            None => {
                assert!(message.contains("favourite colour"), "{message}");
                Ok(ElicitResult::new(ElicitationAction::Accept)
                    .with_content(json!({"colour": "teal"})))
            }
            Some((action, content)) => {
                let action = match action.as_str() {
                    "accept" => ElicitationAction::Accept,
                    "decline" => ElicitationAction::Decline,
                    _ => ElicitationAction::Cancel,
                };
                let accept = action == ElicitationAction::Accept;
                let mut r = ElicitResult::new(action);
                if accept {
                    r = r.with_content(content);
                }
                Ok(r)
            }
        }
    }
}

pub async fn client_of(
    gw: Arc<Gateway>,
    token: Option<String>,
    seen: Seen,
) -> RunningService<RoleClient, Seen> {
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        if let Ok(running) = GatewayHandler::stdio(gw, token).serve(server_io).await {
            let _ = running.waiting().await;
        }
    });
    seen.serve(client_io).await.unwrap()
}

pub async fn store_with_key(
    dir: &std::path::Path,
    scope: Scope,
) -> (Arc<dyn plangate_store::Store>, String) {
    let store = plangate_store::open_sqlite(&dir.join("plangate.db"))
        .await
        .unwrap();
    let key = store.create_key("agent", scope).await.unwrap();
    (store, key.token)
}

pub async fn call(
    client: &RunningService<RoleClient, Seen>,
    tool: &str,
    args: serde_json::Value,
) -> CallToolResult {
    let mut p = CallToolRequestParams::new(tool.to_owned());
    p.arguments = args.as_object().cloned();
    client.peer().call_tool(p).await.unwrap()
}

/// The names of the upstream tools a client sees (the gateway's own tools
/// left out).
pub async fn names(client: &RunningService<RoleClient, Seen>) -> Vec<String> {
    all_names(client)
        .await
        .into_iter()
        .filter(|n| {
            !plangate_gateway::GATEWAY_TOOLS
                .iter()
                .any(|t| *n == format!("plangate_{t}"))
        })
        .collect()
}

/// Every tool name a client sees.
pub async fn all_names(client: &RunningService<RoleClient, Seen>) -> Vec<String> {
    client
        .peer()
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name.to_string())
        .collect()
}

pub async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    for _ in 0..500 {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}");
}

pub fn demo(
    state: std::path::PathBuf,
) -> impl Fn() -> plangate_demo_site::DemoSite + Send + Sync + 'static {
    move || plangate_demo_site::DemoSite::open(&state).unwrap()
}

// === a recording upstream ===

/// Every call the recording upstream received: tool, arguments, `_meta`.
pub type Calls = Arc<Mutex<Vec<(String, Value, Value)>>>;

/// An upstream that records what it is sent. `record` answers at once;
/// `slow {ms}` answers after a while; `hang` never answers. All are writes.
/// `typed` is a write with an output schema; `lookup` a read with one.
#[derive(Clone, Default)]
pub struct Recorder {
    pub calls: Calls,
}

impl ServerHandler for Recorder {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let open = json!({"type": "object"}).as_object().cloned().unwrap();
        let out = json!({"type": "object", "properties": {"ok": {"type": "boolean"}}})
            .as_object()
            .cloned()
            .unwrap();
        let write = ToolAnnotations::default()
            .read_only(false)
            .destructive(false);
        let read = ToolAnnotations::default().read_only(true);
        Ok(ListToolsResult::with_all_items(vec![
            Tool::new("record", "records its call", open.clone()).with_annotations(write.clone()),
            Tool::new("slow", "answers after ms", open.clone()).with_annotations(write.clone()),
            Tool::new("hang", "never answers", open.clone()).with_annotations(write.clone()),
            Tool::new("typed", "a write with an output schema", open.clone())
                .with_annotations(write)
                .with_raw_output_schema(Arc::new(out.clone())),
            Tool::new("lookup", "a read with an output schema", open)
                .with_annotations(read)
                .with_raw_output_schema(Arc::new(out)),
        ]))
    }
    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = Value::Object(request.arguments.clone().unwrap_or_default());
        let meta = serde_json::to_value(&cx.meta).unwrap_or(Value::Null);
        self.calls
            .lock()
            .unwrap()
            .push((request.name.to_string(), args.clone(), meta));
        match request.name.as_ref() {
            "slow" => {
                let ms = args["ms"].as_u64().unwrap_or(100);
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
            "hang" => tokio::time::sleep(Duration::from_secs(600)).await,
            _ => {}
        }
        Ok(CallToolResult::structured(json!({"ok": true})).into())
    }
}

pub fn calls_of(calls: &Calls, tool: &str) -> Vec<(Value, Value)> {
    calls
        .lock()
        .unwrap()
        .iter()
        .filter(|(t, _, _)| t == tool)
        .map(|(_, a, m)| (a.clone(), m.clone()))
        .collect()
}

/// A client that speaks 2026-07-28 (discovery, no initialize).
pub async fn modern_client_of<C: ClientHandler + Clone>(
    gw: Arc<Gateway>,
    token: &str,
    handler: C,
) -> RunningService<RoleClient, C> {
    use rmcp::service::ClientServiceExt as _;
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let token = token.to_owned();
    tokio::spawn(async move {
        if let Ok(running) = GatewayHandler::stdio(gw, Some(token))
            .serve(server_io)
            .await
        {
            let _ = running.waiting().await;
        }
    });
    let client = handler
        .serve_with_lifecycle(
            client_io,
            rmcp::ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .unwrap();
    assert_eq!(
        client.peer().peer_info().unwrap().protocol_version,
        ProtocolVersion::V_2026_07_28
    );
    client
}
