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

use std::sync::Arc;

use plangate_config::{UpstreamConfig, UpstreamOAuth};
use plangate_store::{KeyMaterial, Store};
use rmcp::transport::auth::{
    AuthError, AuthorizationManager, ClientCredentialsConfig, CredentialRefreshGuard,
    CredentialStore, OAuthClientConfig, StoredCredentials,
};

use super::UpstreamError;

/// Where upstreams' OAuth credentials are kept: the store, sealed.
#[derive(Clone)]
pub struct Vault {
    /// The store (SQLite or PostgreSQL) holding them.
    pub store: Arc<dyn Store>,
    /// The seal key that seals them.
    pub material: KeyMaterial,
}

/// The name a dynamically registered client gives itself.
const CLIENT_NAME: &str = "plangate";

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

    async fn clear(&self) -> Result<(), AuthError> {
        self.vault
            .store
            .clear_upstream_credentials(&self.name)
            .await
            .map_err(store_error)
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

/// The tokens of a `client_credentials` upstream (a machine client): asked
/// for at the authorization server when needed, kept in memory only, and
/// asked for again shortly before one expires. Nothing is stored.
pub struct MachineTokens {
    name: String,
    manager: AuthorizationManager,
    client: ClientCredentialsConfig,
    current: tokio::sync::Mutex<Option<(String, std::time::Instant)>>,
}

/// How long before its expiry a machine token is replaced.
const RENEW_BEFORE: std::time::Duration = std::time::Duration::from_secs(30);

/// A machine token's life when the authorization server does not say.
const DEFAULT_LIFE: std::time::Duration = std::time::Duration::from_secs(300);

impl MachineTokens {
    /// Finds `url`'s authorization server (from its challenge) and gets a
    /// first token, so a wrong secret is said at connection.
    pub(super) async fn new(
        config: &UpstreamConfig,
        url: &str,
        oauth: &UpstreamOAuth,
    ) -> Result<MachineTokens, UpstreamError> {
        let name = config.name.clone();
        let failed = |reason: String| UpstreamError::Initialize {
            name: name.clone(),
            reason: format!("OAuth (client_credentials): {reason}"),
        };
        let (Some(client_id), Some(client_secret)) = (&oauth.client_id, &oauth.client_secret)
        else {
            return Err(failed("needs client_id and client_secret".to_owned()));
        };
        let mut manager = AuthorizationManager::new(url)
            .await
            .map_err(|e| failed(e.to_string()))?;
        let challenge = challenge_of(url)
            .await
            .map_err(|e| failed(format!("cannot reach it: {e}")))?;
        let found = manager
            .resolve_metadata_from_challenge(challenge.as_deref())
            .await
            .map_err(|e| failed(format!("cannot find its authorization server: {e}")))?;
        manager.set_metadata(found.metadata);
        let scopes = if oauth.scopes.is_empty() {
            manager.select_initial_scopes(&[]).await
        } else {
            oauth.scopes.clone()
        };
        let client = ClientCredentialsConfig::ClientSecret {
            client_id: client_id.clone(),
            client_secret: client_secret.clone(),
            scopes,
            resource: Some(url.to_owned()),
        };
        manager
            .configure_client_credentials(&client)
            .map_err(|e| failed(e.to_string()))?;
        let tokens = MachineTokens {
            name: name.clone(),
            manager,
            client,
            current: tokio::sync::Mutex::new(None),
        };
        tokens.renew().await.map_err(failed)?;
        Ok(tokens)
    }

    /// The current token, renewed first when it is about to expire; `None`
    /// (after logging why) when the authorization server refuses: the
    /// request then goes without, and the upstream's 401 is the answer.
    pub(super) async fn token(&self) -> Option<String> {
        {
            let current = self.current.lock().await;
            if let Some((token, until)) = &*current
                && std::time::Instant::now() + RENEW_BEFORE < *until
            {
                return Some(token.clone());
            }
        }
        match self.renew().await {
            Ok(token) => Some(token),
            Err(why) => {
                tracing::warn!(upstream = %self.name, "cannot get a client_credentials token: {why}");
                None
            }
        }
    }

    async fn renew(&self) -> Result<String, String> {
        let mut current = self.current.lock().await;
        let response = self
            .manager
            .exchange_client_credentials(&self.client)
            .await
            .map_err(|e| e.to_string())?;
        // Read through its JSON form: the token and its life.
        let body = serde_json::to_value(&response).map_err(|e| e.to_string())?;
        let token = body
            .get("access_token")
            .and_then(serde_json::Value::as_str)
            .ok_or("the token response has no access_token")?
            .to_owned();
        let life = body
            .get("expires_in")
            .and_then(serde_json::Value::as_u64)
            .map_or(DEFAULT_LIFE, std::time::Duration::from_secs);
        *current = Some((token.clone(), std::time::Instant::now() + life));
        Ok(token)
    }
}

/// A sign-in under way: the manager that will exchange the code, and the
/// URL the person opens.
pub struct Login {
    manager: AuthorizationManager,
    /// The authorization URL to open in a browser.
    pub url: String,
}

/// Starts signing in to upstream `config` (an HTTP upstream with
/// `[oauth]`): finds its authorization server, registers a client unless
/// one is configured, and makes the authorization URL (PKCE, `state`,
/// `resource`) that comes back to `redirect_uri`.
pub async fn begin_login(
    config: &UpstreamConfig,
    vault: Vault,
    redirect_uri: &str,
) -> Result<Login, String> {
    let plangate_config::Transport::Http { url, .. } = &config.transport else {
        return Err(format!("upstream {} is not reached by url", config.name));
    };
    let Some(oauth) = &config.oauth else {
        return Err(format!(
            "upstream {} has no [upstreams.{}.oauth] table",
            config.name, config.name
        ));
    };
    let mut manager = AuthorizationManager::new(url.as_str())
        .await
        .map_err(|e| e.to_string())?;
    manager.set_credential_store(SealedCredentials::new(vault, &config.name));
    // The upstream's own 401 challenge names its metadata (which may live
    // anywhere) and the scope it wants; without one, the well-known paths.
    let challenge = challenge_of(url)
        .await
        .map_err(|e| format!("cannot reach it at {url}: {e}"))?;
    let found = manager
        .resolve_metadata_from_challenge(challenge.as_deref())
        .await
        .map_err(|e| format!("cannot find its authorization server: {e}"))?;
    manager.set_metadata(found.metadata);
    let scopes: Vec<String> = if oauth.scopes.is_empty() {
        manager.select_initial_scopes(&[]).await
    } else {
        oauth.scopes.clone()
    };
    let scope_refs: Vec<&str> = scopes.iter().map(String::as_str).collect();
    match &oauth.client_id {
        Some(id) => {
            let mut client =
                OAuthClientConfig::new(id.clone(), redirect_uri).with_scopes(scopes.clone());
            if let Some(secret) = &oauth.client_secret {
                client = client.with_client_secret(secret.clone());
            }
            manager
                .configure_client(client)
                .map_err(|e| e.to_string())?;
        }
        None => {
            manager
                .register_client(CLIENT_NAME, redirect_uri, &scope_refs)
                .await
                .map_err(|e| format!("cannot register plangate as a client there: {e}"))?;
        }
    }
    let url = manager
        .get_authorization_url(&scope_refs)
        .await
        .map_err(|e| e.to_string())?;
    Ok(Login { manager, url })
}

/// The `WWW-Authenticate` header of the upstream's answer to an
/// `initialize` without a token, if it answered 401; `Err` when it could
/// not be reached at all.
async fn challenge_of(url: &str) -> Result<Option<String>, String> {
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(std::time::Duration::from_secs(15))
        .build()
        .map_err(|e| e.to_string())?;
    let response = http
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .body(
            serde_json::json!({
                "jsonrpc": "2.0", "id": 0, "method": "initialize",
                "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                           "clientInfo": {"name": "plangate", "version": env!("CARGO_PKG_VERSION")}}
            })
            .to_string(),
        )
        .send()
        .await
        .map_err(|e| {
            let mut why = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                why = format!("{why}: {s}");
                source = s.source();
            }
            why
        })?;
    if response.status() != reqwest::StatusCode::UNAUTHORIZED {
        return Ok(None);
    }
    Ok(response
        .headers()
        .get(reqwest::header::WWW_AUTHENTICATE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned))
}

/// Finishes a sign-in with what the authorization server sent back to the
/// redirect URI: exchanges the code (checking `state`, and `iss` when
/// sent) and seals the tokens into the vault.
pub async fn finish_login(
    login: &Login,
    code: &str,
    state: &str,
    issuer: Option<&str>,
) -> Result<(), String> {
    login
        .manager
        .exchange_code_for_token_with_issuer(code, state, issuer)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
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
            material: KeyMaterial::new([7; 32], [8; 32]),
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
        a.clear().await.unwrap();
        assert!(a.load().await.unwrap().is_none());
    }
}
