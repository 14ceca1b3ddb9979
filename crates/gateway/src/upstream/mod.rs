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

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::process::Stdio;
use std::sync::{Arc, Weak};
use std::time::Duration;

use plangate_config::{Transport, UpstreamConfig, UpstreamProtocol};
use rmcp::model::{
    ClientCapabilities, ClientConfig, CreateMessageRequestParams, CreateMessageResult,
    ElicitRequestParams, ElicitResult, ElicitationAction, ErrorCode, Implementation,
    ListRootsResult, LoggingMessageNotificationParam, ProgressNotificationParam, Prompt,
    ProtocolVersion, Resource, ResourceTemplate, ResourceUpdatedNotificationParam, Tool,
};
use rmcp::service::{NotificationContext, RequestContext, RunningService};
use rmcp::transport::streamable_http_client::{
    StreamableHttpClientTransportConfig, StreamableHttpError,
};
use rmcp::transport::{ConfigureCommandExt, StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, ErrorData, Peer, RoleClient, ServiceExt};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::oneshot;

use crate::Gateway;
use crate::hub::Ask;

mod call;
pub mod oauth;
pub mod related;
mod tls;
pub use call::CallError;
use tls::{http_client, push_sources};

/// The environment variable plangate sets on every upstream it starts,
/// naming it: a `plangate serve` that finds it set was listed as an
/// upstream of a plangate, and refuses to start rather than start itself
/// again and again.
pub const UPSTREAM_MARKER: &str = "PLANGATE_STARTED_AS_UPSTREAM";

/// How many of an upstream's last stderr lines are kept for its errors.
const TAIL_LINES: usize = 20;
/// The longest stderr line kept (in characters); longer ones are cut.
const TAIL_LINE_CHARS: usize = 500;
/// How many stderr lines of one upstream reach plangate's log per second;
/// the rest are counted and said once the flood stops.
const LOG_LINES_PER_SECOND: u32 = 10;

/// The last lines a stdio upstream wrote to stderr in its current (or
/// last) attempt: what a person needs to see when it fails to start
/// ("boom: missing API token"), kept bounded.
#[derive(Clone, Default)]
pub struct StderrTail(Arc<parking_lot::Mutex<std::collections::VecDeque<String>>>);

impl StderrTail {
    fn push(&self, line: &str) {
        let mut lines = self.0.lock();
        if lines.len() == TAIL_LINES {
            lines.pop_front();
        }
        lines.push_back(line.chars().take(TAIL_LINE_CHARS).collect());
    }

    /// The last `n` lines, oldest first, joined by ` | `; `None` if it
    /// wrote nothing.
    pub fn last(&self, n: usize) -> Option<String> {
        let lines = self.0.lock();
        let skip = lines.len().saturating_sub(n);
        let text: Vec<&str> = lines
            .iter()
            .skip(skip)
            .map(String::as_str)
            .filter(|l| !l.trim().is_empty())
            .collect();
        (!text.is_empty()).then(|| text.join(" | "))
    }
}

/// `reason`, followed by what the upstream last wrote to stderr, if
/// anything.
fn with_stderr(reason: String, tail: Option<&StderrTail>) -> String {
    match tail.and_then(|t| t.last(5)) {
        Some(lines) => format!("{reason}; its stderr ended with: {lines}"),
        None => reason,
    }
}
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

/// plangate's client side towards one upstream. It declares elicitation
/// and sampling so upstreams may ask during a call; what they ask is routed
/// to the client whose call is in progress (see [`crate::hub`]). It does
/// not declare roots: an upstream shared by several clients cannot be given
/// one client's roots.
#[derive(Clone)]
pub struct UpstreamClient {
    name: Arc<str>,
    gw: Weak<Gateway>,
    /// What the upstream writes to stderr in this connection attempt.
    stderr: StderrTail,
    /// Where its OAuth credentials are, when there is no gateway to ask
    /// (`config check`).
    vault: Option<oauth::Vault>,
}

impl UpstreamClient {
    /// A handler for upstream `name` reporting to `gw`.
    pub(crate) fn new(name: &str, gw: Weak<Gateway>) -> Self {
        UpstreamClient {
            name: Arc::from(name),
            gw,
            stderr: StderrTail::default(),
            vault: None,
        }
    }

    /// A handler that reports to no gateway (for `config check`).
    pub fn detached(name: &str) -> Self {
        UpstreamClient::new(name, Weak::new())
    }

    /// [`UpstreamClient::detached`], with OAuth credentials from `vault`.
    pub fn detached_with(name: &str, vault: oauth::Vault) -> Self {
        UpstreamClient {
            vault: Some(vault),
            ..UpstreamClient::new(name, Weak::new())
        }
    }

    /// Where this upstream's OAuth credentials are.
    fn vault(&self) -> Option<oauth::Vault> {
        self.vault.clone().or_else(|| {
            self.gw.upgrade().map(|g| oauth::Vault {
                store: g.store().clone(),
                material: g.material().clone(),
            })
        })
    }

