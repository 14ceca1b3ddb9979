//! The MCP server agents connect to.
//!
//! One [`GatewayHandler`] serves one client session (stdio: the process;
//! HTTP: one `Mcp-Session-Id`). It resolves the caller on every request,
//! answers lists from the catalog, and forwards calls, reads and prompts to
//! the upstream that owns them — or refuses them per policy.

// Sampling and roots are deprecated by SEP-2577 but remain part of MCP
// 2025-11-25, which plangate serves and speaks upstream; forwarding them
// during a call is part of being a faithful gateway.
#![allow(deprecated)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use plangate_core::Effect;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ElicitResult, ElicitationAction,
    ErrorCode, GetPromptRequestParams, GetPromptResponse, Implementation, InitializeRequestParams,
    InitializeResult, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult,
    ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse,
    ResourceContents, ServerCapabilities, ServerConfig, ServerResult,
};
use rmcp::service::{NotificationContext, RequestContext, ServiceError};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::json;

use plangate_core::{
    CallerScope, Channel, Code, DEFAULT_MODE, Decision, ModeSpec, OverAccess, Scope,
    check_safe_integers, decide,
};
use rmcp::model::ContentBlock;
use serde_json::Value;

use crate::Gateway;
use crate::auth::{self, Caller, Denied};
use crate::hub::Ask;
use crate::metrics::Outcome;
use crate::parked::CallEvent;
use crate::plan::{self, Acting, PlanReason};
use crate::refusal::Refusal;
use crate::tools::GatewayTool;

/// The JSON-RPC error code plangate answers when a request has no caller
/// it could run as (no key, bad key). In the implementation-defined server
/// range; `data.code` carries the stable name.
const UNAUTHORIZED: ErrorCode = ErrorCode(-32001);

/// Where a session's requests come from.
enum Origin {
    /// Over stdio the key comes from `PLANGATE_KEY`, once per process.
    Stdio { token: Option<String> },
    /// Over HTTP the auth middleware resolves the caller per request and
    /// the session guard ([`crate::session_guard`]) binds the session to
    /// the key that opened it; `opener` keeps that key's id for the hub.
    Http { opener: OnceLock<Option<String>> },
}

/// Numbers client sessions, so calls of one client can be told from
/// another's.
static SESSIONS: AtomicU64 = AtomicU64::new(1);

/// The rmcp server handler for one client session.
#[derive(Clone)]
pub struct GatewayHandler {
    gw: Arc<Gateway>,
    origin: Arc<Origin>,
    session: u64,
    seen: Arc<parking_lot::Mutex<SeenMode>>,
}

/// What this session's agent was last told about the mode, so a change made
/// from outside is told exactly once (DESIGN §4).
#[derive(Default)]
struct SeenMode {
    spec: Option<ModeSpec>,
    told_undefined: bool,
}

impl GatewayHandler {
    /// A handler for the stdio client, identified by `token` (from
    /// `PLANGATE_KEY`).
    pub fn stdio(gw: Arc<Gateway>, token: Option<String>) -> Self {
        GatewayHandler {
            gw,
            origin: Arc::new(Origin::Stdio { token }),
            session: SESSIONS.fetch_add(1, Ordering::Relaxed),
            seen: Arc::default(),
        }
    }

    /// A handler for one HTTP session.
    pub fn http(gw: Arc<Gateway>) -> Self {
        GatewayHandler {
            gw,
            origin: Arc::new(Origin::Http {
                opener: OnceLock::new(),
            }),
            session: SESSIONS.fetch_add(1, Ordering::Relaxed),
            seen: Arc::default(),
        }
    }

