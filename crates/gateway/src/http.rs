//! `plangate serve --http`: Streamable HTTP at `/mcp` (stateful sessions,
//! bearer keys, allowed hosts) and `/healthz`.
//!
//! The router is built separately from binding a socket so tests can drive
//! it in process; [`serve`] binds nothing itself — the caller passes the
//! listener, so it decides the address (plangate binds loopback unless told
//! otherwise).

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::routing::get;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::{Gateway, GatewayHandler, auth};

/// The axum app: `/mcp` behind the key middleware, `/healthz` open.
pub fn router(gw: Arc<Gateway>, shutdown: CancellationToken) -> Router {
    let config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(gw.config().gateway.allowed_hosts.clone())
        .with_cancellation_token(shutdown);
    let factory_gw = gw.clone();
    let mcp = StreamableHttpService::new(
        move || Ok(GatewayHandler::http(factory_gw.clone())),
        LocalSessionManager::default().into(),
        config,
    );
    Router::new()
        .route_service("/mcp", mcp)
        .route_layer(axum::middleware::from_fn_with_state(
            gw.clone(),
            auth::require_caller,
        ))
        .route("/healthz", get(healthz))
        .with_state(gw)
}

async fn healthz(State(gw): State<Arc<Gateway>>) -> axum::Json<serde_json::Value> {
    let catalog = gw.catalog();
    axum::Json(json!({
        "status": "ok",
        "upstreams_up": catalog.upstream_names,
        "upstreams_down": gw.down_upstreams().keys().collect::<Vec<_>>(),
    }))
}

/// Serves the router on `listener` until `shutdown` is cancelled.
pub async fn serve(
    gw: Arc<Gateway>,
    listener: tokio::net::TcpListener,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let app = router(gw, shutdown.clone());
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await
}
