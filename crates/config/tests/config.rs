//! The config contract: what parses, what each mistake says, and that JSON
//! from other MCP clients means the same as the equivalent plangate.toml.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use plangate_config::{
    Anonymous, Config, ConfigErrors, ConfigSource, GatewaySettings, Namespace, ToolOverride,
    Transport, UpstreamConfig, load_mcp_json, load_toml, parse_mcp_json, parse_toml,
};
use plangate_core::Effect;

const EXAMPLE: &str = r#"
[gateway]
anonymous = "none"
allowed_hosts = ["localhost", "127.0.0.1", "::1"]
namespace = "auto"
tool_prefix = "plangate_"

[upstreams.site]
command = "node"
args = ["server.js"]
env = { API_TOKEN = "${env:MY_TOKEN}" }
cwd = "/srv/site"
trust_annotations = true
enabled = true

[upstreams.site.tools.update_page]
effect = "write"
enabled = true
"#;

fn env() -> HashMap<String, String> {
    HashMap::from([
        ("MY_TOKEN".to_owned(), "tok-123".to_owned()),
        ("HOME".to_owned(), "/home/me".to_owned()),
        ("DOCS_TOKEN".to_owned(), "docs-456".to_owned()),
    ])
}

fn origin() -> PathBuf {
    PathBuf::from("/etc/plangate/plangate.toml")
}

fn toml_ok(text: &str) -> Config {
    match parse_toml(text, &origin(), &env()) {
        Ok(c) => c,
        Err(e) => panic!("expected a valid config, got:\n{e}"),
    }
}

fn toml_err(text: &str) -> ConfigErrors {
    match parse_toml(text, &origin(), &env()) {
        Ok(c) => panic!("expected errors, got {c:?}"),
        Err(e) => e,
    }
}

fn json_ok(text: &str) -> Config {
    match parse_mcp_json(text, Path::new("/home/me/mcp.json"), &env()) {
        Ok(c) => c,
        Err(e) => panic!("expected a valid config, got:\n{e}"),
    }
}

fn json_err(text: &str) -> ConfigErrors {
    match parse_mcp_json(text, Path::new("/home/me/mcp.json"), &env()) {
        Ok(c) => panic!("expected errors, got {c:?}"),
        Err(e) => e,
    }
}

/// The single error at `key`, or a panic listing them all.
fn error_at<'a>(errors: &'a ConfigErrors, key: &str) -> &'a str {
    let found: Vec<_> = errors.iter().filter(|e| e.key == key).collect();
    assert_eq!(found.len(), 1, "want one error at {key:?}, got:\n{errors}");
    &found[0].message
}

fn stdio(command: &str, args: &[&str]) -> Transport {
    Transport::Stdio {
        command: command.to_owned(),
        args: args.iter().map(|s| s.to_string()).collect(),
        env: BTreeMap::new(),
        cwd: None,
    }
}

// === plangate.toml ===

#[test]
fn the_documented_example_parses() {
    let config = toml_ok(EXAMPLE);
    assert_eq!(config.source, ConfigSource::Toml(origin()));
    assert_eq!(config.gateway, GatewaySettings::default());
    let expected = UpstreamConfig {
        name: "site".to_owned(),
        transport: Transport::Stdio {
            command: "node".to_owned(),
            args: vec!["server.js".to_owned()],
            env: BTreeMap::from([("API_TOKEN".to_owned(), "tok-123".to_owned())]),
            cwd: Some(PathBuf::from("/srv/site")),
        },
        trust_annotations: true,
        enabled: true,
        tools: BTreeMap::from([(
            "update_page".to_owned(),
            ToolOverride {
                effect: Some(Effect::Write),
                enabled: true,
            },
        )]),
    };
    assert_eq!(
        config.upstreams,
        BTreeMap::from([("site".to_owned(), expected)])
    );
    assert!(!config.namespaced());
}

#[test]
fn a_minimal_file_takes_every_default() {
    let config = toml_ok("[upstreams.fs]\ncommand = \"mcp-fs\"\n");
    let g = &config.gateway;
    assert_eq!(g.anonymous, Anonymous::None);
    assert_eq!(g.allowed_hosts, ["localhost", "127.0.0.1", "::1"]);
    assert_eq!(g.namespace, Namespace::Auto);
    assert_eq!(g.tool_prefix, "plangate_");
    let fs = &config.upstreams["fs"];
    assert_eq!(fs.transport, stdio("mcp-fs", &[]));
    assert!(fs.enabled && fs.trust_annotations && fs.tools.is_empty());
}

