//! plangate as an OAuth 2.1 protected resource, against a real
//! authorization server (oidc-provider, pinned in `tests/oauth`, started
//! here on 127.0.0.1) and the official MCP Python SDK's OAuth client.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{Proc, Scratch, peers, repo_root};
use serde_json::{Value, json};

/// A running oidc-provider; killed on drop.
struct Provider {
    child: Child,
    issuer: String,
}

impl Drop for Provider {
    fn drop(&mut self) {
        common::kill_tree(&mut self.child);
    }
}

/// Starts the fixture authorization server for `resources`, tokens living
/// `ttl` seconds.
fn provider(resources: &[&str], ttl: u64) -> Provider {
    provider_on(0, resources, ttl)
}

/// [`provider`] on `port` (0: any free one).
fn provider_on(port: u16, resources: &[&str], ttl: u64) -> Provider {
    provider_with(port, resources, ttl, &[])
}

/// [`provider_on`] with more of the fixture's arguments (`--format`).
fn provider_with(port: u16, resources: &[&str], ttl: u64, more: &[&str]) -> Provider {
    peers();
    let tools = repo_root().join(".tools/oauth");
    let mut cmd = Command::new(tools.join("node_modules/.bin/node"));
    cmd.arg(tools.join("provider.mjs"))
        .args(["--port", &port.to_string(), "--ttl", &ttl.to_string()])
        .args(["--scopes", "mcp:read mcp:plan mcp:write"])
        .args(more);
    for r in resources {
        cmd.args(["--resource", r]);
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = cmd.spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    let issuer = line
        .trim()
        .strip_prefix("oidc-provider listening on ")
        .unwrap_or_else(|| panic!("provider said {line:?}"))
        .to_owned();
    Provider { child, issuer }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `application/x-www-form-urlencoded` of `pairs`.
fn encoded(pairs: &[(&str, &str)]) -> String {
    let enc = |s: &str| {
        s.bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect::<String>()
    };
    pairs
        .iter()
        .map(|(k, v)| format!("{}={}", enc(k), enc(v)))
        .collect::<Vec<_>>()
        .join("&")
}

/// A client-credentials token of the provider's `machine` client for
/// `resource` with `scope`.
async fn machine_token(p: &Provider, resource: &str, scope: &str) -> String {
    let mut form = vec![("grant_type", "client_credentials"), ("resource", resource)];
    if !scope.is_empty() {
        form.push(("scope", scope));
    }
    let body: Value = reqwest::Client::new()
        .post(format!("{}/token", p.issuer))
        .basic_auth("machine", Some("machine-secret"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(encoded(&form))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    body["access_token"]
        .as_str()
        .unwrap_or_else(|| panic!("no token: {body}"))
        .to_owned()
}

/// An `initialize` POST with `token` (and a session id): status, the
/// `WWW-Authenticate` header and the body.
async fn initialize(url: &str, token: Option<&str>, session: Option<&str>) -> (u16, String, Value) {
    let mut request = reqwest::Client::new()
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .json(&json!({
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "t", "version": "0"}}
        }));
    if let Some(t) = token {
        request = request.bearer_auth(t);
    }
    if let Some(s) = session {
        request = request.header("mcp-session-id", s);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let challenge = response
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let text = response.text().await.unwrap();
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, challenge, body)
}

/// plangate in front of the official memory server, with `[auth.oauth]`
/// trusting `issuers`, on a port chosen beforehand (the resource URL is in
/// the config).
fn plangate(scratch: &Scratch, port: u16, issuers: &[&str]) -> Proc {
    plangate_with(scratch, port, issuers, "", "")
}

/// [`plangate`] with more `[auth.oauth]` lines (`oauth`) and more config
/// lines at the end (`more`).
fn plangate_with(scratch: &Scratch, port: u16, issuers: &[&str], oauth: &str, more: &str) -> Proc {
    let memory = peers().js("@modelcontextprotocol/server-memory/dist/index.js");
    let issuers: Vec<String> = issuers.iter().map(|i| format!("{i:?}")).collect();
    let config = scratch.write(
        "plangate.toml",
        &format!(
            r#"[upstreams.memory]
command = "node"
args = [{memory:?}]
env = {{ MEMORY_FILE_PATH = {file:?} }}

[auth.oauth]
resource = "http://127.0.0.1:{port}/mcp"
issuers = [{issuers}]
clock_skew = 0
{oauth}
[auth.oauth.scopes]
"mcp:read" = "read"
"mcp:plan" = "plan"
"mcp:write" = "write"
{more}
"#,
            memory = memory.display().to_string(),
            file = scratch.path().join("memory.jsonl").display().to_string(),
            issuers = issuers.join(", "),
        ),
    );
    let mut cmd = scratch.command(&[
        "serve",
        "--http",
        &format!("127.0.0.1:{port}"),
        "--config",
        config.to_str().unwrap(),
    ]);
    cmd.env("PLANGATE_LOG", "debug");
    Proc::start(cmd, "plangate serving ")
}

/// The Python SDK's OAuth client, signing in as `user` and making `calls`.
fn python_client(url: &str, user: &str, calls: &[(&str, Value)]) -> Vec<Value> {
    let p = peers();
    let mut cmd = Command::new(&p.python);
    cmd.arg(repo_root().join("tests/oauth/client.py"))
        .args(["--url", url, "--user", user]);
    for (tool, args) in calls {
        cmd.args(["--call", tool, &args.to_string()]);
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "client.py failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn call_text(lines: &[Value], i: usize) -> Value {
    let line = &lines[i + 1];
    assert_eq!(line["is_error"], false, "{line}");
    match &line["structured"] {
        Value::Null => serde_json::from_str(line["text"].as_str().unwrap()).unwrap(),
        s => s.clone(),
    }
}

fn never_written(scratch: &Scratch, gw: &Proc, tokens: &[&str]) {
    let mut stored = Vec::new();
    for entry in std::fs::read_dir(scratch.data_dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            stored.extend(std::fs::read(&path).unwrap());
        }
    }
    let log = gw.log();
    for token in tokens {
        assert!(!log.contains(token), "a token is in plangate's log");
        let bytes = token.as_bytes();
        assert!(
            !stored.windows(bytes.len()).any(|w| w == bytes),
            "a token is in the data dir"
        );
    }
}

/// plangate's client at `url`, holding a token of the provider's
/// `machine` client with `scope`.
async fn machine_client(p: &Provider, url: &str, scope: &str) -> common::Client {
    let token = machine_token(p, url, scope).await;
    common::http_client(url, Some(&token)).await.unwrap()
}

fn identity_of(issuer: &str, user: &str) -> String {
    format!("{issuer}#{user}")
}

/// plangate serving HTTP on `port` (`url` its MCP endpoint) that trusts
/// one provider, `idp`, whose tokens for it live an hour. The tests bind
/// the fields in this order, so the gateway ends before its scratch dir.
struct Trusting {
    scratch: Scratch,
    port: u16,
    url: String,
    idp: Provider,
    gw: Proc,
}

fn trusting_one_provider() -> Trusting {
    let scratch = Scratch::new();
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}/mcp");
    let idp = provider(&[&url], 3600);
    let gw = plangate(&scratch, port, &[&idp.issuer]);
    Trusting {
        scratch,
        port,
        url,
        idp,
        gw,
    }
}

/// The done-when path: the Python SDK discovers plangate's metadata,
/// signs its person in at the provider and calls tools as that identity;
/// the plan it makes is its own, invisible to another person.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_signs_in_and_each_identity_has_its_own_plan() {
    let Trusting {
        scratch,
        port,
        url,
        idp,
        gw,
    } = trusting_one_provider();

    // What a client finds first.
    let (status, challenge, body) = initialize(&url, None, None).await;
    assert_eq!(status, 401);
    let metadata_url = format!("http://127.0.0.1:{port}/.well-known/oauth-protected-resource/mcp");
    assert_eq!(
        challenge,
        format!("Bearer resource_metadata=\"{metadata_url}\"")
    );
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("sign in through your MCP client"),
        "{message}"
    );
    let metadata: Value = reqwest::get(&metadata_url)
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(metadata["resource"], url.as_str());
    assert_eq!(metadata["authorization_servers"], json!([idp.issuer]));
    assert_eq!(
        metadata["scopes_supported"],
        json!(["mcp:plan", "mcp:read", "mcp:write"])
    );

    // Alice signs in; her write runs (write scope, default mode) and is
    // on her record.
    let entity = |name: &str| json!({"entities": [{"name": name, "entityType": "person", "observations": []}]});
    let alice = python_client(
        &url,
        "alice",
        &[
            ("create_entities", entity("Ada")),
            ("plangate_begin_session", json!({"mode": "plan"})),
            ("create_entities", entity("Grace")),
            ("plangate_get_plan", json!({})),
        ],
    );
    assert!(
        alice[0]["tools"]
            .as_array()
            .unwrap()
            .contains(&json!("create_entities")),
        "{}",
        alice[0]
    );
    let planned = call_text(&alice, 2);
    assert_eq!(planned["code"], "plan_step", "{planned}");
    let plan = call_text(&alice, 3);
    assert_eq!(plan["pending_steps"], 1, "{plan}");
    let graph = std::fs::read_to_string(scratch.path().join("memory.jsonl")).unwrap();
    assert!(graph.contains("Ada") && !graph.contains("Grace"), "{graph}");

    // Bob, another person of the same provider, has a plan of his own.
    let bob = python_client(&url, "bob", &[("plangate_get_plan", json!({}))]);
    let his = call_text(&bob, 0);
    assert_eq!(his["pending_steps"], 0, "{his}");

    // Operators name identities as ISSUER#USER.
    let alice_name = identity_of(&idp.issuer, "alice");
    let args = ["keys", "list", "--json"];
    let keys = common::parsed(&args, &common::succeeded(&args, &scratch.run(&args)));
    let names: Vec<&str> = keys
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&alice_name.as_str()), "{keys}");
    let row = keys
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["name"] == alice_name.as_str())
        .unwrap();
    assert_eq!(row["kind"], "oauth_identity", "{row}");
    assert_eq!(row["prefix"], "oauth", "{row}");
    let args = ["plans", "show", "--key", &alice_name, "--json"];
    let shown = common::parsed(&args, &common::succeeded(&args, &scratch.run(&args)));
    assert_eq!(shown["pending_steps"], 1, "{shown}");
    drop(gw);
}

