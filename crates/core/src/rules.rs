//! Every plan rule, once: when a plan expires, which steps a discard or an
//! apply takes, whose approval counts and who may apply.
//!
//! The agent's tools, the operator CLI and the web console answer these
//! questions about the same plan, and must answer them the same way: two
//! channels disagreeing on "what discard may touch" is a bug, not a style
//! issue. So each rule is a pure function of the folded state here, with
//! its tests beside it, and every channel calls it — each turning a
//! [`Refused`] into its own words (a tool refusal, a CLI error, a console
//! answer) under the same stable [`Code`].

use std::collections::BTreeSet;

use crate::{Actor, Approval, Code, EventKind, InForce, KeyState, LockedBy, Scope, StepStatus};

/// Why a rule refused: the same for every channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// No step with this id is in the key's plan.
    NoStep(String),
    /// The step expired with its plan and never ran.
    Expired(String),
    /// The step is in doubt: only a person's explicit retry runs it again.
    InDoubt(String),
    /// The step's status does not allow it.
    Status {
        /// The step.
        step: String,
        /// Its status now.
        status: StepStatus,
    },
    /// A `read` key never applies.
    ReadScope,
    /// A `plan` key's plan (or a locked mode's) needs an approval, from
    /// outside the key, of the current digest.
    NotApproved {
        /// The digest that needs the approval.
        digest: String,
    },
    /// The key's mode is locked and the agent asked to change it.
    ModeLocked {
        /// The locked mode.
        mode: String,
        /// Who locked it.
        by: LockedBy,
    },
    /// The plan holds as many open steps as it may.
    PlanFull {
        /// The most it may hold (`[gateway] max_steps`).
        max: usize,
    },
    /// The step would take the plan past its size cap.
    TooLarge {
        /// The plan's size with the step, in bytes.
        bytes: usize,
        /// The cap (`[gateway] max_plan_bytes`).
        max: usize,
    },
    /// The plan is no longer at the digest the person saw.
    PlanChanged {
        /// The digest they saw.
        seen: String,
        /// The plan's digest now.
        current: String,
    },
    /// The plan moved past the revision the person saw (the same digest
    /// can come back; the revision does not).
    RevisionMoved {
        /// The revision they saw.
        seen: u64,
        /// The revision now.
        current: u64,
    },
    /// The key's log does not verify ([`crate::chain`]): a row was changed
    /// or added outside plangate, so no approval in it can be trusted.
    TamperedLog(crate::chain::Break),
    /// A person's apply would leave behind waiting steps tied to the ones
    /// it runs ([`crate::partial::left_behind`]) without their word that
    /// it is meant.
    PartialApply(Vec<crate::partial::LeftStep>),
}

impl std::fmt::Display for Refused {
    /// What happened, the same words on every channel (which adds its own
    /// next step: a tool name, a CLI command).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::NoStep(id) => write!(f, "there is no step {id:?} in this plan"),
            Refused::Expired(id) => write!(
                f,
                "step {id} expired with its plan and never ran; plan it again if it is still wanted"
            ),
            Refused::InDoubt(id) => write!(
                f,
                "step {id} is in_doubt: its request may have reached the server, so only a person's explicit retry runs it again"
            ),
            Refused::Status { step, status } => write!(f, "step {step} is {status}"),
            Refused::ReadScope => write!(f, "a read key cannot apply a plan"),
            Refused::NotApproved { digest } => write!(
                f,
                "this plan runs only after a person approves digest {digest}"
            ),
            Refused::ModeLocked { mode, by } => write!(
                f,
                "{} at {mode:?}: the agent cannot change the mode, end its session or leave plan mode, and only an operator can unlock it",
                by.describe()
            ),
            Refused::PlanFull { max } => write!(
                f,
                "the plan already holds {max} steps, the most it may hold"
            ),
            Refused::TooLarge { bytes, max } => write!(
                f,
                "this step would make the plan {bytes} bytes, past its cap of {max} bytes ([gateway] max_plan_bytes)"
            ),
            Refused::PlanChanged { seen, current } => write!(
                f,
                "the plan changed since it was reviewed (digest {seen} is now {current})"
            ),
            Refused::RevisionMoved { seen, current } => write!(
                f,
                "the plan moved on since it was reviewed (revision {seen} is now {current})"
            ),
            Refused::TamperedLog(broken) => write!(
                f,
                "this key's log does not verify ({broken}), so nothing in it is applied; a person must look at it"
            ),
            Refused::PartialApply(left) => {
                write!(
                    f,
                    "this apply would leave {} step(s) waiting, some tied to the steps it runs:",
                    left.len()
                )?;
                for l in left {
                    let tied = l
                        .tied
                        .as_deref()
                        .map(|t| format!(" ({t})"))
                        .unwrap_or_default();
                    let effect = l.predicted_effect.trim_end().trim_end_matches('.');
                    write!(f, " step {} {effect}{tied};", l.position)?;
                }
                write!(
                    f,
                    " nothing ran. Apply them together, or say a partial apply is meant (--partial at the CLI; the console asks)"
                )
            }
        }
    }
}

impl Refused {
    /// The stable code this refusal carries on every channel.
    pub fn code(&self) -> Code {
        match self {
            Refused::NoStep(_) | Refused::InDoubt(_) | Refused::Status { .. } => {
                Code::InvalidArguments
            }
            Refused::Expired(_) => Code::PlanExpired,
            Refused::ReadScope | Refused::NotApproved { .. } => Code::Forbidden,
            Refused::ModeLocked { .. } => Code::ModeLocked,
            Refused::PlanFull { .. } => Code::PlanFull,
            Refused::TooLarge { .. } => Code::TooLarge,
            Refused::PlanChanged { .. } | Refused::RevisionMoved { .. } => Code::PlanChanged,
            Refused::TamperedLog(_) => Code::TamperedLog,
            Refused::PartialApply(_) => Code::PartialApply,
        }
    }
}

// === what the person saw ===

/// Whether `state`'s plan is still the one a person saw: the same digest,
/// and the same revision when their screen showed one. Every yes and every
/// apply bound to a digest asks this, and nothing else decides it.
pub fn still_as_seen(state: &KeyState, digest: &str, revision: Option<u64>) -> Result<(), Refused> {
    let current = state.plan_digest();
    if digest != current {
        return Err(Refused::PlanChanged {
            seen: digest.to_owned(),
            current,
        });
    }
    match revision {
        Some(seen) if seen != state.revision => Err(Refused::RevisionMoved {
            seen,
            current: state.revision,
        }),
        _ => Ok(()),
    }
}

