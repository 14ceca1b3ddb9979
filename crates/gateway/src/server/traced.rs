//! [`GatewayHandler`] with a span per request ([`crate::telemetry`]): the
//! handler rmcp serves. Every method `GatewayHandler` implements is
//! delegated — each request in a server span while telemetry is on, and
//! straight through while it is off; the methods it leaves to rmcp's
//! defaults are left to them here too.

// Logging and the legacy resource subscriptions are deprecated in rmcp,
// but served (to 2025-11-25 clients), so delegated too.
#![allow(deprecated)]

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CompleteRequestParams, CompleteResult, CustomRequest,
    CustomResult, GetPromptRequestParams, GetPromptResponse, InitializeRequestParams,
    InitializeResult, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult,
    ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse,
    ServerConfig, SetLevelRequestParams, SubscribeRequestParams, SubscriptionFilter,
    UnsubscribeRequestParams,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use tracing::Instrument as _;

use super::GatewayHandler;
use crate::telemetry;

/// The gateway's MCP handler: [`GatewayHandler`], traced.
pub struct Traced(pub GatewayHandler);

impl Traced {
    /// Runs `work` on the request's context `cx` — the answer to request
    /// `method` (about `target`) — in its server span while telemetry is
    /// on; `failed` tells a result that is an error of its own (a tool's
    /// `isError`).
    async fn traced<T, F>(
        &self,
        method: &str,
        target: Option<&str>,
        cx: RequestContext<RoleServer>,
        work: impl FnOnce(RequestContext<RoleServer>) -> F,
        failed: impl Fn(&T) -> bool,
    ) -> Result<T, ErrorData>
    where
        F: Future<Output = Result<T, ErrorData>>,
    {
        if !telemetry::enabled() {
            return work(cx).await;
        }
        let session = cx
            .extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.headers.get("mcp-session-id"))
            .and_then(|v| v.to_str().ok());
        let span = telemetry::request_span(&telemetry::Incoming {
            method,
            target,
            id: &cx.id,
            session,
            transport: if self.0.transport() == "stdio" {
                "pipe"
            } else {
                "tcp"
            },
            protocol: cx.protocol_version().map(|v| v.to_string()),
            meta: &cx.meta,
        });
        let result = work(cx).instrument(span.clone()).await;
        match &result {
            Err(e) => telemetry::failed(&span, &e.code.0.to_string()),
            Ok(value) if failed(value) => telemetry::failed(&span, "tool_error"),
            Ok(_) => {}
        }
        result
    }
}

fn never<T>(_: &T) -> bool {
    false
}

/// Delegates `ServerHandler` methods that take their request's params and
/// context, each in a server span named for its MCP method
/// ([`Traced::traced`]), about no one target and never an error of its
/// own: written once for all of them.
macro_rules! untargeted {
    ($($name:ident($params:ty) -> $answer:ty = $method:literal;)*) => {$(
        async fn $name(
            &self,
            request: $params,
            cx: RequestContext<RoleServer>,
        ) -> Result<$answer, ErrorData> {
            self.traced($method, None, cx, |cx| self.0.$name(request, cx), never)
                .await
        }
    )*};
}

impl ServerHandler for Traced {
    fn get_info(&self) -> ServerConfig {
        self.0.get_info()
    }

    untargeted! {
        initialize(InitializeRequestParams) -> InitializeResult = "initialize";
        list_tools(Option<PaginatedRequestParams>) -> ListToolsResult = "tools/list";
        list_prompts(Option<PaginatedRequestParams>) -> ListPromptsResult = "prompts/list";
        list_resources(Option<PaginatedRequestParams>) -> ListResourcesResult = "resources/list";
        list_resource_templates(Option<PaginatedRequestParams>) -> ListResourceTemplatesResult
            = "resources/templates/list";
        read_resource(ReadResourceRequestParams) -> ReadResourceResponse = "resources/read";
        set_level(SetLevelRequestParams) -> () = "logging/setLevel";
        complete(CompleteRequestParams) -> CompleteResult = "completion/complete";
        subscribe(SubscribeRequestParams) -> () = "resources/subscribe";
        unsubscribe(UnsubscribeRequestParams) -> () = "resources/unsubscribe";
    }

    async fn on_custom_request(
        &self,
        request: CustomRequest,
        cx: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        let method = request.method.clone();
        let work = |cx| self.0.on_custom_request(request, cx);
        self.traced(&method, None, cx, work, never).await
    }

    async fn on_initialized(&self, cx: NotificationContext<RoleServer>) {
        self.0.on_initialized(cx).await;
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        self.0.accepted_subscription_filter(requested)
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        self.0.listen(context).await
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let tool = request.name.clone();
        let work = |cx| self.0.call_tool(request, cx);
        let failed = |answer: &CallToolResponse| matches!(answer, CallToolResponse::Complete(r) if r.is_error == Some(true));
        self.traced("tools/call", Some(&tool), cx, work, failed)
            .await
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let prompt = request.name.clone();
        let work = |cx| self.0.get_prompt(request, cx);
        self.traced("prompts/get", Some(&prompt), cx, work, never)
            .await
    }
}
