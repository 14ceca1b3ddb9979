//! Passkeys as a factor (docs/design.md §12): a one-time link registers
//! one for an operator in the console, and an act the store requires a
//! factor for is then proved by an assertion whose challenge binds the
//! act, the plan digest and revision the person saw, and a nonce taken
//! once. The checks of what the browser sent are
//! [`plangate_core::passkey`]'s; the signature is checked with
//! [`plangate_store::verify_p256`]; this module keeps the operators log.

use base64::Engine as _;
use plangate_core::operators::{OPERATORS_LOG, Operators};
use plangate_core::passkey::{self, Assertion, CHALLENGE_MS, INVITE_MS, Party, Passkey};
use plangate_core::{Actor, Channel, Event, EventKind};
use plangate_store::{KeyMaterial, now_ms};
use sha2::{Digest, Sha256};

use super::{Act, Enrolling, FactorError, OperatorsLog};

/// What the browser answered `navigator.credentials.get` with, each field
/// base64url as the page sends it.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct AssertionFields {
    /// The credential's id.
    pub credential_id: String,
    /// The client data JSON.
    pub client_data_json: String,
    /// The authenticator data.
    pub authenticator_data: String,
    /// The DER signature.
    pub signature: String,
}

/// A passkey's answer for one act, and where the ceremony happened.
#[derive(Debug, Clone, Copy)]
pub struct PasskeyProof<'a> {
    /// What the browser sent.
    pub fields: &'a AssertionFields,
    /// The console's relying party and origin.
    pub party: Party<'a>,
    /// What the person saw beyond the act (the plan digest and revision),
    /// as the challenge bound it.
    pub seen: &'a str,
}

/// The purpose a challenge for an act is made for.
const FOR_ACT: &str = "act";
/// The purpose a challenge for a registration is made for.
const FOR_REGISTRATION: &str = "register";

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

fn unb64(text: &str, what: &str) -> Result<Vec<u8>, String> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(text.trim_end_matches('='))
        .map_err(|_| format!("the {what} is not base64url"))
}

/// The client data JSON the browser sent (base64url), the challenge it
/// answers as sent (base64url) and that challenge's text.
fn client_data(b64_json: &str) -> Result<(String, String, String), String> {
    let text = |b: Vec<u8>| String::from_utf8(b).ok();
    let json = unb64(b64_json, "client data")
        .ok()
        .and_then(text)
        .ok_or("the client data is not text")?;
    let challenge = serde_json::from_str::<serde_json::Value>(&json)
        .ok()
        .and_then(|v| v["challenge"].as_str().map(str::to_owned))
        .ok_or("the client data names no challenge")?;
    let challenge_text = unb64(&challenge, "challenge")
        .ok()
        .and_then(text)
        .ok_or("the challenge is not one plangate issued")?;
    Ok((json, challenge, challenge_text))
}

/// What a challenge for `act` binds: the act in words and what was seen.
fn bound(act: &Act<'_>, seen: &str) -> String {
    format!("{} {seen}", act.describe())
}

/// A challenge for proving `act` (with what the person `seen`), base64url
/// as `navigator.credentials.get` takes it, and the credentials that may
/// answer it (base64url).
pub async fn act_challenge(
    log: &OperatorsLog,
    material: &KeyMaterial,
    act: &Act<'_>,
    seen: &str,
) -> Result<(String, Vec<String>), FactorError> {
    let state = log.state(OPERATORS_LOG).await?;
    let nonce = hex::encode(random::<16>()?);
    let text = passkey::challenge(
        material.signing_key(),
        FOR_ACT,
        &bound(act, seen),
        &nonce,
        now_ms() + CHALLENGE_MS,
    );
    let allow = state
        .enrolled
        .values()
        .flat_map(|e| &e.passkeys)
        .filter_map(|p| hex::decode(&p.credential_id).ok())
        .map(|id| b64(&id))
        .collect();
    Ok((b64(text.as_bytes()), allow))
}

