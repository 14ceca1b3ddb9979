//! Connecting to an upstream as configured: the child process or the
//! Streamable HTTP endpoint, the MCP lifecycle the config asks for, and
//! errors a person can act on. Apart from the session types in
//! [`super`] because it runs once per attempt, under the supervisor's
//! backoff.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use plangate_config::{Transport, UpstreamConfig, UpstreamProtocol};
use rmcp::model::ProtocolVersion;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClientTransportConfig, StreamableHttpError,
};
use rmcp::transport::{ConfigureCommandExt, StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};

use super::ordered::OrderedProgress;
use super::stderr::{self, with_stderr};
use super::tls::{http_client, push_sources};
use super::{
    Connector, Session, UPSTREAM_MARKER, Upstream, UpstreamClient, UpstreamError, oauth, related,
};

/// A connector for an upstream as configured: a child process for
/// `command`, Streamable HTTP for `url`. An HTTP upstream gets one HTTP
/// client, built here (its `ca_file` read now) and shared by every
/// reconnection, so its connection pool and TLS settings are made once
/// (only while it cannot be built is it tried again at each attempt).
pub fn connector_for(config: &UpstreamConfig) -> Connector {
    let config = config.clone();
    let http = match &config.transport {
        Transport::Http { url, ca_file, .. } => {
            Some(http_client(&config.name, url, ca_file.as_deref()))
        }
        Transport::Stdio { .. } => None,
    };
    Arc::new(move |client: UpstreamClient| {
        let config = config.clone();
        let http = http.clone();
        Box::pin(async move { connect_configured(&config, http, client).await })
    })
}

/// A connector from any factory of rmcp client transports, e.g. one end of
/// a `tokio::io::duplex` for in-process tests.
pub fn connector_from<F, Fut, T, E, A>(name: &str, make: F) -> Connector
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = T> + Send + 'static,
    T: rmcp::transport::IntoTransport<RoleClient, E, A> + Send + 'static,
    E: std::error::Error + Send + Sync + 'static,
    A: 'static,
{
    let name = name.to_owned();
    let make = Arc::new(make);
    Arc::new(move |client: UpstreamClient| {
        let make = make.clone();
        let name = name.clone();
        Box::pin(async move {
            let transport = make().await;
            client
                .serve(transport)
                .await
                .map_err(|e| UpstreamError::Initialize {
                    name,
                    reason: e.to_string(),
                })
        })
    })
}

/// Opens the MCP lifecycle the config asks for: `initialize` at
/// 2025-11-25, `server/discover` at 2026-07-28, or a probe that falls back.
async fn handshake<T, E, A>(
    client: UpstreamClient,
    transport: T,
    protocol: UpstreamProtocol,
) -> Result<Session, rmcp::service::ClientInitializeError>
where
    T: rmcp::transport::IntoTransport<RoleClient, E, A>,
    E: std::error::Error + Send + Sync + 'static,
{
    use rmcp::service::{ClientLifecycleMode, ClientServiceExt};
    let modern = vec![ProtocolVersion::V_2026_07_28];
    match protocol {
        UpstreamProtocol::V2025_11_25 => client.serve(transport).await,
        UpstreamProtocol::V2026_07_28 => {
            let mode = ClientLifecycleMode::Discover {
                preferred_versions: modern,
            };
            client.serve_with_lifecycle(transport, mode).await
        }
        UpstreamProtocol::Auto => {
            let mode = ClientLifecycleMode::Auto {
                preferred_versions: modern,
                legacy_version: Some(ProtocolVersion::V_2025_11_25),
            };
            client.serve_with_lifecycle(transport, mode).await
        }
    }
}
/// `e`, said as why upstream `name`'s handshake failed.
fn init_err(name: &str, e: &dyn std::fmt::Display) -> UpstreamError {
    UpstreamError::Initialize {
        name: name.to_owned(),
        reason: without_type_names(&e.to_string()),
    }
}

async fn connect_configured(
    config: &UpstreamConfig,
    http: Option<Result<reqwest::Client, UpstreamError>>,
    client: UpstreamClient,
) -> Result<Session, UpstreamError> {
    match &config.transport {
        Transport::Stdio {
            command,
            args,
            env,
            cwd,
        } => {
            let cmd = tokio::process::Command::new(command).configure(|c| {
                c.args(args);
                c.envs(env);
                c.env(UPSTREAM_MARKER, &config.name);
                if let Some(dir) = cwd {
                    c.current_dir(dir);
                }
                c.kill_on_drop(true);
            });
            connect_stdio(config, command, cmd, client).await
        }
        Transport::Http {
            url,
            headers,
            ca_file,
        } => connect_http(config, http, url, headers, ca_file.as_deref(), client).await,
    }
}

