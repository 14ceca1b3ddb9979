//! Test harness: real `plangate` processes, real demo-site upstreams, real
//! rmcp clients. Every process started here is killed when its guard drops.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, Implementation,
    ProtocolVersion,
};
use rmcp::service::RunningService;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{ConfigureCommandExt, StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};

/// The plangate binary under test.
pub fn plangate() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_plangate"))
}

/// A client config pinned to 2025-11-25, like most clients in the wild.
pub fn client_info() -> ClientConfig {
    ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("plangate-tests", "0"),
    )
    .with_protocol_version(ProtocolVersion::V_2025_11_25)
}

/// The rmcp client every test drives plangate with.
pub type Client = RunningService<RoleClient, ClientConfig>;

/// A scratch directory with a data dir inside.
pub struct Scratch {
    pub dir: tempfile::TempDir,
}

impl Scratch {
    pub fn new() -> Scratch {
        Scratch {
            dir: tempfile::tempdir().unwrap(),
        }
    }
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// `plangate --data-dir DATA ARGS…` here, free of ambient config and key: every run's base.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(plangate());
        cmd.arg("--data-dir")
            .arg(self.data_dir())
            .args(args)
            .current_dir(self.path())
            .env_remove("PLANGATE_CONFIG")
            .env_remove("PLANGATE_KEY")
            // Never the test runner's terminal: a command that asks a
            // person (`plans approve` without --digest) is run on one
            // only by `Terminal`.
            .stdin(Stdio::null());
        cmd
    }

    /// Runs `plangate --data-dir DATA ARGS…` to completion.
    pub fn run(&self, args: &[&str]) -> std::process::Output {
        self.command(args).output().unwrap()
    }

    /// Creates a key and returns its token (printed once on stdout).
    pub fn create_key(&self, name: &str, scope: &str) -> String {
        let out = self.run(&["keys", "create", "--name", name, "--scope", scope]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let token = String::from_utf8(out.stdout).unwrap().trim().to_owned();
        assert!(token.starts_with("pgk_"), "{token}");
        token
    }

    /// Writes a file in the scratch dir and returns its path.
    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    }
}

/// A child process whose stderr is collected; killed on drop.
pub struct Proc {
    pub child: Child,
    pub stderr: Arc<Mutex<String>>,
    pub addr: String,
}

impl Proc {
    /// Starts `cmd`, waits for a stderr line containing `marker` followed by
    /// an address (`http://ADDR/mcp`), and returns the process.
    pub fn start(mut cmd: Command, marker: &str) -> Proc {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let sink = log.clone();
        let marker = marker.to_owned();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Some(rest) = line.split(&marker).nth(1) {
                    let addr = rest
                        .trim()
                        .trim_start_matches("http://")
                        .trim_end_matches("/mcp");
                    let _ = tx.send(addr.to_owned());
                }
                sink.lock().unwrap().push_str(&line);
                sink.lock().unwrap().push('\n');
            }
        });
        let addr = match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(a) => a,
            Err(_) => {
                let _ = child.kill();
                panic!(
                    "process never announced itself; stderr:\n{}",
                    log.lock().unwrap()
                );
            }
        };
        Proc {
            child,
            stderr: log,
            addr,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    pub fn log(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        kill_tree(&mut self.child);
    }
}

/// The live descendants of `pid` (children, grandchildren, …), read from
/// `/proc`.
pub fn descendants(pid: u32) -> Vec<u32> {
    let mut parent_of = Vec::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let Some(p) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            // After "(comm) ": state, ppid, …
            let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
                continue;
            };
            let mut fields = rest.split_whitespace();
            let state = fields.next().unwrap_or("");
            if let Some(ppid) = fields.next().and_then(|f| f.parse::<u32>().ok())
                && state != "Z"
            {
                parent_of.push((p, ppid));
            }
        }
    }
    let mut found = Vec::new();
    let mut frontier = vec![pid];
    while let Some(parent) = frontier.pop() {
        for &(p, pp) in &parent_of {
            if pp == parent && !found.contains(&p) {
                found.push(p);
                frontier.push(p);
            }
        }
    }
    found
}

/// The command line of a live process (NULs as spaces).
pub fn cmdline(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
        .unwrap_or_default()
}