/// Checks a passkey's answer for `act` against `state` and the operator
/// who owns the credential: the challenge plangate issued for this act and
/// what was seen, unexpired and not answered before; the ceremony (type,
/// origin, relying party, presence and verification); the signature by
/// the registered key; a counter that moved. The event that records it
/// (`factor_used` with the assertion and nonce), or why not.
pub(super) fn check(
    state: &Operators,
    material: &KeyMaterial,
    act: &Act<'_>,
    proof: &PasskeyProof<'_>,
    now: i64,
) -> Result<(String, EventKind), (Option<String>, String)> {
    let f = proof.fields;
    let id = unb64(&f.credential_id, "credential id").map_err(|e| (None, e))?;
    let id_hex = hex::encode(&id);
    let Some((operator, key)) = state.enrolled.iter().find_map(|(name, e)| {
        e.passkeys
            .iter()
            .find(|p| p.credential_id == id_hex)
            .map(|p| (name.clone(), p))
    }) else {
        return Err((
            None,
            "that passkey is not registered with plangate".to_owned(),
        ));
    };
    let fail = |why: String| (Some(operator.clone()), why);
    let (client_json, challenge_b64, challenge_text) =
        client_data(&f.client_data_json).map_err(fail)?;
    let auth_bytes = unb64(&f.authenticator_data, "authenticator data").map_err(fail)?;
    let signature = unb64(&f.signature, "signature").map_err(fail)?;
    let nonce = passkey::check_challenge(
        material.signing_key(),
        &challenge_text,
        FOR_ACT,
        &bound(act, proof.seen),
        now,
    )
    .map_err(|e| fail(e.0))?;
    if state.nonces.contains_key(&nonce) {
        return Err(fail("that challenge was answered already".to_owned()));
    }
    let auth = passkey::auth_data(&auth_bytes).map_err(|e| fail(e.0))?;
    passkey::check_ceremony(
        &client_json,
        "webauthn.get",
        &challenge_b64,
        proof.party,
        &auth,
    )
    .map_err(|e| fail(e.0))?;
    let point = hex::decode(&key.public_key).unwrap_or_default();
    let signed = passkey::signed_bytes(&auth_bytes, &client_json);
    if !plangate_store::verify_p256(&point, &signed, &signature) {
        return Err(fail(
            "the signature is not the registered passkey's".to_owned(),
        ));
    }
    if !passkey::counter_moved(key.sign_count, auth.sign_count) {
        return Err(fail(
            "the passkey's counter went back (a copied authenticator?)".to_owned(),
        ));
    }
    Ok((
        operator.clone(),
        EventKind::FactorUsed {
            operator,
            factor: plangate_core::factor::FactorKind::Passkey,
            step: None,
            recovery: None,
            act: bound(act, proof.seen).trim_end().to_owned(),
            passkey: Some(Assertion {
                credential_id: id_hex,
                client_data_json: client_json,
                authenticator_data: hex::encode(&auth_bytes),
                signature: hex::encode(&signature),
            }),
            nonce: Some(nonce),
        },
    ))
}

/// A one-time link's secret to register a passkey for an operator (a new
/// one, or one enrolled already). The link lasts [`INVITE_MS`]; only its
/// SHA-256 is kept.
pub async fn invite(
    log: &OperatorsLog,
    material: &KeyMaterial,
    who: Enrolling<'_>,
) -> Result<String, FactorError> {
    let confirmed = who.confirm(log, material).await?;
    let (name, channel) = (who.name, who.channel);
    let secret = b64(&random::<24>()?);
    let event = Event {
        at_ms: now_ms(),
        key_id: OPERATORS_LOG.to_owned(),
        actor: Actor::Operator {
            name: confirmed.operator().unwrap_or(name).to_owned(),
        },
        channel,
        kind: EventKind::PasskeyInvited {
            operator: name.to_owned(),
            invite_sha256: invite_hash(&secret),
            expires_at_ms: now_ms() + INVITE_MS,
        },
    };
    append(log, event).await?;
    Ok(secret)
}

