//! Operator tokens: what lets a person into the web console.
//!
//! An operator token is a credential of its own, never an API key: it
//! reaches the console and nothing else, and an API key never reaches the
//! console. Tokens look like `pgo_` + base64url of 32 OS-random bytes, so
//! the two kinds cannot be confused even by eye, and each kind is looked up
//! only in its own table. As with API keys, only the SHA-256 is stored (a
//! 256-bit random token needs no slow hash, and a plain digest lets every
//! replica look it up by index); the token exists once, when it is created.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::StoreError;
use crate::rows::TableRow;
use crate::tokens::{fmt_created, is_valid_name, is_well_formed, looks_like_id};

/// The readable prefix of every operator token, distinct from API keys'
/// `pgk_` so a token pasted in the wrong place is recognised.
pub const OPERATOR_TOKEN_PREFIX: &str = "pgo_";

const ID_PREFIX: &str = "opr_";

/// A stored operator token, without the token. Safe to show and log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperatorToken {
    /// Stable id, `opr_` + 16 hex digits; console sessions refer to it, so
    /// revoking the token ends its sessions.
    pub id: String,
    /// Who holds it: the name the console records as the actor of every
    /// event the person causes. Unique among active tokens.
    pub name: String,
    /// The token's first 12 characters, to recognise it in a listing.
    pub prefix: String,
    /// When it was created, in ms since the epoch.
    pub created_at_ms: i64,
    /// When it was revoked, if it was; a revoked token never opens the
    /// console again, and its open sessions stop at their next request.
    pub revoked_at_ms: Option<i64>,
}

impl OperatorToken {
    /// Whether the token still lets its holder in.
    pub fn is_active(&self) -> bool {
        self.revoked_at_ms.is_none()
    }
}

/// An operator token just created, with the only copy of the token. Its
/// `Debug` does not print the token.
pub struct CreatedOperatorToken {
    /// The stored record.
    pub operator: OperatorToken,
    /// The token to hand to the person once; it is not stored anywhere.
    pub token: String,
}

impl fmt::Debug for CreatedOperatorToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt_created(f, "CreatedOperatorToken", "operator", &self.operator)
    }
}

/// The columns every operator query returns, in the order
/// [`operator_from_row`] reads them.
macro_rules! operator_columns {
    () => {
        "id, name, prefix, created_at_ms, revoked_at_ms"
    };
}
pub(crate) use operator_columns;

/// Reads a row of [`operator_columns!`] from any backend.
pub(crate) fn operator_from_row(row: &impl TableRow) -> Result<OperatorToken, StoreError> {
    Ok(OperatorToken {
        id: row.text("id")?,
        name: row.text("name")?,
        prefix: row.text("prefix")?,
        created_at_ms: row.int("created_at_ms")?,
        revoked_at_ms: row.maybe_int("revoked_at_ms")?,
    })
}

/// Checks an operator name: the API key rule (1–64 of `[A-Za-z0-9._-]`),
/// and not shaped like an operator id, so `revoke` can tell them apart.
pub fn validate_operator_name(name: &str) -> Result<(), StoreError> {
    if is_valid_name(name, ID_PREFIX) {
        Ok(())
    } else {
        Err(StoreError::InvalidOperatorName(name.to_owned()))
    }
}

/// Whether `s` has the shape of an operator id (`opr_` + 16 lowercase hex).
pub(crate) fn looks_like_operator_id(s: &str) -> bool {
    looks_like_id(s, ID_PREFIX)
}

/// A fresh operator id.
pub(crate) fn new_operator_id() -> Result<String, StoreError> {
    crate::random::new_id(ID_PREFIX)
}

/// A fresh operator token: `pgo_` + base64url of 32 OS-random bytes.
pub(crate) fn new_operator_token() -> Result<String, StoreError> {
    crate::tokens::new_token(OPERATOR_TOKEN_PREFIX)
}

/// Whether `token` is shaped like an operator token. An API key (`pgk_…`)
/// is not, so it is refused before any table is asked.
pub(crate) fn is_well_formed_operator_token(token: &str) -> bool {
    is_well_formed(token, OPERATOR_TOKEN_PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operator_tokens_are_prefixed_random_and_never_api_keys() {
        let a = new_operator_token().expect("token");
        assert!(a.starts_with("pgo_") && a.len() == 47);
        assert!(is_well_formed_operator_token(&a));
        assert_ne!(a, new_operator_token().expect("token"));
        let api = crate::keys::new_token().expect("api token");
        assert!(!is_well_formed_operator_token(&api));
        assert!(!crate::keys::is_well_formed_token(&a));
    }

    #[test]
    fn operator_names_follow_the_key_rule_and_are_not_ids() {
        assert!(validate_operator_name("ana.ops").is_ok());
        for bad in ["", "has space", "opr_0123456789abcdef", &"x".repeat(65)] {
            let err = validate_operator_name(bad).expect_err(bad);
            assert_eq!(err.code(), "invalid_operator_name");
        }
    }

    #[test]
    fn created_token_debug_hides_the_token() {
        let token = new_operator_token().expect("token");
        let created = CreatedOperatorToken {
            operator: OperatorToken {
                id: new_operator_id().expect("id"),
                name: "ana".into(),
                prefix: crate::tokens::shown_prefix(&token),
                created_at_ms: 0,
                revoked_at_ms: None,
            },
            token: token.clone(),
        };
        let shown = format!("{created:?}");
        assert!(
            !shown.contains(&token[crate::SHOWN_PREFIX_LEN..]),
            "{shown}"
        );
    }
}
