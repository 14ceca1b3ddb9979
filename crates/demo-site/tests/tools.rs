//! The demo site's tools, driven in-process by a real rmcp client over a
//! duplex pipe, checking both the answers and the state file behind them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use plangate_demo_site::{DemoSite, OPERATION_KEY_META, REPLAYED_META};
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ReadResourceRequestParams, RequestMetaObject,
    ResourceContents,
};
use rmcp::service::RunningService;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};

type Client = RunningService<RoleClient, ()>;

struct Harness {
    _dir: tempfile::TempDir,
    path: PathBuf,
    client: Client,
}

async fn connect(path: &Path) -> Client {
    let site = DemoSite::open(path).unwrap();
    let (client_io, server_io) = tokio::io::duplex(1 << 16);
    tokio::spawn(async move {
        if let Ok(running) = site.serve(server_io).await {
            let _ = running.waiting().await;
        }
    });
    ().serve(client_io).await.unwrap()
}

async fn harness() -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("site.json");
    let client = connect(&path).await;
    Harness {
        _dir: dir,
        path,
        client,
    }
}

/// The arguments adding a Team item to the main menu: these tests' menu write.
fn team_item() -> Value {
    json!({"menu": "main", "label": "Team", "url": "/team"})
}

impl Harness {
    /// Calls `tool`, which must succeed; returns its structured content.
    async fn ok(&self, tool: &str, args: Value) -> Value {
        ok(&call(&self.client, tool, args).await)
    }

    /// Calls `tool`, which must fail; returns its structured content.
    async fn err(&self, tool: &str, args: Value) -> Value {
        err(&call(&self.client, tool, args).await)
    }
}

async fn call_with(client: &Client, tool: &str, args: Value, key: Option<&str>) -> CallToolResult {
    let mut params = CallToolRequestParams::new(tool.to_string())
        .with_arguments(args.as_object().unwrap().clone());
    if let Some(key) = key {
        let mut meta = RequestMetaObject::new();
        meta.insert(OPERATION_KEY_META.into(), json!(key));
        params.meta = Some(meta);
    }
    client.call_tool(params).await.unwrap()
}

async fn call(client: &Client, tool: &str, args: Value) -> CallToolResult {
    call_with(client, tool, args, None).await
}

/// Structured content of a successful result, checking the text block too.
fn ok(result: &CallToolResult) -> Value {
    assert_eq!(result.is_error, Some(false), "unexpected error: {result:?}");
    structured(result)
}

/// Structured content of a failed result.
fn err(result: &CallToolResult) -> Value {
    assert_eq!(result.is_error, Some(true), "expected an error: {result:?}");
    structured(result)
}

fn structured(result: &CallToolResult) -> Value {
    let value = result
        .structured_content
        .clone()
        .expect("structuredContent");
    let text = result.content[0]
        .as_text()
        .expect("text block")
        .text
        .clone();
    let from_text: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(from_text, value, "text block must carry the same JSON");
    value
}

