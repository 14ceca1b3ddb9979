//! End to end: an rmcp client → a real `plangate` process (stdio and HTTP)
//! → real demo-site upstreams (one over stdio, one over HTTP).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use serde_json::json;

/// A JSON-RPC POST to plangate's `/mcp` with `token`, in `session` once
/// there is one (with the protocol version header it then needs).
fn mcp_post(
    http: &reqwest::Client,
    url: &str,
    token: &str,
    session: Option<&str>,
    body: impl Into<reqwest::Body>,
) -> reqwest::RequestBuilder {
    mcp_post_as(http, url, Some(token), session, body)
}

/// [`mcp_post`] with an optional key (`None`: an anonymous caller).
fn mcp_post_as(
    http: &reqwest::Client,
    url: &str,
    token: Option<&str>,
    session: Option<&str>,
    body: impl Into<reqwest::Body>,
) -> reqwest::RequestBuilder {
    let mut request = http.post(url);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let request = request
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body);
    match session {
        Some(session) => request
            .header("mcp-session-id", session)
            .header("mcp-protocol-version", "2025-11-25"),
        None => request,
    }
}

/// The `initialize` request of a client without capabilities.
const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#;

/// Posts `init` for `token`; returns the answer's status and the session it opened.
async fn open_session(
    http: &reqwest::Client,
    url: &str,
    token: &str,
    init: &'static str,
) -> (reqwest::StatusCode, String) {
    let init = mcp_post(http, url, token, None, init).send().await.unwrap();
    let status = init.status();
    let session = session_id(&init);
    let _ = init.text().await;
    (status, session)
}

/// The `mcp-session-id` an answer carries.
fn session_id(response: &reqwest::Response) -> String {
    response.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned()
}

/// Where raw-protocol tests start: a key `name`, the demo served over HTTP, a client.
fn served(name: &str) -> (Scratch, String, Proc, reqwest::Client) {
    let scratch = Scratch::new();
    let key = scratch.create_key(name, "write");
    let gw = serve_http(&scratch, &[]);
    (scratch, key, gw, reqwest::Client::new())
}

/// Writes config `file`: `before`, a demo site over HTTP as upstream `blog`, `after`.
fn with_blog(scratch: &Scratch, file: &str, before: &str, after: &str) -> (Proc, String) {
    let blog = demo_site_http(&scratch.path().join("blog.json"));
    let toml = format!(
        "{before}[upstreams.blog]\nurl = \"{}\"\n{after}",
        blog.url()
    );
    let config = scratch.write(file, &toml);
    (blog, config.to_str().unwrap().to_owned())
}

