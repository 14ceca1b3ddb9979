//! Who may say yes, through the operator API (`plangate approvals …` and
//! `plangate operator …` with `--server`): a person reaches the service's
//! operators' log and its operator tokens without its data dir, by the
//! same operations as at it ([`operator::factor`], the store's tokens).
//! Lowering what a yes needs, enrolling or removing an operator and
//! issuing a token widen what runs: each needs the person's factor when
//! the store requires one.

use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;
use plangate_core::factor::Requirement;
use plangate_core::operators::OPERATORS_LOG;
use plangate_core::{Channel, Code};
use plangate_store::{OperatorToken, StoreError};
use serde::{Deserialize, Serialize};

use super::api::{FactorFields, confirm, log_down};
use super::{Acting, Body, ConsoleError, Viewer, ok_typed};
use crate::Gateway;
use crate::operator::OperatorError;
use crate::operator::factor::{self, Act, FactorError, Proof, passkey};

/// `GET /console/api/approvals`: what a yes needs and who is enrolled
/// ([`factor::view::ApprovalsView`], as `plangate approvals show` prints).
pub(super) async fn show(
    State(gw): State<Arc<Gateway>>,
    Viewer(_): Viewer,
) -> Result<Response, ConsoleError> {
    let state = gw
        .operators()
        .state(OPERATORS_LOG)
        .await
        .map_err(log_down)?;
    Ok(ok_typed(&factor::view::approvals_view(&state)))
}

/// `POST /console/api/approvals` body.
#[derive(Deserialize)]
pub(super) struct RequireBody {
    require: Requirement,
    #[serde(flatten)]
    factor: FactorFields,
}

/// The factor a person sent, as a proof for the operators' own acts (a
/// code: a passkey answers only the console's page, whose challenge binds
/// the plan it shows).
fn proof(given: &FactorFields) -> Proof<'_> {
    Proof {
        operator: given.operator.as_deref(),
        code: given.code.as_deref(),
        passkey: None,
    }
}

fn refused(e: FactorError) -> ConsoleError {
    ConsoleError::from(OperatorError::Factor(e))
}

/// Records what every yes needs ([`factor::require`]): raising needs
/// nothing, lowering a factor that meets the old requirement.
pub(super) async fn require(
    State(gw): State<Arc<Gateway>>,
    Acting(session): Acting,
    Body(body): Body<RequireBody>,
) -> Result<Response, ConsoleError> {
    let answer = factor::require(
        gw.operators(),
        gw.material(),
        body.require,
        proof(&body.factor),
        (Channel::Console, Some(&session.operator.name)),
    )
    .await
    .map_err(refused)?;
    tracing::info!(operator = %session.operator.name, require = %answer.require, "console: approvals requirement set");
    Ok(ok_typed(&answer))
}

/// `POST /console/api/operators/enroll` body.
#[derive(Deserialize)]
pub(super) struct EnrollBody {
    name: String,
    factor_kind: EnrollKind,
    #[serde(flatten)]
    factor: FactorFields,
}

/// The factor being enrolled.
#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "lowercase")]
pub(super) enum EnrollKind {
    Totp,
    Passkey,
}

/// A passkey link's secret, for the CLI to put in the page's address.
#[derive(Serialize)]
struct Invite {
    operator: String,
    invite: String,
}

