//! Upstream questions held across a 2026-07-28 client's `input_required`
//! round.
//!
//! Every forwarded call runs in its own task ([`crate::relay`]), which
//! reports the upstream's progress, its requests (elicitation, sampling,
//! roots) and its result, in wire order, to whichever client request is
//! waiting for it. A client that speaks MCP 2025-11-25 is asked inside its own request. A
//! client that speaks 2026-07-28 cannot be sent a request at all: it is
//! answered `input_required` with the upstream's question and a signed
//! request state naming the **parked** call, and the upstream call stays
//! open, waiting. The client's retry of the same tool with the same
//! arguments ([`Parked::resume`]) hands the answer to the upstream and
//! waits on the same call again — there is exactly one upstream call, never
//! a second. The state binds the key, the tool and a digest of the
//! arguments (never the arguments: the state is readable); it is single-use
//! (the parked call is taken out when resumed) and lapses after
//! `gateway.review_timeout`, when the upstream's question is answered
//! `cancel` (or with an error, for sampling and roots) and its call is
//! cancelled. Parked calls live in the process that parked them: a retry
//! that reaches another replica is told to call again.

// Sampling and roots are deprecated by SEP-2577 but remain part of MCP
// 2025-11-25, which plangate speaks upstream.
#![allow(deprecated)]

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use plangate_core::Code;
use rmcp::ErrorData;
use rmcp::model::{
    CallToolResponse, CreateMessageRequest, CreateMessageResult, ElicitRequest, ElicitResult,
    ElicitationAction, ErrorCode, InputRequest, InputRequiredResult, InputResponses,
    ListRootsResult, RequestNoParam, SealOptions,
};
use serde_json::Value;
use tokio::sync::oneshot;

use crate::Gateway;
use crate::refusal::Refusal;
pub use crate::relay::INPUT_KEY;
use crate::relay::Running;
use crate::upstream::Ask;

/// At most this many calls wait for an answer at once; past it, an
/// upstream's question is declined rather than held (each parked call keeps
/// an upstream request open).
const MAX_PARKED: usize = 256;

/// The upstream's question a parked call waits on.
enum Pending {
    Elicit(oneshot::Sender<Result<ElicitResult, ErrorData>>),
    Sample(oneshot::Sender<Result<CreateMessageResult, ErrorData>>),
    Roots(oneshot::Sender<Result<ListRootsResult, ErrorData>>),
}

impl Pending {
    /// Answers the upstream when no answer came: a lapsed question is a
    /// cancel (elicitation) or an error (sampling, roots).
    fn lapse(self, why: &str) {
        let error = || ErrorData::new(ErrorCode::INVALID_REQUEST, why.to_owned(), None);
        match self {
            Pending::Elicit(tx) => {
                let _ = tx.send(Ok(ElicitResult::new(ElicitationAction::Cancel)));
            }
            Pending::Sample(tx) => {
                let _ = tx.send(Err(error()));
            }
            Pending::Roots(tx) => {
                let _ = tx.send(Err(error()));
            }
        }
    }

    /// Hands the client's answer (from `inputResponses`) to the upstream.
    fn answer(self, response: Option<&Value>) {
        let missing = |what: &str| {
            ErrorData::new(
                ErrorCode::INVALID_REQUEST,
                format!("the client's retry carried no valid {what} result"),
                None,
            )
        };
        match self {
            Pending::Elicit(tx) => {
                let result = response
                    .and_then(|v| serde_json::from_value::<ElicitResult>(v.clone()).ok())
                    .unwrap_or_else(|| ElicitResult::new(ElicitationAction::Cancel));
                let _ = tx.send(Ok(result));
            }
            Pending::Sample(tx) => {
                let result = response
                    .and_then(|v| serde_json::from_value::<CreateMessageResult>(v.clone()).ok())
                    .ok_or_else(|| missing("sampling"));
                let _ = tx.send(result);
            }
            Pending::Roots(tx) => {
                let result = response
                    .and_then(|v| serde_json::from_value::<ListRootsResult>(v.clone()).ok())
                    .ok_or_else(|| missing("roots"));
                let _ = tx.send(result);
            }
        }
    }
}

/// A call waiting for its client's retry.
struct ParkedCall {
    kid: String,
    tool: String,
    args: String,
    running: Running,
    /// The upstream's questions, under their `inputRequests` keys.
    pending: Vec<(String, Pending)>,
}

/// What the request state of a parked call binds; the expiry is the
/// codec's.
#[derive(serde::Serialize, serde::Deserialize)]
struct ParkState {
    kid: String,
    tool: String,
    args: String,
    park: String,
}

/// Who retries, with what: the caller's key id (empty for a caller without
/// a key), the tool as the client named it and a digest of its arguments.
pub struct Retry<'a> {
    /// The caller's key id, or `""` for a caller without a key.
    pub kid: &'a str,
    /// The tool's exposed name.
    pub tool: &'a str,
    /// Digest of the call's arguments (secrets keyed).
    pub args: &'a str,
}

/// The calls of this process that wait for a 2026-07-28 client's retry.
#[derive(Default)]
pub struct Parked {
    calls: Mutex<HashMap<String, ParkedCall>>,
}

impl Parked {
    /// How many calls are parked now.
    pub fn len(&self) -> usize {
        self.calls.lock().len()
    }

