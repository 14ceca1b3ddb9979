//! What changed in a key's plan between two revisions.
//!
//! Every change to a plan advances its revision ([`KeyState::revision`]),
//! and a review answer records the revision the person saw. The plan as it
//! stood at any revision is the fold of the key's log up to the event that
//! made it ([`at_revision`]); comparing it with the plan now
//! ([`PlanDiff::between`]) tells a person what moved since they looked —
//! steps planned since, and steps whose status changed (discarded,
//! expired, started, applied, failed, in doubt).

use serde_json::Value;

use crate::event::Event;
use crate::fold::{KeyState, Step, StepStatus};
use crate::view::{AmendedStep, JsonChange, PlanDiff, SinceReview, StatusChange, StepView};

/// The plan at revision `revision`: the key's events folded, in seq order,
/// up to (not including) the first that would take the plan past it. A
/// revision beyond the last gives the plan now.
pub fn at_revision<'a>(
    events: impl IntoIterator<Item = (i64, &'a Event)>,
    revision: u64,
) -> KeyState {
    let mut state = KeyState::default();
    for (seq, event) in events {
        if state.revision >= revision {
            let mut next = state.clone();
            next.apply(seq, event);
            if next.revision > revision {
                break;
            }
            state = next;
        } else {
            state.apply(seq, event);
        }
    }
    state
}

impl AmendedStep {
    /// The amendment from `then` to `now` (the same step), if it was amended.
    fn between(then: &Step, now: &Step) -> Option<AmendedStep> {
        let by = now.amendment.as_ref()?.by.clone();
        Some(AmendedStep {
            step_id: now.record.step_id.clone(),
            position: now.record.position,
            exposed_as: now.record.exposed_as.clone(),
            by,
            arguments: json_diff(
                &then.record.arguments.value(),
                &now.record.arguments.value(),
            ),
            predicted_effect_then: then.record.predicted_effect.clone(),
            predicted_effect_now: now.record.predicted_effect.clone(),
            preview_changed: then.record.preview != now.record.preview,
        })
    }
}

impl PlanDiff {
    /// What changed from `then` to `now` (the same key's plan at two
    /// revisions).
    pub fn between(then: &KeyState, now: &KeyState) -> PlanDiff {
        let found = changes(now, |id| then.step(id).map(|s| (s.status, amendments(s))));
        PlanDiff {
            since: then.revision,
            revision: now.revision,
            added: found.added.into_iter().map(StepView::for_person).collect(),
            status_changed: found.status_changed,
            amended: found
                .amended
                .into_iter()
                .filter_map(|step| AmendedStep::between(then.step(&step.record.step_id)?, step))
                .collect(),
            digest_then: then.plan_digest(),
            digest_now: now.plan_digest(),
        }
    }

    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.status_changed.is_empty() && self.amended.is_empty()
    }
}

impl KeyState {
    /// What changed since the last review that recorded its revision;
    /// `None` if no review did, or the plan is as it was then.
    pub fn since_review(&self) -> Option<SinceReview> {
        let reviewed = self.reviewed.as_ref()?;
        if reviewed.revision == self.revision {
            return None;
        }
        let found = changes(self, |id| {
            reviewed
                .steps
                .iter()
                .find(|s| s.record.step_id == id)
                .map(|s| (s.status, amendments(s)))
        });
        let added = found
            .added
            .into_iter()
            .map(|s| s.record.step_id.clone())
            .collect();
        let amended = found
            .amended
            .into_iter()
            .filter_map(|now| {
                let then = reviewed
                    .steps
                    .iter()
                    .find(|s| s.record.step_id == now.record.step_id)?;
                AmendedStep::between(then, now)
            })
            .collect();
        let status_changed = found.status_changed;
        Some(SinceReview {
            reviewed_revision: reviewed.revision,
            revision: self.revision,
            added,
            status_changed,
            amended,
            digest_changed: reviewed.plan_digest != self.plan_digest(),
        })
    }
}

/// What one comparison found: the steps of `now` that are new, those whose
/// status changed, and those amended since (in plan order).
struct Changes<'a> {
    added: Vec<&'a Step>,
    status_changed: Vec<StatusChange>,
    amended: Vec<&'a Step>,
}

