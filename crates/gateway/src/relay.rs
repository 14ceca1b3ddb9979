//! A forwarded call in flight: the one task that sends an agent's call to
//! its upstream ([`start`], through [`crate::Upstream::send_call`]) and
//! reports the upstream's progress, its requests (elicitation, sampling,
//! roots) and its result, in wire order, to whichever client request is
//! waiting for it — the first request, or the retry that resumes a parked
//! call ([`crate::parked`]). A 2026-07-28 upstream asks by answering
//! `input_required`: its requests become the same questions to the client,
//! and the call is sent again with the answers and its request state.

// Sampling and roots are deprecated by SEP-2577 but remain part of MCP.
#![allow(deprecated)]

use std::sync::Arc;
use std::time::Instant;

use rmcp::model::{CallToolRequestParams, ProgressNotificationParam, ProgressToken, ServerResult};
use rmcp::service::ServiceError;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use crate::upstream::Ask;
use crate::{Gateway, Upstream};

/// The key under which an upstream's request travels in `inputRequests`
/// when the upstream gave it none (a 2025-11-25 upstream's own request);
/// a 2026-07-28 upstream's `input_required` keeps its own keys.
pub const INPUT_KEY: &str = "upstream";

/// What a forwarded call reports to the request waiting for it.
// A handful of events per call, each moved once through a channel: the
// size of `Done` costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
pub enum CallEvent {
    /// Progress, already under the token of the client request that
    /// started the call.
    Progress(ProgressNotificationParam),
    /// What the upstream asks the client during the call, under the keys
    /// a 2026-07-28 client answers them by: one request the upstream sent
    /// (under [`INPUT_KEY`]), or all the requests of a 2026-07-28
    /// upstream's `input_required`, under its own keys.
    Asks(Vec<(String, Ask)>),
    /// The upstream's answer (or why there is none).
    Done(Result<ServerResult, ServiceError>),
}

/// A forwarded call in flight. Dropping it cancels the upstream call
/// (a notification is sent), unless the call has already finished.
pub struct Running {
    /// The call's progress, requests and result, in the order they came.
    pub events: mpsc::UnboundedReceiver<CallEvent>,
    /// The upstream the call went to.
    pub upstream: Arc<Upstream>,
    /// When the call was sent.
    pub started: Instant,
    cancel: CancellationToken,
}