    fn transport(&self) -> &'static str {
        match &*self.origin {
            Origin::Stdio { .. } => "stdio",
            Origin::Http { .. } => "http",
        }
    }

    fn channel(&self) -> Channel {
        match &*self.origin {
            Origin::Stdio { .. } => Channel::Stdio,
            Origin::Http { .. } => Channel::Http,
        }
    }

    /// Notes the mode in force for this session. Returns what to tell the
    /// agent — only when what it can do changed since it last heard (or a
    /// recorded mode is no longer defined, once) — and whether the tool
    /// list changed (plan mode on or off).
    fn observe_mode(&self, spec: &ModeSpec, undefined: Option<String>) -> (Option<String>, bool) {
        let mut seen = self.seen.lock();
        let previous = seen.spec.replace(spec.clone());
        let mut notice = None;
        let mut list_changed = false;
        match &previous {
            None if spec.name != DEFAULT_MODE => notice = Some(describe_mode(spec, false)),
            Some(p) if (p.access, p.over_access) != (spec.access, spec.over_access) => {
                notice = Some(describe_mode(spec, true));
                list_changed = p.plan_mode() != spec.plan_mode();
            }
            _ => {}
        }
        if let Some(u) = undefined
            && !seen.told_undefined
        {
            seen.told_undefined = true;
            notice = Some(match notice {
                Some(n) => format!("{u}. {n}"),
                None => u,
            });
        }
        (notice, list_changed)
    }

    /// Records a mode this session set itself (nothing to tell).
    fn set_seen_mode(&self, spec: ModeSpec) {
        self.seen.lock().spec = Some(spec);
    }

    /// The caller of this request, or the JSON-RPC error that explains why
    /// there is none.
    async fn caller(&self, cx: &RequestContext<RoleServer>) -> Result<Caller, ErrorData> {
        let resolved = match &*self.origin {
            Origin::Stdio { token } => auth::resolve(&self.gw, token.as_deref()).await,
            // The auth middleware resolved the caller, and the session
            // guard ([`crate::session_guard`]) refused any other caller
            // before rmcp saw the message.
            Origin::Http { .. } => cx
                .extensions
                .get::<http::request::Parts>()
                .and_then(|p| p.extensions.get::<Caller>())
                .cloned()
                .ok_or(Denied::NoKey),
        };
        resolved.map_err(|denied| {
            ErrorData::new(
                UNAUTHORIZED,
                denied.message(self.transport()),
                Some(json!({"code": denied.code()})),
            )
        })
    }

    async fn call_gateway_tool(
        &self,
        caller: &Caller,
        tool: GatewayTool,
        request: CallToolRequestParams,
        cx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let Caller::Key(key) = caller else {
            return Ok(Refusal::new(
                Code::PlanNeedsKey,
                "the plan tools need an API key: a caller without one can never plan. Create a key with `plangate keys create --name NAME --scope plan|write`",
            )
            .into_result()
            .into());
        };
        let acting = Acting {
            key: key.clone(),
            channel: self.channel(),
            operator: None,
        };
        let request_name = request.name.to_string();
        let request_state = request.request_state.clone();
        let input_responses = request.input_responses.clone();
        let arguments = request.arguments.unwrap_or_default();
        let notice = match self.gw.log().state(&key.id).await {
            Ok(state) => {
                let (mode, undefined) = self.gw.config().modes.resolve(state.mode.as_deref());
                let (notice, list_changed) = self.observe_mode(&mode, undefined);
                if list_changed {
                    let _ = cx.peer.notify_tool_list_changed().await;
                }
                notice
            }
            Err(_) => None,
        };
        if tool == GatewayTool::ExitPlanMode {
            let plan_text = arguments
                .get("plan")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            let args_value = Value::Object(arguments.clone());
            let round = crate::review::Round {
                tool: &request_name,
                arguments: &args_value,
                state: request_state.as_deref(),
                responses: input_responses.as_ref(),
            };
            let result =
                crate::review::exit_plan_mode(&self.gw, &acting, &plan_text, round, cx).await;
            if let Ok(state) = self.gw.log().state(&key.id).await {
                let mode = self.gw.config().modes.resolve(state.mode.as_deref()).0;
                let was_plan = self
                    .seen
                    .lock()
                    .spec
                    .as_ref()
                    .is_some_and(ModeSpec::plan_mode);
                if was_plan != mode.plan_mode() {
                    let _ = cx.peer.notify_tool_list_changed().await;
                    self.gw
                        .hub()
                        .notify_key_tools_changed(&key.id, self.session)
                        .await;
                }
                self.set_seen_mode(mode);
            }
            return Ok(with_notice(
                match result {
                    Ok(r) => r,
                    Err(refusal) => refusal.into_result().into(),
                },
                notice,
            ));
        }
        if tool == GatewayTool::ApplyPlan {
            let request = match parse_apply(&arguments) {
                Ok(r) => r,
                Err(refusal) => return Ok(with_notice(refusal.into_result().into(), notice)),
            };
            let progress = cx
                .meta
                .get_progress_token()
                .map(|token| crate::apply::Progress {
                    peer: cx.peer.clone(),
                    token,
                });
            let result =
                crate::apply::apply_plan(&self.gw, &acting, request, progress, cx.ct.clone()).await;
            return Ok(with_notice(
                match result {
                    Ok(receipt) => receipt.into(),
                    Err(refusal) => {
                        tracing::info!(
                            caller = caller.label(),
                            code = refusal.code.as_str(),
                            "apply refused"
                        );
                        refusal.into_result().into()
                    }
                },
                notice,
            ));
        }
        match crate::tools::call(&self.gw, &acting, tool, &arguments).await {
            Ok((result, list_changed)) => {
                if let Ok(state) = self.gw.log().state(&key.id).await {
                    self.set_seen_mode(self.gw.config().modes.resolve(state.mode.as_deref()).0);
                }
                if list_changed {
                    let _ = cx.peer.notify_tool_list_changed().await;
                    self.gw
                        .hub()
                        .notify_key_tools_changed(&key.id, self.session)
                        .await;
                }
                Ok(with_notice(result.into(), notice))
            }
            Err(refusal) => {
                tracing::info!(tool = ?tool, caller = caller.label(), code = refusal.code.as_str(), "gateway tool refused");
                Ok(with_notice(refusal.into_result().into(), notice))
            }
        }
    }

    async fn forward_call(
        &self,
        caller: &Caller,
        upstream_name: &str,
        original: &str,
        request: CallToolRequestParams,
        cx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let metrics = self.gw.metrics();
        let modern = crate::review::modern(cx);
        let kid = caller.key_id().unwrap_or_default().to_owned();
        let tool = request.name.to_string();
        // Over 2026-07-28 an upstream's question travels as input_required,
        // bound to the call's arguments.
        let args = if modern {
            let value = Value::Object(request.arguments.clone().unwrap_or_default());
            match crate::review::args_digest(&self.gw, &value) {
                Ok(d) => d,
                Err(refusal) => return Ok(refusal.into_result().into()),
            }
        } else {
            String::new()
        };
        let who = || crate::parked::Retry {
            kid: &kid,
            tool: &tool,
            args: &args,
        };
        let mut running = match request.request_state.as_deref() {
            // The retry that answers what the upstream asked: the same call
            // goes on.
            Some(state) if modern => {
                match crate::parked::Parked::resume(
                    &self.gw,
                    who(),
                    state,
                    request.input_responses.as_ref(),
                ) {
                    Ok(running) => running,
                    Err(refusal) => return Ok(refusal.into_result().into()),
                }
            }
            _ => {
                let Some(upstream) = self.gw.upstream(upstream_name) else {
                    metrics.record(upstream_name, original, Outcome::Failed, None);
                    return Ok(unavailable(upstream_name, &self.gw).into_result().into());
                };
                let mut params = CallToolRequestParams::new(original.to_owned());
                params.arguments = request.arguments;
                params.meta = forwarded_meta(cx);
                crate::parked::start(
                    self.gw.clone(),
                    upstream,
                    params,
                    self.session,
                    cx.meta.get_progress_token(),
                )
            }
        };
        let my_token = cx.meta.get_progress_token();
        let outcome = loop {
            tokio::select! {
                event = running.events.recv() => match event {
                    Some(CallEvent::Done(r)) => break r,
                    Some(CallEvent::Progress(mut p)) => {
                        // A retry may carry a token of its own.
                        if let Some(token) = &my_token {
                            p.progress_token = token.clone();
                            let _ = Box::pin(cx.peer.notify_progress(p)).await;
                        }
                    }
                    Some(CallEvent::Ask(ask)) => {
                        if !declared(cx, &ask) {
                            decline(ask);
                        } else if modern {
                            match crate::parked::Parked::park(&self.gw, who(), running, ask) {
                                Ok(response) => {
                                    tracing::info!(upstream = upstream_name, tool = original, caller = caller.label(), "call waits for the client to answer its upstream's question");
                                    return Ok(response);
                                }
                                Err(back) => {
                                    let (back, ask) = *back;
                                    running = back;
                                    decline(ask);
                                }
                            }
                        } else {
                            Box::pin(answer_ask(ask, cx)).await;
                        }
                    }
                    None => break Err(ServiceError::TransportClosed),
                },
                () = cx.ct.cancelled() => {
                    running.cancel();
                    metrics.record(upstream_name, original, Outcome::Failed, Some(running.started.elapsed()));
                    tracing::info!(upstream = upstream_name, tool = original, caller = caller.label(), "call cancelled by the client");
                    return Err(ErrorData::new(ErrorCode::INTERNAL_ERROR, "request cancelled", None));
                }
            }
        };
        let elapsed = running.started.elapsed();
        let upstream = running.upstream.clone();
        drop(running);
        let ms = elapsed.as_secs_f64() * 1000.0;
        match outcome {
            Ok(ServerResult::CallToolResult(result)) => {
                let is_error = result.is_error.unwrap_or(false);
                let kind = if is_error {
                    Outcome::ToolError
                } else {
                    Outcome::Ok
                };
                metrics.record(upstream_name, original, kind, Some(elapsed));
                tracing::info!(
                    upstream = upstream_name,
                    tool = original,
                    caller = caller.label(),
                    is_error,
                    ms,
                    "tool call"
                );
                Ok(result.into())
            }
            Ok(_) => {
                metrics.record(upstream_name, original, Outcome::Failed, Some(elapsed));
                Ok(Refusal::new(
                    Code::UpstreamUnavailable,
                    format!("upstream {upstream_name} answered with a result type plangate does not forward (input_required or task)"),
                )
                .into_result()
                .into())
            }
            Err(ServiceError::McpError(e)) => {
                metrics.record(upstream_name, original, Outcome::RpcError, Some(elapsed));
                tracing::info!(
                    upstream = upstream_name,
                    tool = original,
                    caller = caller.label(),
                    code = e.code.0,
                    ms,
                    "tool call: upstream error"
                );
                Err(e)
            }
            Err(e) => Ok(self
                .call_failed(&upstream, original, e, Some(elapsed))
                .into()),
        }
    }

    /// A call that got no answer: the upstream is treated as failed (the
    /// supervisor reconnects it) and the client is told to try later.
    fn call_failed(
        &self,
        upstream: &crate::Upstream,
        tool: &str,
        error: ServiceError,
        elapsed: Option<std::time::Duration>,
    ) -> CallToolResult {
        let name = upstream.name();
        self.gw
            .metrics()
            .record(name, tool, Outcome::Failed, elapsed);
        tracing::warn!(upstream = name, tool, "tool call got no answer: {error}");
        if matches!(
            error,
            ServiceError::TransportClosed | ServiceError::TransportSend(_)
        ) {
            upstream.fail();
        }
        let message = match &error {
            ServiceError::Timeout { timeout } => format!(
                "upstream {name} did not answer within {} (its call_timeout); plangate cancelled the call. It may still have taken effect: check before calling again, or raise [upstreams.{name}] call_timeout",
                plangate_config::format_duration(*timeout)
            ),
            ServiceError::TransportClosed | ServiceError::TransportSend(_) => format!(
                "upstream {name} did not answer ({error}); it is being reconnected — try again shortly"
            ),
            _ => format!("upstream {name} did not answer ({error}); try again shortly"),
        };
        Refusal::new(Code::UpstreamUnavailable, message).into_result()
    }
}

