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
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};

/// The secret both sides hold (24 bytes, base64).
const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// The webhook receiver: what it heard, one JSON object a request.
struct Receiver {
    child: Child,
    heard: Arc<Mutex<Vec<Value>>>,
}

impl Receiver {
    /// Starts the receiver on `port`, verifying with `secret`.
    fn start(port: u16, secret: &str) -> Receiver {
        let peers = peers();
        let mut child = Command::new(&peers.python)
            .arg(peers.interop.join("webhook_receiver.py"))
            .arg(port.to_string())
            .env("WEBHOOK_SECRET", secret)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let heard = Arc::new(Mutex::new(Vec::new()));
        let (ready, listening) = std::sync::mpsc::channel();
        let sink = heard.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if line.starts_with("listening ") {
                    let _ = ready.send(());
                } else if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    sink.lock().unwrap().push(v);
                }
            }
        });
        listening
            .recv_timeout(Duration::from_secs(30))
            .expect("the receiver never listened");
        Receiver { child, heard }
    }

    /// Waits until `n` requests were heard (45 s at most: a delivery
    /// claimed by a process that was stopped is due again 30 s later);
    /// answers all.
    fn wait_for(&self, n: usize) -> Vec<Value> {
        let start = Instant::now();
        loop {
            let heard = self.heard.lock().unwrap().clone();
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

/// A loopback port nothing listens on now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
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
    let mut cmd = w
        .scratch
        .command(&["serve", "--http", "127.0.0.1:0", "--config", &w.config]);
    cmd.env("HOOK_SECRET", SECRET);
    Proc::start(cmd, "plangate serving ")
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

#[tokio::test]
async fn a_planned_write_is_announced_once_signed_and_linked_to_the_plan() {
    let port = free_port();
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
    let heard_later = receiver.heard.lock().unwrap().clone();
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
    let port = free_port();
    let w = world(port);
    let gw = serve(&w);
    let agent = http_client(&gw.url(), Some(&w.token)).await.unwrap();
    let path = w.root.join("a.txt");
    call(
        &agent,
        "write_file",
        json!({"path": path, "content": "new\n"}),
    )
    .await
    .unwrap();
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
    assert_eq!(standard.len(), 1, "{heard:#?}");
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
    let port = free_port();
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
