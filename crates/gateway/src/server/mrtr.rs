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
    ClientRequest, ErrorCode, GetPromptRequest, GetPromptRequestParams, GetPromptResponse,
    InputRequest, InputRequiredResult, InputResponses, ResultType, ServerResult,
};
use rmcp::service::{RequestContext, ServiceError};
use rmcp::{ErrorData, RoleServer};

use super::forward::{answer_ask, declared, decline};
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
/// asked — the same questions, asked the same way, as a tool call's
/// ([`crate::relay::questions`], `forward::answer_ask`); a question it
/// declared no support for is declined.
async fn ask_inline(
    requests: rmcp::model::InputRequests,
    cx: &RequestContext<RoleServer>,
    upstream: &str,
) -> Result<InputResponses, ErrorData> {
    let (asks, answers) = crate::relay::questions(requests, upstream)?;
    for (_, ask) in asks {
        if declared(cx, &ask) {
            answer_ask(ask, cx).await;
        } else {
            decline(ask);
        }
    }
    // Every question is answered by now; the wait only bounds the
    // encoding of the answers.
    crate::relay::collect(answers, upstream, std::time::Duration::from_secs(5)).await
}
