//! What changed in a plan, as answers carry it: since the last review
//! (`since_review` of `get_plan` and `plans show`), between two revisions
//! (`plans diff`), and in a step's arguments. The types only; `revision`
//! computes them from the fold.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::StepView;
use crate::StepStatus;

/// A step whose status changed between two revisions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StatusChange {
    /// The step.
    pub step_id: String,
    /// Its position in the plan.
    pub position: u32,
    /// The tool as the agent called it.
    pub exposed_as: String,
    /// What it was predicted to do.
    pub predicted_effect: String,
    /// Its status then.
    pub from: StepStatus,
    /// Its status now.
    pub to: StepStatus,
}

/// A step a person amended between two revisions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AmendedStep {
    /// The step.
    pub step_id: String,
    /// Its position in the plan.
    pub position: u32,
    /// The tool as the agent called it.
    pub exposed_as: String,
    /// Who amended it last.
    pub by: String,
    /// The change to its redacted arguments.
    pub arguments: Vec<JsonChange>,
    /// What it was predicted to do then.
    pub predicted_effect_then: String,
    /// What it is predicted to do now.
    pub predicted_effect_now: String,
    /// Whether its preview (what the upstream showed of the target)
    /// changed.
    pub preview_changed: bool,
}

/// What changed in a plan between two revisions (`plans diff`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanDiff {
    /// The revision compared from.
    pub since: u64,
    /// The revision now.
    pub revision: u64,
    /// Steps planned since, as a person sees them (redacted), in plan
    /// order.
    pub added: Vec<StepView>,
    /// Steps that existed then and whose status changed, in plan order.
    pub status_changed: Vec<StatusChange>,
    /// Steps a person amended since, with the change to their (redacted)
    /// arguments and what their preview says now, in plan order.
    pub amended: Vec<AmendedStep>,
    /// The plan digest then and now: an approval of the earlier digest
    /// does not cover a plan whose digest changed.
    pub digest_then: String,
    /// The plan digest now.
    pub digest_now: String,
}

/// What changed since the last review that recorded its revision, as
/// `get_plan` and `plans show` say it: compact (step ids; the steps
/// themselves are listed beside it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SinceReview {
    /// The revision the review saw.
    pub reviewed_revision: u64,
    /// The revision now.
    pub revision: u64,
    /// Steps planned since, by id, in plan order.
    pub added: Vec<String>,
    /// Steps whose status changed since, in plan order.
    pub status_changed: Vec<StatusChange>,
    /// Steps a person amended since, in plan order, each with the change
    /// to its (redacted) arguments since the review and whether its
    /// preview changed.
    #[serde(default)]
    pub amended: Vec<AmendedStep>,
    /// Whether the plan digest moved: an approval given then does not
    /// cover the plan now.
    pub digest_changed: bool,
}

/// One change between two JSON values, at a JSON pointer (RFC 6901) into
/// them: a value added, removed or replaced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct JsonChange {
    /// Where, as a JSON pointer (`""` for the whole value).
    pub path: String,
    /// The value before; absent when it was added.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<Value>,
    /// The value after; absent when it was removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<Value>,
}

impl std::fmt::Display for JsonChange {
    /// `path: before → after`, as a person and an agent read one change
    /// (`(none)` for a value added or removed).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let show = |v: &Option<Value>| {
            v.as_ref()
                .map_or_else(|| "(none)".to_owned(), Value::to_string)
        };
        let path = if self.path.is_empty() {
            "/"
        } else {
            &self.path
        };
        write!(f, "{path}: {} → {}", show(&self.before), show(&self.after))
    }
}
