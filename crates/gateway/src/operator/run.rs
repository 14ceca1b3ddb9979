//! A person runs steps now: [`apply_now`] (`plans apply`, the console's
//! Apply) and [`retry`] of an in-doubt step. Apart from the acts that only
//! record because these go on to call upstreams, through the same claims,
//! fresh checks and at-most-once rule as the agent's `apply_plan`
//! (docs/design.md §5).

use plangate_config::Config;
use plangate_core::Receipt;
use plangate_core::rules::{self, Selection};
use plangate_core::{EventKind, KeyState, Step, StepStatus};
use plangate_store::{ApiKey, now_ms};
use tokio_util::sync::CancellationToken;

use super::factor::Confirmed;
use super::{OperatorError, Seen, approve, check_digest, refresh};
use crate::Ops;
use crate::acting::Acting;
use crate::apply::{self, ApplyRequest};

/// Which steps a person's apply of `key`'s plan runs now: the same rule as
/// the agent's ([`rules::apply_steps`] with the person's act as the yes) —
/// the `named` waiting or failed steps, or every waiting step (only the
/// approved ones once a person approved part of the plan).
pub fn steps_to_apply(
    config: &Config,
    key: &ApiKey,
    state: &KeyState,
    named: &[String],
) -> Result<rules::ApplySteps, OperatorError> {
    let selection = Selection::of(named);
    let scope = rules::approval_scope_for(state, key.scope, &config.modes.in_force(state));
    let covered = rules::approved_steps(state, &key.id, scope);
    rules::apply_steps(state, selection, rules::Applier::Operator, &covered).map_err(|refused| {
        OperatorError::Rule {
            key: key.name.clone(),
            refused,
        }
    })
}

/// What a person's apply of `named` (every waiting step when empty) would
/// leave waiting ([`rules::partial_apply`]): refused when a step left is
/// tied to one it runs and the person did not say a partial apply is
/// meant (`partial`). A face asks this before it asks for the person's yes
/// or code; [`apply_now`] asks it again on the plan as it then is.
pub fn left_by_apply(
    config: &Config,
    key: &ApiKey,
    state: &KeyState,
    (named, partial): (&[String], bool),
) -> Result<Vec<plangate_core::partial::LeftStep>, OperatorError> {
    let run = steps_to_apply(config, key, state, named)?.run;
    rules::partial_apply(state, &run, partial).map_err(|refused| OperatorError::Rule {
        key: key.name.clone(),
        refused,
    })
}

/// A person applies `acting`'s key's plan now (`plans apply`, the
/// console's Apply): checks the plan is still the one the person saw
/// (`seen`, when given),
/// records the person's yes for exactly the waiting steps it runs
/// ([`steps_to_apply`]), then runs them through `gw` with the same claims,
/// fresh checks and at-most-once rule as the agent's `apply_plan`. `None`
/// when nothing is waiting to run. `yes` is the act as the store's
/// requirement confirmed it ([`super::factor::confirm`]); `progress` hears
/// the apply as it runs. With `go_on` (`plans apply --continue`) every
/// step runs even when one before it failed or was stale (a revert's
/// steps are independent); without, the apply stops at the first.
pub async fn apply_now(
    gw: Ops<'_>,
    acting: &Acting,
    yes: &Confirmed,
    seen: Option<Seen<'_>>,
    (named, partial, go_on): (&[String], bool, bool),
    progress: Option<apply::Progress>,
) -> Result<Option<Receipt>, OperatorError> {
    if let Some(seen) = seen {
        check_digest(seen.digest)?;
    }
    let key = &acting.key;
    let state = refresh(gw.log(), acting, gw.ttl_ms(), gw.lease_ms()).await?;
    let run = steps_to_apply(&gw.config(), key, &state, named)?.run;
    if run.is_empty() {
        return Ok(None);
    }
    left_by_apply(&gw.config(), key, &state, (named, partial))?;
    if let Some(seen) = seen {
        seen.check(key, &state)?;
    }
    let current = state.plan_digest();
    require_upstreams(gw, run.iter().filter_map(|id| state.step(id)))?;
    // The yes covers exactly the waiting steps this apply runs (a failed
    // step named to run again was approved when it first ran).
    let waiting: Vec<String> = run
        .iter()
        .filter(|id| {
            state
                .step(id)
                .is_some_and(|s| s.status == StepStatus::Planned)
        })
        .cloned()
        .collect();
    if !waiting.is_empty() {
        approve(
            gw.log(),
            key,
            acting.actor(),
            yes,
            acting.channel,
            Some(Seen {
                digest: &current,
                revision: Some(state.revision),
            }),
            &waiting,
        )
        .await?;
    }
    let request = ApplyRequest {
        step_ids: (!named.is_empty()).then(|| named.to_vec()),
        plan_digest: Some(current),
        continue_on_error: go_on,
    };
    apply::apply_plan(gw, acting, request, progress, CancellationToken::new())
        .await
        .map(Some)
        .map_err(OperatorError::Refused)
}

