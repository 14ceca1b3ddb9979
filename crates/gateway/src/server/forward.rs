//! Forwarding a call to the upstream that owns the tool: relaying its
//! progress and its questions (elicitation, sampling, roots) to the calling
//! client, parking the call over 2026-07-28 while the client answers, and
//! telling a failed or silent upstream apart from a tool's own error.

// Sampling and roots are deprecated by SEP-2577 but remain part of MCP
// 2025-11-25; relaying them during a call is part of being a faithful
// gateway.
#![allow(deprecated)]

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ElicitResult, ElicitationAction,
    ErrorCode, ServerResult,
};
use rmcp::service::{RequestContext, ServiceError};
use rmcp::{ErrorData, RoleServer};
use serde_json::{Value, json};

use plangate_core::Code;

use super::GatewayHandler;
use crate::Gateway;
use crate::auth::Caller;
use crate::metrics::Outcome;
use crate::refusal::Refusal;
use crate::relay::{CallEvent, Running};
use crate::upstream::Ask;

/// A call being forwarded: who calls, the upstream's tool, the request it
/// came in, and — over 2026-07-28 — what binds a parked call's retry to it.
struct Forwarding<'a> {
    caller: &'a Caller,
    upstream: &'a str,
    original: &'a str,
    cx: &'a RequestContext<RoleServer>,
    /// Whether the request speaks 2026-07-28: an upstream's question then
    /// travels as `input_required`.
    modern: bool,
    kid: String,
    tool: String,
    /// Digest of the call's arguments (over 2026-07-28; empty before).
    args: String,
    /// Progress already sent under the client's token, which the
    /// upstream's is counted above.
    progress_sent: f64,
}

impl Forwarding<'_> {
    /// Who retries the call, with what.
    fn who(&self) -> crate::parked::Retry<'_> {
        crate::parked::Retry {
            kid: &self.kid,
            tool: &self.tool,
            args: &self.args,
        }
    }
}

/// Where forwarding stands after a stage: it goes on with `T`, or the call
/// ended here with this answer.
enum Going<T> {
    On(T),
    Ended(Result<CallToolResponse, ErrorData>),
}

impl GatewayHandler {
    /// Calls `original` on upstream `upstream_name` for `caller` and
    /// relays its answer; every path records the call's metrics.
    /// `progress_sent` is what the request's progress token already
    /// carried (a question's heartbeat): the upstream's progress is
    /// counted above it.
    pub(super) async fn forward_call(
        &self,
        caller: &Caller,
        (upstream_name, original, progress_sent): (&str, &str, f64),
        request: CallToolRequestParams,
        cx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let modern = crate::review::modern(cx);
        let kid = caller.key_id().unwrap_or_default().to_owned();
        let tool = request.name.to_string();
        // Over 2026-07-28 an upstream's question travels as input_required,
        // bound to the call's arguments.
        let args = if modern {
            let value = Value::Object(request.arguments.clone().unwrap_or_default());
            match crate::review::args_digest(&self.gw, &value) {
                Ok(d) => d,
                Err(refusal) => return Ok(refusal.into_result().into()),
            }
        } else {
            String::new()
        };
        let at = Forwarding {
            caller,
            upstream: upstream_name,
            original,
            cx,
            modern,
            kid,
            tool,
            args,
            progress_sent,
        };
        let running = match self.open(&at, request) {
            Going::On(running) => running,
            Going::Ended(answer) => return answer,
        };
        let (outcome, running) = match self.relay(&at, running).await {
            Going::On(done) => done,
            Going::Ended(answer) => return answer,
        };
        let elapsed = running.started.elapsed();
        let upstream = running.upstream.clone();
        drop(running);
        self.answered(&at, outcome, &upstream, elapsed)
    }

    /// Sends the call upstream — or, for the retry that answers what the
    /// upstream asked, takes the same call up again.
    fn open(&self, at: &Forwarding<'_>, request: CallToolRequestParams) -> Going<Running> {
        let (upstream_name, original, cx) = (at.upstream, at.original, at.cx);
        if let Some(state) = request.request_state.as_deref()
            && at.modern
        {
            let responses = request.input_responses.as_ref();
            return match crate::parked::Parked::resume(&self.gw, at.who(), state, responses) {
                Ok(running) => Going::On(running),
                // SEP-2322: a request state that fails verification is
                // rejected as invalid params, not answered as a result.
                Err(refusal) => Going::Ended(Err(ErrorData::invalid_params(
                    refusal.message,
                    Some(json!({"code": refusal.code})),
                ))),
            };
        }
        let Some(upstream) = self.gw.upstream(upstream_name) else {
            let metrics = self.gw.metrics();
            metrics.record(upstream_name, original, Outcome::Failed, None);
            return Going::Ended(Ok(unavailable(upstream_name, &self.gw)
                .into_result()
                .into()));
        };
        let mut params = CallToolRequestParams::new(original.to_owned());
        params.arguments = request.arguments;
        params.meta = forwarded_meta(cx);
        // A 2026-07-28 client may answer up front (inputResponses without
        // a request state); a 2026-07-28 upstream reads them.
        let mut request_meta = None;
        if upstream.is_modern() {
            params.input_responses = request.input_responses;
            request_meta = Some(modern_meta(&self.gw, self.session, cx));
        }
        Going::On(crate::relay::start(
            self.gw.clone(),
            upstream,
            params,
            request_meta,
            self.session,
            cx.meta.get_progress_token(),
        ))
    }

