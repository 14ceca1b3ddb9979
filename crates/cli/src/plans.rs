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

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::output::outln;

use anyhow::{Context, Result, anyhow};
use plangate_config::Config;
use plangate_core::rules::{self, Refused};
use plangate_core::{Actor, Channel, KeyState, LandsOn, Receipt, Scope, Step, StepStatus, Where};
use plangate_gateway::Gateway;
use plangate_gateway::acting::Acting;
use plangate_gateway::key_log::KeyLog;
use plangate_gateway::operator::{self, OperatorError, lease_ms, ttl_ms};
use plangate_gateway::plan::expires_in;
use plangate_store::{ApiKey, KeyMaterial, Store, now_ms};
use serde_json::{Value, json};

use crate::commands::{UsageError, operator_name, print_table};

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

/// Brings a key's plan up to date before a person reads or changes it
/// (see [`operator::refresh`]).
async fn refresh(log: &KeyLog, key: &ApiKey, config: &Config) -> Result<KeyState> {
    Ok(operator::refresh(log, &cli_acting(key), ttl_ms(config), lease_ms(config)).await?)
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

// === formatting ===

/// Seconds as a person reads them: `3h 59m`, `4m 10s`, `12s`.
pub fn human_secs(secs: i64) -> String {
    match secs {
        s if s <= 0 => "now".to_owned(),
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m {}s", s / 60, s % 60),
        s => format!("{}h {}m", s / 3600, s % 3600 / 60),
    }
}

/// How many of the plan's steps have `status`.
fn count(state: &KeyState, status: StepStatus) -> usize {
    state.open_steps().filter(|s| s.status == status).count()
}

/// Where a step lands, in a few words.
pub fn lands_on_text(l: &LandsOn) -> String {
    match (l.where_, &l.target) {
        (Where::Copy, Some(t)) => format!("a copy of {t}"),
        (Where::Copy, None) => "a copy".to_owned(),
        (Where::Live, Some(t)) => format!("live ({t})"),
        (Where::Live, None) => "live".to_owned(),
    }
}

/// The lines of a receipt (docs/design.md §5) for a person.
pub fn receipt_lines(receipt: &Receipt) -> Vec<String> {
    let mut lines = vec![
        receipt.message.clone(),
        format!(
            "applied {}, failed {}, in doubt {}, not run {}{}",
            receipt.applied,
            receipt.failed,
            receipt.in_doubt,
            receipt.not_run,
            if receipt.not_approved > 0 {
                format!(", not approved {}", receipt.not_approved)
            } else {
                String::new()
            }
        ),
    ];
    for s in &receipt.steps {
        let mut line = format!(
            "step {} ({}): {} — {}",
            s.position,
            s.step_id,
            s.predicted_effect,
            s.outcome.as_str(),
        );
        if let Some(applied) = &s.applied {
            if let Some(c) = &applied.copy_id {
                line.push_str(&format!("; copy {c}"));
            }
            for l in &applied.links {
                line.push_str(&format!("; link {l}"));
            }
            for l in &applied.snapshots {
                line.push_str(&format!("; snapshot {l}"));
            }
        }
        if s.approved_by_apply {
            line.push_str("; approved by this apply (destructive)");
        }
        if let Some(e) = &s.error {
            line.push_str(&format!("; error {}: {}", e.code, e.message));
        }
        lines.push(line);
    }
    for r in &receipt.rejected {
        lines.push(format!(
            "step {} ({}): {} — rejected by {}, not run: {}",
            r.position, r.step_id, r.predicted_effect, r.by, r.reason
        ));
    }
    lines.push(format!("plan digest {}", receipt.plan_digest));
    lines
}

/// Prints `v` as pretty JSON with its keys sorted, as every `--json`
/// output is.
fn print_json<T: serde::Serialize>(v: &T) -> Result<()> {
    crate::output::json(&serde_json::to_value(v)?)?;
    Ok(())
}

// === a person's yes ===

/// What a person says yes to with `plans approve` or `plans apply`.
#[derive(Clone, Copy)]
enum Act {
    Approve,
    Apply,
}

/// The plan as a person was shown it on their terminal: what their yes is
/// bound to.
struct Shown {
    digest: String,
    revision: u64,
}

impl Shown {
    fn seen(&self) -> operator::Seen<'_> {
        operator::Seen {
            digest: &self.digest,
            revision: Some(self.revision),
        }
    }
}

