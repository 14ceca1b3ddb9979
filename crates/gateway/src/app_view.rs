//! The MCP Apps view (docs/design.md §7): one self-contained HTML5
//! document, `apps/plan-review.html`, its resource, and the `_meta.ui`
//! that links the plan tools to it. Apart from the contract that `plangate
//! catalog` prints ([`crate::apps`]) and below the gateway's tools and the
//! server, which list it, declare it and read it.
//!
//! The document is compiled into the binary with `include_str!`, so its
//! bytes are the same in every build and the digests of the contract never
//! move unless the file does. It is display-only: it completes the
//! `ui/initialize` handshake with the host and renders the tool input and
//! result it is sent; it never calls a tool, never touches the network and
//! loads nothing. Its own `Content-Security-Policy` allows exactly its one
//! inline script and one inline style (by SHA-256, checked by a test so
//! they cannot drift) and nothing else.

use rmcp::model::{
    ExtensionCapabilities, JsonObject, MetaObject, ReadResourceResult, Resource, ResourceContents,
};
use serde_json::{Value, json};

/// The view's resource URI.
pub const VIEW_URI: &str = "ui://plangate/plan-review";
/// The MCP Apps HTML profile.
pub const VIEW_MIME: &str = "text/html;profile=mcp-app";
/// The MCP Apps extension id, under `capabilities.extensions`.
pub const EXTENSION_ID: &str = "io.modelcontextprotocol/ui";
/// The view's resource name in `resources/list`.
pub const VIEW_NAME: &str = "plangate-plan-review";
/// The view, byte for byte.
pub const VIEW_HTML: &str = include_str!("apps/plan-review.html");

/// The gateway tools that link the view (without the prefix): the ones
/// whose answers are a plan, a planned step's fate or a receipt.
pub const PLAN_TOOLS: [&str; 3] = ["get_plan", "apply_plan", "exit_plan_mode"];

fn object(v: Value) -> JsonObject {
    match v {
        Value::Object(map) => map,
        _ => JsonObject::new(),
    }
}

/// `capabilities.extensions` of plangate's server:
/// `{"io.modelcontextprotocol/ui": {"mimeTypes": ["text/html;profile=mcp-app"]}}`.
pub fn extensions() -> ExtensionCapabilities {
    ExtensionCapabilities::from([(
        EXTENSION_ID.to_owned(),
        object(json!({"mimeTypes": [VIEW_MIME]})),
    )])
}

/// The `_meta` of plan tool `suffix`: the nested `ui.resourceUri` (never
/// the deprecated flat `ui/resourceUri`) with `ui.visibility: ["model"]` —
/// and `["model", "app"]` for `get_plan` alone, the one tool the view may
/// call (through its host): while a review asked elsewhere is open, it
/// reads the plan to show the person's answer when it comes. No tool that
/// changes anything is the view's to call.
pub fn tool_meta(suffix: &str) -> MetaObject {
    let visibility = if suffix == "get_plan" {
        json!(["model", "app"])
    } else {
        json!(["model"])
    };
    MetaObject(object(json!({
        "ui": {"resourceUri": VIEW_URI, "visibility": visibility}
    })))
}

/// Whether the gateway tool `suffix` (name without prefix) links the view.
pub fn links_view(suffix: &str) -> bool {
    PLAN_TOOLS.contains(&suffix)
}

/// `_meta.ui` of the resource and its content: no external domains of any
/// kind, no permissions (the host's restrictive default CSP applies, and
/// the document's own CSP is stricter still).
fn ui_meta() -> MetaObject {
    MetaObject(object(json!({
        "ui": {
            "csp": {
                "connectDomains": [],
                "resourceDomains": [],
                "frameDomains": [],
                "baseUriDomains": []
            },
            "permissions": {},
            "prefersBorder": true
        }
    })))
}

/// The view's entry in `resources/list`.
pub fn view_resource() -> Resource {
    Resource::new(VIEW_URI, VIEW_NAME)
        .with_title("plangate plan review")
        .with_description(
            "A display-only view of plangate's plan tools (get_plan, apply_plan, exit_plan_mode): status, steps, digests, effects, where each step lands, approval notes and warnings, with the exact input and the full JSON. No tool calls, no network.",
        )
        .with_mime_type(VIEW_MIME)
        .with_size(VIEW_HTML.len() as u64)
        .with_meta(ui_meta())
}

