//! `plangate upstream login|logout`: signing plangate in to an upstream
//! behind OAuth. The flow itself (discovery, registration, PKCE, the code
//! exchange) is rmcp's, through [`plangate_gateway::upstream::oauth`];
//! this is the person's side of it: the URL to open, and the one request
//! the browser brings back to a port on this machine.

use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use plangate_config::Config;
use plangate_gateway::upstream::oauth::{self, Vault};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::commands::UsageError;

/// The upstream `name` of `config`, if it signs in with OAuth.
fn oauth_upstream<'a>(
    config: &'a Config,
    name: &str,
) -> Result<&'a plangate_config::UpstreamConfig> {
    let Some(upstream) = config.upstreams.get(name) else {
        let known: Vec<&str> = config.upstreams.keys().map(String::as_str).collect();
        return Err(UsageError(format!(
            "there is no upstream {name:?} in {} (its upstreams: {}); give the config `plangate serve` uses with --config",
            crate::commands::describe_source(&config.source),
            known.join(", ")
        ))
        .into());
    };
    if upstream.oauth.is_none() {
        return Err(UsageError(format!(
            "upstream {name:?} does not sign in with OAuth: add an [upstreams.{name}.oauth] table to its config (an empty one is enough: the upstream's metadata names its authorization server)"
        ))
        .into());
    }
    Ok(upstream)
}

/// What the browser brought back to the redirect URI.
struct Callback {
    code: Option<String>,
    state: Option<String>,
    issuer: Option<String>,
    error: Option<String>,
}