#[tokio::test]
async fn http_client_sees_namespaced_tools_of_two_upstreams_and_calls_both() {
    // Two upstreams: `site` over stdio and `blog` over HTTP.
    let scratch = Scratch::new();
    let state = scratch.path().join("site.json");
    let site = plangate_upstream("site", &["demo-site", "--state", state.to_str().unwrap()]);
    let blog_tools =
        "trust_annotations = true\n\n[upstreams.blog.tools.list_plugins]\nenabled = false\n";
    let (_blog, config) = with_blog(&scratch, "plangate.toml", &format!("{site}\n"), blog_tools);
    let token = scratch.create_key("agent", "write");
    let gw = serve_http(&scratch, &["--config", &config]);

    let client = http_client(&gw.url(), Some(&token)).await.unwrap();
    let info = client.peer().peer_info().unwrap();
    assert_eq!(info.server_info.as_ref().unwrap().name, "plangate");
    assert_eq!(info.protocol_version.as_str(), "2025-11-25");

    let tools = client.peer().list_all_tools().await.unwrap();
    let names: Vec<String> = tools.iter().map(|t| t.name.to_string()).collect();
    assert!(names.contains(&"site__update_page".to_owned()), "{names:?}");
    assert!(names.contains(&"blog__update_page".to_owned()), "{names:?}");
    assert!(names.iter().all(|n| n.len() <= 64));
    // Disabled by config: not offered.
    assert!(!names.contains(&"blog__list_plugins".to_owned()));
    assert!(names.contains(&"site__list_plugins".to_owned()));
    // Annotations pass through intact.
    let delete = tools
        .iter()
        .find(|t| t.name == "site__delete_page")
        .unwrap();
    let ann = delete.annotations.as_ref().unwrap();
    assert_eq!(ann.destructive_hint, Some(true));
    assert_eq!(ann.read_only_hint, Some(false));

    // A read through each upstream, structured content intact.
    let r = call(&client, "site__get_page", json!({"id": 2}))
        .await
        .unwrap();
    assert_eq!(r.is_error, Some(false));
    assert_eq!(r.structured_content.as_ref().unwrap()["title"], "About");
    let r = call(&client, "blog__list_pages", json!({})).await.unwrap();
    assert!(
        r.structured_content.as_ref().unwrap()["pages"]
            .as_array()
            .unwrap()
            .len()
            >= 4
    );

    // A write with a write key runs on the right upstream only.
    ok(
        &client,
        "blog__create_menu_item",
        menu_item("Services", "/services"),
    )
    .await;
    let labels = menu_labels(&site_state(&scratch.path().join("blog.json")));
    assert!(labels.iter().any(|l| l == "Services"), "{labels:?}");
    let site = site_state(&scratch.path().join("site.json"));
    assert!(!site.to_string().contains("Services"));

    // Upstream tool errors are preserved (isError + the upstream's content).
    let r = call(&client, "site__get_page", json!({"id": 999}))
        .await
        .unwrap();
    assert_eq!(r.is_error, Some(true));
    assert!(r.structured_content.unwrap().to_string().contains("999"));

    // Unknown and disabled tools.
    let err = call(&client, "nope__nothing", json!({})).await.unwrap_err();
    match err {
        rmcp::service::ServiceError::McpError(e) => assert_eq!(e.code.0, -32602),
        other => panic!("expected a JSON-RPC error, got {other:?}"),
    }
    let r = call(&client, "blog__list_plugins", json!({}))
        .await
        .unwrap();
    assert_eq!(r.is_error, Some(true));
    assert_eq!(r.structured_content.unwrap()["code"], "forbidden");

    // Resources are namespaced by the URI rule and readable.
    let resources = client.peer().list_all_resources().await.unwrap();
    let uris: Vec<&str> = resources.iter().map(|r| r.uri.as_str()).collect();
    assert!(uris.contains(&"site://site__pages/2"), "{uris:?}");
    assert!(uris.contains(&"site://blog__pages/2"), "{uris:?}");
    let read = client
        .peer()
        .read_resource(rmcp::model::ReadResourceRequestParams::new(
            "site://blog__pages/2",
        ))
        .await
        .unwrap();
    let text = serde_json::to_string(&read.contents).unwrap();
    assert!(
        text.contains("site://blog__pages/2") && text.contains("About"),
        "{text}"
    );

    client.cancel().await.unwrap();
}

#[tokio::test]
async fn stdio_client_with_a_key_lists_unprefixed_demo_tools_and_calls_them() {
    let scratch = Scratch::new();
    let token = scratch.create_key("agent", "write");
    // No config: the embedded demo site, unprefixed.
    let client = stdio_client(&scratch, &[], Some(&token)).await;
    let names = tool_names(&client).await;
    for expected in [
        "list_pages",
        "get_page",
        "update_page",
        "create_menu_item",
        "update_option",
        "delete_page",
        "restore_snapshot",
        "preview_update_page",
    ] {
        assert!(
            names.contains(&expected.to_owned()),
            "{expected} missing from {names:?}"
        );
    }
    let written = ok(&client, "update_page", our_story()).await;
    let copy_id = written["copy_id"].as_u64().unwrap();
    let state = site_state(&scratch.data_dir().join("demo-site.json"));
    assert_eq!(page(&state, copy_id)["title"], "Our story");
    client.cancel().await.unwrap();
}

/// Node starts a child's stdio as socket pairs rather than pipes (libuv),
/// and plangate reads sockets through the event loop as it does pipes:
/// a client on socket pairs is served the same, and plangate ends when the
/// client hangs up.
#[tokio::test]
async fn a_client_on_socket_pairs_like_node_is_served_over_stdio() {
    use rmcp::ServiceExt;
    use std::os::unix::net::UnixStream;
    let scratch = Scratch::new();
    let token = scratch.create_key("agent", "write");
    let (ours_in, theirs_in) = UnixStream::pair().unwrap();
    let (ours_out, theirs_out) = UnixStream::pair().unwrap();
    let mut child = tokio::process::Command::new(plangate())
        .arg("--data-dir")
        .arg(scratch.data_dir())
        .args(["serve", "--stdio"])
        .current_dir(scratch.path())
        .env_remove("PLANGATE_CONFIG")
        .env("PLANGATE_KEY", &token)
        .stdin(std::process::Stdio::from(std::os::fd::OwnedFd::from(
            theirs_in,
        )))
        .stdout(std::process::Stdio::from(std::os::fd::OwnedFd::from(
            theirs_out,
        )))
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    for s in [&ours_in, &ours_out] {
        s.set_nonblocking(true).unwrap();
    }
    let writer = tokio::net::UnixStream::from_std(ours_in).unwrap();
    let reader = tokio::net::UnixStream::from_std(ours_out).unwrap();
    let client = client_info().serve((reader, writer)).await.unwrap();
    assert!(tool_names(&client).await.contains(&"get_page".to_owned()));
    for i in 0..20 {
        let r = call(&client, "get_page", json!({"id": 1})).await.unwrap();
        assert_eq!(r.is_error, Some(false), "call {i}: {r:?}");
    }
    client.cancel().await.unwrap();
    let status = tokio::time::timeout(std::time::Duration::from_secs(10), child.wait())
        .await
        .expect("plangate ends when its client hangs up")
        .unwrap();
    assert!(status.success(), "{status:?}");
}

