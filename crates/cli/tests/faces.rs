//! One plan seen through every face (docs/design.md §5, §7): the agent's
//! `get_plan`, the CLI's `plans list` and `plans show`, and the web
//! console's API must say the same of it — which steps wait, which a
//! person's yes covers, the digest and the revision — and refuse the same
//! stale yes with the same code. Each face renders one operation; this
//! test is the check that none decides on its own.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
#[allow(dead_code)]
#[path = "../../gateway/tests/common/console_http.rs"]
mod console_http;

use common::*;
use serde_json::{Value, json};

/// What one face says of the key's plan, in the same terms for each.
#[derive(Debug, PartialEq)]
struct Seen {
    digest: String,
    revision: u64,
    pending: u64,
    approved: bool,
    /// Waiting steps shown as covered by a yes, in plan order.
    covered: Vec<String>,
}

fn seen_in(view: &Value) -> Seen {
    let steps = view["steps"].as_array().expect("steps");
    Seen {
        digest: view["plan_digest"]
            .as_str()
            .expect("plan_digest")
            .to_owned(),
        revision: view["revision"].as_u64().expect("revision"),
        pending: view["pending_steps"].as_u64().expect("pending_steps"),
        approved: view["approved"].as_bool().expect("approved"),
        covered: steps
            .iter()
            .filter(|s| s["status"] == "planned" && s["approved"] == true)
            .map(|s| s["step_id"].as_str().expect("step_id").to_owned())
            .collect(),
    }
}

/// A console session: the base URL, its cookie and CSRF token.
struct Console {
    base: String,
    http: reqwest::Client,
    cookie: String,
    csrf: String,
}

impl Console {
    async fn open(scratch: &Scratch, base: String) -> Console {
        let token = succeeded(
            &["operator", "token"],
            &scratch.run(&["operator", "token", "--name", "ana"]),
        )
        .trim()
        .to_owned();
        let http = console_http::http_client();
        let (cookie, csrf) = console_http::login(&http, &base, &token)
            .await
            .expect("the operator token opens a console session");
        Console {
            base,
            http,
            cookie,
            csrf,
        }
    }

    async fn state(&self) -> Value {
        let url = format!("{}/console/api/state", self.base);
        console_http::get_json(&self.http, &url, &self.cookie).await
    }

    async fn key_view(&self, name: &str) -> Value {
        let state = self.state().await;
        state["keys"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["key"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no key {name} in {state}"))
    }

    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let r = self
            .http
            .post(format!("{}/console/api/{path}", self.base))
            .header("cookie", &self.cookie)
            .header("x-plangate-csrf", &self.csrf)
            .json(&body)
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.json().await.unwrap())
    }
}

fn cli_json(scratch: &Scratch, args: &[&str]) -> Value {
    parsed(args, &succeeded(args, &scratch.run(args)))
}

/// Every face's view of `key`'s plan, which must all be the same.
async fn every_face(scratch: &Scratch, agent: &Client, console: &Console, key: &str) -> Seen {
    let agent_sees = seen_in(&get_plan(agent).await);
    let show = seen_in(&cli_json(
        scratch,
        &["plans", "show", "--key", key, "--json"],
    ));
    let console_sees = seen_in(&console.key_view(key).await);
    assert_eq!(agent_sees, show, "get_plan and `plans show` disagree");
    assert_eq!(show, console_sees, "`plans show` and the console disagree");
    let list = cli_json(scratch, &["plans", "list", "--json"]);
    let row = list
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["key"] == key)
        .cloned()
        .unwrap_or_else(|| panic!("no {key} in {list}"));
    assert_eq!(row["plan_digest"], show.digest.as_str(), "{row}");
    // The list's row counts: steps waiting, and waiting steps a yes covers.
    assert_eq!(row["waiting"], show.pending, "{row}");
    assert_eq!(
        row["approved"].as_u64(),
        Some(show.covered.len() as u64),
        "`plans list` counts another yes: {row}"
    );
    show
}

