//! The session tools' work (docs/design.md §5): `begin_session`,
//! `get_plan`, `discard_plan` and `end_session`, each one append to the
//! key's log (compare-and-set) and an answer. Apart from the tools'
//! definitions because these are what the tools do, not what they say
//! they do.

use plangate_core::{EventKind, KeyState, PlanStanding, PlanView, StepStatus, StepView, Where};
use plangate_store::now_ms;
use rmcp::model::CallToolResult;

use super::{SessionCall, answer, locked, log_failed, session_instructions};
use crate::Engine;
use crate::acting::Acting;
use crate::answer::structured;
use crate::plan::{expires_in, expiry_due};
use crate::refusal::Refusal;
use plangate_core::Code;
use plangate_core::rules::{self, ModeChange, Refused, Selection};

/// What a session tool answers: the result, whether plan mode (and so the
/// tool list) changed, and the key's state after the call when it had it
/// at hand.
type Answered = (CallToolResult, bool, Option<KeyState>);

/// Runs a session tool for a caller with a key. `known` is the key's
/// state as the caller just read it, if it did: `get_plan` decides on it
/// rather than reading the log again (its append, if any, is still
/// compare-and-set). Returns the result, whether plan mode (and so the
/// tool list) changed, and the key's state after the call when this call
/// had it at hand.
pub async fn call(
    gw: &Engine,
    acting: &Acting,
    call: SessionCall,
    known: Option<KeyState>,
) -> Result<Answered, Refusal> {
    match call {
        SessionCall::BeginSession { mode } => begin_session(gw, acting, &mode).await,
        SessionCall::GetPlan { step_id } => get_plan(gw, acting, step_id, known).await,
        SessionCall::DiscardPlan { step_ids } => discard_plan(gw, acting, step_ids).await,
        SessionCall::EndSession => end_session(gw, acting).await,
    }
}

/// `begin_session {mode}`: the mode set and a session begun (a plan past
/// its life expires first), unless a lock holds the key in another mode.
async fn begin_session(gw: &Engine, acting: &Acting, mode: &str) -> Result<Answered, Refusal> {
    let ttl_ms = gw.ttl_ms();
    let modes = &gw.config().modes;
    if !modes.contains(mode) {
        return Err(Refusal::new(
            Code::InvalidArguments,
            format!(
                "mode {mode:?} is not defined; use one of {}",
                modes.names().join(", ")
            ),
        ));
    }
    let session_id = plangate_store::new_id("ses_").map_err(Refusal::internal)?;
    let before = gw.log().state(&acting.key.id).await.map_err(log_failed)?;
    let was_plan = modes.in_force(&before).spec.plan_mode();
    let (state, ()) = gw
        .log()
        .transact(&acting.key.id, |state| {
            // Under a lock only the locked mode itself may begin
            // (it restarts the plan's life); checked on the state
            // the events join, so an operator's lock between two
            // reads still holds.
            rules::may_change_mode(&modes.in_force(state), ModeChange::Begin(mode))
                .map_err(|refused| locked(&refused, &acting.key.name, "no session was begun"))?;
            let mut events = Vec::new();
            if let Some(e) = expiry_due(state, now_ms(), ttl_ms, acting) {
                events.push(e);
            }
            events.push(acting.event(EventKind::ModeSet {
                mode: mode.to_owned(),
            }));
            events.push(acting.event(EventKind::SessionBegun {
                session_id: session_id.clone(),
                mode: mode.to_owned(),
            }));
            Ok::<_, Refusal>((events, ()))
        })
        .await
        .map_err(log_failed)??;
    let spec = modes.in_force(&state).spec;
    let instructions = session_instructions(&gw.config().gateway.tool_prefix, &spec);
    let body = serde_json::to_value(plangate_core::SessionAnswer {
        success: true,
        session_id: session_id.clone(),
        mode: spec.name.clone(),
        plan_mode: spec.plan_mode(),
        modes: modes.names(),
        expires_in: expires_in(&state, now_ms(), ttl_ms),
        pending_steps: state.planned_steps().count(),
        instructions: instructions.clone(),
    })
    .unwrap_or_default();
    let text = format!(
        "Session {session_id} begun in mode {}. {instructions}",
        spec.name
    );
    Ok((answer(body, text), was_plan != spec.plan_mode(), None))
}