fn invite_hash(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// The operator an open link is for, or why it does not work.
fn invited(state: &Operators, secret: &str, now: i64) -> Result<String, FactorError> {
    match state.invites.get(&invite_hash(secret)) {
        Some((operator, until)) if *until > now => Ok(operator.clone()),
        _ => Err(FactorError::Refused {
            operator: String::new(),
            reason: "this registration link is unknown, used or expired; ask for a new one (`plangate operator enroll --name NAME --passkey`)".to_owned(),
        }),
    }
}

/// What `navigator.credentials.create` needs for the link `secret`: the
/// operator, a user handle and a challenge bound to the link (base64url).
pub async fn registration_options(
    log: &OperatorsLog,
    material: &KeyMaterial,
    secret: &str,
) -> Result<(String, String, String), FactorError> {
    let state = log.state(OPERATORS_LOG).await?;
    let now = now_ms();
    let operator = invited(&state, secret, now)?;
    let nonce = hex::encode(random::<16>()?);
    let text = passkey::challenge(
        material.signing_key(),
        FOR_REGISTRATION,
        &invite_hash(secret),
        &nonce,
        now + CHALLENGE_MS,
    );
    let user = b64(&Sha256::digest(format!("plangate operator\0{operator}").as_bytes())[..16]);
    Ok((operator, user, b64(text.as_bytes())))
}

/// What the browser answered `navigator.credentials.create` with,
/// base64url each.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct RegistrationFields {
    /// The credential's id.
    pub credential_id: String,
    /// The client data JSON.
    pub client_data_json: String,
    /// `response.getAuthenticatorData()`.
    pub authenticator_data: String,
    /// `response.getPublicKey()` (SPKI).
    pub public_key: String,
}

/// Registers the passkey the link `secret` was answered with: the
/// challenge bound to the link, the ceremony (`webauthn.create`, origin,
/// relying party, presence and verification), the credential id the
/// authenticator data names, a P-256 key. Records `passkey_added`; the link
/// then works no more. Returns the operator.
pub async fn register(
    log: &OperatorsLog,
    material: &KeyMaterial,
    secret: &str,
    fields: &RegistrationFields,
    party: Party<'_>,
) -> Result<String, FactorError> {
    let state = log.state(OPERATORS_LOG).await?;
    let now = now_ms();
    let operator = invited(&state, secret, now)?;
    let fail = |reason: String| FactorError::Refused {
        operator: operator.clone(),
        reason,
    };
    let (client_json, challenge_b64, challenge_text) =
        client_data(&fields.client_data_json).map_err(fail)?;
    passkey::check_challenge(
        material.signing_key(),
        &challenge_text,
        FOR_REGISTRATION,
        &invite_hash(secret),
        now,
    )
    .map_err(|e| fail(e.0))?;
    let auth_bytes = unb64(&fields.authenticator_data, "authenticator data").map_err(fail)?;
    let auth = passkey::auth_data(&auth_bytes).map_err(|e| fail(e.0))?;
    passkey::check_ceremony(
        &client_json,
        "webauthn.create",
        &challenge_b64,
        party,
        &auth,
    )
    .map_err(|e| fail(e.0))?;
    let id = unb64(&fields.credential_id, "credential id").map_err(fail)?;
    if auth.credential_id.as_deref() != Some(&id[..]) {
        return Err(fail(
            "the authenticator data names another credential".to_owned(),
        ));
    }
    let spki = unb64(&fields.public_key, "public key").map_err(fail)?;
    let point = passkey::p256_point(&spki).map_err(|e| fail(e.0))?;
    let event = Event {
        at_ms: now,
        key_id: OPERATORS_LOG.to_owned(),
        actor: Actor::Operator {
            name: operator.clone(),
        },
        channel: Channel::Console,
        kind: EventKind::PasskeyAdded {
            operator: operator.clone(),
            invite_sha256: invite_hash(secret),
            passkey: Passkey {
                credential_id: hex::encode(&id),
                public_key: hex::encode(point),
                sign_count: auth.sign_count,
            },
        },
    };
    append(log, event).await?;
    Ok(operator)
}

/// Appends one event to the operators log.
async fn append(log: &OperatorsLog, event: Event) -> Result<(), FactorError> {
    log.transact(OPERATORS_LOG, |_| {
        Ok::<_, std::convert::Infallible>((vec![event.clone()], ()))
    })
    .await?
    .unwrap_or_else(|never| match never {});
    Ok(())
}

/// Random bytes from the OS generator.
fn random<const N: usize>() -> Result<[u8; N], FactorError> {
    plangate_store::random_bytes().map_err(|e| FactorError::Random(e.to_string()))
}
