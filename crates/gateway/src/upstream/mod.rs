//! Connections to upstream MCP servers, and keeping them alive.
//!
//! plangate is an MCP **2025-11-25** client of every upstream (rmcp's default
//! is 2026-07-28; we pin the revision whose lifecycle every upstream in the
//! wild speaks). A stdio upstream is a child process plangate owns; an HTTP
//! upstream is a Streamable HTTP endpoint. A [`Connector`] makes one
//! connection; the gateway's supervisor calls it again, with backoff,
//! whenever the connection ends — a crashed child process comes back and
//! its tools reappear, while every other upstream keeps serving.

// Sampling and roots are deprecated by SEP-2577 but remain part of MCP
// 2025-11-25, which plangate serves and speaks upstream; forwarding them
// during a call is part of being a faithful gateway.
#![allow(deprecated)]

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use plangate_config::UpstreamConfig;
use rmcp::model::{Prompt, ProtocolVersion, Resource, ResourceTemplate, Tool};
use rmcp::service::RunningService;
use rmcp::{Peer, RoleClient};

mod call;
mod client;
mod connect;
mod downstream;
pub mod oauth;
mod ordered;
pub mod related;
mod stderr;
mod tls;
pub(crate) use call::service_error;
pub use call::{CallError, Routed, Watch};
pub use client::UpstreamClient;
pub use connect::{connect_once, connector_for, connector_from, without_type_names};
pub(crate) use downstream::Downstream;
pub use downstream::{Ask, marked_elicitation};
pub use stderr::StderrTail;

/// The environment variable plangate sets on every upstream it starts,
/// naming it: a `plangate serve` that finds it set was listed as an
/// upstream of a plangate, and refuses to start rather than start itself
/// again and again.
pub const UPSTREAM_MARKER: &str = "PLANGATE_STARTED_AS_UPSTREAM";

/// How long a request from an upstream (elicitation, sampling) may wait for
/// the calling client's answer.
pub const ASK_TIMEOUT: Duration = Duration::from_secs(600);

/// Why an upstream could not be reached.
#[derive(Debug, Clone, thiserror::Error)]
pub enum UpstreamError {
    /// The child process could not be started.
    #[error("upstream {name}: cannot start {command:?}: {reason}")]
    Spawn {
        /// The upstream's name.
        name: String,
        /// The command that failed.
        command: String,
        /// What the OS said.
        reason: String,
    },
    /// A header name or value in the config is not valid HTTP.
    #[error("upstream {name}: header {header:?} is not a valid HTTP header")]
    BadHeader {
        /// The upstream's name.
        name: String,
        /// The offending header name.
        header: String,
    },
    /// The upstream's `ca_file` could not be read or holds no usable CA
    /// certificate.
    #[error("upstream {name}: ca_file {}: {reason}", path.display())]
    CaFile {
        /// The upstream's name.
        name: String,
        /// The file, as configured (made absolute by the config stage).
        path: std::path::PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The upstream's HTTP client could not be built (e.g. no CA
    /// certificates anywhere to verify `https://` with).
    #[error("upstream {name}: cannot set up its HTTP client: {reason}")]
    HttpClient {
        /// The upstream's name.
        name: String,
        /// What went wrong.
        reason: String,
    },
    /// The MCP handshake failed.
    #[error("upstream {name}: MCP initialize failed: {reason}")]
    Initialize {
        /// The upstream's name.
        name: String,
        /// What went wrong.
        reason: String,
    },
    /// Listing tools, prompts or resources failed.
    #[error("upstream {name}: {what} failed: {reason}")]
    List {
        /// The upstream's name.
        name: String,
        /// Which list.
        what: &'static str,
        /// What went wrong.
        reason: String,
    },
    /// Connecting took longer than its `startup_timeout`.
    #[error(
        "upstream {name}: no answer within {}s (its startup_timeout){}",
        after.as_secs(),
        stderr.as_deref().map(|s| format!("; its stderr ended with: {s}")).unwrap_or_default()
    )]
    Timeout {
        /// The upstream's name.
        name: String,
        /// The timeout that ran out.
        after: Duration,
        /// What it last wrote to stderr, if anything.
        stderr: Option<String>,
    },
}

/// A live session with an upstream.
pub type Session = RunningService<RoleClient, UpstreamClient>;

/// Makes one connection to an upstream: starts the transport and completes
/// the MCP handshake with the given client handler.
pub type Connector = Arc<
    dyn Fn(UpstreamClient) -> Pin<Box<dyn Future<Output = Result<Session, UpstreamError>> + Send>>
        + Send
        + Sync,
>;

/// A connected upstream and what it offered.
pub struct Upstream {
    /// The upstream's config, as loaded.
    pub config: UpstreamConfig,
    peer: Peer<RoleClient>,
    /// Cancels the session: the supervisor then reconnects.
    kill: tokio_util::sync::CancellationToken,
    /// Tools the upstream listed, in its order.
    pub tools: Vec<Tool>,
    /// Prompts the upstream listed (empty if it has none).
    pub prompts: Vec<Prompt>,
    /// Resources the upstream listed (empty if it has none).
    pub resources: Vec<Resource>,
    /// Resource templates the upstream listed (empty if it has none).
    pub resource_templates: Vec<ResourceTemplate>,
    /// The name it gave in `initialize` (`serverInfo.name`): what matches
    /// a built-in profile ([`plangate_config::profiles`]), never the
    /// config's name for it.
    pub server_name: Option<String>,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field("name", &self.config.name)
            .field("tools", &self.tools.len())
            .finish_non_exhaustive()
    }
}

