//! The event log's types (docs/design.md §6).
//!
//! The log is append-only, per key, and the only truth: mode and plan are
//! folds over it ([`crate::fold`]). Its storage format is these types'
//! serde JSON, so the representation is deliberate and stable:
//!
//! * an [`Event`] is one flat JSON object: `at_ms`, `key_id`, `actor`,
//!   `channel`, and `type` naming the [`EventKind`], whose fields sit beside
//!   them (`{"at_ms":…,"key_id":"k","actor":{"kind":"system"},
//!   "channel":"cli","type":"mode_set","mode":"plan"}`);
//! * enums are snake_case strings, or objects tagged by `kind` ([`Actor`]);
//! * absent options are written as `null` and read back from either `null`
//!   or a missing field, so a reader tolerates older records.
//!
//! A [`StepRecord`] never holds a secret in the clear: `arguments` are
//! redacted, `keyed_arguments` carry HMACs, and the real values exist only
//! as `sealed_secrets`, opaque ciphertext made and opened by the edge.
//!
//! The event and its kinds are here; each kind's stored `type` is in
//! `event_type`, the step record a kind carries in `step_record`, and a
//! review's verdict and a step's error in `outcomes`.

mod event_type;
mod outcomes;
mod step_record;

pub use event_type::EventType;
pub use outcomes::{StepError, StepErrorCode, Verdict};
pub use step_record::{LandsOn, StepRecord, Where};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::JsonText;

/// Who caused an event.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Actor {
    /// An agent, through an API key.
    Agent {
        /// The key's id (never the key).
        key_id: String,
        /// The key's readable name.
        key_name: String,
        /// The key's scope when it acted: a `write` key's approval counts
        /// for another key's plan, a `plan` key's does not (docs/design.md §7).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        scope: Option<crate::Scope>,
    },
    /// A person at the CLI or the console.
    Operator {
        /// The operator's name as the CLI or console knows it.
        name: String,
    },
    /// plangate itself: the sweeper, lease expiry, plan expiry.
    System,
}

impl Actor {
    /// Who acted, as a person reads it: an operator's name, a key's name,
    /// or `plangate`.
    pub fn label(&self) -> String {
        match self {
            Actor::Operator { name } => name.clone(),
            Actor::Agent { key_name, .. } => key_name.clone(),
            Actor::System => "plangate".to_owned(),
        }
    }
}

/// Where an event came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Channel {
    /// An MCP client over stdio.
    Stdio,
    /// An MCP client over Streamable HTTP.
    Http,
    /// The operator CLI.
    Cli,
    /// The web console.
    Console,
    /// The operator MCP endpoint (`/mcp/operator`, `serve
    /// --operator-stdio`): a person's acts brought by their own assistant,
    /// each yes confirmed in a form of their client.
    OperatorMcp,
    /// The background sweeper (leases, expiry).
    Sweeper,
    /// The gateway itself, not a caller's request (pinning and
    /// quarantining an upstream's tools as it lists them).
    Gateway,
}

impl Channel {
    /// The snake_case name used in logs and tables.
    pub fn as_str(self) -> &'static str {
        match self {
            Channel::Stdio => "stdio",
            Channel::Http => "http",
            Channel::Cli => "cli",
            Channel::Console => "console",
            Channel::OperatorMcp => "operator_mcp",
            Channel::Sweeper => "sweeper",
            Channel::Gateway => "gateway",
        }
    }
}

/// One entry of a key's log. Its position in the log (`seq`) is assigned by
/// the store and passed beside it to the fold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// When it happened, milliseconds since the Unix epoch (passed in by
    /// the edge: the core has no clock).
    pub at_ms: i64,
    /// The key whose log it belongs to.
    pub key_id: String,
    /// Who caused it.
    pub actor: Actor,
    /// Where it came from.
    pub channel: Channel,
    /// What happened; flattened so `type` sits beside the common fields.
    #[serde(flatten)]
    pub kind: EventKind,
}

