//! The tokens of a `client_credentials` upstream, asked for and renewed in
//! memory. Apart because a machine client has no sign-in and stores
//! nothing, unlike the credentials in [`super::SealedCredentials`].

use plangate_config::{UpstreamConfig, UpstreamOAuth};
use rmcp::transport::auth::{AuthorizationManager, ClientCredentialsConfig};

use super::login::challenge_of;
use crate::upstream::UpstreamError;

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
    pub(in crate::upstream) async fn new(
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
    pub(in crate::upstream) async fn token(&self) -> Option<String> {
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
