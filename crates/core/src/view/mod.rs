//! plangate's own answers about a plan, as types: a step as shown
//! ([`StepView`]), the plan (`get_plan`'s [`PlanView`], a person's
//! [`KeyPlanView`]), the answer to a planned write ([`PlannedWrite`]) and
//! the [`Receipt`] of an apply (docs/design.md §5).
//!
//! Each is built here once, from the folded state, and serialised to the
//! contract's JSON; the agent's tools, the CLI and the console send or read
//! these types, never JSON picked apart by string keys. Optional fields
//! are left out when absent, as the contract shows them.

mod answers;
mod changes;
mod receipt;

pub use answers::{
    AmendAnswer, ApprovalAnswer, DiscardAnswer, ExitPlanAnswer, ModeAnswer, PlanAfter, PlanReview,
    RejectionAnswer, ReviewOutcome, ReviewRequested, SessionAnswer, SessionEnded,
};

pub use changes::{AmendedStep, JsonChange, PlanDiff, SinceReview, StatusChange};
pub use receipt::{Applied, Outcome, Receipt, ReceiptStep};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{Effect, JsonText, KeyState, LandsOn, Step, StepError, StepStatus, format_time_ms};

/// One step as `get_plan`, `plans show` and the console show it: redacted,
/// never sealed — the step as planned, and where it is in its life.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StepView {
    /// The step as planned (the fields a planned write's answer carries).
    #[serde(flatten)]
    pub step: PlannedStep,
    /// Where it is in its life.
    pub status: StepStatus,
    /// When it was planned, RFC 3339 UTC.
    pub planned_at: String,
    /// Why it failed or is in doubt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<StepError>,
    /// How many times it was started; shown to people (`plans show`, the
    /// console), not to the agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts: Option<u32>,
    /// Why a person rejected it, and who (status `rejected`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rejection: Option<crate::fold::Rejection>,
    /// The last time a person changed its arguments: who, when, how many
    /// times, and the redacted arguments before (the step's `arguments`
    /// are the new ones).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amendment: Option<AmendmentView>,
    /// A waiting step an approval that counts covers: `apply_plan`
    /// without `step_ids` runs it. Absent (false) otherwise.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub approved: bool,
    /// For an applied step: whether what it replaced is kept for an undo.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub undo: Option<crate::undo::Undo>,
    /// For an applied step: the applied inverse steps that reverted it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reverted_by: Vec<String>,
}

/// A person's change to a step's arguments, as answers show it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AmendmentView {
    /// Who changed them.
    pub by: String,
    /// When, RFC 3339 UTC.
    pub at: String,
    /// How many times the step was amended.
    pub count: u32,
    /// The redacted arguments before the last change.
    pub previous_arguments: JsonText,
}

impl StepView {
    /// `step` as shown to the agent.
    pub fn of(step: &Step) -> StepView {
        StepView {
            step: PlannedStep::of(step),
            status: step.status,
            planned_at: format_time_ms(step.record.planned_at_ms),
            error: step.error.clone(),
            attempts: None,
            rejection: step.rejection.clone(),
            amendment: step.amendment.as_ref().map(|a| AmendmentView {
                by: a.by.clone(),
                at: format_time_ms(a.at_ms),
                count: a.count,
                previous_arguments: a.previous_arguments.clone(),
            }),
            approved: false,
            undo: step.undo.clone(),
            reverted_by: step.reverted_by.clone(),
        }
    }

    /// Marks the view `approved` when it is waiting and `covered` (from
    /// [`KeyState::approved_steps`]) holds it.
    pub fn covered_by(mut self, covered: &std::collections::BTreeSet<&str>) -> StepView {
        self.approved =
            self.status == StepStatus::Planned && covered.contains(self.step.step_id.as_str());
        self
    }

    /// The view with every argument value and preview over
    /// [`MAX_SHOWN_BYTES`] shown as its size and digest ([`compact`]):
    /// what a plan listing carries, so no answer grows with what a step
    /// holds; `get_plan {"step_id"}` shows one step whole.
    pub fn compact(mut self) -> StepView {
        self.step = self.step.compact();
        self
    }

    /// `step` as shown to a person: with its attempts, and its preview
    /// even when the agent may not see it.
    pub fn for_person(step: &Step) -> StepView {
        StepView {
            step: PlannedStep::for_person(step),
            attempts: Some(step.attempts),
            ..StepView::of(step)
        }
    }
}