/// Fails unless every upstream the steps call is connected, so nothing is
/// claimed (or recorded as failed) when the world cannot be reached.
pub fn require_upstreams<'a>(
    gw: Ops<'_>,
    steps: impl IntoIterator<Item = &'a Step>,
) -> Result<(), OperatorError> {
    let down = gw.down_upstreams();
    for step in steps {
        let server = &step.record.server;
        if !gw.is_connected(server) {
            return Err(OperatorError::UpstreamDown {
                server: server.clone(),
                why: down
                    .get(server)
                    .cloned()
                    .unwrap_or_else(|| "not configured".to_owned()),
            });
        }
    }
    Ok(())
}

/// Refuses unless `step_id` is in doubt in `state`.
pub fn check_in_doubt(state: &KeyState, key: &ApiKey, step_id: &str) -> Result<(), OperatorError> {
    plangate_core::rules::log_intact(state).map_err(|refused| OperatorError::Rule {
        key: key.name.clone(),
        refused,
    })?;
    match state.step(step_id) {
        None => Err(OperatorError::NoStep {
            key: key.name.clone(),
            step: step_id.to_owned(),
        }),
        Some(s) if s.status != StepStatus::InDoubt => Err(OperatorError::NotInDoubt {
            step: step_id.to_owned(),
            status: s.status,
        }),
        Some(_) => Ok(()),
    }
}

/// A person's explicit retry of an in-doubt step (docs/design.md §5): records
/// `step_retried` by the operator, then runs exactly that step now through
/// `gw`, with the same claims, fresh checks and at-most-once rule as an
/// agent's `apply_plan`. Returns the receipt. `_yes` is the act as the
/// store's requirement confirmed it ([`super::factor::confirm`]): only a
/// confirmed person retries.
pub async fn retry(
    gw: Ops<'_>,
    acting: &Acting,
    _yes: &Confirmed,
    step_id: &str,
) -> Result<Receipt, OperatorError> {
    let key = &acting.key;
    let (lease, ttl) = (gw.lease_ms(), gw.ttl_ms());
    let state = refresh(gw.log(), acting, ttl, lease).await?;
    check_in_doubt(&state, key, step_id)?;
    if let Some(step) = state.step(step_id) {
        require_upstreams(gw, [step])?;
    }
    gw.log()
        .transact(&key.id, |state| {
            check_in_doubt(state, key, step_id)?;
            let now = now_ms();
            if plangate_core::rules::apply_alive(state, now, lease) {
                return Err(OperatorError::ApplyAlive {
                    key: key.name.clone(),
                    step: step_id.to_owned(),
                });
            }
            // Retried into a plan whose life is over, the step would only
            // expire unrun.
            if plangate_core::rules::life_over(state, now, ttl) {
                return Err(OperatorError::PlanOutlived {
                    key: key.name.clone(),
                    step: step_id.to_owned(),
                });
            }
            let event = acting.event(EventKind::StepRetried {
                step_id: step_id.to_owned(),
            });
            Ok((vec![event], ()))
        })
        .await??;
    // The person's explicit retry is the authority to run this one step,
    // whatever the key's scope: a recorded approval would cover the whole
    // plan digest, not just this step.
    let request = ApplyRequest {
        step_ids: Some(vec![step_id.to_owned()]),
        plan_digest: None,
        continue_on_error: false,
    };
    apply::apply_plan(gw, acting, request, None, CancellationToken::new())
        .await
        .map_err(OperatorError::Refused)
}