/// The view's `resources/read` answer.
pub fn read_view() -> ReadResourceResult {
    ReadResourceResult::new(vec![ResourceContents::TextResourceContents {
        uri: VIEW_URI.to_owned(),
        mime_type: Some(VIEW_MIME.to_owned()),
        text: VIEW_HTML.to_owned(),
        meta: Some(ui_meta()),
    }])
}

/// The `resources/read` answer as a 2025-11-25 client receives it (no
/// `resultType`, which rmcp drops for peers before 2026-07-28).
pub fn read_view_json() -> Value {
    let mut v = serde_json::to_value(read_view()).unwrap_or(Value::Null);
    if let Value::Object(map) = &mut v {
        map.remove("resultType");
    }
    v
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use base64::Engine;
    use sha2::{Digest, Sha256};

    fn between<'a>(doc: &'a str, open: &str, close: &str) -> &'a str {
        let start = doc.find(open).expect(open) + open.len();
        let end = doc[start..].find(close).expect(close) + start;
        &doc[start..end]
    }

    fn csp_hash(body: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(Sha256::digest(body.as_bytes()))
    }

    #[test]
    fn the_csp_allows_exactly_the_inline_script_and_style() {
        let csp = between(
            VIEW_HTML,
            "<meta http-equiv=\"Content-Security-Policy\" content=\"",
            "\"",
        );
        let script = csp_hash(between(VIEW_HTML, "<script>", "</script>"));
        let style = csp_hash(between(VIEW_HTML, "<style>", "</style>"));
        assert!(
            csp.contains(&format!("script-src 'sha256-{script}';")),
            "the view's script changed: set script-src 'sha256-{script}' in plan-review.html's CSP"
        );
        assert!(
            csp.contains(&format!("style-src 'sha256-{style}';")),
            "the view's style changed: set style-src 'sha256-{style}' in plan-review.html's CSP"
        );
        for directive in [
            "default-src 'none'",
            "connect-src 'none'",
            "img-src 'none'",
            "frame-src 'none'",
            "form-action 'none'",
            "base-uri 'none'",
        ] {
            assert!(csp.contains(directive), "{directive} missing from {csp}");
        }
        assert!(!csp.contains("unsafe"), "{csp}");
    }

    #[test]
    fn the_view_is_self_contained_and_renders_text_only() {
        // Besides what no page may do: no link, no network, no call back
        // into the host but one: reading the plan.
        crate::page_checks::assert_text_only(
            "the view",
            VIEW_HTML,
            &[
                "href=",
                "fetch(",
                "xmlhttprequest",
                "websocket",
                "ui/open-link",
                "ui/message",
                "ui/update-model-context",
                "resources/read",
                "window.open",
            ],
        );
        let lower = VIEW_HTML.to_lowercase();
        // One tool call, of get_plan alone, with no arguments.
        assert_eq!(lower.matches("tools/call").count(), 1);
        assert!(
            VIEW_HTML.contains(
                r#"method: "tools/call", params: { name: following.name, arguments: {} }"#
            )
        );
        assert_eq!(VIEW_HTML.matches("following = { name:").count(), 1);
        assert!(VIEW_HTML.contains("following = { name: name,"));
        assert!(VIEW_HTML.contains(r#"return shownTool.slice(0, -s.length) + "get_plan";"#));
        assert_eq!(lower.matches("<script").count(), 1, "one inline script");
        assert_eq!(lower.matches("<style").count(), 1, "one inline style");
        // The CSP meta is the first thing after the charset.
        let csp_at = lower.find("content-security-policy").unwrap();
        assert!(csp_at < lower.find("<title").unwrap());
        assert!(VIEW_HTML.contains("event.source !== window.parent"));
        assert!(VIEW_HTML.contains("protocolVersion: PROTOCOL_VERSION"));
        assert!(VIEW_HTML.contains("\"2026-01-26\""));
    }
}
