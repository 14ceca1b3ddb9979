//! Mode and plan as pure folds over one key's events (docs/design.md §4 "The
//! fold", §5 "Step statuses" and "Plan life", §6).
//!
//! The log is the only truth; [`KeyState`] is what it says. The store may
//! keep a `KeyState` as a projection for speed, but it must equal the fold:
//! applying events one by one ([`KeyState::apply`]) and folding them in one
//! go ([`KeyState::fold`]) run the same code, and the property tests below
//! hold them equal.
//!
//! [`KeyState::apply`] is total: an event that does not fit the state (an
//! unknown step, a step in the wrong status, a duplicate) changes nothing
//! but `last_seq`, and never panics. The log may hold such events — two
//! processes sharing a store may race — and the fold simply reads past them.
//!
//! # Rules
//!
//! * `mode_set`: the last one wins; none ⇒ `default` (or the configured
//!   `default_mode`: [`crate::Modes::in_force`] reads the state).
//! * `mode_locked` / `mode_unlocked`: the last one is the operator's word on
//!   the key's lock ([`ModeLock`]); while locked, the locked mode is in
//!   force whatever `mode_set` says.
//! * `session_begun` sets the session and (re)starts the plan's life at the
//!   event's time. The mode is set by the `mode_set` appended beside it.
//! * `step_planned` appends the step as `planned`. If no life is running,
//!   the life starts at this event. The position comes from the record
//!   (the gateway assigns [`KeyState::next_position`]); afterwards
//!   `next_position = max(next_position, position + 1)`. A step whose id is
//!   already known, or whose position is held by a step of the current plan,
//!   does not fit and is skipped, so positions in a plan are unique.
//! * **Positions** never renumber. When a new life starts (`session_begun`,
//!   or a step planned with no life running) while the plan has no open
//!   steps, positions restart: `next_position = 1`. So each fresh plan
//!   counts from 1, and a plan with steps still open keeps counting up.
//! * **Life** ends with `session_ended` or `plan_expired`, and also when,
//!   outside a session, the plan empties (its last open step is applied or
//!   discarded): the next step then starts a fresh life, so a plan made
//!   without a session lives from its first step, not from an earlier,
//!   finished one.
//! * `steps_discarded` / `session_ended`: named steps that are `planned`,
//!   `failed` or `in_doubt` become `discarded`; `session_ended` also clears
//!   the session and life (the gateway appends `mode_set default` apart).
//! * `plan_expired`: named `planned` steps become `expired`; the life ends;
//!   mode and session stay (expiry fails closed).
//! * `apply_started` records the running apply (a later one replaces it:
//!   the gateway appends one only when no other is alive); `apply_finished`
//!   clears it when the ids match.
//! * `step_started`: `planned` | `failed` → `running`, with apply, owner,
//!   lease and one more attempt. The same event for a step already running
//!   under the same apply and owner renews its lease.
//! * `step_applied` / `step_failed` / `step_in_doubt`: from `running` only.
//!   An in-doubt step keeps its reason as an `error` with code `in_doubt`.
//! * `step_retried`: `in_doubt` → `planned` (a person's explicit retry).
//! * `review_answered` is recorded in `reviews`; `review_requested` and
//!   `step_deduplicated` are kept in the log and change nothing here.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::digest::DigestMemo;
use crate::{
    Actor, Channel, Event, EventKind, JsonText, StepError, StepErrorCode, StepRecord, Verdict,
};

/// Where a step is in its life (docs/design.md §5 "Step statuses").
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    /// Waiting to be applied.
    Planned,
    /// Claimed by an apply; the upstream call may be under way.
    Running,
    /// The upstream answered with a result.
    Applied,
    /// The upstream answered with an error (or a fresh check failed);
    /// naming it in `apply_plan` runs it again.
    Failed,
    /// No definite answer was recorded; runs again only by a person's retry.
    InDoubt,
    /// The plan's life ran out while it waited.
    Expired,
    /// Dropped from the plan.
    Discarded,
    /// A person said no to it, with a reason: listed with the plan, never
    /// run, outside the digest.
    Rejected,
}

impl StepStatus {
    /// Whether the step is still part of the plan (`planned`, `running`,
    /// `failed`, `in_doubt`): what `get_plan` lists.
    pub fn is_open(self) -> bool {
        matches!(
            self,
            StepStatus::Planned
                | StepStatus::Running
                | StepStatus::Failed
                | StepStatus::InDoubt
                | StepStatus::Rejected
        )
    }

    /// The snake_case name used in answers and tables.
    pub fn as_str(self) -> &'static str {
        match self {
            StepStatus::Planned => "planned",
            StepStatus::Running => "running",
            StepStatus::Applied => "applied",
            StepStatus::Failed => "failed",
            StepStatus::InDoubt => "in_doubt",
            StepStatus::Expired => "expired",
            StepStatus::Discarded => "discarded",
            StepStatus::Rejected => "rejected",
        }
    }

    /// Whether docs/design.md §5 allows a step to move from `self` to `to`.
    pub fn can_become(self, to: StepStatus) -> bool {
        use StepStatus::*;
        matches!(
            (self, to),
            (Planned, Running | Expired | Discarded)
                | (Running, Applied | Failed | InDoubt)
                | (Failed, Running | Discarded)
                | (InDoubt, Planned | Discarded)
        )
    }
}

impl fmt::Display for StepStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A step as the log says it is now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Step {
    /// The step as planned.
    pub record: StepRecord,
    /// Where it is now.
    pub status: StepStatus,
    /// The apply that last claimed it.
    pub apply_id: Option<String>,
    /// The process holding (or that last held) its claim.
    pub owner: Option<String>,
    /// Until when the current claim holds.
    pub lease_until_ms: Option<i64>,
    /// The upstream result, once applied (as text: see [`JsonText`]).
    pub result: Option<JsonText>,
    /// The copy it landed on, once applied.
    pub copy_id: Option<String>,
    /// Links from the result, once applied.
    pub links: Vec<String>,
    /// Snapshots from the result, once applied.
    pub snapshots: Vec<String>,
    /// Why it failed or is in doubt.
    pub error: Option<StepError>,
    /// How many times it was claimed.
    pub attempts: u32,
    /// When its status last changed (or its lease was renewed).
    pub updated_at_ms: i64,
    /// Why a person rejected it, and who.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rejection: Option<Rejection>,
    /// The last time a person changed its arguments, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amendment: Option<Amendment>,
    /// The scope of the agent that planned it, when the event says (an
    /// OAuth identity's scope is its token's, so it can differ between
    /// steps of one plan): a step planned under `plan` keeps needing a
    /// person outside the plan's owner, whatever token applies it
    /// ([`crate::rules::approval_scope_for`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planned_scope: Option<crate::Scope>,
    /// Where in the key's log it was last claimed (`step_started` that
    /// set it running): an approval recorded before that was spent on
    /// that run, whatever the server answered ([`KeyState::approved_steps`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claimed_seq: Option<i64>,
}

