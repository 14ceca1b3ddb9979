//! plangate's domain core.
//!
//! This crate owns the vocabulary and the rules every other part of
//! plangate shares:
//!
//! * what a tool's *effect* is and where that classification came from
//!   ([`effect`]), what a caller's *scope* allows ([`scope`]), what a *mode*
//!   caps ([`mode`]), and the decision a `tools/call` gets at dispatch
//!   ([`decision`]), with the stable refusal [`Code`]s ([`code`]);
//! * how upstream tool, prompt and resource names are exposed to clients
//!   without collisions ([`names`]);
//! * which argument keys hold secrets, how they are redacted and split off
//!   for sealing ([`mod@redact`], [`secrets`]);
//! * RFC 8785 canonical JSON ([`canonical`]) and the digests built on it —
//!   plan digests, schema hashes, dedup fingerprints, HMACs of secrets
//!   ([`digest`]);
//! * `predicted_effect` sentences ([`template`]);
//! * which of a call's arguments its tool declares ([`declared`]);
//! * how text from an agent or an upstream is shown to a person: control
//!   characters, escape sequences and invisible format characters as
//!   visible escapes, the text marked ([`mod@screen`]);
//! * the event log's types ([`event`]) and the fold that turns a key's log
//!   into its mode and plan ([`fold`]), which holds arguments and results
//!   as compact text ([`json_text`]).
//!
//! It must never do I/O: no tokio, no sqlx, no rmcp, no files, no clock, no
//! randomness. Ids, times, nonces and keys come in as parameters. Every
//! function here is a pure function of its inputs, so the rules that decide
//! what plangate lets through can be unit- and property-tested exhaustively,
//! and so that every edge (gateway, store, CLI, console) applies exactly the
//! same rule. In particular mode and plan are *only* ever computed by
//! [`KeyState::fold`]: a projection a store keeps for speed is the same fold
//! applied event by event, never a second implementation.

pub mod call_record;
pub mod canonical;
pub mod chain;
mod closed_names;
pub mod code;
pub mod decision;
pub mod declared;
pub mod digest;
pub mod effect;
pub mod event;
pub mod factor;
pub mod fold;
#[cfg(test)]
mod fuzz;
pub mod hash;
pub mod history;
pub mod json_text;
pub mod mode;
pub mod names;
pub mod notify;
pub mod operators;
pub mod partial;
pub mod passkey;
pub mod pinned;
pub mod pins;
pub mod preview;
pub mod redact;
pub mod revision;
pub mod rules;
pub mod scope;
pub mod screen;
pub mod secrets;
pub mod sentence;
pub mod template;
#[cfg(any(test, feature = "test-support"))]
pub mod testing;
pub mod time;
pub mod undo;
pub mod view;

pub use call_record::{CallDecision, CallOutcome, CallRecord};
pub use canonical::{CanonicalError, MAX_SAFE_INTEGER, canonical_json, check_safe_integers};
pub use code::{AccessCode, Code, ErrorBody, ParseCodeError};
pub use decision::{CallerScope, Decision, decide, decide_before_state};
pub use declared::{Undeclared, undeclared};
pub use digest::{
    HMAC_PREFIX, SHA256_PREFIX, arguments_fingerprint, hmac_hex, keyed_arguments, plan_digest,
    schema_hash,
};
pub use effect::{Effect, EffectSource, ParseEffectError, classify};
pub use event::{
    Actor, Channel, Event, EventKind, EventType, LandsOn, StepError, StepErrorCode, StepRecord,
    Verdict, Where,
};
pub use fold::{
    Amendment, Approval, KeyState, ModeLock, Rejection, ReviewedPlan, Step, StepStatus,
};
pub use json_text::JsonText;
pub use mode::{
    DEFAULT_MODE, InForce, LockedBy, ModeError, ModeSpec, Modes, OverAccess, PLAN_MODE,
    ParseOverAccessError, validate_mode_name,
};
pub use names::{
    MAX_EXPOSED_NAME_LEN, NAMESPACE_SEPARATOR, NameError, assign_names, expose_name, expose_uri,
    imitates_gateway_tool, shell_word, split_exposed_name, split_exposed_uri,
    validate_upstream_name,
};
pub use pins::{
    Held, PinnedDefinition, QuarantineReason, Standing, TOOLS_LOG, ToolPin, ToolPins,
    changed_fields, definition_hash,
};
pub use preview::{Before, Preview, before_digest, bound_digest, unified_diff};
pub use redact::{
    REDACTED, RedactionError, Redactor, is_secret_key, keyed_from_split, redact, redact_text,
    scrub_text, scrub_value,
};
pub use revision::{at_revision, json_diff};
pub use scope::{ParseScopeError, Scope};
pub use screen::{HIDDEN_MARK, Screened, screen, screen_json, screen_lines};
pub use secrets::{keep_sealed, restore_secrets, split_secrets};
pub use sentence::{CallFacts, generic_effect};
pub use template::{render_template, validate_template};
pub use time::format_time_ms;
pub use view::{
    AmendAnswer, AmendedStep, Applied, ApprovalAnswer, DiscardAnswer, ExitPlanAnswer, JsonChange,
    KeyPlanView, ModeAnswer, Outcome, PlanAfter, PlanDiff, PlanReview, PlanStanding, PlanSummary,
    PlanView, PlannedStep, PlannedWrite, Receipt, ReceiptStep, RejectedStep, RejectionAnswer,
    ReviewOutcome, ReviewRequested, SessionAnswer, SessionEnded, SinceReview, StatusChange,
    StepView,
};