/// Sends SIGKILL to processes by pid (ignoring ones already gone).
pub fn kill_pids(pids: &[u32]) {
    if pids.is_empty() {
        return;
    }
    let _ = Command::new("kill")
        .arg("-KILL")
        .args(pids.iter().map(u32::to_string))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// Kills `child` and every process it started (e.g. plangate's upstream
/// servers, which would otherwise outlive a SIGKILLed plangate), then reaps
/// it.
pub fn kill_tree(child: &mut Child) {
    // Collect first: once the parent dies its children are re-parented.
    let below = descendants(child.id());
    let _ = child.kill();
    kill_pids(&below);
    let _ = child.wait();
}

/// The repository's root directory.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// The third-party MCP peers of the interop suite, installed (pinned) by
/// `scripts/install-peers` into `.tools/`.
pub struct Peers {
    /// The venv's Python, with the official MCP SDK.
    pub python: PathBuf,
    /// `.tools/node/node_modules`.
    pub node_modules: PathBuf,
    /// `tests/interop` (client.py, tap.mjs).
    pub interop: PathBuf,
    /// The MCP protocol fuzzer's command (`.tools/fuzz/bin/mcp-fuzzer`).
    pub fuzzer: PathBuf,
}

impl Peers {
    /// The entry point of an npm package under `node_modules`.
    pub fn js(&self, rel: &str) -> PathBuf {
        self.node_modules.join(rel)
    }
}

/// Installs the peers once per test process (the script itself is quick
/// when they are already installed, and serialises concurrent runs with a
/// file lock). Never skips: if the install fails, every test that needs
/// the peers fails with the script's output.
pub fn peers() -> &'static Peers {
    static PEERS: std::sync::OnceLock<Peers> = std::sync::OnceLock::new();
    PEERS.get_or_init(|| {
        let root = repo_root();
        let started = std::time::Instant::now();
        let out = Command::new("bash")
            .arg(root.join("scripts/install-peers"))
            .current_dir(&root)
            .stdin(Stdio::null())
            .output()
            .expect("cannot run bash scripts/install-peers");
        assert!(
            out.status.success(),
            "scripts/install-peers failed ({}):\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        eprintln!(
            "interop peers ready in {:.1}s:\n{}",
            started.elapsed().as_secs_f64(),
            String::from_utf8_lossy(&out.stdout).trim_end()
        );
        let peers = Peers {
            python: root.join(".tools/venv/bin/python"),
            node_modules: root.join(".tools/node/node_modules"),
            interop: root.join("tests/interop"),
            fuzzer: root.join(".tools/fuzz/bin/mcp-fuzzer"),
        };
        for p in [
            &peers.python,
            &peers.node_modules,
            &peers.interop,
            &peers.fuzzer,
        ] {
            assert!(p.exists(), "{} missing after install-peers", p.display());
        }
        peers
    })
}

/// Starts a demo site over HTTP on a free loopback port.
pub fn demo_site_http(state: &Path) -> Proc {
    let mut cmd = Command::new(plangate());
    cmd.args(["demo-site", "--http", "127.0.0.1:0", "--state"])
        .arg(state);
    Proc::start(cmd, "listening on ")
}

/// Starts `plangate serve --http 127.0.0.1:0` with extra args.
pub fn serve_http(scratch: &Scratch, extra: &[&str]) -> Proc {
    let mut cmd = scratch.command(&["serve", "--http", "127.0.0.1:0"]);
    cmd.args(extra);
    Proc::start(cmd, "plangate serving ")
}

/// An rmcp client connected to plangate over Streamable HTTP with `token`.
pub async fn http_client(
    url: &str,
    token: Option<&str>,
) -> Result<RunningService<RoleClient, ClientConfig>, String> {
    let mut config = StreamableHttpClientTransportConfig::with_uri(url);
    if let Some(t) = token {
        config = config.auth_header(t);
    }
    let transport = StreamableHttpClientTransport::with_client(reqwest::Client::new(), config);
    client_info()
        .serve(transport)
        .await
        .map_err(|e| e.to_string())
}

/// An rmcp client that starts `plangate serve --stdio` as a child process.
pub async fn stdio_client(
    scratch: &Scratch,
    extra: &[&str],
    token: Option<&str>,
) -> RunningService<RoleClient, ClientConfig> {
    let data_dir = scratch.data_dir();
    let cwd = scratch.path().to_owned();
    let extra: Vec<String> = extra.iter().map(|s| (*s).to_owned()).collect();
    let token = token.map(str::to_owned);
    let cmd = tokio::process::Command::new(plangate()).configure(move |c| {
        c.arg("--data-dir")
            .arg(&data_dir)
            .args(["serve", "--stdio"])
            .args(&extra);
        c.current_dir(&cwd)
            .env_remove("PLANGATE_CONFIG")
            .env_remove("PLANGATE_KEY");
        if let Some(t) = &token {
            c.env("PLANGATE_KEY", t);
        }
    });
    let (transport, _stderr) = TokioChildProcess::builder(cmd)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    client_info().serve(transport).await.unwrap()
}

