//! Review in the agent's own client (docs/design.md §7): `exit_plan_mode` asks the
//! person about the plan, and an `ask` mode asks before a call above its
//! access — through MCP elicitation (2025-11-25, form mode).
//!
//! The person's yes is bound to exactly what they saw: the question carries
//! the plan digest, the approval is recorded for that digest, and apply runs
//! only if the plan still has that digest — a step added while the question
//! was open makes the yes write nothing. No answer, a decline, a cancel, a
//! timeout or a client that cannot ask: nothing is written (never fails
//! open).

use std::time::Duration;

use plangate_core::{Code, EventKind, ModeSpec, Verdict};
use rmcp::model::{
    CallToolResponse, CallToolResult, ElicitResult, ElicitationAction, InputResponses,
};
use rmcp::service::{RequestContext, ServiceError};
use rmcp::{Peer, RoleServer};
use serde_json::{Value, json};

use crate::acting::Acting;
use crate::apply::{ApplyRequest, Progress, apply_plan};
use crate::refusal::Refusal;
use crate::{Engine, Gateway};

mod heartbeat;
mod question;
mod rounds;
mod waiting;

pub(crate) use crate::request_state::args_digest;
pub(crate) use heartbeat::while_reviewing;
use question::{plan_question, question_params};
pub(crate) use question::{preview_excerpt, question_text};
use rounds::{open_question, take_answer};

/// The person's answer to a question.
enum Answer {
    Approve,
    KeepPlanning(Option<String>),
    Decline,
    Cancel,
    Lapsed(String),
}

/// Whether the client declared form elicitation — per request in
/// 2026-07-28, from the handshake before.
pub fn can_elicit(cx: &RequestContext<RoleServer>) -> bool {
    client_capability(cx, "elicitation").is_some_and(|e| match e {
        Value::Object(m) => m.is_empty() || m.contains_key("form"),
        _ => false,
    })
}

/// The client's declared capability `what` (`elicitation`, `sampling`,
/// `roots`) — per request in 2026-07-28, from the handshake before — if it
/// declared one.
pub fn client_capability(cx: &RequestContext<RoleServer>, what: &str) -> Option<Value> {
    cx.client_capabilities()
        .and_then(|caps| serde_json::to_value(&caps).ok())
        .and_then(|caps| caps.get(what).cloned())
        .filter(|v| !v.is_null())
}

fn unsupported(prefix: &str, mode: &ModeSpec, what: &str) -> Refusal {
    Refusal::new(
        Code::ElicitationUnsupported,
        format!(
            "this client cannot show the person a question (it declared no form elicitation), so plangate cannot ask them {what}. Show the person the plan in plain words ({prefix}get_plan lists every step and the plan digest) and call {prefix}apply_plan with that plan_digest only after they say yes. Nothing was applied; the mode stays {}",
            mode.name
        ),
    )
}
/// What an elicitation result says.
fn read_answer(result: ElicitResult) -> Answer {
    match result.action {
        ElicitationAction::Accept => {
            let content = result.content.unwrap_or(Value::Null);
            let feedback = content
                .get("feedback")
                .and_then(Value::as_str)
                .filter(|f| !f.trim().is_empty())
                .map(str::to_owned);
            match content.get("decision").and_then(Value::as_str) {
                Some("approve") => Answer::Approve,
                _ => Answer::KeepPlanning(feedback),
            }
        }
        ElicitationAction::Decline => Answer::Decline,
        _ => Answer::Cancel,
    }
}

/// Asks over `elicitation/create` (MCP 2025-11-25) and waits, at most
/// `timeout`.
async fn ask(peer: &Peer<RoleServer>, message: String, timeout: Duration) -> Answer {
    let params = match question_params(message) {
        Ok(p) => p,
        Err(e) => return Answer::Lapsed(format!("the question could not be built: {e}")),
    };
    match peer
        .create_elicitation_with_timeout(params, Some(timeout))
        .await
    {
        Ok(result) => read_answer(result),
        Err(ServiceError::Timeout { .. }) => {
            Answer::Lapsed(format!("no answer within {} s", timeout.as_secs()))
        }
        Err(e) => Answer::Lapsed(format!("the question failed: {e}")),
    }
}
fn review_declined(message: String, feedback: Option<&str>) -> CallToolResult {
    let mut body =
        json!({"success": false, "code": Code::ReviewDeclined.as_str(), "message": message});
    if let Some(f) = feedback {
        body["feedback"] = json!(f);
    }
    let text = match feedback {
        Some(f) => format!("{message} The person's feedback, verbatim: {f}"),
        None => message.clone(),
    };
    crate::answer::with_text(body, text, true)
}

