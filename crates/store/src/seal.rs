//! Sealing secrets at rest (docs/design.md §2, §5).
//!
//! A planned step's secret argument values are stored sealed and opened
//! only to replay the call. Sealing is XChaCha20-Poly1305 under the seal
//! key ([`KeyMaterial::seal_key`]) with a fresh 24-byte nonce from the
//! operating system's generator: nonces that large can be random without
//! any risk of repeating, so replicas sharing a key need no coordination.
//! The caller passes associated data that names what the secret belongs to
//! (the gateway uses the step id), so a sealed value copied onto another
//! step does not open.
//!
//! The sealed form is text, `v1.` followed by the unpadded URL-safe base64
//! of nonce ‖ ciphertext ‖ tag, so it fits in a JSON event body. The
//! version prefix leaves room to change algorithm or key later. Errors say
//! what went wrong in general terms and never include the plaintext (or the
//! sealed text).

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{Key, XChaCha20Poly1305, XNonce};

use crate::random::random_bytes;
use crate::{KeyMaterial, StoreError};

/// The prefix of every value sealed by this version of the format.
pub const SEALED_PREFIX: &str = "v1.";

const NONCE_LEN: usize = 24;
const TAG_LEN: usize = 16;

/// Seals `plaintext` under the seal key, binding `associated_data` (which
/// is authenticated but not stored: the same bytes must be given to
/// [`unseal`]). Returns `v1.` + base64url(nonce ‖ ciphertext). Two seals of
/// the same plaintext differ, since each uses a fresh random nonce.
pub fn seal(
    material: &KeyMaterial,
    plaintext: &[u8],
    associated_data: &[u8],
) -> Result<String, StoreError> {
    let nonce: [u8; NONCE_LEN] = random_bytes()?;
    let ciphertext = cipher(material)
        .encrypt(
            &XNonce::from(nonce),
            Payload {
                msg: plaintext,
                aad: associated_data,
            },
        )
        .map_err(|_| StoreError::SealFailed)?;
    let mut sealed = Vec::with_capacity(NONCE_LEN + ciphertext.len());
    sealed.extend_from_slice(&nonce);
    sealed.extend_from_slice(&ciphertext);
    Ok(format!("{SEALED_PREFIX}{}", URL_SAFE_NO_PAD.encode(sealed)))
}

/// Opens a value made by [`seal`]. A value that is not in the sealed format
/// is [`StoreError::SealedMalformed`]; one that does not authenticate —
/// another seal key, altered bytes, other associated data, cut short — is
/// [`StoreError::UnsealFailed`]. Never panics, whatever the input.
pub fn unseal(
    material: &KeyMaterial,
    sealed: &str,
    associated_data: &[u8],
) -> Result<Vec<u8>, StoreError> {
    let body = sealed
        .strip_prefix(SEALED_PREFIX)
        .ok_or(StoreError::SealedMalformed(
            "it does not start with \"v1.\"",
        ))?;
    let bytes = URL_SAFE_NO_PAD
        .decode(body)
        .map_err(|_| StoreError::SealedMalformed("it is not unpadded url-safe base64"))?;
    if bytes.len() < NONCE_LEN + TAG_LEN {
        return Err(StoreError::SealedMalformed(
            "it is too short to hold a nonce and a tag",
        ));
    }
    let (nonce, ciphertext) = bytes.split_at(NONCE_LEN);
    let nonce = <[u8; NONCE_LEN]>::try_from(nonce)
        .map_err(|_| StoreError::SealedMalformed("it has no complete nonce"))?;
    cipher(material)
        .decrypt(
            &XNonce::from(nonce),
            Payload {
                msg: ciphertext,
                aad: associated_data,
            },
        )
        .map_err(|_| StoreError::UnsealFailed)
}

