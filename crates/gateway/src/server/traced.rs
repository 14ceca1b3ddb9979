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
    /// Runs `work`, the answer to request `method` (about `target`), in its
    /// server span; `failed` tells a result that is an error of its own (a
    /// tool's `isError`).
    async fn traced<T>(
        &self,
        method: &str,
        target: Option<&str>,
        cx: &RequestContext<RoleServer>,
        work: impl Future<Output = Result<T, ErrorData>>,
        failed: impl Fn(&T) -> bool,
    ) -> Result<T, ErrorData> {
        if !telemetry::enabled() {
            return work.await;
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
        let result = work.instrument(span.clone()).await;
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

impl ServerHandler for Traced {
    fn get_info(&self) -> ServerConfig {
        self.0.get_info()
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        let context = cx.clone();
        self.traced(
            "initialize",
            None,
            &context,
            self.0.initialize(request, cx),
            never,
        )
        .await
    }

    async fn on_custom_request(
        &self,
        request: CustomRequest,
        cx: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        let context = cx.clone();
        let method = request.method.clone();
        self.traced(
            &method,
            None,
            &context,
            self.0.on_custom_request(request, cx),
            never,
        )
        .await
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

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        cx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let context = cx.clone();
        self.traced(
            "tools/list",
            None,
            &context,
            self.0.list_tools(request, cx),
            never,
        )
        .await
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let context = cx.clone();
        let tool = request.name.clone();
        self.traced(
            "tools/call",
            Some(&tool),
            &context,
            self.0.call_tool(request, cx),
            |answer| matches!(answer, CallToolResponse::Complete(r) if r.is_error == Some(true)),
        )
        .await
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        cx: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let context = cx.clone();
        self.traced(
            "prompts/list",
            None,
            &context,
            self.0.list_prompts(request, cx),
            never,
        )
        .await
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let context = cx.clone();
        let prompt = request.name.clone();
        self.traced(
            "prompts/get",
            Some(&prompt),
            &context,
            self.0.get_prompt(request, cx),
            never,
        )
        .await
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        cx: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let context = cx.clone();
        self.traced(
            "resources/list",
            None,
            &context,
            self.0.list_resources(request, cx),
            never,
        )
        .await
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        cx: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let context = cx.clone();
        self.traced(
            "resources/templates/list",
            None,
            &context,
            self.0.list_resource_templates(request, cx),
            never,
        )
        .await
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let context = cx.clone();
        self.traced(
            "resources/read",
            None,
            &context,
            self.0.read_resource(request, cx),
            never,
        )
        .await
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let context = cx.clone();
        self.traced(
            "logging/setLevel",
            None,
            &context,
            self.0.set_level(request, cx),
            never,
        )
        .await
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        let context = cx.clone();
        self.traced(
            "completion/complete",
            None,
            &context,
            self.0.complete(request, cx),
            never,
        )
        .await
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let context = cx.clone();
        self.traced(
            "resources/subscribe",
            None,
            &context,
            self.0.subscribe(request, cx),
            never,
        )
        .await
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let context = cx.clone();
        self.traced(
            "resources/unsubscribe",
            None,
            &context,
            self.0.unsubscribe(request, cx),
            never,
        )
        .await
    }
}
