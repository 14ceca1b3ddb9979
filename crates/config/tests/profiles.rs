//! The built-in profile of GitHub's MCP server, tested offline against the
//! tool definitions its own snapshots record
//! (`recorded/github-mcp-server-tools.json`): each profiled tool matches
//! by the server's identity and schema, every pointer the profile uses
//! names a property the tool has, its preview reads with a tool the server
//! offers, and its sentence names the target.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use plangate_config::profiles::{ArgSource, profile_for};
use serde_json::{Value, json};

fn recorded() -> Value {
    serde_json::from_str(include_str!("recorded/github-mcp-server-tools.json")).unwrap()
}

/// The first property a JSON pointer names (`/files/*/path` → `files`).
fn property(pointer: &str) -> &str {
    pointer.trim_start_matches('/').split('/').next().unwrap()
}

#[test]
fn the_github_profile_matches_the_servers_recorded_tools_and_names_their_targets() {
    let recorded = recorded();
    let server = recorded["serverInfo"]["name"].as_str().unwrap();
    let tools = recorded["tools"].as_array().unwrap();
    let schema_of = |name: &str| {
        tools
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("{name} is not recorded"))["inputSchema"]
            .as_object()
            .unwrap()
            .clone()
    };
    let example = json!({
        "owner": "octo", "repo": "site", "path": "docs/intro.md", "content": "hi\n",
        "message": "m", "branch": "main", "title": "Broken link", "issue_number": 7,
        "head": "fix-link", "base": "main", "pullNumber": 12,
        "files": [{"path": "a.md", "content": "a"}],
    });
    for tool in [
        "create_or_update_file",
        "delete_file",
        "push_files",
        "create_issue",
        "add_issue_comment",
        "create_pull_request",
        "merge_pull_request",
    ] {
        let schema = schema_of(tool);
        let none = Default::default();
        let matched = profile_for(&none, Some(server), tool, &schema)
            .unwrap_or_else(|| panic!("{tool}: no profile matched its recorded definition"));
        assert_eq!(matched.name, "github");
        let profile = &matched.tool;
        // The older serverInfo name matches too; another server's does not.
        assert!(profile_for(&none, Some("github-mcp-server"), tool, &schema).is_some());
        assert!(profile_for(&none, Some("gitlab"), tool, &schema).is_none());
        let props = schema["properties"].as_object().unwrap();
        let target = profile.target.as_deref().unwrap();
        assert!(
            props.contains_key(property(target)),
            "{tool}: target {target}"
        );
        if let Some(spec) = &profile.preview {
            assert!(
                tools.iter().any(|t| t["name"] == spec.read.as_str()),
                "{tool}: its preview reads with {}, which the server does not offer",
                spec.read
            );
            for source in spec.arguments.values() {
                let pointers = match source {
                    ArgSource::One(p) => vec![p.clone()],
                    ArgSource::Many(ps) => ps.clone(),
                };
                for p in pointers.iter().filter(|p| !p.starts_with('=')) {
                    assert!(props.contains_key(property(p)), "{tool}: read argument {p}");
                }
            }
            if let Some(text) = spec.text.as_deref().filter(|t| *t != "=") {
                assert!(props.contains_key(property(text)), "{tool}: text {text}");
            }
        }
        // `{@target}` is what the target names, filled in by the gateway.
        let template = profile
            .predicted_effect
            .as_deref()
            .unwrap()
            .replace("{@target}", "a.md");
        let sentence = plangate_core::render_template(&template, &example);
        assert!(!sentence.contains('?'), "{tool}: {sentence}");
        assert!(
            sentence.contains("octo/site") || sentence.contains("octo"),
            "{tool}: {sentence}"
        );
    }
}
