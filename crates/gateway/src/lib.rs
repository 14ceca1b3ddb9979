//! plangate's MCP edge.
//!
//! This crate owns the two MCP faces of plangate: the server that agents
//! connect to (stdio or Streamable HTTP, via rmcp) and the clients that talk
//! to upstream servers (child processes or Streamable HTTP, via rmcp). It
//! converts between MCP and the domain core in exactly one place per
//! direction — [`catalog`] for names and effects, [`refusal`] for refusals —
//! and decides nothing itself that the core can decide.
//!
//! It must never write an argument value to a log line, never hand-write
//! JSON-RPC (rmcp is the protocol layer on both sides), and never let a call
//! through that policy refused: on any doubt (no key, unknown key, store
//! down, upstream down) it fails closed with a clear answer.
//!
//! Building and serving are separate steps ([`Gateway::build`], then
//! [`serve_stdio`] or [`http::router`]), so tests drive the gateway in
//! process without sockets. Every upstream has a supervisor task that
//! connects it, notices when its session ends, and reconnects with backoff;
//! the catalog is rebuilt (and clients told) whenever an upstream comes,
//! goes or changes its lists.

pub mod acting;
pub mod answer;
mod app_view;
pub mod apply;
pub mod apps;
pub mod audit;
pub mod auth;
pub mod call_log;
mod capabilities;
pub mod catalog;
pub mod console;
pub mod deadline;
pub mod edges;
pub mod engine;
mod follow;
mod hosts;
pub mod http;
mod http_error;
pub mod hub;
pub mod key_log;
pub mod limits;
pub mod memory;
pub mod metrics;
pub mod notices;
pub mod notify;
pub mod oauth;
pub mod operator;
pub mod operator_mcp;
#[cfg(test)]
mod page_checks;
pub mod parked;
mod pinning;
pub mod plan;
pub mod policy;
pub mod policy_test;
pub mod preview;
pub mod quick_json;
pub mod rate;
pub mod refusal;
pub mod relay;
mod reload;
mod request_state;
pub mod review;
mod server;
pub mod session_guard;
mod slots;
pub mod stdio;
mod supervisor;
mod sweep;
pub mod telemetry;
mod tool_names;
pub mod tool_pins;
pub mod tools;
pub mod upstream;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use parking_lot::RwLock;
use std::time::Duration;

use plangate_config::Config;
use plangate_core::ToolPins;
use plangate_store::{KeyMaterial, Store};
use tokio_util::sync::CancellationToken;

pub use capabilities::server_capabilities;
pub use catalog::{Catalog, CatalogTool};
pub use edges::{Edges, Ops, ToUpstream};
pub use engine::Engine;
pub use reload::{RESTART_ONLY, Reloaded};
pub use server::GatewayHandler;
use slots::{Slot, SlotState, first_attempts};
pub use upstream::{Connector, Upstream, UpstreamClient, UpstreamError};

/// The gateway's own tools (docs/design.md §5), without the configured prefix.
/// Their names are reserved even before every one of them is served, so an
/// upstream tool can never take a name the gateway will need.
pub const GATEWAY_TOOLS: [&str; 7] = [
    "begin_session",
    "get_plan",
    "discard_plan",
    "apply_plan",
    "exit_plan_mode",
    "end_session",
    "revert",
];

/// A running gateway: config, store, upstream sessions and the catalog
/// built from them. Shared by every client session.
pub struct Gateway {
    /// The config, the store and the logs: everything that is not a
    /// transport ([`engine`]); the gateway derefs to it.
    engine: Engine,
    /// Serializes reloads (a SIGHUP and a file change at once).
    reloading: tokio::sync::Mutex<()>,
    /// The pins as last read: what the catalog is built against.
    pinned: RwLock<Arc<ToolPins>>,
    slots: RwLock<BTreeMap<String, Arc<Slot>>>,
    catalog: RwLock<Arc<Catalog>>,
    hub: hub::Hub,
    parked: parked::Parked,
    keys: auth::KeyCache,
    watch: parking_lot::Mutex<sweep::SweepWatch>,
    metrics: metrics::Metrics,
    trimmer: Arc<memory::Trimmer>,
    shutdown: CancellationToken,
    /// Where this process serves the web console, once `serve --http`
    /// listens: refusals tell a plan-scope agent where its person approves.
    console_url: parking_lot::RwLock<Option<String>>,
    /// Coalescing of repeated refusals in the audit log.
    call_log: call_log::CallLog,
    /// Checks OAuth access tokens (`[auth.oauth]`); holds issuers' keys.
    oauth: oauth::Verifier,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway").finish_non_exhaustive()
    }
}

