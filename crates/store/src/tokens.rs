//! What API keys and operator tokens share: the shape of a token (a
//! readable prefix, then the unpadded base64url of 32 OS-random bytes), the
//! shape of an id (a prefix, then 16 lowercase hex digits), the rule for
//! names, and a `Debug` that never prints a token (docs/design.md §2).
//!
//! Apart from [`crate::keys`] and [`crate::operators`] so the two kinds
//! differ only in their prefixes and records: a token of one kind can never
//! pass for the other, and a rule tightened for one is tightened for both.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use crate::StoreError;
use crate::random::random_bytes;

/// How many leading characters of a token are kept as [`crate::ApiKey::prefix`]:
/// enough to tell keys apart in a listing, far too few to guess the rest.
pub const SHOWN_PREFIX_LEN: usize = 12;
/// The longest key name accepted.
pub const MAX_KEY_NAME_LEN: usize = 64;

/// The length of a token after its prefix: base64url, no padding, of 32
/// bytes.
const TOKEN_BODY_LEN: usize = 43;

/// A fresh token: `prefix` + base64url of 32 OS-random bytes.
pub(crate) fn new_token(prefix: &str) -> Result<String, StoreError> {
    let bytes: [u8; 32] = random_bytes()?;
    Ok(format!("{prefix}{}", URL_SAFE_NO_PAD.encode(bytes)))
}

/// Whether `token` is shaped like one made by [`new_token`] with `prefix`.
/// Anything else is refused before it reaches the database, and is simply
/// "no such token".
pub(crate) fn is_well_formed(token: &str, prefix: &str) -> bool {
    token
        .strip_prefix(prefix)
        .filter(|body| body.len() == TOKEN_BODY_LEN)
        .and_then(|body| URL_SAFE_NO_PAD.decode(body).ok())
        .is_some_and(|bytes| bytes.len() == 32)
}

/// The part of a token that may be stored and shown.
pub(crate) fn shown_prefix(token: &str) -> String {
    token.chars().take(SHOWN_PREFIX_LEN).collect()
}

/// Whether `s` has the shape of an id made with `prefix` (`prefix` + 16
/// lowercase hex, as [`crate::new_id`] makes them).
pub(crate) fn looks_like_id(s: &str, prefix: &str) -> bool {
    s.strip_prefix(prefix).is_some_and(|rest| {
        rest.len() == 16 && rest.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

/// The name rule of keys and operator tokens: 1–64 of `[A-Za-z0-9._-]`,
/// and not shaped like an id of the kind (`id_prefix`), so `revoke` can
/// tell a name from an id without ambiguity.
pub(crate) fn is_valid_name(name: &str, id_prefix: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_KEY_NAME_LEN
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        && !looks_like_id(name, id_prefix)
}

/// The `Debug` of a record just created with its token, the token
/// replaced (`CreatedKey { key: …, token: "[redacted]" }`), so logging it
/// cannot leak the token.
pub(crate) fn fmt_created(
    f: &mut fmt::Formatter<'_>,
    type_name: &str,
    field: &str,
    record: &dyn fmt::Debug,
) -> fmt::Result {
    f.debug_struct(type_name)
        .field(field, record)
        .field("token", &"[redacted]")
        .finish()
}
