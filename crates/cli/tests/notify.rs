//! Notifications (docs/design.md §13), end to end: the official
//! server-filesystem behind plangate, an agent on rmcp, and a webhook
//! receiver that verifies every POST with the Standard Webhooks reference
//! library (`tests/interop/webhook_receiver.py`, standardwebhooks 1.3.0).
//! A planned write is announced once, signed, with a link to that plan; a
//! receiver that is down loses nothing across a restart; a Slack receiver
//! gets text no step can turn into a link; `plangate notify test` says
//! what the receiver answered.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};

/// The secret both sides hold (24 bytes, base64).
const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// The webhook receiver: what it heard, one JSON object a request, in
/// the file it appends to.
struct Receiver {
    child: Child,
    heard_file: tempfile::NamedTempFile,
}

impl Receiver {
    /// Starts the receiver on `port`, verifying with `secret`.
    fn start(port: u16, secret: &str) -> Receiver {
        let peers = peers();
        let heard_file = tempfile::NamedTempFile::new().unwrap();
        let mut child = Command::new(&peers.python)
            .arg(peers.interop.join("webhook_receiver.py"))
            .arg(port.to_string())
            .arg(heard_file.path())
            .env("WEBHOOK_SECRET", secret)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut first = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut first)
            .unwrap();
        assert!(
            first.starts_with("listening "),
            "the receiver did not start: {first:?}"
        );
        Receiver { child, heard_file }
    }

    /// Every request heard so far.
    fn heard(&self) -> Vec<Value> {
        std::fs::read_to_string(self.heard_file.path())
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// Waits until `n` requests were heard (45 s at most: a delivery
    /// claimed by a process that was stopped is due again 30 s later);
    /// answers all.
    fn wait_for(&self, n: usize) -> Vec<Value> {
        let start = Instant::now();
        loop {
            let heard = self.heard();
            if heard.len() >= n || start.elapsed() > Duration::from_secs(45) {
                return heard;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback port of this test process's own, `n` (0–3) of four: below
/// the kernel's ephemeral range (32768 and up), so no port some other
/// process binds as `:0` — a gateway, another test's client — can be it
/// while a receiver is down on purpose.
fn own_port(n: u16) -> u16 {
    let pid = u16::try_from(std::process::id() % 3000).unwrap();
    20_000 + pid * 4 + n
}

/// A filesystem world whose config sends every event to the receiver at
/// `port` (`/hook`, standard) and to `/slack` in Slack's format.
fn world(port: u16) -> FsWorld {
    FsWorld::new(|scratch, root| {
        filesystem_config(
            scratch,
            root,
            &format!(
                "[gateway]\ndefault_mode = \"plan\"\nnotify_debounce = \"1s\"\npublic_url = \"https://gw.example.com/\"\n\n\
                 [[notify]]\nname = \"ops\"\nurl = \"http://127.0.0.1:{port}/hook\"\nsecret = \"${{env:HOOK_SECRET}}\"\n\n\
                 [[notify]]\nname = \"chat\"\nurl = \"http://127.0.0.1:{port}/slack\"\nsecret = \"${{env:HOOK_SECRET}}\"\nformat = \"slack\"\nevents = [\"plan.review_needed\"]\n"
            ),
        )
    })
}

/// `plangate serve --http` of the world, with the receivers' secret.
fn serve(w: &FsWorld) -> Proc {
    serve_with(w, &[])
}

/// [`serve`] with more arguments (`--database URL`).
fn serve_with(w: &FsWorld, extra: &[&str]) -> Proc {
    let mut cmd = w
        .scratch
        .command(&["serve", "--http", "127.0.0.1:0", "--config", &w.config]);
    cmd.args(extra).env("HOOK_SECRET", SECRET);
    Proc::start(cmd, "plangate serving ")
}

/// Runs `sql` on the test database.
fn psql(base: &str, sql: &str) -> bool {
    Command::new("psql")
        .env("PGOPTIONS", "--client-min-messages=warning")
        .args([base, "-q", "-c", sql])
        .status()
        .is_ok_and(|s| s.success())
}

/// An operator command of the world that must succeed; its stdout.
fn op(w: &FsWorld, args: &[&str]) -> String {
    let mut cmd = w.scratch.command(args);
    cmd.env("HOOK_SECRET", SECRET);
    succeeded(args, &cmd.output().unwrap())
}

/// The bodies heard on `path`, parsed.
fn bodies(heard: &[Value], path: &str) -> Vec<Value> {
    heard
        .iter()
        .filter(|h| h["path"] == path)
        .map(|h| serde_json::from_str(h["body"].as_str().unwrap()).unwrap())
        .collect()
}

/// Waits until `notify list --json` says `check` (20 s at most).
fn outbox_until(w: &FsWorld, check: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let start = Instant::now();
    loop {
        let rows: Vec<Value> = serde_json::from_str(&op(w, &["notify", "list", "--json"])).unwrap();
        if check(&rows) || start.elapsed() > Duration::from_secs(20) {
            return rows;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The agent writes `a.txt` in the world's root (planned).
async fn write_a(agent: &Client, w: &FsWorld) {
    let path = w.root.join("a.txt");
    let r = call(
        agent,
        "write_file",
        json!({"path": path, "content": "new\n"}),
    )
    .await
    .unwrap();
    assert_eq!(body(&r)["planned"], true, "{r:?}");
}

#[tokio::test]
async fn a_planned_write_is_announced_once_signed_and_linked_to_the_plan() {
    let port = own_port(0);
    let receiver = Receiver::start(port, SECRET);
    let w = world(port);
    let gw = serve(&w);
    let agent = http_client(&gw.url(), Some(&w.token)).await.unwrap();
    for name in ["a.txt", "b<!channel>.txt"] {
        let path = w.root.join(name);
        let r = call(
            &agent,
            "write_file",
            json!({"path": path, "content": "new\n"}),
        )
        .await
        .unwrap();
        assert_eq!(body(&r)["planned"], true, "{r:?}");
    }
    // One announcement per receiver for the two steps, once the plan was
    // quiet for a second.
    let heard = receiver.wait_for(2);
    std::thread::sleep(Duration::from_secs(2));
    let heard_later = receiver.heard();
    assert_eq!(heard_later.len(), 2, "{heard_later:#?}\n{}", gw.log());
    for h in &heard {
        assert_eq!(h["verified"], true, "{h}");
        assert!(h["webhook-id"].as_str().unwrap().starts_with("msg_"), "{h}");
        assert!(
            h["webhook-signature"].as_str().unwrap().starts_with("v1,"),
            "{h}"
        );
    }
    let shown: Value = serde_json::from_str(&op(
        &w,
        &[
            "plans", "show", "--key", "agent", "--config", &w.config, "--json",
        ],
    ))
    .unwrap();
    let standard = &bodies(&heard, "/hook")[0];
    assert_eq!(standard["type"], "plan.review_needed", "{standard}");
    assert_eq!(standard["key"], "agent");
    assert_eq!(standard["plan_digest"], shown["plan_digest"]);
    assert_eq!(standard["revision"], shown["revision"]);
    assert_eq!(standard["steps"], 2);
    assert_eq!(
        standard["console_url"],
        format!(
            "https://gw.example.com/console#key=agent&revision={}",
            shown["revision"]
        )
    );
    let summary = standard["summary"].as_str().unwrap();
    assert!(
        summary.starts_with("1. Write the file ") && summary.contains("a.txt"),
        "{summary}"
    );
    // Slack's text: the step's `<!channel>` is text, not a mention.
    let slack = &bodies(&heard, "/slack")[0];
    let text = slack["text"].as_str().unwrap();
    assert!(
        text.contains("b&lt;!channel&gt;.txt") && !text.contains("<!channel>"),
        "{text}"
    );
    assert!(text.contains("|Open in the console>"), "{text}");

    // A person's yes and apply: `plan.applied` to the receiver that wants it.
    let digest = shown["plan_digest"].as_str().unwrap();
    op(
        &w,
        &[
            "plans", "approve", "--key", "agent", "--config", &w.config, "--digest", digest,
        ],
    );
    op(&w, &apply_args(&w.config, digest, &[]));
    let heard = receiver.wait_for(3);
    let applied = bodies(&heard, "/hook");
    assert_eq!(applied.len(), 2, "{heard:#?}");
    assert_eq!(applied[1]["type"], "plan.applied");
    assert_eq!(applied[1]["plan_digest"], digest);
    assert_eq!(applied[1]["steps"], 2);
    assert_eq!(bodies(&heard, "/slack").len(), 1, "chat wants reviews only");
    agent.cancel().await.unwrap();
}

#[tokio::test]
async fn a_receiver_down_loses_nothing_across_a_restart() {
    let port = own_port(1);
    let w = world(port);
    let gw = serve(&w);
    let agent = http_client(&gw.url(), Some(&w.token)).await.unwrap();
    write_a(&agent, &w).await;
    // Nobody listens: the attempt fails and is on the record, due again.
    let rows = outbox_until(&w, |rows| {
        rows.iter()
            .any(|r| r["receiver"] == "ops" && !r["attempts"].as_array().unwrap().is_empty())
    });
    let ops = rows.iter().find(|r| r["receiver"] == "ops").unwrap();
    assert_eq!(ops["state"], "pending", "{ops}");
    assert_eq!(ops["attempts"][0]["status"], "connection refused", "{ops}");
    agent.cancel().await.unwrap();
    drop(gw);

    // The receiver comes back while plangate is stopped; plangate starts
    // again and delivers what it owed, once.
    let receiver = Receiver::start(port, SECRET);
    let gw = serve(&w);
    let heard = receiver.wait_for(2);
    let standard = bodies(&heard, "/hook");
    assert_eq!(standard.len(), 1, "{heard:#?}\n{}", gw.log());
    assert_eq!(standard[0]["type"], "plan.review_needed");
    assert!(heard.iter().all(|h| h["verified"] == true), "{heard:#?}");
    let rows = outbox_until(&w, |rows| rows.iter().all(|r| r["state"] == "delivered"));
    let ops = rows.iter().find(|r| r["receiver"] == "ops").unwrap();
    assert_eq!(ops["state"], "delivered", "{ops}");
    let attempts = ops["attempts"].as_array().unwrap();
    assert!(attempts.len() >= 2, "{ops}");
    assert_eq!(attempts.last().unwrap()["status"], "HTTP 204 No Content");
    assert_eq!(
        ops["webhook_id"],
        heard.iter().find(|h| h["path"] == "/hook").unwrap()["webhook-id"]
    );
    drop(gw);
}

#[test]
fn notify_test_says_what_the_receiver_answered() {
    let port = own_port(2);
    let w = world(port);
    // A receiver holding another secret refuses the signature.
    let wrong = Receiver::start(port, "whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA");
    let mut cmd = w
        .scratch
        .command(&["notify", "test", "ops", "--config", &w.config]);
    cmd.env("HOOK_SECRET", SECRET);
    let out = cmd.output().unwrap();
    assert!(!out.status.success());
    assert!(
        stdout(&out).contains("HTTP 401 Unauthorized"),
        "{}",
        stdout(&out)
    );
    assert!(
        stderr(&out).contains("the receiver did not take it"),
        "{}",
        stderr(&out)
    );
    drop(wrong);

    let right = Receiver::start(port, SECRET);
    let text = op(&w, &["notify", "test", "ops", "--config", &w.config]);
    assert!(text.contains("HTTP 204 No Content"), "{text}");
    let heard = right.wait_for(1);
    assert_eq!(heard[0]["verified"], true);
    let body: Value = serde_json::from_str(heard[0]["body"].as_str().unwrap()).unwrap();
    assert_eq!(body["type"], "notify.test");
    assert_eq!(body["console_url"], "https://gw.example.com/console");

    let mut cmd = w
        .scratch
        .command(&["notify", "test", "pager", "--config", &w.config]);
    cmd.env("HOOK_SECRET", SECRET);
    let out = cmd.output().unwrap();
    assert!(
        stderr(&out).contains("no [[notify]] receiver named \"pager\""),
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("it defines ops, chat"),
        "{}",
        stderr(&out)
    );
}

/// Two replicas sharing one PostgreSQL database both follow the log: a
/// plan planned through one is announced once to each receiver (the same
/// message id from both, one row, one delivery).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_on_postgres_announce_a_plan_once() {
    let Ok(base) = std::env::var("PLANGATE_TEST_POSTGRES_URL") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must set PLANGATE_TEST_POSTGRES_URL"
        );
        eprintln!("notify [postgres]: PLANGATE_TEST_POSTGRES_URL not set; not run");
        return;
    };
    let schema = format!("notify_{}", std::process::id());
    assert!(psql(
        &base,
        &format!("DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}")
    ));
    let sep = if base.contains('?') { '&' } else { '?' };
    let url = format!("{base}{sep}options=-c%20search_path%3D{schema}");

    let port = own_port(3);
    let receiver = Receiver::start(port, SECRET);
    let mut w = world(port);
    let out = w.scratch.run(&[
        "keys",
        "create",
        "--name",
        "shared",
        "--scope",
        "plan",
        "--database",
        &url,
    ]);
    w.token = stdout(&out).trim().to_owned();
    assert!(w.token.starts_with("pgk_"), "{}", stderr(&out));
    let one = serve_with(&w, &["--database", &url]);
    let two = serve_with(&w, &["--database", &url]);
    let agent = http_client(&one.url(), Some(&w.token)).await.unwrap();
    write_a(&agent, &w).await;
    receiver.wait_for(2);
    std::thread::sleep(Duration::from_secs(3));
    let heard = receiver.heard();
    let standard = bodies(&heard, "/hook");
    assert_eq!(standard.len(), 1, "{heard:#?}");
    assert_eq!(bodies(&heard, "/slack").len(), 1, "{heard:#?}");
    assert_eq!(standard[0]["key"], "shared");
    agent.cancel().await.unwrap();
    drop((one, two));
    psql(&base, &format!("DROP SCHEMA IF EXISTS {schema} CASCADE"));
}