/// Calls a tool with JSON arguments.
pub async fn call(
    client: &RunningService<RoleClient, ClientConfig>,
    tool: &str,
    args: Value,
) -> Result<CallToolResult, rmcp::service::ServiceError> {
    let mut params = CallToolRequestParams::new(tool.to_owned());
    params.arguments = args.as_object().cloned();
    client.peer().call_tool(params).await
}

/// The names of the tools a client sees.
pub async fn tool_names(client: &RunningService<RoleClient, ClientConfig>) -> Vec<String> {
    names_of(client.peer().list_all_tools().await.unwrap())
}

/// The names of listed tools, in order.
pub fn names_of(tools: Vec<rmcp::model::Tool>) -> Vec<String> {
    tools.into_iter().map(|t| t.name.to_string()).collect()
}

/// A tool result's structured content (`null` when it has none).
pub fn body(r: &CallToolResult) -> Value {
    r.structured_content.clone().unwrap_or(Value::Null)
}

/// Calls `tool`, which must succeed with structured content; returns it.
pub async fn ok(client: &Client, tool: &str, args: Value) -> Value {
    let r = call(client, tool, args).await.unwrap();
    assert_eq!(r.is_error, Some(false), "{tool}: {r:?}");
    r.structured_content
        .unwrap_or_else(|| panic!("{tool}: no structured content"))
}

/// Calls `tool` and returns the structured content of whatever it answers.
pub async fn call_body(client: &Client, tool: &str, args: Value) -> Value {
    body(&call(client, tool, args).await.unwrap())
}

/// Begins a session in `mode` (which must succeed); returns the answer.
pub async fn begin(client: &Client, mode: &str) -> Value {
    ok(client, "plangate_begin_session", json!({"mode": mode})).await
}

/// The client's plan, as `plangate_get_plan` answers it.
pub async fn get_plan(client: &Client) -> Value {
    ok(client, "plangate_get_plan", json!({})).await
}

/// The digest of the client's plan, as `plangate_get_plan` shows it to
/// the agent.
pub async fn plan_digest(client: &Client) -> String {
    get_plan(client).await["plan_digest"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// Applies the client's plan with `args` (which must succeed); returns the receipt.
pub async fn apply_plan(client: &Client, args: Value) -> Value {
    ok(client, "plangate_apply_plan", args).await
}

/// The worked example's first step: a new title for the About page (lands on a copy).
pub fn our_story() -> Value {
    json!({"id": 2, "title": "Our story"})
}

/// `update_option` arguments setting the tagline: the write most tests make.
pub fn tagline(value: impl Into<Value>) -> Value {
    json!({"name": "tagline", "value": value.into()})
}

/// The arguments of `create_menu_item` adding `label` to the main menu.
pub fn menu_item(label: &str, url: &str) -> Value {
    json!({"menu": "main", "label": label, "url": url})
}

/// Whether the JSON string `v` contains `part` (a panic when it is no string).
pub fn mentions(v: &Value, part: &str) -> bool {
    v.as_str().unwrap().contains(part)
}

/// `field` of every item of the JSON array `list`, in order.
pub fn each(list: &Value, field: &str) -> Vec<Value> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|item| item[field].clone())
        .collect()
}

/// The TOTP code of `secret` (base32) now, as the person's authenticator
/// shows it.
pub fn code_now(secret: &str) -> String {
    let bytes = plangate_core::factor::from_base32(secret).unwrap();
    let step = plangate_core::factor::step_at(plangate_store::now_ms());
    format!("{:06}", plangate_core::factor::hotp(&bytes, step))
}

/// The agent's own `apply_plan` of `digest`, which its key may not do:
/// the refusal, checked to be `forbidden`.
pub async fn apply_refused(agent: &Client, digest: &str) -> Value {
    let refused = call_body(agent, "plangate_apply_plan", json!({"plan_digest": digest})).await;
    assert_eq!(refused["code"], "forbidden", "{refused}");
    refused
}