/// Every token plangate must refuse is refused 401 before anything runs:
/// for another resource, from an issuer not trusted, expired, not a JWT;
/// one with no mapped scope is 403; a session opened with a good token
/// does not let a bad one in; a step planned with a `plan` token is not
/// applied on the same identity's `write` token; no token is ever logged
/// or stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tokens_are_refused_and_a_plan_token_s_steps_wait_for_a_person() {
    let scratch = Scratch::new();
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}/mcp");
    let other = "http://127.0.0.1:9/other";
    let idp = provider(&[&url, other], 3600);
    let stranger = provider(&[&url], 3600);
    let brief = provider(&[&url], 2);
    let gw = plangate(&scratch, port, &[&idp.issuer, &brief.issuer]);

    let good = machine_token(&idp, &url, "mcp:read").await;
    let (status, _, body) = initialize(&url, Some(&good), None).await;
    assert_eq!(status, 200, "{body}");

    let refused = |status: u16, challenge: &str, body: &Value, says: &str| {
        assert_eq!(status, 401, "{body}");
        assert!(
            challenge.starts_with("Bearer error=\"invalid_token\""),
            "{challenge}"
        );
        assert!(challenge.contains("resource_metadata="), "{challenge}");
        assert_eq!(body["error"]["data"]["code"], "invalid_token", "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{message}");
    };
    let elsewhere = machine_token(&idp, other, "mcp:write").await;
    let (s, c, b) = initialize(&url, Some(&elsewhere), None).await;
    refused(s, &c, &b, "issued for another resource");
    let foreign = machine_token(&stranger, &url, "mcp:write").await;
    let (s, c, b) = initialize(&url, Some(&foreign), None).await;
    refused(s, &c, &b, "is not one plangate trusts");
    let short = machine_token(&brief, &url, "mcp:write").await;
    let (s, _, b) = initialize(&url, Some(&short), None).await;
    assert_eq!(s, 200, "valid while it lasts: {b}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (s, c, b) = initialize(&url, Some(&short), None).await;
    refused(s, &c, &b, "has expired");
    let (s, c, b) = initialize(&url, Some("not.a.token"), None).await;
    refused(s, &c, &b, "neither a plangate API key");

    // Valid, but no scope plangate knows.
    let scopeless = machine_token(&idp, &url, "").await;
    let (s, c, b) = initialize(&url, Some(&scopeless), None).await;
    assert_eq!(s, 403, "{b}");
    assert!(
        c.starts_with("Bearer error=\"insufficient_scope\", scope=\"mcp:plan mcp:read mcp:write\""),
        "{c}"
    );
    assert_eq!(b["error"]["data"]["code"], "insufficient_scope");

    // A session opened with a good token: a bad token with its id is
    // still refused 401 (the token is checked before the session).
    let client = common::http_client(&url, Some(&good)).await.unwrap();
    let session = {
        let response = reqwest::Client::new()
            .post(&url)
            .bearer_auth(&good)
            .header("accept", "application/json, text/event-stream")
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                           "clientInfo": {"name": "t", "version": "0"}}}))
            .send()
            .await
            .unwrap();
        response.headers()["mcp-session-id"]
            .to_str()
            .unwrap()
            .to_owned()
    };
    let (s, c, b) = initialize(&url, Some(&foreign), Some(&session)).await;
    refused(s, &c, &b, "is not one plangate trusts");
    client.cancel().await.unwrap();

    // The machine identity plans under a `plan` token...
    let plan_token = machine_token(&idp, &url, "mcp:plan").await;
    let planner = common::http_client(&url, Some(&plan_token)).await.unwrap();
    let step = common::ok(
        &planner,
        "create_entities",
        json!({"entities": [{"name": "Planned", "entityType": "x", "observations": []}]}),
    )
    .await;
    assert_eq!(step["code"], "plan_step", "{step}");
    planner.cancel().await.unwrap();
    // ...and its `write` token cannot apply that step on its own say-so.
    let write_token = machine_token(&idp, &url, "mcp:write").await;
    let writer = common::http_client(&url, Some(&write_token)).await.unwrap();
    let answer = common::call(&writer, "plangate_apply_plan", json!({}))
        .await
        .unwrap();
    assert_eq!(answer.is_error, Some(true), "{answer:?}");
    let answer = common::body(&answer);
    assert_eq!(answer["code"], "forbidden", "{answer}");
    // Who approves and where, never how (the agent may have a shell).
    let said = answer["message"].as_str().unwrap();
    assert!(
        said.contains("runs only after a person approves"),
        "{answer}"
    );
    assert!(!said.contains("plangate plans"), "{answer}");
    writer.cancel().await.unwrap();
    assert!(
        !std::fs::read_to_string(scratch.path().join("memory.jsonl"))
            .unwrap_or_default()
            .contains("Planned"),
        "nothing ran"
    );

    // An operator revokes the identity: every token of it is refused at
    // its next request, remembered or not.
    let machine = identity_of(&idp.issuer, "machine");
    let args = ["keys", "revoke", machine.as_str()];
    common::succeeded(&args, &scratch.run(&args));
    let (s, c, b) = initialize(&url, Some(&write_token), None).await;
    refused(s, &c, &b, "an operator revoked identity");

    never_written(
        &scratch,
        &gw,
        &[
            &good,
            &elsewhere,
            &foreign,
            &short,
            &scopeless,
            &plan_token,
            &write_token,
        ],
    );
}