/// Starts the child process `cmd` (the configured `command`) and opens the
/// MCP lifecycle over its stdin and stdout; its stderr is kept and logged
/// ([`stderr::forward`]) and said with a failed handshake.
async fn connect_stdio(
    config: &UpstreamConfig,
    command: &str,
    cmd: tokio::process::Command,
    client: UpstreamClient,
) -> Result<Session, UpstreamError> {
    let name = &config.name;
    let (transport, stderr) = TokioChildProcess::builder(cmd)
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| UpstreamError::Spawn {
            name: name.clone(),
            command: command.to_owned(),
            reason: e.to_string(),
        })?;
    let tail = client.stderr.clone();
    let reader = stderr.map(|stderr| stderr::forward(name.clone(), stderr, tail.clone()));
    let transport = OrderedProgress::new(transport, &client);
    match handshake(client, transport, config.protocol).await {
        Ok(session) => Ok(session),
        Err(e) => {
            // The process most likely exited: let its last words
            // arrive, then say them with the error.
            if let Some(reader) = reader {
                let _ = tokio::time::timeout(Duration::from_millis(500), reader).await;
            }
            // rmcp names its transport's types; a person needs to
            // know the process ended, and why (its stderr).
            let raw = e.to_string();
            let reason = if raw.contains("Broken pipe") {
                "the process ended before it read the initialize request".to_owned()
            } else if raw.contains("connection closed") {
                "the process ended before it answered initialize".to_owned()
            } else {
                raw
            };
            Err(init_err(name, &with_stderr(reason, Some(&tail))))
        }
    }
}

/// Opens the MCP lifecycle with the Streamable HTTP endpoint `url`, with
/// the configured headers and, for an upstream behind OAuth, its tokens.
async fn connect_http(
    config: &UpstreamConfig,
    http: Option<Result<reqwest::Client, UpstreamError>>,
    url: &str,
    headers: &BTreeMap<String, String>,
    ca_file: Option<&Path>,
    client: UpstreamClient,
) -> Result<Session, UpstreamError> {
    let name = &config.name;
    // The upstream's own client; if it could not be built (a bad
    // ca_file, say), try again, so a fixed file is picked up at the
    // next reconnection.
    let http = match http {
        Some(Ok(built)) => built,
        Some(Err(_)) | None => http_client(name, url, ca_file)?,
    };
    let transport_config = StreamableHttpClientTransportConfig::with_uri(url)
        .custom_headers(custom_headers(name, headers)?);
    let shaken = http_handshake(config, url, http, transport_config, client).await?;
    shaken.map_err(|e| http_failure(config, ca_file, &e))
}

/// The configured `headers`, as HTTP headers; `BadHeader` names the first
/// that is not valid HTTP.
fn custom_headers(
    name: &str,
    headers: &BTreeMap<String, String>,
) -> Result<HashMap<http::HeaderName, http::HeaderValue>, UpstreamError> {
    let mut custom = HashMap::new();
    for (k, v) in headers {
        let bad = || UpstreamError::BadHeader {
            name: name.to_owned(),
            header: k.clone(),
        };
        let hn = http::HeaderName::try_from(k.as_str()).map_err(|_| bad())?;
        let hv = http::HeaderValue::try_from(v.as_str()).map_err(|_| bad())?;
        custom.insert(hn, hv);
    }
    Ok(custom)
}

/// The handshake over HTTP, with the tokens `[upstreams.NAME.oauth]` asks
/// for; `Err` when they cannot be had before it starts, `Ok(Err)` when the
/// handshake itself failed.
async fn http_handshake(
    config: &UpstreamConfig,
    url: &str,
    http: reqwest::Client,
    transport_config: StreamableHttpClientTransportConfig,
    client: UpstreamClient,
) -> Result<Result<Session, rmcp::service::ClientInitializeError>, UpstreamError> {
    let name = &config.name;
    Ok(match &config.oauth {
        None => {
            let transport = StreamableHttpClientTransport::with_client(
                related::Tagging::new(http),
                transport_config,
            );
            let transport = OrderedProgress::new(transport, &client);
            handshake(client, transport, config.protocol).await
        }
        // A machine client asks for its own tokens when needed.
        Some(settings) if settings.grant == plangate_config::OAuthGrant::ClientCredentials => {
            let machine = oauth::MachineTokens::new(config, url, settings).await?;
            let transport = StreamableHttpClientTransport::with_client(
                related::Tagging::with_machine_tokens(http, Arc::new(machine)),
                transport_config,
            );
            let transport = OrderedProgress::new(transport, &client);
            handshake(client, transport, config.protocol).await
        }
        // Every request asks the manager for a token, which
        // refreshes it first when it is about to expire.
        Some(settings) => {
            let vault = client.vault().ok_or_else(|| {
                init_err(name, &format!("its OAuth credentials live in plangate's store, which holds none for it here (no data dir yet, or it could not be opened): sign plangate in with `plangate upstream login {name}`"))
            })?;
            let manager = oauth::manager_for(config, url, settings, vault).await?;
            let auth = rmcp::transport::auth::AuthClient::new(related::Tagging::new(http), manager);
            let watched = auth.auth_manager.clone();
            let transport = StreamableHttpClientTransport::with_client(auth, transport_config);
            let transport = OrderedProgress::new(transport, &client);
            let shaken = handshake(client, transport, config.protocol).await;
            if let Ok(session) = &shaken {
                oauth::watch_grant(
                    name.clone(),
                    watched,
                    session.peer().clone(),
                    session.cancellation_token(),
                );
            }
            shaken
        }
    })
}

