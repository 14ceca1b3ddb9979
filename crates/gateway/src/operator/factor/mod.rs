//! A factor for every yes (docs/design.md §12): before an act that widens
//! what runs, the person proves they are one with something only they
//! hold — a TOTP code from their authenticator (or a one-time recovery
//! code) — when the store requires it.
//!
//! Every such act takes a [`Confirmed`], and only [`confirm`] makes one:
//! a face (the CLI, the console) cannot reach an approval without passing
//! here, and with nothing required it passes at once, as before factors
//! existed. The requirement, the operators and every code used or refused
//! are events of [`OPERATORS_LOG`], signed like every log, so the trail
//! says which operator proved which act with which factor.

use plangate_core::factor::{self, CodeRefused, FactorKind, Requirement};
use plangate_core::operators::{Enrolled, OPERATORS_LOG, Operators};
use plangate_core::{Actor, Channel, Code, Event, EventKind};
use plangate_store::{KeyMaterial, now_ms};
use sha2::{Digest, Sha256};

use crate::key_log::LogError;

pub mod passkey;
pub mod view;

pub use crate::key_log::{OperatorsLog, operators_log};

/// Recovery codes printed at enrolment.
pub const RECOVERY_CODES: usize = 8;

/// An act that widens what runs, in words for the log and for the person.
#[derive(Debug, Clone)]
pub enum Act<'a> {
    /// A yes to a key's plan (or some of its steps).
    Approve {
        /// The key's name.
        key: &'a str,
    },
    /// One yes to several keys' whole plans (the console's batch).
    ApprovePlans {
        /// The keys' names, as the person picked them.
        keys: &'a [String],
    },
    /// A person's apply, which is its own yes.
    Apply {
        /// The key's name.
        key: &'a str,
    },
    /// Running an in-doubt step again.
    Retry {
        /// The key's name.
        key: &'a str,
        /// The step.
        step: &'a str,
    },
    /// Unlocking a key's mode.
    Unlock {
        /// The key's name.
        key: &'a str,
    },
    /// Moving a key held in a plan mode to a mode that is not one.
    Relock {
        /// The key's name.
        key: &'a str,
        /// The mode.
        mode: &'a str,
    },
    /// Trusting a quarantined tool definition.
    AcceptTool {
        /// The upstream.
        server: &'a str,
        /// The tool.
        tool: &'a str,
    },
    /// Creating a key whose writes run at once.
    CreateWriteKey {
        /// The key's name.
        name: &'a str,
    },
    /// Issuing a console credential.
    IssueOperatorToken {
        /// Its name.
        name: &'a str,
    },
    /// Enrolling an operator (once one exists).
    Enroll {
        /// The operator.
        name: &'a str,
    },
    /// Removing an operator.
    Remove {
        /// The operator.
        name: &'a str,
    },
    /// Lowering what a yes needs.
    Lower {
        /// From.
        from: Requirement,
        /// To.
        to: Requirement,
    },
}

impl Act<'_> {
    /// The act in words, as the log records it.
    pub fn describe(&self) -> String {
        match self {
            Act::Approve { key } => format!("approve key {key}'s plan"),
            Act::ApprovePlans { keys } => format!("approve the plans of keys {}", keys.join(", ")),
            Act::Apply { key } => format!("apply key {key}'s plan"),
            Act::Retry { key, step } => format!("retry step {step} of key {key}"),
            Act::Unlock { key } => format!("unlock key {key}'s mode"),
            Act::Relock { key, mode } => format!("move locked key {key} to mode {mode}"),
            Act::AcceptTool { server, tool } => format!("accept tool {tool} of upstream {server}"),
            Act::CreateWriteKey { name } => format!("create write key {name}"),
            Act::IssueOperatorToken { name } => format!("issue operator token {name}"),
            Act::Enroll { name } => format!("enroll operator {name}"),
            Act::Remove { name } => format!("remove operator {name}"),
            Act::Lower { from, to } => format!("lower approvals from {from} to {to}"),
        }
    }
}