    /// Relays the running call's progress and questions to the client
    /// until the upstream answers (or its channel closes): then the
    /// outcome, with the call it came from.
    async fn relay(
        &self,
        at: &Forwarding<'_>,
        mut running: Running,
    ) -> Going<(Result<ServerResult, ServiceError>, Running)> {
        let cx = at.cx;
        let my_token = cx.meta.get_progress_token();
        // Counted above what the token carried before the call.
        let mut rising = crate::apply::Rising::after(at.progress_sent);
        loop {
            tokio::select! {
                event = running.events.recv() => match event {
                    Some(CallEvent::Done(r)) => return Going::On((r, running)),
                    Some(CallEvent::Progress(mut p)) => {
                        // A retry may carry a token of its own.
                        if let Some(token) = &my_token
                            && let Some((value, total)) = rising.next(p.progress, p.total)
                        {
                            (p.progress, p.total) = (value, total);
                            p.progress_token = token.clone();
                            let _ = Box::pin(cx.peer.notify_progress(p)).await;
                        }
                    }
                    Some(CallEvent::Asks(asks)) => match self.relay_asks(at, running, asks).await {
                        Going::On(back) => running = back,
                        Going::Ended(answer) => return Going::Ended(answer),
                    },
                    None => return Going::On((Err(ServiceError::TransportClosed), running)),
                },
                () = cx.ct.cancelled() => {
                    return Going::Ended(Err(self.cancelled(&running, at)));
                }
            }
        }
    }

    /// Relays what the upstream asked during the call: a question the
    /// client did not declare it can answer is declined; over 2026-07-28
    /// the call is parked and the client answers on its retry; before, each
    /// question is asked inside the client's request.
    async fn relay_asks(
        &self,
        at: &Forwarding<'_>,
        running: Running,
        asks: Vec<(String, Ask)>,
    ) -> Going<Running> {
        let cx = at.cx;
        let (asks, undeclared): (Vec<_>, Vec<_>) =
            asks.into_iter().partition(|(_, ask)| declared(cx, ask));
        for (_, ask) in undeclared {
            decline(ask);
        }
        if asks.is_empty() {
            return Going::On(running);
        }
        if at.modern {
            return match crate::parked::Parked::park_many(&self.gw, at.who(), running, asks) {
                Ok(response) => {
                    tracing::info!(
                        upstream = at.upstream,
                        tool = at.original,
                        caller = at.caller.label(),
                        "call waits for the client to answer its upstream's question"
                    );
                    Going::Ended(Ok(response))
                }
                Err(back) => {
                    let (back, asks) = *back;
                    for (_, ask) in asks {
                        decline(ask);
                    }
                    Going::On(back)
                }
            };
        }
        // A client that goes away while it is being asked cancels its
        // call: the question is dropped (the upstream hears a decline) and
        // the call stops counting as in flight.
        for (_, ask) in asks {
            tokio::select! {
                () = Box::pin(answer_ask(ask, cx)) => {}
                () = cx.ct.cancelled() => {
                    return Going::Ended(Err(self.cancelled(&running, at)));
                }
            }
        }
        Going::On(running)
    }

