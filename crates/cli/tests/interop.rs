//! The interop suite: plangate between official third-party MCP peers.
//!
//! Clients: the official MCP Python SDK (`tests/interop/client.py`, one
//! scenario per run, printing what it observed as JSON) and the MCP
//! Inspector CLI. Upstreams: `@modelcontextprotocol/server-filesystem`,
//! `server-memory` and `server-everything`, all over stdio as children of
//! plangate. Everything is pinned and installed by `scripts/install-peers`,
//! which the first test of this process runs (see `common::peers`).
//!
//! Every scenario runs over stdio (the SDK starts `plangate serve --stdio`)
//! and Streamable HTTP (`plangate serve --http 127.0.0.1:0`) where both make
//! sense, with `PLANGATE_LOG=debug`, and ends by scanning plangate's logs
//! for the test's canary: a random value put into every argument (and most
//! results) of the scenario, which must never appear in a log line.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};

/// plangate's log filter in every test: debug, so the log scan sees the
/// most verbose lines an operator can turn on.
const LOG_FILTER: &str = "debug";

/// Longest a client scenario may run before the test kills it and fails.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(120);

/// A random value that marks this test's argument values.
fn canary() -> String {
    let uuid = std::fs::read_to_string("/proc/sys/kernel/random/uuid").unwrap();
    let hex: String = uuid
        .chars()
        .filter(char::is_ascii_hexdigit)
        .take(16)
        .collect();
    format!("canary-{hex}")
}

/// A TOML basic string.
fn toml_str(s: impl AsRef<str>) -> String {
    serde_json::to_string(s.as_ref()).unwrap()
}

/// How the test's plangate config is built.
#[derive(Default, Clone, Copy)]
struct Options {
    /// Run server-everything behind `tap.mjs`, recording its traffic.
    tap: bool,
    /// Start server-memory through a shell that refuses to start it while
    /// the file `memory.off` exists (to make it unreachable on purpose).
    memory_switch: bool,
}

/// One test's world: a scratch dir with a data dir, keys, the filesystem
/// server's root, the memory file, a config naming the three upstreams.
struct World {
    scratch: Scratch,
    peers: &'static Peers,
    canary: String,
    token: String,
    read_token: String,
    config: PathBuf,
    root: PathBuf,
}

impl World {
    fn new(options: Options) -> World {
        let peers = peers();
        let scratch = Scratch::new();
        let canary = canary();
        let root = scratch.path().join("root");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(root.join("seed.txt"), format!("seed file {canary}\n")).unwrap();
        let token = scratch.create_key("agent", "write");
        let read_token = scratch.create_key("reader", "read");
        let mut world = World {
            scratch,
            peers,
            canary,
            token,
            read_token,
            config: PathBuf::new(),
            root,
        };
        world.config = world.write_config(options);
        world
    }

    fn path(&self, name: &str) -> PathBuf {
        self.scratch.path().join(name)
    }

    /// The three upstreams as `(name, command, args, env)`.
    fn upstreams(&self, options: Options) -> Vec<(&'static str, String, Vec<String>, Value)> {
        let js = |rel: &str| self.peers.js(rel).display().to_string();
        let fs = (
            "fs",
            "node".to_owned(),
            vec![
                js("@modelcontextprotocol/server-filesystem/dist/index.js"),
                self.root.display().to_string(),
            ],
            json!({}),
        );
        let memory_js = js("@modelcontextprotocol/server-memory/dist/index.js");
        let memory_env = json!({"MEMORY_FILE_PATH": self.path("memory.jsonl")});
        let memory = if options.memory_switch {
            (
                "memory",
                "sh".to_owned(),
                vec![
                    "-c".to_owned(),
                    r#"test -e "$0" && exit 3; exec node "$1""#.to_owned(),
                    self.path("memory.off").display().to_string(),
                    memory_js,
                ],
                memory_env,
            )
        } else {
            ("memory", "node".to_owned(), vec![memory_js], memory_env)
        };
        let everything_js = js("@modelcontextprotocol/server-everything/dist/index.js");
        let everything = if options.tap {
            (
                "everything",
                "node".to_owned(),
                vec![
                    self.peers.interop.join("tap.mjs").display().to_string(),
                    self.path("tap.jsonl").display().to_string(),
                    "--".to_owned(),
                    "node".to_owned(),
                    everything_js,
                    "stdio".to_owned(),
                ],
                json!({}),
            )
        } else {
            (
                "everything",
                "node".to_owned(),
                vec![everything_js, "stdio".to_owned()],
                json!({}),
            )
        };
        vec![fs, memory, everything]
    }