/// Whether the client (per request over 2026-07-28, from its handshake
/// before) declared it can answer what the upstream asked.
fn declared(cx: &RequestContext<RoleServer>, ask: &Ask) -> bool {
    let what = match ask {
        Ask::Elicit(..) => "elicitation",
        Ask::Sample(..) => "sampling",
        Ask::Roots(_) => "roots",
    };
    cx.client_capabilities()
        .and_then(|caps| serde_json::to_value(&caps).ok())
        .and_then(|caps| caps.get(what).cloned())
        .is_some_and(|v| !v.is_null())
}

/// Answers an upstream's request the client cannot take: an elicitation is
/// declined, sampling and roots get an error saying why.
fn decline(ask: Ask) {
    let declined = |what: &str| {
        ErrorData::new(
            ErrorCode::INVALID_REQUEST,
            format!("the client did not declare {what} support"),
            None,
        )
    };
    match ask {
        Ask::Elicit(_, tx) => {
            let _ = tx.send(Ok(ElicitResult::new(ElicitationAction::Decline)));
        }
        Ask::Sample(_, tx) => {
            let _ = tx.send(Err(declined("sampling")));
        }
        Ask::Roots(tx) => {
            let _ = tx.send(Err(declined("roots")));
        }
    }
}

/// Asks the calling client what an upstream asked during its call, inside
/// the client's own request so the transport relates the two.
async fn answer_ask(ask: Ask, cx: &RequestContext<RoleServer>) {
    let relay_err = |e: ServiceError| match e {
        ServiceError::McpError(e) => e,
        other => ErrorData::new(ErrorCode::INTERNAL_ERROR, other.to_string(), None),
    };
    match ask {
        Ask::Elicit(params, tx) => {
            let _ = tx.send(cx.peer.create_elicitation(params).await.map_err(relay_err));
        }
        Ask::Sample(params, tx) => {
            let _ = tx.send(cx.peer.create_message(params).await.map_err(relay_err));
        }
        Ask::Roots(tx) => {
            let _ = tx.send(cx.peer.list_roots().await.map_err(relay_err));
        }
    }
}

