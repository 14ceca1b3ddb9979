//! Which `Host` a request may name: the DNS-rebinding rule (`[gateway]
//! allowed_hosts`) that `/mcp`, `/console`, `/readyz` and `/metrics`
//! share. Below the router ([`crate::http`]) and the console, which both
//! check it.

use crate::Gateway;

/// Whether the request's `Host` (without its port) is one config allows —
/// the DNS-rebinding rule `/mcp`, `/console`, `/readyz` and `/metrics`
/// share.
pub(crate) fn host_allowed(gw: &Gateway, headers: &axum::http::HeaderMap) -> bool {
    let Some(host) = headers
        .get(axum::http::header::HOST)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split_once(']').map(|(h, _)| h).unwrap_or(rest)
    } else {
        host.rsplit_once(':').map(|(h, _)| h).unwrap_or(host)
    };
    gw.config()
        .gateway
        .allowed_hosts
        .iter()
        .any(|a| a.eq_ignore_ascii_case(name))
}
