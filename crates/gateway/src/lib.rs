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
//! process without sockets.

pub mod auth;
pub mod catalog;
pub mod http;
pub mod refusal;
mod server;
pub mod upstream;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, RwLock};

use plangate_config::Config;
use plangate_store::Store;

pub use catalog::{Catalog, CatalogTool};
pub use server::GatewayHandler;
pub use upstream::{Upstream, UpstreamError};

/// The gateway's own tools (DESIGN §5), without the configured prefix.
/// Their names are reserved even before every one of them is served, so an
/// upstream tool can never take a name the gateway will need.
pub const GATEWAY_TOOLS: [&str; 6] = [
    "begin_session",
    "get_plan",
    "discard_plan",
    "apply_plan",
    "exit_plan_mode",
    "end_session",
];

/// A running gateway: config, store, connected upstreams and the catalog
/// built from them. Shared by every client session.
pub struct Gateway {
    config: Config,
    store: Arc<dyn Store>,
    upstreams: RwLock<BTreeMap<String, Arc<Upstream>>>,
    down: RwLock<BTreeMap<String, String>>,
    catalog: RwLock<Arc<Catalog>>,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway").finish_non_exhaustive()
    }
}

impl Gateway {
    /// Connects every enabled upstream and builds the catalog. An upstream
    /// that cannot be reached is logged and left out; the others serve.
    pub async fn build(config: Config, store: Arc<dyn Store>) -> Arc<Gateway> {
        let (connected, failed) = upstream::connect_all(&config.upstreams).await;
        Self::with_upstreams(config, store, connected, failed)
    }

    /// Builds a gateway from upstreams already connected (and the errors of
    /// those that could not be), e.g. over in-process transports in tests.
    pub fn with_upstreams(
        config: Config,
        store: Arc<dyn Store>,
        connected: Vec<Upstream>,
        failed: Vec<UpstreamError>,
    ) -> Arc<Gateway> {
        let mut down = BTreeMap::new();
        for e in failed {
            tracing::error!("{e}");
            let name = match &e {
                UpstreamError::Spawn { name, .. }
                | UpstreamError::BadHeader { name, .. }
                | UpstreamError::Initialize { name, .. }
                | UpstreamError::List { name, .. }
                | UpstreamError::Timeout { name } => name.clone(),
            };
            down.insert(name, e.to_string());
        }
        let upstreams: BTreeMap<String, Arc<Upstream>> = connected
            .into_iter()
            .map(|u| (u.name().to_owned(), Arc::new(u)))
            .collect();
        let list: Vec<Arc<Upstream>> = upstreams.values().cloned().collect();
        let catalog = Catalog::build(&config, &list, &reserved_names(&config));
        Arc::new(Gateway {
            config,
            store,
            upstreams: RwLock::new(upstreams),
            down: RwLock::new(down),
            catalog: RwLock::new(Arc::new(catalog)),
        })
    }

    /// The config the gateway was built from.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The store holding keys (and, later, the event log).
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The current catalog.
    pub fn catalog(&self) -> Arc<Catalog> {
        match self.catalog.read() {
            Ok(c) => c.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// A connected upstream by name.
    pub fn upstream(&self, name: &str) -> Option<Arc<Upstream>> {
        let map = match self.upstreams.read() {
            Ok(m) => m,
            Err(poisoned) => poisoned.into_inner(),
        };
        map.get(name).cloned()
    }

    /// Upstreams that are configured and enabled but not connected, with
    /// the reason.
    pub fn down_upstreams(&self) -> BTreeMap<String, String> {
        match self.down.read() {
            Ok(m) => m.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Closes every upstream session and stops child processes.
    pub async fn shutdown(&self) {
        let ups: Vec<Arc<Upstream>> = {
            let mut map = match self.upstreams.write() {
                Ok(m) => m,
                Err(poisoned) => poisoned.into_inner(),
            };
            std::mem::take(&mut *map).into_values().collect()
        };
        for up in ups {
            if let Ok(up) = Arc::try_unwrap(up) {
                up.close().await;
            }
        }
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
    let handler = GatewayHandler::stdio(gw, token);
    let running = handler
        .serve(rmcp::transport::stdio())
        .await
        .map_err(std::io::Error::other)?;
    running.waiting().await.map_err(std::io::Error::other)?;
    Ok(())
}
