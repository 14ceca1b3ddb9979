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

/// How an upstream behind OAuth refused a request at its door (HTTP 401 or
/// 403 before its MCP server read the request), or how plangate could not
/// present a token at all: the request did not run, and what helps is a
/// person's new sign-in, not a retry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DoorRefusal {
    /// 403 `insufficient_scope`: plangate's grant lacks `scopes` (the ones
    /// the upstream's challenge named; empty when it named none).
    Scope {
        /// The scopes the upstream asked for, each a valid scope token.
        scopes: Vec<String>,
    },
    /// 401, or no token could be had (a refused refresh): the grant was
    /// revoked or expired, or the upstream now trusts another
    /// authorization server.
    Token {
        /// The upstream's `error_description`, cut short and printable.
        description: Option<String>,
    },
}

/// Whether `error` (a request to an upstream that failed) is the upstream
/// refusing plangate's OAuth sign-in; `None` for every other failure.
pub fn door_refusal(error: &rmcp::service::ServiceError) -> Option<DoorRefusal> {
    refusal_of(error.auth_challenge(), error.is_authorization_required())
}

/// [`door_refusal`] for a handshake that failed.
pub fn door_refusal_at_start(error: &rmcp::service::ClientInitializeError) -> Option<DoorRefusal> {
    refusal_of(error.auth_challenge(), error.is_authorization_required())
}

fn refusal_of(challenge: Option<&str>, authorization_required: bool) -> Option<DoorRefusal> {
    if let Some(header) = challenge {
        let params = challenge_params(header);
        let param = |name: &str| {
            params
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_str())
        };
        if param("error") == Some("insufficient_scope") {
            return Some(DoorRefusal::Scope {
                scopes: scope_tokens(param("scope").unwrap_or("")),
            });
        }
        return Some(DoorRefusal::Token {
            description: param("error_description").map(printable),
        });
    }
    authorization_required.then_some(DoorRefusal::Token { description: None })
}

/// The auth-params of a `Bearer` challenge (RFC 9110 §11.2: `name=token`
/// or `name="quoted string"`, comma-separated), as written; a malformed
/// rest is ignored.
fn challenge_params(header: &str) -> Vec<(String, String)> {
    let rest = header.trim_start();
    let rest = match rest.split_once(char::is_whitespace) {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("bearer") => rest,
        _ => return Vec::new(),
    };
    let mut params = Vec::new();
    let mut chars = rest.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace() || *c == ',').is_some() {}
        let name: String =
            std::iter::from_fn(|| chars.next_if(|c| *c != '=' && *c != ',' && !c.is_whitespace()))
                .collect();
        if name.is_empty() {
            return params;
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.next_if_eq(&'=').is_none() {
            continue;
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if_eq(&'"').is_some() {
            while let Some(c) = chars.next() {
                match c {
                    '"' => break,
                    '\\' => value.extend(chars.next()),
                    c => value.push(c),
                }
            }
        } else {
            value.extend(std::iter::from_fn(|| {
                chars.next_if(|c| *c != ',' && !c.is_whitespace())
            }));
        }
        params.push((name, value));
    }
}

/// The scope tokens of a space-separated list (RFC 6749 §3.3: printable
/// ASCII without space, `"` or `\`); anything else an upstream sends is
/// dropped, so a scope is safe to print and to put on a command line.
pub fn scope_tokens(list: &str) -> Vec<String> {
    let mut seen = Vec::<String>::new();
    for token in list.split_ascii_whitespace() {
        let valid = token.len() <= 200
            && token
                .bytes()
                .all(|b| matches!(b, 0x21 | 0x23..=0x5B | 0x5D..=0x7E));
        if valid && !seen.iter().any(|s| s == token) {
            seen.push(token.to_owned());
        }
    }
    seen
}

/// An upstream's text made safe to repeat: printable, at most 200 chars.
fn printable(text: &str) -> String {
    text.chars().filter(|c| !c.is_control()).take(200).collect()
}

