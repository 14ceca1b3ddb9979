//! The hashes every digest is made of: SHA-256 and HMAC-SHA256 as
//! lowercase hex, and the prefixes that say which a string holds. Below
//! `digest`, `redact`, `preview` and `pins`, which all hash, so none of them
//! depends on another to do it.

use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};

/// What a keyed secret's HMAC is prefixed with in `keyed_arguments`.
pub const HMAC_PREFIX: &str = "hmac-sha256:";
/// What plan digests and schema hashes are prefixed with.
pub const SHA256_PREFIX: &str = "sha256:";

/// HMAC-SHA256 of `data` under `key`, as lowercase hex.
pub fn hmac_hex(key: &[u8; 32], data: &[u8]) -> String {
    // HMAC takes keys of any length, so this cannot fail.
    let mut mac =
        <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("HMAC-SHA256 accepts a 32-byte key");
    mac.update(data);
    hex::encode(mac.finalize().into_bytes())
}

/// SHA-256 of `data`, as lowercase hex.
pub(crate) fn sha256_hex(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

/// Whether two texts are equal, in time that does not depend on where
/// they first differ (a MAC checked against the expected one).
pub fn same_text(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
