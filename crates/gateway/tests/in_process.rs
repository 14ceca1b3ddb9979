//! The gateway in one process: rmcp client ⇄ gateway ⇄ upstreams, every hop
//! over `tokio::io::duplex`. Fast checks of naming, routing, policy and
//! upstream life (restarts, list changes, progress, cancellation, requests
//! from an upstream during a call).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use plangate_core::Scope;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ElicitRequestParams, ListToolsResult,
    PaginatedRequestParams, ProgressNotificationParam, ServerCapabilities, ServerConfig, Tool,
    ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::json;

mod common;

use common::*;

// === a test upstream with awkward names and live behaviour ===

const LONG: &str =
    "a_tool_name_that_is_much_longer_than_any_client_would_accept_in_a_list_of_tools";

/// Tools whose names break the rules (one takes a gateway tool's name, one
/// has a space, one is far too long), plus tools that exercise upstream
/// life: `grow` adds a tool and says so, `slow` reports progress, `hang`
/// waits to be cancelled, `ask` elicits from the caller.
#[derive(Clone, Default)]
struct Lively {
    extra: Arc<AtomicBool>,
    cancelled: Arc<AtomicBool>,
}

impl ServerHandler for Lively {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
    }
    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let read = ToolAnnotations::default().read_only(true);
        let open = schema(json!({"type": "object"}));
        let mut names = vec![
            "plangate_get_plan",
            "has space",
            LONG,
            "plain",
            "grow",
            "slow",
            "hang",
            "ask",
        ];
        if self.extra.load(Ordering::SeqCst) {
            names.push("grown");
        }
        Ok(ListToolsResult::with_all_items(
            names
                .into_iter()
                .map(|n| Tool::new(n, "t", open.clone()).with_annotations(read.clone()))
                .collect(),
        ))
    }
    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        match request.name.as_ref() {
            "grow" => {
                self.extra.store(true, Ordering::SeqCst);
                let _ = cx.peer.notify_tool_list_changed().await;
            }
            "slow" => {
                let token = cx
                    .meta
                    .get_progress_token()
                    .expect("rmcp always sends a progress token");
                for i in 1..=3 {
                    let p =
                        ProgressNotificationParam::new(token.clone(), f64::from(i)).with_total(3.0);
                    let _ = cx.peer.notify_progress(p).await;
                }
            }
            "hang" => {
                tokio::select! {
                    () = cx.ct.cancelled() => self.cancelled.store(true, Ordering::SeqCst),
                    () = tokio::time::sleep(Duration::from_secs(30)) => {}
                }
            }
            "ask" => {
                let params: ElicitRequestParams = serde_json::from_value(json!({
                    "mode": "form",
                    "message": "What is your favourite colour?",
                    "requestedSchema": {"type": "object", "properties": {"colour": {"type": "string"}}}
                }))
                .unwrap();
                let answer = cx.peer.create_elicitation(params).await;
                let answer = answer
                    .map(|a| serde_json::to_value(a).unwrap())
                    .unwrap_or_else(|e| json!({"error": e.to_string()}));
                return Ok(CallToolResult::structured(json!({"answer": answer})).into());
            }
            _ => {}
        }
        Ok(CallToolResult::structured(json!({"called": request.name})).into())
    }
}

/// A gateway on one `Lively` upstream, "odd", and a write key.
async fn odd() -> Rig<Lively> {
    rig_on(Scope::Write, "odd", Lively::default(), |_| {}).await
}