fn unavailable(upstream: &str, gw: &Gateway) -> Refusal {
    let why = gw
        .down_upstreams()
        .get(upstream)
        .cloned()
        .unwrap_or_else(|| "not connected".into());
    Refusal::new(
        Code::UpstreamUnavailable,
        format!("upstream {upstream} is unavailable ({why}); other upstreams keep serving"),
    )
}

/// The `_meta` sent upstream: the client's own, minus the progress token
/// (rmcp sets its own) and the inline-lifecycle keys that describe the
/// downstream connection, not the upstream one.
fn forwarded_meta(cx: &RequestContext<RoleServer>) -> Option<rmcp::model::RequestMetaObject> {
    let mut meta = cx.meta.clone();
    meta.0.0.remove("progressToken");
    meta.0
        .0
        .retain(|k, _| !k.starts_with("io.modelcontextprotocol/"));
    (!meta.0.0.is_empty()).then_some(meta)
}

fn service_error(upstream: &str, e: ServiceError) -> ErrorData {
    match e {
        ServiceError::McpError(e) => e,
        other => ErrorData::new(
            ErrorCode::INTERNAL_ERROR,
            format!("upstream {upstream} did not answer: {other}"),
            Some(json!({"code": "upstream_unavailable"})),
        ),
    }
}