/// What the person gave for an act: the operator they are (optional when
/// one is enrolled) and a code (a TOTP code or a recovery code).
#[derive(Debug, Clone, Copy, Default)]
pub struct Proof<'a> {
    /// The operator's name.
    pub operator: Option<&'a str>,
    /// The code.
    pub code: Option<&'a str>,
    /// A passkey's answer (the console), instead of a code.
    pub passkey: Option<passkey::PasskeyProof<'a>>,
}

/// A person's act that met what the store requires: only [`confirm`]
/// makes one, and every widening act takes one.
#[derive(Debug, Clone)]
pub struct Confirmed {
    operator: Option<String>,
    factor: Option<FactorKind>,
}

impl Confirmed {
    /// The operator who proved the act, when a factor was required (or a
    /// name was given).
    pub fn operator(&self) -> Option<&str> {
        self.operator.as_deref()
    }

    /// The factor that proved it; `None` when none was required.
    pub fn factor(&self) -> Option<FactorKind> {
        self.factor
    }
}

/// Why a factor did not confirm an act. Nothing of the act was recorded.
#[derive(Debug, thiserror::Error)]
pub enum FactorError {
    /// A factor is required and none was given.
    #[error(
        "{act} needs a factor: approvals require {require} (recorded in plangate's store); give the code from the authenticator of operator {who} with --code{op_flag}"
    )]
    Required {
        /// The act.
        act: String,
        /// The requirement.
        require: Requirement,
        /// The enrolled operators, for the message.
        who: String,
        /// ` --operator NAME` when more than one is enrolled.
        op_flag: &'static str,
    },
    /// No operator of that name is enrolled.
    #[error("no operator {0:?} is enrolled (`plangate operator list` lists them)")]
    NoOperator(String),
    /// Several operators are enrolled and none was named.
    #[error("several operators are enrolled ({0}); name yours with --operator NAME")]
    WhichOperator(String),
    /// The code was wrong, malformed or used already.
    #[error(
        "the code was refused for operator {operator}: {reason}; nothing was recorded but the refusal"
    )]
    Refused {
        /// The operator.
        operator: String,
        /// Why.
        reason: String,
    },
    /// Too many wrong codes lately.
    #[error(
        "operator {operator} entered {} wrong codes within five minutes; the next code is read at {until}",
        factor::MAX_FAILURES
    )]
    Locked {
        /// The operator.
        operator: String,
        /// When codes are read again (RFC 3339).
        until: String,
    },
    /// The factor the operator gave does not meet the requirement.
    #[error("approvals require {require}, which a {given} does not meet")]
    WrongKind {
        /// The requirement.
        require: Requirement,
        /// What was given.
        given: &'static str,
    },
    /// The sealed secret could not be opened (another seal key).
    #[error(
        "operator {0}'s TOTP secret cannot be opened with this data dir's seal key (was PLANGATE_SEAL_KEY changed?); enroll the operator again"
    )]
    Sealed(String),
    /// A widening act reached its operation without passing [`confirm`]
    /// (a face's mistake; nothing was recorded).
    #[error("{0} needs the person's confirmed yes; nothing was recorded")]
    Unconfirmed(String),
    /// The operating system gave no randomness for a secret.
    #[error("no randomness for a new secret: {0}")]
    Random(String),
    /// The log could not be read or written.
    #[error("{0}")]
    Log(#[from] LogError),
}

impl FactorError {
    /// The stable code (docs/design.md §8).
    pub fn code(&self) -> Code {
        match self {
            FactorError::Locked { .. } => Code::RateLimited,
            FactorError::Log(_) => Code::StoreUnavailable,
            FactorError::Sealed(_) | FactorError::Random(_) => Code::InternalError,
            _ => Code::FactorRequired,
        }
    }
}

