//! API key scopes (docs/design.md §2): what a caller holding a key may do at all,
//! before any mode is consulted.

use crate::closed_names::closed_names;

use serde::{Deserialize, Serialize};

/// The scope granted to an API key when it is created.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Reads only; every write is refused `forbidden`.
    Read,
    /// Writes are always planned, and applied only after a person outside
    /// this key approves.
    Plan,
    /// Full use: writes run, or are planned when the mode says so.
    Write,
}

impl Scope {
    /// Every scope, narrowest first.
    pub const ALL: [Scope; 3] = [Scope::Read, Scope::Plan, Scope::Write];

    /// The lowercase name used on the command line, in the store and answers.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Plan => "plan",
            Scope::Write => "write",
        }
    }
}

closed_names!(Scope, parse: ParseScopeError, "scope", ": expected read, plan or write");
