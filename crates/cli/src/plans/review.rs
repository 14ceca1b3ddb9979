//! The `plans` verbs by which a person reviews a key's plan without
//! running it: `reject` (a no to one step), `amend` (new arguments for a
//! waiting step), `discard` (drop steps) and `approve` (a yes that binds
//! exactly the steps it covers). Apart from the verbs that run steps: all
//! but `amend` only append to the key's log (docs/design.md §5, §7).

use std::sync::Arc;

use anyhow::{Result, anyhow};
use plangate_config::Config;
use plangate_core::rules::{self, Selection};
use plangate_core::{
    Actor, ApprovalAnswer, Channel, DiscardAnswer, KeyState, PlannedStep, RejectionAnswer, Step,
};
use plangate_gateway::Gateway;
use plangate_gateway::key_log::KeyLog;
use plangate_gateway::operator::factor::Act as FactorAct;
use plangate_gateway::operator::{self, OperatorError, ttl_ms};
use plangate_store::{ApiKey, KeyMaterial, LogKey, Store};
use serde_json::Value;

use super::confirm::{Act, Shown, confirm};
use super::render::change_lines;
use super::{cli_acting, cli_error, key_and_state, print_json, refresh, resolve_key};
use crate::commands::{UsageError, operator_name};
use crate::output::outln;

// === reject ===

/// `plangate plans reject --key NAME STEP --reason TEXT`: a person says no
/// to one waiting step.
pub async fn reject(
    store: Arc<dyn Store>,
    log_key: Arc<LogKey>,
    key: &str,
    step: &str,
    reason: &str,
    as_json: bool,
) -> Result<()> {
    let key = resolve_key(&*store, key).await?;
    let log = KeyLog::new(store.clone(), log_key);
    let hint = format!(
        "; `plangate plans show --key {}` lists the waiting steps",
        plangate_core::shell_word(&key.name)
    );
    let rejected = operator::reject(&log, &cli_acting(&key), step, reason)
        .await
        .map_err(|e| cli_error(e, &hint))?;
    print_rejected(&rejected, as_json)
}

/// What `plans reject` recorded, here or through `--server`.
pub(crate) fn print_rejected(rejected: &RejectionAnswer, as_json: bool) -> Result<()> {
    if as_json {
        return print_json(rejected);
    }
    outln!(
        "rejected step {} of key {}; its agent reads your reason. {} step(s) waiting, plan digest {}",
        rejected.rejected,
        rejected.key,
        rejected.plan.pending_steps,
        rejected.plan.plan_digest
    );
    Ok(())
}

// === amend ===

/// What `plans amend` changes.
pub struct Amendment<'a> {
    /// The waiting step.
    pub step: &'a str,
    /// The new arguments, as JSON text.
    pub arguments: &'a str,
    /// The plan revision the person looked at (`--revision`).
    pub seen_revision: Option<u64>,
}

/// `plangate plans amend --key NAME STEP --arguments JSON [--revision REV]`:
/// a person changes a waiting step's arguments, through a gateway built in
/// this process (the tool's schema and preview come from its upstream).
pub async fn amend(
    config: Config,
    store: Arc<dyn Store>,
    material: KeyMaterial,
    key: &str,
    change: Amendment<'_>,
    as_json: bool,
) -> Result<()> {
    let Amendment {
        step,
        arguments,
        seen_revision,
    } = change;
    let arguments: Value = serde_json::from_str(arguments).map_err(|e| {
        UsageError(format!(
            "--arguments is not JSON ({e}) [invalid_arguments]; give a JSON object, e.g. '{{\"path\": \"/tmp/a.txt\", \"content\": \"hi\"}}'"
        ))
    })?;
    let (key, before) = key_and_state(&store, &material, &config, key).await?;
    let hint = format!(
        "; `plangate plans show --key {}` lists the waiting steps and their arguments",
        plangate_core::shell_word(&key.name)
    );
    // A step that cannot be amended is a mistake whatever the upstreams
    // say: checked before any is started.
    if let Err(e) = operator::waiting_step(&before, &key, step) {
        let why = match e {
            OperatorError::NoStep { .. } => hint.clone(),
            _ => " (only a waiting step can be amended)".to_owned(),
        };
        return Err(cli_error(e, &why));
    }
    let gw = Gateway::build(config, store, material).await;
    let change = operator::Amend {
        step_id: step,
        arguments: &arguments,
        seen_revision,
    };
    let outcome = operator::amend(gw.ops(), &cli_acting(&key), change).await;
    gw.shutdown().await;
    let amended = outcome.map_err(|e| match e {
        OperatorError::StepChanged { .. } => anyhow!("{e} [{}]", e.code()),
        e => cli_error(e, &hint),
    })?;
    if as_json {
        return print_json(&amended);
    }
    let new = &amended.step;
    outln!(
        "amended step {} ({}. {}) of key {}:",
        step,
        new.step.position,
        new.step.exposed_as,
        key.name
    );
    for line in change_lines(&amended.arguments_changed) {
        outln!("  {line}");
    }
    outln!("  now: {}", new.step.predicted_effect);
    outln!(
        "plan digest {} (revision {}); {}: `plangate plans approve --key {} {step}`",
        amended.plan.plan_digest,
        amended.plan.revision,
        if amended.was_approved {
            "the approval that covered this step no longer does, so it runs only after a new yes"
        } else {
            "it runs only after a yes to it as it is now"
        },
        plangate_core::shell_word(&key.name)
    );
    Ok(())
}