#[tokio::test]
async fn a_client_without_a_key_is_told_how_to_create_one() {
    let scratch = Scratch::new();
    // stdio: the session opens, but every list says what to do.
    let client = stdio_client(&scratch, &[], None).await;
    let err = client.peer().list_all_tools().await.unwrap_err();
    let text = err.to_string();
    assert!(text.contains("plangate keys create"), "{text}");
    // Never the variable or a command that approves: the caller may be
    // an agent with a shell (docs/design.md §12).
    assert!(!text.contains("PLANGATE_KEY"), "{text}");
    client.cancel().await.unwrap();

    // HTTP: refused before MCP with 401 and the same advice.
    let gw = serve_http(&scratch, &[]);
    let response = reqwest::Client::new()
        .post(gw.url())
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(INITIALIZE)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    // A challenge that is not OAuth's (plangate has no authorization
    // server), and a JSON-RPC error body clients show as it is.
    let challenge = response.headers()["www-authenticate"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        challenge.starts_with("ApiKey realm=\"plangate\""),
        "{challenge}"
    );
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["jsonrpc"], "2.0", "{body}");
    assert_eq!(body["error"]["code"], -32001, "{body}");
    assert_eq!(body["error"]["data"]["code"], "key_required", "{body}");
    assert!(mentions(&body["error"]["message"], "plangate keys create"));
    assert!(http_client(&gw.url(), None).await.is_err());
    assert!(
        http_client(&gw.url(), Some("pgk_not-a-real-key"))
            .await
            .is_err()
    );
}