/// What happened, one variant per event type of docs/design.md §6.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[allow(
    clippy::large_enum_variant,
    reason = "events are few and short-lived; an unboxed StepRecord keeps the shared shape plain to build and match"
)]
pub enum EventKind {
    /// The mode in force changed (the last one wins).
    ModeSet {
        /// The mode's name; `default` for no cap.
        mode: String,
    },
    /// An operator locked the key's mode at `mode`: until unlocked, that
    /// mode is in force whatever the agent asks, and the key's plans need
    /// an approval from outside it (docs/design.md §9 "Locked modes").
    ModeLocked {
        /// The mode locked in.
        mode: String,
    },
    /// An operator unlocked the key's mode: its agent may change it again,
    /// and `[gateway] default_mode_locked` no longer applies to the key.
    ModeUnlocked,
    /// `begin_session`: a session started and the plan's life (re)started.
    /// The mode itself is set by the `mode_set` appended beside it.
    SessionBegun {
        /// The session's id.
        session_id: String,
        /// The mode asked for, for the record.
        mode: String,
    },
    /// A write became a plan step.
    StepPlanned {
        /// The step as planned.
        step: StepRecord,
    },
    /// The same write was sent again and answered with the existing step.
    StepDeduplicated {
        /// The existing step.
        step_id: String,
    },
    /// Steps were discarded (`discard_plan`, CLI, console).
    StepsDiscarded {
        /// The steps named; only waiting, failed or in-doubt ones change.
        step_ids: Vec<String>,
    },
    /// A person was asked about the plan.
    ReviewRequested {
        /// The review's id (also binds single-use request state).
        review_id: String,
        /// The digest of the plan shown.
        plan_digest: String,
    },
    /// A person rejected a waiting step, saying why: it never runs, is
    /// outside the plan digest, and its agent is told the reason verbatim.
    StepRejected {
        /// The step.
        step_id: String,
        /// The person's reason, verbatim.
        reason: String,
    },
    /// A person changed a waiting step's arguments: the step keeps its id
    /// and position, and is what `step` says now — redacted, sealed,
    /// previewed and checked again, so its digest (and any approval that
    /// bound it) changed.
    StepAmended {
        /// The step as amended.
        step: StepRecord,
        /// Its redacted arguments before, for the record and the diff.
        previous_arguments: JsonText,
    },
    /// A person answered (or a client answered for them).
    ReviewAnswered {
        /// The review answered, when the answer came through one.
        review_id: Option<String>,
        /// The answer.
        verdict: Verdict,
        /// The digest answered about: of the whole plan, or — when
        /// `step_ids` names steps — of exactly those steps in position
        /// order (the same digest form).
        plan_digest: String,
        /// The person's words, verbatim.
        feedback: Option<String>,
        /// The steps the answer is about, when a person answered about
        /// some steps only (`plans approve --key K STEP…`); absent for an
        /// answer about the whole plan.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        step_ids: Option<Vec<String>>,
        /// The plan's revision ([`crate::KeyState::revision`]) the person
        /// saw when they answered; absent in answers recorded before
        /// revisions existed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        revision: Option<u64>,
    },
    /// An apply began.
    ApplyStarted {
        /// The apply's id.
        apply_id: String,
        /// The steps selected, in order.
        step_ids: Vec<String>,
        /// The digest checked before running anything, if one was given.
        plan_digest: Option<String>,
    },
    /// A step was claimed (`planned`/`failed` → `running`), or its running
    /// claim's lease was renewed by the same apply and owner.
    StepStarted {
        /// The step.
        step_id: String,
        /// The apply running it.
        apply_id: String,
        /// The process holding the claim.
        owner: String,
        /// Until when the claim holds unless renewed.
        lease_until_ms: i64,
    },
    /// The upstream answered with a result.
    StepApplied {
        /// The step.
        step_id: String,
        /// The upstream's result, as received.
        result: Value,
        /// The copy the write landed on, from the configured pointer.
        copy_id: Option<String>,
        /// Links from the configured pointers.
        links: Vec<String>,
        /// Snapshots from the configured pointers.
        snapshots: Vec<String>,
    },
    /// What an applied step replaced is kept for an undo, or why not
    /// (docs/design.md §5, "Undo"); in the same append as its
    /// `step_applied`. Also recorded when the kept state is dropped
    /// (`undo_ttl`), with [`crate::undo::Undo::Dropped`].
    UndoRecorded {
        /// The step.
        step_id: String,
        /// Kept (by digest), unavailable or dropped.
        #[serde(flatten)]
        undo: crate::undo::Undo,
    },
    /// The upstream answered with an error, or a fresh check failed.
    StepFailed {
        /// The step.
        step_id: String,
        /// What went wrong.
        error: StepError,
    },
    /// The request may have reached the upstream but no answer was recorded.
    StepInDoubt {
        /// The step.
        step_id: String,
        /// Why (crash, timeout, lost connection, expired lease…).
        reason: String,
    },
    /// A person explicitly asked to run an in-doubt step again.
    StepRetried {
        /// The step.
        step_id: String,
    },
    /// An apply ended.
    ApplyFinished {
        /// The apply's id.
        apply_id: String,
        /// Steps applied.
        applied: u32,
        /// Steps failed.
        failed: u32,
        /// Steps in doubt.
        in_doubt: u32,
        /// Steps selected but not reached.
        not_run: u32,
    },
    /// `end_session`: the session and the plan's life ended.
    SessionEnded {
        /// The steps discarded with it.
        discarded: Vec<String>,
    },
    /// The plan's life ran out.
    PlanExpired {
        /// The waiting steps that expired.
        step_ids: Vec<String>,
    },
    /// A call that is not a read (or any call, with `[audit] reads`), as
    /// it was decided and ended ([`crate::CallRecord`]).
    CallRecorded {
        /// The call.
        call: crate::CallRecord,
    },
    /// An upstream's first listing, trusted as it was (log
    /// [`crate::TOOLS_LOG`]).
    ToolsPinned {
        /// The upstream.
        server: String,
        /// Every tool it listed.
        tools: Vec<crate::PinnedDefinition>,
    },
    /// A tool definition not trusted yet: new since the first listing, or
    /// changed (log [`crate::TOOLS_LOG`]).
    ToolQuarantined {
        /// The upstream.
        server: String,
        /// The definition held back.
        definition: crate::PinnedDefinition,
        /// New or changed.
        reason: crate::QuarantineReason,
    },
    /// An operator trusted a held definition (log [`crate::TOOLS_LOG`]).
    ToolAccepted {
        /// The upstream.
        server: String,
        /// The upstream's own tool name.
        tool: String,
        /// The definition accepted, exactly.
        definition_hash: String,
    },
    /// An operator refused a held definition (log [`crate::TOOLS_LOG`]).
    ToolRejected {
        /// The upstream.
        server: String,
        /// The upstream's own tool name.
        tool: String,
        /// The definition rejected.
        definition_hash: String,
    },
    /// A person was enrolled as an operator with a factor (log
    /// [`crate::operators::OPERATORS_LOG`]); a later enrolment of the same
    /// name replaces it.
    OperatorEnrolled {
        /// The operator's name.
        operator: String,
        /// The TOTP secret, sealed under the seal key.
        totp_sealed: Option<String>,
        /// SHA-256 (hex) of each one-time recovery code.
        recovery_sha256: Vec<String>,
    },
    /// An operator and their factors were removed.
    OperatorRemoved {
        /// The operator's name.
        operator: String,
    },
    /// What a yes needs from now on (the last one wins).
    ApprovalsRequired {
        /// The requirement.
        require: crate::factor::Requirement,
    },
    /// A factor proved a person's act: which operator, which factor, and
    /// the act it was given for, in words.
    FactorUsed {
        /// The operator.
        operator: String,
        /// The factor.
        factor: crate::factor::FactorKind,
        /// The TOTP step used (no code of it or before is taken again).
        step: Option<u64>,
        /// The recovery code used, by position.
        recovery: Option<usize>,
        /// What it was for ("approve key agent at sha256:…").
        act: String,
        /// A passkey's assertion, kept whole so it can be verified again.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        passkey: Option<crate::passkey::Assertion>,
        /// The challenge's nonce a passkey answered (each is taken once).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        nonce: Option<String>,
    },
    /// A one-time link to register a passkey was issued for an operator
    /// (`operator enroll --passkey`); only its SHA-256 is kept.
    PasskeyInvited {
        /// The operator.
        operator: String,
        /// SHA-256 (hex) of the link's secret.
        invite_sha256: String,
        /// When the link stops working.
        expires_at_ms: i64,
    },
    /// A passkey was registered through such a link.
    PasskeyAdded {
        /// The operator.
        operator: String,
        /// The link used (its SHA-256); it works once.
        invite_sha256: String,
        /// The credential.
        passkey: crate::passkey::Passkey,
    },
    /// A wrong factor was given (counted for the rate limit).
    FactorRefused {
        /// The operator named.
        operator: String,
        /// What it was for.
        act: String,
        /// Why it was refused.
        reason: String,
    },
}