/// The most bytes of one argument value or preview an answer about a plan
/// carries as it is; a bigger one is shown as its size and digest.
pub const MAX_SHOWN_BYTES: usize = 64 * 1024;

/// `value` with every part over [`MAX_SHOWN_BYTES`] (as JSON text) shown
/// as its size and digest: objects and lists are looked into first, and
/// one still too big for its many small parts is replaced whole.
pub fn compact(value: Value) -> Value {
    if !over(&value, MAX_SHOWN_BYTES) {
        return value;
    }
    let inner = match value {
        Value::Object(map) => {
            Value::Object(map.into_iter().map(|(k, v)| (k, compact(v))).collect())
        }
        Value::Array(items) => Value::Array(items.into_iter().map(compact).collect()),
        other => return Value::String(shown_as_digest(&other)),
    };
    if over(&inner, MAX_SHOWN_BYTES) {
        Value::String(shown_as_digest(&inner))
    } else {
        inner
    }
}

/// Whether `value` as JSON text is surely over `limit` bytes, by a walk
/// that counts what it passes (strings by their bytes, a little for
/// punctuation) and stops as soon as it knows: no text is written for the
/// common small value.
fn over(value: &Value, limit: usize) -> bool {
    fn walk(value: &Value, left: &mut isize) -> bool {
        *left -= match value {
            Value::String(s) => s.len() as isize + 2,
            Value::Object(m) => 2 + m.keys().map(|k| k.len() as isize + 4).sum::<isize>(),
            Value::Array(items) => 2 + items.len() as isize,
            _ => 8,
        };
        if *left < 0 {
            return true;
        }
        match value {
            Value::Object(m) => m.values().any(|v| walk(v, left)),
            Value::Array(items) => items.iter().any(|v| walk(v, left)),
            _ => false,
        }
    }
    let mut left = isize::try_from(limit).unwrap_or(isize::MAX);
    walk(value, &mut left)
}

/// What stands for a value too big to show: its size and digest, and
/// where to see it whole.
fn shown_as_digest(value: &Value) -> String {
    let text = crate::canonical::canonical_lossless(value);
    format!(
        "[{} bytes, sha256:{}: not shown here; get_plan with this step's step_id shows it whole]",
        text.len(),
        crate::hash::sha256_hex(text.as_bytes())
    )
}

/// Seconds left in the plan's life, if one is running (rounded up).
pub fn expires_in(state: &KeyState, now_ms: i64, ttl_ms: i64) -> Option<i64> {
    state
        .expires_at_ms(ttl_ms)
        .map(|t| ((t - now_ms).max(0) + 999) / 1000)
}

/// The `plan` object a planned write's answer carries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanSummary {
    /// The mode in force.
    pub mode: String,
    /// Every open step, in plan order.
    pub step_ids: Vec<String>,
    /// How many are waiting.
    pub pending_steps: usize,
    /// Seconds left in the plan's life.
    pub expires_in: Option<i64>,
    /// The plan digest.
    pub plan_digest: String,
    /// The plan's revision ([`KeyState::revision`]): it advances with
    /// every change, so a reviewer can tell whether the plan moved since
    /// they looked.
    pub revision: u64,
}

impl PlanSummary {
    /// The summary of `state`'s plan under mode `mode`.
    pub fn of(state: &KeyState, mode: &str, now_ms: i64, ttl_ms: i64) -> PlanSummary {
        PlanSummary {
            mode: mode.to_owned(),
            step_ids: state
                .open_steps()
                .map(|s| s.record.step_id.clone())
                .collect(),
            pending_steps: state.planned_steps().count(),
            expires_in: expires_in(state, now_ms, ttl_ms),
            plan_digest: state.plan_digest(),
            revision: state.revision,
        }
    }
}

/// The fixed `code` of plangate's answers that are not refusals.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AnswerCode {
    /// A write became a plan step.
    PlanStep,
    /// An apply ran; the answer is its receipt.
    PlanApplied,
}

/// The answer to a write that was planned, not run (docs/design.md §5).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlannedWrite {
    /// Always [`AnswerCode::PlanStep`].
    pub code: AnswerCode,
    /// Always true: the write is a plan step.
    pub planned: bool,
    /// Always false: nothing was written.
    pub mutation_performed: bool,
    /// What happened and what to do next, for the agent.
    pub message: String,
    /// The step as planned.
    #[serde(flatten)]
    pub step: PlannedStep,
    /// Whether it repeated an existing step (the plan did not grow).
    pub deduplicated: bool,
    /// The plan after it.
    pub plan: PlanSummary,
    /// A change of mode the agent had not heard of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notice: Option<String>,
}

