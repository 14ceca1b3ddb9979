//! The config contract: what parses, what each mistake says, and that JSON
//! from other MCP clients means the same as the equivalent plangate.toml.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

use plangate_config::{
    Anonymous, Config, ConfigErrors, ConfigSource, DEMO_TOML, GatewaySettings, LandsOnSetting,
    Namespace, ToolOverride, Transport, UpstreamConfig, demo_tool_overrides, load_mcp_json,
    load_toml, parse_mcp_json, parse_toml,
};
use plangate_core::{Effect, ModeSpec, Modes, OverAccess};
use serde_json::{Value, json};

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

/// Each `(key, part)`: the one error at `key` contains `part`.
fn assert_parts(errors: &ConfigErrors, expected: &[(&str, &str)]) {
    for (key, part) in expected {
        let m = error_at(errors, key);
        assert!(m.contains(part), "{key}: {m}");
    }
}

/// Each `(key, message)`: the one error at `key` is exactly `message`.
fn assert_messages(errors: &ConfigErrors, expected: &[(&str, &str)]) {
    for (key, message) in expected {
        assert_eq!(error_at(errors, key), *message, "{key}");
    }
}

/// The one error at `key` contains every one of `parts`.
fn assert_says(errors: &ConfigErrors, key: &str, parts: &[&str]) {
    let m = error_at(errors, key);
    assert!(parts.iter().all(|part| m.contains(part)), "{m}");
}

/// The invalid config `text`'s errors, as displayed, contain every one of `parts`.
fn assert_shown(text: &str, parts: &[&str]) {
    let shown = toml_err(text).to_string();
    for part in parts {
        assert!(shown.contains(part), "{part:?} not in:\n{shown}");
    }
}

/// `tables`, then the one upstream `a`: the least a config needs.
fn and_upstream_a(tables: &str) -> String {
    format!("{tables}[upstreams.a]\ncommand = \"x\"\n")
}

/// A config with `settings` in `[gateway]` and the one upstream `a`.
fn with_gateway(settings: &str) -> String {
    and_upstream_a(&format!("[gateway]\n{settings}\n"))
}

/// Each `(value, part)`: `[gateway] setting = value` gets one error containing `part`.
fn assert_gateway_refuses(setting: &str, cases: &[(&str, &str)]) {
    for (value, part) in cases {
        let errors = toml_err(&with_gateway(&format!("{setting} = {value}")));
        let m = error_at(&errors, &format!("gateway.{setting}"));
        assert!(m.contains(part), "{value}: {m}");
    }
}

/// A config of one `[{kind}.NAME]` table per `(name, body)`.
fn tables(kind: &str, tables: &[(&str, &str)]) -> String {
    tables
        .iter()
        .map(|(name, body)| format!("[{kind}.{name}]\n{body}\n"))
        .collect()
}

/// A config of one `[modes.NAME]` table per `(name, body)` and the one upstream `fs`.
fn modes(modes: &[(&str, &str)]) -> String {
    tables("modes", modes) + "[upstreams.fs]\ncommand = \"mcp-fs\"\n"
}

/// A config of the upstream `site` and one tool table per `(name, body)`.
fn site_tools(tools: &[(&str, &str)]) -> String {
    "[upstreams.site]\ncommand = \"node\"\n".to_owned() + &tables("upstreams.site.tools", tools)
}

/// The working directory of the stdio upstream `name`.
fn cwd_of<'c>(config: &'c Config, name: &str) -> Option<&'c Path> {
    let Transport::Stdio { cwd, .. } = &config.upstreams[name].transport else {
        panic!("stdio expected");
    };
    cwd.as_deref()
}

/// Writes `text` to `plangate.toml` in a new temporary dir and loads it from there.
fn loaded(text: &str) -> (tempfile::TempDir, Config) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = file_in(&dir, "plangate.toml", text);
    let config = load_toml(&path, &env()).expect("a valid config file");
    (dir, config)
}

/// Other clients' JSON with one `mcpServers` entry per `(name, server)`.
fn mcp_servers(servers: &[(&str, &str)]) -> String {
    let entries: Vec<String> = servers
        .iter()
        .map(|(name, server)| format!("{name:?}: {server}"))
        .collect();
    format!("{{\"mcpServers\": {{{}}}}}", entries.join(", "))
}

/// Writes `text` to the file `name` in `dir`; returns its path.
fn file_in(dir: &tempfile::TempDir, name: &str, text: &str) -> PathBuf {
    let path = dir.path().join(name);
    std::fs::write(&path, text).expect("write");
    path
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
        call_timeout: plangate_config::DEFAULT_CALL_TIMEOUT,
        startup_timeout: plangate_config::DEFAULT_STARTUP_TIMEOUT,
        protocol: plangate_config::UpstreamProtocol::V2025_11_25,
        tools: BTreeMap::from([(
            "update_page".to_owned(),
            ToolOverride {
                effect: Some(Effect::Write),
                enabled: true,
                ..ToolOverride::default()
            },
        )]),
        oauth: None,
    };
    assert_eq!(
        config.upstreams,
        BTreeMap::from([("site".to_owned(), expected)])
    );
    assert!(!config.namespaced());
}

/// The first `toml` block of docs/config.md, the reference's example.
fn reference_example() -> &'static str {
    let doc = include_str!("../../../docs/config.md");
    let start = doc.find("```toml\n").expect("a toml block") + "```toml\n".len();
    let len = doc[start..].find("```").expect("closed");
    &doc[start..start + len]
}

#[test]
fn the_reference_example_in_the_docs_parses() {
    let config = toml_ok(reference_example());
    assert_eq!(config.gateway, GatewaySettings::default());
    assert_eq!(config.modes.names(), ["default", "careful", "plan"]);
    let tools = &config.upstreams["site"].tools;
    assert_eq!(tools["update_page"].lands_on, LandsOnSetting::Copy);
    assert_eq!(tools["update_page"].links, ["/preview_url"]);
    assert_eq!(tools["set_plugin_active"].target.as_deref(), Some("/slug"));
}

/// Every `toml` block of `doc` that holds `[[rules]]`.
fn rule_examples(doc: &str) -> Vec<&str> {
    doc.split("```toml\n")
        .skip(1)
        .filter_map(|rest| rest.split("```").next())
        .filter(|block| block.contains("[[rules]]"))
        .collect()
}

#[test]
fn the_notify_examples_of_the_docs_and_the_readme_load() {
    let blocks: Vec<&str> = [
        include_str!("../../../docs/config.md"),
        include_str!("../../../README.md"),
    ]
    .into_iter()
    .flat_map(|doc| doc.split("```toml\n").skip(1))
    .filter_map(|rest| rest.split("```").next())
    .filter(|block| block.contains("[[notify]]"))
    .collect();
    assert_eq!(blocks.len(), 2, "{blocks:?}");
    let mut vars = env();
    vars.insert(
        "PLANGATE_HOOK_SECRET".to_owned(),
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".to_owned(),
    );
    vars.insert(
        "SLACK_WEBHOOK_URL".to_owned(),
        "https://hooks.slack.com/services/T0/B0/x".to_owned(),
    );
    for block in blocks {
        let text = format!("[upstreams.fs]\ncommand = \"mcp-fs\"\n\n{block}");
        let config = parse_toml(&text, &origin(), &vars).unwrap_or_else(|e| panic!("{e}\n{block}"));
        assert!(!config.notify.is_empty(), "{block}");
        assert_eq!(
            config.gateway.public_url.as_deref(),
            Some("https://plangate.example.com")
        );
    }
}

#[test]
fn the_rule_examples_of_the_docs_and_the_readme_load() {
    let blocks: Vec<&str> = rule_examples(include_str!("../../../docs/config.md"))
        .into_iter()
        .chain(rule_examples(include_str!("../../../README.md")))
        .collect();
    assert!(blocks.len() >= 2, "{blocks:?}");
    for block in blocks {
        let config = toml_ok(&format!("[upstreams.fs]\ncommand = \"mcp-fs\"\n\n{block}"));
        assert!(!config.rules.is_empty(), "{block}");
    }
}

