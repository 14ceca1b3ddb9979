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
use std::time::Instant;

use plangate_core::Effect;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResponse, CallToolResult,
    CancelledNotificationParam, ClientRequest, DiscoverRequestMethod, DiscoverResult, ElicitResult,
    ElicitationAction, ErrorCode, GetPromptRequestParams, GetPromptResponse, Implementation,
    InitializeRequestParams, InitializeResult, ListPromptsResult, ListResourceTemplatesResult,
    ListResourcesResult, ListToolsResult, PaginatedRequestParams, ProtocolVersion,
    ReadResourceRequestParams, ReadResourceResponse, ResourceContents, ServerCapabilities,
    ServerConfig, ServerResult,
};
use rmcp::service::{NotificationContext, PeerRequestOptions, RequestContext, ServiceError};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::json;

use crate::Gateway;
use crate::auth::{self, Caller, Denied};
use crate::hub::Ask;
use crate::metrics::Outcome;
use crate::refusal::{Code, Refusal};

/// The JSON-RPC error code plangate answers when a request has no caller
/// it could run as (no key, bad key). In the implementation-defined server
/// range; `data.code` carries the stable name.
const UNAUTHORIZED: ErrorCode = ErrorCode(-32001);

/// Where a session's requests come from.
enum Origin {
    /// Over stdio the key comes from `PLANGATE_KEY`, once per process.
    Stdio { token: Option<String> },
    /// Over HTTP the auth middleware resolves the caller per request; the
    /// session is bound to the key that opened it.
    Http { bound: OnceLock<Option<String>> },
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
}

