//! A person's yes to steps of a key's plan ([`approve`]), bound to what
//! they looked at ([`Seen`]). Apart from the other acts because a yes has
//! rules of its own: it covers exactly the steps named, and a plan that
//! moved on since the person looked refuses it (docs/design.md §5, §7).

use plangate_core::{Actor, Channel, EventKind, KeyState, Step, StepStatus, Verdict};
use plangate_store::{ApiKey, now_ms};

use super::factor::Confirmed;
use super::{OperatorError, check_digest, waiting_step};
use crate::key_log::KeyLog;

/// What a person approved (`approve`).
#[derive(Debug, Clone)]
pub struct Approved {
    /// The key's state after the approval was recorded.
    pub state: KeyState,
    /// The steps approved, in plan order.
    pub step_ids: Vec<String>,
    /// The digest the approval binds: of exactly those steps (docs/design.md §5
    /// form), the plan's digest when they are every waiting step.
    pub digest: String,
}

/// What a person looked at when they said yes: the plan's digest, and its
/// revision when their screen showed one (the console, a confirmation on a
/// terminal). A yes binds it: a plan that moved on from either is refused
/// `plan_changed` and nothing is recorded.
#[derive(Debug, Clone, Copy)]
pub struct Seen<'a> {
    /// The plan digest shown.
    pub digest: &'a str,
    /// The plan revision shown, if one was.
    pub revision: Option<u64>,
}

impl<'a> Seen<'a> {
    /// Only the digest was shown (`--digest`).
    pub fn digest(digest: &'a str) -> Seen<'a> {
        Seen {
            digest,
            revision: None,
        }
    }

    /// Whether `state` is still the plan the person saw
    /// ([`plangate_core::rules::still_as_seen`]).
    pub(super) fn check(&self, key: &ApiKey, state: &KeyState) -> Result<(), OperatorError> {
        use plangate_core::rules::{Refused, still_as_seen};
        still_as_seen(state, self.digest, self.revision).map_err(|refused| match refused {
            Refused::PlanChanged { seen, current } => OperatorError::PlanChanged {
                key: key.name.clone(),
                seen,
                current,
            },
            Refused::RevisionMoved { seen, current } => OperatorError::RevisionMoved {
                key: key.name.clone(),
                seen,
                current,
            },
            refused => OperatorError::Rule {
                key: key.name.clone(),
                refused,
            },
        })
    }
}

/// Records `actor`'s yes over `channel` to the `named` waiting (or
/// failed: to run again) steps of `key`'s plan, or to every waiting step
/// when none is named
/// (`review_answered`, approve, with the step ids and the digest of
/// exactly those steps). The approval covers those steps while they are
/// unchanged, whatever else the plan gains or loses; an amendment of one
/// of them ends it. With `seen`, what the person looked at, a plan that
/// moved since is refused ([`OperatorError::PlanChanged`],
/// [`OperatorError::RevisionMoved`]). Nothing is recorded when anything is
/// refused. `yes` is the act as the store's requirement confirmed it
/// ([`super::factor::confirm`]): a person's yes names the operator whose
/// factor proved it.
pub async fn approve(
    log: &KeyLog,
    key: &ApiKey,
    actor: Actor,
    yes: &Confirmed,
    channel: Channel,
    seen: Option<Seen<'_>>,
    named: &[String],
) -> Result<Approved, OperatorError> {
    let actor = match (actor, yes.operator()) {
        (Actor::Operator { .. }, Some(operator)) => Actor::Operator {
            name: operator.to_owned(),
        },
        (actor, _) => actor,
    };
    if let Some(seen) = seen {
        check_digest(seen.digest)?;
    }
    let (state, (step_ids, digest)) = log
        .transact(&key.id, |state| {
            let (event, ids, digest) = approval(state, key, &actor, channel, seen, named)?;
            Ok::<_, OperatorError>((vec![event], (ids, digest)))
        })
        .await??;
    Ok(Approved {
        state,
        step_ids,
        digest,
    })
}

/// The `review_answered` event of a yes to `named` steps (every waiting
/// one when none is named) of `key`'s plan in `state`, the steps' ids in
/// plan order and the digest it binds; refused as [`approve`] says.
fn approval(
    state: &KeyState,
    key: &ApiKey,
    actor: &Actor,
    channel: Channel,
    seen: Option<Seen<'_>>,
    named: &[String],
) -> Result<(plangate_core::Event, Vec<String>, String), OperatorError> {
    if let Some(seen) = seen {
        seen.check(key, state)?;
    }
    let mut ids: Vec<&Step> = Vec::new();
    if named.is_empty() {
        ids.extend(state.planned_steps());
    }
    for id in named {
        // A failed step named: the person's new yes to run it again (the
        // last one was spent on its failed run).
        let step = match state.step(id) {
            Some(step) if step.status == StepStatus::Failed => step,
            _ => waiting_step(state, key, id)?,
        };
        if !ids.iter().any(|s| s.record.step_id == *id) {
            ids.push(step);
        }
    }
    if ids.is_empty() {
        return Err(OperatorError::NothingWaiting {
            key: key.name.clone(),
        });
    }
    ids.sort_by_key(|s| s.record.position);
    let step_ids: Vec<String> = ids.iter().map(|s| s.record.step_id.clone()).collect();
    let digest = plangate_core::plan_digest(ids.iter().map(|s| &s.record));
    let event = plangate_core::Event {
        at_ms: now_ms(),
        key_id: key.id.clone(),
        actor: actor.clone(),
        channel,
        kind: EventKind::ReviewAnswered {
            review_id: None,
            verdict: Verdict::Approve,
            plan_digest: digest.clone(),
            feedback: None,
            step_ids: Some(step_ids.clone()),
            revision: Some(state.revision),
        },
    };
    Ok((event, step_ids, digest))
}

/// A person's yes to several keys' whole plans in one act, each bound to
/// the digest and revision on their screen: recorded for every key or,
/// if any plan moved on from what was shown (or has nothing waiting),
/// for none — the refusal names that key ([`OperatorError::PlanChanged`],
/// [`OperatorError::RevisionMoved`], [`OperatorError::NothingWaiting`]).
/// One factor confirms the whole act.
pub async fn approve_together(
    log: &KeyLog,
    plans: &[(ApiKey, Seen<'_>)],
    actor: Actor,
    yes: &Confirmed,
    channel: Channel,
) -> Result<Vec<Approved>, OperatorError> {
    let actor = match (actor, yes.operator()) {
        (Actor::Operator { .. }, Some(operator)) => Actor::Operator {
            name: operator.to_owned(),
        },
        (actor, _) => actor,
    };
    for (_, seen) in plans {
        check_digest(seen.digest)?;
    }
    let key_ids: Vec<&str> = plans.iter().map(|(key, _)| key.id.as_str()).collect();
    let (states, bound) = log
        .transact_together(&key_ids, |states| {
            let mut events = Vec::with_capacity(states.len());
            let mut bound = Vec::with_capacity(states.len());
            for ((key, seen), state) in plans.iter().zip(states) {
                let (event, ids, digest) = approval(state, key, &actor, channel, Some(*seen), &[])?;
                events.push(vec![event]);
                bound.push((ids, digest));
            }
            Ok::<_, OperatorError>((events, bound))
        })
        .await??;
    Ok(states
        .into_iter()
        .zip(bound)
        .map(|(state, (step_ids, digest))| Approved {
            state,
            step_ids,
            digest,
        })
        .collect())
}
