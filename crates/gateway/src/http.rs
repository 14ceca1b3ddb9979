//! `plangate serve --http`: Streamable HTTP at `/mcp` (stateful sessions,
//! bearer keys, allowed hosts), `/healthz`, and the operator's web console
//! at `/console` ([`crate::console`], behind an operator token).
//!
//! The router is built separately from binding a socket so tests can drive
//! it in process; [`serve`] binds nothing itself — the caller passes the
//! listener, so it decides the address (plangate binds loopback unless told
//! otherwise).

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use plangate_core::{AccessCode, ErrorBody};

use crate::hosts::host_allowed;
use crate::session_guard::{self, SessionOwners};
use crate::{Gateway, GatewayHandler, auth};

/// The axum app: `/mcp` behind the key middleware and the session binding
/// ([`crate::session_guard`]; quick answers as JSON: [`crate::quick_json`]), `/console` behind an operator session (never an
/// API key), `/healthz` open.
pub fn router(gw: Arc<Gateway>, shutdown: CancellationToken) -> Router {
    let config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(gw.config().gateway.allowed_hosts.clone())
        .with_allowed_origins(gw.config().gateway.origins())
        .enforce_origin_validation()
        .with_max_request_body_bytes(gw.config().gateway.max_request_bytes)
        .with_cancellation_token(shutdown.clone());
    let factory_gw = gw.clone();
    let manager = Arc::new(LocalSessionManager::default());
    let owners = SessionOwners::new(
        manager.clone(),
        session_guard::Caps {
            total: gw.config().gateway.max_sessions as usize,
            per_key: gw.config().gateway.max_sessions_per_key as usize,
        },
    );
    let mcp = StreamableHttpService::new(
        move || {
            Ok(crate::server::Traced(GatewayHandler::http(
                factory_gw.clone(),
            )))
        },
        manager,
        config,
    );
    // Layers run outermost last-added: the key is resolved, then the
    // session bound to it, before rmcp sees a byte.
    Router::new()
        .route_service("/mcp", mcp)
        .route_layer(axum::middleware::from_fn(crate::quick_json::answer_quickly))
        .route_layer(axum::middleware::from_fn_with_state(
            owners,
            session_guard::bind,
        ))
        .route_layer(axum::middleware::from_fn_with_state(
            gw.clone(),
            crate::limits::cap_body,
        ))
        .route_layer(axum::middleware::from_fn_with_state(
            gw.clone(),
            auth::require_caller,
        ))
        .merge(crate::operator_mcp::routes(gw.clone(), shutdown.clone()))
        .merge(crate::console::routes())
        .merge(
            // They name upstreams and tools: only for hosts this gateway
            // answers to, so a page elsewhere cannot read them through DNS
            // rebinding.
            Router::new()
                .route("/readyz", get(readyz))
                .route("/metrics", get(metrics))
                .route_layer(axum::middleware::from_fn_with_state(
                    gw.clone(),
                    allowed_host_only,
                )),
        )
        .route("/healthz", get(healthz))
        .route(
            "/.well-known/oauth-protected-resource",
            get(protected_resource),
        )
        .route(
            "/.well-known/oauth-protected-resource/{*path}",
            get(protected_resource),
        )
        // Every route's body, read by whoever reads it, ends within
        // `body_read_timeout` of the request's head.
        .layer(axum::middleware::from_fn_with_state(
            gw.clone(),
            crate::limits::body_deadline,
        ))
        .with_state(gw)
}

/// RFC 9728 protected resource metadata, when `[auth.oauth]` is
/// configured: at the path its resource URL gives
/// ([`crate::oauth::metadata_path`]) and at the root form, which clients
/// try next. Public (the same for everyone, readable cross-origin, as
/// browser-based MCP clients fetch it); 404 without OAuth.
async fn protected_resource(State(gw): State<Arc<Gateway>>, uri: axum::http::Uri) -> Response {
    let config = gw.config();
    match &config.auth.oauth {
        Some(oauth)
            if uri.path() == crate::oauth::metadata_path(&oauth.resource)
                || uri.path() == "/.well-known/oauth-protected-resource" =>
        {
            (
                [(axum::http::header::ACCESS_CONTROL_ALLOW_ORIGIN, "*")],
                axum::Json(crate::oauth::metadata(oauth)),
            )
                .into_response()
        }
        Some(_) => crate::http_error::respond(ErrorBody::access(
            AccessCode::NotFound,
            "plangate protects one resource; its metadata is at the path of its resource URL",
        )),
        None => crate::http_error::respond(ErrorBody::access(
            AccessCode::NotFound,
            "plangate takes API keys here, not OAuth ([auth.oauth] is not configured): send `Authorization: Bearer <key>` with a key from `plangate keys create`",
        )),
    }
}

