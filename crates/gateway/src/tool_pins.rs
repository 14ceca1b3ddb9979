//! A person reviewing pinned tool definitions (docs/design.md §9): what is pinned,
//! what is quarantined and why, and accepting or rejecting a quarantined
//! definition — shared by `plangate tools` and the web console, so both
//! answer the same question the same way.
//!
//! Accepting is bound to the exact definition the person looked at (its
//! hash), and an accept that would **lower** the tool's effect class (say
//! `destructive` → `read`, so its calls would run without a plan) is
//! refused unless the person says so explicitly: a downgrade is never
//! accepted silently.

use plangate_config::Config;
use plangate_core::{
    Actor, Channel, Effect, Event, EventKind, Held, PinnedDefinition, QuarantineReason, TOOLS_LOG,
    ToolPins, changed_fields, classify,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::key_log::{KeyLog, LogError};

/// One tool as `plangate tools list` and the console show it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ToolRow {
    /// The upstream.
    pub server: String,
    /// The upstream's own tool name.
    pub tool: String,
    /// `pinned`, `quarantined` or `rejected`.
    pub status: std::borrow::Cow<'static, str>,
    /// For a held definition: `new` or `changed`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<QuarantineReason>,
    /// The accepted definition's hash, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub accepted_hash: Option<String>,
    /// Who accepted it (`None`: pinned at the upstream's first listing).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub accepted_by: Option<String>,
    /// The held definition's hash: what `accept --hash` binds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_hash: Option<String>,
    /// When the held definition was first seen (ms since the epoch).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_since_ms: Option<i64>,
    /// Top-level fields of the definition that changed (for `changed`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changed: Vec<String>,
    /// The effect class of the accepted definition under this config.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub effect: Option<Effect>,
    /// The effect class the held definition would have.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_effect: Option<Effect>,
    /// The held definition itself, for review.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_definition: Option<Value>,
}

/// Why a person's act on a pin was not recorded.
#[derive(Debug, thiserror::Error)]
pub enum PinError {
    /// Nothing of that tool is held for review.
    #[error(
        "no definition of tool {tool:?} of upstream {server:?} is quarantined; `plangate tools list` shows what is"
    )]
    NotHeld {
        /// The upstream.
        server: String,
        /// The tool.
        tool: String,
    },
    /// The definition held is not the one the person reviewed.
    #[error(
        "the quarantined definition of {server} {tool} is now {held}, not {given}: it changed again since you looked. Nothing was recorded; look at it again"
    )]
    Changed {
        /// The upstream.
        server: String,
        /// The tool.
        tool: String,
        /// The hash the person gave.
        given: String,
        /// The hash held now.
        held: String,
    },
    /// Accepting would lower the tool's effect class.
    #[error(
        "accepting this definition of {server} {tool} would lower its effect class from {from} to {to} (its annotations changed), so calls plan mode now plans would run directly. Nothing was recorded. If that is intended, accept again with --allow-downgrade"
    )]
    Downgrade {
        /// The upstream.
        server: String,
        /// The tool.
        tool: String,
        /// The effect class now.
        from: Effect,
        /// The effect class it would have.
        to: Effect,
    },
    /// An accept reached here without the person's confirmed yes (a
    /// face's mistake).
    #[error("accepting a tool needs the person's confirmed yes; nothing was recorded")]
    Unconfirmed,
    /// The store failed.
    #[error("{0}")]
    Log(#[from] LogError),
}

/// The effect class `definition` has under `config` (the same rule as the
/// catalog: override, trusted annotations, else destructive).
pub fn effect_of(config: &Config, server: &str, tool: &str, definition: &Value) -> Effect {
    let upstream = config.upstreams.get(server);
    let over = config.tool_settings(server, tool).and_then(|o| o.effect);
    let trust = upstream.is_some_and(|u| u.trust_annotations);
    let hint = |name: &str| {
        definition
            .get("annotations")
            .and_then(|a| a.get(name))
            .and_then(Value::as_bool)
    };
    classify(over, trust, hint("readOnlyHint"), hint("destructiveHint")).0
}

/// Every pinned or held tool, by upstream then tool.
pub fn rows(pins: &ToolPins, config: &Config) -> Vec<ToolRow> {
    let mut out = Vec::new();
    for (server, tools) in &pins.tools {
        for (tool, pin) in tools {
            let accepted = pin.accepted.as_ref().map(|a| a.definition.value());
            let held = pin.held.as_ref();
            let held_value = held.map(|h| h.definition.definition.value());
            let (status, reason) = match held {
                Some(Held {
                    rejected: true,
                    reason,
                    ..
                }) => ("rejected", Some(*reason)),
                Some(h) => ("quarantined", Some(h.reason)),
                None => ("pinned", None),
            };
            out.push(ToolRow {
                server: server.clone(),
                tool: tool.clone(),
                status: status.into(),
                reason,
                accepted_hash: pin.accepted.as_ref().map(|a| a.definition_hash.clone()),
                accepted_by: pin.accepted_by.clone(),
                held_hash: held.map(|h| h.definition.definition_hash.clone()),
                held_since_ms: held.map(|h| h.since_ms),
                changed: match (&accepted, &held_value) {
                    (Some(a), Some(h)) => changed_fields(a, h),
                    _ => Vec::new(),
                },
                effect: accepted
                    .as_ref()
                    .map(|d| effect_of(config, server, tool, d)),
                held_effect: held_value
                    .as_ref()
                    .map(|d| effect_of(config, server, tool, d)),
                held_definition: held_value,
            });
        }
    }
    out
}

/// What a person decided about a held definition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Trust it: it is offered from now on.
    Accept {
        /// Accept even if it lowers the effect class.
        allow_downgrade: bool,
    },
    /// Keep it out.
    Reject,
}

