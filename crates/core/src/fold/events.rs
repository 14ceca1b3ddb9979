//! What each kind of event does to a key's state: one function per event
//! kind (or per pair that does the same), each answering whether it
//! changed the plan ([`KeyState::revision`]). The fold's table
//! ([`KeyState::apply`]) picks the function; the rules are the module
//! docs of [`super`] (docs/design.md §4 "The fold", §5, §6).
//!
//! Apart from the table so that it reads as one: here is how, there is
//! which. Every status change goes through [`KeyState::move_step`], so the
//! fold makes no move [`StepStatus::can_become`] forbids.

use std::sync::Arc;

use serde_json::Value;

use super::{Amendment, Approval, KeyState, ModeLock, Rejection, ReviewedPlan, Step, StepStatus};
use crate::{Actor, Event, EventKind, JsonText, StepError, StepErrorCode, StepRecord};

// === mode and session ===

impl KeyState {
    /// `mode_set`: the last one wins.
    pub(super) fn set_mode(&mut self, mode: &str) -> bool {
        self.mode = Some(mode.to_owned());
        false
    }

    /// `mode_locked` / `mode_unlocked`: the operator's last word.
    pub(super) fn set_lock(&mut self, lock: ModeLock) -> bool {
        self.lock = Some(lock);
        false
    }

    /// `session_begun`: the session, and the plan's life (re)started.
    pub(super) fn begin_session(&mut self, session_id: &str, at: i64) -> bool {
        self.session_id = Some(session_id.to_owned());
        self.start_life(at);
        false
    }

    /// `session_ended`: the named steps discarded, session and life over.
    pub(super) fn end_session(&mut self, discarded: &[String], at: i64) -> bool {
        let changed = self.discard(discarded, at);
        self.session_id = None;
        self.life_started_at_ms = None;
        changed
    }

    /// `plan_expired`: the named waiting (or rejected) steps expire, and
    /// the life ends; mode and session stay (expiry fails closed).
    pub(super) fn expire(&mut self, step_ids: &[String], at: i64) -> bool {
        let changed = self.move_steps(step_ids, StepStatus::Expired, at);
        self.life_started_at_ms = None;
        changed
    }

    pub(super) fn has_open_steps(&self) -> bool {
        self.steps.iter().any(|s| s.status.is_open())
    }

    /// (Re)starts the plan's life; a fresh plan counts positions from 1.
    fn start_life(&mut self, at: i64) {
        if !self.has_open_steps() {
            self.next_position = 1;
        }
        self.life_started_at_ms = Some(at);
    }
}

// === planning and people's words on steps ===

impl KeyState {
    /// `step_planned`: a new step at its position, unless its id is known
    /// or an open step holds its position. It keeps the scope of the agent
    /// that planned it, when `by` says.
    pub(super) fn plan_step(&mut self, record: &StepRecord, by: &Actor, at: i64) -> bool {
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
        step.planned_scope = match by {
            Actor::Agent { scope, .. } => *scope,
            _ => None,
        };
        self.steps.push(Arc::new(step));
        true
    }

    /// `step_deduplicated`: the agent asked for the same waiting write
    /// again. The step is as it was, but a reviewer hears of it.
    pub(super) fn note_duplicate(&self, step_id: &str) -> bool {
        self.step(step_id)
            .is_some_and(|s| s.status == StepStatus::Planned)
    }

    /// `steps_discarded`: the named steps that may be discarded are.
    pub(super) fn discard(&mut self, step_ids: &[String], at: i64) -> bool {
        self.move_steps(step_ids, StepStatus::Discarded, at)
    }

    /// `step_rejected`: a person's no to a waiting step, with the reason.
    pub(super) fn reject(&mut self, step_id: &str, reason: &str, by: String, at: i64) -> bool {
        let Some(step) = self.move_step(step_id, StepStatus::Rejected, at) else {
            return false;
        };
        step.rejection = Some(Rejection {
            reason: reason.to_owned(),
            by,
        });
        true
    }