/// A step as planned: the fields a [`PlannedWrite`] carries, and the
/// first part of every [`StepView`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PlannedStep {
    /// The step's id.
    pub step_id: String,
    /// Its place in the plan.
    pub position: u32,
    /// The upstream.
    pub server: String,
    /// The upstream's tool.
    pub tool: String,
    /// The name the agent called.
    pub exposed_as: String,
    /// The arguments, secrets replaced by markers.
    pub arguments: JsonText,
    /// The effect class.
    pub effect: Effect,
    /// What it would do.
    pub predicted_effect: String,
    /// Where it lands.
    pub lands_on: LandsOn,
    /// Whether it needs a person's explicit yes.
    pub approval_required: bool,
    /// Why, when a rule says so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_note: Option<String>,
    /// What it would change, as the upstream showed it when planned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview: Option<crate::Preview>,
    /// The operator's rule that made it a step, when one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// For a person: why the agent was not shown this preview (it may not
    /// read the target). Never in the agent's own answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview_withheld: Option<String>,
    /// The applied step it undoes, when it is a revert.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reverts: Option<String>,
    /// Why the person did not answer when an `ask` mode asked them about
    /// this call: it waits for a person's yes whatever the key's scope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unanswered: Option<String>,
}

impl PlannedStep {
    /// See [`StepView::compact`].
    pub fn compact(mut self) -> PlannedStep {
        if self.arguments.as_str().len() > MAX_SHOWN_BYTES {
            self.arguments = JsonText::from_value(&compact(self.arguments.value()));
        }
        self.preview = self.preview.map(|p| match p {
            crate::Preview::Diff {
                target,
                before_digest,
                diff,
                creates,
                added,
                removed,
                ..
            } if diff.len() > MAX_SHOWN_BYTES => crate::Preview::Diff {
                target,
                before_digest,
                diff: shown_as_digest(&Value::String(diff)),
                creates,
                added,
                removed,
                truncated: true,
            },
            crate::Preview::State {
                target,
                before_digest,
                summary,
                state,
            } => crate::Preview::State {
                target,
                before_digest,
                summary,
                state: compact(state),
            },
            other => other,
        });
        self
    }

    /// `step`'s fields as the agent sees them (a planned answer,
    /// `get_plan`): a preview taken for the person only
    /// ([`crate::StepRecord::preview_withheld`]) says
    /// [`crate::preview::WITHHELD`] and nothing of what it read.
    pub fn of(step: &Step) -> PlannedStep {
        let mut shown = PlannedStep::for_person(step);
        if shown.preview_withheld.take().is_some() {
            shown.preview = Some(crate::Preview::Unavailable {
                target: step.record.lands_on.target.clone(),
                reason: crate::preview::WITHHELD.to_owned(),
            });
        }
        shown
    }

    /// `step`'s fields as a person sees them: its preview whatever the
    /// agent may read.
    pub fn for_person(step: &Step) -> PlannedStep {
        let r = &step.record;
        PlannedStep {
            step_id: r.step_id.clone(),
            position: r.position,
            server: r.server.clone(),
            tool: r.tool.clone(),
            exposed_as: r.exposed_as.clone(),
            arguments: r.arguments.clone(),
            effect: r.effect,
            predicted_effect: r.predicted_effect.clone(),
            lands_on: r.lands_on.clone(),
            approval_required: r.approval_required,
            approval_note: r.approval_note.clone(),
            preview: r.preview.clone(),
            rule: r.rule.clone(),
            preview_withheld: r.preview_withheld.clone(),
            reverts: r.reverts.clone(),
            unanswered: r.unanswered.clone(),
        }
    }
}

/// Where a key's plan stands — its mode, life, digest, revision and
/// approval — as `get_plan` and a person's view ([`KeyPlanView`]) both
/// say it: made once ([`PlanStanding::of`]) so the agent and the person
/// never read two answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PlanStanding {
    /// The mode in force.
    pub mode: String,
    /// Whether it is a plan-like mode.
    pub plan_mode: bool,
    /// Who locked the mode (`operator` or `config`), `null` if the agent
    /// may change it: a locked key's plan needs a person outside the key.
    #[serde(default)]
    pub mode_locked: Option<crate::LockedBy>,
    /// Seconds left in the plan's life.
    pub expires_in: Option<i64>,
    /// How many steps are waiting.
    pub pending_steps: usize,
    /// The plan digest an approval binds.
    pub plan_digest: String,
    /// The plan's revision: it advances with every change to the plan.
    pub revision: u64,
    /// What changed since the last review that recorded its revision
    /// (absent if none did, or nothing changed since).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since_review: Option<SinceReview>,
    /// Whether that digest is approved by someone whose approval counts.
    pub approved: bool,
}

