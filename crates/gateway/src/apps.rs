//! The MCP Apps view (docs/design.md §7) and the credential-free contract that
//! `plangate catalog` prints.
//!
//! The view is one self-contained HTML5 document, `apps/plan-review.html`,
//! compiled into the binary with `include_str!`, so its bytes are the same
//! in every build and the digests below never move unless the file does.
//! It is display-only: it completes the `ui/initialize` handshake with the
//! host and renders the tool input and result it is sent; it never calls a
//! tool, never touches the network and loads nothing. Its own
//! `Content-Security-Policy` allows exactly its one inline script and one
//! inline style (by SHA-256, checked by a test so they cannot drift) and
//! nothing else.
//!
//! Everything here is pure: the same config gives the same bytes.

use plangate_config::Config;
use rmcp::model::{
    ExtensionCapabilities, JsonObject, MetaObject, ProtocolVersion, ReadResourceResult, Resource,
    ResourceContents, Tool,
};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

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
/// The version of the contract document's layout.
pub const CATALOG_FORMAT: u32 = 1;

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

/// The `_meta` of a plan tool: the nested `ui.resourceUri` with
/// `ui.visibility: ["model"]` (never the deprecated flat `ui/resourceUri`).
pub fn tool_meta() -> MetaObject {
    MetaObject(object(json!({
        "ui": {"resourceUri": VIEW_URI, "visibility": ["model"]}
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

/// `sha256:` + hex SHA-256 of `bytes`.
pub fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// Canonical JSON (RFC 8785) of `v`: sorted keys, no spaces. Every value
/// here is plangate's own, so canonicalisation cannot fail; should it
/// anyway, serde's compact form keeps the output deterministic.
pub fn canonical(v: &Value) -> String {
    plangate_core::canonical_json(v).unwrap_or_else(|_| v.to_string())
}

fn tool_json(tool: &Tool) -> Value {
    serde_json::to_value(tool).unwrap_or(Value::Null)
}

/// The credential-free contract of a gateway built from `config`, as
/// `plangate catalog --json` prints it: server info, protocol versions,
/// capabilities, instructions, every gateway tool (schema, annotations,
/// `_meta`), the view resource and its `resources/read` envelope, plus
/// `digests` of the view's HTML bytes, of the canonical JSON of the read
/// response, and of the canonical JSON of `contract` as a whole.
pub fn catalog(config: &Config) -> Value {
    let prefix = &config.gateway.tool_prefix;
    let tools: Vec<Value> = crate::tools::definitions_for(config, true)
        .iter()
        .map(tool_json)
        .collect();
    let response = read_view_json();
    // The front negotiates every revision rmcp knows (its default
    // `supported_protocol_versions`), 2026-07-28 included.
    let versions: Vec<Value> = ProtocolVersion::KNOWN_VERSIONS
        .iter()
        .map(|v| json!(v.to_string()))
        .collect();
    let contract = json!({
        "format": CATALOG_FORMAT,
        "server_info": {"name": "plangate", "version": env!("CARGO_PKG_VERSION")},
        "protocol_versions": versions,
        "capabilities": serde_json::to_value(crate::server_capabilities()).unwrap_or(Value::Null),
        "instructions": crate::tools::general_instructions(prefix),
        "tools": tools,
        "tools_listed_only_in_plan_mode": [format!("{prefix}exit_plan_mode")],
        "resources": [serde_json::to_value(view_resource()).unwrap_or(Value::Null)],
        "resource_reads": {VIEW_URI: response},
    });
    let digests = json!({
        "html": sha256(VIEW_HTML.as_bytes()),
        "resource_response": sha256(canonical(&response).as_bytes()),
        "contract": sha256(canonical(&contract).as_bytes()),
    });
    json!({"contract": contract, "digests": digests})
}

/// `plangate catalog --json`: the catalog as canonical JSON plus a newline.
pub fn catalog_json(config: &Config) -> String {
    let mut out = canonical(&catalog(config));
    out.push('\n');
    out
}

/// Escapes text for HTML element content and attribute values.
pub fn escape_html(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + s.len() / 8);
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `plangate catalog --html`: an offline review page of the contract — no
/// script, no external asset, a CSP that forbids both — with the digests,
/// every tool, the resource, and an escaped copy of the view's source.
pub fn catalog_html(config: &Config) -> String {
    let doc = catalog(config);
    let c = &doc["contract"];
    let d = &doc["digests"];
    let pretty = |v: &Value| serde_json::to_string_pretty(v).unwrap_or_default();
    let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    let mut h = String::new();
    h.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    h.push_str("<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'\">\n");
    h.push_str(&format!(
        "<title>plangate {} — MCP contract</title>\n",
        escape_html(&s(&c["server_info"]["version"]))
    ));
    h.push_str("<style>body{font:14px/1.45 system-ui,sans-serif;margin:24px;max-width:1100px}code,pre{font:12.5px ui-monospace,monospace}pre{background:#f6f8fa;border:1px solid #d1d9e0;border-radius:6px;padding:8px;white-space:pre-wrap;overflow-wrap:anywhere}table{border-collapse:collapse;width:100%}th{width:9em}h3 code{font-size:15px}td,th{border:1px solid #d1d9e0;padding:4px 8px;text-align:left;vertical-align:top}</style>\n</head>\n<body>\n");
    h.push_str(&format!(
        "<h1>plangate {} — MCP contract</h1>\n<p>What plangate's MCP server advertises, independent of any upstream, key or data dir. Regenerate with <code>plangate catalog --html</code>; compare digests with <code>plangate catalog --json</code>.</p>\n",
        escape_html(&s(&c["server_info"]["version"]))
    ));
    h.push_str("<h2>Digests</h2>\n<table>\n");
    for (label, key, what) in [
        (
            "View HTML",
            "html",
            "SHA-256 of the exact bytes of the view",
        ),
        (
            "resources/read response",
            "resource_response",
            "SHA-256 of the RFC 8785 canonical JSON of the read answer",
        ),
        (
            "Whole contract",
            "contract",
            "SHA-256 of the RFC 8785 canonical JSON of the contract object",
        ),
    ] {
        h.push_str(&format!(
            "<tr><th>{}</th><td><code>{}</code></td><td>{}</td></tr>\n",
            escape_html(label),
            escape_html(&s(&d[key])),
            escape_html(what)
        ));
    }
    h.push_str("</table>\n<h2>Capabilities</h2>\n");
    h.push_str(&format!(
        "<pre>{}</pre>\n",
        escape_html(&pretty(&c["capabilities"]))
    ));
    h.push_str("<h2>Tools</h2>\n");
    let only_plan = &c["tools_listed_only_in_plan_mode"];
    for tool in c["tools"].as_array().into_iter().flatten() {
        let name = s(&tool["name"]);
        let listed = if only_plan
            .as_array()
            .is_some_and(|v| v.contains(&tool["name"]))
        {
            " <em>(listed only while the mode in force plans writes)</em>"
        } else {
            ""
        };
        let compact = |v: Option<&Value>| v.map(canonical).unwrap_or_else(|| "—".into());
        h.push_str(&format!(
            "<h3><code>{}</code>{listed}</h3>\n<p>{}</p>\n<table>\n<tr><th>inputSchema</th><td><pre>{}</pre></td></tr>\n<tr><th>annotations</th><td><pre>{}</pre></td></tr>\n<tr><th>_meta</th><td><pre>{}</pre></td></tr>\n</table>\n",
            escape_html(&name),
            escape_html(&s(&tool["description"])),
            escape_html(&compact(tool.get("inputSchema"))),
            escape_html(&compact(tool.get("annotations"))),
            escape_html(&compact(tool.get("_meta")))
        ));
    }
    h.push_str("<h2>Resource</h2>\n");
    h.push_str(&format!(
        "<pre>{}</pre>\n",
        escape_html(&pretty(&c["resources"]))
    ));
    h.push_str("<h2>Full contract (JSON)</h2>\n<details><summary>Show</summary>\n");
    h.push_str(&format!(
        "<pre>{}</pre>\n</details>\n",
        escape_html(&pretty(c))
    ));
    h.push_str(&format!(
        "<h2>View source</h2>\n<p><code>{}</code> (<code>{}</code>, {} bytes, <code>{}</code>), escaped: it is shown here, never run.</p>\n",
        escape_html(VIEW_URI),
        escape_html(VIEW_MIME),
        VIEW_HTML.len(),
        escape_html(&s(&d["html"]))
    ));
    h.push_str(&format!("<pre>{}</pre>\n", escape_html(VIEW_HTML)));
    h.push_str("</body>\n</html>\n");
    h
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use base64::Engine;

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
        // into the host.
        crate::page_checks::assert_text_only(
            "the view",
            VIEW_HTML,
            &[
                "href=",
                "fetch(",
                "xmlhttprequest",
                "websocket",
                "tools/call",
                "ui/open-link",
                "window.open",
            ],
        );
        let lower = VIEW_HTML.to_lowercase();
        assert_eq!(lower.matches("<script").count(), 1, "one inline script");
        assert_eq!(lower.matches("<style").count(), 1, "one inline style");
        // The CSP meta is the first thing after the charset.
        let csp_at = lower.find("content-security-policy").unwrap();
        assert!(csp_at < lower.find("<title").unwrap());
        assert!(VIEW_HTML.contains("event.source !== window.parent"));
        assert!(VIEW_HTML.contains("protocolVersion: PROTOCOL_VERSION"));
        assert!(VIEW_HTML.contains("\"2026-01-26\""));
    }

    #[test]
    fn the_catalog_is_deterministic_and_its_digests_match() {
        let config = Config::new(
            plangate_config::ConfigSource::Builtin("test"),
            Default::default(),
        );
        let a = catalog_json(&config);
        let b = catalog_json(&config);
        assert_eq!(a, b);
        let doc: Value = serde_json::from_str(&a).unwrap();
        assert_eq!(doc["digests"]["html"], json!(sha256(VIEW_HTML.as_bytes())));
        assert_eq!(
            doc["digests"]["contract"],
            json!(sha256(canonical(&doc["contract"]).as_bytes()))
        );
        let read = &doc["contract"]["resource_reads"][VIEW_URI];
        assert_eq!(read["contents"][0]["text"], json!(VIEW_HTML));
        assert_eq!(
            doc["digests"]["resource_response"],
            json!(sha256(canonical(read).as_bytes()))
        );
        assert_eq!(catalog_html(&config), catalog_html(&config));
        assert!(!catalog_html(&config).contains("<script>"));
    }
}
