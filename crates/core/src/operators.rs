//! The operators' log folded ([`Operators`]): what a yes needs and who
//! may give it (docs/design.md §12). Apart from [`crate::factor`], whose
//! types the events carry, so the events and the fold of them do not
//! import each other.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::chain::Chain;
use crate::event::{Event, EventKind};
use crate::factor::{FAILURE_WINDOW_MS, Requirement};

/// The log holding operators, the requirement and factor uses, beside the
/// keys' logs and [`crate::TOOLS_LOG`] in the same store.
pub const OPERATORS_LOG: &str = "operators";

/// One enrolled operator, as the log holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Enrolled {
    /// The TOTP secret, sealed under the seal key.
    pub totp_sealed: Option<String>,
    /// SHA-256 (hex) of each recovery code, with whether it was used.
    pub recovery: Vec<(String, bool)>,
    /// The newest TOTP step used: no code of it or before is taken again.
    pub last_step: Option<u64>,
    /// When each wrong code was entered, newest last (only recent ones
    /// are kept).
    pub failures: Vec<i64>,
    /// When it was enrolled.
    pub enrolled_at_ms: i64,
    /// The passkeys registered for it.
    #[serde(default)]
    pub passkeys: Vec<crate::passkey::Passkey>,
}

/// Everything [`OPERATORS_LOG`] says: the requirement and who may meet it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Operators {
    /// The seq of the last event folded (0 = none).
    pub last_seq: i64,
    /// What a yes needs.
    pub require: Requirement,
    /// Enrolled operators, by name.
    pub enrolled: BTreeMap<String, Enrolled>,
    /// Open passkey registration links: SHA-256 of the secret → the
    /// operator and when it stops working.
    pub invites: BTreeMap<String, (String, i64)>,
    /// Challenge nonces a passkey answered, with when each challenge
    /// expired (after which it cannot be answered anyway).
    pub nonces: BTreeMap<String, i64>,
    /// Where the log stands in its hash chain ([`crate::chain`]).
    pub chain: Chain,
}

impl Operators {
    /// Applies one event of [`OPERATORS_LOG`]. Total: an event of another
    /// log changes nothing but `last_seq`.
    pub fn apply(&mut self, seq: i64, event: &Event) {
        self.last_seq = seq;
        let at = event.at_ms;
        match &event.kind {
            EventKind::OperatorEnrolled {
                operator,
                totp_sealed,
                recovery_sha256,
            } => {
                // A passkey registered before stays with the operator.
                let passkeys = self
                    .enrolled
                    .remove(operator)
                    .map(|e| e.passkeys)
                    .unwrap_or_default();
                self.enrolled.insert(
                    operator.clone(),
                    Enrolled {
                        totp_sealed: totp_sealed.clone(),
                        recovery: recovery_sha256.iter().map(|h| (h.clone(), false)).collect(),
                        last_step: None,
                        failures: Vec::new(),
                        enrolled_at_ms: at,
                        passkeys,
                    },
                );
            }
            EventKind::OperatorRemoved { operator } => {
                self.enrolled.remove(operator);
            }
            EventKind::ApprovalsRequired { require } => self.require = *require,
            EventKind::PasskeyInvited {
                operator,
                invite_sha256,
                expires_at_ms,
            } => {
                self.invites.retain(|_, (_, until)| *until > at);
                self.invites
                    .insert(invite_sha256.clone(), (operator.clone(), *expires_at_ms));
            }
            EventKind::PasskeyAdded {
                operator,
                invite_sha256,
                passkey,
            } => {
                self.invites.remove(invite_sha256);
                let op = self
                    .enrolled
                    .entry(operator.clone())
                    .or_insert_with(|| Enrolled {
                        totp_sealed: None,
                        recovery: Vec::new(),
                        last_step: None,
                        failures: Vec::new(),
                        enrolled_at_ms: at,
                        passkeys: Vec::new(),
                    });
                op.passkeys
                    .retain(|p| p.credential_id != passkey.credential_id);
                op.passkeys.push(passkey.clone());
            }
            EventKind::FactorUsed {
                operator,
                step,
                recovery,
                passkey,
                nonce,
                ..
            } => {
                if let Some(nonce) = nonce {
                    self.nonces.retain(|_, until| *until > at);
                    self.nonces
                        .insert(nonce.clone(), at + crate::passkey::CHALLENGE_MS);
                }
                if let Some(op) = self.enrolled.get_mut(operator) {
                    if let Some(used) = passkey
                        && let Some(key) = op
                            .passkeys
                            .iter_mut()
                            .find(|p| p.credential_id == used.credential_id)
                    {
                        key.sign_count = crate::passkey::sign_count_of(&used.authenticator_data)
                            .unwrap_or(key.sign_count);
                    }
                    if let Some(step) = step {
                        op.last_step = Some(op.last_step.map_or(*step, |s| s.max(*step)));
                    }
                    if let Some(i) = recovery
                        && let Some(code) = op.recovery.get_mut(*i)
                    {
                        code.1 = true;
                    }
                }
            }
            EventKind::FactorRefused { operator, .. } => {
                if let Some(op) = self.enrolled.get_mut(operator) {
                    op.failures.retain(|t| at - t < FAILURE_WINDOW_MS);
                    op.failures.push(at);
                }
            }
            _ => {}
        }
    }
}
