//! API key scopes (docs/design.md §2): what a caller holding a key may do at all,
//! before any mode is consulted.

use std::fmt;
use std::str::FromStr;

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
    /// The lowercase name used on the command line, in the store and answers.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Plan => "plan",
            Scope::Write => "write",
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A scope name that is not `read`, `plan` or `write`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown scope {0:?}: expected read, plan or write")]
pub struct ParseScopeError(pub String);

impl FromStr for Scope {
    type Err = ParseScopeError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "read" => Ok(Scope::Read),
            "plan" => Ok(Scope::Plan),
            "write" => Ok(Scope::Write),
            other => Err(ParseScopeError(other.to_owned())),
        }
    }
}
