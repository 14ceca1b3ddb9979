//! What a person does to a key's plan from outside the agent — through the
//! CLI (`plangate plans …`) or the web console — in one place, so both
//! channels follow exactly the same rules (docs/design.md §5, §7).
//!
//! Plans are folds over each key's event log, so every act here is a
//! [`KeyLog::transact`] with the log's compare-and-set rule: a person's
//! discard or retry and an agent's call racing on one key never both win
//! on a stale view. Every event a person causes names them
//! (`Actor::Operator`) and the channel they used. Reading a plan first
//! brings it up to date, as every plangate process sharing the store does
//! ([`refresh`]): a claim whose lease ran out is marked `in_doubt`, and a
//! plan past its life expires.
//!
//! Errors carry a stable code ([`OperatorError::code`], docs/design.md §8) and a
//! lowercase message naming the value at fault; callers add their own
//! hints (the CLI names commands, the console names buttons).

use plangate_config::Config;
use plangate_core::{
    Channel, DiscardAnswer, EventKind, KeyPlanView, KeyState, PlanAfter, PlanReview, PlanStanding,
    RejectionAnswer, Step, StepStatus, StepView,
};
use plangate_store::{ApiKey, now_ms};

use crate::acting::Acting;
use crate::apply;
use crate::key_log::{KeyLog, LogError};
use crate::plan::expiry_due;
use plangate_core::rules::{self, Refused, Selection};

mod amend;
mod answers;
mod approve;
mod error;
pub mod factor;
mod revert;
mod run;
mod views;

pub use amend::Amend;
pub use answers::{amend, approval_answer, covered_steps, waiting_for_yes};
pub use approve::{Approved, Seen, approve, approve_together};
pub use error::OperatorError;
pub use revert::{NotReverted, RevertAnswer, RevertStep, revert, revert_result};
pub use run::{apply_now, check_in_doubt, left_by_apply, require_upstreams, retry, steps_to_apply};
pub use views::{find_key, plan_views, unknown_key};

/// The person acting on `key`'s plan, named `operator`, over `channel`.
pub fn acting(key: &ApiKey, operator: &str, channel: Channel) -> Acting {
    Acting {
        key: key.clone(),
        channel,
        operator: Some(operator.to_owned()),
    }
}

pub use crate::engine::{lease_ms, ttl_ms};

/// Checks that `d` is shaped like a plan digest (`sha256:` + 64 hex).
pub fn check_digest(d: &str) -> Result<(), OperatorError> {
    let hex = d.strip_prefix("sha256:").unwrap_or_default();
    if hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(())
    } else {
        Err(OperatorError::BadDigest(d.to_owned()))
    }
}

/// Brings a key's plan up to date before a person reads or changes it:
/// expires a plan past its life and marks claims whose lease ran out
/// `in_doubt` (the same events the gateway's sweeper appends, by
/// `Actor::System`). Returns the state after.
pub async fn refresh(
    log: &KeyLog,
    acting: &Acting,
    ttl_ms: i64,
    lease_ms: i64,
) -> Result<KeyState, LogError> {
    let (state, ()) = log
        .transact(&acting.key.id, |state| {
            let now = now_ms();
            let mut view = state.clone();
            let mut events = Vec::new();
            if let Some(e) = expiry_due(&view, now, ttl_ms, acting) {
                view.apply(view.last_seq + 1, &e);
                events.push(e);
            }
            for e in apply::lease_cleanup(&view, now, lease_ms, acting) {
                view.apply(view.last_seq + 1, &e);
                events.push(e);
            }
            Ok::<_, std::convert::Infallible>((events, ()))
        })
        .await?
        .unwrap_or_else(|never| match never {});
    Ok(state)
}

/// A key's plan as a person sees it (`plans show --json`, the console):
/// the key, its mode, every open step as `get_plan` shows it (redacted,
/// never sealed) with its attempts, the digest and whether that digest is
/// approved by someone whose approval counts for this key (docs/design.md §7).
pub fn plan_view(config: &Config, key: &ApiKey, state: &KeyState, now: i64) -> KeyPlanView {
    let in_force = config.modes.in_force(state);
    let scope = rules::approval_scope_for(state, key.scope, &in_force);
    let covered = rules::approved_steps(state, &key.id, scope);
    let standing = PlanStanding::of(state, &in_force, &covered, (now, ttl_ms(config)));
    let last = state.last_applied();
    KeyPlanView {
        key: key.name.clone(),
        key_id: key.id.clone(),
        scope: key.scope,
        revoked: !key.is_active(),
        standing,
        reviewed_revision: state.reviewed.as_ref().map(|r| r.revision),
        steps: state
            .open_steps()
            .map(|s| StepView::for_person(s).covered_by(&covered))
            .collect(),
        revertible: last.iter().filter(|s| s.revertible()).count(),
        last_apply: last
            .into_iter()
            .map(|s| StepView::for_person(s).compact())
            .collect(),
        notice: in_force.notice,
    }
}