/// Why an HTTP upstream's handshake failed, for a person: its door's
/// refusal, or the transport's error with the TLS reason dug out.
fn http_failure(
    config: &UpstreamConfig,
    ca_file: Option<&Path>,
    e: &rmcp::service::ClientInitializeError,
) -> UpstreamError {
    let name = &config.name;
    if let Some(refusal) = oauth::door_refusal_at_start(e) {
        return init_err(name, &refusal.at_start(name, config.oauth.is_some()));
    }
    // A TLS failure (an unknown issuer, say) is named only by
    // the innermost errors under reqwest's, which rmcp does not
    // chain as sources: dig them out.
    let mut reason = e.to_string();
    if let rmcp::service::ClientInitializeError::TransportError { error, .. } = e {
        push_sources(&mut reason, error);
        if let Some(StreamableHttpError::Client(inner)) = error
            .error
            .downcast_ref::<StreamableHttpError<reqwest::Error>>()
        {
            push_sources(&mut reason, inner);
        }
    }
    if reason.contains("invalid peer certificate") {
        reason.push_str(match ca_file {
            None => " (the server's certificate is not from a CA this system trusts; for a private CA, set the upstream's ca_file)",
            Some(_) => " (the server's certificate is not from a CA this system or the upstream's ca_file trusts)",
        });
    }
    init_err(name, &reason)
}
/// `text` (an rmcp error's words) without the Rust type names rmcp puts
/// in (`Transport [plangate_gateway::upstream::ordered::OrderedProgress<…>] error:
/// `): they say nothing to the person reading why an upstream is down.
pub fn without_type_names(text: &str) -> String {
    const OPEN: &str = "Transport [";
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(OPEN) {
        out.push_str(&rest[..at]);
        let after = &rest[at + OPEN.len()..];
        let mut depth = 1usize;
        let close = after.char_indices().find_map(|(i, c)| {
            match c {
                '[' => depth += 1,
                ']' => depth -= 1,
                _ => {}
            }
            (depth == 0).then_some(i)
        });
        let Some(close) = close else {
            out.push_str(&rest[at..]);
            return out;
        };
        rest = after[close + 1..]
            .strip_prefix(" error: ")
            .or_else(|| after[close + 1..].strip_prefix(" error:"))
            .unwrap_or(&after[close + 1..]);
        // What came before reads on into what comes after, with one ": ".
        let kept = out.trim_end().trim_end_matches(':').len();
        out.truncate(kept);
        if !out.is_empty() {
            out.push_str(": ");
        }
    }
    out.push_str(rest);
    out
}

/// Connects once with `connector` and reads the upstream's lists; the
/// session is returned so its owner can wait for it to end.
pub async fn connect_once(
    config: &UpstreamConfig,
    connector: &Connector,
    client: UpstreamClient,
) -> Result<(Upstream, Session), UpstreamError> {
    let name = config.name.clone();
    let stderr = client.stderr.clone();
    let attempt = async {
        let session = connector(client).await?;
        let kill = tokio_util::sync::CancellationToken::new();
        let upstream = Upstream::list(config.clone(), session.peer().clone(), kill).await?;
        Ok((upstream, session))
    };
    match tokio::time::timeout(config.startup_timeout, attempt).await {
        Ok(result) => result,
        Err(_) => Err(UpstreamError::Timeout {
            name,
            after: config.startup_timeout,
            stderr: stderr.last(5),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::without_type_names;

    #[test]
    fn type_names_are_taken_out_of_rmcp_errors() {
        assert_eq!(
            without_type_names(
                "Send message error Transport [plangate_gateway::upstream::OrderedProgress<rmcp::transport::worker::WorkerTransport<X<Y>>>] error: Client error: error sending request, when send initialize request"
            ),
            "Send message error: Client error: error sending request, when send initialize request"
        );
        assert_eq!(
            without_type_names(
                "Transport send error: Transport [a::B<[u8; 4]>] error: Auth required"
            ),
            "Transport send error: Auth required"
        );
        assert_eq!(without_type_names("no type here"), "no type here");
        assert_eq!(
            without_type_names("Transport [unclosed <"),
            "Transport [unclosed <"
        );
    }
}
