//! # plangate-demo-site
//!
//! A small website exposed as an MCP server: pages, menus, options, plugins
//! and snapshots, kept in one JSON state file. It is plangate's demo (the
//! worked example of the design runs against it) and the upstream in
//! plangate's tests.
//!
//! **What it owns.** The site's state file and the MCP tools over it:
//! reads (`list_pages`, `get_page`, `list_menus`, `list_options`,
//! `list_plugins`), writes (`update_page`, which lands on a draft copy;
//! `create_menu_item`, `update_option`, `set_plugin_active`, which are live;
//! `restore_snapshot`), one destructive tool (`delete_page`), and read-only
//! `preview_*` counterparts that say what a write would do and the target's
//! current version. Pages are also readable as `site://pages/{id}`
//! resources.
//!
//! **What it must never do.** Lie in its tool annotations (the gateway
//! classifies tools by them); change anything from a read or preview tool;
//! apply the same operation twice when a call carries an already-seen
//! `_meta["dev.plangate/operation_key"]`; panic or answer a protocol error
//! on bad input (unknown ids are `isError: true` results); write anything
//! to stdout other than the protocol when serving stdio; bind any address
//! other than the one its caller asked for.
//!
//! **Why it is designed so.** Effects must be visible and must survive a
//! restart, because plangate's promises (a planned write did not happen; an
//! applied step happened exactly once) are checked by looking at the site
//! after the fact. So every call loads the file, applies one change and
//! writes it back atomically (temporary file + rename) under an in-process
//! lock, and a per-tool call counter records how many writes really ran.
//! The file is the only state; a second process sharing the same file is
//! not coordinated with (one demo site per file).

pub mod counting;
mod server;
mod state;

use std::path::PathBuf;

use rmcp::ServiceExt;
use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
};
use tokio_util::sync::CancellationToken;

pub use server::{
    DemoSite, ListPagesArgs, MenuItemArgs, OPERATION_KEY_META, PageIdArgs, PluginArgs,
    REPLAYED_META, SnapshotArgs, UpdateOptionArgs, UpdatePageArgs,
};
pub use state::{
    Menu, MenuItem, OperationRecord, Page, PageStatus, Plugin, SITE_URL, SiteOption, SiteState,
    ToolError,
};

/// Why the site could not be opened or its state could not be stored. Kept
/// apart from tool errors: these are the operator's problem (a bad path, a
/// corrupt file), not the caller's.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// The state file could not be read or written.
    #[error("state file {path}: {source}")]
    Io {
        /// The state file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The state file exists but is not a valid demo-site state.
    #[error("state file {path} is not a valid demo-site state: {source}")]
    Corrupt {
        /// The state file.
        path: PathBuf,
        /// What the parser said.
        source: serde_json::Error,
    },
    /// The state could not be serialised (should not happen).
    #[error("could not serialise state: {0}")]
    Serialize(serde_json::Error),
}

/// Serves the site over stdin/stdout until the client disconnects. Logs, if
/// any, must go to stderr: stdout is the protocol.
pub async fn serve_stdio(state_path: PathBuf) -> anyhow::Result<()> {
    let site = DemoSite::open(state_path)?;
    let running = site.serve(rmcp::transport::stdio()).await?;
    running.waiting().await?;
    Ok(())
}

/// Serves the site as Streamable HTTP at `/mcp` on `listener` until
/// `shutdown` is cancelled. Binding is the caller's business, so nothing
/// but the listener it chose is ever exposed.
pub async fn serve_http(
    listener: tokio::net::TcpListener,
    state_path: PathBuf,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let router = http_router(state_path, shutdown.clone())?;
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await?;
    Ok(())
}

/// The axum router serving the site at `/mcp` (stateful sessions kept in
/// memory), for callers that mount it next to other routes. Cancelling
/// `shutdown` closes every session. rmcp's default Host check applies: only
/// loopback host names are accepted, which suits a local demo.
pub fn http_router(
    state_path: PathBuf,
    shutdown: CancellationToken,
) -> Result<axum::Router, DemoError> {
    let site = DemoSite::open(state_path)?;
    let service = StreamableHttpService::new(
        move || Ok(site.clone()),
        LocalSessionManager::default().into(),
        StreamableHttpServerConfig::default().with_cancellation_token(shutdown),
    );
    Ok(axum::Router::new().nest_service("/mcp", service))
}
