//! The credential-free contract that `plangate catalog` prints: what
//! plangate's MCP server advertises — its capabilities, instructions,
//! every gateway tool and the MCP Apps view (docs/design.md §7) — with the
//! digests that pin it, as canonical JSON or an offline HTML page. Above
//! the gateway's tools and the view (`app_view`, whose items are
//! re-exported here), since it describes them all.
//!
//! Everything here is pure: the same config gives the same bytes.

use plangate_config::Config;
use rmcp::model::{ProtocolVersion, Tool};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

pub use crate::app_view::{
    EXTENSION_ID, PLAN_TOOLS, VIEW_HTML, VIEW_MIME, VIEW_NAME, VIEW_URI, extensions, links_view,
    read_view, read_view_json, tool_meta, view_resource,
};

/// The version of the contract document's layout.
pub const CATALOG_FORMAT: u32 = 1;

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