/// Everything plangate's server advertises: prompts, resources, tools (with
/// list changes) and the MCP Apps extension (`io.modelcontextprotocol/ui`)
/// for its plan review view. `plangate catalog` prints the same.
pub fn server_capabilities() -> ServerCapabilities {
    ServerCapabilities::builder()
        .enable_prompts()
        .enable_resources()
        .enable_tools()
        .enable_tool_list_changed()
        .enable_extensions_with(crate::apps::extensions())
        .build()
}

impl ServerHandler for GatewayHandler {
    fn get_info(&self) -> ServerConfig {
        let caps = server_capabilities();
        ServerConfig::new(caps)
            .with_server_info(Implementation::new("plangate", env!("CARGO_PKG_VERSION")))
            .with_instructions(crate::tools::general_instructions(
                &self.gw.config().gateway.tool_prefix,
            ))
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        // Over HTTP the opener's key is this session's, for the hub.
        if let Origin::Http { opener } = &*self.origin {
            let caller = self.caller(&cx).await?;
            let _ = opener.set(caller.key_id().map(str::to_owned));
        }
        cx.peer.set_peer_info(request.clone());
        self.negotiate_initialize(&request)
    }

    /// A request rmcp could not read as any MCP request. For a method
    /// plangate serves that means its params do not fit the method's
    /// schema: -32602 (invalid params) saying so, not -32601.
    async fn on_custom_request(
        &self,
        request: rmcp::model::CustomRequest,
        _cx: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CustomResult, ErrorData> {
        const SERVED: [&str; 11] = [
            "initialize",
            "ping",
            "tools/list",
            "tools/call",
            "prompts/list",
            "prompts/get",
            "resources/list",
            "resources/templates/list",
            "resources/read",
            "server/discover",
            "subscriptions/listen",
        ];
        let method = request.method;
        if method == crate::limits::TOO_LARGE_METHOD {
            let bytes = request
                .params
                .as_ref()
                .and_then(|p| p.get("bytes"))
                .and_then(Value::as_u64);
            return Err(crate::limits::too_large_error(
                bytes,
                self.gw.config().gateway.max_request_bytes,
            ));
        }
        if SERVED.contains(&method.as_str()) {
            let shape = match method.as_str() {
                "tools/call" => {
                    " (it needs params.name, a string, and optional params.arguments, an object)"
                }
                "prompts/get" => " (it needs params.name, a string)",
                "resources/read" => " (it needs params.uri, a string)",
                _ => "",
            };
            return Err(ErrorData::invalid_params(
                format!("invalid params for {method}: they do not match the MCP schema{shape}"),
                Some(json!({"method": method})),
            ));
        }
        Err(ErrorData::new(
            ErrorCode::METHOD_NOT_FOUND,
            format!("method not found: {method}"),
            Some(json!({"method": method})),
        ))
    }

    async fn on_initialized(&self, cx: NotificationContext<RoleServer>) {
        let key_id = match &*self.origin {
            Origin::Stdio { token } => match auth::resolve(&self.gw, token.as_deref()).await {
                Ok(caller) => caller.key_id().map(str::to_owned),
                Err(_) => None,
            },
            Origin::Http { opener } => opener.get().cloned().flatten(),
        };
        self.gw.hub().add_client(cx.peer, self.session, key_id);
    }

    fn accepted_subscription_filter(
        &self,
        _requested: &rmcp::model::SubscriptionFilter,
    ) -> Option<rmcp::model::SubscriptionFilter> {
        // 2026-07-28 clients hear of list changes on a listen stream.
        Some(
            rmcp::model::SubscriptionFilter::builder()
                .tools_list_changed()
                .prompts_list_changed()
                .resources_list_changed()
                .build(),
        )
    }

    async fn listen(&self, context: rmcp::service::SubscriptionContext) -> Result<(), ErrorData> {
        let caller = self.caller(context.request_context()).await?;
        let id = self
            .gw
            .hub()
            .add_subscription(context.sink().clone(), caller.key_id().map(str::to_owned));
        context.cancelled().await;
        self.gw.hub().remove_subscription(id);
        Ok(())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        cx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let caller = self.caller(&cx).await?;
        let plan_mode = match &caller {
            Caller::Key(key) => match self.gw.log().state(&key.id).await {
                Ok(state) => self
                    .gw
                    .config()
                    .modes
                    .resolve(state.mode.as_deref())
                    .0
                    .plan_mode(),
                Err(e) => {
                    tracing::error!("event log: {e}");
                    false
                }
            },
            Caller::Anonymous => false,
        };
        let catalog = self.gw.catalog();
        let mut tools = crate::tools::definitions(&self.gw, plan_mode);
        tools.extend(
            catalog
                .tools
                .iter()
                .filter(|t| t.offered())
                .map(|t| t.tool.clone()),
        );
        Ok(ListToolsResult::with_all_items(tools))
    }

    /// Every call, read or write, runs in a task rmcp spawns per request,
    /// whose future holds this one inline and is moved (copied) when it is
    /// spawned and when it completes; the large, rarely taken paths
    /// (gateway tools, planning, asking a person, an upstream's progress
    /// and questions) are boxed so a passthrough read does not copy their
    /// kilobytes of state.
    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.gw.note_call();
        let caller = self.caller(&cx).await?;
        let prefix = self.gw.config().gateway.tool_prefix.clone();
        if self.gw.rates().active() {
            let catalog = self.gw.catalog();
            let upstream_tool = catalog
                .tool(&request.name)
                .map(|t| (t.upstream.as_str(), t.original.as_str()));
            if let Err(refusal) =
                self.gw
                    .rates()
                    .check(caller.key_id(), caller.label(), upstream_tool)
            {
                tracing::info!(tool = %request.name, caller = caller.label(), "call refused: rate limited");
                return Ok(refusal.into_result().into());
            }
        }
        if let Some(tool) = GatewayTool::parse(&prefix, &request.name) {
            // Boxed, like every rarely taken large future below: see
            // `call_tool`'s note on the size of the per-request task.
            return Box::pin(self.call_gateway_tool(&caller, tool, request, &cx)).await;
        }
        let catalog = self.gw.catalog();
        let Some(tool) = catalog.tool(&request.name) else {
            if let Some(upstream) = catalog.gone_tool(&request.name) {
                return Ok(unavailable(upstream, &self.gw).into_result().into());
            }
            return Err(ErrorData::invalid_params(
                format!("unknown tool: {}", request.name),
                Some(json!({"tool": request.name})),
            ));
        };
        let refuse = |refusal: Refusal| -> Result<CallToolResponse, ErrorData> {
            self.gw
                .metrics()
                .record(&tool.upstream, &tool.original, Outcome::Refused, None);
            tracing::info!(tool = %tool.exposed, caller = caller.label(), code = refusal.code.as_str(), "call refused");
            Ok(refusal.into_result().into())
        };
        if !tool.enabled {
            return refuse(Refusal::new(
                Code::Forbidden,
                format!(
                    "tool {} is disabled in plangate's config (upstreams.{}.tools.{}.enabled = false); ask the operator to enable it",
                    tool.exposed, tool.upstream, tool.original
                ),
            ));
        }
        if let Some(why) = &tool.withheld {
            return refuse(Refusal::new(
                why.code(),
                format!("{}. Nothing was run or planned", why.reason(tool, &prefix)),
            ));
        }

        // The call must be one that could run before it is run or planned.
        let mut arguments = request.arguments.clone().unwrap_or_default();
        let explicit = match arguments.remove(PLAN_FLAG) {
            None | Some(Value::Bool(false)) => false,
            Some(Value::Bool(true)) => true,
            Some(_) => {
                return refuse(Refusal::new(
                    Code::InvalidArguments,
                    format!("\"{PLAN_FLAG}\" must be true or false"),
                ));
            }
        };
        let args_value = Value::Object(arguments.clone());
        if let Err(e) = check_safe_integers(&args_value) {
            return refuse(Refusal::new(
                Code::InvalidArguments,
                format!("{e}; send it as a string or a smaller number. Nothing was run or planned"),
            ));
        }
        if let Err(errors) = tool.check_arguments(&args_value) {
            return refuse(Refusal::new(
                Code::InvalidArguments,
                format!(
                    "the arguments do not match {}'s input schema: {}. Nothing was run or planned",
                    tool.exposed,
                    errors.join("; ")
                ),
            ));
        }

        let mut forward = request;
        forward.arguments = Some(arguments.clone());
        if tool.effect == Effect::Read {
            let (upstream, original) = (tool.upstream.clone(), tool.original.clone());
            return self
                .forward_call(&caller, &upstream, &original, forward, &cx)
                .await;
        }

        let Caller::Key(key) = &caller else {
            return refuse(Refusal::new(
                Code::PlanNeedsKey,
                format!(
                    "{} is a {} tool; callers without an API key may only read and can never plan. Create a key with `plangate keys create --name NAME --scope write`",
                    tool.exposed, tool.effect
                ),
            ));
        };
        let state = match self.gw.log().state(&key.id).await {
            Ok(state) => state,
            Err(e) => {
                return refuse(Refusal::store(e, "nothing was run or planned"));
            }
        };
        let (mode, undefined) = self.gw.config().modes.resolve(state.mode.as_deref());
        let (notice, list_changed) = self.observe_mode(&mode, undefined);
        if list_changed {
            let _ = Box::pin(cx.peer.notify_tool_list_changed()).await;
        }
        let acting = Acting {
            key: key.clone(),
            channel: self.channel(),
            operator: None,
        };
        let decision = decide(tool.effect, CallerScope::Key(key.scope), &mode, explicit);
        let result = match decision {
            Decision::Run => {
                let (upstream, original) = (tool.upstream.clone(), tool.original.clone());
                let response = self
                    .forward_call(&caller, &upstream, &original, forward, &cx)
                    .await?;
                return Ok(with_notice(response, notice));
            }
            Decision::Plan => {
                let reason = if explicit {
                    PlanReason::Explicit
                } else if key.scope == Scope::Plan {
                    PlanReason::Scope
                } else {
                    PlanReason::Mode
                };
                match Box::pin(plan::plan_write(
                    &self.gw,
                    &acting,
                    &mode,
                    tool,
                    arguments,
                    reason,
                    Some(state.clone()),
                ))
                .await
                {
                    Ok(result) => result,
                    Err(refusal) => return refuse(refusal),
                }
            }
            Decision::Refuse(code) => {
                let message = match code {
                    Code::Forbidden => format!(
                        "{} is a {} tool and key {:?} has scope {}, which allows reads only; ask the operator for a plan or write key",
                        tool.exposed, tool.effect, key.name, key.scope
                    ),
                    Code::ForbiddenByMode => format!(
                        "{} is a {} tool and mode {} runs only {} calls and refuses the rest; ask the person to change the mode ({prefix}begin_session) if this write is wanted",
                        tool.exposed, tool.effect, mode.name, mode.access
                    ),
                    other => format!("{} was refused ({other})", tool.exposed),
                };
                return refuse(Refusal::new(code, message));
            }
            Decision::Ask => {
                let (redacted, secrets) = self.gw.redactor().split(&args_value);
                let keyed = plangate_core::keyed_from_split(
                    redacted.clone(),
                    &secrets,
                    self.gw.material().signing_key(),
                );
                // Unsafe integers were refused before the decision.
                let digest = match plangate_core::arguments_fingerprint(
                    &tool.upstream,
                    &tool.original,
                    &keyed,
                ) {
                    Ok(d) => format!("sha256:{d}"),
                    Err(e) => return refuse(Refusal::new(Code::InvalidArguments, e.to_string())),
                };
                // A retry answering the upstream's own question (parked
                // call): the person already said yes to this call.
                let resuming = forward.request_state.as_deref().is_some_and(|state| {
                    crate::parked::Parked::is_park_state(&self.gw, &key.id, state)
                });
                if !resuming {
                    let round = crate::review::Round {
                        tool: &tool.exposed,
                        arguments: &args_value,
                        state: forward.request_state.as_deref(),
                        responses: forward.input_responses.as_ref(),
                    };
                    match Box::pin(crate::review::ask_for_call(
                        &self.gw, &acting, &mode, tool, &redacted, &digest, round, &cx,
                    ))
                    .await
                    {
                        Ok(crate::review::Asked::Yes) => {}
                        Ok(crate::review::Asked::Pending(response)) => return Ok(response),
                        Err(refusal) => return refuse(refusal),
                    }
                    forward.request_state = None;
                    forward.input_responses = None;
                }
                let (upstream, original) = (tool.upstream.clone(), tool.original.clone());
                let response = self
                    .forward_call(&caller, &upstream, &original, forward, &cx)
                    .await?;
                return Ok(with_notice(response, notice));
            }
        };
        Ok(with_notice(result.into(), notice))
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        cx: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        self.caller(&cx).await?;
        let prompts = self
            .gw
            .catalog()
            .prompts
            .iter()
            .map(|p| p.prompt.clone())
            .collect();
        Ok(ListPromptsResult::with_all_items(prompts))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        self.caller(&cx).await?;
        let catalog = self.gw.catalog();
        let Some(prompt) = catalog.prompt(&request.name) else {
            return Err(ErrorData::invalid_params(
                format!("unknown prompt: {}", request.name),
                None,
            ));
        };
        let Some(upstream) = self.gw.upstream(&prompt.upstream) else {
            return Err(ErrorData::new(
                ErrorCode::INTERNAL_ERROR,
                unavailable(&prompt.upstream, &self.gw).message,
                Some(json!({"code": "upstream_unavailable"})),
            ));
        };
        let mut params = GetPromptRequestParams::new(prompt.original.clone());
        params.arguments = request.arguments;
        // Boxed: rmcp's request futures are kilobytes, and this one would
        // otherwise sit inline in every request's task (see `call_tool`).
        let result = Box::pin(upstream.timed(upstream.peer().get_prompt(params)))
            .await
            .map_err(|e| service_error(&prompt.upstream, e))?;
        Ok(result.into())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        cx: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        self.caller(&cx).await?;
        let mut resources = self.gw.catalog().resources.clone();
        resources.push(crate::apps::view_resource());
        Ok(ListResourcesResult::with_all_items(resources))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        cx: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        self.caller(&cx).await?;
        Ok(ListResourceTemplatesResult::with_all_items(
            self.gw.catalog().resource_templates.clone(),
        ))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        self.caller(&cx).await?;
        if request.uri == crate::apps::VIEW_URI {
            return Ok(crate::apps::read_view().into());
        }
        let catalog = self.gw.catalog();
        let Some((upstream_name, original)) = catalog.route_uri(&request.uri) else {
            return Err(ErrorData::resource_not_found(
                format!("unknown resource: {}", request.uri),
                Some(json!({"uri": request.uri})),
            ));
        };
        let Some(upstream) = self.gw.upstream(&upstream_name) else {
            return Err(ErrorData::new(
                ErrorCode::INTERNAL_ERROR,
                unavailable(&upstream_name, &self.gw).message,
                Some(json!({"code": "upstream_unavailable"})),
            ));
        };
        let ns = catalog.namespaced.then_some(upstream_name.as_str());
        // Boxed for the same reason as in `get_prompt`.
        let mut result = Box::pin(
            upstream.timed(
                upstream
                    .peer()
                    .read_resource(ReadResourceRequestParams::new(original)),
            ),
        )
        .await
        .map_err(|e| service_error(&upstream_name, e))?;
        for contents in &mut result.contents {
            let uri = match contents {
                ResourceContents::TextResourceContents { uri, .. }
                | ResourceContents::BlobResourceContents { uri, .. } => uri,
                _ => continue,
            };
            *uri = plangate_core::expose_uri(ns, uri);
        }
        Ok(result.into())
    }
}

