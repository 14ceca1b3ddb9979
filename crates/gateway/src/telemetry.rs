//! OpenTelemetry spans for the MCP traffic plangate carries, following the
//! OpenTelemetry semantic conventions for MCP (status: development): a
//! server span per request from a client (`tools/call write_file`), a
//! client span per call plangate makes to an upstream, with the W3C trace
//! context taken from the client's `params._meta` (`traceparent`,
//! `tracestate`) and put into the upstream's, as the conventions say to
//! propagate it — so the same context reaches stdio and HTTP upstreams.
//! Planning and applying add their plan digest and step id to the spans
//! they run in, which is how a plan's trace and its apply's are linked.
//!
//! Spans carry names, ids and codes only — never an argument value, a
//! result, a key or a session id (a session is named by a hash of its id).
//!
//! Off unless the binary turns it on ([`enable`], when
//! `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is
//! set): then no span is made at all, and the request path pays one
//! relaxed atomic load. The spans are `tracing` spans of target
//! [`TARGET`]; the binary exports that target alone over OTLP.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator as _};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use rmcp::model::{RequestId, RequestMetaObject};
use sha2::{Digest as _, Sha256};
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// The `tracing` target of every span meant for OpenTelemetry.
pub const TARGET: &str = "plangate::otel";

static ENABLED: AtomicBool = AtomicBool::new(false);

/// Turns span making on, for the rest of the process.
pub fn enable() {
    ENABLED.store(true, Ordering::Relaxed);
}

/// Whether spans are made.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// A JSON-RPC id as the `jsonrpc.request.id` attribute (its string form).
fn request_id(id: &RequestId) -> String {
    match id {
        RequestId::Number(n) => n.to_string(),
        RequestId::String(s) => s.to_string(),
    }
}

/// A session id as an attribute: the first 16 hex digits of its SHA-256
/// (a session id is a credential of its own over HTTP).
pub fn session_hash(session: &str) -> String {
    hex::encode(&Sha256::digest(session.as_bytes())[..8])
}

struct MetaCarrier<'a>(&'a RequestMetaObject);

impl Extractor for MetaCarrier<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.as_str())
    }
    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(String::as_str).collect()
    }
}

struct MapCarrier(HashMap<String, String>);

impl Injector for MapCarrier {
    fn set(&mut self, key: &str, value: String) {
        self.0.insert(key.to_owned(), value);
    }
}

/// What a request span says about where the request came from.
pub struct Incoming<'a> {
    /// `tools/call`, `tools/list`, …
    pub method: &'a str,
    /// The tool, prompt or resource template asked for, if any.
    pub target: Option<&'a str>,
    /// Its JSON-RPC id.
    pub id: &'a RequestId,
    /// The MCP session (HTTP), if any.
    pub session: Option<&'a str>,
    /// `pipe` (stdio) or `tcp` (HTTP).
    pub transport: &'static str,
    /// The protocol revision the client speaks, if known.
    pub protocol: Option<String>,
    /// The request's `_meta`, where a client puts its trace context.
    pub meta: &'a RequestMetaObject,
}

fn span_name(method: &str, target: Option<&str>) -> String {
    match target {
        Some(t) => format!("{method} {t}"),
        None => method.to_owned(),
    }
}

/// The server span of one request from a client, continuing the client's
/// trace when its `_meta` carries one. [`Span::none`] while off.
pub fn request_span(incoming: &Incoming<'_>) -> Span {
    if !enabled() {
        return Span::none();
    }
    let span = tracing::info_span!(
        target: TARGET,
        "mcp request",
        otel.name = %span_name(incoming.method, incoming.target),
        otel.kind = "server",
        otel.status_code = tracing::field::Empty,
        "mcp.method.name" = incoming.method,
        "jsonrpc.request.id" = %request_id(incoming.id),
        "network.transport" = incoming.transport,
        "error.type" = tracing::field::Empty,
    );
    if let Some(session) = incoming.session {
        span.set_attribute("mcp.session.id", session_hash(session));
    }
    if let Some(protocol) = &incoming.protocol {
        span.set_attribute("mcp.protocol.version", protocol.clone());
    }
    tool_attributes(&span, incoming.method, incoming.target);
    if incoming.meta.contains_key("traceparent") {
        let parent = TraceContextPropagator::new().extract(&MetaCarrier(incoming.meta));
        let _ = span.set_parent(parent);
    }
    span
}