/// `plans apply --key agent --config CONFIG --digest DIGEST`, then `more`.
pub fn apply_args<'a>(config: &'a str, digest: &'a str, more: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "plans", "apply", "--key", "agent", "--config", config, "--digest", digest,
    ];
    args.extend_from_slice(more);
    args
}

/// The plan digest of `key` as `plans show --json` prints it: what a
/// person who read the plan passes to `plans approve|apply --digest` off
/// a terminal.
pub fn shown_digest(scratch: &Scratch, key: &str) -> String {
    let args = ["plans", "show", "--key", key, "--json"];
    parsed(&args, &succeeded(&args, &scratch.run(&args)))["plan_digest"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// `plangate --data-dir DATA ARGS…` on a terminal: run by util-linux
/// `script` on a fresh pseudo-terminal (stdin, stdout and stderr all the
/// terminal); what is written to it is typed as a person types.
pub struct Terminal {
    child: Child,
    keys: Option<std::process::ChildStdin>,
    screen: Arc<Mutex<Vec<u8>>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Terminal {
    /// Starts the command; free of ambient config, key and `NO_COLOR`.
    pub fn start(scratch: &Scratch, args: &[&str]) -> Terminal {
        let quote = |s: &str| format!("'{}'", s.replace('\'', "'\\''"));
        let mut line = vec![
            quote(plangate().to_str().unwrap()),
            "--data-dir".to_owned(),
            quote(scratch.data_dir().to_str().unwrap()),
        ];
        line.extend(args.iter().map(|a| quote(a)));
        let mut child = Command::new("script")
            .args(["-q", "-e", "-c", &line.join(" "), "/dev/null"])
            .current_dir(scratch.path())
            .env_remove("PLANGATE_CONFIG")
            .env_remove("PLANGATE_KEY")
            .env_remove("NO_COLOR")
            .env("TERM", "xterm-256color")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("cannot run util-linux `script`");
        let keys = child.stdin.take();
        let mut out = child.stdout.take().unwrap();
        let screen = Arc::new(Mutex::new(Vec::new()));
        let sink = screen.clone();
        let reader = std::thread::spawn(move || {
            use std::io::Read;
            let mut buf = [0u8; 4096];
            while let Ok(n) = out.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        Terminal {
            child,
            keys,
            screen,
            reader: Some(reader),
        }
    }

    /// What the terminal shows so far, its CRLF line ends made LF.
    pub fn screen(&self) -> String {
        String::from_utf8_lossy(&self.screen.lock().unwrap()).replace("\r\n", "\n")
    }

    /// Waits (at most a minute) until the terminal shows `text`.
    pub fn wait_for(&self, text: &str) -> String {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let screen = self.screen();
            if screen.contains(text) {
                return screen;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the terminal never showed {text:?}:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Types `text` (with its own line breaks).
    pub fn type_text(&mut self, text: &str) {
        use std::io::Write;
        let keys = self.keys.as_mut().unwrap();
        keys.write_all(text.as_bytes()).unwrap();
        keys.flush().unwrap();
    }

    /// Waits for the command to end: its exit status and the screen.
    pub fn finish(mut self) -> (std::process::ExitStatus, String) {
        drop(self.keys.take());
        let status = self.child.wait().unwrap();
        if let Some(reader) = self.reader.take() {
            reader.join().unwrap();
        }
        (status, self.screen())
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `plangate --data-dir DATA ARGS…` on a terminal ([`Terminal`]), `typed`
/// typed at once: the exit status and what the terminal showed.
pub fn in_terminal(
    scratch: &Scratch,
    args: &[&str],
    typed: &str,
) -> (std::process::ExitStatus, String) {
    let mut t = Terminal::start(scratch, args);
    t.type_text(typed);
    t.finish()
}

/// A process's stdout, as text.
pub fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A process's stderr, as text.
pub fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The stdout of `plangate ARGS…`, which must have succeeded (else both streams show).
pub fn succeeded(args: &[&str], out: &std::process::Output) -> String {
    assert!(
        out.status.success(),
        "plangate {args:?} failed ({}):\n{}\n{}",
        out.status,
        stdout(out),
        stderr(out)
    );
    stdout(out)
}

/// `text`, printed by `plangate ARGS…`, parsed as JSON.
pub fn parsed(args: &[&str], text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{args:?}: {e}:\n{text}"))
}

/// Reads the demo site's state file.
pub fn site_state(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The state of the demo site of [`demo_config`] (`site.json`).
pub fn site(scratch: &Scratch) -> Value {
    site_state(&scratch.path().join("site.json"))
}

/// The demo site's tagline as the site itself holds it.
pub fn site_tagline(scratch: &Scratch) -> Value {
    site(scratch)["options"]["tagline"]["value"].clone()
}

/// Page `id` of a demo site's state (`null` when there is none).
pub fn page(site: &Value, id: u64) -> Value {
    site["pages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == id)
        .cloned()
        .unwrap_or(Value::Null)
}

/// The labels of the demo site's main menu, in order.
pub fn menu_labels(site: &Value) -> Vec<String> {
    site["menus"]["main"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["label"].as_str().unwrap().to_owned())
        .collect()
}

/// A plangate.toml in `scratch` with the official `server-filesystem` as
/// upstream `fs`, serving `root`, followed by `extra` (e.g. `[[rules]]`).
pub fn filesystem_config(scratch: &Scratch, root: &Path, extra: &str) -> PathBuf {
    let fs_js = peers().js("@modelcontextprotocol/server-filesystem/dist/index.js");
    scratch.write(
        "plangate.toml",
        &format!(
            "[upstreams.fs]\ncommand = \"node\"\nargs = [{:?}, {:?}]\n{extra}",
            fs_js.display().to_string(),
            root.display().to_string(),
        ),
    )
}

/// The TOML of the official `server-filesystem` as upstream `fs`, serving
/// `root` (with `HOME` set to `home` where given, for `~`), and the
/// official `server-memory` as upstream `memory`, keeping its graph in
/// `memory_file` and started as `node WRAP… SCRIPT` (`wrap`: e.g. a tap
/// logging its traffic): the two servers the preview and rule tests use.
pub fn fs_and_memory_toml(
    root: &Path,
    home: Option<&Path>,
    wrap: &[String],
    memory_file: &Path,
) -> String {
    let peers = peers();
    let quoted = |p: &Path| format!("{:?}", p.display().to_string());
    let fs_js = peers.js("@modelcontextprotocol/server-filesystem/dist/index.js");
    let memory_js = peers.js("@modelcontextprotocol/server-memory/dist/index.js");
    let fs_env = home.map_or(String::new(), |h| {
        format!("env = {{ HOME = {} }}\n", quoted(h))
    });
    let mut memory_args: Vec<String> = wrap.iter().map(|a| format!("{a:?}")).collect();
    memory_args.push(quoted(&memory_js));
    format!(
        "[upstreams.fs]\ncommand = \"node\"\nargs = [{}, {}]\n{fs_env}\n[upstreams.memory]\ncommand = \"node\"\nargs = [{}]\nenv = {{ MEMORY_FILE_PATH = {} }}\n",
        quoted(&fs_js),
        quoted(root),
        memory_args.join(", "),
        quoted(memory_file),
    )
}

/// Where the filesystem tests start: a scratch dir with a filesystem root
/// (`root/`, made), a config of real servers over it, and a `plan` key
/// `agent` (its plans run only on a person's yes).
pub struct FsWorld {
    pub scratch: Scratch,
    pub root: PathBuf,
    pub config: String,
    pub token: String,
}

impl FsWorld {
    /// `config` fills the root as the test needs and writes the config,
    /// returning its path.
    pub fn new(config: impl FnOnce(&Scratch, &Path) -> PathBuf) -> FsWorld {
        let scratch = Scratch::new();
        let root = scratch.path().join("root");
        std::fs::create_dir_all(&root).unwrap();
        let config = config(&scratch, &root);
        let token = scratch.create_key("agent", "plan");
        FsWorld {
            scratch,
            root,
            config: config.display().to_string(),
            token,
        }
    }
}

/// A plangate.toml in `scratch` with the demo site as upstream `site`
/// (state in `site.json`) and the demo's shipped per-tool settings,
/// preceded by `extra` (e.g. `[gateway]` or `[modes.*]` tables).
pub fn demo_config(scratch: &Scratch, extra: &str) -> String {
    let text = include_str!("../../../config/src/demo.toml");
    let tools = &text[text.find("\n[upstreams.site.tools").unwrap()..];
    let state = scratch.path().join("site.json");
    let site = plangate_upstream("site", &["demo-site", "--state", state.to_str().unwrap()]);
    let path = scratch.write("plangate.toml", &format!("{extra}\n{site}{tools}"));
    path.to_str().unwrap().to_owned()
}

/// The TOML table of an upstream `name` running this plangate binary with `args`.
pub fn plangate_upstream(name: &str, args: &[&str]) -> String {
    let args: Vec<String> = args.iter().map(|a| format!("\"{a}\"")).collect();
    format!(
        "[upstreams.{name}]\ncommand = \"{}\"\nargs = [{}]\n",
        plangate().display(),
        args.join(", ")
    )
}

/// Where demo tests start: scratch dir, demo config (after `extra`), one token per key.
pub fn demo_keys<const N: usize>(
    extra: &str,
    keys: [(&str, &str); N],
) -> (Scratch, String, [String; N]) {
    let scratch = Scratch::new();
    let tokens = keys.map(|(name, scope)| scratch.create_key(name, scope));
    let config = demo_config(&scratch, extra);
    (scratch, config, tokens)
}

/// A client of `plangate serve --stdio --config CONFIG` with `token`.
pub async fn config_client(scratch: &Scratch, config: &str, token: &str) -> Client {
    stdio_client(scratch, &["--config", config], Some(token)).await
}

/// [`config_client`] in a session begun in plan mode.
pub async fn plan_client(scratch: &Scratch, config: &str, token: &str) -> Client {
    let client = config_client(scratch, config, token).await;
    begin(&client, "plan").await;
    client
}

/// [`demo_keys`] with the one key `name` of `scope`, already connected over stdio.
pub async fn demo_agent(name: &str, scope: &str) -> (Scratch, String, Client) {
    let (scratch, config, [token]) = demo_keys("", [(name, scope)]);
    let client = config_client(&scratch, &config, &token).await;
    (scratch, config, client)
}

/// How many times a long test repeats: `var` from the environment, or `default`.
pub fn env_count(var: &str, default: u64) -> u64 {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A config (path, delivery log) with `[gateway]` settings and the counting upstream.
pub fn counting_config(scratch: &Scratch, gateway: &str) -> (String, PathBuf) {
    let log = scratch.path().join("deliveries.jsonl");
    let count = plangate_upstream(
        "count",
        &["counting-upstream", "--log", log.to_str().unwrap()],
    );
    let config = scratch.write("plangate.toml", &format!("[gateway]\n{gateway}\n{count}"));
    (config.to_str().unwrap().to_owned(), log)
}

/// Every delivery the counting upstream logged: n → how many times.
pub fn deliveries(log: &Path) -> std::collections::BTreeMap<u64, u64> {
    let mut out = std::collections::BTreeMap::new();
    for line in std::fs::read_to_string(log).unwrap_or_default().lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        *out.entry(v["n"].as_u64().unwrap()).or_insert(0) += 1;
    }
    out
}

/// The conformance suite's reference server (installed by
/// `scripts/install-peers`) on a free loopback port, and its `/mcp` URL.
#[allow(dead_code)] // not every test binary starts it
pub fn reference_server() -> (Proc, String) {
    peers();
    let root = repo_root();
    let dir = root.join(".tools/conformance/server");
    let node = root.join(".tools/conformance/suite/node_modules/.bin/node");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut cmd = Command::new("sh");
    // Its banner goes to stdout; Proc reads stderr.
    cmd.arg("-c")
        .arg("exec \"$0\" node_modules/tsx/dist/cli.mjs everything-server.ts 1>&2")
        .arg(&node)
        .current_dir(&dir)
        .env("PORT", port.to_string())
        .env(
            "NODE_OPTIONS",
            format!("--require {}", dir.join("loopback.cjs").display()),
        );
    let proc = Proc::start(cmd, "MCP Conformance Test Server running on ");
    (proc, format!("http://127.0.0.1:{port}/mcp"))
}

/// Waits (at most a minute) until `tool` is listed to `peer`. plangate
/// answers `initialize` after at most a few seconds even while an upstream
/// is still starting, and lists its tools once it is up; a test whose
/// upstream starts slowly (a Python server on a busy machine) waits for
/// the tool as an agent would wait for `tools/list_changed`.
pub async fn wait_for_tool(peer: &rmcp::Peer<RoleClient>, tool: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let listed = peer.list_all_tools().await.unwrap_or_default();
        if listed.iter().any(|t| t.name == tool) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{tool} was never listed: {:?}",
            names_of(listed)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