/// `get_plan {step_id?}`: the plan's open steps (or one step, whole), with
/// the digest and whether an approval that counts covers them.
async fn get_plan(
    gw: &Engine,
    acting: &Acting,
    step_id: Option<String>,
    known: Option<KeyState>,
) -> Result<Answered, Refusal> {
    let ttl_ms = gw.ttl_ms();
    let modes = &gw.config().modes;
    let (state, ()) = gw
        .log()
        .transact_from(&acting.key.id, known, |state| {
            let events = expiry_due(state, now_ms(), ttl_ms, acting)
                .into_iter()
                .collect();
            Ok::<_, Refusal>((events, ()))
        })
        .await
        .map_err(log_failed)??;
    let in_force = modes.in_force(&state);
    // Each waiting step is marked `approved` when an approval that
    // counts for the key covers it; the plan is when all are.
    let scope = rules::approval_scope_for(&state, acting.key.scope, &in_force);
    let covered = rules::approved_steps(&state, &acting.key.id, scope);
    let standing = PlanStanding::of(&state, &in_force, &covered, (now_ms(), ttl_ms));
    let steps: Vec<StepView> = match &step_id {
        // One step, whole: any step of the log, done or not.
        Some(id) => match state.step(id) {
            Some(s) => vec![StepView::of(s).covered_by(&covered)],
            None => {
                return Err(Refusal::new(
                    Code::InvalidArguments,
                    format!(
                        "there is no step {id:?} in this key's plan; {}get_plan without step_id lists the steps",
                        gw.config().gateway.tool_prefix
                    ),
                ));
            }
        },
        None => state
            .open_steps()
            .map(|s| StepView::of(s).covered_by(&covered).compact())
            .collect(),
    };
    let pending = standing.pending_steps;
    let expired_recently = state.open_steps().next().is_none()
        && state
            .steps
            .last()
            .is_some_and(|s| s.status == StepStatus::Expired);
    let message = if expired_recently {
        "The plan expired before it was applied; its steps were not run. Plan again if the work is still wanted.".to_owned()
    } else if steps.is_empty() {
        "No plan: nothing is waiting.".to_owned()
    } else {
        format!(
            "{} step(s) in the plan, {pending} waiting. Show the person the plan in plain words; apply only after they say yes.",
            steps.len()
        )
    };
    let outcome = rules::decided_so_far(&state, &covered);
    let message = match &outcome {
        Some(o) if !o.approved.is_empty() => format!(
            "{message} A person's yes covers {} waiting step(s): apply them with {}apply_plan and plan_digest {}.",
            o.approved.len(),
            gw.config().gateway.tool_prefix,
            o.plan_digest
        ),
        _ => message,
    };
    let body = PlanView {
        success: true,
        standing,
        steps,
        message: message.clone(),
        outcome,
        notice: in_force.notice,
    };
    let text = plan_text(message, &state);
    Ok((structured(&body, text), false, Some(state)))
}

/// What `get_plan` says of the plan: the message, then a line per open
/// step.
fn plan_text(message: String, state: &KeyState) -> String {
    let mut text = message;
    for s in state.open_steps() {
        let r = &s.record;
        text.push_str(&format!(
            "\n{}. [{}] {} — {}{}",
            r.position,
            s.status,
            r.predicted_effect,
            match r.lands_on.where_ {
                Where::Copy => "lands on a copy",
                Where::Live => "lands live",
            },
            if r.approval_required {
                "; destructive, needs an explicit yes"
            } else {
                ""
            }
        ));
        if let Some(rejection) = &s.rejection {
            text.push_str(&format!(
                " — rejected by {}, never runs: {}",
                rejection.by, rejection.reason
            ));
        }
        if let Some(amended) = &s.amendment {
            let changes: Vec<String> =
                plangate_core::json_diff(&amended.previous_arguments.value(), &r.arguments.value())
                    .iter()
                    .map(ToString::to_string)
                    .collect();
            text.push_str(&format!(
                " — amended by {}: {}; it runs as amended",
                amended.by,
                changes.join(", ")
            ));
        }
    }
    text
}

/// `discard_plan {step_ids?}`: the named steps (or every waiting one)
/// dropped, never run.
async fn discard_plan(
    gw: &Engine,
    acting: &Acting,
    named: Option<Vec<String>>,
) -> Result<Answered, Refusal> {
    let prefix = &gw.config().gateway.tool_prefix;
    let selection = match &named {
        None => Selection::Waiting,
        Some(ids) => Selection::Named(ids),
    };
    let answered = crate::operator::discard(gw.log(), acting, selection, gw.ttl_ms())
        .await
        .map_err(|e| match e {
            crate::operator::OperatorError::Rule { refused, .. } => {
                let hint = match &refused {
                    Refused::Status { .. } => {
                        " (only waiting, failed or in-doubt steps can be discarded)".to_owned()
                    }
                    _ => format!("; {prefix}get_plan lists the steps"),
                };
                Refusal::new(
                    refused.code(),
                    format!("{refused}{hint}. Nothing was discarded"),
                )
            }
            crate::operator::OperatorError::Log(e) => log_failed(e),
            other => Refusal::new(other.code(), other.to_string()),
        })?;
    let text = format!(
        "Discarded {} step(s); {} waiting.",
        answered.discarded.len(),
        answered.plan.pending_steps
    );
    let body = serde_json::to_value(&answered).unwrap_or_default();
    Ok((answer(body, text), false, None))
}

/// `end_session`: the mode back to default and the plan's steps not
/// running dropped, unless a lock holds the key.
async fn end_session(gw: &Engine, acting: &Acting) -> Result<Answered, Refusal> {
    let modes = &gw.config().modes;
    let before = gw.log().state(&acting.key.id).await.map_err(log_failed)?;
    let was_plan = modes.in_force(&before).spec.plan_mode();
    let (_, discarded) = gw
        .log()
        .transact(&acting.key.id, |state| {
            rules::may_change_mode(&modes.in_force(state), ModeChange::End).map_err(|refused| {
                locked(
                    &refused,
                    &acting.key.name,
                    "the session goes on and no step was dropped",
                )
            })?;
            let ids = rules::end_session_selection(state);
            let events = vec![
                acting.event(EventKind::SessionEnded {
                    discarded: ids.clone(),
                }),
                acting.event(EventKind::ModeSet {
                    mode: plangate_core::DEFAULT_MODE.to_owned(),
                }),
            ];
            Ok::<_, Refusal>((events, ids))
        })
        .await
        .map_err(log_failed)??;
    let body = serde_json::to_value(plangate_core::SessionEnded {
        success: true,
        discarded_steps: discarded.len(),
        discarded: discarded.clone(),
    })
    .unwrap_or_default();
    let text = match discarded.len() {
        0 => "Session ended: the mode is default; no step was waiting.".to_owned(),
        n => format!(
            "Session ended: the mode is default; {n} step(s) of the plan were discarded and will not run: {}.",
            discarded.join(", ")
        ),
    };
    Ok((answer(body, text), was_plan, None))
}
