//! A 2026-07-28 upstream's `input_required` answer to a request other than
//! `tools/call` (SEP-2322 allows it for `prompts/get`): a 2026-07-28
//! client gets it as it is, its questions marked as the upstream's, and
//! its retry (answers and the upstream's request state) goes back to the
//! upstream; a 2025-11-25 client is asked inside its own request and
//! plangate retries for it. Tool calls have their own path
//! ([`crate::relay`], [`crate::parked`]), which also plans and records.

// Sampling and roots are deprecated by SEP-2577 but remain part of MCP.
#![allow(deprecated)]

use rmcp::model::{
    ClientRequest, ElicitResult, ElicitationAction, ErrorCode, GetPromptRequest,
    GetPromptRequestParams, GetPromptResponse, InputRequest, InputRequiredResult, InputResponses,
    ResultType, ServerResult,
};
use rmcp::service::{RequestContext, ServiceError};
use rmcp::{ErrorData, RoleServer};
use serde_json::Value;

use super::service_error;
use crate::Upstream;
use crate::hub::marked_elicitation;

/// The most `input_required` rounds one request may take.
const MAX_ROUNDS: usize = 16;

/// `prompts/get` on a 2026-07-28 upstream.
pub(super) async fn get_prompt(
    upstream: &Upstream,
    mut params: GetPromptRequestParams,
    cx: &RequestContext<RoleServer>,
) -> Result<GetPromptResponse, ErrorData> {
    let name = upstream.name();
    for _ in 0..MAX_ROUNDS {
        let request = ClientRequest::GetPromptRequest(GetPromptRequest::new(params.clone()));
        let answer = Box::pin(upstream.timed(upstream.peer().send_request(request)))
            .await
            .map_err(|e| service_error(name, e))?;
        match answer {
            ServerResult::GetPromptResult(mut result) => {
                result.result_type.get_or_insert(ResultType::COMPLETE);
                return Ok(result.into());
            }
            ServerResult::InputRequiredResult(asked) if crate::review::modern(cx) => {
                return Ok(GetPromptResponse::InputRequired(marked(asked, name)));
            }
            ServerResult::InputRequiredResult(asked) => {
                let requests = asked.input_requests.unwrap_or_default();
                params.input_responses = Some(ask_inline(requests, cx, name).await?);
                params.request_state = asked.request_state;
            }
            _ => return Err(service_error(name, ServiceError::UnexpectedResponse)),
        }
    }
    Err(ErrorData::new(
        ErrorCode::INTERNAL_ERROR,
        format!("upstream {name} kept asking for input ({MAX_ROUNDS} rounds); plangate gave up"),
        None,
    ))
}

/// The upstream's questions, each elicitation marked as the upstream's so
/// a person never takes it for plangate's own.
fn marked(mut asked: InputRequiredResult, upstream: &str) -> InputRequiredResult {
    if let Some(requests) = asked.input_requests.as_mut() {
        for request in requests.values_mut() {
            if let InputRequest::Elicitation(r) = request {
                r.params = marked_elicitation(r.params.clone(), upstream);
            }
        }
    }
    asked
}

/// Asks a 2025-11-25 client, inside its own request, what the upstream
/// asked; a question it declared no support for is declined.
async fn ask_inline(
    requests: rmcp::model::InputRequests,
    cx: &RequestContext<RoleServer>,
    upstream: &str,
) -> Result<InputResponses, ErrorData> {
    let relay_err = |e: ServiceError| match e {
        ServiceError::McpError(e) => e,
        other => ErrorData::new(ErrorCode::INTERNAL_ERROR, other.to_string(), None),
    };
    let encode = |v: Result<Value, serde_json::Error>| {
        v.map_err(|e| {
            ErrorData::internal_error(format!("an answer plangate could not encode: {e}"), None)
        })
    };
    let declared = |what: &str| crate::review::client_capability(cx, what).is_some();
    let mut responses = InputResponses::new();
    for (key, request) in requests {
        let value = match request {
            InputRequest::Elicitation(r) => {
                let answer = if declared("elicitation") {
                    let params = marked_elicitation(r.params, upstream);
                    cx.peer
                        .create_elicitation(params)
                        .await
                        .map_err(relay_err)?
                } else {
                    ElicitResult::new(ElicitationAction::Decline)
                };
                encode(serde_json::to_value(answer))?
            }
            InputRequest::CreateMessage(r) if declared("sampling") => encode(
                serde_json::to_value(cx.peer.create_message(r.params).await.map_err(relay_err)?),
            )?,
            InputRequest::ListRoots(_) if declared("roots") => encode(serde_json::to_value(
                cx.peer.list_roots().await.map_err(relay_err)?,
            ))?,
            _ => {
                return Err(ErrorData::invalid_request(
                    format!(
                        "upstream {upstream} asked for input the client did not declare it can give"
                    ),
                    None,
                ));
            }
        };
        responses.insert(key, value);
    }
    Ok(responses)
}