impl PlanStanding {
    /// `state`'s plan under the mode `in_force`, with `covered` the steps an
    /// approval that counts for the key covers
    /// ([`crate::rules::approved_steps`]), `now_ms` and the plan's life
    /// `ttl_ms`.
    pub fn of(
        state: &KeyState,
        in_force: &crate::InForce,
        covered: &std::collections::BTreeSet<&str>,
        (now_ms, ttl_ms): (i64, i64),
    ) -> PlanStanding {
        PlanStanding {
            mode: in_force.spec.name.clone(),
            plan_mode: in_force.spec.plan_mode(),
            mode_locked: in_force.locked_by,
            expires_in: expires_in(state, now_ms, ttl_ms),
            pending_steps: state.planned_steps().count(),
            plan_digest: state.plan_digest(),
            revision: state.revision,
            since_review: state.since_review(),
            approved: state.covers_waiting(covered),
        }
    }
}

/// `get_plan`'s answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PlanView {
    /// Always true (a refusal is not a plan view).
    pub success: bool,
    /// Where the plan stands.
    #[serde(flatten)]
    pub standing: PlanStanding,
    /// Every open step, in plan order.
    pub steps: Vec<StepView>,
    /// The plan in a sentence, and what to do next.
    pub message: String,
    /// What people decided about the plan so far, in the shape
    /// `exit_plan_mode`'s `outcome` has: the waiting steps a yes that
    /// counts covers, the steps rejected with their reasons, how many
    /// still wait. Absent while nobody has approved or rejected anything:
    /// after a review that outlived its call, this is where the answer
    /// shows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<ReviewOutcome>,
    /// A recorded mode no longer defined, or a mode change not yet told.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notice: Option<String>,
}

/// A key's plan as a person sees it (`plans show --json`, the console).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KeyPlanView {
    /// The key's name.
    pub key: String,
    /// The key's id.
    pub key_id: String,
    /// The key's scope.
    pub scope: crate::Scope,
    /// Whether the key was revoked.
    pub revoked: bool,
    /// Where the plan stands, as `get_plan` says it.
    #[serde(flatten)]
    pub standing: PlanStanding,
    /// The revision the last recorded review answer saw, if one recorded
    /// it: `plans diff` shows what changed since.
    pub reviewed_revision: Option<u64>,
    /// Every open step, with its attempts.
    pub steps: Vec<StepView>,
    /// The steps the key's last apply applied
    /// ([`KeyState::last_applied`]), each with whether what it replaced
    /// is kept for an undo and what reverted it: what a revert undoes by
    /// default. Empty (absent) when nothing was applied.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub last_apply: Vec<StepView>,
    /// How many of them a revert can still undo ([`Step::revertible`]).
    #[serde(default)]
    pub revertible: usize,
    /// A recorded mode that is no longer defined.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notice: Option<String>,
}

/// A rejected step as answers list it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RejectedStep {
    /// The step's id.
    pub step_id: String,
    /// Its place in the plan.
    pub position: u32,
    /// What it was to do.
    pub predicted_effect: String,
    /// The person's reason, verbatim.
    pub reason: String,
    /// Who rejected it.
    pub by: String,
}

