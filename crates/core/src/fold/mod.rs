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
//! * Every status change is one [`StepStatus::can_become`] allows: an event
//!   asking a step for another changes nothing (the table there lists
//!   which event makes which move).
//! * `steps_discarded` / `session_ended`: named steps that are `planned`,
//!   `failed`, `in_doubt` or `rejected` become `discarded`; `session_ended`
//!   also clears the session and life (the gateway appends `mode_set
//!   default` apart).
//! * `plan_expired`: named `planned` or `rejected` steps become `expired`;
//!   the life ends; mode and session stay (expiry fails closed).
//! * `step_rejected`: `planned` → `rejected`, with the reason and who.
//! * `step_amended`: a `planned` step's record becomes the amended one,
//!   keeping its position and planning time; it stays `planned`, and its
//!   [`Amendment`] counts the change.
//! * `apply_started` records the running apply (a later one replaces it:
//!   the gateway appends one only when no other is alive); `apply_finished`
//!   clears it when the ids match.
//! * `step_started`: `planned` | `failed` → `running`, with apply, owner,
//!   lease and one more attempt. The same event for a step already running
//!   under the same apply and owner renews its lease.
//! * `step_applied` / `step_failed` / `step_in_doubt`: from `running` only.
//!   An in-doubt step keeps its reason as an `error` with code `in_doubt`.
//! * `step_retried`: `in_doubt` → `planned` (a person's explicit retry).
//! * `review_answered` is recorded in `reviews`; `step_deduplicated`
//!   changes no step but moves the revision (a reviewer hears of it);
//!   `review_requested` is kept in the log and changes nothing here.
//!
//! The fold's table is [`KeyState::apply`] here; what each event does is
//! in `events`, the statuses and their moves in `status`, a step's own
//! records in `step`, and what the state says of the plan in `read`.

mod events;
mod read;
mod status;
mod step;

