//! A person changes a waiting step's arguments (`plangate plans amend`,
//! the console): the step keeps its id and position, and becomes what the
//! new arguments make of it — checked against the tool's schema, previewed
//! again, redacted and sealed exactly as a planned write
//! (`plan::prepare_step`). `"[redacted]"` in the new arguments
//! keeps the value sealed there. The plan digest changes, so an approval
//! that bound the old step no longer covers it.
//!
//! Two people amending the same step at once: each read the step before
//! previewing, and the append checks it is still exactly that step
//! (compare-and-set on the key's log), so one wins and the other is told
//! `plan_changed` with nothing recorded.

use plangate_core::{Code, EventKind, KeyState, Step, StepRecord, StepStatus, keep_sealed};
use serde_json::Value;

use super::{OperatorError, refresh};
use crate::acting::Acting;
use crate::plan::{open_secrets, planned_tool, prepare_step};
use crate::{Catalog, CatalogTool, Ops};

/// Why new arguments cannot amend a step (all `invalid_arguments`).
fn bad(why: String) -> OperatorError {
    OperatorError::BadArguments(why)
}

/// A person's amendment, as every face asks for it.
#[derive(Debug, Clone, Copy)]
pub struct Amend<'a> {
    /// The waiting step to change.
    pub step_id: &'a str,
    /// Its new arguments: a JSON object, as the tool takes them;
    /// `"[redacted]"` keeps the value sealed there.
    pub arguments: &'a Value,
    /// The plan revision the person looked at, when known: if the step was
    /// amended after it, the person amended a step they had not seen, and
    /// nothing is recorded.
    pub seen_revision: Option<u64>,
}

/// Amends a waiting step of `acting`'s key as `change` says; returns the
/// state after.
pub(super) async fn amended_state(
    gw: Ops<'_>,
    acting: &Acting,
    change: Amend<'_>,
) -> Result<KeyState, OperatorError> {
    let Amend {
        step_id,
        arguments,
        seen_revision,
    } = change;
    let key = &acting.key;
    let state = refresh(gw.log(), acting, gw.ttl_ms(), gw.lease_ms()).await?;
    let old = super::waiting_step(&state, key, step_id)?.clone();
    let Value::Object(_) = arguments else {
        return Err(bad(
            "the new arguments must be a JSON object, as the tool takes them".to_owned(),
        ));
    };
    let record = &old.record;
    let catalog = gw.catalog();
    let tool = amendable_tool(&catalog, record)?;
    let full = new_arguments(gw, tool, record, arguments)?;
    let Value::Object(object) = &full else {
        return Err(bad("the new arguments must be a JSON object".to_owned()));
    };
    let in_force = gw.config().modes.in_force(&state);
    let mut known = Some(state);
    let mut amended = prepare_step(
        gw,
        acting,
        &in_force,
        tool,
        object,
        step_id.to_owned(),
        &mut known,
    )
    .await
    .map_err(OperatorError::Refused)?;
    if amended.fingerprint == record.fingerprint {
        return Err(bad(format!(
            "the new arguments are step {step_id}'s own; nothing changed"
        )));
    }
    // The step keeps its place and age.
    amended.position = record.position;
    amended.planned_at_ms = record.planned_at_ms;
    amended.rule = record.rule.clone();
    let (state, ()) = gw
        .log()
        .transact(&key.id, |state| {
            still_as_seen(state, acting, &old, seen_revision)?;
            let config = gw.config();
            plangate_core::rules::room_for(
                state,
                amended.size_bytes(),
                Some(step_id),
                config.gateway.max_steps as usize,
                config.gateway.max_plan_bytes,
            )
            .map_err(|refused| OperatorError::Rule {
                key: key.name.clone(),
                refused,
            })?;
            let event = acting.event(EventKind::StepAmended {
                step: amended.clone(),
                previous_arguments: old.record.arguments.clone(),
            });
            Ok::<_, OperatorError>((vec![event], ()))
        })
        .await??;
    tracing::info!(key = %key.name, step = %step_id, by = ?acting.operator, "step amended");
    Ok(state)
}

/// The tool the step calls, if agents are offered it now: new arguments
/// are checked and previewed against it, so a step of a tool gone,
/// disabled or withheld is not amended (it can be discarded).
fn amendable_tool<'c>(
    catalog: &'c Catalog,
    record: &StepRecord,
) -> Result<&'c CatalogTool, OperatorError> {
    let Some(tool) = planned_tool(catalog, record) else {
        return Err(OperatorError::UpstreamDown {
            server: record.server.clone(),
            why: format!(
                "{} is not offered now, so the new arguments cannot be checked or previewed",
                record.tool
            ),
        });
    };
    if !tool.enabled || tool.withheld.is_some() {
        return Err(OperatorError::Refused(crate::refusal::Refusal::new(
            tool.withheld.as_ref().map_or(Code::Forbidden, |w| w.code()),
            format!(
                "{} is not offered to agents now, so the step cannot be amended; discard it instead",
                tool.exposed
            ),
        )));
    }
    Ok(tool)
}

/// The new arguments in full — `"[redacted]"` replaced by the value sealed
/// at that place — checked as a call's are: safe integers, the tool's
/// input schema.
fn new_arguments(
    gw: Ops<'_>,
    tool: &CatalogTool,
    record: &StepRecord,
    arguments: &Value,
) -> Result<Value, OperatorError> {
    let step_id = &record.step_id;
    // "[redacted]" keeps the value sealed at that place.
    let sealed = open_secrets(&gw, record).ok_or_else(|| {
        bad(format!(
            "step {step_id}'s sealed values cannot be opened with this data dir's keys, so \"[redacted]\" cannot stand for them; give every value"
        ))
    })?;
    let full = keep_sealed(arguments, &sealed).map_err(|at| {
        bad(format!(
            "\"[redacted]\" at {at:?} stands for a sealed value, but step {step_id} holds none there; give the value itself"
        ))
    })?;
    if let Err(e) = plangate_core::check_safe_integers(&full) {
        return Err(bad(format!("{e}; send it as a string or a smaller number")));
    }
    if let Err(errors) = tool.check_arguments(&full) {
        return Err(bad(format!(
            "the new arguments do not match {}'s input schema: {}",
            tool.exposed,
            errors.join("; ")
        )));
    }
    Ok(full)
}

/// Whether `state` still holds exactly the step the person amended
/// (`seen`), still waiting: else someone changed it meanwhile (another
/// amendment, an apply, a discard) and this amendment is of a step that
/// is gone. An amendment after `seen_revision` is one the person did not
/// see.
fn still_as_seen(
    state: &KeyState,
    acting: &Acting,
    seen: &Step,
    seen_revision: Option<u64>,
) -> Result<(), OperatorError> {
    let (key, step_id) = (&acting.key, seen.record.step_id.as_str());
    let unseen = |now: &Step| {
        seen_revision.is_some_and(|r| now.amendment.as_ref().is_some_and(|a| a.revision > r))
    };
    match state.step(step_id) {
        Some(now)
            if now.status == StepStatus::Planned
                && now.record == seen.record
                && now.amendment == seen.amendment
                && !unseen(now) =>
        {
            Ok(())
        }
        Some(now) => Err(OperatorError::StepChanged {
            key: key.name.clone(),
            step: step_id.to_owned(),
            status: now.status,
        }),
        None => Err(OperatorError::NoStep {
            key: key.name.clone(),
            step: step_id.to_owned(),
        }),
    }
}