/// The state a demo site keeps in `path`, as JSON.
fn read_state(path: &std::path::Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

// === tests ===

#[tokio::test]
async fn awkward_upstream_names_are_exposed_validly_and_route_back_to_the_original() {
    let r = odd().await;
    let gw = &r.gw;
    let client = r.client(Seen::default()).await;
    let names = names(&client).await;
    // One upstream: unprefixed, except where a name is invalid; a name that
    // reads like plangate's own tools is not offered at all.
    assert_eq!(names.len(), 7, "{names:?}");
    assert!(names.contains(&"plain".to_owned()));
    assert!(
        names.iter().all(|n| !n.starts_with("plangate_")),
        "{names:?}"
    );
    let imitation = gw
        .catalog()
        .tools
        .iter()
        .find(|t| t.original == "plangate_get_plan")
        .map(|t| t.exposed.clone())
        .unwrap();
    let refused = call(&client, &imitation, json!({})).await;
    assert_eq!(refused.is_error, Some(true));
    let refusal = refused.structured_content.unwrap();
    assert_eq!(refusal["code"], "forbidden");
    assert!(
        refusal["message"]
            .as_str()
            .unwrap()
            .contains("reads like one of plangate's own tools"),
        "{refusal}"
    );
    for n in &names {
        assert!(
            n.len() <= 64
                && n.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c)),
            "{n}"
        );
    }
    for (exposed, original) in names.iter().zip(["has space", LONG, "plain"]) {
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
    let (dir, store, token) = temp_store(Scope::Write).await;
    let site_state = dir.path().join("site.json");
    let blog_state = dir.path().join("blog.json");
    let (site, _) = in_process("site", demo(site_state.clone()));
    let (blog, _) = in_process("blog", demo(blog_state.clone()));
    let gw = start_on(store, vec![("site", site), ("blog", blog)]).await;
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

    // A name without its upstream's prefix (or with a wrong one) is
    // unknown, and the answer names the tools it most likely meant.
    let near = ["blog__update_option", "site__update_option"];
    assert_eq!(catalog.near_names("update_option"), near);
    assert_eq!(catalog.near_names("files__update_option"), near);
    assert!(catalog.near_names("no_such_tool").is_empty());

    let client = client_of(gw, Some(token), Seen::default()).await;
    let err = client
        .peer()
        .call_tool(params("update_option", json!({})))
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains(
            "unknown tool: update_option; did you mean one of blog__update_option, site__update_option?"
        ),
        "{err}"
    );
    let tagline = json!({"name": "tagline", "value": "In process"});
    call_ok(&client, "blog__update_option", tagline).await;
    let blog = read_state(&blog_state);
    assert_eq!(blog["options"]["tagline"]["value"], "In process");
    let site = read_state(&site_state);
    assert_ne!(site["options"]["tagline"]["value"], "In process");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_read_key_reads_but_its_writes_never_reach_the_upstream() {
    let (dir, store, token) = temp_store(Scope::Read).await;
    let state = dir.path().join("site.json");
    let (site, _) = in_process("site", demo(state.clone()));
    let gw = start_on(store, vec![("site", site)]).await;
    let client = client_of(gw, Some(token), Seen::default()).await;
    call_ok(&client, "get_page", json!({"id": 1})).await;
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
    let (dir, store, token) = temp_store(Scope::Write).await;
    let (site, _) = in_process("site", demo(dir.path().join("site.json")));
    let gw = start_on(store, vec![("site", site), ("blog", failing("blog"))]).await;
    assert!(gw.down_upstreams().contains_key("blog"));
    let client = client_of(gw, Some(token), Seen::default()).await;
    let names = names(&client).await;
    assert!(names.iter().all(|n| n.starts_with("site__")), "{names:?}");
    call_ok(&client, "site__get_page", json!({"id": 1})).await;
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_crashed_upstream_comes_back_and_its_tools_reappear() {
    let (dir, store, token) = temp_store(Scope::Write).await;
    let (site, sessions) = in_process("site", demo(dir.path().join("site.json")));
    let (other, _) = in_process("other", Lively::default);
    let gw = start_on(store, vec![("site", site), ("other", other)]).await;
    let seen = Seen::default();
    let client = client_of(gw.clone(), Some(token), seen.clone()).await;
    assert!(names(&client).await.contains(&"site__get_page".to_owned()));

    // Crash the site's server.
    sessions.lock().unwrap()[0].cancel();
    eventually("the crash to be noticed", || {
        gw.down_upstreams().contains_key("site") || sessions.lock().unwrap().len() > 1
    })
    .await;
    // Meanwhile the other upstream serves, and calls to the site fail fast
    // (or succeed, once it is back) — never hang.
    call_ok(&client, "other__plain", json!({})).await;
    let r = call(&client, "site__get_page", json!({"id": 1})).await;
    if r.is_error == Some(true) {
        let code = r.structured_content.unwrap()["code"].clone();
        assert!(
            code == "upstream_down" || code == "upstream_unavailable",
            "{code}"
        );
    }
    // It comes back on its own, and the client is told.
    eventually("the site to reconnect", || {
        gw.upstream("site").is_some() && sessions.lock().unwrap().len() >= 2
    })
    .await;
    eventually("list_changed to reach the client", || {
        seen.list_changed.load(Ordering::SeqCst) >= 1
    })
    .await;
    assert!(names(&client).await.contains(&"site__get_page".to_owned()));
    call_ok(&client, "site__get_page", json!({"id": 1})).await;
    client.cancel().await.unwrap();
    gw.shutdown().await;
}

#[tokio::test]
async fn an_upstream_list_change_refreshes_the_catalog_and_a_new_tool_waits_for_an_operator() {
    let r = odd().await;
    let gw = &r.gw;
    let seen = Seen::default();
    let client = r.client(seen.clone()).await;
    assert!(!names(&client).await.contains(&"grown".to_owned()));
    call(&client, "grow", json!({})).await;
    eventually("list_changed", || {
        seen.list_changed.load(Ordering::SeqCst) >= 1
    })
    .await;
    // The catalog was refreshed, but a tool that appeared after the first
    // listing is quarantined: not listed, refused for every key.
    eventually("grown in the catalog", || {
        gw.catalog().tool("grown").is_some()
    })
    .await;
    assert!(!names(&client).await.contains(&"grown".to_owned()));
    let refused = call(&client, "grown", json!({})).await;
    assert_eq!(refused.is_error, Some(true));
    let refusal = refused.structured_content.unwrap();
    assert_eq!(refusal["code"], "tool_quarantined", "{refusal}");
    // It says a person accepts it, and never how: the agent may have a
    // shell (docs/design.md §12).
    let message = refusal["message"].as_str().unwrap();
    assert!(
        message.contains("once a person reviews and accepts it"),
        "{refusal}"
    );
    assert!(!message.contains("plangate tools"), "{refusal}");

    // An operator accepts it from another process sharing the store: the
    // gateway follows the log, offers it and tells the client.
    let before = seen.list_changed.load(Ordering::SeqCst);
    let operator_log = plangate_gateway::key_log::KeyLog::<plangate_core::ToolPins>::with_capacity(
        r.store.clone(),
        common::material().log_key(),
        1,
    );
    // No factor is required here, so the person's yes is confirmed at once.
    let operators = plangate_gateway::operator::factor::operators_log(
        r.store.clone(),
        common::material().log_key(),
    );
    let act = plangate_gateway::operator::factor::Act::AcceptTool {
        server: "odd",
        tool: "grown",
    };
    let yes = plangate_gateway::operator::factor::confirm(
        &operators,
        &common::material(),
        &act,
        Default::default(),
        plangate_core::Channel::Cli,
    )
    .await
    .unwrap();
    plangate_gateway::tool_pins::decide(
        &operator_log,
        &gw.config(),
        "odd",
        "grown",
        None,
        plangate_gateway::tool_pins::Decision::Accept {
            allow_downgrade: false,
        },
        (
            plangate_core::Actor::Operator { name: "ops".into() },
            Some(&yes),
        ),
        plangate_core::Channel::Cli,
        1,
    )
    .await
    .unwrap();
    eventually("list_changed after the accept", || {
        seen.list_changed.load(Ordering::SeqCst) > before
    })
    .await;
    assert!(names(&client).await.contains(&"grown".to_owned()));
    let ran = call(&client, "grown", json!({})).await;
    assert_eq!(ran.is_error, Some(false), "{ran:?}");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn progress_reaches_the_caller_under_its_own_token() {
    let r = odd().await;
    let seen = Seen::default();
    let client = r.client(seen.clone()).await;
    let handle = client
        .peer()
        .send_request_with_option(
            rmcp::model::ClientRequest::CallToolRequest(rmcp::model::CallToolRequest::new(
                CallToolRequestParams::new("slow"),
            )),
            rmcp::service::PeerRequestOptions::no_options(),
        )
        .await
        .unwrap();
    let mine = handle.progress_token.clone();
    handle.await_response().await.unwrap();
    eventually("three progress notifications", || {
        seen.progress.lock().unwrap().len() >= 3
    })
    .await;
    let progress = seen.progress.lock().unwrap().clone();
    assert!(
        progress.iter().all(|p| p.progress_token == mine),
        "{progress:?}"
    );
    assert_eq!(
        progress.iter().map(|p| p.progress).collect::<Vec<_>>(),
        [1.0, 2.0, 3.0]
    );
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn cancelling_a_call_cancels_it_at_the_upstream() {
    let r = odd().await;
    let client = r.client(Seen::default()).await;
    // Dropping the call future makes rmcp send notifications/cancelled.
    let _ = tokio::time::timeout(
        Duration::from_millis(200),
        client.peer().call_tool(CallToolRequestParams::new("hang")),
    )
    .await;
    eventually("the upstream to see the cancellation", || {
        r.upstream.cancelled.load(Ordering::SeqCst)
    })
    .await;
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn an_upstream_elicitation_during_a_call_reaches_the_calling_client() {
    let r = odd().await;
    let seen = Seen::eliciting();
    let questions = seen.questions.clone();
    let asker = r.client(seen).await;
    let asked = call(&asker, "ask", json!({})).await;
    let answer = &asked.structured_content.unwrap()["answer"];
    assert_eq!(answer["action"], "accept", "{answer}");
    assert_eq!(answer["content"]["colour"], "teal");
    // The person sees whose question it is: the upstream's, not plangate's.
    assert_eq!(
        questions.lock().unwrap().as_slice(),
        [
            "[Asked by the upstream MCP server \"odd\", not by plangate] What is your favourite colour?"
        ]
    );

    // A client that cannot answer gets the question declined, not a hang.
    let mute = r.client(Seen::default()).await;
    let declined = call(&mute, "ask", json!({})).await;
    assert_eq!(
        declined.structured_content.unwrap()["answer"]["action"],
        "decline"
    );
    asker.cancel().await.unwrap();
    mute.cancel().await.unwrap();
}

#[tokio::test]
async fn a_mode_set_through_one_replica_reaches_the_clients_of_another() {
    let (dir, store, token) = temp_store(Scope::Write).await;
    let mut replicas = Vec::new();
    for _ in 0..2 {
        let (site, _) = in_process("site", demo(dir.path().join("site.json")));
        replicas.push(start_on(store.clone(), vec![("site", site)]).await);
    }
    let seen = Seen::default();
    let on_b = client_of(replicas[1].clone(), Some(token.clone()), seen.clone()).await;
    assert!(
        !all_names(&on_b)
            .await
            .contains(&"plangate_exit_plan_mode".to_owned())
    );
    let on_a = client_of(replicas[0].clone(), Some(token), Seen::default()).await;
    call(&on_a, "plangate_begin_session", json!({"mode": "plan"})).await;
    eventually("list_changed on the other replica", || {
        seen.list_changed.load(Ordering::SeqCst) >= 1
    })
    .await;
    assert!(
        all_names(&on_b)
            .await
            .contains(&"plangate_exit_plan_mode".to_owned())
    );
    on_a.cancel().await.unwrap();
    on_b.cancel().await.unwrap();
}

#[tokio::test]
async fn a_key_revoked_by_another_process_stops_at_its_next_request_though_it_was_cached() {
    let r = odd().await;
    let client = r.client(Seen::default()).await;
    for _ in 0..3 {
        let plain = call(&client, "plain", json!({})).await;
        assert_eq!(plain.is_error, Some(false));
    }
    // Another process (a second handle on the same file) revokes the key.
    let cli = open_store(r.dir.path()).await;
    cli.revoke_key("agent").await.unwrap();
    let mut p = CallToolRequestParams::new("plain");
    p.arguments = Some(serde_json::Map::new());
    let err = client.peer().call_tool(p).await.unwrap_err();
    assert!(err.to_string().contains("unknown or revoked"), "{err}");
    client.cancel().await.unwrap();
}

/// The agent's apply hears the upstream's own progress on a running step:
/// its client gets a notification as the step starts, one for each of the
/// upstream's (saying which step, and how far), and one at the end — each
/// value above the last, as MCP requires.
#[tokio::test]
async fn an_apply_passes_on_the_upstreams_progress_on_the_running_step() {
    let r = rig_on(Scope::Write, "odd", Lively::default(), |c| {
        let up = c.upstreams.get_mut("odd").unwrap();
        up.tools.entry("slow".into()).or_default().effect = Some(plangate_core::Effect::Write);
    })
    .await;
    let seen = Seen::default();
    let client = r.client(seen.clone()).await;
    call(&client, "plangate_begin_session", json!({"mode": "plan"})).await;
    let planned = call(&client, "slow", json!({})).await;
    assert_eq!(body(&planned)["code"], "plan_step", "{planned:?}");
    let receipt = call(&client, "plangate_apply_plan", json!({})).await;
    assert_eq!(body(&receipt)["applied"], 1, "{receipt:?}");
    eventually("the apply's progress", || {
        seen.progress.lock().unwrap().len() >= 5
    })
    .await;
    let progress = seen.progress.lock().unwrap().clone();
    let messages: Vec<String> = progress
        .iter()
        .map(|p| p.message.clone().unwrap_or_default())
        .collect();
    assert!(messages[0].starts_with("step 1 of 1:"), "{messages:?}");
    for n in 1..=3 {
        assert!(
            messages.contains(&format!("step 1 of 1: {n} of 3")),
            "{messages:?}"
        );
    }
    assert_eq!(messages.last().unwrap(), "1 of 1 done", "{messages:?}");
    let values: Vec<f64> = progress.iter().map(|p| p.progress).collect();
    assert!(values.windows(2).all(|w| w[0] < w[1]), "{values:?}");
    client.cancel().await.unwrap();
}