#[test]
fn gateway_settings_are_read() {
    let config = toml_ok(
        r#"
        [gateway]
        anonymous = "read"
        allowed_hosts = ["Gate.Example.com"]
        namespace = "always"
        tool_prefix = "pg_"
        [upstreams.fs]
        command = "mcp-fs"
        "#,
    );
    assert_eq!(
        config.gateway,
        GatewaySettings {
            anonymous: Anonymous::Read,
            allowed_hosts: vec!["gate.example.com".to_owned()],
            namespace: Namespace::Always,
            tool_prefix: "pg_".to_owned(),
        }
    );
    assert!(config.namespaced());
}

#[test]
fn every_mistake_in_a_file_is_reported_at_once_with_file_and_key() {
    let errors = toml_err(
        r#"
        [gateway]
        anonymous = "public"

        [upstreams.site]
        comand = "node"

        [upstreams.site.tools.update_page]
        effect = "delete"
        "#,
    );
    assert!(errors.iter().all(|e| e.file == origin()), "{errors}");
    assert!(error_at(&errors, "gateway.anonymous").contains("\"public\""));
    assert!(error_at(&errors, "upstreams.site.comand").contains("unknown key \"comand\""));
    assert!(error_at(&errors, "upstreams.site").contains("neither command nor url"));
    let effect = error_at(&errors, "upstreams.site.tools.update_page.effect");
    assert!(
        effect.contains("\"delete\"") && effect.contains("destructive"),
        "{effect}"
    );
    assert_eq!(errors.len(), 4, "{errors}");
}

#[test]
fn errors_display_one_line_each_then_a_count() {
    let errors = toml_err(
        "[gateway]\nanonymous = \"public\"\nnamespace = 3\n[upstreams.a]\ncommand = \"x\"\n",
    );
    assert_eq!(
        errors.to_string(),
        "/etc/plangate/plangate.toml: gateway.anonymous: anonymous \"public\" is not allowed: use \"none\" or \"read\"\n\
         /etc/plangate/plangate.toml: gateway.namespace: must be a string, not an integer\n\
         2 errors in configuration"
    );
}

#[test]
fn an_unknown_key_lists_the_allowed_keys() {
    let errors = toml_err("[upstreams.site]\ncommand = \"node\"\ntrust = true\n");
    assert_eq!(
        error_at(&errors, "upstreams.site.trust"),
        "unknown key \"trust\": allowed keys are command, args, env, cwd, url, headers, trust_annotations, enabled and tools"
    );
    let errors = toml_err("[gateway]\nanon = \"read\"\n[upstreams.a]\ncommand = \"x\"\n");
    assert!(
        error_at(&errors, "gateway.anon")
            .contains("anonymous, allowed_hosts, namespace and tool_prefix")
    );
}

#[test]
fn an_unknown_top_level_table_lists_the_allowed_tables() {
    let errors = toml_err("[modes.careful]\naccess = \"write\"\n[upstreams.a]\ncommand = \"x\"\n");
    assert_eq!(
        error_at(&errors, "modes"),
        "unknown table \"modes\": allowed top-level tables are gateway and upstreams"
    );
}

#[test]
fn a_missing_variable_names_file_key_and_variable() {
    let errors = toml_err(
        "[upstreams.site]\ncommand = \"node\"\nenv = { API_TOKEN = \"${env:NOT_SET}\" }\n",
    );
    assert_eq!(errors.len(), 1, "{errors}");
    let e = &errors.0[0];
    assert_eq!(e.file, origin());
    assert_eq!(e.key, "upstreams.site.env.API_TOKEN");
    assert!(
        e.message.contains("\"NOT_SET\" is not set"),
        "{}",
        e.message
    );
}