/// Reads `apply_plan`'s arguments.
fn parse_apply(arguments: &rmcp::model::JsonObject) -> Result<crate::apply::ApplyRequest, Refusal> {
    let bad = |what: &str| Refusal::new(Code::InvalidArguments, format!("{what}; nothing was run"));
    let step_ids = match arguments.get("step_ids") {
        None | Some(Value::Null) => None,
        Some(Value::Array(ids)) => Some(
            ids.iter()
                .map(|v| v.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| bad("step_ids must be a list of step id strings"))?,
        ),
        Some(_) => return Err(bad("step_ids must be a list of step id strings")),
    };
    let plan_digest = match arguments.get("plan_digest") {
        None | Some(Value::Null) => None,
        Some(Value::String(d)) => Some(d.clone()),
        Some(_) => return Err(bad("plan_digest must be a string like \"sha256:…\"")),
    };
    let continue_on_error = match arguments.get("continue_on_error") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(bad("continue_on_error must be true or false")),
    };
    if let Some(extra) = arguments
        .keys()
        .find(|k| !["step_ids", "plan_digest", "continue_on_error"].contains(&k.as_str()))
    {
        return Err(bad(&format!("apply_plan takes no argument {extra:?}")));
    }
    Ok(crate::apply::ApplyRequest {
        step_ids,
        plan_digest,
        continue_on_error,
    })
}