/// Compares `now` with what `before` says each step was (its status and
/// how many times it had been amended; `None` for a step it does not
/// know): the one comparison behind [`PlanDiff::between`] and
/// [`KeyState::since_review`].
fn changes(now: &KeyState, before: impl Fn(&str) -> Option<(StepStatus, u32)>) -> Changes<'_> {
    let mut order: Vec<&Step> = now.steps.iter().map(|s| &**s).collect();
    order.sort_by_key(|s| (s.record.position, s.record.planned_at_ms));
    let mut found = Changes {
        added: Vec::new(),
        status_changed: Vec::new(),
        amended: Vec::new(),
    };
    for step in order {
        let Some((from, amended_then)) = before(&step.record.step_id) else {
            found.added.push(step);
            continue;
        };
        if from != step.status {
            found.status_changed.push(StatusChange {
                step_id: step.record.step_id.clone(),
                position: step.record.position,
                exposed_as: step.record.exposed_as.clone(),
                predicted_effect: step.record.predicted_effect.clone(),
                from,
                to: step.status,
            });
        }
        if amendments(step) != amended_then {
            found.amended.push(step);
        }
    }
    found
}

/// How many times `step` was amended.
fn amendments(step: &Step) -> u32 {
    step.amendment.as_ref().map_or(0, |a| a.count)
}

/// The changes from `before` to `after`, in path order: objects compared
/// key by key, arrays index by index, anything else as a whole. Meant for
/// redacted arguments, so a secret shows as `"[redacted]"` on both sides.
pub fn json_diff(before: &Value, after: &Value) -> Vec<JsonChange> {
    let mut out = Vec::new();
    diff_at(String::new(), Some(before), Some(after), &mut out);
    out
}

