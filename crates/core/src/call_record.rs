//! Every call on the record (docs/design.md §9): a durable `call_recorded` event
//! for each call that is not a read — run directly, planned, asked or
//! refused — written before its answer goes back, so what an agent did
//! through plangate is in the audit log whatever its mode.
//!
//! The record is plain data; the fold reads past it (it changes neither
//! mode nor plan). Its arguments are redacted as everywhere, and a
//! planned call's are left out: the `step_planned` appended with it holds
//! them.

use serde::{Deserialize, Serialize};

use crate::{Effect, JsonText};

/// What plangate decided about a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallDecision {
    /// Sent to the upstream at once.
    Run,
    /// Planned as a step, not run.
    Plan,
    /// Put to the person first (an `ask` mode), then run or not.
    Ask,
    /// Refused before anything was sent.
    Refuse,
}

/// How a recorded call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallOutcome {
    /// The upstream answered with a result.
    Ok,
    /// The upstream answered with an error (a tool error or a JSON-RPC
    /// error), or could not be reached.
    Error,
    /// It became (or matched) a plan step; nothing was sent.
    Planned,
    /// It was refused; nothing was sent.
    Refused,
    /// It is waiting on the client (a question the upstream or plangate
    /// asked); its end is recorded by the call that answers it.
    Pending,
}

/// One call, as the audit log keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallRecord {
    /// The upstream.
    pub server: String,
    /// The upstream's own tool name.
    pub tool: String,
    /// The name the agent called.
    pub exposed_as: String,
    /// The tool's effect class.
    pub effect: Effect,
    /// The arguments, redacted; `None` for a planned call (its step holds
    /// them) or one refused before they were read.
    pub arguments: Option<JsonText>,
    /// What plangate decided.
    pub decision: CallDecision,
    /// How it ended.
    pub outcome: CallOutcome,
    /// The refusal's code, or `upstream_error`.
    pub code: Option<String>,
    /// The step it became, when planned.
    pub step_id: Option<String>,
    /// From the call's arrival to its answer, in milliseconds.
    pub duration_ms: u64,
    /// For a refusal an agent can repeat cheaply (`forbidden`,
    /// `rate_limited`, …): how many more of the same key and code were
    /// refused since the last one recorded and were counted, not written
    /// one by one, so they cannot force unbounded writes.
    #[serde(default)]
    pub repeated: u32,
    /// The operator's rule (`[[rules]]`) that decided the call, when one
    /// did: a `run` rule is a standing approval and is named here as the
    /// approver.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
}