#[tokio::test]
async fn a_revoked_key_stops_working_at_its_next_request() {
    let scratch = Scratch::new();
    let token = scratch.create_key("temp", "write");
    let client = stdio_client(&scratch, &[], Some(&token)).await;
    assert!(!tool_names(&client).await.is_empty());
    let out = scratch.run(&["keys", "revoke", "temp"]);
    assert!(out.status.success());
    let err = client.peer().list_all_tools().await.unwrap_err();
    assert!(err.to_string().contains("unknown or revoked"), "{err}");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn scopes_decide_whether_a_write_runs() {
    let scratch = Scratch::new();
    let reader = scratch.create_key("reader", "read");
    let planner = scratch.create_key("planner", "plan");
    let state = scratch.data_dir().join("demo-site.json");

    let client = stdio_client(&scratch, &[], Some(&reader)).await;
    // Reads run.
    let r = call(&client, "list_pages", json!({})).await.unwrap();
    assert_eq!(r.is_error, Some(false));
    let before = std::fs::read(&state).unwrap();
    // Writes are refused `forbidden` and never reach the upstream.
    let r = call(&client, "update_option", tagline("x")).await.unwrap();
    assert_eq!(r.is_error, Some(true));
    assert_eq!(r.structured_content.unwrap()["code"], "forbidden");
    assert_eq!(std::fs::read(&state).unwrap(), before);
    client.cancel().await.unwrap();

    // A plan key's write is planned, never run.
    let client = stdio_client(&scratch, &[], Some(&planner)).await;
    let r = call(&client, "delete_page", json!({"id": 3}))
        .await
        .unwrap();
    assert_eq!(r.is_error, Some(false));
    assert_eq!(r.structured_content.unwrap()["planned"], true);
    assert_eq!(std::fs::read(&state).unwrap(), before);
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn anonymous_reads_when_config_allows_but_never_writes() {
    let scratch = Scratch::new();
    let anonymous = "[gateway]\nanonymous = \"read\"\n\n";
    let (_blog, config) = with_blog(
        &scratch,
        "anon.toml",
        anonymous,
        "trust_annotations = true\n",
    );
    let gw = serve_http(&scratch, &["--config", &config]);
    let client = http_client(&gw.url(), None).await.unwrap();
    let r = call(&client, "get_page", json!({"id": 1})).await.unwrap();
    assert_eq!(r.is_error, Some(false));
    let r = call(&client, "update_option", tagline("x")).await.unwrap();
    assert_eq!(r.is_error, Some(true));
    assert_eq!(r.structured_content.unwrap()["code"], "plan_needs_key");
    // An invalid key is refused, never treated as anonymous.
    assert!(http_client(&gw.url(), Some("pgk_wrong")).await.is_err());
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn untrusted_http_annotations_make_every_tool_destructive_in_config_check() {
    let scratch = Scratch::new();
    let read_override = "\n[upstreams.blog.tools.get_page]\neffect = \"read\"\n";
    let (_blog, config) = with_blog(&scratch, "check.toml", "", read_override);
    let out = scratch.run(&["config", "check", "--json", "--config", &config]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let tools = v["tools"].as_array().unwrap();
    let get = tools.iter().find(|t| t["tool"] == "get_page").unwrap();
    assert_eq!(
        (get["effect"].as_str(), get["effect_source"].as_str()),
        (Some("read"), Some("override"))
    );
    let list = tools.iter().find(|t| t["tool"] == "list_pages").unwrap();
    // Remote annotations are not trusted by default: the spec default applies.
    assert_eq!(
        (list["effect"].as_str(), list["effect_source"].as_str()),
        (Some("destructive"), Some("default"))
    );
}

#[tokio::test]
async fn an_http_session_stays_bound_to_the_key_that_opened_it() {
    let scratch = Scratch::new();
    let a = scratch.create_key("a", "write");
    let b = scratch.create_key("b", "write");
    let gw = serve_http(&scratch, &[]);
    let http = reqwest::Client::new();
    let (status, session) = open_session(&http, &gw.url(), &a, INITIALIZE).await;
    assert_eq!(status, 200);
    let post = |token: &str, body: &'static str| {
        mcp_post(&http, &gw.url(), token, Some(&session), body).send()
    };
    let _ = post(
        &a,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    )
    .await
    .unwrap();
    for (token, list, says) in [
        (
            &b,
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#,
            "session_key_mismatch",
        ),
        (
            &a,
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/list"}"#,
            "update_page",
        ),
    ] {
        let text = post(token, list).await.unwrap().text().await.unwrap();
        assert!(text.contains(says), "{text}");
    }
}

#[tokio::test]
async fn a_2026_client_is_served_2026_07_28_over_http() {
    use rmcp::ClientLifecycleMode;
    use rmcp::service::ClientServiceExt as _;
    let scratch = Scratch::new();
    let token = scratch.create_key("agent", "write");
    let gw = serve_http(&scratch, &[]);
    let config =
        rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
            gw.url(),
        )
        .auth_header(token);
    let transport =
        rmcp::transport::StreamableHttpClientTransport::with_client(reqwest::Client::new(), config);
    let client = rmcp::model::ClientConfig::default()
        .serve_with_lifecycle(
            transport,
            ClientLifecycleMode::Auto {
                preferred_versions: vec![rmcp::model::ProtocolVersion::V_2026_07_28],
                legacy_version: Some(rmcp::model::ProtocolVersion::V_2025_11_25),
            },
        )
        .await
        .unwrap();
    let info = client.peer().peer_info().unwrap();
    assert_eq!(info.protocol_version.as_str(), "2026-07-28");
    let names = tool_names(&client).await;
    assert!(names.contains(&"get_page".to_owned()), "{names:?}");
    let r = call(&client, "get_page", json!({"id": 2})).await.unwrap();
    assert_eq!(r.structured_content.unwrap()["title"], "About");
    client.cancel().await.unwrap();
}

#[test]
fn bad_config_reports_every_error_at_once_and_exits_2() {
    let scratch = Scratch::new();
    let config = scratch.write(
        "bad.toml",
        r#"
[gateway]
anonymous = "everyone"

[upstreams.site]
comand = "x"

[upstreams."bad name"]
url = "ws://nowhere"
"#,
    );
    let out = scratch.run(&["serve", "--config", config.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    for needle in [
        "gateway.anonymous",
        "upstreams.site.comand",
        "bad name",
        "ws://nowhere",
        "bad.toml",
    ] {
        assert!(err.contains(needle), "{needle} not in:\n{err}");
    }
    let sse = scratch.write(
        "mcp.json",
        r#"{"mcpServers": {"old": {"type": "sse", "url": "http://127.0.0.1:1/sse"}}}"#,
    );
    let out = scratch.run(&["serve", "--mcp-config", sse.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .to_lowercase()
            .contains("sse")
    );
}

#[tokio::test]
async fn claude_desktop_json_is_accepted_as_is() {
    let scratch = Scratch::new();
    let token = scratch.create_key("agent", "write");
    let state = scratch.path().join("site.json");
    let json = scratch.write(
        "claude_desktop_config.json",
        &serde_json::to_string_pretty(&json!({
            "mcpServers": {
                "site": {"command": plangate(), "args": ["demo-site", "--state", "${env:SITE_STATE}"]}
            }
        }))
        .unwrap(),
    );
    let data_dir = scratch.data_dir();
    let cmd = tokio::process::Command::new(plangate());
    let client = {
        use rmcp::ServiceExt as _;
        use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
        let cmd = cmd.configure(|c| {
            c.arg("--data-dir")
                .arg(&data_dir)
                .args(["serve", "--mcp-config"])
                .arg(&json);
            c.env("PLANGATE_KEY", &token).env("SITE_STATE", &state);
        });
        let (t, _) = TokioChildProcess::builder(cmd)
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        client_info().serve(t).await.unwrap()
    };
    let names = tool_names(&client).await;
    assert!(names.contains(&"get_page".to_owned()), "{names:?}");
    let r = call(&client, "get_page", json!({"id": 1})).await.unwrap();
    assert_eq!(r.is_error, Some(false));
    assert!(
        state.exists(),
        "the ${{env:SITE_STATE}} path was expanded and used"
    );
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_quick_answer_over_http_is_one_json_body() {
    let (_scratch, key, gw, http) = served("quick");
    let post = |session: Option<&str>, body: &'static str| {
        mcp_post(&http, &gw.url(), &key, session, body).send()
    };
    let init = post(None, INITIALIZE).await.unwrap();
    assert_eq!(init.status(), 200);
    // The session id survives the change of framing.
    let session = session_id(&init);
    assert_eq!(init.headers()["content-type"], "application/json");
    let init: serde_json::Value = init.json().await.unwrap();
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25");
    let initialized = post(
        Some(&session),
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    )
    .await
    .unwrap();
    assert_eq!(initialized.status(), 202);

    // A read through to the demo upstream: one JSON body with its length,
    // exactly the JSON-RPC answer.
    let call = post(
        Some(&session),
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"list_pages","arguments":{}}}"#,
    )
    .await
    .unwrap();
    assert_eq!(call.status(), 200);
    assert_eq!(call.headers()["content-type"], "application/json");
    let length: usize = call.headers()["content-length"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let body = call.bytes().await.unwrap();
    assert_eq!(body.len(), length);
    let answer: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(answer["id"], 2);
    assert_eq!(answer["result"]["isError"], false, "{answer}");

    // An error answer is final too.
    let unknown = post(
        Some(&session),
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"no_such_tool","arguments":{}}}"#,
    )
    .await
    .unwrap();
    assert_eq!(unknown.headers()["content-type"], "application/json");
    let answer: serde_json::Value = unknown.json().await.unwrap();
    assert_eq!(answer["id"], 3);
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown tool")
    );
}

/// Reads an event stream until a message satisfies `wanted`; returns it.
async fn next_message<B: AsRef<[u8]>>(
    stream: &mut (impl futures::Stream<Item = reqwest::Result<B>> + Unpin),
    buffer: &mut String,
    wanted: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    use futures::StreamExt as _;
    loop {
        while let Some(end) = buffer.find("\n\n") {
            let event: String = buffer.drain(..end + 2).collect();
            let data: String = event
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(str::trim_start)
                .collect();
            if let Ok(message) = serde_json::from_str::<serde_json::Value>(&data)
                && wanted(&message)
            {
                return message;
            }
        }
        let chunk = tokio::time::timeout(std::time::Duration::from_secs(20), stream.next())
            .await
            .expect("the stream went quiet")
            .expect("the stream ended")
            .expect("the stream failed");
        buffer.push_str(&String::from_utf8_lossy(chunk.as_ref()));
    }
}

#[tokio::test]
async fn no_other_key_and_no_anonymous_caller_can_answer_cancel_read_or_close_a_session() {
    let scratch = Scratch::new();
    let config = demo_config(&scratch, "[gateway]\nanonymous = \"read\"\n");
    let a = scratch.create_key("victim", "write");
    let b = scratch.create_key("other", "write");
    let gw = serve_http(&scratch, &["--config", &config]);
    let http = reqwest::Client::new();
    let url = gw.url();

    // The victim opens a session that can answer questions, plans a write
    // and asks the person through `exit_plan_mode`.
    let (_, session) = open_session(&http, &url, &a, r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"elicitation":{"form":{}}},"clientInfo":{"name":"victim","version":"0"}}}"#).await;
    let as_a = |body: String| mcp_post(&http, &url, &a, Some(&session), body).send();
    as_a(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.into())
        .await
        .unwrap();
    let begun = as_a(r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"plangate_begin_session","arguments":{"mode":"plan"}}}"#.into()).await.unwrap().text().await.unwrap();
    assert!(begun.contains("\"plan_mode\":true"), "{begun}");
    let planned = as_a(r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"create_menu_item","arguments":{"menu":"main","label":"Team","url":"/team"}}}"#.into()).await.unwrap().text().await.unwrap();
    assert!(planned.contains("plan_step"), "{planned}");
    let asking = as_a(r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"plangate_exit_plan_mode","arguments":{"plan":"Add a Team item to the main menu."}}}"#.into()).await.unwrap();
    let mut stream = Box::pin(asking.bytes_stream());
    let mut buffer = String::new();
    let question = next_message(&mut stream, &mut buffer, |m| {
        m["method"] == "elicitation/create"
    })
    .await;
    let question_id = question["id"].clone();
    let approve = |id: &serde_json::Value| {
        json!({"jsonrpc": "2.0", "id": id, "result": {"action": "accept", "content": {"decision": "approve"}}}).to_string()
    };

    // Another key, and an anonymous caller, knowing the session id: every
    // kind of message is refused before it reaches the session.
    let foreign = [Some(b.as_str()), None];
    for token in foreign {
        let who = if token.is_some() {
            "another key"
        } else {
            "anonymous"
        };
        for body in [
            approve(&question_id),
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":4,"reason":"x"}}"#.to_owned(),
            r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"plangate_get_plan","arguments":{}}}"#.to_owned(),
        ] {
            let r = mcp_post_as(&http, &url, token, Some(&session), body.clone())
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 403, "{who}: {body}");
            let text = r.text().await.unwrap();
            assert!(text.contains("session_key_mismatch"), "{who}: {text}");
        }
        let mut get = http
            .get(&url)
            .header("accept", "text/event-stream")
            .header("mcp-session-id", &session)
            .header("mcp-protocol-version", "2025-11-25");
        let mut delete = http
            .delete(&url)
            .header("mcp-session-id", &session)
            .header("mcp-protocol-version", "2025-11-25");
        if let Some(t) = token {
            get = get.bearer_auth(t);
            delete = delete.bearer_auth(t);
        }
        assert_eq!(get.send().await.unwrap().status(), 403, "{who}: GET");
        assert_eq!(delete.send().await.unwrap().status(), 403, "{who}: DELETE");
    }

    // Nothing was applied: the question still waits for the victim, whose
    // own "keep planning" ends it; the menu is as it was.
    let keep = json!({"jsonrpc": "2.0", "id": question_id, "result": {"action": "accept", "content": {"decision": "keep_planning"}}}).to_string();
    let answered = as_a(keep).await.unwrap();
    assert_eq!(answered.status(), 202);
    let answer = next_message(&mut stream, &mut buffer, |m| m["id"] == 4).await;
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    assert_eq!(menu_labels(&site(&scratch)), ["Home", "About", "Contact"]);
    let plan = as_a(r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"plangate_get_plan","arguments":{}}}"#.into()).await.unwrap().text().await.unwrap();
    assert!(plan.contains("\"pending_steps\":1"), "{plan}");

    // Its owner ends the session: 204, the session gone (HTTP clients
    // such as the Python SDK warn on anything but 200 or 204).
    let ended = http
        .delete(&url)
        .bearer_auth(&a)
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", "2025-11-25")
        .send()
        .await
        .unwrap();
    assert_eq!(ended.status(), 204);
    let after = as_a(r#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"plangate_get_plan","arguments":{}}}"#.into()).await.unwrap();
    assert_eq!(after.status(), 404, "the session is gone");
}

