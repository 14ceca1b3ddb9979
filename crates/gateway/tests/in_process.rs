//! The gateway in one process: rmcp client ⇄ gateway ⇄ upstreams, every hop
//! over `tokio::io::duplex`. Fast checks of naming, routing and policy.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::Arc;

use plangate_config::{
    Config, ConfigSource, GatewaySettings, Namespace, Transport, UpstreamConfig,
};
use plangate_core::Scope;
use plangate_gateway::{Gateway, GatewayHandler, Upstream};
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, Implementation,
    ListToolsResult, PaginatedRequestParams, ProtocolVersion, ServerCapabilities, ServerConfig,
    Tool, ToolAnnotations,
};
use rmcp::service::{RequestContext, RunningService};
use rmcp::{ErrorData, RoleClient, RoleServer, ServerHandler, ServiceExt};
use serde_json::json;

fn upstream_config(name: &str) -> UpstreamConfig {
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

fn config(names: &[&str], namespace: Namespace) -> Config {
    Config {
        source: ConfigSource::Builtin("test"),
        gateway: GatewaySettings {
            namespace,
            ..GatewaySettings::default()
        },
        upstreams: names
            .iter()
            .map(|n| ((*n).to_owned(), upstream_config(n)))
            .collect(),
    }
}

/// Serves `server` on one end of a duplex and connects an upstream to the
/// other.
async fn in_process_upstream<S: ServerHandler>(config: UpstreamConfig, server: S) -> Upstream {
    let (up_io, server_io) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        if let Ok(running) = server.serve(server_io).await {
            let _ = running.waiting().await;
        }
    });
    Upstream::connect_transport(config, up_io).await.unwrap()
}

async fn client_of(
    gw: Arc<Gateway>,
    token: Option<String>,
) -> RunningService<RoleClient, ClientConfig> {
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        if let Ok(running) = GatewayHandler::stdio(gw, token).serve(server_io).await {
            let _ = running.waiting().await;
        }
    });
    ClientConfig::new(ClientCapabilities::default(), Implementation::new("t", "0"))
        .with_protocol_version(ProtocolVersion::V_2025_11_25)
        .serve(client_io)
        .await
        .unwrap()
}

async fn store_with_key(
    dir: &std::path::Path,
    scope: Scope,
) -> (Arc<dyn plangate_store::Store>, String) {
    let store = plangate_store::open_sqlite(&dir.join("plangate.db"))
        .await
        .unwrap();
    let key = store.create_key("agent", scope).await.unwrap();
    (store, key.token)
}

async fn call(
    client: &RunningService<RoleClient, ClientConfig>,
    tool: &str,
    args: serde_json::Value,
) -> CallToolResult {
    let mut p = CallToolRequestParams::new(tool.to_owned());
    p.arguments = args.as_object().cloned();
    client.peer().call_tool(p).await.unwrap()
}

/// An upstream whose tool names break the rules: one takes a gateway tool's
/// name, one has a space, one is far too long. Each call answers with the
/// name it was called by, so routing back to the original name is visible.
#[derive(Clone)]
struct AwkwardNames;

const LONG: &str =
    "a_tool_name_that_is_much_longer_than_any_client_would_accept_in_a_list_of_tools";

impl ServerHandler for AwkwardNames {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let schema = json!({"type": "object"}).as_object().cloned().unwrap();
        let read = ToolAnnotations::default().read_only(true);
        Ok(ListToolsResult::with_all_items(
            ["plangate_get_plan", "has space", LONG, "plain"]
                .into_iter()
                .map(|n| Tool::new(n, "t", schema.clone()).with_annotations(read.clone()))
                .collect(),
        ))
    }
    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CallToolResponse, ErrorData> {
        Ok(CallToolResult::structured(json!({"called": request.name})).into())
    }
}

