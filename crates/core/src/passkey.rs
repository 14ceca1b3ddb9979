//! Passkeys (WebAuthn) as a factor for every yes (docs/design.md §12):
//! what a registration and an assertion must say before plangate takes
//! them, checked here without I/O — the relying party, the origin, the
//! challenge plangate issued, user presence and verification, the signed
//! bytes, the signature counter. The signature itself (ECDSA P-256 over
//! [`signed_bytes`]) is checked by the store's crypto
//! (`plangate_store::verify_p256`).
//!
//! Why no CBOR: the browser hands over the authenticator data
//! (`getAuthenticatorData()`) and the credential's public key as SPKI
//! (`getPublicKey()`) at registration, and an assertion is authenticator
//! data, client data and a DER signature. Only ES256 (P-256) keys are
//! taken — what every platform authenticator and security key offers.
//!
//! Challenges are stateless and bound: `expiry.nonce.mac`, the MAC (under
//! the signing key every replica shares) over the purpose, the act in
//! words (with the plan digest and revision the person saw) and the
//! expiry; each nonce is taken once (the operators log keeps the recent
//! ones).

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// How long an issued challenge may be answered.
pub const CHALLENGE_MS: i64 = 5 * 60 * 1000;
/// How long a registration link (`operator enroll --passkey`) lasts.
pub const INVITE_MS: i64 = 15 * 60 * 1000;

/// The authenticator's flags plangate requires and reads.
const USER_PRESENT: u8 = 0x01;
const USER_VERIFIED: u8 = 0x04;
const ATTESTED: u8 = 0x40;

/// Why a passkey answer was not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PasskeyRefused(pub String);

fn refused<T>(why: impl Into<String>) -> Result<T, PasskeyRefused> {
    Err(PasskeyRefused(why.into()))
}

/// A registered passkey, as the operators log keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Passkey {
    /// The credential id (hex).
    pub credential_id: String,
    /// The P-256 public key, an uncompressed point (hex, 65 bytes).
    pub public_key: String,
    /// The signature counter last seen (0: the authenticator keeps none).
    pub sign_count: u32,
}

/// An assertion, kept in `factor_used` so it can be verified again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Assertion {
    /// The credential that signed (hex).
    pub credential_id: String,
    /// The client data JSON, as the browser sent it.
    pub client_data_json: String,
    /// The authenticator data (hex).
    pub authenticator_data: String,
    /// The DER ECDSA signature (hex).
    pub signature: String,
}

/// What the authenticator data says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthData {
    /// SHA-256 of the relying party id it was made for.
    pub rp_id_hash: [u8; 32],
    /// Its flags byte.
    pub flags: u8,
    /// The signature counter.
    pub sign_count: u32,
    /// The new credential's id, at registration.
    pub credential_id: Option<Vec<u8>>,
}

/// Reads authenticator data (WebAuthn §6.1).
pub fn auth_data(bytes: &[u8]) -> Result<AuthData, PasskeyRefused> {
    if bytes.len() < 37 {
        return refused("the authenticator data is too short");
    }
    let mut rp_id_hash = [0u8; 32];
    rp_id_hash.copy_from_slice(&bytes[..32]);
    let flags = bytes[32];
    let sign_count = u32::from_be_bytes([bytes[33], bytes[34], bytes[35], bytes[36]]);
    let credential_id = if flags & ATTESTED != 0 {
        // aaguid (16), id length (2), id.
        let rest = &bytes[37..];
        if rest.len() < 18 {
            return refused("the attested credential data is cut short");
        }
        let len = usize::from(u16::from_be_bytes([rest[16], rest[17]]));
        let Some(id) = rest.get(18..18 + len) else {
            return refused("the credential id is cut short");
        };
        Some(id.to_vec())
    } else {
        None
    };
    Ok(AuthData {
        rp_id_hash,
        flags,
        sign_count,
        credential_id,
    })
}

/// The client data fields plangate checks.
#[derive(Deserialize)]
struct ClientData {
    #[serde(rename = "type")]
    kind: String,
    challenge: String,
    origin: String,
    #[serde(rename = "crossOrigin", default)]
    cross_origin: bool,
}

/// Where a ceremony must have happened: the relying party id (the
/// console's host name) and the page's origin.
#[derive(Debug, Clone, Copy)]
pub struct Party<'a> {
    /// The relying party id (`localhost`, or the console's domain).
    pub rp_id: &'a str,
    /// The console's origin (`http://localhost:7070`).
    pub origin: &'a str,
}