fn diff_at(path: String, before: Option<&Value>, after: Option<&Value>, out: &mut Vec<JsonChange>) {
    match (before, after) {
        (Some(Value::Object(a)), Some(Value::Object(b))) => {
            let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for k in keys {
                let escaped = k.replace('~', "~0").replace('/', "~1");
                diff_at(format!("{path}/{escaped}"), a.get(k), b.get(k), out);
            }
        }
        (Some(Value::Array(a)), Some(Value::Array(b))) => {
            for i in 0..a.len().max(b.len()) {
                diff_at(format!("{path}/{i}"), a.get(i), b.get(i), out);
            }
        }
        (a, b) if a == b => {}
        (a, b) => out.push(JsonChange {
            path,
            before: a.cloned(),
            after: b.cloned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::event::EventKind;
    use crate::fold::tests::{ev, planned, started};

    fn discarded(ids: &[&str]) -> EventKind {
        EventKind::StepsDiscarded {
            step_ids: ids.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    fn events(kinds: Vec<EventKind>) -> Vec<(i64, Event)> {
        kinds
            .into_iter()
            .enumerate()
            .map(|(i, kind)| {
                let seq = i64::try_from(i).unwrap() + 1;
                (seq, ev(seq * 1000, kind))
            })
            .collect()
    }

    #[test]
    fn each_change_to_the_plan_advances_the_revision_and_nothing_else_does() {
        let log = events(vec![
            planned("a", 1),
            planned("b", 2),
            EventKind::ModeSet {
                mode: "plan".into(),
            },
            started("a", "apl_1"),
            started("a", "apl_1"),
            discarded(&["b"]),
            discarded(&["b"]),
        ]);
        let state = KeyState::fold(log.iter().map(|(s, e)| (*s, e)));
        // planned a, planned b, a started, b discarded: the mode, the lease
        // renewal and the discard of a discarded step change nothing.
        assert_eq!(state.revision, 4);
    }

    #[test]
    fn the_plan_at_a_revision_and_the_diff_to_now() {
        let log = events(vec![
            planned("a", 1),
            planned("b", 2),
            EventKind::ModeSet {
                mode: "plan".into(),
            },
            planned("c", 3),
            discarded(&["a"]),
        ]);
        let then = at_revision(log.iter().map(|(s, e)| (*s, e)), 2);
        assert_eq!(then.revision, 2);
        assert_eq!(then.steps.len(), 2);
        // The mode change after revision 2 is folded in too; the next plan
        // change is not.
        assert_eq!(then.mode.as_deref(), Some("plan"));
        let now = KeyState::fold(log.iter().map(|(s, e)| (*s, e)));
        let diff = PlanDiff::between(&then, &now);
        assert_eq!((diff.since, diff.revision), (2, 4));
        let added: Vec<_> = diff.added.iter().map(|s| s.step.step_id.as_str()).collect();
        assert_eq!(added, ["c"]);
        assert_eq!(diff.status_changed.len(), 1);
        assert_eq!(diff.status_changed[0].step_id, "a");
        assert_eq!(
            (diff.status_changed[0].from, diff.status_changed[0].to),
            (StepStatus::Planned, StepStatus::Discarded)
        );
        assert_ne!(diff.digest_then, diff.digest_now);
        assert!(PlanDiff::between(&now, &now).is_empty());
        // A revision past the last is the plan now.
        assert_eq!(at_revision(log.iter().map(|(s, e)| (*s, e)), 99), now);
        assert_eq!(
            at_revision(log.iter().map(|(s, e)| (*s, e)), 0).steps.len(),
            0
        );
    }

    #[test]
    fn a_rejected_step_leaves_the_digest_stays_listed_and_expires_with_the_plan() {
        let mut log = events(vec![planned("a", 1), planned("b", 2)]);
        let before = KeyState::fold(log.iter().map(|(s, e)| (*s, e)));
        let reject = EventKind::StepRejected {
            step_id: "b".into(),
            reason: "not this one".into(),
        };
        log.push((3, ev(3000, reject.clone())));
        let state = KeyState::fold(log.iter().map(|(s, e)| (*s, e)));
        assert_eq!(state.revision, before.revision + 1);
        assert_ne!(state.plan_digest(), before.plan_digest());
        let b = state.step("b").unwrap();
        assert_eq!(b.status, StepStatus::Rejected);
        assert_eq!(b.rejection.as_ref().unwrap().reason, "not this one");
        assert_eq!(state.open_steps().count(), 2, "still listed");
        assert_eq!(state.planned_steps().count(), 1);
        // Rejecting it again changes nothing; it expires with its plan.
        log.push((4, ev(4000, reject)));
        log.push((
            5,
            ev(
                5000,
                EventKind::PlanExpired {
                    step_ids: vec!["a".into(), "b".into()],
                },
            ),
        ));
        let state = KeyState::fold(log.iter().map(|(s, e)| (*s, e)));
        assert_eq!(state.revision, before.revision + 2);
        assert_eq!(state.step("b").unwrap().status, StepStatus::Expired);
    }

    #[test]
    fn since_review_counts_from_the_revision_the_last_review_saw() {
        let mut log = events(vec![planned("a", 1), planned("b", 2)]);
        let state = KeyState::fold(log.iter().map(|(s, e)| (*s, e)));
        assert_eq!(state.since_review(), None, "no review yet");
        let answered = EventKind::ReviewAnswered {
            review_id: None,
            verdict: crate::event::Verdict::Approve,
            plan_digest: state.plan_digest(),
            feedback: None,
            step_ids: None,
            revision: Some(state.revision),
        };
        log.push((3, ev(3000, answered)));
        let state = KeyState::fold(log.iter().map(|(s, e)| (*s, e)));
        assert_eq!(state.since_review(), None, "nothing changed since");
        log.push((4, ev(4000, planned("c", 3))));
        log.push((5, ev(5000, discarded(&["a"]))));
        let state = KeyState::fold(log.iter().map(|(s, e)| (*s, e)));
        let since = state.since_review().unwrap();
        assert_eq!((since.reviewed_revision, since.revision), (2, 4));
        assert_eq!(since.added, ["c"]);
        assert_eq!(since.status_changed[0].step_id, "a");
        assert!(since.digest_changed);
        // An answer that recorded no revision (the plan had moved on) is
        // not a baseline.
        let old = EventKind::ReviewAnswered {
            review_id: None,
            verdict: crate::event::Verdict::Approve,
            plan_digest: "sha256:old".into(),
            feedback: None,
            step_ids: None,
            revision: None,
        };
        log.push((6, ev(6000, old)));
        let state = KeyState::fold(log.iter().map(|(s, e)| (*s, e)));
        assert_eq!(state.since_review().unwrap().reviewed_revision, 2);
    }
}