/// Where a reviewed call is in its rounds: the MCP 2026-07-28 retry of a
/// call carries the request state plangate signed and the client's answers.
#[derive(Clone, Copy)]
pub struct Round<'a> {
    /// The exposed name of the tool being called.
    pub tool: &'a str,
    /// The call's arguments (as sent; never stored in the state).
    pub arguments: &'a Value,
    /// `requestState` echoed back by the client, on a retry.
    pub state: Option<&'a str>,
    /// `inputResponses` from the client, on a retry.
    pub responses: Option<&'a InputResponses>,
    /// The operator's rule that asked, when a rule did rather than the
    /// mode: the question names it.
    pub rule: Option<&'a str>,
}

/// Whether the request speaks MCP 2026-07-28 or later: no server-to-client
/// requests, so the person is asked through `input_required`.
pub fn modern(cx: &RequestContext<RoleServer>) -> bool {
    cx.protocol_version().is_some_and(|v| !v.has_initialize())
}
fn verdict_of(answer: &Answer) -> (Verdict, Option<String>) {
    match answer {
        Answer::Approve => (Verdict::Approve, None),
        Answer::KeepPlanning(f) => (Verdict::KeepPlanning, f.clone()),
        Answer::Decline => (Verdict::Decline, None),
        Answer::Cancel | Answer::Lapsed(_) => (Verdict::Cancel, None),
    }
}

/// `exit_plan_mode {plan}`: asks the person about the agent's plan plus the
/// recorded steps; on a yes applies exactly that digest and returns the
/// receipt, with the mode back to `default`. Over 2026-07-28 the question
/// is an `input_required` round; before, an `elicitation/create`.
pub async fn exit_plan_mode(
    gw: &Gateway,
    acting: &Acting,
    agent_plan: &str,
    round: Round<'_>,
    cx: &RequestContext<RoleServer>,
) -> Result<CallToolResponse, Refusal> {
    let prefix = gw.config().gateway.tool_prefix.clone();
    let state = gw
        .log()
        .state(&acting.key.id)
        .await
        .map_err(crate::tools::log_failed)?;
    let in_force = gw.config().modes.in_force(&state);
    // Under a lock the agent cannot leave: refused before anyone is asked.
    plangate_core::rules::may_change_mode(
        &in_force,
        plangate_core::rules::ModeChange::ExitPlanMode,
    )
    .map_err(|refused| {
        crate::tools::locked(
            &refused,
            &acting.key.name,
            "nobody was asked and nothing was applied",
        )
    })?;
    let scope = plangate_core::rules::approval_scope_for(&state, acting.key.scope, &in_force);
    let mode = in_force.spec;
    // A `plan`-scope key's writes are planned whatever the mode, so it has
    // a plan to put up for review even in a mode that is not a plan mode.
    if !mode.plan_mode() && scope != plangate_core::Scope::Plan {
        return Err(Refusal::new(
            Code::NotInPlanMode,
            format!(
                "mode {} is not a plan mode, so there is no plan review to leave; writes run as the mode allows",
                mode.name
            ),
        ));
    }
    // A key whose own client's yes does not count (a `plan`-scope key, or
    // a plan made under one): its client is not asked a question whose yes
    // approves nothing. The request is on the record, and the call waits
    // for the person's answer from wherever they review.
    if scope == plangate_core::Scope::Plan && round.state.is_none() {
        let digest = state.plan_digest();
        let review_id = plangate_store::new_id("rev_").map_err(Refusal::internal)?;
        record(
            gw,
            acting,
            EventKind::ReviewRequested {
                review_id,
                plan_digest: digest.clone(),
            },
        )
        .await?;
        let waiting = waiting::for_the_person(gw, acting, &state, gw.review_timeout());
        let (outcome, _) = heartbeat::while_reviewing(cx, waiting).await;
        let outcome = outcome?;
        let message = waiting::said(outcome.as_ref(), &prefix, &gw.how_to_approve(), &mode.name);
        let body = serde_json::to_value(plangate_core::ReviewRequested {
            success: true,
            review_requested: true,
            plan_digest: digest,
            message: message.clone(),
            outcome,
        })
        .unwrap_or_default();
        return Ok(crate::answer::with_text(body, message, false).into());
    }
    // Progress the waiting call already sent: the apply's own goes on
    // above it.
    let (digest, answer, heard) = if round.state.is_some() {
        let (digest, answer) = take_answer(gw, acting, round).await?;
        (digest, answer, 0.0)
    } else {
        if !can_elicit(cx) {
            return Err(unsupported(&prefix, &mode, "about the plan"));
        }
        let digest = state.plan_digest();
        let question = plan_question(gw.ops(), acting, &state, agent_plan, &digest);
        if modern(cx) {
            return open_question(gw, acting, round, question, &digest).await;
        }
        let (answer, heard) = ask_and_record(gw, acting, cx, question, &digest).await?;
        (digest, answer, heard)
    };
    conclude_plan(gw, acting, &mode, (digest, answer, heard), cx)
        .await
        .map(CallToolResponse::from)
}