// === plan size ===

/// Whether a step of `size` bytes ([`crate::StepRecord::size_bytes`]) may
/// join `state`'s plan — or, `replacing` a step (a person's amendment),
/// take its place: fewer than `max_steps` open steps, and the open steps'
/// bytes with it at most `max_bytes` — so no plan grows past what one
/// `get_plan` or a person's screen can carry.
pub fn room_for(
    state: &KeyState,
    size: usize,
    replacing: Option<&str>,
    max_steps: usize,
    max_bytes: usize,
) -> Result<(), Refused> {
    if replacing.is_none() && state.open_steps().count() >= max_steps {
        return Err(Refused::PlanFull { max: max_steps });
    }
    let bytes = state
        .open_steps()
        .filter(|s| Some(s.record.step_id.as_str()) != replacing)
        .map(|s| s.record.size_bytes())
        .fold(size, usize::saturating_add);
    if bytes > max_bytes {
        return Err(Refused::TooLarge {
            bytes,
            max: max_bytes,
        });
    }
    Ok(())
}

// === repeated writes and claims ===

/// What a write planned again is to the plan (docs/design.md §5): the
/// same server, tool and arguments as a waiting step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repeat<'s> {
    /// Nothing waiting repeats it: planned as a new step.
    New,
    /// It repeats this waiting step, whose target is as the person was
    /// shown (`before_digest` of its preview, or the `target_version` a
    /// configured preview reported): answered with that step
    /// (`step_deduplicated`).
    Same(&'s str),
    /// It repeats this waiting step, but the target changed since it was
    /// planned: the old step (and any approval of it) is discarded and the
    /// write planned anew with the target as it is now.
    TargetChanged(&'s str),
}

/// Whether a write with `fingerprint`, whose target reads as `preview` and
/// `target_version` now, repeats a waiting step of `state`'s plan.
pub fn repeat_of<'s>(
    state: &'s KeyState,
    fingerprint: &str,
    preview: Option<&crate::Preview>,
    target_version: Option<&serde_json::Value>,
) -> Repeat<'s> {
    let Some(existing) = state.find_planned_duplicate(fingerprint) else {
        return Repeat::New;
    };
    let step_id = existing.record.step_id.as_str();
    let seen_then = existing
        .record
        .preview
        .as_ref()
        .and_then(|p| p.before_digest());
    let seen_now = preview.and_then(|p| p.before_digest());
    if seen_then == seen_now && existing.record.target_version.as_ref() == target_version {
        Repeat::Same(step_id)
    } else {
        Repeat::TargetChanged(step_id)
    }
}

/// Whether an apply may claim step `step_id` now (`step_started`): it is
/// in the plan and may become `running` ([`StepStatus::can_become`]) — a
/// waiting step, or a failed one named to run again.
pub fn claimable(state: &KeyState, step_id: &str) -> bool {
    state.chain.broken.is_none()
        && state
            .step(step_id)
            .is_some_and(|step| step.status.can_become(StepStatus::Running))
}

/// Whether the key's log verifies ([`crate::chain`]): nothing is applied
/// from a log with a break, whoever asks.
pub fn log_intact(state: &KeyState) -> Result<(), Refused> {
    match &state.chain.broken {
        Some(broken) => Err(Refused::TamperedLog(broken.clone())),
        None => Ok(()),
    }
}

// === plan life ===

/// The waiting steps that expire now: the plan's life (`ttl_ms` from its
/// last start) is over and it still has waiting steps. `None` otherwise.
/// Expiry fails closed: it never lowers the mode.
pub fn expiring_steps(state: &KeyState, now_ms: i64, ttl_ms: i64) -> Option<Vec<String>> {
    let expires = state.expires_at_ms(ttl_ms)?;
    if expires > now_ms {
        return None;
    }
    // Rejected steps leave the plan with it.
    let ids: Vec<String> = state
        .open_steps()
        .filter(|s| matches!(s.status, StepStatus::Planned | StepStatus::Rejected))
        .map(|s| s.record.step_id.clone())
        .collect();
    (!ids.is_empty()).then_some(ids)
}

/// Whether the plan's life is over (its waiting steps expire, and a step
/// retried into it would only expire unrun).
pub fn life_over(state: &KeyState, now_ms: i64, ttl_ms: i64) -> bool {
    state.expires_at_ms(ttl_ms).is_some_and(|t| t <= now_ms)
}

// === leases of a dead apply ===

/// Whether an apply recorded in `state` is still alive at `now_ms`: its
/// owner touched it (started it or renewed a claim) within `lease_ms`.
pub fn apply_alive(state: &KeyState, now_ms: i64, lease_ms: i64) -> bool {
    state.applying.is_some()
        && state
            .applying_touched_ms
            .is_some_and(|t| t + lease_ms > now_ms)
}

/// What cleans up after a dead apply (docs/design.md §5 "Leases"): each claim
/// whose lease ran out becomes `in_doubt` — its request may have reached
/// the upstream — and an apply no longer alive is finished. The system
/// appends these; anyone may, at any time, since on a live apply they are
/// empty.
pub fn lease_cleanup(state: &KeyState, now_ms: i64, lease_ms: i64) -> Vec<EventKind> {
    let mut kinds: Vec<EventKind> = state
        .steps
        .iter()
        .filter(|s| s.status == StepStatus::Running && s.lease_until_ms.is_some_and(|l| l <= now_ms))
        .map(|s| EventKind::StepInDoubt {
            step_id: s.record.step_id.clone(),
            reason: "the process applying it stopped renewing its claim; the request may or may not have reached the server".to_owned(),
        })
        .collect();
    if let Some(apply_id) = &state.applying
        && !apply_alive(state, now_ms, lease_ms)
    {
        kinds.push(EventKind::ApplyFinished {
            apply_id: apply_id.clone(),
            applied: 0,
            failed: 0,
            in_doubt: 0,
            not_run: 0,
        });
    }
    kinds
}

// === which steps ===

/// Which steps a discard or an apply names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Selection<'a> {
    /// Every waiting step (no ids given).
    Waiting,
    /// Exactly these (an empty list names none).
    Named(&'a [String]),
}