/// Checks a ceremony's client data and authenticator data: the type
/// (`webauthn.create` or `webauthn.get`), the challenge (base64url, as
/// issued), the origin, not cross-origin, the relying party, and that the
/// person was present and verified (a PIN, a fingerprint).
pub fn check_ceremony(
    client_data_json: &str,
    kind: &str,
    challenge_b64url: &str,
    party: Party<'_>,
    auth: &AuthData,
) -> Result<(), PasskeyRefused> {
    let data: ClientData = serde_json::from_str(client_data_json)
        .map_err(|e| PasskeyRefused(format!("the client data is not WebAuthn's: {e}")))?;
    if data.kind != kind {
        return refused(format!(
            "the client data is of type {:?}, not {kind}",
            data.kind
        ));
    }
    if data.challenge != challenge_b64url {
        return refused("it answers another challenge");
    }
    if data.origin != party.origin || data.cross_origin {
        return refused(format!(
            "it was made at {:?}, not at the console ({})",
            data.origin, party.origin
        ));
    }
    if auth.rp_id_hash[..] != Sha256::digest(party.rp_id.as_bytes())[..] {
        return refused(format!(
            "it was made for another relying party than {}",
            party.rp_id
        ));
    }
    if auth.flags & USER_PRESENT == 0 {
        return refused("the authenticator says no one was present");
    }
    if auth.flags & USER_VERIFIED == 0 {
        return refused("the authenticator did not verify the person (no PIN or biometric)");
    }
    Ok(())
}

/// The bytes an assertion's signature covers: the authenticator data and
/// the SHA-256 of the client data JSON.
pub fn signed_bytes(authenticator_data: &[u8], client_data_json: &str) -> Vec<u8> {
    let mut out = authenticator_data.to_vec();
    out.extend_from_slice(&Sha256::digest(client_data_json.as_bytes()));
    out
}

/// The uncompressed P-256 point of an SPKI public key (what the browser's
/// `getPublicKey()` gives for an ES256 credential); any other key is
/// refused.
pub fn p256_point(spki: &[u8]) -> Result<[u8; 65], PasskeyRefused> {
    // SEQUENCE { SEQUENCE { id-ecPublicKey, prime256v1 }, BIT STRING 0x00 04 x y }
    const PREFIX: [u8; 26] = [
        0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08,
        0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
    ];
    match spki.strip_prefix(&PREFIX[..]) {
        Some(point) if point.len() == 65 && point[0] == 0x04 => {
            let mut out = [0u8; 65];
            out.copy_from_slice(point);
            Ok(out)
        }
        _ => refused("only P-256 (ES256) passkeys are taken"),
    }
}

/// The signature counter of authenticator data given in hex (as an
/// [`Assertion`] keeps it).
pub fn sign_count_of(authenticator_data_hex: &str) -> Option<u32> {
    let bytes = hex::decode(authenticator_data_hex).ok()?;
    auth_data(&bytes).ok().map(|a| a.sign_count)
}

/// Whether a counter moved as a live authenticator's does: both zero (it
/// keeps none), or the new one above the last.
pub fn counter_moved(last: u32, now: u32) -> bool {
    (last == 0 && now == 0) || now > last
}

/// A challenge plangate issues for `purpose` and `bound` (the act in
/// words, with the plan digest and revision the person saw): its text,
/// `expiry.nonce.mac`, which the browser sends back base64url-encoded.
pub fn challenge(
    key: &[u8; 32],
    purpose: &str,
    bound: &str,
    nonce: &str,
    expires_at_ms: i64,
) -> String {
    let mac = crate::hmac_hex(
        key,
        format!("plangate-passkey\0{purpose}\0{bound}\0{expires_at_ms}\0{nonce}").as_bytes(),
    );
    format!("{expires_at_ms}.{nonce}.{mac}")
}

