//! A key's log as people read it (the console's history): every event with
//! who did it, over which channel, and one sentence of what changed —
//! naming steps by position and predicted effect, as the plan shows them.
//!
//! The sentence is made from the event and the plan just before it (the
//! log folded up to there), so a later event such as `step_applied`, which
//! carries only a step id, still says which step. Arguments appear only as
//! the log holds them: redacted.

use serde::{Deserialize, Serialize};

use crate::event::{Event, EventKind};
use crate::fold::KeyState;
use crate::revision::json_diff;
use crate::{Actor, CallRecord, Channel, JsonText, StepRecord, Verdict, format_time_ms};

/// One event of a key's log as the history shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistoryEntry {
    /// The event's place in the key's log.
    pub key_seq: i64,
    /// When, RFC 3339 UTC.
    pub at: String,
    /// The event's type (`step_planned`, `review_answered`, …).
    #[serde(rename = "type")]
    pub kind: String,
    /// Who.
    pub actor: Actor,
    /// Over which channel.
    pub channel: Channel,
    /// What changed, in a sentence.
    pub summary: String,
    /// The plan's revision after it.
    pub revision: u64,
}

/// Every event of `events` (one key's log, in order) as the history shows
/// it, oldest first.
pub fn history<'a>(events: impl IntoIterator<Item = (i64, &'a Event)>) -> Vec<HistoryEntry> {
    let mut state = KeyState::default();
    let mut out = Vec::new();
    for (seq, event) in events {
        let summary = describe(event, &state);
        state.apply(seq, event);
        out.push(HistoryEntry {
            key_seq: seq,
            at: format_time_ms(event.at_ms),
            kind: event.kind.event_type().as_str().to_owned(),
            actor: event.actor.clone(),
            channel: event.channel,
            summary,
            revision: state.revision,
        });
    }
    out
}

/// `step_id` as the plan `before` names it: "step 3 (write_file: Create
/// notes.md)", or the bare id for a step it does not know.
fn step_name(before: &KeyState, step_id: &str) -> String {
    match before.step(step_id) {
        Some(s) => format!(
            "step {} ({}: {})",
            s.record.position, s.record.exposed_as, s.record.predicted_effect
        ),
        None => format!("step {step_id}"),
    }
}

fn steps_named(before: &KeyState, ids: &[String]) -> String {
    ids.iter()
        .map(|id| step_name(before, id))
        .collect::<Vec<_>>()
        .join("; ")
}

/// A unit enum's snake_case name, as it serializes.
fn name_of<T: Serialize>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::String(s)) => s,
        _ => "?".to_owned(),
    }
}

/// " — it reverts step 2 (…)" for an inverse step (`verb` in the tense
/// the event needs), else nothing.
fn reverted(before: &KeyState, step: Option<&StepRecord>, verb: &str) -> String {
    step.and_then(|s| s.reverts.as_deref())
        .map(|r| format!(" — it {verb} {}", step_name(before, r)))
        .unwrap_or_default()
}

/// What `event` changed, in one sentence, given the plan just before it.
pub fn describe(event: &Event, before: &KeyState) -> String {
    match &event.kind {
        EventKind::ModeSet { mode } => format!("mode set to {mode}"),
        EventKind::ModeLocked { mode } => format!("mode locked at {mode}"),
        EventKind::ModeUnlocked => "mode unlocked".to_owned(),
        EventKind::SessionBegun { session_id, mode } => {
            format!("session {session_id} begun in mode {mode}")
        }
        EventKind::StepPlanned { step } => format!(
            "planned step {} ({}): {}{}",
            step.position,
            step.exposed_as,
            step.predicted_effect,
            reverted(before, Some(step), "reverts")
        ),
        EventKind::StepDeduplicated { step_id } => format!(
            "the same write was sent again; it is still {}",
            step_name(before, step_id)
        ),
        EventKind::StepsDiscarded { step_ids } => {
            format!("discarded {}", steps_named(before, step_ids))
        }
        EventKind::StepRejected { step_id, reason } => {
            format!("rejected {}: {reason}", step_name(before, step_id))
        }
        EventKind::StepAmended {
            step,
            previous_arguments,
        } => amended(before, step, previous_arguments),
        EventKind::ReviewRequested { plan_digest, .. } => {
            format!("asked the person about the plan at {plan_digest}")
        }
        EventKind::ReviewAnswered {
            verdict,
            plan_digest,
            feedback,
            step_ids,
            ..
        } => answered(
            before,
            *verdict,
            plan_digest,
            feedback.as_deref(),
            step_ids.as_deref(),
        ),
        EventKind::ApplyStarted { step_ids, .. } => {
            format!("apply started: {}", steps_named(before, step_ids))
        }
        EventKind::StepStarted { step_id, .. } => started(before, step_id),
        EventKind::StepApplied { step_id, .. } => format!(
            "applied {}{}",
            step_name(before, step_id),
            reverted(before, before.step(step_id).map(|s| &s.record), "reverted")
        ),
        EventKind::UndoRecorded { step_id, undo } => {
            format!("{}: {}", step_name(before, step_id), undo.said())
        }
        EventKind::StepFailed { step_id, error } => format!(
            "{} failed: {}: {}",
            step_name(before, step_id),
            error.code,
            error.message
        ),
        EventKind::StepInDoubt { step_id, reason } => {
            format!("{} is in doubt: {reason}", step_name(before, step_id))
        }
        EventKind::StepRetried { step_id } => {
            format!("retry of {}", step_name(before, step_id))
        }
        EventKind::ApplyFinished {
            applied,
            failed,
            in_doubt,
            not_run,
            ..
        } => format!(
            "apply finished: {applied} applied, {failed} failed, {in_doubt} in doubt, {not_run} not run"
        ),
        EventKind::SessionEnded { discarded } => {
            format!("session ended; {} waiting step(s) dropped", discarded.len())
        }
        EventKind::PlanExpired { step_ids } => format!(
            "the plan expired; {} waiting step(s) never ran",
            step_ids.len()
        ),
        EventKind::CallRecorded { call } => recorded(call),
        EventKind::ToolsPinned { server, tools } => {
            format!("{} tool(s) of {server} pinned", tools.len())
        }
        EventKind::ToolQuarantined {
            server, definition, ..
        } => format!("{server} {} held for review", definition.tool),
        EventKind::ToolAccepted { server, tool, .. } => format!("{server} {tool} accepted"),
        EventKind::ToolRejected { server, tool, .. } => format!("{server} {tool} rejected"),
        EventKind::OperatorEnrolled { operator, .. } => {
            format!("operator {operator} enrolled with a TOTP factor")
        }
        EventKind::OperatorRemoved { operator } => format!("operator {operator} removed"),
        EventKind::ApprovalsRequired { require } => format!("approvals now require {require}"),
        EventKind::FactorUsed {
            operator,
            factor,
            act,
            ..
        } => format!("{operator} proved \"{act}\" with {}", factor.as_str()),
        EventKind::PasskeyInvited { operator, .. } => {
            format!("a link to register a passkey was issued for {operator}")
        }
        EventKind::PasskeyAdded { operator, .. } => {
            format!("operator {operator} registered a passkey")
        }
        EventKind::FactorRefused {
            operator,
            act,
            reason,
        } => format!("a factor of {operator} was refused for \"{act}\": {reason}"),
    }
}

