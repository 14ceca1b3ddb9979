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
