//! `plangate plans revert --key K [STEP…]`: plans the undo of applied
//! steps through a gateway built here for the servers they ran on
//! ([`operator::revert`]); the inverse steps then wait for a person's yes
//! like any step (`plans apply`, the console, or the agent's apply_plan
//! once approved).

use std::sync::Arc;

use anyhow::{Result, anyhow};
use plangate_config::Config;
use plangate_gateway::Gateway;
use plangate_gateway::operator::{self, RevertAnswer};
use plangate_store::{KeyMaterial, Store};

use super::{cli_acting, print_json, resolve_key};
use crate::output::outln;

/// `plans revert`: the inverse steps planned, and the steps left as they
/// are with why.
pub async fn revert(
    config: Config,
    (store, material): (Arc<dyn Store>, KeyMaterial),
    key: &str,
    named: &[String],
    as_json: bool,
) -> Result<()> {
    let key = resolve_key(&*store, key).await?;
    let state = plangate_gateway::key_log::KeyLog::new(store.clone(), material.log_key())
        .state(&key.id)
        .await?;
    let servers = state
        .steps
        .iter()
        .filter(|s| s.status == plangate_core::StepStatus::Applied)
        .map(|s| s.record.server.clone())
        .collect();
    let gw = Gateway::build_for(config, store, material, &servers).await;
    let answer = operator::revert(gw.ops(), &cli_acting(&key), named).await;
    gw.shutdown().await;
    let answer = answer.map_err(|e| anyhow!("{e} [{}]", e.code()))?;
    print(&answer, as_json)
}

/// The revert's answer, here or through `--server`.
pub(crate) fn print(answer: &RevertAnswer, as_json: bool) -> Result<()> {
    if as_json {
        return print_json(answer);
    }
    print_answer(answer);
    Ok(())
}

fn print_answer(answer: &RevertAnswer) {
    let name = plangate_core::shell_word(&answer.key);
    if answer.planned.is_empty() {
        outln!("nothing planned: no step could be reverted");
    } else {
        outln!(
            "planned {} step(s) to revert, waiting for your yes in {:?}'s plan:",
            answer.planned.len(),
            answer.key
        );
        for s in &answer.planned {
            outln!(
                "  {}. {}  {} (reverts {})",
                s.position,
                s.step_id,
                s.predicted_effect,
                s.reverts
            );
        }
    }
    for n in &answer.not_reverted {
        outln!(
            "not reverted: {} {} — {}",
            n.step_id,
            n.predicted_effect,
            n.reason
        );
        if let Some(v) = &n.versions {
            outln!("  what the step changed (before → applied):");
            for line in v.applied.lines() {
                outln!("    {line}");
            }
            outln!("  what changed since (applied → now; a revert would overwrite it):");
            for line in v.since.lines() {
                outln!("    {line}");
            }
        }
    }
    if !answer.planned.is_empty() {
        outln!(
            "review them with `plangate plans show --key {name}`, then `plangate plans apply --key {name}` (or approve them in the console)"
        );
    }
}