impl RejectedStep {
    /// Every rejected step of `state`'s plan, in plan order.
    pub fn all(state: &KeyState) -> Vec<RejectedStep> {
        state
            .open_steps()
            .filter_map(|s| {
                let r = s.rejection.as_ref()?;
                (s.status == crate::StepStatus::Rejected).then(|| RejectedStep {
                    step_id: s.record.step_id.clone(),
                    position: s.record.position,
                    predicted_effect: s.record.predicted_effect.clone(),
                    reason: r.reason.clone(),
                    by: r.by.clone(),
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn values_over_the_cap_show_their_size_and_digest_and_small_ones_stay() {
        let big = "x".repeat(MAX_SHOWN_BYTES + 1);
        let args = json!({"path": "/a", "content": big, "many": vec!["yy"; 30_000], "n": 3});
        let shown = compact(args);
        assert_eq!(shown["path"], "/a");
        assert_eq!(shown["n"], 3);
        for field in ["content", "many"] {
            let said = shown[field].as_str().unwrap();
            assert!(
                said.starts_with('[') && said.contains(" bytes, sha256:"),
                "{said}"
            );
        }
        // The digest is of the value's canonical JSON, so a person can check it.
        let text = crate::canonical::canonical_lossless(&json!("x".repeat(MAX_SHOWN_BYTES + 1)));
        assert!(
            shown["content"]
                .as_str()
                .unwrap()
                .contains(&crate::hash::sha256_hex(text.as_bytes()))
        );
        let small = json!({"a": [1, 2, {"b": "c"}]});
        assert_eq!(compact(small.clone()), small);
    }
    use crate::event::tests::record;
    use crate::{Actor, Channel, Event, EventKind, StepErrorCode};

    /// A plan of one waiting and one failed step.
    fn plan() -> KeyState {
        let mut state = KeyState::default();
        let event = |kind| Event {
            at_ms: 1_700_000_000_000,
            key_id: "key_1".into(),
            actor: Actor::System,
            channel: Channel::Cli,
            kind,
        };
        let kinds = [
            EventKind::StepPlanned {
                step: record("s1", 1, "set_title", json!({"title": "Hi"})),
            },
            EventKind::StepPlanned {
                step: record("s2", 2, "delete_page", json!({"slug": "old"})),
            },
            EventKind::ApplyStarted {
                apply_id: "a".into(),
                step_ids: vec!["s2".into()],
                plan_digest: None,
            },
            EventKind::StepStarted {
                step_id: "s2".into(),
                apply_id: "a".into(),
                owner: "o".into(),
                lease_until_ms: 1_700_000_009_000,
            },
            EventKind::StepFailed {
                step_id: "s2".into(),
                error: StepError {
                    code: StepErrorCode::UpstreamError,
                    message: "no".into(),
                    upstream: None,
                },
            },
        ];
        for (i, kind) in kinds.into_iter().enumerate() {
            state.apply(i as i64 + 1, &event(kind));
        }
        state
    }

    #[test]
    fn a_step_is_shown_with_exactly_the_contracts_fields() {
        let state = plan();
        let shown = serde_json::to_value(StepView::of(state.step("s1").unwrap())).unwrap();
        let keys: Vec<&str> = shown
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            keys,
            [
                "approval_required",
                "arguments",
                "effect",
                "exposed_as",
                "lands_on",
                "planned_at",
                "position",
                "predicted_effect",
                "server",
                "status",
                "step_id",
                "tool"
            ]
        );
        assert_eq!(shown["status"], "planned");
        assert_eq!(shown["planned_at"], "1970-01-01T00:00:01Z");
        // A failed step carries its error; a person also sees attempts.
        let failed = serde_json::to_value(StepView::for_person(state.step("s2").unwrap())).unwrap();
        assert_eq!(failed["error"]["code"], "upstream_error");
        assert_eq!(failed["attempts"], 1);
        let back: StepView = serde_json::from_value(failed.clone()).unwrap();
        assert_eq!(serde_json::to_value(back).unwrap(), failed);
    }

    #[test]
    fn a_receipt_step_carries_what_was_applied_only_when_it_was() {
        let state = plan();
        let s2 = state.step("s2").unwrap();
        let failed = serde_json::to_value(ReceiptStep::of(s2, Outcome::Failed)).unwrap();
        assert_eq!(failed["outcome"], "failed");
        assert_eq!(failed["error"]["message"], "no");
        assert!(failed.get("result").is_none() && failed.get("copy_id").is_none());
        let not_run = serde_json::to_value(ReceiptStep::of(s2, Outcome::NotRun)).unwrap();
        assert!(not_run.get("error").is_none(), "{not_run}");
        assert_eq!(not_run["approved_by_apply"], false);
        let back: ReceiptStep = serde_json::from_value(failed.clone()).unwrap();
        assert_eq!(back.applied, None);
    }

    #[test]
    fn the_plan_summary_lists_open_steps_and_counts_the_waiting() {
        let state = plan();
        let summary = PlanSummary::of(&state, "plan", 1_700_000_000_000, 60_000);
        assert_eq!(summary.step_ids, ["s1", "s2"]);
        assert_eq!(summary.pending_steps, 1);
        assert_eq!(summary.plan_digest, state.plan_digest());
    }
}