#[test]
fn both_variable_forms_expand_in_every_string() {
    let config = toml_ok(
        r#"
        [upstreams.site]
        command = "${HOME}/bin/site"
        args = ["--root", "${env:HOME}/www", "$${literal}"]
        env = { A = "${MY_TOKEN}", B = "x-${env:MY_TOKEN}" }
        cwd = "${HOME}/site"

        [upstreams.docs]
        url = "https://docs.example.com/${HOME}"
        headers = { Authorization = "Bearer ${DOCS_TOKEN}" }
        "#,
    );
    assert_eq!(
        config.upstreams["site"].transport,
        Transport::Stdio {
            command: "/home/me/bin/site".to_owned(),
            args: vec!["--root".into(), "/home/me/www".into(), "${literal}".into()],
            env: BTreeMap::from([
                ("A".to_owned(), "tok-123".to_owned()),
                ("B".to_owned(), "x-tok-123".to_owned())
            ]),
            cwd: Some(PathBuf::from("/home/me/site")),
        }
    );
    assert_eq!(
        config.upstreams["docs"].transport,
        Transport::Http {
            url: "https://docs.example.com//home/me".to_owned(),
            headers: BTreeMap::from([("Authorization".to_owned(), "Bearer docs-456".to_owned())]),
        }
    );
    assert!(
        config.namespaced(),
        "two enabled upstreams are namespaced in auto mode"
    );
}

#[test]
fn trust_annotations_defaults_by_transport_and_can_be_overridden() {
    let config = toml_ok(
        r#"
        [upstreams.local]
        command = "x"
        [upstreams.remote]
        url = "http://127.0.0.1:9000/mcp"
        [upstreams.local-untrusted]
        command = "x"
        trust_annotations = false
        [upstreams.remote-trusted]
        url = "https://mcp.example.com/mcp"
        trust_annotations = true
        "#,
    );
    let trust = |n: &str| config.upstreams[n].trust_annotations;
    assert!(trust("local"));
    assert!(!trust("remote"));
    assert!(!trust("local-untrusted"));
    assert!(trust("remote-trusted"));
}

#[test]
fn a_relative_cwd_resolves_against_the_config_files_directory() {
    let config = toml_ok("[upstreams.site]\ncommand = \"node\"\ncwd = \"site/app\"\n");
    let Transport::Stdio { cwd, .. } = &config.upstreams["site"].transport else {
        panic!("stdio expected");
    };
    assert_eq!(cwd.as_deref(), Some(Path::new("/etc/plangate/site/app")));
}

#[test]
fn load_toml_reads_the_file_and_resolves_cwd_next_to_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("plangate.toml");
    std::fs::write(
        &path,
        "[upstreams.site]\ncommand = \"node\"\ncwd = \"app\"\n",
    )
    .unwrap();
    let config = load_toml(&path, &env()).unwrap();
    let Transport::Stdio { cwd, .. } = &config.upstreams["site"].transport else {
        panic!("stdio expected");
    };
    assert_eq!(cwd.as_deref(), Some(dir.path().join("app").as_path()));
    assert_eq!(config.source, ConfigSource::Toml(path));

    let missing = load_toml(&dir.path().join("nope.toml"), &env()).unwrap_err();
    assert!(
        missing.0[0].message.starts_with("cannot read config file"),
        "{missing}"
    );
}

#[test]
fn an_invalid_upstream_name_is_an_error_naming_it_and_the_rule() {
    let errors =
        toml_err("[upstreams.\"my server\"]\ncommand = \"x\"\n[upstreams.a__b]\ncommand = \"y\"\n");
    let m = error_at(&errors, "upstreams.\"my server\"");
    assert!(
        m.contains("\"my server\"") && m.contains("letters, digits"),
        "{m}"
    );
    assert!(error_at(&errors, "upstreams.a__b").contains("'__'"));
}

#[test]
fn exactly_one_of_command_and_url() {
    let errors = toml_err(
        "[upstreams.a]\ncommand = \"x\"\nurl = \"http://h/mcp\"\n[upstreams.b]\nenabled = true\n",
    );
    assert!(error_at(&errors, "upstreams.a").contains("both command and url"));
    assert!(error_at(&errors, "upstreams.b").contains("neither command nor url"));
}

