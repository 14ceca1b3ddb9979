//! The one way plangate calls an upstream's tool.
//!
//! Every tool call plangate sends — an agent's call passed through, a
//! preview while planning, the fresh preview before a step runs, a step's
//! call during an apply — goes out through [`Upstream::send_call`], and is
//! cancelled through [`Upstream::cancel_request`]. A call awaited in one go
//! (previews, apply) uses [`Upstream::call`]: bounded by the upstream's
//! `call_timeout`, stopped by a cancellation token, its outcome and latency
//! counted in the metrics; an apply's step hears the upstream's progress
//! as it runs ([`Upstream::call_watched`], [`Watch`]), which restarts the
//! timeout as it does for a passed-through call. A passed-through call relays the upstream's
//! progress and questions while it waits, so its loop is its own
//! ([`crate::parked`]) and its metrics are counted where it ends.

use std::time::{Duration, Instant};

use rmcp::model::ErrorCode;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, CancelledNotificationParam,
    ClientRequest, ProgressNotificationParam, ProgressToken, RequestId, RequestMetaObject,
    ServerResult,
};
use rmcp::service::{PeerRequestOptions, RequestHandle, ServiceError};
use rmcp::{ErrorData, RoleClient};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use plangate_core::Code;

use super::Upstream;
use crate::metrics::{Metrics, Outcome};

/// Who hears the progress of a call plangate makes on its own behalf (an
/// apply's step): `route` is told the request's progress token once it is
/// sent and answers the notifications routed to that token (with a value
/// that stops the routing when dropped); `heard` gets each, as the
/// upstream sent it. The upstream side does not know where progress is
/// routed — the gateway's hub does — so it is handed in.
pub struct Watch<'a> {
    /// Registers the token; the notifications for it, and a guard.
    pub route: &'a (dyn Fn(&ProgressToken) -> Routed<'a> + Send + Sync),
    /// Each notification heard (awaited before the next is read).
    pub heard:
        &'a (dyn Fn(ProgressNotificationParam) -> futures::future::BoxFuture<'a, ()> + Send + Sync),
}

/// The notifications routed to one token, and what keeps them routed.
pub type Routed<'a> = (
    mpsc::UnboundedReceiver<ProgressNotificationParam>,
    Box<dyn Send + 'a>,
);

/// Why a call awaited with [`Upstream::call`] has no tool result.
#[derive(Debug)]
pub enum CallError {
    /// The upstream answered a JSON-RPC error.
    Rpc(ErrorData),
    /// The upstream answered something other than a tool result.
    Unexpected,
    /// No answer within the upstream's `call_timeout`; the upstream was
    /// told the request is cancelled. It may have taken effect.
    Timeout(Duration),
    /// The caller cancelled; the upstream was told. It may have taken
    /// effect.
    Cancelled,
    /// No answer: the transport failed. `sent` says whether the request
    /// may have gone out (if not, it certainly had no effect).
    NoAnswer {
        /// Whether the request may have reached the upstream.
        sent: bool,
        /// What failed.
        error: ServiceError,
    },
}

impl CallError {
    /// The same failure as rmcp would report it, for callers that only log
    /// or relay it.
    pub fn into_service_error(self) -> ServiceError {
        match self {
            CallError::Rpc(e) => ServiceError::McpError(e),
            CallError::Unexpected => ServiceError::UnexpectedResponse,
            CallError::Timeout(timeout) => ServiceError::Timeout { timeout },
            CallError::Cancelled => ServiceError::Cancelled {
                reason: Some("cancelled by the caller".to_owned()),
            },
            CallError::NoAnswer { error, .. } => error,
        }
    }
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Rpc(e) => write!(f, "the upstream answered an error: {}", e.message),
            CallError::Unexpected => {
                f.write_str("the upstream answered something other than a tool result")
            }
            CallError::Timeout(t) => {
                write!(f, "no answer within its call_timeout ({}s)", t.as_secs())
            }
            CallError::Cancelled => f.write_str("cancelled"),
            CallError::NoAnswer { error, .. } => write!(f, "no answer ({error})"),
        }
    }
}

/// An upstream failure as the JSON-RPC error of a forwarded prompt,
/// resource read or subscription: kept with the upstream's other errors,
/// below the server and the notices that relay it.
pub(crate) fn service_error(upstream: &str, e: ServiceError) -> ErrorData {
    if let Some(refusal) = super::oauth::door_refusal(&e) {
        return ErrorData::new(
            ErrorCode(Code::UpstreamUnavailable.jsonrpc_code()),
            refusal.explain(upstream, None),
            Some(Code::UpstreamUnavailable.error_data()),
        );
    }
    match e {
        ServiceError::McpError(e) => e,
        other => ErrorData::new(
            ErrorCode(Code::UpstreamUnavailable.jsonrpc_code()),
            format!("upstream {upstream} did not answer: {other}"),
            Some(Code::UpstreamUnavailable.error_data()),
        ),
    }
}