impl GatewayHandler {
    /// A handler for the stdio client, identified by `token` (from
    /// `PLANGATE_KEY`).
    pub fn stdio(gw: Arc<Gateway>, token: Option<String>) -> Self {
        GatewayHandler {
            gw,
            origin: Arc::new(Origin::Stdio { token }),
            session: SESSIONS.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// A handler for one HTTP session.
    pub fn http(gw: Arc<Gateway>) -> Self {
        GatewayHandler {
            gw,
            origin: Arc::new(Origin::Http {
                bound: OnceLock::new(),
            }),
            session: SESSIONS.fetch_add(1, Ordering::Relaxed),
        }
    }

    fn transport(&self) -> &'static str {
        match &*self.origin {
            Origin::Stdio { .. } => "stdio",
            Origin::Http { .. } => "http",
        }
    }

    /// The caller of this request, or the JSON-RPC error that explains why
    /// there is none.
    async fn caller(&self, cx: &RequestContext<RoleServer>) -> Result<Caller, ErrorData> {
        let resolved = match &*self.origin {
            Origin::Stdio { token } => auth::resolve(&self.gw, token.as_deref()).await,
            Origin::Http { bound } => {
                let caller = cx
                    .extensions
                    .get::<http::request::Parts>()
                    .and_then(|p| p.extensions.get::<Caller>())
                    .cloned()
                    .ok_or(Denied::NoKey);
                match caller {
                    Ok(caller) => {
                        let key = caller.key_id().map(str::to_owned);
                        let owner = bound.get_or_init(|| key.clone());
                        if *owner != key {
                            return Err(ErrorData::new(
                                UNAUTHORIZED,
                                "this MCP session was opened with another API key; start a new session with your own key",
                                Some(json!({"code": "session_key_mismatch"})),
                            ));
                        }
                        Ok(caller)
                    }
                    Err(denied) => Err(denied),
                }
            }
        };
        resolved.map_err(|denied| {
            ErrorData::new(
                UNAUTHORIZED,
                denied.message(self.transport()),
                Some(json!({"code": denied.code()})),
            )
        })
    }

    /// plangate serves MCP up to 2025-11-25 (with `initialize`) until full
    /// 2026-07-28 serving lands; a request that declares a later revision
    /// inline is refused so the client falls back to `initialize`.
    fn require_initialize_era(&self, cx: &RequestContext<RoleServer>) -> Result<(), ErrorData> {
        match cx.protocol_version() {
            Some(v) if !v.has_initialize() => Err(ErrorData::unsupported_protocol_version(
                v,
                ProtocolVersion::known_up_to(&ProtocolVersion::V_2025_11_25),
            )),
            _ => Ok(()),
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
        let Some(upstream) = self.gw.upstream(upstream_name) else {
            metrics.record(upstream_name, original, Outcome::Failed, None);
            return Ok(unavailable(upstream_name, &self.gw).into_result().into());
        };
        let mut params = CallToolRequestParams::new(original.to_owned());
        params.arguments = request.arguments;
        params.meta = forwarded_meta(cx);
        let hub = self.gw.hub();
        let mut call = hub.begin_call(
            upstream_name,
            self.session,
            &cx.peer,
            cx.meta.get_progress_token(),
        );
        let started = Instant::now();
        let sent = upstream
            .peer()
            .send_request_with_option(
                ClientRequest::CallToolRequest(CallToolRequest::new(params)),
                PeerRequestOptions::no_options(),
            )
            .await;
        let handle = match sent {
            Ok(handle) => handle,
            Err(e) => return Ok(self.call_failed(&upstream, original, e, None).into()),
        };
        hub.set_upstream_token(&call, handle.progress_token.clone())
            .await;
        let request_id = handle.id.clone();
        let response = handle.await_response();
        tokio::pin!(response);
        let outcome = loop {
            tokio::select! {
                r = &mut response => break r,
                Some(ask) = call.asks.recv() => answer_ask(ask, cx).await,
                () = cx.ct.cancelled() => {
                    // This request path does not cancel upstream on drop:
                    // tell the upstream by hand.
                    let _ = upstream
                        .peer()
                        .notify_cancelled(CancelledNotificationParam::new(
                            Some(request_id),
                            Some("cancelled by the client".to_owned()),
                        ))
                        .await;
                    metrics.record(upstream_name, original, Outcome::Failed, Some(started.elapsed()));
                    tracing::info!(upstream = upstream_name, tool = original, caller = caller.label(), "call cancelled by the client");
                    return Err(ErrorData::new(ErrorCode::INTERNAL_ERROR, "request cancelled", None));
                }
            }
        };
        drop(call);
        let elapsed = started.elapsed();
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
        Refusal::new(
            Code::UpstreamUnavailable,
            format!("upstream {name} did not answer ({error}); it is being reconnected — try again shortly"),
        )
        .into_result()
    }
}

/// Asks the calling client what an upstream asked during its call, inside
/// the client's own request so the transport relates the two.
async fn answer_ask(ask: Ask, cx: &RequestContext<RoleServer>) {
    let caps = cx
        .peer
        .peer_info()
        .and_then(|info| serde_json::to_value(&info.capabilities).ok())
        .unwrap_or_default();
    let declared = |what: &str| caps.get(what).is_some_and(|v| !v.is_null());
    let declined = |what: &str| {
        ErrorData::new(
            ErrorCode::INVALID_REQUEST,
            format!("the client did not declare {what} support"),
            None,
        )
    };
    let relay_err = |e: ServiceError| match e {
        ServiceError::McpError(e) => e,
        other => ErrorData::new(ErrorCode::INTERNAL_ERROR, other.to_string(), None),
    };
    match ask {
        Ask::Elicit(params, tx) => {
            let answer = if declared("elicitation") {
                cx.peer.create_elicitation(params).await.map_err(relay_err)
            } else {
                Ok(ElicitResult::new(ElicitationAction::Decline))
            };
            let _ = tx.send(answer);
        }
        Ask::Sample(params, tx) => {
            let answer = if declared("sampling") {
                #[allow(deprecated)]
                let r = cx.peer.create_message(params).await.map_err(relay_err);
                r
            } else {
                Err(declined("sampling"))
            };
            let _ = tx.send(answer);
        }
        Ask::Roots(tx) => {
            let answer = if declared("roots") {
                #[allow(deprecated)]
                let r = cx.peer.list_roots().await.map_err(relay_err);
                r
            } else {
                Err(declined("roots"))
            };
            let _ = tx.send(answer);
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

impl ServerHandler for GatewayHandler {
    fn get_info(&self) -> ServerConfig {
        let caps = ServerCapabilities::builder()
            .enable_prompts()
            .enable_resources()
            .enable_tools()
            .enable_tool_list_changed()
            .build();
        ServerConfig::new(caps)
            .with_server_info(Implementation::new("plangate", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        // Over HTTP this binds the session to the key that opened it.
        if let Origin::Http { .. } = &*self.origin {
            self.caller(&cx).await?;
        }
        cx.peer.set_peer_info(request.clone());
        self.negotiate_initialize(&request)
    }

    async fn on_initialized(&self, cx: NotificationContext<RoleServer>) {
        self.gw.hub().add_client(cx.peer);
    }

    async fn discover(&self, _cx: RequestContext<RoleServer>) -> Result<DiscoverResult, ErrorData> {
        // Not serving 2026-07-28 yet: -32601 makes clients fall back to
        // `initialize`.
        Err(ErrorData::method_not_found::<DiscoverRequestMethod>())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        cx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.require_initialize_era(&cx)?;
        self.caller(&cx).await?;
        let catalog = self.gw.catalog();
        let tools = catalog
            .tools
            .iter()
            .filter(|t| t.enabled)
            .map(|t| t.tool.clone())
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.require_initialize_era(&cx)?;
        let caller = self.caller(&cx).await?;
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
        if !tool.enabled {
            return Ok(Refusal::new(
                Code::Forbidden,
                format!(
                    "tool {} is disabled in plangate's config (upstreams.{}.tools.{}.enabled = false); ask the operator to enable it",
                    tool.exposed, tool.upstream, tool.original
                ),
            )
            .into_result()
            .into());
        }
        if tool.effect > Effect::Read
            && let Some(refusal) = refuse_write(&caller, tool)
        {
            self.gw
                .metrics()
                .record(&tool.upstream, &tool.original, Outcome::Refused, None);
            tracing::info!(tool = %tool.exposed, caller = caller.label(), code = refusal.code.as_str(), "call refused");
            return Ok(refusal.into_result().into());
        }
        let (upstream, original) = (tool.upstream.clone(), tool.original.clone());
        self.forward_call(&caller, &upstream, &original, request, &cx)
            .await
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        cx: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        self.require_initialize_era(&cx)?;
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
        self.require_initialize_era(&cx)?;
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
        let result = upstream
            .peer()
            .get_prompt(params)
            .await
            .map_err(|e| service_error(&prompt.upstream, e))?;
        Ok(result.into())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        cx: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        self.require_initialize_era(&cx)?;
        self.caller(&cx).await?;
        Ok(ListResourcesResult::with_all_items(
            self.gw.catalog().resources.clone(),
        ))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        cx: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        self.require_initialize_era(&cx)?;
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
        self.require_initialize_era(&cx)?;
        self.caller(&cx).await?;
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
        let mut result = upstream
            .peer()
            .read_resource(ReadResourceRequestParams::new(original))
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

/// Whether a write by `caller` is refused before it reaches an upstream
/// (DESIGN §4, with planning not yet built: nothing that would be planned
/// ever runs unplanned).
fn refuse_write(caller: &Caller, tool: &crate::CatalogTool) -> Option<Refusal> {
    let what = format!("{} is a {} tool", tool.exposed, tool.effect);
    match caller {
        Caller::Anonymous => Some(Refusal::new(
            Code::PlanNeedsKey,
            format!(
                "{what}; callers without an API key may only read. Create a key with `plangate keys create --name NAME --scope write`"
            ),
        )),
        Caller::Key(key) => match key.scope {
            plangate_core::Scope::Read => Some(Refusal::new(
                Code::Forbidden,
                format!(
                    "{what} and key {:?} has scope read, which allows reads only; ask the operator for a plan or write key",
                    key.name
                ),
            )),
            plangate_core::Scope::Plan => Some(Refusal::new(
                Code::Forbidden,
                format!(
                    "{what} and key {:?} has scope plan, whose writes must be planned; this plangate build cannot plan yet, so nothing was written",
                    key.name
                ),
            )),
            plangate_core::Scope::Write => None,
        },
    }
}

/// The server instructions sent at `initialize`.
const INSTRUCTIONS: &str = "plangate is a gateway in front of this session's MCP servers. Reads pass through. Writes run only as the caller's API key scope allows; a refused call answers isError with a stable code and says what to do next. plangate governs MCP tool calls only, not the agent's own shell or file edits.";
