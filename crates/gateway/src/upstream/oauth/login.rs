//! A person's sign-in to an upstream (`plangate upstream login`): finding
//! its authorization server from its own challenge, picking the client,
//! and sealing the tokens the code is exchanged for. Apart because a
//! sign-in is the CLI's work, not the serving gateway's; the challenge it
//! starts from (`challenge_of`) also finds a machine client's server.

use plangate_config::UpstreamConfig;
use rmcp::transport::auth::{AuthorizationManager, CredentialStore, OAuthClientConfig};

use super::door::scope_tokens;
use super::{SealedCredentials, Vault};

/// The name a dynamically registered client gives itself.
const CLIENT_NAME: &str = "plangate";

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
pub(super) async fn challenge_of(url: &str) -> Result<Option<String>, String> {
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