/// Whether any file of `dir` holds a JWT in the clear (every JWT starts
/// with `eyJ`, the base64 of `{"`).
fn holds_a_jwt(dir: &std::path::Path) -> bool {
    std::fs::read_dir(dir).unwrap().any(|entry| {
        let path = entry.unwrap().path();
        path.is_file() && has_jwt_shape(&std::fs::read(&path).unwrap())
    })
}

/// Whether `bytes` hold a JWT's start in plain text: `eyJ…` (a base64url
/// JSON header), a dot, then `eyJ…` again (the payload). The three bytes
/// `eyJ` alone also turn up by chance in sealed values and signatures.
fn has_jwt_shape(bytes: &[u8]) -> bool {
    let b64 = |c: &u8| c.is_ascii_alphanumeric() || *c == b'-' || *c == b'_';
    (0..bytes.len()).any(|i| {
        let Some(rest) = bytes[i..].strip_prefix(b"eyJ") else {
            return false;
        };
        let header = rest.iter().take_while(|c| b64(c)).count();
        header >= 8 && rest[header..].starts_with(b".eyJ")
    })
}

/// An outer plangate (`outer`, its config at `config`) whose one upstream
/// `inner` is another plangate protected by `idp`, with the
/// `[upstreams.inner.oauth]` lines `oauth`; tokens live `ttl` seconds.
struct Chain {
    inner_scratch: Scratch,
    inner: Proc,
    inner_url: String,
    idp_port: u16,
    idp: Provider,
    outer: Scratch,
    config: String,
}

