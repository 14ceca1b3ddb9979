//! The real `demo-site` binary over stdio and Streamable HTTP, and the
//! library's `serve_http`, each driven by an rmcp client.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Stdio;
use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::{ConfigureCommandExt, StreamableHttpClientTransport, TokioChildProcess};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio_util::sync::CancellationToken;

fn args(v: Value) -> rmcp::model::JsonObject {
    v.as_object().unwrap().clone()
}

#[tokio::test]
async fn binary_serves_stdio() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("site.json");
    let cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_demo-site")).configure(|c| {
        c.arg("--state").arg(&path);
    });
    let (transport, _stderr) = TokioChildProcess::builder(cmd)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let client = ().serve(transport).await.unwrap();
    let info = client.peer_info().unwrap();
    assert_eq!(info.server_info.as_ref().unwrap().name, "demo-site");
    let tools = client.list_all_tools().await.unwrap();
    assert_eq!(tools.len(), 16);
    let r = client
        .call_tool(
            CallToolRequestParams::new("update_page")
                .with_arguments(args(json!({"id": 2, "title": "Our story"}))),
        )
        .await
        .unwrap();
    assert_eq!(r.is_error, Some(false));
    assert_eq!(r.structured_content.unwrap()["copy_id"], 5);
    client.cancel().await.unwrap();

    let state: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(state["calls"]["update_page"], 1);
    assert_eq!(state["pages"][1]["title"], "About");
}

#[tokio::test]
async fn binary_serves_http_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("site.json");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_demo-site"))
        .arg("--state")
        .arg(&path)
        .arg("--http")
        .arg("127.0.0.1:0")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let url = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some(rest) = line.strip_prefix("demo-site listening on ") {
                return rest.to_string();
            }
        }
        panic!("binary exited without announcing its address");
    })
    .await
    .unwrap();
    assert!(
        url.starts_with("http://127.0.0.1:") && url.ends_with("/mcp"),
        "{url}"
    );

    let client = ().serve(StreamableHttpClientTransport::from_uri(url)).await.unwrap();
    let r = client
        .call_tool(
            CallToolRequestParams::new("create_menu_item").with_arguments(args(
                json!({"menu": "main", "label": "Team", "url": "/team"}),
            )),
        )
        .await
        .unwrap();
    assert_eq!(r.structured_content.unwrap()["menu_item_id"], 4);
    client.cancel().await.unwrap();

    let pid = child.id().unwrap();
    let status = std::process::Command::new("kill")
        .arg("-TERM")
        .arg(pid.to_string())
        .status()
        .unwrap();
    assert!(status.success());
    let exit = tokio::time::timeout(Duration::from_secs(15), child.wait())
        .await
        .expect("demo-site did not stop on SIGTERM")
        .unwrap();
    assert!(exit.success(), "{exit:?}");
    let state: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(state["calls"]["create_menu_item"], 1);
}

#[tokio::test]
async fn serve_http_stops_when_cancelled_with_a_session_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("site.json");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let server = tokio::spawn(plangate_demo_site::serve_http(
        listener,
        path.clone(),
        shutdown.clone(),
    ));
    let client = ()
        .serve(StreamableHttpClientTransport::from_uri(format!(
            "http://{addr}/mcp"
        )))
        .await
        .unwrap();
    let r = client
        .call_tool(CallToolRequestParams::new("get_page").with_arguments(args(json!({"id": 2}))))
        .await
        .unwrap();
    assert_eq!(r.structured_content.unwrap()["title"], "About");

    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(15), server)
        .await
        .expect("serve_http did not stop")
        .unwrap()
        .unwrap();
    drop(client);
}
