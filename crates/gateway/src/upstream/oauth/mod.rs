//! HTTP upstreams behind OAuth (`[upstreams.NAME.oauth]`): plangate as an
//! OAuth client, through rmcp's own client (`rmcp::transport::auth`):
//! discovery from the upstream's RFC 9728 metadata, dynamic client
//! registration or a configured client, authorization code with PKCE and
//! the RFC 8707 `resource`, and refresh before expiry on every request.
//!
//! Credentials live in the store sealed with the seal key
//! ([`SealedCredentials`]), so every replica uses (and refreshes) the same
//! ones and none is ever in plaintext at rest; `plangate upstream login`
//! ([`begin_login`], [`finish_login`]) puts them there.
//!
//! Apart here: the credentials and the grant kept fresh. How an upstream's
//! refusal at its door is read and said ([`DoorRefusal`]), a
//! client-credentials upstream's tokens ([`MachineTokens`]) and a person's
//! sign-in ([`begin_login`]) each have a file of their own.

use std::sync::Arc;

use plangate_config::{UpstreamConfig, UpstreamOAuth};
use plangate_store::{KeyMaterial, Store};
use rmcp::transport::auth::{
    AuthError, AuthorizationManager, CredentialRefreshGuard, CredentialStore, OAuthClientConfig,
    StoredCredentials,
};

use super::UpstreamError;

mod door;
mod login;
mod machine;
pub use door::{DoorRefusal, door_refusal, door_refusal_at_start, scope_tokens};
pub use login::{Login, begin_login, finish_login};
pub use machine::MachineTokens;

/// Where upstreams' OAuth credentials are kept: the store, sealed.
#[derive(Clone)]
pub struct Vault {
    /// The store (SQLite or PostgreSQL) holding them.
    pub store: Arc<dyn Store>,
    /// The seal key that seals them.
    pub material: KeyMaterial,
}

/// One upstream's credentials in the vault, as rmcp's credential store.
/// Sealed with the upstream's name bound in, so one upstream's sealed value
/// copied to another's row does not open.
pub struct SealedCredentials {
    vault: Vault,
    name: String,
    /// One refresh at a time in this process.
    refreshing: Arc<tokio::sync::Mutex<()>>,
}

impl SealedCredentials {
    /// Upstream `name`'s credentials in `vault`.
    pub fn new(vault: Vault, name: &str) -> Self {
        SealedCredentials {
            vault,
            name: name.to_owned(),
            refreshing: Arc::default(),
        }
    }

    fn associated_data(&self) -> Vec<u8> {
        format!("plangate upstream credentials\n{}", self.name).into_bytes()
    }
}

fn store_error(e: impl std::fmt::Display) -> AuthError {
    AuthError::CredentialStoreError(e.to_string())
}

#[async_trait::async_trait]
impl CredentialStore for SealedCredentials {
    async fn load(&self) -> Result<Option<StoredCredentials>, AuthError> {
        let Some(sealed) = self
            .vault
            .store
            .upstream_credentials(&self.name)
            .await
            .map_err(store_error)?
        else {
            return Ok(None);
        };
        let plain =
            plangate_store::seal::unseal(&self.vault.material, &sealed, &self.associated_data())
                .map_err(store_error)?;
        serde_json::from_slice(&plain)
            .map(Some)
            .map_err(store_error)
    }

    async fn save(&self, credentials: StoredCredentials) -> Result<(), AuthError> {
        let plain = serde_json::to_vec(&credentials).map_err(store_error)?;
        let sealed =
            plangate_store::seal::seal(&self.vault.material, &plain, &self.associated_data())
                .map_err(store_error)?;
        self.vault
            .store
            .save_upstream_credentials(&self.name, &sealed)
            .await
            .map_err(store_error)
    }

    /// Does nothing: rmcp clears credentials bound to an authorization
    /// server the upstream no longer names, but between its read and its
    /// clear a person may have signed in anew (another process, another
    /// replica) and the new sign-in would be lost. Stale credentials are
    /// never used — every connection finds them bound to the old server —
    /// and the next sign-in replaces them; `plangate upstream logout`
    /// removes them.
    async fn clear(&self) -> Result<(), AuthError> {
        Ok(())
    }

    async fn acquire_refresh_guard(&self) -> Result<Option<CredentialRefreshGuard>, AuthError> {
        let guard = self.refreshing.clone().lock_owned().await;
        Ok(Some(CredentialRefreshGuard::new(guard)))
    }
}

/// The redirect URI a configured (pre-registered) client is set up with
/// when only refreshing: no browser comes back to it.
const NO_REDIRECT: &str = "http://127.0.0.1/plangate-refresh-only";