#[test]
fn a_minimal_file_takes_every_default() {
    let config = toml_ok("[upstreams.fs]\ncommand = \"mcp-fs\"\n");
    let g = &config.gateway;
    assert_eq!(g.anonymous, Anonymous::None);
    assert_eq!(g.allowed_hosts, ["localhost", "127.0.0.1", "::1"]);
    assert_eq!(g.namespace, Namespace::Auto);
    assert_eq!(g.tool_prefix, "plangate_");
    assert_eq!(g.max_steps, 50);
    assert_eq!(g.plan_ttl, Duration::from_secs(4 * 60 * 60));
    assert_eq!(config.modes, Modes::default());
    assert_eq!(config.modes.names(), ["default", "plan"]);
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
        max_undo_bytes = 1024
        undo_ttl = "7d"
        [upstreams.fs]
        command = "mcp-fs"
        "#,
    );
    assert_eq!(
        config.gateway,
        GatewaySettings {
            anonymous: Anonymous::Read,
            allowed_hosts: vec!["gate.example.com".to_owned()],
            allowed_origins: None,
            max_request_bytes: plangate_config::DEFAULT_MAX_REQUEST_BYTES,
            max_sessions: 1024,
            max_sessions_per_key: 128,
            header_read_timeout: Duration::from_secs(30),
            body_read_timeout: Duration::from_secs(10),
            max_concurrent_calls_per_key: 32,
            rate_limit: None,
            namespace: Namespace::Always,
            tool_prefix: "pg_".to_owned(),
            max_steps: 50,
            plan_ttl: Duration::from_secs(4 * 3600),
            lease: Duration::from_secs(30),
            review_timeout: Duration::from_secs(600),
            cached_keys: 1024,
            max_preview_bytes: 64 * 1024,
            max_plan_bytes: 16 * 1024 * 1024,
            max_undo_bytes: 1024,
            undo_ttl: Duration::from_secs(7 * 24 * 3600),
            public_url: None,
            notify_debounce: Duration::from_secs(5),
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
    assert_parts(
        &errors,
        &[
            ("gateway.anonymous", "\"public\""),
            ("upstreams.site.comand", "unknown key \"comand\""),
            ("upstreams.site", "neither command nor url"),
        ],
    );
    let effect = "upstreams.site.tools.update_page.effect";
    assert_says(&errors, effect, &["\"delete\"", "destructive"]);
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
    assert_messages(
        &errors,
        &[(
            "upstreams.site.trust",
            "unknown key \"trust\": allowed keys are command, args, env, cwd, url, headers, ca_file, trust_annotations, enabled, call_timeout, startup_timeout, protocol, tools and oauth (line 3)",
        )],
    );
    let errors = toml_err(&with_gateway("anon = \"read\""));
    assert_parts(
        &errors,
        &[(
            "gateway.anon",
            "anonymous, default_mode, default_mode_locked, allowed_hosts, allowed_origins, max_request_bytes, max_preview_bytes, max_plan_bytes, max_undo_bytes, undo_ttl, max_sessions, max_sessions_per_key, namespace, tool_prefix, max_steps, plan_ttl, lease, review_timeout, header_read_timeout, body_read_timeout, max_concurrent_calls_per_key, rate_limit, cached_keys, public_url and notify_debounce",
        )],
    );
}

#[test]
fn an_unknown_top_level_table_lists_the_allowed_tables() {
    let errors = toml_err("[mode.careful]\naccess = \"write\"\n[upstreams.a]\ncommand = \"x\"\n");
    assert_eq!(
        error_at(&errors, "mode"),
        "unknown table \"mode\": allowed top-level tables are audit, auth, gateway, modes, notify, profiles, redaction, rules and upstreams (line 1)"
    );
}

#[test]
fn a_missing_variable_makes_its_upstream_down_and_the_others_load() {
    // A secret not exported in this environment is the user's to set, not
    // a mistake in the file: that upstream is down, naming the variable,
    // and the others serve.
    let config = toml_ok(
        "[upstreams.site]\ncommand = \"node\"\nenv = { API_TOKEN = \"${env:NOT_SET}\" }\n\n[upstreams.docs]\ncommand = \"${ALSO_NOT_SET}\"\nargs = [\"${NOT_SET}\"]\n\n[upstreams.fine]\ncommand = \"node\"\n",
    );
    assert_eq!(config.upstreams.keys().collect::<Vec<_>>(), ["fine"]);
    assert!(config.down["site"].contains("NOT_SET"), "{:?}", config.down);
    assert!(
        config.down["docs"].contains("ALSO_NOT_SET, NOT_SET"),
        "{:?}",
        config.down
    );
    // A default is no unset variable; a mistake beside an unset variable
    // is not reported until the variable is set (the upstream is down).
    let config = toml_ok("[upstreams.site]\ncommand = \"${NOT_SET:-node}\"\n");
    assert!(config.down.is_empty(), "{:?}", config.down);
    // Other mistakes in a string are still mistakes.
    let errors = toml_err("[upstreams.site]\ncommand = \"${input:token}\"\n");
    assert!(errors.to_string().contains("cannot prompt"), "{errors}");
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
            ca_file: None,
        }
    );
    assert!(
        config.namespaced(),
        "two enabled upstreams are namespaced in auto mode"
    );
}

#[test]
fn trust_annotations_defaults_by_transport_and_can_be_overridden() {
    // Each upstream, and whether its annotations are trusted.
    let upstreams = [
        ("local", "command = \"x\"", true),
        ("remote", "url = \"http://127.0.0.1:9000/mcp\"", false),
        (
            "local-untrusted",
            "command = \"x\"\ntrust_annotations = false",
            false,
        ),
        (
            "remote-trusted",
            "url = \"https://mcp.example.com/mcp\"\ntrust_annotations = true",
            true,
        ),
    ];
    let config = toml_ok(&tables(
        "upstreams",
        &upstreams.map(|(name, body, _)| (name, body)),
    ));
    for (name, _, trusted) in upstreams {
        assert_eq!(config.upstreams[name].trust_annotations, trusted, "{name}");
    }
}

#[test]
fn a_relative_cwd_resolves_against_the_config_files_directory() {
    let config = toml_ok("[upstreams.site]\ncommand = \"node\"\ncwd = \"site/app\"\n");
    assert_eq!(
        cwd_of(&config, "site"),
        Some(Path::new("/etc/plangate/site/app"))
    );
}

#[test]
fn load_toml_reads_the_file_and_resolves_cwd_next_to_it() {
    let (dir, config) = loaded("[upstreams.site]\ncommand = \"node\"\ncwd = \"app\"\n");
    assert_eq!(
        cwd_of(&config, "site"),
        Some(dir.path().join("app").as_path())
    );
    let path = dir.path().join("plangate.toml");
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
    let named = "upstreams.\"my server\"";
    assert_says(&errors, named, &["\"my server\"", "letters, digits"]);
    assert_parts(&errors, &[("upstreams.a__b", "'__'")]);
}

#[test]
fn exactly_one_of_command_and_url() {
    let errors = toml_err(
        "[upstreams.a]\ncommand = \"x\"\nurl = \"http://h/mcp\"\n[upstreams.b]\nenabled = true\n",
    );
    assert_parts(
        &errors,
        &[
            ("upstreams.a", "both command and url"),
            ("upstreams.b", "neither command nor url"),
        ],
    );
}

#[test]
fn fields_of_the_other_transport_are_errors() {
    let errors = toml_err(
        "[upstreams.a]\ncommand = \"x\"\nheaders = { A = \"b\" }\n[upstreams.b]\nurl = \"http://h/mcp\"\nargs = []\n",
    );
    assert_parts(
        &errors,
        &[
            ("upstreams.a.headers", "only applies to url upstreams"),
            ("upstreams.b.args", "only applies to command"),
        ],
    );
}