impl std::ops::Deref for Gateway {
    type Target = Engine;

    fn deref(&self) -> &Engine {
        &self.engine
    }
}

fn read<T: Clone>(lock: &RwLock<T>) -> T {
    lock.read().clone()
}

fn write<T>(lock: &RwLock<T>, value: T) {
    *lock.write() = value;
}

/// How long start-up waits for the upstreams' first connection attempts
/// before plangate serves without the ones still connecting. Long enough
/// for a server started by `npx` or `uvx` from a warm cache; an upstream
/// slower than that joins later (its `startup_timeout` bounds each of its
/// attempts, not the start of plangate).
pub const FIRST_ATTEMPT_WAIT: Duration = Duration::from_secs(5);

impl Gateway {
    /// Starts a supervisor for every enabled upstream in `config` and waits
    /// until each has made its first connection attempt, at most
    /// [`FIRST_ATTEMPT_WAIT`]. Upstreams that cannot be reached in that
    /// time are logged and retried in the background; the others serve.
    pub async fn build(
        config: Config,
        store: Arc<dyn Store>,
        material: KeyMaterial,
    ) -> Arc<Gateway> {
        Self::build_only(config, store, material, |_| true).await
    }

    /// Like [`Gateway::build`], starting only the upstreams in `servers`:
    /// a person's apply at the CLI starts the servers its steps call, not
    /// every server of the config.
    pub async fn build_for(
        config: Config,
        store: Arc<dyn Store>,
        material: KeyMaterial,
        servers: &std::collections::BTreeSet<String>,
    ) -> Arc<Gateway> {
        Self::build_only(config, store, material, |name| servers.contains(name)).await
    }

    /// Starts the enabled upstreams whose name `wanted` takes.
    async fn build_only(
        config: Config,
        store: Arc<dyn Store>,
        material: KeyMaterial,
        wanted: impl Fn(&str) -> bool,
    ) -> Arc<Gateway> {
        let connectors = config
            .enabled_upstreams()
            .filter(|u| wanted(&u.name))
            .map(|u| (u.name.clone(), upstream::connector_for(u)))
            .collect();
        Self::start(config, store, material, connectors).await
    }

    /// Like [`Gateway::build`], with the connector of each upstream given —
    /// e.g. in-process transports in tests. Upstreams without a connector
    /// are not started.
    pub async fn start(
        config: Config,
        store: Arc<dyn Store>,
        material: KeyMaterial,
        connectors: BTreeMap<String, Connector>,
    ) -> Arc<Gateway> {
        let shutdown = CancellationToken::new();
        let slots = config
            .enabled_upstreams()
            .filter(|u| connectors.contains_key(&u.name))
            .map(|u| (u.name.clone(), Slot::new(u.clone(), &shutdown)))
            .collect();
        let gw = Arc::new(Gateway {
            engine: Engine::open(config, store, material),
            reloading: tokio::sync::Mutex::new(()),
            pinned: RwLock::new(Arc::new(ToolPins::default())),
            slots: RwLock::new(slots),
            catalog: RwLock::new(Arc::new(Catalog::default())),
            hub: hub::Hub::default(),
            parked: parked::Parked::default(),
            keys: auth::KeyCache::default(),
            watch: parking_lot::Mutex::new(sweep::SweepWatch::default()),
            metrics: metrics::Metrics::default(),
            trimmer: Arc::default(),
            shutdown,
            console_url: parking_lot::RwLock::new(None),
            call_log: call_log::CallLog::default(),
            oauth: oauth::Verifier::default(),
        });
        // The pins as they stand, before any upstream is judged against them.
        if let Err(e) = gw.reload_pins().await {
            tracing::error!(
                "cannot read the tool pins: {e}; every upstream tool is held back until they can be read"
            );
        }
        let config = gw.config();
        let others = if config.enabled_upstreams().count() > config.down.len() {
            "; the others serve"
        } else {
            ""
        };
        for (name, why) in &config.down {
            tracing::warn!(upstream = %name, "upstream down, not started: {why}{others}");
        }
        let first = gw.supervise(connectors);
        // Serve as soon as the upstreams that start quickly are up: a slow
        // or broken one keeps connecting in the background (`/readyz` says
        // which), and clients hear `list_changed` when it comes.
        let waited = first_attempts(first).await;
        if waited.is_err() {
            let slow: Vec<String> = gw.down_upstreams().into_keys().collect();
            tracing::warn!(
                upstreams = ?slow,
                "still connecting after {}s; serving without them until they are up (GET /readyz says which are down)",
                FIRST_ATTEMPT_WAIT.as_secs()
            );
        }
        gw.rebuild_catalog();
        tokio::spawn(sweep::sweep(Arc::downgrade(&gw)));
        tokio::spawn(follow::follow(Arc::downgrade(&gw)));
        // Where the notifier starts is read before anything is served, so
        // no event of this process's first calls falls before it.
        match notify::Notifier::start(&gw).await {
            Ok(notifier) => {
                tokio::spawn(notify::run(Arc::downgrade(&gw), notifier));
            }
            Err(e) => {
                tracing::warn!("notifications are off: cannot read where the notifier stopped: {e}")
            }
        }
        tokio::spawn(gw.trimmer.clone().run(gw.shutdown.clone()));
        gw
    }