impl<'a> Selection<'a> {
    /// The named steps, or every waiting step when none is named (a
    /// person's `plans discard` / `plans apply` with no step given).
    pub fn of(named: &'a [String]) -> Selection<'a> {
        if named.is_empty() {
            Selection::Waiting
        } else {
            Selection::Named(named)
        }
    }
}

/// Each id once, in the order first named.
fn unique(ids: &[String]) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    ids.iter()
        .filter(|id| seen.insert(id.as_str()))
        .cloned()
        .collect()
}

fn waiting(state: &KeyState) -> Vec<String> {
    state
        .planned_steps()
        .map(|s| s.record.step_id.clone())
        .collect()
}

/// The steps ending a session drops (docs/design.md §5 `end_session`): every
/// open step but one running now — a claimed call finishes and is recorded
/// as it ends.
pub fn end_session_selection(state: &KeyState) -> Vec<String> {
    state
        .open_steps()
        .filter(|s| s.status != StepStatus::Running)
        .map(|s| s.record.step_id.clone())
        .collect()
}

/// The steps a discard takes (docs/design.md §5 `discard_plan`): every waiting
/// step, or the named ones if each is waiting, failed, in doubt or
/// rejected. An
/// applied, running or discarded step cannot be discarded; an expired one
/// never ran (`plan_expired`).
pub fn discard_selection(
    state: &KeyState,
    selection: Selection<'_>,
) -> Result<Vec<String>, Refused> {
    let Selection::Named(ids) = selection else {
        return Ok(waiting(state));
    };
    for id in ids {
        let step = state.step(id).ok_or_else(|| Refused::NoStep(id.clone()))?;
        match step.status {
            // Those the fold discards (docs/design.md §5 "Step statuses").
            status if status.can_become(StepStatus::Discarded) => {}
            StepStatus::Expired => return Err(Refused::Expired(id.clone())),
            status => {
                return Err(Refused::Status {
                    step: id.clone(),
                    status,
                });
            }
        }
    }
    Ok(unique(ids))
}

/// The steps an apply runs, in plan order (docs/design.md §5 `apply_plan`): every
/// waiting step, or the named ones if each is waiting or failed (naming a
/// failed step applies it again). An in-doubt step runs again only through
/// a person's retry; an expired one never runs.
pub fn apply_selection(state: &KeyState, selection: Selection<'_>) -> Result<Vec<String>, Refused> {
    let Selection::Named(ids) = selection else {
        return Ok(waiting(state));
    };
    let mut ordered = Vec::with_capacity(ids.len());
    for id in unique(ids) {
        let step = state.step(&id).ok_or_else(|| Refused::NoStep(id.clone()))?;
        match step.status {
            // Those the fold lets a claim start (waiting or failed).
            status if status.can_become(StepStatus::Running) => {
                ordered.push((step.record.position, id));
            }
            StepStatus::Expired => return Err(Refused::Expired(id)),
            StepStatus::InDoubt => return Err(Refused::InDoubt(id)),
            status => return Err(Refused::Status { step: id, status }),
        }
    }
    ordered.sort();
    Ok(ordered.into_iter().map(|(_, id)| id).collect())
}

/// A person's apply of `run` as they asked for it: refused when it would
/// leave a waiting step tied to one it runs, unless they said a partial
/// apply is meant (`partial`). The steps it leaves, for the person to see
/// either way.
pub fn partial_apply(
    state: &KeyState,
    run: &[String],
    partial: bool,
) -> Result<Vec<crate::partial::LeftStep>, Refused> {
    let left = crate::partial::left_behind(state, run);
    if !partial && !run.is_empty() && crate::partial::any_tied(&left) {
        return Err(Refused::PartialApply(left));
    }
    Ok(left)
}

// === locked modes ===

/// What an agent asks to do to its own mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModeChange<'a> {
    /// `begin_session` with this mode.
    Begin(&'a str),
    /// `end_session` (back to `default`).
    End,
    /// `exit_plan_mode` (back to `default` once approved).
    ExitPlanMode,
}

/// Whether the agent may make `change` while `in_force` is in force
/// (docs/design.md §9 "Locked modes"): anything while unlocked; under a lock only
/// a `begin_session` with the locked mode itself, which restarts the
/// plan's life and changes no mode. `exit_plan_mode` is refused before
/// anyone is asked.
pub fn may_change_mode(in_force: &InForce, change: ModeChange<'_>) -> Result<(), Refused> {
    let Some(by) = in_force.locked_by else {
        return Ok(());
    };
    match change {
        ModeChange::Begin(mode) if mode == in_force.spec.name => Ok(()),
        _ => Err(Refused::ModeLocked {
            mode: in_force.spec.name.clone(),
            by,
        }),
    }
}

/// The scope a key's plan is approved and applied under: its own, except
/// that a `write` key in a locked mode is held like a `plan` key — its own
/// client's yes does not count and it cannot apply its plan until a person
/// outside it approves (docs/design.md §9).
pub fn approval_scope(scope: Scope, in_force: &InForce) -> Scope {
    if scope == Scope::Write && in_force.locked() {
        Scope::Plan
    } else {
        scope
    }
}

/// [`approval_scope`] for applying `state`'s plan: also `plan` when one of
/// its open steps was planned under `plan` scope, or is a call an `ask`
/// mode asked the person about that they did not answer
/// ([`crate::StepRecord::unanswered`]). An OAuth identity's scope is its
/// token's, per request; a plan made with a `plan` token must not be
/// applied on the agent's own say-so once it holds a `write` token. Nor
/// may an agent turn an unanswered question into its own yes.
pub fn approval_scope_for(state: &KeyState, scope: Scope, in_force: &InForce) -> Scope {
    let scope = approval_scope(scope, in_force);
    let held = state
        .open_steps()
        .any(|s| s.planned_scope == Some(Scope::Plan) || s.record.unanswered.is_some());
    if scope == Scope::Write && held {
        Scope::Plan
    } else {
        scope
    }
}

// === approvals ===

/// Who is applying a plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applier<'a> {
    /// A person at the CLI or the console: their act is the approval.
    Operator,
    /// The agent holding the key whose plan it is.
    Key {
        /// The key's id.
        id: &'a str,
        /// The key's scope.
        scope: Scope,
    },
}

