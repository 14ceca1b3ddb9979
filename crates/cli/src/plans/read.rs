//! The `plans` verbs that only look: `list` (every key with a plan),
//! `show` (one key's plan, as `get_plan` shows it) and `diff` (what changed
//! since a revision). Apart from the verbs that record a person's act, as
//! nothing here appends to a key's log but the refresh every reader does
//! (docs/design.md §5).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use anyhow::{Context, Result};
use plangate_config::Config;
use plangate_core::{KeyPlanView, KeyState, PlanReview, StepStatus, StepView};
use plangate_gateway::key_log::KeyLog;
use plangate_gateway::operator::{self, ttl_ms};
use plangate_gateway::plan::expires_in;
use plangate_store::{ApiKey, LogKey, Store, now_ms};
use serde_json::{Value, json};

use super::render::{change_lines, human_secs, lands_on_text};
use super::{covered_steps, print_json, refresh, resolve_key};
use crate::commands::{UsageError, print_table};
use crate::output::outln;

// === list ===

/// How many of the plan's steps have `status`.
fn count(state: &KeyState, status: StepStatus) -> usize {
    state.open_steps().filter(|s| s.status == status).count()
}

/// `plangate plans list`: every key with a plan (open steps or a session)
/// or an operator's lock on its mode.
pub async fn list(
    config: &Config,
    (store, log_key): (Arc<dyn Store>, Arc<LogKey>),
    as_json: bool,
) -> Result<()> {
    let log = KeyLog::new(store.clone(), log_key);
    let keys: BTreeMap<String, ApiKey> = store
        .list_keys()
        .await?
        .into_iter()
        .map(|k| (k.id.clone(), k))
        .collect();
    let now = now_ms();
    let mut rows = Vec::new();
    for key_id in store.keys_with_events().await? {
        let key = keys
            .get(&key_id)
            .cloned()
            .unwrap_or_else(|| operator::unknown_key(&key_id));
        let state = refresh(&log, &key, config).await?;
        let operator_locked = matches!(state.lock, Some(plangate_core::ModeLock::Locked { .. }));
        if state.open_steps().next().is_none() && state.session_id.is_none() && !operator_locked {
            continue;
        }
        let in_force = config.modes.in_force(&state);
        let mode = &in_force.spec;
        let get = |s: StepStatus| count(&state, s);
        // Waiting steps a yes that counts for the key covers (a plan key's
        // own yes never counts), as `plans show` and `get_plan` say.
        let covered = covered_steps(config, &key, &state);
        let approved = state
            .planned_steps()
            .filter(|s| covered.contains(s.record.step_id.as_str()))
            .count();
        rows.push(json!({
            "key": key.name,
            "key_id": key.id,
            "scope": key.scope,
            "revoked": !key.is_active(),
            "mode": mode.name,
            "plan_mode": mode.plan_mode(),
            "mode_locked": in_force.locked_by,
            "waiting": get(StepStatus::Planned),
            "approved": approved,
            "running": get(StepStatus::Running),
            "failed": get(StepStatus::Failed),
            "in_doubt": get(StepStatus::InDoubt),
            "expires_in": expires_in(&state, now, ttl_ms(config)),
            "plan_digest": state.plan_digest(),
        }));
    }
    print_rows(&rows, as_json)
}

/// `plans list`'s rows, as a table or (`--json`) as they are.
pub(crate) fn print_rows(rows: &[Value], as_json: bool) -> Result<()> {
    if as_json {
        return print_json(&rows);
    }
    if rows.is_empty() {
        outln!(
            "no plans: no key has steps waiting, running, failed or in doubt, a session, or a locked mode"
        );
        return Ok(());
    }
    print_plans(rows);
    Ok(())
}

/// A `plans list` row from a key's plan as the operator API shows it
/// (`plans list --server`): the same fields as one built from the log.
pub(crate) fn row_of_view(view: &KeyPlanView) -> Value {
    let get = |status: StepStatus| view.steps.iter().filter(|s| s.status == status).count();
    json!({
        "key": view.key,
        "key_id": view.key_id,
        "scope": view.scope,
        "revoked": view.revoked,
        "mode": view.standing.mode,
        "plan_mode": view.standing.plan_mode,
        "mode_locked": view.standing.mode_locked,
        "waiting": view.standing.pending_steps,
        "approved": view.steps.iter().filter(|s| s.approved).count(),
        "running": get(StepStatus::Running),
        "failed": get(StepStatus::Failed),
        "in_doubt": get(StepStatus::InDoubt),
        "expires_in": view.standing.expires_in,
        "plan_digest": view.standing.plan_digest,
    })
}