#[test]
fn fields_of_the_other_transport_are_errors() {
    let errors = toml_err(
        "[upstreams.a]\ncommand = \"x\"\nheaders = { A = \"b\" }\n[upstreams.b]\nurl = \"http://h/mcp\"\nargs = []\n",
    );
    assert!(error_at(&errors, "upstreams.a.headers").contains("only applies to url upstreams"));
    assert!(error_at(&errors, "upstreams.b.args").contains("only applies to command"));
}

#[test]
fn urls_must_be_http_or_https() {
    let errors =
        toml_err("[upstreams.a]\nurl = \"ws://h/mcp\"\n[upstreams.b]\nurl = \"https://\"\n");
    assert!(error_at(&errors, "upstreams.a.url").contains("http:// or https://"));
    assert!(error_at(&errors, "upstreams.b.url").contains("needs a host"));
    toml_ok("[upstreams.a]\nurl = \"HTTPS://mcp.example.com/mcp\"\n");
}

#[test]
fn at_least_one_upstream_is_required() {
    let errors = toml_err("[gateway]\nanonymous = \"read\"\n");
    assert!(error_at(&errors, "upstreams").contains("at least one"));
    let errors = toml_err("upstreams = {}\n");
    assert!(error_at(&errors, "upstreams").contains("at least one"));
}

#[test]
fn wrong_types_and_bad_gateway_values_are_named() {
    let errors = toml_err(
        r#"
        [gateway]
        allowed_hosts = ["http://example.com", 7]
        tool_prefix = "PlanGate"
        namespace = "sometimes"
        [upstreams.a]
        command = ""
        args = "server.js"
        enabled = "yes"
        env = { GOOD = "1", BAD = 2 }
        [upstreams.a.tools.t]
        enabled = 0
        colour = "red"
        "#,
    );
    assert!(
        error_at(&errors, "gateway.allowed_hosts[1]").contains("must be a string, not an integer")
    );
    assert!(error_at(&errors, "gateway.tool_prefix").contains("\"PlanGate\""));
    assert!(error_at(&errors, "gateway.namespace").contains("\"auto\" or \"always\""));
    assert!(error_at(&errors, "upstreams.a.command").contains("must not be empty"));
    assert!(error_at(&errors, "upstreams.a.args").contains("a list of strings"));
    assert!(error_at(&errors, "upstreams.a.enabled").contains("true or false"));
    assert!(error_at(&errors, "upstreams.a.env.BAD").contains("must be a string"));
    assert!(error_at(&errors, "upstreams.a.tools.t.enabled").contains("true or false"));
    assert!(error_at(&errors, "upstreams.a.tools.t.colour").contains("effect and enabled"));
    // allowed_hosts[0] is reported only once the list's types are right.
    let errors = toml_err(
        "[gateway]\nallowed_hosts = [\"http://example.com\"]\n[upstreams.a]\ncommand = \"x\"\n",
    );
    assert!(error_at(&errors, "gateway.allowed_hosts[0]").contains("without scheme"));
}

#[test]
fn a_syntax_error_carries_line_and_column() {
    let errors = toml_err("[gateway]\nanonymous = \"none\"\nnamespace = auto\n");
    assert_eq!(errors.len(), 1);
    let e = &errors.0[0];
    assert_eq!(e.key, "");
    assert!(
        e.message
            .starts_with("toml syntax error at line 3, column 13"),
        "{}",
        e.message
    );
    assert!(!e.message.contains('\n'));
}

#[test]
fn config_json_never_shows_env_or_header_values() {
    let config = toml_ok(
        "[upstreams.a]\ncommand = \"x\"\nenv = { API_TOKEN = \"${MY_TOKEN}\" }\n[upstreams.b]\nurl = \"https://h/mcp\"\nheaders = { Authorization = \"Bearer ${DOCS_TOKEN}\" }\n",
    );
    let json = serde_json::to_string(&config).unwrap();
    assert!(
        !json.contains("tok-123") && !json.contains("docs-456"),
        "{json}"
    );
    assert!(json.contains("\"API_TOKEN\":\"[redacted]\""), "{json}");
    assert!(json.contains("\"transport\":\"stdio\""), "{json}");
    assert!(!format!("{config:?}").contains("tok-123"));
}

// === JSON from other MCP clients ===