#[cfg(test)]
pub(crate) mod tests {
    use serde_json::json;

    use super::*;
    use crate::Effect;

    pub(crate) use crate::testing::step_record as record;

    fn event(kind: EventKind) -> Event {
        Event {
            at_ms: 1_700_000_000_000,
            key_id: "key_1".into(),
            actor: Actor::Agent {
                key_id: "key_1".into(),
                key_name: "laptop".into(),
                scope: None,
            },
            channel: Channel::Stdio,
            kind,
        }
    }

    /// One event of every kind, in [`EventType::ALL`]'s order.
    pub(crate) fn every_kind() -> Vec<EventKind> {
        [planning_kinds(), applying_kinds(), recording_kinds()].concat()
    }

    /// The mode, the session, and planning and reviewing steps.
    fn planning_kinds() -> Vec<EventKind> {
        vec![
            EventKind::ModeSet {
                mode: "plan".into(),
            },
            EventKind::ModeLocked {
                mode: "plan".into(),
            },
            EventKind::ModeUnlocked,
            EventKind::SessionBegun {
                session_id: "ses_1".into(),
                mode: "plan".into(),
            },
            EventKind::StepPlanned {
                step: record("step_1", 1, "update_page", json!({"id": 42, "token": "t"})),
            },
            EventKind::StepDeduplicated {
                step_id: "step_1".into(),
            },
            EventKind::StepsDiscarded {
                step_ids: vec!["step_1".into()],
            },
            EventKind::StepRejected {
                step_id: "step_1".into(),
                reason: "not that page".into(),
            },
            EventKind::StepAmended {
                step: record("step_1", 1, "update_page", json!({"id": 43, "token": "t"})),
                previous_arguments: JsonText::from_value(&json!({"id": 42, "token": "[redacted]"})),
            },
            EventKind::ReviewRequested {
                review_id: "rev_1".into(),
                plan_digest: "sha256:ab".into(),
            },
            EventKind::ReviewAnswered {
                review_id: None,
                verdict: Verdict::KeepPlanning,
                plan_digest: "sha256:ab".into(),
                feedback: Some("not the title".into()),
                step_ids: None,
                revision: Some(3),
            },
        ]
    }