/// A key's plan as a person reviews it before a yes: [`plan_view`], the
/// waiting steps that need a yes ([`waiting_for_yes`]) and whether the
/// key's log verifies — what `plans show` prints, here or through the
/// operator API.
pub fn plan_review(config: &Config, key: &ApiKey, state: &KeyState, now: i64) -> PlanReview {
    PlanReview {
        plan: plan_view(config, key, state, now),
        waiting_for_yes: waiting_for_yes(config, key, state).into_iter().collect(),
        applies: steps_to_apply(config, key, state, &[])
            .map(|steps| steps.run)
            .unwrap_or_default(),
        log_broken: state.chain.broken.as_ref().map(ToString::to_string),
    }
}

/// What a person's `mode set` does to the key's lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockChange {
    /// Lock the key in the mode set.
    Lock,
    /// Unlock it: its agent sets its mode again, and `[gateway]
    /// default_mode_locked` no longer holds it.
    Unlock,
    /// Neither: a locked key stays locked (in the new mode), an unlocked
    /// one stays unlocked.
    Keep,
}

/// A person sets `acting`'s key's mode (`mode`, or the mode it is in when
/// `None`, which only an unlock may leave out) and lock: one append of
/// `mode_set` and `mode_locked`/`mode_unlocked` as needed, so the mode and
/// its lock never read apart. A key locked (by an operator or by config)
/// and set without `--lock`/`--unlock` stays locked, in the new mode: an
/// operator moving a held agent does not free it by the way. Returns the
/// mode in force after. An unlock widens what runs, and so does moving a
/// key held in a plan mode to one that is not: each needs `yes`, the act
/// as the store's requirement confirmed it ([`factor::confirm`]); without
/// it the answer is [`factor::FactorError::Unconfirmed`], nothing
/// recorded, and the face asks the person and calls again.
pub async fn set_mode(
    log: &KeyLog,
    config: &Config,
    acting: &Acting,
    mode: Option<&str>,
    lock: LockChange,
    yes: Option<&factor::Confirmed>,
) -> Result<plangate_core::InForce, OperatorError> {
    if lock == LockChange::Unlock && yes.is_none() {
        return Err(OperatorError::Factor(factor::FactorError::Unconfirmed(
            factor::Act::Unlock {
                key: &acting.key.name,
            }
            .describe(),
        )));
    }
    let modes = &config.modes;
    let (state, ()) = log
        .transact(&acting.key.id, |state| {
            let before = modes.in_force(state);
            // Moving a key held in a plan mode to one that is not widens
            // what runs, as an unlock does.
            if let Some(m) = mode
                && before.locked()
                && before.spec.plan_mode()
                && !modes.resolve(Some(m)).0.plan_mode()
                && yes.is_none()
            {
                return Err(OperatorError::Factor(factor::FactorError::Unconfirmed(
                    factor::Act::Relock {
                        key: &acting.key.name,
                        mode: m,
                    }
                    .describe(),
                )));
            }
            let mut events = Vec::new();
            if let Some(mode) = mode {
                events.push(acting.event(EventKind::ModeSet {
                    mode: mode.to_owned(),
                }));
            }
            let target = mode.unwrap_or(&before.spec.name).to_owned();
            match lock {
                LockChange::Lock => {
                    events.push(acting.event(EventKind::ModeLocked { mode: target }))
                }
                LockChange::Keep if before.locked() && mode.is_some() => {
                    events.push(acting.event(EventKind::ModeLocked { mode: target }));
                }
                LockChange::Keep => {}
                LockChange::Unlock => events.push(acting.event(EventKind::ModeUnlocked)),
            }
            Ok((events, ()))
        })
        .await??;
    Ok(modes.in_force(&state))
}

/// Drops steps of `acting`'s key (a person's discard, or the agent's
/// `discard_plan`): the named waiting, failed or in-doubt ones, or every
/// waiting step. Returns the
/// state after and the ids discarded (none: nothing was recorded).
pub async fn discard(
    log: &KeyLog,
    acting: &Acting,
    selection: Selection<'_>,
    ttl_ms: i64,
) -> Result<DiscardAnswer, OperatorError> {
    let key = &acting.key;
    let (state, ids) = log
        .transact(&key.id, |state| {
            // As the agent's discard does: a plan past its life expires
            // first, so naming one of its steps answers `plan_expired`.
            let mut view = state.clone();
            let mut events = Vec::new();
            if let Some(e) = expiry_due(state, now_ms(), ttl_ms, acting) {
                view.apply(view.last_seq + 1, &e);
                events.push(e);
            }
            let ids = rules::discard_selection(&view, selection).map_err(|refused| {
                OperatorError::Rule {
                    key: key.name.clone(),
                    refused,
                }
            })?;
            if !ids.is_empty() {
                events.push(acting.event(EventKind::StepsDiscarded {
                    step_ids: ids.clone(),
                }));
            }
            Ok::<_, OperatorError>((events, ids))
        })
        .await??;
    Ok(DiscardAnswer {
        success: true,
        key: key.name.clone(),
        discarded: ids,
        discarded_by: acting.actor(),
        plan: PlanAfter::of(&state),
    })
}