// === discard ===

/// `plangate plans discard --key NAME [STEP…]`: a person drops steps
/// (the named waiting, failed or in-doubt ones; else every waiting step).
pub async fn discard(
    config: &Config,
    store: Arc<dyn Store>,
    log_key: Arc<LogKey>,
    key: &str,
    named: &[String],
    as_json: bool,
) -> Result<()> {
    let key = resolve_key(&*store, key).await?;
    let log = KeyLog::new(store.clone(), log_key);
    refresh(&log, &key, config).await?;
    let hint = format!(
        "; `plangate plans show --key {}` lists the steps",
        plangate_core::shell_word(&key.name)
    );
    let answer = operator::discard(
        &log,
        &cli_acting(&key),
        Selection::of(named),
        ttl_ms(config),
    )
    .await
    .map_err(|e| cli_error(e, &hint))?;
    print_discarded(&answer, as_json)
}

/// What `plans discard` did, here or through `--server`.
pub(crate) fn print_discarded(answer: &DiscardAnswer, as_json: bool) -> Result<()> {
    if as_json {
        return print_json(answer);
    }
    if answer.discarded.is_empty() {
        outln!(
            "nothing to discard: key {} has no waiting steps",
            answer.key
        );
    } else {
        outln!(
            "discarded {} step(s) of key {}: {}; {} waiting",
            answer.discarded.len(),
            answer.key,
            answer.discarded.join(", "),
            answer.plan.pending_steps
        );
    }
    Ok(())
}

// === approve ===

/// `plans approve --key NAME [--digest D] [STEP…]`: records a person's yes
/// to the named waiting steps of a key's plan, or to every waiting step
/// (`review_answered`, approve, binding the digest of exactly those steps)
/// — as the operator, or as the `write` key whose token is given. With
/// `--digest`, nothing is recorded if the plan moved on from it; without,
/// the person at the terminal is shown the steps and asked ([`confirm`]).
/// `config` says whose yes counts for the key (a lock it sets), for what
/// is left waiting afterwards.
pub async fn approve(
    config: &Config,
    (store, log_key): (Arc<dyn Store>, Arc<LogKey>),
    confirming: super::Confirming<'_>,
    key: &str,
    (digest, named): (Option<&str>, &[String]),
    approver_token: Option<&str>,
    as_json: bool,
) -> Result<()> {
    if let Some(d) = digest
        && operator::check_digest(d).is_err()
    {
        return Err(UsageError(format!(
            "digest {d:?} is not a plan digest; `plangate plans show --key {key}` shows it (sha256:…)"
        ))
        .into());
    }
    let target = resolve_key(&*store, key).await?;
    let actor = approver(&*store, approver_token, &target).await?;
    let log = KeyLog::new(store, log_key);
    let hint = format!(
        "; `plangate plans show --key {}` lists the waiting steps",
        plangate_core::shell_word(&target.name)
    );
    // Without --digest the person at the terminal is shown what the yes
    // covers and asked; it then binds the plan as shown. Steps that cannot
    // be approved (none waiting, a named one not waiting) are refused by
    // `operator::approve` below, against the same plan.
    let shown = match digest {
        Some(_) => None,
        None => Some(ask_to_approve(&log, &target, named).await?),
    };
    let seen = match (&shown, digest) {
        (Some(shown), _) => Some(shown.seen()),
        (None, Some(d)) => Some(operator::Seen::digest(d)),
        (None, None) => None,
    };
    let yes = confirming
        .confirm(&FactorAct::Approve { key: &target.name })
        .await?;
    let approved = operator::approve(&log, &target, actor.clone(), &yes, Channel::Cli, seen, named)
        .await
        .map_err(|e| match e {
            OperatorError::PlanChanged { .. } | OperatorError::RevisionMoved { .. } => anyhow!(
                "{e} (`plangate plans show --key {}`, or `plangate plans diff --key {}` for what changed) [{}]",
                plangate_core::shell_word(&target.name),
                plangate_core::shell_word(&target.name),
                e.code()
            ),
            e => cli_error(e, &hint),
        })?;
    print_approved(config, &target, &actor, &approved, as_json)
}