/// `plans approve` and `plans apply` without `--digest`: shows the person
/// at the terminal the steps their yes covers — each with its predicted
/// effect, where it lands, its note and its preview — with the plan's
/// digest and revision, on stderr (stdout keeps the answer), and asks
/// (y/N). The yes is bound to exactly that plan ([`operator::Seen`]): one
/// that moved while the question was open is refused `plan_changed`, and
/// nothing is recorded. With no terminal to ask on (a script, a pipe, an
/// agent's shell) it refuses before anything is recorded — a yes nobody
/// read is no yes — and says how to pass the digest the person was shown.
async fn confirm(key: &ApiKey, state: &KeyState, steps: &[&Step], act: Act) -> Result<Shown> {
    use std::io::IsTerminal;
    let (verb, done) = match act {
        Act::Approve => ("approve", "approved"),
        Act::Apply => ("apply", "applied"),
    };
    let name = plangate_core::shell_word(&key.name);
    if !std::io::stdin().is_terminal() {
        return Err(UsageError(format!(
            "`plangate plans {verb}` without --digest asks the person at a terminal, and stdin is not one: nothing was {done}. `plangate plans show --key {name}` prints the plan and its digest; pass that digest as --digest to {verb} exactly that plan [invalid_arguments]"
        ))
        .into());
    }
    let shown = Shown {
        digest: state.plan_digest(),
        revision: state.revision,
    };
    let note = |line: String| crate::output::note(format_args!("{line}"));
    note(format!(
        "key {}: plan digest {}, revision {}",
        key.name, shown.digest, shown.revision
    ));
    note(match act {
        Act::Approve => format!("your yes approves {} waiting step(s):", steps.len()),
        Act::Apply => format!("this apply runs {} step(s) now:", steps.len()),
    });
    for step in steps {
        let r = &step.record;
        note(format!(
            "  {}. {}  {}: {} — {}{}",
            r.position,
            r.step_id,
            r.exposed_as,
            r.predicted_effect,
            lands_on_text(&r.lands_on),
            if r.approval_required {
                "; destructive"
            } else {
                ""
            }
        ));
        if let Some(n) = &r.approval_note {
            note(format!("     note: {n}"));
        }
        if let Some(p) = &r.preview {
            for line in crate::preview_text::preview_lines(r.position, p) {
                note(format!("     {}", line.text));
            }
        }
    }
    let question = match act {
        Act::Approve => format!(
            "Approve these {} step(s) of {}'s plan?",
            steps.len(),
            key.name
        ),
        Act::Apply => format!(
            "Apply these {} step(s) of {}'s plan now?",
            steps.len(),
            key.name
        ),
    };
    let yes = tokio::task::spawn_blocking(move || crate::output::ask_yes(&question))
        .await
        .context("cannot read the answer")?
        .context("cannot read the answer")?;
    if !yes {
        return Err(anyhow!(
            "not {done}: the answer was not yes; nothing was recorded"
        ));
    }
    Ok(shown)
}

// === list ===

