//! Why a person's act on a plan was refused: [`OperatorError`], with its
//! stable code (docs/design.md §8). Apart from the acts themselves because
//! every act, and the CLI and the console reading the answer, share it.

use plangate_core::rules::Refused;
use plangate_core::{Code, StepStatus};

use crate::key_log::LogError;
use crate::refusal::Refusal;

/// Why a person's act on a plan was refused. Nothing was recorded or run.
#[derive(Debug, thiserror::Error)]
pub enum OperatorError {
    /// The plan has no step with that id.
    #[error("there is no step {step:?} in key {key:?}'s plan")]
    NoStep {
        /// The key's name.
        key: String,
        /// The step id given.
        step: String,
    },
    /// A plan rule refused ([`plangate_core::rules`]): the same refusal,
    /// under the same code, as the agent's tools give.
    #[error("{refused} (key {key:?}); nothing was recorded")]
    Rule {
        /// The key's name.
        key: String,
        /// What the rule said.
        refused: Refused,
    },
    /// Only an in-doubt step is retried.
    #[error(
        "step {step} is {status}, not in doubt: only an in-doubt step is retried; nothing was run"
    )]
    NotInDoubt {
        /// The step.
        step: String,
        /// Its status now.
        status: StepStatus,
    },
    /// The plan is no longer the one the person looked at.
    #[error(
        "the plan of key {key} is now {current}, not {seen}; nothing was recorded or run. Look at it again"
    )]
    PlanChanged {
        /// The key's name.
        key: String,
        /// The digest the person saw.
        seen: String,
        /// The digest now.
        current: String,
    },
    /// The plan moved on from the revision the person looked at, though
    /// its digest may be the same (a step's status changed).
    #[error(
        "the plan of key {key} is at revision {current}, not {seen}, the one you looked at; nothing was recorded or run. Look at it again"
    )]
    RevisionMoved {
        /// The key's name.
        key: String,
        /// The revision the person saw.
        seen: u64,
        /// The revision now.
        current: u64,
    },
    /// Not a plan digest at all.
    #[error("{0:?} is not a plan digest: it looks like sha256: and 64 hex digits")]
    BadDigest(String),
    /// New arguments for a step that cannot be taken.
    #[error("{0}; nothing was recorded")]
    BadArguments(String),
    /// The step changed while a person was acting on it (another person
    /// amended it, or it was applied, discarded or rejected meanwhile).
    #[error(
        "step {step} of key {key:?} changed while you were amending it (it is {status} now, or someone else amended it first); nothing was recorded. Look at it again"
    )]
    StepChanged {
        /// The key's name.
        key: String,
        /// The step.
        step: String,
        /// Its status now.
        status: StepStatus,
    },
    /// Nothing is waiting, so there is nothing to approve.
    #[error("key {key:?} has no waiting steps to approve; nothing was recorded")]
    NothingWaiting {
        /// The key's name.
        key: String,
    },
    /// A rejection needs a reason the agent can act on.
    #[error(
        "a rejection needs a reason (1 to {max} characters), for the agent to read; nothing was recorded"
    )]
    BadReason {
        /// The longest reason taken.
        max: usize,
    },
    /// An apply of the key's plan is (or may still be) running.
    #[error(
        "an apply of key {key:?}'s plan is still running (or stopped less than a lease ago); step {step} stays in doubt. Try again shortly"
    )]
    ApplyAlive {
        /// The key's name.
        key: String,
        /// The step the person wanted to retry.
        step: String,
    },
    /// The plan's life is over, so a retried step would only expire.
    #[error(
        "key {key:?}'s plan outlived its life, so a retried step would expire unrun; step {step} stays in doubt. Discard it, or have the agent begin a new session and plan it again"
    )]
    PlanOutlived {
        /// The key's name.
        key: String,
        /// The step.
        step: String,
    },
    /// An upstream a step calls is not connected.
    #[error("upstream {server:?} is not connected ({why}); nothing was run")]
    UpstreamDown {
        /// The upstream.
        server: String,
        /// Why, as the gateway knows it.
        why: String,
    },
    /// The apply itself refused.
    #[error("apply refused ({}): {}", .0.code.as_str(), .0.message)]
    Refused(Refusal),
    /// The act needs a factor, or the one given was refused.
    #[error("{0}")]
    Factor(#[from] super::factor::FactorError),
    /// The event log could not be read or written.
    #[error("{0}")]
    Log(#[from] LogError),
}

impl OperatorError {
    /// The stable code (docs/design.md §8) for answers a program reads; its
    /// HTTP status and JSON-RPC code come with it ([`Code::http_status`]).
    pub fn code(&self) -> Code {
        match self {
            OperatorError::NoStep { .. }
            | OperatorError::NotInDoubt { .. }
            | OperatorError::BadDigest(_)
            | OperatorError::NothingWaiting { .. }
            | OperatorError::BadArguments(_)
            | OperatorError::BadReason { .. } => Code::InvalidArguments,
            OperatorError::StepChanged { .. } => Code::PlanChanged,
            OperatorError::Rule { refused, .. } => refused.code(),
            OperatorError::PlanChanged { .. } | OperatorError::RevisionMoved { .. } => {
                Code::PlanChanged
            }
            OperatorError::ApplyAlive { .. } => Code::ApplyInProgress,
            OperatorError::PlanOutlived { .. } => Code::PlanExpired,
            OperatorError::UpstreamDown { .. } => Code::UpstreamDown,
            OperatorError::Log(_) => Code::StoreUnavailable,
            OperatorError::Refused(r) => r.code,
            OperatorError::Factor(e) => e.code(),
        }
    }

    /// Whether the person asked for something that cannot be (a bad step,
    /// digest or status) rather than the world failing: the CLI exits 2.
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            OperatorError::NoStep { .. }
                | OperatorError::Rule { .. }
                | OperatorError::NotInDoubt { .. }
                | OperatorError::BadDigest(_)
                | OperatorError::NothingWaiting { .. }
                | OperatorError::BadArguments(_)
                | OperatorError::BadReason { .. }
        )
    }
}