/// `plans list`'s rows (as `--json` gives them) as a table.
fn print_plans(rows: &[Value]) {
    let table: Vec<[String; 9]> = rows
        .iter()
        .map(|r| {
            let name = r["key"].as_str().unwrap_or_default();
            [
                if r["revoked"] == true {
                    format!("{name} (revoked)")
                } else {
                    name.to_owned()
                },
                match r["mode_locked"].as_str() {
                    Some(by) => format!(
                        "{} (locked by {by})",
                        r["mode"].as_str().unwrap_or_default()
                    ),
                    None => r["mode"].as_str().unwrap_or_default().to_owned(),
                },
                r["waiting"].to_string(),
                match (r["approved"].as_u64(), r["waiting"].as_u64()) {
                    (Some(0), _) | (_, Some(0)) => "-".to_owned(),
                    (Some(a), Some(w)) if a == w => "all".to_owned(),
                    (Some(a), Some(w)) => format!("{a} of {w}"),
                    _ => "-".to_owned(),
                },
                r["running"].to_string(),
                r["failed"].to_string(),
                r["in_doubt"].to_string(),
                r["expires_in"]
                    .as_i64()
                    .map(human_secs)
                    .unwrap_or_else(|| "-".into()),
                r["plan_digest"].as_str().unwrap_or_default().to_owned(),
            ]
        })
        .collect();
    print_table(
        &[
            "KEY",
            "MODE",
            "WAITING",
            "APPROVED",
            "RUNNING",
            "FAILED",
            "IN DOUBT",
            "EXPIRES IN",
            "DIGEST",
        ],
        &table,
    );
}

// === show ===

/// `plangate plans show --key NAME`: the plan as `get_plan` shows it.
pub async fn show(
    config: &Config,
    store: Arc<dyn Store>,
    log_key: Arc<LogKey>,
    key: &str,
    as_json: bool,
) -> Result<()> {
    let key = resolve_key(&*store, key).await?;
    let log = KeyLog::new(store.clone(), log_key);
    let state = refresh(&log, &key, config).await?;
    print_review(
        &operator::plan_review(config, &key, &state, now_ms()),
        as_json,
    )
}

/// A key's plan as a person reviews it, here or through `--server`: the
/// key and mode, a broken log, where the plan stands, its steps and their
/// previews (`--json`: the plan as `get_plan` shows it to people).
pub(crate) fn print_review(review: &PlanReview, as_json: bool) -> Result<()> {
    let view = &review.plan;
    if as_json {
        return print_json(view);
    }
    outln!(
        "key {} ({}, scope {}): mode {}{}{}",
        view.key,
        view.key_id,
        view.scope,
        view.standing.mode,
        if view.standing.plan_mode {
            " (plan mode)"
        } else {
            ""
        },
        match view.standing.mode_locked {
            Some(plangate_core::LockedBy::Operator) => ", locked by an operator",
            Some(plangate_core::LockedBy::Config) => ", locked by [gateway] default_mode_locked",
            None => "",
        }
    );
    if let Some(n) = &view.notice {
        outln!("note: {n}");
    }
    if let Some(broken) = &review.log_broken {
        outln!(
            "WARNING: this key's log does not verify ({broken}): it was changed outside plangate, and nothing is applied from it. `plangate audit verify` names every break"
        );
    }
    if view.steps.is_empty() {
        outln!("no plan: nothing is waiting, running, failed or in doubt");
    } else {
        print_standing(view);
        outln!();
        let waiting: BTreeSet<String> = review.waiting_for_yes.iter().cloned().collect();
        print_steps(view, &waiting);
        print_previews(view);
    }
    print_last_apply(view);
    Ok(())
}