/// What a filesystem server via npx plus a remote docs server look like in
/// plangate.toml, for comparison with the JSON formats.
const EQUIVALENT_TOML: &str = r#"
[upstreams.filesystem]
command = "npx"
args = ["-y", "@modelcontextprotocol/server-filesystem", "/home/me/Desktop", "/home/me/Downloads"]
env = { LOG_LEVEL = "info" }

[upstreams.docs]
url = "https://docs.example.com/mcp"
headers = { Authorization = "Bearer docs-456" }
"#;

#[test]
fn claude_desktop_json_parses_to_the_same_config_as_toml() {
    let json = json_ok(
        r#"{
          "mcpServers": {
            "filesystem": {
              "command": "npx",
              "args": ["-y", "@modelcontextprotocol/server-filesystem", "${HOME}/Desktop", "/home/me/Downloads"],
              "env": { "LOG_LEVEL": "info" },
              "autoApprove": ["read_file"],
              "alwaysAllow": [],
              "timeout": 60
            },
            "docs": {
              "type": "http",
              "url": "https://docs.example.com/mcp",
              "headers": { "Authorization": "Bearer ${env:DOCS_TOKEN}" },
              "description": "team docs"
            }
          },
          "globalShortcut": "Ctrl+Space"
        }"#,
    );
    let toml = toml_ok(EQUIVALENT_TOML);
    assert_eq!(
        json.source,
        ConfigSource::McpJson(PathBuf::from("/home/me/mcp.json"))
    );
    assert_eq!(json.gateway, toml.gateway);
    assert_eq!(json.upstreams, toml.upstreams);
}

#[test]
fn vs_code_json_parses_to_the_same_config_as_toml() {
    let json = json_ok(
        r#"{
          // .vscode/mcp.json
          "inputs": [
            { "type": "promptString", "id": "unused", "description": "not referenced", "password": true }
          ],
          "servers": {
            "filesystem": {
              "type": "stdio",
              "command": "npx",
              "args": ["-y", "@modelcontextprotocol/server-filesystem", "/home/me/Desktop", "/home/me/Downloads"],
              "env": { "LOG_LEVEL": "info" },
            },
            "docs": {
              "type": "http",
              "url": "https://docs.example.com/mcp",
              "headers": { "Authorization": "Bearer ${env:DOCS_TOKEN}" }
            }
          }
        }"#,
    );
    assert_eq!(json.upstreams, toml_ok(EQUIVALENT_TOML).upstreams);
}

#[test]
fn streamable_http_type_spellings_and_url_only_entries_are_http() {
    let config = json_ok(
        r#"{"mcpServers": {
            "a": {"type": "streamable-http", "url": "https://a.example.com/mcp"},
            "b": {"type": "streamableHttp", "url": "https://b.example.com/mcp"},
            "c": {"url": "https://c.example.com/mcp"},
            "d": {"transport": "http", "url": "https://d.example.com/mcp"}
        }}"#,
    );
    for (name, up) in &config.upstreams {
        assert!(matches!(up.transport, Transport::Http { .. }), "{name}");
        assert!(
            !up.trust_annotations,
            "{name}: remote upstreams are not trusted by default"
        );
    }
}

#[test]
fn legacy_sse_upstreams_are_rejected() {
    let errors = json_err(
        r#"{"mcpServers": {
            "typed": {"type": "sse", "url": "https://a.example.com/events"},
            "cursor": {"transport": "sse", "url": "https://b.example.com/events"},
            "bypath": {"url": "https://c.example.com/sse"},
            "ok": {"type": "http", "url": "https://d.example.com/sse"}
        }}"#,
    );
    for key in [
        "mcpServers.typed.type",
        "mcpServers.cursor.transport",
        "mcpServers.bypath.url",
    ] {
        let m = error_at(&errors, key);
        assert!(
            m.contains("legacy SSE") && m.contains("Streamable HTTP"),
            "{key}: {m}"
        );
    }
    assert_eq!(
        errors.len(),
        3,
        "an explicit http type wins over the /sse guess:\n{errors}"
    );
}