/// `plangate plans list`: every key with a plan (open steps or a session)
/// or an operator's lock on its mode.
pub async fn list(config: &Config, store: Arc<dyn Store>, as_json: bool) -> Result<()> {
    let log = KeyLog::new(store.clone());
    let keys: BTreeMap<String, ApiKey> = store
        .list_keys()
        .await?
        .into_iter()
        .map(|k| (k.id.clone(), k))
        .collect();
    let now = now_ms();
    let mut rows = Vec::new();
    for key_id in store.keys_with_events().await? {
        let key = keys.get(&key_id).cloned().unwrap_or_else(|| ApiKey {
            id: key_id.clone(),
            name: key_id.clone(),
            scope: Scope::Read,
            prefix: String::new(),
            created_at_ms: 0,
            revoked_at_ms: None,
        });
        let state = refresh(&log, &key, config).await?;
        let operator_locked = matches!(state.lock, Some(plangate_core::ModeLock::Locked { .. }));
        if state.open_steps().next().is_none() && state.session_id.is_none() && !operator_locked {
            continue;
        }
        let in_force = config.modes.in_force(&state);
        let mode = &in_force.spec;
        let get = |s: StepStatus| count(&state, s);
        // Waiting steps a person's yes covers (a plan key's own yes never
        // counts), as `plans show` and `get_plan` say.
        let covered = rules::approved_steps(&state, &key.id, key.scope);
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
    if as_json {
        return print_json(&Value::Array(rows));
    }
    if rows.is_empty() {
        outln!(
            "no plans: no key has steps waiting, running, failed or in doubt, a session, or a locked mode"
        );
        return Ok(());
    }
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
    Ok(())
}

// === show ===

/// `plangate plans show --key NAME`: the plan as `get_plan` shows it.
pub async fn show(config: &Config, store: Arc<dyn Store>, key: &str, as_json: bool) -> Result<()> {
    let key = resolve_key(&*store, key).await?;
    let log = KeyLog::new(store.clone());
    let state = refresh(&log, &key, config).await?;
    let view = operator::plan_view(config, &key, &state, now_ms());
    if as_json {
        return print_json(&view);
    }
    outln!(
        "key {} ({}, scope {}): mode {}{}{}",
        view.key,
        view.key_id,
        view.scope,
        view.mode,
        if view.plan_mode { " (plan mode)" } else { "" },
        match view.mode_locked {
            Some(plangate_core::LockedBy::Operator) => ", locked by an operator",
            Some(plangate_core::LockedBy::Config) => ", locked by [gateway] default_mode_locked",
            None => "",
        }
    );
    if let Some(n) = &view.notice {
        outln!("note: {n}");
    }
    if view.steps.is_empty() {
        outln!("no plan: nothing is waiting, running, failed or in doubt");
        return Ok(());
    }
    let approved = view.steps.iter().filter(|s| s.approved).count();
    outln!(
        "{} step(s) in the plan, {} waiting; expires in {}; approved: {}",
        view.steps.len(),
        view.pending_steps,
        view.expires_in
            .map(human_secs)
            .unwrap_or_else(|| "-".into()),
        match approved {
            _ if view.approved => "yes".to_owned(),
            0 => "no".to_owned(),
            n => format!("{n} of {} waiting step(s)", view.pending_steps),
        }
    );
    outln!("plan digest {}", view.plan_digest);
    outln!(
        "revision {}{}",
        view.revision,
        match view.reviewed_revision {
            Some(r) if r == view.revision => " (as last reviewed)".to_owned(),
            Some(r) => format!(
                " (last reviewed at {r}; `plangate plans diff --key {}` shows what changed)",
                plangate_core::shell_word(&view.key)
            ),
            None => String::new(),
        }
    );
    if let Some(since) = &view.since_review {
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
    outln!();
    // A step waits for a person's yes when the key cannot approve its own
    // plan, or when a person has approved part of it (then an apply
    // without named steps runs only the approved part).
    let needs_yes = view.scope == Scope::Plan
        || view.scope == Scope::Read
        || view.mode_locked.is_some()
        || approved > 0;
    let rows: Vec<[String; 7]> = view
        .steps
        .iter()
        .map(|s| {
            let p = &s.step;
            [
                p.position.to_string(),
                s.status.to_string(),
                p.step_id.clone(),
                p.predicted_effect.clone(),
                lands_on_text(&p.lands_on),
                match (
                    s.approved,
                    needs_yes && s.status == StepStatus::Planned,
                    p.approval_required,
                ) {
                    (true, _, _) => "approved".to_owned(),
                    (false, true, true) => "needed (destructive)".to_owned(),
                    (false, true, false) => "needed".to_owned(),
                    (false, false, true) if s.status == StepStatus::Planned => {
                        "required (destructive)".to_owned()
                    }
                    (false, false, _) => "-".to_owned(),
                },
                match (&s.error, &s.rejection) {
                    (_, Some(r)) => format!("rejected by {}: {}", r.by, r.reason),
                    (Some(e), None) => format!("{}: {}", e.code, e.message),
                    (None, None) => "-".into(),
                },
            ]
        })
        .collect();
    print_table(
        &[
            "POS",
            "STATUS",
            "STEP",
            "PREDICTED EFFECT",
            "LANDS ON",
            "APPROVAL",
            "ERROR / REASON",
        ],
        &rows,
    );
    for s in view.steps.iter().filter(|s| s.step.rule.is_some()) {
        outln!(
            "step {} was planned by the operator's rule {:?}",
            s.step.position,
            s.step.rule.as_deref().unwrap_or_default()
        );
    }
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
    Ok(())
}

// === reject ===

/// `plangate plans reject --key NAME STEP --reason TEXT`: a person says no
/// to one waiting step.
pub async fn reject(
    store: Arc<dyn Store>,
    key: &str,
    step: &str,
    reason: &str,
    as_json: bool,
) -> Result<()> {
    let key = resolve_key(&*store, key).await?;
    let log = KeyLog::new(store.clone());
    let hint = format!(
        "; `plangate plans show --key {}` lists the waiting steps",
        plangate_core::shell_word(&key.name)
    );
    let state = operator::reject(&log, &cli_acting(&key), step, reason)
        .await
        .map_err(|e| cli_error(e, &hint))?;
    if as_json {
        return print_json(&json!({
            "success": true,
            "key": key.name,
            "rejected": step,
            "reason": reason.trim(),
            "rejected_by": operator_name(),
            "pending_steps": state.planned_steps().count(),
            "plan_digest": state.plan_digest(),
            "revision": state.revision,
        }));
    }
    outln!(
        "rejected step {step} of key {}; its agent reads your reason. {} step(s) waiting, plan digest {}",
        key.name,
        state.planned_steps().count(),
        state.plan_digest()
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
    let key = resolve_key(&*store, key).await?;
    let before = refresh(&KeyLog::new(store.clone()), &key, &config).await?;
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
    let outcome =
        plangate_gateway::amend::amend(&gw, &cli_acting(&key), step, &arguments, seen_revision)
            .await;
    gw.shutdown().await;
    let after = outcome.map_err(|e| match e {
        OperatorError::StepChanged { .. } => anyhow!("{e} [{}]", e.code()),
        e => cli_error(e, &hint),
    })?;
    let (Some(old), Some(new)) = (before.step(step), after.step(step)) else {
        return Err(anyhow!(
            "step {step} is not in key {}'s log after the amendment",
            key.name
        ));
    };
    let changes =
        plangate_core::json_diff(&old.record.arguments.value(), &new.record.arguments.value());
    if as_json {
        return print_json(&json!({
            "success": true,
            "key": key.name,
            "step": plangate_core::StepView::for_person(new),
            "arguments_changed": changes,
            "plan_digest": after.plan_digest(),
            "revision": after.revision,
        }));
    }
    outln!(
        "amended step {} ({}. {}) of key {}:",
        step,
        new.record.position,
        new.record.exposed_as,
        key.name
    );
    for line in change_lines(&changes) {
        outln!("  {line}");
    }
    outln!("  now: {}", new.record.predicted_effect);
    // Whether a yes covered the step before: then say it no longer does.
    let covered = rules::approved_steps(&before, &key.id, key.scope).contains(step);
    outln!(
        "plan digest {} (revision {}); {}: `plangate plans approve --key {} {step}`",
        after.plan_digest(),
        after.revision,
        if covered {
            "the approval that covered this step no longer does, so it runs only after a new yes"
        } else {
            "it runs only after a yes to it as it is now"
        },
        plangate_core::shell_word(&key.name)
    );
    Ok(())
}

/// A JSON diff as lines a person reads: `path: before → after`.
fn change_lines(changes: &[plangate_core::JsonChange]) -> Vec<String> {
    let show = |v: &Option<Value>| match v {
        None => "(none)".to_owned(),
        Some(v) => v.to_string(),
    };
    changes
        .iter()
        .map(|c| {
            let path = if c.path.is_empty() { "/" } else { &c.path };
            format!("{path}: {} → {}", show(&c.before), show(&c.after))
        })
        .collect()
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

// === discard ===

/// `plangate plans discard --key NAME [STEP…]`: a person drops steps
/// (the named waiting, failed or in-doubt ones; else every waiting step).
pub async fn discard(
    config: &Config,
    store: Arc<dyn Store>,
    key: &str,
    named: &[String],
    as_json: bool,
) -> Result<()> {
    let key = resolve_key(&*store, key).await?;
    let log = KeyLog::new(store.clone());
    refresh(&log, &key, config).await?;
    let hint = format!(
        "; `plangate plans show --key {}` lists the steps",
        plangate_core::shell_word(&key.name)
    );
    let (state, discarded) = operator::discard(&log, &cli_acting(&key), named, ttl_ms(config))
        .await
        .map_err(|e| cli_error(e, &hint))?;
    let pending = state.planned_steps().count();
    if as_json {
        return print_json(&json!({
            "success": true,
            "key": key.name,
            "discarded": discarded,
            "pending_steps": pending,
            "plan_digest": state.plan_digest(),
            "discarded_by": operator_name(),
        }));
    }
    if discarded.is_empty() {
        outln!("nothing to discard: key {} has no waiting steps", key.name);
    } else {
        outln!(
            "discarded {} step(s) of key {}: {}; {pending} waiting",
            discarded.len(),
            key.name,
            discarded.join(", ")
        );
    }
    Ok(())
}

// === retry and apply ===

/// Prints a receipt; an apply with failed or in-doubt steps exits 1.
fn finish_receipt(result: rmcp::model::CallToolResult, as_json: bool) -> Result<()> {
    let body = result.structured_content.unwrap_or(Value::Null);
    let receipt: Receipt = serde_json::from_value(body).map_err(|e| {
        anyhow!("plangate answered an apply with something other than a receipt ({e}); see its log")
    })?;
    if as_json {
        print_json(&receipt)?;
    } else {
        for line in receipt_lines(&receipt) {
            outln!("{line}");
        }
    }
    if receipt.success {
        Ok(())
    } else {
        Err(anyhow!(
            "not every step was applied; `plangate plans show` shows what is left"
        ))
    }
}

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
    store: Arc<dyn Store>,
    material: KeyMaterial,
    key: &str,
    step_id: &str,
    as_json: bool,
) -> Result<()> {
    let key = resolve_key(&*store, key).await?;
    let state = refresh(&KeyLog::new(store.clone()), &key, &config).await?;
    // Checked before any upstream is started: a step not in doubt is a
    // mistake whatever the world looks like.
    operator::check_in_doubt(&state, &key, step_id)
        .map_err(|e| cli_error(e, &retry_hint(&state, &key, step_id)))?;
    let gw = Gateway::build(config, store, material).await;
    let outcome = operator::retry(&gw, &cli_acting(&key), step_id).await;
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
    store: Arc<dyn Store>,
    material: KeyMaterial,
    key: &str,
    digest: Option<&str>,
    named: &[String],
    as_json: bool,
) -> Result<()> {
    if let Some(d) = digest {
        operator::check_digest(d)
            .map_err(|e| UsageError(format!("{e} (`plangate plans show` prints it)")))?;
    }
    let key = resolve_key(&*store, key).await?;
    let state = refresh(&KeyLog::new(store.clone()), &key, &config).await?;
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
            let steps: Vec<&Step> = selected.iter().filter_map(|id| state.step(id)).collect();
            Some(confirm(&key, &state, &steps, Act::Apply).await?)
        }
    };
    let seen = match &shown {
        Some(shown) => shown.seen(),
        None => operator::Seen::digest(&current),
    };
    let gw = Gateway::build(config, store, material).await;
    let outcome = operator::apply_now(&gw, &cli_acting(&key), Some(seen), named).await;
    gw.shutdown().await;
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

/// `plans approve --key NAME [--digest D] [STEP…]`: records a person's yes
/// to the named waiting steps of a key's plan, or to every waiting step
/// (`review_answered`, approve, binding the digest of exactly those steps)
/// — as the operator, or as the `write` key whose token is given. With
/// `--digest`, nothing is recorded if the plan moved on from it; without,
/// the person at the terminal is shown the steps and asked ([`confirm`]).
pub async fn approve(
    store: Arc<dyn Store>,
    key: &str,
    digest: Option<&str>,
    named: &[String],
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
    let actor = match approver_token {
        None => Actor::Operator {
            name: operator_name(),
        },
        Some(token) => {
            let Some(approver) = store.authenticate(token).await? else {
                return Err(UsageError(
                    "PLANGATE_KEY is unknown or revoked; unset it to approve as the operator"
                        .to_owned(),
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
                    "PLANGATE_KEY is set to key {:?} (scope {}), which cannot approve {:?}'s plan: only the operator or another key of scope write can. Unset PLANGATE_KEY (`env -u PLANGATE_KEY plangate plans approve …`) to approve as the operator",
                    approver.name, approver.scope, target.name
                ))
                .into());
            }
            actor
        }
    };
    let log = KeyLog::new(store);
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
        None => {
            let state = log.state(&target.id).await?;
            let covered: Option<Vec<&Step>> = if named.is_empty() {
                Some(state.planned_steps().collect())
            } else {
                let mut steps: Vec<&Step> = Vec::new();
                for id in named {
                    match operator::waiting_step(&state, &target, id) {
                        Ok(step) if !steps.iter().any(|s| s.record.step_id == *id) => {
                            steps.push(step)
                        }
                        Ok(_) => {}
                        Err(_) => {
                            steps.clear();
                            break;
                        }
                    }
                }
                steps.sort_by_key(|s| s.record.position);
                Some(steps)
            };
            match covered.filter(|steps| !steps.is_empty()) {
                Some(steps) => Some(confirm(&target, &state, &steps, Act::Approve).await?),
                None => Some(Shown {
                    digest: state.plan_digest(),
                    revision: state.revision,
                }),
            }
        }
    };
    let seen = match (&shown, digest) {
        (Some(shown), _) => Some(shown.seen()),
        (None, Some(d)) => Some(operator::Seen::digest(d)),
        (None, None) => None,
    };
    let approved = operator::approve(&log, &target, actor.clone(), Channel::Cli, seen, named)
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
    let state = &approved.state;
    let waiting_unapproved: Vec<&Step> = {
        // Which yes counts may depend on a lock in the config this command
        // does not read; the key's own scope is what counts without one.
        let covered = rules::approved_steps(state, &target.id, target.scope);
        state
            .planned_steps()
            .filter(|s| !covered.contains(s.record.step_id.as_str()))
            .collect()
    };
    if as_json {
        return print_json(&json!({
            "success": true,
            "key": target.name,
            "approved_steps": approved.step_ids,
            "approved_digest": approved.digest,
            "plan_digest": state.plan_digest(),
            "revision": state.revision,
            "not_approved": waiting_unapproved.iter().map(|s| &s.record.step_id).collect::<Vec<_>>(),
            "approved_by": actor,
        }));
    }
    outln!(
        "approved {} step(s) of {:?}'s plan:",
        approved.step_ids.len(),
        target.name
    );
    for id in &approved.step_ids {
        if let Some(step) = state.step(id) {
            outln!(
                "  {}. {}  {}",
                step.record.position,
                step.record.step_id,
                step.record.predicted_effect
            );
        }
    }
    if waiting_unapproved.is_empty() {
        outln!(
            "every waiting step is approved; the agent's apply_plan (or `plangate plans apply --key {}`) runs them",
            plangate_core::shell_word(&target.name)
        );
    } else {
        outln!(
            "{} waiting step(s) are not approved and will not run without a yes: {}",
            waiting_unapproved.len(),
            waiting_unapproved
                .iter()
                .map(|s| format!("{}. {}", s.record.position, s.record.step_id))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_like_a_person_says_them() {
        assert_eq!(human_secs(0), "now");
        assert_eq!(human_secs(12), "12s");
        assert_eq!(human_secs(250), "4m 10s");
        assert_eq!(human_secs(14_399), "3h 59m");
    }
}
