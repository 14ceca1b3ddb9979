//! API keys (docs/design.md §2): what a key record holds, how tokens look, and the
//! rules every backend shares.
//!
//! A token is `pgk_` followed by the unpadded URL-safe base64 of 32 bytes
//! from the OS generator. Only its SHA-256 is stored: a 256-bit random
//! token needs no slow hash, and a plain digest lets any replica look a
//! token up by index. The token exists in memory once, when it is created,
//! and is handed to the caller to show the person.

use std::fmt;

use plangate_core::Scope;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::StoreError;
use crate::rows::TableRow;
use crate::tokens::{fmt_created, is_valid_name, is_well_formed, looks_like_id};

/// The readable prefix of every token, so a leaked one is recognisable
/// (and findable by secret scanners).
pub const TOKEN_PREFIX: &str = "pgk_";
pub use crate::tokens::{MAX_KEY_NAME_LEN, SHOWN_PREFIX_LEN};

const KEY_ID_PREFIX: &str = "key_";

/// A stored API key, without its token. Safe to show and log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiKey {
    /// Stable id, `key_` + 16 hex digits; events refer to keys by it, since
    /// a name can be reused once its key is revoked.
    pub id: String,
    /// The operator's name for the key, unique among active keys.
    pub name: String,
    /// What the key may do.
    pub scope: Scope,
    /// The token's first 12 characters (`pgk_` + 8), to recognise a token
    /// in a listing without revealing it.
    pub prefix: String,
    /// When the key was created, in ms since the epoch.
    pub created_at_ms: i64,
    /// When the key was revoked, if it was; a revoked key never
    /// authenticates again.
    pub revoked_at_ms: Option<i64>,
}

impl ApiKey {
    /// Whether the key still authenticates.
    pub fn is_active(&self) -> bool {
        self.revoked_at_ms.is_none()
    }
}

/// A key just created, with the only copy of its token. Its `Debug` does
/// not print the token, so logging the value cannot leak it.
pub struct CreatedKey {
    /// The stored record.
    pub key: ApiKey,
    /// The token to hand to the person once; it is not stored anywhere.
    pub token: String,
}

impl fmt::Debug for CreatedKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt_created(f, "CreatedKey", "key", &self.key)
    }
}

/// The columns every key query returns, in the order [`key_from_row`]
/// reads them; a literal so queries stay static strings (`concat!`).
macro_rules! key_columns {
    () => {
        "id, name, scope, prefix, created_at_ms, revoked_at_ms"
    };
}
pub(crate) use key_columns;

/// Reads a row of [`key_columns!`] from any backend.
pub(crate) fn key_from_row(row: &impl TableRow) -> Result<ApiKey, StoreError> {
    let scope = row.text("scope")?;
    let scope = scope.parse::<Scope>().map_err(|e| StoreError::CorruptRow {
        table: "api_keys",
        reason: e.to_string(),
    })?;
    Ok(ApiKey {
        id: row.text("id")?,
        name: row.text("name")?,
        scope,
        prefix: row.text("prefix")?,
        created_at_ms: row.int("created_at_ms")?,
        revoked_at_ms: row.maybe_int("revoked_at_ms")?,
    })
}

/// Checks a key name: 1–64 of `[A-Za-z0-9._-]`, and not shaped like a key
/// id, so `revoke` can tell a name from an id without ambiguity.
pub fn validate_key_name(name: &str) -> Result<(), StoreError> {
    if is_valid_name(name, KEY_ID_PREFIX) {
        Ok(())
    } else {
        Err(StoreError::InvalidKeyName(name.to_owned()))
    }
}

/// What [`ApiKey::prefix`] holds for the row of an OAuth identity: it
/// has no token of its own.
pub const IDENTITY_PREFIX: &str = "oauth";

/// A caller known by an authorization server's token rather than an API
/// key: `(issuer, claim value)`. It gets a row among the keys, so its plan,
/// mode and audit trail work as a key's do, operators name it in `plans`,
/// `mode set` and `audit export`, and `keys revoke` shuts it out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// `key_` + 16 hex of a SHA-256 over the issuer and the value: the
    /// same identity on every replica and after every restart.
    pub id: String,
    /// `ISSUER#VALUE`, e.g. `https://id.example.com#alice` (an issuer
    /// identifier has no fragment, so `#` cannot be ambiguous).
    pub name: String,
}