    /// Where a request this upstream sent goes (see
    /// [`crate::hub::Hub::ask_target`]); `None` after logging why it goes
    /// nowhere.
    fn ask_sender(
        &self,
        what: &str,
        cx: &mut RequestContext<RoleClient>,
    ) -> Option<tokio::sync::mpsc::Sender<Ask>> {
        // rmcp marks a request with the POST stream it came on (SEP-2260);
        // plangate's own tag says the same for a stream resumed by GET.
        let tagged = related::take(&mut cx.meta.0.0);
        let related = match cx.extensions.get::<rmcp::service::InboundStreamOrigin>() {
            Some(rmcp::service::InboundStreamOrigin::OutboundRequest(id)) => Some(id.clone()),
            _ => tagged,
        };
        let gw = self.gw.upgrade()?;
        match gw.hub().ask_target(&self.name, related.as_ref()) {
            Ok(sender) => Some(sender),
            Err(why) => {
                tracing::info!(upstream = %self.name, "{what} from the upstream declined: {why}");
                None
            }
        }
    }
}

fn declined(what: &str) -> ErrorData {
    ErrorData::new(
        ErrorCode::INVALID_REQUEST,
        format!(
            "plangate declined {what}: no client call to this server is in progress that could answer it"
        ),
        None,
    )
}

async fn relay<T>(
    sender: tokio::sync::mpsc::Sender<Ask>,
    make: impl FnOnce(oneshot::Sender<Result<T, ErrorData>>) -> Ask,
    what: &str,
) -> Result<T, ErrorData> {
    let (tx, rx) = oneshot::channel();
    if sender.send(make(tx)).await.is_err() {
        return Err(declined(what));
    }
    match tokio::time::timeout(ASK_TIMEOUT, rx).await {
        Ok(Ok(answer)) => answer,
        _ => Err(declined(what)),
    }
}

