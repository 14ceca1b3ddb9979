//! Passkeys in the console (docs/design.md §12): the page a one-time link
//! (`plangate operator enroll --name NAME --passkey`) opens to register
//! one, and the challenge an act is proved with. The rules are
//! [`crate::operator::factor::passkey`]'s.
//!
//! Registration needs no session: the link's secret is the credential,
//! once, for 15 minutes — it comes in the URL's fragment, which no browser
//! sends to a server or a log. Its requests pass the same host and origin
//! checks as every `POST` of the console. A challenge for an act needs a
//! live session (it is asked for right before the act) and binds the act,
//! the plan digest and revision on screen, and a nonce taken once.

use std::sync::{Arc, LazyLock};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use plangate_core::{AccessCode, Code};
use serde::Deserialize;
use serde_json::json;

use super::api::{key_by_id, seen_text};
use super::{Acting, Body, ConsoleError, Place, allowed_host, csp_for, html, ok_json, same_origin};
use crate::Gateway;
use crate::operator::factor::passkey;
use crate::operator::factor::{Act, FactorError};

/// The registration page, byte for byte.
pub const PASSKEY_HTML: &str = include_str!("passkey.html");
static PASSKEY_CSP: LazyLock<String> = LazyLock::new(|| csp_for(PASSKEY_HTML));

/// `GET /console/passkey`: the registration page (the link's secret is in
/// its fragment, read by the page).
pub(super) async fn page(State(gw): State<Arc<Gateway>>, headers: HeaderMap) -> Response {
    if !crate::hosts::host_allowed(&gw, &headers) {
        return html(
            StatusCode::FORBIDDEN,
            "This Host is not in allowed_hosts.".to_owned(),
            "default-src 'none'",
        );
    }
    html(StatusCode::OK, PASSKEY_HTML.to_owned(), &PASSKEY_CSP)
}

/// The door of a registration request: an allowed host, the console's own
/// page.
fn door(gw: &Gateway, headers: &HeaderMap) -> Result<Place, ConsoleError> {
    allowed_host(gw, headers)?;
    if !same_origin(headers) {
        return Err(ConsoleError::access(
            AccessCode::CrossSiteRequest,
            "refused: this request did not come from the console's own page; nothing was recorded",
        ));
    }
    Ok(Place::of(headers))
}

fn refused(e: FactorError) -> ConsoleError {
    if let FactorError::Log(inner) = &e {
        tracing::error!("console: operators log: {inner}");
    }
    ConsoleError::refusal(e.code(), e.to_string())
}

/// `POST /console/api/passkey/options` and `…/register` bodies.
#[derive(Deserialize)]
pub(super) struct Invite {
    invite: String,
    #[serde(flatten)]
    fields: Option<passkey::RegistrationFields>,
}

/// What `navigator.credentials.create` needs for the link: the relying
/// party (this host), the operator and a challenge bound to the link.
pub(super) async fn options(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    Body(body): Body<Invite>,
) -> Result<Response, ConsoleError> {
    let place = door(&gw, &headers)?;
    let (operator, user, challenge) =
        passkey::registration_options(gw.operators(), gw.material(), &body.invite)
            .await
            .map_err(refused)?;
    Ok(ok_json(json!({
        "operator": operator,
        "user_id": user,
        "challenge": challenge,
        "rp_id": place.rp_id,
    })))
}

/// Registers the passkey the page made for the link.
pub(super) async fn register(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    Body(body): Body<Invite>,
) -> Result<Response, ConsoleError> {
    let place = door(&gw, &headers)?;
    let Some(fields) = &body.fields else {
        return Err(ConsoleError::refusal(
            Code::InvalidArguments,
            "the passkey's credential_id, client_data_json, authenticator_data and public_key are missing",
        ));
    };
    let operator = passkey::register(
        gw.operators(),
        gw.material(),
        &body.invite,
        fields,
        place.party(),
    )
    .await
    .map_err(refused)?;
    tracing::info!(%operator, "console: passkey registered");
    Ok(ok_json(json!({"success": true, "operator": operator})))
}

/// `POST /console/api/passkey/challenge` body: the act the person is about
/// to prove, and what they see of the plan.
#[derive(Deserialize)]
pub(super) struct ActRef {
    act: String,
    #[serde(default)]
    key_id: Option<String>,
    #[serde(default)]
    plan_digest: Option<String>,
    #[serde(default)]
    revision: Option<u64>,
    #[serde(default)]
    step_id: Option<String>,
    #[serde(default)]
    server: Option<String>,
    #[serde(default)]
    tool: Option<String>,
}

/// A challenge for one act — approve, apply or retry a key's plan, or
/// accept a held tool — bound to it and to the plan on screen.
pub(super) async fn challenge(
    State(gw): State<Arc<Gateway>>,
    Acting(session): Acting,
    Body(body): Body<ActRef>,
) -> Result<Response, ConsoleError> {
    let key = match &body.key_id {
        Some(id) => Some(key_by_id(&gw, id).await?),
        None => None,
    };
    let name = key.as_ref().map(|k| k.name.as_str()).unwrap_or_default();
    let digest = body.plan_digest.as_deref().unwrap_or_default();
    let step = body.step_id.as_deref().unwrap_or_default();
    let (act, seen) = match body.act.as_str() {
        "approve" => (Act::Approve { key: name }, seen_text(digest, body.revision)),
        "apply" => (Act::Apply { key: name }, seen_text(digest, body.revision)),
        "retry" => (Act::Retry { key: name, step }, String::new()),
        "accept_tool" => (
            Act::AcceptTool {
                server: body.server.as_deref().unwrap_or_default(),
                tool: body.tool.as_deref().unwrap_or_default(),
            },
            String::new(),
        ),
        other => {
            return Err(ConsoleError::refusal(
                Code::InvalidArguments,
                format!(
                    "{other:?} is not an act a passkey proves here (approve, apply, retry, accept_tool)"
                ),
            ));
        }
    };
    let (challenge, allow) = passkey::act_challenge(gw.operators(), gw.material(), &act, &seen)
        .await
        .map_err(refused)?;
    if allow.is_empty() {
        return Err(ConsoleError::refusal(
            Code::FactorRequired,
            "no passkey is registered: `plangate operator enroll --name NAME --passkey` prints a link to register one, or type a code",
        ));
    }
    Ok(ok_json(json!({
        "challenge": challenge,
        "rp_id": session.place.rp_id,
        "allow": allow,
    })))
}
