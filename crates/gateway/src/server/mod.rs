//! The MCP server agents connect to.
//!
//! One [`GatewayHandler`] serves one client session (stdio: the process;
//! HTTP: one `Mcp-Session-Id`). It resolves the caller on every request,
//! answers lists from the catalog, and forwards calls, reads and prompts to
//! the upstream that owns them — or refuses them per policy.
//!
//! `tools/call` is the pipeline in [`call`] — its checks in [`validate`],
//! its decision in [`judge`], asking the person in [`ask`], its end on the
//! record in [`record`]; plangate's own tools are [`gateway_tools`];
//! sending a call upstream and relaying what the upstream asks on the way
//! is [`forward`]; prompts, resource reads and completions are
//! [`relayed`]; what the agent knows of its mode is [`mode`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ErrorCode, GetPromptRequestParams, GetPromptResponse,
    Implementation, InitializeRequestParams, InitializeResult, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ReadResourceRequestParams, ReadResourceResponse, ServerConfig,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::json;

use plangate_core::Channel;
use rmcp::model::ContentBlock;
use serde_json::Value;

use crate::Gateway;
use crate::auth::{self, Caller, Denied, UNAUTHORIZED};
use crate::capabilities::server_capabilities;

mod ask;
mod call;
mod forward;
mod gateway_tools;
mod judge;
mod mode;
mod mrtr;
mod record;
mod relayed;
mod tool_call;
mod traced;
mod validate;

pub use traced::Traced;

use mode::SeenMode;

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

    /// The caller of this request, or the JSON-RPC error that explains why
    /// there is none.
    async fn caller(&self, cx: &RequestContext<RoleServer>) -> Result<Caller, ErrorData> {
        let resolved = self.caller_for(cx, auth::Asked::Other).await;
        self.answer_denied(resolved).map(|(caller, _)| caller)
    }

    /// [`Self::caller`] of a `tools/call` of `tool`, with where the key's
    /// log stood when the key was asked, if the store said and it could
    /// help the call ([`auth::LogSeen`]).
    async fn caller_seen(
        &self,
        cx: &RequestContext<RoleServer>,
        tool: &str,
    ) -> Result<(Caller, Option<auth::LogSeen>), ErrorData> {
        let resolved = self.caller_for(cx, auth::Asked::Tool(tool)).await;
        self.answer_denied(resolved)
    }

    /// The caller of a request that asks `asked`, with its [`auth::LogSeen`]
    /// if any.
    async fn caller_for(
        &self,
        cx: &RequestContext<RoleServer>,
        asked: auth::Asked<'_>,
    ) -> Result<(Caller, Option<auth::LogSeen>), Denied> {
        match &*self.origin {
            Origin::Stdio { token } => auth::resolve_seen(&self.gw, token.as_deref(), asked).await,
            // The auth middleware resolved the caller (and judged from the
            // request whether to ask where the key's log stands), and the
            // session guard ([`crate::session_guard`]) refused any other
            // caller before rmcp saw the message.
            Origin::Http { .. } => {
                let parts = cx.extensions.get::<http::request::Parts>();
                parts
                    .and_then(|p| p.extensions.get::<Caller>())
                    .cloned()
                    .map(|caller| {
                        let seen = parts.and_then(|p| p.extensions.get::<auth::LogSeen>());
                        (caller, seen.copied())
                    })
                    .ok_or(Denied::NoKey)
            }
        }
    }

    /// A resolved caller, or the JSON-RPC error that explains why there is
    /// none.
    fn answer_denied<T>(&self, resolved: Result<T, Denied>) -> Result<T, ErrorData> {
        resolved.map_err(|denied| {
            ErrorData::new(
                UNAUTHORIZED,
                denied.message(self.transport()),
                Some(json!({"code": denied.code()})),
            )
        })
    }
}

impl GatewayHandler {
    /// The server's instructions, and — when upstreams are down — which
    /// and why, so a client whose tools are missing hears the reason
    /// (with every upstream down, there is no tool to call to find out).
    fn instructions(&self) -> String {
        let general = crate::tools::general_instructions(&self.gw.config().gateway.tool_prefix);
        let down: Vec<String> = self
            .gw
            .down_upstreams()
            .into_iter()
            .filter(|(_, why)| why != "connecting")
            .map(|(name, why)| format!("{name} ({why})"))
            .collect();
        if down.is_empty() {
            return general;
        }
        format!(
            "{general} Not serving now, so their tools are missing until they start: {}.",
            down.join("; ")
        )
    }
}