impl DoorRefusal {
    /// Why upstream `name` could not be connected: its door refused even
    /// a fresh token, so only a person's new sign-in helps. `signs_in`:
    /// whether plangate signs in to it with OAuth (`[upstreams.NAME.oauth]`);
    /// otherwise what it refused are the configured headers.
    pub fn at_start(&self, name: &str, signs_in: bool) -> String {
        let login = format!(
            "plangate upstream login {}",
            plangate_core::shell_word(name)
        );
        match self {
            _ if !signs_in => format!(
                "it refused the credentials plangate sends ({}): check the headers of [upstreams.{name}] (an expired token, say), or, if it signs in with OAuth, add an [upstreams.{name}.oauth] table and run `{login}`",
                self.status()
            ),
            DoorRefusal::Scope { scopes } if scopes.is_empty() => format!(
                "its OAuth sign-in lacks a scope it needs (403 insufficient_scope, naming none): a person runs `{login} --scope SCOPE` with the scope the upstream documents"
            ),
            DoorRefusal::Scope { scopes } => format!(
                "its OAuth sign-in lacks the scope {} (403 insufficient_scope): a person runs `{login} --scope {}`",
                scopes.join(" "),
                plangate_core::shell_word(&scopes.join(" "))
            ),
            DoorRefusal::Token { description } => format!(
                "it refused plangate's OAuth token{} and no fresh token could be had (the sign-in was revoked or expired, or the upstream moved to another authorization server): a person runs `{login}`",
                description
                    .as_deref()
                    .map(|d| format!(" (401: {d})"))
                    .unwrap_or_default()
            ),
        }
    }

    /// The HTTP status and what the upstream said, for a message.
    fn status(&self) -> String {
        match self {
            DoorRefusal::Scope { .. } => "403 insufficient_scope".to_owned(),
            DoorRefusal::Token {
                description: Some(d),
            } => format!("401: {d}"),
            DoorRefusal::Token { description: None } => "401".to_owned(),
        }
    }

    /// What a person reads: what happened at upstream `name`, that nothing
    /// ran, and the command that helps. `signs_in` as for [`Self::at_start`];
    /// `None` when the caller cannot tell (both ways are then said).
    pub fn explain(&self, name: &str, signs_in: Option<bool>) -> String {
        let login = format!(
            "plangate upstream login {}",
            plangate_core::shell_word(name)
        );
        match (self, signs_in) {
            (_, Some(false)) => format!(
                "upstream {name} refused the credentials plangate sends before running the request ({}): check the headers of [upstreams.{name}] (an expired token, say), then call again",
                self.status()
            ),
            (_, None) => format!(
                "upstream {name} refused plangate's credentials before running the request ({}): if it signs in with OAuth ([upstreams.{name}.oauth]) a person runs `{login}{}`; otherwise check the headers of [upstreams.{name}]; then call again",
                self.status(),
                match self {
                    DoorRefusal::Scope { scopes } if !scopes.is_empty() =>
                        format!(" --scope {}", plangate_core::shell_word(&scopes.join(" "))),
                    _ => String::new(),
                }
            ),
            (DoorRefusal::Scope { scopes }, _) if scopes.is_empty() => format!(
                "upstream {name} refused the request before running it: plangate's OAuth sign-in lacks a scope it needs (403 insufficient_scope, naming none). A person signs plangate in again with the scope the upstream documents — `{login} --scope SCOPE` — then call again"
            ),
            (DoorRefusal::Scope { scopes }, _) => {
                let list = scopes.join(" ");
                format!(
                    "upstream {name} refused the request before running it: plangate's OAuth sign-in lacks the scope {list} (403 insufficient_scope). A person signs plangate in again, keeping the scopes granted so far and adding this one — `{login} --scope {}` — then call again",
                    plangate_core::shell_word(&list)
                )
            }
            (DoorRefusal::Token { description }, _) => format!(
                "upstream {name} refused plangate's OAuth token before running the request (401{}): plangate reconnects with a fresh token; if its sign-in no longer works (revoked, expired, or the upstream moved to another authorization server) a person runs `{login}`, then call again",
                description
                    .as_deref()
                    .map(|d| format!(": {d}"))
                    .unwrap_or_default()
            ),
        }
    }
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
    /// The scopes asked for.
    pub scopes: Vec<String>,
    /// How plangate presents itself to the authorization server: a
    /// configured client, its Client ID Metadata Document, or a client
    /// registered just now.
    pub client: String,
}

