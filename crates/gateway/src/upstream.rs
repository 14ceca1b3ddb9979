//! Connections to upstream MCP servers.
//!
//! plangate is an MCP **2025-11-25** client of every upstream (rmcp's default
//! is 2026-07-28; we pin the revision whose lifecycle every upstream in the
//! wild speaks). A stdio upstream is a child process plangate owns; an HTTP
//! upstream is a Streamable HTTP endpoint. Either way, what the rest of the
//! gateway sees is an [`Upstream`]: a name, its config, a live rmcp peer and
//! the lists it offered when it connected.

use std::collections::{BTreeMap, HashMap};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use plangate_config::{Transport, UpstreamConfig};
use rmcp::model::{
    ClientCapabilities, ClientConfig, Implementation, Prompt, ProtocolVersion, Resource,
    ResourceTemplate, Tool,
};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{ConfigureCommandExt, StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, Peer, RoleClient, ServiceExt};
use tokio::io::{AsyncBufReadExt, BufReader};

/// How long an upstream may take to start and answer `initialize` and its
/// first lists before plangate gives up on it.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Why an upstream could not be reached.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// The child process could not be started.
    #[error("upstream {name}: cannot start {command:?}: {source}")]
    Spawn {
        /// The upstream's name.
        name: String,
        /// The command that failed.
        command: String,
        /// What the OS said.
        source: std::io::Error,
    },
    /// A header name or value in the config is not valid HTTP.
    #[error("upstream {name}: header {header:?} is not a valid HTTP header")]
    BadHeader {
        /// The upstream's name.
        name: String,
        /// The offending header name.
        header: String,
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
    /// Connecting took longer than [`CONNECT_TIMEOUT`].
    #[error("upstream {name}: no answer within {}s", CONNECT_TIMEOUT.as_secs())]
    Timeout {
        /// The upstream's name.
        name: String,
    },
}

/// plangate's client side towards one upstream: it declares no client
/// capabilities yet (elicitation, sampling and roots forwarding come with the
/// upstream-life work) and notes list changes in the log.
#[derive(Clone)]
pub struct UpstreamClient {
    name: Arc<str>,
}

impl ClientHandler for UpstreamClient {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("plangate", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::V_2025_11_25)
    }

    async fn on_tool_list_changed(&self, _cx: NotificationContext<RoleClient>) {
        tracing::info!(upstream = %self.name, "upstream tool list changed");
    }
}

/// A connected upstream and what it offered when it connected.
pub struct Upstream {
    /// The upstream's config, as loaded.
    pub config: UpstreamConfig,
    /// The live connection; dropping it closes the session (and ends a
    /// child process).
    service: RunningService<RoleClient, UpstreamClient>,
    /// Tools the upstream listed, in its order.
    pub tools: Vec<Tool>,
    /// Prompts the upstream listed (empty if it has none).
    pub prompts: Vec<Prompt>,
    /// Resources the upstream listed (empty if it has none).
    pub resources: Vec<Resource>,
    /// Resource templates the upstream listed (empty if it has none).
    pub resource_templates: Vec<ResourceTemplate>,
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
    /// The upstream's configured name.
    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// The peer to send requests to.
    pub fn peer(&self) -> &Peer<RoleClient> {
        self.service.peer()
    }

    /// Connects to an upstream, completes the MCP handshake and reads its
    /// lists of tools, prompts and resources.
    pub async fn connect(config: UpstreamConfig) -> Result<Upstream, UpstreamError> {
        let name = config.name.clone();
        match tokio::time::timeout(CONNECT_TIMEOUT, Self::connect_inner(config)).await {
            Ok(result) => result,
            Err(_) => Err(UpstreamError::Timeout { name }),
        }
    }

