//! `plangate plans list|show|discard|retry|apply`: a person looking at and
//! acting on keys' plans from outside the agent (docs/design.md §5, §7).
//!
//! Plans are folds over each key's event log, so these commands read and
//! append through the same [`KeyLog`] the gateway uses, with the same
//! compare-and-set rule: a person's discard or retry and an agent's call
//! racing on one key never both win on a stale view. Every event a person
//! causes here is recorded as `Actor::Operator` (named by `$USER`) over
//! `Channel::Cli`.
//!
//! Like every plangate process sharing the store, reading a plan here first
//! brings it up to date: a claim whose lease ran out (its owner died) is
//! marked `in_doubt`, and a plan past its life expires. So `plans list`
//! shows the truth even when no gateway is running.
//!
//! `retry` and `apply` run steps, so they build a gateway in this process
//! from the same config `serve` would use and go through
//! [`plangate_gateway::apply::apply_plan`] — the same claims, fresh checks, receipts and
//! at-most-once rule as an agent's `apply_plan`.
//!
//! The rules themselves (refresh, discard, approve, retry) live in
//! [`plangate_gateway::operator`], shared with the web console; this module
//! resolves names, prints, and turns refusals into exit codes.

mod apply;
mod confirm;
mod progress;
mod read;
mod remote;
mod render;
mod revert;
mod review;

use std::collections::BTreeSet;
use std::sync::Arc;

use anyhow::{Result, anyhow};
use plangate_config::Config;
use plangate_core::{Channel, KeyState};
use plangate_gateway::acting::Acting;
use plangate_gateway::key_log::KeyLog;
use plangate_gateway::operator::{self, OperatorError, lease_ms, ttl_ms};
use plangate_store::{ApiKey, KeyMaterial, Store};

pub use apply::{apply_cmd, retry};
pub use read::{diff, list, show};
pub(crate) use remote::{mode as remote_mode, run as remote};
pub use render::human_secs;
pub use revert::revert;
pub use review::{Amendment, amend, approve, discard, reject};

/// Where a verb that widens what runs gets the person's confirmed yes:
/// the data dir's operators log and the factor given on the command line
/// (or asked for on the terminal), checked right before the act — after
/// the person was shown what they say yes to.
pub struct Confirming<'a> {
    /// The data dir (or database) holding the operators log.
    pub data_dir: &'a std::path::Path,
    /// `--code` and `--operator`.
    pub factor: &'a crate::args::FactorArgs,
}

impl Confirming<'_> {
    /// Confirms `act` ([`crate::factor::confirm`]).
    pub async fn confirm(
        &self,
        act: &plangate_gateway::operator::factor::Act<'_>,
    ) -> Result<plangate_gateway::operator::factor::Confirmed> {
        crate::factor::confirm(self.data_dir, act, self.factor).await
    }
}

use crate::commands::{UsageError, operator_name};

// === keys and state ===

/// The key named `key`: the active key with that name, the key with that
/// id, or else the most recent revoked key with that name (its log is
/// still there to read).
pub async fn resolve_key(store: &dyn Store, key: &str) -> Result<ApiKey> {
    if let Some(found) = store.find_key(key).await? {
        return Ok(found);
    }
    store
        .list_keys()
        .await?
        .into_iter()
        .rev()
        .find(|k| k.name == key)
        .ok_or_else(|| {
            UsageError(format!(
                "no key named {key:?}; `plangate keys list` shows the keys"
            ))
            .into()
        })
}

/// The CLI acting on `key`'s log, as the person at this terminal.
fn cli_acting(key: &ApiKey) -> Acting {
    operator::acting(key, &operator_name(), Channel::Cli)
}

/// The person acting at the CLI with a confirmed yes: named as the
/// operator whose factor proved it, else as [`cli_acting`].
fn confirmed_acting(key: &ApiKey, yes: &plangate_gateway::operator::factor::Confirmed) -> Acting {
    match yes.operator() {
        Some(name) => operator::acting(key, name, Channel::Cli),
        None => cli_acting(key),
    }
}

/// Brings a key's plan up to date before a person reads or changes it
/// (see [`operator::refresh`]).
async fn refresh(log: &KeyLog, key: &ApiKey, config: &Config) -> Result<KeyState> {
    Ok(operator::refresh(log, &cli_acting(key), ttl_ms(config), lease_ms(config)).await?)
}

/// The key named `name` (or by id) and its state, refreshed: where every
/// verb on one key's plan starts.
async fn key_and_state(
    store: &Arc<dyn Store>,
    material: &KeyMaterial,
    config: &Config,
    name: &str,
) -> Result<(ApiKey, KeyState)> {
    let key = resolve_key(&**store, name).await?;
    let log = KeyLog::new(store.clone(), material.log_key());
    let state = refresh(&log, &key, config).await?;
    Ok((key, state))
}

