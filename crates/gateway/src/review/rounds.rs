//! A question asked over MCP 2026-07-28, which has no server-to-client
//! requests: the first round answers `input_required` with a signed,
//! expiring request state ([`open_question`]); the client's retry brings
//! the person's answer back ([`take_answer`]). Apart because the state is
//! what the yes is bound by, and checking it is its own work
//! (docs/design.md §7).

use plangate_core::{Code, EventKind};
use rmcp::model::{CallToolResponse, SealOptions};

use super::question::question_params;
use super::{Answer, Round, read_answer, record, verdict_of};
use crate::Engine;
use crate::acting::Acting;
use crate::refusal::Refusal;
use crate::request_state::{args_digest, asking, codec, elicit_answer, same_arguments};

/// The key under which the question travels in `inputRequests`.
const INPUT_KEY: &str = "review";

/// What the signed request state binds (docs/design.md §7): key id, tool, a digest
/// of the canonical arguments (never the arguments: the state is readable),
/// the plan digest (or the call's own) and the question; expiry is the
/// codec's.
#[derive(serde::Serialize, serde::Deserialize)]
struct ReviewState {
    kid: String,
    tool: String,
    args: String,
    digest: String,
    review: String,
}

/// The first round over 2026-07-28: record the question and answer
/// `input_required` with it and a signed, expiring, single-use state.
pub(super) async fn open_question(
    engine: &Engine,
    acting: &Acting,
    round: Round<'_>,
    question: String,
    digest: &str,
) -> Result<CallToolResponse, Refusal> {
    let review = plangate_store::new_id("rev_").map_err(Refusal::internal)?;
    let payload = ReviewState {
        kid: acting.key.id.clone(),
        tool: round.tool.to_owned(),
        args: args_digest(engine, round.arguments)?,
        digest: digest.to_owned(),
        review: review.clone(),
    };
    let options = SealOptions::new()
        .associated_data(acting.key.id.as_bytes())
        .ttl(engine.review_timeout());
    let sealed = codec(engine)?
        .seal_json_with(&payload, &options)
        .map_err(|e| Refusal::internal(format!("cannot sign request state: {e}")))?;
    record(
        engine,
        acting,
        EventKind::ReviewRequested {
            review_id: review,
            plan_digest: digest.to_owned(),
        },
    )
    .await?;
    let params = question_params(question)
        .map_err(|e| Refusal::internal(format!("the question could not be built: {e}")))?;
    Ok(asking(INPUT_KEY, params, sealed))
}

/// The retry over 2026-07-28: verify the state (signature, expiry, key,
/// tool, arguments), take the answer and record it — once: a replayed state
/// is refused atomically.
pub(super) async fn take_answer(
    engine: &Engine,
    acting: &Acting,
    round: Round<'_>,
) -> Result<(String, Answer), Refusal> {
    let invalid = |why: &str| {
        Refusal::new(
            Code::ReviewDeclined,
            format!(
                "{why}; nothing was written. Call {} again to ask the person anew",
                round.tool
            ),
        )
    };
    let sealed = round.state.unwrap_or_default();
    let payload: ReviewState = codec(engine)?
        .open_json_with(sealed, acting.key.id.as_bytes())
        .map_err(|e| match e {
            rmcp::model::RequestStateError::Expired => invalid("the question expired before the answer came back"),
            _ => invalid("the request state is not one plangate issued to this key (tampered, forged or from another key)"),
        })?;
    if payload.kid != acting.key.id || payload.tool != round.tool {
        return Err(invalid("the request state belongs to another key or tool"));
    }
    if !same_arguments(engine, &payload.args, round.arguments)? {
        return Err(invalid(
            "the retried request's arguments differ from the ones the person was asked about",
        ));
    }
    let answer = elicit_answer(round.responses, INPUT_KEY)
        .map(read_answer)
        .unwrap_or(Answer::Cancel);
    let (verdict, feedback) = verdict_of(&answer);
    let review = payload.review.clone();
    let digest = payload.digest.clone();
    engine
        .log()
        .transact(&acting.key.id, |state| {
            if state.is_answered(&review) {
                return Err(invalid(
                    "this question was already answered (a replayed request state)",
                ));
            }
            Ok((
                vec![acting.event(EventKind::ReviewAnswered {
                    review_id: Some(review.clone()),
                    verdict,
                    plan_digest: digest.clone(),
                    feedback: feedback.clone(),
                    step_ids: None,
                    revision: state.revision_seen(&digest),
                })],
                (),
            ))
        })
        .await
        .map_err(crate::tools::log_failed)??;
    Ok((payload.digest, answer))
}