/// A person's decision on a held definition, as every face reports it
/// (`plangate tools accept|reject`, at the data dir or `--server`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Decided {
    /// The upstream.
    pub server: String,
    /// The tool.
    pub tool: String,
    /// `accepted` or `rejected`.
    pub decision: String,
    /// The definition decided on.
    pub definition_hash: String,
}

impl Decided {
    /// What `decision` on `server`'s `tool` left in `pins` (the result of
    /// [`decide`]).
    pub fn of(pins: &ToolPins, (server, tool): (&str, &str), decision: Decision) -> Decided {
        let pin = pins.pin(server, tool);
        let (word, hash) = match decision {
            Decision::Accept { .. } => (
                "accepted",
                pin.and_then(|p| p.accepted.as_ref())
                    .map(|a| a.definition_hash.clone()),
            ),
            Decision::Reject => (
                "rejected",
                pin.and_then(|p| p.held.as_ref())
                    .map(|h| h.definition.definition_hash.clone()),
            ),
        };
        Decided {
            server: server.to_owned(),
            tool: tool.to_owned(),
            decision: word.to_owned(),
            definition_hash: hash.unwrap_or_default(),
        }
    }
}

/// The definition of `server`'s `tool` held for review, when it is the
/// one the person saw (`hash`, when given). Checked again inside
/// [`decide`]; a face checks it first too, so a stale look does not spend
/// the person's code.
pub fn held_as_seen<'p>(
    pins: &'p ToolPins,
    (server, tool): (&str, &str),
    hash: Option<&str>,
) -> Result<&'p Held, PinError> {
    let Some(held) = pins.pin(server, tool).and_then(|p| p.held.as_ref()) else {
        return Err(PinError::NotHeld {
            server: server.to_owned(),
            tool: tool.to_owned(),
        });
    };
    let held_hash = &held.definition.definition_hash;
    if let Some(given) = hash
        && given != held_hash
    {
        return Err(PinError::Changed {
            server: server.to_owned(),
            tool: tool.to_owned(),
            given: given.to_owned(),
            held: held_hash.clone(),
        });
    }
    Ok(held)
}

/// Records a person's accept or reject of the held definition of `tool`
/// of `server` — exactly `hash` when given (what the person looked at) —
/// by `who` over `channel`. Returns the pins after. An accept widens what
/// runs: it needs `yes`, the act as the store's requirement confirmed it
/// ([`crate::operator::factor::confirm`]).
#[allow(clippy::too_many_arguments)]
pub async fn decide(
    log: &KeyLog<ToolPins>,
    config: &Config,
    server: &str,
    tool: &str,
    hash: Option<&str>,
    decision: Decision,
    (who, yes): (Actor, Option<&crate::operator::factor::Confirmed>),
    channel: Channel,
    now_ms: i64,
) -> Result<ToolPins, PinError> {
    if matches!(decision, Decision::Accept { .. }) && yes.is_none() {
        return Err(PinError::Unconfirmed);
    }
    let decided = log
        .transact(TOOLS_LOG, |pins| {
            let pin = pins.pin(server, tool);
            let held = held_as_seen(pins, (server, tool), hash)?;
            let held_hash = &held.definition.definition_hash;
            let kind = match decision {
                Decision::Accept { allow_downgrade } => {
                    if let Some(accepted) = pin.and_then(|p| p.accepted.as_ref())
                        && !allow_downgrade
                    {
                        let from = effect_of(config, server, tool, &accepted.definition.value());
                        let to =
                            effect_of(config, server, tool, &held.definition.definition.value());
                        if to < from {
                            return Err(PinError::Downgrade {
                                server: server.to_owned(),
                                tool: tool.to_owned(),
                                from,
                                to,
                            });
                        }
                    }
                    EventKind::ToolAccepted {
                        server: server.to_owned(),
                        tool: tool.to_owned(),
                        definition_hash: held_hash.clone(),
                    }
                }
                Decision::Reject => EventKind::ToolRejected {
                    server: server.to_owned(),
                    tool: tool.to_owned(),
                    definition_hash: held_hash.clone(),
                },
            };
            let event = Event {
                at_ms: now_ms,
                key_id: TOOLS_LOG.to_owned(),
                actor: who.clone(),
                channel,
                kind,
            };
            Ok((vec![event], ()))
        })
        .await?;
    let (pins, ()) = decided?;
    tracing::info!(
        server,
        tool,
        ?decision,
        "tool definition decided by a person"
    );
    Ok(pins)
}

/// The definition `config check` compares a listed tool against: what the
/// pins say of it, in words, for a person.
pub fn pin_note(pins: &ToolPins, server: &str, listed: &PinnedDefinition) -> String {
    use plangate_core::Standing;
    match pins.standing(server, &listed.tool, &listed.definition_hash) {
        Standing::Accepted => "pinned".to_owned(),
        Standing::Held { rejected: true, .. } => "rejected".to_owned(),
        Standing::Held { reason, .. } => format!("quarantined ({})", reason.as_str()),
        Standing::LogBroken => "NOT TRUSTED: the log of tool pins does not verify".to_owned(),
        Standing::Unjudged => match pins
            .pin(server, &listed.tool)
            .and_then(|p| p.accepted.as_ref())
        {
            Some(accepted) => format!(
                "CHANGED since pinned: {} (will be quarantined)",
                changed_fields(&accepted.definition.value(), &listed.definition.value()).join(", ")
            ),
            None if pins.servers.contains(server) => {
                "NEW since pinned (will be quarantined)".to_owned()
            }
            None => "not pinned yet (pinned at the gateway's first listing)".to_owned(),
        },
    }
}