/// Who says yes to `target`'s plan: the operator, or — with a token given
/// (`PLANGATE_KEY`) — that key, when its yes counts for `target`
/// ([`rules::approver_counts`]: another key of scope `write`).
async fn approver(store: &dyn Store, token: Option<&str>, target: &ApiKey) -> Result<Actor> {
    let Some(token) = token else {
        return Ok(Actor::Operator {
            name: operator_name(),
        });
    };
    let Some(approver) = store.authenticate(token).await? else {
        return Err(UsageError(
            "the API key this command runs with is unknown or revoked, and a key cannot approve a plan [forbidden]; nothing was recorded".to_owned(),
        )
        .into());
    };
    let actor = Actor::Agent {
        key_id: approver.id.clone(),
        key_name: approver.name.clone(),
        scope: Some(approver.scope),
    };
    if !rules::approver_counts(&actor, &target.id) {
        return Err(UsageError(format!(
            "key {:?} (scope {}) cannot approve {:?}'s plan [forbidden]; nothing was recorded",
            approver.name, approver.scope, target.name
        ))
        .into());
    }
    Ok(actor)
}

/// `plans approve` without `--digest`: shows the person at the terminal the
/// steps their yes covers and asks ([`confirm`]). With none to show (none
/// waiting, or a named one that is not), it asks nothing: the plan as it
/// is, for `operator::approve` to refuse.
async fn ask_to_approve(log: &KeyLog, target: &ApiKey, named: &[String]) -> Result<Shown> {
    let state = log.state(&target.id).await?;
    let steps = steps_to_approve(&state, target, named);
    if steps.is_empty() {
        return Ok(Shown::of(&state));
    }
    if !named.is_empty() {
        let ids: Vec<String> = steps.iter().map(|s| s.record.step_id.clone()).collect();
        for l in plangate_core::partial::left_behind(&state, &ids) {
            if let Some(tied) = &l.tied {
                crate::output::note(format_args!(
                    "step {} ({}) stays waiting, tied to a step you approve: {tied}",
                    l.position, l.step_id
                ));
            }
        }
    }
    let steps: Vec<PlannedStep> = steps.into_iter().map(PlannedStep::for_person).collect();
    confirm(&target.name, Shown::of(&state), &steps, Act::Approve).await
}

/// The steps a yes to `named` (every waiting step when none is named)
/// covers, in plan order; none when a named step is not waiting.
fn steps_to_approve<'s>(state: &'s KeyState, target: &ApiKey, named: &[String]) -> Vec<&'s Step> {
    if named.is_empty() {
        return state.planned_steps().collect();
    }
    let mut steps: Vec<&Step> = Vec::new();
    for id in named {
        match operator::waiting_step(state, target, id) {
            Ok(step) if !steps.iter().any(|s| s.record.step_id == *id) => steps.push(step),
            Ok(_) => {}
            Err(_) => return Vec::new(),
        }
    }
    steps.sort_by_key(|s| s.record.position);
    steps
}

/// What `plans approve` recorded, and which waiting steps no yes that
/// counts for the key covers yet ([`operator::approval_answer`]).
fn print_approved(
    config: &Config,
    target: &ApiKey,
    actor: &Actor,
    approved: &operator::Approved,
    as_json: bool,
) -> Result<()> {
    let answer = operator::approval_answer(config, target, actor.clone(), approved);
    let state = &approved.state;
    print_approval(
        &answer,
        |id| {
            state
                .step(id)
                .map(|s| (s.record.position, s.record.predicted_effect.clone()))
        },
        as_json,
    )
}

/// An approval's answer for a person, here or through `--server`: each
/// step it covers (`step` names its position and predicted effect), and
/// the waiting steps it leaves without a yes.
pub(crate) fn print_approval(
    answer: &ApprovalAnswer,
    step: impl Fn(&str) -> Option<(u32, String)>,
    as_json: bool,
) -> Result<()> {
    if as_json {
        return print_json(answer);
    }
    outln!(
        "approved {} step(s) of {:?}'s plan:",
        answer.approved_steps.len(),
        answer.key
    );
    for id in &answer.approved_steps {
        if let Some((position, effect)) = step(id) {
            outln!("  {position}. {id}  {effect}");
        }
    }
    if answer.not_approved.is_empty() {
        outln!(
            "every waiting step is approved; the agent's apply_plan (or `plangate plans apply --key {}`) runs them",
            plangate_core::shell_word(&answer.key)
        );
    } else {
        outln!(
            "{} waiting step(s) are not approved and will not run without a yes: {}",
            answer.not_approved.len(),
            answer
                .not_approved
                .iter()
                .map(|id| match step(id) {
                    Some((position, _)) => format!("{position}. {id}"),
                    None => id.clone(),
                })
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    for l in &answer.left_tied {
        outln!(
            "  step {} ({}) is tied to an approved step: {}; the approved steps can run without it — approve it too (`plangate plans approve --key {} {}`) unless that is meant",
            l.position,
            l.step_id,
            l.tied.as_deref().unwrap_or_default(),
            plangate_core::shell_word(&answer.key),
            l.step_id
        );
    }
    Ok(())
}