#[test]
fn ca_file_is_a_path_resolved_like_cwd() {
    let config = toml_ok(&tables(
        "upstreams",
        &[
            (
                "rel",
                "url = \"https://rel.example.com/mcp\"\nca_file = \"certs/ca.pem\"",
            ),
            (
                "abs",
                "url = \"https://abs.example.com/mcp\"\nca_file = \"${HOME}/ca.pem\"",
            ),
            ("none", "url = \"https://none.example.com/mcp\""),
        ],
    ));
    let ca = |name: &str| match &config.upstreams[name].transport {
        Transport::Http { ca_file, .. } => ca_file.clone(),
        other => panic!("http expected, got {other:?}"),
    };
    assert_eq!(ca("rel"), Some(PathBuf::from("/etc/plangate/certs/ca.pem")));
    assert_eq!(ca("abs"), Some(PathBuf::from("/home/me/ca.pem")));
    assert_eq!(ca("none"), None);
    let json = serde_json::to_value(&config).unwrap();
    assert_eq!(
        json["upstreams"]["rel"]["ca_file"],
        "/etc/plangate/certs/ca.pem"
    );
    assert!(json["upstreams"]["none"].get("ca_file").is_none(), "{json}");
}

#[test]
fn load_toml_resolves_ca_file_next_to_the_file() {
    let (dir, config) = loaded("[upstreams.docs]\nurl = \"https://h/mcp\"\nca_file = \"ca.pem\"\n");
    let Transport::Http { ca_file, .. } = &config.upstreams["docs"].transport else {
        panic!("http expected");
    };
    assert_eq!(
        ca_file.as_deref(),
        Some(dir.path().join("ca.pem").as_path())
    );
}