/// The argument that asks for a single write to be planned.
const PLAN_FLAG: &str = "_plangate_plan";

/// Adds a notice for the agent to a result: a field in plangate's own
/// answers, a trailing text block on an upstream's (whose structured
/// content stays untouched).
fn with_notice(response: CallToolResponse, notice: Option<String>) -> CallToolResponse {
    let Some(notice) = notice else {
        return response;
    };
    match response {
        CallToolResponse::Complete(mut result) => {
            if let Some(Value::Object(body)) = result.structured_content.as_mut()
                && body.contains_key("code")
            {
                body.insert("notice".into(), json!(notice));
            }
            result
                .content
                .push(ContentBlock::text(format!("plangate notice: {notice}")));
            result.into()
        }
        other => other,
    }
}

/// A sentence telling the agent what a mode lets it do.
fn describe_mode(spec: &ModeSpec, changed: bool) -> String {
    let verb = if changed { "is now" } else { "is" };
    if spec.name == DEFAULT_MODE {
        return format!("The mode {verb} default: calls run as your API key allows.");
    }
    let above = match spec.over_access {
        OverAccess::Plan => "become plan steps for the person to review",
        OverAccess::Refuse => "are refused",
        OverAccess::Ask => "need the person's yes first",
    };
    let runs = match spec.access {
        Effect::Read => "reads run".to_owned(),
        Effect::Write => "reads and writes run".to_owned(),
        Effect::Destructive => "every call runs".to_owned(),
    };
    format!(
        "The mode {verb} {}: {runs}; calls above {} {above}.",
        spec.name, spec.access
    )
}