/// Starts signing in to upstream `config` (an HTTP upstream with
/// `[oauth]`): finds its authorization server, picks the client (a
/// configured one; else plangate's Client ID Metadata Document where the
/// server supports those; else a client registered now, at this server —
/// never one registered at another), and makes the authorization URL
/// (PKCE, `state`, `resource`) that comes back to `redirect_uri`.
///
/// The scopes asked for are the configured ones (else those the upstream's
/// challenge or metadata names), those granted at the last sign-in, and
/// `more` (a step-up the upstream asked for): a new sign-in never drops a
/// scope plangate had (SEP-2350).
pub async fn begin_login(
    config: &UpstreamConfig,
    vault: Vault,
    redirect_uri: &str,
    more: &[String],
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
    let credentials = SealedCredentials::new(vault, &config.name);
    // What the last sign-in was granted (unreadable credentials are
    // replaced by this sign-in anyway).
    let granted = credentials
        .load()
        .await
        .ok()
        .flatten()
        .map(|c| scope_tokens(&c.granted_scopes.join(" ")))
        .unwrap_or_default();
    let mut manager = AuthorizationManager::new(url.as_str())
        .await
        .map_err(|e| e.to_string())?;
    manager.set_credential_store(credentials);
    // The upstream's own 401 challenge names its metadata (which may live
    // anywhere) and the scope it wants; without one, the well-known paths.
    let challenge = challenge_of(url)
        .await
        .map_err(|e| format!("cannot reach it at {url}: {e}"))?;
    let found = manager
        .resolve_metadata_from_challenge(challenge.as_deref())
        .await
        .map_err(|e| format!("cannot find its authorization server: {e}"))?;
    let takes_metadata_documents = found
        .metadata
        .additional_fields
        .get("client_id_metadata_document_supported")
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(false);
    manager.set_metadata(found.metadata);
    let mut scopes: Vec<String> = if oauth.scopes.is_empty() {
        manager.select_initial_scopes(&[]).await
    } else {
        oauth.scopes.clone()
    };
    for scope in granted.iter().chain(more) {
        if !scopes.contains(scope) {
            scopes.push(scope.clone());
        }
    }
    let scope_refs: Vec<&str> = scopes.iter().map(String::as_str).collect();
    let client = match (&oauth.client_id, &oauth.client_metadata_url) {
        (Some(id), _) => {
            let mut client =
                OAuthClientConfig::new(id.clone(), redirect_uri).with_scopes(scopes.clone());
            if let Some(secret) = &oauth.client_secret {
                client = client.with_client_secret(secret.clone());
            }
            manager
                .configure_client(client)
                .map_err(|e| e.to_string())?;
            format!("the configured client {id}")
        }
        (None, Some(document)) if takes_metadata_documents => {
            manager
                .configure_client(
                    OAuthClientConfig::new(document.clone(), redirect_uri)
                        .with_scopes(scopes.clone())
                        .with_application_type("native"),
                )
                .map_err(|e| e.to_string())?;
            format!("its Client ID Metadata Document {document}")
        }
        (None, _) => {
            let registered = manager
                .register_client(CLIENT_NAME, redirect_uri, &scope_refs)
                .await
                .map_err(|e| {
                    format!(
                        "cannot register plangate as a client there (for the scopes {}): {e}",
                        scopes.join(" ")
                    )
                })?;
            format!("a client registered just now ({})", registered.client_id)
        }
    };
    let url = manager
        .get_authorization_url(&scope_refs)
        .await
        .map_err(|e| e.to_string())?;
    Ok(Login {
        manager,
        url,
        scopes,
        client,
    })
}