#[tokio::test]
async fn the_agent_the_cli_and_the_console_say_the_same_of_one_plan_and_refuse_alike() {
    let (scratch, config, [token]) = demo_keys("", [("agent", "plan")]);
    let server = serve_http(&scratch, &["--config", &config]);
    let base = format!("http://{}", server.addr);
    let agent = http_client(&format!("{base}/mcp"), Some(&token))
        .await
        .unwrap();
    begin(&agent, "plan").await;
    let console = Console::open(&scratch, base).await;

    // Two planned writes; nothing approved anywhere.
    for (tool, args) in [
        ("update_option", tagline("one")),
        ("update_page", our_story()),
    ] {
        let step = ok(&agent, tool, args).await;
        assert_eq!(step["code"], "plan_step", "{step}");
    }
    let before = every_face(&scratch, &agent, &console, "agent").await;
    assert_eq!(before.pending, 2);
    assert!(!before.approved && before.covered.is_empty(), "{before:?}");

    // A person approves the first step at the CLI: every face shows the
    // same one step covered, the plan not yet approved as a whole.
    let plan = get_plan(&agent).await;
    let first = plan["steps"][0]["step_id"].as_str().unwrap().to_owned();
    let key_id = console.key_view("agent").await["key_id"].clone();
    let args = [
        "plans",
        "approve",
        "--key",
        "agent",
        "--digest",
        &before.digest,
        &first,
    ];
    succeeded(&args, &scratch.run(&args));
    let after = every_face(&scratch, &agent, &console, "agent").await;
    assert_eq!(after.covered, vec![first.clone()]);
    assert!(!after.approved);
    assert!(after.revision >= before.revision);

    // The console approves the rest: the whole plan is approved everywhere.
    let (status, yes) = console
        .post(
            "approve",
            json!({"key_id": key_id, "plan_digest": after.digest, "revision": after.revision}),
        )
        .await;
    assert_eq!(status, 200, "{yes}");
    let all = every_face(&scratch, &agent, &console, "agent").await;
    assert!(all.approved, "{all:?}");
    assert_eq!(all.covered.len(), 2);

    // A stale yes is refused alike: the CLI (exit 1: the plan moved, the
    // request was well formed), the console (409)
    // and the agent's apply all say `plan_changed`, and nothing moves.
    let stale = "sha256:0000000000000000000000000000000000000000000000000000000000000000";
    let out = scratch.run(&["plans", "approve", "--key", "agent", "--digest", stale]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("plan_changed"), "{}", stderr(&out));
    let (status, no) = console
        .post("approve", json!({"key_id": key_id, "plan_digest": stale}))
        .await;
    assert_eq!(
        (status, no["error"].as_str()),
        (409, Some("plan_changed")),
        "{no}"
    );
    let r = call(&agent, "plangate_apply_plan", json!({"plan_digest": stale}))
        .await
        .unwrap();
    assert_eq!(body(&r)["code"], "plan_changed", "{r:?}");
    assert_eq!(every_face(&scratch, &agent, &console, "agent").await, all);

    // A no and a discard answer the same shape from every face: the
    // console rejects one step, the CLI discards the other, and all faces
    // then agree there is nothing waiting.
    let plan = get_plan(&agent).await;
    let ids: Vec<String> = plan["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["step_id"].as_str().unwrap().to_owned())
        .collect();
    let (status, no) = console
        .post(
            "reject",
            json!({"key_id": key_id, "step_id": ids[0], "reason": "not this one"}),
        )
        .await;
    assert_eq!(status, 200, "{no}");
    let args = ["plans", "discard", "--key", "agent", &ids[1], "--json"];
    let dropped = cli_json(&scratch, &args);
    for answer in [&no, &dropped] {
        for field in ["success", "key", "plan_digest", "revision", "pending_steps"] {
            assert!(answer.get(field).is_some(), "{field} missing from {answer}");
        }
    }
    assert_eq!(no["rejected_by"]["kind"], "operator", "{no}");
    assert_eq!(dropped["discarded"], json!([ids[1]]), "{dropped}");
    let end = every_face(&scratch, &agent, &console, "agent").await;
    assert_eq!(
        (end.pending, end.digest.as_str()),
        (0, dropped["plan_digest"].as_str().unwrap())
    );
    agent.cancel().await.unwrap();
}