/// The key's last apply, a line per applied step: whether what it
/// replaced is kept for an undo, and what reverted it — and the command
/// that plans the undo while one is possible.
fn print_last_apply(view: &KeyPlanView) {
    if view.last_apply.is_empty() {
        return;
    }
    outln!();
    let undoable = view.revertible;
    outln!(
        "last apply: {} step(s) applied{}",
        view.last_apply.len(),
        if undoable > 0 {
            format!(
                "; `plangate plans revert --key {}` plans the undo of {undoable}",
                plangate_core::shell_word(&view.key)
            )
        } else {
            String::new()
        }
    );
    for s in &view.last_apply {
        let p = &s.step;
        let undo = match (&s.undo, s.reverted_by.as_slice()) {
            (_, [_, ..]) => format!("reverted by {}", s.reverted_by.join(", ")),
            (Some(u), []) => u.said(),
            (None, []) => "no undo: applied before plangate kept what steps replace".to_owned(),
        };
        outln!(
            "{}. {}  {}: {}",
            p.position,
            p.step_id,
            p.exposed_as,
            p.predicted_effect.lines().next().unwrap_or_default()
        );
        outln!("   {undo}");
        if let Some(reverts) = &p.reverts {
            outln!("   it reverted {reverts}");
        }
    }
}

/// Where the plan stands: its steps, life and approval, digest and
/// revision, and what changed since the last review.
fn print_standing(view: &KeyPlanView) {
    let approved = view.steps.iter().filter(|s| s.approved).count();
    outln!(
        "{} step(s) in the plan, {} waiting; expires in {}; approved: {}",
        view.steps.len(),
        view.standing.pending_steps,
        view.standing
            .expires_in
            .map(human_secs)
            .unwrap_or_else(|| "-".into()),
        match approved {
            _ if view.standing.approved => "yes".to_owned(),
            0 => "no".to_owned(),
            n => format!("{n} of {} waiting step(s)", view.standing.pending_steps),
        }
    );
    outln!("plan digest {}", view.standing.plan_digest);
    outln!(
        "revision {}{}",
        view.standing.revision,
        match view.reviewed_revision {
            Some(r) if r == view.standing.revision => " (as last reviewed)".to_owned(),
            Some(r) => format!(
                " (last reviewed at {r}; `plangate plans diff --key {}` shows what changed)",
                plangate_core::shell_word(&view.key)
            ),
            None => String::new(),
        }
    );
    if let Some(since) = &view.standing.since_review {
        let mut said = Vec::new();
        if !since.added.is_empty() {
            said.push(format!("{} step(s) planned", since.added.len()));
        }
        for c in &since.status_changed {
            said.push(format!("step {} {} → {}", c.position, c.from, c.to));
        }
        for a in &since.amended {
            said.push(format!("step {} amended by {}", a.position, a.by));
        }
        if since.digest_changed {
            said.push("the digest moved (the earlier approval does not cover it)".to_owned());
        }
        if !said.is_empty() {
            outln!("since the last review: {}", said.join("; "));
        }
    }
}

/// The plan's steps, one block each — position, status, step id and
/// approval on its first line, then the predicted effect (each of its
/// lines), where it lands, an error or rejection, the rule that planned
/// it — so no line is wider than what it says (a table was ~200 columns
/// wide). `waiting_for_yes` holds the waiting steps that do not run
/// without a person's yes ([`operator::waiting_for_yes`]).
fn print_steps(view: &KeyPlanView, waiting_for_yes: &BTreeSet<String>) {
    for (i, s) in view.steps.iter().enumerate() {
        let p = &s.step;
        if i > 0 {
            outln!();
        }
        outln!(
            "{}. [{}] {}  approval: {}",
            p.position,
            s.status,
            p.step_id,
            approval_cell(s, waiting_for_yes.contains(&p.step_id))
        );
        for line in p.predicted_effect.lines() {
            outln!("   {line}");
        }
        outln!(
            "   tool {}, lands on {}",
            p.exposed_as,
            lands_on_text(&p.lands_on)
        );
        match (&s.error, &s.rejection) {
            (_, Some(r)) => outln!("   rejected by {}: {}", r.by, r.reason),
            (Some(e), None) => outln!("   error {}: {}", e.code, e.message),
            (None, None) => {}
        }
        if let Some(rule) = &p.rule {
            outln!("   planned by the operator's rule {rule:?}");
        }
        if let Some(reverts) = &p.reverts {
            outln!("   reverts the applied step {reverts}");
        }
        if let Some(why) = &p.unanswered {
            outln!("   asked, not answered ({why}): only a person's yes applies it");
        }
    }
}

