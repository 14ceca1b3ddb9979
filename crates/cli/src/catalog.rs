//! `plangate catalog [--json | --html]`: the credential-free contract of
//! plangate's MCP server — capabilities, every gateway tool with its schema
//! and `_meta`, the MCP Apps view resource and its `resources/read`
//! envelope, and digests of the view's HTML, of that read response and of
//! the whole contract (docs/design.md §7). It needs no key, no data dir and no
//! upstream: only the config's tool prefix and modes shape it, and the same
//! config always prints the same bytes.

use anyhow::Result;
use plangate_config::Config;
use plangate_gateway::apps;
use serde_json::Value;

/// How to print the catalog.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// A short table: tools, resource, digests.
    Table,
    /// The catalog as canonical JSON (RFC 8785).
    Json,
    /// An offline review page, with an escaped copy of the view's source.
    Html,
}

/// The catalog of `config` in `format`, exactly as printed.
pub fn render(config: &Config, format: Format) -> String {
    match format {
        Format::Json => apps::catalog_json(config),
        Format::Html => apps::catalog_html(config),
        Format::Table => table(&apps::catalog(config)),
    }
}

/// Prints the catalog to stdout.
pub fn run(config: &Config, format: Format) -> Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(render(config, format).as_bytes())?;
    out.flush()?;
    Ok(())
}

fn table(doc: &Value) -> String {
    let c = &doc["contract"];
    let d = &doc["digests"];
    let s = |v: &Value| v.as_str().unwrap_or("").to_owned();
    let mut out = format!(
        "plangate {} MCP contract (protocol {})\n\n",
        s(&c["server_info"]["version"]),
        c["protocol_versions"]
            .as_array()
            .map(|v| v.iter().map(s).collect::<Vec<_>>().join(", "))
            .unwrap_or_default()
    );
    let extensions = c["capabilities"]["extensions"]
        .as_object()
        .map(|m| m.keys().cloned().collect::<Vec<_>>().join(", "))
        .unwrap_or_default();
    out.push_str(&format!("extensions: {extensions}\n\n"));
    let only_plan: Vec<String> = c["tools_listed_only_in_plan_mode"]
        .as_array()
        .map(|v| v.iter().map(s).collect())
        .unwrap_or_default();
    let tools: Vec<&Value> = c["tools"]
        .as_array()
        .map(|v| v.iter().collect())
        .unwrap_or_default();
    let width = tools
        .iter()
        .map(|t| s(&t["name"]).len())
        .max()
        .unwrap_or(4)
        .max(4);
    out.push_str(&format!("{:width$}  {:9}  VIEW\n", "TOOL", "READ-ONLY"));
    for t in tools {
        let name = s(&t["name"]);
        let read_only = t["annotations"]["readOnlyHint"].as_bool().unwrap_or(false);
        let view = s(&t["_meta"]["ui"]["resourceUri"]);
        let note = if only_plan.contains(&name) {
            " (listed in plan mode only)"
        } else {
            ""
        };
        out.push_str(&format!(
            "{name:width$}  {:9}  {}{note}\n",
            if read_only { "yes" } else { "no" },
            if view.is_empty() {
                "-".to_owned()
            } else {
                view
            },
        ));
    }
    out.push('\n');
    for r in c["resources"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "resource: {} ({}, {} bytes)\n",
            s(&r["uri"]),
            s(&r["mimeType"]),
            r["size"]
        ));
    }
    out.push_str(&format!(
        "\ndigest html:              {}\ndigest resource response: {}\ndigest contract:          {}\n",
        s(&d["html"]),
        s(&d["resource_response"]),
        s(&d["contract"])
    ));
    out.push_str("\n--json prints the whole contract; --html an offline review page.\n");
    out
}