/// The `WWW-Authenticate` challenge of the upstream's 401 to a request
/// without a token, if it gave one; `Err` when it could not be reached at
/// all. An upstream that lets `initialize` through unauthenticated (and
/// guards only what follows) is asked for its tool list in that session,
/// so the challenge — and the scope it names — is found either way; the
/// session is then ended.
async fn challenge_of(url: &str) -> Result<Option<String>, String> {
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(std::time::Duration::from_secs(15))
        .build()
        .map_err(|e| e.to_string())?;
    let post = |body: serde_json::Value, session: Option<&str>, version: Option<&str>| {
        let mut request = http
            .post(url)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .body(body.to_string());
        if let Some(session) = session {
            request = request.header("mcp-session-id", session);
        }
        if let Some(version) = version {
            request = request.header("mcp-protocol-version", version);
        }
        request.send()
    };
    let challenge = |response: &reqwest::Response| {
        (response.status() == reqwest::StatusCode::UNAUTHORIZED).then(|| {
            response
                .headers()
                .get(reqwest::header::WWW_AUTHENTICATE)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        })
    };
    const VERSION: &str = "2025-11-25";
    let response = post(
        serde_json::json!({
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": VERSION, "capabilities": {},
                       "clientInfo": {"name": "plangate", "version": env!("CARGO_PKG_VERSION")}}
        }),
        None,
        None,
    )
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
    if let Some(found) = challenge(&response) {
        return Ok(found);
    }
    if !response.status().is_success() {
        // A server of 2026-07-28 only (no `initialize`): its stateless
        // requests, `server/discover` then a tool list.
        drop(response);
        for method in ["server/discover", "tools/list"] {
            let request =
                serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": {}});
            match post(request, None, Some("2026-07-28")).await {
                Ok(response) => {
                    if let Some(found) = challenge(&response) {
                        return Ok(found);
                    }
                }
                Err(_) => break,
            }
        }
        return Ok(None);
    }
    let session = response
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    drop(response);
    let session = session.as_deref();
    let mut found = None;
    let initialized = serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    if let Ok(response) = post(initialized, session, Some(VERSION)).await {
        found = challenge(&response).flatten();
    }
    if found.is_none() {
        let list = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
        if let Ok(response) = post(list, session, Some(VERSION)).await {
            found = challenge(&response).flatten();
        }
    }
    if let Some(session) = session {
        let _ = http
            .delete(url)
            .header("mcp-session-id", session)
            .header("mcp-protocol-version", VERSION)
            .send()
            .await;
    }
    Ok(found)
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

    #[test]
    fn a_challenge_is_read_as_written_and_only_scope_tokens_are_kept() {
        let params = challenge_params(
            r#"Bearer error="insufficient_scope", scope="mcp:basic  mcp:write", resource_metadata="http://x/.well-known/oauth-protected-resource/mcp",error_description="need \"write\"""#,
        );
        let get = |k: &str| params.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("error"), Some("insufficient_scope"));
        assert_eq!(get("scope"), Some("mcp:basic  mcp:write"));
        assert_eq!(get("error_description"), Some(r#"need "write""#));
        assert_eq!(
            challenge_params("Bearer realm=x, error=invalid_token")[1].1,
            "invalid_token"
        );
        assert!(challenge_params("Basic realm=\"x\"").is_empty());
        assert!(challenge_params("Bearer").is_empty());
        assert!(challenge_params("Bearer ,,,= \"").is_empty());
        assert_eq!(challenge_params("Bearer scope=\"unterminated").len(), 1);
        assert_eq!(
            scope_tokens("mcp:write mcp:write a\"b $(rm) `x`\u{7f} files:read"),
            // Valid scope tokens, however odd (quoted for a shell when
            // shown); a control character or a quote drops the token.
            ["mcp:write", "$(rm)", "files:read"]
        );
    }

    /// What a person reads names the command that helps, with the scopes
    /// quoted for a shell.
    #[test]
    fn a_refusal_names_the_sign_in_that_helps() {
        let scope = DoorRefusal::Scope {
            scopes: vec!["mcp:write".into(), "files:read".into()],
        };
        assert!(
            scope
                .explain("gh", Some(true))
                .contains("`plangate upstream login gh --scope 'mcp:write files:read'`"),
            "{}",
            scope.explain("gh", Some(true))
        );
        let token = DoorRefusal::Token {
            description: Some("authorization server has changed".into()),
        };
        assert!(
            token
                .explain("gh", Some(true))
                .contains("(401: authorization server has changed)")
        );
        assert!(
            token
                .at_start("gh", true)
                .contains("`plangate upstream login gh`")
        );
        // An upstream reached with static headers: check them, no login.
        let headers = token.explain("gh", Some(false));
        assert!(
            headers.contains("check the headers of [upstreams.gh]"),
            "{headers}"
        );
        assert!(!headers.contains("upstream login"), "{headers}");
        assert!(
            token
                .at_start("gh", false)
                .contains("check the headers of [upstreams.gh]")
        );
        // Not known: both ways, the login with the scope it asked for.
        let both = scope.explain("gh", None);
        assert!(
            both.contains("`plangate upstream login gh --scope 'mcp:write files:read'`"),
            "{both}"
        );
        assert!(both.contains("otherwise check the headers"), "{both}");
    }

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
        // rmcp's clear keeps them (see `clear`); logout removes them.
        a.clear().await.unwrap();
        assert!(a.load().await.unwrap().is_some());
        store.clear_upstream_credentials("a").await.unwrap();
        assert!(a.load().await.unwrap().is_none());
    }
}