#[tokio::test]
async fn a_foreign_origin_or_host_is_refused_and_non_browser_clients_pass() {
    let (_scratch, key, gw, http) = served("agent");
    let port = gw
        .url()
        .split(':')
        .nth(2)
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_owned();
    for (origin, status) in [
        (Some("http://evil.example"), 403),
        (Some("https://localhost.evil.example"), 403),
        (Some("null"), 403),
        (Some(format!("http://127.0.0.1:{port}").as_str()), 200),
        (Some("http://localhost:6274"), 200),
        (None, 200),
    ] {
        let mut request = mcp_post(&http, &gw.url(), &key, None, INITIALIZE);
        if let Some(origin) = origin {
            request = request.header("origin", origin);
        }
        let r = request.send().await.unwrap();
        assert_eq!(r.status(), status, "Origin {origin:?}");
    }
    let base = gw.url().trim_end_matches("/mcp").to_owned();
    let from_evil = |path: &str| {
        http.get(format!("{base}{path}"))
            .header("host", "evil.example")
            .send()
    };
    for path in ["/readyz", "/metrics"] {
        let foreign = from_evil(path).await.unwrap();
        assert_eq!(foreign.status(), 403, "{path}");
        let body = foreign.text().await.unwrap();
        assert!(
            body.contains("forbidden_host") && !body.contains("site"),
            "{body}"
        );
        let own = http.get(format!("{base}{path}")).send().await.unwrap();
        assert_ne!(own.status(), 403, "{path}");
    }
    let health = from_evil("/healthz").await.unwrap();
    assert_eq!(
        health.status(),
        200,
        "liveness tells nothing and stays open"
    );
}