/// Checks `proof` for `act` against what the store requires, recording the
/// factor used (or refused) in [`OPERATORS_LOG`]; the [`Confirmed`] every
/// widening act takes. With nothing required it records nothing and
/// confirms at once (the named operator, if any, is kept for the act).
pub async fn confirm(
    log: &OperatorsLog,
    material: &KeyMaterial,
    act: &Act<'_>,
    proof: Proof<'_>,
    channel: Channel,
) -> Result<Confirmed, FactorError> {
    let state = log.state(OPERATORS_LOG).await?;
    confirm_on(log, material, &state, state.require, act, proof, channel).await
}

/// [`confirm`] against `require` (which the caller read from `state`, or a
/// stricter one: lowering the requirement is proved against the old one).
async fn confirm_on(
    log: &OperatorsLog,
    material: &KeyMaterial,
    state: &Operators,
    require: Requirement,
    act: &Act<'_>,
    proof: Proof<'_>,
    channel: Channel,
) -> Result<Confirmed, FactorError> {
    if require == Requirement::None {
        return Ok(Confirmed {
            operator: proof.operator.map(str::to_owned),
            factor: None,
        });
    }
    if let Some(passkey) = proof.passkey {
        return confirm_passkey(log, material, require, act, passkey, channel).await;
    }
    let operator = pick_operator(state, proof.operator)?;
    let Some(code) = proof.code.map(str::trim).filter(|c| !c.is_empty()) else {
        let names: Vec<&str> = state.enrolled.keys().map(String::as_str).collect();
        return Err(FactorError::Required {
            act: act.describe(),
            require,
            who: names.join(" or "),
            op_flag: if names.len() > 1 {
                " --operator NAME"
            } else {
                ""
            },
        });
    };
    let described = act.describe();
    let secret = match state
        .enrolled
        .get(&operator)
        .and_then(|e| e.totp_sealed.as_ref())
    {
        Some(sealed) => Some(
            plangate_store::seal::unseal(material, sealed, aad(&operator).as_bytes())
                .map_err(|_| FactorError::Sealed(operator.clone()))?,
        ),
        None => None,
    };
    let verdict = log
        .transact(OPERATORS_LOG, |state| {
            let now = now_ms();
            let Some(enrolled) = state.enrolled.get(&operator) else {
                return Err(FactorError::NoOperator(operator.clone()));
            };
            if let Some(until) = factor::locked_until(&enrolled.failures, now) {
                return Err(FactorError::Locked {
                    operator: operator.clone(),
                    until: plangate_core::format_time_ms(until),
                });
            }
            let used = check_code(enrolled, secret.as_deref(), code, now);
            let kind = match &used {
                Ok((kind, ..)) => *kind,
                Err(_) => FactorKind::Totp,
            };
            let event_kind = match &used {
                Ok((kind, step, recovery)) if require.accepts(*kind) => EventKind::FactorUsed {
                    operator: operator.clone(),
                    factor: *kind,
                    step: *step,
                    recovery: *recovery,
                    act: described.clone(),
                    passkey: None,
                    nonce: None,
                },
                Ok(_) => {
                    return Err(FactorError::WrongKind {
                        require,
                        given: kind.as_str(),
                    });
                }
                Err(reason) => EventKind::FactorRefused {
                    operator: operator.clone(),
                    act: described.clone(),
                    reason: reason.clone(),
                },
            };
            let event = Event {
                at_ms: now,
                key_id: OPERATORS_LOG.to_owned(),
                actor: Actor::Operator {
                    name: operator.clone(),
                },
                channel,
                kind: event_kind,
            };
            Ok((vec![event], used.map(|(kind, ..)| kind)))
        })
        .await??;
    match verdict.1 {
        Ok(kind) => Ok(Confirmed {
            operator: Some(operator),
            factor: Some(kind),
        }),
        Err(reason) => Err(FactorError::Refused { operator, reason }),
    }
}