impl Running {
    /// Cancels the upstream call (tells the upstream so), e.g. when the
    /// client cancelled its request.
    pub fn cancel(&self) {
        self.cancel.cancel();
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// Sends `params` to `upstream` as the call of client session `session`
/// (whose progress token, if any, is `client_token`) in a task of its own;
/// `request_meta` overrides the request metadata rmcp sets (over
/// 2026-07-28, the caller's capabilities).
pub fn start(
    gw: Arc<Gateway>,
    upstream: Arc<Upstream>,
    params: CallToolRequestParams,
    request_meta: Option<rmcp::model::RequestMetaObject>,
    session: u64,
    client_token: Option<ProgressToken>,
) -> Running {
    let (tx, rx) = mpsc::unbounded_channel();
    let cancel = CancellationToken::new();
    let ct = cancel.clone();
    let up = upstream.clone();
    let span = crate::telemetry::upstream_span(
        upstream.name(),
        &params.name,
        upstream.network_transport(),
    );
    tokio::spawn(async move {
        let hub = gw.hub();
        let mut call = hub.begin_call(up.name(), session, client_token);
        // The upstream's call_timeout, restarted by its progress; a
        // question to the client holds it for as long as a person may take.
        let timeout = up.call_timeout();
        let asking = gw.review_timeout().max(crate::upstream::ASK_TIMEOUT) + timeout;
        // Over 2026-07-28 the upstream asks by answering `input_required`;
        // the call is sent again with the answers, so it is kept.
        let again = up.is_modern().then(|| params.clone());
        let mut next = Some(params);
        let mut rounds = 0;
        let outcome = loop {
            let Some(params) = next.take() else {
                break Err(ServiceError::UnexpectedResponse);
            };
            let sent = up.send_call(params, request_meta.clone()).await;
            let handle = match sent {
                Ok(handle) => handle,
                Err(e) => break Err(e),
            };
            hub.set_upstream_request(&call, handle.id.clone(), handle.progress_token.clone())
                .await;
            let request_id = handle.id.clone();
            let response = handle.await_response();
            tokio::pin!(response);
            let deadline = tokio::time::sleep(timeout);
            tokio::pin!(deadline);
            let answer = loop {
                tokio::select! {
                    r = &mut response => break r,
                    Some(ask) = call.asks.recv() => {
                        deadline.as_mut().reset(tokio::time::Instant::now() + asking);
                        let ask = ask.from_upstream(up.name());
                        let _ = tx.send(CallEvent::Asks(vec![(INPUT_KEY.to_owned(), ask)]));
                    }
                    Some(p) = call.progress.recv() => {
                        deadline.as_mut().reset(tokio::time::Instant::now() + timeout);
                        let _ = tx.send(CallEvent::Progress(p));
                    }
                    () = &mut deadline => {
                        crate::telemetry::failed(&tracing::Span::current(), "timeout");
                        tracing::warn!(upstream = %up.name(), "no answer within call_timeout ({}s); the call was cancelled", timeout.as_secs());
                        up.cancel_request(request_id, "no answer within plangate's call_timeout").await;
                        let _ = tx.send(CallEvent::Done(Err(ServiceError::Timeout { timeout })));
                        return;
                    }
                    () = ct.cancelled() => {
                        crate::telemetry::failed(&tracing::Span::current(), "cancelled");
                        // This request path does not cancel upstream on
                        // drop: tell the upstream by hand.
                        up.cancel_request(request_id, "cancelled by the client").await;
                        return;
                    }
                }
            };
            match (answer, &again) {
                (Ok(ServerResult::InputRequiredResult(asked)), Some(original))
                    if rounds < MAX_INPUT_ROUNDS =>
                {
                    rounds += 1;
                    let requests = asked.input_requests.unwrap_or_default();
                    let answers = tokio::select! {
                        a = ask_client(requests, &tx, up.name(), asking) => a,
                        () = ct.cancelled() => return,
                    };
                    match answers {
                        Ok(responses) => {
                            let mut retry = original.clone();
                            retry.input_responses = Some(responses);
                            retry.request_state = asked.request_state;
                            next = Some(retry);
                        }
                        Err(e) => break Err(ServiceError::McpError(e)),
                    }
                }
                (answer, _) => break answer,
            }
        };
        // Progress the upstream sent before its result goes out first.
        while let Ok(p) = call.progress.try_recv() {
            let _ = tx.send(CallEvent::Progress(p));
        }
        drop(call);
        if let Err(e) = &outcome {
            crate::telemetry::failed(&tracing::Span::current(), &crate::telemetry::service_error_kind(e));
        } else if let Ok(ServerResult::CallToolResult(r)) = &outcome
            && r.is_error == Some(true)
        {
            crate::telemetry::failed(&tracing::Span::current(), "tool_error");
        }
        let _ = tx.send(CallEvent::Done(outcome));
    }.instrument(span));
    Running {
        events: rx,
        upstream,
        started: Instant::now(),
        cancel,
    }
}

/// The most `input_required` rounds one call may take before plangate
/// gives up on it (an upstream that keeps asking).
const MAX_INPUT_ROUNDS: usize = 16;

/// Asks the calling client what a 2026-07-28 upstream's `input_required`
/// asks — each request as a question of the call, exactly as an older
/// upstream's own `elicitation/create`, `sampling/createMessage` or
/// `roots/list` would be ([`CallEvent::Asks`]) — and collects the answers
/// under the upstream's keys for the retry.
async fn ask_client(
    requests: rmcp::model::InputRequests,
    tx: &mpsc::UnboundedSender<CallEvent>,
    upstream: &str,
    wait: std::time::Duration,
) -> Result<rmcp::model::InputResponses, rmcp::ErrorData> {
    let (asks, answers) = questions(requests, upstream)?;
    let _ = tx.send(CallEvent::Asks(asks));
    collect(answers, upstream, wait).await
}

/// The questions an upstream's `inputRequests` hold, each marked as the
/// upstream's, and where each answer arrives (as the JSON an
/// `inputResponses` entry holds).
#[allow(clippy::type_complexity)]
pub(crate) fn questions(
    requests: rmcp::model::InputRequests,
    upstream: &str,
) -> Result<(Vec<(String, Ask)>, Vec<(String, Answer)>), rmcp::ErrorData> {
    use rmcp::model::InputRequest;
    use tokio::sync::oneshot;
    let mut asks = Vec::new();
    let mut answers = Vec::new();
    for (key, request) in requests {
        let (ask, answer) = match request {
            InputRequest::Elicitation(r) => {
                let (otx, orx) = oneshot::channel();
                (
                    Ask::Elicit(r.params, otx).from_upstream(upstream),
                    to_value(orx),
                )
            }
            InputRequest::CreateMessage(r) => {
                let (otx, orx) = oneshot::channel();
                (Ask::Sample(r.params, otx), to_value(orx))
            }
            InputRequest::ListRoots(_) => {
                let (otx, orx) = oneshot::channel();
                (Ask::Roots(otx), to_value(orx))
            }
            _ => {
                return Err(rmcp::ErrorData::invalid_request(
                    format!("upstream {upstream} asked for input plangate cannot relay"),
                    None,
                ));
            }
        };
        asks.push((key.clone(), ask));
        answers.push((key, answer));
    }
    Ok((asks, answers))
}

/// Where the answer to one question arrives.
pub(crate) type Answer = tokio::sync::oneshot::Receiver<Result<serde_json::Value, rmcp::ErrorData>>;

/// The answers to [`questions`], under their keys, each waited for at most
/// `wait`; the first error (or a question left unanswered) ends it.
pub(crate) async fn collect(
    answers: Vec<(String, Answer)>,
    upstream: &str,
    wait: std::time::Duration,
) -> Result<rmcp::model::InputResponses, rmcp::ErrorData> {
    let mut responses = rmcp::model::InputResponses::new();
    for (key, answer) in answers {
        match tokio::time::timeout(wait, answer).await {
            Ok(Ok(Ok(value))) => {
                responses.insert(key, value);
            }
            Ok(Ok(Err(e))) => return Err(e),
            _ => {
                return Err(rmcp::ErrorData::invalid_request(
                    format!("the client did not answer upstream {upstream}'s question"),
                    None,
                ));
            }
        }
    }
    Ok(responses)
}

/// A typed answer to a question, as the JSON an `inputResponses` entry
/// holds.
fn to_value<T: serde::Serialize + Send + 'static>(
    answer: tokio::sync::oneshot::Receiver<Result<T, rmcp::ErrorData>>,
) -> tokio::sync::oneshot::Receiver<Result<serde_json::Value, rmcp::ErrorData>> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let value = match answer.await {
            Ok(Ok(v)) => serde_json::to_value(v).map_err(|e| {
                rmcp::ErrorData::internal_error(
                    format!("an answer plangate could not encode: {e}"),
                    None,
                )
            }),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(rmcp::ErrorData::invalid_request(
                "the question was dropped before it was answered",
                None,
            )),
        };
        let _ = tx.send(value);
    });
    rx
}
