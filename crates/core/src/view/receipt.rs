//! The receipt of an apply: how each selected step ended ([`Outcome`]),
//! what it answered ([`ReceiptStep`], [`Applied`]) and the whole
//! [`Receipt`] the agent, the CLI and the console show. Apart from the
//! plan's views because it is what happened, not what is planned.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{AnswerCode, RejectedStep};
use crate::{JsonText, Step, StepError};

/// How one selected step ended in an apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The upstream answered without an error.
    Applied,
    /// The upstream answered with an error, or a check refused the step.
    Failed,
    /// The call may or may not have reached the upstream.
    InDoubt,
    /// Not run: an earlier step failed and `continue_on_error` was off.
    NotRun,
    /// Not run: no approval that counts covers it (a person approved
    /// other steps of the plan); it stays waiting.
    NotApproved,
}

impl Outcome {
    /// The stable string.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Applied => "applied",
            Outcome::Failed => "failed",
            Outcome::InDoubt => "in_doubt",
            Outcome::NotRun => "not_run",
            Outcome::NotApproved => "not_approved",
        }
    }
}

/// The receipt of an apply (docs/design.md §5).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Receipt {
    /// No step failed or is in doubt.
    pub success: bool,
    /// Always [`AnswerCode::PlanApplied`].
    pub code: AnswerCode,
    /// What happened, in a sentence, and what to do next.
    pub message: String,
    /// Steps applied.
    pub applied: u32,
    /// Steps failed.
    pub failed: u32,
    /// Steps in doubt.
    pub in_doubt: u32,
    /// Steps not run.
    pub not_run: u32,
    /// Steps selected but not run because no approval that counts covers
    /// them; they stay waiting.
    pub not_approved: u32,
    /// Destructive steps whose yes was this apply (a write key's).
    pub approved_by_apply: Vec<String>,
    /// The digest applied.
    pub plan_digest: String,
    /// Whether a plan-like mode is still in force.
    pub plan_mode: bool,
    /// Each selected step, in plan order.
    pub steps: Vec<ReceiptStep>,
    /// Steps a person rejected: never run, each with the reason verbatim,
    /// so the agent hears it as it hears "keep planning" feedback.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rejected: Vec<RejectedStep>,
    /// Steps still waiting after this apply, each flagged when tied to a
    /// step it applied (docs/design.md §5, "Partial applies").
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub left_waiting: Vec<crate::partial::LeftStep>,
    /// A change of mode the agent had not heard of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notice: Option<String>,
    /// The mode the session is in after this apply, when the apply itself
    /// ended plan mode (a person's yes to `exit_plan_mode`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
}

impl Receipt {
    /// The receipt of an apply that had nothing to run: no step selected,
    /// the plan as it is.
    pub fn nothing(message: String, plan_digest: String, plan_mode: bool) -> Receipt {
        Receipt {
            success: true,
            code: AnswerCode::PlanApplied,
            message,
            applied: 0,
            failed: 0,
            in_doubt: 0,
            not_run: 0,
            not_approved: 0,
            approved_by_apply: Vec::new(),
            plan_digest,
            plan_mode,
            steps: Vec::new(),
            rejected: Vec::new(),
            left_waiting: Vec::new(),
            notice: None,
            mode: None,
        }
    }
}

/// One step of a [`Receipt`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ReceiptStep {
    /// The step's id.
    pub step_id: String,
    /// Its place in the plan.
    pub position: u32,
    /// The upstream's tool.
    pub tool: String,
    /// The upstream.
    pub server: String,
    /// What it was to do.
    pub predicted_effect: String,
    /// Whether this apply was its (destructive) yes.
    pub approved_by_apply: bool,
    /// How it ended.
    pub outcome: Outcome,
    /// What the upstream answered, for an applied step.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub applied: Option<Applied>,
    /// Why it failed or is in doubt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<StepError>,
    /// The applied step it undoes, when it is a revert.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reverts: Option<String>,
}

/// What an applied step left behind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Applied {
    /// The upstream's result.
    pub result: Value,
    /// The copy it landed on, if it landed on one.
    pub copy_id: Option<String>,
    /// Links the upstream returned (a preview URL, a pull request).
    pub links: Vec<String>,
    /// Snapshots taken before it ran.
    pub snapshots: Vec<String>,
    /// Whether what it replaced is kept for an undo (docs/design.md §5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub undo: Option<crate::undo::Undo>,
}

impl ReceiptStep {
    /// `step`'s line in a receipt, given how it ended.
    pub fn of(step: &Step, outcome: Outcome) -> ReceiptStep {
        let r = &step.record;
        ReceiptStep {
            step_id: r.step_id.clone(),
            position: r.position,
            tool: r.tool.clone(),
            server: r.server.clone(),
            predicted_effect: r.predicted_effect.clone(),
            approved_by_apply: r.approval_required
                && !matches!(outcome, Outcome::NotRun | Outcome::NotApproved),
            outcome,
            applied: (outcome == Outcome::Applied).then(|| Applied {
                result: step.result.as_ref().map_or(Value::Null, JsonText::value),
                copy_id: step.copy_id.clone(),
                links: step.links.clone(),
                snapshots: step.snapshots.clone(),
                undo: step.undo.clone(),
            }),
            error: matches!(outcome, Outcome::Failed | Outcome::InDoubt)
                .then(|| step.error.clone())
                .flatten(),
            reverts: r.reverts.clone(),
        }
    }
}
