//! The MCP server agents connect to.
//!
//! One [`GatewayHandler`] serves one client session (stdio: the process;
//! HTTP: one `Mcp-Session-Id`). It resolves the caller on every request,
//! answers lists from the catalog, and forwards calls, reads and prompts to
//! the upstream that owns them — or refuses them per policy.

use std::sync::{Arc, OnceLock};
use std::time::Instant;

use plangate_core::Effect;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, DiscoverRequestMethod, DiscoverResult, ErrorCode,
    GetPromptRequestParams, GetPromptResponse, Implementation, InitializeRequestParams,
    InitializeResult, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult,
    ListToolsResult, PaginatedRequestParams, ProtocolVersion, ReadResourceRequestParams,
    ReadResourceResponse, ResourceContents, ServerCapabilities, ServerConfig,
};
use rmcp::service::{RequestContext, ServiceError};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::json;

use crate::Gateway;
use crate::auth::{self, Caller, Denied};
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

/// The rmcp server handler for one client session.
#[derive(Clone)]
pub struct GatewayHandler {
    gw: Arc<Gateway>,
    origin: Arc<Origin>,
}

impl GatewayHandler {
    /// A handler for the stdio client, identified by `token` (from
    /// `PLANGATE_KEY`).
    pub fn stdio(gw: Arc<Gateway>, token: Option<String>) -> Self {
        GatewayHandler {
            gw,
            origin: Arc::new(Origin::Stdio { token }),
        }
    }

    /// A handler for one HTTP session.
    pub fn http(gw: Arc<Gateway>) -> Self {
        GatewayHandler {
            gw,
            origin: Arc::new(Origin::Http {
                bound: OnceLock::new(),
            }),
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
        let Some(upstream) = self.gw.upstream(upstream_name) else {
            return Ok(unavailable(upstream_name, &self.gw).into_result().into());
        };
        let mut params = CallToolRequestParams::new(original.to_owned());
        params.arguments = request.arguments;
        params.meta = forwarded_meta(cx);
        let started = Instant::now();
        let outcome = tokio::select! {
            r = upstream.peer().call_tool_once(params) => r,
            () = cx.ct.cancelled() => {
                tracing::info!(upstream = upstream_name, tool = original, caller = caller.label(), "call cancelled by client");
                return Err(ErrorData::new(ErrorCode::INTERNAL_ERROR, "request cancelled", None));
            }
        };
        let ms = started.elapsed().as_secs_f64() * 1000.0;
        match outcome {
            Ok(CallToolResponse::Complete(result)) => {
                tracing::info!(
                    upstream = upstream_name,
                    tool = original,
                    caller = caller.label(),
                    is_error = result.is_error.unwrap_or(false),
                    ms,
                    "tool call"
                );
                Ok(result.into())
            }
            Ok(_) => Ok(Refusal::new(
                Code::UpstreamUnavailable,
                format!("upstream {upstream_name} answered with a result type plangate does not forward (input_required or task)"),
            )
            .into_result()
            .into()),
            Err(ServiceError::McpError(e)) => {
                tracing::info!(upstream = upstream_name, tool = original, caller = caller.label(), code = e.code.0, ms, "tool call: upstream error");
                Err(e)
            }
            Err(e) => {
                tracing::warn!(upstream = upstream_name, tool = original, "tool call failed: {e}");
                Ok(Refusal::new(
                    Code::UpstreamUnavailable,
                    format!("upstream {upstream_name} did not answer ({e}); try again later"),
                )
                .into_result()
                .into())
            }
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