/// Signs plangate in to upstream `name`, asking for `more` scopes besides
/// the configured or discovered ones and those granted before.
pub async fn login(
    config: &Config,
    name: &str,
    vault: Vault,
    timeout: Duration,
    more: &[String],
) -> Result<()> {
    let upstream = oauth_upstream(config, name)?;
    if upstream
        .oauth
        .as_ref()
        .is_some_and(|o| o.grant == plangate_config::OAuthGrant::ClientCredentials)
    {
        return Err(UsageError(format!(
            "upstream {name:?} signs in as a machine client (grant = \"client_credentials\"): plangate gets its tokens itself whenever it connects, so there is no login; `plangate config check` shows whether it works"
        ))
        .into());
    }
    let mut wanted = Vec::new();
    for given in more {
        let tokens = oauth::scope_tokens(given);
        if tokens.is_empty()
            || tokens.join(" ") != given.split_whitespace().collect::<Vec<_>>().join(" ")
        {
            return Err(UsageError(format!(
                "--scope {given:?} is not a list of OAuth scopes (RFC 6749: printable characters without spaces, quotes or backslashes, separated by spaces)"
            ))
            .into());
        }
        wanted.extend(tokens);
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .context("cannot listen on a loopback port for the browser to come back to")?;
    let redirect = format!("http://{}/callback", listener.local_addr()?);
    let login = oauth::begin_login(upstream, vault, &redirect, &wanted)
        .await
        .map_err(|e| anyhow!("cannot sign in to upstream {name}: {e}"))?;
    let scopes = if login.scopes.is_empty() {
        "none named (the authorization server's default)".to_owned()
    } else {
        login.scopes.join(" ")
    };
    eprintln!(
        "plangate signs in as {}, asking for the scopes: {scopes}",
        login.client
    );
    eprintln!("Open this URL in a browser to sign plangate in to upstream {name}:\n");
    crate::output::line(format_args!("{}", login.url));
    eprintln!(
        "\nWaiting up to {} for the sign-in to come back to {redirect} …",
        plangate_config::format_duration(timeout)
    );
    let callback = tokio::time::timeout(timeout, wait_for_callback(&listener))
        .await
        .map_err(|_| {
            anyhow!(
                "no sign-in came back within {}: run `plangate upstream login {name}` again, and open the URL on this machine",
                plangate_config::format_duration(timeout)
            )
        })??;
    if let Some(error) = callback.error {
        return Err(anyhow!(
            "the authorization server did not sign plangate in to {name}: {error}"
        ));
    }
    let (Some(code), Some(state)) = (callback.code, callback.state) else {
        return Err(anyhow!(
            "the browser came back without a code and state: run `plangate upstream login {name}` again"
        ));
    };
    oauth::finish_login(&login, &code, &state, callback.issuer.as_deref())
        .await
        .map_err(|e| anyhow!("cannot finish signing in to upstream {name}: {e}"))?;
    eprintln!(
        "plangate is signed in to upstream {name}; its tokens are sealed in the store. A running `plangate serve` of this data dir (or database) connects with them at its next attempt, and refreshes them before they expire."
    );
    Ok(())
}

/// Forgets upstream `name`'s tokens.
pub async fn logout(config: &Config, name: &str, vault: Vault) -> Result<()> {
    oauth_upstream(config, name)?;
    vault.store.clear_upstream_credentials(name).await?;
    eprintln!(
        "plangate forgot its tokens for upstream {name}; the authorization server may still hold the grant (revoke it there too)"
    );
    Ok(())
}

/// Prints the Client ID Metadata Document to serve at `url`
/// (draft-ietf-oauth-client-id-metadata-document): plangate as a native
/// public client whose sign-ins come back to a loopback port (any port,
/// RFC 8252 §7.3), with PKCE and no secret.
pub fn client_metadata(url: &str) -> Result<()> {
    let lower = url.to_ascii_lowercase();
    let valid = lower.strip_prefix("https://").is_some_and(|rest| {
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        !authority.is_empty() && !authority.contains('@') && !path.is_empty() && !url.contains('#')
    });
    if !valid {
        return Err(UsageError(format!(
            "{url:?} cannot be a client id: give the https:// URL, with a path, where the document will be served (for example https://plangate.example.com/oauth/client.json)"
        ))
        .into());
    }
    let document = serde_json::json!({
        "client_id": url,
        "client_name": "plangate",
        "client_uri": "https://github.com/plangate/plangate",
        "redirect_uris": ["http://127.0.0.1/callback"],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
        "application_type": "native",
    });
    crate::output::json(&document)?;
    eprintln!(
        "Serve this at {url} (content-type application/json) and set client_metadata_url = {url:?} in [upstreams.NAME.oauth]; an authorization server that supports Client ID Metadata Documents then knows plangate by that URL."
    );
    Ok(())
}

/// Answers requests on `listener` until one brings `/callback` back: the
/// browser may ask for other things first (a favicon).
async fn wait_for_callback(listener: &tokio::net::TcpListener) -> Result<Callback> {
    loop {
        let (mut socket, _) = listener.accept().await?;
        let mut head = Vec::new();
        let mut buf = [0u8; 2048];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
            let n = match tokio::time::timeout(Duration::from_secs(10), socket.read(&mut buf)).await
            {
                Ok(Ok(n)) => n,
                _ => 0,
            };
            if n == 0 {
                break;
            }
            head.extend_from_slice(&buf[..n]);
        }
        let text = String::from_utf8_lossy(&head);
        let target = text
            .lines()
            .next()
            .and_then(|line| line.strip_prefix("GET "))
            .and_then(|rest| rest.split(' ').next())
            .unwrap_or("");
        let Ok(url) = reqwest::Url::parse(&format!("http://127.0.0.1{target}")) else {
            respond(&mut socket, "404 Not Found", "Not found.").await;
            continue;
        };
        if url.path() != "/callback" {
            respond(&mut socket, "404 Not Found", "Not found.").await;
            continue;
        }
        let get = |k: &str| {
            url.query_pairs()
                .find(|(name, _)| name == k)
                .map(|(_, v)| v.into_owned())
        };
        let error = get("error").map(|e| match get("error_description") {
            Some(d) => format!("{e}: {d}"),
            None => e,
        });
        let page = match &error {
            Some(_) => "plangate was not signed in; see the terminal.",
            None => {
                "plangate received the sign-in; you can close this tab (the terminal says whether it worked)."
            }
        };
        respond(&mut socket, "200 OK", page).await;
        return Ok(Callback {
            code: get("code"),
            state: get("state"),
            issuer: get("iss"),
            error,
        });
    }
}

async fn respond(socket: &mut tokio::net::TcpStream, status: &str, text: &str) {
    let body = format!("<!doctype html><meta charset=utf-8><title>plangate</title><p>{text}</p>");
    let response = format!(
        "HTTP/1.1 {status}\r\ncontent-type: text/html; charset=utf-8\r\ncontent-length: {}\r\ncache-control: no-store\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = socket.write_all(response.as_bytes()).await;
    let _ = socket.shutdown().await;
}