/// [`confirm`] with a passkey's answer: checked and recorded in one
/// append, so one answer proves one act.
async fn confirm_passkey(
    log: &OperatorsLog,
    material: &KeyMaterial,
    require: Requirement,
    act: &Act<'_>,
    proof: passkey::PasskeyProof<'_>,
    channel: Channel,
) -> Result<Confirmed, FactorError> {
    if !require.accepts(FactorKind::Passkey) {
        return Err(FactorError::WrongKind {
            require,
            given: FactorKind::Passkey.as_str(),
        });
    }
    let described = act.describe();
    let verdict = log
        .transact(OPERATORS_LOG, |state| {
            let now = now_ms();
            let checked = passkey::check(state, material, act, &proof, now);
            let (operator, kind) = match checked {
                Ok((operator, kind)) => (operator, Ok(kind)),
                Err((Some(operator), reason)) => (operator, Err(reason)),
                Err((None, reason)) => {
                    return Err(FactorError::Refused {
                        operator: "(unknown)".to_owned(),
                        reason,
                    });
                }
            };
            if let Some(until) = state
                .enrolled
                .get(&operator)
                .and_then(|e| factor::locked_until(&e.failures, now))
            {
                return Err(FactorError::Locked {
                    operator,
                    until: plangate_core::format_time_ms(until),
                });
            }
            let (event_kind, outcome) = match kind {
                Ok(kind) => (kind, Ok(operator.clone())),
                Err(reason) => (
                    EventKind::FactorRefused {
                        operator: operator.clone(),
                        act: described.clone(),
                        reason: reason.clone(),
                    },
                    Err((operator.clone(), reason)),
                ),
            };
            let event = Event {
                at_ms: now,
                key_id: OPERATORS_LOG.to_owned(),
                actor: Actor::Operator { name: operator },
                channel,
                kind: event_kind,
            };
            Ok((vec![event], outcome))
        })
        .await??;
    match verdict.1 {
        Ok(operator) => Ok(Confirmed {
            operator: Some(operator),
            factor: Some(FactorKind::Passkey),
        }),
        Err((operator, reason)) => Err(FactorError::Refused { operator, reason }),
    }
}

/// Which factor `code` is for `enrolled`, and what it spends: a TOTP code
/// (its step) or a recovery code not used yet (its position).
fn check_code(
    enrolled: &Enrolled,
    secret: Option<&[u8]>,
    code: &str,
    now: i64,
) -> Result<(FactorKind, Option<u64>, Option<usize>), String> {
    let digits = code.bytes().all(|b| b.is_ascii_digit());
    if digits {
        let Some(secret) = secret else {
            return Err("this operator has no TOTP secret".to_owned());
        };
        return factor::totp_step(secret, code, now, enrolled.last_step)
            .map(|step| (FactorKind::Totp, Some(step), None))
            .map_err(|e: CodeRefused| e.to_string());
    }
    let hash = recovery_hash(code);
    match enrolled.recovery.iter().position(|(h, _)| *h == hash) {
        Some(i) if enrolled.recovery[i].1 => Err("that recovery code was used already".to_owned()),
        Some(i) => Ok((FactorKind::Recovery, None, Some(i))),
        None => Err("it is neither the authenticator's code nor a recovery code".to_owned()),
    }
}

/// The operator a proof is for: the one named, or the only one enrolled.
fn pick_operator(state: &Operators, named: Option<&str>) -> Result<String, FactorError> {
    match named {
        Some(name) if state.enrolled.contains_key(name) => Ok(name.to_owned()),
        Some(name) => Err(FactorError::NoOperator(name.to_owned())),
        None => {
            let mut names = state.enrolled.keys();
            match (names.next(), names.next()) {
                (Some(only), None) => Ok(only.clone()),
                (None, _) => Err(FactorError::NoOperator(String::new())),
                _ => Err(FactorError::WhichOperator(
                    state
                        .enrolled
                        .keys()
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(", "),
                )),
            }
        }
    }
}

