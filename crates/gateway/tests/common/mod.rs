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
use serde_json::json;
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
    pub elicit: bool,
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
        let text = serde_json::to_string(&request).unwrap();
        assert!(text.contains("favourite colour"), "{text}");
        Ok(ElicitResult::new(ElicitationAction::Accept).with_content(json!({"colour": "teal"})))
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