/// A person's discard of several keys' whole plans in one act, each bound
/// to the digest and revision on their screen: every waiting step of
/// every key discarded or, if any plan moved on from what was shown,
/// nothing of any — the refusal names that key, as
/// [`approve_together`]'s does.
pub async fn discard_together(
    log: &KeyLog,
    plans: &[(Acting, Seen<'_>)],
    ttl_ms: i64,
) -> Result<Vec<DiscardAnswer>, OperatorError> {
    for (_, seen) in plans {
        check_digest(seen.digest)?;
    }
    let key_ids: Vec<&str> = plans.iter().map(|(a, _)| a.key.id.as_str()).collect();
    let (states, discarded) = log
        .transact_together(&key_ids, |states| {
            let mut events = Vec::with_capacity(states.len());
            let mut discarded = Vec::with_capacity(states.len());
            for ((acting, seen), state) in plans.iter().zip(states) {
                seen.check(&acting.key, state)?;
                let mut view = state.clone();
                let mut these = Vec::new();
                if let Some(e) = expiry_due(state, now_ms(), ttl_ms, acting) {
                    view.apply(view.last_seq + 1, &e);
                    these.push(e);
                }
                let ids =
                    rules::discard_selection(&view, Selection::Waiting).map_err(|refused| {
                        OperatorError::Rule {
                            key: acting.key.name.clone(),
                            refused,
                        }
                    })?;
                if !ids.is_empty() {
                    these.push(acting.event(EventKind::StepsDiscarded {
                        step_ids: ids.clone(),
                    }));
                }
                events.push(these);
                discarded.push(ids);
            }
            Ok::<_, OperatorError>((events, discarded))
        })
        .await??;
    Ok(plans
        .iter()
        .zip(states)
        .zip(discarded)
        .map(|(((acting, _), state), ids)| DiscardAnswer {
            success: true,
            key: acting.key.name.clone(),
            discarded: ids,
            discarded_by: acting.actor(),
            plan: PlanAfter::of(&state),
        })
        .collect())
}

/// Waiting step `step_id` of `key`'s plan in `state`, or why a person
/// cannot act on it as a waiting step: it is not in the plan, or it is no
/// longer waiting. Approve, reject and amend all start here.
pub fn waiting_step<'s>(
    state: &'s KeyState,
    key: &ApiKey,
    step_id: &str,
) -> Result<&'s Step, OperatorError> {
    let step = state.step(step_id).ok_or_else(|| OperatorError::NoStep {
        key: key.name.clone(),
        step: step_id.to_owned(),
    })?;
    if step.status != StepStatus::Planned {
        return Err(OperatorError::Rule {
            key: key.name.clone(),
            refused: Refused::Status {
                step: step_id.to_owned(),
                status: step.status,
            },
        });
    }
    Ok(step)
}

/// The longest rejection reason taken, in characters.
pub const MAX_REASON: usize = 2000;

/// A person rejects one waiting step of `acting`'s key, saying why
/// (`step_rejected`): it never runs, leaves the plan digest, and its
/// agent reads the reason verbatim in `get_plan` and every apply answer.
/// Answers where the plan stands after.
pub async fn reject(
    log: &KeyLog,
    acting: &Acting,
    step_id: &str,
    reason: &str,
) -> Result<RejectionAnswer, OperatorError> {
    let reason = reason.trim();
    if reason.is_empty() || reason.chars().count() > MAX_REASON {
        return Err(OperatorError::BadReason { max: MAX_REASON });
    }
    let key = &acting.key;
    let (state, ()) = log
        .transact(&key.id, |state| {
            waiting_step(state, key, step_id)?;
            Ok::<_, OperatorError>((
                vec![acting.event(EventKind::StepRejected {
                    step_id: step_id.to_owned(),
                    reason: reason.to_owned(),
                })],
                (),
            ))
        })
        .await??;
    Ok(RejectionAnswer {
        success: true,
        key: key.name.clone(),
        rejected: step_id.to_owned(),
        reason: reason.to_owned(),
        rejected_by: acting.actor(),
        plan: PlanAfter::of(&state),
    })
}