/// The associated data an operator's sealed secret is bound to, so a
/// sealed secret copied onto another operator does not open.
fn aad(operator: &str) -> String {
    format!("plangate operator totp\n{operator}")
}

/// How a recovery code is kept: SHA-256 of its letters and digits only,
/// in lower case, so dashes and case do not matter when it is typed.
pub fn recovery_hash(code: &str) -> String {
    let normal: String = code
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect();
    hex::encode(Sha256::digest(normal.as_bytes()))
}

/// What enrolment hands the person, once: the `otpauth://` URI (and the
/// secret in base32, to type in) and the recovery codes.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Enrolment {
    /// The operator.
    pub operator: String,
    /// For the authenticator app.
    pub otpauth_uri: String,
    /// The secret in base32, for apps without a camera.
    pub secret_base32: String,
    /// One-time recovery codes.
    pub recovery_codes: Vec<String>,
}

/// Who is being enrolled, and the yes that allows it: what TOTP
/// enrolment ([`enroll`]) and a passkey invitation ([`passkey::invite`])
/// both ask.
#[derive(Debug, Clone, Copy)]
pub struct Enrolling<'a> {
    /// The operator's name (a new one, or one enrolled already).
    pub name: &'a str,
    /// The factor that confirms it, when an operator already exists and a
    /// factor is required.
    pub proof: Proof<'a>,
    /// Where the person asked.
    pub channel: Channel,
}

impl Enrolling<'_> {
    /// Checks the name and confirms the act ([`Act::Enroll`]).
    async fn confirm(
        &self,
        log: &OperatorsLog,
        material: &KeyMaterial,
    ) -> Result<Confirmed, FactorError> {
        let name = self.name;
        plangate_store::validate_operator_name(name)
            .map_err(|e| FactorError::NoOperator(format!("{name} ({e})")))?;
        let act = Act::Enroll { name };
        confirm(log, material, &act, self.proof, self.channel).await
    }
}

/// Enrolls an operator with a fresh TOTP secret and recovery codes.
/// Enrolling a name again replaces its factor.
pub async fn enroll(
    log: &OperatorsLog,
    material: &KeyMaterial,
    who: Enrolling<'_>,
) -> Result<Enrolment, FactorError> {
    who.confirm(log, material).await?;
    let (name, channel) = (who.name, who.channel);
    let secret: [u8; 20] = random_bytes()?;
    let sealed = plangate_store::seal::seal(material, &secret, aad(name).as_bytes())
        .map_err(|_| FactorError::Sealed(name.to_owned()))?;
    let mut codes = Vec::with_capacity(RECOVERY_CODES);
    for _ in 0..RECOVERY_CODES {
        let raw: [u8; 7] = random_bytes()?;
        let text = factor::base32(&raw).to_ascii_lowercase();
        codes.push(format!("{}-{}", &text[..5], &text[5..10]));
    }
    let event = Event {
        at_ms: now_ms(),
        key_id: OPERATORS_LOG.to_owned(),
        actor: Actor::Operator {
            name: name.to_owned(),
        },
        channel,
        kind: EventKind::OperatorEnrolled {
            operator: name.to_owned(),
            totp_sealed: Some(sealed),
            recovery_sha256: codes.iter().map(|c| recovery_hash(c)).collect(),
        },
    };
    log.transact(OPERATORS_LOG, |_| {
        Ok::<_, std::convert::Infallible>((vec![event.clone()], ()))
    })
    .await?
    .unwrap_or_else(|never| match never {});
    Ok(Enrolment {
        operator: name.to_owned(),
        otpauth_uri: factor::otpauth_uri(name, &secret),
        secret_base32: factor::base32(&secret),
        recovery_codes: codes,
    })
}

