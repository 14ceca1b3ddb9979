//! The log key: an Ed25519 key that signs each event's link in its key's
//! hash chain (`plangate_core::chain`, docs/design.md §6), so a row put
//! into the store by anything but plangate does not verify.
//!
//! A key of its own, apart from the HMAC signing key, because its public
//! half is given away (`plangate audit public-key`) for checking exports
//! offline. Replicas share it (`PLANGATE_LOG_KEY`, or the data dir's
//! `log.key`), as they share the other keys. Signing and checking use
//! aws-lc-rs, the crypto the binary already builds for TLS and OAuth.

use std::fmt;

use aws_lc_rs::signature::{ED25519, Ed25519KeyPair, KeyPair as _, UnparsedPublicKey};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

/// How a public log key is written: this prefix, then the 32 bytes in
/// base64.
pub const PUBLIC_KEY_PREFIX: &str = "ed25519:";

/// The private log key, able to sign. Its `Debug` hides the seed.
pub struct LogKey {
    pair: Ed25519KeyPair,
}

impl LogKey {
    /// The key whose private half is `seed` (32 bytes, as kept in
    /// `log.key` or given in `PLANGATE_LOG_KEY`); an error only if the
    /// crypto library refuses it.
    pub fn from_seed(seed: &[u8; 32]) -> Result<LogKey, String> {
        Ed25519KeyPair::from_seed_unchecked(seed)
            .map(|pair| LogKey { pair })
            .map_err(|e| format!("it is not a usable Ed25519 seed ({e})"))
    }

    /// The signature over an event's 32-byte link, base64.
    pub fn sign(&self, link: &[u8; 32]) -> String {
        STANDARD.encode(self.pair.sign(link).as_ref())
    }

    /// The public half, to check with.
    pub fn public(&self) -> PublicLogKey {
        let mut bytes = [0u8; 32];
        bytes.copy_from_slice(self.pair.public_key().as_ref());
        PublicLogKey(bytes)
    }
}

impl fmt::Debug for LogKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LogKey({})", self.public())
    }
}

/// The public half of the log key: checks signatures, cannot make them.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct PublicLogKey([u8; 32]);

impl PublicLogKey {
    /// Whether `sig` (base64) is this key's signature over `link`.
    pub fn verifies(&self, link: &[u8; 32], sig: &str) -> bool {
        let Ok(sig) = STANDARD.decode(sig.trim()) else {
            return false;
        };
        UnparsedPublicKey::new(&ED25519, &self.0)
            .verify(link, &sig)
            .is_ok()
    }

    /// Reads a public key as [`fmt::Display`] writes it (`ed25519:` and
    /// base64), surrounding whitespace ignored. The error says what is
    /// wrong without repeating the value.
    pub fn parse(text: &str) -> Result<PublicLogKey, String> {
        let text = text.trim();
        let Some(b64) = text.strip_prefix(PUBLIC_KEY_PREFIX) else {
            return Err(format!(
                "a public log key starts with {PUBLIC_KEY_PREFIX:?} (as `plangate audit public-key` prints it)"
            ));
        };
        let bytes = STANDARD
            .decode(b64)
            .map_err(|_| "the key after \"ed25519:\" is not base64".to_owned())?;
        let bytes: [u8; 32] = bytes
            .try_into()
            .map_err(|_| "an Ed25519 public key is 32 bytes".to_owned())?;
        Ok(PublicLogKey(bytes))
    }
}

impl fmt::Display for PublicLogKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{PUBLIC_KEY_PREFIX}{}", STANDARD.encode(self.0))
    }
}

impl fmt::Debug for PublicLogKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Whether `signature` (DER ECDSA) is `point`'s (an uncompressed P-256
/// public key) over `message` with SHA-256: a passkey's assertion
/// (`plangate_core::passkey`), checked with the same crypto as the log's
/// signatures.
pub fn verify_p256(point: &[u8], message: &[u8], signature: &[u8]) -> bool {
    UnparsedPublicKey::new(&aws_lc_rs::signature::ECDSA_P256_SHA256_ASN1, point)
        .verify(message, signature)
        .is_ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_signature_verifies_under_its_key_only_and_over_its_link_only() {
        let key = LogKey::from_seed(&[3; 32]).unwrap();
        let other = LogKey::from_seed(&[4; 32]).unwrap();
        let link = [9u8; 32];
        let sig = key.sign(&link);
        assert!(key.public().verifies(&link, &sig));
        assert!(!other.public().verifies(&link, &sig));
        assert!(!key.public().verifies(&[8u8; 32], &sig));
        assert!(!key.public().verifies(&link, "not base64!"));
    }

    #[test]
    fn a_public_key_reads_back_as_it_is_printed() {
        let public = LogKey::from_seed(&[3; 32]).unwrap().public();
        let printed = public.to_string();
        assert!(printed.starts_with("ed25519:"), "{printed}");
        assert_eq!(PublicLogKey::parse(&format!(" {printed}\n")), Ok(public));
        assert!(PublicLogKey::parse("ed25519:AAAA").is_err());
        assert!(PublicLogKey::parse("ssh-ed25519 AAAA").is_err());
    }

    #[test]
    fn the_debug_form_shows_no_seed() {
        let shown = format!("{:?}", LogKey::from_seed(&[3; 32]).unwrap());
        assert!(shown.starts_with("LogKey(ed25519:"), "{shown}");
    }
}