    /// `step_amended`: a waiting step's record replaced by a person's. It
    /// stays waiting, and keeps its place and age whatever the record says.
    pub(super) fn amend(
        &mut self,
        amended: &StepRecord,
        previous_arguments: &JsonText,
        by: String,
        at: i64,
    ) -> bool {
        let next_revision = self.revision.saturating_add(1);
        let Some(step) = self.step_mut_where(&amended.step_id, |s| s.status == StepStatus::Planned)
        else {
            return false;
        };
        let mut record = amended.clone();
        record.position = step.record.position;
        record.planned_at_ms = step.record.planned_at_ms;
        step.record = record;
        step.amendment = Some(Amendment {
            by,
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

    /// `review_answered`: the answer recorded, and the plan as it was seen
    /// when the answer says at which revision. Takes the whole event (its
    /// actor, channel and time go into the [`Approval`]); given any other
    /// kind, it records nothing.
    pub(super) fn record_answer(&mut self, seq: i64, event: &Event) -> bool {
        let EventKind::ReviewAnswered {
            verdict,
            plan_digest,
            review_id,
            revision,
            step_ids,
            ..
        } = &event.kind
        else {
            return false;
        };
        // An answer about the whole plan covers the steps waiting then,
        // so a step planned later is not approved by it.
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
            at_ms: event.at_ms,
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
}

// === applying ===

impl KeyState {
    /// `apply_started`: the running apply (a later one replaces it).
    pub(super) fn start_apply(&mut self, apply_id: &str) -> bool {
        self.applying = Some(apply_id.to_owned());
        false
    }

    /// `apply_finished`: no apply runs, if it was this one.
    pub(super) fn finish_apply(&mut self, apply_id: &str) -> bool {
        if self.applying.as_deref() == Some(apply_id) {
            self.applying = None;
        }
        false
    }

    /// `step_started`: the step claimed by `apply_id` for `owner` until
    /// `lease_until_ms` (one more attempt), or — for a step already
    /// running under that apply and owner — its lease renewed, which
    /// leaves the plan as it was.
    pub(super) fn start_step(
        &mut self,
        seq: i64,
        at: i64,
        step_id: &str,
        apply_id: &str,
        owner: &str,
        lease_until_ms: i64,
    ) -> bool {
        if let Some(step) = self.move_step(step_id, StepStatus::Running, at) {
            step.claimed_seq = Some(seq);
            step.apply_id = Some(apply_id.to_owned());
            step.owner = Some(owner.to_owned());
            step.lease_until_ms = Some(lease_until_ms);
            step.attempts = step.attempts.saturating_add(1);
            step.error = None;
            return true;
        }
        let claimed_by_them = |s: &Step| {
            s.status == StepStatus::Running
                && s.apply_id.as_deref() == Some(apply_id)
                && s.owner.as_deref() == Some(owner)
        };
        if let Some(step) = self.step_mut_where(step_id, claimed_by_them) {
            step.lease_until_ms = Some(lease_until_ms);
            step.updated_at_ms = at;
        }
        false
    }

    /// `step_applied`: a running step's result, and what it landed on.
    pub(super) fn step_applied(
        &mut self,
        step_id: &str,
        result: &Value,
        copy_id: Option<&str>,
        links: &[String],
        snapshots: &[String],
        at: i64,
    ) -> bool {
        let Some(step) = self.end_run(step_id, StepStatus::Applied, at) else {
            return false;
        };
        step.result = Some(JsonText::from_value(result));
        step.copy_id = copy_id.map(str::to_owned);
        step.links = links.to_vec();
        step.snapshots = snapshots.to_vec();
        // An inverse step applied: the step it reverts says so.
        if let Some(original) = step.record.reverts.clone() {
            let by = step_id.to_owned();
            if let Some(original) =
                self.step_mut_where(&original, |s| s.status == StepStatus::Applied)
                && !original.reverted_by.contains(&by)
            {
                original.reverted_by.push(by);
            }
        }
        true
    }

    /// `undo_recorded`: whether what an applied step replaced is kept (or
    /// was dropped). Not a change to the plan: the step has left it.
    pub(super) fn undo_recorded(&mut self, step_id: &str, undo: &crate::undo::Undo) -> bool {
        if let Some(step) = self.step_mut_where(step_id, |s| s.status == StepStatus::Applied) {
            step.undo = Some(undo.clone());
        }
        false
    }

    /// `step_failed`: a running step's error.
    pub(super) fn step_failed(&mut self, step_id: &str, error: &StepError, at: i64) -> bool {
        self.end_run(step_id, StepStatus::Failed, at)
            .map(|step| step.error = Some(error.clone()))
            .is_some()
    }

    /// `step_in_doubt`: a running step with no answer; its reason kept as
    /// an error with code `in_doubt`.
    pub(super) fn step_in_doubt(&mut self, step_id: &str, reason: &str, at: i64) -> bool {
        self.end_run(step_id, StepStatus::InDoubt, at)
            .map(|step| {
                step.error = Some(StepError {
                    code: StepErrorCode::InDoubt,
                    message: reason.to_owned(),
                    upstream: None,
                });
            })
            .is_some()
    }

    /// `step_retried`: an in-doubt step waits again (a person's explicit
    /// retry), unclaimed and without its error.
    pub(super) fn retry(&mut self, step_id: &str, at: i64) -> bool {
        self.move_step(step_id, StepStatus::Planned, at)
            .map(|step| {
                step.error = None;
                step.owner = None;
                step.lease_until_ms = None;
            })
            .is_some()
    }

    /// A running step moved to its outcome `to`, its claim's lease over.
    fn end_run(&mut self, step_id: &str, to: StepStatus, at: i64) -> Option<&mut Step> {
        let step = self.move_step(step_id, to, at)?;
        step.lease_until_ms = None;
        Some(step)
    }
}

// === finding and moving steps ===

impl KeyState {
    /// The step `step_id`, moved to `to` at `at` if the table allows it
    /// ([`StepStatus::can_become`]); `None` — and nothing changed — for an
    /// unknown step or a move the table forbids. Every status change of
    /// the fold is made here.
    fn move_step(&mut self, step_id: &str, to: StepStatus, at: i64) -> Option<&mut Step> {
        let step = self.step_mut_where(step_id, |s| s.status.can_become(to))?;
        step.status = to;
        step.updated_at_ms = at;
        Some(step)
    }

    /// [`KeyState::move_step`] for each of `step_ids`; true if any moved.
    fn move_steps(&mut self, step_ids: &[String], to: StepStatus, at: i64) -> bool {
        let mut changed = false;
        for id in step_ids {
            changed |= self.move_step(id, to, at).is_some();
        }
        changed
    }

    /// The step `step_id`, to change, if `fits` holds of it; a step shared
    /// with an older copy of the state is copied first ([`Arc::make_mut`]).
    fn step_mut_where(&mut self, step_id: &str, fits: impl Fn(&Step) -> bool) -> Option<&mut Step> {
        self.steps
            .iter_mut()
            .find(|s| s.record.step_id == step_id)
            .filter(|s| fits(s))
            .map(Arc::make_mut)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::tests::{ev, fold_kinds, planned, started, statuses};
    use super::*;
    use crate::event::tests::record;

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
    fn a_rejected_step_stays_listed_until_discarded_or_expired_and_never_runs() {
        let reject = |id: &str| EventKind::StepRejected {
            step_id: id.into(),
            reason: "not this one".into(),
        };
        let s = fold_kinds(vec![
            planned("a", 1),
            planned("b", 2),
            planned("c", 3),
            reject("a"),
            reject("b"),
            reject("c"),
            started("a", "x"), // rejected: never runs
            EventKind::StepsDiscarded {
                step_ids: vec!["b".into()],
            },
            EventKind::PlanExpired {
                step_ids: vec!["c".into()],
            },
            reject("b"), // discarded: does not fit
        ]);
        assert_eq!(
            statuses(&s),
            [
                ("a", StepStatus::Rejected),
                ("b", StepStatus::Discarded),
                ("c", StepStatus::Expired)
            ]
        );
        let a = s.step("a").unwrap();
        assert_eq!(a.attempts, 0);
        assert_eq!(
            a.rejection,
            Some(Rejection {
                reason: "not this one".into(),
                by: "laptop".into()
            })
        );
        assert_eq!(s.open_steps().count(), 1, "a rejected step is listed");
        assert_eq!(s.planned_steps().count(), 0, "and is not waiting");
    }

    #[test]
    fn an_amendment_replaces_a_waiting_steps_record_but_not_its_place_or_age() {
        let mut record = record("a", 7, "tool_a", json!({"id": "a", "x": 1}));
        record.planned_at_ms = 5;
        let amend = EventKind::StepAmended {
            step: record,
            previous_arguments: JsonText::from_value(&json!({"id": "a"})),
        };
        let s = fold_kinds(vec![
            planned("a", 1),
            amend.clone(),
            amend.clone(),
            started("a", "x"),
            amend, // running: does not fit
        ]);
        let a = s.step("a").unwrap();
        assert_eq!(a.status, StepStatus::Running);
        assert_eq!((a.record.position, a.record.planned_at_ms), (1, 1_000));
        assert_eq!(a.record.arguments.value(), json!({"id": "a", "x": 1}));
        let amendment = a.amendment.as_ref().unwrap();
        assert_eq!(
            (amendment.by.as_str(), amendment.at_ms, amendment.count),
            ("laptop", 20, 2)
        );
        assert_eq!(amendment.revision, 3, "the revision the amendment made");
        assert_eq!(s.revision, 4);
    }
}