/// Records what a yes needs from now on. Raising it needs nothing;
/// lowering it needs a factor that meets the old requirement. A
/// requirement no enrolled operator can meet is refused. `by` names the
/// person when no factor does (the console's operator; the CLI's is the
/// OS user).
pub async fn require(
    log: &OperatorsLog,
    material: &KeyMaterial,
    to: Requirement,
    proof: Proof<'_>,
    (channel, by): (Channel, Option<&str>),
) -> Result<view::RequireAnswer, FactorError> {
    let state = log.state(OPERATORS_LOG).await?;
    let from = state.require;
    if to != Requirement::None
        && !state.enrolled.values().any(|e| {
            (e.totp_sealed.is_some() && to.accepts(FactorKind::Totp))
                || (!e.passkeys.is_empty() && to.accepts(FactorKind::Passkey))
        })
    {
        return Err(FactorError::NoOperator(format!(
            "able to meet {to}: enroll one first (`plangate operator enroll --name NAME --totp`, or `--passkey`)"
        )));
    }
    let confirmed = if from.is_lowered_by(to) {
        Some(
            confirm_on(
                log,
                material,
                &state,
                from,
                &Act::Lower { from, to },
                proof,
                channel,
            )
            .await?,
        )
    } else {
        None
    };
    let name = confirmed
        .as_ref()
        .and_then(Confirmed::operator)
        .or(by)
        .map_or_else(operator_name, str::to_owned);
    let event = Event {
        at_ms: now_ms(),
        key_id: OPERATORS_LOG.to_owned(),
        actor: Actor::Operator { name },
        channel,
        kind: EventKind::ApprovalsRequired { require: to },
    };
    log.transact(OPERATORS_LOG, |_| {
        Ok::<_, std::convert::Infallible>((vec![event.clone()], ()))
    })
    .await?
    .unwrap_or_else(|never| match never {});
    Ok(view::RequireAnswer { from, require: to })
}

/// Removes operator `name`, confirmed by a factor when one is required.
/// The last operator able to meet a requirement in force is not removed.
/// `by` names the person when no factor does, as for [`require`].
pub async fn remove(
    log: &OperatorsLog,
    material: &KeyMaterial,
    name: &str,
    proof: Proof<'_>,
    (channel, by): (Channel, Option<&str>),
) -> Result<(), FactorError> {
    let state = log.state(OPERATORS_LOG).await?;
    if !state.enrolled.contains_key(name) {
        return Err(FactorError::NoOperator(name.to_owned()));
    }
    if state.require != Requirement::None && state.enrolled.len() == 1 {
        return Err(FactorError::WhichOperator(format!(
            "{name} is the only one, and approvals require {}: lower that first (`plangate approvals require none`)",
            state.require
        )));
    }
    let confirmed = confirm(log, material, &Act::Remove { name }, proof, channel).await?;
    let event = Event {
        at_ms: now_ms(),
        key_id: OPERATORS_LOG.to_owned(),
        actor: Actor::Operator {
            name: confirmed
                .operator()
                .or(by)
                .map_or_else(operator_name, str::to_owned),
        },
        channel,
        kind: EventKind::OperatorRemoved {
            operator: name.to_owned(),
        },
    };
    log.transact(OPERATORS_LOG, |_| {
        Ok::<_, std::convert::Infallible>((vec![event.clone()], ()))
    })
    .await?
    .unwrap_or_else(|never| match never {});
    Ok(())
}

/// The name recorded for an operator's act without a factor: the OS user.
fn operator_name() -> String {
    std::env::var("USER")
        .or_else(|_| std::env::var("USERNAME"))
        .unwrap_or_else(|_| "operator".to_owned())
}

/// Random bytes from the OS generator.
fn random_bytes<const N: usize>() -> Result<[u8; N], FactorError> {
    plangate_store::random_bytes().map_err(|e| FactorError::Random(e.to_string()))
}
