//! The `plans` verbs that run steps: `retry` (a person's explicit retry of
//! an in-doubt step) and `apply` (a person's yes, then the run). Apart
//! because only these build a gateway in this process and go through
//! [`plangate_gateway::apply::apply_plan`] — the same claims, fresh checks,
//! receipts and at-most-once rule as an agent's `apply_plan`
//! (docs/design.md §5).

use std::sync::Arc;

use anyhow::{Result, anyhow};
use plangate_config::Config;
use plangate_core::rules::Refused;
use plangate_core::{KeyState, PlannedStep, StepStatus};
use plangate_gateway::Gateway;
use plangate_gateway::key_log::KeyLog;
use plangate_gateway::operator::factor::{Act as FactorAct, Confirmed};
use plangate_gateway::operator::{self, OperatorError};
use plangate_store::{ApiKey, KeyMaterial, Store};
use serde_json::json;

use super::confirm::{Act, Shown, confirm};
use super::progress::show_progress;
use super::render::finish_receipt;
use super::{cli_error, confirmed_acting, key_and_state, print_json};
use crate::commands::UsageError;
use crate::output::outln;

/// What to try instead when `step_id` cannot be retried.
fn retry_hint(state: &KeyState, key: &ApiKey, step_id: &str) -> String {
    match state.step(step_id).map(|s| s.status) {
        None => format!(
            "; `plangate plans show --key {}` lists the steps",
            plangate_core::shell_word(&key.name)
        ),
        Some(StepStatus::Planned | StepStatus::Failed) => format!(
            " (a waiting or failed step runs with `plangate plans apply --key {} {step_id}`)",
            plangate_core::shell_word(&key.name)
        ),
        Some(_) => String::new(),
    }
}

/// `plangate plans retry --key NAME STEP`: a person's explicit retry of an
/// in-doubt step (docs/design.md §5): `step_retried` by the operator, then exactly
/// that step runs now, through a gateway built in this process.
pub async fn retry(
    config: Config,
    (store, material): (Arc<dyn Store>, KeyMaterial),
    confirming: super::Confirming<'_>,
    key: &str,
    step_id: &str,
    as_json: bool,
) -> Result<()> {
    let (key, state) = key_and_state(&store, &material, &config, key).await?;
    // Checked before any upstream is started: a step not in doubt is a
    // mistake whatever the world looks like.
    operator::check_in_doubt(&state, &key, step_id)
        .map_err(|e| cli_error(e, &retry_hint(&state, &key, step_id)))?;
    let yes = confirming
        .confirm(&FactorAct::Retry {
            key: &key.name,
            step: step_id,
        })
        .await?;
    let gw = Gateway::build(config, store, material).await;
    let outcome = operator::retry(gw.ops(), &confirmed_acting(&key, &yes), &yes, step_id).await;
    gw.shutdown().await;
    let receipt = outcome.map_err(|e| match e {
        OperatorError::UpstreamDown { .. } => anyhow!("{e}; step {step_id} stays in doubt"),
        e => cli_error(e, ""),
    })?;
    finish_receipt(receipt, as_json)
}