/// The manager that gives `config`'s requests their access token,
/// refreshing it when it is about to expire, with credentials from
/// `vault`. Fails with how to sign in when there are none.
pub(super) async fn manager_for(
    config: &UpstreamConfig,
    url: &str,
    oauth: &UpstreamOAuth,
    vault: Vault,
) -> Result<AuthorizationManager, UpstreamError> {
    let name = &config.name;
    let failed = |reason: String| UpstreamError::Initialize {
        name: name.clone(),
        reason,
    };
    let mut manager = AuthorizationManager::new(url)
        .await
        .map_err(|e| failed(format!("OAuth: {e}")))?;
    manager.set_credential_store(SealedCredentials::new(vault, name));
    let signed_in = manager
        .initialize_from_store()
        .await
        .map_err(|e| failed(format!("OAuth: cannot read its credentials: {e}")))?;
    if !signed_in {
        return Err(failed(format!(
            "it is behind OAuth and plangate has not signed in to it: run `plangate upstream login {name}` with this config and data dir (or database)"
        )));
    }
    if let (Some(id), Some(secret)) = (&oauth.client_id, &oauth.client_secret) {
        manager
            .configure_client(
                OAuthClientConfig::new(id.clone(), NO_REDIRECT).with_client_secret(secret.clone()),
            )
            .map_err(|e| failed(format!("OAuth: {e}")))?;
    }
    // A token now (refreshed if it is about to expire): a grant the
    // authorization server no longer honours is said here, on /readyz,
    // not as the upstream's 401 on the first call.
    match manager.get_access_token().await {
        Ok(_) => Ok(manager),
        Err(e) if refused(&e) => Err(failed(refused_sign_in(name))),
        Err(e) => Err(failed(format!("OAuth: cannot get an access token: {e}"))),
    }
}

/// Whether the authorization server itself said no (a revoked or expired
/// grant, `invalid_grant`; a client it no longer knows, `invalid_client`):
/// only a new sign-in helps. Anything else (the network, a 5xx) may pass.
fn refused(e: &AuthError) -> bool {
    match e {
        AuthError::AuthorizationRequired | AuthError::TokenRefreshRejected(_) => true,
        // rmcp names only invalid_grant as final; an OAuth error answer
        // (as opposed to no answer) is final too.
        AuthError::TokenRefreshFailed(text) => text.contains("Server returned error response"),
        _ => false,
    }
}

/// Why an upstream whose grant was refused is down, and what to do.
fn refused_sign_in(name: &str) -> String {
    format!(
        "its OAuth sign-in no longer works (the authorization server refused to refresh the token: the grant was revoked or expired): run `plangate upstream login {name}` again"
    )
}

/// How often a connected upstream's token is checked (and refreshed when
/// due) between calls.
const WATCH_EVERY: std::time::Duration = std::time::Duration::from_secs(30);

/// Keeps a connected upstream's token fresh between calls, and ends its
/// session (`session`) when the authorization server refuses a refresh:
/// the supervisor then reconnects, and the upstream is down on `/readyz`
/// saying to sign in again, instead of failing call by call.
pub(super) fn watch_grant(
    name: String,
    manager: Arc<tokio::sync::Mutex<AuthorizationManager>>,
    peer: rmcp::Peer<rmcp::RoleClient>,
    session: rmcp::service::RunningServiceCancellationToken,
) {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(WATCH_EVERY).await;
            if peer.is_transport_closed() {
                return;
            }
            let checked = manager.lock().await.get_access_token().await;
            match checked {
                Ok(_) => {}
                Err(e) if refused(&e) => {
                    tracing::warn!(upstream = %name, "{}: {e}", refused_sign_in(&name));
                    session.cancel();
                    return;
                }
                Err(e) => tracing::warn!(upstream = %name, "cannot refresh its OAuth token: {e}"),
            }
        }
    });
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// Sealed with the upstream's name bound in: what upstream `a` holds
    /// cannot be made to open as upstream `b`'s, and nothing is stored in
    /// the clear.
    #[tokio::test]
    async fn credentials_are_sealed_and_bound_to_their_upstream() {
        let dir = tempfile::tempdir().unwrap();
        let store = plangate_store::open_sqlite(&dir.path().join("p.db"))
            .await
            .unwrap();
        let vault = Vault {
            store: store.clone(),
            material: KeyMaterial::new([7; 32], [8; 32], [6; 32]).expect("keys"),
        };
        let a = SealedCredentials::new(vault.clone(), "a");
        let b = SealedCredentials::new(vault, "b");
        let creds = StoredCredentials::new(
            "client-secret-id-42".to_owned(),
            None,
            vec!["s".to_owned()],
            Some(1),
        );
        a.save(creds).await.unwrap();
        let sealed = store.upstream_credentials("a").await.unwrap().unwrap();
        assert!(!sealed.contains("client-secret-id-42"));
        assert_eq!(
            a.load().await.unwrap().unwrap().client_id,
            "client-secret-id-42"
        );
        store.save_upstream_credentials("b", &sealed).await.unwrap();
        assert!(
            b.load().await.is_err(),
            "a's sealed value must not open as b's"
        );
        // rmcp's clear keeps them (see `clear`); logout removes them.
        a.clear().await.unwrap();
        assert!(a.load().await.unwrap().is_some());
        store.clear_upstream_credentials("a").await.unwrap();
        assert!(a.load().await.unwrap().is_none());
    }
}