#[tokio::test]
async fn malformed_params_of_a_served_method_are_invalid_params_not_an_unknown_method() {
    let (_scratch, key, gw, http) = served("agent");
    let (_, session) = open_session(&http, &gw.url(), &key, INITIALIZE).await;
    let post = |body: &'static str| mcp_post(&http, &gw.url(), &key, Some(&session), body).send();
    post(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
        .await
        .unwrap();
    for (body, code) in [
        (
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"arguments":{}}}"#,
            -32602,
        ),
        (
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":7}}"#,
            -32602,
        ),
        (
            r#"{"jsonrpc":"2.0","id":4,"method":"resources/read","params":{}}"#,
            -32602,
        ),
        (
            r#"{"jsonrpc":"2.0","id":5,"method":"no/such_method"}"#,
            -32601,
        ),
    ] {
        let answer: serde_json::Value = post(body).await.unwrap().json().await.unwrap();
        assert_eq!(answer["error"]["code"], code, "{body}: {answer}");
        assert!(
            answer["error"]["message"].as_str().unwrap().len() > 12,
            "{answer}"
        );
    }
}

#[tokio::test]
async fn a_message_over_the_cap_is_refused_too_large_with_its_id_on_both_transports() {
    use std::io::{BufRead as _, Write as _};
    let scratch = Scratch::new();
    let key = scratch.create_key("agent", "write");
    let config = demo_config(&scratch, "[gateway]\nmax_request_bytes = 1048576\n");
    let big = "x".repeat(5 * 1024 * 1024);
    // The Python SDK writes the id last: it is found all the same.
    let call = format!(
        r#"{{"jsonrpc":"2.0","method":"tools/call","params":{{"name":"update_option","arguments":{{"name":"tagline","value":"{big}"}}}},"id":77}}"#
    );

    // stdio: the call is answered, and the session goes on.
    let mut child = std::process::Command::new(plangate())
        .arg("--data-dir")
        .arg(scratch.data_dir())
        .args(["serve", "--stdio", "--config", &config])
        .env("PLANGATE_KEY", &key)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut answer = |line: &str| -> serde_json::Value {
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
        loop {
            let mut text = String::new();
            assert!(stdout.read_line(&mut text).unwrap() > 0, "stdout closed");
            let v: serde_json::Value = serde_json::from_str(&text).unwrap();
            if v.get("id").is_some() {
                return v;
            }
        }
    };
    let init = answer(INITIALIZE);
    assert_eq!(init["id"], 1);
    stdin_note(&mut answer);
    let refused = answer(&call);
    assert_eq!(refused["id"], 77, "{refused}");
    assert_eq!(refused["error"]["code"], -32600, "{refused}");
    assert_eq!(refused["error"]["data"]["code"], "too_large", "{refused}");
    assert_eq!(refused["error"]["data"]["limit"], 1048576);
    let again = answer(r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#);
    assert!(
        again["result"]["tools"].is_array(),
        "the session goes on: {again}"
    );
    drop(stdin);
    let _ = child.wait();

    // HTTP: 413 with the same error for the same id.
    let gw = serve_http(&scratch, &["--config", &config]);
    let http = reqwest::Client::new();
    let r = mcp_post(&http, &gw.url(), &key, None, call)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);
    let refused: serde_json::Value = r.json().await.unwrap();
    assert_eq!(refused["id"], 77, "{refused}");
    assert_eq!(refused["error"]["data"]["code"], "too_large", "{refused}");
}