fn tool_attributes(span: &Span, method: &str, target: Option<&str>) {
    match (method, target) {
        ("tools/call", Some(tool)) => {
            span.set_attribute("gen_ai.tool.name", tool.to_owned());
            span.set_attribute("gen_ai.operation.name", "execute_tool");
        }
        ("prompts/get", Some(prompt)) => {
            span.set_attribute("gen_ai.prompt.name", prompt.to_owned());
        }
        _ => {}
    }
}

/// The client span of one call plangate makes to `upstream`, a child of
/// the span in force. [`Span::none`] while off.
pub fn upstream_span(upstream: &str, tool: &str, transport: &'static str) -> Span {
    if !enabled() {
        return Span::none();
    }
    let span = tracing::info_span!(
        target: TARGET,
        "mcp upstream call",
        otel.name = %span_name("tools/call", Some(tool)),
        otel.kind = "client",
        otel.status_code = tracing::field::Empty,
        "mcp.method.name" = "tools/call",
        "network.transport" = transport,
        "plangate.upstream" = upstream,
        "error.type" = tracing::field::Empty,
    );
    tool_attributes(&span, "tools/call", Some(tool));
    span
}

/// An internal span of plangate's own work (`plangate apply`), a child of
/// the span in force. [`Span::none`] while off.
pub fn internal_span(name: &str) -> Span {
    if !enabled() {
        return Span::none();
    }
    tracing::info_span!(target: TARGET, "plangate", otel.name = name, otel.kind = "internal")
}

/// Marks the span in force as ended in error `kind` (a stable code: a
/// JSON-RPC error code, `tool_error`, or one of plangate's codes).
pub fn failed(span: &Span, kind: &str) {
    if span.is_none() {
        return;
    }
    span.record("otel.status_code", "ERROR");
    span.record("error.type", kind);
}

/// A failed upstream request's `error.type`: the JSON-RPC error code, or
/// what kept the answer from coming.
pub fn service_error_kind(e: &rmcp::service::ServiceError) -> String {
    use rmcp::service::ServiceError;
    match e {
        ServiceError::McpError(e) => e.code.0.to_string(),
        ServiceError::Timeout { .. } => "timeout".to_owned(),
        ServiceError::Cancelled { .. } => "cancelled".to_owned(),
        _ => plangate_core::Code::UpstreamUnavailable.as_str().to_owned(),
    }
}

/// Adds a plangate attribute (`plangate.plan.digest`, `plangate.step.id`,
/// …) to the span in force.
pub fn note(key: &'static str, value: impl Into<String>) {
    if !enabled() {
        return;
    }
    Span::current().set_attribute(key, value.into());
}

/// The `_meta` fields that carry the span in force to an upstream
/// (`traceparent`, `tracestate`), added to `meta`. Nothing while off.
pub fn inject(meta: &mut serde_json::Map<String, serde_json::Value>) {
    if !enabled() {
        return;
    }
    let mut carrier = MapCarrier(HashMap::new());
    TraceContextPropagator::new().inject_context(&Span::current().context(), &mut carrier);
    for (k, v) in carrier.0 {
        meta.insert(k, serde_json::Value::String(v));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_is_named_by_a_hash_never_its_id() {
        let h = session_hash("3f0e5a8c-secret-session");
        assert_eq!(h.len(), 16);
        assert!(!h.contains("secret"));
        assert_eq!(h, session_hash("3f0e5a8c-secret-session"));
    }

    #[test]
    fn nothing_is_made_while_off() {
        assert!(!enabled());
        assert!(upstream_span("fs", "write_file", "pipe").is_none());
        let mut meta = serde_json::Map::new();
        inject(&mut meta);
        assert!(meta.is_empty());
    }
}