/// A person's change to a waiting step's arguments (the last one).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Amendment {
    /// Who changed them (an operator's name, or a key's).
    pub by: String,
    /// When.
    pub at_ms: i64,
    /// How many times the step was amended.
    pub count: u32,
    /// The plan's revision this amendment made: a person who saw an
    /// earlier revision did not see it.
    pub revision: u64,
    /// Its redacted arguments before this change.
    pub previous_arguments: JsonText,
}

/// A person's no to one step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rejection {
    /// Their reason, verbatim.
    pub reason: String,
    /// Who said it (an operator's name, or a key's).
    pub by: String,
}

impl Step {
    fn new(record: StepRecord, at_ms: i64) -> Step {
        Step {
            record,
            status: StepStatus::Planned,
            apply_id: None,
            owner: None,
            lease_until_ms: None,
            result: None,
            copy_id: None,
            links: Vec::new(),
            snapshots: Vec::new(),
            error: None,
            attempts: 0,
            updated_at_ms: at_ms,
            rejection: None,
            amendment: None,
            planned_scope: None,
            claimed_seq: None,
        }
    }
}

/// One recorded answer to a review (docs/design.md §7 "Approval records").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Approval {
    /// The plan digest answered about.
    pub plan_digest: String,
    /// The answer.
    pub verdict: Verdict,
    /// Who answered; decides whether it counts for a `plan`-scope key.
    pub actor: Actor,
    /// Where the answer came from.
    pub channel: Channel,
    /// When.
    pub at_ms: i64,
    /// The question it answers, when it answered one: each question is
    /// answered at most once (a replayed answer is refused).
    #[serde(default)]
    pub review_id: Option<String>,
    /// The plan's revision the answer was given at, when recorded.
    #[serde(default)]
    pub revision: Option<u64>,
    /// The steps the answer is about: those it named, or — for an answer
    /// about the whole plan — the waiting steps when it was given, if
    /// its digest was the plan's then. `None`: an answer about a plan
    /// that had already moved on, which covers no step.
    #[serde(default)]
    pub step_ids: Option<Vec<String>>,
    /// Where in the key's log it was recorded: it covers a step only until
    /// the step's next run starts.
    #[serde(default)]
    pub seq: i64,
}

/// An operator's last word on a key's mode lock (`mode_locked` /
/// `mode_unlocked`). No word at all is `None` in [`KeyState::lock`], and
/// then `[gateway] default_mode_locked` decides.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum ModeLock {
    /// Locked at `mode`.
    Locked {
        /// The mode in force while locked.
        mode: String,
        /// Who locked it.
        by: Actor,
        /// When.
        at_ms: i64,
    },
    /// Unlocked: the agent sets its mode, and the config's lock does not
    /// apply to this key.
    Unlocked {
        /// Who unlocked it.
        by: Actor,
        /// When.
        at_ms: i64,
    },
}

/// Everything one key's log says: the mode in force and the plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KeyState {
    /// The seq of the last event folded (0 = none).
    pub last_seq: i64,
    /// The last `mode_set`; `None` ⇒ `default` (or the configured
    /// default mode).
    pub mode: Option<String>,
    /// The last `mode_locked` / `mode_unlocked`; `None` if there was none.
    #[serde(default)]
    pub lock: Option<ModeLock>,
    /// The session begun and not ended.
    pub session_id: Option<String>,
    /// When the plan's current life started; `None` while no life runs.
    pub life_started_at_ms: Option<i64>,
    /// Every step ever planned for the key, in planning order. Each step is
    /// shared, so copying a state (every read of the log hands one out) is
    /// a few pointer copies, and an event changes only the step it names.
    #[serde(with = "shared_steps")]
    pub steps: Vec<Arc<Step>>,
    /// The position the next planned step takes (see the module docs).
    pub next_position: u32,
    /// The apply started and not finished.
    pub applying: Option<String>,
    /// When that apply last showed life (its start, a claim, a lease
    /// renewal or an outcome of one of its steps): an apply silent for a
    /// whole lease is dead, and another may start.
    #[serde(default)]
    pub applying_touched_ms: Option<i64>,
    /// Every review answer, in order.
    pub reviews: Vec<Approval>,
    /// How many times the plan changed: a step planned, deduplicated,
    /// discarded or expired, or a step's status changed. Folded from the
    /// log like everything else, so every replica counts the same; a
    /// review records the revision it saw, and `plans diff` shows what
    /// changed since.
    #[serde(default)]
    pub revision: u64,
    /// The plan as the last review that recorded its revision saw it: what
    /// "changed since the last review" is measured against.
    #[serde(default)]
    pub reviewed: Option<ReviewedPlan>,
    /// The waiting steps' digest hash as last computed, shared by every
    /// copy of this state, so the next digest hashes only what was added
    /// ([`DigestMemo`]). Not state: skipped when serialised, always equal.
    #[serde(skip)]
    digest_memo: DigestMemo,
}

/// The plan as a person saw it when they answered a review: its revision,
/// digest, and each step as it was then.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReviewedPlan {
    /// The revision they saw.
    pub revision: u64,
    /// The plan's digest then (of every waiting step).
    pub plan_digest: String,
    /// Every step of the key then, as it was (shared with the fold: a
    /// snapshot costs a pointer per step).
    #[serde(with = "shared_steps")]
    pub steps: Vec<Arc<Step>>,
}

impl Default for KeyState {
    fn default() -> Self {
        KeyState {
            last_seq: 0,
            mode: None,
            lock: None,
            session_id: None,
            life_started_at_ms: None,
            steps: Vec::new(),
            next_position: 1,
            applying: None,
            applying_touched_ms: None,
            reviews: Vec::new(),
            revision: 0,
            reviewed: None,
            digest_memo: DigestMemo::default(),
        }
    }
}

/// Serialises `Vec<Arc<Step>>` as a plain list of steps.
mod shared_steps {
    use std::sync::Arc;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::Step;