    /// An apply and its steps, and the end of a session or plan.
    fn applying_kinds() -> Vec<EventKind> {
        vec![
            EventKind::ApplyStarted {
                apply_id: "apl_1".into(),
                step_ids: vec!["step_1".into()],
                plan_digest: Some("sha256:ab".into()),
            },
            EventKind::StepStarted {
                step_id: "step_1".into(),
                apply_id: "apl_1".into(),
                owner: "host:123".into(),
                lease_until_ms: 1_700_000_030_000,
            },
            EventKind::StepApplied {
                step_id: "step_1".into(),
                result: json!({"content": [], "structuredContent": {"copy": 187, "big": 1.5e300}}),
                copy_id: Some("187".into()),
                links: vec!["https://example.test/187".into()],
                snapshots: vec![],
            },
            EventKind::UndoRecorded {
                step_id: "step_1".into(),
                undo: crate::undo::Undo::Kept {
                    digest: "sha256:ab".into(),
                    bytes: 12,
                    after_digest: Some("sha256:cd".into()),
                },
            },
            EventKind::StepFailed {
                step_id: "step_1".into(),
                error: StepError {
                    code: StepErrorCode::UpstreamError,
                    message: "no such page".into(),
                    upstream: Some(json!({"code": -32000})),
                },
            },
            EventKind::StepInDoubt {
                step_id: "step_1".into(),
                reason: "lease expired".into(),
            },
            EventKind::StepRetried {
                step_id: "step_1".into(),
            },
            EventKind::ApplyFinished {
                apply_id: "apl_1".into(),
                applied: 1,
                failed: 0,
                in_doubt: 0,
                not_run: 2,
            },
            EventKind::SessionEnded {
                discarded: vec!["step_2".into()],
            },
            EventKind::PlanExpired {
                step_ids: vec!["step_3".into()],
            },
        ]
    }