    /// The upstream's outcome as the client's answer, metered and logged: a
    /// result as it is, an upstream's JSON-RPC error as that error, and no
    /// answer as `upstream_unavailable`.
    fn answered(
        &self,
        at: &Forwarding<'_>,
        outcome: Result<ServerResult, ServiceError>,
        upstream: &crate::Upstream,
        elapsed: std::time::Duration,
    ) -> Result<CallToolResponse, ErrorData> {
        let (metrics, upstream_name, original) = (self.gw.metrics(), at.upstream, at.original);
        let ms = elapsed.as_secs_f64() * 1000.0;
        match outcome {
            Ok(ServerResult::CallToolResult(mut result)) => {
                // A 2025-11-25 upstream sends none; a 2026-07-28 client
                // needs it (rmcp drops it for older clients).
                result
                    .result_type
                    .get_or_insert(rmcp::model::ResultType::COMPLETE);
                let is_error = result.is_error.unwrap_or(false);
                let kind = if is_error {
                    Outcome::ToolError
                } else {
                    Outcome::Ok
                };
                metrics.record(upstream_name, original, kind, Some(elapsed));
                tracing::info!(
                    upstream = upstream_name,
                    tool = original,
                    caller = at.caller.label(),
                    is_error,
                    ms,
                    "tool call"
                );
                Ok(result.into())
            }
            Ok(_) => {
                metrics.record(upstream_name, original, Outcome::Failed, Some(elapsed));
                // plangate's own limit, not the upstream's outage.
                Ok(Refusal::new(
                    Code::InternalError,
                    format!("upstream {upstream_name} answered with a result type plangate does not forward (input_required or task)"),
                )
                .into_result()
                .into())
            }
            Err(ServiceError::McpError(e)) => {
                metrics.record(upstream_name, original, Outcome::RpcError, Some(elapsed));
                tracing::info!(
                    upstream = upstream_name,
                    tool = original,
                    caller = at.caller.label(),
                    code = e.code.0,
                    ms,
                    "tool call: upstream error"
                );
                Err(e)
            }
            Err(e) => Ok(self
                .call_failed(upstream, original, e, Some(elapsed))
                .into()),
        }
    }

    /// The client cancelled its request (or its session ended): the
    /// upstream call is cancelled too.
    fn cancelled(&self, running: &Running, at: &Forwarding<'_>) -> ErrorData {
        running.cancel();
        self.gw.metrics().record(
            at.upstream,
            at.original,
            Outcome::Failed,
            Some(running.started.elapsed()),
        );
        tracing::info!(
            upstream = at.upstream,
            tool = at.original,
            caller = at.caller.label(),
            "call cancelled by the client"
        );
        ErrorData::new(ErrorCode::INTERNAL_ERROR, "request cancelled", None)
    }

    /// A call that got no answer: the upstream is treated as failed (the
    /// supervisor reconnects it) and the client is told to try later.
    fn call_failed(
        &self,
        upstream: &crate::Upstream,
        tool: &str,
        error: ServiceError,
        elapsed: Option<std::time::Duration>,
    ) -> CallToolResult {
        let name = upstream.name();
        self.gw
            .metrics()
            .record(name, tool, Outcome::Failed, elapsed);
        // An upstream behind OAuth that refused plangate's sign-in at its
        // door ran nothing; what helps is a person's new sign-in.
        if let Some(refusal) = crate::upstream::oauth::door_refusal(&error) {
            let message = refusal.explain(name, Some(upstream.signs_in()));
            tracing::warn!(upstream = name, tool, "{message}");
            if upstream.signs_in()
                && matches!(refusal, crate::upstream::oauth::DoorRefusal::Token { .. })
            {
                // Reconnecting gets a fresh token, or says on /readyz that
                // the sign-in no longer works.
                upstream.fail();
            }
            return Refusal::new(Code::UpstreamUnavailable, message).into_result();
        }
        let said = crate::upstream::without_type_names(&error.to_string());
        tracing::warn!(upstream = name, tool, "tool call got no answer: {said}");
        // A 2026-07-28 upstream holds no session: one request it answered
        // with something unreadable says nothing of the next, so its
        // connection is kept (and with it the listen stream) unless the
        // transport itself closed.
        let broken = match error {
            ServiceError::TransportClosed => true,
            ServiceError::TransportSend(_) => {
                !upstream.is_modern() || upstream.peer().is_transport_closed()
            }
            _ => false,
        };
        if broken {
            upstream.fail();
        }
        let message = match &error {
            ServiceError::Timeout { timeout } => format!(
                "upstream {name} did not answer within {} (its call_timeout); plangate cancelled the call. It may still have taken effect: check before calling again, or raise [upstreams.{name}] call_timeout",
                plangate_config::format_duration(*timeout)
            ),
            // Not sent: nothing reached the upstream.
            ServiceError::TransportSend(_) => format!(
                "upstream {name} could not be sent the call ({said}), so it did not run; {}",
                if broken {
                    "it is being reconnected — try again shortly"
                } else {
                    "try again shortly"
                }
            ),
            // Sent, and then no answer: the upstream may have done it
            // (a write half done is not a write not done).
            ServiceError::TransportClosed => format!(
                "upstream {name} closed its connection before answering ({said}); the call reached it and may have taken effect: check before calling again (it is being reconnected)"
            ),
            _ => format!(
                "upstream {name} did not answer ({said}); the call reached it and may have taken effect: check before calling again"
            ),
        };
        Refusal::new(Code::UpstreamUnavailable, message).into_result()
    }
}

