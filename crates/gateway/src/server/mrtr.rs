//! A 2026-07-28 upstream's `input_required` answer to a request other than
//! `tools/call` (SEP-2322 allows it for `prompts/get` and `resources/read`): a 2026-07-28
//! client gets it as it is, its questions marked as the upstream's, and
//! its retry (answers and the upstream's request state) goes back to the
//! upstream; a 2025-11-25 client is asked inside its own request and
//! plangate retries for it. Tool calls have their own path
//! ([`crate::relay`], [`crate::parked`]), which also plans and records.

// Sampling and roots are deprecated by SEP-2577 but remain part of MCP.
#![allow(deprecated)]

use rmcp::model::{
    ClientRequest, ErrorCode, GetPromptRequest, GetPromptRequestParams, GetPromptResponse,
    InputRequest, InputRequiredResult, InputResponses, ReadResourceRequest,
    ReadResourceRequestParams, ReadResourceResult, RequestMetaObject, ResultType, ServerResult,
};
use rmcp::service::{PeerRequestOptions, RequestContext, ServiceError};
use rmcp::{ErrorData, RoleServer};

use super::forward::{answer_ask, declared, decline};
use crate::Upstream;
use crate::upstream::{marked_elicitation, service_error};

/// The most `input_required` rounds one request may take.
const MAX_ROUNDS: usize = 16;

/// How a request to a 2026-07-28 upstream ended after its rounds.
pub(super) enum Rounds {
    /// The upstream's final answer (boxed: a result is large).
    Done(Box<ServerResult>),
    /// Questions for a 2026-07-28 client, marked as the upstream's; its
    /// retry carries the answers and the upstream's request state.
    Asked(InputRequiredResult),
}

/// Sends a request built by `request` (from the answers and request state
/// of the round before; the first round gets the client's own) to a
/// 2026-07-28 upstream with `meta`, and goes on while the upstream answers
/// `input_required`: a 2026-07-28 client gets the questions back, a
/// 2025-11-25 client is asked inside its own request and plangate retries
/// for it.
pub(super) async fn rounds(
    upstream: &Upstream,
    meta: RequestMetaObject,
    mut answers: (Option<InputResponses>, Option<String>),
    request: impl Fn(Option<InputResponses>, Option<String>) -> ClientRequest,
    cx: &RequestContext<RoleServer>,
) -> Result<Rounds, ErrorData> {
    let name = upstream.name();
    for _ in 0..MAX_ROUNDS {
        let sent = request(answers.0.take(), answers.1.take());
        let options = PeerRequestOptions::no_options().with_meta(meta.clone());
        let answer = Box::pin(upstream.timed(async {
            upstream
                .peer()
                .send_request_with_option(sent, options)
                .await?
                .await_response()
                .await
        }))
        .await
        .map_err(|e| service_error(name, e))?;
        match answer {
            ServerResult::InputRequiredResult(asked) if crate::review::modern(cx) => {
                return Ok(Rounds::Asked(marked(asked, name)));
            }
            ServerResult::InputRequiredResult(asked) => {
                let requests = asked.input_requests.unwrap_or_default();
                answers = (
                    Some(ask_inline(requests, cx, name).await?),
                    asked.request_state,
                );
            }
            done => return Ok(Rounds::Done(Box::new(done))),
        }
    }
    Err(ErrorData::new(
        ErrorCode::INTERNAL_ERROR,
        format!("upstream {name} kept asking for input ({MAX_ROUNDS} rounds); plangate gave up"),
        None,
    ))
}

/// `prompts/get` on a 2026-07-28 upstream.
pub(super) async fn get_prompt(
    upstream: &Upstream,
    params: GetPromptRequestParams,
    meta: RequestMetaObject,
    cx: &RequestContext<RoleServer>,
) -> Result<GetPromptResponse, ErrorData> {
    let first = (params.input_responses.clone(), params.request_state.clone());
    let request = |input_responses, request_state| {
        let mut params = params.clone();
        params.input_responses = input_responses;
        params.request_state = request_state;
        ClientRequest::GetPromptRequest(GetPromptRequest::new(params))
    };
    match rounds(upstream, meta, first, request, cx).await? {
        Rounds::Done(done) => match *done {
            ServerResult::GetPromptResult(mut result) => {
                result.result_type.get_or_insert(ResultType::COMPLETE);
                Ok(result.into())
            }
            _ => Err(service_error(
                upstream.name(),
                ServiceError::UnexpectedResponse,
            )),
        },
        Rounds::Asked(asked) => Ok(GetPromptResponse::InputRequired(asked)),
    }
}

/// `resources/read` on a 2026-07-28 upstream: its contents, or its
/// questions for a 2026-07-28 client.
pub(super) async fn read_resource(
    upstream: &Upstream,
    params: ReadResourceRequestParams,
    meta: RequestMetaObject,
    cx: &RequestContext<RoleServer>,
) -> Result<Result<ReadResourceResult, InputRequiredResult>, ServiceError> {
    let first = (params.input_responses.clone(), params.request_state.clone());
    let request = |input_responses, request_state| {
        let mut params = params.clone();
        params.input_responses = input_responses;
        params.request_state = request_state;
        ClientRequest::ReadResourceRequest(ReadResourceRequest::new(params))
    };
    match rounds(upstream, meta, first, request, cx).await {
        Ok(Rounds::Done(done)) => match *done {
            ServerResult::ReadResourceResult(result) => Ok(Ok(result)),
            _ => Err(ServiceError::UnexpectedResponse),
        },
        Ok(Rounds::Asked(asked)) => Ok(Err(asked)),
        Err(e) => Err(ServiceError::McpError(e)),
    }
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