/// What follows the person's answer about a plan.
async fn conclude_plan(
    gw: &Gateway,
    acting: &Acting,
    mode: &ModeSpec,
    (digest, answer, heard): (String, Answer, f64),
    cx: &RequestContext<RoleServer>,
) -> Result<CallToolResult, Refusal> {
    match answer {
        Answer::Approve => {
            let progress = cx
                .meta
                .get_progress_token()
                .map(|token| Progress::client_after(cx.peer.clone(), token, heard));
            // Bound to the digest the person saw: the plan is rebuilt fresh
            // and only a matching digest proceeds (else plan_changed).
            let request = ApplyRequest {
                step_ids: None,
                plan_digest: Some(digest),
                continue_on_error: false,
            };
            let mut receipt =
                apply_plan(gw.ops(), acting, request, progress, cx.ct.clone()).await?;
            // The person approved and the plan ran: the session leaves plan mode.
            record(
                gw,
                acting,
                EventKind::ModeSet {
                    mode: plangate_core::DEFAULT_MODE.to_owned(),
                },
            )
            .await?;
            receipt.plan_mode = false;
            receipt.mode = Some(plangate_core::DEFAULT_MODE.to_owned());
            Ok(crate::apply::receipt_result(&receipt))
        }
        Answer::KeepPlanning(f) => Ok(review_declined(
            format!(
                "The person wants you to keep planning; nothing was applied and the mode stays {}.",
                mode.name
            ),
            Some(f.as_deref().unwrap_or("")),
        )),
        Answer::Decline => Ok(review_declined(
            format!(
                "The person declined the plan; nothing was applied and the mode stays {}.",
                mode.name
            ),
            None,
        )),
        Answer::Cancel => Ok(review_declined(
            format!(
                "The person dismissed the question; nothing was applied and the mode stays {}.",
                mode.name
            ),
            None,
        )),
        Answer::Lapsed(why) => Ok(review_declined(
            format!(
                "No answer from the person ({why}); nothing was applied and the mode stays {}.",
                mode.name
            ),
            None,
        )),
    }
}