fn chain(ttl: u64, oauth: &str) -> Chain {
    let inner_scratch = Scratch::new();
    let port = free_port();
    let inner_url = format!("http://127.0.0.1:{port}/mcp");
    let idp_port = free_port();
    let idp = provider_on(idp_port, &[&inner_url], ttl);
    let inner = plangate(&inner_scratch, port, &[&idp.issuer]);
    let outer = Scratch::new();
    let config = outer.write(
        "plangate.toml",
        &format!("[upstreams.inner]\nurl = {inner_url:?}\n[upstreams.inner.oauth]\n{oauth}"),
    );
    Chain {
        inner_scratch,
        inner,
        inner_url,
        idp_port,
        idp,
        outer,
        config: config.to_str().unwrap().to_owned(),
    }
}

/// An upstream behind OAuth: `plangate upstream login` signs plangate in
/// (the test plays the person at the provider's pages), the tokens are
/// sealed in the data dir, `serve` reaches the upstream with them and
/// refreshes them across an expiry. The upstream is another plangate,
/// protected by the same provider.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_login_signs_plangate_in_and_serve_refreshes_the_token() {
    // Every part is bound: what is left out of a pattern is dropped (the
    // inner plangate stopped, its directory removed) at once.
    let Chain {
        inner_scratch,
        inner,
        idp,
        outer,
        config,
        ..
    } = chain(2, "");
    let config = config.as_str();

    // Before any login, the upstream says how to sign in.
    let args = ["config", "check", "--config", config];
    let out = outer.run(&args);
    let said = format!("{}{}", common::stdout(&out), common::stderr(&out));
    assert!(said.contains("plangate upstream login inner"), "{said}");

    let told = upstream_login(&outer, config, &idp, "carol");
    assert!(told.contains("signed in to upstream inner"), "{told}");
    assert!(!holds_a_jwt(&outer.data_dir()), "tokens are sealed at rest");

    // serve reaches it with the token, and again after it expired.
    let token = outer.create_key("agent", "write");
    let client = common::config_client(&outer, config, &token).await;
    let names = common::tool_names(&client).await;
    assert!(names.contains(&"read_graph".to_owned()), "{names:?}");
    reads_the_graph_across_an_expiry(&client).await;
    client.cancel().await.unwrap();
    assert!(
        !holds_a_jwt(&outer.data_dir()),
        "refreshed tokens are sealed too"
    );

    // The upstream saw the person who signed in.
    let args = ["keys", "list", "--json"];
    let keys = common::succeeded(&args, &inner_scratch.run(&args));
    assert!(keys.contains(&identity_of(&idp.issuer, "carol")), "{keys}");
    assert!(
        !inner.log().contains("eyJ"),
        "no token in the upstream's log"
    );

    // Logout forgets the tokens: the upstream asks for a login again.
    let args = ["upstream", "logout", "inner", "--config", config];
    common::succeeded(&args, &outer.run(&args));
    let args = ["config", "check", "--config", config];
    let out = outer.run(&args);
    let said = format!("{}{}", common::stdout(&out), common::stderr(&out));
    assert!(said.contains("plangate upstream login inner"), "{said}");
}

