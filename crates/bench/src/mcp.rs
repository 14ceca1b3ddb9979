//! The lean MCP timing client: hand-written JSON-RPC over a child's stdio
//! (newline-delimited) or over Streamable HTTP (POST, JSON or SSE answers,
//! `Mcp-Session-Id`), with nothing else in the way. The official SDKs add
//! milliseconds of their own per call, which would hide the differences
//! between the things measured; their figures are taken separately.

use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{ChildStdin, ChildStdout, Command};

use crate::http1::HttpConn;
use crate::procs::Proc;

/// The protocol revision the client asks for.
pub const PROTOCOL: &str = "2025-11-25";

/// How long any one answer may take before the run is declared broken.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(60);

/// Where a client connects.
#[derive(Clone, Debug)]
pub enum Target {
    /// Start this command and speak over its stdin/stdout.
    Stdio {
        program: String,
        args: Vec<String>,
        env: Vec<(String, String)>,
    },
    /// POST to `http://addr{path}`.
    Http {
        addr: String,
        path: String,
        bearer: Option<String>,
    },
}

enum Wire {
    Stdio {
        proc: Proc,
        stdin: ChildStdin,
        stdout: BufReader<ChildStdout>,
        line: String,
    },
    Http {
        conn: HttpConn,
        path: String,
        bearer: Option<String>,
        session: Option<String>,
        negotiated: String,
    },
}

/// One MCP client session.
pub struct Client {
    wire: Wire,
    next_id: u64,
    buf: Vec<u8>,
}

