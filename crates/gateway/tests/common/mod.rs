//! In-process harness: rmcp client ⇄ gateway ⇄ upstreams over
//! `tokio::io::duplex`, shared by the gateway's integration tests.
#![allow(dead_code, unused_imports, clippy::unwrap_used, clippy::expect_used)]

pub mod browser;
pub mod console_http;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use plangate_config::{
    Config, ConfigSource, GatewaySettings, Namespace, Transport, UpstreamConfig,
};
use plangate_core::{Actor, Channel, Effect, Event, EventKind, ModeSpec, Modes, OverAccess, Scope};
use plangate_gateway::upstream::connector_from;
use plangate_gateway::{Connector, Gateway, GatewayHandler, UpstreamError};
use plangate_store::Store;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, ClientConfig,
    ElicitRequestParams, ElicitResult, ElicitationAction, Implementation, JsonObject,
    ListToolsResult, PaginatedRequestParams, ProgressNotificationParam, ProtocolVersion,
    ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::{NotificationContext, RequestContext, RunningService};
use rmcp::{ClientHandler, ErrorData, RoleClient, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Value, json};
use tokio::io::DuplexStream;
use tokio_util::sync::CancellationToken;

pub fn upstream_config(name: &str) -> UpstreamConfig {
    UpstreamConfig::new(
        name,
        Transport::Stdio {
            command: "in-process".into(),
            args: vec![],
            env: BTreeMap::new(),
            cwd: None,
        },
    )
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
        audit: plangate_config::Audit::default(),
        profiles: Default::default(),
        rules: Vec::new(),
        auth: Default::default(),
        down: Default::default(),
        notify: Vec::new(),
    }
}

/// One demo site, `site`, with the demo's tool overrides: the set-up of the
/// tests that show its plans to a person.
pub fn demo_site_config() -> Config {
    let mut config = config(&["site"], Namespace::Auto);
    config.upstreams.get_mut("site").unwrap().tools = plangate_config::demo_tool_overrides();
    config
}

/// Questions lapse after `review_timeout`, and the ask mode `careful` lets
/// reads run and asks before anything more: the review tests' config.
pub fn reviewing(config: &mut Config, review_timeout: Duration) {
    config.gateway.review_timeout = review_timeout;
    config.modes = Modes::new(vec![ModeSpec {
        name: "careful".into(),
        instructions: None,
        access: Effect::Read,
        over_access: OverAccess::Ask,
    }]);
}

/// The servers an `in_process` connector started, by connection: cancel
/// one to "crash" that connection.
pub type Sessions = Arc<Mutex<Vec<CancellationToken>>>;

