//! The HTTP front's bounds, end to end against `plangate serve --http`:
//! a request's body has a deadline (`[gateway] body_read_timeout`); a
//! caller without a key, or with a key plangate does not know, is refused
//! from its headers before any of its body is read, so stalled bodies cost
//! a socket for at most the deadline and no memory; and one key's calls
//! under way are capped (`[gateway] max_concurrent_calls_per_key`) while
//! other keys, and the key's own plan tools, go on.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

/// The deadline the tests configure: short, so a run stays quick.
const DEADLINE: Duration = Duration::from_secs(2);

/// A process's resident memory (`VmRSS`), in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// The gateway's `host:port`.
fn address(gw: &Proc) -> String {
    gw.url()
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_owned()
}

/// Opens a connection and sends a `/mcp` POST's head declaring a
/// `declared`-byte body (with `authorization` when given), then the first
/// bytes of that body, and nothing more.
async fn stalled_post(addr: &str, authorization: Option<&str>, declared: usize) -> TcpStream {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let auth = authorization
        .map(|a| format!("Authorization: Bearer {a}\r\n"))
        .unwrap_or_default();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n{auth}Content-Length: {declared}\r\n\r\n{{\"jsonrpc\":\"2.0\","
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream
}

/// What a connection received until the gateway closed it: the answer's
/// text, when the answer's head came, and when the connection closed
/// (both from `since`); a panic after `limit`.
async fn until_closed(
    mut stream: TcpStream,
    since: Instant,
    limit: Duration,
) -> (String, Duration, Duration) {
    let mut received = Vec::new();
    let mut answered = None;
    let mut buf = vec![0u8; 8192];
    loop {
        let left = limit.saturating_sub(since.elapsed());
        match tokio::time::timeout(left, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => {
                received.extend_from_slice(&buf[..n]);
                answered.get_or_insert_with(|| since.elapsed());
            }
            Err(_) => panic!(
                "the connection stayed open past {limit:?}; received: {}",
                String::from_utf8_lossy(&received)
            ),
        }
    }
    let closed = since.elapsed();
    (
        String::from_utf8_lossy(&received).into_owned(),
        answered.unwrap_or(closed),
        closed,
    )
}

/// The JSON body of a raw HTTP/1.1 answer.
fn json_body(answer: &str) -> Value {
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {answer}"))
}

/// What 200 connections that each declare a megabyte, send a few bytes
/// and stall got from the gateway (every answer's status line and JSON
/// body), when its last answer came and its last connection closed (from
/// the first connection), how long opening them took, and the gateway's
/// `VmRSS` before, while they stalled and after.
struct Flood {
    answers: Vec<(String, Value)>,
    last_answer: Duration,
    last_close: Duration,
    opened: Duration,
    rss: [u64; 3],
}

async fn stalled_flood(gw: &Proc, authorization: Option<&str>) -> Flood {
    let pid = gw.child.id();
    let addr = address(gw);
    // Warm: 50 requests at once served end to end before the first
    // reading (the allocator's per-thread caches are set up once; a
    // second flood measured this way keeps nothing either).
    let warm: Vec<_> = (0..50)
        .map(|_| {
            let addr = addr.clone();
            let authorization = authorization.map(str::to_owned);
            tokio::spawn(async move {
                let auth = authorization
                    .map(|a| format!("Authorization: Bearer {a}\r\n"))
                    .unwrap_or_default();
                let mut s = TcpStream::connect(&addr).await.unwrap();
                let request = format!(
                    "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nConnection: close\r\n{auth}Content-Length: 2\r\n\r\n{{}}"
                );
                s.write_all(request.as_bytes()).await.unwrap();
                let mut answer = Vec::new();
                s.read_to_end(&mut answer).await.unwrap();
            })
        })
        .collect();
    for w in warm {
        w.await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let before = rss_kib(pid);

    let started = Instant::now();
    let mut streams = Vec::new();
    for _ in 0..200 {
        streams.push(stalled_post(&addr, authorization, 1_000_000).await);
    }
    let opened = started.elapsed();
    let waits: Vec<_> = streams
        .into_iter()
        .map(|s| {
            tokio::spawn(until_closed(
                s,
                started,
                opened + DEADLINE + Duration::from_secs(3),
            ))
        })
        .collect();
    // Every connection is still open (the deadline has not passed).
    tokio::time::sleep(Duration::from_millis(500)).await;
    let during = rss_kib(pid);
    let mut flood = Flood {
        answers: Vec::new(),
        last_answer: Duration::ZERO,
        last_close: Duration::ZERO,
        opened,
        rss: [before, during, 0],
    };
    for wait in waits {
        let (answer, answered, closed) = wait.await.unwrap();
        let status = answer.lines().next().unwrap_or_default().to_owned();
        flood.answers.push((status, json_body(&answer)));
        flood.last_answer = flood.last_answer.max(answered);
        flood.last_close = flood.last_close.max(closed);
    }
    // The gateway hands freed memory back once it has been quiet for a
    // second (gateway::memory).
    tokio::time::sleep(Duration::from_millis(2500)).await;
    flood.rss[2] = rss_kib(pid);
    let [before, during, after] = flood.rss;
    eprintln!(
        "VmRSS: {before} KiB before, {during} KiB with 200 stalled bodies, {after} KiB after; opened in {opened:?}, last answer at {:?}, last close at {:?}",
        flood.last_answer, flood.last_close
    );
    // Cut at the deadline: the last connection opened `opened` after the
    // first.
    assert!(
        flood.last_close <= opened + DEADLINE + Duration::from_secs(1),
        "the last connection closed {:?} after the first; opening them took {opened:?}",
        flood.last_close
    );
    assert!(
        after <= before + 2048,
        "the gateway kept memory: {before} KiB before, {after} KiB after"
    );
    assert!(
        during <= before + 8192,
        "200 stalled bodies held memory: {before} KiB before, {during} KiB during"
    );
    flood
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_stalled_key_less_bodies_are_refused_from_their_headers_and_cut_within_the_deadline()
 {
    let scratch = Scratch::new();
    let config = demo_config(&scratch, "[gateway]\nbody_read_timeout = \"2s\"\n");
    let gw = serve_http(&scratch, &["--config", &config]);
    let flood = stalled_flood(&gw, None).await;
    for (status, body) in &flood.answers {
        assert!(status.starts_with("HTTP/1.1 401"), "{status}");
        assert_eq!(body["error"]["data"]["code"], "key_required", "{body}");
    }
    // Refused from the headers: the answer does not wait for the body.
    assert!(
        flood.last_answer < flood.opened + DEADLINE,
        "the last 401 came {:?} after the first connection",
        flood.last_answer
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_stalled_bodies_of_a_key_are_cut_408_at_the_deadline_holding_no_memory() {
    let scratch = Scratch::new();
    let token = scratch.create_key("agent", "write");
    let config = demo_config(&scratch, "[gateway]\nbody_read_timeout = \"2s\"\n");
    let gw = serve_http(&scratch, &["--config", &config]);
    let flood = stalled_flood(&gw, Some(&token)).await;
    for (status, body) in &flood.answers {
        assert!(status.starts_with("HTTP/1.1 408"), "{status}");
        assert_eq!(body["error"]["data"]["code"], "body_timeout", "{body}");
    }
}

#[tokio::test]
async fn a_key_s_stalled_body_is_cut_408_at_the_deadline_and_a_slow_one_in_time_is_served() {
    let scratch = Scratch::new();
    let token = scratch.create_key("agent", "write");
    let config = demo_config(&scratch, "[gateway]\nbody_read_timeout = \"2s\"\n");
    let gw = serve_http(&scratch, &["--config", &config]);
    let addr = address(&gw);

    let started = Instant::now();
    let stalled = stalled_post(&addr, Some(&token), 200).await;
    let (answer, answered, closed) =
        until_closed(stalled, started, DEADLINE + Duration::from_secs(3)).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    let body = json_body(&answer);
    assert_eq!(body["jsonrpc"], "2.0", "{body}");
    assert_eq!(body["error"]["code"], -32600, "{body}");
    assert_eq!(body["error"]["data"]["code"], "body_timeout", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("body_read_timeout"),
        "{body}"
    );
    assert!(
        answered >= DEADLINE,
        "cut before its deadline: {answered:?}"
    );
    assert!(
        closed < DEADLINE + Duration::from_secs(1),
        "closed {closed:?}"
    );

    // A body that comes in pieces, all within the deadline, is served.
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#;
    let mut slow = stalled_post(&addr, Some(&token), init.len()).await;
    let rest = &init[r#"{"jsonrpc":"2.0","#.len()..];
    let (a, b) = rest.split_at(rest.len() / 2);
    for piece in [a, b] {
        tokio::time::sleep(Duration::from_millis(600)).await;
        slow.write_all(piece.as_bytes()).await.unwrap();
    }
    let mut head = [0u8; 12];
    slow.read_exact(&mut head).await.unwrap();
    assert_eq!(&head, b"HTTP/1.1 200");
}

#[tokio::test]
async fn a_key_past_its_cap_of_calls_under_way_waits_then_is_refused_while_others_go_on() {
    let scratch = Scratch::new();
    let a = scratch.create_key("a", "write");
    let b = scratch.create_key("b", "write");
    let (config, log) = counting_config(&scratch, "max_concurrent_calls_per_key = 2");
    let gw = serve_http(&scratch, &["--config", &config]);
    let client_a = http_client(&gw.url(), Some(&a)).await.unwrap();
    let client_b = http_client(&gw.url(), Some(&b)).await.unwrap();
    wait_for_tool(client_a.peer(), "bump").await;

    // Two slow calls of a fill its slots.
    let slow: Vec<_> = (1..=2)
        .map(|n| {
            let peer = client_a.peer().clone();
            tokio::spawn(async move {
                let mut params = rmcp::model::CallToolRequestParams::new("bump");
                params.arguments = json!({"n": n, "ms": 4000}).as_object().cloned();
                peer.call_tool(params).await.unwrap()
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    while deliveries(&log).len() < 2 {
        assert!(Instant::now() < deadline, "the slow calls never arrived");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The third waits a moment for a slot, then is refused, reaching nothing.
    let asked = Instant::now();
    let third = call(&client_a, "bump", json!({"n": 3})).await.unwrap();
    let waited = asked.elapsed();
    let refused = body(&third);
    assert_eq!(third.is_error, Some(true), "{refused}");
    assert_eq!(refused["code"], "rate_limited", "{refused}");
    assert_eq!(refused["retry_after_ms"], 1000, "{refused}");
    assert!(
        mentions(&refused["message"], "max_concurrent_calls_per_key"),
        "{refused}"
    );
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_millis(3000),
        "{waited:?}"
    );
    // Its plan tools are not calls under way; another key has its own slots.
    get_plan(&client_a).await;
    let other = call(&client_b, "bump", json!({"n": 4})).await.unwrap();
    assert_eq!(other.is_error, Some(false), "{other:?}");

    for call in slow {
        assert_eq!(call.await.unwrap().is_error, Some(false));
    }
    let again = call(&client_a, "bump", json!({"n": 5})).await.unwrap();
    assert_eq!(again.is_error, Some(false), "{again:?}");
    assert_eq!(
        deliveries(&log).keys().copied().collect::<Vec<_>>(),
        [1, 2, 4, 5],
        "the refused call reached nothing"
    );
    client_a.cancel().await.unwrap();
    client_b.cancel().await.unwrap();
}

#[tokio::test]
async fn on_postgres_a_stalled_body_with_an_unknown_key_is_refused_from_its_headers() {
    let Ok(base) = std::env::var("PLANGATE_TEST_POSTGRES_URL") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must set PLANGATE_TEST_POSTGRES_URL"
        );
        eprintln!("front [postgres]: PLANGATE_TEST_POSTGRES_URL not set; not run");
        return;
    };
    // A fresh schema of its own.
    let schema = format!("front_{}", std::process::id());
    let psql = |sql: &str| {
        let status = std::process::Command::new("psql")
            .env("PGOPTIONS", "--client-min-messages=warning")
            .args([base.as_str(), "-q", "-c", sql])
            .status()
            .unwrap();
        assert!(status.success(), "{sql}");
    };
    psql(&format!(
        "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}"
    ));
    let sep = if base.contains('?') { '&' } else { '?' };
    let url = format!("{base}{sep}options=-c%20search_path%3D{schema}");

    let scratch = Scratch::new();
    let out = scratch.run(&[
        "--database",
        &url,
        "keys",
        "create",
        "--name",
        "agent",
        "--scope",
        "write",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let token = stdout(&out).trim().to_owned();
    let config = demo_config(&scratch, "[gateway]\nbody_read_timeout = \"2s\"\n");
    let gw = serve_http(&scratch, &["--database", &url, "--config", &config]);
    let addr = address(&gw);

    // The key, known: its calls are served (and remembered as a key).
    let client = http_client(&gw.url(), Some(&token)).await.unwrap();
    assert!(!tool_names(&client).await.is_empty());

    // A made-up key with a stalled body: 401 at once, not after the body.
    let started = Instant::now();
    let stalled = stalled_post(&addr, Some("pgk_madeUpKeyThatWasNeverIssued00"), 1_000).await;
    let (answer, answered, closed) =
        until_closed(stalled, started, DEADLINE + Duration::from_secs(3)).await;
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    assert_eq!(json_body(&answer)["error"]["data"]["code"], "invalid_key");
    assert!(answered < DEADLINE / 2, "answered after {answered:?}");
    assert!(closed < DEADLINE + Duration::from_secs(1), "{closed:?}");
    client.cancel().await.unwrap();
    drop(gw);
    psql(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"));
}