/// `plangate plans apply --key NAME [--digest D] [STEP…]`: a person says
/// yes to a key's plan and applies it — every waiting step, or only the
/// named waiting or failed ones. Without `--digest` the person at the
/// terminal is shown the steps and asked first ([`confirm`]). The yes is
/// recorded first (`review_answered`, approve, by the operator, for the
/// digest of exactly the steps it runs), then the steps run bound to the
/// plan as it was shown, through a gateway built in this process.
pub async fn apply_cmd(
    config: Config,
    (store, material): (Arc<dyn Store>, KeyMaterial),
    confirming: super::Confirming<'_>,
    key: &str,
    (digest, named, (partial, go_on)): (Option<&str>, &[String], (bool, bool)),
    as_json: bool,
) -> Result<()> {
    if let Some(d) = digest {
        operator::check_digest(d)
            .map_err(|e| UsageError(format!("{e} (`plangate plans show` prints it)")))?;
    }
    let (key, state) = key_and_state(&store, &material, &config, key).await?;
    // Checked before any upstream is started: a step that cannot run, or a
    // plan that moved on, is a mistake whatever the world looks like.
    let hint = |e: &OperatorError| match e {
        OperatorError::Rule {
            refused: Refused::InDoubt(id),
            ..
        } => format!(
            " (`plangate plans retry --key {} {id}`); nothing was run",
            plangate_core::shell_word(&key.name)
        ),
        OperatorError::Rule {
            refused: Refused::Status { .. },
            ..
        } => " (only waiting or failed steps are applied); nothing was run".to_owned(),
        _ => format!(
            "; `plangate plans show --key {}` lists the steps; nothing was run",
            plangate_core::shell_word(&key.name)
        ),
    };
    let selected = operator::steps_to_apply(&config, &key, &state, named)
        .map_err(|e| {
            let h = hint(&e);
            cli_error(e, &h)
        })?
        .run;
    let nothing = || {
        let msg = format!("nothing to apply: key {} has no waiting steps", key.name);
        if as_json {
            return print_json(&json!({"success": true, "applied": 0, "message": msg}));
        }
        outln!("{msg}");
        Ok(())
    };
    if selected.is_empty() {
        return nothing();
    }
    // What the apply leaves waiting, said before the person is asked; tied
    // steps left behind need --partial.
    let left = operator::left_by_apply(&config, &key, &state, (named, partial))
        .map_err(|e| cli_error(e, "; name them too, or add --partial if that is meant"))?;
    for l in &left {
        let tied = l
            .tied
            .as_deref()
            .map(|t| format!(": {t}"))
            .unwrap_or_default();
        crate::output::note(format_args!(
            "step {} ({}) stays waiting{tied}",
            l.position, l.step_id
        ));
    }
    let current = state.plan_digest();
    let shown = match digest {
        Some(d) if d != current => {
            return Err(anyhow!(
                "apply refused (plan_changed): the plan of key {} is now {current}, not {d}; nothing was run. Look at it again with `plangate plans show --key {}`",
                key.name,
                plangate_core::shell_word(&key.name)
            ));
        }
        Some(_) => None,
        None => {
            let steps: Vec<PlannedStep> = selected
                .iter()
                .filter_map(|id| state.step(id))
                .map(PlannedStep::for_person)
                .collect();
            Some(confirm(&key.name, Shown::of(&state), &steps, Act::Apply).await?)
        }
    };
    let seen = match &shown {
        Some(shown) => shown.seen(),
        None => operator::Seen::digest(&current),
    };
    let yes = confirming
        .confirm(&FactorAct::Apply { key: &key.name })
        .await?;
    let outcome = run_here(
        (config, store, material),
        (&key, &state, &selected),
        (&yes, seen),
        (named, partial, go_on),
    )
    .await;
    let receipt = outcome.map_err(|e| match e {
        OperatorError::PlanChanged { .. } | OperatorError::RevisionMoved { .. } => {
            anyhow!("apply refused (plan_changed): {e}")
        }
        e => anyhow!("{e}"),
    })?;
    match receipt {
        Some(receipt) => finish_receipt(receipt, as_json),
        None => nothing(),
    }
}

/// Runs a person's apply in a gateway built here for only the servers its
/// steps call, saying each step as it runs ([`show_progress`]).
async fn run_here(
    (config, store, material): (Config, Arc<dyn Store>, KeyMaterial),
    (key, state, selected): (&ApiKey, &KeyState, &[String]),
    (yes, seen): (&Confirmed, operator::Seen<'_>),
    (named, partial, go_on): (&[String], bool, bool),
) -> Result<Option<plangate_core::Receipt>, OperatorError> {
    let servers = selected
        .iter()
        .filter_map(|id| state.step(id))
        .map(|s| s.record.server.clone())
        .collect();
    let log = KeyLog::new(store.clone(), material.log_key());
    let gw = Gateway::build_for(config, store, material, &servers).await;
    let before = selected
        .iter()
        .filter_map(|id| state.step(id).map(|s| (id.clone(), s.status)))
        .collect();
    let over = tokio_util::sync::CancellationToken::new();
    let (heard, heard_rx) = plangate_gateway::apply::Progress::local();
    let progress = tokio::spawn(show_progress(
        log,
        (key.id.clone(), selected.to_vec()),
        before,
        (heard_rx, over.clone()),
    ));
    let outcome = operator::apply_now(
        gw.ops(),
        &confirmed_acting(key, yes),
        yes,
        Some(seen),
        (named, partial, go_on),
        Some(heard),
    )
    .await;
    over.cancel();
    let _ = progress.await;
    gw.shutdown().await;
    outcome
}
