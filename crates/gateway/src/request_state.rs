//! What signs and binds the request states of MCP 2026-07-28's
//! `input_required` rounds: the codec that seals and opens them ([`codec`],
//! plangate's signing key, docs/design.md §2) and the digest of a call's
//! arguments a state binds ([`args_digest`]). Below review, which asks a
//! person in such a round, and the parked calls, which hold an upstream's
//! question across one: both seal and open states here.

use plangate_core::Code;
use rmcp::model::RequestStateCodec;
use serde_json::Value;

use crate::Engine;
use crate::refusal::Refusal;

/// The signing codec for request states (signing key per docs/design.md §2).
pub(crate) fn codec(engine: &Engine) -> Result<RequestStateCodec, Refusal> {
    RequestStateCodec::try_new(engine.material().signing_key().to_vec())
        .map_err(|e| Refusal::internal(format!("cannot sign request state: {e}")))
}

/// A digest of the call's arguments with secrets keyed (docs/design.md §5 Digest).
pub(crate) fn args_digest(engine: &Engine, arguments: &Value) -> Result<String, Refusal> {
    let keyed = engine
        .redactor()
        .keyed(arguments, engine.material().signing_key())
        .map_err(|e| Refusal::new(Code::InvalidArguments, e.to_string()))?;
    let canonical = plangate_core::canonical_json(&keyed)
        .map_err(|e| Refusal::new(Code::InvalidArguments, e.to_string()))?;
    Ok(plangate_core::hmac_hex(
        engine.material().signing_key(),
        canonical.as_bytes(),
    ))
}

/// Whether a retried call's `arguments` are the ones a state bound by
/// their digest ([`args_digest`]).
pub(crate) fn same_arguments(
    engine: &Engine,
    bound: &str,
    arguments: &Value,
) -> Result<bool, Refusal> {
    Ok(args_digest(engine, arguments)? == bound)
}

/// The elicitation answer a retry carries under `key` in its
/// `inputResponses`, if it carries one that reads as one.
pub(crate) fn elicit_answer(
    responses: Option<&rmcp::model::InputResponses>,
    key: &str,
) -> Option<rmcp::model::ElicitResult> {
    responses
        .and_then(|r| r.get(key))
        .and_then(|v| serde_json::from_value(v.clone()).ok())
}

/// The `input_required` answer that asks one elicitation, `params`, under
/// `key` in `inputRequests`, with the `sealed` request state the retry
/// brings back.
pub(crate) fn asking(
    key: &str,
    params: rmcp::model::ElicitRequestParams,
    sealed: String,
) -> rmcp::model::CallToolResponse {
    use rmcp::model::{ElicitRequest, InputRequest, InputRequiredResult};
    let requests = std::collections::BTreeMap::from([(
        key.to_owned(),
        InputRequest::Elicitation(ElicitRequest::new(params)),
    )]);
    rmcp::model::CallToolResponse::InputRequired(InputRequiredResult::new(
        Some(requests),
        Some(sealed),
    ))
}