    fn write_config(&self, options: Options) -> PathBuf {
        let mut toml = String::new();
        for (name, command, args, env) in self.upstreams(options) {
            toml.push_str(&format!(
                "[upstreams.{name}]\ncommand = {}\n",
                toml_str(command)
            ));
            let args: Vec<String> = args.iter().map(toml_str).collect();
            toml.push_str(&format!("args = [{}]\n", args.join(", ")));
            let env: Vec<String> = env
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| format!("{k} = {}", toml_str(v.as_str().unwrap())))
                .collect();
            if !env.is_empty() {
                toml.push_str(&format!("env = {{ {} }}\n", env.join(", ")));
            }
            toml.push('\n');
        }
        self.scratch.write("plangate.toml", &toml)
    }

    /// Direct (gateway-less) launch specs of the upstreams, for client.py to
    /// compare plangate's listing with the servers' own.
    fn direct_spec(&self) -> String {
        let map: serde_json::Map<String, Value> = self
            .upstreams(Options::default())
            .into_iter()
            .map(|(name, command, args, mut env)| {
                if name == "memory" {
                    env = json!({"MEMORY_FILE_PATH": self.path("direct-memory.jsonl")});
                }
                (
                    name.to_owned(),
                    json!({"command": command, "args": args, "env": env}),
                )
            })
            .collect();
        Value::Object(map).to_string()
    }

    /// `plangate serve --http 127.0.0.1:0` with debug logs.
    fn serve_http(&self) -> Proc {
        let mut cmd = Command::new(plangate());
        cmd.arg("--data-dir")
            .arg(self.scratch.data_dir())
            .args(["serve", "--http", "127.0.0.1:0", "--config"])
            .arg(&self.config)
            .current_dir(self.scratch.path())
            .env_remove("PLANGATE_CONFIG")
            .env_remove("PLANGATE_KEY")
            .env("PLANGATE_LOG", LOG_FILTER);
        Proc::start(cmd, "plangate serving ")
    }

    /// The file receiving the stderr of the plangate processes the Python
    /// SDK starts over stdio.
    fn stdio_log_path(&self) -> PathBuf {
        self.path("plangate-stdio.log")
    }

    /// Runs one client.py scenario and returns what it printed.
    fn client(&self, scenario: &str, transport: Transport<'_>, extra: &[&str]) -> Value {
        let mut cmd = Command::new(&self.peers.python);
        cmd.arg(self.peers.interop.join("client.py"))
            .arg(scenario)
            .args(["--canary", &self.canary, "--token", &self.token])
            .args(["--read-token", &self.read_token])
            .arg("--root")
            .arg(&self.root)
            .args(extra)
            .current_dir(self.scratch.path())
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("PLANGATE_LOG", LOG_FILTER)
            .env_remove("PLANGATE_CONFIG")
            .env_remove("PLANGATE_KEY");
        match transport {
            Transport::Stdio => {
                cmd.args(["--transport", "stdio", "--plangate"])
                    .arg(plangate())
                    .arg("--data-dir")
                    .arg(self.scratch.data_dir())
                    .arg("--config")
                    .arg(&self.config)
                    .arg("--plangate-log")
                    .arg(self.stdio_log_path());
            }
            Transport::Http(gw) => {
                cmd.args(["--transport", "http", "--url", &gw.url()])
                    .args(["--plangate-pid", &gw.child.id().to_string()]);
            }
        }
        run_json(cmd, &format!("client.py {scenario}"))
    }

    /// plangate's log lines of this test: the HTTP server's stderr, or the
    /// file the stdio runs wrote.
    fn plangate_log(&self, transport: Transport<'_>) -> String {
        match transport {
            Transport::Stdio => std::fs::read_to_string(self.stdio_log_path()).unwrap_or_default(),
            Transport::Http(gw) => gw.log(),
        }
    }

    /// No line plangate logged (at debug level) contains the canary.
    fn assert_logs_clean(&self, transport: Transport<'_>) {
        let log = self.plangate_log(transport);
        assert!(
            log.contains(" DEBUG "),
            "expected plangate's debug log lines to scan, got:\n{log}"
        );
        let leaks: Vec<&str> = log.lines().filter(|l| l.contains(&self.canary)).collect();
        assert!(
            leaks.is_empty(),
            "argument values leaked into plangate's log ({} lines contain {}):\n{}",
            leaks.len(),
            self.canary,
            leaks
                .iter()
                .map(|l| l.chars().take(400).collect::<String>())
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}

#[derive(Clone, Copy)]
enum Transport<'a> {
    Stdio,
    Http(&'a Proc),
}

/// A child process killed (with everything it started) on drop, unless it
/// was already reaped.
struct Guard(Option<Child>);

impl Guard {
    /// The exit status, if the process has ended (it is then reaped and no
    /// longer killed on drop: its pid may be reused).
    fn try_wait(&mut self) -> Option<std::process::ExitStatus> {
        let status = self.0.as_mut()?.try_wait().unwrap()?;
        self.0 = None;
        Some(status)
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(child) = &mut self.0 {
            kill_tree(child);
        }
    }
}

/// Runs `cmd` to completion (at most [`CLIENT_TIMEOUT`]) and parses the last
/// line of its stdout as JSON; any failure panics with its stderr.
fn run_json(mut cmd: Command, what: &str) -> Value {
    let (status, stdout, stderr) = run(&mut cmd, what);
    assert!(
        status.success(),
        "{what} failed ({status}):\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last)
        .unwrap_or_else(|e| panic!("{what} printed no JSON ({e}):\n{stdout}\nstderr:\n{stderr}"))
}

/// Runs `cmd` with a deadline, collecting stdout and stderr.
fn run(cmd: &mut Command, what: &str) -> (std::process::ExitStatus, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let (out_path, err_path) = (dir.path().join("out"), dir.path().join("err"));
    cmd.stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap());
    let mut guard = Guard(Some(cmd.spawn().unwrap()));
    let deadline = Instant::now() + CLIENT_TIMEOUT;
    let status = loop {
        if let Some(status) = guard.try_wait() {
            break status;
        }
        if Instant::now() > deadline {
            drop(guard);
            panic!(
                "{what} did not finish within {}s\nstdout:\n{}\nstderr:\n{}",
                CLIENT_TIMEOUT.as_secs(),
                std::fs::read_to_string(&out_path).unwrap_or_default(),
                std::fs::read_to_string(&err_path).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    drop(guard);
    (
        status,
        std::fs::read_to_string(&out_path).unwrap_or_default(),
        std::fs::read_to_string(&err_path).unwrap_or_default(),
    )
}

/// The text of a tool result's content blocks, joined.
fn text(result: &Value) -> String {
    result["content"]
        .as_array()
        .unwrap_or_else(|| panic!("no content in {result}"))
        .iter()
        .filter_map(|c| c["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

fn assert_ok(result: &Value, what: &str) {
    assert_eq!(
        result["isError"].as_bool(),
        Some(false),
        "{what} should succeed: {result}"
    );
}

/// GET on plangate's HTTP server: (status, body).
fn http_get(gw: &Proc, path: &str) -> (u16, String) {
    let url = format!("http://{}{path}", gw.addr);
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let r = reqwest::Client::new().get(&url).send().await.unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        })
}

/// The value of one Prometheus sample line, if present.
fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

/// The strings of a JSON array, collected.
fn strings<'a, C: FromIterator<&'a str>>(list: &'a Value) -> C {
    list.as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect()
}

/// Runs `scenario` over stdio in a fresh world, then scans plangate's log for the canary.
fn over_stdio(options: Options, scenario: impl FnOnce(&World, Transport<'_>)) {
    let world = World::new(options);
    scenario(&world, Transport::Stdio);
    world.assert_logs_clean(Transport::Stdio);
}

/// Runs `scenario` over HTTP in a fresh world, then scans plangate's log for the canary.
fn over_http(options: Options, scenario: impl FnOnce(&World, Transport<'_>)) {
    let world = World::new(options);
    let gw = world.serve_http();
    scenario(&world, Transport::Http(&gw));
    world.assert_logs_clean(Transport::Http(&gw));
}

/// Two tests of one scenario: `$stdio` over stdio, `$http` over Streamable HTTP.
macro_rules! over_both_transports {
    ($stdio:ident, $http:ident, $scenario:expr, $options:expr) => {
        #[test]
        fn $stdio() {
            over_stdio($options, $scenario);
        }

        #[test]
        fn $http() {
            over_http($options, $scenario);
        }
    };
}

// --- tools, annotations, reads, isError, structured content ---------------

fn tools_reads_errors_and_structured_content(world: &World, transport: Transport<'_>) {
    let spec = world.direct_spec();
    let out = world.client("basics", transport, &["--direct", &spec]);
    assert_eq!(out["server_info"]["name"], "plangate");
    assert_eq!(out["protocol_version"], "2025-11-25");

    // Every tool of every server is listed, namespaced, with its own
    // annotations unchanged (compared with the server's listing to a
    // gateway-less SDK client).
    let tools = out["tools"].as_object().unwrap();
    let direct = out["direct_tools"].as_object().unwrap();
    for (server, listed) in direct {
        let listed = listed.as_object().unwrap();
        assert!(!listed.is_empty(), "{server} listed no tools directly");
        for (name, annotations) in listed {
            let exposed = format!("{server}__{name}");
            let through = tools
                .get(&exposed)
                .unwrap_or_else(|| panic!("{exposed} missing from plangate's list"));
            assert_eq!(
                &through["annotations"], annotations,
                "{exposed}: annotations changed on the way"
            );
        }
    }
    let ann = |name: &str, hint: &str| tools[name]["annotations"][hint].as_bool();
    assert_eq!(ann("fs__read_text_file", "readOnlyHint"), Some(true));
    assert_eq!(ann("fs__write_file", "destructiveHint"), Some(true));
    assert_eq!(ann("fs__create_directory", "destructiveHint"), Some(false));
    assert_eq!(ann("memory__read_graph", "readOnlyHint"), Some(true));
    assert_eq!(ann("everything__echo", "readOnlyHint"), Some(true));
    // A read tool keeps its outputSchema (only plannable tools drop it).
    assert_eq!(
        tools["everything__get-structured-content"]["output_schema"]["required"],
        json!(["temperature", "conditions", "humidity"])
    );

    // A read is answered with the file's content.
    assert_ok(&out["read"], "read_text_file");
    assert_eq!(text(&out["read"]), format!("seed file {}\n", world.canary));
    // The upstream's own isError (path outside its root) is preserved.
    assert_eq!(
        out["outside_root"]["isError"], true,
        "{}",
        out["outside_root"]
    );
    assert!(
        text(&out["outside_root"]).contains("Access denied - path outside allowed directories"),
        "{}",
        out["outside_root"]
    );
    // Structured content arrives intact, alongside its text form.
    let weather = json!({"temperature": 36, "conditions": "Light rain / drizzle", "humidity": 82});
    assert_ok(&out["structured"], "get-structured-content");
    assert_eq!(out["structured"]["structuredContent"], weather);
    assert_eq!(
        serde_json::from_str::<Value>(&text(&out["structured"])).unwrap(),
        weather
    );
    assert_eq!(text(&out["echo"]), format!("Echo: {}", world.canary));

    // Resources and prompts are read through the naming rule.
    let uris: Vec<&str> = strings(&out["resources"]);
    // Upstream resources are namespaced; plangate's own review view is not
    // an upstream's.
    assert!(
        uris.iter()
            .filter(|u| !u.starts_with("ui://plangate/"))
            .all(|u| u.contains("everything__") || u.contains("memory__")),
        "resource URIs are namespaced: {uris:?}"
    );
    assert!(
        uris.contains(&"memory://memory__knowledge-graph"),
        "{uris:?}"
    );
    let read = &out["resource_read"];
    let contents = &read["result"]["contents"][0];
    assert_eq!(contents["uri"], read["uri"]);
    assert_eq!(contents["mimeType"], "text/markdown");
    assert!(
        contents["text"]
            .as_str()
            .unwrap()
            .contains("Everything Server")
    );
    assert_eq!(
        out["prompt"]["messages"][0]["content"]["text"],
        "This is a simple prompt without arguments."
    );
    // A read the upstream refuses comes back as its JSON-RPC error.
    assert_eq!(
        out["missing_resource"]["code"], -32602,
        "{}",
        out["missing_resource"]
    );
    assert!(
        out["missing_resource"]["message"]
            .as_str()
            .unwrap()
            .contains("not found")
    );
}

#[test]
fn stdio_tools_annotations_reads_is_error_and_structured_content() {
    over_stdio(
        Options::default(),
        tools_reads_errors_and_structured_content,
    );
}

#[test]
fn http_tools_annotations_reads_is_error_and_structured_content_and_metrics() {
    let world = World::new(Options::default());
    let gw = world.serve_http();
    tools_reads_errors_and_structured_content(&world, Transport::Http(&gw));

    // /metrics counts exactly the calls the client made, by outcome.
    let (status, metrics) = http_get(&gw, "/metrics");
    assert_eq!(status, 200);
    let calls = |upstream: &str, tool: &str, outcome: &str| {
        metric(
            &metrics,
            &format!(
                "plangate_tool_calls_total{{upstream=\"{upstream}\",tool=\"{tool}\",outcome=\"{outcome}\"}}"
            ),
        )
    };
    assert_eq!(calls("fs", "read_text_file", "ok"), Some(1.0), "{metrics}");
    assert_eq!(
        calls("fs", "read_text_file", "tool_error"),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(
        calls("everything", "get-structured-content", "ok"),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(calls("everything", "echo", "ok"), Some(1.0), "{metrics}");
    assert_eq!(
        metric(
            &metrics,
            "plangate_tool_call_duration_seconds_count{upstream=\"everything\",tool=\"echo\"}"
        ),
        Some(1.0),
        "{metrics}"
    );
    for up in ["fs", "memory", "everything"] {
        assert_eq!(
            metric(
                &metrics,
                &format!("plangate_upstream_up{{upstream=\"{up}\"}}")
            ),
            Some(1.0),
            "{metrics}"
        );
    }
    world.assert_logs_clean(Transport::Http(&gw));
}

// --- progress ---------------------------------------------------------------

fn progress_reaches_the_client_per_call(world: &World, transport: Transport<'_>) {
    let out = world.client("progress", transport, &[]);
    let calls = out["calls"].as_object().unwrap();
    assert_eq!(calls.len(), 3);
    for (name, call) in calls {
        let steps = call["steps"].as_u64().unwrap();
        assert!(
            call["result"]
                .as_str()
                .unwrap_or_default()
                .contains(&format!("Steps: {steps}.")),
            "call {name} did not complete: {call}"
        );
        let progress = call["progress"].as_array().unwrap();
        // Every notification is this call's own: each call has a distinct
        // total, so one routed to the wrong call would show here.
        for p in progress {
            assert_eq!(
                p[1].as_f64(),
                Some(steps as f64),
                "call {name} got another call's progress: {call}"
            );
        }
        let values: Vec<u64> = progress
            .iter()
            .map(|p| p[0].as_f64().unwrap() as u64)
            .collect();
        assert!(
            values.windows(2).all(|w| w[0] < w[1]),
            "call {name}: progress not strictly increasing: {values:?}"
        );
        assert!(
            values.iter().all(|v| (1..=steps).contains(v)),
            "call {name}: {values:?}"
        );
        // Every step before the last must arrive. (The last races the
        // result inside plangate; see
        // final_progress_notification_before_the_result_is_not_lost.)
        for step in 1..steps {
            assert!(
                values.contains(&step),
                "call {name}: progress {step}/{steps} never arrived: {values:?}"
            );
        }
    }
}

over_both_transports!(
    stdio_progress_reaches_the_python_client_and_never_crosses_calls,
    http_progress_reaches_the_python_client_and_never_crosses_calls_or_sessions,
    progress_reaches_the_client_per_call,
    Options::default()
);

/// Gateway bug (found by this suite): server-everything sends its last
/// progress notification immediately before the call's result; rmcp
/// handles each upstream notification in a spawned task but hands the
/// response straight to the waiting call, so plangate often finishes the
/// call (unregistering its progress route) before that notification is
/// routed, and the client never gets it. Several short calls make the race
/// show on almost every run.
#[test]
fn final_progress_notification_before_the_result_is_not_lost() {
    let world = World::new(Options::default());
    let out = world.client("progress_burst", Transport::Stdio, &[]);
    let calls = out["calls"].as_array().unwrap();
    let lost: Vec<&Value> = calls
        .iter()
        .filter(|c| c["progress"].as_array().unwrap().len() as u64 != c["steps"].as_u64().unwrap())
        .collect();
    assert!(
        lost.is_empty(),
        "{} of {} calls lost progress sent before their result: {lost:?}",
        lost.len(),
        calls.len()
    );
    world.assert_logs_clean(Transport::Stdio);
}

// --- cancellation -----------------------------------------------------------

/// The messages `tap.mjs` recorded between plangate and server-everything.
fn tap_log(world: &World) -> Vec<Value> {
    std::fs::read_to_string(world.path("tap.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn cancelled_call_stops_at_the_upstream(world: &World, transport: Transport<'_>) {
    let out = world.client("cancel", transport, &[]);
    assert!(out.get("completed").is_none(), "the call completed: {out}");
    assert!(
        out["progress_before_cancel"].as_u64().unwrap() >= 1,
        "{out}"
    );
    assert_eq!(out["progress_after_cancel"], 0, "{out}");
    assert_ok(&out["echo_after"], "echo after the cancel");

    // What server-everything saw: the call, then plangate's
    // notifications/cancelled for exactly that request — and it never
    // answered the call, even after its natural end (it aborted the
    // request), while it kept answering others.
    let tap = tap_log(world);
    let call = tap
        .iter()
        .find(|m| {
            m["dir"] == "to_server"
                && m["msg"]["method"] == "tools/call"
                && m["msg"]["params"]["name"] == "trigger-long-running-operation"
        })
        .unwrap_or_else(|| panic!("the call never reached server-everything: {tap:?}"));
    let id = &call["msg"]["id"];
    let cancelled = tap.iter().find(|m| {
        m["dir"] == "to_server"
            && m["msg"]["method"] == "notifications/cancelled"
            && &m["msg"]["params"]["requestId"] == id
    });
    assert!(
        cancelled.is_some(),
        "no notifications/cancelled for request {id} reached server-everything: {tap:?}"
    );
    let answered: Vec<&Value> = tap
        .iter()
        .filter(|m| m["dir"] == "from_server" && &m["msg"]["id"] == id)
        .collect();
    assert!(
        answered.is_empty(),
        "the upstream still answered the cancelled call: {answered:?}"
    );
    let natural_end = call["t"].as_f64().unwrap() + out["duration"].as_f64().unwrap() * 1000.0;
    let echo = tap
        .iter()
        .find(|m| {
            m["dir"] == "from_server"
                && m["msg"]["result"]["content"][0]["text"]
                    .as_str()
                    .is_some_and(|t| t.starts_with("Echo: "))
        })
        .expect("the echo after the cancel reached the upstream and was answered");
    assert!(
        echo["t"].as_f64().unwrap() > natural_end,
        "the log must cover the time the cancelled call would have ended"
    );
}

over_both_transports!(
    stdio_cancelled_call_stops_at_the_upstream,
    http_cancelled_call_stops_at_the_upstream,
    cancelled_call_stops_at_the_upstream,
    Options {
        tap: true,
        ..Options::default()
    }
);

// --- elicitation --------------------------------------------------------------

fn upstream_elicitation_reaches_the_caller(world: &World, transport: Transport<'_>) {
    let out = world.client("elicitation", transport, &[]);
    assert_eq!(
        out["listed"], true,
        "trigger-elicitation-request not listed: {out}"
    );
    let asked = out["asked"].as_array().unwrap();
    assert_eq!(asked.len(), 1, "the client was asked once: {out}");
    // Marked as the upstream's question, so it never passes for plangate's.
    assert_eq!(
        asked[0]["message"],
        "[Asked by the upstream MCP server \"everything\", not by plangate] Please provide inputs for the following fields:"
    );
    assert_eq!(asked[0]["requestedSchema"]["required"], json!(["name"]));
    assert_eq!(
        asked[0]["requestedSchema"]["properties"]["name"]["type"],
        "string"
    );
    assert_ok(&out["result"], "trigger-elicitation-request");
    let answer = text(&out["result"]);
    assert!(
        answer.contains("User provided the requested information"),
        "{answer}"
    );
    assert!(
        answer.contains(&format!("- Name: {}", world.canary)),
        "{answer}"
    );
}

over_both_transports!(
    stdio_upstream_elicitation_reaches_the_calling_python_client,
    http_upstream_elicitation_reaches_the_calling_python_client,
    upstream_elicitation_reaches_the_caller,
    Options::default()
);

// --- a killed upstream comes back ---------------------------------------------

fn killed_upstream_comes_back(world: &World, transport: Transport<'_>, target: &str) {
    let out = world.client("restart", transport, &["--kill", target]);
    assert_ok(&out["before_call"], "the call before the kill");
    let (old, new) = (out["old_pid"].as_u64(), out["new_pid"].as_u64());
    assert!(
        old.is_some() && new.is_some() && old != new,
        "a new process: {out}"
    );
    let before: BTreeSet<&str> = strings(&out["tools_before"]);
    let after: BTreeSet<&str> = strings(&out["tools_after"]);
    assert!(!before.is_empty());
    assert_eq!(before, after, "its tools came back: {out}");
    assert!(
        out["list_changed_count"].as_u64().unwrap() >= 1,
        "the client was told the list changed: {out}"
    );
    assert_ok(&out["after_call"], "the call after the restart");
    assert_ok(&out["after_read"], "the read after the restart");
    if target == "memory" {
        // State written before the crash and after the restart, both there.
        let entities = &out["after_read"]["structuredContent"]["entities"];
        assert_eq!(entities[0]["name"], world.canary.as_str(), "{out}");
        assert_eq!(
            entities[0]["observations"],
            json!([
                format!("first-{}", world.canary),
                format!("second-{}", world.canary)
            ])
        );
        let file = std::fs::read_to_string(world.path("memory.jsonl")).unwrap();
        assert!(file.contains(&format!("second-{}", world.canary)), "{file}");
    } else {
        assert_eq!(text(&out["after_call"]), format!("Echo: {}", world.canary));
    }
}

#[test]
fn stdio_killed_memory_upstream_comes_back_with_its_tools_and_state() {
    over_stdio(Options::default(), |world, transport| {
        killed_upstream_comes_back(world, transport, "memory")
    });
}

#[test]
fn http_killed_everything_upstream_comes_back_with_its_tools() {
    over_http(Options::default(), |world, transport| {
        killed_upstream_comes_back(world, transport, "everything")
    });
}

// --- server-filesystem writes -------------------------------------------------

fn filesystem_writes_land_on_disk(world: &World, transport: Transport<'_>) {
    let out = world.client("filesystem", transport, &[]);
    let path = Path::new(out["path"].as_str().unwrap());
    let content = out["content"].as_str().unwrap();
    assert_ok(&out["write"], "write_file with a write key");
    assert_eq!(std::fs::read_to_string(path).unwrap(), content, "on disk");
    assert_eq!(text(&out["read"]), content, "read back through plangate");
    assert!(
        text(&out["list"]).contains(&format!("[FILE] {}.txt", world.canary)),
        "{}",
        out["list"]
    );
    assert_ok(&out["info"], "get_file_info");
    // A read key may read, but its write is refused before the upstream.
    let refused = &out["read_key_write"];
    assert_eq!(refused["isError"], true, "{refused}");
    assert_eq!(
        refused["structuredContent"]["code"], "forbidden",
        "{refused}"
    );
    assert!(!Path::new(out["denied_path"].as_str().unwrap()).exists());
    assert_eq!(text(&out["read_key_read"]), content);
}

over_both_transports!(
    stdio_filesystem_writes_land_on_disk_and_read_keys_cannot_write,
    http_filesystem_writes_land_on_disk_and_read_keys_cannot_write,
    filesystem_writes_land_on_disk,
    Options::default()
);

// --- HTTP auth, readiness -----------------------------------------------------

#[test]
fn http_call_without_a_bearer_is_refused_with_401() {
    let world = World::new(Options::default());
    let gw = world.serve_http();
    let out = world.client("no_bearer", Transport::Http(&gw), &[]);
    assert_eq!(out["status"], 401, "{out}");
    assert_eq!(out["call_status"], 401, "{out}");
    // Not a Bearer challenge: the SDK would take it for OAuth.
    assert!(
        out["www_authenticate"]
            .as_str()
            .unwrap_or_default()
            .starts_with("ApiKey "),
        "{out}"
    );
    assert_eq!(
        out["body"]["error"]["data"]["code"], "key_required",
        "{out}"
    );
    // The SDK's own client cannot open a session either, and what it
    // reports is plangate's message: how to get a key.
    assert_ne!(out["sdk"], "connected", "the SDK connected without a key");
    let errors = out["sdk_errors"].to_string();
    assert!(errors.contains("plangate needs an API key"), "{out}");
    assert!(errors.contains("plangate keys create"), "{out}");
    let (_, metrics) = http_get(&gw, "/metrics");
    assert!(
        !metrics.contains("plangate_tool_calls_total{"),
        "no call ran: {metrics}"
    );
    world.assert_logs_clean(Transport::Http(&gw));
}

/// Polls `/readyz` until it answers `want` (at most 30 s).
fn wait_ready(gw: &Proc, want: u16) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, body) = http_get(gw, "/readyz");
        if status == want {
            return serde_json::from_str(&body).unwrap();
        }
        assert!(
            Instant::now() < deadline,
            "/readyz stayed {status} ({body}), wanted {want}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn http_readyz_is_503_while_an_upstream_is_unreachable_and_200_when_it_is_back() {
    let world = World::new(Options {
        memory_switch: true,
        ..Options::default()
    });
    let gw = world.serve_http();
    let (status, body) = http_get(&gw, "/readyz");
    assert_eq!(status, 200, "{body}");
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["upstreams_up"], json!(["everything", "fs", "memory"]));

    // Make server-memory unreachable: it may not start again, and its
    // process dies.
    std::fs::write(world.path("memory.off"), "").unwrap();
    let memory: Vec<u32> = descendants(gw.child.id())
        .into_iter()
        .filter(|p| cmdline(*p).contains("server-memory"))
        .collect();
    assert_eq!(memory.len(), 1, "one server-memory process under plangate");
    kill_pids(&memory);
    let body = wait_ready(&gw, 503);
    assert_eq!(body["status"], "degraded");
    assert!(body["upstreams_down"]["memory"].is_string(), "{body}");
    assert_eq!(body["upstreams_up"], json!(["everything", "fs"]));
    let (_, metrics) = http_get(&gw, "/metrics");
    assert_eq!(
        metric(&metrics, "plangate_upstream_up{upstream=\"memory\"}"),
        Some(0.0),
        "{metrics}"
    );
    assert_eq!(
        metric(&metrics, "plangate_upstream_up{upstream=\"fs\"}"),
        Some(1.0),
        "{metrics}"
    );

    // Allowed to start again: the supervisor's next attempt brings it back.
    std::fs::remove_file(world.path("memory.off")).unwrap();
    let body = wait_ready(&gw, 200);
    assert_eq!(body["upstreams_up"], json!(["everything", "fs", "memory"]));
    world.assert_logs_clean(Transport::Http(&gw));
}

// --- the MCP Inspector CLI ----------------------------------------------------

/// `node …/inspector/cli/build/cli.js --cli`: the Inspector CLI, its
/// target and method still to be given.
fn inspector_cli(world: &World) -> Command {
    let cli = world
        .peers
        .js("@modelcontextprotocol/inspector/cli/build/cli.js");
    let mut cmd = Command::new("node");
    cmd.arg(cli).arg("--cli");
    cmd
}

/// Runs the Inspector CLI against `plangate serve --stdio`.
fn inspector(world: &World, method_args: &[&str]) -> Value {
    let mut cmd = inspector_cli(world);
    cmd.arg("-e")
        .arg(format!("PLANGATE_KEY={}", world.token))
        // After `--`, every argument goes to the target command (the
        // Inspector has a --config option of its own).
        .arg("--")
        .arg(plangate())
        .arg("--data-dir")
        .arg(world.scratch.data_dir())
        .args(["serve", "--stdio", "--config"])
        .arg(&world.config)
        .args(method_args)
        .current_dir(world.scratch.path())
        .env_remove("PLANGATE_CONFIG")
        .env_remove("PLANGATE_KEY");
    let (status, stdout, stderr) = run(&mut cmd, "the Inspector CLI");
    assert!(
        status.success(),
        "Inspector CLI failed ({status}):\n{stdout}\n{stderr}"
    );
    serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("Inspector printed no JSON ({e}):\n{stdout}\n{stderr}"))
}

#[test]
fn inspector_cli_without_a_key_shows_how_to_get_one_and_starts_no_oauth() {
    let world = World::new(Options::default());
    let gw = world.serve_http();
    let mut cmd = inspector_cli(&world);
    cmd.arg(gw.url())
        .args(["--transport", "http", "--method", "tools/list"]);
    let (status, stdout, stderr) = run(&mut cmd, "the Inspector CLI");
    assert!(!status.success(), "connected without a key:\n{stdout}");
    let said = format!("{stdout}\n{stderr}");
    assert!(said.contains("plangate needs an API key"), "{said}");
    assert!(said.contains("plangate keys create"), "{said}");
    assert!(!said.to_lowercase().contains("oauth"), "{said}");
}

#[test]
fn inspector_cli_lists_and_calls_tools_through_plangate() {
    let world = World::new(Options::default());
    let listed = inspector(&world, &["--method", "tools/list"]);
    let tools = listed["tools"].as_array().unwrap();
    let names: BTreeSet<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    for expected in [
        "fs__read_text_file",
        "fs__write_file",
        "memory__create_entities",
        "memory__read_graph",
        "everything__echo",
        "everything__get-structured-content",
        "everything__trigger-long-running-operation",
    ] {
        assert!(
            names.contains(expected),
            "{expected} missing from {names:?}"
        );
    }
    let write = tools
        .iter()
        .find(|t| t["name"] == "fs__write_file")
        .unwrap();
    assert_eq!(write["annotations"]["destructiveHint"], true);
    assert_eq!(write["annotations"]["readOnlyHint"], false);

    let message = format!("hello {}", world.canary);
    let called = inspector(
        &world,
        &[
            "--method",
            "tools/call",
            "--tool-name",
            "everything__echo",
            "--tool-arg",
            &format!("message={message}"),
        ],
    );
    assert_eq!(text(&called), format!("Echo: {message}"));
}

// --- plan mode, apply, secrets, review ----------------------------------------

impl World {
    /// Appends TOML (e.g. a `[modes.…]` table) to the test's config.
    fn append_config(&self, extra: &str) {
        let mut toml = std::fs::read_to_string(&self.config).unwrap();
        toml.push_str(extra);
        std::fs::write(&self.config, toml).unwrap();
    }

    /// The bytes of plangate's SQLite database files in the data dir
    /// (`plangate.db`, `-wal`, `-shm`), by name; the main file must exist.
    fn database_files(&self) -> Vec<(String, Vec<u8>)> {
        let dir = self.scratch.data_dir();
        let files: Vec<(String, Vec<u8>)> = ["plangate.db", "plangate.db-wal", "plangate.db-shm"]
            .iter()
            .filter_map(|name| {
                std::fs::read(dir.join(name))
                    .ok()
                    .map(|b| ((*name).to_owned(), b))
            })
            .collect();
        assert!(
            files
                .iter()
                .any(|(n, b)| n == "plangate.db" && !b.is_empty()),
            "no plangate.db in {}: {:?}",
            dir.display(),
            std::fs::read_dir(&dir).map(|d| d.flatten().map(|e| e.file_name()).collect::<Vec<_>>())
        );
        files
    }
}

/// The structured content of a tool result.
fn sc(result: &Value) -> &Value {
    &result["structuredContent"]
}

fn assert_plan_step(result: &Value, what: &str) {
    assert_ok(result, what);
    assert_eq!(sc(result)["code"], "plan_step", "{what}: {result}");
    assert_eq!(sc(result)["planned"], true, "{what}: {result}");
    assert_eq!(sc(result)["mutation_performed"], false, "{what}: {result}");
}

fn plan_then_apply_in_front_of_server_filesystem(world: &World, transport: Transport<'_>) {
    let out = world.client("plan_apply", transport, &[]);
    let path = Path::new(out["path"].as_str().unwrap());
    let content = out["content"].as_str().unwrap();
    assert_ok(&out["begin"], "begin_session plan");
    assert_eq!(sc(&out["begin"])["plan_mode"], true, "{}", out["begin"]);

    // The write is a plan step, and nothing reached the disk.
    let planned = &out["planned"];
    assert_plan_step(planned, "write_file in plan mode");
    assert_eq!(sc(planned)["exposed_as"], "fs__write_file", "{planned}");
    assert_eq!(sc(planned)["server"], "fs", "{planned}");
    assert_eq!(sc(planned)["tool"], "write_file", "{planned}");
    assert_eq!(sc(planned)["arguments"]["content"], content, "{planned}");
    assert_eq!(out["exists_after_plan"], false, "planning wrote the file");
    assert_eq!(
        out["exists_after_get_plan"], false,
        "get_plan wrote the file"
    );
    let step_id = sc(planned)["step_id"].as_str().unwrap();
    let digest = sc(planned)["plan"]["plan_digest"].as_str().unwrap();
    assert!(digest.starts_with("sha256:"), "{planned}");

    // get_plan lists exactly that step under the same digest.
    let plan = &out["get_plan"];
    assert_ok(plan, "get_plan");
    assert_eq!(sc(plan)["pending_steps"], 1, "{plan}");
    assert_eq!(sc(plan)["plan_digest"], digest, "{plan}");
    let steps = sc(plan)["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 1, "{plan}");
    assert_eq!(steps[0]["step_id"], step_id, "{plan}");
    assert_eq!(steps[0]["status"], "planned", "{plan}");

    // Applying with that digest writes it, once.
    let receipt = &out["apply"];
    assert_ok(receipt, "apply_plan");
    assert_eq!(sc(receipt)["code"], "plan_applied", "{receipt}");
    assert_eq!(sc(receipt)["applied"], 1, "{receipt}");
    assert_eq!(sc(receipt)["failed"], 0, "{receipt}");
    assert_eq!(sc(receipt)["steps"][0]["step_id"], step_id, "{receipt}");
    assert_eq!(sc(receipt)["steps"][0]["outcome"], "applied", "{receipt}");
    assert_eq!(out["exists_after_apply"], true, "{out}");
    assert_eq!(out["content_after_apply"], content);
    assert_eq!(std::fs::read_to_string(path).unwrap(), content, "on disk");

    // The gateway's tools declare output schemas derived from their
    // answers' types, and the SDK found every answer above conforming
    // (begin_session, get_plan, apply_plan, revert); a revert of
    // a file the step created plans nothing and says why.
    assert_eq!(
        out["output_schemas"],
        json!([
            "plangate_apply_plan",
            "plangate_begin_session",
            "plangate_discard_plan",
            "plangate_end_session",
            "plangate_exit_plan_mode",
            "plangate_get_plan",
            "plangate_revert"
        ]),
        "{out}"
    );
    let revert = &out["revert"];
    assert_ok(revert, "revert");
    assert_eq!(sc(revert)["planned"], json!([]), "{revert}");
    assert!(
        sc(revert)["not_reverted"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("no tool to delete"),
        "{revert}"
    );
}

over_both_transports!(
    stdio_plan_mode_write_to_server_filesystem_is_a_plan_step_until_applied,
    http_plan_mode_write_to_server_filesystem_is_a_plan_step_until_applied,
    plan_then_apply_in_front_of_server_filesystem,
    Options::default()
);

fn planned_secret_never_leaks(world: &World, transport: Transport<'_>) {
    // Contains the canary, so the log scan looks for it too.
    let secret = format!("sk-secret-{}", world.canary);
    let out = world.client("secret", transport, &["--secret", &secret]);
    assert_eq!(out["listed"], true, "{out}");
    assert_ok(&out["begin"], "begin_session plan");

    let planned = &out["planned"];
    assert_plan_step(planned, "toggle-simulated-logging in plan mode");
    assert_eq!(
        sc(planned)["arguments"],
        json!({"api_key": "[redacted]"}),
        "{planned}"
    );
    let plan = &out["get_plan"];
    assert_eq!(
        sc(plan)["steps"][0]["arguments"],
        json!({"api_key": "[redacted]"}),
        "{plan}"
    );
    // The secret was still replayed: the upstream ran the call.
    let receipt = &out["apply"];
    assert_ok(receipt, "apply_plan");
    assert_eq!(sc(receipt)["applied"], 1, "{receipt}");
    assert!(
        receipt
            .to_string()
            .contains("simulated, random-leveled logging"),
        "the upstream's result is in the receipt: {receipt}"
    );

    // Nowhere the client could see…
    let seen = out.to_string();
    assert!(
        !seen.contains(&secret),
        "the secret reached the client: {seen}"
    );
    // …nor in plangate's log lines…
    world.assert_logs_clean(transport);
    // …nor in plaintext in its database files.
    for (name, bytes) in world.database_files() {
        for needle in [secret.as_bytes(), world.canary.as_bytes()] {
            assert!(
                !bytes.windows(needle.len()).any(|w| w == needle),
                "{} appears in plaintext in {name}",
                String::from_utf8_lossy(needle)
            );
        }
    }
}

#[test]
fn stdio_planned_secret_is_redacted_applied_and_never_in_answers_logs_or_database() {
    let world = World::new(Options::default());
    planned_secret_never_leaks(&world, Transport::Stdio);
}

#[test]
fn http_planned_secret_is_redacted_applied_and_never_in_answers_logs_or_database() {
    let world = World::new(Options::default());
    let gw = world.serve_http();
    planned_secret_never_leaks(&world, Transport::Http(&gw));
}

/// Runs the `review` scenario answering `answer`, checks the question that
/// was asked, and returns what the client saw.
fn review(world: &World, answer: &str, extra: &[&str]) -> Value {
    let mut args = vec!["--answer", answer];
    args.extend_from_slice(extra);
    let out = world.client("review", Transport::Stdio, &args);
    assert_ok(&out["begin"], "begin_session plan");
    assert_plan_step(&out["planned"], "write_file in plan mode");
    assert_eq!(out["exists_after_plan"], false, "planning wrote the file");
    let asked = out["asked"].as_array().unwrap();
    if answer == "none" {
        assert!(asked.is_empty(), "{out}");
    } else {
        assert_eq!(asked.len(), 1, "the person was asked once: {out}");
        let q = &asked[0];
        assert_eq!(q["mode"], "form", "{q}");
        let schema = &q["requestedSchema"];
        assert_eq!(schema["required"], json!(["decision"]), "{q}");
        let decisions: BTreeSet<&str> = schema["properties"]["decision"]["oneOf"]
            .as_array()
            .unwrap_or_else(|| panic!("decision has no oneOf: {q}"))
            .iter()
            .map(|o| o["const"].as_str().unwrap())
            .collect();
        assert_eq!(
            decisions,
            BTreeSet::from(["approve", "keep_planning"]),
            "{q}"
        );
        assert_eq!(schema["properties"]["feedback"]["type"], "string", "{q}");
        // The question names the recorded step and the digest.
        let message = q["message"].as_str().unwrap();
        let digest = sc(&out["planned"])["plan"]["plan_digest"].as_str().unwrap();
        assert!(message.contains(digest), "{message}");
        assert!(message.contains("write_file"), "{message}");
    }
    out
}

/// The exit was refused with `code`, nothing was written, the step is still
/// waiting and the mode is still plan.
fn assert_review_refused(world: &World, out: &Value, code: &str) {
    let exit = &out["exit"];
    assert_eq!(exit["isError"], true, "{exit}");
    assert_eq!(sc(exit)["code"], code, "{exit}");
    assert_eq!(out["exists_after_exit"], false, "{out}");
    assert!(!Path::new(out["path"].as_str().unwrap()).exists());
    assert_plan_after_exit(world, out, "plan", 1);
}

/// After the exit the plan was in `mode` with `pending` steps; the log is clean.
fn assert_plan_after_exit(world: &World, out: &Value, mode: &str, pending: u64) {
    let plan = &out["get_plan_after"];
    assert_eq!(sc(plan)["mode"], mode, "{plan}");
    assert_eq!(sc(plan)["pending_steps"], pending, "{plan}");
    world.assert_logs_clean(Transport::Stdio);
}

#[test]
fn stdio_exit_plan_mode_approved_through_sdk_elicitation_applies_the_plan() {
    let world = World::new(Options::default());
    let out = review(&world, "approve", &[]);
    let exit = &out["exit"];
    assert_ok(exit, "exit_plan_mode approved");
    assert_eq!(sc(exit)["applied"], 1, "{exit}");
    assert_eq!(sc(exit)["mode"], "default", "{exit}");
    assert_eq!(out["exists_after_exit"], true, "{out}");
    assert_eq!(out["content_after_exit"], out["content"]);
    let path = Path::new(out["path"].as_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(path).unwrap(),
        out["content"].as_str().unwrap()
    );
    assert_plan_after_exit(&world, &out, "default", 0);
}

#[test]
fn stdio_exit_plan_mode_keep_planning_returns_the_feedback_verbatim_and_writes_nothing() {
    let world = World::new(Options::default());
    let feedback = format!("Not yet: name it notes.md instead ({})", world.canary);
    let out = review(&world, "keep_planning", &["--feedback", &feedback]);
    assert_review_refused(&world, &out, "review_declined");
    let exit = &out["exit"];
    assert_eq!(sc(exit)["feedback"], feedback.as_str(), "{exit}");
    assert!(text(exit).contains(&feedback), "{exit}");
}

#[test]
fn stdio_exit_plan_mode_declined_writes_nothing() {
    let world = World::new(Options::default());
    let out = review(&world, "decline", &[]);
    assert_review_refused(&world, &out, "review_declined");
}

#[test]
fn stdio_exit_plan_mode_cancelled_writes_nothing() {
    let world = World::new(Options::default());
    let out = review(&world, "cancel", &[]);
    assert_review_refused(&world, &out, "review_declined");
}

#[test]
fn stdio_exit_plan_mode_without_client_elicitation_is_a_corrective_error() {
    let world = World::new(Options::default());
    let out = review(&world, "none", &[]);
    assert_review_refused(&world, &out, "elicitation_unsupported");
    assert!(
        text(&out["exit"]).contains("plangate_apply_plan"),
        "{}",
        out["exit"]
    );
}

const CAREFUL_MODE: &str = "\n[modes.careful]\naccess = \"read\"\nover_access = \"ask\"\n";

#[test]
fn stdio_ask_mode_write_runs_only_after_the_person_approves() {
    let world = World::new(Options::default());
    world.append_config(CAREFUL_MODE);

    let out = world.client("ask", Transport::Stdio, &["--answer", "approve"]);
    assert_ok(&out["begin"], "begin_session careful");
    assert_eq!(sc(&out["begin"])["mode"], "careful", "{}", out["begin"]);
    let asked = out["asked"].as_array().unwrap();
    assert_eq!(asked.len(), 1, "the person was asked once: {out}");
    assert!(
        asked[0]["message"].as_str().unwrap().contains("write_file"),
        "{out}"
    );
    assert_ok(&out["write"], "write_file approved");
    assert_ne!(sc(&out["write"])["code"], "plan_step", "{out}");
    assert_eq!(out["exists_after_write"], true, "{out}");
    assert_eq!(out["content_after_write"], out["content"]);

    let out = world.client("ask", Transport::Stdio, &["--answer", "decline"]);
    assert_eq!(out["asked"].as_array().unwrap().len(), 1, "{out}");
    let write = &out["write"];
    assert_eq!(write["isError"], true, "{write}");
    assert_eq!(sc(write)["code"], "review_declined", "{write}");
    assert_eq!(out["exists_after_write"], false, "{out}");
    assert!(!Path::new(out["path"].as_str().unwrap()).exists());
    world.assert_logs_clean(Transport::Stdio);
}

// --- a credential inside an argument, in front of server-filesystem --------

#[tokio::test]
async fn a_token_inside_file_content_is_shown_redacted_sealed_and_written_byte_exact() {
    let world = World::new(Options::default());
    // A GitHub token in the middle of ordinary text, under an ordinary
    // argument name: its shape makes it a secret.
    let token = format!("ghp_{}", "Z9".repeat(18));
    let content = format!("deploy notes {}\nuse {token} from CI\n", world.canary);
    let path = world.root.join("deploy.md");
    let config = world.config.display().to_string();
    let client = stdio_client(&world.scratch, &["--config", &config], Some(&world.token)).await;
    let begun = call(&client, "plangate_begin_session", json!({"mode": "plan"}))
        .await
        .unwrap();
    assert_eq!(begun.is_error, Some(false), "{begun:?}");
    let planned = call(
        &client,
        "fs__write_file",
        json!({"path": path.display().to_string(), "content": content}),
    )
    .await
    .unwrap();
    let step = planned.structured_content.clone().unwrap();
    assert_eq!(step["code"], "plan_step", "{step}");
    assert_eq!(
        step["arguments"]["content"],
        content.replace(&token, "[redacted]"),
        "{step}"
    );
    let plan = call(&client, "plangate_get_plan", json!({})).await.unwrap();
    let shown = format!("{planned:?} {plan:?}");
    assert!(!shown.contains(&token), "the token was shown: {shown}");

    let receipt = call(&client, "plangate_apply_plan", json!({}))
        .await
        .unwrap();
    let receipt = receipt.structured_content.unwrap();
    assert_eq!(receipt["applied"], 1, "{receipt}");
    assert!(!receipt.to_string().contains(&token), "{receipt}");
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        content,
        "the file holds exactly what the agent sent"
    );
    client.cancel().await.unwrap();

    // Sealed at rest: neither the log export nor the store's files hold it.
    let export = world.scratch.run(&["audit", "export"]);
    assert!(export.status.success());
    let export = String::from_utf8_lossy(&export.stdout);
    assert!(
        export.contains("deploy.md") && !export.contains(&token),
        "{export}"
    );
    for entry in std::fs::read_dir(world.scratch.data_dir()).unwrap() {
        let bytes = std::fs::read(entry.unwrap().path()).unwrap();
        assert!(
            !bytes.windows(token.len()).any(|w| w == token.as_bytes()),
            "the token is in the data dir in plain text"
        );
    }
}

// --- a rug-pulling stdio upstream (official TypeScript SDK) -----------------

/// Waits until the client's tool list satisfies `check` (the gateway
/// relists after the upstream's list_changed).
async fn until_tools(
    client: &rmcp::service::RunningService<rmcp::RoleClient, rmcp::model::ClientConfig>,
    what: &str,
    check: impl Fn(&[String]) -> bool,
) {
    for _ in 0..200 {
        if check(&tool_names(client).await) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{what}: tools are {:?}", tool_names(client).await);
}

/// `tools list` says what changed in `note` (a write now claiming to be a
/// read) and why it is held, and that `wipe` is new; returns note's row.
fn the_operator_sees_what_changed(scratch: &Scratch, config: &str) -> Value {
    let listed = scratch.run(&["tools", "list", "--config", config, "--json"]);
    assert!(listed.status.success(), "{listed:?}");
    let listed: Value = serde_json::from_slice(&listed.stdout).unwrap();
    let row = |tool: &str| {
        listed["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["tool"] == tool)
            .cloned()
            .unwrap_or_else(|| panic!("{tool} not listed: {listed}"))
    };
    let note = row("note");
    assert_eq!(
        (note["status"].as_str(), note["reason"].as_str()),
        (Some("quarantined"), Some("changed")),
        "{note}"
    );
    assert_eq!(
        (note["effect"].as_str(), note["held_effect"].as_str()),
        (Some("write"), Some("read")),
        "{note}"
    );
    for field in ["annotations", "description", "inputSchema"] {
        assert!(
            note["changed"]
                .as_array()
                .unwrap()
                .iter()
                .any(|f| f == field),
            "{field}: {note}"
        );
    }
    assert_eq!(row("wipe")["reason"], "new");
    let table = scratch.run(&["tools", "list", "--config", config]);
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(
        table.contains("quarantined (changed)") && table.contains("write -> read"),
        "{table}"
    );
    note
}

/// A downgrade is never accepted silently: `tools accept` of `note` (its
/// listed row) needs `--allow-downgrade` and the held hash; `wipe` is
/// rejected.
fn the_operator_accepts_the_note_and_rejects_wipe(scratch: &Scratch, config: &str, note: &Value) {
    let silent = scratch.run(&["tools", "accept", "--config", config, "rug", "note"]);
    assert_eq!(silent.status.code(), Some(2), "{silent:?}");
    let said = String::from_utf8_lossy(&silent.stderr);
    assert!(
        said.contains("from write to read") && said.contains("--allow-downgrade"),
        "{said}"
    );
    let accepted = scratch.run(&[
        "tools",
        "accept",
        "--config",
        config,
        "rug",
        "note",
        "--hash",
        note["held_hash"].as_str().unwrap(),
        "--allow-downgrade",
    ]);
    assert!(accepted.status.success(), "{accepted:?}");
    let rejected = scratch.run(&["tools", "reject", "--config", config, "rug", "wipe"]);
    assert!(rejected.status.success(), "{rejected:?}");
}

#[tokio::test]
async fn a_rug_pulling_stdio_upstream_runs_nothing_it_changed_until_an_operator_accepts() {
    let peers = peers();
    let scratch = Scratch::new();
    let log = scratch.path().join("rug.log");
    let config = scratch.write(
        "plangate.toml",
        &format!(
            "[upstreams.rug]\ncommand = \"node\"\nargs = [{}, {}, {}]\n",
            toml_str(peers.interop.join("rugpull.mjs").display().to_string()),
            toml_str(peers.node_modules.display().to_string()),
            toml_str(log.display().to_string()),
        ),
    );
    let config = config.display().to_string();
    let token = scratch.create_key("agent", "write");
    let client = stdio_client(&scratch, &["--config", &config], Some(&token)).await;
    let sc = |r: &rmcp::model::CallToolResult| r.structured_content.clone().unwrap_or_default();
    let delivered = || std::fs::read_to_string(&log).unwrap_or_default();

    // Pinned at first sight; the write is planned.
    call(&client, "plangate_begin_session", json!({"mode": "plan"}))
        .await
        .unwrap();
    let planned = sc(&call(&client, "note", json!({"text": "first"}))
        .await
        .unwrap());
    assert_eq!(planned["code"], "plan_step", "{planned}");
    assert_eq!(planned["effect"], "write", "{planned}");

    // The rug pull: `note` now claims to be read-only with a new
    // description and schema, and a destructive `wipe` appears.
    let flipped = call(&client, "flip", json!({})).await.unwrap();
    assert_ne!(flipped.is_error, Some(true), "{flipped:?}");
    until_tools(&client, "note withheld", |t| !t.iter().any(|n| n == "note")).await;
    let names = tool_names(&client).await;
    assert!(!names.iter().any(|n| n == "wipe"), "{names:?}");

    // Nothing it changed runs: not the "read-only" note, not wipe, not the
    // step planned before the change.
    for (tool, args) in [("note", json!({"text": "sneaky"})), ("wipe", json!({}))] {
        let refused = sc(&call(&client, tool, args).await.unwrap());
        assert_eq!(refused["code"], "tool_quarantined", "{tool}: {refused}");
    }
    let receipt = sc(&call(&client, "plangate_apply_plan", json!({}))
        .await
        .unwrap());
    assert_eq!(receipt["failed"], 1, "{receipt}");
    assert_eq!(
        receipt["steps"][0]["error"]["code"], "tool_quarantined",
        "{receipt}"
    );
    assert_eq!(delivered(), "", "nothing reached the upstream");

    // The operator sees what changed and why it is held, and accepts
    // the downgrade only when told so; wipe is rejected.
    let note = the_operator_sees_what_changed(&scratch, &config);
    the_operator_accepts_the_note_and_rejects_wipe(&scratch, &config, &note);

    // The accepted definition is offered; the rejected one stays out; the
    // step planned against the old definition still does not run.
    until_tools(&client, "note offered again", |t| {
        t.iter().any(|n| n == "note")
    })
    .await;
    assert!(!tool_names(&client).await.iter().any(|n| n == "wipe"));
    let plan = sc(&call(&client, "plangate_get_plan", json!({})).await.unwrap());
    let step = plan["steps"][0]["step_id"].as_str().unwrap().to_owned();
    let again = sc(
        &call(&client, "plangate_apply_plan", json!({"step_ids": [step]}))
            .await
            .unwrap(),
    );
    assert_eq!(
        again["steps"][0]["error"]["code"], "stale_target",
        "{again}"
    );
    assert_eq!(delivered(), "", "the old step never ran");
    client.cancel().await.unwrap();
}