impl Client {
    /// Connects (starting the process for stdio) and completes the
    /// `initialize` handshake.
    pub async fn connect(target: &Target, label: &str) -> Result<Client> {
        let wire = match target {
            Target::Stdio { program, args, env } => {
                let mut cmd = Command::new(program);
                cmd.args(args)
                    .envs(env.iter().map(|(k, v)| (k, v)))
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped());
                let mut proc = Proc::spawn(label, cmd)?;
                let stdin = proc.child.stdin.take().context("child stdin")?;
                let stdout = proc.child.stdout.take().context("child stdout")?;
                Wire::Stdio {
                    proc,
                    stdin,
                    stdout: BufReader::with_capacity(256 * 1024, stdout),
                    line: String::new(),
                }
            }
            Target::Http { addr, path, bearer } => Wire::Http {
                conn: HttpConn::new(addr),
                path: path.clone(),
                bearer: bearer.clone(),
                session: None,
                negotiated: PROTOCOL.to_owned(),
            },
        };
        let mut client = Client {
            wire,
            next_id: 0,
            buf: Vec::with_capacity(4096),
        };
        let init = tokio::time::timeout(Duration::from_secs(120), client.initialize())
            .await
            .map_err(|_| anyhow!("{label}: initialize timed out"))?;
        init.with_context(|| format!("{label}: initialize"))?;
        Ok(client)
    }

    async fn initialize(&mut self) -> Result<()> {
        let result = self
            .request(
                "initialize",
                &json!({
                    "protocolVersion": PROTOCOL,
                    "capabilities": {},
                    "clientInfo": {"name": "plangate-bench", "version": env!("CARGO_PKG_VERSION")},
                }),
            )
            .await?;
        if let Wire::Http { negotiated, .. } = &mut self.wire
            && let Some(v) = result.get("protocolVersion").and_then(Value::as_str)
        {
            *negotiated = v.to_owned();
        }
        self.notify("notifications/initialized").await
    }

    /// A request's `result`, or its JSON-RPC error as an error.
    pub async fn request(&mut self, method: &str, params: &Value) -> Result<Value> {
        self.next_id += 1;
        let id = self.next_id;
        self.buf.clear();
        self.buf.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
        self.buf.extend_from_slice(id.to_string().as_bytes());
        self.buf.extend_from_slice(br#","method":""#);
        self.buf.extend_from_slice(method.as_bytes());
        self.buf.extend_from_slice(br#"","params":"#);
        serde_json::to_writer(&mut self.buf, params)?;
        self.buf.push(b'}');
        let answer = tokio::time::timeout(ANSWER_TIMEOUT, self.exchange(id))
            .await
            .map_err(|_| anyhow!("no answer to {method} within {ANSWER_TIMEOUT:?}"))??;
        if let Some(error) = answer.get("error") {
            bail!("{method}: JSON-RPC error {error}");
        }
        answer
            .get("result")
            .cloned()
            .ok_or_else(|| anyhow!("{method}: answer without result: {answer}"))
    }

    /// `tools/call`; the tool result (which may be `isError: true`).
    pub async fn call_tool(&mut self, name: &str, arguments: &Value) -> Result<Value> {
        self.request("tools/call", &json!({"name": name, "arguments": arguments}))
            .await
    }

    /// `tools/call`, failing unless the result is a success; returns its
    /// `structuredContent` (or the whole result).
    pub async fn call_ok(&mut self, name: &str, arguments: &Value) -> Result<Value> {
        let result = self.call_tool(name, arguments).await?;
        if result.get("isError").and_then(Value::as_bool) == Some(true) {
            bail!("{name} answered an error: {result}");
        }
        Ok(result.get("structuredContent").cloned().unwrap_or(result))
    }

    async fn notify(&mut self, method: &str) -> Result<()> {
        self.buf.clear();
        self.buf
            .extend_from_slice(br#"{"jsonrpc":"2.0","method":""#);
        self.buf.extend_from_slice(method.as_bytes());
        self.buf.extend_from_slice(br#""}"#);
        match &mut self.wire {
            Wire::Stdio { stdin, .. } => {
                self.buf.push(b'\n');
                stdin.write_all(&self.buf).await?;
                stdin.flush().await?;
            }
            Wire::Http { .. } => {
                let r = self.post().await?;
                if r.status >= 300 {
                    bail!("{method}: HTTP {}", r.status);
                }
            }
        }
        Ok(())
    }

    async fn post(&mut self) -> Result<crate::http1::Response> {
        let Wire::Http {
            conn,
            path,
            bearer,
            session,
            negotiated,
        } = &mut self.wire
        else {
            bail!("not HTTP");
        };
        let auth = bearer.as_ref().map(|b| format!("Bearer {b}"));
        let mut headers: Vec<(&str, &str)> = vec![
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
        ];
        if let Some(a) = &auth {
            headers.push(("Authorization", a));
        }
        if let Some(s) = session.as_deref() {
            headers.push(("Mcp-Session-Id", s));
            headers.push(("MCP-Protocol-Version", negotiated));
        }
        let r = conn.request("POST", path, &headers, &self.buf).await?;
        if session.is_none()
            && let Some(s) = r.header("mcp-session-id")
        {
            *session = Some(s.to_owned());
        }
        Ok(r)
    }

    async fn exchange(&mut self, id: u64) -> Result<Value> {
        if matches!(self.wire, Wire::Http { .. }) {
            let r = self.post().await?;
            if r.status != 200 {
                bail!(
                    "HTTP {}: {}",
                    r.status,
                    String::from_utf8_lossy(&r.body)
                        .chars()
                        .take(300)
                        .collect::<String>()
                );
            }
            let sse = r
                .header("content-type")
                .is_some_and(|c| c.starts_with("text/event-stream"));
            if !sse {
                return Ok(serde_json::from_slice(&r.body)?);
            }
            return find_in_sse(&r.body, id);
        }
        let Wire::Stdio {
            stdin,
            stdout,
            line,
            ..
        } = &mut self.wire
        else {
            bail!("not stdio");
        };
        self.buf.push(b'\n');
        stdin.write_all(&self.buf).await?;
        stdin.flush().await?;
        loop {
            line.clear();
            if stdout.read_line(line).await? == 0 {
                bail!("the server closed its stdout");
            }
            let msg: Value = match serde_json::from_str(line.trim_end()) {
                Ok(v) => v,
                Err(_) => continue, // not JSON-RPC (a stray log line)
            };
            if msg.get("id").and_then(Value::as_u64) == Some(id) && msg.get("method").is_none() {
                return Ok(msg);
            }
            if let (Some(req_id), Some(method)) = (msg.get("id"), msg.get("method")) {
                // A request from the server (ping, roots…): answer it.
                let reply = if method == "ping" {
                    json!({"jsonrpc": "2.0", "id": req_id, "result": {}})
                } else {
                    json!({"jsonrpc": "2.0", "id": req_id, "error": {"code": -32601, "message": "not supported by the benchmark client"}})
                };
                let mut out = serde_json::to_vec(&reply)?;
                out.push(b'\n');
                stdin.write_all(&out).await?;
                stdin.flush().await?;
            }
        }
    }

    /// Ends an HTTP session (`DELETE`), so the server frees it now; a
    /// stdio session ends with its process. Errors are ignored: the
    /// session is gone either way.
    pub async fn close(mut self) {
        match &mut self.wire {
            Wire::Http {
                conn,
                path,
                bearer,
                session: Some(s),
                negotiated,
            } => {
                let auth = bearer.as_ref().map(|b| format!("Bearer {b}"));
                let mut headers: Vec<(&str, &str)> =
                    vec![("Mcp-Session-Id", s), ("MCP-Protocol-Version", negotiated)];
                if let Some(a) = &auth {
                    headers.push(("Authorization", a));
                }
                let _ = tokio::time::timeout(
                    Duration::from_secs(5),
                    conn.request("DELETE", path, &headers, b""),
                )
                .await;
            }
            Wire::Http { .. } => {}
            Wire::Stdio { proc, stdin, .. } => {
                // As a client ends a stdio server: close its stdin, give it
                // a moment to exit, then stop it.
                let _ = stdin.shutdown().await;
                let _ = tokio::time::timeout(Duration::from_millis(500), proc.child.wait()).await;
                proc.stop().await;
            }
        }
    }
}

/// The JSON-RPC answer with `id` among the events of an SSE body.
fn find_in_sse(body: &[u8], id: u64) -> Result<Value> {
    let text = std::str::from_utf8(body)?;
    let mut data = String::new();
    let check = |data: &mut String| -> Option<Value> {
        if data.is_empty() {
            return None;
        }
        let found = serde_json::from_str::<Value>(data).ok().filter(|v| {
            v.get("id").and_then(Value::as_u64) == Some(id) && v.get("method").is_none()
        });
        data.clear();
        found
    };
    for line in text.split('\n') {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.is_empty() {
            if let Some(v) = check(&mut data) {
                return Ok(v);
            }
        } else if let Some(d) = line.strip_prefix("data:") {
            if !data.is_empty() {
                data.push('\n');
            }
            data.push_str(d.strip_prefix(' ').unwrap_or(d));
        }
    }
    if let Some(v) = check(&mut data) {
        return Ok(v);
    }
    Err(anyhow!(
        "no answer with id {id} in the event stream: {}",
        text.chars().take(300).collect::<String>()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_is_found_among_priming_and_other_events() {
        let body = b"id: 0\nretry: 3000\ndata: \n\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n\ndata: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"ok\":true}}\r\n\r\n";
        let v = find_in_sse(body, 7).expect("found");
        assert_eq!(v["result"]["ok"], true);
        assert!(find_in_sse(body, 8).is_err());
    }
}