/// `read_graph` through `client` answers, and again once the upstream's
/// token has expired (they live 2 s).
async fn reads_the_graph_across_an_expiry(client: &common::Client) {
    let graph = common::call(client, "read_graph", json!({})).await.unwrap();
    assert_ne!(graph.is_error, Some(true), "{graph:?}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let again = common::call(client, "read_graph", json!({})).await.unwrap();
    assert_ne!(again.is_error, Some(true), "after the expiry: {again:?}");
}

/// A machine upstream (`grant = "client_credentials"`): no login; plangate
/// asks for its own tokens, again once one has expired, and keeps none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_credentials_upstream_gets_its_own_tokens_without_a_login() {
    let Chain {
        inner_scratch,
        inner: _inner,
        idp,
        outer,
        config,
        ..
    } = chain(
        2,
        "grant = \"client_credentials\"\nclient_id = \"machine\"\nclient_secret = \"machine-secret\"\nscopes = [\"mcp:write\"]\n",
    );
    let config = config.as_str();
    let args = ["upstream", "login", "inner", "--config", config];
    let out = outer.run(&args);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        common::stderr(&out).contains("there is no login"),
        "{}",
        common::stderr(&out)
    );

    let token = outer.create_key("agent", "write");
    let client = common::config_client(&outer, config, &token).await;
    reads_the_graph_across_an_expiry(&client).await;
    client.cancel().await.unwrap();
    assert!(!holds_a_jwt(&outer.data_dir()));
    let args = ["keys", "list", "--json"];
    let keys = common::succeeded(&args, &inner_scratch.run(&args));
    assert!(
        keys.contains(&identity_of(&idp.issuer, "machine")),
        "{keys}"
    );
}