/// Enrolls an operator: a TOTP secret and recovery codes (answered once,
/// [`factor::Enrolment`]), or a one-time secret for the passkey page.
pub(super) async fn enroll(
    State(gw): State<Arc<Gateway>>,
    Acting(session): Acting,
    Body(body): Body<EnrollBody>,
) -> Result<Response, ConsoleError> {
    let given = proof(&body.factor);
    let (log, material) = (gw.operators(), gw.material());
    let enrolling = |name, proof| factor::Enrolling {
        name,
        proof,
        channel: Channel::Console,
    };
    let answer = match body.factor_kind {
        EnrollKind::Totp => {
            let made = factor::enroll(log, material, enrolling(&body.name, given))
                .await
                .map_err(refused)?;
            ok_typed(&made)
        }
        EnrollKind::Passkey => {
            let secret = passkey::invite(log, material, enrolling(&body.name, given))
                .await
                .map_err(refused)?;
            ok_typed(&Invite {
                operator: body.name.clone(),
                invite: secret,
            })
        }
    };
    tracing::info!(operator = %session.operator.name, enrolled = %body.name, "console: operator enrolled");
    Ok(answer)
}

/// `POST /console/api/operators/remove` and `…/token` body.
#[derive(Deserialize)]
pub(super) struct NameBody {
    name: String,
    #[serde(flatten)]
    factor: FactorFields,
}

/// Removes an enrolled operator and their factors ([`factor::remove`]).
pub(super) async fn remove(
    State(gw): State<Arc<Gateway>>,
    Acting(session): Acting,
    Body(body): Body<NameBody>,
) -> Result<Response, ConsoleError> {
    factor::remove(
        gw.operators(),
        gw.material(),
        &body.name,
        proof(&body.factor),
        (Channel::Console, Some(&session.operator.name)),
    )
    .await
    .map_err(refused)?;
    tracing::info!(operator = %session.operator.name, removed = %body.name, "console: operator removed");
    Ok(ok_typed(&serde_json::json!({ "removed": body.name })))
}

/// An operator token just made: the record and the token, shown once.
#[derive(Serialize)]
struct TokenMade {
    operator: OperatorToken,
    token: String,
}

/// Issues an operator token ([`Act::IssueOperatorToken`]).
pub(super) async fn token(
    State(gw): State<Arc<Gateway>>,
    Acting(session): Acting,
    Body(body): Body<NameBody>,
) -> Result<Response, ConsoleError> {
    let act = Act::IssueOperatorToken { name: &body.name };
    confirm(&gw, (&act, ""), &body.factor, &session).await?;
    let made = gw
        .store()
        .create_operator_token(&body.name)
        .await
        .map_err(token_refused)?;
    tracing::info!(operator = %session.operator.name, token = %made.operator.name, "console: operator token issued");
    Ok(ok_typed(&TokenMade {
        operator: made.operator,
        token: made.token,
    }))
}

/// `GET /console/api/operators`: every operator token (never a token).
pub(super) async fn list(
    State(gw): State<Arc<Gateway>>,
    Viewer(_): Viewer,
) -> Result<Response, ConsoleError> {
    let tokens = gw.store().list_operator_tokens().await.map_err(log_down)?;
    Ok(ok_typed(&tokens))
}

/// `POST /console/api/operators/revoke` body.
#[derive(Deserialize)]
pub(super) struct RevokeBody {
    operator: String,
}

/// Revokes an operator token: its sessions end at their next request, on
/// every replica — this one's too, when it revokes itself. Narrowing who
/// may act needs no factor.
pub(super) async fn revoke(
    State(gw): State<Arc<Gateway>>,
    Acting(session): Acting,
    Body(body): Body<RevokeBody>,
) -> Result<Response, ConsoleError> {
    let revoked = gw
        .store()
        .revoke_operator_token(&body.operator)
        .await
        .map_err(token_refused)?;
    tracing::info!(operator = %session.operator.name, revoked = %revoked.name, "console: operator token revoked");
    Ok(ok_typed(&revoked))
}

/// A token the store would not make or revoke: the person's mistake, or
/// the store down.
fn token_refused(e: StoreError) -> ConsoleError {
    match e {
        e @ (StoreError::OperatorNameTaken(_)
        | StoreError::InvalidOperatorName(_)
        | StoreError::OperatorNotFound(_)) => {
            ConsoleError::refusal(Code::InvalidArguments, e.to_string())
        }
        e => log_down(e),
    }
}
