//! The person's form over MCP 2026-07-28, which has no server-to-client
//! requests: the first round answers `input_required` with the form and
//! a signed, expiring request state ([`open`]); the client's retry brings
//! the person's answer back ([`take`]). The state binds the operator
//! token, the tool, a digest of the arguments and the plan's digest and
//! revision the form showed, so an answer counts only for the call and
//! the plan it was given about. A retry replayed while the plan is
//! unchanged can only say the same yes about the same revision again; a
//! code in it is refused as used.

use rmcp::model::{
    CallToolResponse, ElicitRequestParams, ElicitResult, InputResponses, SealOptions,
};
use serde_json::Value;

use plangate_core::Code;
use plangate_store::OperatorToken;

use crate::Engine;
use crate::refusal::Refusal;
use crate::request_state::{args_digest, asking, codec, elicit_answer, same_arguments};

/// The key under which the form travels in `inputRequests`.
const INPUT_KEY: &str = "yes";

/// A call's round: what a 2026-07-28 retry carries back.
#[derive(Clone, Copy)]
pub(super) struct Round<'a> {
    /// The call's arguments, as sent.
    pub(super) arguments: &'a Value,
    /// `requestState` echoed back, on a retry.
    pub(super) state: Option<&'a str>,
    /// `inputResponses`, on a retry.
    pub(super) responses: Option<&'a InputResponses>,
}

/// What the signed state binds (the arguments' digest covers the plan
/// digest the assistant named).
#[derive(serde::Serialize, serde::Deserialize)]
struct FormState {
    tid: String,
    tool: String,
    args: String,
    revision: u64,
}

/// The first round: the form, and a state only this token's retry of
/// this call opens, within `review_timeout`.
pub(super) fn open(
    engine: &Engine,
    operator: &OperatorToken,
    (tool, round): (&str, Round<'_>),
    params: ElicitRequestParams,
    revision: u64,
) -> Result<CallToolResponse, Refusal> {
    let payload = FormState {
        tid: operator.id.clone(),
        tool: tool.to_owned(),
        args: args_digest(engine, round.arguments)?,
        revision,
    };
    let options = SealOptions::new()
        .associated_data(operator.id.as_bytes())
        .ttl(engine.review_timeout());
    let sealed = codec(engine)?
        .seal_json_with(&payload, &options)
        .map_err(|e| Refusal::internal(format!("cannot sign request state: {e}")))?;
    Ok(asking(INPUT_KEY, params, sealed))
}

/// The retry: the person's answer and the revision their form showed, once
/// the state is this token's, for this call, unexpired and untouched.
pub(super) fn take(
    engine: &Engine,
    operator: &OperatorToken,
    (tool, round): (&str, Round<'_>),
) -> Result<(ElicitResult, u64), Refusal> {
    let invalid = |why: &str| {
        Refusal::new(
            Code::ReviewDeclined,
            format!("{why}; nothing was recorded. Call {tool} again to ask the person anew"),
        )
    };
    let sealed = round.state.unwrap_or_default();
    let payload: FormState = codec(engine)?
        .open_json_with(sealed, operator.id.as_bytes())
        .map_err(|e| match e {
            rmcp::model::RequestStateError::Expired => {
                invalid("the form expired before the answer came back")
            }
            _ => invalid(
                "the request state is not one plangate gave this operator token (tampered, forged or another's)",
            ),
        })?;
    if payload.tid != operator.id || payload.tool != tool {
        return Err(invalid(
            "the request state belongs to another token or tool",
        ));
    }
    if !same_arguments(engine, &payload.args, round.arguments)? {
        return Err(invalid(
            "the retried call's arguments differ from the ones the person was asked about",
        ));
    }
    let answer = elicit_answer(round.responses, INPUT_KEY)
        .ok_or_else(|| invalid("the retry carries no answer to the form"))?;
    Ok((answer, payload.revision))
}