    /// The audit record of a call, and the tool pins' own log.
    fn recording_kinds() -> Vec<EventKind> {
        vec![
            EventKind::CallRecorded {
                call: crate::CallRecord {
                    server: "fs".into(),
                    tool: "write_file".into(),
                    exposed_as: "fs__write_file".into(),
                    effect: Effect::Destructive,
                    arguments: Some(JsonText::from_value(
                        &json!({"path": "/a", "token": "[redacted]"}),
                    )),
                    decision: crate::CallDecision::Run,
                    outcome: crate::CallOutcome::Ok,
                    code: None,
                    step_id: None,
                    duration_ms: 3,
                    repeated: 0,
                    rule: None,
                },
            },
            EventKind::ToolsPinned {
                server: "site".into(),
                tools: vec![crate::PinnedDefinition::of(
                    "update_page",
                    &json!({"name": "update_page", "inputSchema": {"type": "object"}}),
                )],
            },
            EventKind::ToolQuarantined {
                server: "site".into(),
                definition: crate::PinnedDefinition::of(
                    "delete_page",
                    &json!({"name": "delete_page"}),
                ),
                reason: crate::QuarantineReason::New,
            },
            EventKind::ToolAccepted {
                server: "site".into(),
                tool: "delete_page".into(),
                definition_hash: "sha256:cd".into(),
            },
            EventKind::ToolRejected {
                server: "site".into(),
                tool: "delete_page".into(),
                definition_hash: "sha256:cd".into(),
            },
            EventKind::OperatorEnrolled {
                operator: "alice".into(),
                totp_sealed: Some("v1.sealed".into()),
                recovery_sha256: vec!["ab".repeat(32)],
            },
            EventKind::OperatorRemoved {
                operator: "alice".into(),
            },
            EventKind::ApprovalsRequired {
                require: crate::factor::Requirement::Totp,
            },
            EventKind::FactorUsed {
                operator: "alice".into(),
                factor: crate::factor::FactorKind::Totp,
                step: Some(59_000_000),
                recovery: None,
                act: "approve key agent".into(),
                passkey: None,
                nonce: None,
            },
            EventKind::PasskeyInvited {
                operator: "alice".into(),
                invite_sha256: "ab".repeat(32),
                expires_at_ms: 1_000,
            },
            EventKind::PasskeyAdded {
                operator: "alice".into(),
                invite_sha256: "ab".repeat(32),
                passkey: crate::passkey::Passkey {
                    credential_id: "0102".into(),
                    public_key: "04".into(),
                    sign_count: 0,
                },
            },
            EventKind::FactorRefused {
                operator: "alice".into(),
                act: "approve key agent".into(),
                reason: "wrong code".into(),
            },
        ]
    }

    #[test]
    fn every_event_round_trips_through_its_json_and_names_its_type() {
        let kinds = every_kind();
        let types: Vec<EventType> = kinds.iter().map(EventKind::event_type).collect();
        assert_eq!(
            types,
            EventType::ALL,
            "one of each type, in the contract's order"
        );
        for kind in kinds {
            let e = event(kind);
            let json = serde_json::to_value(&e).unwrap();
            assert_eq!(json["type"], e.kind.name(), "{json}");
            let text = serde_json::to_string(&e).unwrap();
            let back: Event = serde_json::from_str(&text).unwrap();
            assert_eq!(back, e, "{text}");
        }
    }

    #[test]
    fn an_event_is_one_flat_object_with_tagged_actor() {
        let mut e = event(EventKind::ModeSet {
            mode: "plan".into(),
        });
        e.actor = Actor::System;
        e.channel = Channel::Sweeper;
        assert_eq!(
            serde_json::to_value(&e).unwrap(),
            json!({
                "at_ms": 1_700_000_000_000i64, "key_id": "key_1",
                "actor": {"kind": "system"}, "channel": "sweeper",
                "type": "mode_set", "mode": "plan"
            })
        );
        let op = Actor::Operator { name: "ana".into() };
        assert_eq!(
            serde_json::to_value(&op).unwrap(),
            json!({"kind": "operator", "name": "ana"})
        );
    }

    #[test]
    fn missing_optional_fields_read_as_none() {
        let text = r#"{"at_ms":1,"key_id":"k","actor":{"kind":"system"},"channel":"cli",
                      "type":"review_answered","verdict":"approve","plan_digest":"sha256:x"}"#;
        let e: Event = serde_json::from_str(text).unwrap();
        assert_eq!(
            e.kind,
            EventKind::ReviewAnswered {
                review_id: None,
                verdict: Verdict::Approve,
                plan_digest: "sha256:x".into(),
                feedback: None,
                step_ids: None,
                revision: None
            }
        );
    }
}