/// A refusal of [`operator`] as the CLI reports it: bad input (an unknown
/// step, a step in the wrong state) exits 2 with `hint` added.
fn cli_error(e: OperatorError, hint: &str) -> anyhow::Error {
    // The stable code, as the agent's tools and the console give it.
    if e.is_bad_input() {
        UsageError(format!("{e} [{}]{hint}", e.code())).into()
    } else {
        anyhow!("{e} [{}]", e.code())
    }
}

/// Prints `v` as pretty JSON with its keys sorted, as every `--json`
/// output is.
fn print_json<T: serde::Serialize>(v: &T) -> Result<()> {
    crate::output::json(&serde_json::to_value(v)?)?;
    Ok(())
}

// === whose yes counts ===

/// The steps of `key`'s plan an approval that counts for it covers
/// ([`operator::covered_steps`]): what `plans show`,
/// the console and `get_plan` mark approved.
fn covered_steps<'s>(config: &Config, key: &ApiKey, state: &'s KeyState) -> BTreeSet<&'s str> {
    operator::covered_steps(config, key, state)
}

#[cfg(test)]
mod tests {
    use plangate_core::{Actor, Event, EventKind, Scope, Verdict};
    use plangate_gateway::operator::waiting_for_yes;

    use super::*;

    fn key(scope: Scope) -> ApiKey {
        ApiKey {
            id: "key_1".into(),
            name: "agent".into(),
            scope,
            prefix: String::new(),
            created_at_ms: 0,
            revoked_at_ms: None,
        }
    }

    fn planned(step_id: &str, position: u32) -> EventKind {
        EventKind::StepPlanned {
            step: plangate_core::testing::step_record(
                step_id,
                position,
                "update_page",
                serde_json::json!({"id": position}),
            ),
        }
    }

    /// Two waiting steps key_1's agent planned under `scope`, and its own
    /// client's yes to both; an operator locked the key first when
    /// `locked`.
    fn plan(scope: Scope, locked: bool) -> KeyState {
        let agent = Actor::Agent {
            key_id: "key_1".into(),
            key_name: "agent".into(),
            scope: Some(scope),
        };
        let event = |kind, actor| Event {
            at_ms: 1_000,
            key_id: "key_1".into(),
            actor,
            channel: Channel::Stdio,
            kind,
        };
        let mut events = Vec::new();
        if locked {
            let operator = Actor::Operator { name: "ana".into() };
            let lock = EventKind::ModeLocked {
                mode: "plan".into(),
            };
            events.push(event(lock, operator));
        }
        events.push(event(planned("s1", 1), agent.clone()));
        events.push(event(planned("s2", 2), agent.clone()));
        let digest = KeyState::fold(events.iter().zip(1..).map(|(e, seq)| (seq, e))).plan_digest();
        let yes = EventKind::ReviewAnswered {
            review_id: None,
            verdict: Verdict::Approve,
            plan_digest: digest,
            feedback: None,
            step_ids: None,
            revision: None,
        };
        events.push(event(yes, agent));
        KeyState::fold(events.iter().zip(1..).map(|(e, seq)| (seq, e)))
    }

    #[test]
    fn a_write_keys_own_yes_counts_only_while_nothing_holds_it() {
        let config = crate::setup::builtin_modes();
        let write = key(Scope::Write);
        let free = plan(Scope::Write, false);
        assert_eq!(covered_steps(&config, &write, &free).len(), 2);
        assert!(waiting_for_yes(&config, &write, &free).is_empty());
        // Locked by an operator, or planned with a `plan` token: held like
        // a plan key, its own yes does not count and both steps wait for a
        // person's (docs/design.md §9), as the gateway says.
        let both = BTreeSet::from(["s1".to_owned(), "s2".to_owned()]);
        for held in [plan(Scope::Write, true), plan(Scope::Plan, false)] {
            assert!(covered_steps(&config, &write, &held).is_empty());
            assert_eq!(waiting_for_yes(&config, &write, &held), both);
            let view = operator::plan_view(&config, &write, &held, 1_000);
            assert!(view.steps.iter().all(|s| !s.approved));
        }
    }

    #[test]
    fn a_plan_or_read_keys_waiting_steps_wait_for_a_person() {
        let config = crate::setup::builtin_modes();
        let both = BTreeSet::from(["s1".to_owned(), "s2".to_owned()]);
        for scope in [Scope::Plan, Scope::Read] {
            let state = plan(scope, false);
            assert_eq!(waiting_for_yes(&config, &key(scope), &state), both);
        }
    }
}