    /// Whether no call is parked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Parks `running`, whose upstream asked `asks` (one request under
    /// [`INPUT_KEY`], or a 2026-07-28 upstream's `input_required` under its
    /// own keys), and answers the client `input_required` with all of them
    /// and one signed state. When the call cannot be parked (too many
    /// parked, signing failed), the questions are given back so the caller
    /// can decline them.
    #[allow(clippy::type_complexity)]
    pub fn park_many(
        gw: &Arc<Gateway>,
        who: Retry<'_>,
        running: Running,
        asks: Vec<(String, Ask)>,
    ) -> Result<CallToolResponse, Box<(Running, Vec<(String, Ask)>)>> {
        let parked = gw.parked();
        if parked.len() >= MAX_PARKED {
            tracing::warn!(
                limit = MAX_PARKED,
                "too many calls wait for an answer; declining an upstream's question"
            );
            return Err(Box::new((running, asks)));
        }
        let Ok(id) = plangate_store::new_id("park_") else {
            return Err(Box::new((running, asks)));
        };
        let payload = ParkState {
            kid: who.kid.to_owned(),
            tool: who.tool.to_owned(),
            args: who.args.to_owned(),
            park: id.clone(),
        };
        let options = SealOptions::new()
            .associated_data(who.kid.as_bytes())
            .ttl(gw.review_timeout());
        let Ok(sealed) = crate::request_state::codec(gw).and_then(|c| {
            c.seal_json_with(&payload, &options)
                .map_err(Refusal::internal)
        }) else {
            return Err(Box::new((running, asks)));
        };
        let mut requests = std::collections::BTreeMap::new();
        let mut pending = Vec::with_capacity(asks.len());
        for (key, ask) in asks {
            let (request, waiting) = match ask {
                Ask::Elicit(params, tx) => (
                    InputRequest::Elicitation(ElicitRequest::new(params)),
                    Pending::Elicit(tx),
                ),
                Ask::Sample(params, tx) => (
                    InputRequest::CreateMessage(CreateMessageRequest::new(params)),
                    Pending::Sample(tx),
                ),
                Ask::Roots(tx) => (
                    InputRequest::ListRoots(RequestNoParam::default()),
                    Pending::Roots(tx),
                ),
            };
            requests.insert(key.clone(), request);
            pending.push((key, waiting));
        }
        parked.calls.lock().insert(
            id.clone(),
            ParkedCall {
                kid: payload.kid,
                tool: payload.tool,
                args: payload.args,
                running,
                pending,
            },
        );
        // The question lapses with the state.
        let timeout = gw.review_timeout();
        let weak = Arc::downgrade(gw);
        tokio::spawn(async move {
            tokio::time::sleep(timeout).await;
            let Some(gw) = weak.upgrade() else { return };
            let lapsed = gw.parked().calls.lock().remove(&id);
            if let Some(call) = lapsed {
                tracing::info!(
                    tool = call.tool,
                    "an upstream's question got no answer in time; its call is cancelled"
                );
                for (_, pending) in call.pending {
                    pending.lapse("the client did not answer within gateway.review_timeout");
                }
                drop(call.running);
            }
        });
        Ok(CallToolResponse::InputRequired(InputRequiredResult::new(
            Some(requests),
            Some(sealed),
        )))
    }

    /// Whether `state` is the request state of a parked call issued to
    /// `kid` (signature and expiry checked; nothing is consumed). Used to
    /// let a retry that answers an upstream's question through checks that
    /// already passed when the call was first made.
    pub fn is_park_state(gw: &Gateway, kid: &str, state: &str) -> bool {
        crate::request_state::codec(gw)
            .ok()
            .and_then(|c| c.open_json_with::<ParkState>(state, kid.as_bytes()).ok())
            .is_some()
    }

    /// The retry of a parked call: verifies the state (signature, expiry,
    /// key, tool, arguments), takes the call out — once — hands the
    /// client's answer to the upstream and gives back the call to wait on.
    pub fn resume(
        gw: &Gateway,
        who: Retry<'_>,
        state: &str,
        responses: Option<&InputResponses>,
    ) -> Result<Running, Refusal> {
        let invalid = |why: &str| {
            Refusal::new(
                Code::InvalidArguments,
                format!(
                    "{why}. The upstream's question was not answered; call {} again without a request state to start over",
                    who.tool
                ),
            )
        };
        let payload: ParkState = crate::request_state::codec(gw)?
            .open_json_with(state, who.kid.as_bytes())
            .map_err(|e| match e {
                rmcp::model::RequestStateError::Expired => {
                    invalid("the upstream's question expired before the answer came back")
                }
                _ => invalid(
                    "the request state is not one plangate issued to this caller (tampered, forged or from another key)",
                ),
            })?;
        if payload.kid != who.kid || payload.tool != who.tool {
            return Err(invalid("the request state belongs to another key or tool"));
        }
        if payload.args != who.args {
            return Err(invalid(
                "the retried request's arguments differ from the call the upstream asked about",
            ));
        }
        let mut calls = gw.parked().calls.lock();
        let Some(call) = calls.remove(&payload.park) else {
            return Err(invalid(
                "no call waits for this answer: it was already answered (a replayed request state), it lapsed, or it waits in another plangate replica",
            ));
        };
        drop(calls);
        // The state checks above already bound these; the parked record
        // agrees unless the codec's key changed under us.
        if call.kid != who.kid || call.tool != who.tool || call.args != who.args {
            for (_, pending) in call.pending {
                pending.lapse("the retry did not match the parked call");
            }
            return Err(invalid("the request state does not match the parked call"));
        }
        for (key, pending) in call.pending {
            pending.answer(responses.and_then(|r| r.get(&key)));
        }
        Ok(call.running)
    }
}