impl Upstream {
    /// How plangate reaches it, as OpenTelemetry's `network.transport`
    /// says: `pipe` (a child process) or `tcp` (HTTP).
    pub fn network_transport(&self) -> &'static str {
        match self.config.transport {
            plangate_config::Transport::Stdio { .. } => "pipe",
            plangate_config::Transport::Http { .. } => "tcp",
        }
    }

    /// The upstream's configured name.
    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// Whether plangate signs in to it with OAuth (`[upstreams.NAME.oauth]`).
    pub fn signs_in(&self) -> bool {
        self.config.oauth.is_some()
    }

    /// The peer to send requests to.
    pub fn peer(&self) -> &Peer<RoleClient> {
        &self.peer
    }

    /// The MCP revision negotiated with this upstream (`2025-11-25`,
    /// `2026-07-28`): what `protocol = "auto"` settled on, shown by
    /// `config check`.
    pub fn protocol_version(&self) -> Option<String> {
        self.peer
            .peer_info()
            .map(|info| info.protocol_version.to_string())
    }

    /// Whether plangate speaks MCP 2026-07-28 to this upstream (stateless,
    /// `input_required` instead of requests to the client).
    pub fn is_modern(&self) -> bool {
        self.peer
            .peer_info()
            .is_some_and(|info| info.protocol_version >= ProtocolVersion::V_2026_07_28)
    }

    /// How long one call to this upstream may wait for its answer
    /// (`[upstreams.NAME] call_timeout`).
    pub fn call_timeout(&self) -> Duration {
        self.config.call_timeout
    }

    /// Waits for `request` (a request future of this upstream's peer) at
    /// most [`Upstream::call_timeout`]: for prompts and resource reads;
    /// tool calls go through [`Upstream::call`] or [`Upstream::send_call`]. Past it the future is dropped —
    /// which tells the upstream the request is cancelled — and the answer
    /// is [`rmcp::service::ServiceError::Timeout`].
    pub async fn timed<T>(
        &self,
        request: impl Future<Output = Result<T, rmcp::service::ServiceError>>,
    ) -> Result<T, rmcp::service::ServiceError> {
        let timeout = self.call_timeout();
        match tokio::time::timeout(timeout, request).await {
            Ok(answer) => answer,
            Err(_) => {
                tracing::warn!(upstream = %self.name(), "no answer within call_timeout ({}s); the request was cancelled", timeout.as_secs());
                Err(rmcp::service::ServiceError::Timeout { timeout })
            }
        }
    }

    /// Ends the session because it no longer works (e.g. an HTTP upstream
    /// that stopped answering); the supervisor reconnects with backoff.
    pub fn fail(&self) {
        self.kill.cancel();
    }

    /// The token [`Upstream::fail`] cancels.
    pub(crate) fn kill_token(&self) -> tokio_util::sync::CancellationToken {
        self.kill.clone()
    }

    /// A copy with fresh lists from the same session (after the upstream
    /// said a list changed).
    pub(crate) async fn relisted(&self) -> Result<Upstream, UpstreamError> {
        Upstream::list(self.config.clone(), self.peer.clone(), self.kill.clone()).await
    }

    /// Reads the lists an upstream offers over an established session.
    pub async fn list(
        config: UpstreamConfig,
        peer: Peer<RoleClient>,
        kill: tokio_util::sync::CancellationToken,
    ) -> Result<Upstream, UpstreamError> {
        let name = config.name.clone();
        let list_err = |what: &'static str, e: &rmcp::service::ServiceError| UpstreamError::List {
            name: name.clone(),
            what,
            reason: match oauth::door_refusal(e) {
                Some(refusal) => refusal.at_start(&name, config.oauth.is_some()),
                None => without_type_names(&e.to_string()),
            },
        };
        let caps = peer
            .peer_info()
            .map(|info| info.capabilities.clone())
            .unwrap_or_default();
        let tools = if caps.tools.is_some() {
            peer.list_all_tools()
                .await
                .map_err(|e| list_err("tools/list", &e))?
        } else {
            Vec::new()
        };
        let prompts = if caps.prompts.is_some() {
            peer.list_all_prompts()
                .await
                .map_err(|e| list_err("prompts/list", &e))?
        } else {
            Vec::new()
        };
        let (resources, resource_templates) = if caps.resources.is_some() {
            let resources = peer
                .list_all_resources()
                .await
                .map_err(|e| list_err("resources/list", &e))?;
            // Templates are optional even for servers with resources.
            let templates = peer.list_all_resource_templates().await.unwrap_or_default();
            (resources, templates)
        } else {
            (Vec::new(), Vec::new())
        };
        let server_name = peer
            .peer_info()
            .and_then(|info| info.server_info.as_ref().map(|s| s.name.clone()));
        Ok(Upstream {
            config,
            peer,
            kill,
            tools,
            prompts,
            resources,
            resource_templates,
            server_name,
        })
    }
}