/// What an `ask` mode's question came to.
pub enum Asked {
    /// The person said yes: run the call. The value is the last progress
    /// the question's heartbeat sent under the client's token (0 if none):
    /// the call's own progress is counted above it.
    Yes(f64),
    /// Over 2026-07-28: answer this `input_required` and wait for the retry.
    Pending(CallToolResponse),
    /// The question went unanswered (why): it lapsed after
    /// `review_timeout` or could not be asked. Not a no: the call waits in
    /// the plan for a person's yes.
    Unanswered(String),
}
/// An `ask` mode: asks the person about one call above the mode's access,
/// bound to that call's own digest. A refusal means no call.
#[allow(clippy::too_many_arguments)]
pub async fn ask_for_call(
    gw: &Gateway,
    acting: &Acting,
    mode: &ModeSpec,
    tool: &crate::CatalogTool,
    redacted_arguments: &Value,
    call_digest: &str,
    round: Round<'_>,
    cx: &RequestContext<RoleServer>,
) -> Result<Asked, Refusal> {
    let prefix = gw.config().gateway.tool_prefix.clone();
    let answer = if round.state.is_some() {
        let (digest, answer) = take_answer(gw, acting, round).await?;
        if digest != call_digest {
            return Err(Refusal::new(
                Code::ReviewDeclined,
                "the answer was about another call; nothing was run".to_owned(),
            ));
        }
        (answer, 0.0)
    } else {
        if !can_elicit(cx) {
            return Err(Refusal::new(
                Code::ElicitationUnsupported,
                format!(
                    "{} asks the person before this call, and this client cannot show them a question (no form elicitation). Nothing was run. Tell the person what you want to do; they can change the mode ({prefix}begin_session) or you can plan it with \"_plangate_plan\": true",
                    match round.rule {
                        Some(rule) => format!("the operator's rule {rule:?}"),
                        None => format!("mode {} (for {} calls)", mode.name, tool.effect),
                    }
                ),
            ));
        }
        let question = question::call_question(
            acting,
            (mode, round.rule),
            tool,
            redacted_arguments,
            call_digest,
        );
        if modern(cx) {
            return open_question(gw, acting, round, question, call_digest)
                .await
                .map(Asked::Pending);
        }
        // A heartbeat while the person reads: the call's own upstream
        // progress follows, counted above it.
        ask_and_record(gw, acting, cx, question, call_digest).await?
    };
    let (answer, heard) = answer;
    match answer {
        Answer::Approve => Ok(Asked::Yes(heard)),
        Answer::KeepPlanning(f) => Err(Refusal::new(
            Code::ReviewDeclined,
            format!(
                "The person did not allow this call; nothing was run. Their feedback, verbatim: {}",
                f.unwrap_or_default()
            ),
        )),
        Answer::Decline | Answer::Cancel => Err(Refusal::new(
            Code::ReviewDeclined,
            "The person did not allow this call; nothing was run.".to_owned(),
        )),
        Answer::Lapsed(why) => Ok(Asked::Unanswered(why)),
    }
}

/// Asks the person `question` inside the client's request (2025-11-25
/// elicitation) about exactly `digest`, recording the question and the
/// answer — the same for a plan's review and a call's. While the person
/// reads, the call sends a heartbeat under its client's progress token
/// ([`heartbeat::while_reviewing`]); the answer comes with the last value
/// it sent.
async fn ask_and_record(
    gw: &Gateway,
    acting: &Acting,
    cx: &RequestContext<RoleServer>,
    question: String,
    digest: &str,
) -> Result<(Answer, f64), Refusal> {
    let review_id = plangate_store::new_id("rev_").map_err(Refusal::internal)?;
    record(
        gw,
        acting,
        EventKind::ReviewRequested {
            review_id: review_id.clone(),
            plan_digest: digest.to_owned(),
        },
    )
    .await?;
    // The session the answer comes back on is not evicted meanwhile.
    let _held = crate::session_guard::hold(cx);
    let asking = ask(&cx.peer, question, gw.review_timeout());
    let (answer, heard) = heartbeat::while_reviewing(cx, asking).await;
    let (verdict, feedback) = verdict_of(&answer);
    record(
        gw,
        acting,
        EventKind::ReviewAnswered {
            review_id: Some(review_id),
            verdict,
            plan_digest: digest.to_owned(),
            feedback,
            step_ids: None,
            revision: None,
        },
    )
    .await?;
    Ok((answer, heard))
}

async fn record(engine: &Engine, acting: &Acting, kind: EventKind) -> Result<(), Refusal> {
    engine
        .log()
        .transact(&acting.key.id, |state| {
            let mut kind = kind.clone();
            // An answer records the revision the person saw.
            if let EventKind::ReviewAnswered {
                plan_digest,
                revision,
                ..
            } = &mut kind
            {
                *revision = state.revision_seen(plan_digest);
            }
            Ok::<_, Refusal>((vec![acting.event(kind)], ()))
        })
        .await
        .map_err(crate::tools::log_failed)??;
    Ok(())
}
