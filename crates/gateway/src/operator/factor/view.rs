//! What a yes needs and who can give it, as one typed answer:
//! `plangate approvals show` at the data dir and `GET
//! /console/api/approvals` (for `--server`) both render it.

use plangate_core::factor::Requirement;
use plangate_core::operators::Operators;
use serde::{Deserialize, Serialize};

/// The requirement in force and every enrolled operator's factors (never
/// a secret: only whether each factor is there, and how many recovery
/// codes are left).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ApprovalsView {
    /// What every yes needs.
    pub require: Requirement,
    /// The enrolled operators, by name.
    pub operators: Vec<OperatorFactors>,
}

/// One enrolled operator's factors.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OperatorFactors {
    /// The operator's name.
    pub operator: String,
    /// Whether a TOTP secret is enrolled.
    pub totp: bool,
    /// How many passkeys are registered.
    pub passkeys: usize,
    /// Recovery codes not used yet.
    pub recovery_codes_left: usize,
    /// Recovery codes printed at enrolment.
    pub recovery_codes: usize,
    /// When the operator was enrolled (RFC 3339).
    pub enrolled_at: String,
}

/// The view of the folded operators' log.
pub fn approvals_view(state: &Operators) -> ApprovalsView {
    ApprovalsView {
        require: state.require,
        operators: state
            .enrolled
            .iter()
            .map(|(name, e)| OperatorFactors {
                operator: name.clone(),
                totp: e.totp_sealed.is_some(),
                passkeys: e.passkeys.len(),
                recovery_codes_left: e.recovery.iter().filter(|(_, used)| !used).count(),
                recovery_codes: e.recovery.len(),
                enrolled_at: plangate_core::format_time_ms(e.enrolled_at_ms),
            })
            .collect(),
    }
}

/// What `approvals require` changed: from what, to what.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct RequireAnswer {
    /// The requirement before.
    pub from: Requirement,
    /// The requirement now.
    pub require: Requirement,
}