/// Checks a challenge's text (decoded from the client data) against what
/// it must bind: plangate made it for `purpose` and `bound` and it has not
/// expired at `now`. Returns its nonce (each is taken once).
pub fn check_challenge(
    key: &[u8; 32],
    text: &str,
    purpose: &str,
    bound: &str,
    now: i64,
) -> Result<String, PasskeyRefused> {
    let mut parts = text.split('.');
    let (Some(expiry), Some(nonce), Some(_), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return refused("the challenge is not one plangate issued");
    };
    let Ok(expires_at_ms) = expiry.parse::<i64>() else {
        return refused("the challenge is not one plangate issued");
    };
    let expected = challenge(key, purpose, bound, nonce, expires_at_ms);
    if !crate::hash::same_text(&expected, text) {
        return refused(format!(
            "the challenge was issued for another act than {bound:?} (the plan moved, or another act)"
        ));
    }
    if expires_at_ms <= now {
        return refused("the challenge expired; ask for the passkey again");
    }
    Ok(nonce.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: [u8; 32] = [7; 32];

    fn auth(flags: u8, count: u32, rp: &str) -> Vec<u8> {
        let mut b = Sha256::digest(rp.as_bytes()).to_vec();
        b.push(flags);
        b.extend_from_slice(&count.to_be_bytes());
        b
    }

    fn client(kind: &str, challenge: &str, origin: &str) -> String {
        serde_json::json!({"type": kind, "challenge": challenge, "origin": origin}).to_string()
    }

    const PARTY: Party<'static> = Party {
        rp_id: "localhost",
        origin: "http://localhost:7070",
    };

    #[test]
    fn a_ceremony_must_be_of_this_party_origin_challenge_and_person() {
        let a = auth_data(&auth(USER_PRESENT | USER_VERIFIED, 3, "localhost")).unwrap();
        let ok = client("webauthn.get", "c1", "http://localhost:7070");
        check_ceremony(&ok, "webauthn.get", "c1", PARTY, &a).unwrap();
        for (json, why) in [
            (
                client("webauthn.create", "c1", "http://localhost:7070"),
                "type",
            ),
            (
                client("webauthn.get", "c2", "http://localhost:7070"),
                "another challenge",
            ),
            (
                client("webauthn.get", "c1", "http://evil.example"),
                "made at",
            ),
        ] {
            let e = check_ceremony(&json, "webauthn.get", "c1", PARTY, &a).unwrap_err();
            assert!(e.0.contains(why), "{e}");
        }
        let elsewhere = auth_data(&auth(USER_PRESENT | USER_VERIFIED, 3, "evil.example")).unwrap();
        assert!(check_ceremony(&ok, "webauthn.get", "c1", PARTY, &elsewhere).is_err());
        let unverified = auth_data(&auth(USER_PRESENT, 3, "localhost")).unwrap();
        let e = check_ceremony(&ok, "webauthn.get", "c1", PARTY, &unverified).unwrap_err();
        assert!(e.0.contains("did not verify"), "{e}");
    }

    #[test]
    fn a_challenge_binds_its_act_and_expires() {
        let text = challenge(
            &KEY,
            "approve",
            "approve key a at sha256:1 revision 2",
            "n1",
            1_000,
        );
        assert_eq!(
            check_challenge(
                &KEY,
                &text,
                "approve",
                "approve key a at sha256:1 revision 2",
                999
            ),
            Ok("n1".to_owned())
        );
        assert!(
            check_challenge(
                &KEY,
                &text,
                "approve",
                "approve key a at sha256:1 revision 3",
                999
            )
            .is_err()
        );
        assert!(
            check_challenge(
                &KEY,
                &text,
                "register",
                "approve key a at sha256:1 revision 2",
                999
            )
            .is_err()
        );
        assert!(
            check_challenge(
                &[8; 32],
                &text,
                "approve",
                "approve key a at sha256:1 revision 2",
                999
            )
            .is_err()
        );
        let e = check_challenge(
            &KEY,
            &text,
            "approve",
            "approve key a at sha256:1 revision 2",
            1_000,
        )
        .unwrap_err();
        assert!(e.0.contains("expired"), "{e}");
    }

    #[test]
    fn registration_reads_the_credential_id_and_only_p256_keys() {
        let mut b = auth(USER_PRESENT | USER_VERIFIED | ATTESTED, 0, "localhost");
        b.extend_from_slice(&[0u8; 16]);
        b.extend_from_slice(&3u16.to_be_bytes());
        b.extend_from_slice(&[9, 8, 7]);
        assert_eq!(auth_data(&b).unwrap().credential_id, Some(vec![9, 8, 7]));
        b.truncate(b.len() - 1);
        assert!(auth_data(&b).is_err());
        assert!(p256_point(&[0x30, 0x2a]).is_err());
        assert!(counter_moved(0, 0) && counter_moved(4, 5));
        assert!(!counter_moved(5, 5) && !counter_moved(5, 0));
    }
}