    pub fn serialize<S: Serializer>(steps: &[Arc<Step>], s: S) -> Result<S::Ok, S::Error> {
        let plain: Vec<&Step> = steps.iter().map(|step| &**step).collect();
        plain.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Arc<Step>>, D::Error> {
        Ok(Vec::<Step>::deserialize(d)?
            .into_iter()
            .map(Arc::new)
            .collect())
    }
}

// === impl KeyState: the fold ===

impl KeyState {
    /// Folds a key's events, in seq order, from nothing.
    pub fn fold<'a>(events: impl IntoIterator<Item = (i64, &'a Event)>) -> KeyState {
        let mut state = KeyState::default();
        for (seq, event) in events {
            state.apply(seq, event);
        }
        state
    }

    /// Applies one event with its seq. Total: an event that does not fit
    /// changes nothing but `last_seq`.
    pub fn apply(&mut self, seq: i64, event: &Event) {
        if self.apply_kind(seq, event) {
            self.revision = self.revision.saturating_add(1);
        }
        self.touch_apply(event);
    }

    /// Notes life signs of the running apply (see `applying_touched_ms`).
    fn touch_apply(&mut self, event: &Event) {
        let Some(current) = self.applying.clone() else {
            self.applying_touched_ms = None;
            return;
        };
        let touches = match &event.kind {
            EventKind::ApplyStarted { apply_id, .. } | EventKind::StepStarted { apply_id, .. } => {
                *apply_id == current
            }
            EventKind::StepApplied { step_id, .. }
            | EventKind::StepFailed { step_id, .. }
            | EventKind::StepInDoubt { step_id, .. } => self
                .step(step_id)
                .is_some_and(|s| s.apply_id.as_deref() == Some(current.as_str())),
            _ => false,
        };
        if touches {
            self.applying_touched_ms = Some(event.at_ms);
        }
    }

    /// Folds one event; true if it changed the plan (see
    /// [`KeyState::revision`]).
    fn apply_kind(&mut self, seq: i64, event: &Event) -> bool {
        self.last_seq = seq;
        let at = event.at_ms;
        let changed = match &event.kind {
            EventKind::ModeSet { mode } => {
                self.mode = Some(mode.clone());
                false
            }
            EventKind::ModeLocked { mode } => {
                self.lock = Some(ModeLock::Locked {
                    mode: mode.clone(),
                    by: event.actor.clone(),
                    at_ms: at,
                });
                false
            }
            EventKind::ModeUnlocked => {
                self.lock = Some(ModeLock::Unlocked {
                    by: event.actor.clone(),
                    at_ms: at,
                });
                false
            }
            EventKind::SessionBegun { session_id, .. } => {
                self.session_id = Some(session_id.clone());
                self.start_life(at);
                false
            }
            EventKind::StepPlanned { step } => {
                let scope = match &event.actor {
                    Actor::Agent { scope, .. } => *scope,
                    _ => None,
                };
                self.plan_step(step, at, scope)
            }
            // The agent asked for the same waiting write again: a reviewer
            // hears of it, though the step is as it was.
            EventKind::StepDeduplicated { step_id } => self
                .step(step_id)
                .is_some_and(|s| s.status == StepStatus::Planned),
            EventKind::ReviewRequested { .. } | EventKind::CallRecorded { .. } => false,
            // Tool pins live in their own log ([`crate::TOOLS_LOG`]).
            EventKind::ToolsPinned { .. }
            | EventKind::ToolQuarantined { .. }
            | EventKind::ToolAccepted { .. }
            | EventKind::ToolRejected { .. } => false,
            EventKind::StepsDiscarded { step_ids } => self.discard(step_ids, at),
            EventKind::StepRejected { step_id, reason } => match self.step_mut(step_id) {
                Some(step) if step.status == StepStatus::Planned => {
                    step.status = StepStatus::Rejected;
                    step.rejection = Some(Rejection {
                        reason: reason.clone(),
                        by: event.actor.label(),
                    });
                    step.updated_at_ms = at;
                    true
                }
                _ => false,
            },
            EventKind::StepAmended {
                step: amended,
                previous_arguments,
            } => match (
                self.revision.saturating_add(1),
                self.step_mut(&amended.step_id),
            ) {
                (next_revision, Some(step)) if step.status == StepStatus::Planned => {
                    // The step keeps its place and age whatever the record says.
                    let mut record = amended.clone();
                    record.position = step.record.position;
                    record.planned_at_ms = step.record.planned_at_ms;
                    step.record = record;
                    step.amendment = Some(Amendment {
                        by: event.actor.label(),
                        at_ms: at,
                        count: step
                            .amendment
                            .as_ref()
                            .map_or(1, |a| a.count.saturating_add(1)),
                        revision: next_revision,
                        previous_arguments: previous_arguments.clone(),
                    });
                    step.updated_at_ms = at;
                    true
                }
                _ => false,
            },
            EventKind::ReviewAnswered {
                verdict,
                plan_digest,
                review_id,
                revision,
                step_ids,
                ..
            } => {
                // An answer about the whole plan covers the steps waiting
                // then, so a step planned later is not approved by it.
                let step_ids = step_ids.clone().or_else(|| {
                    (self.plan_digest() == *plan_digest).then(|| {
                        self.planned_steps()
                            .map(|s| s.record.step_id.clone())
                            .collect()
                    })
                });
                self.reviews.push(Approval {
                    step_ids,
                    plan_digest: plan_digest.clone(),
                    verdict: *verdict,
                    actor: event.actor.clone(),
                    channel: event.channel,
                    at_ms: at,
                    review_id: review_id.clone(),
                    revision: *revision,
                    seq,
                });
                if *revision == Some(self.revision) {
                    self.reviewed = Some(ReviewedPlan {
                        revision: self.revision,
                        plan_digest: self.plan_digest(),
                        steps: self.steps.clone(),
                    });
                }
                false
            }
            EventKind::ApplyStarted { apply_id, .. } => {
                self.applying = Some(apply_id.clone());
                false
            }
            EventKind::ApplyFinished { apply_id, .. } => {
                if self.applying.as_ref() == Some(apply_id) {
                    self.applying = None;
                }
                false
            }
            EventKind::StepStarted {
                step_id,
                apply_id,
                owner,
                lease_until_ms,
            } => {
                let Some(step) = self.step_mut(step_id) else {
                    return false;
                };
                match step.status {
                    StepStatus::Planned | StepStatus::Failed => {
                        step.status = StepStatus::Running;
                        step.claimed_seq = Some(seq);
                        step.apply_id = Some(apply_id.clone());
                        step.owner = Some(owner.clone());
                        step.lease_until_ms = Some(*lease_until_ms);
                        step.attempts = step.attempts.saturating_add(1);
                        step.error = None;
                        step.updated_at_ms = at;
                        true
                    }
                    // A lease renewed: the plan is as it was.
                    StepStatus::Running
                        if step.apply_id.as_ref() == Some(apply_id)
                            && step.owner.as_ref() == Some(owner) =>
                    {
                        step.lease_until_ms = Some(*lease_until_ms);
                        step.updated_at_ms = at;
                        false
                    }
                    _ => false,
                }
            }
            EventKind::StepApplied {
                step_id,
                result,
                copy_id,
                links,
                snapshots,
            } => match self.running_step_mut(step_id) {
                Some(step) => {
                    step.status = StepStatus::Applied;
                    step.result = Some(JsonText::from_value(result));
                    step.copy_id = copy_id.clone();
                    step.links = links.clone();
                    step.snapshots = snapshots.clone();
                    step.lease_until_ms = None;
                    step.updated_at_ms = at;
                    true
                }
                None => false,
            },
            EventKind::StepFailed { step_id, error } => match self.running_step_mut(step_id) {
                Some(step) => {
                    step.status = StepStatus::Failed;
                    step.error = Some(error.clone());
                    step.lease_until_ms = None;
                    step.updated_at_ms = at;
                    true
                }
                None => false,
            },
            EventKind::StepInDoubt { step_id, reason } => match self.running_step_mut(step_id) {
                Some(step) => {
                    step.status = StepStatus::InDoubt;
                    step.error = Some(StepError {
                        code: StepErrorCode::InDoubt,
                        message: reason.clone(),
                        upstream: None,
                    });
                    step.lease_until_ms = None;
                    step.updated_at_ms = at;
                    true
                }
                None => false,
            },
            EventKind::StepRetried { step_id } => match self.step_mut(step_id) {
                Some(step) if step.status == StepStatus::InDoubt => {
                    step.status = StepStatus::Planned;
                    step.error = None;
                    step.owner = None;
                    step.lease_until_ms = None;
                    step.updated_at_ms = at;
                    true
                }
                _ => false,
            },
            EventKind::SessionEnded { discarded } => {
                let changed = self.discard(discarded, at);
                self.session_id = None;
                self.life_started_at_ms = None;
                changed
            }
            EventKind::PlanExpired { step_ids } => {
                let mut changed = false;
                for id in step_ids {
                    if let Some(step) = self.step_mut(id)
                        && matches!(step.status, StepStatus::Planned | StepStatus::Rejected)
                    {
                        step.status = StepStatus::Expired;
                        step.updated_at_ms = at;
                        changed = true;
                    }
                }
                self.life_started_at_ms = None;
                changed
            }
        };
        // Outside a session, a plan that emptied has no life left.
        if self.session_id.is_none() && !self.has_open_steps() {
            self.life_started_at_ms = None;
        }
        changed
    }

    fn has_open_steps(&self) -> bool {
        self.steps.iter().any(|s| s.status.is_open())
    }

    /// (Re)starts the plan's life; a fresh plan counts positions from 1.
    fn start_life(&mut self, at: i64) {
        if !self.has_open_steps() {
            self.next_position = 1;
        }
        self.life_started_at_ms = Some(at);
    }

    fn plan_step(&mut self, record: &StepRecord, at: i64, scope: Option<crate::Scope>) -> bool {
        let known = self
            .steps
            .iter()
            .any(|s| s.record.step_id == record.step_id);
        let position_taken = self
            .steps
            .iter()
            .any(|s| s.status.is_open() && s.record.position == record.position);
        if known || position_taken {
            return false;
        }
        if self.life_started_at_ms.is_none() {
            self.start_life(at);
        }
        self.next_position = self.next_position.max(record.position.saturating_add(1));
        let mut step = Step::new(record.clone(), at);
        step.planned_scope = scope;
        self.steps.push(Arc::new(step));
        true
    }

    fn discard(&mut self, step_ids: &[String], at: i64) -> bool {
        let mut changed = false;
        for id in step_ids {
            if let Some(step) = self.step_mut(id)
                && matches!(
                    step.status,
                    StepStatus::Planned
                        | StepStatus::Failed
                        | StepStatus::InDoubt
                        | StepStatus::Rejected
                )
            {
                step.status = StepStatus::Discarded;
                step.updated_at_ms = at;
                changed = true;
            }
        }
        changed
    }

    fn step_mut(&mut self, step_id: &str) -> Option<&mut Step> {
        self.steps
            .iter_mut()
            .find(|s| s.record.step_id == step_id)
            .map(Arc::make_mut)
    }

    fn running_step_mut(&mut self, step_id: &str) -> Option<&mut Step> {
        self.step_mut(step_id)
            .filter(|s| s.status == StepStatus::Running)
    }
}