/// Signs the outer plangate in to its upstream `inner` as `user` (the
/// person at the provider's pages is `tests/oauth/consent.py`); returns
/// what `upstream login` told the operator.
fn upstream_login(outer: &Scratch, config: &str, idp: &Provider, user: &str) -> String {
    upstream_login_with(outer, config, idp, user, &[])
}

/// [`upstream_login`] with more arguments (`--scope`).
fn upstream_login_with(
    outer: &Scratch,
    config: &str,
    idp: &Provider,
    user: &str,
    more: &[&str],
) -> String {
    let mut args = vec![
        "upstream",
        "login",
        "inner",
        "--config",
        config,
        "--timeout",
        "60s",
    ];
    args.extend(more);
    let mut login = outer
        .command(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut url = String::new();
    BufReader::new(login.stdout.take().unwrap())
        .read_line(&mut url)
        .unwrap();
    if !url.starts_with(&idp.issuer) {
        let done = login.wait_with_output().unwrap();
        panic!(
            "login printed {url:?}: {}",
            String::from_utf8_lossy(&done.stderr)
        );
    }
    let person = Command::new(&peers().python)
        .arg(repo_root().join("tests/oauth/consent.py"))
        .args(["--user", user, url.trim()])
        .output()
        .unwrap();
    assert!(
        person.status.success(),
        "{}",
        String::from_utf8_lossy(&person.stderr)
    );
    let done = login.wait_with_output().unwrap();
    let told = String::from_utf8_lossy(&done.stderr).into_owned();
    assert!(done.status.success(), "{told}");
    told
}

/// The upstream's entry in `/readyz`, once `check` holds of it (at most 90 s).
async fn readyz_until(gw: &Proc, check: impl Fn(&Value) -> bool) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        let ready: Value = reqwest::get(format!("http://{}/readyz", gw.addr))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if check(&ready) {
            return ready;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{ready}\n{}",
            gw.log()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// When the authorization server refuses to refresh (here: it restarted
/// and knows neither the client nor the grant), the upstream goes down on
/// `/readyz` saying to sign in again, not call by call; a new login brings
/// it back without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_refresh_puts_the_upstream_down_until_a_new_login() {
    let Chain {
        inner_scratch: _inner_scratch,
        inner: _inner,
        inner_url,
        idp_port,
        idp,
        outer,
        config,
    } = chain(3, "");
    let config = config.as_str();
    upstream_login(&outer, config, &idp, "erin");
    let gw = common::serve_http(&outer, &["--config", config]);
    readyz_until(&gw, |r| r["status"] == "ready").await;

    let issuer = idp.issuer.clone();
    drop(idp);
    let idp = provider_on(idp_port, &[&inner_url], 3);
    assert_eq!(idp.issuer, issuer);
    // Disconnected first, then down with the reason.
    let down = readyz_until(&gw, |r| {
        r["upstreams_down"]["inner"]
            .as_str()
            .is_some_and(|why| why.contains("sign-in"))
    })
    .await;
    let why = down["upstreams_down"]["inner"].as_str().unwrap();
    assert!(why.contains("its OAuth sign-in no longer works"), "{why}");
    assert!(why.contains("plangate upstream login inner"), "{why}");

    upstream_login(&outer, config, &idp, "erin");
    readyz_until(&gw, |r| r["status"] == "ready").await;
}

/// A scope step-up on a real provider: plangate signed in with scopes that
/// give nothing at the upstream, which refuses it 403 insufficient_scope
/// naming the scopes it wants. The upstream is down on `/readyz` with the
/// exact sign-in that helps; that login asks for the scopes granted before
/// and the new ones (SEP-2350), and a running `serve` picks the new
/// sign-in up without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scope_step_up_names_the_sign_in_and_keeps_the_scopes_granted_before() {
    let Chain {
        inner_scratch: _inner_scratch,
        inner: _inner,
        idp,
        outer,
        config,
        ..
    } = chain(300, "scopes = [\"openid\", \"offline_access\"]\n");
    let config = config.as_str();
    let told = upstream_login(&outer, config, &idp, "frank");
    assert!(
        told.contains("asking for the scopes: openid offline_access"),
        "{told}"
    );
    let gw = common::serve_http(&outer, &["--config", config]);
    let down = readyz_until(&gw, |r| r["upstreams_down"]["inner"].is_string()).await;
    let why = down["upstreams_down"]["inner"].as_str().unwrap();
    assert!(why.contains("403 insufficient_scope"), "{why}");
    let asked = "plangate upstream login inner --scope 'mcp:plan mcp:read mcp:write'";
    assert!(why.contains(asked), "{why}");

    let told = upstream_login_with(
        &outer,
        config,
        &idp,
        "frank",
        &["--scope", "mcp:plan mcp:read mcp:write"],
    );
    assert!(
        told.contains("asking for the scopes: openid offline_access mcp:plan mcp:read mcp:write"),
        "{told}"
    );
    readyz_until(&gw, |r| r["status"] == "ready").await;
    let args = ["--scope", "not a \"scope\""];
    let bad = outer.run(&[
        "upstream", "login", "inner", "--config", config, args[0], args[1],
    ]);
    assert_eq!(bad.status.code(), Some(2), "{}", common::stderr(&bad));
    assert!(
        common::stderr(&bad).contains("is not a list of OAuth scopes"),
        "{}",
        common::stderr(&bad)
    );
    assert!(!holds_a_jwt(&outer.data_dir()));
}

