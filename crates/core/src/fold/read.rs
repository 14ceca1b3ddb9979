//! What a key's state says of its plan: the open and waiting steps, the
//! plan digest, expiry, and which steps an approval covers.
//!
//! Apart from the fold that builds the state ([`super::events`]): these
//! only read it, and every edge asks them the same questions.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::{Approval, KeyState, Step, StepStatus};
use crate::{StepRecord, Verdict};

impl KeyState {
    /// The plan: steps `planned`, `running`, `failed`, `in_doubt` or
    /// `rejected` ([`StepStatus::is_open`]), in position order.
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

    /// The steps the key's last apply applied, in position order: what a
    /// revert undoes by default, and what a person's view of the plan
    /// lists under "last apply" (with each step's undo). Empty when no
    /// step was ever applied.
    pub fn last_applied(&self) -> Vec<&Step> {
        let applied = self.steps_where(|s| s.status == StepStatus::Applied);
        let Some(last) = applied
            .clone()
            .max_by_key(|s| s.updated_at_ms)
            .map(|s| s.apply_id.clone())
        else {
            return Vec::new();
        };
        applied.filter(|s| s.apply_id == last).collect()
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
mod tests {
    use serde_json::json;

    use super::super::tests::{ev, fold_kinds, planned, started};
    use super::*;
    use crate::event::tests::record;
    use crate::{Actor, Channel, Event, EventKind, JsonText};

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
}