// === impl KeyState: reading the plan ===

impl KeyState {
    /// The plan: steps `planned`, `running`, `failed` or `in_doubt`, in
    /// position order.
    pub fn open_steps(&self) -> impl Iterator<Item = &Step> {
        self.steps_where(|s| s.status.is_open())
    }

    /// The steps waiting to be applied, in position order: what the plan
    /// digest covers and what `apply_plan` runs by default.
    pub fn planned_steps(&self) -> impl Iterator<Item = &Step> {
        self.steps_where(|s| s.status == StepStatus::Planned)
    }

    fn steps_where(&self, keep: impl Fn(&Step) -> bool) -> std::vec::IntoIter<&Step> {
        let mut steps: Vec<&Step> = self
            .steps
            .iter()
            .map(|s| &**s)
            .filter(|s| keep(s))
            .collect();
        steps.sort_by_key(|s| s.record.position);
        steps.into_iter()
    }

    /// Any step ever planned for the key, by id.
    pub fn step(&self, step_id: &str) -> Option<&Step> {
        self.steps
            .iter()
            .map(|s| &**s)
            .find(|s| s.record.step_id == step_id)
    }

    /// The digest of the planned steps ([`crate::plan_digest`]).
    ///
    /// Equal to that function's answer always, but extends the hash kept
    /// from the last time when the plan only grew at its end.
    pub fn plan_digest(&self) -> String {
        let mut planned: Vec<&Arc<Step>> = self
            .steps
            .iter()
            .filter(|s| s.status == StepStatus::Planned)
            .collect();
        planned.sort_by(|a, b| crate::digest::digest_order(&a.record, &b.record));
        self.digest_memo.plan_digest(&planned)
    }

    /// The planned step with this fingerprint: sending the same write again
    /// answers it (`deduplicated: true`) instead of growing the plan.
    pub fn find_planned_duplicate(&self, fingerprint: &str) -> Option<&Step> {
        self.planned_steps()
            .find(|s| s.record.fingerprint == fingerprint)
    }

    /// When the plan's life ends (`life_started_at_ms + ttl_ms`), while a
    /// life is running.
    pub fn expires_at_ms(&self, ttl_ms: i64) -> Option<i64> {
        self.life_started_at_ms.map(|t| t.saturating_add(ttl_ms))
    }