/// Opaque access tokens, judged by the issuer's RFC 7662 introspection
/// (`[auth.oauth.introspection]`): an active one for plangate's resource
/// is accepted, its caller named by the configured claim; once revoked at
/// the provider it is refused at the first request after `every`; a
/// made-up one is refused. The introspection client's secret and the
/// tokens are never written anywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opaque_tokens_are_introspected_and_a_revoked_one_is_refused_within_every() {
    let scratch = Scratch::new();
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}/mcp");
    let idp = provider_with(0, &[&url], 3600, &["--format", "opaque"]);
    // The provider's introspection of a machine token names its client,
    // not a sub: this deployment names callers by client_id.
    let gw = plangate_with(
        &scratch,
        port,
        &[&idp.issuer],
        "identity_claim = \"client_id\"",
        "[auth.oauth.introspection]\nclient_id = \"machine\"\nclient_secret = \"machine-secret\"\nevery = \"1s\"",
    );

    let token = machine_token(&idp, &url, "mcp:write").await;
    assert!(!token.starts_with("eyJ"), "an opaque token");
    let (status, _, body) = initialize(&url, Some(&token), None).await;
    assert_eq!(status, 200, "{body}");
    let args = ["keys", "list", "--json"];
    let keys = common::succeeded(&args, &scratch.run(&args));
    assert!(
        keys.contains(&identity_of(&idp.issuer, "machine")),
        "{keys}"
    );

    let refused = |(status, challenge, body): (u16, String, Value), says: &str| {
        assert_eq!(status, 401, "{body}");
        assert!(
            challenge.starts_with("Bearer error=\"invalid_token\""),
            "{challenge}"
        );
        let message = body["error"]["message"].as_str().unwrap().to_owned();
        assert!(message.contains(says), "{message}");
    };
    refused(
        initialize(&url, Some("made-up-opaque-token"), None).await,
        "is not active",
    );

    // Revoked at the provider (RFC 7009): refused once `every` has passed.
    let revoked = reqwest::Client::new()
        .post(format!("{}/token/revocation", idp.issuer))
        .basic_auth("machine", Some("machine-secret"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(encoded(&[("token", &token)]))
        .send()
        .await
        .unwrap();
    assert!(revoked.status().is_success(), "{}", revoked.status());
    tokio::time::sleep(Duration::from_millis(1500)).await;
    refused(initialize(&url, Some(&token), None).await, "is not active");

    // Nothing secret written: not the tokens, not the client's secret.
    let log = gw.log();
    assert!(!log.contains(&token) && !log.contains("machine-secret"));
    for entry in std::fs::read_dir(scratch.data_dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            let bytes = std::fs::read(&path).unwrap();
            assert!(
                !bytes.windows(token.len()).any(|w| w == token.as_bytes()),
                "{} holds the token",
                path.display()
            );
        }
    }
}