pub use status::StepStatus;
pub use step::{Amendment, Rejection, Step};

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::digest::DigestMemo;
use crate::{Actor, Channel, Event, EventKind, Verdict};

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
    /// Where the key's log stands in its hash chain, and its first break
    /// ([`crate::chain`]): set by the reader that follows the stored rows,
    /// not by the fold of events. An apply refuses a broken log.
    #[serde(default)]
    pub chain: crate::chain::Chain,
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
            chain: crate::chain::Chain::default(),
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
    /// [`KeyState::revision`]). Which function does what is this table;
    /// how each does it is [`events`].
    fn apply_kind(&mut self, seq: i64, event: &Event) -> bool {
        self.last_seq = seq;
        let at = event.at_ms;
        let changed = match &event.kind {
            EventKind::ModeSet { mode } => self.set_mode(mode),
            EventKind::ModeLocked { mode } => self.set_lock(ModeLock::Locked {
                mode: mode.clone(),
                by: event.actor.clone(),
                at_ms: at,
            }),
            EventKind::ModeUnlocked => self.set_lock(ModeLock::Unlocked {
                by: event.actor.clone(),
                at_ms: at,
            }),
            EventKind::SessionBegun { session_id, .. } => self.begin_session(session_id, at),
            EventKind::StepPlanned { step } => self.plan_step(step, &event.actor, at),
            EventKind::StepDeduplicated { step_id } => self.note_duplicate(step_id),
            EventKind::StepsDiscarded { step_ids } => self.discard(step_ids, at),
            EventKind::StepRejected { step_id, reason } => {
                self.reject(step_id, reason, event.actor.label(), at)
            }
            EventKind::StepAmended {
                step,
                previous_arguments,
            } => self.amend(step, previous_arguments, event.actor.label(), at),
            EventKind::ReviewAnswered { .. } => self.record_answer(seq, event),
            EventKind::ApplyStarted { apply_id, .. } => self.start_apply(apply_id),
            EventKind::StepStarted {
                step_id,
                apply_id,
                owner,
                lease_until_ms,
            } => self.start_step(seq, at, step_id, apply_id, owner, *lease_until_ms),
            EventKind::StepApplied {
                step_id,
                result,
                copy_id,
                links,
                snapshots,
            } => self.step_applied(step_id, result, copy_id.as_deref(), links, snapshots, at),
            EventKind::UndoRecorded { step_id, undo } => self.undo_recorded(step_id, undo),
            EventKind::StepFailed { step_id, error } => self.step_failed(step_id, error, at),
            EventKind::StepInDoubt { step_id, reason } => self.step_in_doubt(step_id, reason, at),
            EventKind::StepRetried { step_id } => self.retry(step_id, at),
            EventKind::ApplyFinished { apply_id, .. } => self.finish_apply(apply_id),
            EventKind::SessionEnded { discarded } => self.end_session(discarded, at),
            EventKind::PlanExpired { step_ids } => self.expire(step_ids, at),
            // Kept in the log; they change nothing here.
            EventKind::ReviewRequested { .. } | EventKind::CallRecorded { .. } => false,
            // Tool pins and operators live in their own logs
            // ([`crate::TOOLS_LOG`], [`crate::operators::OPERATORS_LOG`]).
            EventKind::ToolsPinned { .. }
            | EventKind::ToolQuarantined { .. }
            | EventKind::ToolAccepted { .. }
            | EventKind::ToolRejected { .. }
            | EventKind::OperatorEnrolled { .. }
            | EventKind::OperatorRemoved { .. }
            | EventKind::ApprovalsRequired { .. }
            | EventKind::FactorUsed { .. }
            | EventKind::PasskeyInvited { .. }
            | EventKind::PasskeyAdded { .. }
            | EventKind::FactorRefused { .. } => false,
        };
        // Outside a session, a plan that emptied has no life left.
        if self.session_id.is_none() && !self.has_open_steps() {
            self.life_started_at_ms = None;
        }
        changed
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;
    use serde_json::json;

    use super::*;
    use crate::event::tests::{every_kind, record};
    use crate::{EventType, JsonText, StepError, StepErrorCode};

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

    pub(super) fn fold_kinds(kinds: Vec<EventKind>) -> KeyState {
        let events: Vec<Event> = kinds
            .into_iter()
            .enumerate()
            .map(|(i, k)| ev(i as i64 * 10, k))
            .collect();
        KeyState::fold(events.iter().enumerate().map(|(i, e)| (i as i64 + 1, e)))
    }

    pub(super) fn statuses(state: &KeyState) -> Vec<(&str, StepStatus)> {
        state
            .steps
            .iter()
            .map(|s| (s.record.step_id.as_str(), s.status))
            .collect()
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

    /// Any event kind of the 25, the ones that move steps most often:
    /// each family's weight is the sum of its kinds' weights.
    fn any_kind() -> impl Strategy<Value = EventKind> {
        prop_oneof![
            2 => mode_kind(),
            3 => life_kind(),
            11 => planning_kind(),
            13 => applying_kind(),
            1 => log_only_kind(),
        ]
    }

    /// `mode_set`, `mode_locked`, `mode_unlocked`.
    fn mode_kind() -> impl Strategy<Value = EventKind> {
        let mode = || prop::sample::select(vec!["default", "plan", "careful"]);
        prop_oneof![
            mode().prop_map(|m| EventKind::ModeSet { mode: m.into() }),
            mode().prop_map(|m| EventKind::ModeLocked { mode: m.into() }),
            Just(EventKind::ModeUnlocked),
        ]
    }

    /// The plan's life: `session_begun`, `session_ended`, `plan_expired`.
    fn life_kind() -> impl Strategy<Value = EventKind> {
        prop_oneof![
            Just(EventKind::SessionBegun {
                session_id: "ses".into(),
                mode: "plan".into()
            }),
            ids().prop_map(|discarded| EventKind::SessionEnded { discarded }),
            ids().prop_map(|step_ids| EventKind::PlanExpired { step_ids }),
        ]
    }

    /// Steps planned and people's words on them: `step_planned`,
    /// `step_deduplicated`, `steps_discarded`, `step_rejected`,
    /// `step_amended`, `review_answered`.
    fn planning_kind() -> impl Strategy<Value = EventKind> {
        let tool = || prop::sample::select(vec!["t", "u"]);
        prop_oneof![
            3 => (id(), 1u32..6, tool()).prop_map(|(id, pos, tool)| {
                EventKind::StepPlanned {
                    step: record(&id, pos, tool, json!({"n": pos, "token": id})),
                }
            }),
            1 => id().prop_map(|step_id| EventKind::StepDeduplicated { step_id }),
            1 => ids().prop_map(|step_ids| EventKind::StepsDiscarded { step_ids }),
            2 => (id(), prop::sample::select(vec!["no", "not now"])).prop_map(
                |(step_id, reason)| EventKind::StepRejected {
                    step_id,
                    reason: reason.into()
                }
            ),
            // The amended record may say another position and age: the
            // fold keeps the step's own.
            2 => (id(), 1u32..6, tool()).prop_map(|(id, pos, tool)| EventKind::StepAmended {
                step: record(&id, pos, tool, json!({"n": pos, "amended": true})),
                previous_arguments: JsonText::from_value(&json!({"n": 0})),
            }),
            2 => (
                any::<bool>(),
                prop::sample::select(vec!["d1", "d2"]),
                prop::option::of(ids()),
                prop::option::of(0u64..8),
            )
                .prop_map(|(yes, d, step_ids, revision)| EventKind::ReviewAnswered {
                    review_id: None,
                    verdict: if yes { Verdict::Approve } else { Verdict::Decline },
                    plan_digest: d.into(),
                    feedback: None,
                    step_ids,
                    revision,
                }),
        ]
    }

    /// An apply and its steps: `apply_started`, `step_started`,
    /// `step_applied`, `step_failed`, `step_in_doubt`, `step_retried`,
    /// `apply_finished`.
    fn applying_kind() -> impl Strategy<Value = EventKind> {
        prop_oneof![
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
            1 => (id(), any::<bool>()).prop_map(|(step_id, kept)| EventKind::UndoRecorded {
                step_id,
                undo: if kept {
                    crate::undo::Undo::Kept {
                        digest: "sha256:00".into(),
                        bytes: 1,
                        after_digest: None,
                    }
                } else {
                    crate::undo::Undo::Dropped { reason: "r".into() }
                }
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
        ]
    }

    /// The kinds the fold keeps in the log and reads past:
    /// `review_requested`, `call_recorded` and the tool pins' own.
    fn log_only_kind() -> impl Strategy<Value = EventKind> {
        let kept = every_kind()
            .into_iter()
            .filter(|k| {
                matches!(
                    k,
                    EventKind::ReviewRequested { .. }
                        | EventKind::CallRecorded { .. }
                        | EventKind::ToolsPinned { .. }
                        | EventKind::ToolQuarantined { .. }
                        | EventKind::ToolAccepted { .. }
                        | EventKind::ToolRejected { .. }
                        | EventKind::OperatorEnrolled { .. }
                        | EventKind::OperatorRemoved { .. }
                        | EventKind::ApprovalsRequired { .. }
                        | EventKind::FactorUsed { .. }
                        | EventKind::PasskeyInvited { .. }
                        | EventKind::PasskeyAdded { .. }
                        | EventKind::FactorRefused { .. }
                )
            })
            .collect::<Vec<_>>();
        prop::sample::select(kept)
    }

    #[test]
    fn the_property_tests_generate_every_event_kind() {
        use proptest::strategy::ValueTree;

        let mut runner = proptest::test_runner::TestRunner::deterministic();
        let strategy = any_kind();
        let seen: BTreeSet<&str> = (0..5_000)
            .map(|_| strategy.new_tree(&mut runner).unwrap().current().name())
            .collect();
        let all: BTreeSet<&str> = EventType::ALL.iter().map(|t| t.as_str()).collect();
        assert_eq!(seen, all);
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

    /// What must hold of every change one event makes to the steps: steps
    /// are only ever added, never removed or reordered; a record changes
    /// only by an amendment of a waiting step, which keeps its id, place
    /// and age; and every status change is one the table allows
    /// ([`StepStatus::can_become`]), made at the event's time.
    fn check_step_changes(
        before: &KeyState,
        after: &KeyState,
        e: &Event,
    ) -> Result<(), TestCaseError> {
        prop_assert!(after.steps.len() >= before.steps.len());
        let amends = matches!(e.kind, EventKind::StepAmended { .. });
        for (old, new) in before.steps.iter().zip(&after.steps) {
            if amends && old.record != new.record {
                prop_assert_eq!(old.status, StepStatus::Planned);
                prop_assert_eq!(&old.record.step_id, &new.record.step_id);
                prop_assert_eq!(old.record.position, new.record.position);
                prop_assert_eq!(old.record.planned_at_ms, new.record.planned_at_ms);
            } else {
                prop_assert_eq!(&old.record, &new.record);
            }
            if old.status != new.status {
                prop_assert!(
                    old.status.can_become(new.status),
                    "{} → {} on {}",
                    old.status,
                    new.status,
                    e.kind.name()
                );
                prop_assert_eq!(new.updated_at_ms, e.at_ms);
            }
        }
        for new in &after.steps[before.steps.len()..] {
            prop_assert_eq!(new.status, StepStatus::Planned);
        }
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
                check_step_changes(&before, &state, e)?;
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