#[tokio::test]
async fn awkward_upstream_names_are_exposed_validly_and_route_back_to_the_original() {
    let dir = tempfile::tempdir().unwrap();
    let (store, token) = store_with_key(dir.path(), Scope::Write).await;
    let up = in_process_upstream(upstream_config("odd"), AwkwardNames).await;
    let gw = Gateway::with_upstreams(config(&["odd"], Namespace::Auto), store, vec![up], vec![]);
    let client = client_of(gw, Some(token)).await;
    let tools = client.peer().list_all_tools().await.unwrap();
    let names: Vec<String> = tools.iter().map(|t| t.name.to_string()).collect();
    assert_eq!(names.len(), 4);
    // One upstream: unprefixed, except where a name is reserved or invalid.
    assert!(names.contains(&"plain".to_owned()));
    assert!(
        !names.contains(&"plangate_get_plan".to_owned()),
        "{names:?}"
    );
    for n in &names {
        assert!(
            n.len() <= 64
                && n.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c)),
            "{n}"
        );
    }
    for (exposed, original) in names
        .iter()
        .zip(["plangate_get_plan", "has space", LONG, "plain"])
    {
        let r = call(&client, exposed, json!({})).await;
        assert_eq!(
            r.structured_content.unwrap()["called"],
            original,
            "{exposed}"
        );
    }
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn two_in_process_demo_sites_are_namespaced_and_routed() {
    let dir = tempfile::tempdir().unwrap();
    let (store, token) = store_with_key(dir.path(), Scope::Write).await;
    let site_state = dir.path().join("site.json");
    let blog_state = dir.path().join("blog.json");
    let site = in_process_upstream(
        upstream_config("site"),
        plangate_demo_site::DemoSite::open(&site_state).unwrap(),
    )
    .await;
    let blog = in_process_upstream(
        upstream_config("blog"),
        plangate_demo_site::DemoSite::open(&blog_state).unwrap(),
    )
    .await;
    let gw = Gateway::with_upstreams(
        config(&["site", "blog"], Namespace::Auto),
        store,
        vec![site, blog],
        vec![],
    );
    let catalog = gw.catalog();
    assert!(catalog.namespaced);
    let update = catalog.tool("blog__update_option").unwrap();
    assert_eq!(
        (update.upstream.as_str(), update.original.as_str()),
        ("blog", "update_option")
    );
    assert_eq!(update.effect, plangate_core::Effect::Write);
    assert_eq!(
        catalog.tool("site__delete_page").unwrap().effect,
        plangate_core::Effect::Destructive
    );
    assert_eq!(
        catalog.tool("site__get_page").unwrap().effect,
        plangate_core::Effect::Read
    );

    let client = client_of(gw, Some(token)).await;
    let r = call(
        &client,
        "blog__update_option",
        json!({"name": "tagline", "value": "In process"}),
    )
    .await;
    assert_eq!(r.is_error, Some(false), "{r:?}");
    let blog: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&blog_state).unwrap()).unwrap();
    assert_eq!(blog["options"]["tagline"]["value"], "In process");
    let site: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&site_state).unwrap()).unwrap();
    assert_ne!(site["options"]["tagline"]["value"], "In process");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_read_key_reads_but_its_writes_never_reach_the_upstream() {
    let dir = tempfile::tempdir().unwrap();
    let (store, token) = store_with_key(dir.path(), Scope::Read).await;
    let state = dir.path().join("site.json");
    let site = in_process_upstream(
        upstream_config("site"),
        plangate_demo_site::DemoSite::open(&state).unwrap(),
    )
    .await;
    let gw = Gateway::with_upstreams(
        config(&["site"], Namespace::Auto),
        store,
        vec![site],
        vec![],
    );
    let client = client_of(gw, Some(token)).await;
    assert_eq!(
        call(&client, "get_page", json!({"id": 1})).await.is_error,
        Some(false)
    );
    let before = std::fs::read(&state).unwrap();
    for (tool, args) in [
        ("update_page", json!({"id": 2, "title": "x"})),
        ("delete_page", json!({"id": 3})),
        ("restore_snapshot", json!({"snapshot_id": "snap_1_1"})),
    ] {
        let r = call(&client, tool, args).await;
        assert_eq!(r.is_error, Some(true), "{tool}");
        assert_eq!(r.structured_content.unwrap()["code"], "forbidden", "{tool}");
    }
    assert_eq!(std::fs::read(&state).unwrap(), before);
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_down_upstream_fails_fast_while_the_others_serve() {
    let dir = tempfile::tempdir().unwrap();
    let (store, token) = store_with_key(dir.path(), Scope::Write).await;
    let state = dir.path().join("site.json");
    let site = in_process_upstream(
        upstream_config("site"),
        plangate_demo_site::DemoSite::open(&state).unwrap(),
    )
    .await;
    let failed = plangate_gateway::UpstreamError::Timeout {
        name: "blog".into(),
    };
    let gw = Gateway::with_upstreams(
        config(&["site", "blog"], Namespace::Auto),
        store,
        vec![site],
        vec![failed],
    );
    assert!(gw.down_upstreams().contains_key("blog"));
    let client = client_of(gw, Some(token)).await;
    let names: Vec<String> = client
        .peer()
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    assert!(names.iter().all(|n| n.starts_with("site__")), "{names:?}");
    assert_eq!(
        call(&client, "site__get_page", json!({"id": 1}))
            .await
            .is_error,
        Some(false)
    );
    client.cancel().await.unwrap();
}
