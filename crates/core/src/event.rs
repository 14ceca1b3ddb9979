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

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::Code;
use crate::Effect;
use crate::JsonText;

/// Who caused an event.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
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
}

/// Declares [`EventType`] and [`EventKind::event_type`] from one list, so a
/// kind and its stored `type` string cannot drift apart.
macro_rules! event_types {
    ($($kind:ident => $name:literal,)*) => {
        /// The type of an event without its fields: what the log stores as
        /// `type`, for filters and queries that must not deserialize the
        /// whole event. Compare these, never the strings.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum EventType {
            $(
                #[doc = concat!("`", $name, "`")]
                $kind,
            )*
        }

        impl EventType {
            /// Every type, in the order the contract lists them.
            pub const ALL: &'static [EventType] = &[$(EventType::$kind),*];

            /// The stored `type` string.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(EventType::$kind => $name,)*
                }
            }
        }

        impl EventKind {
            /// This event's type.
            pub fn event_type(&self) -> EventType {
                match self {
                    $(EventKind::$kind { .. } => EventType::$kind,)*
                }
            }
        }
    };
}

event_types! {
    ModeSet => "mode_set",
    ModeLocked => "mode_locked",
    ModeUnlocked => "mode_unlocked",
    SessionBegun => "session_begun",
    StepPlanned => "step_planned",
    StepDeduplicated => "step_deduplicated",
    StepsDiscarded => "steps_discarded",
    StepRejected => "step_rejected",
    StepAmended => "step_amended",
    ReviewRequested => "review_requested",
    ReviewAnswered => "review_answered",
    ApplyStarted => "apply_started",
    StepStarted => "step_started",
    StepApplied => "step_applied",
    StepFailed => "step_failed",
    StepInDoubt => "step_in_doubt",
    StepRetried => "step_retried",
    ApplyFinished => "apply_finished",
    SessionEnded => "session_ended",
    PlanExpired => "plan_expired",
    CallRecorded => "call_recorded",
    ToolsPinned => "tools_pinned",
    ToolQuarantined => "tool_quarantined",
    ToolAccepted => "tool_accepted",
    ToolRejected => "tool_rejected",
}

impl EventType {
    /// The type a stored `type` string names; `None` for one this build
    /// does not know (a newer plangate's).
    pub fn parse(s: &str) -> Option<EventType> {
        EventType::ALL.iter().copied().find(|t| t.as_str() == s)
    }
}

impl PartialEq<EventType> for str {
    fn eq(&self, other: &EventType) -> bool {
        self == other.as_str()
    }
}

impl PartialEq<EventType> for String {
    fn eq(&self, other: &EventType) -> bool {
        self == other.as_str()
    }
}

impl std::fmt::Display for EventType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl EventKind {
    /// The `type` string stored with the event.
    pub fn name(&self) -> &'static str {
        self.event_type().as_str()
    }
}

/// A person's answer to a review.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Yes: apply the plan with this digest.
    Approve,
    /// Not yet: the agent should keep planning.
    KeepPlanning,
    /// No.
    Decline,
    /// The question was dismissed.
    Cancel,
}

impl Verdict {
    /// The snake_case name used in answers and tables.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Approve => "approve",
            Verdict::KeepPlanning => "keep_planning",
            Verdict::Decline => "decline",
            Verdict::Cancel => "cancel",
        }
    }
}

/// Why a step failed, as carried in a receipt's `error`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepError {
    /// A stable code (`stale_target`, `forbidden`, `upstream_error`, …).
    pub code: StepErrorCode,
    /// What happened, for a person.
    pub message: String,
    /// The upstream's own error, when it sent one.
    pub upstream: Option<Value>,
}

/// The code of a step's error: a refusal [`Code`] when a check before the
/// call stopped it, else what the upstream's answer was. Written to the log
/// and to receipts as its stable string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepErrorCode {
    /// A check refused the step before its call (`stale_target`,
    /// `forbidden`, `upstream_unavailable`, …); nothing was sent.
    Refused(Code),
    /// The upstream answered with an error: a JSON-RPC error or a tool
    /// result with `isError`.
    UpstreamError,
    /// The upstream answered with something other than a tool result.
    UnexpectedResult,
    /// The call may or may not have reached the upstream (its claim's
    /// lease ran out, or the connection was lost mid-call).
    InDoubt,
    /// A code this build does not know, read from a log a newer plangate
    /// wrote: kept as written, since nothing recorded may be lost.
    Unrecognised(String),
}