/// Whether a recorded approval counts for the plan of key `key_id` with
/// `scope` (docs/design.md §7): for a `plan`-scope key only an operator's, or
/// another `write` key's, counts — never its own client's; for any other
/// key every recorded approval does.
pub fn approval_counts(approval: &Approval, key_id: &str, scope: Scope) -> bool {
    scope != Scope::Plan || approver_counts(&approval.actor, key_id)
}

/// Whether `actor`'s approval counts for the plan of a `plan`-scope key
/// `key_id`: an operator's, or another `write` key's.
pub fn approver_counts(actor: &Actor, key_id: &str) -> bool {
    match actor {
        Actor::Operator { .. } => true,
        Actor::Agent {
            key_id: by, scope, ..
        } => *scope == Some(Scope::Write) && by != key_id,
        Actor::System => false,
    }
}

/// The steps of `state` covered by a valid approval that counts for key
/// `key_id` with `scope` ([`KeyState::approved_steps`]).
pub fn approved_steps<'s>(state: &'s KeyState, key_id: &str, scope: Scope) -> BTreeSet<&'s str> {
    state.approved_steps(|a| approval_counts(a, key_id, scope))
}

/// Whether every waiting step of key `key_id` (with `scope`) is covered by
/// an approval that counts for it: `get_plan`'s `approved`.
pub fn is_approved(state: &KeyState, key_id: &str, scope: Scope) -> bool {
    state.is_approved(|a| approval_counts(a, key_id, scope))
}

/// What a person decided about a plan put up for review, from the key's
/// state when review was asked (`asked`) and `now`, with `approved` the
/// steps a counting yes covers now ([`approved_steps`]): answered once a
/// yes covers a waiting step, a step was said no to since, or nothing is
/// left waiting (discarded, applied). `None` while none holds: the review
/// goes on.
pub fn review_outcome(
    asked: &KeyState,
    now: &KeyState,
    approved: &BTreeSet<&str>,
) -> Option<crate::ReviewOutcome> {
    let was_rejected = |id: &str| {
        asked
            .step(id)
            .is_some_and(|s| s.status == StepStatus::Rejected)
    };
    let rejected: Vec<crate::RejectedStep> = crate::RejectedStep::all(now)
        .into_iter()
        .filter(|r| !was_rejected(&r.step_id))
        .collect();
    outcome_of(now, approved, rejected)
}

/// What people decided about `now`'s plan so far, whenever they did:
/// `get_plan`'s `outcome`, in [`review_outcome`]'s shape. `None` while no
/// counting yes covers a waiting step and no step was said no to.
pub fn decided_so_far(now: &KeyState, approved: &BTreeSet<&str>) -> Option<crate::ReviewOutcome> {
    outcome_of(now, approved, crate::RejectedStep::all(now))
        .filter(|o| !o.approved.is_empty() || !o.rejected.is_empty())
}

/// The outcome of `now` with `rejected` the no's that count: `None` while
/// no yes covers a waiting step, nothing was rejected and steps still wait.
fn outcome_of(
    now: &KeyState,
    approved: &BTreeSet<&str>,
    rejected: Vec<crate::RejectedStep>,
) -> Option<crate::ReviewOutcome> {
    let waiting: Vec<&str> = now
        .open_steps()
        .filter(|s| s.status == StepStatus::Planned)
        .map(|s| s.record.step_id.as_str())
        .collect();
    let covered: Vec<String> = waiting
        .iter()
        .filter(|id| approved.contains(*id))
        .map(|id| (*id).to_owned())
        .collect();
    (!covered.is_empty() || !rejected.is_empty() || waiting.is_empty()).then(|| {
        crate::ReviewOutcome {
            waiting: waiting.len() - covered.len(),
            approved: covered,
            rejected,
            plan_digest: now.plan_digest(),
        }
    })
}

/// What an apply runs, and what it leaves waiting for a person's yes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApplySteps {
    /// The steps it runs, in plan order.
    pub run: Vec<String>,
    /// Selected steps no approval covers: reported `not_approved` in the
    /// receipt, left as they are.
    pub not_approved: Vec<String>,
}