/// An operator locks a person of a trusted issuer into plan mode before
/// their first sign-in (`mode set --key 'ISSUER#VALUE'`); their first
/// token then finds the lock in force: a write becomes a plan step.
/// A name of an untrusted issuer is still refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_identity_s_mode_can_be_set_before_its_first_sign_in() {
    let Trusting {
        scratch,
        port: _,
        url,
        idp,
        gw: _gw,
    } = trusting_one_provider();
    let config = scratch.path().join("plangate.toml");
    let config = config.to_str().unwrap();
    let who = identity_of(&idp.issuer, "machine");
    let args = [
        "mode", "set", "--config", config, "--key", &who, "plan", "--lock",
    ];
    let said = common::succeeded(&args, &scratch.run(&args));
    assert!(said.contains("is now in mode plan, locked"), "{said}");
    let stranger = "https://id.elsewhere.example#machine";
    let args = ["mode", "set", "--config", config, "--key", stranger, "plan"];
    let out = scratch.run(&args);
    assert_eq!(out.status.code(), Some(2), "{}", common::stderr(&out));
    assert!(common::stderr(&out).contains("ISSUER one of [auth.oauth] issuers"));

    let client = machine_client(&idp, &url, "mcp:write").await;
    let created = common::call(
        &client,
        "create_entities",
        json!({"entities": [{"name": "a", "entityType": "t", "observations": []}]}),
    )
    .await
    .unwrap();
    let body = common::body(&created);
    assert_eq!(
        body["planned"], true,
        "a write in locked plan mode is planned, not run: {body}"
    );
    let plan = common::get_plan(&client).await;
    assert_eq!(plan["steps"].as_array().map(Vec::len), Some(1), "{plan}");
    client.cancel().await.unwrap();
}

/// A reload that stops trusting an issuer counts at the next request, even
/// for a token plangate accepted (and remembered) a moment before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_drops_an_issuer_refuses_its_tokens_at_once() {
    let Trusting {
        scratch,
        port: _,
        url,
        idp,
        gw,
    } = trusting_one_provider();
    let token = machine_token(&idp, &url, "mcp:read").await;
    let (status, _, body) = initialize(&url, Some(&token), None).await;
    assert_eq!(status, 200, "{body}");

    let path = scratch.path().join("plangate.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        text.replace(&format!("{:?}", idp.issuer), "\"https://id.example.com\""),
    )
    .unwrap();
    let status = Command::new("kill")
        .args(["-HUP", &gw.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !gw.log().contains("config reloaded (SIGHUP)") {
        assert!(std::time::Instant::now() < deadline, "{}", gw.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (status, _, body) = initialize(&url, Some(&token), None).await;
    assert_eq!(status, 401, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("is not one plangate trusts"),
        "{body}"
    );
}