impl StepErrorCode {
    /// The stable string.
    pub fn as_str(&self) -> &str {
        match self {
            StepErrorCode::Refused(code) => code.as_str(),
            StepErrorCode::UpstreamError => "upstream_error",
            StepErrorCode::UnexpectedResult => "unexpected_result",
            StepErrorCode::InDoubt => "in_doubt",
            StepErrorCode::Unrecognised(s) => s,
        }
    }

    /// The code a stable string names; never fails (see
    /// [`StepErrorCode::Unrecognised`]).
    pub fn parse(s: &str) -> StepErrorCode {
        match s {
            "upstream_error" => StepErrorCode::UpstreamError,
            "unexpected_result" => StepErrorCode::UnexpectedResult,
            "in_doubt" => StepErrorCode::InDoubt,
            other => match other.parse::<Code>() {
                Ok(code) => StepErrorCode::Refused(code),
                Err(_) => StepErrorCode::Unrecognised(other.to_owned()),
            },
        }
    }
}

impl From<Code> for StepErrorCode {
    fn from(code: Code) -> Self {
        StepErrorCode::Refused(code)
    }
}

impl std::fmt::Display for StepErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<&str> for StepErrorCode {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl Serialize for StepErrorCode {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for StepErrorCode {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = std::borrow::Cow::<'de, str>::deserialize(deserializer)?;
        Ok(StepErrorCode::parse(&s))
    }
}

/// A plan step as recorded when planned. Never holds a secret in the clear.
///
/// In the event log `keyed_arguments` is always written out; in memory it
/// is `None` when it equals `arguments` (no secrets: the common case), so
/// a folded plan does not hold every step's arguments twice.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(into = "StepRecordWire", from = "StepRecordWire")]
pub struct StepRecord {
    /// The step's id; also the upstream operation key when applied.
    pub step_id: String,
    /// Its position in the plan; never renumbered.
    pub position: u32,
    /// The upstream server's name.
    pub server: String,
    /// The upstream's own tool name.
    pub tool: String,
    /// The tool's name as exposed to the client.
    pub exposed_as: String,
    /// Redacted arguments, for every answer, view and export. Held as
    /// text ([`JsonText`]): a gateway keeps many folded plans in memory.
    pub arguments: JsonText,
    /// Arguments with secrets replaced by HMACs, for digest and dedup;
    /// `None` when they equal `arguments` (see
    /// [`StepRecord::keyed_arguments`]).
    pub keyed_arguments: Option<JsonText>,
    /// AEAD ciphertext of the secrets, made by the edge; opaque here.
    pub sealed_secrets: Option<String>,
    /// [`crate::arguments_fingerprint`] of server, tool and keyed arguments.
    pub fingerprint: String,
    /// The tool's effect class when planned.
    pub effect: Effect,
    /// [`crate::schema_hash`] of the tool's input schema when planned.
    pub schema_hash: String,
    /// One sentence saying what the step would do.
    pub predicted_effect: String,
    /// Where the write lands.
    pub lands_on: LandsOn,
    /// Whether the step needs explicit attention (destructive).
    pub approval_required: bool,
    /// Why it needs attention.
    pub approval_note: Option<String>,
    /// When it was planned.
    pub planned_at_ms: i64,
    /// The target's version as the upstream's preview tool reported it
    /// when planned; apply re-checks it (`stale_target` if it moved).
    #[serde(default)]
    pub target_version: Option<Value>,
    /// [`crate::definition_hash`] of the tool's whole definition when
    /// planned: the step runs only against that definition. `None` for
    /// steps planned before definitions were pinned.
    #[serde(default)]
    pub definition_hash: Option<String>,
    /// What the write would change, as the upstream showed it when
    /// planned ([`crate::Preview`]); apply takes it again and runs the
    /// step only if the target's `before_digest` is the same.
    #[serde(default)]
    pub preview: Option<crate::Preview>,
    /// The operator's rule (`[[rules]]`) that made the call a step, when
    /// a rule did rather than the mode or the key's scope.
    #[serde(default)]
    pub rule: Option<String>,
    /// Why the key may not read what the preview read (a rule refuses it
    /// that read): the preview was taken for the person only, and every
    /// answer the agent can read says `preview withheld` instead of it
    /// (docs/security.md, "Previews").
    #[serde(default)]
    pub preview_withheld: Option<String>,
}

impl StepRecord {
    /// About how many bytes the record holds — its arguments (shown,
    /// keyed and sealed), predicted effect and preview: what a plan's
    /// size cap counts ([`crate::rules::room_for`]).
    pub fn size_bytes(&self) -> usize {
        let preview = match &self.preview {
            Some(crate::Preview::Diff { diff, target, .. }) => diff.len() + target.len(),
            Some(crate::Preview::State { state, summary, .. }) => {
                serde_json::to_string(state).map_or(0, |s| s.len()) + summary.len()
            }
            Some(crate::Preview::Unavailable { reason, .. }) => reason.len(),
            None => 0,
        };
        self.arguments.as_str().len()
            + self
                .keyed_arguments
                .as_ref()
                .map_or(0, |k| k.as_str().len())
            + self.sealed_secrets.as_ref().map_or(0, String::len)
            + self.predicted_effect.len()
            + preview
    }

