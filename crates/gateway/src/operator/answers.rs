//! The answers of a person's acts that need more than the act itself: whose
//! yes now covers what (for an approval), and what an amendment changed.
//! Built here once, for the CLI and the console alike.

use std::collections::BTreeSet;

use plangate_config::Config;
use plangate_core::rules;
use plangate_core::{Actor, AmendAnswer, ApprovalAnswer, KeyState, PlanAfter, StepView, json_diff};
use plangate_store::ApiKey;

use super::{Amend, Approved, OperatorError, waiting_step};
use crate::Ops;
use crate::acting::Acting;

/// The waiting steps of `key`'s plan covered by a yes that counts for the
/// key — the gateway's rule ([`rules::approval_scope_for`]: a lock, or a
/// plan made with a `plan` token, holds a write key like a plan key), the
/// one every face counts with.
pub fn covered_steps<'s>(config: &Config, key: &ApiKey, state: &'s KeyState) -> BTreeSet<&'s str> {
    let scope = rules::approval_scope_for(state, key.scope, &config.modes.in_force(state));
    rules::approved_steps(state, &key.id, scope)
}

/// The waiting steps of `key`'s plan that do not run without a person's
/// yes: those the key's own `apply_plan` of its whole plan would leave
/// `not_approved` ([`rules::apply_steps`], the rule the gateway applies) —
/// every waiting step when the key may not apply it on its own say-so (a
/// `read` key, or one held like a `plan` key that no yes covers yet).
/// What `plans show` and the operator API mark "needed".
pub fn waiting_for_yes(config: &Config, key: &ApiKey, state: &KeyState) -> BTreeSet<String> {
    let scope = rules::approval_scope_for(state, key.scope, &config.modes.in_force(state));
    let covered = rules::approved_steps(state, &key.id, scope);
    let own = rules::Applier::Key { id: &key.id, scope };
    match rules::apply_steps(state, rules::Selection::Waiting, own, &covered) {
        Ok(steps) => steps.not_approved.into_iter().collect(),
        Err(_) => state
            .planned_steps()
            .map(|s| s.record.step_id.clone())
            .collect(),
    }
}

/// The answer of a person's yes: what it covers, and which waiting steps
/// no yes that counts for the key covers yet.
pub fn approval_answer(
    config: &Config,
    key: &ApiKey,
    actor: Actor,
    approved: &Approved,
) -> ApprovalAnswer {
    let state = &approved.state;
    let covered = covered_steps(config, key, state);
    let left_tied = plangate_core::partial::left_behind(state, &approved.step_ids)
        .into_iter()
        .filter(|l| l.tied.is_some() && !covered.contains(l.step_id.as_str()))
        .collect();
    ApprovalAnswer {
        success: true,
        key: key.name.clone(),
        approved_steps: approved.step_ids.clone(),
        approved_digest: approved.digest.clone(),
        not_approved: state
            .planned_steps()
            .filter(|s| !covered.contains(s.record.step_id.as_str()))
            .map(|s| s.record.step_id.clone())
            .collect(),
        left_tied,
        approved_by: actor,
        plan: PlanAfter::of(state),
    }
}

/// A person amends waiting step `step_id` of `acting`'s key
/// (`operator::amend`) and is answered the step as amended, what
/// changed in its arguments, and whether a yes covered it before (it no
/// longer does).
pub async fn amend(
    gw: Ops<'_>,
    acting: &Acting,
    change: Amend<'_>,
) -> Result<AmendAnswer, OperatorError> {
    let key = &acting.key;
    let step_id = change.step_id;
    let before = gw.log().state(&key.id).await?;
    waiting_step(&before, key, step_id)?;
    let was_approved = covered_steps(&gw.config(), key, &before).contains(step_id);
    let after = super::amend::amended_state(gw, acting, change).await?;
    let (Some(old), Some(new)) = (before.step(step_id), after.step(step_id)) else {
        return Err(OperatorError::NoStep {
            key: key.name.clone(),
            step: step_id.to_owned(),
        });
    };
    Ok(AmendAnswer {
        success: true,
        key: key.name.clone(),
        step: StepView::for_person(new),
        arguments_changed: json_diff(&old.record.arguments.value(), &new.record.arguments.value()),
        was_approved,
        amended_by: acting.actor(),
        plan: PlanAfter::of(&after),
    })
}