impl Identity {
    /// The identity `value` of the claim that names callers, as issued by
    /// `issuer`.
    pub fn new(issuer: &str, value: &str) -> Identity {
        use sha2::Digest as _;
        let digest = sha2::Sha256::digest(format!("plangate oauth identity\n{issuer}\n{value}"));
        Identity {
            id: format!("{KEY_ID_PREFIX}{}", hex::encode(&digest[..8])),
            name: format!("{issuer}#{value}"),
        }
    }
}

impl ApiKey {
    /// Whether this row is an OAuth identity's ([`Identity`]), not a key
    /// with a token.
    pub fn is_identity(&self) -> bool {
        self.prefix == IDENTITY_PREFIX
    }
}

/// Whether `s` has the shape of a key id (`key_` + 16 lowercase hex).
pub(crate) fn looks_like_key_id(s: &str) -> bool {
    looks_like_id(s, KEY_ID_PREFIX)
}

/// A fresh key id.
pub(crate) fn new_key_id() -> Result<String, StoreError> {
    crate::random::new_id(KEY_ID_PREFIX)
}

/// A fresh token: `pgk_` + base64url of 32 OS-random bytes.
pub(crate) fn new_token() -> Result<String, StoreError> {
    crate::tokens::new_token(TOKEN_PREFIX)
}

/// Lowercase hex SHA-256 of the token: the only form in which it is stored.
pub(crate) fn token_hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// Whether `token` is shaped like one plangate issues. Anything else is
/// rejected before it reaches the database, and is simply "not a key".
pub(crate) fn is_well_formed_token(token: &str) -> bool {
    is_well_formed(token, TOKEN_PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokens::shown_prefix;

    #[test]
    fn tokens_are_prefixed_random_and_well_formed() {
        let a = new_token().expect("token");
        let b = new_token().expect("token");
        assert_ne!(a, b);
        assert!(a.starts_with("pgk_"));
        assert_eq!(a.len(), 4 + 43);
        assert!(is_well_formed_token(&a));
        assert_eq!(shown_prefix(&a).len(), 12);
        assert!(a.starts_with(&shown_prefix(&a)));
    }

    #[test]
    fn malformed_tokens_are_recognised() {
        let good = new_token().expect("token");
        for bad in [
            "",
            "pgk_",
            "pgx_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
            &good[..good.len() - 1],
            &format!("{good}A"),
            &good.replace("pgk_", "PGK_"),
            "pgk_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA+",
            "pgk_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
        ] {
            assert!(!is_well_formed_token(bad), "{bad:?}");
        }
    }

    #[test]
    fn token_hash_is_sha256_hex() {
        assert_eq!(
            token_hash("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn key_names_follow_the_rule() {
        for good in ["ci", "a", "Claude-Desktop_2.0", &"x".repeat(64), "key_abc"] {
            assert!(validate_key_name(good).is_ok(), "{good:?}");
        }
        for bad in [
            "",
            &"x".repeat(65),
            "has space",
            "slash/",
            "ünï",
            "key_0123456789abcdef",
        ] {
            let err = validate_key_name(bad).expect_err(bad);
            assert_eq!(err.code(), "invalid_key_name");
        }
    }

    #[test]
    fn created_key_debug_hides_the_token() {
        let token = new_token().expect("token");
        let created = CreatedKey {
            key: ApiKey {
                id: new_key_id().expect("id"),
                name: "n".into(),
                scope: Scope::Read,
                prefix: shown_prefix(&token),
                created_at_ms: 0,
                revoked_at_ms: None,
            },
            token: token.clone(),
        };
        let shown = format!("{created:?}");
        assert!(!shown.contains(&token));
        assert!(!shown.contains(&token[SHOWN_PREFIX_LEN..]));
        assert!(shown.contains("[redacted]"));
    }
}