    /// The arguments with secrets replaced by HMACs, for digest and dedup.
    pub fn keyed_arguments(&self) -> &JsonText {
        self.keyed_arguments.as_ref().unwrap_or(&self.arguments)
    }

    /// `keyed` as the record holds it: `None` when it equals `arguments`.
    pub fn keyed_unless_same(arguments: &JsonText, keyed: JsonText) -> Option<JsonText> {
        (keyed != *arguments).then_some(keyed)
    }
}

/// [`StepRecord`] as the event log holds it, keyed arguments written out.
#[derive(Serialize, Deserialize)]
struct StepRecordWire {
    step_id: String,
    position: u32,
    server: String,
    tool: String,
    exposed_as: String,
    arguments: JsonText,
    keyed_arguments: JsonText,
    sealed_secrets: Option<String>,
    fingerprint: String,
    effect: Effect,
    schema_hash: String,
    predicted_effect: String,
    lands_on: LandsOn,
    approval_required: bool,
    approval_note: Option<String>,
    planned_at_ms: i64,
    #[serde(default)]
    target_version: Option<Value>,
    #[serde(default)]
    definition_hash: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    preview: Option<crate::Preview>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    rule: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    preview_withheld: Option<String>,
}

impl From<StepRecord> for StepRecordWire {
    fn from(r: StepRecord) -> Self {
        let keyed_arguments = r.keyed_arguments.unwrap_or_else(|| r.arguments.clone());
        StepRecordWire {
            step_id: r.step_id,
            position: r.position,
            server: r.server,
            tool: r.tool,
            exposed_as: r.exposed_as,
            arguments: r.arguments,
            keyed_arguments,
            sealed_secrets: r.sealed_secrets,
            fingerprint: r.fingerprint,
            effect: r.effect,
            schema_hash: r.schema_hash,
            predicted_effect: r.predicted_effect,
            lands_on: r.lands_on,
            approval_required: r.approval_required,
            approval_note: r.approval_note,
            planned_at_ms: r.planned_at_ms,
            target_version: r.target_version,
            definition_hash: r.definition_hash,
            preview: r.preview,
            rule: r.rule,
            preview_withheld: r.preview_withheld,
        }
    }
}

impl From<StepRecordWire> for StepRecord {
    fn from(w: StepRecordWire) -> Self {
        StepRecord {
            keyed_arguments: StepRecord::keyed_unless_same(&w.arguments, w.keyed_arguments),
            step_id: w.step_id,
            position: w.position,
            server: w.server,
            tool: w.tool,
            exposed_as: w.exposed_as,
            arguments: w.arguments,
            sealed_secrets: w.sealed_secrets,
            fingerprint: w.fingerprint,
            effect: w.effect,
            schema_hash: w.schema_hash,
            predicted_effect: w.predicted_effect,
            lands_on: w.lands_on,
            approval_required: w.approval_required,
            approval_note: w.approval_note,
            planned_at_ms: w.planned_at_ms,
            target_version: w.target_version,
            definition_hash: w.definition_hash,
            preview: w.preview,
            rule: w.rule,
            preview_withheld: w.preview_withheld,
        }
    }
}

/// Where a step's write lands (`lands_on` in answers).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LandsOn {
    /// Live data or a copy.
    #[serde(rename = "where")]
    pub where_: Where,
    /// The target's id, when known.
    pub target: Option<String>,
    /// The copy's id, filled in by the receipt.
    pub copy_id: Option<String>,
    /// A note for the person.
    pub note: Option<String>,
}

/// Whether a write lands on live data or on a copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Where {
    /// The real thing.
    Live,
    /// A copy the upstream makes (the receipt names it).
    Copy,
}

#[cfg(test)]
pub(crate) mod tests {
    use serde_json::json;

    use super::*;