impl ClientHandler for UpstreamClient {
    fn get_info(&self) -> ClientConfig {
        let capabilities: ClientCapabilities = serde_json::from_value(
            serde_json::json!({"elicitation": {"form": {}}, "sampling": {}}),
        )
        .unwrap_or_default();
        ClientConfig::new(
            capabilities,
            Implementation::new("plangate", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::V_2025_11_25)
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        mut cx: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        match self.ask_sender("elicitation", &mut cx) {
            Some(sender) => relay(sender, |tx| Ask::Elicit(request, tx), "elicitation").await,
            None => Ok(ElicitResult::new(ElicitationAction::Decline)),
        }
    }

    async fn create_message(
        &self,
        request: CreateMessageRequestParams,
        mut cx: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        match self.ask_sender("sampling", &mut cx) {
            Some(sender) => relay(sender, |tx| Ask::Sample(request, tx), "sampling").await,
            None => Err(declined("sampling")),
        }
    }

    async fn list_roots(
        &self,
        mut cx: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, ErrorData> {
        match self.ask_sender("roots/list", &mut cx) {
            Some(sender) => relay(sender, Ask::Roots, "roots/list").await,
            None => Err(declined("roots/list")),
        }
    }

    #[allow(deprecated)]
    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        mut cx: NotificationContext<RoleClient>,
    ) {
        let related = related::take(&mut cx.meta.0.0);
        if let Some(gw) = self.gw.upgrade() {
            crate::notices::log_message(&gw, &self.name, related.as_ref(), params).await;
        }
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _cx: NotificationContext<RoleClient>,
    ) {
        if let Some(gw) = self.gw.upgrade() {
            crate::notices::resource_updated(&gw, &self.name, &params.uri).await;
        }
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _cx: NotificationContext<RoleClient>,
    ) {
        if let Some(gw) = self.gw.upgrade() {
            gw.hub().progress(&self.name, params);
        }
    }

    async fn on_tool_list_changed(&self, _cx: NotificationContext<RoleClient>) {
        tracing::info!(upstream = %self.name, "upstream tool list changed");
        if let Some(gw) = self.gw.upgrade() {
            let name = self.name.to_string();
            // Refresh outside the notification handler: it sends requests
            // over this very connection.
            tokio::spawn(async move { gw.refresh_upstream(&name).await });
        }
    }

    async fn on_resource_list_changed(&self, _cx: NotificationContext<RoleClient>) {
        if let Some(gw) = self.gw.upgrade() {
            let name = self.name.to_string();
            tokio::spawn(async move { gw.refresh_upstream(&name).await });
        }
    }

    async fn on_prompt_list_changed(&self, _cx: NotificationContext<RoleClient>) {
        if let Some(gw) = self.gw.upgrade() {
            let name = self.name.to_string();
            tokio::spawn(async move { gw.refresh_upstream(&name).await });
        }
    }
}

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

async fn connect_configured(
    config: &UpstreamConfig,
    http: Option<Result<reqwest::Client, UpstreamError>>,
    client: UpstreamClient,
) -> Result<Session, UpstreamError> {
    let name = config.name.clone();
    let init_err = |e: &dyn std::fmt::Display| UpstreamError::Initialize {
        name: name.clone(),
        reason: without_type_names(&e.to_string()),
    };
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
                c.env(UPSTREAM_MARKER, &name);
                if let Some(dir) = cwd {
                    c.current_dir(dir);
                }
                c.kill_on_drop(true);
            });
            let (transport, stderr) = TokioChildProcess::builder(cmd)
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|e| UpstreamError::Spawn {
                    name: name.clone(),
                    command: command.clone(),
                    reason: e.to_string(),
                })?;
            let tail = Some(client.stderr.clone());
            let reader = stderr.map(|stderr| {
                let upstream = name.clone();
                let tail = tail.clone();
                tokio::spawn(async move {
                    let mut lines = BufReader::new(stderr).lines();
                    let mut window = std::time::Instant::now();
                    let (mut shown, mut hidden) = (0u32, 0u32);
                    while let Ok(Some(line)) = lines.next_line().await {
                        if let Some(t) = &tail {
                            t.push(&line);
                        }
                        if window.elapsed() >= Duration::from_secs(1) {
                            if hidden > 0 {
                                tracing::info!(upstream = %upstream, "upstream stderr: {hidden} more line(s) not logged (over {LOG_LINES_PER_SECOND}/s)");
                            }
                            window = std::time::Instant::now();
                            (shown, hidden) = (0, 0);
                        }
                        if shown < LOG_LINES_PER_SECOND {
                            shown += 1;
                            let line: String = line.chars().take(TAIL_LINE_CHARS).collect();
                            tracing::info!(upstream = %upstream, "upstream stderr: {line}");
                        } else {
                            hidden += 1;
                        }
                    }
                })
            });
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
                    Err(init_err(&with_stderr(reason, tail.as_ref())))
                }
            }
        }
        Transport::Http {
            url,
            headers,
            ca_file,
        } => {
            // The upstream's own client; if it could not be built (a bad
            // ca_file, say), try again, so a fixed file is picked up at the
            // next reconnection.
            let http = match http {
                Some(Ok(built)) => built,
                Some(Err(_)) | None => http_client(&name, url, ca_file.as_deref())?,
            };
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
            let transport_config =
                StreamableHttpClientTransportConfig::with_uri(url.as_str()).custom_headers(custom);
            let shaken = match &config.oauth {
                None => {
                    let transport = StreamableHttpClientTransport::with_client(
                        related::Tagging::new(http),
                        transport_config,
                    );
                    let transport = OrderedProgress::new(transport, &client);
                    handshake(client, transport, config.protocol).await
                }
                // A machine client asks for its own tokens when needed.
                Some(settings)
                    if settings.grant == plangate_config::OAuthGrant::ClientCredentials =>
                {
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
                        init_err(&"its OAuth credentials are in plangate's store, which this command has not opened")
                    })?;
                    let manager = oauth::manager_for(config, url, settings, vault).await?;
                    let auth = rmcp::transport::auth::AuthClient::new(
                        related::Tagging::new(http),
                        manager,
                    );
                    let watched = auth.auth_manager.clone();
                    let transport =
                        StreamableHttpClientTransport::with_client(auth, transport_config);
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
            };
            shaken.map_err(|e| {
                if let Some(refusal) = oauth::door_refusal_at_start(&e) {
                    return init_err(&refusal.at_start(&name, config.oauth.is_some()));
                }
                // A TLS failure (an unknown issuer, say) is named only by
                // the innermost errors under reqwest's, which rmcp does not
                // chain as sources: dig them out.
                let mut reason = e.to_string();
                if let rmcp::service::ClientInitializeError::TransportError { error, .. } = &e {
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
                init_err(&reason)
            })
        }
    }
}

/// `text` (an rmcp error's words) without the Rust type names rmcp puts
/// in (`Transport [plangate_gateway::upstream::OrderedProgress<…>] error:
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

/// Hands an upstream's progress notifications to the hub as they come off
/// the wire, in order, before any later message (such as the call's
/// result) reaches rmcp — which runs notification handlers in spawned
/// tasks and so could deliver a call's result before the progress the
/// upstream sent just ahead of it.
struct OrderedProgress<T> {
    inner: T,
    name: Arc<str>,
    gw: Weak<Gateway>,
}

impl<T> OrderedProgress<T> {
    fn new(inner: T, client: &UpstreamClient) -> Self {
        OrderedProgress {
            inner,
            name: client.name.clone(),
            gw: client.gw.clone(),
        }
    }
}

impl<T: rmcp::transport::Transport<RoleClient>> rmcp::transport::Transport<RoleClient>
    for OrderedProgress<T>
{
    type Error = T::Error;

    fn send(
        &mut self,
        item: rmcp::service::TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<rmcp::service::RxJsonRpcMessage<RoleClient>> {
        loop {
            let message = self.inner.receive().await?;
            if let rmcp::model::JsonRpcMessage::Notification(n) = &message
                && let rmcp::model::ServerNotification::ProgressNotification(p) = &n.notification
                && let Some(gw) = self.gw.upgrade()
            {
                gw.hub().progress(&self.name, p.params.clone());
                continue;
            }
            return Some(message);
        }
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
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
