//! A step as the log says it is now ([`Step`]), and what people's words
//! left on it: a rejection ([`Rejection`]) and the last amendment
//! ([`Amendment`]).
//!
//! Apart from the key's state that holds the steps ([`super::KeyState`]):
//! these are the records one step carries, whatever the event that
//! changed it.

use serde::{Deserialize, Serialize};

use super::StepStatus;
use crate::{JsonText, StepError, StepRecord};

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
    /// that run, whatever the server answered ([`crate::KeyState::approved_steps`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claimed_seq: Option<i64>,
    /// Whether what it replaced is kept for an undo, once applied
    /// (`undo_recorded`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub undo: Option<crate::undo::Undo>,
    /// The applied inverse steps that reverted it (`reverts` naming it),
    /// once applied: the link from an original to its revert.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reverted_by: Vec<String>,
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Rejection {
    /// Their reason, verbatim.
    pub reason: String,
    /// Who said it (an operator's name, or a key's).
    pub by: String,
}

impl Step {
    /// Whether a revert can be planned for it: applied, not reverted yet,
    /// and its undo available (what it replaced kept, or a snapshot the
    /// server kept). Whether the target is still as it left it is for the
    /// revert to find out.
    pub fn revertible(&self) -> bool {
        self.status == StepStatus::Applied
            && self.reverted_by.is_empty()
            && self.undo.as_ref().is_some_and(crate::undo::Undo::available)
    }

    /// A step just planned: waiting, never claimed.
    pub(super) fn new(record: StepRecord, at_ms: i64) -> Step {
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
            undo: None,
            reverted_by: Vec::new(),
        }
    }
}