    /// A step record for tests: position, tool and arguments vary.
    pub(crate) fn record(step_id: &str, position: u32, tool: &str, args: Value) -> StepRecord {
        StepRecord {
            step_id: step_id.into(),
            position,
            server: "site".into(),
            tool: tool.into(),
            exposed_as: format!("site__{tool}"),
            keyed_arguments: StepRecord::keyed_unless_same(
                &JsonText::from_value(&crate::redact(&args)),
                JsonText::from_value(&crate::keyed_arguments(&args, &[7; 32]).unwrap()),
            ),
            arguments: JsonText::from_value(&crate::redact(&args)),
            sealed_secrets: None,
            fingerprint: format!("fp-{tool}-{args}"),
            effect: Effect::Write,
            schema_hash: "sha256:00".into(),
            predicted_effect: format!("Call {tool}."),
            lands_on: LandsOn {
                where_: Where::Live,
                target: None,
                copy_id: None,
                note: None,
            },
            approval_required: false,
            approval_note: None,
            planned_at_ms: 1_000,
            target_version: None,
            definition_hash: None,
            preview: None,
            rule: None,
            preview_withheld: None,
        }
    }

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

    /// One event of every kind.
    pub(crate) fn every_kind() -> Vec<EventKind> {
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
        ]
    }

    /// The log always holds the keyed arguments written out; memory keeps
    /// them only when they differ from the redacted ones (secrets).
    #[test]
    fn keyed_arguments_are_written_out_and_held_only_when_they_differ() {
        let plain = record("step_1", 1, "update_page", json!({"id": 2, "title": "t"}));
        assert_eq!(plain.keyed_arguments, None);
        let json = serde_json::to_value(&plain).unwrap();
        assert_eq!(json["keyed_arguments"], json!({"id": 2, "title": "t"}));
        let back: StepRecord = serde_json::from_value(json).unwrap();
        assert_eq!(back, plain);
        assert_eq!(back.keyed_arguments(), &json!({"id": 2, "title": "t"}));
        // Read from the log's text as well as from a value.
        let text = serde_json::to_string(&plain).unwrap();
        let back: StepRecord = serde_json::from_str(&text).unwrap();
        assert_eq!(back, plain);
        assert_eq!(back.keyed_arguments, None);

        let secret = record("step_2", 2, "login", json!({"password": "hunter2"}));
        let keyed = secret.keyed_arguments.clone().expect("a secret is keyed");
        assert_ne!(&keyed, &secret.arguments);
        let json = serde_json::to_value(&secret).unwrap();
        assert_eq!(json["keyed_arguments"], keyed.value());
        let back: StepRecord = serde_json::from_value(json).unwrap();
        assert_eq!(back.keyed_arguments(), &keyed);
    }

    #[test]
    fn every_event_round_trips_through_its_json_and_names_its_type() {
        let kinds = every_kind();
        assert_eq!(
            kinds.len(),
            19,
            "one of each type of docs/design.md §6, the mode lock's two and call_recorded"
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
    fn every_event_type_parses_from_the_string_its_events_store() {
        for kind in every_kind() {
            let t = kind.event_type();
            assert_eq!(EventType::parse(t.as_str()), Some(t));
            assert!(*kind.name() == t);
        }
        assert_eq!(EventType::parse("mode-set"), None);
    }

    #[test]
    fn a_step_error_code_is_its_stable_string_and_keeps_unknown_ones() {
        for (code, text) in [
            (StepErrorCode::UpstreamError, "upstream_error"),
            (StepErrorCode::UnexpectedResult, "unexpected_result"),
            (StepErrorCode::InDoubt, "in_doubt"),
            (Code::StaleTarget.into(), "stale_target"),
            (
                StepErrorCode::Unrecognised("from_the_future".into()),
                "from_the_future",
            ),
        ] {
            assert_eq!(serde_json::to_value(&code).unwrap(), json!(text));
            assert_eq!(
                serde_json::from_value::<StepErrorCode>(json!(text)).unwrap(),
                code
            );
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
    fn a_step_record_uses_the_answer_field_names() {
        let r = record(
            "step_1",
            2,
            "update_page",
            json!({"id": 42, "api_key": "k"}),
        );
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["lands_on"]["where"], "live");
        assert_eq!(json["effect"], "write");
        assert_eq!(json["arguments"]["api_key"], "[redacted]");
        assert!(!json.to_string().contains("\"k\""));
        assert_eq!(
            serde_json::to_value(Verdict::KeepPlanning).unwrap(),
            json!("keep_planning")
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