/// Sends `notifications/initialized` (no answer) by riding on a ping.
fn stdin_note(answer: &mut impl FnMut(&str) -> serde_json::Value) {
    let pong = answer(
        "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n{\"jsonrpc\":\"2.0\",\"id\":\"p\",\"method\":\"ping\"}",
    );
    assert_eq!(pong["id"], "p");
}

#[tokio::test]
async fn a_new_session_past_the_caps_closes_the_least_recently_used_one() {
    let (scratch, config, [a, b]) = demo_keys(
        "[gateway]\nmax_sessions = 3\nmax_sessions_per_key = 2\n",
        [("a", "write"), ("b", "write")],
    );
    let gw = serve_http(&scratch, &["--config", &config]);
    let http = reqwest::Client::new();
    let open = |token: String| {
        let http = http.clone();
        let url = gw.url();
        async move { open_session(&http, &url, &token, INITIALIZE).await.1 }
    };
    let ping = |token: String, session: String| {
        let http = http.clone();
        let url = gw.url();
        async move {
            mcp_post(
                &http,
                &url,
                &token,
                Some(&session),
                r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#,
            )
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
        }
    };
    let a1 = open(a.clone()).await;
    let a2 = open(a.clone()).await;
    assert_eq!(
        ping(a.clone(), a1.clone()).await,
        200,
        "a1 is now the more recent"
    );
    let a3 = open(a.clone()).await;
    // Per key: a's least recently used (a2) was closed, not refused.
    assert_eq!(ping(a.clone(), a2.clone()).await, 404);
    assert_eq!(ping(a.clone(), a1.clone()).await, 200);
    assert_eq!(ping(a.clone(), a3.clone()).await, 200);
    // In all: b's session is the third; a fourth closes the oldest of all.
    let b1 = open(b.clone()).await;
    assert_eq!(ping(b.clone(), b1.clone()).await, 200);
    let b2 = open(b.clone()).await;
    assert_eq!(
        ping(a.clone(), a1.clone()).await,
        404,
        "a1 was the least recently used"
    );
    assert_eq!(ping(a.clone(), a3.clone()).await, 200);
    assert_eq!(ping(b.clone(), b1).await, 200);
    assert_eq!(ping(b.clone(), b2).await, 200);
}

