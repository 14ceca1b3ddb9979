//! Config reload without a restart, on the official reference servers: a
//! `SIGHUP` (or, with `--watch-config`, an edit of the file) starts the
//! upstreams added, stops the ones removed, and tells connected clients;
//! a file with mistakes is refused and the running config stays; a
//! planned step on a tool that went away fails its re-check at apply.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{Proc, Scratch, apply_plan, begin, get_plan, names_of, ok, peers};
use rmcp::ServiceExt;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::json;

/// A client that counts `tools/list_changed`.
#[derive(Clone, Default)]
struct Counting(Arc<AtomicUsize>);

impl rmcp::ClientHandler for Counting {
    fn get_info(&self) -> rmcp::model::ClientConfig {
        common::client_info()
    }
    async fn on_tool_list_changed(&self, _: rmcp::service::NotificationContext<rmcp::RoleClient>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

type CountingClient = rmcp::service::RunningService<rmcp::RoleClient, Counting>;

async fn connect(proc: &Proc, token: &str, counting: &Counting) -> CountingClient {
    let config = StreamableHttpClientTransportConfig::with_uri(proc.url()).auth_header(token);
    let transport = StreamableHttpClientTransport::with_client(reqwest::Client::new(), config);
    counting.clone().serve(transport).await.unwrap()
}

/// The upstream tools a client sees (plangate's own depend on the mode).
async fn names(client: &CountingClient) -> Vec<String> {
    names_of(client.peer().list_all_tools().await.unwrap())
        .into_iter()
        .filter(|n| !n.starts_with("plangate_"))
        .collect()
}

/// The `[upstreams.NAME]` table of an official reference server (a Node
/// entry point under `.tools/node`), with `extra` lines.
fn node_upstream(name: &str, js: &Path, args: &[&Path], extra: &str) -> String {
    let mut all = vec![format!("{:?}", js.display().to_string())];
    all.extend(
        args.iter()
            .map(|a| format!("{:?}", a.display().to_string())),
    );
    format!(
        "[upstreams.{name}]\ncommand = \"node\"\nargs = [{}]\n{extra}\n",
        all.join(", ")
    )
}

fn hangup(proc: &Proc) {
    let status = std::process::Command::new("kill")
        .args(["-HUP", &proc.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// Waits (at most 30 s) until `check` holds of plangate's stderr.
fn log_until(proc: &Proc, what: &str, check: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let log = proc.log();
        if check(&log) {
            return log;
        }
        assert!(
            Instant::now() < deadline,
            "never saw {what}; stderr:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn count(log: &str, needle: &str) -> usize {
    log.matches(needle).count()
}

/// The processes below plangate running `entry` (a reference server).
fn running(proc: &Proc, entry: &str) -> Vec<u32> {
    common::descendants(proc.child.id())
        .into_iter()
        .filter(|pid| common::cmdline(*pid).contains(entry))
        .collect()
}

struct World {
    scratch: Scratch,
    config: PathBuf,
    fs: String,
    memory: String,
}

fn world() -> World {
    let scratch = Scratch::new();
    let root = scratch.path().join("files");
    std::fs::create_dir_all(&root).unwrap();
    let fs = node_upstream(
        "fs",
        &peers().js("@modelcontextprotocol/server-filesystem/dist/index.js"),
        &[&root],
        "",
    );
    let memory = node_upstream(
        "memory",
        &peers().js("@modelcontextprotocol/server-memory/dist/index.js"),
        &[],
        &format!(
            "env = {{ MEMORY_FILE_PATH = {:?} }}",
            scratch.path().join("memory.jsonl").display().to_string()
        ),
    );
    // Tools keep their names whatever the number of upstreams.
    let config = scratch.write(
        "plangate.toml",
        &format!("[gateway]\nnamespace = \"always\"\n\n{fs}"),
    );
    World {
        scratch,
        config,
        fs,
        memory,
    }
}

impl World {
    fn write_config(&self, upstreams: &str) {
        std::fs::write(
            &self.config,
            format!("[gateway]\nnamespace = \"always\"\n\n{upstreams}"),
        )
        .unwrap();
    }
}

/// The acceptance scenario: a SIGHUP with a new upstream makes its tools
/// appear to a connected client; a broken file changes nothing; a SIGHUP
/// without it stops its process and its tools go, and the step planned on
/// one of them fails its re-check at apply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_adds_and_removes_upstreams_and_connected_clients_hear_of_it() {
    let w = world();
    let token = w.scratch.create_key("agent", "write");
    let gw = common::serve_http(&w.scratch, &["--config", w.config.to_str().unwrap()]);
    // One client listens (its handler counts `list_changed`), one calls.
    let counting = Counting::default();
    let listener = connect(&gw, &token, &counting).await;
    let client = common::http_client(&gw.url(), Some(&token)).await.unwrap();
    let before = names(&listener).await;
    assert!(before.contains(&"fs__write_file".to_owned()), "{before:?}");
    assert!(!before.iter().any(|n| n.starts_with("memory__")));
    let fs_server = running(&gw, "server-filesystem");
    assert_eq!(fs_server.len(), 1);

    // Add the memory server; SIGHUP.
    w.write_config(&format!("{}{}", w.fs, w.memory));
    let heard = counting.0.load(Ordering::SeqCst);
    hangup(&gw);
    let log = log_until(&gw, "the reload", |l| {
        l.contains("config reloaded (SIGHUP)")
    });
    assert!(
        log.contains("upstreams added: memory; removed: none; restarted: none; unchanged: fs"),
        "{log}"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while counting.0.load(Ordering::SeqCst) == heard {
        assert!(Instant::now() < deadline, "no list_changed; {}", gw.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let after = names(&listener).await;
    assert!(
        after.contains(&"memory__create_entities".to_owned()),
        "{after:?}"
    );
    assert!(after.contains(&"fs__write_file".to_owned()));
    assert_eq!(running(&gw, "server-memory").len(), 1);
    // Its tools serve, through the same pipeline; the fs session was kept
    // (the same filesystem server process as before).
    assert_eq!(running(&gw, "server-filesystem"), fs_server);
    let graph = common::call(&client, "memory__read_graph", json!({}))
        .await
        .unwrap();
    assert_ne!(graph.is_error, Some(true), "{graph:?}");
    assert!(graph.structured_content.unwrap().get("entities").is_some());

    // Plan a write on it.
    begin(&client, "plan").await;
    let step = ok(
        &client,
        "memory__create_entities",
        json!({"entities": [{"name": "plangate", "entityType": "project", "observations": ["reloads"]}]}),
    )
    .await;
    assert_eq!(step["code"], "plan_step", "{step}");

    // A broken file is refused with what is wrong, and nothing changes.
    std::fs::write(&w.config, w.fs.replace("command =", "comand =") + &w.memory).unwrap();
    hangup(&gw);
    let log = log_until(&gw, "the refusal", |l| l.contains("config not reloaded"));
    assert!(log.contains("the running config stays"), "{log}");
    assert!(log.contains("comand"), "{log}");
    assert!(log.contains("did you mean"), "{log}");
    assert_eq!(names(&listener).await, after);

    // Take the memory server out again.
    w.write_config(&w.fs);
    hangup(&gw);
    let log = log_until(&gw, "the second reload", |l| {
        count(l, "config reloaded (SIGHUP)") == 2
    });
    assert!(
        log.contains("upstreams added: none; removed: memory; restarted: none; unchanged: fs"),
        "{log}"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while !running(&gw, "server-memory").is_empty() {
        assert!(Instant::now() < deadline, "the memory server still runs");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let now = names(&listener).await;
    assert!(!now.iter().any(|n| n.starts_with("memory__")), "{now:?}");

    // The planned step stays, and fails its re-check: its tool is gone.
    assert_eq!(get_plan(&client).await["pending_steps"], 1);
    let receipt = apply_plan(&client, json!({})).await;
    assert_eq!(receipt["failed"], 1, "{receipt}");
    let failed = &receipt["steps"][0];
    assert_eq!(failed["step_id"], step["step_id"]);
    assert_eq!(failed["error"]["code"], "stale_target", "{receipt}");
    assert!(
        failed["error"]["message"]
            .as_str()
            .unwrap()
            .contains("create_entities is no longer offered by memory"),
        "{receipt}"
    );
    assert!(
        !w.scratch.path().join("memory.jsonl").exists()
            || !std::fs::read_to_string(w.scratch.path().join("memory.jsonl"))
                .unwrap()
                .contains("plangate"),
        "nothing was written"
    );
    client.cancel().await.unwrap();
    listener.cancel().await.unwrap();
}

/// `--watch-config` reloads when the file is edited: a changed upstream
/// is restarted (its new settings in force), and the settings that only
/// a restart applies are named, their running values kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_config_restarts_a_changed_upstream_and_names_what_needs_a_restart() {
    let w = world();
    let token = w.scratch.create_key("agent", "write");
    let gw = common::serve_http(
        &w.scratch,
        &["--config", w.config.to_str().unwrap(), "--watch-config"],
    );
    let client = common::http_client(&gw.url(), Some(&token)).await.unwrap();
    let first = running(&gw, "server-filesystem");
    assert_eq!(first.len(), 1);
    // A second root: the filesystem server is started again with it.
    let other = w.scratch.path().join("more");
    std::fs::create_dir_all(&other).unwrap();
    let fs2 = node_upstream(
        "fs",
        &peers().js("@modelcontextprotocol/server-filesystem/dist/index.js"),
        &[&w.scratch.path().join("files"), &other],
        "",
    );
    // And a rule: the reload says it is new.
    let rule =
        "[[rules]]\nname = \"moves-plan\"\nwhen = \"tool == 'move_file'\"\noutcome = \"plan\"\n";
    std::fs::write(
        &w.config,
        format!("[gateway]\nnamespace = \"always\"\nmax_sessions = 7\n\n{fs2}\n{rule}"),
    )
    .unwrap();
    let log = log_until(&gw, "the reload", |l| l.contains("config reloaded ("));
    assert!(log.contains("plangate.toml changed"), "{log}");
    assert!(log.contains("restarted: fs"), "{log}");
    assert!(
        log.contains("rules added: moves-plan; removed: none; changed: none"),
        "{log}"
    );
    assert!(
        log.contains(
            "changed but kept at their running values until plangate restarts: gateway.max_sessions"
        ),
        "{log}"
    );
    let now = running(&gw, "server-filesystem");
    assert_eq!(now.len(), 1);
    assert_ne!(now, first, "a new filesystem server");
    // The new root is served.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let listed = common::call(&client, "fs__list_allowed_directories", json!({})).await;
        let text = match &listed {
            Ok(r) => serde_json::to_string(&r.content).unwrap(),
            Err(e) => e.to_string(),
        };
        if text.contains("more") {
            break;
        }
        assert!(Instant::now() < deadline, "{text}\n{}", gw.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    client.cancel().await.unwrap();
}

/// `--watch-config` needs a file: the embedded demo has none.
#[test]
fn watch_config_without_a_file_says_what_to_give() {
    let scratch = Scratch::new();
    let out = scratch
        .command(&["serve", "--http", "127.0.0.1:0", "--watch-config"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", common::stderr(&out));
    let err = common::stderr(&out);
    assert!(err.contains("no config file to watch"), "{err}");
    assert!(err.contains("--config FILE"), "{err}");
}
