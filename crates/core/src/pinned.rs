//! One tool definition as a pin holds it, and the hash that names it: the
//! payload of the tool-pin events (`event`) and what `pins` folds them
//! into, kept below both so the events do not depend on the fold.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::JsonText;
use crate::canonical::canonical_lossless;
use crate::hash::SHA256_PREFIX;

/// `"sha256:"` + hex SHA-256 of a tool definition's canonical JSON (RFC
/// 8785), as the upstream listed it (its own name, before plangate renames
/// it): any change to any field is a new hash. An integer beyond ±2^53 in
/// a schema is hashed by its exact digits, so every definition has one.
pub fn definition_hash(definition: &Value) -> String {
    let text = canonical_lossless(definition);
    format!(
        "{SHA256_PREFIX}{}",
        hex::encode(Sha256::digest(text.as_bytes()))
    )
}

impl PinnedDefinition {
    /// A listed definition, hashed.
    pub fn of(tool: &str, definition: &Value) -> PinnedDefinition {
        PinnedDefinition {
            tool: tool.to_owned(),
            definition_hash: definition_hash(definition),
            definition: JsonText::from_value(definition),
        }
    }
}

/// One definition of a tool, as a pin holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PinnedDefinition {
    /// The upstream's own name for the tool.
    pub tool: String,
    /// [`definition_hash`] of `definition`.
    pub definition_hash: String,
    /// The whole definition as listed.
    pub definition: JsonText,
}

/// Why a definition was quarantined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QuarantineReason {
    /// The tool was not in the upstream's first listing.
    New,
    /// The tool's definition differs from the one accepted.
    Changed,
}

impl QuarantineReason {
    /// The snake_case name used in tables and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            QuarantineReason::New => "new",
            QuarantineReason::Changed => "changed",
        }
    }
}