impl ServerHandler for GatewayHandler {
    fn get_info(&self) -> ServerConfig {
        let caps = server_capabilities();
        ServerConfig::new(caps)
            .with_server_info(Implementation::new("plangate", env!("CARGO_PKG_VERSION")))
            .with_instructions(self.instructions())
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
        cx: RequestContext<RoleServer>,
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
            if let Ok(Caller::Key(key)) = self.caller(&cx).await {
                let acting = crate::acting::Acting {
                    key,
                    channel: self.channel(),
                    operator: None,
                };
                Box::pin(crate::call_log::record_too_large(&self.gw, &acting, bytes)).await;
            }
            return Err(crate::limits::too_large_error(
                bytes,
                self.gw.config().gateway.max_request_bytes,
            ));
        }
        // 2026-07-28 has no `initialize` (SEP-2575): a request of that
        // revision asking for it gets method-not-found, like any removed
        // method.
        let removed = method == "initialize" && crate::review::modern(&cx);
        if SERVED.contains(&method.as_str()) && !removed {
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
        requested: &rmcp::model::SubscriptionFilter,
    ) -> Option<rmcp::model::SubscriptionFilter> {
        // 2026-07-28 clients hear of list changes, and of updates of the
        // resources they name, on a listen stream; a URI no upstream of
        // plangate serves with subscriptions is left out of the
        // acknowledgment.
        let mut accepted = rmcp::model::SubscriptionFilter::builder()
            .tools_list_changed()
            .prompts_list_changed()
            .resources_list_changed()
            .build();
        let uris: Vec<String> = requested
            .resource_subscriptions
            .iter()
            .flatten()
            .filter(|uri| crate::notices::can_subscribe(&self.gw, uri))
            .cloned()
            .collect();
        if !uris.is_empty() {
            accepted.resource_subscriptions = Some(uris);
        }
        Some(accepted)
    }

    async fn listen(&self, context: rmcp::service::SubscriptionContext) -> Result<(), ErrorData> {
        let caller = self.caller(context.request_context()).await?;
        let id = self
            .gw
            .hub()
            .add_subscription(context.sink().clone(), caller.key_id().map(str::to_owned));
        let who = crate::notices::Subscriber::Listen(id);
        let uris = context
            .accepted()
            .resource_subscriptions
            .clone()
            .unwrap_or_default();
        let mut subscribed = Vec::new();
        for uri in uris {
            match crate::notices::subscribe(&self.gw, who, &uri).await {
                Ok(()) => subscribed.push(uri),
                Err(e) => {
                    tracing::info!(uri, "listen: no updates for this resource: {}", e.message)
                }
            }
        }
        context.cancelled().await;
        for uri in subscribed {
            let _ = crate::notices::unsubscribe(&self.gw, who, &uri).await;
        }
        self.gw.hub().remove_subscription(id);
        Ok(())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        cx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let caller = self.caller(&cx).await?;
        // `exit_plan_mode` is listed while the mode plans, and always to a
        // `plan`-scope key: every write of it is planned, whatever the mode.
        let plan_mode = match &caller {
            Caller::Key(key) if key.scope == plangate_core::Scope::Plan => true,
            Caller::Key(key) => self.in_plan_mode(&key.id).await.unwrap_or_else(|e| {
                tracing::error!("event log: {e}");
                false
            }),
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

    /// `tools/call`: the pipeline in `server/call.rs`.
    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.call(request, cx).await
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
        self.relay_prompt(request, cx).await
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
        self.relay_resource(request, cx).await
    }

    /// `logging/setLevel`: kept for this session and passed on to the
    /// upstreams ([`crate::notices`]).
    #[allow(deprecated)]
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.caller(&cx).await?;
        crate::notices::set_level(&self.gw, self.session, request.level).await;
        Ok(())
    }

    /// `completion/complete`: asked of the upstream that owns the prompt or
    /// resource template, under its own name for it. An upstream that
    /// offers no completions gets an empty answer, as the spec allows.
    async fn complete(
        &self,
        request: rmcp::model::CompleteRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CompleteResult, ErrorData> {
        self.caller(&cx).await?;
        self.relay_completion(request, cx).await
    }

    /// `resources/subscribe`: updates of that resource reach this session
    /// ([`crate::notices`]).
    #[allow(deprecated)]
    async fn subscribe(
        &self,
        request: rmcp::model::SubscribeRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.caller(&cx).await?;
        let who = crate::notices::Subscriber::Session(self.session);
        crate::notices::subscribe(&self.gw, who, &request.uri).await
    }

    /// `resources/unsubscribe`.
    #[allow(deprecated)]
    async fn unsubscribe(
        &self,
        request: rmcp::model::UnsubscribeRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.caller(&cx).await?;
        let who = crate::notices::Subscriber::Session(self.session);
        crate::notices::unsubscribe(&self.gw, who, &request.uri).await
    }
}

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