/// A step's approval: `approved`, `needed` when it waits for a
/// person's yes (`needs_yes`), else whether it is destructive.
fn approval_cell(s: &StepView, needs_yes: bool) -> String {
    let waiting = s.status == StepStatus::Planned;
    match (s.approved, needs_yes && waiting, s.step.approval_required) {
        (true, _, _) => "approved".to_owned(),
        (false, true, _) if s.step.unanswered.is_some() => {
            "needed (asked, not answered)".to_owned()
        }
        (false, true, true) => "needed (destructive)".to_owned(),
        (false, true, false) => "needed".to_owned(),
        (false, false, true) if waiting => "required (destructive)".to_owned(),
        (false, false, _) => "-".to_owned(),
    }
}

/// Each step's preview, coloured on a terminal that shows colour.
fn print_previews(view: &KeyPlanView) {
    let colour = crate::preview_text::use_colour();
    for s in &view.steps {
        if let Some(p) = &s.step.preview {
            outln!();
            for line in crate::preview_text::preview_lines(s.step.position, p) {
                crate::output::painted(line.colour.filter(|_| colour), &line.text);
            }
            if let Some(why) = &s.step.preview_withheld {
                outln!("  (not shown to the agent: {why})");
            }
        }
    }
}

// === diff ===

/// `plangate plans diff --key NAME [--since REV]`: what changed in the
/// key's plan since revision REV (default: the one the last recorded review
/// saw), folded from the key's log.
pub async fn diff(
    store: Arc<dyn Store>,
    key: &str,
    since: Option<u64>,
    as_json: bool,
) -> Result<()> {
    let key = resolve_key(&*store, key).await?;
    let stored = store.load_events(&key.id, 0).await?;
    let mut events = Vec::with_capacity(stored.len());
    for e in &stored {
        let event: plangate_core::Event = serde_json::from_str(e.body.as_str())
            .with_context(|| format!("event {} of key {} is not readable", e.seq, key.name))?;
        events.push((e.key_seq, event));
    }
    let now = KeyState::fold(events.iter().map(|(seq, e)| (*seq, e)));
    let since = since
        .or_else(|| now.reviewed.as_ref().map(|r| r.revision))
        .unwrap_or(0);
    if since > now.revision {
        return Err(UsageError(format!(
            "key {} is at revision {}; --since {since} is ahead of it [invalid_arguments]; `plangate plans show --key {}` prints the revision",
            key.name, now.revision, plangate_core::shell_word(&key.name)
        ))
        .into());
    }
    let then = plangate_core::at_revision(events.iter().map(|(seq, e)| (*seq, e)), since);
    let diff = plangate_core::PlanDiff::between(&then, &now);
    if as_json {
        return print_json(&diff);
    }
    outln!(
        "key {}: revision {} → {}",
        key.name,
        diff.since,
        diff.revision
    );
    if diff.is_empty() {
        outln!("nothing changed");
    }
    for s in &diff.added {
        let p = &s.step;
        outln!(
            "+ {}. {} [{}] {} — {}",
            p.position,
            p.step_id,
            s.status,
            p.predicted_effect,
            lands_on_text(&p.lands_on)
        );
    }
    for c in &diff.status_changed {
        outln!(
            "~ {}. {} {} → {}: {}",
            c.position,
            c.step_id,
            c.from,
            c.to,
            c.predicted_effect
        );
    }
    for a in &diff.amended {
        outln!(
            "* {}. {} amended by {}: {}",
            a.position,
            a.step_id,
            a.by,
            a.predicted_effect_now
        );
        for line in change_lines(&a.arguments) {
            outln!("    {line}");
        }
        if a.preview_changed {
            outln!(
                "    its preview changed (`plangate plans show --key {}`)",
                plangate_core::shell_word(&key.name)
            );
        }
    }
    if diff.digest_then != diff.digest_now {
        outln!(
            "plan digest {} → {} (an approval of the earlier digest does not cover this plan)",
            diff.digest_then,
            diff.digest_now
        );
    }
    Ok(())
}