fn state(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn page(state: &Value, id: u64) -> &Value {
    state["pages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == id)
        .unwrap()
}

#[tokio::test]
async fn tools_are_listed_with_honest_annotations() {
    let h = harness().await;
    let tools = h.client.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    let reads = [
        "list_pages",
        "get_page",
        "list_menus",
        "list_options",
        "list_plugins",
        "preview_update_page",
        "preview_create_menu_item",
        "preview_update_option",
        "preview_delete_page",
        "preview_restore_snapshot",
    ];
    let writes = [
        "update_page",
        "create_menu_item",
        "update_option",
        "set_plugin_active",
        "restore_snapshot",
    ];
    assert_eq!(tools.len(), reads.len() + writes.len() + 1, "{names:?}");
    for tool in &tools {
        let a = tool.annotations.as_ref().expect("annotations");
        assert!(tool.title.is_some(), "{} has no title", tool.name);
        assert!(a.title.is_some(), "{} has no annotation title", tool.name);
        assert_eq!(a.open_world_hint, Some(false), "{}", tool.name);
        let name = tool.name.as_ref();
        if reads.contains(&name) {
            assert_eq!(a.read_only_hint, Some(true), "{name}");
        } else if writes.contains(&name) {
            assert_eq!(a.read_only_hint, Some(false), "{name}");
            assert_eq!(a.destructive_hint, Some(false), "{name}");
        } else {
            assert_eq!(name, "delete_page");
            assert_eq!(a.read_only_hint, Some(false));
            assert_eq!(a.destructive_hint, Some(true));
        }
    }
    let info = h.client.peer_info().unwrap();
    assert_eq!(info.server_info.as_ref().unwrap().name, "demo-site");
    assert!(info.instructions.is_some());
}

#[tokio::test]
async fn update_page_creates_a_copy_and_leaves_the_live_page_alone() {
    let h = harness().await;
    let before = page(&state(&h.path), 2).clone();
    let r = h
        .ok("update_page", json!({"id": 2, "title": "Our story"}))
        .await;
    let copy_id = r["copy_id"].as_u64().unwrap();
    assert_eq!(copy_id, 5);
    assert_eq!(r["page_id"], 2);
    assert_eq!(r["changed"], json!(["title"]));
    assert_eq!(r["version"], 1);
    assert_eq!(
        r["preview_url"],
        format!("https://demo-site.example/?preview={copy_id}")
    );

    let s = state(&h.path);
    assert_eq!(page(&s, 2), &before, "live page must not change");
    let copy = page(&s, copy_id);
    assert_eq!(copy["title"], "Our story");
    assert_eq!(copy["body"], "We are a small team.");
    assert_eq!(copy["status"], "draft");
    assert_eq!(copy["copy_of"], 2);
    assert_eq!(s["calls"]["update_page"], 1);

    // the live page as the get_page tool sees it
    let live = h.ok("get_page", json!({"id": 2})).await;
    assert_eq!(live["title"], "About");
    // and list_pages shows both
    let drafts = h.ok("list_pages", json!({"status": "draft"})).await;
    let ids: Vec<u64> = drafts["pages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_u64().unwrap())
        .collect();
    assert_eq!(ids, vec![3, copy_id]);
}

#[tokio::test]
async fn update_page_without_changes_is_a_tool_error() {
    let h = harness().await;
    let bytes = std::fs::read(&h.path).unwrap();
    let e = h.err("update_page", json!({"id": 2})).await;
    assert_eq!(e["code"], "invalid_arguments");
    assert_eq!(std::fs::read(&h.path).unwrap(), bytes);
}

#[tokio::test]
async fn create_menu_item_is_live() {
    let h = harness().await;
    let r = h.ok("create_menu_item", team_item()).await;
    assert_eq!(r["menu_item_id"], 4);
    assert_eq!(r["menu"], "main");
    assert_eq!(r["link"], "/team");
    let menus = h.ok("list_menus", json!({})).await;
    let items = menus["menus"][0]["items"].as_array().unwrap();
    assert_eq!(items.len(), 4);
    assert_eq!(items[3], json!({"id": 4, "label": "Team", "url": "/team"}));
    assert_eq!(menus["menus"][0]["version"], 2);
}

#[tokio::test]
async fn update_option_and_plugin_are_live() {
    let h = harness().await;
    let r = h
        .ok(
            "update_option",
            json!({"name": "tagline", "value": "Now with plans"}),
        )
        .await;
    assert_eq!(
        r,
        json!({"option": "tagline", "old_value": "Just another demo site", "new_value": "Now with plans"})
    );
    let r = h
        .ok(
            "set_plugin_active",
            json!({"slug": "forms", "active": true}),
        )
        .await;
    assert_eq!(
        r,
        json!({"plugin": "forms", "active": true, "was_active": false})
    );
    let s = state(&h.path);
    assert_eq!(s["options"]["tagline"]["value"], "Now with plans");
    assert_eq!(s["plugins"]["forms"]["active"], true);
}

#[tokio::test]
async fn delete_then_restore_round_trip() {
    let h = harness().await;
    let original = page(&state(&h.path), 3).clone();
    let r = h.ok("delete_page", json!({"id": 3})).await;
    assert_eq!(r["page_id"], 3);
    assert_eq!(r["status"], "trash");
    let snap = r["snapshot_id"].as_str().unwrap().to_string();
    assert_eq!(snap, "snap_3_1");
    assert_eq!(page(&state(&h.path), 3)["status"], "trash");

    // deleting again is a clear tool error, not a second snapshot
    let e = h.err("delete_page", json!({"id": 3})).await;
    assert_eq!(e["code"], "conflict");
    assert!(e["message"].as_str().unwrap().contains("page 3"));

    let r = h.ok("restore_snapshot", json!({"snapshot_id": snap})).await;
    assert_eq!(r["page_id"], 3);
    assert_eq!(r["restored"], true);
    let restored = page(&state(&h.path), 3).clone();
    for field in ["title", "slug", "body", "status", "copy_of"] {
        assert_eq!(restored[field], original[field], "{field}");
    }
    assert!(restored["version"].as_u64().unwrap() > original["version"].as_u64().unwrap());
}

#[tokio::test]
async fn previews_change_nothing() {
    let h = harness().await;
    let bytes = std::fs::read(&h.path).unwrap();
    let p = h
        .ok(
            "preview_update_page",
            json!({"id": 2, "title": "Our story"}),
        )
        .await;
    assert_eq!(
        p,
        json!({
            "effect": "Update page 2 (About): title \"About\" → \"Our story\"; lands on a new draft copy.",
            "target": "2", "target_version": 1, "lands_on": "copy"
        })
    );
    let p = h.ok("preview_create_menu_item", team_item()).await;
    assert_eq!(p["target"], "main");
    assert_eq!(p["lands_on"], "live");
    assert_eq!(p["target_version"], 1);
    let p = h
        .ok(
            "preview_update_option",
            json!({"name": "posts_per_page", "value": 20}),
        )
        .await;
    assert_eq!(p["target"], "posts_per_page");
    assert!(p["effect"].as_str().unwrap().contains("10 → 20"));
    let p = h.ok("preview_delete_page", json!({"id": 3})).await;
    assert_eq!(p["target"], "3");
    assert_eq!(p["lands_on"], "live");
    for tool in ["list_pages", "list_menus", "list_options", "list_plugins"] {
        h.ok(tool, json!({})).await;
    }
    assert_eq!(
        std::fs::read(&h.path).unwrap(),
        bytes,
        "reads must not touch the file"
    );

    // a preview of a missing target is a tool error
    let e = h.err("preview_delete_page", json!({"id": 99})).await;
    assert_eq!(e["code"], "not_found");
    let e = h
        .err("preview_update_option", json!({"name": "nope", "value": 1}))
        .await;
    assert!(e["message"].as_str().unwrap().contains("nope"));
}

#[tokio::test]
async fn unknown_targets_are_tool_errors_naming_the_value() {
    let h = harness().await;
    let bytes = std::fs::read(&h.path).unwrap();
    let cases = [
        ("get_page", json!({"id": 99}), "99"),
        ("update_page", json!({"id": 99, "title": "x"}), "99"),
        ("delete_page", json!({"id": 99}), "99"),
        (
            "create_menu_item",
            json!({"menu": "footer", "label": "x", "url": "/x"}),
            "footer",
        ),
        (
            "update_option",
            json!({"name": "colour", "value": "red"}),
            "colour",
        ),
        (
            "set_plugin_active",
            json!({"slug": "cache", "active": true}),
            "cache",
        ),
        (
            "restore_snapshot",
            json!({"snapshot_id": "snap_9_9"}),
            "snap_9_9",
        ),
    ];
    for (tool, args, culprit) in cases {
        let e = h.err(tool, args).await;
        assert_eq!(e["code"], "not_found", "{tool}");
        let message = e["message"].as_str().unwrap();
        assert!(message.contains(culprit), "{tool}: {message}");
        assert_eq!(message, message.to_lowercase(), "{tool}: lowercase message");
    }
    assert_eq!(
        std::fs::read(&h.path).unwrap(),
        bytes,
        "errors write nothing"
    );

    // an argument of the wrong type: rmcp 3.11 answers an isError result
    // (argument validation is a tool error), never a panic
    let bad = h
        .client
        .call_tool(
            CallToolRequestParams::new("get_page")
                .with_arguments(json!({"id": "two"}).as_object().unwrap().clone()),
        )
        .await
        .unwrap();
    assert_eq!(bad.is_error, Some(true));
    // and the server is still there afterwards
    h.ok("get_page", json!({"id": 1})).await;
}

#[tokio::test]
async fn same_operation_key_applies_once() {
    let h = harness().await;
    let args = team_item();
    let first = call_with(&h.client, "create_menu_item", args.clone(), Some("step_1")).await;
    let second = call_with(&h.client, "create_menu_item", args.clone(), Some("step_1")).await;
    assert_eq!(ok(&first), ok(&second));
    assert!(first.meta.is_none());
    assert_eq!(
        second.meta.as_ref().unwrap().get(REPLAYED_META),
        Some(&json!(true))
    );
    let s = state(&h.path);
    assert_eq!(s["calls"]["create_menu_item"], 1);
    assert_eq!(s["menus"]["main"]["items"].as_array().unwrap().len(), 4);
    assert_eq!(s["operations"]["step_1"]["result"], ok(&first));

    // a different key applies again
    call_with(&h.client, "create_menu_item", args, Some("step_2")).await;
    assert_eq!(state(&h.path)["calls"]["create_menu_item"], 2);

    // the same key on another tool is refused, nothing applied
    let e = err(&call_with(
        &h.client,
        "update_option",
        json!({"name": "tagline", "value": "x"}),
        Some("step_1"),
    )
    .await);
    assert_eq!(e["code"], "conflict");
    assert!(state(&h.path)["calls"].get("update_option").is_none());
}

#[tokio::test]
async fn state_survives_reopening() {
    let h = harness().await;
    let r = h
        .ok("update_page", json!({"id": 2, "body": "We plan first."}))
        .await;
    let copy_id = r["copy_id"].as_u64().unwrap();
    ok(&call_with(
        &h.client,
        "update_option",
        json!({"name": "site_title", "value": "Plans"}),
        Some("op_a"),
    )
    .await);
    h.client.cancel().await.unwrap();

    let again = connect(&h.path).await;
    let copy = ok(&call(&again, "get_page", json!({"id": copy_id})).await);
    assert_eq!(copy["body"], "We plan first.");
    let options = ok(&call(&again, "list_options", json!({})).await);
    let title = options["options"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["name"] == "site_title")
        .unwrap();
    assert_eq!(title["value"], "Plans");
    // the operation key is remembered across restarts too
    let replay = call_with(
        &again,
        "update_option",
        json!({"name": "site_title", "value": "Plans"}),
        Some("op_a"),
    )
    .await;
    assert_eq!(ok(&replay)["old_value"], "Demo Site");
    assert_eq!(state(&h.path)["calls"]["update_option"], 1);
}

#[tokio::test]
async fn corrupt_state_file_is_an_error_not_a_reseed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("site.json");
    std::fs::write(&path, b"{ not json").unwrap();
    let e = DemoSite::open(&path).unwrap_err();
    assert!(e.to_string().contains("not a valid demo-site state"), "{e}");
    assert_eq!(std::fs::read(&path).unwrap(), b"{ not json");
}

#[tokio::test]
async fn a_state_file_in_a_directory_not_made_yet_is_seeded_there() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data/dir/site.json");
    DemoSite::open(&path).unwrap();
    assert!(state(&path)["pages"].is_array() || state(&path)["pages"].is_object());
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join("data/dir"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
    }
}

#[tokio::test]
async fn pages_are_readable_as_resources() {
    let h = harness().await;
    let resources = h.client.list_all_resources().await.unwrap();
    assert_eq!(resources.len(), 4);
    let r = h
        .client
        .read_resource(ReadResourceRequestParams::new("site://pages/2"))
        .await
        .unwrap();
    let ResourceContents::TextResourceContents { text, .. } = &r.contents[0] else {
        panic!("expected text contents");
    };
    let page: Value = serde_json::from_str(text).unwrap();
    assert_eq!(page["title"], "About");
    assert!(
        h.client
            .read_resource(ReadResourceRequestParams::new("site://pages/99"))
            .await
            .is_err()
    );
}
