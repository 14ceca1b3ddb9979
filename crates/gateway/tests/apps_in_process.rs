//! The MCP Apps view over real MCP (docs/design.md §7): the extension capability,
//! the plan tools' nested `_meta.ui`, the view resource in `resources/list`
//! and its `resources/read` answer — each exactly as specified, and each
//! equal to what `plangate catalog` publishes (digests included).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use plangate_config::Namespace;
use plangate_core::Scope;
use plangate_gateway::apps::{self, VIEW_HTML, VIEW_URI};
use rmcp::model::{ReadResourceRequestParams, ResourceContents};
use serde_json::{Value, json};

const VIEW_META: &str =
    r#"{"ui":{"resourceUri":"ui://plangate/plan-review","visibility":["model"]}}"#;

#[tokio::test]
async fn the_view_capability_tool_meta_and_resource_are_exactly_as_published() {
    let (dir, store, token) = temp_store(Scope::Write).await;
    let (site, _) = in_process("site", demo(dir.path().join("site.json")));
    let config = config(&["site"], Namespace::Auto);
    let catalog = apps::catalog(&config);
    let gw = start(config, store, vec![("site", site)]).await;
    let client = client_of(gw.clone(), Some(token), Seen::default()).await;

    // The server extension capability, exactly.
    let info = client.peer().peer_info().expect("server info");
    let caps = serde_json::to_value(&info.capabilities).unwrap();
    assert_eq!(
        caps["extensions"],
        json!({"io.modelcontextprotocol/ui": {"mimeTypes": ["text/html;profile=mcp-app"]}})
    );
    assert_eq!(caps, catalog["contract"]["capabilities"]);

    // The plan tools link the view through the nested key only; the other
    // gateway tools and every upstream tool carry no `_meta.ui`.
    call(&client, "plangate_begin_session", json!({"mode": "plan"})).await;
    let tools = client.peer().list_all_tools().await.unwrap();
    let expected_meta: Value = serde_json::from_str(VIEW_META).unwrap();
    let mut linked = Vec::new();
    for tool in &tools {
        let t = serde_json::to_value(tool).unwrap();
        let name = tool.name.to_string();
        assert!(
            t["_meta"].get("ui/resourceUri").is_none(),
            "{name} uses the deprecated flat key"
        );
        if [
            "plangate_get_plan",
            "plangate_apply_plan",
            "plangate_exit_plan_mode",
        ]
        .contains(&name.as_str())
        {
            // get_plan alone is also the view's to call (a read).
            let mut expected = expected_meta.clone();
            if name == "plangate_get_plan" {
                expected["ui"]["visibility"] = json!(["model", "app"]);
            }
            assert_eq!(t["_meta"], expected, "{name}");
            linked.push(name);
        } else {
            assert!(
                t["_meta"].get("ui").is_none(),
                "{name} must not link the view"
            );
        }
    }
    assert_eq!(linked.len(), 3, "{linked:?}");

    // The gateway tools the server lists (in plan mode: all of them) are
    // the catalog's, byte for byte.
    let gateway_tools: Vec<Value> = tools
        .iter()
        .filter(|t| t.name.starts_with("plangate_"))
        .map(|t| serde_json::to_value(t).unwrap())
        .collect();
    assert_eq!(
        Value::Array(gateway_tools),
        catalog["contract"]["tools"],
        "the listed gateway tools differ from `plangate catalog`"
    );

    // The resource is listed next to the upstream's, with empty CSP and
    // permission metadata.
    let resources = client.peer().list_all_resources().await.unwrap();
    let view: Vec<Value> = resources
        .iter()
        .filter(|r| r.uri == VIEW_URI)
        .map(|r| serde_json::to_value(r).unwrap())
        .collect();
    assert_eq!(view.len(), 1, "the view is listed once");
    assert!(
        resources.len() > 1,
        "the upstream's resources are still listed"
    );
    let view = &view[0];
    assert_eq!(view["mimeType"], "text/html;profile=mcp-app");
    assert_eq!(
        view["_meta"]["ui"]["csp"],
        json!({"connectDomains": [], "resourceDomains": [], "frameDomains": [], "baseUriDomains": []})
    );
    assert_eq!(view["_meta"]["ui"]["permissions"], json!({}));
    assert_eq!(view["size"], json!(VIEW_HTML.len()));
    assert_eq!(json!([view]), catalog["contract"]["resources"]);

    // Reading it answers the exact bytes, whose digest is the catalog's.
    let read = client
        .peer()
        .read_resource(ReadResourceRequestParams::new(VIEW_URI))
        .await
        .unwrap();
    assert_eq!(read.contents.len(), 1);
    let ResourceContents::TextResourceContents {
        uri,
        mime_type,
        text,
        meta,
    } = &read.contents[0]
    else {
        panic!("the view is served as text");
    };
    assert_eq!(uri, VIEW_URI);
    assert_eq!(mime_type.as_deref(), Some("text/html;profile=mcp-app"));
    assert_eq!(text, VIEW_HTML);
    assert_eq!(
        serde_json::to_value(meta).unwrap()["ui"]["csp"]["connectDomains"],
        json!([])
    );
    assert_eq!(
        catalog["digests"]["html"],
        json!(apps::sha256(text.as_bytes()))
    );
    let response = serde_json::to_value(&read).unwrap();
    assert_eq!(response, catalog["contract"]["resource_reads"][VIEW_URI]);
    assert_eq!(
        catalog["digests"]["resource_response"],
        json!(apps::sha256(apps::canonical(&response).as_bytes()))
    );

    // An upstream resource still routes to its upstream.
    let other = resources.iter().find(|r| r.uri != VIEW_URI).unwrap();
    let read = client
        .peer()
        .read_resource(ReadResourceRequestParams::new(other.uri.clone()))
        .await
        .unwrap();
    assert!(!read.contents.is_empty());
    gw.shutdown().await;
}

#[tokio::test]
async fn the_catalog_names_the_configured_prefix_and_modes() {
    let mut config = config(&[], Namespace::Auto);
    config.gateway.tool_prefix = "pg_".into();
    let doc = apps::catalog(&config);
    let names: Vec<&str> = doc["contract"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "pg_begin_session",
            "pg_get_plan",
            "pg_discard_plan",
            "pg_apply_plan",
            "pg_exit_plan_mode",
            "pg_revert",
            "pg_end_session"
        ]
    );
    assert_eq!(
        doc["contract"]["tools_listed_only_in_plan_mode"],
        json!(["pg_exit_plan_mode"])
    );
    assert_eq!(apps::catalog_json(&config), apps::catalog_json(&config));
}