/// A connector that serves a fresh `make()` server over a duplex on every
/// connection, and keeps each server's cancellation token so a test can
/// "crash" it.
pub fn in_process<S, F>(name: &str, make: F) -> (Connector, Sessions)
where
    S: ServerHandler,
    F: Fn() -> S + Send + Sync + 'static,
{
    let sessions: Sessions = Arc::default();
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

/// An `in_process` connector whose every connection serves a clone of
/// `server`, so the test sees the state the gateway talks to.
pub fn shared<S: ServerHandler + Clone>(name: &str, server: &S) -> (Connector, Sessions) {
    let server = server.clone();
    in_process(name, move || server.clone())
}

/// Starts a gateway on `config` whose upstreams connect in process, so a
/// test names only its upstreams.
pub async fn start(
    config: Config,
    store: Arc<dyn Store>,
    upstreams: Vec<(&str, Connector)>,
) -> Arc<Gateway> {
    let connectors = upstreams
        .into_iter()
        .map(|(name, connector)| (name.to_owned(), connector))
        .collect();
    Gateway::start(config, store, material(), connectors).await
}

/// Like [`start`], on the default config of exactly those upstreams.
pub async fn start_on(store: Arc<dyn Store>, upstreams: Vec<(&str, Connector)>) -> Arc<Gateway> {
    let names: Vec<&str> = upstreams.iter().map(|(name, _)| *name).collect();
    start(config(&names, Namespace::Auto), store, upstreams).await
}

/// An operator's yes to the plan of digest `digest`, through the CLI, as
/// [`record`] takes it.
pub fn person_approves(digest: &str) -> Vec<((Actor, Channel), EventKind)> {
    let ops = Actor::Operator { name: "ops".into() };
    let answered = EventKind::ReviewAnswered {
        review_id: None,
        verdict: plangate_core::Verdict::Approve,
        plan_digest: digest.to_owned(),
        feedback: None,
        step_ids: None,
        revision: None,
    };
    vec![((ops, Channel::Cli), answered)]
}

/// Appends `events` (each by whom, through which channel, and what) to the
/// log of `key_id`, stamped now, as another process would: an operator's
/// CLI, or an applier that died.
pub async fn record(gw: &Gateway, key_id: &str, events: Vec<((Actor, Channel), EventKind)>) {
    let events: Vec<Event> = events
        .into_iter()
        .map(|((actor, channel), kind)| Event {
            at_ms: plangate_store::now_ms(),
            key_id: key_id.to_owned(),
            actor,
            channel,
            kind,
        })
        .collect();
    gw.log()
        .transact(key_id, |_| {
            Ok::<_, std::convert::Infallible>((events.clone(), ()))
        })
        .await
        .unwrap()
        .unwrap();
}

pub fn material() -> plangate_store::KeyMaterial {
    plangate_store::KeyMaterial::new([7; 32], [9; 32], [5; 32]).expect("keys")
}

pub fn failing(name: &str) -> Connector {
    let name = name.to_owned();
    Arc::new(move |_client| {
        let name = name.clone();
        Box::pin(async move {
            Err(UpstreamError::Timeout {
                name,
                after: std::time::Duration::from_secs(30),
                stderr: None,
            })
        })
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
    /// A client that declares elicitation and answers only the `Lively`
    /// colour question ("teal").
    pub fn eliciting() -> Seen {
        Seen {
            elicit: true,
            ..Seen::default()
        }
    }

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

/// Serves `gw` to `token` over stdio on a duplex: the client's end.
fn gateway_stdio(gw: Arc<Gateway>, token: Option<String>) -> DuplexStream {
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        if let Ok(running) = GatewayHandler::stdio(gw, token).serve(server_io).await {
            let _ = running.waiting().await;
        }
    });
    client_io
}

/// A 2025-11-25 client of `gw` (initialize first) that presents `token`.
pub async fn client_of<C: ClientHandler>(
    gw: Arc<Gateway>,
    token: Option<String>,
    handler: C,
) -> RunningService<RoleClient, C> {
    handler.serve(gateway_stdio(gw, token)).await.unwrap()
}

/// A fresh schema for one test in the PostgreSQL database that
/// `PLANGATE_TEST_POSTGRES_URL` names, dropped with this value. `None`
/// when the variable is unset outside CI (CI must set it, so there the
/// test never passes by skipping).
pub struct PgSchema {
    base: String,
    name: String,
}

impl PgSchema {
    /// A new schema `{tag}_{pid}` (tags differ between the tests of one
    /// binary, which run in one process).
    pub fn fresh(tag: &str) -> Option<PgSchema> {
        let Ok(base) = std::env::var("PLANGATE_TEST_POSTGRES_URL") else {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI must set PLANGATE_TEST_POSTGRES_URL"
            );
            return None;
        };
        let name = format!("{tag}_{}", std::process::id());
        let status = psql(
            &base,
            &format!("DROP SCHEMA IF EXISTS {name} CASCADE; CREATE SCHEMA {name}"),
        )
        .unwrap();
        assert!(status.success());
        Some(PgSchema { base, name })
    }

    /// A new store handle on the schema: each one is a replica's.
    pub async fn open(&self) -> Arc<dyn Store> {
        let sep = if self.base.contains('?') { '&' } else { '?' };
        let url = format!("{}{sep}options=-c%20search_path%3D{}", self.base, self.name);
        plangate_store::open_postgres(&url).await.unwrap()
    }
}

impl Drop for PgSchema {
    fn drop(&mut self) {
        let _ = psql(
            &self.base,
            &format!("DROP SCHEMA IF EXISTS {} CASCADE", self.name),
        );
    }
}

/// Runs `sql` on the database at `base`, quietly.
fn psql(base: &str, sql: &str) -> std::io::Result<std::process::ExitStatus> {
    std::process::Command::new("psql")
        .env("PGOPTIONS", "--client-min-messages=warning")
        .args([base, "-q", "-c", sql])
        .status()
}

/// The sqlite store of a test's gateway, in `dir`.
pub async fn open_store(dir: &Path) -> Arc<dyn Store> {
    plangate_store::open_sqlite(&dir.join("plangate.db"))
        .await
        .unwrap()
}

/// Opens the store in `dir` with one key `agent` of `scope`; its token.
pub async fn store_with_key(dir: &Path, scope: Scope) -> (Arc<dyn Store>, String) {
    let store = open_store(dir).await;
    let key = store.create_key("agent", scope).await.unwrap();
    (store, key.token)
}

/// A store in a fresh temporary directory, with one key `agent` of
/// `scope`: the directory (to keep while the test runs), the store and the
/// key's token.
pub async fn temp_store(scope: Scope) -> (tempfile::TempDir, Arc<dyn Store>, String) {
    let dir = tempfile::tempdir().unwrap();
    let (store, token) = store_with_key(dir.path(), scope).await;
    (dir, store, token)
}

/// A gateway on one upstream `name` that serves clones of `upstream`, and a
/// key `agent`: the set-up of most in-process tests.
pub struct Rig<S> {
    pub gw: Arc<Gateway>,
    pub store: Arc<dyn Store>,
    pub token: String,
    pub key_id: String,
    pub upstream: S,
    pub sessions: Sessions,
    pub dir: tempfile::TempDir,
}

/// Starts a [`Rig`] with a key of `scope`, once `adjust` has changed the
/// default config of that one upstream.
pub async fn rig_on<S: ServerHandler + Clone>(
    scope: Scope,
    name: &str,
    upstream: S,
    adjust: impl FnOnce(&mut Config),
) -> Rig<S> {
    let dir = tempfile::tempdir().unwrap();
    let store = open_store(dir.path()).await;
    rig_on_store(store, dir, scope, name, upstream, adjust).await
}

/// [`rig_on`] on `store` (PostgreSQL, say), with `dir` as the rig's
/// temporary directory.
pub async fn rig_on_store<S: ServerHandler + Clone>(
    store: Arc<dyn Store>,
    dir: tempfile::TempDir,
    scope: Scope,
    name: &str,
    upstream: S,
    adjust: impl FnOnce(&mut Config),
) -> Rig<S> {
    let key = store.create_key("agent", scope).await.unwrap();
    let (connector, sessions) = shared(name, &upstream);
    let mut config = config(&[name], Namespace::Auto);
    adjust(&mut config);
    Rig {
        gw: start(config, store.clone(), vec![(name, connector)]).await,
        store,
        token: key.token,
        key_id: key.key.id,
        upstream,
        sessions,
        dir,
    }
}

impl<S> Rig<S> {
    /// A 2025-11-25 client of the rig's key.
    pub async fn client<C: ClientHandler>(&self, handler: C) -> RunningService<RoleClient, C> {
        client_of(self.gw.clone(), Some(self.token.clone()), handler).await
    }

    /// A 2026-07-28 client of the rig's key.
    pub async fn modern_client<C: ClientHandler + Clone>(
        &self,
        handler: C,
    ) -> RunningService<RoleClient, C> {
        modern_client_of(self.gw.clone(), &self.token, handler).await
    }
}

impl Rig<Recorder> {
    /// What the recording upstream got for `tool`: arguments and `_meta`.
    pub fn calls_of(&self, tool: &str) -> Vec<(Value, Value)> {
        calls_of(&self.upstream.calls, tool)
    }
}

/// The request for `tool` with `args`, as every helper here sends it.
pub fn params(tool: &str, args: Value) -> CallToolRequestParams {
    let mut p = CallToolRequestParams::new(tool.to_owned());
    p.arguments = args.as_object().cloned();
    p
}

/// Calls `tool` with `args`: the result, failed or not.
pub async fn call<C: ClientHandler>(
    client: &RunningService<RoleClient, C>,
    tool: &str,
    args: Value,
) -> CallToolResult {
    client.peer().call_tool(params(tool, args)).await.unwrap()
}

/// Calls `tool` and asserts that it did not fail: the steps a scenario
/// takes on its way to what it checks.
pub async fn call_ok<C: ClientHandler>(
    client: &RunningService<RoleClient, C>,
    tool: &str,
    args: Value,
) -> CallToolResult {
    let r = call(client, tool, args).await;
    assert_eq!(r.is_error, Some(false), "{r:?}");
    r
}

/// A result's structured content (null if none): what most checks read.
pub fn body(r: &CallToolResult) -> Value {
    r.structured_content.clone().unwrap_or(Value::Null)
}

/// A refusal's `message` ("" if none), for the checks of what it says.
pub fn message(r: &CallToolResult) -> String {
    body(r)["message"].as_str().unwrap_or_default().to_owned()
}

/// The first round of a call by a 2026-07-28 client, which must come back
/// `input_required`: the questions and the signed state.
pub async fn first_round<C: ClientHandler>(
    client: &RunningService<RoleClient, C>,
    tool: &str,
    args: Value,
) -> (Value, String) {
    match client
        .peer()
        .call_tool_once(params(tool, args))
        .await
        .unwrap()
    {
        CallToolResponse::InputRequired(ir) => {
            let requests = serde_json::to_value(ir.input_requests.unwrap()).unwrap();
            (requests, ir.request_state.unwrap())
        }
        other => panic!("expected input_required, got {other:?}"),
    }
}

/// `state` with one character changed, as a tamperer would send it.
pub fn tampered(state: &str) -> String {
    let mut bytes = state.to_owned().into_bytes();
    let i = bytes.len() / 2;
    bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
    String::from_utf8(bytes).unwrap()
}

/// A request state signed with a key that is not the gateway's.
pub fn forged() -> String {
    rmcp::model::RequestStateCodec::try_new(vec![3u8; 32])
        .unwrap()
        .seal(b"{}")
}

/// Retries a call with `state` and `answer` to the question named
/// `question`; the final result.
pub async fn retry<C: ClientHandler>(
    client: &RunningService<RoleClient, C>,
    tool: &str,
    args: Value,
    state: &str,
    question: &str,
    answer: Value,
) -> CallToolResult {
    let mut p = params(tool, args);
    p.request_state = Some(state.to_owned());
    p.input_responses = Some(BTreeMap::from([(question.to_owned(), answer)]));
    match client.peer().call_tool_once(p).await.unwrap() {
        CallToolResponse::Complete(r) => r,
        other => panic!("expected a final result, got {other:?}"),
    }
}

/// The names of the upstream tools a client sees (the gateway's own tools
/// left out).
pub async fn names<C: ClientHandler>(client: &RunningService<RoleClient, C>) -> Vec<String> {
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
pub async fn all_names<C: ClientHandler>(client: &RunningService<RoleClient, C>) -> Vec<String> {
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

/// The server info of an upstream that offers tools and nothing else.
pub fn tools_only() -> ServerConfig {
    ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
}

/// `schema`, which must be a JSON object, as a tool's input or output schema.
pub fn schema(schema: Value) -> JsonObject {
    schema.as_object().cloned().unwrap()
}

impl ServerHandler for Recorder {
    fn get_info(&self) -> ServerConfig {
        tools_only()
    }
    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let open = schema(json!({"type": "object"}));
        let out = schema(json!({"type": "object", "properties": {"ok": {"type": "boolean"}}}));
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
    let client = handler
        .serve_with_lifecycle(
            gateway_stdio(gw, Some(token.to_owned())),
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