#[test]
fn every_bad_ca_file_is_reported_at_once() {
    // A stdio upstream with a ca_file, then url upstreams with one
    // wrong ca_file each.
    let url_with = |ca_file: &str| format!("url = \"https://h/mcp\"\nca_file = {ca_file}");
    let errors = toml_err(&tables(
        "upstreams",
        &[
            ("stdio", "command = \"node\"\nca_file = \"/etc/ca.pem\""),
            ("empty", &url_with("\"\"")),
            ("number", &url_with("3")),
            (
                "pem",
                &url_with(r#""-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----""#),
            ),
            ("link", &url_with("\"https://h/ca.pem\"")),
            ("dir", &url_with("\"/etc/ssl/\"")),
        ],
    ));
    assert_messages(
        &errors,
        &[
            (
                "upstreams.stdio.ca_file",
                "ca_file only applies to url upstreams; this one has a command",
            ),
            ("upstreams.empty.ca_file", "must not be empty"),
            (
                "upstreams.number.ca_file",
                "must be a string, not an integer",
            ),
        ],
    );
    assert_parts(
        &errors,
        &[
            ("upstreams.pem.ca_file", "not the certificate itself"),
            ("upstreams.link.ca_file", "is not a path"),
            ("upstreams.dir.ca_file", "names a directory"),
        ],
    );
    assert_eq!(errors.len(), 6, "{errors}");
}

#[test]
fn ca_file_is_not_read_from_other_clients_json() {
    // Other clients' files have no such field: like any field plangate
    // does not know there, it is ignored (the system's roots apply).
    let config =
        json_ok(r#"{"mcpServers": {"docs": {"url": "https://h/mcp", "ca_file": "/etc/ca.pem"}}}"#);
    assert!(matches!(
        &config.upstreams["docs"].transport,
        Transport::Http { ca_file: None, .. }
    ));
}

#[test]
fn urls_must_be_http_or_https() {
    let errors =
        toml_err("[upstreams.a]\nurl = \"ws://h/mcp\"\n[upstreams.b]\nurl = \"https://\"\n");
    assert_parts(
        &errors,
        &[
            ("upstreams.a.url", "http:// or https://"),
            ("upstreams.b.url", "needs a host"),
        ],
    );
    toml_ok("[upstreams.a]\nurl = \"HTTPS://mcp.example.com/mcp\"\n");
}

#[test]
fn at_least_one_upstream_is_required_or_an_empty_table_that_says_none_yet() {
    let errors = toml_err("[gateway]\nanonymous = \"read\"\n");
    assert!(error_at(&errors, "upstreams").contains("at least one"));
    assert!(error_at(&errors, "upstreams").contains("empty [upstreams] table"));
    // `plangate service install`'s starter config: none yet, on purpose.
    let config = toml_ok("upstreams = {}\n");
    assert!(config.upstreams.is_empty());
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
    assert_parts(
        &errors,
        &[
            (
                "gateway.allowed_hosts[1]",
                "must be a string, not an integer",
            ),
            ("gateway.tool_prefix", "\"PlanGate\""),
            ("gateway.namespace", "\"auto\" or \"always\""),
            ("upstreams.a.command", "must not be empty"),
            ("upstreams.a.args", "a list of strings"),
            ("upstreams.a.enabled", "true or false"),
            ("upstreams.a.env.BAD", "must be a string"),
            ("upstreams.a.tools.t.enabled", "true or false"),
            (
                "upstreams.a.tools.t.colour",
                "effect, enabled, predicted_effect, preview, lands_on, lands_on_note, target, copy_id, links, snapshots, undo, rate_limit and paths",
            ),
        ],
    );
    // allowed_hosts[0] is reported only once the list's types are right.
    let errors = toml_err(&with_gateway("allowed_hosts = [\"http://example.com\"]"));
    assert_parts(&errors, &[("gateway.allowed_hosts[0]", "without scheme")]);
}

#[test]
fn a_default_mode_names_a_mode_and_may_lock_every_key_in_it() {
    let config = toml_ok(&with_gateway(
        "default_mode = \"plan\"\ndefault_mode_locked = true",
    ));
    assert_eq!(config.modes.default_name(), "plan");
    assert!(config.modes.default_locked());
    // A mode of the operator's own may be the default, unlocked.
    let config = toml_ok(
        &("[gateway]\ndefault_mode = \"careful\"\n".to_owned()
            + &modes(&[("careful", "access = \"write\"\nover_access = \"ask\"")])),
    );
    assert_eq!(config.modes.default_name(), "careful");
    assert!(!config.modes.default_locked());
    // Nothing said: every key starts in default, unlocked.
    let config = toml_ok(&with_gateway(""));
    assert_eq!(config.modes.default_name(), "default");
    assert!(!config.modes.default_locked());
    assert_gateway_refuses(
        "default_mode",
        &[
            ("\"careful\"", "not a mode: use one of default, plan"),
            ("1", "must be a string"),
        ],
    );
    assert_gateway_refuses("default_mode_locked", &[("\"yes\"", "true or false")]);
    // Locking every key in default (no cap) would look like enforcement
    // and be none.
    let errors = toml_err(&with_gateway("default_mode_locked = true"));
    assert_says(
        &errors,
        "gateway.default_mode_locked",
        &["set default_mode = \"plan\""],
    );
}

#[test]
fn an_operators_own_profile_is_read_and_checked() {
    let config = toml_ok(&and_upstream_a(
        "[profiles.notes]\nserver_info = [\"notes-server\"]\n[profiles.notes.tools.save]\nschema = [\"path\", \"text\"]\ntarget = \"/path\"\npredicted_effect = \"Save {path}\"\npreview = { kind = \"diff\", read = \"load\", arguments = { path = \"/path\" }, text = \"/text\", missing = \"not found\" }\n",
    ));
    let notes = &config.profiles["notes"];
    assert_eq!(notes.server_info, ["notes-server"]);
    assert_eq!(notes.tools["save"].preview.as_ref().unwrap().read, "load");
    let errors = toml_err(&and_upstream_a(
        "[profiles.bad]\nserver_info = [\"x\"]\n[profiles.bad.tools.t]\nschema = []\npredicted_effect = \"Save {path\"\nlands_on = \"somewhere\"\n",
    ));
    assert_says(
        &errors,
        "profiles.bad.tools.t.predicted_effect",
        &["unclosed '{'"],
    );
    assert_says(
        &errors,
        "profiles.bad.tools.t.lands_on",
        &["\"live\" or \"copy\""],
    );
    let errors = toml_err(&and_upstream_a(
        "[profiles.odd]\nserver_info = [\"x\"]\ncolour = \"red\"\n",
    ));
    assert_says(&errors, "profiles.odd", &["colour", "server_info"]);
}

#[test]
fn audit_reads_is_off_unless_asked_for() {
    assert!(!toml_ok(&and_upstream_a("")).audit.reads);
    assert!(
        toml_ok(&and_upstream_a("[audit]\nreads = true\n"))
            .audit
            .reads
    );
    let errors = toml_err(&and_upstream_a("[audit]\nreads = \"yes\"\nwrites = true\n"));
    assert_says(&errors, "audit.reads", &["true or false"]);
    assert_says(&errors, "audit.writes", &["allowed keys are reads"]);
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

// === modes ===

#[test]
fn modes_are_read_with_access_and_over_access() {
    let config = toml_ok(&modes(&[
        ("plan", "instructions = \"Plan every write to the shop.\""),
        ("readonly", "access = \"read\"\nover_access = \"refuse\""),
        (
            "careful",
            "instructions = \"Ask before anything destructive.\"\naccess = \"write\"\nover_access = \"ask\"",
        ),
    ]));
    assert_eq!(
        config.modes.names(),
        ["default", "careful", "plan", "readonly"]
    );
    let spec = |name: &str| config.modes.resolve(Some(name)).0;
    assert_eq!(
        spec("careful"),
        ModeSpec {
            name: "careful".to_owned(),
            instructions: Some("Ask before anything destructive.".to_owned()),
            access: Effect::Write,
            over_access: OverAccess::Ask,
        }
    );
    assert_eq!(
        spec("readonly"),
        ModeSpec {
            name: "readonly".to_owned(),
            instructions: None,
            access: Effect::Read,
            over_access: OverAccess::Refuse,
        }
    );
    let plan = spec("plan");
    assert_eq!(
        plan.instructions.as_deref(),
        Some("Plan every write to the shop.")
    );
    assert_eq!(
        (plan.access, plan.over_access),
        (Effect::Read, OverAccess::Plan)
    );
}

#[test]
fn a_mode_without_access_reads_and_plans_the_rest() {
    let config = toml_ok(&modes(&[("quiet", "")]));
    let (quiet, notice) = config.modes.resolve(Some("quiet"));
    assert_eq!(notice, None);
    assert_eq!(
        (quiet.access, quiet.over_access, quiet.instructions),
        (Effect::Read, OverAccess::Plan, None)
    );
}

#[test]
fn overriding_plan_keeps_what_it_leaves_out_as_built_in() {
    let config = toml_ok(&modes(&[("plan", "access = \"write\"")]));
    let plan = config.modes.resolve(Some("plan")).0;
    assert_eq!(plan.access, Effect::Write);
    assert_eq!(plan.instructions, ModeSpec::builtin_plan().instructions);
    assert!(plan.plan_mode());
}

#[test]
fn a_mode_no_longer_defined_reads_as_plan() {
    let config = toml_ok(&modes(&[]));
    let (spec, notice) = config.modes.resolve(Some("careful"));
    assert_eq!(spec, ModeSpec::builtin_plan());
    assert!(notice.is_some_and(|n| n.contains("\"careful\"")));
}

#[test]
fn every_bad_mode_is_reported_at_once() {
    let errors = toml_err(&modes(&[
        ("default", "access = \"write\""),
        ("Careful", "access = \"write\""),
        ("later", "over_access = \"later\""),
        ("wide", "access = \"everything\"\ncolour = \"red\""),
        ("plan", "over_access = \"refuse\""),
        ("blank", "instructions = \"  \""),
    ]));
    assert_parts(
        &errors,
        &[
            ("modes.default", "reserved"),
            ("modes.Careful", "\"Careful\" is not allowed"),
            ("modes.plan.over_access", "\"refuse\""),
            ("modes.blank.instructions", "must not be empty"),
        ],
    );
    assert_messages(
        &errors,
        &[
            (
                "modes.later.over_access",
                "over_access \"later\" is not allowed: use \"plan\", \"refuse\" or \"ask\"",
            ),
            (
                "modes.wide.access",
                "access \"everything\" is not allowed: use \"read\", \"write\" or \"destructive\"",
            ),
            (
                "modes.wide.colour",
                "unknown key \"colour\": allowed keys are instructions, access and over_access (line 9)",
            ),
        ],
    );
    assert_eq!(errors.len(), 7, "{errors}");
}

// === gateway planning limits ===

#[test]
fn max_steps_and_plan_ttl_are_read() {
    let ttl = |value: &str| {
        toml_ok(&format!(
            "[gateway]\nplan_ttl = {value}\n[upstreams.a]\ncommand = \"x\"\n"
        ))
        .gateway
        .plan_ttl
    };
    assert_eq!(ttl("\"4h\""), Duration::from_secs(4 * 3600));
    assert_eq!(ttl("\"90m\""), Duration::from_secs(90 * 60));
    assert_eq!(ttl("\"30s\""), Duration::from_secs(30));
    assert_eq!(ttl("\"1h30m\""), Duration::from_secs(5400));
    assert_eq!(ttl("\"30d\""), Duration::from_secs(30 * 86_400));
    assert_eq!(ttl("1"), Duration::from_secs(1));
    assert_eq!(ttl("7200"), Duration::from_secs(7200));
    let config =
        toml_ok("[gateway]\nmax_steps = 1000\nplan_ttl = \"2h\"\n[upstreams.a]\ncommand = \"x\"\n");
    assert_eq!(config.gateway.max_steps, 1000);
    let json = serde_json::to_value(&config.gateway).unwrap();
    assert_eq!(json["plan_ttl"], "2h", "shown as written: {json}");
    assert_eq!(json["max_steps"], 1000);
}

#[test]
fn the_state_cache_size_is_read_and_bounded() {
    let config = toml_ok("[gateway]\ncached_keys = 64\n[upstreams.a]\ncommand = \"x\"\n");
    assert_eq!(config.gateway.cached_keys, 64);
    assert_eq!(
        toml_ok("[upstreams.a]\ncommand = \"x\"\n")
            .gateway
            .cached_keys,
        1024
    );
    assert_gateway_refuses(
        "cached_keys",
        &[
            ("0", "from 1 to 1000000"),
            ("1000001", "from 1 to 1000000"),
            ("\"many\"", "must be an integer"),
        ],
    );
}

#[test]
fn bad_step_caps_and_plan_lives_are_reported() {
    let errors =
        toml_err("[gateway]\nmax_steps = 0\nplan_ttl = \"soon\"\n[upstreams.a]\ncommand = \"x\"\n");
    assert_eq!(
        error_at(&errors, "gateway.max_steps"),
        "max_steps 0 is not allowed: use an integer from 1 to 1000"
    );
    let m = error_at(&errors, "gateway.plan_ttl");
    assert!(
        m.starts_with("plan_ttl \"soon\" is not a duration") && m.contains("\"1h30m\""),
        "{m}"
    );
    assert_eq!(errors.len(), 2, "{errors}");
    assert_gateway_refuses(
        "max_steps",
        &[
            ("1001", "max_steps 1001 is not allowed"),
            ("50.0", "must be an integer, not a float"),
            ("\"50\"", "must be an integer, not a string"),
        ],
    );
    assert_gateway_refuses(
        "plan_ttl",
        &[
            ("0", "plan_ttl 0 is out of range: use 1s to 30d"),
            ("-5", "plan_ttl -5 is out of range"),
            ("\"0s\"", "plan_ttl \"0s\" is out of range"),
            ("\"31d\"", "plan_ttl \"31d\" is out of range"),
            ("\"4 hours\"", "is not a duration"),
            (
                "true",
                "must be a duration string like \"4h\" or an integer number of seconds, not a boolean",
            ),
        ],
    );
}

#[test]
fn the_body_deadline_and_the_per_key_call_cap_are_read_and_checked() {
    let config = toml_ok(&with_gateway(
        "body_read_timeout = \"3s\"\nmax_concurrent_calls_per_key = 4",
    ));
    assert_eq!(config.gateway.body_read_timeout, Duration::from_secs(3));
    assert_eq!(config.gateway.max_concurrent_calls_per_key, 4);
    assert_gateway_refuses(
        "body_read_timeout",
        &[
            ("0", "body_read_timeout 0 is out of range: use 1s to 10m"),
            ("\"11m\"", "body_read_timeout \"11m\" is out of range"),
            ("\"soon\"", "is not a duration"),
        ],
    );
    assert_gateway_refuses(
        "max_concurrent_calls_per_key",
        &[
            (
                "0",
                "max_concurrent_calls_per_key 0 is not allowed: use an integer from 1 to 100000",
            ),
            ("\"8\"", "must be an integer, not a string"),
        ],
    );
}

// === per-tool planning settings ===

#[test]
fn every_planning_key_of_a_tool_is_read() {
    let config = toml_ok(&site_tools(&[
        (
            "update_page",
            concat!(
                "effect = \"write\"\n",
                "preview = \"preview_update_page\"\n",
                "lands_on = \"copy\"\n",
                "lands_on_note = \"a draft copy\"\n",
                "target = \"/id\"\n",
                "copy_id = \"/copy_id\"\n",
                "links = [\"/preview_url\", \"/urls/0\"]\n",
                "snapshots = [\"/snapshot_id\"]\n",
                "undo = \"restore_snapshot\"\n",
                "paths = [\"/dir\", \"/files/*\"]",
            ),
        ),
        (
            "set_flag",
            concat!(
                "predicted_effect = \"Set {name} to {value} ({{as asked}}).\"\n",
                "lands_on = \"live\"\n",
                "target = \"\"",
            ),
        ),
    ]));
    let tools = &config.upstreams["site"].tools;
    assert_eq!(
        tools["update_page"],
        ToolOverride {
            effect: Some(Effect::Write),
            enabled: true,
            predicted_effect: None,
            preview: Some("preview_update_page".to_owned()),
            lands_on: LandsOnSetting::Copy,
            lands_on_note: Some("a draft copy".to_owned()),
            target: Some("/id".to_owned()),
            copy_id: Some("/copy_id".to_owned()),
            links: vec!["/preview_url".to_owned(), "/urls/0".to_owned()],
            snapshots: vec!["/snapshot_id".to_owned()],
            undo: Some("restore_snapshot".to_owned()),
            rate_limit: None,
            paths: Some(vec!["/dir".to_owned(), "/files/*".to_owned()]),
        }
    );
    assert_eq!(
        tools["set_flag"],
        ToolOverride {
            predicted_effect: Some("Set {name} to {value} ({{as asked}}).".to_owned()),
            target: Some(String::new()),
            ..ToolOverride::default()
        }
    );
}

#[test]
fn a_tool_with_no_planning_keys_lands_live_with_nothing_extra() {
    let config =
        toml_ok("[upstreams.a]\ncommand = \"x\"\n[upstreams.a.tools.t]\nenabled = false\n");
    let t = &config.upstreams["a"].tools["t"];
    assert_eq!(
        t,
        &ToolOverride {
            enabled: false,
            ..ToolOverride::default()
        }
    );
    assert_eq!(t.lands_on, LandsOnSetting::Live);
    assert!(t.predicted_effect.is_none() && t.preview.is_none() && t.target.is_none());
    assert!(t.copy_id.is_none() && t.links.is_empty() && t.snapshots.is_empty());
}

#[test]
fn every_bad_planning_value_is_reported_at_once() {
    let errors = toml_err(&site_tools(&[
        (
            "update_page",
            concat!(
                "predicted_effect = \"Update page {id: {title}.\"\n",
                "lands_on = \"elsewhere\"\n",
                "target = \"id\"\n",
                "links = [\"/preview_url\", \"preview_url\", 3]\n",
                "snapshots = [\"\"]",
            ),
        ),
        (
            "delete_page",
            concat!(
                "predicted_effect = \"Delete page {}.\"\n",
                "copy_id = \"/copy_id\"\n",
                "undo = \"restore_snapshot\"\n",
                "target = \"/a~2\"",
            ),
        ),
        (
            "set_plugin_active",
            "predicted_effect = \"Set plugin {slug}.\"\npreview = \"preview_set_plugin\"",
        ),
        (
            "update_option",
            "preview = \"update_option\"\nlands_on_note = \"\"",
        ),
    ]));
    let m = error_at(&errors, "upstreams.site.tools.update_page.predicted_effect");
    assert!(
        m.starts_with("predicted_effect \"Update page {id: {title}.\" has an unclosed '{'"),
        "{m}"
    );
    assert_messages(
        &errors,
        &[
            (
                "upstreams.site.tools.update_page.lands_on",
                "lands_on \"elsewhere\" is not allowed: use \"live\" or \"copy\"",
            ),
            (
                "upstreams.site.tools.update_page.target",
                "\"id\" is not a json pointer: it must start with '/', like \"/id\"",
            ),
        ],
    );
    assert_parts(
        &errors,
        &[
            (
                "upstreams.site.tools.update_page.links[1]",
                "\"preview_url\" is not a json pointer",
            ),
            (
                "upstreams.site.tools.update_page.links[2]",
                "must be a string, not an integer",
            ),
            (
                "upstreams.site.tools.update_page.snapshots[0]",
                "must not be empty",
            ),
            (
                "upstreams.site.tools.delete_page.predicted_effect",
                "empty placeholder",
            ),
            (
                "upstreams.site.tools.delete_page.copy_id",
                "lands_on = \"copy\"",
            ),
            ("upstreams.site.tools.delete_page.target", "'~'"),
            ("upstreams.site.tools.delete_page.undo", "set snapshots too"),
            ("upstreams.site.tools.set_plugin_active.preview", "both set"),
            (
                "upstreams.site.tools.update_option.preview",
                "is the tool itself",
            ),
            (
                "upstreams.site.tools.update_option.lands_on_note",
                "must not be empty",
            ),
        ],
    );
    assert_eq!(errors.len(), 13, "{errors}");
}

#[test]
fn modes_limits_and_planning_mistakes_are_all_reported_from_one_file() {
    let errors = toml_err(
        r#"
        [gateway]
        max_steps = 0
        plan_ttl = "soon"

        [modes.default]
        access = "write"

        [modes."Bad Name"]
        access = "write"

        [modes.careful]
        over_access = "sometimes"
        colour = "red"

        [upstreams.site]
        command = "node"

        [upstreams.site.tools.update_page]
        predicted_effect = "Update page {id"
        target = "id"
        lands_on = "elsewhere"
        "#,
    );
    for key in [
        "gateway.max_steps",
        "gateway.plan_ttl",
        "modes.default",
        "modes.\"Bad Name\"",
        "modes.careful.over_access",
        "modes.careful.colour",
        "upstreams.site.tools.update_page.predicted_effect",
        "upstreams.site.tools.update_page.target",
        "upstreams.site.tools.update_page.lands_on",
    ] {
        error_at(&errors, key);
    }
    assert_eq!(errors.len(), 9, "{errors}");
    assert!(errors.iter().all(|e| e.file == origin()));
}

// === the demo site ===

/// The demo site's own tool list, as its server declares it.
const DEMO_SERVER_RS: &str = include_str!("../../demo-site/src/server.rs");

fn demo_site_has_tool(name: &str) -> bool {
    DEMO_SERVER_RS.contains(&format!("name = \"{name}\""))
}

#[test]
fn the_demo_file_is_a_valid_plangate_toml() {
    let config = toml_ok(DEMO_TOML);
    assert_eq!(config.upstreams["site"].tools, demo_tool_overrides());
}

#[test]
fn the_demo_overrides_name_real_demo_site_tools() {
    let tools = demo_tool_overrides();
    assert_eq!(
        tools.keys().map(String::as_str).collect::<Vec<_>>(),
        [
            "create_menu_item",
            "delete_page",
            "restore_snapshot",
            "set_plugin_active",
            "update_option",
            "update_page"
        ]
    );
    for (name, t) in &tools {
        assert!(demo_site_has_tool(name), "demo-site has no tool {name}");
        if let Some(preview) = &t.preview {
            assert!(
                demo_site_has_tool(preview),
                "demo-site has no tool {preview}"
            );
        }
        assert!(
            t.preview.is_some() || t.predicted_effect.is_some(),
            "{name} says what it will do"
        );
        assert!(t.target.is_some(), "{name} names its target");
    }
    let update = &tools["update_page"];
    assert_eq!(update.lands_on, LandsOnSetting::Copy);
    assert_eq!(
        update.lands_on_note.as_deref(),
        Some("a new draft copy; the live page is unchanged until someone publishes the copy")
    );
    assert_eq!(tools["delete_page"].lands_on, LandsOnSetting::Live);
    assert_eq!(tools["delete_page"].snapshots, ["/snapshot_id"]);
}

/// Looks `pointer` up in `value`, failing the test when it finds nothing.
fn at<'v>(value: &'v Value, pointer: &str, what: &str) -> &'v Value {
    value
        .pointer(pointer)
        .unwrap_or_else(|| panic!("{what}: {pointer} finds nothing in {value}"))
}

#[test]
fn the_demo_pointers_and_templates_fit_the_demo_sites_arguments_and_results() {
    use plangate_demo_site::{
        MenuItemArgs, PageIdArgs, PluginArgs, SiteState, SnapshotArgs, UpdateOptionArgs,
        UpdatePageArgs,
    };
    let tools = demo_tool_overrides();
    let mut site = SiteState::seed();
    // Each write with arguments its schema accepts, its preview's answer
    // (when it has one) and its real result on a fresh seed.
    let update_args = json!({"id": 2, "title": "Our story"});
    let a: UpdatePageArgs = serde_json::from_value(update_args.clone()).unwrap();
    let update_preview = site
        .preview_update_page(a.id, a.title.as_deref(), a.body.as_deref())
        .unwrap();
    let update_result = site
        .update_page(a.id, a.title.as_deref(), a.body.as_deref())
        .unwrap();

    let menu_args = json!({"menu": "main", "label": "Team", "url": "/team"});
    let a: MenuItemArgs = serde_json::from_value(menu_args.clone()).unwrap();
    let menu_preview = site
        .preview_create_menu_item(&a.menu, &a.label, &a.url)
        .unwrap();
    let menu_result = site.create_menu_item(&a.menu, &a.label, &a.url).unwrap();

    let option_args = json!({"name": "tagline", "value": "Small and kind"});
    let a: UpdateOptionArgs = serde_json::from_value(option_args.clone()).unwrap();
    let option_preview = site.preview_update_option(&a.name, &a.value).unwrap();
    let option_result = site.update_option(&a.name, a.value).unwrap();

    let delete_args = json!({"id": 3});
    let a: PageIdArgs = serde_json::from_value(delete_args.clone()).unwrap();
    let delete_preview = site.preview_delete_page(a.id).unwrap();
    let delete_result = site.delete_page(a.id).unwrap();

    let plugin_args = json!({"slug": "forms", "active": true});
    let a: PluginArgs = serde_json::from_value(plugin_args.clone()).unwrap();
    let plugin_result = site.set_plugin_active(&a.slug, a.active).unwrap();

    let restore_args = json!({"snapshot_id": delete_result["snapshot_id"]});
    let a: SnapshotArgs = serde_json::from_value(restore_args.clone()).unwrap();
    let restore_preview = site.preview_restore_snapshot(&a.snapshot_id).unwrap();
    let restore_result = site.restore_snapshot(&a.snapshot_id).unwrap();

    let cases = [
        (
            "update_page",
            &update_args,
            Some(&update_preview),
            &update_result,
        ),
        (
            "create_menu_item",
            &menu_args,
            Some(&menu_preview),
            &menu_result,
        ),
        (
            "update_option",
            &option_args,
            Some(&option_preview),
            &option_result,
        ),
        (
            "delete_page",
            &delete_args,
            Some(&delete_preview),
            &delete_result,
        ),
        ("set_plugin_active", &plugin_args, None, &plugin_result),
        (
            "restore_snapshot",
            &restore_args,
            Some(&restore_preview),
            &restore_result,
        ),
    ];
    for (tool, args, preview, result) in cases {
        let t = &tools[tool];
        assert_eq!(t.preview.is_some(), preview.is_some(), "{tool}");
        at(args, t.target.as_deref().unwrap(), tool);
        if let Some(template) = &t.predicted_effect {
            for name in placeholders(template) {
                assert!(args.get(&name).is_some(), "{tool}: no argument {name}");
            }
        }
        if let Some(p) = preview {
            assert!(at(p, "/effect", tool).is_string(), "{tool}: {p}");
            assert!(at(p, "/target", tool).is_string(), "{tool}: {p}");
            let version = at(p, "/target_version", tool);
            assert!(version.is_number() || version.is_string(), "{tool}: {p}");
        }
        for pointer in t.copy_id.iter().chain(&t.links).chain(&t.snapshots) {
            at(result, pointer, tool);
        }
    }
    assert_eq!(
        at(&update_result, "/copy_id", "update_page"),
        &json!(5),
        "the copy is a new page: {update_result}"
    );
}

/// `{name}`s of a template, for the test above (the crate checks the
/// syntax; this only needs the names of a valid one).
fn placeholders(template: &str) -> Vec<String> {
    template
        .replace("{{", "")
        .replace("}}", "")
        .split('{')
        .skip(1)
        .filter_map(|part| part.split_once('}').map(|(name, _)| name.to_owned()))
        .collect()
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
    assert_eq!(json.modes, Modes::default());
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
    let config = json_ok(&mcp_servers(&[
        (
            "a",
            r#"{"type": "streamable-http", "url": "https://a.example.com/mcp"}"#,
        ),
        (
            "b",
            r#"{"type": "streamableHttp", "url": "https://b.example.com/mcp"}"#,
        ),
        ("c", r#"{"url": "https://c.example.com/mcp"}"#),
        (
            "d",
            r#"{"transport": "http", "url": "https://d.example.com/mcp"}"#,
        ),
    ]));
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
    let errors = json_err(&mcp_servers(&[
        (
            "typed",
            r#"{"type": "sse", "url": "https://a.example.com/events"}"#,
        ),
        (
            "cursor",
            r#"{"transport": "sse", "url": "https://b.example.com/events"}"#,
        ),
        ("bypath", r#"{"url": "https://c.example.com/sse"}"#),
        (
            "ok",
            r#"{"type": "http", "url": "https://d.example.com/sse"}"#,
        ),
    ]));
    for key in [
        "mcpServers.typed.type",
        "mcpServers.cursor.transport",
        "mcpServers.bypath.url",
    ] {
        assert_says(&errors, key, &["legacy SSE", "Streamable HTTP"]);
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
    let key = "servers.gh.env.GITHUB_TOKEN";
    assert_says(&errors, key, &["input variable", "${env:VAR}"]);
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
    let named = "mcpServers.\"my server\"";
    assert_says(&errors, named, &["\"my server\"", "does not rename"]);
}

#[test]
fn json_mistakes_are_all_reported_with_keys() {
    let errors = json_err(&mcp_servers(&[
        ("a", r#"{"command": "x", "args": "oops"}"#),
        ("b", r#"{"command": "x", "url": "http://h/mcp"}"#),
        ("c", r#"{"type": "websocket", "url": "ws://h"}"#),
        ("d", r#"{"url": "ftp://h/mcp"}"#),
        // Unset, not wrong: `e` would be down, and is no mistake.
        ("e", r#"{"command": "${NOPE}"}"#),
    ]));
    assert_parts(
        &errors,
        &[
            ("mcpServers.a.args", "a list of strings"),
            ("mcpServers.b", "both command and url"),
            ("mcpServers.c.type", "\"websocket\""),
            ("mcpServers.d.url", "http:// or https://"),
        ],
    );
    assert_eq!(errors.len(), 4, "{errors}");
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

#[test]
fn an_upstreams_call_timeout_is_read_and_checked() {
    let config = toml_ok(
        "[upstreams.a]\ncommand = \"x\"\ncall_timeout = \"5m\"\n[upstreams.b]\nurl = \"http://127.0.0.1:9/mcp\"\n",
    );
    assert_eq!(config.upstreams["a"].call_timeout, Duration::from_secs(300));
    assert_eq!(
        config.upstreams["b"].call_timeout,
        plangate_config::DEFAULT_CALL_TIMEOUT
    );
    for (value, says) in [
        ("\"soon\"", "is not a duration"),
        ("0", "out of range: use 1s to 1d"),
        ("\"2d\"", "out of range: use 1s to 1d"),
    ] {
        assert_shown(
            &format!("[upstreams.a]\ncommand = \"x\"\ncall_timeout = {value}\n"),
            &["upstreams.a.call_timeout", says],
        );
    }
}

#[test]
fn an_upstreams_protocol_is_read_and_checked() {
    use plangate_config::UpstreamProtocol;
    let config = toml_ok(
        "[upstreams.a]\ncommand = \"x\"\nprotocol = \"2026-07-28\"\n[upstreams.b]\nurl = \"http://127.0.0.1:9/mcp\"\nprotocol = \"auto\"\n[upstreams.c]\ncommand = \"y\"\n",
    );
    assert_eq!(
        config.upstreams["a"].protocol,
        UpstreamProtocol::V2026_07_28
    );
    assert_eq!(config.upstreams["b"].protocol, UpstreamProtocol::Auto);
    assert_eq!(
        config.upstreams["c"].protocol,
        UpstreamProtocol::V2025_11_25
    );
    assert_shown(
        "[upstreams.a]\ncommand = \"x\"\nprotocol = \"2026\"\n",
        &[
            "upstreams.a.protocol",
            "protocol \"2026\" is not allowed: use \"2025-11-25\" (the default), \"2026-07-28\" or \"auto\"",
        ],
    );
}

#[test]
fn allowed_origins_default_to_the_allowed_hosts_and_are_checked() {
    let config = toml_ok(&with_gateway(
        "allowed_hosts = [\"gate.example.com\", \"::1\"]",
    ));
    assert_eq!(
        config.gateway.origins(),
        [
            "http://gate.example.com:*",
            "https://gate.example.com:*",
            "http://[::1]:*",
            "https://[::1]:*"
        ]
    );
    let config = toml_ok(&with_gateway(
        "allowed_origins = [\"https://app.example.com\", \"null\"]",
    ));
    assert_eq!(
        config.gateway.origins(),
        ["https://app.example.com", "null"]
    );
    assert_shown(
        &with_gateway("allowed_origins = [\"app.example.com\", \"https://x/y\"]"),
        &[
            "gateway.allowed_origins[0]: origin \"app.example.com\" is not valid",
            "gateway.allowed_origins[1]",
        ],
    );
}

#[test]
fn redaction_names_and_patterns_are_read_and_checked() {
    let config = toml_ok(&and_upstream_a(
        "[redaction]\nnames = [\"ssn\"]\npatterns = ['\\bACME-[0-9]{6}\\b']\n",
    ));
    assert_eq!(config.redaction.names, ["ssn"]);
    let r = config.redaction.redactor().unwrap();
    assert!(r.is_secret_key("customer_ssn"));
    assert_shown(
        &and_upstream_a("[redaction]\nnames = [\"a b\"]\npatterns = [\"(open\"]\ncolour = 1\n"),
        &[
            "redaction.names[0]: redaction name \"a b\" is not usable",
            "redaction.patterns[0]: redaction pattern \"(open\" is not a valid regular expression",
            "redaction.colour",
        ],
    );
}

#[test]
fn rate_limits_are_read_and_checked() {
    let config = toml_ok(
        "[gateway]\nrate_limit = \"120/min\"\n[upstreams.a]\ncommand = \"x\"\n[upstreams.a.tools.t]\nrate_limit = \"2/s\"\n",
    );
    let per_key = config.gateway.rate_limit.unwrap();
    assert_eq!((per_key.calls, per_key.per), (120, Duration::from_secs(60)));
    assert_eq!(per_key.to_string(), "120/min");
    assert_eq!(
        config.upstreams["a"].tools["t"]
            .rate_limit
            .unwrap()
            .to_string(),
        "2/s"
    );
    for bad in ["\"0/min\"", "\"10/week\"", "\"ten/s\"", "5"] {
        assert_shown(
            &with_gateway(&format!("rate_limit = {bad}")),
            &["gateway.rate_limit"],
        );
    }
}

// === rules ===

#[test]
fn rules_are_read_in_order_and_checked_at_load_with_their_line() {
    let config = toml_ok(&and_upstream_a(
        r#"[[rules]]
name = "scratch-runs"
when = "effect != 'read' && glob(arguments.path, '/srv/root/scratch/**')"
outcome = "run"

[[rules]]
name = "no-env"
when = "has(arguments.path) && glob(arguments.path, '/**/*.env')"
outcome = "refuse"
message = "secrets stay where they are"
modes = ["plan"]

"#,
    ));
    let names: Vec<&str> = config.rules.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["scratch-runs", "no-env"]);
    assert_eq!(config.rules[1].modes, Some(vec!["plan".to_owned()]));
    assert_eq!(
        config.rules[1].message.as_deref(),
        Some("secrets stay where they are")
    );

    let errors = toml_err(&and_upstream_a(
        r#"[[rules]]
name = "typo"
when = "tol == 'x'"
outcome = "run"

[[rules]]
name = "quiet"
when = "tool == 'y'"
outcome = "refuse"
colour = "red"

[[rules]]
name = "unknown-mode"
when = "tool == 'z'"
outcome = "plan"
modes = ["careful"]

[[rules]]
when = "tool == 'w'"
outcome = "ask"
"#,
    ));
    assert_says(
        &errors,
        "rules[0].when",
        &["\"tol\"", "not a variable", "(line 1)"],
    );
    assert_says(
        &errors,
        "rules[1].message",
        &["needs a message", "(line 6)"],
    );
    assert_says(&errors, "rules[1].colour", &["unknown key"]);
    assert_says(&errors, "rules[2].modes", &["\"careful\"", "(line 12)"]);
    assert_says(&errors, "rules[3].name", &["has no name", "(line 18)"]);
    // The place is the key's 0-based index and the line, never a second
    // count from 1.
    assert!(!errors.to_string().contains("rule 4"), "{errors}");
    assert_shown(
        &and_upstream_a("[[rules]]\nname = \"x\"\nwhen = \"tool ==\"\noutcome = \"run\"\n"),
        &["rules[0].when", "not CEL"],
    );
}

#[test]
fn a_misspelt_field_of_a_server_entry_is_named_with_the_one_meant() {
    let errors = json_err(r#"{"mcpServers": {"fs": {"comand": "npx", "args": []}}}"#);
    assert_eq!(
        error_at(&errors, "mcpServers.fs.comand"),
        "unknown field \"comand\": did you mean \"command\"?"
    );
    // Other clients' own fields stay ignored, and so does a near miss
    // beside the field itself.
    json_ok(
        r#"{"mcpServers": {"fs": {"command": "npx", "comand": "x", "autoApprove": [], "timeout": 5}}}"#,
    );
    let errors = toml_err("[upstreams.fs]\ncomand = \"npx\"\n");
    let message = error_at(&errors, "upstreams.fs.comand");
    assert!(
        message.starts_with("unknown key \"comand\": did you mean \"command\"? allowed keys are"),
        "{message}"
    );
}

#[test]
fn json_given_as_plangate_toml_points_at_mcp_config() {
    let errors = toml_err("{\n  \"mcpServers\": {}\n}\n");
    let message = error_at(&errors, "");
    assert!(
        message.starts_with("toml syntax error at line 1"),
        "{message}"
    );
    assert!(message.contains("looks like JSON"), "{message}");
    assert!(message.contains("--mcp-config FILE"), "{message}");
}

const SITE: &str = "[upstreams.site]\ncommand = \"node\"\n";

#[test]
fn auth_oauth_names_the_resource_the_issuers_and_the_scope_mapping() {
    let config = toml_ok(&format!(
        r#"{SITE}
[auth.oauth]
resource = "https://plangate.example.com/mcp"
issuers = ["https://id.example.com", "http://127.0.0.1:9400"]
[auth.oauth.scopes]
"mcp:read" = "read"
"mcp:plan" = "plan"
"mcp:write" = "write"
"#
    ));
    let oauth = config.auth.oauth.unwrap();
    assert_eq!(oauth.resource, "https://plangate.example.com/mcp");
    assert_eq!(
        oauth.issuers,
        ["https://id.example.com", "http://127.0.0.1:9400"]
    );
    assert_eq!(oauth.identity_claim, "sub", "the default");
    assert_eq!(oauth.scopes["mcp:plan"], plangate_core::Scope::Plan);
    assert_eq!(oauth.scopes.len(), 3);
    // Without [auth], no OAuth.
    assert_eq!(toml_ok(SITE).auth.oauth, None);
}

#[test]
fn every_mistake_in_auth_oauth_is_reported_with_what_to_write() {
    let errors = toml_err(&format!(
        r#"{SITE}
[auth.oauth]
resource = "http://plangate.example.com/mcp#x"
issuers = ["http://id.example.com", "ftp://x"]
identity_claim = ""
audience = "x"
[auth.oauth.scopes]
"mcp:read" = "reader"
"two words" = "read"
"#
    ));
    assert_says(
        &errors,
        "auth.oauth.resource",
        &["must not have a query or fragment"],
    );
    assert_says(
        &errors,
        "auth.oauth.issuers[0]",
        &["not loopback", "use https://"],
    );
    assert_says(&errors, "auth.oauth.issuers[1]", &["not supported"]);
    assert_says(&errors, "auth.oauth.audience", &["unknown key"]);
    assert_says(&errors, "auth.oauth.identity_claim", &["empty"]);
    assert_says(
        &errors,
        "auth.oauth.scopes.\"mcp:read\"",
        &["unknown scope \"reader\""],
    );
    assert_says(&errors, "auth.oauth.scopes.\"two words\"", &["one word"]);

    let errors = toml_err(&format!("{SITE}\n[auth.oauth]\n"));
    assert_says(&errors, "auth.oauth.resource", &["missing", "resource = "]);
    assert_says(&errors, "auth.oauth.issuers", &["missing"]);
    assert_says(
        &errors,
        "auth.oauth.scopes",
        &["missing", "\"mcp:plan\" = \"plan\""],
    );
    let errors = toml_err(&format!(
        "{SITE}\n[auth.oauth]\nresource = \"https://a.example/mcp\"\nissuers = []\nscopes = {{}}\n"
    ));
    assert_says(&errors, "auth.oauth.issuers", &["empty"]);
    assert_says(&errors, "auth.oauth.scopes", &["empty"]);
    let errors = toml_err(&format!("{SITE}\n[auth]\nsaml = 1\n"));
    assert_says(&errors, "auth.saml", &["unknown key"]);
}

#[test]
fn an_http_upstream_may_sign_in_with_oauth_and_its_secret_is_never_shown() {
    let config = toml_ok(
        r#"[upstreams.gh]
url = "https://mcp.example.com/mcp"
[upstreams.gh.oauth]
scopes = ["repo", "read:org"]
client_id = "plangate-team"
client_secret = "${MY_TOKEN}"
"#,
    );
    let oauth = config.upstreams["gh"].oauth.clone().unwrap();
    assert_eq!(oauth.scopes, ["repo", "read:org"]);
    assert_eq!(oauth.client_id.as_deref(), Some("plangate-team"));
    assert_eq!(oauth.client_secret.as_deref(), Some("tok-123"));
    assert!(!format!("{oauth:?}").contains("tok-123"));
    assert!(!serde_json::to_string(&config).unwrap().contains("tok-123"));
    // The least: an empty table (dynamic registration, the upstream's scopes).
    let config =
        toml_ok("[upstreams.gh]\nurl = \"https://mcp.example.com/mcp\"\n[upstreams.gh.oauth]\n");
    assert_eq!(
        config.upstreams["gh"].oauth.clone().unwrap().client_id,
        None
    );

    let errors = toml_err(
        r#"[upstreams.local]
command = "node"
[upstreams.local.oauth]
[upstreams.gh]
url = "https://mcp.example.com/mcp"
headers = { Authorization = "Bearer x" }
[upstreams.gh.oauth]
client_secret = "s"
flow = "device"
"#,
    );
    assert_says(
        &errors,
        "upstreams.local.oauth",
        &["for upstreams reached by url"],
    );
    assert_says(
        &errors,
        "upstreams.gh.oauth.client_secret",
        &["needs the client_id"],
    );
    assert_says(&errors, "upstreams.gh.oauth.flow", &["unknown key"]);
    let grant_errors = toml_err(
        r#"[upstreams.a]
url = "https://a.example/mcp"
[upstreams.a.oauth]
grant = "device"
[upstreams.b]
url = "https://b.example/mcp"
[upstreams.b.oauth]
grant = "client_credentials"
client_id = "machine"
"#,
    );
    assert_says(
        &grant_errors,
        "upstreams.a.oauth.grant",
        &["not supported", "client_credentials"],
    );
    assert_says(
        &grant_errors,
        "upstreams.b.oauth.grant",
        &["needs the client_id and client_secret"],
    );
    assert!(
        errors
            .iter()
            .any(|e| e.key == "upstreams.gh.oauth" && e.message.contains("Authorization header")),
        "{errors}"
    );
}

/// A Client ID Metadata Document's URL is the client id: https, with a
/// path, no fragment or user; anything else is said with what to write.
#[test]
fn an_upstream_client_metadata_url_is_an_https_url_with_a_path() {
    let config = toml_ok(
        r#"[upstreams.gh]
url = "https://mcp.example.com/mcp"
[upstreams.gh.oauth]
client_metadata_url = "https://plangate.example.com/oauth/client.json"
"#,
    );
    assert_eq!(
        config.upstreams["gh"]
            .oauth
            .clone()
            .unwrap()
            .client_metadata_url
            .as_deref(),
        Some("https://plangate.example.com/oauth/client.json")
    );
    for bad in [
        "http://plangate.example.com/client.json",
        "https://plangate.example.com",
        "https://plangate.example.com/",
        "https://plangate.example.com/c.json#x",
        "https://user@plangate.example.com/c.json",
    ] {
        let errors = toml_err(&format!(
            "[upstreams.gh]\nurl = \"https://mcp.example.com/mcp\"\n[upstreams.gh.oauth]\nclient_metadata_url = \"{bad}\"\n"
        ));
        assert_says(
            &errors,
            "upstreams.gh.oauth.client_metadata_url",
            &[
                "not a Client ID Metadata Document URL",
                "plangate upstream client-metadata",
            ],
        );
    }
}

/// `[auth.oauth.introspection]`: a client of one of the issuers (the only
/// one by default), its secret never shown; mistakes said with what to
/// write.
#[test]
fn auth_oauth_introspection_names_a_client_of_a_trusted_issuer() {
    let base = "[upstreams.a]\ncommand = \"x\"\n[auth.oauth]\nresource = \"https://p.example/mcp\"\nissuers = [\"https://id.example\"]\n[auth.oauth.scopes]\n\"mcp:read\" = \"read\"\n";
    let config = toml_ok(&format!(
        "{base}[auth.oauth.introspection]\nclient_id = \"plangate\"\nclient_secret = \"${{MY_TOKEN}}\"\n"
    ));
    let i = config.auth.oauth.clone().unwrap().introspection.unwrap();
    assert_eq!(i.issuer, "https://id.example");
    assert_eq!(i.client_secret, "tok-123");
    assert_eq!(i.every, std::time::Duration::from_secs(60));
    assert!(!format!("{i:?}").contains("tok-123"));
    assert!(!serde_json::to_string(&config).unwrap().contains("tok-123"));

    let errors = toml_err(&format!(
        "{base}[auth.oauth.introspection]\nissuer = \"https://other.example\"\nclient_secret = \"s\"\nevery = \"2h\"\nendpoint = \"x\"\n"
    ));
    assert_says(
        &errors,
        "auth.oauth.introspection.issuer",
        &["is not one of auth.oauth.issuers"],
    );
    assert_says(&errors, "auth.oauth.introspection.client_id", &["missing"]);
    assert_says(&errors, "auth.oauth.introspection.every", &["out of range"]);
    assert_says(
        &errors,
        "auth.oauth.introspection.endpoint",
        &["unknown key"],
    );
    let two = "[upstreams.a]\ncommand = \"x\"\n[auth.oauth]\nresource = \"https://p.example/mcp\"\nissuers = [\"https://a.example\", \"https://b.example\"]\n[auth.oauth.scopes]\n\"mcp:read\" = \"read\"\n[auth.oauth.introspection]\nclient_id = \"c\"\nclient_secret = \"s\"\n";
    assert_says(
        &toml_err(two),
        "auth.oauth.introspection.issuer",
        &["with several issuers, name the one"],
    );
}