fn cipher(material: &KeyMaterial) -> XChaCha20Poly1305 {
    XChaCha20Poly1305::new(&Key::from(*material.seal_key()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn material(seal: u8) -> KeyMaterial {
        KeyMaterial::new([seal; 32], [0xee; 32], [0xdd; 32]).expect("keys")
    }

    const SECRET: &[u8] = br#"{"api_key":"sk-live-0123456789abcdef"}"#;

    #[test]
    fn a_sealed_secret_opens_with_the_same_key_and_associated_data() {
        let keys = material(1);
        let sealed = seal(&keys, SECRET, b"step_1").expect("seal");
        assert!(sealed.starts_with("v1."), "{sealed}");
        assert!(!sealed.contains("sk-live"));
        assert_eq!(unseal(&keys, &sealed, b"step_1").expect("unseal"), SECRET);

        // Empty plaintext and empty associated data work too.
        let empty = seal(&keys, b"", b"").expect("seal empty");
        assert_eq!(unseal(&keys, &empty, b"").expect("unseal empty"), b"");
    }

    #[test]
    fn two_seals_of_the_same_plaintext_differ() {
        let keys = material(1);
        let a = seal(&keys, SECRET, b"step_1").expect("seal");
        let b = seal(&keys, SECRET, b"step_1").expect("seal");
        assert_ne!(a, b);
        // Different nonces, not just different encodings.
        assert_ne!(a[..3 + 32], b[..3 + 32]);
    }

    #[test]
    fn another_seal_key_does_not_open_it() {
        let sealed = seal(&material(1), SECRET, b"step_1").expect("seal");
        let err = unseal(&material(2), &sealed, b"step_1").expect_err("wrong key");
        assert!(matches!(err, StoreError::UnsealFailed), "{err}");
        assert_eq!(err.code(), "unseal_failed");
        // The signing key plays no part: only the seal key matters.
        let same_seal = KeyMaterial::new([1; 32], [0x11; 32], [0x22; 32]).expect("keys");
        assert_eq!(
            unseal(&same_seal, &sealed, b"step_1").expect("unseal"),
            SECRET
        );
    }

    #[test]
    fn other_associated_data_does_not_open_it() {
        let keys = material(1);
        let sealed = seal(&keys, SECRET, b"step_1").expect("seal");
        for aad in [&b"step_2"[..], b"", b"step_1 ", b"step_"] {
            let err = unseal(&keys, &sealed, aad).expect_err("wrong aad");
            assert!(matches!(err, StoreError::UnsealFailed), "{aad:?}: {err}");
        }
    }

    #[test]
    fn any_flipped_byte_is_detected() {
        let keys = material(1);
        let sealed = seal(&keys, SECRET, b"step_1").expect("seal");
        let raw = URL_SAFE_NO_PAD.decode(&sealed[3..]).expect("decode");
        for i in 0..raw.len() {
            let mut tampered = raw.clone();
            tampered[i] ^= 0x01;
            let tampered = format!("v1.{}", URL_SAFE_NO_PAD.encode(&tampered));
            let err = unseal(&keys, &tampered, b"step_1").expect_err("tampered");
            assert!(matches!(err, StoreError::UnsealFailed), "byte {i}: {err}");
        }
    }

    #[test]
    fn truncated_or_malformed_input_fails_cleanly() {
        let keys = material(1);
        let sealed = seal(&keys, SECRET, b"step_1").expect("seal");
        // Every prefix of the sealed text fails, as one error or the other.
        for len in 0..sealed.len() {
            let err = unseal(&keys, &sealed[..len], b"step_1").expect_err("truncated");
            assert!(
                matches!(
                    err,
                    StoreError::UnsealFailed | StoreError::SealedMalformed(_)
                ),
                "length {len}: {err}"
            );
        }
        for bad in [
            "",
            "v1.",
            "v2.AAAA",
            "V1.AAAA",
            "v1.!!!!",
            "v1.AAAA====",
            &sealed.replacen("v1.", "", 1),
            &format!("{sealed}="),
            &format!("{sealed}\n"),
            &format!("v1.{}", URL_SAFE_NO_PAD.encode([0u8; 39])),
        ] {
            let err = unseal(&keys, bad, b"step_1").expect_err(bad);
            assert_eq!(err.code(), "sealed_malformed", "{bad:?}: {err}");
        }
        // Exactly nonce + tag is well-formed but does not authenticate.
        let bare = format!("v1.{}", URL_SAFE_NO_PAD.encode([0u8; 40]));
        let err = unseal(&keys, &bare, b"step_1").expect_err("bare");
        assert_eq!(err.code(), "unseal_failed");
    }

    #[test]
    fn errors_never_repeat_the_plaintext_or_the_sealed_text() {
        let keys = material(1);
        let sealed = seal(&keys, SECRET, b"step_1").expect("seal");
        let broken = format!("v1.{}!", &sealed[3..]);
        for err in [
            unseal(&material(2), &sealed, b"step_1").expect_err("wrong key"),
            unseal(&keys, &broken, b"step_1").expect_err("bad base64"),
        ] {
            let shown = format!("{err} {err:?}");
            assert!(!shown.contains("sk-live"), "{shown}");
            assert!(!shown.contains(&sealed[3..]), "{shown}");
            assert!(shown.chars().next().is_some_and(|c| !c.is_uppercase()));
        }
    }
}
