//! plangate's domain core.
//!
//! This crate owns the vocabulary every other part of plangate shares: what
//! a tool's *effect* is and where that classification came from, what a
//! caller's *scope* allows, how upstream tool, prompt and resource names are
//! exposed to clients without collisions, and which argument keys hold
//! secrets. Later it also holds modes, plan steps, digests and the fold of
//! the event log.
//!
//! It must never do I/O: no tokio, no sqlx, no rmcp, no files, no clock. Every
//! function here is a pure function of its inputs, so the rules that decide
//! what plangate lets through can be unit- and property-tested exhaustively,
//! and so that every edge (gateway, store, CLI, console) applies exactly the
//! same rule.

pub mod effect;
pub mod mode;
pub mod names;
pub mod redact;
pub mod scope;

pub use effect::{Effect, EffectSource, ParseEffectError, classify};
pub use mode::{
    DEFAULT_MODE, ModeError, ModeSpec, Modes, OverAccess, PLAN_MODE, ParseOverAccessError,
    validate_mode_name,
};
pub use names::{
    MAX_EXPOSED_NAME_LEN, NAMESPACE_SEPARATOR, NameError, assign_names, expose_name, expose_uri,
    split_exposed_name, split_exposed_uri, validate_upstream_name,
};
pub use redact::{REDACTED, is_secret_key, redact};
pub use scope::{ParseScopeError, Scope};
