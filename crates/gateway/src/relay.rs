//! A forwarded call in flight: the one task that sends an agent's call to
//! its upstream ([`start`], through [`crate::Upstream::send_call`]) and
//! reports the upstream's progress, its requests (elicitation, sampling,
//! roots) and its result, in wire order, to whichever client request is
//! waiting for it — the first request, or the retry that resumes a parked
//! call ([`crate::parked`]).

use std::sync::Arc;
use std::time::Instant;

use rmcp::model::{CallToolRequestParams, ProgressNotificationParam, ProgressToken, ServerResult};
use rmcp::service::ServiceError;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::hub::Ask;
use crate::{Gateway, Upstream};

/// What a forwarded call reports to the request waiting for it.
pub enum CallEvent {
    /// Progress, already under the token of the client request that
    /// started the call.
    Progress(ProgressNotificationParam),
    /// A request the upstream sent during the call.
    Ask(Ask),
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
/// (whose progress token, if any, is `client_token`) in a task of its own.
pub fn start(
    gw: Arc<Gateway>,
    upstream: Arc<Upstream>,
    params: CallToolRequestParams,
    session: u64,
    client_token: Option<ProgressToken>,
) -> Running {
    let (tx, rx) = mpsc::unbounded_channel();
    let cancel = CancellationToken::new();
    let ct = cancel.clone();
    let up = upstream.clone();
    tokio::spawn(async move {
        let hub = gw.hub();
        let mut call = hub.begin_call(up.name(), session, client_token);
        let sent = up.send_call(params, None).await;
        let handle = match sent {
            Ok(handle) => handle,
            Err(e) => {
                let _ = tx.send(CallEvent::Done(Err(e)));
                return;
            }
        };
        hub.set_upstream_request(&call, handle.id.clone(), handle.progress_token.clone())
            .await;
        let request_id = handle.id.clone();
        let response = handle.await_response();
        tokio::pin!(response);
        // The upstream's call_timeout, restarted by its progress; a
        // question to the client holds it for as long as a person may take.
        let timeout = up.call_timeout();
        let asking = gw.review_timeout().max(crate::upstream::ASK_TIMEOUT) + timeout;
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        let outcome = loop {
            tokio::select! {
                r = &mut response => break r,
                Some(ask) = call.asks.recv() => {
                    deadline.as_mut().reset(tokio::time::Instant::now() + asking);
                    let _ = tx.send(CallEvent::Ask(ask.from_upstream(up.name())));
                }
                Some(p) = call.progress.recv() => {
                    deadline.as_mut().reset(tokio::time::Instant::now() + timeout);
                    let _ = tx.send(CallEvent::Progress(p));
                }
                () = &mut deadline => {
                    tracing::warn!(upstream = %up.name(), "no answer within call_timeout ({}s); the call was cancelled", timeout.as_secs());
                    up.cancel_request(request_id, "no answer within plangate's call_timeout").await;
                    let _ = tx.send(CallEvent::Done(Err(ServiceError::Timeout { timeout })));
                    return;
                }
                () = ct.cancelled() => {
                    // This request path does not cancel upstream on drop:
                    // tell the upstream by hand.
                    up.cancel_request(request_id, "cancelled by the client").await;
                    return;
                }
            }
        };
        // Progress the upstream sent before its result goes out first.
        while let Ok(p) = call.progress.try_recv() {
            let _ = tx.send(CallEvent::Progress(p));
        }
        drop(call);
        let _ = tx.send(CallEvent::Done(outcome));
    });
    Running {
        events: rx,
        upstream,
        started: Instant::now(),
        cancel,
    }
}
