//! `plangate connect --url URL`: a stdio MCP server that passes every
//! message, unchanged, to a plangate serving Streamable HTTP (a service
//! of its own user, docs/security.md "An agent with a shell"), and every
//! answer back. A client that starts its servers over stdio (Claude
//! Desktop, Cursor, Claude Code) reaches the service through it; the key
//! (`PLANGATE_KEY`) goes as the bearer, and the data dir, the keys and
//! the log stay with the service, out of the client's user's reach.
//!
//! Both sides are rmcp's own transports — the stdio framing a server
//! reads and the Streamable HTTP client plangate uses for its upstreams —
//! so both protocol revisions pass as they are: the HTTP side carries the
//! session and the protocol headers, nothing is parsed into a request or
//! answered here.

use anyhow::{Context, Result};
use rmcp::RoleServer;
use rmcp::transport::Transport;
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClientTransport, StreamableHttpClientTransportConfig,
};

use crate::commands::UsageError;

/// Relays stdin/stdout to the plangate at `url` until either side ends.
pub(crate) async fn run(url: &str) -> Result<()> {
    let parsed = reqwest::Url::parse(url)
        .map_err(|e| UsageError(format!("--url {url:?} is not a URL: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(UsageError(format!(
            "--url {url:?}: give the service's MCP endpoint, http://HOST:PORT/mcp"
        ))
        .into());
    }
    let mut config = StreamableHttpClientTransportConfig::with_uri(url.to_owned());
    if let Some(key) = std::env::var("PLANGATE_KEY").ok().filter(|k| !k.is_empty()) {
        config = config.auth_header(key);
    }
    let http = reqwest::Client::builder()
        .build()
        .context("cannot start an HTTP client")?;
    let mut service = StreamableHttpClientTransport::with_client(http, config);
    let mut client =
        AsyncRwTransport::<RoleServer, _, _>::new_server(tokio::io::stdin(), tokio::io::stdout());
    let outcome = relay(&mut client, &mut service).await;
    let _ = service.close().await;
    let _ = client.close().await;
    outcome
}

/// Passes messages both ways, in order, until one side closes.
async fn relay(
    client: &mut impl Transport<RoleServer>,
    service: &mut impl Transport<rmcp::RoleClient>,
) -> Result<()> {
    loop {
        tokio::select! {
            from_client = client.receive() => match from_client {
                Some(message) => {
                    let id = match &message {
                        rmcp::model::JsonRpcMessage::Request(r) => Some(r.id.clone()),
                        _ => None,
                    };
                    if let Err(e) = service.send(message).await {
                        let why = refused(&e.to_string());
                        // The client hears why its request failed, not
                        // just a closed pipe; then the bridge ends.
                        if let Some(id) = id {
                            let error = rmcp::model::ErrorData::new(
                                rmcp::model::ErrorCode::INTERNAL_ERROR,
                                why.clone(),
                                None,
                            );
                            let _ = client
                                .send(rmcp::model::ServerJsonRpcMessage::error(error, Some(id)))
                                .await;
                        }
                        return Err(anyhow::anyhow!(why));
                    }
                }
                None => return Ok(()),
            },
            from_service = service.receive() => match from_service {
                Some(message) => client
                    .send(message)
                    .await
                    .context("the client's stdout closed")?,
                None => return Ok(()),
            },
        }
    }
}

/// What a failed send to the service means, for the client and for the
/// person reading its log.
fn refused(error: &str) -> String {
    let lower = error.to_ascii_lowercase();
    if lower.contains("auth") || lower.contains("401") {
        format!(
            "the plangate service refused this client's key (401: no key, or one it did not issue); the person who runs the service issues keys ({error})"
        )
    } else {
        format!("the plangate service could not be reached: {error}")
    }
}
