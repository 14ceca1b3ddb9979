//! The timing upstream: a minimal MCP server over stdio or Streamable HTTP
//! with two tools, `echo` (read-only) and `put` (a write with
//! `destructiveHint: false`).
//!
//! It is hand-written JSON-RPC rather than rmcp so that it costs next to
//! nothing per call (a parse, a match, a serialize): the benchmark measures
//! what sits between the client and this server, and a heavier server would
//! dilute every ratio. It answers HTTP with `application/json` (allowed by
//! Streamable HTTP), hands out a session id on `initialize` and accepts any
//! session id after; it binds loopback only.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use anyhow::Result;
use axum::Router;
use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

const KNOWN_VERSIONS: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

#[derive(Default)]
struct State {
    values: Mutex<HashMap<String, String>>,
}

fn tools() -> Value {
    json!({"tools": [
        {
            "name": "echo",
            "description": "Answers its message (a read).",
            "inputSchema": {"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]},
            "annotations": {"readOnlyHint": true}
        },
        {
            "name": "put",
            "description": "Stores value under key (a write that destroys nothing).",
            "inputSchema": {"type": "object", "properties": {"key": {"type": "string"}, "value": {"type": "string"}}, "required": ["key", "value"]},
            "annotations": {"readOnlyHint": false, "destructiveHint": false, "idempotentHint": true}
        }
    ]})
}

/// The answer to one message, `None` for a notification.
fn handle(state: &State, msg: &Value) -> Option<Value> {
    let id = msg.get("id")?.clone();
    let method = msg.get("method").and_then(Value::as_str).unwrap_or("");
    let params = msg.get("params").cloned().unwrap_or(Value::Null);
    let result = match method {
        "initialize" => {
            let asked = params
                .get("protocolVersion")
                .and_then(Value::as_str)
                .unwrap_or("");
            let version = if KNOWN_VERSIONS.contains(&asked) {
                asked
            } else {
                "2025-11-25"
            };
            Ok(json!({
                "protocolVersion": version,
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "plangate-bench-upstream", "version": env!("CARGO_PKG_VERSION")},
            }))
        }
        "ping" | "logging/setLevel" => Ok(json!({})),
        "tools/list" => Ok(tools()),
        "resources/list" => Ok(json!({"resources": []})),
        "resources/templates/list" => Ok(json!({"resourceTemplates": []})),
        "prompts/list" => Ok(json!({"prompts": []})),
        "tools/call" => call(state, &params),
        _ => Err((-32601, format!("method not found: {method}"))),
    };
    Some(match result {
        Ok(r) => json!({"jsonrpc": "2.0", "id": id, "result": r}),
        Err((code, message)) => {
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
        }
    })
}

fn call(state: &State, params: &Value) -> Result<Value, (i64, String)> {
    let args = params.get("arguments").cloned().unwrap_or(json!({}));
    let text = |k: &str| args.get(k).and_then(Value::as_str).map(str::to_owned);
    match params.get("name").and_then(Value::as_str) {
        Some("echo") => {
            Ok(json!({"content": [{"type": "text", "text": text("message").unwrap_or_default()}]}))
        }
        Some("put") => {
            let (Some(k), Some(v)) = (text("key"), text("value")) else {
                return Ok(
                    json!({"content": [{"type": "text", "text": "key and value are required"}], "isError": true}),
                );
            };
            let mut values = match state.values.lock() {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
            values.insert(k.clone(), v);
            Ok(json!({"content": [{"type": "text", "text": format!("stored {k}")}]}))
        }
        other => Err((-32602, format!("unknown tool: {other:?}"))),
    }
}

/// Serves newline-delimited JSON-RPC on stdin/stdout until stdin closes.
///
/// Plain blocking reads and writes on the calling thread, no runtime: a
/// tokio `Stdin`/`Stdout` hands every read and write to a blocking-pool
/// thread, and those two thread wake-ups per call cost more than the rest
/// of the call (0.26 ms p50 direct with them here) — the timing upstream
/// must not be what is measured.
pub fn serve_stdio() -> Result<()> {
    use std::io::{BufRead, Write};
    let state = State::default();
    let stdin = std::io::stdin().lock();
    let mut out = std::io::stdout().lock();
    for line in stdin.lines() {
        let line = line?;
        let Ok(msg) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        if let Some(answer) = handle(&state, &msg) {
            let mut bytes = serde_json::to_vec(&answer)?;
            bytes.push(b'\n');
            out.write_all(&bytes)?;
            out.flush()?;
        }
    }
    Ok(())
}

/// Serves Streamable HTTP at `http://addr/mcp` (loopback addresses only).
pub async fn serve_http(addr: &str) -> Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    anyhow::ensure!(
        local.ip().is_loopback(),
        "the timing upstream binds loopback only, not {local}"
    );
    let state = Arc::new(State::default());
    let app = Router::new()
        .route(
            "/mcp",
            post(mcp_post)
                .get(|| async { StatusCode::METHOD_NOT_ALLOWED })
                .delete(|| async { StatusCode::OK }),
        )
        .route("/healthz", axum::routing::get(|| async { "ok" }))
        .with_state(state);
    eprintln!("bench upstream serving http://{local}/mcp");
    // One write per answer already; TCP_NODELAY anyway, as a server should.
    let listener = axum::serve::ListenerExt::tap_io(listener, |s: &mut tokio::net::TcpStream| {
        let _ = s.set_nodelay(true);
    });
    axum::serve(listener, app).await?;
    Ok(())
}

async fn mcp_post(
    axum::extract::State(state): axum::extract::State<Arc<State>>,
    _headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Ok(msg) = serde_json::from_slice::<Value>(&body) else {
        return (StatusCode::BAD_REQUEST, "not JSON").into_response();
    };
    let is_init = msg.get("method").and_then(Value::as_str) == Some("initialize");
    let answer = if let Value::Array(batch) = &msg {
        let answers: Vec<Value> = batch.iter().filter_map(|m| handle(&state, m)).collect();
        (!answers.is_empty()).then_some(Value::Array(answers))
    } else {
        handle(&state, &msg)
    };
    let Some(answer) = answer else {
        return StatusCode::ACCEPTED.into_response();
    };
    let mut response = (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        serde_json::to_vec(&answer).unwrap_or_default(),
    )
        .into_response();
    if is_init {
        let id = format!("bench-{:x}", rand_u64());
        if let Ok(v) = HeaderValue::from_str(&id) {
            response.headers_mut().insert("mcp-session-id", v);
        }
    }
    response
}

fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echo_reads_and_put_stores() {
        let state = State::default();
        let a = handle(
            &state,
            &json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"message":"hi"}}}),
        )
        .expect("answer");
        assert_eq!(a["result"]["content"][0]["text"], "hi");
        handle(
            &state,
            &json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"put","arguments":{"key":"k","value":"v"}}}),
        );
        assert_eq!(
            state
                .values
                .lock()
                .expect("lock")
                .get("k")
                .map(String::as_str),
            Some("v")
        );
        assert!(
            handle(
                &state,
                &json!({"jsonrpc":"2.0","method":"notifications/initialized"})
            )
            .is_none()
        );
    }
}