    /// The revision a person answering about the plan `digest` saw: the
    /// current one while the digest is the plan's; `None` once the plan
    /// moved on (what they saw is then not known).
    pub fn revision_seen(&self, digest: &str) -> Option<u64> {
        (self.plan_digest() == digest).then_some(self.revision)
    }

    /// Whether the question `review_id` was already answered.
    pub fn is_answered(&self, review_id: &str) -> bool {
        self.reviews
            .iter()
            .any(|a| a.review_id.as_deref() == Some(review_id))
    }

    /// The digest of exactly the steps `ids` (docs/design.md §5 form, in position
    /// order), whatever their status now; `None` if one is not in the
    /// key's log. An approval of some steps binds this digest.
    pub fn digest_of(&self, ids: &[String]) -> Option<String> {
        let records: Option<Vec<&StepRecord>> = ids
            .iter()
            .map(|id| self.step(id).map(|s| &s.record))
            .collect();
        Some(crate::plan_digest(records?))
    }

    /// The steps covered by a valid approval that `counts` accepts (for a
    /// `plan`-scope key, only operators' and `write` keys'). An approval
    /// is valid while the steps it names are unchanged — the digest of
    /// those steps is still the one approved — whatever else in the plan
    /// changed; a later answer about the same digest by someone who
    /// counts decides (a decline withdraws it). A step covered here runs
    /// only while it is waiting (or failed, when named). An approval is
    /// spent on a step's run: once the step was claimed after it, it no
    /// longer covers that step — a failed step whose server answered an
    /// error may have done something, so running it again needs a new
    /// yes.
    pub fn approved_steps(&self, counts: impl Fn(&Approval) -> bool) -> BTreeSet<&str> {
        let mut decided: Vec<&str> = Vec::new();
        let mut covered = BTreeSet::new();
        for a in self.reviews.iter().rev().filter(|a| counts(a)) {
            if decided.contains(&a.plan_digest.as_str()) {
                continue;
            }
            decided.push(&a.plan_digest);
            let Some(ids) = a.step_ids.as_deref().filter(|ids| !ids.is_empty()) else {
                continue;
            };
            if a.verdict == Verdict::Approve
                && self.digest_of(ids).as_deref() == Some(a.plan_digest.as_str())
            {
                covered.extend(
                    ids.iter()
                        .filter_map(|id| self.step(id))
                        .filter(|s| s.claimed_seq.is_none_or(|claimed| claimed < a.seq))
                        .map(|s| s.record.step_id.as_str()),
                );
            }
        }
        covered
    }

    /// Whether every waiting step is covered by a valid approval that
    /// `counts` accepts (and at least one step waits): `get_plan`'s
    /// `approved`.
    pub fn is_approved(&self, counts: impl Fn(&Approval) -> bool) -> bool {
        self.covers_waiting(&self.approved_steps(counts))
    }