/// `step_amended`: each argument that changed, before and after, and
/// what the step would do now.
fn amended(before: &KeyState, step: &StepRecord, previous_arguments: &JsonText) -> String {
    let show =
        |v: Option<serde_json::Value>| v.map_or_else(|| "(none)".to_owned(), |v| v.to_string());
    let changes: Vec<String> = json_diff(&previous_arguments.value(), &step.arguments.value())
        .into_iter()
        .map(|c| {
            let path = if c.path.is_empty() {
                "/".to_owned()
            } else {
                c.path
            };
            format!("{path}: {} → {}", show(c.before), show(c.after))
        })
        .collect();
    format!(
        "amended {}: {}; now: {}",
        step_name(before, &step.step_id),
        changes.join(", "),
        step.predicted_effect
    )
}

/// `review_answered`: who said what about which steps (or the plan at a
/// digest), with their words.
fn answered(
    before: &KeyState,
    verdict: Verdict,
    plan_digest: &str,
    feedback: Option<&str>,
    step_ids: Option<&[String]>,
) -> String {
    let what = match step_ids {
        Some(ids) => steps_named(before, ids),
        None => format!("the plan at {plan_digest}"),
    };
    let verdict = match verdict {
        Verdict::Approve => "approved",
        Verdict::KeepPlanning => "said keep planning to",
        Verdict::Decline => "declined",
        Verdict::Cancel => "cancelled the question about",
    };
    match feedback {
        Some(f) => format!("{verdict} {what}: {f}"),
        None => format!("{verdict} {what}"),
    }
}

/// `step_started`: a run, or a running claim renewed.
fn started(before: &KeyState, step_id: &str) -> String {
    let renewed = before
        .step(step_id)
        .is_some_and(|s| s.status == crate::StepStatus::Running);
    if renewed {
        format!("claim renewed on {}", step_name(before, step_id))
    } else {
        format!("running {}", step_name(before, step_id))
    }
}

/// `call_recorded`: the call, what was decided and how it ended.
fn recorded(call: &CallRecord) -> String {
    format!(
        "call {}: {} → {}{}",
        call.exposed_as,
        name_of(&call.decision),
        name_of(&call.outcome),
        call.code
            .as_deref()
            .map(|c| format!(" ({c})"))
            .unwrap_or_default()
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use serde_json::json;

    use super::*;
    use crate::JsonText;
    use crate::event::tests::record;
    use crate::fold::tests::{ev, planned};

    #[test]
    fn each_event_says_what_changed_naming_steps_as_the_plan_does() {
        let mut amended = record("a", 1, "write_file", json!({"content": "two"}));
        amended.predicted_effect = "Write two".into();
        let log = [
            planned("a", 1),
            EventKind::StepAmended {
                step: amended,
                previous_arguments: JsonText::from_value(&json!({"content": "one"})),
            },
            EventKind::StepRejected {
                step_id: "a".into(),
                reason: "<b>no</b>".into(),
            },
        ];
        let events: Vec<Event> = log
            .into_iter()
            .enumerate()
            .map(|(i, k)| ev(i64::try_from(i).unwrap() * 1000, k))
            .collect();
        let entries = history(
            events
                .iter()
                .enumerate()
                .map(|(i, e)| (i64::try_from(i).unwrap() + 1, e)),
        );
        assert_eq!(entries.len(), 3);
        assert_eq!(entries[1].kind, "step_amended");
        assert!(
            entries[1].summary.contains("/content: \"one\" → \"two\""),
            "{}",
            entries[1].summary
        );
        assert!(entries[1].summary.ends_with("now: Write two"));
        assert!(
            entries[2].summary.starts_with("rejected step 1 ("),
            "{}",
            entries[2].summary
        );
        assert!(entries[2].summary.ends_with(": <b>no</b>"), "verbatim");
        assert_eq!(
            entries.iter().map(|e| e.revision).collect::<Vec<_>>(),
            [1, 2, 3]
        );
    }
}