impl Upstream {
    /// Sends `params` as a `tools/call`, with `meta` as its `_meta` if
    /// given. The answer comes through the returned handle; cancel it with
    /// [`Upstream::cancel_request`] (dropping the handle does not tell the
    /// upstream).
    pub async fn send_call(
        &self,
        params: CallToolRequestParams,
        meta: Option<RequestMetaObject>,
    ) -> Result<RequestHandle<RoleClient>, ServiceError> {
        let mut options = PeerRequestOptions::no_options();
        // The trace context of the span in force, when tracing is on.
        let meta = if crate::telemetry::enabled() {
            let mut meta = meta.unwrap_or_default();
            crate::telemetry::inject(&mut meta.0.0);
            Some(meta)
        } else {
            meta
        };
        if let Some(meta) = meta {
            options = options.with_meta(meta);
        }
        self.peer
            .send_request_with_option(
                ClientRequest::CallToolRequest(CallToolRequest::new(params)),
                options,
            )
            .await
    }

    /// Tells the upstream that request `id` is cancelled, and why.
    pub async fn cancel_request(&self, id: RequestId, reason: &str) {
        let _ = self
            .peer
            .notify_cancelled(CancelledNotificationParam::new(
                Some(id),
                Some(reason.to_owned()),
            ))
            .await;
    }

    /// Calls a tool and waits for its result: at most the upstream's
    /// `call_timeout`, and no longer than `cancel` stays uncancelled. The
    /// outcome and latency are counted in `metrics` under the tool called.
    pub async fn call(
        &self,
        metrics: &Metrics,
        params: CallToolRequestParams,
        meta: Option<RequestMetaObject>,
        cancel: &CancellationToken,
    ) -> Result<CallToolResult, CallError> {
        self.call_watched(metrics, params, meta, cancel, None).await
    }

    /// [`Upstream::call`], with the upstream's progress heard by `watch`
    /// while it runs (each notification also restarts the timeout).
    pub async fn call_watched(
        &self,
        metrics: &Metrics,
        params: CallToolRequestParams,
        meta: Option<RequestMetaObject>,
        cancel: &CancellationToken,
        watch: Option<&Watch<'_>>,
    ) -> Result<CallToolResult, CallError> {
        let tool = params.name.to_string();
        let started = Instant::now();
        let span = crate::telemetry::upstream_span(self.name(), &tool, self.network_transport());
        let answer = self
            .await_call(params, meta, cancel, watch)
            .instrument(span.clone())
            .await;
        match &answer {
            Ok(result) if result.is_error == Some(true) => {
                crate::telemetry::failed(&span, "tool_error")
            }
            Ok(_) => {}
            Err(CallError::Rpc(e)) => crate::telemetry::failed(&span, &e.code.0.to_string()),
            Err(CallError::Timeout(_)) => crate::telemetry::failed(&span, "timeout"),
            Err(CallError::Cancelled) => crate::telemetry::failed(&span, "cancelled"),
            Err(_) => {
                crate::telemetry::failed(&span, plangate_core::Code::UpstreamUnavailable.as_str())
            }
        }
        let outcome = match &answer {
            Ok(result) if result.is_error == Some(true) => Outcome::ToolError,
            Ok(_) => Outcome::Ok,
            Err(CallError::Rpc(_)) => Outcome::RpcError,
            Err(_) => Outcome::Failed,
        };
        metrics.record(self.name(), &tool, outcome, Some(started.elapsed()));
        answer
    }

    async fn await_call(
        &self,
        params: CallToolRequestParams,
        meta: Option<RequestMetaObject>,
        cancel: &CancellationToken,
        watch: Option<&Watch<'_>>,
    ) -> Result<CallToolResult, CallError> {
        let handle = self
            .send_call(params, meta)
            .await
            .map_err(|error| CallError::NoAnswer { sent: false, error })?;
        let id = handle.id.clone();
        let (mut heard, _routed) = match watch {
            Some(w) => {
                let (rx, guard) = (w.route)(&handle.progress_token);
                (Some(rx), Some(guard))
            }
            None => (None, None),
        };
        let timeout = self.call_timeout();
        let response = handle.await_response();
        tokio::pin!(response);
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                answer = &mut response => return match answer {
                    Ok(ServerResult::CallToolResult(result)) => Ok(result),
                    Ok(_) => Err(CallError::Unexpected),
                    Err(ServiceError::McpError(e)) => Err(CallError::Rpc(e)),
                    Err(error) => Err(CallError::NoAnswer { sent: true, error }),
                },
                () = cancel.cancelled() => {
                    self.cancel_request(id, "cancelled by the client").await;
                    return Err(CallError::Cancelled);
                }
                () = &mut deadline => {
                    tracing::warn!(upstream = %self.name(), "no answer within call_timeout ({}s); the call was cancelled", timeout.as_secs());
                    self.cancel_request(id, "no answer within plangate's call_timeout").await;
                    return Err(CallError::Timeout(timeout));
                }
                Some(p) = next_heard(&mut heard) => {
                    // Progress restarts the timeout, as for a call passed
                    // through.
                    deadline.as_mut().reset(tokio::time::Instant::now() + timeout);
                    if let Some(w) = watch {
                        (w.heard)(p).await;
                    }
                }
            }
        }
    }
}

/// The next notification heard, or never when nothing is watched.
async fn next_heard(
    heard: &mut Option<mpsc::UnboundedReceiver<ProgressNotificationParam>>,
) -> Option<ProgressNotificationParam> {
    match heard {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}
