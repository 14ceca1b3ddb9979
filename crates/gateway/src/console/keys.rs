//! The keys through the operator API (`plangate keys list|revoke
//! --server`): a person lists and revokes agents' keys without the data
//! dir, as `plangate keys` does at it. Creating one is
//! [`super::api::create_key`] (a `write` key needs the factor).

use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;
use plangate_core::Code;
use plangate_store::StoreError;
use serde::Deserialize;

use super::api::log_down;
use super::{Acting, Body, ConsoleError, Viewer, ok_typed};
use crate::Gateway;

/// `GET /console/api/keys`: every key (never a token).
pub(super) async fn list(
    State(gw): State<Arc<Gateway>>,
    Viewer(_): Viewer,
) -> Result<Response, ConsoleError> {
    let keys = gw.store().list_keys().await.map_err(log_down)?;
    Ok(ok_typed(&keys))
}

/// `POST /console/api/keys/revoke` body.
#[derive(Deserialize)]
pub(super) struct Revoke {
    key: String,
}

/// Revokes a key by name or id: its next request is refused, on every
/// replica. Narrowing what runs needs no factor.
pub(super) async fn revoke(
    State(gw): State<Arc<Gateway>>,
    Acting(session): Acting,
    Body(body): Body<Revoke>,
) -> Result<Response, ConsoleError> {
    let revoked = gw
        .store()
        .revoke_key(&body.key)
        .await
        .map_err(|e| match e {
            e @ (StoreError::KeyNotFound(_) | StoreError::InvalidKeyName(_)) => {
                ConsoleError::refusal(Code::InvalidArguments, e.to_string())
            }
            e => log_down(e),
        })?;
    tracing::info!(operator = %session.operator.name, key = %revoked.name, "console: key revoked");
    Ok(ok_typed(&revoked))
}
