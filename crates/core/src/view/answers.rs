//! What a person's act on a plan answers, as every face gives it: the
//! CLI's `--json`, the web console's API, and the text the CLI prints from
//! the same value. One type a verb, built in one place
//! (`gateway::operator`), so no face reshapes an answer of its own.

use serde::{Deserialize, Serialize};

use super::{JsonChange, StepView};
use crate::{Actor, KeyState};

/// Where a plan stands after an act: its digest, its revision, and how
/// many steps wait.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PlanAfter {
    /// The plan digest now.
    pub plan_digest: String,
    /// The plan's revision now.
    pub revision: u64,
    /// How many steps are waiting now.
    pub pending_steps: usize,
}

impl PlanAfter {
    /// Where `state`'s plan stands.
    pub fn of(state: &KeyState) -> PlanAfter {
        PlanAfter {
            plan_digest: state.plan_digest(),
            revision: state.revision,
            pending_steps: state.planned_steps().count(),
        }
    }
}

/// A key's plan as a person reviews it before a yes (`plans show`, and
/// `GET /console/api/plan` that `plans show --server` reads): the plan,
/// which waiting steps no yes covers yet, and whether the key's log
/// verifies — so a person on another machine is shown exactly what one at
/// the data dir is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanReview {
    /// The plan.
    pub plan: super::KeyPlanView,
    /// The waiting steps that do not run without a person's yes.
    pub waiting_for_yes: Vec<String>,
    /// The steps a person's apply of the whole plan runs now, in order
    /// (what `plans apply` without step ids asks a yes for).
    pub applies: Vec<String>,
    /// The first event of the key's log that does not verify, in words
    /// (nothing of such a log is applied).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_broken: Option<String>,
}

/// A person set a key's mode (`plangate mode set`, here or through
/// `--server`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModeAnswer {
    /// The key's name.
    pub key: String,
    /// The key's id.
    pub key_id: String,
    /// The mode in force now.
    pub mode: String,
    /// Whether it is a plan-like mode.
    pub plan_mode: bool,
    /// Who holds the key in it, if anyone.
    pub mode_locked: Option<crate::LockedBy>,
    /// The person who set it.
    pub set_by: String,
}

/// A person's yes (`plans approve`, the console's Approve).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalAnswer {
    /// Always true: a refusal is an error, not this.
    pub success: bool,
    /// The key whose plan it is.
    pub key: String,
    /// The steps the yes covers, in plan order.
    pub approved_steps: Vec<String>,
    /// The digest the yes binds: of exactly those steps.
    pub approved_digest: String,
    /// Waiting steps no yes that counts for the key covers yet.
    pub not_approved: Vec<String>,
    /// Of those, the ones tied to a step this yes covers — the same target,
    /// or a name an approved step moves or removes ([`crate::partial`]):
    /// the approved steps can run without them, leaving the work half done.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub left_tied: Vec<crate::partial::LeftStep>,
    /// Who said yes.
    pub approved_by: Actor,
    /// The plan now.
    #[serde(flatten)]
    pub plan: PlanAfter,
}

/// A person's no to one waiting step (`plans reject`, the console's Reject).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RejectionAnswer {
    /// Always true.
    pub success: bool,
    /// The key whose plan it is.
    pub key: String,
    /// The step rejected.
    pub rejected: String,
    /// The reason, as its agent reads it.
    pub reason: String,
    /// Who said no.
    pub rejected_by: Actor,
    /// The plan now.
    #[serde(flatten)]
    pub plan: PlanAfter,
}

/// Steps a person discarded (`plans discard`, the console's Discard).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DiscardAnswer {
    /// Always true.
    pub success: bool,
    /// The key whose plan it is.
    pub key: String,
    /// The steps discarded, in plan order.
    pub discarded: Vec<String>,
    /// Who discarded them.
    pub discarded_by: Actor,
    /// The plan now.
    #[serde(flatten)]
    pub plan: PlanAfter,
}

/// A step a person amended (`plans amend`, the console's amend form).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AmendAnswer {
    /// Always true.
    pub success: bool,
    /// The key whose plan it is.
    pub key: String,
    /// The step as amended, as a person sees it.
    pub step: StepView,
    /// What changed in its (redacted) arguments.
    pub arguments_changed: Vec<JsonChange>,
    /// Whether a yes that counted for the key covered the step before the
    /// amendment (it no longer does).
    pub was_approved: bool,
    /// Who amended it.
    pub amended_by: Actor,
    /// The plan now.
    #[serde(flatten)]
    pub plan: PlanAfter,
}

/// `begin_session`'s answer: the session, its mode, and what the mode
/// asks of the agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SessionAnswer {
    /// Always true.
    pub success: bool,
    /// The session begun.
    pub session_id: String,
    /// Its mode.
    pub mode: String,
    /// Whether that mode plans writes.
    pub plan_mode: bool,
    /// Every mode this gateway defines.
    pub modes: Vec<String>,
    /// Seconds left in the plan's life.
    pub expires_in: Option<i64>,
    /// How many steps are waiting.
    pub pending_steps: usize,
    /// What the mode asks of the agent, in words.
    pub instructions: String,
}

/// `end_session`'s answer: the steps it dropped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SessionEnded {
    /// Always true.
    pub success: bool,
    /// How many steps were dropped.
    pub discarded_steps: usize,
    /// Their ids.
    pub discarded: Vec<String>,
}

/// `exit_plan_mode`'s answer for a key whose own client's yes does not
/// count: the request for review is on the record, and nobody was asked
/// here.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ReviewRequested {
    /// Always true.
    pub success: bool,
    /// Always true: the review was asked of a person, not of this client.
    pub review_requested: bool,
    /// The plan's digest the request names.
    pub plan_digest: String,
    /// What happens next, in words.
    pub message: String,
    /// What the person decided while this call waited, when they did;
    /// absent when the call stopped waiting first: the review goes on, and
    /// `get_plan` shows its outcome when it comes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<ReviewOutcome>,
}

/// What a person decided about a plan put up for review
/// ([`crate::rules::review_outcome`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ReviewOutcome {
    /// The waiting steps a person's yes now covers, in plan order: the
    /// agent applies them with `apply_plan` and `plan_digest`.
    pub approved: Vec<String>,
    /// The steps a person said no to since review was asked, with their
    /// reasons, verbatim.
    pub rejected: Vec<super::RejectedStep>,
    /// How many waiting steps no yes covers yet.
    pub waiting: usize,
    /// The plan's digest now.
    pub plan_digest: String,
}

/// What `exit_plan_mode` answers when it does not refuse: the receipt of
/// the plan the person approved and this call applied, or that review
/// was asked of a person elsewhere (the tool's output schema).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum ExitPlanAnswer {
    /// The person approved and the plan ran.
    Applied(super::Receipt),
    /// The request is on the record; a person answers it where they
    /// review.
    Requested(ReviewRequested),
}