#[test]
fn vs_code_input_variables_are_rejected() {
    let errors = json_err(
        r#"{"inputs": [{"type": "promptString", "id": "api-key", "password": true}],
            "servers": {"gh": {"type": "stdio", "command": "gh-mcp", "env": {"GITHUB_TOKEN": "${input:api-key}"}}}}"#,
    );
    let m = error_at(&errors, "servers.gh.env.GITHUB_TOKEN");
    assert!(
        m.contains("input variable") && m.contains("${env:VAR}"),
        "{m}"
    );
}

#[test]
fn env_file_is_rejected() {
    let errors = json_err(
        r#"{"servers": {"a": {"type": "stdio", "command": "x", "envFile": "${workspaceFolder}/.env"}}}"#,
    );
    assert!(error_at(&errors, "servers.a.envFile").contains("not supported"));
}

#[test]
fn disabled_servers_are_kept_but_disabled() {
    let config = json_ok(
        r#"{"mcpServers": {"a": {"command": "x", "disabled": true}, "b": {"command": "y", "disabled": false}}}"#,
    );
    assert!(!config.upstreams["a"].enabled);
    assert!(config.upstreams["b"].enabled);
    assert!(
        !config.namespaced(),
        "one enabled upstream is not namespaced in auto mode"
    );
}

#[test]
fn an_invalid_server_name_is_an_error_not_a_rename() {
    let errors =
        json_err(r#"{"mcpServers": {"my server": {"command": "x"}, "ok": {"command": "y"}}}"#);
    let m = error_at(&errors, "mcpServers.\"my server\"");
    assert!(
        m.contains("\"my server\"") && m.contains("does not rename"),
        "{m}"
    );
}

#[test]
fn json_mistakes_are_all_reported_with_keys() {
    let errors = json_err(
        r#"{"mcpServers": {
            "a": {"command": "x", "args": "oops"},
            "b": {"command": "x", "url": "http://h/mcp"},
            "c": {"type": "websocket", "url": "ws://h"},
            "d": {"url": "ftp://h/mcp"},
            "e": {"command": "${NOPE}"}
        }}"#,
    );
    assert!(error_at(&errors, "mcpServers.a.args").contains("a list of strings"));
    assert!(error_at(&errors, "mcpServers.b").contains("both command and url"));
    assert!(error_at(&errors, "mcpServers.c.type").contains("\"websocket\""));
    assert!(error_at(&errors, "mcpServers.d.url").contains("http:// or https://"));
    assert!(error_at(&errors, "mcpServers.e.command").contains("\"NOPE\""));
    assert_eq!(errors.len(), 5, "{errors}");
}

#[test]
fn a_json_file_without_servers_or_with_bad_syntax_says_so() {
    let errors = json_err(r#"{"preferences": {}}"#);
    assert!(
        errors.0[0]
            .message
            .contains("\"mcpServers\" or \"servers\"")
    );
    let errors = json_err("{\n  \"mcpServers\": {\n    \"a\": {\"command\": \"x\"\n  }\n");
    assert!(
        errors.0[0].message.starts_with("json syntax error at line"),
        "{errors}"
    );
    let errors = json_err(r#"{"mcpServers": {}}"#);
    assert!(errors.0[0].message.contains("no servers"));
}

#[test]
fn json_relative_cwd_resolves_against_its_file() {
    let config = json_ok(r#"{"mcpServers": {"a": {"command": "x", "cwd": "proj"}}}"#);
    let Transport::Stdio { cwd, .. } = &config.upstreams["a"].transport else {
        panic!("stdio expected");
    };
    assert_eq!(cwd.as_deref(), Some(Path::new("/home/me/proj")));
}

#[test]
fn load_mcp_json_reads_a_claude_code_file_with_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(".mcp.json");
    std::fs::write(
        &path,
        r#"{"mcpServers": {"memory": {"type": "stdio", "command": "npx", "args": ["-y", "@modelcontextprotocol/server-memory"], "env": {"MEMORY_FILE_PATH": "${MEMORY_FILE:-/tmp/memory.jsonl}"}}}}"#,
    )
    .unwrap();
    let config = load_mcp_json(&path, &env()).unwrap();
    let Transport::Stdio { env, .. } = &config.upstreams["memory"].transport else {
        panic!("stdio expected");
    };
    assert_eq!(env["MEMORY_FILE_PATH"], "/tmp/memory.jsonl");
}