/// Whether the client (per request over 2026-07-28, from its handshake
/// before) declared it can answer what the upstream asked.
pub(super) fn declared(cx: &RequestContext<RoleServer>, ask: &Ask) -> bool {
    let what = match ask {
        Ask::Elicit(..) => "elicitation",
        Ask::Sample(..) => "sampling",
        Ask::Roots(_) => "roots",
    };
    crate::review::client_capability(cx, what).is_some()
}

/// What the calling client declared it can answer of an upstream's
/// questions (elicitation, sampling, roots), as 2026-07-28 request
/// metadata; the rest of its capabilities concern plangate, not the
/// upstream.
/// The `_meta` a 2026-07-28 upstream reads with each request (SEP-2575):
/// what the calling client can answer — capabilities travel with each
/// request, so the upstream hears this caller's, not what plangate could
/// relay for some other caller — and the log level the caller asked for: a
/// 2026-07-28 client's own `logLevel`, or the level a 2025-11-25 client set
/// with `logging/setLevel`. Without one the upstream sends no log lines.
pub(super) fn modern_meta(
    gw: &Gateway,
    session: u64,
    cx: &RequestContext<RoleServer>,
) -> rmcp::model::RequestMetaObject {
    let mut meta = rmcp::model::RequestMetaObject::default();
    meta.0.0.insert(
        "io.modelcontextprotocol/clientCapabilities".to_owned(),
        callers_capabilities(cx),
    );
    if let Some(level) = cx
        .meta
        .log_level()
        .or_else(|| crate::notices::level_of(gw, session))
    {
        meta.set_log_level(level);
    }
    meta
}

fn callers_capabilities(cx: &RequestContext<RoleServer>) -> Value {
    let mut caps = serde_json::Map::new();
    for what in ["elicitation", "sampling", "roots"] {
        if let Some(v) = crate::review::client_capability(cx, what) {
            caps.insert(what.to_owned(), v);
        }
    }
    Value::Object(caps)
}

/// Answers an upstream's request the client cannot take: an elicitation is
/// declined, sampling and roots get an error saying why.
pub(super) fn decline(ask: Ask) {
    let declined = |what: &str| {
        ErrorData::new(
            ErrorCode::INVALID_REQUEST,
            format!("the client did not declare {what} support"),
            None,
        )
    };
    match ask {
        Ask::Elicit(_, tx) => {
            let _ = tx.send(Ok(ElicitResult::new(ElicitationAction::Decline)));
        }
        Ask::Sample(_, tx) => {
            let _ = tx.send(Err(declined("sampling")));
        }
        Ask::Roots(tx) => {
            let _ = tx.send(Err(declined("roots")));
        }
    }
}

/// Asks the calling client what an upstream asked during its call, inside
/// the client's own request so the transport relates the two.
pub(super) async fn answer_ask(ask: Ask, cx: &RequestContext<RoleServer>) {
    // The session the answer comes back on is not evicted meanwhile.
    let _held = crate::session_guard::hold(cx);
    let relay_err = |e: ServiceError| match e {
        ServiceError::McpError(e) => e,
        other => ErrorData::new(ErrorCode::INTERNAL_ERROR, other.to_string(), None),
    };
    match ask {
        Ask::Elicit(params, tx) => {
            let _ = tx.send(cx.peer.create_elicitation(params).await.map_err(relay_err));
        }
        Ask::Sample(params, tx) => {
            let _ = tx.send(cx.peer.create_message(params).await.map_err(relay_err));
        }
        Ask::Roots(tx) => {
            let _ = tx.send(cx.peer.list_roots().await.map_err(relay_err));
        }
    }
}

/// Why upstream `upstream` cannot take a call now (its last failure, if
/// known), as the refusal a client gets.
pub(super) fn unavailable(upstream: &str, gw: &Gateway) -> Refusal {
    let why = gw
        .down_upstreams()
        .get(upstream)
        .cloned()
        .unwrap_or_else(|| "not connected".into());
    Refusal::new(
        Code::UpstreamDown,
        format!(
            "upstream {upstream} is down ({why}); nothing was sent to it, and the other upstreams keep serving"
        ),
    )
}

/// The `_meta` sent upstream: the client's own, minus the progress token
/// (rmcp sets its own) and the inline-lifecycle keys that describe the
/// downstream connection, not the upstream one.
fn forwarded_meta(cx: &RequestContext<RoleServer>) -> Option<rmcp::model::RequestMetaObject> {
    let mut meta = cx.meta.clone();
    meta.0.0.remove("progressToken");
    meta.0
        .0
        .retain(|k, _| !k.starts_with("io.modelcontextprotocol/"));
    (!meta.0.0.is_empty()).then_some(meta)
}