/// Which steps an apply runs (docs/design.md §5, §7, and per-step answers):
///
/// * the selection is checked first ([`apply_selection`]): every waiting
///   step, or the named waiting or failed ones;
/// * an operator's apply, or a `write` key's, is itself the yes: it runs
///   every step named, and — with none named — every waiting step, unless
///   a person has approved part of the plan: then only the waiting steps
///   `approved` covers run, and the rest are `not_approved`;
/// * a `plan` key (or a write key held by a lock) runs only steps
///   `approved` covers; the rest are `not_approved`, and when none is
///   covered nothing runs and the apply is refused
///   ([`Refused::NotApproved`], which says how to approve);
/// * a `read` key never applies.
///
/// `approved` comes from [`approved_steps`] for the key whose plan it is.
pub fn apply_steps(
    state: &KeyState,
    selection: Selection<'_>,
    applier: Applier<'_>,
    approved: &BTreeSet<&str>,
) -> Result<ApplySteps, Refused> {
    log_intact(state)?;
    let own_yes = match applier {
        Applier::Operator => true,
        Applier::Key {
            scope: Scope::Read, ..
        } => return Err(Refused::ReadScope),
        Applier::Key { scope, .. } => scope == Scope::Write,
    };
    let selected = apply_selection(state, selection)?;
    let (run, not_approved): (Vec<String>, Vec<String>) = selected
        .iter()
        .cloned()
        .partition(|id| approved.contains(id.as_str()));
    if own_yes && (matches!(selection, Selection::Named(_)) || run.is_empty()) {
        return Ok(ApplySteps {
            run: selected,
            not_approved: Vec::new(),
        });
    }
    if !own_yes && run.is_empty() && !not_approved.is_empty() {
        return Err(Refused::NotApproved {
            digest: state.plan_digest(),
        });
    }
    Ok(ApplySteps { run, not_approved })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::event::tests::record;
    use crate::{Channel, Event, EventKind, Verdict};

    fn event(kind: EventKind, actor: Actor) -> Event {
        Event {
            at_ms: 1_000,
            key_id: "key_1".into(),
            actor,
            channel: Channel::Cli,
            kind,
        }
    }

    fn system(kind: EventKind) -> Event {
        event(kind, Actor::System)
    }

    /// Four steps: s1 waiting, s2 failed, s3 in doubt, s4 applied, s5
    /// discarded; the plan's life started at 1000.
    fn plan() -> KeyState {
        let mut state = KeyState::default();
        let mut seq = 0;
        let mut add = |state: &mut KeyState, e: Event| {
            seq += 1;
            state.apply(seq, &e);
        };
        for (i, id) in ["s1", "s2", "s3", "s4", "s5"].iter().enumerate() {
            add(
                &mut state,
                system(EventKind::StepPlanned {
                    step: record(id, i as u32 + 1, "t", json!({"n": i})),
                }),
            );
        }
        add(
            &mut state,
            system(EventKind::ApplyStarted {
                apply_id: "a".into(),
                step_ids: vec!["s2".into(), "s3".into(), "s4".into()],
                plan_digest: None,
            }),
        );
        for id in ["s2", "s3", "s4"] {
            add(
                &mut state,
                system(EventKind::StepStarted {
                    step_id: id.into(),
                    apply_id: "a".into(),
                    owner: "o".into(),
                    lease_until_ms: 9_000,
                }),
            );
        }
        add(
            &mut state,
            system(EventKind::StepFailed {
                step_id: "s2".into(),
                error: crate::StepError {
                    code: crate::StepErrorCode::UpstreamError,
                    message: "no".into(),
                    upstream: None,
                },
            }),
        );
        add(
            &mut state,
            system(EventKind::StepInDoubt {
                step_id: "s3".into(),
                reason: "lost".into(),
            }),
        );
        add(
            &mut state,
            system(EventKind::StepApplied {
                step_id: "s4".into(),
                result: json!({}),
                copy_id: None,
                links: vec![],
                snapshots: vec![],
            }),
        );
        add(
            &mut state,
            system(EventKind::ApplyFinished {
                apply_id: "a".into(),
                applied: 1,
                failed: 1,
                in_doubt: 1,
                not_run: 0,
            }),
        );
        add(
            &mut state,
            system(EventKind::StepsDiscarded {
                step_ids: vec!["s5".into()],
            }),
        );
        state
    }

    fn ids(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn discard_and_apply_take_every_waiting_step_when_none_is_named() {
        let state = plan();
        for rule in [discard_selection, apply_selection] {
            assert_eq!(rule(&state, Selection::Waiting), Ok(ids(&["s1"])));
        }
    }

    #[test]
    fn discard_takes_waiting_steps_or_named_waiting_failed_and_in_doubt_ones() {
        let state = plan();
        let named = ids(&["s3", "s1", "s2", "s3"]);
        assert_eq!(
            discard_selection(&state, Selection::Named(&named)),
            Ok(ids(&["s3", "s1", "s2"])),
            "each once, in the order named"
        );
        assert_eq!(discard_selection(&state, Selection::Named(&[])), Ok(vec![]));
        assert_eq!(
            discard_selection(&state, Selection::Named(&ids(&["s4"]))),
            Err(Refused::Status {
                step: "s4".into(),
                status: StepStatus::Applied
            })
        );
        assert_eq!(
            discard_selection(&state, Selection::Named(&ids(&["nope"]))),
            Err(Refused::NoStep("nope".into()))
        );
    }

    #[test]
    fn apply_takes_waiting_or_named_waiting_and_failed_steps_in_plan_order() {
        let state = plan();
        assert_eq!(
            apply_selection(&state, Selection::Named(&ids(&["s2", "s1", "s2"]))),
            Ok(ids(&["s1", "s2"]))
        );
        let in_doubt = apply_selection(&state, Selection::Named(&ids(&["s3"])));
        assert_eq!(in_doubt, Err(Refused::InDoubt("s3".into())));
        assert_eq!(in_doubt.unwrap_err().code(), Code::InvalidArguments);
        assert!(matches!(
            apply_selection(&state, Selection::Named(&ids(&["s5"]))),
            Err(Refused::Status {
                status: StepStatus::Discarded,
                ..
            })
        ));
    }

    #[test]
    fn an_expired_step_is_plan_expired_for_discard_and_apply_alike() {
        let mut state = plan();
        let ttl = 10;
        let expired = expiring_steps(&state, 1_000 + ttl, ttl).unwrap();
        assert_eq!(expired, ids(&["s1"]));
        assert_eq!(expiring_steps(&state, 1_000 + ttl - 1, ttl), None);
        assert!(life_over(&state, 1_010, ttl) && !life_over(&state, 1_009, ttl));
        let seq = state.last_seq + 1;
        state.apply(seq, &system(EventKind::PlanExpired { step_ids: expired }));
        assert_eq!(
            expiring_steps(&state, 5_000, ttl),
            None,
            "nothing left to expire"
        );
        for rule in [discard_selection, apply_selection] {
            let refused = rule(&state, Selection::Named(&ids(&["s1"]))).unwrap_err();
            assert_eq!(refused, Refused::Expired("s1".into()));
            assert_eq!(refused.code(), Code::PlanExpired);
        }
    }

    #[test]
    fn only_an_approval_from_outside_a_plan_key_counts_and_read_keys_never_apply() {
        let mut state = plan();
        let digest = state.plan_digest();
        let answer = |actor: Actor| {
            event(
                EventKind::ReviewAnswered {
                    review_id: None,
                    verdict: Verdict::Approve,
                    plan_digest: digest.clone(),
                    feedback: None,
                    step_ids: None,
                    revision: None,
                },
                actor,
            )
        };
        let me = Applier::Key {
            id: "key_1",
            scope: Scope::Plan,
        };
        let agent = |id: &str, scope| Actor::Agent {
            key_id: id.into(),
            key_name: id.into(),
            scope: Some(scope),
        };
        let may = |state: &KeyState, applier: Applier<'_>| {
            let scope = match applier {
                Applier::Key { scope, .. } => scope,
                Applier::Operator => Scope::Plan,
            };
            apply_steps(
                state,
                Selection::Waiting,
                applier,
                &approved_steps(state, "key_1", scope),
            )
        };
        let all = Ok(ApplySteps {
            run: ids(&["s1"]),
            not_approved: vec![],
        });
        assert_eq!(may(&state, Applier::Operator), all);
        let write = Applier::Key {
            id: "key_1",
            scope: Scope::Write,
        };
        assert_eq!(may(&state, write), all);
        let read = Applier::Key {
            id: "key_1",
            scope: Scope::Read,
        };
        assert_eq!(may(&state, read), Err(Refused::ReadScope));
        // Its own client's yes, and another plan key's, do not count.
        for actor in [
            agent("key_1", Scope::Plan),
            agent("key_1", Scope::Write),
            agent("key_2", Scope::Plan),
        ] {
            let seq = state.last_seq + 1;
            state.apply(seq, &answer(actor));
            assert!(matches!(may(&state, me), Err(Refused::NotApproved { .. })));
        }
        // Another write key's does; so does an operator's.
        let mut with_write = state.clone();
        let seq = with_write.last_seq + 1;
        with_write.apply(seq, &answer(agent("key_2", Scope::Write)));
        assert_eq!(may(&with_write, me), all);
        let seq = state.last_seq + 1;
        state.apply(seq, &answer(Actor::Operator { name: "ana".into() }));
        assert_eq!(may(&state, me), all);
        assert!(is_approved(&state, "key_1", Scope::Plan));
        // An approval covers the steps waiting when it was given: a step
        // planned since is not approved, and the plan as a whole is not.
        let seq = state.last_seq + 1;
        state.apply(
            seq,
            &system(EventKind::StepPlanned {
                step: record("s6", 6, "t", json!({"n": 6})),
            }),
        );
        assert!(!is_approved(&state, "key_1", Scope::Plan));
        assert_eq!(
            may(&state, me),
            Ok(ApplySteps {
                run: ids(&["s1"]),
                not_approved: ids(&["s6"]),
            })
        );
    }

    /// Two waiting steps and an operator's yes to `approve` of them.
    fn approved_in_part(approve: &[&str]) -> KeyState {
        let mut state = KeyState::default();
        for (seq, id) in [(1, "a"), (2, "b"), (3, "c")] {
            state.apply(
                seq,
                &system(EventKind::StepPlanned {
                    step: record(id, u32::try_from(seq).unwrap_or(0), "t", json!({"id": id})),
                }),
            );
        }
        approve_steps(&mut state, 4, ids(approve));
        state
    }

    /// A person's yes to exactly `step_ids`, at the digest they have now,
    /// folded as event `seq`.
    fn approve_steps(state: &mut KeyState, seq: i64, step_ids: Vec<String>) {
        let digest = state.digest_of(&step_ids).unwrap_or_default();
        state.apply(
            seq,
            &event(
                EventKind::ReviewAnswered {
                    review_id: None,
                    verdict: Verdict::Approve,
                    plan_digest: digest,
                    feedback: None,
                    step_ids: Some(step_ids),
                    revision: None,
                },
                Actor::Operator { name: "ana".into() },
            ),
        );
    }

    #[test]
    fn a_failed_step_of_a_key_held_for_a_person_runs_again_only_after_a_new_yes() {
        // a and c approved by a person; the agent's apply runs both, and c
        // fails: its server answered an error, which does not prove that
        // nothing happened.
        let mut state = approved_in_part(&["a", "c"]);
        let mut seq = 4;
        let mut add = |state: &mut KeyState, kind: EventKind| {
            seq += 1;
            state.apply(seq, &system(kind));
        };
        add(
            &mut state,
            EventKind::ApplyStarted {
                apply_id: "x".into(),
                step_ids: ids(&["a", "c"]),
                plan_digest: None,
            },
        );
        for id in ["a", "c"] {
            add(
                &mut state,
                EventKind::StepStarted {
                    step_id: id.into(),
                    apply_id: "x".into(),
                    owner: "o".into(),
                    lease_until_ms: 9_000,
                },
            );
        }
        add(
            &mut state,
            EventKind::StepApplied {
                step_id: "a".into(),
                result: json!({}),
                copy_id: None,
                links: Vec::new(),
                snapshots: Vec::new(),
            },
        );
        add(
            &mut state,
            EventKind::StepFailed {
                step_id: "c".into(),
                error: crate::StepError {
                    code: crate::StepErrorCode::UpstreamError,
                    message: "disk full".into(),
                    upstream: None,
                },
            },
        );
        let agent = Applier::Key {
            id: "key_1",
            scope: Scope::Plan,
        };
        let again = ids(&["c"]);
        let covered = approved_steps(&state, "key_1", Scope::Plan);
        assert!(
            covered.is_empty(),
            "the yes was spent on the run: {covered:?}"
        );
        assert_eq!(
            apply_steps(&state, Selection::Named(&again), agent, &covered),
            Err(Refused::NotApproved {
                digest: state.plan_digest()
            })
        );
        // A person's apply is itself a new yes.
        assert_eq!(
            apply_steps(
                &state,
                Selection::Named(&again),
                Applier::Operator,
                &covered
            ),
            Ok(ApplySteps {
                run: again.clone(),
                not_approved: Vec::new(),
            })
        );
        // So is a person's new approval of the failed step.
        seq += 1;
        approve_steps(&mut state, seq, again.clone());
        let covered = approved_steps(&state, "key_1", Scope::Plan);
        assert_eq!(
            apply_steps(&state, Selection::Named(&again), agent, &covered),
            Ok(ApplySteps {
                run: again,
                not_approved: Vec::new(),
            })
        );
    }

    #[test]
    fn a_step_joins_a_plan_only_within_its_step_and_byte_caps() {
        let state = approved_in_part(&[]);
        let size: usize = state.open_steps().map(|s| s.record.size_bytes()).sum();
        assert!(size > 0);
        assert_eq!(room_for(&state, 10, None, 4, size + 10), Ok(()));
        assert_eq!(
            room_for(&state, 10, None, 3, usize::MAX),
            Err(Refused::PlanFull { max: 3 })
        );
        assert_eq!(
            room_for(&state, 11, None, 4, size + 10),
            Err(Refused::TooLarge {
                bytes: size + 11,
                max: size + 10
            })
        );
        // An amendment takes its step's place: no new step, and the old
        // record's bytes no longer count.
        let a = state.step("a").map_or(0, |s| s.record.size_bytes());
        assert_eq!(room_for(&state, a + 5, Some("a"), 3, size + 5), Ok(()));
        assert!(room_for(&state, a + 6, Some("a"), 3, size + 5).is_err());
        assert_eq!(
            Refused::TooLarge { bytes: 2, max: 1 }.code(),
            Code::TooLarge
        );
    }

    #[test]
    fn a_yes_to_some_steps_runs_those_and_reports_the_rest_not_approved() {
        let state = approved_in_part(&["c", "a"]);
        let covered = approved_steps(&state, "key_1", Scope::Plan);
        assert_eq!(covered, BTreeSet::from(["a", "c"]));
        assert!(!is_approved(&state, "key_1", Scope::Plan), "b is not");
        let partly = Ok(ApplySteps {
            run: ids(&["a", "c"]),
            not_approved: ids(&["b"]),
        });
        for applier in [
            Applier::Operator,
            Applier::Key {
                id: "key_1",
                scope: Scope::Write,
            },
            Applier::Key {
                id: "key_1",
                scope: Scope::Plan,
            },
        ] {
            assert_eq!(
                apply_steps(&state, Selection::Waiting, applier, &covered),
                partly,
                "{applier:?}"
            );
        }
        // Naming steps: an operator's or write key's act is the yes; a plan
        // key's named step still needs one.
        let named = ids(&["b"]);
        assert_eq!(
            apply_steps(
                &state,
                Selection::Named(&named),
                Applier::Operator,
                &covered
            ),
            Ok(ApplySteps {
                run: ids(&["b"]),
                not_approved: vec![]
            })
        );
        let plan_key = Applier::Key {
            id: "key_1",
            scope: Scope::Plan,
        };
        assert!(matches!(
            apply_steps(&state, Selection::Named(&named), plan_key, &covered),
            Err(Refused::NotApproved { .. })
        ));
        let both = ids(&["b", "a"]);
        assert_eq!(
            apply_steps(&state, Selection::Named(&both), plan_key, &covered),
            Ok(ApplySteps {
                run: ids(&["a"]),
                not_approved: ids(&["b"])
            })
        );
        // A rejected step leaves the plan; the others stay approved.
        let mut rejected = state.clone();
        rejected.apply(
            5,
            &event(
                EventKind::StepRejected {
                    step_id: "c".into(),
                    reason: "no".into(),
                },
                Actor::Operator { name: "ana".into() },
            ),
        );
        assert_eq!(
            apply_steps(
                &rejected,
                Selection::Waiting,
                plan_key,
                &approved_steps(&rejected, "key_1", Scope::Plan)
            ),
            Ok(ApplySteps {
                run: ids(&["a"]),
                not_approved: ids(&["b"])
            })
        );
        // A decline of the same digest by someone who counts withdraws it.
        let mut withdrawn = state.clone();
        let digest = withdrawn.reviews[0].plan_digest.clone();
        withdrawn.apply(
            5,
            &event(
                EventKind::ReviewAnswered {
                    review_id: None,
                    verdict: Verdict::Decline,
                    plan_digest: digest,
                    feedback: None,
                    step_ids: Some(ids(&["a", "c"])),
                    revision: None,
                },
                Actor::Operator { name: "ana".into() },
            ),
        );
        assert!(approved_steps(&withdrawn, "key_1", Scope::Plan).is_empty());
    }

    /// An apply whose claims hold until 5000, touched at `touched`.
    fn applying(touched: i64) -> KeyState {
        let mut state = KeyState::default();
        let events = [
            system(EventKind::StepPlanned {
                step: record("s1", 1, "t", json!({})),
            }),
            system(EventKind::StepPlanned {
                step: record("s2", 2, "t", json!({})),
            }),
            system(EventKind::ApplyStarted {
                apply_id: "a".into(),
                step_ids: vec!["s1".into(), "s2".into()],
                plan_digest: None,
            }),
            system(EventKind::StepStarted {
                step_id: "s1".into(),
                apply_id: "a".into(),
                owner: "o".into(),
                lease_until_ms: 5_000,
            }),
        ];
        for (i, mut e) in events.into_iter().enumerate() {
            e.at_ms = touched;
            state.apply(i as i64 + 1, &e);
        }
        state
    }

    #[test]
    fn a_live_apply_is_left_alone() {
        let state = applying(1_000);
        assert!(apply_alive(&state, 4_000, 10_000));
        assert_eq!(lease_cleanup(&state, 4_000, 10_000), vec![]);
    }

    #[test]
    fn a_claim_past_its_lease_is_in_doubt_and_a_dead_apply_finishes() {
        let state = applying(1_000);
        // The claim ran out at 5000; the apply was last touched at 1000.
        let kinds = lease_cleanup(&state, 20_000, 10_000);
        assert!(!apply_alive(&state, 20_000, 10_000));
        assert_eq!(kinds.len(), 2, "{kinds:?}");
        assert!(matches!(&kinds[0], EventKind::StepInDoubt { step_id, .. } if step_id == "s1"));
        assert!(matches!(&kinds[1], EventKind::ApplyFinished { apply_id, .. } if apply_id == "a"));
        // The waiting step s2 was never claimed: nothing happens to it.
        let mut after = state.clone();
        for (i, kind) in kinds.into_iter().enumerate() {
            after.apply(10 + i as i64, &system(kind));
        }
        assert_eq!(after.step("s1").unwrap().status, StepStatus::InDoubt);
        assert_eq!(after.step("s2").unwrap().status, StepStatus::Planned);
        assert!(after.applying.is_none());
        assert_eq!(lease_cleanup(&after, 20_000, 10_000), vec![]);
    }

    #[test]
    fn an_apply_alive_but_with_a_lapsed_claim_only_marks_the_claim() {
        let state = applying(4_000);
        let kinds = lease_cleanup(&state, 6_000, 10_000);
        assert_eq!(kinds.len(), 1);
        assert!(matches!(&kinds[0], EventKind::StepInDoubt { .. }));
    }

    // === locked modes ===

    fn operator() -> Actor {
        Actor::Operator { name: "ops".into() }
    }

    fn agent_event(kind: EventKind) -> Event {
        event(
            kind,
            Actor::Agent {
                key_id: "key_1".into(),
                key_name: "laptop".into(),
                scope: Some(Scope::Write),
            },
        )
    }

    fn fold(events: &[Event]) -> KeyState {
        KeyState::fold(events.iter().enumerate().map(|(i, e)| (i as i64 + 1, e)))
    }

    #[test]
    fn an_operator_lock_holds_its_mode_whatever_the_agent_set_after() {
        let modes = crate::Modes::default();
        let state = fold(&[
            event(
                EventKind::ModeSet {
                    mode: "plan".into(),
                },
                operator(),
            ),
            event(
                EventKind::ModeLocked {
                    mode: "plan".into(),
                },
                operator(),
            ),
            agent_event(EventKind::ModeSet {
                mode: "default".into(),
            }),
        ]);
        let in_force = modes.in_force(&state);
        assert_eq!(in_force.spec.name, "plan");
        assert_eq!(in_force.locked_by, Some(LockedBy::Operator));
        // Only a begin_session with the locked mode itself goes through.
        assert_eq!(
            may_change_mode(&in_force, ModeChange::Begin("plan")),
            Ok(())
        );
        for change in [
            ModeChange::Begin("default"),
            ModeChange::End,
            ModeChange::ExitPlanMode,
        ] {
            let refused = may_change_mode(&in_force, change).unwrap_err();
            assert_eq!(refused.code(), Code::ModeLocked, "{change:?}");
            assert!(refused.to_string().contains("only an operator can unlock"));
        }
        // A locked write key is held like a plan key for approvals.
        assert_eq!(approval_scope(Scope::Write, &in_force), Scope::Plan);
        assert_eq!(approval_scope(Scope::Read, &in_force), Scope::Read);
        // Unlocked, the agent's own mode_set is in force again.
        let mut unlocked = state.clone();
        unlocked.apply(10, &event(EventKind::ModeUnlocked, operator()));
        let in_force = modes.in_force(&unlocked);
        assert_eq!(in_force.spec.name, "default");
        assert!(!in_force.locked());
        assert_eq!(may_change_mode(&in_force, ModeChange::End), Ok(()));
        assert_eq!(approval_scope(Scope::Write, &in_force), Scope::Write);
    }

    #[test]
    fn the_configured_lock_holds_every_key_without_an_operator_word() {
        let modes = crate::Modes::default().with_default("plan", true);
        // A fresh key, and one whose agent set default before: both plan,
        // locked by config.
        for state in [
            KeyState::default(),
            fold(&[agent_event(EventKind::ModeSet {
                mode: "default".into(),
            })]),
        ] {
            let in_force = modes.in_force(&state);
            assert_eq!(in_force.spec.name, "plan");
            assert_eq!(in_force.locked_by, Some(LockedBy::Config));
        }
        // An operator's unlock frees the key from the configured lock.
        let state = fold(&[
            event(EventKind::ModeUnlocked, operator()),
            agent_event(EventKind::ModeSet {
                mode: "default".into(),
            }),
        ]);
        let in_force = modes.in_force(&state);
        assert_eq!(in_force.spec.name, "default");
        assert!(!in_force.locked());
        // A default mode without the lock is only where a key starts.
        let modes = crate::Modes::default().with_default("plan", false);
        assert_eq!(modes.in_force(&KeyState::default()).spec.name, "plan");
        assert!(!modes.in_force(&KeyState::default()).locked());
        let set = fold(&[agent_event(EventKind::ModeSet {
            mode: "default".into(),
        })]);
        assert_eq!(modes.in_force(&set).spec.name, "default");
    }

    #[test]
    fn a_review_is_answered_by_a_yes_a_no_or_nothing_left_waiting() {
        let asked = plan();
        let none = BTreeSet::new();
        assert_eq!(
            review_outcome(&asked, &asked, &none),
            None,
            "s1 still waits"
        );

        let yes = BTreeSet::from(["s1"]);
        let approved = review_outcome(&asked, &asked, &yes).unwrap();
        assert_eq!(approved.approved, vec!["s1".to_owned()]);
        assert_eq!((approved.waiting, approved.rejected.len()), (0, 0));

        let mut now = asked.clone();
        let no = event(
            EventKind::StepRejected {
                step_id: "s1".into(),
                reason: "not now".into(),
            },
            Actor::Operator { name: "ops".into() },
        );
        now.apply(100, &no);
        let rejected = review_outcome(&asked, &now, &none).unwrap();
        assert_eq!(rejected.rejected[0].step_id, "s1");
        assert_eq!(rejected.rejected[0].reason, "not now");
        assert_eq!(rejected.waiting, 0);
        // A no given before the review was asked is not this review's.
        assert_eq!(
            review_outcome(&now, &now, &none).map(|o| o.rejected.len()),
            Some(0)
        );
    }

    #[test]
    fn what_was_decided_so_far_counts_every_yes_and_no_and_nothing_else() {
        let asked = plan();
        let none = BTreeSet::new();
        assert_eq!(decided_so_far(&asked, &none), None, "nobody decided");
        let yes = BTreeSet::from(["s1"]);
        let approved = decided_so_far(&asked, &yes).unwrap();
        assert_eq!(approved.approved, vec!["s1".to_owned()]);
        let mut now = asked.clone();
        now.apply(
            100,
            &event(
                EventKind::StepRejected {
                    step_id: "s1".into(),
                    reason: "not now".into(),
                },
                Actor::Operator { name: "ops".into() },
            ),
        );
        let rejected = decided_so_far(&now, &none).unwrap();
        assert_eq!(rejected.rejected[0].reason, "not now");
        // Nothing left waiting is no decision of anyone's.
        assert_eq!(decided_so_far(&KeyState::default(), &none), None);
    }

    #[test]
    fn an_unanswered_ask_holds_the_plan_for_a_person() {
        let modes = crate::Modes::default();
        let state = plan();
        let in_force = modes.in_force(&state);
        assert_eq!(
            approval_scope_for(&state, Scope::Write, &in_force),
            Scope::Write
        );
        let mut asked = record("s9", 9, "t", json!({"n": 9}));
        asked.unanswered = Some("no answer within 120 s".into());
        let mut held = state.clone();
        held.apply(100, &system(EventKind::StepPlanned { step: asked }));
        assert_eq!(
            approval_scope_for(&held, Scope::Write, &in_force),
            Scope::Plan,
            "the agent's apply is not the yes its person never gave"
        );
        // Once the step is no longer open, the plan is the key's again.
        held.apply(
            101,
            &system(EventKind::StepsDiscarded {
                step_ids: vec!["s9".into()],
            }),
        );
        assert_eq!(
            approval_scope_for(&held, Scope::Write, &in_force),
            Scope::Write
        );
    }
}
