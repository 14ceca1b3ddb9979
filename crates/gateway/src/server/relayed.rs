//! Prompts, resource reads and completions, relayed to the upstream that
//! owns them under its own names for them. Apart from the handler because
//! each is the same work — route by plangate's exposed name, ask the
//! upstream as its protocol revision asks, answer in plangate's names —
//! and none of it is plangate's own decision.

use std::sync::Arc;

use rmcp::model::{
    CompleteRequestParams, CompleteResult, ErrorCode, GetPromptRequestParams, GetPromptResponse,
    ReadResourceRequestParams, ReadResourceResponse, Reference, ResourceContents, ResultType,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use serde_json::json;

use super::forward::{self, unavailable};
use super::{GatewayHandler, mrtr};
use crate::Upstream;
use crate::upstream::service_error;

impl GatewayHandler {
    /// Upstream `name`, or the JSON-RPC error saying it is unavailable.
    fn connected(&self, name: &str) -> Result<Arc<Upstream>, ErrorData> {
        self.gw.upstream(name).ok_or_else(|| {
            ErrorData::new(
                ErrorCode(plangate_core::Code::UpstreamDown.jsonrpc_code()),
                unavailable(name, &self.gw).message,
                Some(plangate_core::Code::UpstreamDown.error_data()),
            )
        })
    }

    /// `prompts/get`, asked of the upstream that owns the prompt.
    pub(super) async fn relay_prompt(
        &self,
        request: GetPromptRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let catalog = self.gw.catalog();
        let Some(prompt) = catalog.prompt(&request.name) else {
            return Err(ErrorData::invalid_params(
                format!("unknown prompt: {}", request.name),
                None,
            ));
        };
        let upstream = self.connected(&prompt.upstream)?;
        let mut params = GetPromptRequestParams::new(prompt.original.clone());
        params.arguments = request.arguments;
        if !upstream.is_modern() {
            // Boxed: rmcp's request futures are kilobytes, and this one
            // would otherwise sit inline in every request's task (see
            // `call_tool`).
            let mut result = Box::pin(upstream.timed(upstream.peer().get_prompt(params)))
                .await
                .map_err(|e| service_error(&prompt.upstream, e))?;
            // A 2025-11-25 upstream sends none; a 2026-07-28 client needs
            // it (rmcp drops it for older clients).
            result.result_type.get_or_insert(ResultType::COMPLETE);
            return Ok(result.into());
        }
        // A 2026-07-28 upstream may answer input_required (SEP-2322).
        params.input_responses = request.input_responses;
        params.request_state = request.request_state;
        let meta = forward::modern_meta(&self.gw, self.session, &cx);
        Box::pin(mrtr::get_prompt(&upstream, params, meta, &cx)).await
    }

    /// `resources/read` of an upstream's resource, its URIs answered in
    /// plangate's exposed form.
    pub(super) async fn relay_resource(
        &self,
        request: ReadResourceRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let catalog = self.gw.catalog();
        let Some((upstream_name, original)) = catalog.route_uri(&request.uri) else {
            return Err(ErrorData::resource_not_found(
                format!("unknown resource: {}", request.uri),
                Some(json!({"uri": request.uri})),
            ));
        };
        let upstream = self.connected(&upstream_name)?;
        let ns = catalog.namespaced.then_some(upstream_name.as_str());
        let mut params = ReadResourceRequestParams::new(original);
        let answer = if upstream.is_modern() {
            // A 2026-07-28 upstream may answer input_required (SEP-2322).
            params.input_responses = request.input_responses;
            params.request_state = request.request_state;
            let meta = forward::modern_meta(&self.gw, self.session, &cx);
            match Box::pin(mrtr::read_resource(&upstream, params, meta, &cx)).await {
                Ok(Err(asked)) => return Ok(ReadResourceResponse::InputRequired(asked)),
                Ok(Ok(result)) => Ok(result),
                Err(e) => Err(e),
            }
        } else {
            // Boxed for the same reason as in `get_prompt`.
            Box::pin(upstream.timed(upstream.peer().read_resource(params))).await
        };
        let mut result = answer.map_err(|e| match service_error(&upstream_name, e) {
            // SEP-2164: a resource-not-found error (-32602; -32002 before
            // it) names the URI asked for, in plangate's exposed form.
            mut e
                if (e.code == ErrorCode::INVALID_PARAMS
                    || e.code == ErrorCode::RESOURCE_NOT_FOUND)
                    && e.data.is_none() =>
            {
                e.data = Some(json!({"uri": request.uri}));
                e
            }
            e => e,
        })?;
        result.result_type.get_or_insert(ResultType::COMPLETE);
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

    /// `completion/complete`, asked of the upstream that owns the prompt or
    /// resource template.
    pub(super) async fn relay_completion(
        &self,
        request: CompleteRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        let catalog = self.gw.catalog();
        let mut forwarded = request;
        let upstream_name = match &mut forwarded.r#ref {
            Reference::Prompt(p) => {
                let Some(prompt) = catalog.prompt(&p.name) else {
                    return Err(ErrorData::invalid_params(
                        format!("unknown prompt: {}", p.name),
                        Some(json!({"name": p.name})),
                    ));
                };
                p.name = prompt.original.clone();
                prompt.upstream.clone()
            }
            Reference::Resource(r) => {
                let Some((upstream, original)) = catalog.route_uri(&r.uri) else {
                    return Err(ErrorData::resource_not_found(
                        format!("unknown resource template: {}", r.uri),
                        Some(json!({"uri": r.uri})),
                    ));
                };
                r.uri = original;
                upstream
            }
            _ => {
                return Err(ErrorData::invalid_params(
                    "completion/complete: unknown kind of ref (use ref/prompt or ref/resource)",
                    None,
                ));
            }
        };
        let upstream = self.connected(&upstream_name)?;
        let offers = upstream
            .peer()
            .peer_info()
            .is_some_and(|i| i.capabilities.completions.is_some());
        if !offers {
            return Ok(CompleteResult::default());
        }
        forwarded.meta = upstream
            .is_modern()
            .then(|| forward::modern_meta(&self.gw, self.session, &cx));
        let mut result = Box::pin(upstream.timed(upstream.peer().complete(forwarded)))
            .await
            .map_err(|e| service_error(&upstream_name, e))?;
        result.result_type.get_or_insert(ResultType::COMPLETE);
        Ok(result)
    }
}
