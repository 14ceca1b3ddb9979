//! What a person sees when an upstream will not start: its own last words
//! (stderr) in the error, a `startup_timeout` that bounds the wait, and a
//! plangate listed as its own upstream refused at once with the entry to
//! remove — as real `plangate config check` and `serve` processes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::*;

/// `plangate config check --config FILE`, which must fail; its stderr.
fn check_fails(scratch: &Scratch, config: &str) -> String {
    let out = scratch.run(&["config", "check", "--config", config]);
    assert!(!out.status.success(), "{}", stdout(&out));
    stderr(&out)
}

#[test]
fn a_failing_upstream_says_why_in_its_own_words() {
    let scratch = Scratch::new();
    let config = scratch.write(
        "plangate.toml",
        "[upstreams.boom]\ncommand = \"sh\"\nargs = [\"-c\", \"echo 'boom: missing API token' >&2; exit 1\"]\n",
    );
    let err = check_fails(&scratch, config.to_str().unwrap());
    assert!(err.contains("upstream boom"), "{err}");
    assert!(
        err.contains("its stderr ended with: boom: missing API token"),
        "{err}"
    );
    assert!(!err.contains("OrderedProgress"), "rmcp's type names: {err}");
}

#[test]
fn a_silent_upstream_is_given_up_on_after_its_startup_timeout() {
    let scratch = Scratch::new();
    let config = scratch.write(
        "plangate.toml",
        "[upstreams.silent]\ncommand = \"sh\"\nargs = [\"-c\", \"echo 'waiting for a licence server' >&2; exec sleep 60\"]\nstartup_timeout = \"1s\"\n",
    );
    let started = Instant::now();
    let err = check_fails(&scratch, config.to_str().unwrap());
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "waited {:?}",
        started.elapsed()
    );
    assert!(
        err.contains("no answer within 1s (its startup_timeout)"),
        "{err}"
    );
    assert!(err.contains("waiting for a licence server"), "{err}");
}

#[test]
fn plangate_listed_as_its_own_upstream_is_refused_with_the_entry_to_remove() {
    let scratch = Scratch::new();
    let path = scratch.path().join("plangate.toml");
    let config = scratch.write(
        "plangate.toml",
        &format!(
            "[upstreams.myself]\ncommand = {:?}\nargs = [\"serve\", \"--stdio\", \"--config\", {:?}]\n",
            plangate().display().to_string(),
            path.display().to_string()
        ),
    );
    let started = Instant::now();
    let err = check_fails(&scratch, config.to_str().unwrap());
    assert!(started.elapsed() < Duration::from_secs(15));
    assert!(
        err.contains("started as upstream \"myself\" of another plangate"),
        "{err}"
    );
    assert!(err.contains("remove the \"myself\" entry"), "{err}");
    // `serve` itself, started the way a plangate starts its upstreams,
    // refuses at once with exit code 2.
    let out = scratch
        .command(&["serve", "--stdio", "--config", config.to_str().unwrap()])
        .env("PLANGATE_STARTED_AS_UPSTREAM", "myself")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

/// A client that counts `tools/list_changed`.
#[derive(Clone, Default)]
struct Counting(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl rmcp::ClientHandler for Counting {
    fn get_info(&self) -> rmcp::model::ClientConfig {
        common::client_info()
    }
    async fn on_tool_list_changed(&self, _: rmcp::service::NotificationContext<rmcp::RoleClient>) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A slow upstream does not hold plangate back: it serves the others
/// within seconds, `/readyz` names the one still connecting, and when it
/// comes up its tools appear and connected clients hear `list_changed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plangate_serves_without_waiting_for_a_slow_upstream() {
    use rmcp::ServiceExt;

    let scratch = Scratch::new();
    let state = scratch.path().join("site.json");
    let config = scratch.write(
        "plangate.toml",
        &format!(
            "[upstreams.slow]\ncommand = \"sh\"\nargs = [\"-c\", \"sleep 9; exec \\\"$0\\\" demo-site --state \\\"$1\\\"\", \"{}\", \"{}\"]\nstartup_timeout = \"60s\"\n\n[upstreams.memo]\ncommand = \"{}\"\nargs = [\"demo-site\", \"--state\", \"{}\"]\n",
            common::plangate().display(),
            state.display(),
            common::plangate().display(),
            scratch.path().join("memo.json").display(),
        ),
    );
    let started = Instant::now();
    let gw = common::serve_http(&scratch, &["--config", config.to_str().unwrap()]);
    let took = started.elapsed();
    assert!(took < Duration::from_secs(8), "serving took {took:?}");
    assert!(
        gw.log().contains("still connecting after 5s"),
        "{}",
        gw.log()
    );

    let ready = reqwest::get(format!("http://{}/readyz", gw.addr))
        .await
        .unwrap();
    assert_eq!(ready.status().as_u16(), 503);
    let body: serde_json::Value = ready.json().await.unwrap();
    assert_eq!(body["upstreams_down"]["slow"], "connecting", "{body}");
    assert_eq!(body["upstreams_up"], serde_json::json!(["memo"]), "{body}");

    let token = scratch.create_key("agent", "write");
    let counting = Counting::default();
    let transport = rmcp::transport::StreamableHttpClientTransport::with_client(
        reqwest::Client::new(),
        rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
            gw.url(),
        )
        .auth_header(token),
    );
    let client = counting.clone().serve(transport).await.unwrap();
    let names = names_of(client.peer().list_all_tools().await.unwrap());
    assert!(names.iter().any(|n| n.starts_with("memo__")), "{names:?}");
    assert!(!names.iter().any(|n| n.starts_with("slow__")), "{names:?}");

    // The slow one comes up (about 9 s after start): its tools appear and
    // the connected client is told.
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let names = names_of(client.peer().list_all_tools().await.unwrap());
        if names.iter().any(|n| n.starts_with("slow__")) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "slow never came up: {}",
            gw.log()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(counting.0.load(std::sync::atomic::Ordering::SeqCst) >= 1);
    let ready = reqwest::get(format!("http://{}/readyz", gw.addr))
        .await
        .unwrap();
    assert_eq!(ready.status().as_u16(), 200);
    let _ = client.cancel().await;
}