    /// Notes a call for the memory trimmer ([`memory`]): freed memory is
    /// handed back once calls stop for a moment.
    pub fn note_call(&self) {
        self.trimmer.touch();
    }

    /// Routing state for calls in flight.
    pub fn hub(&self) -> &hub::Hub {
        &self.hub
    }

    /// Keys this process authenticated (see [`auth::KeyCache`]).
    pub fn key_cache(&self) -> &auth::KeyCache {
        &self.keys
    }

    /// Calls waiting for a 2026-07-28 client to answer their upstream's
    /// question.
    pub fn parked(&self) -> &parked::Parked {
        &self.parked
    }

    /// Notes where the person reviews: the web console this process
    /// serves, or (over stdio) the one `plangate console` serves from the
    /// same data dir.
    pub fn set_console_url(&self, url: Option<String>) {
        *self.console_url.write() = url;
    }

    /// Who approves a plan and where, in words for a refusal or a step's
    /// note an agent reads: a person, in the web console when this process
    /// serves one. It never names a command, a credential or a variable
    /// that approves (docs/security.md, "An agent with a shell"): an agent
    /// that is told how to say yes will try it. The person learns the CLI
    /// from `--help`, the README and serve's own startup lines.
    pub fn how_to_approve(&self) -> String {
        match self.console_url.read().as_deref() {
            Some(url) => format!(
                "a person reviews and approves it in plangate's web console ({url}); nothing this key can call approves it"
            ),
            None => "a person reviews and approves it outside this session; nothing this key can call approves it".to_owned(),
        }
    }

    /// Where a notification's link opens the console: `[gateway]
    /// public_url`'s `/console` when set (reachable from a phone), else
    /// the console this process serves or knows of; `None` without either.
    pub fn console_link_base(&self) -> Option<String> {
        match &self.config().gateway.public_url {
            Some(url) => Some(format!("{url}/console")),
            None => self.console_url.read().clone(),
        }
    }

    /// The OAuth access-token checker.
    pub fn oauth(&self) -> &oauth::Verifier {
        &self.oauth
    }

    /// The audit log's coalescing of repeated refusals.
    pub fn call_log(&self) -> &call_log::CallLog {
        &self.call_log
    }

    /// Call counters and latencies for `/metrics`.
    pub fn metrics(&self) -> &metrics::Metrics {
        &self.metrics
    }

    /// The current catalog.
    pub fn catalog(&self) -> Arc<Catalog> {
        read(&self.catalog)
    }
}

/// The exposed names of the gateway's own tools.
pub fn reserved_names(config: &Config) -> BTreeSet<String> {
    GATEWAY_TOOLS
        .iter()
        .map(|t| format!("{}{t}", config.gateway.tool_prefix))
        .collect()
}

/// Serves one MCP client over this process's stdin and stdout until it
/// disconnects. `token` is the API key from `PLANGATE_KEY`, if any; it is
/// checked on every request so a revocation takes effect at once.
pub async fn serve_stdio(gw: Arc<Gateway>, token: Option<String>) -> Result<(), std::io::Error> {
    use rmcp::ServiceExt;
    let limit = gw.config().gateway.max_request_bytes;
    let handler = server::Traced(GatewayHandler::stdio(gw, token));
    let (reader, writer) = stdio::transport();
    let running = handler
        .serve((limits::LineCap::new(reader, limit), writer))
        .await
        .map_err(std::io::Error::other)?;
    running.waiting().await.map_err(std::io::Error::other)?;
    Ok(())
}