#[tokio::test]
async fn a_connection_without_a_request_head_in_time_is_closed() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let scratch = Scratch::new();
    let config = demo_config(&scratch, "[gateway]\nheader_read_timeout = \"1s\"\n");
    let gw = serve_http(&scratch, &["--config", &config]);
    let addr = gw
        .url()
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_owned();
    let closed_within = |mut s: tokio::net::TcpStream| async move {
        let started = std::time::Instant::now();
        let mut buf = vec![0u8; 4096];
        loop {
            match tokio::time::timeout(std::time::Duration::from_secs(10), s.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => return started.elapsed(),
                Ok(Ok(_)) => continue,
                Err(_) => panic!("the connection stayed open"),
            }
        }
    };
    // Slow headers: half a request head, then nothing.
    let mut slow = tokio::net::TcpStream::connect(&addr).await.unwrap();
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .await
        .unwrap();
    assert!(closed_within(slow).await < std::time::Duration::from_secs(5));
    // Idle keep-alive: one request answered, then silence.
    let mut idle = tokio::net::TcpStream::connect(&addr).await.unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let mut head = [0u8; 12];
    idle.read_exact(&mut head).await.unwrap();
    assert_eq!(&head, b"HTTP/1.1 200");
    assert!(closed_within(idle).await < std::time::Duration::from_secs(5));
}

#[tokio::test]
async fn calls_past_a_rate_limit_are_refused_with_when_to_retry() {
    let (scratch, path, [a, b]) = demo_keys(
        "[gateway]\nrate_limit = \"3/min\"\n",
        [("a", "write"), ("b", "write")],
    );
    let text = std::fs::read_to_string(&path).unwrap().replace(
        "[upstreams.site.tools.update_option]",
        "[upstreams.site.tools.update_option]\nrate_limit = \"1/h\"",
    );
    let config = scratch.write("limited.toml", &text).display().to_string();
    let client_a = config_client(&scratch, &config, &a).await;
    let code = |r: &rmcp::model::CallToolResult| {
        r.structured_content.clone().unwrap_or_default()["code"]
            .as_str()
            .unwrap_or("ok")
            .to_owned()
    };
    for _ in 0..3 {
        let r = call(&client_a, "list_pages", json!({})).await.unwrap();
        assert_eq!(r.is_error, Some(false), "{r:?}");
    }
    let limited = call(&client_a, "list_pages", json!({})).await.unwrap();
    assert_eq!(code(&limited), "rate_limited");
    let body = limited.structured_content.unwrap();
    assert!(body["retry_after_ms"].as_u64().unwrap() > 1000, "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("rate_limit"),
        "{body}"
    );
    client_a.cancel().await.unwrap();
    // Another key has its own allowance; the tool's limit is everyone's.
    let client_b = config_client(&scratch, &config, &b).await;
    let first = call(&client_b, "update_option", tagline("a"))
        .await
        .unwrap();
    assert_eq!(first.is_error, Some(false), "{first:?}");
    let second = call(&client_b, "update_option", tagline("b"))
        .await
        .unwrap();
    assert_eq!(code(&second), "rate_limited");
    assert!(
        second.structured_content.unwrap()["message"]
            .as_str()
            .unwrap()
            .contains("update_option")
    );
    assert_eq!(site_tagline(&scratch), "a");
    client_b.cancel().await.unwrap();
}
