//! `plangate operator token|list|revoke` and the web console they open, as
//! real `plangate` processes sharing one data dir: a token is printed once
//! and stored only as its hash, listings never show it, it opens
//! `/console` of a running `plangate serve --http` (and never `/mcp`), and
//! revoking it from another process ends its console session at the next
//! request.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

#[allow(dead_code)]
#[path = "../../gateway/tests/common/console_http.rs"]
mod console_http;

use common::*;
use serde_json::{Value, json};

/// Runs a command that must succeed and returns its stdout.
fn ok(scratch: &Scratch, args: &[&str]) -> String {
    succeeded(args, &scratch.run(args))
}

/// Runs a command that must succeed and print JSON.
fn json(scratch: &Scratch, args: &[&str]) -> Value {
    parsed(args, &ok(scratch, args))
}

/// Every file under `dir`, read as bytes.
fn all_bytes(dir: &std::path::Path) -> Vec<u8> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            out.extend(std::fs::read(&path).unwrap());
        }
    }
    out
}

#[test]
fn operator_tokens_are_printed_once_listed_without_the_token_and_revoked_by_name_or_id() {
    let scratch = Scratch::new();
    let out = scratch.run(&["operator", "token", "--name", "ana"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let token = stdout(&out).trim().to_owned();
    assert!(token.starts_with("pgo_") && token.len() == 47, "{token}");
    let said = stderr(&out);
    assert!(
        said.contains("only time") && said.contains("not an API key"),
        "{said}"
    );
    // Only its SHA-256 reaches the disk, never the token.
    use std::os::unix::fs::PermissionsExt as _;
    let db = scratch.data_dir().join("plangate.db");
    assert_eq!(
        std::fs::metadata(&db).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let disk = all_bytes(&scratch.data_dir());
    let body = &token.as_bytes()[12..];
    assert!(
        !disk.windows(body.len()).any(|w| w == body),
        "the token is on disk"
    );

    let created = json(&scratch, &["operator", "token", "--name", "bo", "--json"]);
    let bo = created["token"].as_str().unwrap().to_owned();
    assert!(bo.starts_with("pgo_"));
    assert!(created["id"].as_str().unwrap().starts_with("opr_"));
    assert_eq!(created["prefix"], &bo[..12]);

    // A name is unique among active tokens: exit 2, named in the message.
    let out = scratch.run(&["operator", "token", "--name", "ana"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("\"ana\""), "{}", stderr(&out));
    let out = scratch.run(&["operator", "token", "--name", "has space"]);
    assert_eq!(out.status.code(), Some(2));

    let table = ok(&scratch, &["operator", "list"]);
    assert!(table.contains("NAME") && table.contains("ana") && table.contains("bo"));
    assert!(table.contains(&token[..12]), "{table}");
    assert!(
        !table.contains(&token) && !table.contains(&bo),
        "a listing shows a token"
    );
    let listed = json(&scratch, &["operator", "list", "--json"]);
    assert_eq!(listed.as_array().unwrap().len(), 2);
    assert!(!listed.to_string().contains(&token[12..]));

    // Revoke by name, then by id; unknown names exit 2.
    let revoked = json(&scratch, &["operator", "revoke", "ana", "--json"]);
    assert!(revoked["revoked_at"].is_string(), "{revoked}");
    let id = created["id"].as_str().unwrap();
    assert!(ok(&scratch, &["operator", "revoke", id]).contains("revoked operator token \"bo\""));
    let out = scratch.run(&["operator", "revoke", "nobody"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("\"nobody\""), "{}", stderr(&out));
    let listed = json(&scratch, &["operator", "list", "--json"]);
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .all(|o| o["revoked_at"].is_string())
    );
    // A name is free again once its token is revoked.
    ok(&scratch, &["operator", "token", "--name", "ana"]);
    // Operator tokens and API keys are separate: no key was made.
    assert_eq!(
        json(&scratch, &["keys", "list", "--json"]),
        serde_json::json!([])
    );
}

#[tokio::test]
async fn the_console_opens_with_an_operator_token_and_closes_when_another_process_revokes_it() {
    let scratch = Scratch::new();
    let api_key = scratch.create_key("agent", "write");
    let token = ok(&scratch, &["operator", "token", "--name", "ana"])
        .trim()
        .to_owned();
    let server = serve_http(&scratch, &[]);
    for _ in 0..100 {
        if server.log().contains("/console") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(
        server.log().contains("web console at http://"),
        "serve names the console: {}",
        server.log()
    );
    let base = format!("http://{}", server.addr);
    let http = console_http::http_client();

    // The login form, then: an API key is refused, the operator token is
    // let in with a strict, HttpOnly session cookie scoped to /console.
    let form = http.get(format!("{base}/console")).send().await.unwrap();
    assert_eq!(form.status(), 200);
    assert!(form.text().await.unwrap().contains("Operator token"));
    let refused = console_http::post_login(&http, &base, &api_key).await;
    assert_eq!(refused.status(), 401);
    assert!(refused.headers().get("set-cookie").is_none());
    let r = console_http::post_login(&http, &base, &token).await;
    assert_eq!(r.status(), 303);
    let set = r.headers()["set-cookie"].to_str().unwrap().to_owned();
    for part in ["HttpOnly", "SameSite=Strict", "Path=/console"] {
        assert!(set.contains(part), "{set}");
    }
    assert!(!set.contains(&token), "the cookie holds the token");
    let cookie = set.split(';').next().unwrap().to_owned();
    let state = |cookie: String| {
        http.get(format!("{base}/console/api/state"))
            .header("cookie", cookie)
            .send()
    };
    let r = state(cookie.clone()).await.unwrap();
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["operator"], "ana");
    // The operator token is no API key at /mcp.
    assert_eq!(console_http::mcp_status(&http, &base, &token).await, 401);

    // A direct write by the write key is on the record, and the console
    // lists it among the recent calls, arguments redacted.
    let agent = http_client(&format!("{base}/mcp"), Some(&api_key))
        .await
        .unwrap();
    let r = call(
        &agent,
        "update_option",
        tagline(json!({"text": "hi", "password": "hunter2-canary"})),
    )
    .await
    .unwrap();
    assert_eq!(r.is_error, Some(false), "{r:?}");
    agent.cancel().await.unwrap();
    let body: Value = state(cookie.clone()).await.unwrap().json().await.unwrap();
    let calls = body["calls"].as_array().unwrap();
    assert_eq!(calls[0]["tool"], "update_option", "{body}");
    assert_eq!(calls[0]["key"], "agent");
    assert_eq!(calls[0]["decision"], "run");
    assert_eq!(calls[0]["outcome"], "ok");
    assert_eq!(calls[0]["channel"], "http");
    assert_eq!(calls[0]["arguments"]["value"]["password"], "[redacted]");
    assert!(!body.to_string().contains("hunter2-canary"));

    // A plan key's agent is told to approve in this console.
    let planner = scratch.create_key("planner", "plan");
    let agent = http_client(&format!("{base}/mcp"), Some(&planner))
        .await
        .unwrap();
    common::ok(&agent, "update_option", tagline("later")).await;
    let no = call_body(&agent, "plangate_apply_plan", json!({})).await;
    assert_eq!(no["code"], "forbidden", "{no}");
    assert!(
        no["message"]
            .as_str()
            .unwrap()
            .contains(&format!("{base}/console")),
        "{no}"
    );
    agent.cancel().await.unwrap();

    // Another process revokes the token: the session ends at once.
    ok(&scratch, &["operator", "revoke", "ana"]);
    let r = state(cookie).await.unwrap();
    assert_eq!(r.status(), 401);
    let log = server.log();
    assert!(!log.contains(&token[4..]), "a log line holds the token");
}

#[tokio::test]
async fn a_cookie_replayed_after_logout_is_refused_on_every_replica_and_other_sessions_go_on() {
    let scratch = Scratch::new();
    let token = ok(&scratch, &["operator", "token", "--name", "ana"])
        .trim()
        .to_owned();
    // Two replicas on one store (and one signing key).
    let one = serve_http(&scratch, &[]);
    let two = serve_http(&scratch, &[]);
    let http = console_http::http_client();
    let login = async || {
        let r = console_http::post_login(&http, &format!("http://{}", one.addr), &token).await;
        assert_eq!(r.status(), 303);
        let set = r.headers()["set-cookie"].to_str().unwrap().to_owned();
        set.split(';').next().unwrap().to_owned()
    };
    let state = async |addr: &str, cookie: &str| {
        http.get(format!("http://{addr}/console/api/state"))
            .header("cookie", cookie)
            .send()
            .await
            .unwrap()
    };
    let laptop = login().await;
    let phone = login().await;
    let r = state(&one.addr, &laptop).await;
    assert_eq!(r.status(), 200);
    let csrf = r.json::<Value>().await.unwrap()["csrf"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(state(&two.addr, &laptop).await.status(), 200);

    let out = http
        .post(format!("http://{}/console/logout", one.addr))
        .header("cookie", &laptop)
        .header("x-plangate-csrf", &csrf)
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(out.status(), 200);
    assert!(
        out.headers()["set-cookie"]
            .to_str()
            .unwrap()
            .contains("Max-Age=0")
    );

    // The same cookie, replayed: refused by both replicas, for reading and
    // for acting.
    for addr in [&one.addr, &two.addr] {
        let r = state(addr, &laptop).await;
        assert_eq!(r.status(), 401, "replica {addr}");
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"], "unauthorized", "{body}");
        let r = http
            .post(format!("http://{addr}/console/api/discard"))
            .header("cookie", &laptop)
            .header("x-plangate-csrf", &csrf)
            .header("content-type", "application/json")
            .body(r#"{"key": "agent"}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401, "replica {addr}");
    }
    // The operator's other session, and the token, go on.
    assert_eq!(state(&two.addr, &phone).await.status(), 200);
    let again = login().await;
    assert_eq!(state(&one.addr, &again).await.status(), 200);
}