    async fn connect_inner(config: UpstreamConfig) -> Result<Upstream, UpstreamError> {
        let name = config.name.clone();
        let client = UpstreamClient {
            name: Arc::from(name.as_str()),
        };
        let init_err = |e: &dyn std::fmt::Display| UpstreamError::Initialize {
            name: name.clone(),
            reason: e.to_string(),
        };
        let service = match &config.transport {
            Transport::Stdio {
                command,
                args,
                env,
                cwd,
            } => {
                let cmd = tokio::process::Command::new(command).configure(|c| {
                    c.args(args);
                    c.envs(env);
                    if let Some(dir) = cwd {
                        c.current_dir(dir);
                    }
                    c.kill_on_drop(true);
                });
                let (transport, stderr) = TokioChildProcess::builder(cmd)
                    .stderr(Stdio::piped())
                    .spawn()
                    .map_err(|source| UpstreamError::Spawn {
                        name: name.clone(),
                        command: command.clone(),
                        source,
                    })?;
                if let Some(stderr) = stderr {
                    let upstream = name.clone();
                    tokio::spawn(async move {
                        let mut lines = BufReader::new(stderr).lines();
                        while let Ok(Some(line)) = lines.next_line().await {
                            tracing::debug!(upstream = %upstream, "stderr: {line}");
                        }
                    });
                }
                client.serve(transport).await.map_err(|e| init_err(&e))?
            }
            Transport::Http { url, headers } => {
                let mut custom = HashMap::new();
                for (k, v) in headers {
                    let bad = || UpstreamError::BadHeader {
                        name: name.clone(),
                        header: k.clone(),
                    };
                    let hn = http::HeaderName::try_from(k.as_str()).map_err(|_| bad())?;
                    let hv = http::HeaderValue::try_from(v.as_str()).map_err(|_| bad())?;
                    custom.insert(hn, hv);
                }
                let transport_config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                    .custom_headers(custom);
                let transport = StreamableHttpClientTransport::with_client(
                    reqwest::Client::new(),
                    transport_config,
                );
                client.serve(transport).await.map_err(|e| init_err(&e))?
            }
        };
        Self::finish(config, service).await
    }

    /// Connects over any rmcp client transport — e.g. one end of a
    /// `tokio::io::duplex` for in-process tests — with the same handshake and
    /// listing as [`Upstream::connect`].
    pub async fn connect_transport<T, E, A>(
        config: UpstreamConfig,
        transport: T,
    ) -> Result<Upstream, UpstreamError>
    where
        T: rmcp::transport::IntoTransport<RoleClient, E, A>,
        E: std::error::Error + Send + Sync + 'static,
    {
        let client = UpstreamClient {
            name: Arc::from(config.name.as_str()),
        };
        let service = client
            .serve(transport)
            .await
            .map_err(|e| UpstreamError::Initialize {
                name: config.name.clone(),
                reason: e.to_string(),
            })?;
        Self::finish(config, service).await
    }

    /// Reads the lists an upstream offers once its session is up.
    async fn finish(
        config: UpstreamConfig,
        service: RunningService<RoleClient, UpstreamClient>,
    ) -> Result<Upstream, UpstreamError> {
        let name = config.name.clone();
        let list_err = |what: &'static str, e: &dyn std::fmt::Display| UpstreamError::List {
            name: name.clone(),
            what,
            reason: e.to_string(),
        };
        let caps = service
            .peer()
            .peer_info()
            .map(|info| info.capabilities.clone())
            .unwrap_or_default();
        let tools = if caps.tools.is_some() {
            service
                .peer()
                .list_all_tools()
                .await
                .map_err(|e| list_err("tools/list", &e))?
        } else {
            Vec::new()
        };
        let prompts = if caps.prompts.is_some() {
            service
                .peer()
                .list_all_prompts()
                .await
                .map_err(|e| list_err("prompts/list", &e))?
        } else {
            Vec::new()
        };
        let (resources, resource_templates) = if caps.resources.is_some() {
            let resources = service
                .peer()
                .list_all_resources()
                .await
                .map_err(|e| list_err("resources/list", &e))?;
            // Templates are optional even for servers with resources.
            let templates = service
                .peer()
                .list_all_resource_templates()
                .await
                .unwrap_or_default();
            (resources, templates)
        } else {
            (Vec::new(), Vec::new())
        };
        tracing::info!(
            upstream = %name,
            tools = tools.len(),
            prompts = prompts.len(),
            resources = resources.len(),
            "upstream connected"
        );
        Ok(Upstream {
            config,
            service,
            tools,
            prompts,
            resources,
            resource_templates,
        })
    }

    /// Closes the session (and stops a child process).
    pub async fn close(self) {
        let name = self.config.name.clone();
        if let Err(e) = self.service.cancel().await {
            tracing::debug!(upstream = %name, "closing upstream: {e}");
        }
    }
}

/// Connects every enabled upstream concurrently. Upstreams that fail are
/// returned separately so the gateway can serve the others and say which
/// are down.
pub async fn connect_all(
    upstreams: &BTreeMap<String, UpstreamConfig>,
) -> (Vec<Upstream>, Vec<UpstreamError>) {
    let tasks: Vec<_> = upstreams
        .values()
        .filter(|u| u.enabled)
        .cloned()
        .map(|u| tokio::spawn(Upstream::connect(u)))
        .collect();
    let mut ok = Vec::new();
    let mut failed = Vec::new();
    for task in tasks {
        match task.await {
            Ok(Ok(up)) => ok.push(up),
            Ok(Err(e)) => failed.push(e),
            Err(join) => failed.push(UpstreamError::Initialize {
                name: "?".into(),
                reason: join.to_string(),
            }),
        }
    }
    (ok, failed)
}