    /// Whether `covered` (from [`KeyState::approved_steps`]) holds every
    /// waiting step, and at least one step waits.
    pub fn covers_waiting(&self, covered: &BTreeSet<&str>) -> bool {
        let mut waiting = self.planned_steps().peekable();
        waiting.peek().is_some() && waiting.all(|s| covered.contains(s.record.step_id.as_str()))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;
    use serde_json::json;

    use super::*;
    use crate::event::tests::record;

    pub(crate) fn ev(at_ms: i64, kind: EventKind) -> Event {
        Event {
            at_ms,
            key_id: "key_1".into(),
            actor: Actor::Agent {
                key_id: "key_1".into(),
                key_name: "laptop".into(),
                scope: None,
            },
            channel: Channel::Http,
            kind,
        }
    }

    pub(crate) fn planned(id: &str, position: u32) -> EventKind {
        EventKind::StepPlanned {
            step: record(id, position, &format!("tool_{id}"), json!({"id": id})),
        }
    }

    pub(crate) fn started(id: &str, apply: &str) -> EventKind {
        EventKind::StepStarted {
            step_id: id.into(),
            apply_id: apply.into(),
            owner: "p1".into(),
            lease_until_ms: 99,
        }
    }

    fn fold_kinds(kinds: Vec<EventKind>) -> KeyState {
        let events: Vec<Event> = kinds
            .into_iter()
            .enumerate()
            .map(|(i, k)| ev(i as i64 * 10, k))
            .collect();
        KeyState::fold(events.iter().enumerate().map(|(i, e)| (i as i64 + 1, e)))
    }

    fn statuses(state: &KeyState) -> Vec<(&str, StepStatus)> {
        state
            .steps
            .iter()
            .map(|s| (s.record.step_id.as_str(), s.status))
            .collect()
    }

    #[test]
    fn the_plan_digest_follows_growth_amendment_and_discard() {
        let full = |s: &KeyState| crate::plan_digest(s.planned_steps().map(|s| &s.record));
        let mut state = KeyState::default();
        let mut seq = 0;
        let mut step = |state: &mut KeyState, kind: EventKind| {
            seq += 1;
            state.apply(seq, &ev(seq * 10, kind));
            let digest = state.plan_digest();
            assert_eq!(digest, full(state), "after event {seq}");
            digest
        };
        let empty = state.plan_digest();
        assert_eq!(empty, full(&state));
        let one = step(&mut state, planned("a", 1));
        let two = step(&mut state, planned("b", 2));
        assert_ne!(one, two);
        let before = state.clone();
        step(&mut state, planned("c", 3));
        // The older copy shares the kept hash and still answers its own plan.
        assert_eq!(before.plan_digest(), two);
        // A waiting step amended in the middle: same id and position,
        // different arguments, so a different digest.
        let mut amended = record("b", 2, "tool_b", json!({"id": "b", "x": 1}));
        amended.fingerprint = "fp-amended".into();
        let three = state.plan_digest();
        let after_amend = step(
            &mut state,
            EventKind::StepAmended {
                step: amended,
                previous_arguments: JsonText::from_value(&json!({"id": "b"})),
            },
        );
        assert_ne!(after_amend, three);
        step(
            &mut state,
            EventKind::StepsDiscarded {
                step_ids: vec!["a".into()],
            },
        );
        step(&mut state, planned("d", 4));
        step(
            &mut state,
            EventKind::StepsDiscarded {
                step_ids: vec!["b".into(), "c".into(), "d".into()],
            },
        );
        assert_eq!(state.plan_digest(), empty);
        // A state read back from JSON starts with nothing kept.
        let stored: KeyState =
            serde_json::from_str(&serde_json::to_string(&state).unwrap()).unwrap();
        assert_eq!(stored.plan_digest(), empty);
    }

    #[test]
    fn the_last_mode_set_wins_and_none_means_default() {
        assert_eq!(KeyState::default().mode, None);
        let s = fold_kinds(vec![
            EventKind::ModeSet {
                mode: "plan".into(),
            },
            EventKind::ModeSet {
                mode: "careful".into(),
            },
        ]);
        assert_eq!(s.mode.as_deref(), Some("careful"));
        assert_eq!(s.last_seq, 2);
    }

    #[test]
    fn a_step_goes_planned_running_applied_and_leaves_the_plan() {
        let s = fold_kinds(vec![
            planned("a", 1),
            EventKind::ApplyStarted {
                apply_id: "x".into(),
                step_ids: vec!["a".into()],
                plan_digest: None,
            },
            started("a", "x"),
            EventKind::StepApplied {
                step_id: "a".into(),
                result: json!({"ok": true}),
                copy_id: Some("187".into()),
                links: vec!["l".into()],
                snapshots: vec![],
            },
            EventKind::ApplyFinished {
                apply_id: "x".into(),
                applied: 1,
                failed: 0,
                in_doubt: 0,
                not_run: 0,
            },
        ]);
        let a = s.step("a").unwrap();
        assert_eq!(a.status, StepStatus::Applied);
        assert_eq!(a.attempts, 1);
        assert_eq!(a.copy_id.as_deref(), Some("187"));
        assert_eq!(
            a.result.as_ref().map(JsonText::value),
            Some(json!({"ok": true}))
        );
        assert_eq!(s.open_steps().count(), 0);
        assert_eq!(s.applying, None);
        assert_eq!(s.life_started_at_ms, None, "an emptied plan has no life");
    }

    #[test]
    fn a_failed_step_runs_again_and_an_in_doubt_one_only_after_a_retry() {
        let fail = EventKind::StepFailed {
            step_id: "a".into(),
            error: StepError {
                code: StepErrorCode::UpstreamError,
                message: "boom".into(),
                upstream: None,
            },
        };
        let doubt = EventKind::StepInDoubt {
            step_id: "b".into(),
            reason: "lease expired".into(),
        };
        let s = fold_kinds(vec![
            planned("a", 1),
            planned("b", 2),
            started("a", "x"),
            fail,
            started("b", "x"),
            doubt,
            started("a", "y"),
            started("b", "y"), // in doubt: does not fit
        ]);
        assert_eq!(
            statuses(&s),
            [("a", StepStatus::Running), ("b", StepStatus::InDoubt)]
        );
        assert_eq!(s.step("a").unwrap().attempts, 2);
        assert_eq!(s.step("a").unwrap().error, None);
        let b = s.step("b").unwrap();
        assert_eq!(b.error.as_ref().unwrap().code, StepErrorCode::InDoubt);
        assert_eq!(b.error.as_ref().unwrap().message, "lease expired");
        let mut s2 = s.clone();
        s2.apply(
            100,
            &ev(
                500,
                EventKind::StepRetried {
                    step_id: "b".into(),
                },
            ),
        );
        assert_eq!(s2.step("b").unwrap().status, StepStatus::Planned);
    }

    #[test]
    fn the_same_apply_and_owner_renew_a_running_lease() {
        let mut s = fold_kinds(vec![planned("a", 1), started("a", "x")]);
        s.apply(
            9,
            &ev(
                70,
                EventKind::StepStarted {
                    step_id: "a".into(),
                    apply_id: "x".into(),
                    owner: "p1".into(),
                    lease_until_ms: 500,
                },
            ),
        );
        let a = s.step("a").unwrap();
        assert_eq!((a.lease_until_ms, a.attempts), (Some(500), 1));
        let mut other = s.clone();
        other.apply(
            10,
            &ev(
                80,
                EventKind::StepStarted {
                    step_id: "a".into(),
                    apply_id: "z".into(),
                    owner: "p2".into(),
                    lease_until_ms: 900,
                },
            ),
        );
        assert_eq!(other.steps, s.steps, "another apply cannot steal a claim");
    }

    #[test]
    fn discard_touches_waiting_failed_and_in_doubt_steps_only() {
        let s = fold_kinds(vec![
            planned("a", 1),
            planned("b", 2),
            planned("c", 3),
            started("b", "x"),
            EventKind::StepsDiscarded {
                step_ids: vec!["a".into(), "b".into(), "nope".into()],
            },
        ]);
        assert_eq!(
            statuses(&s),
            [
                ("a", StepStatus::Discarded),
                ("b", StepStatus::Running),
                ("c", StepStatus::Planned)
            ]
        );
        let ids: Vec<_> = s.open_steps().map(|s| s.record.step_id.as_str()).collect();
        assert_eq!(ids, ["b", "c"]);
        let ids: Vec<_> = s
            .planned_steps()
            .map(|s| s.record.step_id.as_str())
            .collect();
        assert_eq!(ids, ["c"]);
    }

    #[test]
    fn expiry_expires_waiting_steps_and_keeps_mode_and_session() {
        let s = fold_kinds(vec![
            EventKind::ModeSet {
                mode: "plan".into(),
            },
            EventKind::SessionBegun {
                session_id: "ses".into(),
                mode: "plan".into(),
            },
            planned("a", 1),
            planned("b", 2),
            started("b", "x"),
            EventKind::PlanExpired {
                step_ids: vec!["a".into(), "b".into()],
            },
        ]);
        assert_eq!(
            statuses(&s),
            [("a", StepStatus::Expired), ("b", StepStatus::Running)]
        );
        assert_eq!(s.mode.as_deref(), Some("plan"));
        assert_eq!(s.session_id.as_deref(), Some("ses"));
        assert_eq!(s.life_started_at_ms, None);
        assert_eq!(s.expires_at_ms(1000), None);
    }

    #[test]
    fn the_plan_lives_from_the_last_begin_session_or_its_first_step() {
        let s = fold_kinds(vec![planned("a", 1), planned("b", 2)]);
        assert_eq!(s.life_started_at_ms, Some(0));
        assert_eq!(s.expires_at_ms(4 * 3_600_000), Some(4 * 3_600_000));
        let s = fold_kinds(vec![
            planned("a", 1),
            EventKind::SessionBegun {
                session_id: "s".into(),
                mode: "plan".into(),
            },
            planned("b", 2),
        ]);
        assert_eq!(s.life_started_at_ms, Some(10));
    }

    #[test]
    fn positions_never_renumber_and_restart_at_one_for_a_fresh_plan() {
        let s = fold_kinds(vec![
            planned("a", 1),
            planned("b", 2),
            EventKind::StepsDiscarded {
                step_ids: vec!["a".into()],
            },
        ]);
        assert_eq!(s.step("b").unwrap().record.position, 2);
        assert_eq!(s.next_position, 3, "a plan with open steps counts on");
        let s = fold_kinds(vec![
            planned("a", 1),
            planned("b", 2),
            EventKind::StepsDiscarded {
                step_ids: vec!["a".into(), "b".into()],
            },
            planned("c", 1),
        ]);
        assert_eq!(s.open_steps().count(), 1);
        assert_eq!(s.next_position, 2, "a fresh plan counts from 1");
        let s = fold_kinds(vec![
            planned("a", 1),
            EventKind::SessionEnded {
                discarded: vec!["a".into()],
            },
            EventKind::SessionBegun {
                session_id: "s2".into(),
                mode: "plan".into(),
            },
        ]);
        assert_eq!((s.next_position, s.session_id.as_deref()), (1, Some("s2")));
    }

    #[test]
    fn events_that_do_not_fit_change_nothing_but_last_seq() {
        let base = fold_kinds(vec![planned("a", 1)]);
        for kind in [
            planned("a", 5),      // known id
            planned("z", 1),      // position held by an open step
            started("nope", "x"), // unknown step
            EventKind::StepApplied {
                // not running
                step_id: "a".into(),
                result: json!(null),
                copy_id: None,
                links: vec![],
                snapshots: vec![],
            },
            EventKind::StepRetried {
                step_id: "a".into(),
            }, // not in doubt
            EventKind::ApplyFinished {
                apply_id: "never".into(),
                applied: 0,
                failed: 0,
                in_doubt: 0,
                not_run: 0,
            },
            EventKind::StepDeduplicated {
                step_id: "nope".into(),
            },
            EventKind::ReviewRequested {
                review_id: "r".into(),
                plan_digest: "d".into(),
            },
        ] {
            let mut s = base.clone();
            s.apply(42, &ev(999, kind.clone()));
            let mut expect = base.clone();
            expect.last_seq = 42;
            assert_eq!(s, expect, "{}", kind.name());
        }
        // The same waiting write again changes no step, but the plan's
        // revision moves: a reviewer hears the agent asked again.
        let mut s = base.clone();
        s.apply(
            42,
            &ev(
                999,
                EventKind::StepDeduplicated {
                    step_id: "a".into(),
                },
            ),
        );
        assert_eq!(
            (s.steps.clone(), s.revision),
            (base.steps.clone(), base.revision + 1)
        );
    }

    #[test]
    fn dedup_finds_only_planned_steps_by_fingerprint() {
        let s = fold_kinds(vec![planned("a", 1), planned("b", 2), started("b", "x")]);
        let fp_a = s.step("a").unwrap().record.fingerprint.clone();
        let fp_b = s.step("b").unwrap().record.fingerprint.clone();
        assert_eq!(s.find_planned_duplicate(&fp_a).unwrap().record.step_id, "a");
        assert!(s.find_planned_duplicate(&fp_b).is_none());
    }

    #[test]
    fn the_plan_digest_covers_planned_steps_only() {
        let s = fold_kinds(vec![planned("a", 1), planned("b", 2)]);
        let both = s.plan_digest();
        assert_eq!(
            both,
            crate::plan_digest([&s.steps[0].record, &s.steps[1].record])
        );
        let mut s2 = s.clone();
        s2.apply(3, &ev(30, started("b", "x")));
        assert_eq!(s2.plan_digest(), crate::plan_digest([&s.steps[0].record]));
    }

    #[test]
    fn approval_counts_only_answers_accepted_and_the_latest_wins() {
        let operator = Actor::Operator { name: "ana".into() };
        let answer = |verdict, actor: Actor, digest: &str| Event {
            at_ms: 1,
            key_id: "key_1".into(),
            actor,
            channel: Channel::Cli,
            kind: EventKind::ReviewAnswered {
                review_id: None,
                verdict,
                plan_digest: digest.into(),
                feedback: None,
                step_ids: None,
                revision: None,
            },
        };
        let agent = Actor::Agent {
            key_id: "key_1".into(),
            key_name: "laptop".into(),
            scope: None,
        };
        let only_operators = |a: &Approval| matches!(a.actor, Actor::Operator { .. });
        let mut s = KeyState::default();
        s.apply(1, &ev(10, planned("a", 1)));
        let d1 = s.plan_digest();
        s.apply(2, &answer(Verdict::Approve, agent.clone(), &d1));
        assert!(s.is_approved(|_| true));
        assert!(
            !s.is_approved(only_operators),
            "its own client does not count"
        );
        s.apply(3, &answer(Verdict::Approve, operator.clone(), &d1));
        assert!(s.is_approved(only_operators));
        let mut other = s.clone();
        other.apply(4, &answer(Verdict::Approve, operator.clone(), "sha256:00"));
        assert!(
            other.reviews[2].step_ids.is_none(),
            "an answer about another digest covers no step"
        );
        s.apply(4, &answer(Verdict::Decline, agent, &d1));
        assert!(
            s.is_approved(only_operators),
            "a non-counting answer changes nothing"
        );
        s.apply(5, &answer(Verdict::Decline, operator, &d1));
        assert!(!s.is_approved(only_operators), "withdrawn");
        assert_eq!(s.reviews.len(), 4);
        assert_eq!(s.reviews[1].channel, Channel::Cli);
        assert_eq!(s.reviews[1].step_ids, Some(vec!["a".to_owned()]));
    }

    // === property tests ===

    const IDS: [&str; 5] = ["s1", "s2", "s3", "s4", "s5"];

    fn id() -> impl Strategy<Value = String> {
        prop::sample::select(IDS.to_vec()).prop_map(str::to_owned)
    }

    fn ids() -> impl Strategy<Value = Vec<String>> {
        prop::collection::vec(id(), 0..3)
    }

    fn apply_id() -> impl Strategy<Value = String> {
        prop::sample::select(vec!["x", "y"]).prop_map(str::to_owned)
    }

    fn any_kind() -> impl Strategy<Value = EventKind> {
        prop_oneof![
            1 => prop::sample::select(vec!["default", "plan", "careful"])
                .prop_map(|m| EventKind::ModeSet { mode: m.into() }),
            1 => Just(EventKind::SessionBegun {
                session_id: "ses".into(),
                mode: "plan".into()
            }),
            3 => (id(), 1u32..6, prop::sample::select(vec!["t", "u"])).prop_map(|(id, pos, tool)| {
                EventKind::StepPlanned {
                    step: record(&id, pos, tool, json!({"n": pos, "token": id})),
                }
            }),
            1 => id().prop_map(|step_id| EventKind::StepDeduplicated { step_id }),
            1 => ids().prop_map(|step_ids| EventKind::StepsDiscarded { step_ids }),
            1 => (any::<bool>(), prop::sample::select(vec!["d1", "d2"])).prop_map(|(yes, d)| {
                EventKind::ReviewAnswered {
                    review_id: None,
                    verdict: if yes { Verdict::Approve } else { Verdict::Decline },
                    plan_digest: d.into(),
                    feedback: None,
                    step_ids: None,
                    revision: None,
                }
            }),
            1 => (apply_id(), ids()).prop_map(|(apply_id, step_ids)| EventKind::ApplyStarted {
                apply_id,
                step_ids,
                plan_digest: None
            }),
            3 => (id(), apply_id(), prop::sample::select(vec!["p1", "p2"]), 0i64..1000).prop_map(
                |(step_id, apply_id, owner, lease_until_ms)| EventKind::StepStarted {
                    step_id,
                    apply_id,
                    owner: owner.into(),
                    lease_until_ms
                }
            ),
            2 => id().prop_map(|step_id| EventKind::StepApplied {
                step_id,
                result: json!({"ok": 1}),
                copy_id: None,
                links: vec![],
                snapshots: vec![]
            }),
            2 => id().prop_map(|step_id| EventKind::StepFailed {
                step_id,
                error: StepError {
                    code: StepErrorCode::UpstreamError,
                    message: "m".into(),
                    upstream: None
                }
            }),
            2 => id().prop_map(|step_id| EventKind::StepInDoubt {
                step_id,
                reason: "r".into()
            }),
            2 => id().prop_map(|step_id| EventKind::StepRetried { step_id }),
            1 => apply_id().prop_map(|apply_id| EventKind::ApplyFinished {
                apply_id,
                applied: 0,
                failed: 0,
                in_doubt: 0,
                not_run: 0
            }),
            1 => ids().prop_map(|discarded| EventKind::SessionEnded { discarded }),
            1 => ids().prop_map(|step_ids| EventKind::PlanExpired { step_ids }),
        ]
    }

    fn any_events() -> impl Strategy<Value = Vec<Event>> {
        prop::collection::vec((0i64..50, any_kind()), 0..40).prop_map(|items| {
            let mut at = 0;
            items
                .into_iter()
                .map(|(dt, kind)| {
                    at += dt;
                    ev(at, kind)
                })
                .collect()
        })
    }

    fn seqs(events: &[Event]) -> impl Iterator<Item = (i64, &Event)> {
        events.iter().enumerate().map(|(i, e)| (i as i64 + 1, e))
    }

    /// What must hold of every state the fold can reach.
    fn check_valid(state: &KeyState) -> Result<(), TestCaseError> {
        let open: Vec<u32> = state.open_steps().map(|s| s.record.position).collect();
        let unique: BTreeSet<u32> = open.iter().copied().collect();
        prop_assert_eq!(
            unique.len(),
            open.len(),
            "positions in the plan repeat: {:?}",
            open
        );
        prop_assert!(open.windows(2).all(|w| w[0] < w[1]), "plan out of order");
        let ids: BTreeSet<&str> = state
            .steps
            .iter()
            .map(|s| s.record.step_id.as_str())
            .collect();
        prop_assert_eq!(ids.len(), state.steps.len(), "a step id repeats");
        for step in &state.steps {
            prop_assert!(step.record.position < state.next_position || !step.status.is_open());
            prop_assert_eq!(
                step.status == StepStatus::Running,
                step.lease_until_ms.is_some()
            );
            prop_assert!(step.status != StepStatus::Running || step.attempts > 0);
        }
        prop_assert!(
            state.life_started_at_ms.is_none()
                || state.session_id.is_some()
                || state.steps.iter().any(|s| s.status.is_open()),
            "a life outside a session with nothing in the plan"
        );
        Ok(())
    }

    proptest! {
        #[test]
        fn every_prefix_folds_to_a_valid_state_through_allowed_transitions(events in any_events()) {
            let mut state = KeyState::default();
            check_valid(&state)?;
            for (seq, e) in seqs(&events) {
                let before = state.clone();
                state.apply(seq, e);
                prop_assert_eq!(state.last_seq, seq);
                check_valid(&state)?;
                // Steps are only ever added, never removed or reordered.
                prop_assert!(state.steps.len() >= before.steps.len());
                for (old, new) in before.steps.iter().zip(&state.steps) {
                    prop_assert_eq!(&old.record, &new.record);
                    prop_assert!(
                        old.status == new.status || old.status.can_become(new.status),
                        "{} → {} on {}", old.status, new.status, e.kind.name()
                    );
                }
                for new in &state.steps[before.steps.len()..] {
                    prop_assert_eq!(new.status, StepStatus::Planned);
                }
            }
        }

        #[test]
        fn the_kept_digest_always_equals_hashing_the_plan_afresh(
            events in any_events(),
            every in 1usize..4,
        ) {
            // Every copy of a key's state shares the kept hash; asked after
            // any event (or only now and then), and old copies asked again
            // after newer ones, each digest is the full computation's.
            let full = |s: &KeyState| crate::plan_digest(s.planned_steps().map(|s| &s.record));
            let mut state = KeyState::default();
            let mut kept = vec![state.clone()];
            for (i, (seq, e)) in seqs(&events).enumerate() {
                state.apply(seq, e);
                if i % every == 0 {
                    prop_assert_eq!(state.plan_digest(), full(&state));
                }
                kept.push(state.clone());
            }
            for old in kept.iter().rev().step_by(every) {
                prop_assert_eq!(old.plan_digest(), full(old));
            }
            prop_assert_eq!(state.plan_digest(), full(&state));
        }

        #[test]
        fn the_fold_is_deterministic_and_equals_applying_one_by_one(
            events in any_events(),
            cut in 0usize..40,
        ) {
            let whole = KeyState::fold(seqs(&events));
            prop_assert_eq!(&whole, &KeyState::fold(seqs(&events)));
            // A projection kept up to some point and then advanced.
            let cut = cut.min(events.len());
            let mut projection = KeyState::fold(seqs(&events).take(cut));
            for (seq, e) in seqs(&events).skip(cut) {
                projection.apply(seq, e);
            }
            prop_assert_eq!(&projection, &whole);
        }

        #[test]
        fn the_fold_of_stored_json_equals_the_fold_of_the_events(events in any_events()) {
            // The store keeps events as JSON; what it reads back must fold
            // to the same state, and a stored projection must read back whole.
            let stored: Vec<Event> = events
                .iter()
                .map(|e| serde_json::from_str(&serde_json::to_string(e).unwrap()).unwrap())
                .collect();
            prop_assert_eq!(&stored, &events);
            let state = KeyState::fold(seqs(&events));
            prop_assert_eq!(&KeyState::fold(seqs(&stored)), &state);
            let projection: KeyState =
                serde_json::from_str(&serde_json::to_string(&state).unwrap()).unwrap();
            prop_assert_eq!(projection, state);
        }
    }
}