/// Refuses a request whose `Host` is not allowed (403, JSON).
async fn allowed_host_only(
    State(gw): State<Arc<Gateway>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if host_allowed(&gw, request.headers()) {
        return next.run(request).await;
    }
    crate::http_error::respond(ErrorBody::access(
        AccessCode::ForbiddenHost,
        "this Host is not in [gateway] allowed_hosts",
    ))
}

/// Liveness: the process serves HTTP. Always 200.
async fn healthz() -> axum::Json<serde_json::Value> {
    axum::Json(json!({"status": "ok"}))
}

/// Readiness: 200 when every enabled upstream is connected, else 503 with
/// the ones that are not and why.
async fn readyz(State(gw): State<Arc<Gateway>>) -> Response {
    let down = gw.down_upstreams();
    let body = json!({
        "status": if down.is_empty() { "ready" } else { "degraded" },
        "upstreams_up": gw.up_upstreams(),
        "upstreams_down": down,
    });
    let status = if down.is_empty() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, axum::Json(body)).into_response()
}

/// Prometheus text exposition of call counts and latencies.
async fn metrics(State(gw): State<Arc<Gateway>>) -> Response {
    let mut up: std::collections::BTreeMap<String, bool> =
        gw.up_upstreams().into_iter().map(|n| (n, true)).collect();
    for name in gw.down_upstreams().into_keys() {
        up.insert(name, false);
    }
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4",
        )],
        gw.metrics().render(&up),
    )
        .into_response()
}

/// Serves the router on `listener` until `shutdown` is cancelled, then
/// lets open requests finish for a moment.
///
/// Each connection is HTTP/1 with a header-read timeout
/// (`[gateway] header_read_timeout`): a client must send a request's head
/// within it — on a new connection, and on a kept-alive one between
/// requests — or the connection is closed. So neither a slow-headers
/// attack nor idle connections hold sockets and memory; a response being
/// streamed (a long call's event stream) is not cut.
pub async fn serve(
    gw: Arc<Gateway>,
    listener: tokio::net::TcpListener,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let app = router(gw.clone(), shutdown.clone());
    serve_app(gw, listener, shutdown, app).await
}

/// The web console alone (`plangate console`): its page, its operator API
/// and `/healthz`, with no MCP endpoint — for a person reviewing plans of
/// agents whose gateway runs elsewhere (over stdio, in the agent's
/// client). Served as [`serve`] serves the whole app.
pub async fn serve_console(
    gw: Arc<Gateway>,
    listener: tokio::net::TcpListener,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let app = Router::new()
        .merge(crate::console::routes())
        .merge(crate::operator_mcp::routes(gw.clone(), shutdown.clone()))
        .route("/healthz", get(healthz))
        .layer(axum::middleware::from_fn_with_state(
            gw.clone(),
            crate::limits::body_deadline,
        ))
        .with_state(gw.clone());
    serve_app(gw, listener, shutdown, app).await
}

/// Serves `app` on `listener` until `shutdown`, as [`serve`] describes.
async fn serve_app(
    gw: Arc<Gateway>,
    listener: tokio::net::TcpListener,
    shutdown: CancellationToken,
    app: Router,
) -> std::io::Result<()> {
    use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
    use hyper_util::server::conn::auto::Builder;
    use hyper_util::service::TowerToHyperService;
    use tower::ServiceExt as _;

    let header_read_timeout = gw.config().gateway.header_read_timeout;
    if let Ok(local) = listener.local_addr() {
        gw.set_console_url(Some(format!("http://{local}/console")));
    }
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of descriptors, say: wait, then accept again.
                    tracing::warn!("cannot accept a connection: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = shutdown.cancelled() => break,
        };
        // Without TCP_NODELAY, Nagle's algorithm and delayed ACKs hold
        // small MCP responses back for tens of milliseconds (measured: 44
        // ms p50 per call).
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!("cannot set TCP_NODELAY: {e}");
        }
        let service =
            TowerToHyperService::new(app.clone().map_request(
                |r: http::Request<hyper::body::Incoming>| r.map(axum::body::Body::new),
            ));
        let mut builder = Builder::new(TokioExecutor::new());
        builder
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(header_read_timeout);
        let connection = builder
            .serve_connection_with_upgrades(TokioIo::new(stream), service)
            .into_owned();
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::trace!("connection ended: {e}");
            }
        });
    }
    drop(listener);
    // Requests under way finish, within reason.
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), graceful.shutdown()).await;
    Ok(())
}
